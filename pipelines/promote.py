"""`make promote BUNDLE=dir`: move the MLflow alias `champion` to the challenger bundle only
when it is at least as good on the same traffic (training.promotion says how it decides, and
when it refuses to). When --logs holds outcome log folders, the challenger's drift report on
them is shown beside the decision (it does not change the decision)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from evaluation.off_policy import MIN_PROPENSITY
from training.promotion import MIN_ROWS


def main(
    bundle: Annotated[Path, typer.Option(help="the challenger bundle (trained and registered by make train)")],
    logs: Annotated[Optional[list[str]], typer.Option(help="SDK outcome logs to compare on (repeatable)")] = None,
    full_logs: Annotated[Optional[list[str]], typer.Option(help="logs with both outcomes (repeatable)")] = None,
    margin: float = 0.005,
    dry_run: Annotated[bool, typer.Option("--dry-run")] = False,
    model: str = "edge-cloud-router",
    min_rows: Annotated[
        int, typer.Option(help="refuse figures that rest on fewer logged requests or prompts with both outcomes")
    ] = MIN_ROWS,
    min_propensity: Annotated[
        float, typer.Option(help="reject logged requests with a smaller propensity (off-policy estimates)")
    ] = MIN_PROPENSITY,
) -> None:
    """Promote the challenger to `champion` if it is at least as good (training.promotion says how it decides)."""
    import json

    from rich.console import Console
    from rich.markup import escape

    from data.logs import DataQualityError
    from serving.bundle._bundle import BundleError
    from training.promotion import promote

    try:
        result = promote(
            bundle,
            logs=list(logs or []),
            full_logs=list(full_logs or []),
            margin=margin,
            dry_run=dry_run,
            model=model,
            min_rows=min_rows,
            min_propensity=min_propensity,
        )
    except (ValueError, FileNotFoundError, DataQualityError, BundleError) as exc:  # PromotionRefused included
        Console(stderr=True).print("[red]error[/]:", escape(str(exc)), soft_wrap=True)
        raise typer.Exit(2) from exc
    console = Console()
    verdict = "promote" if result["promote"] else "keep the champion"
    console.print(
        f"{escape('[dry run] ') if dry_run else ''}{verdict}: version {result['challenger_version']} vs "
        f"champion {result['champion_version']}: {escape(result['why'])}",
        soft_wrap=True,
    )
    rejected = result["rejected"]
    if rejected and rejected["rows"]:
        kinds = ", ".join(f"{n} {kind}" for kind, n in rejected["by_kind"].items())
        first = "; the first invalid ones:" if rejected["first"] else ""
        console.print(f"--logs: {rejected['rows']} rows rejected ({kinds}){first}", soft_wrap=True)
        for line in rejected["first"]:
            console.print(f"  {escape(line)}", soft_wrap=True, highlight=False)
    _show_drift(console, bundle, list(logs or []))
    console.print_json(
        json.dumps({k: result[k] for k in ("challenger", "champion")})
    )  # last: the machine-readable part


def _show_drift(console, bundle: Path, logs: list[str]) -> None:
    """Beside the decision: the challenger's drift report on the --logs that are outcome log
    folders (evaluation.drift); nothing when none is."""
    from rich.markup import escape

    from data.sdk_logs import is_outcome_log_folder
    from evaluation.drift import bundle_drift, drift_table
    from serving.bundle._bundle import BundleError
    from serving.monitoring._drift import DriftInputError

    folders = [path for path in logs if is_outcome_log_folder(Path(path))]
    if not folders:
        return
    try:
        report = bundle_drift(bundle, folders)
    except (BundleError, DriftInputError) as exc:
        console.print(f"drift: not computed: {escape(str(exc))}", soft_wrap=True)
        return
    console.print(drift_table(report))
    console.print(f"drift verdict: {report.verdict}: {escape(report.reason)}", soft_wrap=True)


if __name__ == "__main__":
    typer.run(main)
