"""`make train`: outcome logs -> calibrated LightGBM router -> ONNX bundle, tracked in MLflow.

Stages: load + validate logs, merge duplicates, split by prompt hash, label, features
(cached embeddings), LightGBM with early stopping, calibration, per-precision fallback
thresholds, test-split figures (learned vs hand rule table), bundle (atomic), parity
check of the bundle against the training pipeline, MLflow run + registered version.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer

import numpy as np

from training.config import TrainConfig

log = logging.getLogger("pipelines.train")
PARITY_TOLERANCE = 1e-5


@dataclass
class TrainResult:
    bundle: Path
    run_id: str
    model_version: str
    metrics: dict
    timings: dict
    held_out: object  # test-split rows: request_id, prompt, precision, score (pandas DataFrame)


@dataclass
class Fitted:
    """What an engine (local or Dask) hands back; everything after it is shared."""

    data_report: dict
    plan: object               # training.featurize.FeaturePlan
    booster: object            # lightgbm.Booster, cut at its best round
    calibration: dict
    splits: dict               # "val" / "test" -> training.evaluation.SplitRows
    notes: dict = field(default_factory=dict)  # engine-specific figures, logged with the metrics


def prepare_frame(config: TrainConfig):
    """Validated, de-duplicated rows with split and label columns, plus the load report."""
    from data.location import default_data_paths
    from data.logs import load_logs
    from data.prepare import assign_splits, fingerprint, merge_duplicates
    from training.labels import cloud_needed

    paths = config.data or default_data_paths()
    rejects_path = Path(config.reports_dir) / "rejects.jsonl"
    logs = load_logs(paths, max_reject_share=config.max_reject_share, rejects_path=rejects_path)
    frame = merge_duplicates(logs.frame())
    frame["split"] = assign_splits(frame["prompt"], val_share=config.val_share, test_share=config.test_share,
                                   salt=config.split_salt)
    frame["label"] = cloud_needed(frame["edge_quality"], frame["cloud_quality"],
                                  margin_binary=config.margin_binary, margin_graded=config.margin_graded)
    report = {"paths": [str(p) for p in paths], "rows_read": logs.n_read, "rejected": len(logs.rejects),
              "rejects_file": str(rejects_path), "duplicates_merged": int((frame["n_merged"] - 1).sum()),
              **fingerprint(frame)}
    return frame, report


def fit_local(config: TrainConfig, console, timings: dict) -> Fitted:
    """Every row in memory: pandas frame, feature matrix, LightGBM on this machine."""
    from rich.progress import Progress

    from training.evaluation import SplitRows
    from training.featurize import featurize
    from training.model import blank_declared_precision, fit_booster, fit_calibration, predict_score

    t0 = time.perf_counter()
    with console.status("loading and validating logs"):
        frame, data_report = prepare_frame(config)
    timings["load_s"] = time.perf_counter() - t0
    console.print(f"[bold]logs[/]: {data_report['rows']} prompts from {data_report['rows_per_source']}, "
                  f"{data_report['rejected']} rejected (see {data_report['rejects_file']}), "
                  f"{data_report['duplicates_merged']} duplicates merged")

    prompts, precisions = frame["prompt"].tolist(), frame["precision"].tolist()
    split = frame["split"].to_numpy()
    train, val = (split == "train"), (split == "val")
    t1 = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"features ({config.tier} tier)", total=len(prompts))
        feats = featurize(prompts, precisions, train, tier=config.tier, embedding_dim=config.embedding_dim,
                          max_tokens=config.max_tokens, max_chars=config.max_chars, cache_dir=Path(config.cache_dir),
                          seed=config.seed, on_batch=lambda n: progress.advance(task, n))
    timings["features_s"] = time.perf_counter() - t1
    console.print(f"[bold]features[/]: {feats.matrix.shape[1]} columns; embedding cache "
                  f"{feats.cache_hits} hits / {feats.cache_misses} computed")

    x, y, names = feats.matrix, frame["label"].to_numpy(), feats.spec.feature_names
    x_train = blank_declared_precision(x[train], names, feats.spec.precisions, config.precision_dropout,
                                       np.random.default_rng(config.seed))
    t2 = time.perf_counter()
    with console.status("LightGBM (early stopping on validation)"):
        booster = fit_booster(x_train, y[train], x[val], y[val], params=config.lgbm, seed=config.seed,
                              num_boost_round=config.num_boost_round,
                              early_stopping_rounds=config.early_stopping_rounds, feature_names=names)
        calibration = fit_calibration(booster.predict(x[val]), y[val], method=config.calibration)
        scores = predict_score(booster, x, calibration)
    timings["fit_s"] = time.perf_counter() - t2
    n_tokens = x[:, names.index("n_tokens")]
    splits = {name: SplitRows.from_frame(frame[split == name], n_tokens=n_tokens[split == name],
                                         scores=scores[split == name]) for name in ("val", "test")}
    return Fitted(data_report, feats.plan, booster, calibration, splits,
                  notes={"embedding_cache": {"hits": feats.cache_hits, "computed": feats.cache_misses}})


def run(config: TrainConfig, *, console=None) -> TrainResult:
    """Run every stage; returns where the bundle went and the figures."""
    import mlflow
    import pandas as pd
    from rich.console import Console

    from serving.scorer import Scorer
    from training.export import booster_to_onnx, calibration_in_model, write_bundle
    from training.thresholds import select_per_precision
    from training.tracking import flat_metrics, register_bundle, tracked_run

    console = console or Console()
    timings, t0 = {}, time.perf_counter()
    if config.engine == "dask":
        from pipelines.train_dask import fit_dask

        fitted = fit_dask(config, console, timings)
    else:
        fitted = fit_local(config, console, timings)
    plan, val, test = fitted.plan, fitted.splits["val"], fitted.splits["test"]
    thresholds = select_per_precision(
        val.scores, val.q_edge, val.q_cloud, val.precisions, tags=plan.spec.precisions,
        min_rows=config.min_rows_per_tag, target=config.target, max_quality_drop=config.max_quality_drop,
        cloud_budget=config.cloud_budget, catch_rate=config.fallback_catch_rate)
    metrics = {name: rows.figures(thresholds, catch_rate=config.fallback_catch_rate)
               for name, rows in fitted.splits.items()}
    metrics["trees"] = fitted.booster.num_trees()
    metrics.update(fitted.notes)

    with tracked_run(tracking_uri=config.tracking_uri, artifact_root=config.artifact_root,
                     experiment=config.experiment) as mlrun:
        run_id = mlrun.info.run_id
        data_report = fitted.data_report
        manifest = {
            "schema_version": 1,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "model_version": f"{config.registered_model}@run:{run_id[:12]}",
            "feature_spec": plan.spec.to_dict(),
            "encoder": {"tier": config.tier, "key": plan.built.key},
            # in_model: the trees already output the calibrated score (training.export)
            "calibration": {**fitted.calibration, "in_model": calibration_in_model(fitted.calibration)},
            "thresholds": thresholds,
            "target": {"kind": config.target, "max_quality_drop": config.max_quality_drop,
                       "cloud_budget": config.cloud_budget, "fallback_catch_rate": config.fallback_catch_rate},
            "label": {"margin_binary": config.margin_binary, "margin_graded": config.margin_graded},
            # How rows were split, so evaluation can find the rows this model never saw.
            "split": {"val_share": config.val_share, "test_share": config.test_share, "salt": config.split_salt},
            "limits": {"edge_context_tokens": config.edge_context_tokens,
                       "max_chars": plan.spec.max_chars, "max_tokens": plan.spec.max_tokens},
            "metrics": {"test": metrics["test"], "val": metrics["val"]},
            "data": {k: v for k, v in data_report.items() if k != "paths"},
            "training": {"engine": config.engine},
            "mlflow": {"run_id": run_id, "tracking_uri": config.tracking_uri,
                       "registered_model": config.registered_model},
        }
        trees = booster_to_onnx(fitted.booster, len(plan.spec.feature_names), fitted.calibration)
        bundle = write_bundle(Path(config.bundle), plan.bundle_files(trees), manifest)

        # The bundle must score exactly like the pipeline that trained it, from raw text.
        checked = slice(0, config.parity_rows)
        sdk_scores = Scorer(bundle).scores(list(test.prompts[checked]), list(test.precisions[checked]))
        parity = float(np.max(np.abs(sdk_scores - test.scores[checked]))) if len(sdk_scores) else 0.0
        metrics["parity_max_abs_diff"] = parity
        if parity > PARITY_TOLERANCE:
            raise RuntimeError(f"bundle scores differ from the training pipeline by {parity:.2e} "
                               f"(> {PARITY_TOLERANCE}); not registering {bundle}")

        mlflow.log_params({k: str(v)[:500] for k, v in config.to_dict().items()})
        mlflow.log_dict(data_report, "data_fingerprint.json")
        mlflow.log_dict(config.to_dict(), "train_config.json")  # `make train CONFIG=` takes it back
        mlflow.log_metrics(flat_metrics(metrics))
        if Path(data_report["rejects_file"]).exists():
            mlflow.log_artifact(data_report["rejects_file"])
        version = register_bundle(bundle, model_name=config.registered_model, run_id=run_id)
    timings["total_s"] = time.perf_counter() - t0
    mlflow.log_metrics({f"time.{k}": v for k, v in timings.items()}, run_id=run_id)
    held = pd.DataFrame({"request_id": test.request_ids, "prompt": test.prompts, "precision": test.precisions,
                         "score": test.scores})
    return TrainResult(bundle, run_id, version, metrics, timings, held)


def summary_table(result: TrainResult):
    """The test-split figures, learned router next to the hand rule table."""
    from rich.table import Table

    test = result.metrics["test"]
    table = Table(title=f"test split: {test['rows']} prompts, all-edge quality {test['all_edge_quality']:.3f}, "
                        f"all-cloud {test['all_cloud_quality']:.3f}, oracle {test['oracle_quality']:.3f}")
    table.add_column("figure")
    table.add_column("learned router", justify="right")
    table.add_column("hand rule table", justify="right")
    rows = [("AUC", "auc", "{:.3f}"), ("APGR", "apgr", "{:.3f}"), ("CPT(50%)", "cpt50", "{:.1%}"),
            ("CPT(80%)", "cpt80", "{:.1%}"), ("cloud share (cloud-first)", "cloud_share", "{:.1%}"),
            ("fallback zone share", "fallback_share", "{:.1%}"), ("misroute rate", "misroute_rate", "{:.1%}"),
            ("  under-routing", "under_routing", "{:.1%}"), ("  over-routing", "over_routing", "{:.1%}"),
            ("quality (before fallback)", "quality", "{:.3f}"),
            ("quality vs all-cloud", "quality_vs_all_cloud", "{:+.3f}"),
            ("quality with fallback (catch rate)", "quality_with_fallback", "{:.3f}"),
            ("expected cloud calls", "expected_cloud_calls", "{:.1%}")]
    for label, key, fmt in rows:
        table.add_row(label, *(fmt.format(test[p][key]) for p in ("learned", "rule_table")))
    return table


def parse_overrides(items: list[str]) -> dict:
    """["lgbm.num_leaves=63", "target=budget"] -> {"lgbm": {"num_leaves": 63}, "target": "budget"}."""
    import yaml

    out: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        node = out
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return out


def build_config(config: Optional[Path], overrides: dict) -> TrainConfig:
    """Config file (if any), then explicit overrides on top."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if config:
        return TrainConfig.from_file(config, **overrides)
    return TrainConfig(**overrides)


def main(
    bundle: Annotated[str, typer.Option(help="output folder of the bundle")] = "artifacts/router",
    tier: Annotated[str, typer.Option(help="embedding tier: static | transformer")] = "static",
    engine: Annotated[Optional[str], typer.Option(
        help="local (in memory, default) | dask (partitions on a Dask cluster)")] = None,
    config: Annotated[Optional[Path], typer.Option(help="YAML/JSON file of TrainConfig options")] = None,
    data: Annotated[Optional[list[str]], typer.Option(help="log file, glob or folder (repeatable)")] = None,
    target: Annotated[Optional[str], typer.Option(help="threshold target: quality | budget")] = None,
    cloud_budget: Annotated[Optional[float], typer.Option(help="expected cloud-call share for target=budget")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="any option, KEY=VALUE (repeatable)")] = None,
) -> None:
    """Train the router on outcome logs and write a registered ONNX bundle."""
    from rich.console import Console

    logging.basicConfig(level=logging.WARNING)
    cfg = build_config(config, {"bundle": bundle, "tier": tier, "engine": engine, "data": data or None,
                                "target": target, "cloud_budget": cloud_budget, **parse_overrides(set_ or [])})
    console = Console()
    result = run(cfg, console=console)
    console.print(summary_table(result))
    console.print(f"bundle: {result.bundle}  |  MLflow run {result.run_id}, registered "
                  f"{cfg.registered_model} version {result.model_version}  |  parity max |diff| "
                  f"{result.metrics['parity_max_abs_diff']:.1e}  |  wall time {result.timings['total_s']:.1f}s")


if __name__ == "__main__":
    typer.run(main)
