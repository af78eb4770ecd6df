"""`make drift BUNDLE=dir LOGS=dir`: is the traffic in an outcome log still like the bundle's
training traffic? Prints the checks (serving.monitoring._drift) and the verdict, stable / watch / retrain
(unknown for a bundle without a drift reference), and writes the report as JSON.

Exit status: 0 whatever the verdict, 2 on bad input (a line that is not an outcome record, a file
that is not a regular file, a log without a request record: the error names the file and line);
with `--fail-on watch` (or `retrain`), 1 when the verdict is at least that (for a scheduled job).
Text from the log (file names, reasons) is printed with control characters escaped
(serving.monitoring._outcome_log.printable)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer


def main(
    bundle: Annotated[Path, typer.Option(help="the bundle whose drift reference the logs are compared with")],
    logs: Annotated[List[Path], typer.Option(help="an OutcomeLog folder (outcomes-*.jsonl); repeatable")],
    out: Annotated[Path, typer.Option(help="where the JSON report goes")] = Path("reports/drift/drift.json"),
    psi_watch: float = 0.1,
    psi_retrain: float = 0.25,
    rate_watch: Annotated[float, typer.Option(help="a rate's harmful change, in points, that says watch")] = 0.05,
    rate_retrain: float = 0.10,
    min_records: Annotated[int, typer.Option(help="requests needed before a distribution is compared")] = 100,
    min_outcomes: Annotated[int, typer.Option(help="requests with the outcome needed before a rate is compared")] = 30,
    rescore: Annotated[
        bool, typer.Option(help="give requests another bundle version logged this bundle's decision (text mode)")
    ] = True,
    fail_on: Annotated[
        Optional[str], typer.Option(help="exit 1 when the verdict is at least this: watch | retrain")
    ] = None,
) -> None:
    """Compare an outcome log with the bundle's drift reference (docs/observability.md#drift)."""
    import json

    from rich.console import Console
    from rich.markup import escape

    from evaluation.drift import bundle_drift, drift_table
    from serving.bundle._bundle import BundleError
    from serving.monitoring._drift import RETRAIN, WATCH, DriftInputError, DriftThresholds
    from serving.monitoring._outcome_log import printable

    error = Console(stderr=True)
    if fail_on not in (None, WATCH, RETRAIN):
        raise typer.BadParameter(f"must be {WATCH} or {RETRAIN}, got {fail_on!r}", param_hint="--fail-on")
    try:
        thresholds = DriftThresholds(
            psi_watch=psi_watch,
            psi_retrain=psi_retrain,
            rate_watch=rate_watch,
            rate_retrain=rate_retrain,
            min_records=min_records,
            min_outcomes=min_outcomes,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        report = bundle_drift(bundle, logs, thresholds, rescored=rescore)
    except (BundleError, DriftInputError) as exc:
        error.print("[red]error[/]:", escape(printable(str(exc))), soft_wrap=True)
        raise typer.Exit(2) from exc
    console = Console()
    console.print(drift_table(report))
    console.print(f"verdict: {report.verdict}: {escape(printable(report.reason))}", soft_wrap=True)
    for line in report.left_out:
        console.print(f"left out: {escape(printable(line))}", soft_wrap=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
    console.print(f"report: {out}")
    failing = {WATCH: (WATCH, RETRAIN), RETRAIN: (RETRAIN,)}.get(fail_on or "", ())
    if report.verdict in failing:
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
