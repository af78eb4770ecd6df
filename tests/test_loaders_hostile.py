"""Hostile log files: each bad row or file is reported (file, location, clear reason) and
every good row beside it is kept; nothing is dropped, merged or read twice silently."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from data.logs import load_logs, loading_units, read_unit

GOOD = {
    "request_id": "r1",
    "prompt": "What is 2+2?",
    "domain": "Math",
    "precision": "exact",
    "edge_quality": 1,
    "cloud_quality": 1,
    "source": "app",
}


def good_rows(n, start=0):
    return [{**GOOD, "request_id": f"r{i}", "prompt": f"question number {i}?"} for i in range(start, start + n)]


def jsonl_bytes(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def prompts(loaded) -> list[str]:
    return [r["prompt"] for r in loaded.rows]


def test_invalid_utf8_in_jsonl_rejects_only_that_line(tmp_path):
    lines = jsonl_bytes(good_rows(20)).splitlines(keepends=True)
    lines[4] = lines[4].replace(b"question", b"qu\xffestion")
    path = tmp_path / "logs.jsonl"
    path.write_bytes(b"".join(lines))
    loaded = load_logs([path], max_reject_share=0.5)
    assert prompts(loaded) == [r["prompt"] for i, r in enumerate(good_rows(20)) if i != 4]
    [reject] = loaded.rejects
    assert (reject.file, reject.location) == (str(path), "line 5")
    column = lines[4].index(b"\xff")
    assert reject.reason == (
        f"invalid UTF-8: byte 0xff at column {column + 1} (byte offset {sum(map(len, lines[:4])) + column} in the file)"
    )


def test_invalid_utf8_in_csv_rejects_only_that_row(tmp_path):
    path = tmp_path / "logs.csv"
    pd.DataFrame(good_rows(20)).to_csv(path, index=False)
    path.write_bytes(path.read_bytes().replace(b"question number 7?", b"question number \xc37?"))
    loaded = load_logs([path], max_reject_share=0.5)
    assert len(loaded.rows) == 19 and "question number 8?" in prompts(loaded)
    [reject] = loaded.rejects
    assert reject.location == "row 8" and reject.reason.startswith("invalid UTF-8: byte 0xc3 on line 9")


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.csv", "empty.parquet"])
def test_empty_file_is_a_clear_file_reject(tmp_path, name):
    (tmp_path / "good.jsonl").write_bytes(jsonl_bytes(good_rows(30)))
    (tmp_path / name).write_bytes(b"")
    loaded = load_logs([tmp_path], max_reject_share=0.5)
    assert len(loaded.rows) == 30
    assert [r.as_dict() for r in loaded.rejects] == [
        {"file": str(tmp_path / name), "location": "file", "reason": "empty file (0 bytes)"}
    ]


HEADER = "prompt,edge_quality,cloud_quality\n"


@pytest.mark.parametrize(
    "body, bad_row, kept, reason",
    [
        # The quote is never closed: it would run to the end of the file.
        ('q0,1,1\n"q1 cut off,1,1\nq2,1,1\nq3,1,1\n', 2, ["q0", "q2", "q3"], "unexpected end of data"),
        # Closed by the opening quote of a later quoted field.
        (
            'q0,1,1\n"q1 cut off,1,1\nq2,1,1\n"q3, quoted",1,1\nq4,1,1\n',
            2,
            ["q0", "q2", "q3, quoted", "q4"],
            "',' expected after '\"'",
        ),
        # Closed by a stray quote in a later row: valid CSV, but the quoted value holds whole rows.
        (
            'q0,1,1\n"q1 cut off,1,0\nq2,0,1\nq3 stray",1,1\nq4,1,1\n',
            2,
            ["q0", "q2", 'q3 stray"', "q4"],
            "holds the rest of a row",
        ),
        ('q0,1,1\n"q1 cut off,1,0\nq2 stray",0,1\nq3,1,1\n', 2, ["q0", 'q2 stray"', "q3"], "holds the rest of a row"),
    ],
    ids=["never-closed", "closed-by-a-later-quoted-field", "stray-quote-two-rows-later", "stray-quote-in-next-row"],
)
def test_unterminated_csv_quote_is_reported_never_merged(tmp_path, body, bad_row, kept, reason):
    path = tmp_path / "logs.csv"
    path.write_text(HEADER + body)
    loaded = load_logs([path], max_reject_share=1.0, rejects_path=tmp_path / "rejects.jsonl")
    assert prompts(loaded) == kept, "every other row is kept whole, with its own prompt"
    [reject] = loaded.rejects
    assert (reject.file, reject.location) == (str(path), f"row {bad_row}")
    assert reject.reason.startswith(f"malformed CSV (line {bad_row + 1})") and reason in reject.reason
    assert "row 2" in (tmp_path / "rejects.jsonl").read_text()


@pytest.mark.parametrize("closed_in_row", [3, 4])
def test_csv_swallowed_rows_are_found_in_any_column(tmp_path, closed_in_row):
    path = tmp_path / "logs.csv"
    pd.DataFrame(good_rows(5)).to_csv(path, index=False)
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace(",app", ',"app')  # row 2 opens a quote in its last column ...
    lines[closed_in_row] = lines[closed_in_row].replace(",app", ',app"')  # ... a later row's stray quote closes it
    path.write_text("".join(lines))
    loaded = load_logs([path], max_reject_share=1.0)
    assert [r.location for r in loaded.rejects] == ["row 2"]
    assert [r["request_id"] for r in loaded.rows] == ["r0", "r2", "r3", "r4"]


def test_csv_with_a_wrong_number_of_fields_rejects_that_row(tmp_path):
    path = tmp_path / "logs.csv"
    path.write_text(HEADER + "q0,1,1\nq1,1,1,extra\nq2,1\nq3,1,1\n")
    loaded = load_logs([path], max_reject_share=1.0)
    assert prompts(loaded) == ["q0", "q3"]
    assert [(r.location, r.reason) for r in loaded.rejects] == [
        ("row 2", "malformed CSV (line 3): 4 fields, the header has 3"),
        ("row 3", "malformed CSV (line 4): 2 fields, the header has 3"),
    ]


def test_multi_line_quoted_prompts_are_kept(tmp_path):
    """Prompts span lines and carry commas and numbers (as in MMLU): legal CSV, not a swallowed row."""
    rows = [
        {**GOOD, "prompt": text}
        for text in (
            "Which of these, if any, is prime?\nA. 4, 6, 8\nB. 7\nAnswer:",
            "Add 1, 2, 3\nthen 1, 2, 3\n",
            'He said "no", then\n"yes", 1, 1',
            "Line one\r\nline two, 0.5, 1",
        )
    ]
    path = tmp_path / "logs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    loaded = load_logs([path])
    assert loaded.rejects == [] and prompts(loaded) == [r["prompt"] for r in rows]


def test_real_routellm_logs_load_without_a_single_reject(real_data_dir):
    loaded = load_logs([real_data_dir / "mmlu", real_data_dir / "gsm8k"])
    assert loaded.rejects == [] and len(loaded.rows) > 10_000
    assert all("\nA. " in r["prompt"] for r in loaded.rows if r["source"] == "mmlu")


def test_deeply_nested_json_line_is_rejected_not_a_crash(tmp_path):
    rows = [json.dumps(r) for r in good_rows(10)]
    rows[3] = '{"prompt": ' + "[" * 10_000 + "]" * 10_000 + "}"
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(rows) + "\n")
    loaded = load_logs([path], max_reject_share=0.5, rejects_path=tmp_path / "rejects.jsonl")
    assert len(loaded.rows) == 9
    [reject] = loaded.rejects
    assert reject.location == "line 4" and "nested too deeply" in reject.reason
    assert "line 4" in (tmp_path / "rejects.jsonl").read_text()


def test_symlink_loops_and_aliases_read_each_file_once(tmp_path):
    logs = tmp_path / "logs"
    (logs / "sub").mkdir(parents=True)
    (logs / "a.jsonl").write_bytes(jsonl_bytes(good_rows(3)))
    (logs / "sub" / "b.jsonl").write_bytes(jsonl_bytes(good_rows(2, start=3)))
    (logs / "sub" / "loop").symlink_to(logs, target_is_directory=True)  # sub/loop -> logs -> sub -> ...
    (logs / "self").symlink_to("self")  # a link to itself
    (logs / "alias.jsonl").symlink_to(logs / "a.jsonl")
    units = loading_units([logs, logs / "sub", str(logs / "**" / "*.jsonl")])
    assert [u.name for u in units] == ["a.jsonl", "b.jsonl"]
    loaded = load_logs([logs])
    assert prompts(loaded) == [r["prompt"] for r in good_rows(5)] and loaded.rejects == []


def test_dangling_symlink_is_a_file_reject_in_both_engines(tmp_path):
    (tmp_path / "good.jsonl").write_bytes(jsonl_bytes(good_rows(30)))
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "deleted.jsonl")
    expected = [
        {
            "file": str(tmp_path / "gone.jsonl"),
            "location": "file",
            "reason": f"dangling symlink to {str(tmp_path / 'deleted.jsonl')!r}: No such file or directory",
        }
    ]
    loaded = load_logs([tmp_path], max_reject_share=0.5)
    assert len(loaded.rows) == 30 and [r.as_dict() for r in loaded.rejects] == expected
    # The Dask engine reads each loading unit on its own with read_unit.
    units = loading_units([tmp_path])
    assert [u.name for u in units] == ["gone.jsonl", "good.jsonl"]
    assert [r.as_dict() for u in units for r in read_unit(u).rejects] == expected
    # A glob that matches the dangling link reports it too, and so does the link named on its own.
    assert [r.as_dict() for r in load_logs([str(tmp_path / "*.jsonl")], max_reject_share=0.5).rejects] == expected
    assert [u.name for u in loading_units([tmp_path / "gone.jsonl"])] == ["gone.jsonl"]


def test_unlistable_folder_is_a_file_reject(tmp_path, monkeypatch):
    (tmp_path / "good.jsonl").write_bytes(jsonl_bytes(good_rows(30)))
    (tmp_path / "locked").mkdir()
    real_iterdir = type(tmp_path).iterdir

    def iterdir(self):
        if self.name == "locked":
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(type(tmp_path), "iterdir", iterdir)
    loaded = load_logs([tmp_path], max_reject_share=0.5)
    assert len(loaded.rows) == 30
    assert [r.as_dict() for r in loaded.rejects] == [
        {"file": str(tmp_path / "locked"), "location": "file", "reason": "cannot list folder: Permission denied"}
    ]


@pytest.mark.parametrize("field", ["edge_quality", "cloud_quality"])
def test_nan_quality_is_called_nan_not_missing(tmp_path, field):
    rows = [json.dumps(r) for r in good_rows(10)]
    rows[2] = json.dumps({**GOOD, field: float("nan")})  # json writes the bare NaN token
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(rows) + "\n")
    csv_path = tmp_path / "logs.csv"
    csv_path.write_text(HEADER + f"q0,1,1\nq1,{'nan,1' if field == 'edge_quality' else '1,NaN'}\n")
    for p, location in ((path, "line 3"), (csv_path, "row 2")):
        [reject] = load_logs([p], max_reject_share=1.0).rejects
        assert (reject.location, reject.reason) == (location, f"{field} is NaN, not a number in [0, 1]")


def test_csv_missing_markers_and_long_prompts_are_read(tmp_path):
    """R and pandas write NA / null for a missing value; a 1 MB prompt is one cell."""
    path = tmp_path / "logs.csv"
    long_prompt = "word " * 200_000
    path.write_text(
        f"prompt,edge_quality,cloud_quality,edge_latency_ms,domain\nNA,1,0,NA,null\n{long_prompt},0,1,12.5,finance\n",
        encoding="utf-8",
    )
    loaded = load_logs([path])
    assert loaded.rejects == []
    assert prompts(loaded) == ["NA", long_prompt]  # the prompt's text is never a missing marker
    assert loaded.rows[0]["edge_latency_ms"] is None and loaded.rows[0]["domain"] is None
