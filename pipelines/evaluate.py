"""`make evaluate`: misroute-rate evaluation of a bundle on outcome logs, through the SDK.

Stages: load + validate logs (any supported format), merge duplicates, split with the
bundle's own split settings (default: the test rows the model never saw), label with
its margins, route every row with `serving.Router.route_batch` (what clients run), fit
the tuned rule table on the train rows, compare every policy (training.policies),
calibration, breakdowns, optionally leave-one-source-out, then report.md, metrics.json
and PNGs into `--out`, logged to MLflow under the bundle's run.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer

from training.policies import POLICIES, check_policies
from training.policy_metrics import DEFAULT_CLOUD_COSTS, DEFAULT_EDGE_MS, CostModel, LatencyModel

log = logging.getLogger("pipelines.evaluate")
SPLITS = ("test", "val", "train", "all")
SPLIT_NOTES = {"test": "rows the bundle never saw: same hash split as its training",
               "val": "the bundle's validation rows, used for early stopping, calibration and thresholds",
               "train": "the rows the bundle was fitted on: optimistic",
               "all": "every row, including those the bundle was fitted on: optimistic when the logs overlap"}


@dataclass
class EvalConfig:
    """Every knob of `make evaluate`; defaults follow shared docs/baseline.md."""

    bundle: str = "artifacts/router"
    logs: list[str] = field(default_factory=list)       # files, globs, folders; empty = default location
    out: str = "reports/latest"
    split: str = "test"
    policies: list[str] = field(default_factory=lambda: list(POLICIES))
    catch_rate: float = 0.5                             # share of edge failures visible at run time
    edge_cost: float = 0.0
    cloud_cost: dict = field(default_factory=lambda: dict(DEFAULT_CLOUD_COSTS))
    edge_ms: dict = field(default_factory=lambda: dict(DEFAULT_EDGE_MS))
    cloud_ms: float = 200.0
    network_ms: float = 50.0
    calibration_bins: int = 10
    rule_weight_step: float = 0.1
    max_reject_share: float = 0.05
    batch_size: int = 256
    leave_one_source_out: bool = False
    holdout_sources: list[str] = field(default_factory=list)  # empty = every source
    loso_overrides: dict = field(default_factory=dict)       # TrainConfig options for those trainings
    cache_dir: str = "data/cache"
    mlflow: bool = True
    # engine=dask: logs read, validated and split on a Dask cluster; the rows scored here are
    # a hash sample of at most `sample_rows` per split (the tuned rule table's train rows too).
    engine: str = "local"
    dask_scheduler: str | None = None                   # empty: $DASK_SCHEDULER, else a LocalCluster
    dask_workers: int | None = None
    sample_rows: int = 200_000

    def __post_init__(self):
        # A single value (e.g. `--set policies=oracle,random`) stands for a list, not its characters.
        for name in ("logs", "policies", "holdout_sources"):
            if isinstance(getattr(self, name), str):
                setattr(self, name, getattr(self, name).split(",") if name == "policies" else [getattr(self, name)])
        from training.config import ENGINES

        if self.engine not in ENGINES:
            raise ValueError(f"engine={self.engine!r} is unknown; choose one of {', '.join(ENGINES)}")
        if self.split not in SPLITS:
            raise ValueError(f"split={self.split!r} is unknown; choose one of {', '.join(SPLITS)}")
        if not isinstance(self.catch_rate, (int, float)) or not 0 <= self.catch_rate <= 1:
            raise ValueError(f"catch_rate={self.catch_rate!r} must be a number in [0, 1]")
        for name in ("calibration_bins", "batch_size", "sample_rows"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be an integer >= 1")
        self.policies = check_policies(self.policies)
        self.cost_model(), self.latency_model()  # validates the numbers

    @classmethod
    def from_options(cls, **options) -> "EvalConfig":
        """Options by name; dict options (cloud_cost, edge_ms) are merged into their defaults."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown option {unknown[0]!r}; known: {', '.join(sorted(known))}")
        for f in dataclasses.fields(cls):
            if f.name in ("cloud_cost", "edge_ms") and isinstance(options.get(f.name), dict):
                options[f.name] = {**f.default_factory(), **options[f.name]}
        return cls(**options)

    def cost_model(self) -> CostModel:
        """$ per request (training.policy_metrics.CostModel)."""
        return CostModel(edge=self.edge_cost, cloud=dict(self.cloud_cost))

    def latency_model(self) -> LatencyModel:
        """Milliseconds per path (training.policy_metrics.LatencyModel)."""
        return LatencyModel(edge_ms=dict(self.edge_ms), cloud_ms=self.cloud_ms, network_ms=self.network_ms)


@dataclass
class EvalResult:
    """Where the report went, the figures (as in metrics.json) and the MLflow run they went to."""

    out: Path
    metrics: dict
    files: list[Path]
    mlflow_run_id: str | None


def bundle_train_config(manifest: dict, **options):
    """A TrainConfig with the bundle's settings (tier, label margins, split, threshold target),
    then `options` on top."""
    from training.config import TrainConfig

    spec, target, split, label = (manifest.get(k, {}) for k in ("feature_spec", "target", "split", "label"))
    settings = dict(tier=spec.get("tier", "static"), embedding_dim=spec.get("embedding_dim", 32),
                    max_tokens=spec.get("max_tokens"),
                    calibration=manifest.get("calibration", {}).get("method", "sigmoid"),
                    target=target.get("kind", "quality"), max_quality_drop=target.get("max_quality_drop", 0.01),
                    cloud_budget=target.get("cloud_budget", 0.3),
                    fallback_catch_rate=target.get("fallback_catch_rate", 0.5),
                    val_share=split.get("val_share", 0.15), test_share=split.get("test_share", 0.15),
                    split_salt=split.get("salt", ""), margin_binary=label.get("margin_binary", 0.0),
                    margin_graded=label.get("margin_graded", 0.1),
                    edge_context_tokens=manifest.get("limits", {}).get("edge_context_tokens", 1024))
    return TrainConfig(**{**settings, **options})


def load_frame(config: EvalConfig, manifest: dict, *, console):
    """Validated, merged rows with the bundle's split and label (pipelines.train.prepare_frame),
    or with the Dask engine, hash samples of the evaluated split and the train split."""
    from pipelines.train import prepare_frame
    from pipelines.train_dask import sampled_frame

    train_config = bundle_train_config(manifest, data=list(config.logs), reports_dir=config.out,
                                       max_reject_share=config.max_reject_share, engine=config.engine,
                                       dask_scheduler=config.dask_scheduler, dask_workers=config.dask_workers)
    if config.engine == "local":
        return prepare_frame(train_config)
    splits = ("all",) if config.split == "all" else tuple(dict.fromkeys((config.split, "train")))
    return sampled_frame(train_config, console, max_rows=config.sample_rows, splits=splits)


def log_to_mlflow(manifest: dict, metrics: dict, files: list[Path], *, console) -> str | None:
    """Metrics (flattened, `evaluate.<split>.` prefix) and files under the bundle's own run;
    a warning and None when that run cannot be found."""
    from training.tracking import flat_metrics

    info = manifest.get("mlflow") or {}
    run_id, uri = info.get("run_id"), info.get("tracking_uri")

    def skip(reason: str):
        console.print(f"[yellow]warning[/]: not logged to MLflow: {reason}")
        log.warning("evaluation not logged to MLflow: %s", reason)

    if not run_id or not uri:
        return skip("the bundle's manifest names no MLflow run")
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return skip(f"tracking store {uri} does not exist here (a bundle from elsewhere?)")
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        client.get_run(run_id)
    except Exception as exc:  # MlflowException for an unknown run, or an unreadable store
        return skip(f"run {run_id} not found in {uri}: {exc}")
    view = {**metrics["figures"], **{k: v for k, v in metrics.items() if k not in ("setup", "notes", "figures")}}
    flat = flat_metrics({f"evaluate.{metrics['setup']['split']}": view})
    stamp = int(time.time() * 1000)
    items = [Metric(re.sub(r"[^\w\-. /:]", "_", k), v, stamp, 0) for k, v in flat.items()]
    for start in range(0, len(items), 1000):  # MLflow caps a batch at 1000 metrics
        client.log_batch(run_id, metrics=items[start:start + 1000])
    for path in files:
        client.log_artifact(run_id, str(path), artifact_path="evaluation")
    return run_id


def _setup(config: EvalConfig, manifest: dict, data_report: dict, frame, rows) -> dict:
    return {"bundle": str(config.bundle), "model_version": manifest.get("model_version", "unknown"),
            "mlflow_run_id": (manifest.get("mlflow") or {}).get("run_id"), "logs": data_report["paths"],
            "rows_read": data_report["rows_read"], "rejected": data_report["rejected"],
            "prompts": int(len(frame)), "rows_per_split": {k: int(v) for k, v in frame["split"].value_counts().items()},
            "split": config.split, "split_note": SPLIT_NOTES[config.split], "evaluated_rows": len(rows),
            "catch_rate": config.catch_rate, "cost": dataclasses.asdict(config.cost_model()),
            "latency": dataclasses.asdict(config.latency_model()), "policies": list(config.policies)}


def fit_tuned_rules(rows, manifest: dict, *, step: float):
    """The tuned rule table for the bundle's own threshold target (training.policies)."""
    from training.policies import tune_rule_table

    target = manifest.get("target", {})
    kind = target.get("kind", "quality")
    tuned = tune_rule_table(rows.n_tokens, rows.domains, rows.precisions, rows.q_edge, rows.q_cloud, step=step,
                            target=kind, max_quality_drop=target.get("max_quality_drop", 0.01),
                            cloud_budget=target.get("cloud_budget", 0.3),
                            catch_rate=target.get("fallback_catch_rate", 0.5))
    return tuned, {**tuned.as_dict(), "target": kind}


def run(config: EvalConfig, *, console=None) -> EvalResult:
    """Every stage (module doc); returns the output folder, the figures and what was written."""
    import numpy as np
    from rich.console import Console
    from rich.progress import Progress

    from pipelines.loso import leave_one_source_out
    from serving import Router
    from serving.bundle import read_manifest
    from training.eval_report import json_ready, render, write_plots
    from training.policies import EvalRows, breakdowns, evaluate_policies
    from training.policy_metrics import reliability

    console = console or Console()
    manifest = read_manifest(config.bundle)
    router = Router.load(config.bundle, strict=True)  # a degraded router would evaluate the rule table
    with console.status("loading and validating logs"):
        frame, data_report = load_frame(config, manifest, console=console)
    notes = [] if "split" in manifest else ["the manifest has no `split`: the default 15% / 15% hash split is assumed"]
    if config.engine == "dask":
        notes.append(f"Dask engine: {data_report['rows']} prompts read on the cluster; figures on hash samples of "
                     f"at most about {config.sample_rows} rows per split ({len(frame)} rows here)")
    chosen = np.ones(len(frame), bool) if config.split == "all" else (frame["split"] == config.split).to_numpy()
    if not chosen.any():
        raise ValueError(f"no rows of split {config.split!r} in these logs (rows per split: "
                         f"{frame['split'].value_counts().to_dict()}); try --split all")
    policies, fit_rows = list(config.policies), (frame["split"] == "train").to_numpy()
    tuned, tuned_info = None, {"skipped": "not requested"}
    if "tuned_rule_table" in policies and not fit_rows.any():
        policies.remove("tuned_rule_table")
        tuned_info = {"skipped": "the logs have no rows in the bundle's train split to grid-search it on"}
        notes.append(f"tuned rule table: {tuned_info['skipped']}")
    routed = chosen | fit_rows if "tuned_rule_table" in policies else chosen
    options = dict(catch_rate=config.catch_rate, cost=config.cost_model(), latency=config.latency_model())
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("routing through the SDK", total=int(routed.sum()))
        routed_rows = EvalRows.route(router, frame[routed], batch_size=config.batch_size,
                                     on_batch=lambda n: progress.advance(task, n))
        rows = routed_rows.subset(chosen[routed]).with_inferred_domains()
        if "tuned_rule_table" in policies:
            tuned, tuned_info = fit_tuned_rules(routed_rows.subset(fit_rows[routed]), manifest,
                                                step=config.rule_weight_step)
            if config.split in ("train", "all"):
                notes.append("the tuned rule table was fitted on the train rows, which this split includes")
        figures, curves = evaluate_policies(rows, policies, tuned=tuned, **options)
        metrics = {"setup": _setup(config, manifest, data_report, frame, rows), "figures": figures,
                   "calibration": reliability(rows.scores, rows.needed, bins=config.calibration_bins),
                   "breakdowns": breakdowns(rows, policies, tuned=tuned, **options), "tuned_rule_table": tuned_info}
        if config.leave_one_source_out:
            loso = leave_one_source_out(frame, manifest, sources=config.holdout_sources, cache_dir=config.cache_dir,
                                        overrides=config.loso_overrides, batch_size=config.batch_size,
                                        progress=progress, **options)
            for source, result in loso.items():
                result["in_distribution_apgr"] = metrics["breakdowns"]["source"].get(source, {}).get(
                    "learned", {}).get("apgr")
            metrics["leave_one_source_out"] = loso
            if not loso:
                notes.append("leave-one-source-out skipped: the logs hold a single source")
    over_limit = int((rows.n_tokens > router.edge_context_tokens).sum())
    metrics["notes"] = notes + [
        "Every figure is an exact expectation (over fallback catches and random routing), not a sample.",
        f"{over_limit} evaluated prompts exceed the edge context limit ({router.edge_context_tokens} tokens): "
        "cloud-first at the learned operating point whatever their score; curves rank by score alone."]
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = json_ready(metrics)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, allow_nan=False), encoding="utf-8")
    (out / "report.md").write_text(render(metrics), encoding="utf-8")
    files = [out / "report.md", out / "metrics.json", *write_plots(metrics, curves, out)]
    run_id = log_to_mlflow(manifest, metrics, files, console=console) if config.mlflow else None
    return EvalResult(out, metrics, files, run_id)


def main(
    bundle: Annotated[str, typer.Option(help="bundle folder written by `make train`")] = "artifacts/router",
    logs: Annotated[Optional[list[str]], typer.Option(help="log file, glob or folder, any supported format "
                                                           "(repeatable); default: the training logs")] = None,
    out: Annotated[str, typer.Option(help="output folder")] = "reports/latest",
    split: Annotated[str, typer.Option(help="rows to score: test | val | train | all (bundle's hash split)")] = "test",
    engine: Annotated[str, typer.Option(help="local (in memory) | dask (logs read on a Dask cluster, sampled)")] = \
        "local",
    policies: Annotated[Optional[str], typer.Option(help=f"comma-separated subset of {','.join(POLICIES)}")] = None,
    catch_rate: Annotated[float, typer.Option(help="share of edge failures the fallback catches")] = 0.5,
    leave_one_source_out: Annotated[bool, typer.Option(
        "--leave-one-source-out/--no-leave-one-source-out", help="retrain without each source, score it")] = False,
    holdout_source: Annotated[Optional[list[str]], typer.Option(help="only these held-out sources")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="any EvalConfig option, KEY=VALUE")] = None,
    loso_set: Annotated[Optional[list[str]], typer.Option(help="TrainConfig option of the leave-one-source-out "
                                                               "trainings, KEY=VALUE")] = None,
) -> None:
    """Score logs through the SDK and compare the learned router with the rule tables and references."""
    from rich.console import Console
    from rich.markup import escape

    from data.logs import DataQualityError
    from pipelines.train import parse_overrides
    from serving.bundle import BundleError
    from training.eval_report import summary_table

    logging.basicConfig(level=logging.WARNING)
    console = Console()
    try:
        options = {"bundle": bundle, "logs": list(logs or []), "out": out, "split": split, "catch_rate": catch_rate,
                   "engine": engine,
                   "leave_one_source_out": leave_one_source_out, "holdout_sources": list(holdout_source or []),
                   "loso_overrides": parse_overrides(loso_set or []), **parse_overrides(set_ or [])}
        if policies is not None:
            options["policies"] = policies.split(",")
        result = run(EvalConfig.from_options(**options), console=console)
    except (ValueError, FileNotFoundError, DataQualityError, BundleError) as exc:
        Console(stderr=True).print("[red]error[/]:", escape(str(exc)), soft_wrap=True)
        raise typer.Exit(2) from exc
    console.print(summary_table(result.metrics))
    logged = f"MLflow run {result.mlflow_run_id}" if result.mlflow_run_id else "not logged to MLflow"
    console.print(f"report: {result.out / 'report.md'}  |  {logged}")


if __name__ == "__main__":
    typer.run(main)
