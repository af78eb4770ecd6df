"""Load outcome logs from files, globs or folders into one validated table.

Sources are found by a registry of loaders (`LOADERS`): a Hugging Face dataset (data.hf_datasets:
a save_to_disk folder, a hub dataset, a Dataset object), a RouteLLM-style folder and an SDK
outcome-log folder (data.sdk_logs) go through their adapters, anything else is read as
canonical-schema files. Every rejected
row or file is reported (file, location, reason) and written to a rejects file; the
run stops when more than `max_reject_share` of what was read is bad. Readers of off-policy
estimates also reject a row whose propensity is below their floor (`min_propensity`).

Folders are walked by real path: each real file or folder is read once, however many
symlinks, aliases or arguments lead to it (a symlink loop is entered once, with a
warning). A path that is neither a file nor a folder (a dangling symlink) and a folder
that cannot be listed are `file` rejects that say why.
"""

from __future__ import annotations

import glob
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from data.hf_datasets import DatasetLog, iter_dataset, names_dataset, open_dataset, source_name
from data.readers import FORMATS, RawRow, read_table
from data.routellm import (
    is_correctness_csv,
    is_mt_bench_folder,
    is_routellm_folder,
    iter_correctness_csv,
    iter_mt_bench,
    iter_routellm,
)
from data.schema import COLUMNS, TOKENS, Reject, RowError, Unlabelled, check_row
from data.sdk_logs import is_outcome_log_folder, iter_outcome_log

log = logging.getLogger(__name__)


class DataQualityError(RuntimeError):
    """Too many rows were rejected, or nothing usable was found."""


# What a command's --data (or --logs) takes: docs/log-format.md says how each is read.
SOURCES_HELP = (
    "log file, glob, folder, or Hugging Face dataset: a save_to_disk folder (PATH::SPLIT for a "
    "DatasetDict) or hf://OWNER/NAME@REVISION::SPLIT from the local HF cache"
)


def _children(path: Path) -> list[Path]:
    """The log files and sub-folders of a folder. Names that start with "_" or "." are
    markers and metadata (_SUCCESS, _metadata.json, .crc), not logs. A dangling symlink
    with a log's name is kept: reading it reports it. Raises OSError if it cannot be listed."""
    return [
        child
        for child in sorted(path.iterdir())
        if not child.name.startswith(("_", ".")) and (child.is_dir() or child.suffix.lower() in FORMATS)
    ]


def _walk(path: Path | DatasetLog, seen: set[str]) -> Iterator[Path | DatasetLog]:
    """The loading units under `path`: each real file or folder once, however many symlinks
    or arguments lead to it (a symlink loop is entered once); each dataset once too. `seen` holds
    the real paths (and dataset keys) already visited. A folder that cannot be listed is a unit
    itself: reading it says why."""
    real = path.key if isinstance(path, DatasetLog) else os.path.realpath(path)
    if real in seen:
        log.warning("%s leads to %s, which is already read (a symlink loop or alias): skipped", path, real)
        return
    seen.add(real)
    if loader_for(path) != "folder":
        yield path
        return
    try:
        children = _children(path)
    except OSError:
        yield path
        return
    for child in children:
        yield from _walk(child, seen)


def _folder(path: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """Every log inside a folder, each real file once (see _walk), each dispatched through LOADERS."""
    try:
        children = _children(path)
    except OSError as exc:
        rejects.append(Reject(str(path), "file", f"cannot list folder: {exc.strerror or exc}"))
        return
    seen = {os.path.realpath(path)}
    for child in children:
        for unit in _walk(child, seen):
            yield from iter_path(unit, rejects)


def _not_a_log(path: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """Neither a file nor a folder: a dangling symlink, a path that vanished, a pipe or device."""
    try:
        os.stat(path)
        reason = "not a regular file or folder"
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if path.is_symlink():
            reason = f"dangling symlink to {os.readlink(path)!r}: {reason}"
    rejects.append(Reject(str(path), "file", reason))
    yield from ()


# (does this unit belong to me?, its rows). First match wins; the last is the catch-all. A unit is a
# Path, or a dataset opened from what the user named (data.hf_datasets), which only the first claims.
LOADERS: dict[str, tuple[Callable[[Path], bool], Callable[[Path, list[Reject]], Iterator[RawRow]]]] = {
    "hf-dataset": (names_dataset, iter_dataset),
    "routellm": (is_routellm_folder, iter_routellm),
    "sdk-outcome-log": (is_outcome_log_folder, iter_outcome_log),
    "routellm-mt-bench": (is_mt_bench_folder, iter_mt_bench),
    "routellm-correctness-csv": (is_correctness_csv, iter_correctness_csv),
    "folder": (Path.is_dir, _folder),
    "canonical": (Path.is_file, read_table),
    "not-a-log": (lambda path: True, _not_a_log),
}


def loader_for(path: Path) -> str:
    """The name of the first loader in LOADERS that claims `path`."""
    return next(name for name, (claims, _) in LOADERS.items() if claims(path))


def iter_path(path: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """Rows of one file or folder, read by the first loader that claims it."""
    yield from LOADERS[loader_for(path)][1](path, rejects)


def loading_units(paths: Iterable) -> list[Path | DatasetLog]:
    """The independently readable pieces under `paths`: each log file, each folder an adapter
    reads as a whole (RouteLLM), and each dataset (data.hf_datasets), each real one once (see
    _walk). Anything that is not a log (a dangling symlink) is a unit too, so that reading it
    reports it. The Dask engine makes one partition of each."""
    seen: set[str] = set()
    return [unit for path in expand(paths) for unit in _walk(path, seen)]


def expand(paths: Iterable) -> list[Path | DatasetLog]:
    """Files, folders and glob patterns -> existing paths (a dangling symlink among them is
    kept, to be reported); a pattern matching nothing is an error. A dataset (a save_to_disk
    folder, PATH::SPLIT, hf://..., a Dataset object) is opened here, so that one that cannot
    be read stops the run before anything is read (data.hf_datasets.DatasetSourceError)."""
    found: list[Path | DatasetLog] = []
    for item in paths:
        dataset = open_dataset(item)
        if dataset is not None:
            found.append(dataset)
            continue
        text = str(item)
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        existing = [Path(m) for m in matches if os.path.lexists(m)]
        if not existing:
            raise FileNotFoundError(f"no log file or folder matches {text!r}")
        found.extend(existing)
    return found


NO_TEXT = (
    "prompt logged without its text (OutcomeLog(store_prompts=False)): only `make train` with the "
    "local engine learns from its token ids"
)
WELL_FORMED = ("unlabelled", "no_text")  # reject kinds that are not bad data
# What to do when only rows without text are left, for a command that reads prompts from their text.
TEXT_NEEDED = (
    "give it logs kept with their text (OutcomeLog(store_prompts=True)); only `make train` with the "
    "local engine learns from token ids"
)


def below_propensity_floor(propensity: float | None, floor: float) -> str | None:
    """Why a row cannot enter off-policy estimates whose propensity floor is `floor`, or None
    if it can. Weighted by 1 / propensity, one such row would outweigh the rest of the log."""
    if propensity is None or propensity >= floor:
        return None
    return (
        f"propensity {propensity!r} is below the floor {floor} of the off-policy estimates (min_propensity): "
        f"weighted by 1/propensity, this one request would count for more than {floor**-1:.0f} requests "
        "logged with propensity 1 (a wrong propensity, or a side the logging policy almost never chose)"
    )


@dataclass
class LoadedLogs:
    """Valid rows (canonical columns) plus everything that was rejected."""

    rows: list[dict]
    rejects: list[Reject] = field(default_factory=list)
    n_read: int = 0
    # Rows logged without their text (data.schema.TOKENS): kept apart, because only the local
    # training engine can use them; `without_token_rows` turns them into `no_text` rejects.
    token_rows: list[dict] = field(default_factory=list)

    @property
    def reject_share(self) -> float:
        return len(self.rejects) / max(self.n_read, 1)

    def frame(self):
        """The valid rows as a DataFrame; a missing optional text field stays None (not NaN)."""
        import pandas as pd

        from data.prepare import missing_text_as_none

        return missing_text_as_none(pd.DataFrame(self.rows, columns=list(COLUMNS)))

    def token_frame(self):
        """The rows logged without text, as a DataFrame (COLUMNS and TOKENS)."""
        import pandas as pd

        from data.prepare import missing_text_as_none

        return missing_text_as_none(pd.DataFrame(self.token_rows, columns=[*COLUMNS, TOKENS]))

    def without_token_rows(self, why: str = NO_TEXT) -> "LoadedLogs":
        """These logs with each row logged without text as a `no_text` reject saying `why`."""
        kept = [Reject(row["_file"], row["_location"], why, "no_text") for row in self.token_rows]
        return LoadedLogs(self.rows, self.rejects + kept, self.n_read)

    def extend(self, other: "LoadedLogs") -> None:
        self.rows.extend(other.rows)
        self.rejects.extend(other.rejects)
        self.token_rows.extend(other.token_rows)
        self.n_read += other.n_read

    def write_rejects(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for r in self.rejects:
                fh.write(json.dumps(r.as_dict(), ensure_ascii=False) + "\n")


def read_unit(path: Path | DatasetLog, *, min_propensity: float = 0.0) -> LoadedLogs:
    """Read and validate one loading unit (a file, a folder an adapter reads whole, or a dataset).
    Every reject counts as one unit read (a row, a line, or a whole unreadable file), so
    nothing bad is ever free. A row whose propensity is below `min_propensity` is a reject
    (below_propensity_floor)."""
    result, sources = LoadedLogs(rows=[]), {}
    for raw in iter_path(path, result.rejects):
        if raw.file not in sources:  # a folder adapter reads several files
            sources[raw.file] = Path(raw.file).stem
        try:
            row = check_row(raw.row, default_source=sources[raw.file])
        except RowError as exc:
            kind = "unlabelled" if isinstance(exc, Unlabelled) else "invalid"
            result.rejects.append(Reject(raw.file, raw.location, str(exc), kind))
            continue
        below = below_propensity_floor(row["propensity"], min_propensity)
        if below:
            result.rejects.append(Reject(raw.file, raw.location, below))
            continue
        row["request_id"] = row["request_id"] or f"{row['source']}/{raw.index}"
        if row["prompt"] is None:  # logged without its text
            result.token_rows.append({**row, "_file": raw.file, "_location": raw.location})
        else:
            result.rows.append(row)
    result.n_read = len(result.rows) + len(result.token_rows) + len(result.rejects)
    return result


def load_logs(
    paths: Iterable[str | Path],
    *,
    max_reject_share: float = 0.05,
    rejects_path: Path | None = None,
    min_propensity: float = 0.0,
) -> LoadedLogs:
    """Read and validate every row under `paths` (see module doc). Rows logged without their
    text are `no_text` rejects here: only the local training engine reads them (read_unit).
    Rows with a propensity below `min_propensity` (the floor of an off-policy reader) are rejects."""
    if not 0.0 <= max_reject_share <= 1.0:
        raise ValueError(f"max_reject_share must be in [0, 1], got {max_reject_share!r}")
    result = LoadedLogs(rows=[])
    for unit in loading_units(paths):
        result.extend(read_unit(unit, min_propensity=min_propensity))
    result = result.without_token_rows()
    if rejects_path is not None:
        result.write_rejects(rejects_path)
    check_reject_share(
        n_valid=len(result.rows),
        n_read=result.n_read,
        rejects=result.rejects,
        max_reject_share=max_reject_share,
        paths=paths,
        rejects_path=rejects_path,
    )
    return result


def check_reject_share(
    *,
    n_valid: int,
    n_read: int,
    rejects: list[Reject],
    max_reject_share: float,
    paths: Iterable[str | Path],
    rejects_path: Path | None,
) -> None:
    """Stop the run when nothing is usable or more than `max_reject_share` of what was read is bad."""
    where = f" (details: {rejects_path})" if rejects_path else ""
    unlabelled = sum(r.kind == "unlabelled" for r in rejects)
    invalid = [r for r in rejects if r.kind not in WELL_FORMED]
    if not n_valid:
        waiting = f", {unlabelled} of them requests with no outcome yet" if unlabelled else ""
        no_text = [r for r in rejects if r.kind == "no_text"]
        if no_text:  # well formed, but this command reads prompts from their text
            waiting += (
                f", {len(no_text)} of them logged without their text (OutcomeLog(store_prompts=False)): "
                f"this command reads prompts from their text; {TEXT_NEEDED}"
            )
        raise DataQualityError(
            f"no valid rows in {', '.join(map(source_name, paths))}: {len(rejects)} rejected{waiting}{where}"
        )
    # Requests still waiting for an outcome, and rows this reader cannot use although they
    # are well formed (logged without text), are reported, not counted as bad data.
    share = len(invalid) / max(n_read - unlabelled, 1)
    if share > max_reject_share:
        examples = "; ".join(f"{r.file} {r.location}: {r.reason}" for r in invalid[:3])
        raise DataQualityError(
            f"{len(invalid)} of {n_read - unlabelled} rows/files rejected "
            f"({share:.1%} > allowed {max_reject_share:.1%}){where}. First: {examples}"
        )
