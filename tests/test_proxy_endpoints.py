"""RoutedChat and the proxy over N endpoints, against three stub upstreams on 127.0.0.1 that record
what they received: the decision's cascade is followed (non-streamed, async and streamed, a
stream falling back only before its first byte), each reason to go on (an HTTP error, a timeout,
the context limit, a rejected answer) is taken, a forbidden endpoint receives nothing, and the
proxy's x-router-tried header and the outcome log list the attempts. The proxy's --endpoints file
is checked like any option. Two-endpoint behaviour: tests/test_proxy.py and test_openai_client.py."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import subprocess
import sys

import httpx2
import pytest

from data.sdk_logs import iter_outcome_log
from serving.chat import Endpoint, RoutedChat
from serving.dashboard._summary import from_record
from serving.monitoring._outcome_log import OutcomeLog, read_log_lines
from serving.policy import FallbackForbidden
from serving.proxy._app import build_app
from serving.proxy._config import ConfigError, ProxyConfig, add_arguments, load_endpoints_file
from serving.testing import Behaviour, LocalServer, StubUpstream
from tests.endpoint_doubles import ORDER, SPECS, cascade_router, upstream_fixtures

ASK = [{"role": "user", "content": "What is 2+2?"}]
TOKEN = "proxy-token-0123456789abcdef"
FRONTIER_KEY = "sk-frontier-0a1b2c3d4e5f6071-SECRET"


upstreams, fresh = upstream_fixtures(ORDER)  # a stub per endpoint on 127.0.0.1, reset before each test


def chat_endpoints(upstreams) -> dict[str, Endpoint]:
    return {
        name: Endpoint(
            stub.url,
            f"{name}-model",
            api_key=FRONTIER_KEY if name == "frontier" else None,
            timeout_s=0.5 if name != "frontier" else 5.0,
            first_token_timeout_s=0.3 if name != "frontier" else None,
        )
        for name, stub in upstreams.items()
    }


def received(upstreams) -> dict[str, int]:
    return {name: len(stub.received) for name, stub in upstreams.items()}


def labels(routing) -> str:
    return ",".join(t.label() for t in routing.tried)


@pytest.fixture
def router(tmp_path):
    return cascade_router(tmp_path, log=OutcomeLog(tmp_path / "logs"))


def logged(router, folder) -> list[dict]:
    assert router.log.flush()
    return [line.record for line in read_log_lines(folder) if line.record and line.record["type"] == "request"]


# --- RoutedChat ----------------------------------------------------------------------------------


def test_the_first_endpoint_serves_and_the_others_receive_nothing(router, upstreams, tmp_path):
    with RoutedChat(router, endpoints=chat_endpoints(upstreams), specs=SPECS) as chat:
        completion = chat.create(ASK)
    assert completion.text == "answer from phone-3b" and completion.routing.served_by == "phone-3b"
    assert labels(completion.routing) == "phone-3b=served" and completion.routing.model == "phone-3b-model"
    assert received(upstreams) == {"phone-3b": 1, "onprem-8b": 0, "frontier": 0}
    assert upstreams["phone-3b"].received[0].body["model"] == "phone-3b-model"
    (record,) = logged(router, tmp_path / "logs")
    assert record["served_by"] == "phone-3b"
    assert [(t["endpoint"], t["outcome"]) for t in record["tried"]] == [("phone-3b", "served")]


def test_an_http_error_and_a_timeout_move_up_the_cascade_in_order(router, upstreams, tmp_path):
    upstreams["phone-3b"].behaviour = Behaviour(status=500)
    upstreams["onprem-8b"].behaviour = Behaviour(delay_s=2.0)  # its timeout is 0.5 s
    with RoutedChat(router, endpoints=chat_endpoints(upstreams), specs=SPECS) as chat:
        completion = chat.create(ASK)
    assert completion.text == "answer from frontier"
    assert labels(completion.routing) == "phone-3b=error:UpstreamHTTPError,onprem-8b=timeout,frontier=served"
    assert received(upstreams) == {"phone-3b": 1, "onprem-8b": 1, "frontier": 1}
    assert completion.routing.fallback_kind == "timeout"  # why the endpoint before the serving one was left
    (record,) = logged(router, tmp_path / "logs")
    assert [(t["endpoint"], t["outcome"], t["error"]) for t in record["tried"]] == [
        ("phone-3b", "error", "UpstreamHTTPError"),
        ("onprem-8b", "timeout", "UpstreamTimeout"),
        ("frontier", "served", None),
    ]
    assert record["expected_cost"] == pytest.approx(completion.routing.expected_cost) and record["expected_cost"] > 0
    assert from_record(record).fallback == "timeout"  # the dashboard's reading of the record
    rejects: list = []
    (row,) = iter_outcome_log(tmp_path / "logs", rejects)  # training's reader takes N-endpoint records too
    assert rejects == [] and row.row["prompt"] == "What is 2+2?"


def test_the_context_limit_skips_an_endpoint_without_calling_it(router, upstreams, tmp_path):
    router.changes = {"n_tokens": 100}  # phone-3b takes 64
    with RoutedChat(router, endpoints=chat_endpoints(upstreams), specs=SPECS) as chat:
        completion = chat.create(ASK)
    assert labels(completion.routing) == "phone-3b=context,onprem-8b=served"
    assert received(upstreams) == {"phone-3b": 0, "onprem-8b": 1, "frontier": 0}
    assert completion.routing.fallback_kind == "context_limit"
    (record,) = logged(router, tmp_path / "logs")
    assert from_record(record).fallback == "context_limit" and from_record(record).served_by == "onprem-8b"


def test_a_rejected_answer_moves_up_and_async_requests_follow_the_same_cascade(router, upstreams):
    def accept(text: str) -> bool:
        return "phone-3b" not in text

    async def run():
        async with RoutedChat(router, endpoints=chat_endpoints(upstreams), specs=SPECS) as chat:
            return await chat.acreate(ASK, accept=accept)

    completion = asyncio.run(run())
    assert completion.text == "answer from onprem-8b"
    assert labels(completion.routing) == "phone-3b=rejected,onprem-8b=served"
    assert received(upstreams) == {"phone-3b": 1, "onprem-8b": 1, "frontier": 0}


def test_a_request_kept_on_the_device_never_reaches_the_cloud_endpoint(router, upstreams, tmp_path):
    router.changes = {"forbidden": ("cloud",), "rule": "private-data"}
    upstreams["phone-3b"].behaviour = Behaviour(status=503)
    upstreams["onprem-8b"].behaviour = Behaviour(status=500)
    with RoutedChat(router, endpoints=chat_endpoints(upstreams), specs=SPECS) as chat:
        with pytest.raises(FallbackForbidden, match="policy 'private-data' forbids frontier") as caught:
            chat.create(ASK)
        with pytest.raises(FallbackForbidden):
            chat.create(ASK, stream=True)
    assert upstreams["frontier"].received == []
    assert ",".join(t.label() for t in caught.value.tried).endswith("frontier=forbidden")
    records = logged(router, tmp_path / "logs")
    assert [t["outcome"] for t in records[0]["tried"]] == ["error", "error", "forbidden"]
    assert records[0]["served_by"] is None and records[0]["error"].startswith("FallbackForbidden")
    assert from_record(records[0]).fallback is None and from_record(records[0]).served_by is None


def test_a_stream_falls_back_before_its_first_byte_only(router, upstreams):
    upstreams["phone-3b"].behaviour = Behaviour(first_token_delay_s=2.0)  # first token timeout 0.3 s
    with RoutedChat(router, endpoints=chat_endpoints(upstreams), specs=SPECS) as chat:
        with chat.create(ASK, stream=True) as stream:
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in stream if c.get("choices"))
            routing = stream.routing
    assert text == "answer from onprem-8b" and routing.served_by == "onprem-8b"
    assert labels(routing) == "phone-3b=timeout,onprem-8b=served" and routing.tried[0].error == "SlowFirstToken"
    upstreams["onprem-8b"].behaviour = Behaviour(break_after_first_chunk=True)
    with RoutedChat(router, endpoints=chat_endpoints(upstreams), specs=SPECS) as chat:
        router.changes = {"n_tokens": 100}
        stream = chat.create(ASK, stream=True)
        with pytest.raises(Exception, match="broke after its first chunk"):
            list(stream)
    assert len(upstreams["frontier"].received) == 0  # no fallback once a byte was sent


def test_routedchat_takes_edge_and_cloud_or_endpoints(router, upstreams):
    endpoints = chat_endpoints(upstreams)
    with pytest.raises(TypeError, match="not both"):
        RoutedChat(router, edge=endpoints["phone-3b"], cloud=endpoints["frontier"], endpoints=endpoints)
    with pytest.raises(TypeError, match=r"needs endpoints= \(name -> Endpoint\), or edge= and cloud="):
        RoutedChat(router, edge=endpoints["phone-3b"])
    with pytest.raises(ValueError, match="not an endpoint name"):
        RoutedChat(router, endpoints={"two words": endpoints["phone-3b"]})
    with RoutedChat(router, endpoints={"phone-3b": endpoints["phone-3b"]}) as chat:
        with pytest.raises(ValueError, match="names 'onprem-8b', 'frontier', which endpoints= does not have"):
            chat.create(ASK)
    assert received(upstreams) == {"phone-3b": 0, "onprem-8b": 0, "frontier": 0}


# --- the proxy -----------------------------------------------------------------------------------


def endpoints_file(tmp_path, upstreams, *, spelling: str = "flat", **overrides) -> str:
    """The proxy's --endpoints file for SPECS and the stubs: each entry the spec's fields and how it
    is called (base_url, model, ...); with spelling="upstream", the earlier `upstream` object."""
    spec = json.loads(json.dumps(SPECS.as_dict()))
    for item in spec["endpoints"]:
        name = item["name"]
        call = {
            "base_url": upstreams[name].url,
            "model": f"{name}-model",
            "timeout_s": 5.0 if name == "frontier" else 0.5,
            **({"key_env": "FRONTIER_KEY"} if name == "frontier" else {"first_token_timeout_s": 0.3}),
            **overrides.get(name, {}),
        }
        if spelling == "upstream":
            item["upstream"] = {"url" if key == "base_url" else key: value for key, value in call.items()}
        else:
            item.update(call)
    path = tmp_path / f"endpoints-{spelling}.json"
    path.write_text(json.dumps(spec))
    return str(path)


@contextlib.contextmanager
def running_proxy(router, config: ProxyConfig):
    chat = RoutedChat(router, endpoints=config.upstreams)
    server = LocalServer(build_app(chat, config), name="proxy", lifespan="on").start()
    try:
        yield httpx2.Client(
            base_url=f"http://127.0.0.1:{server.port}", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10
        )
    finally:
        server.stop()
        chat.close()


def proxy_config(tmp_path, upstreams) -> ProxyConfig:
    loaded = load_endpoints_file(endpoints_file(tmp_path, upstreams), environ={"FRONTIER_KEY": FRONTIER_KEY})
    return ProxyConfig(bundle="(loaded by the test)", token=TOKEN, endpoints=loaded)


def test_the_proxy_headers_and_log_say_which_endpoints_were_tried_and_why(router, upstreams, tmp_path):
    upstreams["phone-3b"].behaviour = Behaviour(status=500)
    config = proxy_config(tmp_path, upstreams)
    assert FRONTIER_KEY in config.secrets
    with running_proxy(router, config) as client:
        answer = client.post("/v1/chat/completions", json={"model": "router", "messages": ASK})
        router.changes = {"n_tokens": 100}
        streamed = client.post("/v1/chat/completions", json={"messages": ASK, "stream": True})
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "answer from onprem-8b"
    assert answer.headers["x-router-served-by"] == "onprem-8b"
    assert answer.headers["x-router-tried"] == "phone-3b=error:UpstreamHTTPError,onprem-8b=served"
    assert answer.headers["x-router-fallback"] == "http_error"
    assert float(answer.headers["x-router-expected-cost"]) > 0
    assert streamed.status_code == 200 and streamed.headers["x-router-tried"] == "phone-3b=context,onprem-8b=served"
    assert "answer from onprem-8b" in "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in streamed.text.splitlines()
        if line.startswith("data: {")
    )
    routing = json.loads(next(line for line in streamed.text.splitlines() if line.startswith(": routing "))[10:])
    assert [t["outcome"] for t in routing["tried"]] == ["context", "served"]
    records = logged(router, tmp_path / "logs")
    assert [[t["outcome"] for t in r["tried"]] for r in records] == [["error", "served"], ["context", "served"]]
    assert received(upstreams) == {"phone-3b": 1, "onprem-8b": 2, "frontier": 0}


def test_the_proxy_answers_502_naming_every_attempt_and_never_calls_a_forbidden_endpoint(router, upstreams, tmp_path):
    for stub in upstreams.values():
        stub.behaviour = Behaviour(status=500)
    with running_proxy(router, proxy_config(tmp_path, upstreams)) as client:
        failed = client.post("/v1/chat/completions", json={"messages": ASK})
        router.changes = {"forbidden": ("frontier",), "rule": "keep-local"}
        forbidden = client.post("/v1/chat/completions", json={"messages": ASK})
    assert failed.status_code == 502 and failed.json()["error"]["code"] == "upstream_failed"
    assert failed.headers["x-router-tried"] == ",".join(f"{n}=error:UpstreamHTTPError" for n in ORDER)
    assert "no endpoint served" in failed.json()["error"]["message"] and FRONTIER_KEY not in failed.text
    assert forbidden.status_code == 502 and forbidden.json()["error"]["code"] == "fallback_forbidden"
    assert forbidden.headers["x-router-rule"] == "keep-local"
    assert forbidden.headers["x-router-tried"].endswith("frontier=forbidden")
    assert received(upstreams) == {"phone-3b": 2, "onprem-8b": 2, "frontier": 1}  # only the first request reached it


def test_the_endpoints_file_is_checked_like_any_option(tmp_path, upstreams):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    path = endpoints_file(tmp_path, upstreams)
    config = ProxyConfig.from_args(
        parser.parse_args(["--bundle", "b", "--endpoints", path]), environ={"FRONTIER_KEY": FRONTIER_KEY}
    )
    assert list(config.upstreams) == list(ORDER) and config.endpoints["phone-3b"].context_tokens == 64
    options = config.upstreams
    assert config.endpoints is not None and options["frontier"].api_key == FRONTIER_KEY
    onprem = options["onprem-8b"]  # one record: the spec's fields and how it is called
    assert onprem.price.per_1m_input == 0.2 and onprem.where == "device" and onprem.model == "onprem-8b-model"
    assert onprem.call_cost(1000) == SPECS["onprem-8b"].call_cost(1000)  # 0.0002 per 1k, priced as before
    # the earlier spelling, an `upstream` object per entry, reads as the same records
    earlier = load_endpoints_file(endpoints_file(tmp_path, upstreams, spelling="upstream"), {"FRONTIER_KEY": "k"})
    assert [dataclasses.replace(e, api_key=None) for e in earlier] == [
        dataclasses.replace(e, api_key=None) for e in config.endpoints
    ]
    with pytest.raises(ConfigError, match="FRONTIER_KEY is not set"):
        ProxyConfig.from_args(parser.parse_args(["--bundle", "b", "--endpoints", path]), environ={})
    with pytest.raises(ConfigError, match="not both"):
        ProxyConfig.from_args(
            parser.parse_args(["--bundle", "b", "--endpoints", path, "--edge-url", "http://h/v1", "--edge-model", "e"]),
            environ={"FRONTIER_KEY": "k"},
        )
    with pytest.raises(ConfigError, match="--edge-url and --edge-model are required"):
        ProxyConfig.from_args(parser.parse_args(["--bundle", "b"]), environ={})
    good = json.loads(open(path).read())

    def refused(edit, message, environ=None):
        bad = json.loads(json.dumps(good))
        edit(bad["endpoints"][1])
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=message):
            load_endpoints_file(
                str(tmp_path / "bad.json"), environ={"FRONTIER_KEY": "k"} if environ is None else environ
            )

    refused(lambda e: e.pop("base_url"), r"endpoints\[1\] \('onprem-8b'\) needs base_url and model")
    refused(lambda e: e.update(retries=3), r"endpoints\[1\] \('onprem-8b'\): unknown key 'retries'")
    refused(lambda e: e.update(context_tokens=0), r"endpoints\[1\] \('onprem-8b'\).context_tokens must be > 0")
    refused(lambda e: e.update(timeout_s=-1), r"endpoints\[1\] \('onprem-8b'\): timeout_s=-1: must be a positive")
    refused(lambda e: e.update(params={"model": "x"}), "params must not set 'model'")
    refused(lambda e: e.update(api_key="sk-in-a-file"), "a key never goes in a file")
    refused(lambda e: e.update(upstream={"url": "http://h/v1", "model": "m"}), "both in the entry and in 'upstream'")

    def earlier_spelling_with_an_unknown_key(entry):
        for key in ("base_url", "model", "timeout_s", "first_token_timeout_s"):
            entry.pop(key)
        entry["upstream"] = {"url": "http://h/v1", "model": "m", "retries": 3}

    refused(earlier_spelling_with_an_unknown_key, r"endpoints\[1\].upstream: unknown key 'retries'")


def test_the_endpoints_files_params_are_sent_with_every_request_the_request_under_them(router, upstreams, tmp_path):
    """params in the --endpoints file reach the upstream on every request, the proxy's client's own
    parameters under them; the model is always the endpoint's."""
    params = {"onprem-8b": {"params": {"reasoning_effort": "high", "max_tokens": 512}}}
    loaded = load_endpoints_file(endpoints_file(tmp_path, upstreams, **params), environ={"FRONTIER_KEY": FRONTIER_KEY})
    assert loaded["onprem-8b"].params == {"reasoning_effort": "high", "max_tokens": 512}
    upstreams["phone-3b"].behaviour = Behaviour(status=500)
    with running_proxy(router, ProxyConfig(bundle="(test)", token=TOKEN, endpoints=loaded)) as client:
        answer = client.post(
            "/v1/chat/completions",
            json={"model": "router", "messages": ASK, "max_tokens": 64, "temperature": 0.2},
        )
        streamed = client.post("/v1/chat/completions", json={"messages": ASK, "stream": True})
    assert answer.status_code == 200 and answer.headers["x-router-served-by"] == "onprem-8b"
    assert streamed.status_code == 200 and streamed.headers["x-router-served-by"] == "onprem-8b"
    sent = [r.body for r in upstreams["onprem-8b"].received]
    assert sent[0] == {
        "max_tokens": 512,  # the endpoint's own wins over the request's 64
        "temperature": 0.2,
        "reasoning_effort": "high",
        "model": "onprem-8b-model",
        "messages": ASK,
    }
    assert sent[1]["reasoning_effort"] == "high" and sent[1]["stream"] is True and sent[1]["model"] == "onprem-8b-model"
    assert "reasoning_effort" not in upstreams["phone-3b"].received[0].body  # another endpoint's params stay its own


def test_the_proxy_will_not_start_with_upstreams_the_bundle_does_not_route_to(tmp_path, upstreams):
    """A two-endpoint bundle (here the rule table: no bundle) needs upstreams named edge and cloud:
    three named endpoints stop the command with exit code 1 before it serves."""
    path = endpoints_file(tmp_path, upstreams)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "serving",
            "serve",
            "--bundle",
            str(tmp_path / "none"),
            "--endpoints",
            path,
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FRONTIER_KEY": FRONTIER_KEY},
    )
    assert done.returncode == 1, done.stderr
    assert "cannot start: the bundle routes between edge and cloud, and the upstreams are phone-3b" in done.stderr
    assert FRONTIER_KEY not in done.stderr
    assert all(stub.received == [] for stub in upstreams.values())
