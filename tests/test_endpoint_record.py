"""The one endpoint record, serving.Endpoint (docs/endpoints.md#endpoints-as-data): spec files and
manifests in the earlier per-1k spelling price every call exactly as before; the record's call
settings are optional and a client refuses a record without them, naming it; its `params` reach
the upstream on every request (a real stub server on 127.0.0.1 records what it received), so one
model at two reasoning efforts is two endpoints, routed and called as two; and its API key shows
in no repr, str, dict or log line."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import shutil
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import serving
import serving.chat
import serving.chat._endpoint
from serving import Endpoint, Price, Router
from serving.bundle._manifest import EndpointsSection, ManifestError
from serving.chat import RoutedChat
from serving.endpoints._choice import call_costs
from serving.endpoints._record import Capabilities, Endpoints, EndpointSpecError, load_endpoints, parse_endpoints
from serving.proxy._config import ConfigError, ProxyConfig
from serving.routing._chooser import Choice, Chooser
from serving.scoring._scorer import Scores
from serving.testing import Behaviour, StubUpstream
from tests.endpoint_doubles import ORDER, SPECS, cascade_router
from tests.test_endpoint_bundle import HARD, TOPICS
from tests.test_endpoint_bundle import trained as trained  # noqa: F401  # the session's N-endpoint bundle

KEY = "sk-record-4c1d9e07b2a85f36-SECRET"
ASK = [{"role": "user", "content": "What is 2+2?"}]
TOKENS = [0, 1, 7, 511, 512, 513, 1024, 3000, 4096, 200_000]


def old_cost(per_1k_input: float, per_1k_output: float, per_call: float, input_tokens, output_tokens) -> float:
    """How serving.endpoints._record priced a call before the one record (its Price.cost, verbatim)."""
    return per_call + per_1k_input * input_tokens / 1000.0 + per_1k_output * output_tokens / 1000.0


def spec(price: dict) -> dict:
    item = {"name": "e", "where": "cloud", "price": price, "latency_ms": 100, "context_tokens": 128_000}
    return {"endpoints": [item]}


def test_one_class_under_every_name():
    assert serving.Endpoint is serving.chat.Endpoint is serving.chat._endpoint.Endpoint is Endpoint
    # the chat client's earlier spelling builds the same record, positional URL and model included
    old = Endpoint("http://127.0.0.1:8080/v1", "m", input_price_per_1m=3.0, output_price_per_1m=15.0)
    assert old == Endpoint(base_url="http://127.0.0.1:8080/v1", model="m", price=Price(3.0, 15.0))
    assert dataclasses.replace(old, output_price_per_1m=10.0).price == Price(3.0, 10.0)  # one figure of the price


def test_per_1k_prices_cost_every_call_exactly_as_before():
    """The earlier per_1k_input / per_1k_output spelling: every call's price is the float it was,
    to the last bit, for prices written in decimal and for any float (the JS SDK's random cases);
    the writer gives per 1M tokens, read back to the same prices."""
    rng = random.Random(29)
    decimal = [0.0, 0.0001, 0.0002, 0.0005, 0.0015, 0.003, 0.005, 0.015, 3e-05, 7e-05, 0.00025, 1.1e-06]
    for per_1k_input, per_1k_output, per_call in [
        *[(rng.choice(decimal), rng.choice(decimal), rng.choice([0.0, 0.0001, 0.003])) for _ in range(200)],
        *[(rng.random(), rng.random() * 1e-3, rng.random()) for _ in range(200)],
    ]:
        earlier = parse_endpoints(
            spec({"per_1k_input": per_1k_input, "per_1k_output": per_1k_output, "per_call": per_call})
        )
        output_tokens = rng.choice([0.0, 250.0, 333.3])
        cost, _ = call_costs(list(earlier), TOKENS, output_tokens)
        assert cost[:, 0].tolist() == [
            old_cost(per_1k_input, per_1k_output, per_call, t, output_tokens) for t in TOKENS
        ], (per_1k_input, per_1k_output, per_call)
        written = earlier.as_dict()["endpoints"][0]["price"]
        assert set(written) == {"per_1m_input", "per_1m_output", "per_call"}
        assert written["per_1m_input"] == float(
            Decimal(repr(per_1k_input)) * 1000
        )  # 3e-05 -> 0.03, not 0.030000000000000002
        if per_1k_input in decimal and per_1k_output in decimal:  # read back: the same floats again
            again, _ = call_costs(list(parse_endpoints(earlier.as_dict())), TOKENS, output_tokens)
            assert again.tolist() == cost.tolist()
    assert parse_endpoints(spec({"per_1m_input": 3, "per_1m_output": 15})) == parse_endpoints(
        spec({"per_1k_input": 0.003, "per_1k_output": 0.015})
    )


def test_a_price_is_in_one_unit():
    with pytest.raises(EndpointSpecError, match=r"price: per_1k_input and per_1m_input are two units for one price"):
        parse_endpoints(spec({"per_1k_input": 0.003, "per_1m_input": 3}))
    with pytest.raises(EndpointSpecError, match=r"price is empty: give at least one of per_1m_input"):
        parse_endpoints(spec({"per_1m_cached_input": 1}))
    with pytest.raises(EndpointSpecError, match=r"price.per_1m_cached_input must be >= 0"):
        parse_endpoints(spec({"per_1m_input": 3, "per_1m_cached_input": -1}))
    cached = parse_endpoints(spec({"per_1m_input": 3, "per_1m_cached_input": 0.3}))["e"]
    assert cached.call_cost(1000) == pytest.approx(0.003) and cached.call_cost(1000, 0, 1000) == pytest.approx(0.0003)
    assert cached.as_dict()["price"]["per_1m_cached_input"] == 0.3


def test_a_manifest_in_the_earlier_spelling_loads_with_the_same_prices():
    """What a deployed N-endpoint bundle's manifest holds (per_1k keys) is read as the per-1M figures,
    and the choosers price its calls exactly as the SDK before the one record did."""
    from serving.bundle._manifest import ENDPOINTS_KIND, ScoreSpec, check_endpoints

    endpoints = [
        {"name": "phone-3b", "where": "device", "price": {"per_call": 0.0}, "latency_ms": 150, "context_tokens": 4096},
        {
            "name": "frontier",
            "where": "cloud",
            "price": {"per_1k_input": 0.005, "per_1k_output": 0.015, "per_call": 0.0},
            "latency_ms": 1200,
            "context_tokens": 200000,
        },
    ]
    section = {"endpoints": endpoints, "output_tokens": 300.0, "choice": {"rule": "cheapest_within", "margin": 0.02}}
    score = ScoreSpec(ENDPOINTS_KIND, ("phone-3b", "frontier"), ("expected",))
    read = check_endpoints(section, score)
    assert read.spec["frontier"].price == Price(per_1m_input=5.0, per_1m_output=15.0)
    cost, fits = call_costs(list(read.spec), TOKENS, read.output_tokens)
    assert cost[:, 1].tolist() == [old_cost(0.005, 0.015, 0.0, t, 300.0) for t in TOKENS]
    assert read.to_dict()["endpoints"][1]["price"] == {"per_1m_input": 5.0, "per_1m_output": 15.0, "per_call": 0.0}
    # a manifest holds what decides, never how an endpoint is called
    endpoints[1]["base_url"] = "https://api.example.com/v1"
    with pytest.raises(ManifestError, match=r"endpoints\[1\] \('frontier'\): unknown key 'base_url'"):
        check_endpoints(section, score)


def in_the_earlier_spelling(bundle: Path, folder: Path) -> Path:
    """A copy of an N-endpoint bundle whose manifest gives its prices per 1,000 tokens, as every
    bundle written before the one record did (re-digested; unsigned, as the signature was of the
    manifest as written)."""
    from serving.bundle._bundle import manifest_digest

    shutil.copytree(bundle, folder)
    (folder / "manifest.sig").unlink(missing_ok=True)
    data = json.loads((folder / "manifest.json").read_text())
    for item in data["endpoints"]["endpoints"]:
        price = item["price"]
        item["price"] = {
            "per_1k_input": float(Decimal(repr(price["per_1m_input"])).scaleb(-3)),
            "per_1k_output": float(Decimal(repr(price["per_1m_output"])).scaleb(-3)),
            "per_call": price["per_call"],
        }
    data["manifest_sha256"] = manifest_digest(data)
    (folder / "manifest.json").write_text(json.dumps(data, indent=2))
    return folder


def test_a_bundle_in_the_earlier_spelling_decides_as_the_one_written_now(trained, tmp_path):  # noqa: F811
    """The session's four-endpoint bundle (written per 1M tokens) and the same bundle with the
    per-1k prices a deployed bundle's manifest holds: the same prices, every decision alike."""
    made, _ = trained
    earlier = in_the_earlier_spelling(made.folder, tmp_path / "earlier")
    assert "per_1k_input" in (earlier / "manifest.json").read_text()
    now, before = Router.load(made.folder, strict=True), Router.load(earlier, strict=True)
    assert [e.price for e in now.manifest.endpoints.spec] == [e.price for e in before.manifest.endpoints.spec]
    section = before.manifest.endpoints
    written = json.loads((earlier / "manifest.json").read_text())["endpoints"]["endpoints"]
    cost, _ = call_costs(list(section.spec), TOKENS, section.output_tokens)
    assert cost.T.tolist() == [
        [
            old_cost(
                *(e["price"].get(k, 0.0) for k in ("per_1k_input", "per_1k_output", "per_call")),
                t,
                section.output_tokens,
            )
            for t in TOKENS
        ]
        for e in written
    ]
    prompts = [f"{topic} ({i})" for i in range(10) for topic in TOPICS] + HARD + ["word " * 5000]
    assert [d.to_dict() for d in now.route_batch(prompts)] == [d.to_dict() for d in before.route_batch(prompts)]


def test_call_settings_prefill_and_params_are_read_from_a_spec_file_and_written_back(tmp_path):
    item = {
        "name": "gpt-high",
        "where": "cloud",
        "price": {"per_1m_input": 1.25, "per_1m_output": 10, "per_1m_cached_input": 0.125},
        "latency_ms": 2000,
        "context_tokens": 400_000,
        "prefill_tokens_per_s": 5000,
        "base_url": "https://api.example.com/v1",
        "model": "gpt-x",
        "timeout_s": 90,
        "first_token_timeout_s": 20,
        "headers": {"x-org": "acme"},
        "params": {"reasoning_effort": "high", "max_tokens": 512},
    }
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps({"endpoints": [item]}))
    record = load_endpoints(path)["gpt-high"]
    assert (record.model, record.timeout_s, record.first_token_timeout_s) == ("gpt-x", 90.0, 20.0)
    assert record.params == {"reasoning_effort": "high", "max_tokens": 512} and record.prefill_tokens_per_s == 5000
    assert parse_endpoints(load_endpoints(path).as_dict(call_settings=True)).endpoints == (record,)
    assert "base_url" not in record.as_dict() and record.as_dict()["prefill_tokens_per_s"] == 5000
    for bad, says in [
        ({"prefill_tokens_per_s": 0}, r"prefill_tokens_per_s must be > 0"),
        ({"params": {"reasoning_effort": "high", "model": "other"}}, r"params must not set 'model'"),
        ({"params": ["reasoning_effort"]}, r"params must map"),
        ({"api_key": KEY}, r"a key never goes in a file"),
        ({"base_url": "ftp://h"}, r"\('gpt-high'\): base_url='ftp://h': expected an http"),
    ]:
        path.write_text(json.dumps({"endpoints": [{**item, **bad}]}))
        with pytest.raises(EndpointSpecError, match=says) as caught:
            load_endpoints(path)
        assert KEY not in str(caught.value)


def test_call_settings_are_optional_and_a_client_refuses_a_record_without_them(tmp_path):
    decided_only = SPECS["onprem-8b"]  # as a manifest has it: no base_url, no model
    assert not decided_only.has_call_settings and decided_only.call_cost(1000) == pytest.approx(0.0002)
    router = cascade_router(tmp_path)
    with pytest.raises(EndpointSpecError, match=r"RoutedChat: endpoint 'onprem-8b' has no base_url and model"):
        RoutedChat(router, endpoints={"onprem-8b": decided_only})
    with pytest.raises(ConfigError, match=r"the cloud endpoint needs base_url and model"):
        ProxyConfig(bundle="b", edge=Endpoint("http://h/v1", "e"), cloud=Endpoint(name="cloud", where="cloud"))
    with pytest.raises(ValueError, match=r"given the endpoint named 'frontier' as 'onprem-8b'"):
        RoutedChat(router, endpoints={"onprem-8b": Endpoint("http://h/v1", "m", name="frontier")})


def test_a_records_declared_fields_are_what_routing_reads_and_the_rest_the_bundles(tmp_path):
    """RoutedChat's records carry their context limit and price (no specs= needed); what a record
    leaves undeclared is the bundle's (here the rule table's)."""
    router = cascade_router(tmp_path)
    with StubUpstream("one") as stub:
        records = {
            name: dataclasses.replace(SPECS[name], base_url=stub.url, model=f"{name}-model", timeout_s=5.0)
            for name in ORDER
        }
        router.changes = {"n_tokens": 100}  # over phone-3b's 64
        with RoutedChat(router, endpoints=records) as chat:
            completion = chat.create(ASK)
        assert [t.label() for t in completion.routing.tried] == ["phone-3b=context", "onprem-8b=served"]
        assert completion.routing.expected_cost == SPECS["onprem-8b"].call_cost(100)
        assert [r.body["model"] for r in stub.received] == ["onprem-8b-model"]
    filled = Endpoint("http://h/v1", "m", context_tokens=10).filled_from(SPECS["frontier"])
    assert (filled.context_tokens, filled.where, filled.price, filled.name) == (
        10,
        "cloud",
        SPECS["frontier"].price,
        "frontier",
    )
    assert filled.base_url == "http://h/v1" and SPECS["frontier"].filled_from(None) is SPECS["frontier"]


def test_params_are_sent_upstream_with_the_request_under_them_and_the_model_the_endpoints(tmp_path):
    router = cascade_router(tmp_path)
    router.cascade = ("phone-3b",)
    with StubUpstream("phone") as stub:
        phone = Endpoint(stub.url, "phone-model", params={"max_tokens": 512, "top_k": 40, "reasoning_effort": "low"})
        with RoutedChat(router, endpoints={"phone-3b": phone}) as chat:
            chat.create(ASK, max_tokens=64, temperature=0)
            with chat.create(ASK, stream=True, stream_options={"include_usage": True}) as stream:
                list(stream)
    plain, streamed = (r.body for r in stub.received)
    assert plain == {
        "max_tokens": 512,
        "temperature": 0,
        "top_k": 40,
        "reasoning_effort": "low",
        "model": "phone-model",
        "messages": ASK,
    }
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}
    assert {k: streamed[k] for k in ("max_tokens", "top_k", "reasoning_effort", "model")} == {
        "max_tokens": 512,
        "top_k": 40,
        "reasoning_effort": "low",
        "model": "phone-model",
    }


class TwoEfforts(Router):
    """A router deciding between two endpoints with the SDK's own N-endpoint chooser (cheapest within
    0.02 of the best expected quality, then each costlier one expected to do better), at the expected
    qualities `expected` says: what an N-endpoint bundle of these two endpoints would decide."""

    expected: tuple[float, float] = (0.9, 0.9)
    chooser: Chooser

    def _prepared(self, request, accept):
        routing, _, check = super()._prepared(request, accept)
        scores = Scores([10], expected=np.array([self.expected]))
        return routing, self.chooser.decisions([request], scores)[0], check


def test_one_model_at_two_reasoning_efforts_is_two_endpoints_routed_and_called_as_two(tmp_path):
    with StubUpstream("model-server") as server:  # one server, one model
        low = Endpoint(
            server.url,
            "the-model",
            name="effort-low",
            where="cloud",
            price=Price(1.0, 4.0),
            params={"reasoning_effort": "low"},
        )
        high = dataclasses.replace(low, name="effort-high", price=Price(1.0, 16.0), params={"reasoning_effort": "high"})
        section = EndpointsSection(Endpoints((low, high)), 500.0, "cheapest_within", 0.02)
        router = TwoEfforts.load(tmp_path / "no-bundle")
        router.chooser = Chooser(section.spec, Choice(section), model_version="two-efforts", max_chars=2048)
        with RoutedChat(router, endpoints={"effort-low": low, "effort-high": high}) as chat:
            router.expected = (0.94, 0.95)  # low is within 0.02 of high, and cheaper
            near = chat.create(ASK)
            router.expected = (0.60, 0.95)
            far = chat.create(ASK)
            router.expected = (0.94, 0.95)
            rejected = chat.create(ASK, accept=lambda text: False)  # low's answer rejected: high's stands
    assert near.routing.decision.cascade == ("effort-low", "effort-high") and near.routing.served_by == "effort-low"
    assert far.routing.decision.cascade == ("effort-high",) and far.routing.served_by == "effort-high"
    assert [t.label() for t in rejected.routing.tried] == ["effort-low=rejected", "effort-high=served"]
    sent = [(r.body["model"], r.body["reasoning_effort"]) for r in server.received]
    assert sent == [("the-model", "low"), ("the-model", "high"), ("the-model", "low"), ("the-model", "high")]
    # each priced by its own record (the answer tokens: the loaded bundle's, here the rule table's none)
    assert near.routing.expected_cost == low.call_cost(near.routing.decision.n_tokens)
    assert far.routing.expected_cost == high.call_cost(far.routing.decision.n_tokens)


def test_the_api_key_is_in_no_repr_and_no_log_line(tmp_path, caplog):
    record = Endpoint(
        "http://127.0.0.1:9/v1",
        "m",
        name="frontier",
        where="cloud",
        api_key=KEY,
        headers={"x-org": "acme"},
        capabilities=Capabilities(images=True),
        price=Price(3.0, 15.0),
    )
    shown = [repr(record), str(record), f"{record!s}", repr({"e": record}), repr(Endpoints((record,)))]
    shown += [json.dumps(record.as_dict(call_settings=True)), repr(record.filled_from(SPECS["frontier"]))]
    assert all(KEY not in text for text in shown) and "frontier" in shown[0]
    router = cascade_router(tmp_path)
    router.cascade = ("phone-3b", "frontier")
    caplog.set_level(logging.DEBUG)
    with StubUpstream("phone") as phone, StubUpstream("frontier") as cloud:
        phone.behaviour = Behaviour(status=401, echo_auth_in_errors=True)
        cloud.behaviour = Behaviour(status=500, echo_auth_in_errors=True)
        endpoints = {
            "phone-3b": Endpoint(phone.url, "phone-model", api_key=KEY),
            "frontier": dataclasses.replace(record, base_url=cloud.url),
        }
        with RoutedChat(router, endpoints=endpoints) as chat:
            with pytest.raises(serving.CloudCallError) as caught:
                chat.create(ASK)
            logging.getLogger("test").info("the client: %r %s", chat.endpoints, chat.endpoints["frontier"])
        assert phone.received[0].headers["authorization"] == f"Bearer {KEY}"  # it was sent, and only there
    assert caplog.records and all(KEY not in r.getMessage() for r in caplog.records)
    assert KEY not in caplog.text and KEY not in str(caught.value) and KEY not in repr(caught.value.steps)
