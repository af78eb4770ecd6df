"""The proxy in front of a real N-endpoint bundle (tests/test_endpoint_bundle.py's four simulated
endpoints) and one stub upstream per endpoint on 127.0.0.1: each request is served along the
cascade the bundle decided, the context limits and prices default to the bundle's own, a request
a privacy rule keeps on the phone never reaches any other endpoint, fallbacks included, and the
proxy refuses to start with upstreams that do not match the bundle's endpoints."""

from __future__ import annotations

import contextlib
import json

import httpx2
import pytest

from serving import Router
from serving.chat import Endpoint, RoutedChat
from serving.endpoints._record import Endpoints
from serving.policy import PolicySet
from serving.proxy._app import build_app
from serving.proxy._config import ProxyConfig, load_endpoints_file
from serving.testing import Behaviour, LocalServer, StubUpstream
from tests.endpoint_doubles import upstream_fixtures
from tests.test_endpoint_bundle import NAMES, climbing, trained  # noqa: F401  (the N-endpoint bundle fixture)

TOKEN = "proxy-token-0123456789abcdef"
PROMPTS = ["What is 2 + 2?", "Tell me a joke about penguins.", "Draft a lease termination clause for a tenant."]
PRIVATE = {"name": "private", "when": {"metadata": {"privacy": "local"}}, "then": "force", "endpoint": "phone-3b"}


upstreams, fresh = upstream_fixtures(NAMES)  # a stub per endpoint on 127.0.0.1, reset before each test


def rules() -> PolicySet:
    return PolicySet.from_dict({"rules": [PRIVATE]}, endpoints=NAMES)


@pytest.fixture(scope="module")
def router(trained):  # noqa: F811
    made, public = trained
    return Router.load(made.folder, strict=True, public_key=public, policy=rules())


def config_for(upstreams, tmp_path) -> ProxyConfig:
    """An --endpoints file of the bundle's own endpoints (its spec, read back from the manifest), each with its stub."""
    spec = {"endpoints": []}
    for name, stub in upstreams.items():
        spec["endpoints"].append(
            {
                "name": name,
                "where": "device" if name in ("phone-3b", "onprem-8b") else "cloud",
                "price": {"per_call": 0},
                "latency_ms": 100,
                "context_tokens": 100_000,
                "upstream": {"url": stub.url, "model": f"{name}-model", "timeout_s": 5.0},
            }
        )
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps(spec))
    return ProxyConfig(bundle="(loaded by the test)", token=TOKEN, endpoints=load_endpoints_file(str(path)))


@contextlib.contextmanager
def proxy(router, config):
    # the records' call settings only: what they would decide with is the bundle's own
    calls = {e.name: Endpoint(e.base_url, e.model, timeout_s=e.timeout_s) for e in config.endpoints}
    chat = RoutedChat(router, endpoints=calls)
    server = LocalServer(build_app(chat, config), name="proxy", lifespan="on").start()
    try:
        yield httpx2.Client(
            base_url=f"http://127.0.0.1:{server.port}", headers={"authorization": f"Bearer {TOKEN}"}, timeout=20
        )
    finally:
        server.stop()
        chat.close()


def ask(client, prompt, **extra):
    return client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": prompt}], **extra})


def test_requests_follow_the_bundles_cascade(trained, upstreams, tmp_path):  # noqa: F811
    router = climbing(trained, tmp_path, policy=rules())  # prompts with a cascade to climb
    decisions = [router.route(p) for p in PROMPTS]
    assert all(d.cascade and d.cascade[0] == d.endpoint for d in decisions)
    climber = next(d for d in decisions if len(d.cascade) > 1)  # a cascade with somewhere to go
    prompt = PROMPTS[decisions.index(climber)]
    with proxy(router, config_for(upstreams, tmp_path)) as client:
        answers = [ask(client, p) for p in PROMPTS]
        upstreams[climber.cascade[0]].behaviour = Behaviour(status=500)
        failed_over = ask(client, prompt)
    for answer, decision in zip(answers, decisions):
        assert answer.status_code == 200 and answer.headers["x-router-served-by"] == decision.endpoint
        assert answer.headers["x-router-tried"] == f"{decision.endpoint}=served"
        # the bundle's own prices: the expected cost of the call it made, its answer's tokens included
        section = router.manifest.endpoints
        assert float(answer.headers["x-router-expected-cost"]) == pytest.approx(
            section.spec[decision.endpoint].call_cost(decision.n_tokens, section.output_tokens), rel=1e-5, abs=1e-12
        )
    first, second = climber.cascade[:2]
    assert failed_over.status_code == 200 and failed_over.headers["x-router-served-by"] == second
    assert failed_over.headers["x-router-tried"] == f"{first}=error:UpstreamHTTPError,{second}=served"
    assert [len(upstreams[n].received) for n in climber.cascade[:2]] == [
        1 + sum(d.endpoint == first for d in decisions),
        1 + sum(d.endpoint == second for d in decisions),
    ]


def test_a_request_kept_on_the_phone_never_reaches_another_endpoint(router, upstreams, tmp_path):
    upstreams["phone-3b"].behaviour = Behaviour(status=503)
    with proxy(router, config_for(upstreams, tmp_path)) as client:
        kept = ask(client, "My card is 4111 1111 1111 1111, is it valid?", metadata={"privacy": "local"})
        streamed = ask(client, "Summarise my notes", metadata={"privacy": "local"}, stream=True)
    for answer in (kept, streamed):
        assert answer.status_code == 502 and answer.json()["error"]["code"] == "fallback_forbidden"
        assert answer.headers["x-router-rule"] == "private"
        assert answer.headers["x-router-tried"] == "phone-3b=error:UpstreamHTTPError"
    assert len(upstreams["phone-3b"].received) == 2
    assert all(upstreams[name].received == [] for name in NAMES if name != "phone-3b")


def test_the_proxy_refuses_upstreams_that_do_not_match_the_bundle(router, upstreams, tmp_path):
    config = config_for(upstreams, tmp_path)
    assert config.bundle_mismatch(router.manifest.endpoints.names) is None
    partial = ProxyConfig(bundle="b", endpoints=Endpoints(config.endpoints.endpoints[:3]))
    assert "lack frontier" in partial.bundle_mismatch(NAMES)
    two = ProxyConfig(bundle="b", edge=Endpoint("http://h/v1", "e"), cloud=Endpoint("http://h/v1", "c"))
    assert "routes among phone-3b, onprem-8b, cloud-mid, frontier" in two.bundle_mismatch(NAMES)
    assert two.bundle_mismatch(("edge", "cloud")) is None
    assert "routes between edge and cloud" in config.bundle_mismatch(("edge", "cloud"))
    assert isinstance(config.upstreams["frontier"], Endpoint)


# --- capabilities (serving.endpoints._capabilities; docs/policies.md#capabilities) -------------------------
# The simulated spec declares images, tools and json for frontier alone; the others leave them out (false).
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
SEE = [{"role": "user", "content": [{"type": "text", "text": "Tell me a joke about penguins."}, IMAGE]}]
TOOL = {"type": "function", "function": {"name": "joke", "parameters": {"type": "object", "properties": {}}}}


def test_an_endpoint_lacking_what_the_request_needs_is_never_chosen(trained):  # noqa: F811
    from serving.endpoints._capabilities import Needs
    from serving.endpoints._record import Capabilities
    from serving.policy import NoFeasibleEndpoint

    made, public = trained
    router = Router.load(made.folder, strict=True, public_key=public)
    spec = router.manifest.endpoints.spec
    assert [spec[n].capabilities.images for n in NAMES] == [False, False, False, True]
    plain = [router.route(p) for p in PROMPTS]
    assert [router.route(p, needs=None) for p in PROMPTS] == plain
    assert any(d.endpoint != "frontier" for d in plain)  # so the needs below change something
    for needs in (Needs(images=True), Needs(tools=True), Needs(json=True)):
        decisions = router.route_batch(PROMPTS, needs=[needs] * len(PROMPTS))
        assert decisions == [router.route(p, needs=needs) for p in PROMPTS]
        lacks = needs.names[0]
        for decision in decisions:
            assert decision.endpoint == "frontier" and decision.cascade == ("frontier",)
            assert decision.rule == f"needs:{lacks}" and decision.forbidden == NAMES[:3]
            assert decision.reason.startswith(f"needs:{lacks}: phone-3b lacks {lacks}; onprem-8b lacks {lacks}; ")
    # capabilities given by the caller stand for the bundle's: every endpoint able, the model's choice
    able = {name: Capabilities(images=True, tools=True, json=True) for name in NAMES}
    assert [router.route(p, needs=Needs(images=True), capabilities=able) for p in PROMPTS] == plain
    # a policy forbidding the only endpoint with images leaves nothing: both named, nothing silent
    rules = PolicySet.from_dict(
        {"rules": [{"name": "no-frontier", "then": "forbid", "endpoint": "frontier"}]}, endpoints=NAMES
    )
    policed = Router.load(made.folder, strict=True, public_key=public, policy=rules)
    with pytest.raises(NoFeasibleEndpoint) as caught:
        policed.route(PROMPTS[0], needs=Needs(images=True))
    assert str(caught.value) == (
        "no endpoint may serve this request: the policy forbids frontier (policy 'no-frontier'); the request needs "
        "images (needs:images): phone-3b lacks images; onprem-8b lacks images; cloud-mid lacks images"
    )
    condition = {"name": "see-big", "when": {"needs": "images"}, "then": "forbid", "endpoint": "phone-3b"}
    by_rule = Router.load(
        made.folder, strict=True, public_key=public, policy=PolicySet.from_dict({"rules": [condition]}, endpoints=NAMES)
    )
    forbidden = by_rule.route(PROMPTS[0], needs=Needs(images=True), capabilities=able)
    assert forbidden.rule == "see-big" and forbidden.forbidden == ("phone-3b",) and forbidden.endpoint != "phone-3b"


def test_the_proxy_sends_image_and_tool_requests_only_to_endpoints_that_take_them(router, upstreams, tmp_path):
    with proxy(router, config_for(upstreams, tmp_path)) as client:  # the bundle's own specs
        seen = client.post("/v1/chat/completions", json={"messages": SEE})
        streamed = client.post("/v1/chat/completions", json={"messages": SEE, "stream": True})
        tools = ask(client, "Tell me a joke about penguins.", tools=[TOOL])
        upstreams["frontier"].behaviour = Behaviour(status=500)
        failed = client.post("/v1/chat/completions", json={"messages": SEE})
    for answer in (seen, streamed, tools):
        assert answer.status_code == 200 and answer.headers["x-router-served-by"] == "frontier"
        assert answer.headers["x-router-tried"] == "frontier=served"
    assert seen.headers["x-router-rule"] == "needs:images" and tools.headers["x-router-rule"] == "needs:tools"
    assert failed.status_code == 502 and failed.headers["x-router-tried"] == "frontier=error:UpstreamHTTPError"
    assert len(upstreams["frontier"].received) == 4 and upstreams["frontier"].received[2].body["tools"] == [TOOL]
    assert all(upstreams[name].received == [] for name in NAMES[:3])  # not as a fallback either
    # an --endpoints file whose records declare no images: the records stand, no endpoint is left
    config = config_for(upstreams, tmp_path)
    chat = RoutedChat(router, endpoints=config.upstreams)
    server = LocalServer(build_app(chat, config), name="proxy", lifespan="on").start()
    try:
        with httpx2.Client(
            base_url=f"http://127.0.0.1:{server.port}", headers={"authorization": f"Bearer {TOKEN}"}
        ) as c:
            refused = c.post("/v1/chat/completions", json={"messages": SEE})
    finally:
        server.stop()
        chat.close()
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "no_capable_endpoint"
    assert refused.headers["x-router-rule"] == "needs:images" and "frontier lacks images" in refused.text
    assert len(upstreams["frontier"].received) == 4
