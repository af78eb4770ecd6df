"""The proxy's GET /dashboard: the traffic dashboard (serving.dashboard) of the requests it served
recently, behind the same bearer token as the API (docs/observability.md). The proxy keeps its
last MAX_REQUESTS routed requests (RecentRequests), fed where it counts them for /metrics: one
RequestSummary per answer served (a stream: at its first chunk, so its cost is left out) and what
drift reads of it. Neither holds a prompt, an answer, an error message, a key or a conversation
id. The page is drawn on request, in a worker thread, and reloads itself every REFRESH_S seconds.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING

from serving.dashboard._summary import Call, RequestSummary
from serving.monitoring._drift import decision_record
from serving.monitoring._outcome_log import pseudonym

if TYPE_CHECKING:
    from collections.abc import Sequence

    from serving._json_types import JSONObject
    from serving.chat._routing_info import RoutingInfo
    from serving.routing._router import Router

MAX_REQUESTS = 10_000
REFRESH_S = 30


def summary_of(routing: RoutingInfo, conversation: str | None = None) -> RequestSummary:
    """The dashboard's record of one routed request (module doc); `conversation` its conversation's
    id, kept as its pseudonym (serving.monitoring._outcome_log.pseudonym)."""
    decision = routing.decision
    return RequestSummary(
        time=time.time(),
        model_version=decision.model_version,
        zone=decision.zone,
        target=decision.target,
        served_by=routing.served_by,
        fallback=routing.fallback_kind,
        calls=tuple(Call(s.name, s.status, round(s.seconds * 1000, 3)) for s in routing.steps),
        unfamiliar=decision.unfamiliar if decision.novelty is not None else None,
        cost=routing.estimated_cost,
        conversation=pseudonym(conversation) if conversation is not None else None,
        turn=decision.turn,
        switched=decision.switched,
        switch_cost=decision.switch_costs.get(routing.served_by) if decision.switch_costs is not None else None,
    )


class RecentRequests:
    """The last MAX_REQUESTS routed requests, oldest dropped first; safe across threads."""

    def __init__(self) -> None:
        self._recent: collections.deque[tuple[RequestSummary, JSONObject]] = collections.deque(maxlen=MAX_REQUESTS)
        self._lock = threading.Lock()

    def add(self, routing: RoutingInfo, conversation: str | None = None) -> None:
        entry = summary_of(routing, conversation=conversation), decision_record(routing.decision, routing.steps)
        with self._lock:
            self._recent.append(entry)

    def snapshot(self) -> list[tuple[RequestSummary, JSONObject]]:
        """Each request's summary and what drift reads of it (serving.monitoring._drift.decision_record)."""
        with self._lock:
            return list(self._recent)


def page_of(recent: RecentRequests, router: Router) -> str:
    """The dashboard page of the window's requests."""
    from serving.dashboard._page import render_page
    from serving.dashboard._views import compute_views

    window = recent.snapshot()  # one read: the panels and the drift describe the same requests
    requests = [summary for summary, _ in window]
    views = compute_views(requests) if requests else None
    source = (
        f"this proxy's last {len(requests):,} requests (window {MAX_REQUESTS:,}); bundle now {router.model_version}"
    )
    drift = drift_of([record for _, record in window], router)
    return render_page(views, title="Router traffic (live)", source=source, refresh_s=REFRESH_S, drift=drift)


def drift_of(records: Sequence[JSONObject], router: Router) -> JSONObject | None:
    """The drift panel: the window's request records (RecentRequests.snapshot) against the current bundle's
    reference (those an earlier bundle decided on what does not depend on the bundle); None without a
    reference or a request."""
    from serving.monitoring._drift import drift_report

    reference = router.drift_reference()
    if reference is None or not records:
        return None
    return drift_report(reference, records).as_dict()
