"""Each training stage's floor: what it would cost at the speed of its parts, measured alone on a
fixed sample in one process and scaled to a run's rows, which `make scale` sets beside each
stage's wall time (training.profiling). Before a run, per row: reading one shard
(data.logs.read_unit), finding repeats (pandas.factorize), featurizing FLOOR_SAMPLE_ROWS prompts
(training.featurize.ChunkFeaturizer) and, per row and tree, LightGBM on random features; after
it, with its bundle: the SDK scoring the parity rows and registering in a fresh MLflow store.
stage_floors scales them and divides by the cores where the work splits by rows.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import Callable

FLOOR_SAMPLE_ROWS = 4096


def best_of(runs: int, work: Callable[[], object]) -> float:
    """The fastest of `runs` timed calls of `work`, in seconds, after one untimed call (imports,
    caches): the floor is the work, not the first call's set-up or the host's busy moments."""
    work()
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def floors_before(logs: Path, work: Path, *, train_share: float) -> dict[str, float]:
    """Seconds per row (per row and tree for LightGBM) of the main stages' work alone, on the
    first Parquet shard of `logs`. `train_share`: the share of rows that train, whose raw
    embedding the featurizer also computes (training.sampling.training_share). `work`
    holds the encoder cache."""
    import numpy as np
    import pandas as pd

    from data.logs import read_unit
    from training.featurize import ChunkFeaturizer, masked_mean, raw_stage

    shard = sorted(logs.glob("*.parquet"))[0]
    read_s = best_of(2, lambda: read_unit(shard))
    frame = read_unit(shard).frame()
    prompts = frame["prompt"].astype(object).to_numpy()
    factorize_s = best_of(3, lambda: pd.factorize(prompts))
    sample = frame.head(FLOOR_SAMPLE_ROWS)
    texts, precisions = sample["prompt"].astype(object).tolist(), sample["precision"].tolist()
    _, raw = raw_stage("static", embedding_dim=32, max_tokens=None, max_chars=2048, cache_dir=work / "cache")
    featurizer = ChunkFeaturizer(raw)
    folded = np.random.default_rng(0).normal(size=(len(raw.table), 32)).astype(np.float32).astype(np.float64)
    train = np.random.default_rng(0).random(len(texts)) < train_share

    def featurize():
        _, tokens = featurizer.prepare(texts, precisions)
        featurizer.embed(tokens.subset(train))
        masked_mean(tokens, folded)

    featurize_s = best_of(3, featurize)
    return {
        "read_validate_s_per_row": read_s / len(frame),
        "merge_s_per_row": factorize_s / len(frame),
        "featurize_s_per_row": featurize_s / len(texts),
        "fit_s_per_row_tree": lightgbm_per_row_tree(),
    }


def lightgbm_per_row_tree(rows: int = 30_000, columns: int = 51, trees: int = 30) -> float:
    """Seconds per row and tree of LightGBM with the training parameters
    (training.model.lgbm_params) and the engines' OpenMP wait policy (set before LightGBM
    loads, as choosing an engine does) on random features: no early-stopping overshoot, and
    random features make each tree dearer than the real ones, so a fit can beat this floor."""
    from training.engines import passive_openmp_waits

    passive_openmp_waits()
    import lightgbm as lgb
    import numpy as np

    from training.model import lgbm_params

    rng = np.random.default_rng(0)
    x = rng.random((rows, columns), dtype=np.float32)
    y = 1 / (1 + np.exp(-(x[:, 0] - x[:, 1] + rng.normal(0, 0.5, rows))))
    data = lgb.Dataset(x, label=y, free_raw_data=False).construct()
    params = lgbm_params({}, seed=0, objective="cross_entropy")
    return best_of(2, lambda: lgb.train(params, data, num_boost_round=trees)) / (rows * trees)


def floors_after(bundle: Path, logs: Path, work: Path, parity_rows: int = 5000) -> dict[str, float]:
    """Seconds of a run's parity check (its bundle scoring `parity_rows` prompts of the last
    shard through the SDK) and its MLflow registration, each done alone."""
    import pandas as pd

    from serving.bundle._bundle import read_bundle
    from serving.scoring._scorer import Scorer
    from training.tracking import register_bundle, tracked_run

    shards = sorted(logs.glob("*.parquet"))
    frame = pd.read_parquet(shards[-1], columns=["prompt", "precision"]).head(parity_rows)
    prompts = frame["prompt"].tolist()
    precisions = [p if isinstance(p, str) else None for p in frame["precision"]]
    scorer = Scorer(read_bundle(bundle))
    parity_s = best_of(2, lambda: scorer.scores(prompts, precisions))
    # A new store each time, as each run has: MLflow keeps a connection per store address in the process.
    store = work / f"floor-mlflow-{time.time_ns()}"
    store.mkdir(parents=True)

    def register():
        with tracked_run(
            tracking_uri=f"sqlite:///{(store / 'mlflow.db').resolve()}",
            artifact_root=str(store / "artifacts"),
            experiment="floor",
        ) as run:
            register_bundle(bundle, model_name="floor", run_id=run.info.run_id)

    start = time.perf_counter()
    register()  # once: a second registration in the same store would not create it again
    mlflow_s = time.perf_counter() - start
    shutil.rmtree(store, ignore_errors=True)
    return {"export_parity": parity_s, "mlflow": mlflow_s}


def stage_floors(
    per_row: dict, after: dict, *, rows: int, rows_read: int, train_rows: int, trees: int, cores: int
) -> dict[str, float]:
    """Each stage's floor in seconds for one run (module doc); stages without one are absent.
    `per_row` from floors_before, `after` from floors_after (or {}); `rows_read` are the rows
    read and merged, `rows` those featurized, `train_rows` those the boosters fit, `trees`
    the trees they built. Reading and featurizing split by rows over the cores; merging
    (one factorize) and the fit (already timed on every core) do not."""
    floors = {
        "read_validate": per_row["read_validate_s_per_row"] * rows_read / cores,
        "merge": per_row["merge_s_per_row"] * rows_read,
        "featurize": per_row["featurize_s_per_row"] * rows / cores,
    }
    if trees:
        floors["fit"] = per_row["fit_s_per_row_tree"] * train_rows * trees
    return {**floors, **after}
