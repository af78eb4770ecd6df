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
from serving.policy import PolicySet
from serving.proxy.app import build_app
from serving.proxy.config import EndpointsConfig, ProxyConfig, UpstreamOptions
from serving.testing import Behaviour, LocalServer, StubUpstream
from tests.test_endpoint_bundle import NAMES, trained  # noqa: F401  (the N-endpoint bundle fixture)

TOKEN = "proxy-token-0123456789abcdef"
PROMPTS = ["What is 2 + 2?", "Tell me a joke about penguins.", "Draft a lease termination clause for a tenant."]
PRIVATE = {"name": "private", "when": {"metadata": {"privacy": "local"}}, "then": "force", "endpoint": "phone-3b"}


@pytest.fixture(scope="module")
def upstreams():
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(StubUpstream(name)) for name in NAMES}


@pytest.fixture(autouse=True)
def fresh(request):
    if "upstreams" in request.fixturenames:
        for stub in request.getfixturevalue("upstreams").values():
            stub.behaviour = Behaviour()
            stub.received.clear()


@pytest.fixture(scope="module")
def router(trained):  # noqa: F811
    made, public = trained
    rules = PolicySet.from_dict({"rules": [PRIVATE]}, endpoints=NAMES)
    return Router.load(made.folder, strict=True, public_key=public, policy=rules)


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
    return ProxyConfig(bundle="(loaded by the test)", token=TOKEN, endpoints=EndpointsConfig.load(str(path)))


@contextlib.contextmanager
def proxy(router, config):
    chat = RoutedChat(router, endpoints=config.endpoints.chat_endpoints())  # specs: the bundle's own
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


def test_requests_follow_the_bundles_cascade(router, upstreams, tmp_path):
    decisions = [router.route(p) for p in PROMPTS]
    assert all(d.cascade and d.cascade[0] == d.endpoint for d in decisions)
    climbing = next(d for d in decisions if len(d.cascade) > 1)  # a cascade with somewhere to go
    prompt = PROMPTS[decisions.index(climbing)]
    with proxy(router, config_for(upstreams, tmp_path)) as client:
        answers = [ask(client, p) for p in PROMPTS]
        upstreams[climbing.cascade[0]].behaviour = Behaviour(status=500)
        failed_over = ask(client, prompt)
    for answer, decision in zip(answers, decisions):
        assert answer.status_code == 200 and answer.headers["x-router-served-by"] == decision.endpoint
        assert answer.headers["x-router-tried"] == f"{decision.endpoint}=served"
        # the bundle's own prices: the expected cost of the call it made
        spec = router.manifest.endpoints.spec[decision.endpoint]
        assert float(answer.headers["x-router-expected-cost"]) == pytest.approx(
            spec.cost(decision.n_tokens), rel=1e-5, abs=1e-12
        )
    first, second = climbing.cascade[:2]
    assert failed_over.status_code == 200 and failed_over.headers["x-router-served-by"] == second
    assert failed_over.headers["x-router-tried"] == f"{first}=error:UpstreamHTTPError,{second}=served"
    assert [len(upstreams[n].received) for n in climbing.cascade[:2]] == [
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
    three = dict(list(config.endpoints.upstreams.items())[:3])
    partial = ProxyConfig(bundle="b", endpoints=EndpointsConfig(config.endpoints.specs, three))
    assert "lack frontier" in partial.bundle_mismatch(NAMES)
    two = ProxyConfig(bundle="b", edge=UpstreamOptions("http://h/v1", "e"), cloud=UpstreamOptions("http://h/v1", "c"))
    assert "routes among phone-3b, onprem-8b, cloud-mid, frontier" in two.bundle_mismatch(NAMES)
    assert two.bundle_mismatch(None) is None and "routes between edge and cloud" in config.bundle_mismatch(None)
    assert isinstance(config.chat_options()["endpoints"]["frontier"], Endpoint)
