"""The Dask engine's building blocks: a cluster to run on, logs as partitions, and the
per-partition steps. Each step calls the code the local engine uses (read_unit,
check_row, split_and_label, FeatureRecipe), so both engines compute the
same rows and features; only where the rows live differs.

One partition per loading unit (a log file, or a folder an adapter reads whole): write
large logs as many files (shards), as `make simulate` does.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from data.logs import read_unit
from data.prepare import QUALITY_AND_COSTS, content_sum64, missing_text_as_none
from data.schema import COLUMNS, RESPONSE_COLUMNS, RESPONSE_NUMBERS
from training.partial import COUNTED, WEIGHT_COLUMNS, partial_report, with_outcome_weights
from training.stages import return_freed_memory  # noqa: F401  (the client calls it here)

REJECT_COLUMNS = ("reject_file", "reject_location", "reject_reason", "reject_kind")
UNIT_COLUMNS = (*COLUMNS, *REJECT_COLUMNS)
# What the router's rows keep once repeats are merged: edge answers go to the acceptance check
# only; each outcome's weight (training.partial) comes along.
ROUTING_COLUMNS = (*(c for c in COLUMNS if c not in RESPONSE_COLUMNS), *WEIGHT_COLUMNS)


NO_TEXT = (
    "prompt logged without its text (OutcomeLog(store_prompts=False)): the Dask engine reads text rows "
    "only; train with ENGINE=local to learn from its token ids"
)


class EngineError(RuntimeError):
    """The cluster could not be reached, or lost a worker: the run stops with the cause."""


NUMBER_COLUMNS = (*QUALITY_AND_COSTS, *RESPONSE_NUMBERS, "propensity")


def _text_columns() -> list[str]:
    return [c for c in UNIT_COLUMNS if c not in NUMBER_COLUMNS]


def frame_meta(columns, **extra) -> pd.DataFrame:
    """An empty frame of log columns (text as object, numbers as float) plus `extra` name=dtype."""
    kinds = {c: (object if c in _text_columns() else float) for c in columns}
    return pd.DataFrame({c: pd.Series(dtype=kind) for c, kind in {**kinds, **extra}.items()})


def _kind(column: str):
    return PREPARED.get(column, object if column in _text_columns() else float)


def unit_frame(path: str) -> pd.DataFrame:
    """One loading unit read and validated (data.logs.read_unit): its valid rows, then one
    row per reject carrying the file, location and reason. Rows = rows read."""
    loaded = read_unit(Path(path)).without_token_rows(NO_TEXT)
    valid = loaded.frame()
    rejects = pd.DataFrame(
        [(r.file, r.location, r.reason, r.kind) for r in loaded.rejects], columns=list(REJECT_COLUMNS)
    )
    frame = pd.concat([valid, rejects], ignore_index=True) if len(rejects) else valid
    frame = missing_text_as_none(frame.reindex(columns=list(UNIT_COLUMNS)), _text_columns())
    return frame.astype({c: float for c in NUMBER_COLUMNS})


def prompt_keys(prompts: pd.Series) -> np.ndarray:
    """64-bit content key of each prompt (for finding duplicates across partitions): the first
    8 bytes of its SHA-256 (as data.prepare.prompt_hash), the same on every worker and machine,
    and 8x faster than pandas' SipHash of object columns (35 ms against 283 ms for 25,000 prompts)."""
    import hashlib

    digests = b"".join(hashlib.sha256(p.encode("utf-8", "surrogatepass")).digest()[:8] for p in prompts)
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


def with_keys(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(key=prompt_keys(frame["prompt"]))


def with_weights(frame: pd.DataFrame, estimator: str, max_weight: float) -> pd.DataFrame:
    """training.partial.with_outcome_weights on one partition (the weights are row by row)."""
    return with_outcome_weights(frame, estimator=estimator, max_weight=max_weight)


def outcome_counts(frame: pd.DataFrame, estimator: str, max_weight: float) -> pd.DataFrame:
    """This partition's training.partial.partial_report counts, as one row."""
    report = partial_report(frame, estimator=estimator, max_weight=max_weight)
    return pd.DataFrame({k: [report.get(k, 0)] for k in COUNTED})


def content_digest(frame: pd.DataFrame) -> pd.DataFrame:
    """This partition's share of data.prepare.content_sum64, as one row."""
    return pd.DataFrame({"digest": [str(content_sum64(frame))]})


def prepare_partition(frame: pd.DataFrame, config) -> pd.DataFrame:
    """Split, label (as the local engine) and sampling number of each row; `config` is the TrainConfig."""
    from training.engines.base import split_and_label
    from training.sampling import sample_numbers

    frame = missing_text_as_none(frame.copy())
    return split_and_label(frame, config).assign(sample_u=sample_numbers(frame["prompt"], config))


def raw_embedding_partition(frame: pd.DataFrame, recipe) -> pd.DataFrame:
    """The raw (unprojected) embedding of each row, for fitting the projection."""
    from training.featurize import n_scalar_features

    matrix = recipe.transform(frame["prompt"].tolist(), frame["precision"].tolist())
    embedding = matrix[:, n_scalar_features(recipe.spec) :]
    return pd.DataFrame(embedding, columns=[f"raw_{i}" for i in range(embedding.shape[1])], index=frame.index)


TOKEN_IDS = "token_ids"  # feature_partition(with_tokens=True): each row's token ids, one array a row


def feature_partition(
    frame: pd.DataFrame,
    recipe,
    *,
    keep: tuple[str, ...] = (),
    blank_precision: float = 0.0,
    seed: int = 0,
    with_tokens: bool = False,
    tokens_below: float | None = None,
    partition_info: dict | None = None,
) -> pd.DataFrame:
    """Serving features of each row (columns = spec.feature_names) plus the `keep` columns and,
    `with_tokens`, TOKEN_IDS (None where the recipe computes no ids: only a token table does).
    `tokens_below`: TOKEN_IDS only for the rows whose sampling number (`sample_u`) is below it,
    None elsewhere (the lexical regressions' sample, tokenized once with the features).
    `blank_precision` zeroes the declared precision on that share of rows, drawn from a
    generator seeded by (seed, partition number), as the local engine does on its train rows."""
    from training.model import blank_declared_precision

    names = recipe.spec.feature_names
    matrix, tokens = recipe.featurizer().transform_with_tokens(frame["prompt"].tolist(), frame["precision"].tolist())
    if blank_precision:
        number = (partition_info or {}).get("number", 0)
        matrix = blank_declared_precision(
            matrix, names, recipe.spec.precisions, blank_precision, np.random.default_rng([seed, number])
        )
    out = pd.DataFrame(matrix, columns=names, index=frame.index)
    for column in keep:
        out[column] = frame[column].to_numpy()
    if with_tokens:
        out[TOKEN_IDS] = pd.Series(
            tokens.per_row() if tokens is not None else [None] * len(frame), index=frame.index, dtype=object
        )
    elif tokens_below is not None:
        chosen = frame["sample_u"].to_numpy() < tokens_below
        ids = np.full(len(frame), None, dtype=object)
        if tokens is not None and chosen.any():
            ids[np.flatnonzero(chosen)] = tokens.subset(chosen).per_row()
        out[TOKEN_IDS] = pd.Series(ids, index=frame.index, dtype=object)
    return out


def margin_partition(frame: pd.DataFrame, model: Any) -> pd.DataFrame:
    """The rows with each outcome's lexical margin (LEXICAL_NAMES, float32) from their token ids
    (TOKEN_IDS): what the bundle's graph computes for them, here on the worker that holds them
    (`model`: training.lexical.LexicalModel)."""
    from serving.features._spec import LEXICAL_NAMES
    from training.featurize import TokenRows

    margins = model.margins_of_tokens(TokenRows.from_rows(frame[TOKEN_IDS].tolist()))
    return frame.assign(**{name: margins[:, i] for i, name in enumerate(LEXICAL_NAMES)})


def margin_meta(meta: pd.DataFrame) -> pd.DataFrame:
    """The empty frame margin_partition returns for a partition like `meta`."""
    from serving.features._spec import LEXICAL_NAMES

    return meta.assign(**{name: pd.Series(dtype=np.float32) for name in LEXICAL_NAMES})


def counted_partition(frame: pd.DataFrame, recipe, *, keep: tuple[str, ...]) -> pd.DataFrame:
    """The `keep` columns of each row and its token count (the n_tokens feature, as
    feature_partition computes it), without the embedding: for rows the client needs as
    rows rather than as features (the training sample the reference policy is fitted on)."""
    scalars, _ = recipe.featurizer().prepare(frame["prompt"].tolist(), frame["precision"].tolist())
    out = frame[list(keep)].copy()
    out["n_tokens"] = scalars[:, recipe.spec.feature_names.index("n_tokens")]
    return out


def counted_meta(keep: tuple[str, ...]) -> pd.DataFrame:
    """The empty frame counted_partition returns."""
    return frame_meta((), **{c: _kind(c) for c in keep}, n_tokens=np.float32)


def feature_meta(recipe, keep: tuple[str, ...] = (), with_tokens: bool = False) -> pd.DataFrame:
    """The empty frame feature_partition returns."""
    return frame_meta(
        (),
        **{n: np.float32 for n in recipe.spec.feature_names},
        **{c: _kind(c) for c in keep},
        **({TOKEN_IDS: object} if with_tokens else {}),
    )


PREPARED = {"n_merged": np.int64, "split": object, "label": np.int64, "sample_u": float}
CHECKPOINT_COLUMNS = (*ROUTING_COLUMNS, "key")  # what the later passes read of each validated row


def checkpoint_partition(
    frame: pd.DataFrame, folder: str, columns: tuple[str, ...] = CHECKPOINT_COLUMNS, partition_info: dict | None = None
) -> pd.DataFrame:
    """Write this partition's rows (`columns`: by default the validated rows' CHECKPOINT_COLUMNS)
    to `folder`/part-NNNNN.parquet, so that the later passes read them back instead of
    reading and validating the logs again, or of holding them in memory; returns one row:
    how many were written."""
    path = checkpoint_file(folder, (partition_info or {}).get("number", 0))
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        frame[list(columns)].reset_index(drop=True).to_parquet(path, index=False)
    except OSError as exc:
        raise EngineError(
            f"cannot write the validated rows to {path} ({type(exc).__name__}: {exc}); set "
            "dask_scratch to writable storage that every worker sees"
        ) from exc
    return pd.DataFrame({"rows": [len(frame)]})


def checkpoint_file(folder: str, number: int) -> str:
    return str(Path(folder) / f"part-{number:05d}.parquet")


def read_checkpoint(path: str) -> pd.DataFrame:
    """One partition written by checkpoint_partition, with the dtypes the rows had."""
    frame = missing_text_as_none(pd.read_parquet(path), _text_columns())
    return frame.astype({c: float for c in frame.columns if c in NUMBER_COLUMNS or c in WEIGHT_COLUMNS})


def checkpoint_meta(**extra) -> pd.DataFrame:
    return frame_meta(ROUTING_COLUMNS, key=np.uint64, **extra)


MERGE_PARTITION_ROWS = 100_000  # repeated rows gathered into one partition (about) to be merged


def with_read_order(frame: pd.DataFrame, partition_info: dict | None = None) -> pd.DataFrame:
    """The rows with `read_order`: where each was read (partition number, then row), so that
    rows gathered from many partitions can be put back in that order."""
    number = (partition_info or {}).get("number", 0)
    return frame.assign(read_order=(np.int64(number) << 32) + np.arange(len(frame), dtype=np.int64))


def merge_partition(frame: pd.DataFrame, dtypes: dict) -> pd.DataFrame:
    """data.prepare.merge_duplicates on rows gathered by prompt key (every row of a prompt is in
    this partition), in the order they were read: the merged rows the local engine would make."""
    from data.prepare import merge_duplicates

    frame = frame.sort_values("read_order", kind="stable").drop(columns=["read_order", "key"])
    return merge_duplicates(frame.reset_index(drop=True)).astype(dtypes)


@contextlib.contextmanager
def cluster(scheduler: str | None = None, *, workers: int | None = None, timeout_s: float = 10.0) -> Iterator[object]:
    """A distributed.Client: on `scheduler` (else $DASK_SCHEDULER) when given, otherwise on
    a LocalCluster sized to this machine (one single-threaded worker process per core),
    closed on exit."""
    import dask
    from distributed import Client, LocalCluster

    from training.engines.dask_expressions import close_the_race

    close_the_race()  # a LocalCluster's scheduler unpickles graphs on a thread of this process
    dask.config.set({"dataframe.convert-string": False})  # keep None as None in text columns
    logging.getLogger("distributed").setLevel(logging.ERROR)  # its INFO chatter would bury the run's output
    address = scheduler or os.environ.get("DASK_SCHEDULER") or None
    if address:
        try:
            client = Client(address, timeout=f"{timeout_s}s")
        except (OSError, TimeoutError) as exc:
            raise EngineError(
                f"cannot reach the Dask scheduler at {address!r} ({type(exc).__name__}: {exc}). "
                "Check DASK_SCHEDULER (or dask_scheduler in the config), or leave both empty "
                "to start a LocalCluster on this machine."
            ) from exc
        with client:
            yield client
        return
    n_workers = workers or os.cpu_count() or 1
    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            memory_limit="auto",
            silence_logs=logging.ERROR,
        ) as local,
        Client(local) as client,
    ):
        yield client


def collected(client, *frames) -> list[pd.DataFrame]:
    """Each Dask frame as one pandas frame here, equal to its `.compute()`, computed together
    (the frames share their reads). The partitions come here one by one and are joined here,
    one frame at a time: `.compute()` joins them on a worker first, so that one worker holds
    the whole frame, and a copy of it to send; with the validation sample that was the
    largest worker's peak."""
    persisted, out = client.persist(list(frames)), []
    for i, frame in enumerate(persisted):
        persisted[i] = None  # once this frame is here, its partitions leave the workers
        out.append(pd.concat(client.compute(frame.to_delayed(optimize_graph=False), sync=True)))
    return out


@contextlib.contextmanager
def scratch(config) -> Iterator[str]:
    """A new folder for this run's checkpoint (checkpoint_partition) under `dask_scratch`
    (default: `cache_dir`/dask-scratch), removed when the run ends. Every worker writes and
    reads it: on a remote cluster it must be storage they all see. The run holds the
    folder's lock file while it lives; the folders of runs that were killed (no holder)
    are removed when the next run starts."""
    import shutil
    import tempfile

    from training.locks import file_lock

    root = Path(config.engine.dask_scratch or Path(config.cache_dir) / "dask-scratch")
    root.mkdir(parents=True, exist_ok=True)
    for folder in root.glob("run-*/"):
        with file_lock(folder / SCRATCH_LOCK) as abandoned:
            if abandoned:
                shutil.rmtree(folder, ignore_errors=True)
    new = Path(tempfile.mkdtemp(prefix="new-", dir=root))  # not a run-* folder until its lock is held
    with file_lock(new / SCRATCH_LOCK):
        folder = new.rename(root / new.name.replace("new-", "run-", 1))
        try:
            yield str(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


SCRATCH_LOCK = ".lock"


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Turn a lost worker or a broken connection during `name` into an EngineError naming both."""
    from distributed import KilledWorker
    from distributed.comm.core import CommClosedError

    try:
        yield
    except KilledWorker as exc:
        raise EngineError(
            f"{name}: a Dask worker died running {exc.task!r} (last worker: {exc.last_worker}); "
            "see the worker logs for the cause (often out of memory: fewer rows per file, "
            "or more memory per worker)"
        ) from exc
    except (CommClosedError, TimeoutError) as exc:
        raise EngineError(f"{name}: lost the connection to the Dask cluster ({type(exc).__name__}: {exc})") from exc
