"""Log loaders: canonical formats, the RouteLLM adapter, and every kind of bad row."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from data.location import default_data_paths
from data.logs import DataQualityError, load_logs
from data.routellm import SUBJECT_DOMAIN

GOOD = {
    "request_id": "r1",
    "prompt": "What is 2+2?",
    "domain": "Math",
    "precision": "exact",
    "edge_quality": 1,
    "cloud_quality": 1,
    "source": "app",
}


def write_jsonl(path, lines):
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def good_rows(n, start=0):
    return [{**GOOD, "request_id": f"r{i}", "prompt": f"question number {i}?"} for i in range(start, start + n)]


def test_canonical_formats_load_the_same_rows(tmp_path):
    rows = good_rows(5)
    write_jsonl(tmp_path / "a.jsonl", rows)
    pd.DataFrame(rows).to_csv(tmp_path / "b.csv", index=False)
    pd.DataFrame(rows).to_parquet(tmp_path / "c.parquet")
    for name in ("a.jsonl", "b.csv", "c.parquet"):
        loaded = load_logs([tmp_path / name])
        assert [r["prompt"] for r in loaded.rows] == [r["prompt"] for r in rows], name
        assert loaded.rows[0]["domain"] == "math" and loaded.rows[0]["precision"] == "exact"
        assert loaded.rejects == []


def test_globs_and_folders_expand(tmp_path):
    write_jsonl(tmp_path / "day1.jsonl", good_rows(3))
    write_jsonl(tmp_path / "day2.jsonl", good_rows(4, start=3))
    assert len(load_logs([str(tmp_path / "day*.jsonl")]).rows) == 7
    assert len(load_logs([tmp_path]).rows) == 7
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        load_logs([str(tmp_path / "nothing-here*.jsonl")])


@pytest.mark.parametrize(
    "bad, reason",
    [
        ({"prompt": None}, "prompt is missing"),
        ({"prompt": "   "}, "prompt is empty"),
        ({"prompt": 42}, "prompt is not text"),
        ({"edge_quality": 1.5}, "edge_quality is out of range"),
        ({"cloud_quality": -0.1}, "cloud_quality is out of range"),
        ({"cloud_quality": "high"}, "cloud_quality is not a number"),
        ({"edge_quality": None}, "edge_quality is missing"),
        ({"precision": "approximate"}, "precision 'approximate' is unknown"),
        ({"edge_cost": -1}, "edge_cost is negative"),
    ],
)
def test_each_bad_row_is_rejected_with_file_line_and_reason(tmp_path, bad, reason):
    rows = good_rows(30)
    rows[4] = {**rows[4], **bad}
    path = write_jsonl(tmp_path / "logs.jsonl", rows)
    loaded = load_logs([path], max_reject_share=0.5, rejects_path=tmp_path / "rejects.jsonl")
    assert len(loaded.rows) == 29
    [reject] = loaded.rejects
    assert (reject.file, reject.location) == (str(path), "line 5")
    assert reason in reject.reason
    written = [json.loads(line) for line in (tmp_path / "rejects.jsonl").read_text().splitlines()]
    assert written == [reject.as_dict()]


def test_unparsable_and_non_object_lines_are_rejected(tmp_path):
    path = write_jsonl(tmp_path / "logs.jsonl", [*good_rows(2), '{"prompt": "cut off', "[1, 2]", *good_rows(2, 2)])
    loaded = load_logs([path], max_reject_share=1.0)
    assert len(loaded.rows) == 4
    assert [(r.location, r.reason.split(":")[0]) for r in loaded.rejects] == [
        ("line 3", "unparsable JSON"),
        ("line 4", "not a JSON object"),
    ]
    assert loaded.n_read == 6, "a line that is not a row still counts as read (and against the reject share)"


def test_csv_rows_are_located_by_row_number(tmp_path):
    rows = good_rows(30)
    rows[9]["edge_quality"] = 7
    pd.DataFrame(rows).to_csv(tmp_path / "logs.csv", index=False)
    loaded = load_logs([tmp_path / "logs.csv"], max_reject_share=0.5)
    assert [(r.location, "edge_quality" in r.reason) for r in loaded.rejects] == [("row 10", True)]


def test_missing_required_column_rejects_every_row(tmp_path):
    pd.DataFrame([{"prompt": "hi", "edge_quality": 1}]).to_csv(tmp_path / "logs.csv", index=False)
    with pytest.raises(DataQualityError, match="no valid rows"):
        load_logs([tmp_path / "logs.csv"], rejects_path=tmp_path / "rejects.jsonl")
    assert "cloud_quality is missing" in (tmp_path / "rejects.jsonl").read_text()


def test_run_stops_when_too_many_rows_are_bad(tmp_path):
    rows = good_rows(100)
    for i in range(6):
        rows[i]["prompt"] = ""
    path = write_jsonl(tmp_path / "logs.jsonl", rows)
    with pytest.raises(DataQualityError, match=r"6 of 100 .*6\.0% > allowed 5\.0%.*rejects\.jsonl"):
        load_logs([path], rejects_path=tmp_path / "rejects.jsonl")
    assert len(load_logs([path], max_reject_share=0.06).rows) == 94
    assert len((tmp_path / "rejects.jsonl").read_text().splitlines()) == 6


def test_unreadable_file_is_a_reject_not_a_crash(tmp_path):
    write_jsonl(tmp_path / "good.jsonl", good_rows(50))
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    loaded = load_logs([tmp_path], max_reject_share=0.5)
    assert len(loaded.rows) == 50
    assert [(r.location, r.reason.startswith("cannot read parquet")) for r in loaded.rejects] == [("file", True)]


def test_unsupported_extension_is_a_clear_error(tmp_path):
    (tmp_path / "logs.xlsx").write_text("x")
    with pytest.raises(ValueError, match="unsupported log format '.xlsx'"):
        load_logs([tmp_path / "logs.xlsx"])


def test_routellm_formats(small_routellm):
    loaded = load_logs([small_routellm])
    frame = loaded.frame()
    assert loaded.rejects == []
    assert set(frame["source"]) == {"mmlu", "gsm8k", "mt_bench"}
    law = frame[frame["request_id"].str.startswith("mmlu/professional_law/")]
    assert len(law) > 100 and set(law["domain"]) == {"legal"} and set(law["precision"]) == {"exact"}
    assert set(frame.loc[frame.source == "gsm8k", "domain"]) == {"math"}
    mt = frame[frame.source == "mt_bench"].set_index("request_id")
    assert len(mt) == 160  # 80 questions x 2 turns
    assert mt.loc["mt_bench/81/turn2", "prompt"].startswith(mt.loc["mt_bench/81/turn1", "prompt"])
    assert mt.loc["mt_bench/81/turn1", "precision"] == "tolerant"  # writing
    assert frame[["edge_quality", "cloud_quality"]].stack().between(0, 1).all()


def test_routellm_bad_judgement_is_rejected(small_routellm, tmp_path):
    import shutil

    folder = tmp_path / "rl"
    shutil.copytree(small_routellm / "mt_bench", folder / "mt_bench")
    lines = (folder / "mt_bench" / "judgements.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "score": -1})
    (folder / "mt_bench" / "judgements.jsonl").write_text("\n".join(lines) + "\n")
    loaded = load_logs([folder], max_reject_share=1.0)
    assert len(loaded.rejects) == 1
    assert f"mt_bench/{first['question_id']}/turn{first['turn']}" not in {r["request_id"] for r in loaded.rows}
    assert "out of range" in loaded.rejects[0].reason


def test_every_mmlu_subject_has_a_domain(real_data_dir):
    subjects = {p.stem.removeprefix("mmlu_") for p in (real_data_dir / "mmlu").glob("mmlu_*.csv")}
    assert len(subjects) == 57 and subjects <= set(SUBJECT_DOMAIN)


def test_data_location_prefers_env_and_explains_absence(tmp_path, monkeypatch):
    monkeypatch.setenv("ROUTER_DATA_DIR", str(tmp_path))
    assert default_data_paths() == [tmp_path]
    monkeypatch.setenv("ROUTER_DATA_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="ROUTER_DATA_DIR=.*does not exist"):
        default_data_paths()
    monkeypatch.delenv("ROUTER_DATA_DIR")
    monkeypatch.chdir(tmp_path)  # neither data/raw/routellm nor ../shared/data/routellm here
    monkeypatch.setenv("ROUTER_ROUTELLM_URL", "http://127.0.0.1:9")  # and the public logs out of reach
    monkeypatch.setenv("ROUTER_FASTCHAT_URL", "http://127.0.0.1:9")
    with pytest.raises(FileNotFoundError, match="could not download http://127.0.0.1:9/.*make data"):
        default_data_paths()
    assert not (tmp_path / "data" / "raw" / "routellm").exists()


def test_routellm_parts_can_be_passed_on_their_own(small_routellm):
    whole = load_logs([small_routellm]).frame()
    parts = load_logs(
        [small_routellm / "mt_bench", small_routellm / "gsm8k" / "gsm8k_responses.csv", small_routellm / "mmlu"]
    ).frame()
    assert (
        parts.sort_values("request_id")
        .reset_index(drop=True)
        .equals(whole.sort_values("request_id").reset_index(drop=True))
    )
    one_subject = load_logs([small_routellm / "mmlu" / "mmlu_anatomy.csv"]).frame()
    assert set(one_subject["domain"]) == {"medical"} and set(one_subject["source"]) == {"mmlu"}


def test_missing_optional_text_stays_none(tmp_path):
    rows = good_rows(3)
    del rows[0]["precision"], rows[1]["domain"]
    frame = load_logs([write_jsonl(tmp_path / "logs.jsonl", rows)]).frame()
    assert frame["precision"].tolist() == [None, "exact", "exact"]
    assert frame["domain"].tolist() == ["math", None, "math"]


def test_folders_skip_marker_and_hidden_files(tmp_path):
    write_jsonl(tmp_path / "part-0.jsonl", good_rows(4))
    write_jsonl(tmp_path / "_metadata.json", [{"written_by": "spark"}])
    (tmp_path / "_SUCCESS").write_text("")
    write_jsonl(tmp_path / ".part-0.jsonl.crc", ["binary junk"])
    loaded = load_logs([tmp_path])
    assert len(loaded.rows) == 4 and loaded.rejects == []
