"""The proxy's /metrics: Prometheus text exposition (prometheus_client, one registry per app). The
metrics, their labels and the failure reasons: docs/clients.md#the-proxy. Labels take only fixed
names and model versions, never a prompt, a key or a URL.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import choose_encoder

from serving.chat._routing_info import RoutingInfo
from serving.monitoring._telemetry import LATENCY_BUCKETS  # the same buckets on /metrics and in OpenTelemetry

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client.metrics_core import Metric

    from serving.execution._execute import Step
    from serving.routing._router import Router


class _BundleState:
    """Collects the router's state at scrape time, so an update or a degraded load shows at once."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def collect(self) -> list[Metric]:
        degraded = GaugeMetricFamily("router_degraded", "1 while the rule table decides (no usable bundle)")
        degraded.add_metric([], 1.0 if self.router.degraded else 0.0)
        info = InfoMetricFamily("router_bundle", "The routing bundle in use")
        info.add_metric([], {"model_version": self.router.model_version})
        state = CounterMetricFamily(
            "router_conversation_state_errors",
            "Conversation store reads and writes that failed (requests decided without their state, turns not written)",
        )
        state.add_metric([], float(self.router.conversation_state_errors))
        ledger = CounterMetricFamily(
            "router_budget_ledger_errors", "Budget ledger operations that could not reach Redis (budgets read as spent)"
        )
        ledger.add_metric([], float(getattr(self.router.spending, "errors", 0)))
        return [degraded, info, state, ledger]


class ProxyMetrics:
    """The proxy's counters and histograms (docs/clients.md#the-proxy lists them)."""

    def __init__(self, router: Router) -> None:
        self.registry = registry = CollectorRegistry()
        counter = functools.partial(Counter, registry=registry)
        histogram = functools.partial(Histogram, buckets=LATENCY_BUCKETS, registry=registry)
        self.decisions = counter("router_decisions", "Routing decisions by zone", ["zone"])
        self.served = counter("router_served", "Answers by the endpoint that served them", ["served_by"])
        self.fallbacks = counter("router_fallbacks", "Edge-first requests the cloud answered, by reason", ["reason"])
        self.failures = counter("router_failed_requests", "Requests answered with an error, by reason", ["reason"])
        self.duration = histogram(
            "router_request_duration_seconds", "From the request to the complete answer", ["served_by", "stream"]
        )
        self.first_chunk = histogram(
            "router_time_to_first_chunk_seconds", "Streams: from the request to the first chunk", ["served_by"]
        )
        self.upstream = histogram(
            "router_upstream_call_duration_seconds",
            "Each edge, accept and cloud call (streams: to the first token)",
            ["step", "status"],
        )
        self.in_flight = Gauge("router_in_flight_requests", "Chat requests being served", registry=registry)
        self.turns = counter("router_conversation_turns", "Answered requests in a conversation")
        self.switches = counter(
            "router_conversation_switches", "Answered turns whose decision moved the conversation to another endpoint"
        )
        registry.register(_BundleState(router))

    def routed(self, routing: RoutingInfo) -> None:
        """A request got its answer (a stream: its first chunk)."""
        self.decisions.labels(routing.decision.zone).inc()
        self.served.labels(routing.served_by).inc()
        if routing.fallback_kind is not None:
            self.fallbacks.labels(routing.fallback_kind).inc()
        for step in routing.steps:
            self.upstream.labels(step.name, step.status).observe(step.seconds)
        if routing.switch is not None:  # a request in a conversation (its state read or not)
            self.turns.inc()
            if routing.switched:
                self.switches.inc()

    def failed(self, reason: str, *, zone: str | None = None, steps: Iterable[Step] = ()) -> None:
        """A request answered with an error; a routed one counts its decision and calls too."""
        self.failures.labels(reason).inc()
        if zone is not None:
            self.decisions.labels(zone).inc()
        for step in steps:
            self.upstream.labels(step.name, step.status).observe(step.seconds)

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """The metrics in the format the scraper asked for (Prometheus text unless it asks for OpenMetrics)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type
