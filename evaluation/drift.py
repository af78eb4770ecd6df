"""A bundle's drift report on outcome log folders, and its table: what `make drift` prints and
`make promote` shows beside its decision (serving.monitoring._drift computes it)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from serving.bundle._bundle import read_bundle
from serving.monitoring._drift import DriftReference, DriftReport, DriftThresholds, drift_report, read_records, rescore
from serving.routing._router import Router

_STYLE = {"stable": "green", "watch": "yellow", "retrain": "red", "unknown": "magenta", "skipped": "dim"}


def bundle_drift(
    bundle: str | Path, logs: Sequence[str | Path], thresholds: DriftThresholds | None = None, *, rescored: bool = True
) -> DriftReport:
    """The drift report of `bundle` on the records of the outcome log folders `logs`; with `rescored`, requests another
    bundle version logged that carry their text get this bundle's decision first (serving.monitoring._drift.rescore),
    so its score, probabilities, novelty and zone are compared too. BundleError, DriftInputError on bad input."""
    reference = DriftReference.from_bundle(read_bundle(bundle))
    left_out: list[str] = []  # a file's last line cut short: said in the report, not dropped silently
    records = [record for folder in logs for record in read_records(str(folder), left_out)]
    logged = {r.get("model_version") for r in records if isinstance(r, dict) and r.get("type") == "request"}
    if rescored and reference is not None and logged - {reference.model_version}:
        records = rescore(records, Router.load(bundle))
    return drift_report(reference, records, thresholds, left_out=left_out)


def drift_table(report: DriftReport):
    """A rich Table of the report's checks, titled with its verdict."""
    from rich.markup import escape
    from rich.table import Table

    style = _STYLE.get(report.verdict, "")
    table = Table(title=f"drift: [{style}]{report.verdict}[/] ({report.records} requests)", title_justify="left")
    for column in ("check", "statistic", "value", "reference", "current", "n", "status"):
        table.add_column(column, justify="right" if column in ("value", "reference", "current", "n") else "left")

    def number(value: float | None) -> str:
        return "" if value is None else f"{value:.3f}"

    for check in report.checks:
        value = number(check.value) + (f" (p={check.p_value:.2g})" if check.p_value is not None else "")
        status = f"[{_STYLE.get(check.status, '')}]{check.status}[/]" + (f" {escape(check.note)}" if check.note else "")
        table.add_row(
            check.name, check.statistic, value, number(check.reference), number(check.current), str(check.n), status
        )
    return table
