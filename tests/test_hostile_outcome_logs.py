"""Hostile outcome logs (the SDK's outcome-*.jsonl folders) read by `make drift`, `make report` and
training's reader (data.sdk_logs): every bad line is an error or a reject naming its file and line,
never a traceback; a FIFO or a device named like a log is refused, never waited on; memory stays
bounded whatever a file holds (one 200 MB line, a 1 GB sparse file); log text never reaches the
terminal or the page as control characters. docs/observability.md#hostile-logs lists each
guarantee with the test here that holds it."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from serving.monitoring._outcome_log import LOG_FORMAT, MAX_LINE_BYTES, printable, read_log_lines
from tests.conftest import ROOT, invoke_command

T0 = 1_795_000_000.0  # 2026-11-17 06:13:20 UTC
MEMORY_BOUND_MB = 300  # peak RSS of one command on the files below; measured 55-85 MB, today's code 440-2,124 MB
COMMAND_TIMEOUT_S = 120  # a command that waits on a FIFO fails the test here instead of hanging the suite
ESC = "\x1b"


def request(n: int, **fields) -> dict:
    """A request record as serving.monitoring._traffic writes it (the fields drift and the report read)."""
    return {
        "log": LOG_FORMAT,
        "type": "request",
        "request_id": f"r{n}",
        "time": T0 + n,
        "prompt": f"question {n}?",
        "features": None,
        "precision": None,
        "model_version": "bundle@a",
        "score": 0.4,
        "zone": "edge",
        "target": "edge",
        "p_edge": 0.7,
        "p_cloud": 0.3,
        "novelty": 0.5,
        "explored": False,
        "propensity": 1.0,
        "served_by": "edge",
        "fallback_reason": None,
        "steps": [{"name": "edge", "status": "ok", "ms": 12.0}],
        "accept": None,
        "edge_response": "answer",
        "edge_quality": None,
        "cloud_quality": None,
        **fields,
    }


def labelled(n: int) -> dict:
    """A request whose edge answer's quality is known: a training row."""
    return request(n, edge_quality=1.0)


def line(record: dict) -> bytes:
    return json.dumps(record).encode() + b"\n"


def write_log(folder: Path, *lines: bytes, name: str = "outcomes-1.jsonl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / name
    file.write_bytes(b"".join(lines))
    return file


# One hostile line each, between good records: (its bytes, the reason its file and line are given).
DEEP = b'{"log": "' + LOG_FORMAT.encode() + b'", "type": "request", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
HOSTILE_LINES = {
    "deep nesting": (DEEP, "not JSON: nested too deeply for the parser"),
    "65 levels": (line(request(1, features=json.loads("[" * 65 + "]" * 65))), "nested deeper than 64 levels"),
    "5.4 million values": (  # 8 MiB of {} would parse to 400 MB of objects: refused before parsing
        line(request(1))[:-2] + b', "x": [' + b"{}," * 2_700_000 + b"{}]}\n",
        "about 5,400,030 values, more than 100,000 (records hold a few hundred)",
    ),
    "400-digit time": (line(request(1, time=10**400)), "number out of range: an integer of 401 digits"),
    "5000-digit score": (
        line(request(1)).replace(b'"score": 0.4', b'"score": ' + b"9" * 5000),
        "number out of range: an integer of 5000 digits",
    ),
    "1e400 score": (
        line(request(1)).replace(b'"score": 0.4', b'"score": 1e400'),
        "number out of range: 1e400 overflows",
    ),
    "NaN p_edge": (line(request(1, p_edge=float("nan"))), "number out of range: NaN"),
    "-Infinity novelty": (line(request(1, novelty=float("-inf"))), "number out of range: -Infinity"),
    "invalid UTF-8": (
        json.dumps(request(1, prompt="caf\u00e9"), ensure_ascii=False).encode().replace(b"\xc3\xa9", b"\xff") + b"\n",
        "invalid UTF-8: byte 0xff at column",
    ),
}


@pytest.mark.parametrize("case", HOSTILE_LINES)
def test_the_reader_refuses_a_hostile_line_naming_why_and_reads_on(tmp_path, case):
    bad, reason = HOSTILE_LINES[case]
    write_log(tmp_path, line(request(0)), bad, line(request(2)))
    read = list(read_log_lines(tmp_path))
    assert [(r.line, r.record["request_id"] if r.record else None) for r in read] == [(1, "r0"), (2, None), (3, "r2")]
    assert reason in read[1].problem and not read[1].cut_short


def test_a_line_longer_than_the_bound_is_skipped_to_its_newline(tmp_path):
    long = b'{"log": "' + LOG_FORMAT.encode() + b'", "prompt": "' + b"x" * MAX_LINE_BYTES + b'"}\n'
    write_log(tmp_path, line(request(0)), long, line(request(2)), long.rstrip(b"\n"))
    read = list(read_log_lines(tmp_path))
    assert [r.line for r in read] == [1, 2, 3, 4] and [r.record is not None for r in read] == [True, False, True, False]
    assert read[1].problem == f"line longer than {MAX_LINE_BYTES:,} bytes ({len(long) - 1:,} bytes): not read"
    assert read[3].last and not read[3].cut_short  # an over-long last line is no record a killed writer cut


def test_the_writers_own_lone_surrogates_read_back(tmp_path):
    """The SDK writes lone surrogates with surrogatepass (serving.monitoring._outcome_log): read back as written, not a reject."""
    write_log(
        tmp_path, json.dumps(request(0, prompt="a\ud800b"), ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
    )
    [read] = read_log_lines(tmp_path)
    assert read.record is not None and read.record["prompt"] == "a\ud800b"


# make report and make drift on each hostile line: an error naming the file and line, no traceback.
REPORT_CASES = {
    **HOSTILE_LINES,
    "time 1e300": (line(request(1, time=1e300)), "field 'time' must be epoch seconds from 1970 to 9999"),
    "time before 1970": (line(request(1, time=-5.0)), "field 'time' must be epoch seconds from 1970 to 9999"),
    "400-digit feedback time": (
        line({"log": LOG_FORMAT, "type": "feedback", "request_id": "r0", "time": 10**400, "edge_quality": 1.0}),
        "number out of range",
    ),
}


def report_main():
    from pipelines.traffic_report import main

    return main


@pytest.mark.parametrize("case", REPORT_CASES)
def test_make_report_on_a_hostile_line_names_it_without_a_traceback(tmp_path, case):
    bad, reason = REPORT_CASES[case]
    file = write_log(tmp_path / "logs", line(request(0)), bad, line(request(2)))
    done = invoke_command(report_main(), ["--logs", tmp_path / "logs", "--out", tmp_path / "r.html"])
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
    assert f"error: {file} line 2: {reason}" in done.output
    assert not (tmp_path / "r.html").exists()


def drift_main():
    from pipelines.drift import main

    return main


@pytest.mark.real_data  # the session's trained test bundle: drift reads its reference first
@pytest.mark.parametrize("case", HOSTILE_LINES)
def test_make_drift_on_a_hostile_line_names_it_without_a_traceback(bundle, tmp_path, case):
    bad, reason = HOSTILE_LINES[case]
    file = write_log(tmp_path / "logs", line(request(0)), bad, line(request(2)))
    done = invoke_command(drift_main(), ["--bundle", bundle, "--logs", tmp_path / "logs", "--out", tmp_path / "d.json"])
    assert done.exit_code == 2 and isinstance(done.exception, SystemExit), done.output
    assert f"{file} line 2: {reason}" in " ".join(done.output.split())  # rich wraps long lines
    assert not (tmp_path / "d.json").exists()


@pytest.mark.real_data
def test_make_drift_says_which_cut_short_last_line_it_left_out(bundle, tmp_path):
    """A writer killed mid-write (or still at work) leaves a last line cut short: drift goes on
    without it and says so, in its output and its JSON; nothing is left out silently."""
    file = write_log(tmp_path / "logs", line(request(0)), line(request(1)), line(request(2))[:40])
    done = invoke_command(drift_main(), ["--bundle", bundle, "--logs", tmp_path / "logs", "--out", tmp_path / "d.json"])
    assert done.exit_code == 0, done.output
    shown = " ".join(done.output.split())
    assert f"left out: {file} line 3: the last line, cut short (not JSON: Unterminated string" in shown
    report = json.loads((tmp_path / "d.json").read_text())
    assert report["records"] == 2 and report["left_out"][0].startswith(f"{file} line 3: the last line, cut short")
    assert "1 line(s) left out" in report["reason"]


# Training's reader (data.sdk_logs, what make train reads): each record-shape error is a reject.
def n_endpoint_request(n: int, **fields) -> dict:
    n_endpoint = {"endpoint": "a", "endpoints": ["a", "b"], "cascade": ["a", "b"], "outcomes": {}, "served_by": "a"}
    return request(n, **{**n_endpoint, **fields})


def test_training_reads_on_past_records_of_the_wrong_shape(tmp_path):
    """One N-endpoint request with `endpoints: 5`, a feedback time of 400 digits or a shadow record
    whose side is a list aborted the whole read (TypeError, OverflowError): each is a reject at its
    own line with its reason, and the read goes on."""
    from data.logs import load_logs
    from data.sdk_logs import iter_outcome_log

    feedback = {"log": LOG_FORMAT, "type": "feedback", "time": T0 + 9}
    file = write_log(
        tmp_path / "logs",
        line(n_endpoint_request(0)),
        line(n_endpoint_request(1, endpoints=5)),
        line({**feedback, "request_id": "r1", "outcomes": {"a": 1.0}}),
        line({**feedback, "request_id": "r0", "outcomes": {"a": 1.0}, "time": 10**400}),
        line(request(2, edge_quality=1.0)),
        line({"log": LOG_FORMAT, "type": "shadow", "request_id": "r2", "time": T0 + 9, "side": [], "response": "x"}),
        line(n_endpoint_request(3, endpoint="c")),
        line(n_endpoint_request(4, outcomes=[1])),
        line(request(5, edge_quality=0.0)),
    )
    rejects: list = []
    rows = [raw.row["request_id"] for raw in iter_outcome_log(tmp_path / "logs", rejects)]
    assert rows == ["r0", "r2", "r5"]
    assert {r.location: r.reason for r in rejects} == {
        "line 2": "endpoints must be the list of the bundle's endpoint names, got 5",
        "line 3": f"feedback for request_id r1, whose request record was rejected ({file} line 2)",
        "line 4": "number out of range: an integer of 401 digits (records hold finite numbers)",
        "line 6": "shadow record's side must be edge or cloud, got []",
        "line 7": "endpoint 'c' is not among the record's endpoints (a, b)",
        "line 8": "outcomes must be an object {endpoint: quality}, got [1]",
    }
    loaded = load_logs([tmp_path / "logs"], max_reject_share=0.9)  # as make train reads it
    assert {row["request_id"] for row in loaded.rows} == {"r2", "r5"}  # r0: N-endpoint, no outcome yet


def test_a_deeply_nested_first_line_is_no_outcome_log_and_no_crash(tmp_path):
    from data.logs import DataQualityError, load_logs
    from data.sdk_logs import is_outcome_log_folder

    write_log(tmp_path / "logs", DEEP, line(request(1, edge_quality=1.0)))
    assert not is_outcome_log_folder(tmp_path / "logs")
    with pytest.raises(DataQualityError, match="no valid rows"):  # read as canonical JSONL: rejects, no RecursionError
        load_logs([tmp_path / "logs"], max_reject_share=1.0)


def test_reasons_quote_log_values_escaped_and_cut_short(tmp_path):
    from data.sdk_logs import iter_outcome_log

    write_log(tmp_path, line({"log": LOG_FORMAT, "type": f"{ESC}[2J{ESC}]0;owned\x07" + "y" * 500, "request_id": "r0"}))
    rejects: list = []
    assert list(iter_outcome_log(tmp_path, rejects)) == []
    [reject] = rejects
    assert ESC not in reject.reason and "\\x1b[2J" in reject.reason and len(reject.reason) < 120


# Special files: refused, never opened blocking. Each command runs in a subprocess with a timeout.
def run(*args: str, timeout: float = COMMAND_TIMEOUT_S, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    def cap() -> None:  # a regression reading /dev/zero fails on this cap instead of filling the machine
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, preexec_fn=cap
    )


TRAINING_READ = (
    "import sys; from data.logs import load_logs; "
    "loaded = load_logs([sys.argv[1]], max_reject_share=1.0); "
    "print('\\n'.join(f'{r.file} {r.location}: {r.reason}' for r in loaded.rejects))"
)


@pytest.mark.real_data
@pytest.mark.parametrize("kind", ["fifo", "char-device", "socket"])
def test_a_special_file_named_like_a_log_is_refused_not_waited_on(bundle, tmp_path, kind):
    logs = tmp_path / "logs"
    write_log(logs, line(request(0, edge_quality=1.0)))
    special = logs / "outcomes-2.jsonl"
    if kind == "fifo":
        os.mkfifo(special)  # opening it for reading blocks until a writer comes: none will
        expected = "refused: a FIFO, not a regular file"
    elif kind == "char-device":
        special.symlink_to("/dev/zero")  # never ends
        expected = "refused: a character device, not a regular file"
    else:  # bound in a short folder (a socket's path has at most 107 bytes), linked under the log's name
        short = Path(tempfile.mkdtemp(prefix="sock", dir="/tmp"))
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(short / "s"))
        special.symlink_to(short / "s")
        expected = "refused: a socket, not a regular file"
    cap = 4 << 30
    drift = run(
        "-m",
        "pipelines.drift",
        "--bundle",
        str(bundle),
        "--logs",
        str(logs),
        "--out",
        str(tmp_path / "d.json"),
        limit_bytes=cap,
    )
    assert drift.returncode == 2 and f"{special}: {expected}" in " ".join(drift.stderr.split()), drift.stderr
    report = run(
        "-m", "pipelines.traffic_report", "--logs", str(logs), "--out", str(tmp_path / "r.html"), limit_bytes=cap
    )
    assert report.returncode == 1 and f"error: {special}: {expected}" in report.stderr, report.stderr
    training = run("-c", TRAINING_READ, str(logs), limit_bytes=cap)
    assert training.returncode == 0 and f"{special} file: {expected}" in training.stdout, training.stderr
    assert "Traceback" not in drift.stderr + report.stderr + training.stderr


# Memory: one line of at most MAX_LINE_BYTES is held, whatever the file.
def peak_rss_mb(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    """The command's exit, output and peak RSS in MB: measured by a parent of its own (getrusage of
    its children), so that no other child of the test process counts."""
    measure = (
        "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(done.returncode)"
    )
    done = run("-c", measure, sys.executable, *args)
    *stderr, peak_kb = done.stderr.rstrip("\n").split("\n")
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, "\n".join(stderr)), int(peak_kb) / 1024


@pytest.mark.real_data
@pytest.mark.parametrize("shape", ["200 MB line", "1 GB sparse tail"])
def test_memory_stays_bounded_on_a_huge_line_and_drift_exits_non_zero(bundle, tmp_path, shape):
    """A log with one 200 MB line, and one whose file was extended to 1 GB with NUL bytes (truncate:
    a sparse file, one enormous line after the records): each command reads on in bounded pieces,
    names the line and stays under MEMORY_BOUND_MB; drift exits 2, never 0 on what it could not read."""
    logs = tmp_path / "logs"
    if shape == "200 MB line":
        file = write_log(logs, line(labelled(0)), line(request(1, prompt="x" * (200 << 20))), line(labelled(2)))
        number, length = 2, (200 << 20) + len(line(request(1, prompt=""))) - 1
    else:
        file = write_log(logs, line(labelled(0)), line(labelled(1)))
        number, length = 3, (1 << 30) - file.stat().st_size
        os.truncate(file, 1 << 30)  # 1 GB of NUL bytes after the records, no newline; no disk block written
    reason = f"{file} line {number}: line longer than {MAX_LINE_BYTES:,} bytes ({length:,} bytes): not read"
    drift, drift_mb = peak_rss_mb(
        "-m", "pipelines.drift", "--bundle", str(bundle), "--logs", str(logs), "--out", str(tmp_path / "d.json")
    )
    assert drift.returncode == 2 and reason in " ".join(drift.stderr.split()), drift.stderr
    report, report_mb = peak_rss_mb(
        "-m", "pipelines.traffic_report", "--logs", str(logs), "--out", str(tmp_path / "r.html")
    )
    assert report.returncode == 1 and f"error: {reason}" in report.stderr, report.stderr
    training, training_mb = peak_rss_mb("-c", TRAINING_READ, str(logs))
    assert training.returncode == 0 and reason in training.stdout, training.stderr
    assert max(drift_mb, report_mb, training_mb) < MEMORY_BOUND_MB, (drift_mb, report_mb, training_mb)


# What the terminal and the page show of log text.
HOSTILE_TEXT = f"{ESC}[31mred{ESC}[0m{ESC}]0;owned\x07\u202eevil\u202c<script>alert(1)</script>\ud800"


def test_make_report_neutralises_control_characters_on_the_terminal_and_escapes_the_page(tmp_path):
    """model_version, served_by and a step's name carry ESC sequences, a bidi override, a lone
    surrogate and HTML; the terminal gets escapes, the page escapes and valid UTF-8."""
    logs = tmp_path / "logs"
    hostile = request(
        1, model_version=HOSTILE_TEXT, served_by=HOSTILE_TEXT, steps=[{"name": HOSTILE_TEXT, "status": "ok", "ms": 1.0}]
    )
    write_log(logs, line(request(0)), json.dumps(hostile, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
    done = run("-m", "pipelines.traffic_report", "--logs", str(logs), "--out", str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stderr
    assert ESC not in done.stdout and "\u202e" not in done.stdout and "\\x1b[31mred" in done.stdout
    page = (tmp_path / "r.html").read_bytes().decode("utf-8")  # valid UTF-8: no lone surrogate written
    assert ESC not in page and "\x07" not in page and "\u202e" not in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\\x1b[31mred" in page and "\\u202eevil" in page and "\\ud800" in page


@pytest.mark.real_data
def test_make_drift_neutralises_control_characters_in_a_file_name(bundle, tmp_path):
    logs = tmp_path / "logs"
    file = write_log(logs, b"not json\n", name=f"outcomes-{ESC}]0;owned\x07{ESC}[2J.jsonl")
    done = run("-m", "pipelines.drift", "--bundle", str(bundle), "--logs", str(logs), "--out", str(tmp_path / "d.json"))
    assert done.returncode == 2 and ESC not in done.stderr and "\x07" not in done.stderr
    assert f"{printable(str(file))} line 1: not JSON" in " ".join(done.stderr.split())
    report = run("-m", "pipelines.traffic_report", "--logs", str(logs), "--out", str(tmp_path / "r.html"))
    assert report.returncode == 1 and f"error: {printable(str(file))} line 1: not JSON" in report.stderr
    assert ESC not in report.stderr


def test_make_train_prints_a_log_error_naming_a_hostile_file_as_text(tmp_path):
    """make train stops on logs it cannot train from with one message naming the file; a file name
    that holds terminal controls is printed escaped, not sent to the terminal."""
    logs = tmp_path / f"logs-{ESC}]0;owned\x07{ESC}[2J"
    write_log(logs, b"not json\n")
    done = run(
        "-m", "pipelines.train", "--data", str(logs), "--bundle", str(tmp_path / "bundle"),
        "--set", f"reports_dir={tmp_path / 'reports'}",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error" in done.stderr and ESC not in done.stderr and "\x07" not in done.stderr


def test_printable_escapes_what_drives_a_terminal_and_keeps_text():
    assert printable("plain text, café, 日本語") == "plain text, café, 日本語"
    assert (
        printable(f"a{ESC}[2Jb\x9b\x00\n\t\u2028\u2066\ud800") == "a\\x1b[2Jb\\x9b\\x00\\x0a\\x09\\u2028\\u2066\\ud800"
    )


# The views of a log whose times span centuries, or a bucket width too small for the period.
def test_the_time_axis_stays_bounded_whatever_the_span(tmp_path):
    from serving.dashboard import compute_views, from_record, render_page
    from serving.dashboard._views import MAX_BUCKETS

    far = [from_record(request(0)), from_record(request(1, time=2.5e11))]  # 2026 and 9892: valid times
    views = compute_views(far)
    assert len(views.buckets) <= MAX_BUCKETS + 1  # + 1: the first bucket starts at a multiple of the width
    render_page(views, title="t", source="s")  # drawn in seconds, not 400,000 weekly bars
    with pytest.raises(ValueError, match="at most 2,000"):
        compute_views([from_record(request(0)), from_record(request(1, time=T0 + 10 * 86400))], bucket_s=1)


def test_the_plots_show_names_as_they_are(tmp_path):
    """A served_by of `$\\frac{a$` was read as matplotlib mathtext (ParseSyntaxException); one
    starting with `_` left out of the legend."""
    from serving.dashboard import compute_views, from_record, render_page

    records = [request(0), request(1, served_by="$\\frac{a$", zone="$x^2$"), request(2, served_by="_hidden")]
    page = render_page(compute_views([from_record(r) for r in records]), title="t", source="s")
    assert "$\\frac{a$" in page and "> _hidden<" in page
