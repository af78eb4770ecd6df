"""Issue 30's done-criterion in one run: traffic through the proxy against local stub servers,
with OpenTelemetry's in-memory exporter and metric reader, and the proxy's /dashboard loaded in
headless Chromium. The spans, the metric points and the page must tell the same story as the
responses the client received: per zone, per serving endpoint, per fallback reason, and per
call made."""

from __future__ import annotations

import collections

import httpx2
import pytest

from tests.chat_stubs import ASK, LONG, fresh_stubs, router, stubs  # noqa: F401  (fixtures)
from tests.test_dashboard import Tables, chromium_dom, counts
from tests.test_proxy import config_for, running_proxy
from tests.test_telemetry import otel, roots_and_children  # noqa: F401  (otel: a fixture)

pytestmark = pytest.mark.real_data  # the session's trained test bundle routes


def test_spans_metrics_and_the_dashboard_agree_on_the_traffic_sent(router, stubs, otel):  # noqa: F811
    edge, _ = stubs
    # on the loopback without a token: a browser cannot send the bearer header (test_dashboard tests the 401)
    config = config_for(stubs, token=None)
    plan = [ASK, ASK, LONG, "edge down", ASK, LONG, "edge down", ASK]
    received = collections.Counter()
    with running_proxy(router, config) as url:
        with httpx2.Client(timeout=20) as client:
            for step in plan:
                edge.behaviour.status = 503 if step == "edge down" else 200
                messages = ASK if step == "edge down" else step
                response = client.post(f"{url}/v1/chat/completions", json={"model": "router", "messages": messages})
                assert response.status_code == 200, response.text
                received["zone", response.headers["x-router-zone"]] += 1
                received["served", response.headers["x-router-served-by"]] += 1
                if "x-router-fallback" in response.headers:
                    received["fallback", response.headers["x-router-fallback"]] += 1
        dom = chromium_dom(f"{url}/dashboard")
        spans = otel.wait_for_spans(len(plan) + received["zone", "edge"] + received["zone", "edge_with_cloud_fallback"])
    roots, children = roots_and_children(spans)
    assert len(roots) == len(plan)

    def tally(kind: str) -> dict[str, int]:
        return {key: n for (k, key), n in received.items() if k == kind}

    # the spans: one per request, its router attributes as the response headers said
    zones = collections.Counter(dict(root.attributes)["router.zone"] for root in roots)
    served = collections.Counter(dict(root.attributes)["router.served_by"] for root in roots)
    fallbacks = collections.Counter(
        dict(root.attributes)["router.fallback_reason"]
        for root in roots
        if "router.fallback_reason" in dict(root.attributes)
    )
    assert dict(zones) == tally("zone") and dict(served) == tally("served") and dict(fallbacks) == tally("fallback")
    assert tally("fallback") == {"http_error": 2}
    calls = collections.Counter(
        child.name.removeprefix("chat ").removesuffix("-model")
        for root in roots
        for child in children[root.context.span_id]
    )
    # the metrics: the same counts
    points = otel.points()
    assert {dict(key)["router.served_by"]: n for key, n in points["router.served"].items()} == tally("served")
    assert {dict(key)["router.fallback_reason"]: n for key, n in points["router.fallbacks"].items()} == tally(
        "fallback"
    )
    assert sum(points["router.decisions"].values()) == len(plan)
    # the dashboard, as Chromium renders it: the same requests, zones, endpoints, fallbacks and calls
    page = Tables(dom)
    assert page.texts["requests"] == str(len(plan))
    assert counts(page.tables["zones"]) == tally("zone")
    assert counts(page.tables["served"]) == tally("served")
    assert counts(page.tables["fallbacks"]) == tally("fallback")
    assert counts(page.tables["latencies"]) == dict(calls)
