"""Read one log file (JSONL, CSV or Parquet) row by row, with locations.

Every row that cannot be read becomes a Reject with its location and a clear reason; the
rows around it are kept. A file that cannot be read at all (empty, missing, corrupt)
becomes one Reject for the whole file, with location "file". Nothing is dropped silently.

JSONL, read line by line with the json module: a blank line is not a row; a line that is
not valid UTF-8, not JSON, nested too deeply for the parser, or not a JSON object is
rejected as "line N".

CSV, read with the csv module in strict mode (RFC 4180 quoting: a quoted value ends at a
quote followed by a comma or a line end; "" inside it is one quote). The first record is
the header; each later record is "row N" (blank lines are skipped and not counted). Cells
are text, an empty cell is missing, and the schema converts numbers. A record is rejected,
never merged into a neighbour, when
  - the strict parser refuses it (a quote followed by other text, a quote still open at
    the end of the file, a NUL byte, a value over the csv field size limit),
  - it has more or fewer fields than the header,
  - it holds bytes that are not UTF-8, or
  - its first quoted value that spans lines swallowed a row: the value's first line
    holds the rest of its own row, or a later line of the value is a whole row. A line
    "holds a row" when, split at the commas, it has the right number of fields and they
    line up with the record's own: numbers and true/false in the same columns as the
    record (at least one), text where it has text. A multi-line prompt whose lines carry
    commas (MMLU: "A. 24 electrons, 24 protons, 24 neutrons") does not line up: kept.
After a rejected record, reading resumes on the line after the one where it started, so
the rows an unterminated quote swallowed are read (and checked) as rows of their own.

Parquet, read with pyarrow: "row N" is the 1-based row in the file.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from data.schema import Reject

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}
BOM = "\ufeff"
NOT_UTF8 = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as decoded by "surrogateescape"
LINE_BREAK = re.compile(r"\r\n|\r|\n")
# What R, pandas and spreadsheets write for a missing value (NaN stays NaN: the schema names it).
MISSING_MARKERS = frozenset({"", "NA", "N/A", "null", "NULL", "None"})
CSV_FIELD_LIMIT = 64 << 20  # characters in one CSV value: the csv module's default (128 KiB) is below a long prompt


@dataclass(frozen=True)
class RawRow:
    """One unvalidated row and where it came from."""

    file: str
    location: str
    row: dict
    index: int = 0  # 0-based position among the file's rows, for stable ids


class _BadRow(str):
    """Why a row (or, at location "file", the file) cannot be read: a reason, not a row."""


def format_of(path: Path) -> str:
    """The reader name for a file, from its extension."""
    try:
        return FORMATS[path.suffix.lower()]
    except KeyError:
        raise ValueError(
            f"{path}: unsupported log format {path.suffix!r}; use one of {', '.join(sorted(FORMATS))}"
        ) from None


def read_table(path: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """Yield the rows of one file; append a Reject for each unreadable row, or for the file."""
    path = Path(path)
    fmt = format_of(path)
    index = 0
    try:
        if path.stat().st_size == 0:
            rejects.append(Reject(str(path), "file", "empty file (0 bytes)"))
            return
        for location, row in READERS[fmt](path):
            if isinstance(row, _BadRow):
                rejects.append(Reject(str(path), location, str(row)))
            else:
                yield RawRow(str(path), location, row, index)
                index += 1
    except Exception as exc:  # the file (or the rest of it) is unusable; rows already read stay
        rejects.append(unreadable(str(path), fmt, index, exc))


def unreadable(name: str, what: str, rows_read: int, exc: Exception) -> Reject:
    """The `file` reject of a log (a file, or a dataset: data.hf_datasets) that cannot be read,
    or stops being readable after `rows_read` rows, which are kept."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
    after = f" after {rows_read} rows" if rows_read else ""
    return Reject(name, "file", f"cannot read {what}{after}: {reason}")


def _jsonl(path: Path) -> Iterator[tuple[str, dict | _BadRow]]:
    offset = 0  # of the line's first byte in the file
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            row = _json_line(raw, offset, first=number == 1)
            if row is not None:
                yield f"line {number}", row
            offset += len(raw)


def _json_line(raw: bytes, offset: int, first: bool) -> dict | _BadRow | None:
    """The object on one JSONL line, why it is not one, or None for a blank line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _BadRow(
            f"invalid UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} "
            f"(byte offset {offset + exc.start} in the file)"
        )
    if first:
        line = line.removeprefix(BOM)
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return _BadRow(f"unparsable JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        return _BadRow("unparsable JSON: nested too deeply for the parser")
    return obj if isinstance(obj, dict) else _BadRow(f"not a JSON object: {type(obj).__name__}")


def _parquet(path: Path) -> Iterator[tuple[str, dict]]:
    import pyarrow.parquet as pq

    number = 0
    for batch in pq.ParquetFile(path).iter_batches():
        for row in batch.to_pylist():
            number += 1
            yield f"row {number}", row


def _csv(path: Path) -> Iterator[tuple[str, dict | _BadRow]]:
    if csv.field_size_limit() < CSV_FIELD_LIMIT:  # process-wide, and only ever raised
        csv.field_size_limit(CSV_FIELD_LIMIT)
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as fh:
        lines = fh.readlines()  # split at \n, \r\n or \r, as csv does; bad bytes kept as U+DC80-U+DCFF
    if lines:
        lines[0] = lines[0].removeprefix(BOM)
    header: list[str] | None = None  # None while the header itself is being read

    def malformed(fields: list[str], first: int, end: int) -> str | None:
        """Why the record on lines[first:end] cannot be a row (see the module doc), or None."""
        for number in range(first, end):
            if bad := NOT_UTF8.search(lines[number]):
                return f"invalid UTF-8: byte 0x{ord(bad.group()) - 0xDC00:02x} on line {number + 1}"
        if header is None:
            return None
        if len(fields) != len(header):
            return f"malformed CSV (line {first + 1}): {len(fields)} fields, the header has {len(header)}"
        swallowed = _swallowed_row(fields)
        if swallowed is not None:
            return (
                f"malformed CSV (line {first + 1}): unterminated quote? The quoted value that starts on "
                f"this line spans lines, and line {first + 1 + swallowed} in it holds the rest of a row; "
                "not merged into one value"
            )
        return None

    number = 0
    for fields in _csv_records(lines, malformed):
        if header is None:
            if isinstance(fields, _BadRow) or len(set(fields)) < len(fields):
                reason = fields if isinstance(fields, _BadRow) else f"a column is named twice: {fields}"
                yield "file", _BadRow(f"unusable CSV header: {reason}")
                return
            header = fields
            continue
        number += 1
        yield f"row {number}", fields if isinstance(fields, _BadRow) else _csv_row(header, fields)
    if header is None:
        yield "file", _BadRow("malformed CSV: no header, the file holds only blank lines")


def _csv_row(header: list[str], fields: list[str]) -> dict:
    """A record as a row: markers of a missing value that spreadsheet and data-frame tools
    write (NA, null, ...) are missing in every column but the prompt, whose text is kept as is."""
    return {
        name: None if name != "prompt" and value.strip() in MISSING_MARKERS else value
        for name, value in zip(header, fields)
    }


def _csv_records(
    lines: list[str],
    malformed: Callable[[list[str], int, int], str | None],
) -> Iterator[list[str] | _BadRow]:
    """Each record's fields, or why it is malformed; blank lines skipped. After a malformed
    record, parsing resumes on the line after the one it started on, so what it swallowed
    is read again as records of their own."""
    start = 0
    while start < len(lines):
        reader = csv.reader((lines[i] for i in range(start, len(lines))), strict=True)
        next_start = start  # 0-based line the next record starts on
        try:
            for fields in reader:
                record_start, next_start = next_start, start + reader.line_num
                if fields:
                    problem = malformed(fields, record_start, next_start)
                    yield _BadRow(problem) if problem else fields
                    if problem:
                        break
            else:
                return
        except csv.Error as exc:
            record_start = next_start
            yield _BadRow(f"malformed CSV (line {record_start + 1}): {exc}")
        start = record_start + 1


def _swallowed_row(fields: list[str]) -> int | None:
    """Which line (0 = the first) of the record's first multi-line value holds a row: the
    first line the rest of the record's own row, a later line a whole row (see module doc)."""
    column = next((i for i, value in enumerate(fields) if "\n" in value or "\r" in value), None)
    if column is None:
        return None
    for k, line in enumerate(LINE_BREAK.split(fields[column])):
        start = column if k == 0 else 0
        parts = line.split(",")
        if len(parts) == len(fields) - start:
            kinds = [(_kind(part), _kind(fields[c])) for c, part in enumerate(parts, start) if c != column]
            if any(a == b in ("bool", "number") for a, b in kinds) and all(
                a == b or "empty" in (a, b) for a, b in kinds
            ):
                return k
    return None


def _kind(cell: str) -> str:
    """ "empty", "bool" (true/false), "number" or "text"."""
    cell = cell.strip()
    if not cell:
        return "empty"
    if cell.lower() in ("true", "false"):
        return "bool"
    try:
        float(cell)
    except ValueError:
        return "text"
    return "number"


READERS = {"jsonl": _jsonl, "csv": _csv, "parquet": _parquet}
