"""`make train`: outcome logs -> calibrated LightGBM router -> ONNX bundle, tracked in MLflow.

Stages: load + validate logs, merge duplicates, split by prompt hash, label, features
(cached embeddings), LightGBM with early stopping, calibration, per-precision fallback
thresholds, test-split figures (learned vs hand rule table), bundle (atomic), parity
check of the bundle against the training pipeline, MLflow run + registered version.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
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
    held_out: object  # test-split rows: prompt, precision, score (pandas DataFrame)


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


def _with_precision_dropout(matrix, spec, train_rows, share: float, seed: int) -> np.ndarray:
    """Blank the declared-precision columns on a share of training rows, so the model also
    learns to route requests whose client declares no precision."""
    out = matrix.copy()
    names = spec.feature_names
    cols = [names.index(f"precision_{p}") for p in spec.precisions]
    rng = np.random.default_rng(seed)
    rows = np.flatnonzero(train_rows)
    blank = rows[rng.random(len(rows)) < share]
    out[np.ix_(blank, cols)] = 0.0
    return out


def bundle_files(feats, trees: bytes, calibration: dict) -> dict:
    """The bundle's model files: one fused graph (static tier) or encoder + projection + trees."""
    from training.export import fuse

    if feats.fused_prefix is not None:
        return {"model.onnx": fuse(feats.fused_prefix, trees, calibration),
                "tokenizer.json": feats.encoder.tokenizer_path}
    return {"encoder.onnx": feats.encoder.onnx_bytes, "router.onnx": trees,
            "projection.npz": feats.projection.to_bytes(), "tokenizer.json": feats.encoder.tokenizer_path}


def run(config: TrainConfig, *, console=None) -> TrainResult:
    """Run every stage; returns where the bundle went and the figures."""
    import mlflow
    from rich.console import Console
    from rich.progress import Progress

    from serving.scorer import Scorer
    from training.evaluation import compare_on_split
    from training.export import booster_to_onnx, write_bundle
    from training.featurize import featurize
    from training.model import fit_booster, fit_calibration, predict_score
    from training.thresholds import select_per_precision
    from training.tracking import flat_metrics, register_bundle, tracked_run

    console = console or Console()
    timings, t0 = {}, time.perf_counter()
    with console.status("loading and validating logs"):
        frame, data_report = prepare_frame(config)
    timings["load_s"] = time.perf_counter() - t0
    console.print(f"[bold]logs[/]: {data_report['rows']} prompts from {data_report['rows_per_source']}, "
                  f"{data_report['rejected']} rejected (see {data_report['rejects_file']}), "
                  f"{data_report['duplicates_merged']} duplicates merged")

    prompts, precisions = frame["prompt"].tolist(), frame["precision"].tolist()
    split = frame["split"].to_numpy()
    train, val, test = (split == "train"), (split == "val"), (split == "test")
    t1 = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"features ({config.tier} tier)", total=len(prompts))
        feats = featurize(prompts, precisions, train, tier=config.tier, embedding_dim=config.embedding_dim,
                          max_tokens=config.max_tokens, max_chars=config.max_chars, cache_dir=Path(config.cache_dir),
                          seed=config.seed,
                          on_batch=lambda n: progress.advance(task, n))
    timings["features_s"] = time.perf_counter() - t1
    console.print(f"[bold]features[/]: {feats.matrix.shape[1]} columns; embedding cache "
                  f"{feats.cache_hits} hits / {feats.cache_misses} computed")

    x, y = feats.matrix, frame["label"].to_numpy()
    x_fit = _with_precision_dropout(x, feats.spec, train, config.precision_dropout, config.seed)
    q_edge, q_cloud = frame["edge_quality"].to_numpy(), frame["cloud_quality"].to_numpy()
    t2 = time.perf_counter()
    with console.status("LightGBM (early stopping on validation)"):
        booster = fit_booster(x_fit[train], y[train], x[val], y[val], params=config.lgbm, seed=config.seed,
                              num_boost_round=config.num_boost_round,
                              early_stopping_rounds=config.early_stopping_rounds,
                              feature_names=feats.spec.feature_names)
        calibration = fit_calibration(booster.predict(x[val]), y[val], method=config.calibration)
        scores = predict_score(booster, x, calibration)
        thresholds = select_per_precision(
            scores[val], q_edge[val], q_cloud[val], np.array(precisions, dtype=object)[val],
            tags=feats.spec.precisions, min_rows=config.min_rows_per_tag, target=config.target,
            max_quality_drop=config.max_quality_drop, cloud_budget=config.cloud_budget,
            catch_rate=config.fallback_catch_rate)
    timings["fit_s"] = time.perf_counter() - t2

    n_tokens = x[:, feats.spec.feature_names.index("n_tokens")]
    metrics = {}
    for name, rows in (("val", val), ("test", test)):
        metrics[name] = compare_on_split(
            scores=scores[rows], precisions=np.array(precisions, dtype=object)[rows], thresholds=thresholds,
            n_tokens=n_tokens[rows], domains=frame["domain"].to_numpy()[rows], q_edge=q_edge[rows],
            q_cloud=q_cloud[rows], needed=y[rows], catch_rate=config.fallback_catch_rate)
    metrics["trees"] = booster.num_trees()
    metrics["embedding_cache"] = {"hits": feats.cache_hits, "computed": feats.cache_misses}

    with tracked_run(tracking_uri=config.tracking_uri, artifact_root=config.artifact_root,
                     experiment=config.experiment) as mlrun:
        run_id = mlrun.info.run_id
        manifest = {
            "schema_version": 1,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "model_version": f"{config.registered_model}@run:{run_id[:12]}",
            "feature_spec": feats.spec.to_dict(),
            "encoder": {"tier": config.tier, "key": feats.encoder.key},
            "calibration": calibration,
            "thresholds": thresholds,
            "target": {"kind": config.target, "max_quality_drop": config.max_quality_drop,
                       "cloud_budget": config.cloud_budget, "fallback_catch_rate": config.fallback_catch_rate},
            "label": {"margin_binary": config.margin_binary, "margin_graded": config.margin_graded},
            # How rows were split, so evaluation can find the rows this model never saw.
            "split": {"val_share": config.val_share, "test_share": config.test_share, "salt": config.split_salt},
            "limits": {"edge_context_tokens": config.edge_context_tokens,
                       "max_chars": feats.spec.max_chars, "max_tokens": feats.spec.max_tokens},
            "metrics": {"test": metrics["test"], "val": metrics["val"]},
            "data": {k: v for k, v in data_report.items() if k != "paths"},
            "mlflow": {"run_id": run_id, "tracking_uri": config.tracking_uri,
                       "registered_model": config.registered_model},
        }
        bundle = write_bundle(Path(config.bundle), bundle_files(feats, booster_to_onnx(booster, x.shape[1]), calibration),
                              manifest)

        # The bundle must score exactly like the pipeline that trained it, from raw text.
        held_out = np.flatnonzero(test)
        sdk_scores = Scorer(bundle).scores([prompts[i] for i in held_out], [precisions[i] for i in held_out])
        parity = float(np.max(np.abs(sdk_scores - scores[held_out]))) if len(held_out) else 0.0
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
    held = frame.loc[test, ["request_id", "prompt", "precision"]].assign(score=scores[test])
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
    config: Annotated[Optional[Path], typer.Option(help="YAML/JSON file of TrainConfig options")] = None,
    data: Annotated[Optional[list[str]], typer.Option(help="log file, glob or folder (repeatable)")] = None,
    target: Annotated[Optional[str], typer.Option(help="threshold target: quality | budget")] = None,
    cloud_budget: Annotated[Optional[float], typer.Option(help="expected cloud-call share for target=budget")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="any option, KEY=VALUE (repeatable)")] = None,
) -> None:
    """Train the router on outcome logs and write a registered ONNX bundle."""
    from rich.console import Console

    logging.basicConfig(level=logging.WARNING)
    cfg = build_config(config, {"bundle": bundle, "tier": tier, "data": data or None, "target": target,
                                "cloud_budget": cloud_budget, **parse_overrides(set_ or [])})
    console = Console()
    result = run(cfg, console=console)
    console.print(summary_table(result))
    console.print(f"bundle: {result.bundle}  |  MLflow run {result.run_id}, registered "
                  f"{cfg.registered_model} version {result.model_version}  |  parity max |diff| "
                  f"{result.metrics['parity_max_abs_diff']:.1e}  |  wall time {result.timings['total_s']:.1f}s")


if __name__ == "__main__":
    typer.run(main)
