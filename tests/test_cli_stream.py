"""`python -m serving route --jsonl`: whatever a line holds, it gets one valid JSON answer, in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

DEEP = 10_000

# Lines the router cannot answer: each must give {"line": N, "error": ...} with this in the error.
BAD = [
    (b"[" * DEEP + b"]" * DEEP, "nested too deeply"),
    (b'{"prompt": "x", "id": ' + b'{"a": ' * DEEP + b"1" + b"}" * DEEP + b"}", "nested too deeply"),
    (b'{"prompt": "caf\xe9"}', "invalid UTF-8"),  # Latin-1, not UTF-8
    (b'{"prompt": "\xe2\x82"}', "invalid UTF-8"),  # truncated sequence
    (b'{"prompt": "\xed\xa0\x80"}', "invalid UTF-8"),  # an encoded surrogate
    (b"\xff\xfe{}", "invalid UTF-8"),
    (b"not json", "unparsable JSON"),
    (b'{"prompt": "x"', "unparsable JSON"),
    (b"[1, 2]", 'expected a JSON object with a "prompt" field'),
    (b'"just a string"', 'expected a JSON object with a "prompt" field'),
    (b"null", 'expected a JSON object with a "prompt" field'),
    (b'{"id": 3}', 'expected a JSON object with a "prompt" field'),
    (b'{"prompt": 3}', "must be str"),
    (b'{"prompt": null}', "must be str"),
    (b'{"prompt": ["a"]}', "must be str"),
    (b'{"prompt": "x", "precision": "fuzzy"}', "not allowed"),
    (b'{"prompt": "x", "precision": 5}', "not allowed"),
    (b'{"prompt": "x", "id": NaN}', "valid JSON"),
    (b'{"prompt": "x", "id": 1e999}', "valid JSON"),
    (b'{"prompt": "x", "id": 1' + b"0" * 5000 + b"}", "digits"),
]

# Odd but answerable lines: (line, the id the answer must carry).
ODD = [
    (b'{"prompt": "x", "id": "\\ud800"}', "\ud800"),  # lone surrogate: escaped on output
    (b'{"prompt": "\\udfff tail", "id": "surrogate prompt"}', "surrogate prompt"),
    (b'{"prompt": "x", "id": "\\ud83d\\ude00"}', "\U0001f600"),  # a proper pair is fine
    ('{"prompt": "café ☕ 日本語", "id": "ключ"}'.encode(), "ключ"),
    (b'{"prompt": "crlf", "id": "crlf"}\r', "crlf"),
]


def stream() -> tuple[bytes, dict[int, str], dict[int, object]]:
    """10,000 lines: mostly plain prompts (id = line number), hostile and odd lines every few
    lines, and a few blank lines (skipped). Returns the bytes, {line: error}, {line: id}."""
    lines, errors, ids = [], {}, {}
    for number in range(1, 10_001):
        if number % 37 == 0:
            line, errors[number] = BAD[(number // 37) % len(BAD)]
        elif number % 53 == 0:
            line, ids[number] = ODD[(number // 53) % len(ODD)]
        elif number % 997 == 0:
            line = b"   "
        else:
            line, ids[number] = b'{"prompt": "question %d", "id": %d}' % (number, number), number
        lines.append(line)
    return b"\n".join(lines) + b"\n", errors, ids


def strict_json(text: str):
    def reject(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=reject)


@pytest.mark.parametrize("source", ["stdin", "file"])
def test_hostile_lines_get_numbered_errors_and_the_rest_is_answered(source, tmp_path):
    data, errors, ids = stream()
    assert set(b for b, _ in BAD) <= set(data.split(b"\n"))  # every hostile kind is in the stream
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "serving",
            "route",
            "--bundle",
            "/nonexistent",
            "--jsonl",
            "-" if source == "stdin" else str(path),
        ],
        input=data if source == "stdin" else None,
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert b"Traceback" not in done.stderr, done.stderr[-3000:].decode(errors="replace")
    assert done.returncode == 1  # some lines failed
    out = [strict_json(line) for line in done.stdout.decode("utf-8").split("\n")[:-1]]
    expected = sorted([*errors, *ids])
    assert len(out) == len(expected)
    for number, record in zip(expected, out):
        if number in errors:
            assert record["line"] == number and errors[number] in record["error"], (number, record)
            assert set(record) == {"line", "error"}
        else:
            assert record["id"] == ids[number] and record["zone"] and record["target"] in ("edge", "cloud")


def test_help_states_the_exit_code_and_output_encoding():
    done = subprocess.run(
        [sys.executable, "-m", "serving", "route", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0
    assert "1 when any line got an error record" in done.stdout and "surrogate" in done.stdout
