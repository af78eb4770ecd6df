"""The traffic dashboard: what the router did, computed from outcome-log records or the proxy's
recent requests, as one self-contained HTML page (docs/observability.md#dashboard-and-report).
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
