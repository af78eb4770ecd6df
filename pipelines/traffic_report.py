"""`make report LOGS=dir`: the traffic dashboard of an outcome-log folder as one static,
self-contained HTML file (the same views as the proxy's /dashboard, serving.dashboard), for a
period: a day, a week, or any --since / --until.

    python -m pipelines.traffic_report --logs logs/ --period day
    python -m pipelines.traffic_report --logs logs/ --since 2026-11-23 --until 2026-11-30 --out reports/week.html
    python -m pipelines.traffic_report --logs logs/ --screenshot docs/dashboard.png

The folder's `request` records whose time falls in the period are shown; `feedback` records
(router.feedback, `make label`) join them by request id, from any time. Bad input stops the
command with an error naming the file and line, never a traceback: a missing folder, a folder
without outcome files, a file that is not a regular file (a FIFO, a device: refused, never
waited on), a line that is not an outcome record (longer than MAX_LINE_BYTES, not UTF-8, not
JSON, nested too deeply, a number that is not a finite double), a record without the fields the
SDK writes (a time outside 1970-9999 too), no request in the period. Memory: one line of at most
MAX_LINE_BYTES at a time (serving.monitoring._outcome_log.read_log_lines), and what is kept of each record: a
request's summary, a feedback's id, time and qualities. What the terminal shows of the log (file
names, versions, reasons) has its control characters escaped (serving.monitoring._outcome_log.printable), and
the page escapes them and HTML alike. --screenshot PATH also writes a PNG of the page taken with
headless Chromium.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

PERIODS = {"day": 86400.0, "week": 7 * 86400.0}
FEEDBACK_FIELDS = ("request_id", "time", "edge_quality", "cloud_quality")  # what the report reads of a feedback record


class ReportError(Exception):
    """Input the report cannot be made from: the message says which file and line, and why."""


def parse_time(text: str, option: str) -> float:
    """Epoch seconds of an ISO 8601 date or date and time; UTC unless it names an offset."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ReportError(
            f"{option} {text!r}: expected an ISO 8601 date or time, e.g. 2026-11-30 or 2026-11-30T12:00"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def period_bounds(since: str | None, until: str | None, period: str | None, latest: float) -> tuple[float, float]:
    """[start, end) of the report: --since and --until as given; --period with one of them
    counts from it, with neither it ends at the latest request (`latest`)."""
    if period is not None and period not in PERIODS:
        raise ReportError(f"--period {period!r}: use one of {', '.join(PERIODS)}")
    if period is not None and since is not None and until is not None:
        raise ReportError("--period with both --since and --until: give at most two of the three")
    start = parse_time(since, "--since") if since is not None else None
    end = parse_time(until, "--until") if until is not None else None
    if period is not None:
        span = PERIODS[period]
        if start is not None:
            end = start + span
        else:
            end = end if end is not None else latest + 1e-6
            start = end - span
    start = float("-inf") if start is None else start
    end = float("inf") if end is None else end
    if start >= end:
        raise ReportError("the period is empty: --since must come before --until")
    return start, end


def read_log(folder: Path) -> tuple[list, list[dict]]:
    """(request summaries, feedback records) of an outcome-log folder; ReportError at the first
    line that cannot be read, naming its file and line."""
    from serving.dashboard import RecordShapeError, from_record
    from serving.monitoring._outcome_log import FILE_PATTERN, read_log_lines

    if not folder.is_dir():
        raise ReportError(f"{folder}: no such folder (give the outcome log's folder with --logs / LOGS=)")
    if not any(folder.glob(FILE_PATTERN)):
        raise ReportError(f"{folder}: no outcome files ({FILE_PATTERN}) in this folder")
    requests, feedback = [], []
    for line in read_log_lines(folder):
        where = f"{line.file} line {line.line}" if line.line else line.file
        if line.record is None:
            raise ReportError(f"{where}: {line.problem}")
        kind = line.record.get("type")
        try:
            if kind == "request":
                requests.append(from_record(line.record))
            elif kind == "feedback":  # what outcomes_from_feedback reads of it, not the whole record
                feedback.append({key: line.record.get(key) for key in FEEDBACK_FIELDS})
            elif kind != "shadow":
                raise RecordShapeError(f"unknown record type {kind!r}")
        except RecordShapeError as exc:
            raise ReportError(f"{where}: {exc}") from None
    return requests, feedback


def write_report(
    folder: Path,
    out: Path,
    *,
    since: str | None = None,
    until: str | None = None,
    period: str | None = None,
    drift: Path | None = None,
    cloud_price: float = 1.0,
    edge_price: float = 0.0,
    unit: str = "cloud calls",
    bucket_s: int | None = None,
) -> dict:
    """Write the report of `folder` to `out` (module doc); what it showed, as a dict."""
    from serving.dashboard import CallPrices, compute_views, outcomes_from_feedback, render_page
    from serving.dashboard._summary import RecordShapeError

    requests, feedback = read_log(folder)
    if not requests:
        raise ReportError(f"{folder}: no request records in the outcome files")
    start, end = period_bounds(since, until, period, max(r.time for r in requests))
    chosen = [r for r in requests if start <= r.time < end]
    if not chosen:
        first, last = min(r.time for r in requests), max(r.time for r in requests)
        raise ReportError(
            f"{folder}: no request in the period {_shown(start)} to {_shown(end)} "
            f"(the log's requests run from {_shown(first)} to {_shown(last)})"
        )
    drift_panel = None
    if drift is not None:
        try:
            drift_panel = json.loads(drift.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReportError(f"{drift}: cannot read the drift verdict: {exc}") from None
    try:
        outcomes = outcomes_from_feedback(chosen, feedback)
    except RecordShapeError as exc:
        raise ReportError(f"{folder}: a feedback record: {exc}") from None
    try:
        prices = CallPrices({"edge": edge_price, "cloud": cloud_price}, unit=unit)
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    try:
        views = compute_views(chosen, outcomes=outcomes, prices=prices, bucket_s=bucket_s)
    except ValueError as exc:  # --bucket-s: not a positive number of seconds, or too many buckets
        raise ReportError(f"--bucket-s: {exc}") from None
    try:
        page = render_page(views, title="Router traffic", source=f"outcome log {folder}", drift=drift_panel)
    except ValueError as exc:  # the drift file's shape
        raise ReportError(f"{drift}: {exc}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return {
        "requests": views.requests,
        "start": views.start,
        "end": views.end,
        "zones": views.zones,
        "served": views.served,
        "bundles": [b.model_version for b in views.bundles],
        "with_feedback": views.quality.labelled if views.quality else 0,
    }


def _shown(epoch: float) -> str:
    if epoch in (float("inf"), float("-inf")):
        return "(open)"
    try:
        return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):  # before year 1 or after 9999 (--since 0001-01-01 --period day)
        return f"{epoch:.0f} s from 1970"


def screenshot(page: Path, png: Path, *, chromium: str = "chromium", width: int = 1280, height: int = 2000) -> None:
    """A PNG of `page` taken with headless Chromium (`width` x `height` pixels)."""
    binary = shutil.which(chromium)
    if binary is None:
        raise ReportError(f"--screenshot needs Chromium: {chromium!r} is not on the PATH (--chromium PATH)")
    png.parent.mkdir(parents=True, exist_ok=True)
    command = [
        binary,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        f"--screenshot={png.resolve()}",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not png.is_file():
        raise ReportError(f"chromium could not take the screenshot (exit {done.returncode}): {done.stderr[-500:]}")


def main(
    logs: Annotated[Path, typer.Option(help="the outcome log's folder (outcomes-*.jsonl)")],
    out: Annotated[Path, typer.Option(help="the HTML file to write")] = Path("reports/traffic.html"),
    since: Annotated[Optional[str], typer.Option(help="from this ISO date or time (UTC unless given)")] = None,
    until: Annotated[Optional[str], typer.Option(help="up to this ISO date or time, excluded")] = None,
    period: Annotated[
        Optional[str], typer.Option(help="day or week: from --since, up to --until, else up to the latest request")
    ] = None,
    drift: Annotated[
        Optional[Path],
        typer.Option(help="a JSON drift verdict for the drift panel (serving.monitoring._drift's shape)"),
    ] = None,
    cloud_price: Annotated[float, typer.Option(help="price of one cloud call")] = 1.0,
    edge_price: Annotated[float, typer.Option(help="price of one edge call")] = 0.0,
    unit: Annotated[str, typer.Option(help="what the prices are in")] = "cloud calls",
    bucket_s: Annotated[Optional[int], typer.Option(help="seconds per time bucket (default: from the period)")] = None,
    screenshot_png: Annotated[
        Optional[Path], typer.Option("--screenshot", help="also write a PNG of the page (headless Chromium)")
    ] = None,
    chromium: Annotated[str, typer.Option(help="the Chromium binary for --screenshot")] = "chromium",
) -> None:
    """Write the traffic dashboard of an outcome-log folder as one HTML file."""
    from serving.monitoring._outcome_log import printable

    try:
        shown = write_report(
            logs,
            out,
            since=since,
            until=until,
            period=period,
            drift=drift,
            cloud_price=cloud_price,
            edge_price=edge_price,
            unit=unit,
            bucket_s=bucket_s,
        )
        if screenshot_png is not None:
            screenshot(out, screenshot_png, chromium=chromium)
    except ReportError as exc:
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        raise typer.Exit(1) from None
    print(
        printable(
            f"wrote {out}: {shown['requests']} requests from {_shown(shown['start'])} to {_shown(shown['end'])}, "
            f"served {shown['served']}, bundles {', '.join(shown['bundles'])}, {shown['with_feedback']} with feedback"
            + (f"; screenshot {screenshot_png}" if screenshot_png else "")
        )
    )


if __name__ == "__main__":
    typer.run(main)
