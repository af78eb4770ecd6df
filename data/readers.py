"""Read one log file (JSONL, CSV or Parquet) through `datasets`, row by row, with locations.

A file that cannot be read at all becomes one Reject for the whole file; a JSONL line
that is not a JSON object becomes a Reject for that line. Nothing is dropped silently.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from data.schema import Reject

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}


@dataclass(frozen=True)
class RawRow:
    """One unvalidated row and where it came from."""

    file: str
    location: str
    row: dict
    index: int = 0  # 0-based position among the file's rows, for stable ids


def format_of(path: Path) -> str:
    """The reader name for a file, from its extension."""
    try:
        return FORMATS[path.suffix.lower()]
    except KeyError:
        raise ValueError(f"{path}: unsupported log format {path.suffix!r}; "
                         f"use one of {', '.join(sorted(FORMATS))}") from None


def _load(builder: str, path: Path):
    import datasets

    datasets.disable_progress_bars()
    cache_dir = os.environ.get("ROUTER_HF_CACHE", str(Path("data/cache/hf_datasets").resolve()))
    return datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=cache_dir)


def read_table(path: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """Yield the rows of one file; append a Reject for each unreadable line or file."""
    path = Path(path)
    fmt = format_of(path)
    try:
        dataset = _load("text" if fmt == "jsonl" else fmt, path)
    except Exception as exc:  # any parser error: the whole file is unusable
        rejects.append(Reject(str(path), "file", f"cannot read {fmt}: {type(exc).__name__}: {exc}"))
        return
    if fmt != "jsonl":
        for index, row in enumerate(dataset):
            # Row numbers are 1-based data rows (a CSV header is not counted).
            yield RawRow(str(path), f"row {index + 1}", row, index)
        return
    index = 0
    for number, line in enumerate(dataset["text"], start=1):
        if not line.strip():
            continue  # blank lines separate nothing in JSONL; they are not rows
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            rejects.append(Reject(str(path), f"line {number}", f"unparsable JSON: {exc.msg} at column {exc.colno}"))
            continue
        if not isinstance(obj, dict):
            rejects.append(Reject(str(path), f"line {number}", f"not a JSON object: {type(obj).__name__}"))
            continue
        yield RawRow(str(path), f"line {number}", obj, index)
        index += 1
