"""The synthetic log simulator (`make simulate`): data contract, determinism, streaming,
realistic rates, CLI, and the behavioural check that a learned router recovers the
hidden difficulty the hand rule table cannot see."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from data import simulator
from data.logs import load_logs
from data.schema import COLUMNS, check_row
from data.simulator import MANIFEST_NAME, generate_rows, write_shards
from tests.conftest import ROOT, config_for, make_env


def read_folder(folder) -> pd.DataFrame:
    """Every shard of a simulated folder, in shard order."""
    return pd.concat([pq.read_table(p).to_pandas() for p in sorted(folder.glob("part-*.parquet"))], ignore_index=True)


def cloud_needed(frame: pd.DataFrame) -> np.ndarray:
    return (frame["cloud_quality"] > frame["edge_quality"]).to_numpy()


def test_rows_pass_the_schema_and_load_logs_reads_the_folder_without_rejects(tmp_path):
    out = tmp_path / "sim"
    shards = write_shards(out, 1_500, rows_per_shard=600, seed=1)
    assert [p.name for p in shards] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]

    frame = read_folder(out)
    assert list(frame.columns) == list(COLUMNS)
    for row in frame.to_dict("records"):
        check_row(row, default_source="x")  # raises on any schema break
    assert set(frame["source"]) == {"synthetic"}
    assert frame["request_id"].is_unique and frame["request_id"].iloc[0] == "sim-1-0"
    assert set(frame["edge_quality"]) | set(frame["cloud_quality"]) <= {0.0, 1.0}
    assert frame["precision"].isna().any(), "some requests declare no precision"
    assert (frame["prompt"].str.len() / 4 > 1024).any(), "some prompts exceed the 1,024-token edge budget"
    assert frame["prompt"].duplicated().mean() < 0.01

    logs = load_logs([out])
    assert logs.rejects == [] and logs.n_read == 1_500 and len(logs.rows) == 1_500
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert "synthetic data" in manifest["description"] and manifest["synthetic"] is True
    assert (manifest["seed"], manifest["n"], manifest["generator_version"]) == (1, 1_500, simulator.GENERATOR_VERSION)
    assert manifest["shards"] == [p.name for p in shards]


def test_same_rows_whatever_the_shard_size_and_on_rerun(tmp_path):
    a, b, c = (
        write_shards(tmp_path / name, 5_000, rows_per_shard=size, seed=7)
        for name, size in (("a", 1_000), ("b", 2_500), ("c", 1_000))
    )
    assert (len(a), len(b)) == (5, 2)
    rows = read_folder(tmp_path / "a")
    pd.testing.assert_frame_equal(rows, read_folder(tmp_path / "b"))
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in c], "a rerun writes byte-identical shards"
    # Any range, cut anywhere, gives the same rows.
    pd.testing.assert_frame_equal(generate_rows(7, 1_234, 3_456), rows.iloc[1_234:3_456].reset_index(drop=True))
    other = generate_rows(8, 0, 200)
    assert not other["prompt"].isin(rows["prompt"].iloc[:200]).all()


def test_streams_shard_by_shard_with_bounded_rows_in_memory(tmp_path, monkeypatch):
    out = tmp_path / "sim"
    out.mkdir()
    (out / "part-00042.parquet").write_bytes(b"stale shard of an earlier, larger run")
    requested, seen = [], []
    real = simulator.generate_rows

    def spy(seed, start, stop, **kw):
        requested.append(stop - start)
        return real(seed, start, stop, **kw)

    def on_shard(path, done):
        index = int(path.stem.split("-")[1])
        # Each shard is complete on disk before the next one starts.
        seen.append((path.exists(), (out / f"part-{index + 1:05d}.parquet").exists(), done))

    monkeypatch.setattr(simulator, "generate_rows", spy)
    shards = write_shards(out, 50_000, rows_per_shard=5_000, seed=0, on_shard=on_shard)
    assert len(shards) == 10 and sorted(p.name for p in out.glob("part-*.parquet")) == [p.name for p in shards]
    assert seen == [(True, False, 5_000 * (i + 1)) for i in range(10)]
    assert max(requested) <= simulator.BLOCK_ROWS, "rows are generated one block at a time"
    assert all(pq.ParquetFile(p).metadata.num_rows == 5_000 for p in shards)
    assert not list(out.glob(".*.tmp")), "no temporary files are left behind"


def test_rates_are_realistic_and_the_rule_table_sees_little_of_the_difficulty():
    from sklearn.metrics import roc_auc_score

    from serving.routing._rule_table import rule_score

    frame = generate_rows(0, 0, 20_000, with_difficulty=True)
    needed = cloud_needed(frame)
    assert 0.62 <= frame["edge_quality"].mean() <= 0.72
    assert 0.78 <= frame["cloud_quality"].mean() <= 0.88
    assert 0.14 <= needed.mean() <= 0.22
    # Cloud-needed concentrates on hard prompts ...
    hard = frame["difficulty"] > frame["difficulty"].quantile(0.8)
    easy = frame["difficulty"] < frame["difficulty"].quantile(0.2)
    assert needed[hard].mean() > 5 * needed[easy].mean()
    assert roc_auc_score(needed, frame["difficulty"]) > 0.75
    # ... which the rule table's inputs barely reveal: short hard and long easy prompts exist.
    tokens = frame["prompt"].str.len() / 4.2
    rules = [rule_score(t, d, p) for t, d, p in zip(tokens, frame["domain"], frame["precision"])]
    assert roc_auc_score(needed, rules) < 0.6
    assert (hard & (tokens < 40)).sum() > 100 and (easy & (tokens > 1024)).sum() > 100


@pytest.mark.slow
def test_learned_router_recovers_the_hidden_difficulty(tmp_path, encoder_cache):
    from training.engines.base import train as run

    out = tmp_path / "sim"
    write_shards(out, 3_000, rows_per_shard=1_000, seed=0)  # 10% of rows declare no precision
    result = run(config_for(tmp_path, out, encoder_cache, routing={"min_rows_per_tag": 50}))
    test = result.metrics["test"]
    learned, rules = test["learned"]["apgr"], test["rule_table"]["apgr"]
    assert learned >= rules + 0.1, f"learned APGR {learned:.3f} vs rule table {rules:.3f}"


def run_cli(*args, **kw):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pipelines.simulate", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def test_cli_writes_synthetic_shards(tmp_path):
    done = run_cli("--n", "2000", "--out", str(tmp_path / "sim"), "--seed", "3", "--rows-per-shard", "800")
    assert done.returncode == 0, done.stderr
    assert "2,000 synthetic rows in 3 shard(s)" in done.stdout
    pd.testing.assert_frame_equal(read_folder(tmp_path / "sim"), generate_rows(3, 0, 2_000))


@pytest.mark.parametrize(
    "args, message",
    [
        (("--n", "0"), "positive whole number"),
        (("--n", "1.5"), "positive whole number"),
        (("--n", "many"), "not a number"),
        (("--n", "10", "--rows-per-shard", "0"), "--rows-per-shard"),
        (("--n", "10", "--seed", "-1"), "--seed"),
        (("--n", "10", "--undeclared-share", "2"), "undeclared_share"),
    ],
)
def test_cli_rejects_bad_arguments(tmp_path, args, message):
    done = run_cli(*args, "--out", str(tmp_path / "sim"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "sim").exists()


def test_cli_accepts_scientific_counts():
    from data.simulator import parse_count

    assert (parse_count("1e6"), parse_count("100_000"), parse_count("2000")) == (1_000_000, 100_000, 2_000)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n=0), "n must be an integer >= 1, got 0"),
        (dict(n=1.5), "n must be an integer >= 1, got 1.5"),
        (dict(n=10, rows_per_shard=0), "rows_per_shard must be an integer >= 1, got 0"),
        (dict(n=10, seed=-1), "seed must be an integer >= 0, got -1"),
    ],
)
def test_library_rejects_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        write_shards(tmp_path / "sim", **kwargs)
    assert not (tmp_path / "sim").exists()


def test_make_simulate(tmp_path):
    """The README command, as written."""
    done = subprocess.run(
        ["make", "-s", "simulate", "N=1000", f"OUT={tmp_path / 'sim'}", "ARGS="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=make_env(),
    )
    assert done.returncode == 0, done.stderr
    assert len(load_logs([tmp_path / "sim"]).rows) == 1_000
