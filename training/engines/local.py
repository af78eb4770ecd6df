"""The local engine: every row in memory on this machine (pandas frame, feature matrix,
LightGBM). The default, and the fastest below a few million rows."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from evaluation.rows import Rows
from training.config import TrainConfig
from training.engines.base import Fitted, print_logs, split_and_label


def prepare_frame(config: TrainConfig):
    """Validated, de-duplicated rows with split and label columns, the load report, and the rows
    that carry an edge answer (data.prepare.response_rows: as logged, not merged)."""
    from data.location import default_data_paths
    from data.logs import load_logs
    from data.prepare import fingerprint, merge_duplicates, response_rows
    from training.partial import partial_report, with_outcome_weights

    paths = config.data or default_data_paths()
    logs = load_logs(paths, max_reject_share=config.max_reject_share, rejects_path=config.rejects_path)
    valid = logs.frame()
    weighing = {"estimator": config.partial_estimator, "max_weight": config.max_ipw_weight}
    frame = split_and_label(merge_duplicates(with_outcome_weights(valid, **weighing)), config)
    report = {"paths": [str(p) for p in paths], "rows_read": logs.n_read, "rejected": len(logs.rejects),
              "unlabelled": sum(r.kind == "unlabelled" for r in logs.rejects), "rejects_file": str(config.rejects_path),
              "duplicates_merged": int((frame["n_merged"] - 1).sum()),
              **fingerprint(valid, frame), "outcomes": partial_report(valid, **weighing)}
    responses = response_rows(valid, val_share=config.val_share, test_share=config.test_share,
                              salt=config.split_salt)
    return frame, report, responses


def evaluation_frame(config: TrainConfig, console, *, splits: tuple[str, ...], max_rows: int):
    """Every prepared row, the report and the answer rows (the local engine holds them all;
    `splits` and `max_rows` are the Dask engine's sampling)."""
    return prepare_frame(config)


def _features(config: TrainConfig, frame, console):
    from rich.progress import Progress

    from training.featurize import featurize

    train = (frame["split"] == "train").to_numpy()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"features ({config.tier} tier)", total=len(frame))
        feats = featurize(frame["prompt"].tolist(), frame["precision"].tolist(), train, tier=config.tier,
                          embedding_dim=config.embedding_dim, max_tokens=config.max_tokens,
                          max_chars=config.max_chars, cache_dir=Path(config.cache_dir), seed=config.seed,
                          on_batch=lambda n: progress.advance(task, n))
    console.print(f"[bold]features[/]: {feats.matrix.shape[1]} columns; embedding cache "
                  f"{feats.cache_hits} hits / {feats.cache_misses} computed")
    return feats


def _unless_equal(weights: np.ndarray):
    """None when every weight is 1 (LightGBM then builds exactly the unweighted model), else the weights."""
    return None if np.all(weights == 1.0) else weights


def fit(config: TrainConfig, console, timings: dict) -> Fitted:
    """Load, featurize and fit in this process."""
    from training.model import blank_declared_precision, fit_booster, fit_heads, predict, target_columns
    from training.partial import both_known, head_rows

    t0 = time.perf_counter()
    with console.status("loading and validating logs"):
        frame, data_report, responses = prepare_frame(config)
    timings["load_s"] = time.perf_counter() - t0
    print_logs(console, data_report)

    t1 = time.perf_counter()
    feats = _features(config, frame, console)
    timings["features_s"] = time.perf_counter() - t1

    split = frame["split"].to_numpy()
    train, val = (split == "train"), (split == "val")
    x, names = feats.matrix, feats.spec.feature_names
    x_train = blank_declared_precision(x[train], names, feats.spec.precisions, config.precision_dropout,
                                       np.random.default_rng(config.seed))
    columns = target_columns(config.objective)
    targets = {c: frame[c].to_numpy() for c in columns}
    # Each head learns from the rows where its outcome is known (training.partial).
    known = {c: head_rows(frame, c) for c in columns}

    def fit_booster_for(column: str, objective: str):
        rows, weights = known[column]
        fit_rows, val_rows = rows[train], rows & val
        return fit_booster(x_train[fit_rows], targets[column][train][fit_rows], x[val_rows], targets[column][val_rows],
                           params=config.lgbm, seed=config.seed, num_boost_round=config.num_boost_round,
                           early_stopping_rounds=config.early_stopping_rounds, feature_names=names,
                           objective=objective, weight=_unless_equal(weights[train][fit_rows]),
                           val_weight=_unless_equal(weights[val_rows]))

    t2 = time.perf_counter()
    with console.status(f"LightGBM heads for {config.objective} (early stopping on validation)"):
        heads = fit_heads(config.objective, fit_booster_for, x[val], {c: v[val] for c, v in targets.items()},
                          calibration=config.calibration,
                          weights_val={c: np.where(known[c][0], known[c][1], 0.0)[val] for c in columns})
        scores, probabilities = predict(config.objective, heads, x)
    timings["fit_s"] = time.perf_counter() - t2
    n_tokens = x[:, names.index("n_tokens")]
    # Thresholds and figures compare both outcomes of a request: the rows that have both.
    chosen = {name: (split == name) & both_known(frame) for name in ("val", "test")}
    splits = {name: Rows.from_frame(frame[rows], n_tokens=n_tokens[rows], scores=scores[rows],
                                    probabilities={k: v[rows] for k, v in probabilities.items()})
              for name, rows in chosen.items()}
    embeddings = {name: x[rows][:, -feats.spec.embedding_dim:] for name, rows in chosen.items()}
    return Fitted(data_report, feats.plan, config.objective, heads, splits, embeddings, responses,
                  notes={"embedding_cache": {"hits": feats.cache_hits, "computed": feats.cache_misses}})
