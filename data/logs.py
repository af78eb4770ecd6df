"""Load outcome logs from files, globs or folders into one validated table.

Sources are found by a registry of loaders (`LOADERS`): a RouteLLM-style folder goes
through its adapter, anything else is read as canonical-schema files. Every rejected
row or file is reported (file, location, reason) and written to a rejects file; the
run stops when more than `max_reject_share` of what was read is bad.
"""
from __future__ import annotations

import glob
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from data.readers import FORMATS, RawRow, read_table
from data.routellm import (is_correctness_csv, is_mt_bench_folder, is_routellm_folder, iter_correctness_csv,
                           iter_mt_bench, iter_routellm)
from data.schema import COLUMNS, Reject, RowError, check_row


class DataQualityError(RuntimeError):
    """Too many rows were rejected, or nothing usable was found."""


def _folder(path: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """Every log inside a folder, each child dispatched through LOADERS again. Names that
    start with "_" or "." are markers and metadata (_SUCCESS, _metadata.json, .crc), not logs."""
    for child in sorted(path.iterdir()):
        if child.name.startswith(("_", ".")):
            continue
        if child.is_dir() or child.suffix.lower() in FORMATS:
            yield from iter_path(child, rejects)


# (does this path belong to me?, its rows). First match wins; the last is the catch-all.
LOADERS: dict[str, tuple[Callable[[Path], bool], Callable[[Path, list[Reject]], Iterator[RawRow]]]] = {
    "routellm": (is_routellm_folder, iter_routellm),
    "routellm-mt-bench": (is_mt_bench_folder, iter_mt_bench),
    "routellm-correctness-csv": (is_correctness_csv, iter_correctness_csv),
    "folder": (Path.is_dir, _folder),
    "canonical": (Path.is_file, read_table),
}


def iter_path(path: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """Rows of one file or folder, read by the first loader that claims it."""
    _, read = next(loader for loader in LOADERS.values() if loader[0](path))
    yield from read(path, rejects)


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """Files, folders and glob patterns -> existing paths; a pattern matching nothing is an error."""
    found: list[Path] = []
    for item in paths:
        text = str(item)
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        existing = [Path(m) for m in matches if Path(m).exists()]
        if not existing:
            raise FileNotFoundError(f"no log file or folder matches {text!r}")
        found.extend(existing)
    return found


@dataclass
class LoadedLogs:
    """Valid rows (canonical columns) plus everything that was rejected."""

    rows: list[dict]
    rejects: list[Reject] = field(default_factory=list)
    n_read: int = 0

    @property
    def reject_share(self) -> float:
        return len(self.rejects) / max(self.n_read, 1)

    def frame(self):
        """The valid rows as a DataFrame; a missing optional text field stays None (not NaN)."""
        import pandas as pd

        frame = pd.DataFrame(self.rows, columns=list(COLUMNS))
        for column in ("request_id", "domain", "precision", "source"):
            # pandas >= 3 stores text as a string dtype whose missing value is NaN.
            frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
        return frame

    def write_rejects(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for r in self.rejects:
                fh.write(json.dumps(r.as_dict(), ensure_ascii=False) + "\n")


def load_logs(paths: Iterable[str | Path], *, max_reject_share: float = 0.05,
              rejects_path: Path | None = None) -> LoadedLogs:
    """Read and validate every row under `paths` (see module doc)."""
    if not 0.0 <= max_reject_share <= 1.0:
        raise ValueError(f"max_reject_share must be in [0, 1], got {max_reject_share!r}")
    result = LoadedLogs(rows=[])
    for path in expand(paths):
        for raw in iter_path(path, result.rejects):
            result.n_read += 1
            try:
                row = check_row(raw.row, default_source=Path(raw.file).stem)
            except RowError as exc:
                result.rejects.append(Reject(raw.file, raw.location, str(exc)))
                continue
            row["request_id"] = row["request_id"] or f"{row['source']}/{raw.index}"
            result.rows.append(row)
    # Whole-file rejects count as one bad unit each, so an unreadable file is never free.
    result.n_read += sum(r.location == "file" for r in result.rejects)
    if rejects_path is not None:
        result.write_rejects(rejects_path)
    where = f" (details: {rejects_path})" if rejects_path else ""
    if not result.rows:
        raise DataQualityError(f"no valid rows in {', '.join(map(str, paths))}: "
                               f"{len(result.rejects)} rejected{where}")
    if result.reject_share > max_reject_share:
        examples = "; ".join(f"{r.file} {r.location}: {r.reason}" for r in result.rejects[:3])
        raise DataQualityError(
            f"{len(result.rejects)} of {result.n_read} rows/files rejected "
            f"({result.reject_share:.1%} > allowed {max_reject_share:.1%}){where}. First: {examples}")
    return result
