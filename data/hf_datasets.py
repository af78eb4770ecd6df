"""Hugging Face datasets as outcome logs, read row by row through the same checks as a file.

A dataset is named wherever a log path is (`--data`, `--logs`, TrainConfig.data,
EvalConfig.logs, data.logs.load_logs):

  PATH                                a folder written by Dataset.save_to_disk
                                      (it holds dataset_info.json and state.json)
  PATH::SPLIT                         one split of a folder written by DatasetDict.save_to_disk
                                      (it holds dataset_dict.json)
  hf://OWNER/NAME[@REVISION]::SPLIT   a hub dataset, through datasets.load_dataset(revision=...):
                                      offline (HF_HUB_OFFLINE=1) from the local cache, or not at all

and in Python a `datasets.Dataset` or `datasets.IterableDataset` object is a log source too.
A DatasetDict named without a split is an error listing its splits: which split is the log
is never guessed. Offline, datasets serves the latest cached version of a hub dataset
whatever revision is asked; a revision is therefore checked against the commit the cached
rows come from (a commit id, or the branch or tag as the hub cache recorded it when it was
downloaded), and a mismatch is an error rather than other rows.

The rows are read a batch at a time in the dataset's Python form (its own output format, such
as numpy or torch, set aside), never as one frame: a memory-mapped or streamed dataset stays
where it is. Each row goes through data.schema.check_row like a row of a file (data.logs.read_unit);
a bad one is a reject at `row N` (1-based) of the dataset's name, and a dataset that stops being
readable part-way is one `file` reject, the rows before it kept.

`datasets` is imported only when a dataset is opened, so the SDK and the commands that never
read one do not pay for it.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Iterator

from data.readers import RawRow, unreadable
from data.schema import Reject

HUB = "hf://"
SPLIT = "::"
OBJECT = "dataset:"  # how reports name a dataset given as a Python object
BATCH_ROWS = 1000  # rows taken from the dataset at a time
_HUB_SPEC = re.compile(r"hf://(?P<repo>[\w.-]+(?:/[\w.-]+)?)(?:@(?P<revision>[^:@]+))?(?:::(?P<split>.+))?")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


class DatasetSourceError(ValueError):
    """A dataset named as a log cannot be read as one; the message names it and says why."""


@dataclass(frozen=True)
class DatasetLog:
    """One dataset, opened: a loading unit of data.logs. `name` is how rejects and messages
    name it (the text it was given as, or `dataset:<label>` for an object); `key` tells two
    names of the same dataset apart from two datasets, so each is read once."""

    name: str
    key: str
    dataset: Any = field(repr=False, compare=False)

    def __str__(self) -> str:
        return self.name


def is_saved_dataset(path: str | PurePath) -> bool:
    """A folder written by Dataset.save_to_disk or DatasetDict.save_to_disk, told by its files."""
    path = Path(path)
    return path.is_dir() and (
        ((path / "dataset_info.json").is_file() and (path / "state.json").is_file())
        or (path / "dataset_dict.json").is_file()
    )


def is_dataset_object(item: Any) -> bool:
    """A datasets.Dataset, IterableDataset or one of their dicts of splits. Nobody holds one
    unless `datasets` is imported, so this never imports it."""
    datasets = sys.modules.get("datasets")
    return datasets is not None and isinstance(
        item, (datasets.Dataset, datasets.IterableDataset, datasets.DatasetDict, datasets.IterableDatasetDict)
    )


def _spec(item: Any) -> str | None:
    """The text of `item` when it names a dataset (see the module doc), else None. A unit that
    comes back as a Path (the Dask engine sends units to its workers as text) has lost one
    slash of hf://, which is put back."""
    if not isinstance(item, (str, PurePath)):
        return None
    text = os.fspath(item)
    if isinstance(item, PurePath) and text.startswith("hf:/") and not text.startswith(HUB):
        text = HUB + text.removeprefix("hf:/")
    if text.startswith(HUB) or is_saved_dataset(text):
        return text
    if SPLIT in text and os.path.isdir(text.rpartition(SPLIT)[0]):  # opening it says if it is not a dataset
        return text
    if text.startswith(OBJECT) and not os.path.lexists(text):
        return text
    return None


def names_dataset(unit: Any) -> bool:
    """Does this loading unit (data.logs.LOADERS) hold a dataset: an opened one, a saved folder
    met inside a folder, or a dataset's name given back as text."""
    return isinstance(unit, DatasetLog) or _spec(unit) is not None


def open_dataset(item: Any) -> DatasetLog | None:
    """`item` opened when it names a dataset (module doc), None when it is an ordinary log path.
    Raises DatasetSourceError when it names one that cannot be read."""
    if is_dataset_object(item):
        name = object_name(item)
        return DatasetLog(name, f"object {id(item)}", one_split(item, None, name))
    text = _spec(item)
    if text is None:
        return None
    if text.startswith(HUB):
        return _hub(text)
    if text.startswith(OBJECT):
        raise DatasetSourceError(
            f"{text}: a dataset given as a Python object cannot be opened again from its name "
            "(the Dask engine reads each log in another process); save it with save_to_disk "
            "and give the folder"
        )
    folder, _, split = text.rpartition(SPLIT) if SPLIT in text else (text, "", None)
    from datasets import load_from_disk

    try:
        loaded = load_from_disk(folder)
    except Exception as exc:
        raise DatasetSourceError(
            f"{text}: cannot open {folder} as a folder written by save_to_disk: {type(exc).__name__}: {exc}"
        ) from exc
    dataset = one_split(loaded, split, text)
    return DatasetLog(text, f"{os.path.realpath(folder)}{SPLIT}{split or ''}", dataset)


def one_split(loaded: Any, split: str | None, name: str) -> Any:
    """The Dataset or IterableDataset `name` stands for: `loaded` itself, or its split `split`
    when it is a dict of splits (a DatasetDict). A dict without a split named, a split it does
    not have, and a split named of a single dataset are errors saying what there is."""
    if not isinstance(loaded, dict):  # DatasetDict and IterableDatasetDict are dicts of splits
        if split is not None:
            raise DatasetSourceError(
                f"{name}: a single dataset (saved with Dataset.save_to_disk), not a DatasetDict: "
                f"it has no split {split!r}; name it without {SPLIT}{split}"
            )
        return loaded
    splits = ", ".join(loaded)
    if split is None:
        first = next(iter(loaded), "SPLIT")
        how = (
            f"pass one of them, e.g. dataset[{first!r}]"
            if name.startswith(OBJECT)
            else f"name the one to read, e.g. {name}{SPLIT}{first}"
        )
        raise DatasetSourceError(f"{name} is a DatasetDict of splits {splits}: {how}")
    if split not in loaded:
        raise DatasetSourceError(f"{name}: no split {split!r}; its splits: {splits}")
    return loaded[split]


def _hub(spec: str) -> DatasetLog:
    """A hub dataset through datasets.load_dataset, its revision checked (module doc)."""
    import datasets

    match = _HUB_SPEC.fullmatch(spec)
    if match is None:
        raise DatasetSourceError(f"{spec!r} is not a hub dataset name: write hf://OWNER/NAME[@REVISION]::SPLIT")
    repo, revision, split = match["repo"], match["revision"], match["split"]
    try:
        loaded = datasets.load_dataset(repo, revision=revision, split=split)
    except Exception as exc:
        hint = (
            f"Offline (HF_HUB_OFFLINE=1), a hub dataset is read from the local cache "
            f"({datasets.config.HF_DATASETS_CACHE}) only: load it there once on a connected machine, or save "
            "it with save_to_disk and give the folder"
            if datasets.config.HF_HUB_OFFLINE
            else "Is the hub reachable from this machine?"
        )
        raise DatasetSourceError(
            f"{spec}: datasets.load_dataset({repo!r}, revision={revision!r}, split={split!r}) "
            f"failed: {type(exc).__name__}: {exc}. {hint}"
        ) from exc
    dataset = one_split(loaded, None, spec) if split is None else loaded
    if revision is not None:
        check_revision(spec, repo, revision, loaded_commit(dataset))
    return DatasetLog(spec, spec, dataset)


def loaded_commit(dataset: Any) -> str | None:
    """The hub commit a dataset loaded by load_dataset was prepared from: datasets keeps it in
    <cache>/<owner>___<name>/<config>/<version>/<commit>/. None when it holds no cache file."""
    files = getattr(dataset, "cache_files", None)
    return Path(files[0]["filename"]).parent.name if files else None


def revision_commit(repo: str, revision: str) -> str | None:
    """The commit `revision` of hub dataset `repo` is: what the hub cache recorded for the
    branch or tag when it was downloaded (refs/<revision>), else the revision itself when it is
    a commit id (or a prefix of one), else None."""
    from huggingface_hub import constants

    ref = Path(constants.HF_HUB_CACHE) / f"datasets--{repo.replace('/', '--')}" / "refs" / revision
    if ref.is_file():
        return ref.read_text(encoding="utf-8").strip()
    return revision if _COMMIT.fullmatch(revision) else None


def check_revision(spec: str, repo: str, revision: str, loaded: str | None) -> None:
    """DatasetSourceError unless the rows loaded come from `revision`: offline, load_dataset
    returns the latest cached version of `repo` whatever revision is asked."""
    expected = revision_commit(repo, revision)
    if expected is not None and loaded is not None and loaded.startswith(expected):
        return
    known = f"is commit {expected}" if expected else "is not recorded in the local hub cache"
    raise DatasetSourceError(
        f"{spec}: the cached rows of {repo} come from commit {loaded}, and revision {revision!r} "
        f"{known}. Offline, datasets serves the latest cached version whatever revision is "
        "asked: load that revision once on a connected machine, or name the commit you have"
    )


def object_name(item: Any) -> str:
    """How reports name a dataset given as an object: dataset:<its name, else its fingerprint,
    else "unnamed">, with [split] when it knows its split."""
    name = getattr(getattr(item, "info", None), "dataset_name", None) or getattr(item, "_fingerprint", None)
    split = getattr(item, "split", None)
    return f"{OBJECT}{name or 'unnamed'}" + (f"[{split}]" if split else "")


def source_name(item: Any) -> str:
    """How messages and saved configurations name one log source (a path, a dataset's name, or
    an object's name), instead of an object's multi-line repr."""
    return object_name(item) if is_dataset_object(item) else str(item)


def iter_dataset(unit: Any, rejects: list[Reject]) -> Iterator[RawRow]:
    """The rows of one dataset (a DatasetLog, or what names one; see names_dataset) with their
    location `row N`; a dataset that stops being readable is a `file` reject (data.readers.unreadable),
    the rows read before it kept; an empty one is a `file` reject too."""
    log = unit if isinstance(unit, DatasetLog) else open_dataset(unit)
    index = 0
    try:
        for row in python_rows(log.dataset):
            yield RawRow(log.name, f"row {index + 1}", row, index)
            index += 1
    except Exception as exc:  # the dataset (or the rest of it) is unusable; rows already read stay
        rejects.append(unreadable(log.name, "dataset", index, exc))
        return
    if index == 0:
        rejects.append(Reject(log.name, "file", "empty dataset (0 rows)"))


def python_rows(dataset: Any) -> Iterator[dict]:
    """Each row as a dict of Python values, BATCH_ROWS at a time. A batch is a dict of columns;
    a row of an IterableDataset that lacks a column has None there (missing, as the schema reads it)."""
    for batch in dataset.with_format(None).iter(batch_size=BATCH_ROWS):
        columns = list(batch)
        for values in zip(*batch.values()):
            yield dict(zip(columns, values))
