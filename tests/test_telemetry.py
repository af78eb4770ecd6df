"""OpenTelemetry traces and metrics (serving.monitoring._telemetry), read through the SDK's in-memory exporter
and metric reader: one span per request with a child per attempt, their attributes, the metric
points, for execute(), aexecute(), RoutedChat (streams included) and the proxy over HTTP against
stub upstreams on 127.0.0.1; no prompt, answer or key in anything exported; nothing at all
without the package or without a provider."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from serving import CloudCallError, Router
from serving.chat import Endpoint, RoutedChat
from serving.monitoring import _telemetry as telemetry
from serving.monitoring._outcome_log import OutcomeLog
from serving.proxy._app import build_app
from serving.proxy._config import ProxyConfig
from serving.testing import LocalServer
from tests.chat_stubs import ASK, CLOUD_KEY, EDGE_KEY, LONG, fresh_stubs, router, stubs  # noqa: F401  (fixtures)
from tests.conftest import ROOT

pytestmark = pytest.mark.real_data  # routing is the session's trained test bundle

CANARY = "canary-prompt-5d1f0e77"  # in every prompt below: must appear in nothing exported
PROMPT = f"What is 2+2? {CANARY}"
CANARY_MESSAGES = [{"role": "user", "content": PROMPT}]
ANSWER_CANARY = "canary-answer-c02a61"
TOKEN = "proxy-token-0123456789abcdef"
TRACE_ID, CALLER_SPAN_ID = 0x5B8EFFF798038103D269B633813FC60C, 0x00F067AA0BA902B7  # a caller's W3C traceparent


class Telemetry:
    """The spans and metric points serving exported to in-memory SDK providers."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list:
        return list(self.exporter.get_finished_spans())

    def wait_for_spans(self, count: int, timeout_s: float = 5.0) -> list:
        deadline = time.monotonic() + timeout_s
        while len(self.spans()) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.spans()

    def points(self) -> dict[str, dict[tuple, float]]:
        """metric name -> {sorted attribute items: value (a sum, or a histogram's count)}."""
        found: dict[str, dict[tuple, float]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                assert scope.scope.name == "serving"
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "count", None) if hasattr(point, "bucket_counts") else point.value
                        found.setdefault(metric.name, {})[tuple(sorted(point.attributes.items()))] = value
        return found


@pytest.fixture
def otel():
    exported = Telemetry()
    telemetry.use(tracer_provider=exported.tracer_provider, meter_provider=exported.meter_provider)
    yield exported
    telemetry.use()  # back to the global providers: none is set in the test process


def roots_and_children(spans: list) -> tuple[list, dict[int, list]]:
    """(the spans without a parent in this process, each span id -> its children)."""
    children: dict[int, list] = {}
    for span in spans:
        if span.parent is not None:
            children.setdefault(span.parent.span_id, []).append(span)
    return [s for s in spans if s.parent is None or s.parent.is_remote], children


def one_request(spans: list):
    """The one root span of a single request and its children, all in one trace."""
    roots, children = roots_and_children(spans)
    assert len(roots) == 1, [s.name for s in spans]
    root = roots[0]
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    return root, children.get(root.context.span_id, [])


def exported_text(otel: Telemetry) -> str:
    """Everything a backend would receive: span names, attributes, events, statuses, metric attributes."""
    parts = []
    for span in otel.spans():
        parts += [span.name, json.dumps(dict(span.attributes), default=str), str(span.status.description)]
        parts += [f"{e.name} {json.dumps(dict(e.attributes), default=str)}" for e in span.events]
    parts.append(json.dumps({k: [list(a) for a in v] for k, v in otel.points().items()}))
    return "\n".join(parts)


def assert_nothing_private(otel: Telemetry, *secrets: str) -> None:
    text = exported_text(otel)
    for secret in (CANARY, ANSWER_CANARY, "2+2", *secrets):
        assert secret not in text


# execute() and aexecute().
def test_execute_served_by_the_edge_is_one_span_with_an_edge_child(router, otel):
    decision = router.route(PROMPT)
    assert decision.target == "edge"
    run = router.execute(PROMPT, edge=lambda p: f"edge says {ANSWER_CANARY}", cloud=lambda p: "unused")
    assert run.served_by == "edge"
    root, children = one_request(otel.spans())
    assert (root.name, root.kind, root.status.status_code) == ("router.execute", SpanKind.INTERNAL, StatusCode.UNSET)
    attributes = dict(root.attributes)
    assert attributes == {
        **attributes,
        "router.zone": decision.zone,
        "router.score": pytest.approx(decision.score),
        "router.p_edge": pytest.approx(decision.p_edge),
        "router.p_cloud": pytest.approx(decision.p_cloud),
        "router.unfamiliar": decision.unfamiliar,
        "router.degraded": False,
        "router.model_version": router.model_version,
        "router.served_by": "edge",
    }
    assert "router.fallback_reason" not in attributes and "error.type" not in attributes
    [edge] = children
    assert (edge.name, edge.kind, dict(edge.attributes)) == (
        "router.endpoint",
        SpanKind.CLIENT,
        {"router.attempt": "endpoint", "router.endpoint": "edge", "router.attempt.status": "ok"},
    )
    assert root.start_time <= edge.start_time <= edge.end_time <= root.end_time
    points = otel.points()
    assert points["router.decisions"] == {(("router.zone", decision.zone),): 1}
    assert points["router.served"] == {(("router.served_by", "edge"),): 1}
    assert points["router.request.duration"] == {(("router.served_by", "edge"),): 1}
    assert "router.fallbacks" not in points and "router.errors" not in points
    assert_nothing_private(otel)


def test_an_edge_failure_falls_back_with_a_failed_edge_child_and_a_cloud_child(router, otel):
    def edge(prompt):
        raise ConnectionError(f"device gone while answering {prompt}")  # the message quotes the prompt

    run = router.execute(PROMPT, edge=edge, cloud=lambda p: f"cloud says {ANSWER_CANARY}")
    assert run.served_by == "cloud" and CANARY in run.fallback_reason  # the SDK's own reason keeps it
    root, children = one_request(otel.spans())
    assert dict(root.attributes)["router.served_by"] == "cloud"
    assert dict(root.attributes)["router.fallback_reason"] == "connection_error"
    assert root.status.status_code == StatusCode.UNSET  # the request succeeded
    edge_span, cloud_span = sorted(children, key=lambda s: s.start_time)
    assert (edge_span.name, edge_span.status.status_code, edge_span.status.description) == (
        "router.endpoint",
        StatusCode.ERROR,
        None,
    )
    assert dict(edge_span.attributes) == {
        "router.attempt": "endpoint",
        "router.endpoint": "edge",
        "router.attempt.status": "error",
        "error.type": "ConnectionError",
    }
    assert edge_span.events == ()  # no exception event: its message would quote the prompt
    assert (cloud_span.name, dict(cloud_span.attributes)["router.endpoint"]) == ("router.endpoint", "cloud")
    assert dict(cloud_span.attributes)["router.attempt.status"] == "ok"
    points = otel.points()
    assert points["router.fallbacks"] == {(("router.fallback_reason", "connection_error"),): 1}
    assert points["router.served"] == {(("router.served_by", "cloud"),): 1}
    assert_nothing_private(otel)


def test_a_cloud_failure_marks_the_request_span_as_an_error_by_class_only(router, otel):
    def fail(prompt):
        raise RuntimeError(f"no answer for {prompt}")

    with pytest.raises(CloudCallError):
        router.execute(PROMPT, edge=fail, cloud=fail)
    root, children = one_request(otel.spans())
    assert (root.status.status_code, root.status.description) == (StatusCode.ERROR, None)
    assert dict(root.attributes)["error.type"] == "EndpointsFailed" and "router.served_by" not in root.attributes
    assert sorted(dict(c.attributes)["error.type"] for c in children) == ["RuntimeError", "RuntimeError"]
    points = otel.points()
    assert points["router.errors"] == {(("error.type", "EndpointsFailed"),): 1}
    assert "router.served" not in points and "router.request.duration" not in points
    assert_nothing_private(otel)


def test_aexecute_spans_match_execute_and_the_attempt_is_current_in_the_edge_call(router, otel):
    from opentelemetry import trace

    seen = []

    async def edge(prompt):
        seen.append(trace.get_current_span())  # the app's own spans here nest under the attempt
        return "edge"

    async def cloud(prompt):
        return "cloud"

    run = asyncio.run(router.aexecute(PROMPT, edge, cloud))
    assert run.served_by == "edge"
    root, [edge_span] = one_request(otel.spans())
    assert root.name == "router.execute" and dict(root.attributes)["router.served_by"] == "edge"
    assert seen[0].get_span_context().span_id == edge_span.context.span_id


def test_a_shadow_run_is_a_child_of_its_request(bundle, tmp_path, otel):
    log = OutcomeLog(tmp_path / "logs")
    shadow_router = Router.load(bundle, log=log, shadow_rate=1.0, seed=0)
    done = threading.Event()

    def cloud(prompt):
        done.set()
        return "cloud"

    run = shadow_router.execute(PROMPT, edge=lambda p: "edge", cloud=cloud)
    assert run.served_by == "edge" and done.wait(5)
    spans = otel.wait_for_spans(3)
    log.close()
    root, children = one_request(spans)
    assert sorted((dict(c.attributes)["router.attempt"], c.name) for c in children) == [
        ("endpoint", "router.endpoint"),
        ("shadow", "router.shadow"),
    ]
    shadow = next(c for c in children if c.name == "router.shadow")
    assert (
        dict(shadow.attributes)["router.side"] == "cloud" and dict(shadow.attributes)["router.attempt.status"] == "ok"
    )


# RoutedChat against stub servers.
def chat_for(router, stubs, **prices) -> RoutedChat:
    edge, cloud = stubs
    return RoutedChat(
        router,
        edge=Endpoint(edge.url, "edge-model", api_key=EDGE_KEY, first_token_timeout_s=0.3, timeout_s=2.0),
        cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY, **prices),
    )


def test_routed_chat_is_one_chat_span_with_genai_attributes_and_its_cost(router, stubs, otel):
    edge, cloud = stubs
    edge.behaviour.status = 503  # the edge fails: the cloud answers, at a price
    with chat_for(router, stubs, input_price_per_1m=2.0, output_price_per_1m=8.0) as chat:
        answer = chat.create(CANARY_MESSAGES)
    assert answer.routing.served_by == "cloud" and answer.routing.estimated_cost > 0
    root, children = one_request(otel.spans())  # RoutedChat's span; Router.execute joined it
    usage = answer.body["usage"]
    assert root.name == "chat" and dict(root.attributes) == {
        **dict(root.attributes),
        "gen_ai.operation.name": "chat",
        "gen_ai.response.model": "cloud-model",
        "gen_ai.usage.input_tokens": usage["prompt_tokens"],
        "gen_ai.usage.output_tokens": usage["completion_tokens"],
        "router.served_by": "cloud",
        "router.fallback_reason": "http_error",
        "router.cost": pytest.approx(answer.routing.estimated_cost),
    }
    edge_span, cloud_span = sorted(children, key=lambda s: s.start_time)
    assert (edge_span.name, cloud_span.name) == ("chat edge-model", "chat cloud-model")
    assert dict(edge_span.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "edge-model",
        "server.address": "127.0.0.1",
        "server.port": edge.port,
        "router.attempt": "endpoint",
        "router.endpoint": "edge",
        "router.attempt.status": "error",
        "error.type": "UpstreamHTTPError",
    }
    assert dict(cloud_span.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "cloud-model",
        "server.address": "127.0.0.1",
        "server.port": cloud.port,
        "router.attempt": "endpoint",
        "router.endpoint": "cloud",
        "router.attempt.status": "ok",
        "gen_ai.response.model": "cloud-model",
        "gen_ai.usage.input_tokens": usage["prompt_tokens"],
        "gen_ai.usage.output_tokens": usage["completion_tokens"],
    }
    points = otel.points()
    assert points["router.cost"] == {(("router.served_by", "cloud"),): pytest.approx(answer.routing.estimated_cost)}
    assert points["router.fallbacks"] == {(("router.fallback_reason", "http_error"),): 1}
    assert_nothing_private(otel, CLOUD_KEY, EDGE_KEY, "answer from")


def test_a_sync_stream_span_ends_when_the_stream_ends(router, stubs, otel):
    with chat_for(router, stubs) as chat:
        stream = chat.create(CANARY_MESSAGES, stream=True, stream_options={"include_usage": True})
        assert [s.name for s in otel.spans()] == ["chat edge-model"]  # the request's span is still open
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in stream if c["choices"])
    assert text == "answer from edge"
    root, [edge_span] = one_request(otel.spans())
    assert root.name == "chat" and edge_span.name == "chat edge-model"
    attributes = dict(root.attributes)
    assert (attributes["router.served_by"], attributes["gen_ai.usage.output_tokens"]) == ("edge", 3)
    assert otel.points()["router.request.duration"] == {(("router.served_by", "edge"),): 1}
    assert_nothing_private(otel, CLOUD_KEY, EDGE_KEY, "answer from")


def test_an_async_stream_closed_early_ends_its_span_and_a_slow_edge_falls_back(router, stubs, otel):
    edge, _ = stubs
    edge.behaviour.first_token_delay_s = 2.0  # past the 0.3 s first-token limit: the cloud streams

    async def run() -> tuple:
        async with chat_for(router, stubs) as chat:
            stream = await chat.acreate(CANARY_MESSAGES, stream=True)
            first = await stream.__anext__()
            await stream.aclose()
            return stream.routing.fallback_kind, first

    kind, _ = asyncio.run(run())
    assert kind == "slow_first_token"
    root, children = one_request(otel.spans())
    assert dict(root.attributes)["router.fallback_reason"] == "slow_first_token"
    assert sorted(dict(c.attributes)["router.attempt.status"] for c in children) == ["ok", "timeout"]


def test_a_stream_broken_after_its_first_chunk_is_an_error_span(router, stubs, otel):
    edge, _ = stubs
    edge.behaviour.break_after_first_chunk = True
    with chat_for(router, stubs) as chat, pytest.raises(Exception, match="broke after its first chunk"):
        for _ in chat.create(CANARY_MESSAGES, stream=True):
            pass
    root, _ = one_request(otel.spans())
    assert (root.status.status_code, dict(root.attributes)["error.type"]) == (StatusCode.ERROR, "StreamInterrupted")


# The proxy over HTTP.
def proxy_config(stubs) -> ProxyConfig:
    edge, cloud = stubs
    return ProxyConfig(
        bundle="(loaded by the test)",
        token=TOKEN,
        edge=Endpoint(edge.url, "edge-model", timeout_s=2.0, first_token_timeout_s=0.3),
        cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY, timeout_s=5.0),
    )


def test_the_proxy_exports_one_server_span_per_request_with_attempts_and_metrics(router, stubs, otel):
    edge, cloud = stubs
    config = proxy_config(stubs)
    chat = RoutedChat(router, edge=config.edge, cloud=config.cloud)
    server = LocalServer(build_app(chat, config), name="proxy", lifespan="on").start()
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    headers = {"authorization": f"Bearer {TOKEN}"}
    try:
        with httpx2.Client(timeout=20) as client:

            def post(messages, **body):
                return client.post(url, json={"model": "router", "messages": messages, **body}, headers=headers)

            caller = {**headers, "traceparent": f"00-{TRACE_ID:032x}-{CALLER_SPAN_ID:016x}-01"}
            answered = client.post(url, json={"model": "router", "messages": CANARY_MESSAGES}, headers=caller)
            assert answered.headers["x-router-served-by"] == "edge"
            edge.behaviour.status = 500  # the edge fails: the cloud answers
            assert post(CANARY_MESSAGES).headers["x-router-fallback"] == "http_error"
            edge.behaviour.status = 200
            streamed = post(LONG, stream=True, stream_options={"include_usage": True})  # cloud first, streamed
            assert streamed.headers["x-router-served-by"] == "cloud" and "data: [DONE]" in streamed.text
            cloud.behaviour.status, cloud.behaviour.echo_auth_in_errors = (
                500,
                True,
            )  # both fail; the cloud echoes its key
            edge.behaviour.status = 500
            assert post(CANARY_MESSAGES).status_code == 502
        spans = otel.wait_for_spans(2 + 3 + 2 + 3)  # each request's span and its attempts
    finally:
        server.stop()
        chat.close()
    roots, children = roots_and_children(spans)
    assert len(roots) == 4 and len(spans) == 10  # one span per request: no router.execute or chat span inside
    roots.sort(key=lambda s: s.start_time)
    for root in roots:
        assert (root.name, root.kind) == ("chat router", SpanKind.SERVER)
        assert dict(root.attributes)["gen_ai.request.model"] == "router"
        assert dict(root.attributes)["gen_ai.operation.name"] == "chat"
    served, fell_back, stream, failed = roots
    # the first request carried the caller's trace context: its span continues that trace
    assert (served.context.trace_id, served.parent.span_id, served.parent.is_remote) == (
        TRACE_ID,
        CALLER_SPAN_ID,
        True,
    )
    assert all(root.parent is None for root in roots[1:])
    assert [c.name for c in children[served.context.span_id]] == ["chat edge-model"]
    assert dict(served.attributes)["router.served_by"] == "edge"
    assert dict(served.attributes)["gen_ai.response.model"] == "edge-model"
    assert dict(fell_back.attributes)["router.fallback_reason"] == "http_error"
    assert sorted(c.name for c in children[fell_back.context.span_id]) == ["chat cloud-model", "chat edge-model"]
    stream_attributes = dict(stream.attributes)
    assert (stream_attributes["router.zone"], stream_attributes["router.served_by"]) == ("cloud", "cloud")
    assert stream_attributes["gen_ai.usage.output_tokens"] == 3  # the stream's usage, known at its end
    assert (failed.status.status_code, failed.status.description) == (StatusCode.ERROR, None)
    assert dict(failed.attributes)["http.response.status_code"] == 502
    assert dict(failed.attributes)["error.type"] == "EndpointsFailed"
    points = otel.points()
    assert points["router.served"] == {(("router.served_by", "edge"),): 1, (("router.served_by", "cloud"),): 2}
    # fallbacks count edge-first requests the cloud answered: not the one it failed too
    assert points["router.fallbacks"] == {(("router.fallback_reason", "http_error"),): 1}
    assert points["router.errors"] == {(("error.type", "EndpointsFailed"),): 1}
    assert sum(points["router.decisions"].values()) == 4
    assert points["router.request.duration"] == {
        (("router.served_by", "edge"),): 1,
        (("router.served_by", "cloud"),): 2,
    }
    assert_nothing_private(otel, CLOUD_KEY, TOKEN, "answer from", "word word")


# Off: no provider, no package.
def test_without_a_provider_nothing_is_recorded_and_nothing_kept(router):
    telemetry.use()  # the global providers: none set in the test process
    seen = []
    run = router.execute(PROMPT, edge=lambda p: seen.append(telemetry.current()) or "edge", cloud=lambda p: "cloud")
    assert run.served_by == "edge" and seen == [telemetry.NOOP]
    assert telemetry.request() is telemetry.request()  # the shared no-op scope: nothing allocated per request
    assert telemetry.attempt("edge") is None


BLOCK_OPENTELEMETRY = """
import importlib.abc, sys, types

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"No module named {name!r} (hidden by the test)")
        return None

sys.meta_path.insert(0, Hide())
sys.modules["opentelemetry"] = types.ModuleType("opentelemetry")  # as if something had imported a broken install
"""


def test_without_the_package_execute_and_chat_run_and_use_says_how_to_install(bundle, tmp_path):
    code = BLOCK_OPENTELEMETRY + (
        "import asyncio\n"
        "from serving import Router\nfrom serving.monitoring import _telemetry as telemetry\n"
        f"router = Router.load({str(bundle)!r}, strict=True)\n"
        "run = router.execute('What is 2+2?', edge=lambda p: 'edge', cloud=lambda p: 'cloud')\n"
        "assert run.served_by == 'edge', run\n"
        "async def edge(p): return 'edge'\n"
        "run = asyncio.run(router.aexecute('What is 2+2?', edge, edge))\n"
        "assert run.served_by == 'edge' and not telemetry.available()\n"
        "assert telemetry.request() is telemetry.request() and telemetry.current() is telemetry.NOOP\n"
        "try:\n"
        "    telemetry.use()\n"
        "except ImportError as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (
        "refused: serving.monitoring._telemetry needs opentelemetry-api: pip install 'edge-cloud-router[telemetry]'"
        in done.stdout
    )
