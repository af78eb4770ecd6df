"""Hostile answers the routed chat client and the proxy process must survive, against real servers
on 127.0.0.1: a usage count of 400 digits (valid JSON) never loses the served answer nor cuts a
stream (its cost is unknown, with a warning); a key the upstream spells out over two stream chunks
is redacted whole in the caller's joined text; and an upstream's `model` field (which may echo the
prompt) reaches a span only when it names the endpoint's declared model."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import httpx2
import pytest

from serving.chat import Endpoint, RoutedChat
from serving.chat._errors import StreamInterrupted
from tests.chat_stubs import ASK, CLOUD_KEY, LONG, EchoingUpstream, fresh_stubs, router, stubs  # noqa: F401
from tests.test_chat_hostile import SSE, leaks, serving_process
from tests.test_proxy import TOKEN, config_for, running_proxy
from tests.test_telemetry import CANARY, CANARY_MESSAGES, assert_nothing_private, one_request, otel  # noqa: F401

pytestmark = pytest.mark.real_data  # routing is the session's trained test bundle

HUGE = "9" * 400  # a token count no answer has: float(HUGE) overflows
PRICES = {"input_price_per_1m": 2.0, "output_price_per_1m": 8.0}


def completion(content: str = "answer from cloud", *, usage: str | None = None, model: str = "cloud-model") -> str:
    body = {
        "id": "chatcmpl-hardening",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": "USAGE",
    }
    usage = usage or '{"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}'
    return json.dumps(body).replace('"USAGE"', usage)


def event(delta: dict, finish: str | None = None, *, model: str = "cloud-model") -> str:
    chunk = {
        "id": "chatcmpl-hardening",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n"


def stream_events(*pieces: str, usage: str | None = None) -> str:
    events = event({"role": "assistant", "content": ""}) + "".join(event({"content": p}) for p in pieces)
    events += event({}, "stop")
    if usage is not None:
        events += f'data: {{"id": "chatcmpl-hardening", "object": "chat.completion.chunk", "choices": [], "usage": {usage}}}\n\n'
    return events + "data: [DONE]\n\n"


HUGE_USAGE = f'{{"prompt_tokens": {HUGE}, "completion_tokens": 3}}'


def chat_with(router, stubs, cloud_url: str) -> RoutedChat:
    """A chat client whose cloud (LONG goes there first) is at `cloud_url`, priced, with its key."""
    return RoutedChat(
        router,
        edge=Endpoint(stubs[0].url, "edge-model"),
        cloud=Endpoint(cloud_url, "cloud-model", api_key=CLOUD_KEY, timeout_s=5, **PRICES),
    )


def text_of(chunks) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


# A usage count of 400 digits.
def test_create_and_acreate_keep_the_answer_when_the_usage_is_no_count(router, stubs, caplog):
    """Today Endpoint.cost raised OverflowError (float of a 400-digit int) and create() lost the answer."""
    with EchoingUpstream(200, completion(usage=HUGE_USAGE)) as cloud, chat_with(router, stubs, cloud.url) as chat:
        with caplog.at_level(logging.WARNING, logger="serving.chat"):
            answer = chat.create(LONG)
        assert (answer.text, answer.routing.served_by, answer.routing.estimated_cost) == (
            "answer from cloud",
            "cloud",
            None,
        )
        assert "holds no token counts: its cost is unknown" in caplog.text
        answer = asyncio.run(chat.acreate(LONG))
        assert answer.text == "answer from cloud" and answer.routing.estimated_cost is None
    with EchoingUpstream(200, completion()) as cloud, chat_with(router, stubs, cloud.url) as chat:
        assert chat.create(LONG).routing.estimated_cost == pytest.approx((5 * 2.0 + 3 * 8.0) / 1e6)  # counts: priced


def test_a_stream_whose_usage_is_no_count_ends_normally(router, stubs):
    """Today the stream's end raised OverflowError into the caller after its last chunk."""
    body = stream_events("answer", " from", " cloud", usage=HUGE_USAGE)
    with EchoingUpstream(200, body, SSE) as cloud, chat_with(router, stubs, cloud.url) as chat:
        with chat.create(LONG, stream=True) as stream:
            assert text_of(list(stream)) == "answer from cloud"
        assert stream.routing.estimated_cost is None and stream.routing.seconds is not None

        async def read() -> tuple[str, object]:
            async with await chat.acreate(LONG, stream=True) as astream:
                return text_of([c async for c in astream]), astream.routing.estimated_cost

        assert asyncio.run(read()) == ("answer from cloud", None)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_proxy_answers_and_ends_its_streams_when_the_usage_is_no_count(bundle, stubs, stream):
    """Today the proxy process answered 500, and cut the stream with neither an error event nor [DONE]."""
    edge, _ = stubs
    body, headers = (stream_events("answer", usage=HUGE_USAGE), SSE) if stream else (completion(usage=HUGE_USAGE), None)
    prices = ("--cloud-price-in", "2", "--cloud-price-out", "8")
    with EchoingUpstream(200, body, headers) as cloud, serving_process(bundle, (edge, cloud), *prices) as (url, _, _):
        response = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"messages": LONG, "stream": stream},
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
    assert response.status_code == 200, response.text
    assert response.headers["x-router-served-by"] == "cloud"
    if stream:
        events = response.text.strip().split("\n\n")
        assert events[-1] == "data: [DONE]" and events[-2].startswith(": routing "), events[-2:]
        assert json.loads(events[-2][len(": routing ") :])["estimated_cost"] is None
    else:
        assert response.json()["choices"][0]["message"]["content"] == "answer from cloud"


def test_a_stream_the_proxy_fails_to_finish_still_ends_with_an_error_event_and_done(router, stubs, monkeypatch):
    """Whatever fails while the proxy relays a stream (here: a fault injected where the stream ends),
    the client reads an error event and [DONE], never a stream cut short."""

    def fault(self, usage):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(Endpoint, "answer_cost", fault)
    with running_proxy(router, config_for(stubs)) as url:
        response = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"messages": LONG, "stream": True},
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        metrics = httpx2.get(f"{url}/metrics", headers={"authorization": f"Bearer {TOKEN}"}).text
    events = response.text.strip().split("\n\n")
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][len("data: ") :])["error"]["code"] == "stream_error"
    assert text_of([json.loads(e[len("data: ") :]) for e in events[:-2]]) == "answer from cloud"
    assert 'router_failed_requests_total{reason="stream_error"} 1.0' in metrics


# A key spelled out over several chunks.
CUT = 13  # where the key is cut in two


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_key_spelled_over_two_chunks_is_redacted_in_the_joined_text(router, stubs, mode):
    """Today each chunk was redacted on its own: the joined text held the whole key."""
    body = stream_events("your key is ", CLOUD_KEY[:CUT], CLOUD_KEY[CUT:], ", keep it")
    with EchoingUpstream(200, body, SSE) as cloud, chat_with(router, stubs, cloud.url) as chat:
        if mode == "sync":
            with chat.create(LONG, stream=True) as stream:
                chunks = list(stream)
        else:

            async def read() -> list:
                async with await chat.acreate(LONG, stream=True) as astream:
                    return [c async for c in astream]

            chunks = asyncio.run(read())
    assert text_of(chunks) == "your key is [redacted], keep it"
    assert not leaks(CLOUD_KEY, text_of(chunks), json.dumps(chunks))


def test_a_stream_that_breaks_gives_what_it_held_back_then_the_break(router, stubs):
    _, cloud = stubs  # its first token ends in the key's beginning; then the connection drops
    cloud.behaviour.reply, cloud.behaviour.break_after_first_chunk = f"cut:{CLOUD_KEY[:CUT]} more", True
    with chat_with(router, stubs, cloud.url) as chat, chat.create(LONG, stream=True) as stream:
        got = []
        with pytest.raises(StreamInterrupted, match="broke after its first chunk"):
            for chunk in stream:
                got.append(chunk)
    assert text_of(got) == "cut:[redacted]"  # the key's beginning, cut short, goes
    assert not leaks(CLOUD_KEY, json.dumps(got))


def test_the_proxy_relays_a_key_spelled_over_two_chunks_redacted(bundle, stubs):
    edge, _ = stubs
    body = stream_events("your key is ", CLOUD_KEY[:CUT], CLOUD_KEY[CUT:], ", keep it")
    with EchoingUpstream(200, body, SSE) as cloud, serving_process(bundle, (edge, cloud)) as (url, _, _):
        response = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"messages": LONG, "stream": True},
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
    events = response.text.strip().split("\n\n")
    chunks = [json.loads(e[len("data: ") :]) for e in events if e.startswith("data: {")]
    assert text_of(chunks) == "your key is [redacted], keep it" and events[-1] == "data: [DONE]"
    assert not leaks(CLOUD_KEY, response.text)


# What gen_ai.response.model may say.
def test_an_upstream_model_field_reaches_spans_only_when_it_names_the_declared_model(router, stubs, otel):
    """Today gen_ai.response.model copied the answer's `model` verbatim (up to 200 characters): an
    upstream that echoes the prompt put prompt text into spans."""
    echoed = f"What is 2+2? {CANARY}"
    for model, exported in (
        (echoed, None),
        ("cloud-model-2024-08-06", "cloud-model-2024-08-06"),
        ("cloud-model", "cloud-model"),
    ):
        otel.exporter.clear()
        with EchoingUpstream(200, completion(model=model)) as cloud, chat_with(router, stubs, cloud.url) as chat:
            chat.create(LONG)
        root, children = one_request(otel.spans())
        (attempt,) = children
        for span in (root, attempt):
            assert dict(span.attributes).get("gen_ai.response.model") == exported, model
    body = stream_events("answer", usage='{"prompt_tokens": 5, "completion_tokens": 3}').replace(
        '"model": "cloud-model"', json.dumps({"model": echoed})[1:-1]
    )
    otel.exporter.clear()
    with EchoingUpstream(200, body, SSE) as cloud, chat_with(router, stubs, cloud.url) as chat:
        with chat.create(LONG, stream=True) as stream:
            list(stream)
    root, (attempt,) = one_request(otel.spans())
    assert "gen_ai.response.model" not in dict(root.attributes) and "gen_ai.response.model" not in dict(
        attempt.attributes
    )
    assert dict(root.attributes)["gen_ai.usage.output_tokens"] == 3
    assert_nothing_private(otel, CLOUD_KEY)
    assert not re.search(r"2\+2|canary", json.dumps([dict(s.attributes) for s in otel.spans()]))


def test_a_usage_count_that_is_no_count_is_not_exported(router, stubs, otel):
    with EchoingUpstream(200, completion(usage=HUGE_USAGE)) as cloud, chat_with(router, stubs, cloud.url) as chat:
        chat.create(LONG)
    root, (attempt,) = one_request(otel.spans())
    for span in (root, attempt):
        assert "gen_ai.usage.input_tokens" not in dict(span.attributes)
        assert dict(span.attributes)["gen_ai.usage.output_tokens"] == 3
