"""`make train ENGINE=dask`: the training stages on a Dask cluster, for logs larger than
one machine. Returns the same `Fitted` as the local engine, so thresholds, figures,
bundle, parity check and MLflow registration are shared code (pipelines.train.run).

Where the rows live: every log file is a partition read, validated, split, labelled and
featurized on the workers; LightGBM trains data-parallel through `lightgbm.dask` on the
workers' partitions. The client only ever holds bounded samples chosen by prompt hash:
at most `pca_sample_rows` training rows (raw embeddings for the projection) and
`eval_sample_rows` rows each of validation and test (calibration, thresholds, figures),
plus duplicate rows, which it merges with the local engine's function.

Passes over the logs: (1) validate + count + find duplicates, (2) raw embeddings of the
projection sample, (3) features of the evaluation samples, (4) training features.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines.train import Fitted
from training.config import TrainConfig


def _read_and_check(config: TrainConfig):
    """Pass 1: every unit read and validated; rejects written; duplicates merged on the client."""
    import dask
    import dask.dataframe as dd

    from data.location import default_data_paths
    from data.logs import LoadedLogs, check_reject_share, loading_units
    from data.prepare import merge_duplicates
    from data.schema import COLUMNS, Reject
    from training import dask_engine as de

    paths = config.data or default_data_paths()
    units = [str(u) for u in loading_units(paths)]
    logs = dd.from_map(de.unit_frame, units, meta=de.unit_meta(), enforce_metadata=False)
    is_reject = logs["reject_reason"].notnull()
    valid = logs[~is_reject][list(COLUMNS)].map_partitions(de.with_keys, meta=de.frame_meta(COLUMNS, key=np.uint64))
    key_counts = valid["key"].value_counts()
    with de.stage("reading and validating logs"):
        n_read, rejects, duplicated, per_source, digests = dask.compute(
            logs.shape[0], logs[is_reject][list(de.REJECT_COLUMNS)], key_counts[key_counts > 1],
            valid["source"].value_counts(), valid.map_partitions(de.content_digest, meta={"digest": object}))

    rejects_path = Path(config.reports_dir) / "rejects.jsonl"
    reject_list = [Reject(*row) for row in rejects.itertuples(index=False)]
    LoadedLogs(rows=[], rejects=reject_list).write_rejects(rejects_path)
    n_valid = int(per_source.sum())  # before merging duplicates
    check_reject_share(n_valid=n_valid, n_read=int(n_read), rejects=reject_list,
                       max_reject_share=config.max_reject_share, paths=paths, rejects_path=rejects_path)

    dup_keys = duplicated.index.to_numpy(np.uint64)
    merged = pd.DataFrame(columns=[*COLUMNS, "n_merged"])
    per_source = per_source.astype(np.int64)
    if len(dup_keys):
        with de.stage("merging duplicate prompts"):
            dup_rows = valid[valid["key"].isin(dup_keys)].compute()
        merged = merge_duplicates(dup_rows.drop(columns="key").reset_index(drop=True))
        per_source = per_source.sub(dup_rows["source"].value_counts(), fill_value=0).add(
            merged["source"].value_counts(), fill_value=0).astype(np.int64)
    singles = valid[~valid["key"].isin(dup_keys)].drop(columns="key").assign(n_merged=1)
    rows = dd.concat([singles, dd.from_pandas(merged.astype(singles.dtypes.to_dict()), npartitions=1)]) \
        if len(merged) else singles
    n_rows = n_valid - int(duplicated.sum()) + len(merged)
    report = {"paths": [str(p) for p in paths], "units": len(units), "rows_read": int(n_read),
              "rejected": len(reject_list), "rejects_file": str(rejects_path),
              "duplicates_merged": int(duplicated.sum()) - len(merged), "rows": n_rows,
              "rows_per_source": {str(k): int(v) for k, v in per_source.sort_index().items() if v},
              # Order-free: the sum of row hashes (the local engine hashes the rows in order).
              "content_sum64": str(sum(int(d) for d in digests["digest"]) % 2**64)}
    return rows, report


def prepared_rows(config: TrainConfig, console):
    """The logs as prepared partitions (split, label, sampling number), and the load report."""
    from data.schema import COLUMNS
    from training import dask_engine as de

    rows, report = _read_and_check(config)
    console.print(f"[bold]logs[/]: {report['rows']} prompts in {report['units']} partitions from "
                  f"{report['rows_per_source']}, {report['rejected']} rejected (see {report['rejects_file']}), "
                  f"{report['duplicates_merged']} duplicates merged")
    prepared = rows.map_partitions(
        de.prepare_partition, val_share=config.val_share, test_share=config.test_share,
        salt=config.split_salt, margin_binary=config.margin_binary, margin_graded=config.margin_graded,
        meta=de.frame_meta(COLUMNS, **de.PREPARED))
    return prepared, report


def _fraction(cap: int, expected_rows: float) -> float:
    return min(1.0, cap / max(expected_rows, 1.0))


def sampled_frame(config: TrainConfig, console, *, max_rows: int, splits: tuple[str, ...]):
    """For `make evaluate ENGINE=dask`: prepared rows of `splits` ("all" = every row), at most
    about `max_rows` per split, chosen by prompt hash on the cluster and collected here."""
    import dask

    from training import dask_engine as de

    shares = {"train": 1 - config.val_share - config.test_share, "val": config.val_share,
              "test": config.test_share, "all": 1.0}
    with de.cluster(config.dask_scheduler, workers=config.dask_workers) as _:
        prepared, report = prepared_rows(config, console)
        parts = [(prepared if name == "all" else prepared[prepared["split"] == name])
                 for name in splits]
        parts = [part[part["sample_u"] < _fraction(max_rows, report["rows"] * shares[name])]
                 for part, name in zip(parts, splits)]
        with de.stage("collecting the evaluation samples"):
            frames = dask.compute(*parts)
    frame = pd.concat(frames, ignore_index=True).drop_duplicates("prompt").reset_index(drop=True)
    return frame.drop(columns="sample_u"), report


def fit_dask(config: TrainConfig, console, timings: dict) -> Fitted:
    """The Dask engine (see module doc)."""
    import dask

    from training import dask_engine as de
    from training.evaluation import SplitRows
    from training.featurize import fit_projection, n_scalar_features, plan_from, raw_stage
    from training.model import fit_booster_dask, fit_calibration, predict_score

    with de.cluster(config.dask_scheduler, workers=config.dask_workers) as client:
        workers = len(client.scheduler_info()["workers"])
        console.print(f"[bold]dask[/]: {workers} workers at {client.scheduler.address}")
        t0 = time.perf_counter()
        prepared, report = prepared_rows(config, console)
        timings["load_s"] = time.perf_counter() - t0
        train_share = 1 - config.val_share - config.test_share

        t1 = time.perf_counter()
        built, raw = raw_stage(config.tier, embedding_dim=config.embedding_dim, max_tokens=config.max_tokens,
                               max_chars=config.max_chars, cache_dir=Path(config.cache_dir))
        pca_rows = prepared[(prepared["split"] == "train") &
                            (prepared["sample_u"] < _fraction(config.pca_sample_rows, report["rows"] * train_share))]
        raw_width = raw.transform(["width probe"], [None]).shape[1] - n_scalar_features(raw.spec)
        raw_future = client.scatter(raw, broadcast=True)
        with de.stage("raw embeddings for the projection"):
            raw_sample = pca_rows.map_partitions(
                de.raw_embedding_partition, raw_future,
                meta={f"raw_{i}": np.float32 for i in range(raw_width)}).compute().to_numpy()
        plan = plan_from(built, raw, fit_projection(raw_sample, config.embedding_dim, seed=config.seed))
        recipe = client.scatter(plan.serving, broadcast=True)
        names = plan.spec.feature_names

        keep = ("request_id", "prompt", "precision", "domain", "edge_quality", "cloud_quality", "label", "split")
        samples = {}
        for name, share in (("val", config.val_share), ("test", config.test_share)):
            chosen = prepared[(prepared["split"] == name) &
                              (prepared["sample_u"] < _fraction(config.eval_sample_rows, report["rows"] * share))]
            samples[name] = chosen.map_partitions(de.feature_partition, recipe, keep=keep,
                                                  meta=de.feature_meta(plan.serving, keep))
        with de.stage("features of the validation and test samples"):
            val, test = dask.compute(samples["val"], samples["test"])
        train = prepared[prepared["split"] == "train"].map_partitions(
            de.feature_partition, recipe, keep=("label",), blank_precision=config.precision_dropout,
            seed=config.seed, meta=de.feature_meta(plan.serving, ("label",)))
        timings["features_s"] = time.perf_counter() - t1
        console.print(f"[bold]features[/]: {len(names)} columns; projection fitted on {len(raw_sample)} "
                      f"training rows; samples: {len(val)} validation, {len(test)} test rows")

        t2 = time.perf_counter()
        with console.status("LightGBM on the cluster (lightgbm.dask, early stopping on the validation sample)"), \
                de.stage("LightGBM training"):
            booster = fit_booster_dask(client, train[names], train["label"], val[names].to_numpy(),
                                       val["label"].to_numpy(), params=config.lgbm, seed=config.seed,
                                       num_boost_round=config.num_boost_round,
                                       early_stopping_rounds=config.early_stopping_rounds)
        calibration = fit_calibration(booster.predict(val[names].to_numpy()), val["label"].to_numpy(),
                                      method=config.calibration)
        timings["fit_s"] = time.perf_counter() - t2
    splits = {name: SplitRows.from_frame(frame, n_tokens=frame["n_tokens"],
                                         scores=predict_score(booster, frame[names].to_numpy(), calibration))
              for name, frame in (("val", val), ("test", test))}
    notes = {"dask": {"workers": workers, "partitions": report["units"], "pca_rows": len(raw_sample),
                      "val_rows": len(val), "test_rows": len(test)}}
    return Fitted(report, plan, booster, calibration, splits, notes=notes)
