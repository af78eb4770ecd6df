"""Hugging Face datasets as logs (data.hf_datasets): save_to_disk folders, hub datasets from the
local cache, Dataset and IterableDataset objects, each read row by row through the checks every
file goes through, and a saved dataset training the same bundle as its rows in JSONL."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest

from data.hf_datasets import BATCH_ROWS, DatasetSourceError, iter_dataset
from data.logs import DataQualityError, load_logs, loading_units, read_unit
from tests.conftest import ROOT, config_for

GOOD = {
    "request_id": "r1",
    "prompt": "What is 2+2?",
    "domain": "math",
    "precision": "exact",
    "edge_quality": 1.0,
    "cloud_quality": 0.0,
    "source": "app",
}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def good_rows(n: int) -> list[dict]:
    return [{**GOOD, "request_id": f"r{i}", "prompt": f"question number {i}?"} for i in range(n)]


def with_bad_row(rows: list[dict], index: int = 4) -> list[dict]:
    """`rows` with the one at `index` out of range: a reject, not a dropped row."""
    rows = [dict(r) for r in rows]
    rows[index]["edge_quality"] = 1.7
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def saved(tmp_path: Path, name: str, rows_or_splits) -> Path:
    """A folder written by save_to_disk: a Dataset from a list of rows, a DatasetDict from {split: rows}."""
    if isinstance(rows_or_splits, dict):
        loaded = datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in rows_or_splits.items()})
    else:
        loaded = datasets.Dataset.from_list(rows_or_splits)
    loaded.save_to_disk(str(tmp_path / name))
    return tmp_path / name


# --- every source kind, one validation --------------------------------------------------------------------


def test_a_bad_row_of_a_dataset_object_is_a_reject_naming_the_dataset_and_row(tmp_path):
    rows = with_bad_row(good_rows(30))
    dataset = datasets.Dataset.from_list(rows)
    loaded = load_logs([dataset], rejects_path=tmp_path / "rejects.jsonl")
    assert [r["prompt"] for r in loaded.rows] == [r["prompt"] for i, r in enumerate(rows) if i != 4]
    assert loaded.n_read == 30
    [reject] = loaded.rejects
    assert reject.file == f"dataset:{dataset._fingerprint}" and reject.location == "row 5"
    assert reject.reason == "edge_quality is out of range [0, 1]: 1.7"
    written = json.loads((tmp_path / "rejects.jsonl").read_text())
    assert written == {"file": reject.file, "location": "row 5", "reason": reject.reason}


def test_a_saved_dataset_split_reads_like_its_jsonl(tmp_path):
    rows = with_bad_row(good_rows(30), index=9)
    folder = saved(tmp_path, "logs", {"train": rows, "test": good_rows(3)})
    from_jsonl = load_logs([write_jsonl(tmp_path / "logs.jsonl", rows)])
    from_dataset = load_logs([f"{folder}::train"])
    assert from_dataset.rows == from_jsonl.rows and len(from_dataset.rows) == 29
    [reject] = from_dataset.rejects
    assert (reject.file, reject.location) == (f"{folder}::train", "row 10")
    assert reject.reason == from_jsonl.rejects[0].reason and from_jsonl.rejects[0].location == "line 10"
    assert len(load_logs([folder / "test"]).rows) == 3  # a split's own folder is a saved Dataset


def test_a_dataset_inside_a_folder_is_read_as_a_dataset_not_as_its_json_files(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    write_jsonl(logs / "day1.jsonl", good_rows(5))
    saved(logs, "day2", [{**r, "request_id": f"d2-{i}"} for i, r in enumerate(good_rows(7))])
    loaded = load_logs([logs])
    assert len(loaded.rows) == 12 and loaded.rejects == []  # no reject from dataset_info.json or state.json


def test_an_iterable_dataset_is_read_in_batches_not_whole():
    """Rows are taken BATCH_ROWS at a time: the first row arrives before the stream is read to its
    end. A row that lacks a column has it missing, as the schema reads it."""
    produced = []

    def stream():
        for i in range(5 * BATCH_ROWS):
            produced.append(i)
            yield {
                "prompt": f"streamed question {i}?",
                "edge_quality": 1.0,
                "cloud_quality": 0.0,
                **({"domain": "math"} if i % 2 else {}),
            }

    dataset = datasets.IterableDataset.from_generator(stream)
    rows = iter_dataset(loading_units([dataset])[0], [])
    first = next(rows)
    assert first.location == "row 1" and first.row["prompt"] == "streamed question 0?"
    assert len(produced) <= 2 * BATCH_ROWS
    loaded = load_logs([dataset])
    assert len(loaded.rows) == 5 * BATCH_ROWS and loaded.rejects == []
    assert [r["domain"] for r in loaded.rows[:2]] == [None, "math"]


def test_an_iterable_dataset_gives_the_same_rows_and_rejects_as_the_dataset():
    rows = with_bad_row(good_rows(40), index=17)
    dataset = datasets.Dataset.from_list(rows)
    as_stream = load_logs([dataset.to_iterable_dataset()])
    as_table = load_logs([dataset])
    assert as_stream.rows == as_table.rows
    assert [(r.location, r.reason) for r in as_stream.rejects] == [("row 18", as_table.rejects[0].reason)]


def test_a_dataset_that_breaks_part_way_is_one_file_reject_and_its_earlier_rows_stay():
    def stream():
        for row in good_rows(BATCH_ROWS + 10):
            yield row
        raise OSError("the disk went away")

    loaded = load_logs([datasets.IterableDataset.from_generator(stream)], max_reject_share=1.0)
    assert len(loaded.rows) == BATCH_ROWS
    [reject] = loaded.rejects
    assert reject.location == "file" and f"cannot read dataset after {BATCH_ROWS} rows" in reject.reason
    assert "the disk went away" in reject.reason


def test_an_empty_dataset_is_a_file_reject():
    empty = datasets.Dataset.from_dict({"prompt": [], "edge_quality": [], "cloud_quality": []})
    with pytest.raises(DataQualityError, match="no valid rows in dataset:"):
        load_logs([empty])
    loaded = load_logs([empty, datasets.Dataset.from_list(good_rows(40))], max_reject_share=1.0)
    assert [(r.location, r.reason) for r in loaded.rejects] == [("file", "empty dataset (0 rows)")]


def test_the_dataset_own_output_format_is_set_aside():
    """A dataset formatted for numpy still gives Python values: prompt_tokens ids stay a list."""
    row = {
        **GOOD,
        "prompt": None,
        "prompt_tokens": {
            "input_ids": [1, 2, 3],
            "scalars": [0.5],
            "feature_names": ["n"],
            "tokenizer_sha256": "ab",
            "max_tokens": 8,
            "add_special_tokens": True,
        },
    }
    unit = loading_units([datasets.Dataset.from_list([row]).with_format("numpy")])[0]
    loaded = read_unit(unit)
    assert loaded.rejects == [] and loaded.token_rows[0]["prompt_tokens"]["input_ids"] == [1, 2, 3]


# --- naming a dataset -------------------------------------------------------------------------------------


def test_a_dataset_dict_without_a_split_is_an_error_listing_its_splits(tmp_path):
    folder = saved(tmp_path, "logs", {"train": good_rows(3), "validation": good_rows(2)})
    with pytest.raises(
        DatasetSourceError,
        match=r"DatasetDict of splits train, validation: name the one to "
        r"read, e.g. .*logs::train",
    ):
        load_logs([folder])
    with pytest.raises(DatasetSourceError, match="no split 'test'; its splits: train, validation"):
        load_logs([f"{folder}::test"])
    with pytest.raises(DatasetSourceError, match=r"train, validation: pass one of them, e.g. dataset\['train'\]"):
        load_logs([datasets.load_from_disk(str(folder))])
    with pytest.raises(DatasetSourceError, match="a single dataset .* it has no split 'train'"):
        load_logs([f"{folder / 'train'}::train"])
    with pytest.raises(DatasetSourceError, match="cannot open .* as a folder written by save_to_disk"):
        load_logs([f"{tmp_path}::train"])


def test_units_sent_as_text_to_another_process_read_the_same(tmp_path):
    """The Dask engine hands each loading unit to its workers as str(unit), read back as a Path."""
    folder = saved(tmp_path, "logs", {"train": with_bad_row(good_rows(20))})
    disk, obj = loading_units([f"{folder}::train", datasets.Dataset.from_list(good_rows(3))])
    again = read_unit(Path(str(disk)))
    assert again.rows == read_unit(disk).rows and len(again.rows) == 19
    assert [(r.file, r.location) for r in again.rejects] == [(f"{folder}::train", "row 5")]
    with pytest.raises(DatasetSourceError, match="cannot be opened again from its name"):
        read_unit(Path(str(obj)))


def test_reading_files_does_not_import_datasets(tmp_path):
    jsonl = write_jsonl(tmp_path / "a.jsonl", good_rows(3))
    code = (
        "import sys; from data.logs import load_logs; assert len(load_logs([sys.argv[1]]).rows) == 3; "
        "assert 'datasets' not in sys.modules, 'datasets imported'"
    )
    subprocess.run([sys.executable, "-c", code, str(jsonl)], cwd=ROOT, check=True)


# --- hub datasets, from the local cache -------------------------------------------------------------------


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline machine whose HF caches hold what load_dataset("acme/router_logs", revision="main")
    leaves on a connected one: datasets' prepared split under HF_DATASETS_CACHE/acme___router_logs/
    default/0.0.0/<commit>/, written here by datasets' own JSON builder from a JSONL file, and the hub
    cache's record of which commit "main" was (HF_HUB_CACHE/datasets--acme--router_logs/refs/main).
    No hub is reachable from these machines, so a real download cannot make it."""
    from datasets.packaged_modules.json.json import Json
    from huggingface_hub import constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    rows = with_bad_row(good_rows(30))
    builder = Json(
        cache_dir=str(tmp_path / "build"),
        dataset_name="router_logs",
        data_files={
            "train": str(write_jsonl(tmp_path / "train.jsonl", rows)),
            "test": str(write_jsonl(tmp_path / "test.jsonl", good_rows(5))),
        },
    )
    builder.download_and_prepare(
        output_dir=str(tmp_path / "datasets" / "acme___router_logs" / "default" / "0.0.0" / COMMIT)
    )
    ref = tmp_path / "hub" / "datasets--acme--router_logs" / "refs" / "main"
    ref.parent.mkdir(parents=True)
    ref.write_text(COMMIT)
    return rows


@pytest.mark.parametrize("revision", ["main", COMMIT, COMMIT[:10]])
def test_a_cached_hub_dataset_reads_at_its_revision(hub_cache, revision):
    name = f"hf://acme/router_logs@{revision}::train"
    loaded = load_logs([name])
    assert [r["prompt"] for r in loaded.rows] == [r["prompt"] for i, r in enumerate(hub_cache) if i != 4]
    assert [(r.file, r.location) for r in loaded.rejects] == [(name, "row 5")]


def test_a_hub_revision_the_cache_does_not_hold_is_an_error_not_other_rows(hub_cache):
    other = "fedcba9876543210fedcba9876543210fedcba98"
    with pytest.raises(DatasetSourceError, match=f"come from commit {COMMIT}, and revision '{other}' is commit"):
        load_logs([f"hf://acme/router_logs@{other}::train"])
    with pytest.raises(DatasetSourceError, match="revision 'v2' is not recorded in the local hub cache"):
        load_logs(["hf://acme/router_logs@v2::train"])


def test_a_hub_dataset_without_a_split_is_an_error_listing_its_splits(hub_cache):
    with pytest.raises(
        DatasetSourceError,
        match=r"DatasetDict of splits .*: name the one to read, "
        r"e.g. hf://acme/router_logs@main::",
    ):
        load_logs(["hf://acme/router_logs@main"])


def test_an_uncached_hub_dataset_is_an_error_naming_it(hub_cache):
    with pytest.raises(DatasetSourceError) as caught:
        load_logs(["hf://acme/not_cached@v1::train"])
    message = str(caught.value)
    assert message.startswith(
        "hf://acme/not_cached@v1::train: datasets.load_dataset('acme/not_cached', revision='v1', split='train') failed"
    )
    assert "read from the local cache" in message and str(datasets.config.HF_DATASETS_CACHE) in message


# --- training ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_rows(small_routellm) -> list[dict]:
    """A few hundred rows of the real logs, every source represented, plus one invalid row and one
    request with no outcome yet, in the canonical schema (what a team would keep as JSONL)."""
    rows = load_logs([small_routellm]).rows
    rows = [rows[i * len(rows) // 400] for i in range(400)]  # evenly spaced: MMLU, GSM8K and MT-Bench
    bad = {**rows[0], "request_id": "bad-1", "prompt": "an invalid row", "cloud_quality": 1.7}
    waiting = {
        **rows[1],
        "request_id": "waiting-1",
        "prompt": "no outcome yet",
        "edge_quality": None,
        "cloud_quality": None,
    }
    return rows[:200] + [bad] + rows[200:300] + [waiting] + rows[300:]


@pytest.mark.real_data
@pytest.mark.slow
def test_a_saved_dataset_trains_the_same_bundle_as_its_jsonl(real_rows, encoder_cache, tmp_path):
    """The same rows as JSONL, as a save_to_disk folder and as an IterableDataset object: the same
    data report (counts, sources, content hash), the same rejects at the same rows, the same scores
    and decisions from the bundles."""
    from serving import Router
    from serving.scoring._scorer import Scorer
    from training.engines.base import train

    jsonl = write_jsonl(tmp_path / "logs.jsonl", real_rows)
    as_read = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    folder = saved(tmp_path, "logs_dataset", as_read)
    # The Python API too: TrainConfig(data=[IterableDataset]), streamed from the same saved rows.
    stream = datasets.load_from_disk(str(folder)).to_iterable_dataset()
    results = {}
    for kind, data in (("jsonl", jsonl), ("dataset", folder), ("object", stream)):
        config = config_for(tmp_path / kind, jsonl, encoder_cache, split={"max_train_rows": 250})
        results[kind] = train(dataclasses.replace(config, data=[data]))

    reports = {k: {f: v for f, v in r.manifest.data.items() if f != "rejects_file"} for k, r in results.items()}
    assert reports["dataset"] == reports["jsonl"] and reports["object"] == reports["jsonl"]
    assert (reports["jsonl"]["rows_read"], reports["jsonl"]["rejected"], reports["jsonl"]["unlabelled"]) == (
        len(real_rows),
        2,
        1,
    )
    rejects = {k: [json.loads(line) for line in (tmp_path / k / "reports" / "rejects.jsonl").open()] for k in results}
    for kind, file in (("dataset", str(folder)), ("object", "dataset:unnamed")):
        assert [(r["file"], r["location"], r["reason"]) for r in rejects[kind]] == [
            (file, r["location"].replace("line", "row"), r["reason"]) for r in rejects["jsonl"]
        ]

    prompts = [r["prompt"] for r in real_rows[::8]]
    precisions = [r["precision"] for r in real_rows[::8]]
    scores = {k: Scorer.load(r.bundle).scores(prompts, precisions) for k, r in results.items()}
    assert np.ptp(scores["jsonl"]) > 0.01  # the prompts are told apart: the comparison is not of constants
    decisions = {
        k: [(d.target, d.zone) for d in Router.load(r.bundle).route_batch(prompts, precisions)]
        for k, r in results.items()
    }
    assert len(set(decisions["jsonl"])) > 1
    for kind in ("dataset", "object"):
        np.testing.assert_allclose(scores[kind], scores["jsonl"], rtol=0, atol=1e-9)
        assert decisions[kind] == decisions["jsonl"]


def test_train_config_takes_a_dataset_object_through_reading_and_saving(tmp_path):
    """TrainConfig(data=[IterableDataset]) reads it like any log (the local engine's prepare_frame)
    and saves its configuration as JSON, the dataset named, not its repr."""
    from training.config import TrainConfig
    from training.engines.local import prepare_frame

    rows = with_bad_row(good_rows(60), index=7)
    dataset = datasets.Dataset.from_list(rows)
    write_jsonl(tmp_path / "logs.jsonl", rows)
    prepared = {}
    for kind, data in (("object", dataset.to_iterable_dataset()), ("jsonl", tmp_path / "logs.jsonl")):
        config = TrainConfig(data=[data], reports_dir=str(tmp_path / kind / "reports"))
        prepared[kind] = prepare_frame(config).report
        saved_config = json.loads(json.dumps(config.to_dict()))
        assert saved_config["data"] == [str(data) if kind == "jsonl" else "dataset:unnamed"]
    counts = ("rows_read", "rejected", "unlabelled", "rows", "rows_per_source", "content_sum64", "outcomes")
    assert {k: prepared["object"][k] for k in counts} == {k: prepared["jsonl"][k] for k in counts}
    assert prepared["object"]["rejected"] == 1
    [reject] = [json.loads(line) for line in (tmp_path / "object" / "reports" / "rejects.jsonl").open()]
    assert (reject["file"], reject["location"]) == ("dataset:unnamed", "row 8")
