"""`make evaluate`: misroute-rate evaluation of a bundle on outcome logs, through the SDK.

Loads the logs with the chosen engine and the bundle's own split and label settings
(default: the test rows the model never saw), runs evaluation.run.evaluate (every policy,
calibration, breakdowns, optionally leave-one-source-out with retraining), writes
report.md, metrics.json and PNGs into `--out`, and logs them to MLflow under the
bundle's run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from data.logs import SOURCES_HELP
from evaluation.config import EvalConfig
from evaluation.policies import POLICIES
from training.config import TrainConfig, parse_overrides


def retrainer(manifest, config: EvalConfig):
    """Leave-one-source-out's `train`: the bundle's settings on the other sources' rows, in the
    work folder with a throw-away MLflow store (the user's bundle and registry stay untouched)."""
    from rich.console import Console

    from data.schema import COLUMNS
    from training.engines.base import train

    def retrain(rows, work: Path) -> Path:
        # Merged rows carry no edge answers: these routers have no acceptance check (routing is compared).
        rows.reindex(columns=list(COLUMNS)).to_json(
            work / "train.jsonl", orient="records", lines=True, force_ascii=False
        )
        # One MLflow store for all of them, beside the work folders: creating a store costs seconds.
        where = {
            "data": [str(work / "train.jsonl")],
            "bundle": {"path": str(work / "bundle")},
            "cache_dir": config.cache_dir,
            "reports_dir": str(work / "reports"),
            "mlflow": {"artifact_root": str(work / "mlruns"), "tracking_uri": f"sqlite:///{work.parent}/mlflow.db"},
        }
        trained = train(TrainConfig.from_manifest(manifest, config.loso_overrides, where), console=Console(quiet=True))
        return trained.bundle

    return retrain


def load_rows(config: EvalConfig, manifest, console):
    """(prepared frame, data report, notes, answer rows) with the bundle's split and label, from the chosen engine."""
    from training.engines import get_engine

    train_config = TrainConfig.from_manifest(
        manifest,
        {
            "data": list(config.logs),
            "reports_dir": config.out,
            "max_reject_share": config.max_reject_share,
            "engine": {
                "name": config.engine,
                "dask_scheduler": config.dask_scheduler,
                "dask_workers": config.dask_workers,
            },
        },
    )
    # The train rows fit the tuned rule table and the reference, the val rows the reference's thresholds.
    splits = ("all",) if config.split == "all" else tuple(dict.fromkeys((config.split, "train", "val")))
    frame, report, responses = get_engine(config.engine).evaluation_frame(
        train_config, console, splits=splits, max_rows=config.sample_rows
    )
    notes = report.pop("notes", [])  # what the engine's way of reading changes about the figures
    return frame, report, notes, responses


@dataclass
class EvalResult:
    """Where the report went, the figures (as in metrics.json) and the MLflow run they went to."""

    out: Path
    metrics: dict
    files: list[Path]
    mlflow_run_id: str | None


def run(config: EvalConfig, *, console=None) -> EvalResult:
    """Every stage (module doc)."""
    from rich.console import Console
    from rich.progress import Progress

    from evaluation.report import write_report
    from evaluation.run import evaluate
    from serving import Router
    from training.tracking import log_evaluation

    console = console or Console()
    router = Router.load(config.bundle, strict=True)  # a degraded router would evaluate the rule table
    manifest = router.manifest
    if manifest.endpoints is not None:
        raise ValueError(
            f"{config.bundle} routes among {len(manifest.endpoints.names)} endpoints "
            f"({', '.join(manifest.endpoints.names)}): make evaluate scores edge-cloud bundles; an N-endpoint "
            'bundle\'s figures come from `make endpoints ARGS="--data LOGS --spec SPEC"` (docs/endpoints.md)'
        )
    with console.status("loading and validating logs"):
        frame, data_report, notes, responses = load_rows(config, manifest, console)
    with Progress(console=console, transient=True) as progress:
        result = evaluate(
            config,
            router=router,
            manifest=manifest,
            frame=frame,
            data_report=data_report,
            train=retrainer(manifest, config),
            progress=progress,
            responses=responses,
        )
    result.metrics["notes"] = notes + result.metrics["notes"]
    metrics, files = write_report(result.metrics, result.curves, Path(config.out))
    run_id = None
    if config.mlflow:
        run_id, why_not = log_evaluation(manifest, metrics, files)
        if why_not:
            console.print(f"[yellow]warning[/]: not logged to MLflow: {why_not}")
    return EvalResult(Path(config.out), metrics, files, run_id)


def _metadata(items: list[str]) -> dict[str, str]:
    from evaluation.rules_effect import metadata_pairs

    try:
        return metadata_pairs(items)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--metadata") from None


def main(
    bundle: Annotated[str, typer.Option(help="bundle folder written by `make train`")] = "artifacts/router",
    logs: Annotated[
        Optional[list[str]], typer.Option(help=f"{SOURCES_HELP} (repeatable); default: the training logs")
    ] = None,
    out: Annotated[str, typer.Option(help="output folder")] = "reports/latest",
    split: Annotated[str, typer.Option(help="rows to score: test | val | train | all (bundle's hash split)")] = "test",
    engine: Annotated[
        str, typer.Option(help="local (in memory) | dask (logs read on a Dask cluster, sampled)")
    ] = "local",
    policies: Annotated[Optional[str], typer.Option(help=f"comma-separated subset of {','.join(POLICIES)}")] = None,
    catch_rate: Annotated[float, typer.Option(help="share of edge failures the fallback catches")] = 0.5,
    leave_one_source_out: Annotated[
        bool,
        typer.Option("--leave-one-source-out/--no-leave-one-source-out", help="retrain without each source, score it"),
    ] = False,
    holdout_source: Annotated[Optional[list[str]], typer.Option(help="only these held-out sources")] = None,
    policy: Annotated[
        Optional[str], typer.Option(help="a policy file (docs/policies.md): its rules' counts and effect")
    ] = None,
    metadata: Annotated[
        Optional[list[str]], typer.Option(help="request metadata the policy's rules read, KEY=VALUE (repeatable)")
    ] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="any EvalConfig option, KEY=VALUE")] = None,
    loso_set: Annotated[
        Optional[list[str]],
        typer.Option(help="TrainConfig option of the leave-one-source-out trainings, GROUP.KEY=VALUE"),
    ] = None,
) -> None:
    """Score logs through the SDK and compare the learned router with the rule tables and references."""
    from rich.console import Console
    from rich.markup import escape

    from data.logs import DataQualityError
    from evaluation.report import summary_table
    from serving.bundle import BundleError

    logging.basicConfig(level=logging.WARNING)
    console = Console()
    try:
        options = {
            "bundle": bundle,
            "logs": list(logs or []),
            "out": out,
            "split": split,
            "catch_rate": catch_rate,
            "engine": engine,
            "leave_one_source_out": leave_one_source_out,
            "holdout_sources": list(holdout_source or []),
            "loso_overrides": parse_overrides(loso_set or []),
            "policy": policy,
            "metadata": _metadata(metadata or []),
            **parse_overrides(set_ or []),
        }
        if policies is not None:
            options["policies"] = policies.split(",")
        result = run(EvalConfig.from_options(**options), console=console)
    except (ValueError, FileNotFoundError, DataQualityError, BundleError) as exc:
        Console(stderr=True).print("[red]error[/]:", escape(str(exc)), soft_wrap=True)
        raise typer.Exit(2) from exc
    console.print(summary_table(result.metrics))
    for note in result.metrics.get("notes", []):  # e.g. a cross-fitted bundle scored on its own training logs
        console.print(f"[yellow]note[/]: {escape(note)}", soft_wrap=True)
    logged = f"MLflow run {result.mlflow_run_id}" if result.mlflow_run_id else "not logged to MLflow"
    console.print(f"report: {result.out / 'report.md'}  |  {logged}")


if __name__ == "__main__":
    typer.run(main)
