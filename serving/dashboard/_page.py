"""The dashboard as one self-contained HTML page (nothing fetched from elsewhere): the views as inline SVG
plots and plain tables, and the drift panel (a DriftReport.as_dict(), or None: "no drift reference"). The
same page is the proxy's /dashboard and `make report`'s file. Every table has an id and every row a
`data-key`, so that a test or a script can read the numbers back from the page.
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING

from serving.dashboard._views import PERCENTILES
from serving.monitoring._drift import VERDICTS
from serving.monitoring._outcome_log import printable

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from serving.dashboard._views import Views

DRIFT_CHECK_FIELDS = ("name", "statistic", "value", "status")
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin: 1.4em 0 0.4em; }
table { border-collapse: collapse; margin: 0.3em 1.5em 0.6em 0; display: inline-table; vertical-align: top; }
th, td { border-bottom: 1px solid #ddd; padding: 0.2em 0.7em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.meta { color: #555; } .note { color: #555; font-size: 0.9em; max-width: 60em; }
.verdict-stable { color: #2a9d8f; } .verdict-watch { color: #b8860b; } .verdict-retrain { color: #c0392b; }
.verdict-unknown { color: #555; }
svg { max-width: 100%; height: auto; }
"""


def check_drift(drift: Mapping[str, object] | None) -> None:
    """ValueError naming what is wrong when `drift` is not None and not the panel's shape: a
    DriftReport.as_dict() (a verdict among VERDICTS, checks with DRIFT_CHECK_FIELDS)."""
    if drift is None:
        return
    if not isinstance(drift, dict) or drift.get("verdict") not in VERDICTS:
        raise ValueError(f"drift: expected a dict with verdict one of {', '.join(VERDICTS)}")
    checks = drift.get("checks")
    if not isinstance(checks, list):
        raise ValueError("drift: 'checks' must be a list")
    for index, check in enumerate(checks):
        if not isinstance(check, dict) or any(key not in check for key in DRIFT_CHECK_FIELDS):
            raise ValueError(f"drift: checks[{index}] must be an object with {', '.join(DRIFT_CHECK_FIELDS)}")


def _e(value: object) -> str:
    """Text for the page: what could hide text or break the file's UTF-8 shown as escapes (printable),
    then HTML-escaped (quotes too: attribute values)."""
    return html.escape(printable(str(value)), quote=True)


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(table_id: str, header: Sequence[str], rows: Iterable[tuple[str, Sequence[str]]]) -> str:
    """A table whose rows are (data-key, cells); cells after the first are numbers."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        f'<tr data-key="{_e(key)}"><td>{_e(cells[0])}</td>'
        + "".join(f'<td class="n">{_e(c)}</td>' for c in cells[1:])
        + "</tr>"
        for key, cells in rows
    )
    return f'<table id="{_e(table_id)}"><tr>{head}</tr>{body}</table>'


def _counts_table(
    table_id: str, label: str, counts: Mapping[str, int], whole: int, of: str = "requests", share: str = "share"
) -> str:
    """A table of counts (`of` what) and their share of `whole`."""
    return _table(table_id, (label, of, share), ((k, (k, str(n), _share(n, whole))) for k, n in counts.items()))


def _section(section_id: str, title: str, *parts: str) -> str:
    return f'<section id="{section_id}"><h2>{title}</h2>{"".join(parts)}</section>'


def _mix(views: Views, plots: bool) -> str:
    from serving.dashboard._plots import mix_plot

    zones = _counts_table("zones", "zone", views.zones, views.requests)
    served = _counts_table("served", "served by", views.served, views.requests)
    return _section("mix", "Routing mix", mix_plot(views) if plots else "", zones, served)


def _fallbacks(views: Views) -> str:
    total = sum(views.fallbacks.values())
    note = (
        f'<p class="note">{total} of {views.edge_first} edge-first requests were answered by the cloud '
        f"({_share(total, views.edge_first)}).</p>"
    )
    table = _counts_table("fallbacks", "reason", views.fallbacks, views.edge_first, share="of edge-first")
    return _section("fallback", "Fallbacks by reason", note, table if views.fallbacks else "")


def _latency(views: Views, plots: bool) -> str:
    from serving.dashboard._plots import latency_plot

    header = ("endpoint", "calls", *(f"p{p} ms" for p in PERCENTILES), "max ms")
    rows = []
    for row in views.latency:
        percentiles = (_number(row.percentiles_ms[p]) for p in PERCENTILES)
        rows.append((row.endpoint, (row.endpoint, str(row.calls), *percentiles, _number(row.max_ms))))
    note = '<p class="note">Each call made (status ok, error or timeout); percentiles by nearest rank.</p>'
    plot = latency_plot(views) if plots and views.latency else ""
    return _section("latency", "Latency by endpoint", note, plot, _table("latencies", header, rows))


def _cost(views: Views) -> str:
    cost = views.cost
    rows: list[tuple[str, Sequence[str]]] = [
        *((f"calls:{name}", (f"{name} calls", str(n))) for name, n in cost.calls.items()),
        ("estimated", (f"estimated cost ({cost.unit})", _number(cost.estimated, 2))),
        ("all_cloud", (f"all-cloud cost ({cost.unit})", _number(cost.all_cloud, 2))),
        ("saving", ("saved against all-cloud", "-" if cost.saving is None else f"{100 * cost.saving:.1f}%")),
    ]
    if cost.measured is not None:
        rows.append(
            ("measured", (f"measured cost, {cost.measured_requests} requests with prices", _number(cost.measured, 6)))
        )
    note = (
        '<p class="note">Estimated from the calls made: each call costs its endpoint\'s price per call, '
        "all-cloud one cloud call per request. Outcome-log records carry no price; the measured cost is "
        "the proxy's, from the endpoints' token prices and each answer's usage, where configured."
        + (f" {cost.unpriced_calls} calls to endpoints without a price are left out." if cost.unpriced_calls else "")
        + "</p>"
    )
    return _section("cost", "Cost against all-cloud", note, _table("costs", ("", "value"), rows))


def _familiarity(views: Views) -> str:
    known, unfamiliar = views.familiarity_known, views.unfamiliar
    rows = [
        ("unfamiliar", ("unfamiliar (novelty > 1)", str(unfamiliar), _share(unfamiliar, known))),
        ("known", ("with a familiarity reference", str(known), _share(known, views.requests))),
    ]
    return _section("familiarity", "Unfamiliar prompts", _table("unfamiliar", ("", "requests", "share"), rows))


def _bundles(views: Views) -> str:
    rows = ((b.model_version, (b.model_version, str(b.requests), _when(b.first), _when(b.last))) for b in views.bundles)
    table = _table("bundles", ("model_version", "requests", "first seen", "last seen"), rows)
    return _section("bundle", "Bundles in use", table)


def _quality(views: Views) -> str:
    quality = views.quality
    if quality is None:
        return _section("quality", "Quality (feedback)", '<p class="note">No feedback for these requests.</p>')
    rows = []
    for estimate in quality.estimates:
        interval = "-" if estimate.ci95 is None else f"{estimate.ci95[0]:.3f} - {estimate.ci95[1]:.3f}"
        figures = (_number(estimate.estimate, 3), interval, str(estimate.agreeing), f"{100 * estimate.coverage:.1f}%")
        rows.append((estimate.policy, (estimate.policy, *figures)))
    note = (
        f'<p class="note">{quality.labelled} requests carry the quality of the answer that ran first '
        f"(observed mean {_number(quality.observed, 3)}); {quality.unlabelled} have none yet"
        + (f", {quality.below_floor} are left out (propensity below the floor)" if quality.below_floor else "")
        + ". First-answer quality of each policy on this traffic, self-normalised inverse propensity "
        "estimate (SNIPS) with a 95% bootstrap interval; router = the bundle without exploration. Below 100% "
        "coverage an estimate speaks for the covered requests only.</p>"
    )
    table = _table("quality_estimates", ("policy", "estimate", "95% interval", "agreeing requests", "coverage"), rows)
    return _section("quality", "Quality (feedback, off-policy)", note, table)


def _conversations(views: Views) -> str:
    view = views.conversations
    if view is None:
        return _section("conversations", "Conversations", '<p class="note">No request in a conversation.</p>')
    rows: list[tuple[str, Sequence[str]]] = [
        ("conversations", ("conversations", str(view.conversations))),
        ("turns", ("turns", str(view.turns))),
        ("switches", ("switches (turns moved to another endpoint)", str(view.switches))),
        ("switches_per_conversation", ("switches per conversation", _number(view.switches_per_conversation, 2))),
        ("max_switches", ("most switches in one conversation", str(view.max_switches))),
        ("reprefill_cost", ("re-prefill cost ($, over staying)", _number(view.reprefill_cost, 6))),
        ("unavailable", ("turns decided without their state", str(view.unavailable))),
    ]
    by = _counts_table("switch_counts", "switches", view.by_switches, view.conversations, of="conversations")
    note = (
        '<p class="note">A switch is a turn the router moved from the endpoint that answered the '
        "conversation's last turn. The re-prefill cost is what the served endpoints paid over staying "
        f"for re-reading the histories, from the {view.priced_turns} turns whose cost is known "
        "(docs/conversations.md). Turns decided without their state: the conversation store could not be "
        "read.</p>"
    )
    summary = _table("conversation_summary", ("", "value"), rows)
    return _section("conversations", "Conversations", note, summary, by)


def _drift(drift: Mapping[str, object] | None) -> str:
    if drift is None:
        return _section("drift", "Drift", '<p class="verdict">no drift reference</p>')
    verdict = str(drift["verdict"])
    checks = drift["checks"]
    assert isinstance(checks, list)  # check_drift
    rows = ((str(c["name"]), (c["name"], c["statistic"], c["value"], c["status"])) for c in checks)
    table = _table("drift_checks", ("check", "statistic", "value", "status"), rows)
    reason = f'<p class="note" id="drift_reason">{_e(drift["reason"])}</p>' if drift.get("reason") else ""
    return _section("drift", "Drift", f'<p class="verdict verdict-{_e(verdict)}">{_e(verdict)}</p>', reason, table)


def render_page(
    views: Views | None,
    *,
    title: str,
    source: str,
    drift: Mapping[str, object] | None = None,
    generated_at: float | None = None,
    refresh_s: int | None = None,
    plots: bool = True,
) -> str:
    """The page (module doc). `views` None: nothing to show yet (a proxy that has served no request);
    `source`: where the requests come from; `refresh_s`: the browser's reload period; `plots` False: tables only."""
    check_drift(drift)
    generated = _when(time.time() if generated_at is None else generated_at)
    if views is None:
        meta = f'<p class="meta" id="period">{_e(source)}: no requests yet. Generated {generated}.</p>'
        body = ""
    else:
        meta = (
            f'<p class="meta" id="period">{_e(source)}: <b id="requests">{views.requests}</b> requests from '
            f"{_when(views.start)} to {_when(views.end)}. Generated {generated}.</p>"
        )
        body = "".join(
            (
                _mix(views, plots),
                _fallbacks(views),
                _latency(views, plots),
                _cost(views),
                _familiarity(views),
                _bundles(views),
                _quality(views),
                _conversations(views),
            )
        )
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{refresh}<title>{_e(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{_e(title)}</h1>{meta}{body}{_drift(drift)}</body></html>"
    )
