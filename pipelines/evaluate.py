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
        result = run_endpoints(config, router, console=console)
    else:
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


def endpoint_rows(config: EvalConfig, manifest):
    """(the rows of an N-endpoint bundle's logs it never saw, their rejects): read_endpoint_logs with
    the bundle's endpoints, the split of training.endpoint_bundle (fold BUNDLE_FOLD of the prompt-hash
    folds its manifest's split section gives) or every row (`all`)."""
    from data.endpoint_logs import read_endpoint_logs
    from training.endpoint_bundle import BUNDLE_FOLD
    from training.endpoints import fold_masks

    if not config.logs:
        raise ValueError(
            f"{config.bundle} is an N-endpoint bundle, whose manifest names no logs: give them (--logs), "
            "the N-endpoint logs it was trained on or traffic it routed (docs/endpoints.md#n-endpoint-logs)"
        )
    frame, rejects = read_endpoint_logs(config.logs, manifest.endpoints.names)
    if not len(frame):
        raise ValueError(f"no valid N-endpoint rows in {', '.join(config.logs)} ({len(rejects)} rejected)")
    if config.split == "all":
        return frame.reset_index(drop=True), rejects
    split = manifest.split
    masks = fold_masks(
        frame["prompt"].to_numpy(object),
        folds=round(1.0 / split["test_share"]),
        fold=BUNDLE_FOLD,
        val_share=split["val_share"],
        salt=split.get("salt", ""),
    )
    return frame[masks[config.split]].reset_index(drop=True), rejects


def run_endpoints(config: EvalConfig, router, *, console):
    """`make evaluate`'s figures of an N-endpoint bundle: its unseen rows of N-endpoint logs routed by
    the SDK (evaluation.endpoints.bundle_figures; the acceptance check on the rows' answers where the
    bundle has one and the logs carry them)."""
    import numpy as np

    from evaluation.acceptance import separation_by_source
    from evaluation.conversations import logged_conversations
    from evaluation.endpoints import bundle_figures
    from evaluation.rows import decide
    from evaluation.run import Evaluation
    from serving.endpoints._choice import call_costs
    from training.endpoint_bundle import answer_rows
    from training.endpoints import EndpointRows

    manifest = router.manifest
    section = manifest.endpoints
    with console.status("loading and validating logs"):
        frame, rejects = endpoint_rows(config, manifest)
    rows = EndpointRows.from_frame(frame, section.names)
    decisions, kept = decide(router, rows.prompts, rows.precisions)
    if len(kept) < len(rows):  # prompts no endpoint's context holds: the SDK raises for them
        rows = rows.subset(np.asarray(kept, dtype=np.int64))
    price, _ = call_costs(list(section.spec), [d.n_tokens for d in decisions], section.output_tokens)
    cost = np.where(np.isfinite(rows.cost), rows.cost, price)
    figures = bundle_figures(
        section.names,
        decisions,
        rows.quality,
        cost,
        routed=rows.routed,
        propensity=rows.propensity,
        catch_rate=config.catch_rate,
    )
    metrics: dict = {
        "setup": {
            "bundle": config.bundle,
            "model_version": manifest.model_version,
            "logs": list(config.logs),
            "split": config.split,
            "rejected": len(rejects),
            "endpoints": list(section.names),
            "no_feasible_endpoint": len(frame) - len(kept),
        },
        "figures": figures,
        "notes": [
            note
            for note, given in (
                ("leave-one-source-out is not run on an N-endpoint bundle", config.leave_one_source_out),
                ("--policy is not read for an N-endpoint bundle: make endpoints ARGS='--policy ...'", config.policy),
            )
            if given
        ],
    }
    # rows that link turns (conversation, turn) are replayed as conversations too (evaluation.conversations)
    linked = logged_conversations(config.bundle, frame, section.names, section.output_tokens)
    if linked is not None:
        metrics["conversations"] = linked
    answers = answer_rows(rows, {"test": np.ones(len(rows), bool), "val": np.zeros(len(rows), bool)})
    if router.acceptor is not None and answers is not None:
        probability = router.acceptor.probabilities(answers["prompt"].tolist(), answers["edge_response"].tolist())
        good = answers["edge_quality"].to_numpy() >= manifest.acceptance.get("good_quality", 0.5)
        metrics["acceptance"] = separation_by_source(probability, good, answers["source"], router.acceptor.threshold)
    return Evaluation(metrics, {})


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
    from serving.bundle._bundle import BundleError

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
    if "endpoints" in result.metrics["setup"]:  # an N-endpoint bundle's (run_endpoints)
        console.print((result.out / "report.md").read_text(encoding="utf-8"), soft_wrap=True, markup=False)
    else:
        console.print(summary_table(result.metrics))
    for name, f in result.metrics.get("conversations", {}).get("policies", {}).items():
        console.print(
            f"conversations, {name}: quality {f['quality']:.4f}, ${f['cost']:.5f}, {f['switches']:.2f} switches"
        )
    for note in result.metrics.get("notes", []):  # e.g. a cross-fitted bundle scored on its own training logs
        console.print(f"[yellow]note[/]: {escape(note)}", soft_wrap=True)
    logged = f"MLflow run {result.mlflow_run_id}" if result.mlflow_run_id else "not logged to MLflow"
    console.print(f"report: {result.out / 'report.md'}  |  {logged}")


if __name__ == "__main__":
    typer.run(main)
