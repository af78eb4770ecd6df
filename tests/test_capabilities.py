"""What a request needs (serving.endpoints._capabilities) and the endpoints that lack it, on two-endpoint
routers (docs/policies.md#capabilities): needs read from a chat request in one place; a side whose
declared capabilities lack what the request needs is never called, a fallback included, in
execute(), RoutedChat (JSON and streams) and the proxy (stub servers on 127.0.0.1 that record what
they received); the `needs` rule condition parses, fails and matches; no side left is a clear
error; and without capabilities declared, decisions and calls are as before. The N-endpoint bundle's
side is in tests/test_proxy_endpoint_bundle.py."""

from __future__ import annotations

import argparse
import contextlib
import json

import httpx2
import pytest

from serving import Router
from serving.chat import Endpoint, RoutedChat
from serving.chat._request import ChatRequest
from serving.endpoints._capabilities import NO_NEEDS, Needs, needs_of
from serving.endpoints._record import Capabilities
from serving.monitoring._outcome_log import OutcomeLog
from serving.policy import FallbackForbidden, NoFeasibleEndpoint, PolicyFileError, PolicySet
from serving.proxy._app import build_app
from serving.proxy._config import ConfigError, ProxyConfig, add_arguments, parse_capabilities
from serving.testing import Behaviour, LocalServer
from tests.chat_stubs import ASK, LONG, fresh_stubs, router, stubs  # noqa: F401  (fixtures)

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
SEE = [{"role": "user", "content": [{"type": "text", "text": "What is 2+2? Read it off the picture."}, IMAGE]}]
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
TEXT_ONLY = Capabilities(tools=True, json=True)  # images: false
SEES = Capabilities(images=True)
TOKEN = "proxy-token-0123456789abcdef"


# --- what a request needs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "params", "needs"),
    [
        (ASK, {}, NO_NEEDS),
        (SEE, {}, Needs(images=True)),
        (
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": [IMAGE]}, *ASK],
            {},
            Needs(images=True),
        ),
        (
            [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}],
            {},
            Needs(images=True),
        ),
        ([{"role": "user", "content": [{"type": "text", "text": "image_url"}]}], {}, NO_NEEDS),
        (ASK, {"tools": [TOOL]}, Needs(tools=True)),
        (ASK, {"functions": [TOOL["function"]]}, Needs(tools=True)),
        (ASK, {"tool_choice": "auto"}, Needs(tools=True)),
        (ASK, {"tools": None}, NO_NEEDS),
        (ASK, {"response_format": {"type": "json_object"}}, Needs(json=True)),
        (ASK, {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, Needs(json=True)),
        (ASK, {"response_format": {"type": "text"}}, NO_NEEDS),
        (SEE, {"tools": [TOOL], "response_format": {"type": "json_object"}}, Needs(True, True, True)),
    ],
)
def test_needs_are_read_from_the_requests_shape(messages, params, needs):
    assert needs_of(messages, params) == needs
    assert ChatRequest.build(messages, params).needs == needs  # the one place RoutedChat reads them


def test_needs_are_checked(router):
    with pytest.raises(TypeError, match="Needs.images must be True or False"):
        Needs(images=1)
    with pytest.raises(TypeError, match="needs must be a serving.endpoints._capabilities.Needs"):
        router.route("hi", needs="images")
    with pytest.raises(TypeError, match="capabilities must map endpoint names"):
        router.route("hi", needs=Needs(images=True), capabilities={"edge": {"images": True}})
    with pytest.raises(ValueError, match="1 needs for 2 prompts"):
        router.route_batch(["a", "b"], needs=[None])
    assert Needs(tools=True, json=True).names == ("tools", "json") and not NO_NEEDS


# --- two-endpoint routers ------------------------------------------------------------------------


def test_without_capabilities_declared_decisions_are_unchanged(router):
    prompts = [ASK[0]["content"], LONG[0]["content"], "Draft a lease for a tenant in breach of covenant."]
    before = [router.route(p) for p in prompts]
    assert [router.route(p, needs=Needs(True, True, True)) for p in prompts] == before
    assert router.route_batch(prompts, needs=[Needs(images=True)] * 3) == before
    unknown = {"edge": None, "cloud": None}  # declared as unknown: no constraint either
    assert [router.route(p, needs=Needs(images=True), capabilities=unknown) for p in prompts] == before


def test_a_side_lacking_what_the_request_needs_is_ruled_out(router):
    sides = {"edge": TEXT_ONLY, "cloud": SEES}
    decision = router.route(ASK[0]["content"], needs=Needs(images=True), capabilities=sides)
    assert (decision.zone, decision.target, decision.forbidden) == ("cloud", "cloud", ("edge",))
    assert decision.rule == "needs:images" and decision.reason.startswith("needs:images: edge lacks images; ")
    # what the request does not need does not rule anything out
    # (a flag left out is false: SEES lacks tools), so a request needing what both have keeps both
    both = {"edge": TEXT_ONLY, "cloud": Capabilities(images=True, tools=True)}
    assert router.route(ASK[0]["content"], needs=Needs(tools=True), capabilities=both) == router.route(
        ASK[0]["content"]
    )
    batch = router.route_batch([ASK[0]["content"]] * 2, needs=[Needs(images=True), None], capabilities=sides)
    assert [d.zone for d in batch] == ["cloud", router.route(ASK[0]["content"]).zone]
    long_to_edge = router.route(LONG[0]["content"], needs=Needs(tools=True), capabilities={"cloud": SEES})
    assert long_to_edge.zone == "edge" and long_to_edge.forbidden == ("cloud",)


def test_a_declared_language_rules_out_a_side_whose_languages_lack_it(router):
    # a two-endpoint router reads no language itself (detection is the N-endpoint bundle's:
    # tests/test_languages.py); a language the app declares is a need like any other
    sides = {"edge": Capabilities(languages=("en", "pt-BR")), "cloud": None}
    german = router.route(ASK[0]["content"], needs=Needs(language="de"), capabilities=sides)
    assert (german.zone, german.forbidden, german.rule) == ("cloud", ("edge",), "needs:language=de")
    assert german.reason.startswith("needs:language=de: edge lacks language=de; ")
    served = router.route(ASK[0]["content"], needs=Needs(language="pt"), capabilities=sides)
    assert served == router.route(ASK[0]["content"])  # pt-BR serves pt: nothing ruled out
    with pytest.raises(NoFeasibleEndpoint) as caught:
        router.route("hi", needs=Needs(language="ja"), capabilities={"edge": sides["edge"], "cloud": sides["edge"]})
    assert caught.value.rules == ("needs:language=ja",)
    assert "the request needs language=ja (needs:language=ja): edge lacks language=ja; cloud lacks" in str(caught.value)


def test_no_side_left_is_a_clear_error_naming_the_capability(router):
    with pytest.raises(NoFeasibleEndpoint) as caught:
        router.route("hi", needs=Needs(images=True, tools=True), capabilities={"edge": TEXT_ONLY, "cloud": TEXT_ONLY})
    assert str(caught.value) == (
        "no endpoint may serve this request: the request needs images (needs:images): "
        "edge lacks images; cloud lacks images"
    )
    assert caught.value.rules == ("needs:images",)
    # with a policy: a forbidden cloud and an edge lacking images leave nothing, both named
    forbid = PolicySet.from_dict({"rules": [{"name": "no-cloud", "then": "forbid", "endpoint": "cloud"}]})
    policed = Router(router._routing, policy=forbid)
    with pytest.raises(
        NoFeasibleEndpoint,
        match=r"the policy forbids cloud \(policy 'no-cloud'\); the request needs images \(needs:images\): edge lacks images",
    ):
        policed.route("hi", needs=Needs(images=True), capabilities={"edge": TEXT_ONLY})


def caller(stub):
    def call(prompt):
        response = httpx2.post(stub.url + "/chat/completions", json={"messages": [{"role": "user", "content": prompt}]})
        response.raise_for_status()
        return response.json()["choices"][0]["message"]["content"]

    return call


def test_execute_never_calls_a_side_lacking_what_the_request_needs(router, stubs):
    edge, cloud = stubs
    prompt = ASK[0]["content"]  # edge first by the model
    served = router.execute(
        prompt, caller(edge), caller(cloud), needs=Needs(images=True), capabilities={"edge": TEXT_ONLY, "cloud": SEES}
    )
    assert served.served_by == "cloud" and edge.received == []
    sides = {"edge": SEES, "cloud": TEXT_ONLY}
    edge.behaviour = Behaviour(status=500)
    with pytest.raises(
        FallbackForbidden, match="policy 'needs:images' forbids cloud, and no allowed endpoint served"
    ) as caught:
        router.execute(prompt, caller(edge), caller(cloud), needs=Needs(images=True), capabilities=sides)
    assert caught.value.rule == "needs:images" and len(cloud.received) == 1  # the first request's only
    # cloud first by the model, but it lacks images and the prompt exceeds the edge context: an error, no call
    with pytest.raises(FallbackForbidden, match="exceeds the context limit"):
        router.execute(LONG[0]["content"], caller(edge), caller(cloud), needs=Needs(images=True), capabilities=sides)
    plain = router.execute(prompt, caller(edge), caller(cloud), capabilities=sides)  # needs nothing
    assert plain.served_by == "cloud" and len(cloud.received) == 2  # the same failure falls back: the stubs record


def chat_for(router, stubs, edge_caps=None, cloud_caps=None) -> RoutedChat:
    edge, cloud = stubs
    return RoutedChat(
        router,
        edge=Endpoint(edge.url, "edge-model", timeout_s=2, capabilities=edge_caps),
        cloud=Endpoint(cloud.url, "cloud-model", timeout_s=2, capabilities=cloud_caps),
    )


def test_routed_chat_sends_an_image_only_where_images_are_declared(router, stubs):
    edge, cloud = stubs
    with chat_for(router, stubs, edge_caps=TEXT_ONLY, cloud_caps=SEES) as chat:
        answer = chat.create(SEE)  # edge first by the model (ASK's question)
        streamed = chat.create(SEE, stream=True)
        chunks = list(streamed)
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
        assert answer.routing.served_by == "cloud" and answer.routing.decision.rule == "needs:images"
        assert text == "answer from cloud" and streamed.routing.served_by == "cloud"
        assert edge.received == [] and len(cloud.received) == 2
        assert all(r.body["messages"] == SEE for r in cloud.received)  # the image part reached the cloud whole
        cloud.behaviour = Behaviour(status=503)
        with pytest.raises(Exception) as failed:
            chat.create(SEE)
        assert edge.received == [] and "cloud" in str(failed.value)  # no fallback to the edge that lacks images
        plain = chat.create(ASK)  # needs nothing: edge first, as the model decided
        assert plain.routing.served_by == "edge" and plain.routing.decision.rule is None


def test_routed_chat_sends_tools_where_tools_are_supported(router, stubs):
    edge, cloud = stubs
    with chat_for(router, stubs, edge_caps=SEES, cloud_caps=TEXT_ONLY) as chat:
        answer = chat.create(ASK, tools=[TOOL], tool_choice="auto")  # edge first by the model; the edge lacks tools
        plain = chat.create(ASK)
    assert answer.routing.served_by == "cloud" and answer.routing.decision.forbidden == ("edge",)
    assert len(cloud.received) == 1 and cloud.received[0].body["tools"] == [TOOL]
    assert plain.routing.served_by == "edge" and len(edge.received) == 1 and "tools" not in edge.received[0].body


def test_the_outcome_log_records_the_capability_rule(tmp_path, bundle, stubs):
    edge, cloud = stubs
    log = OutcomeLog(tmp_path / "logs")
    logged = Router.load(bundle, strict=True, log=log)
    with chat_for(logged, stubs, edge_caps=TEXT_ONLY, cloud_caps=SEES) as chat:
        chat.create(SEE)
    log.close()
    records = [json.loads(line) for f in log.folder.glob("*.jsonl") for line in f.read_text().splitlines()]
    request = next(r for r in records if r["type"] == "request")
    assert (request["rule"], request["forbidden"], request["served_by"]) == ("needs:images", ["edge"], "cloud")
    assert "base64" not in json.dumps({k: v for k, v in request.items() if k != "prompt"})


# --- the policy condition ------------------------------------------------------------------------


def test_the_needs_condition_parses_and_matches(router):
    policy = PolicySet.from_dict(
        {
            "rules": [
                {"name": "tools-local", "when": {"needs": ["tools", "json"]}, "then": "force", "endpoint": "edge"},
                {"name": "see-in-cloud", "when": {"needs": "images"}, "then": "prefer", "endpoint": "cloud"},
            ]
        }
    )
    assert [rule.needs for rule in policy.rules] == [("tools", "json"), ("images",)]
    policed = Router(router._routing, policy=policy)
    prompt = ASK[0]["content"]
    assert policed.route(prompt).rule is None and policed.route(prompt, needs=NO_NEEDS).rule is None
    assert policed.route(prompt, needs=Needs(json=True)).rule == "tools-local"  # any of the list
    seen = policed.route(prompt, needs=Needs(images=True))
    assert (seen.rule, seen.zone) == ("see-in-cloud", "cloud")
    # the rule and the automatic feasibility together: cloud preferred, edge lacks images
    both = policed.route(prompt, needs=Needs(images=True), capabilities={"edge": TEXT_ONLY, "cloud": SEES})
    assert (both.rule, both.zone, both.forbidden) == ("see-in-cloud", "cloud", ("edge",))


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ({"needs": "video"}, "key 'when.needs': unknown capability 'video'; capabilities are images, tools, json"),
        ({"needs": []}, "key 'when.needs': must be a capability or a non-empty list of them, got []"),
        ({"needs": [1]}, "key 'when.needs': must be a capability or a non-empty list of them, got [1]"),
        ({"needs": True}, "key 'when.needs': must be a capability or a non-empty list of them, got True"),
    ],
)
def test_a_bad_needs_condition_names_the_rule_and_the_key(when, message):
    rules = {
        "rules": [
            {"name": "ok", "then": "forbid", "endpoint": "cloud"},
            {"name": "r", "when": when, "then": "forbid", "endpoint": "edge"},
        ]
    }
    with pytest.raises(PolicyFileError) as caught:
        PolicySet.from_dict(rules, source="p.json")
    assert str(caught.value) == f"p.json: rules[1] ('r'), {message}"


def test_rule_names_of_the_built_in_capability_rules_are_reserved():
    with pytest.raises(
        PolicyFileError, match=r"rules\[0\] \('needs:images'\), key 'name': names starting with 'needs:'"
    ):
        PolicySet.from_dict({"rules": [{"name": "needs:images", "then": "forbid", "endpoint": "cloud"}]})


# --- the proxy -----------------------------------------------------------------------------------


def test_the_proxys_capability_options(monkeypatch):
    assert parse_capabilities(None, "--edge-capabilities") is None
    assert parse_capabilities("images, tools", "--x") == Capabilities(images=True, tools=True)
    assert parse_capabilities("none", "--x") == Capabilities()
    for bad in ("video", "", "images,none"):
        with pytest.raises(ConfigError, match="--x .*: list what the model accepts among images, tools, json"):
            parse_capabilities(bad, "--x")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--bundle", "b", "--edge-url", "http://127.0.0.1:1/v1", "--edge-model", "e", "--edge-capabilities", "json"]
        + ["--cloud-url", "http://127.0.0.1:2/v1", "--cloud-model", "c"]
    )
    config = ProxyConfig.from_args(args, environ={})
    assert config.edge.capabilities == Capabilities(json=True) and config.cloud.capabilities is None


@contextlib.contextmanager
def proxy(router, stubs, edge_caps, cloud_caps):
    edge, cloud = stubs
    config = ProxyConfig(
        bundle="(loaded by the test)",
        token=TOKEN,
        edge=Endpoint(edge.url, "edge-model", timeout_s=2, capabilities=edge_caps),
        cloud=Endpoint(cloud.url, "cloud-model", timeout_s=2, capabilities=cloud_caps),
    )
    chat = RoutedChat(router, endpoints=config.upstreams)
    server = LocalServer(build_app(chat, config), name="proxy", lifespan="on").start()
    try:
        yield httpx2.Client(
            base_url=f"http://127.0.0.1:{server.port}", headers={"authorization": f"Bearer {TOKEN}"}, timeout=20
        )
    finally:
        server.stop()
        chat.close()


def test_the_proxy_never_sends_an_image_to_an_upstream_declared_without_images(router, stubs):
    edge, cloud = stubs
    with proxy(router, stubs, TEXT_ONLY, SEES) as client:
        answer = client.post("/v1/chat/completions", json={"messages": SEE})
        streamed = client.post("/v1/chat/completions", json={"messages": SEE, "stream": True})
        plain = client.post("/v1/chat/completions", json={"messages": ASK})
    for response in (answer, streamed):
        assert response.status_code == 200 and response.headers["x-router-served-by"] == "cloud"
        assert response.headers["x-router-rule"] == "needs:images" and response.headers["x-router-zone"] == "cloud"
    assert plain.headers["x-router-served-by"] == "edge" and "x-router-rule" not in plain.headers
    assert len(edge.received) == 1 and edge.received[0].body["messages"] == ASK  # only the plain request
    with proxy(router, stubs, TEXT_ONLY, TEXT_ONLY) as client:
        refused = client.post("/v1/chat/completions", json={"messages": SEE, "tools": [TOOL]})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "no_capable_endpoint"
    assert refused.headers["x-router-rule"] == "needs:images"
    assert "edge lacks images; cloud lacks images" in refused.json()["error"]["message"]
    assert len(edge.received) == 1 and len(cloud.received) == 2  # nothing more was sent
