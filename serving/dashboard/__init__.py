"""The traffic dashboard: what the router did, computed from outcome-log records or the proxy's
recent requests, as one self-contained HTML page (docs/observability.md#dashboard-and-report).

    summary.py   one request as the dashboard sees it (no text, no keys), from a log record
    views.py     the views: routing mix over time, fallbacks, latency, cost, familiarity, bundles
    quality.py   the off-policy quality estimate when feedback exists
    page.py      the HTML page and its drift panel
    plots.py     matplotlib figures as inline SVG (the `server` extra; imported when a page is drawn)

The proxy's /dashboard is serving.proxy._dashboard; `make report` is pipelines.traffic_report.
"""

from serving.dashboard._page import render_page
from serving.dashboard._summary import RecordShapeError, RequestSummary, from_record, outcomes_from_feedback
from serving.dashboard._views import CallPrices, Views, compute_views

__all__ = [
    "CallPrices",
    "RecordShapeError",
    "RequestSummary",
    "Views",
    "compute_views",
    "from_record",
    "outcomes_from_feedback",
    "render_page",
]
