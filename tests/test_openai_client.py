"""The routed chat client against real HTTP stub servers on 127.0.0.1: who answers, every fallback
path (HTTP 5xx, malformed JSON, timeout, slow first token, refused connection), streams, the async
client, costs, and the cloud key kept out of every error."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time

import pytest

from serving import CloudCallError
from serving.chat import (
    Endpoint,
    RoutedChat,
    StreamInterrupted,
    UpstreamHTTPError,
    UpstreamUnreachable,
    conversation_prompt,
)
from serving.testing import dead_url
from tests.chat_stubs import ASK, CLOUD_KEY, LONG, fresh_stubs, router, stubs  # noqa: F401  (fixtures)

pytestmark = pytest.mark.real_data  # routing is the session's trained test bundle


def endpoints(stubs, *, edge_url=None):
    edge, cloud = stubs
    return dict(
        edge=Endpoint(
            edge_url or edge.url,
            "edge-model",
            timeout_s=0.6,
            first_token_timeout_s=0.3,
            input_price_per_1m=0.0,
            output_price_per_1m=0.0,
        ),
        cloud=Endpoint(
            cloud.url, "cloud-model", api_key=CLOUD_KEY, timeout_s=5, input_price_per_1m=1.0, output_price_per_1m=2.0
        ),
    )


@pytest.fixture
def chat(router, stubs):
    with RoutedChat(router, **endpoints(stubs)) as client:
        yield client


def create(chat, mode: str, messages, **kwargs):
    """chat.create, or chat.acreate run to completion, by `mode`."""
    if mode == "sync":
        return chat.create(messages, **kwargs)

    async def run():
        try:
            return await chat.acreate(messages, **kwargs)
        finally:
            await chat.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_edge_first_conversation_is_answered_by_the_edge(chat, stubs, mode):
    edge, cloud = stubs
    messages = [{"role": "system", "content": "Be brief."}, *ASK]
    completion = create(chat, mode, messages, temperature=0.2, max_tokens=20)
    assert completion.text == "answer from edge" and completion.body["id"].startswith("chatcmpl-edge")
    routing = completion.routing
    assert (routing.served_by, routing.model, routing.fallback_reason, routing.fallback_kind) == (
        "edge",
        "edge-model",
        None,
        None,
    )
    assert routing.decision.target == "edge" and [(s.name, s.status) for s in routing.steps] == [("edge", "ok")]
    assert routing.estimated_cost == 0.0 and routing.seconds > 0
    sent = edge.received[-1]
    assert sent.body == {"model": "edge-model", "messages": messages, "temperature": 0.2, "max_tokens": 20}
    assert "authorization" not in sent.headers  # the edge has no key; the cloud's is never sent there
    assert cloud.received == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_cloud_first_conversation_goes_to_the_cloud_only(chat, stubs, mode):
    edge, cloud = stubs
    completion = create(chat, mode, LONG)
    assert completion.text == "answer from cloud" and completion.routing.served_by == "cloud"
    assert completion.routing.decision.zone == "cloud" and completion.routing.fallback_reason is None
    assert edge.received == [] and cloud.received[-1].headers["authorization"] == f"Bearer {CLOUD_KEY}"
    usage = completion.body["usage"]
    assert completion.routing.estimated_cost == pytest.approx(
        (usage["prompt_tokens"] + 2 * usage["completion_tokens"]) / 1e6
    )


FAILURES = {  # how the edge fails -> (fallback kind, edge step status, text in the reason)
    "http_5xx": ({"status": 503}, "http_error", "error", "answered HTTP 503: stub failure"),
    "malformed_json": ({"malformed": True}, "malformed", "error", "not valid JSON"),
    "timeout": ({"delay_s": 2.0}, "timeout", "timeout", "no complete answer from edge-model within 0.6 s"),
}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("failure", list(FAILURES))
def test_an_edge_failure_falls_back_to_the_cloud(chat, stubs, mode, failure):
    edge, cloud = stubs
    knobs, kind, status, text = FAILURES[failure]
    for name, value in knobs.items():
        setattr(edge.behaviour, name, value)
    start = time.perf_counter()
    completion = create(chat, mode, ASK)
    assert time.perf_counter() - start < 1.8  # a slow edge costs its timeout (0.6 s), not its 2 s
    routing = completion.routing
    assert completion.text == "answer from cloud" and routing.served_by == "cloud" and routing.model == "cloud-model"
    assert routing.fallback_kind == kind and text in routing.fallback_reason
    assert [(s.name, s.status) for s in routing.steps] == [("edge", status), ("cloud", "ok")]
    assert len(edge.received) == 1 and len(cloud.received) == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_refused_connection_falls_back_to_the_cloud(router, stubs, mode):
    with RoutedChat(router, **endpoints(stubs, edge_url=dead_url())) as chat:
        completion = create(chat, mode, ASK)
    assert completion.text == "answer from cloud" and completion.routing.fallback_kind == "connection_error"
    assert "connection to edge-model failed" in completion.routing.fallback_reason


@pytest.fixture
def checked_chat(router, stubs):
    """A client that applies the accept check to every edge-first answer, whatever its zone."""
    with RoutedChat(router, **endpoints(stubs), verify_edge_zone=True) as client:
        yield client


def test_the_accept_check_reads_the_assistant_text(checked_chat):
    chat, seen = checked_chat, []
    completion = chat.create(ASK, accept=lambda text: seen.append(text) or False)
    assert seen == ["answer from edge"] and isinstance(seen[0], str)
    assert completion.routing.served_by == "cloud" and completion.routing.fallback_kind == "rejected"
    assert [(s.name, s.status) for s in completion.routing.steps] == [
        ("edge", "ok"),
        ("accept", "rejected"),
        ("cloud", "ok"),
    ]
    # The rejected edge answer (price 0) and the cloud's both count in the cost.
    usage = completion.body["usage"]
    assert completion.routing.estimated_cost == pytest.approx(
        (usage["prompt_tokens"] + 2 * usage["completion_tokens"]) / 1e6
    )
    assert chat.create(ASK, accept=lambda text: text.startswith("answer from")).routing.served_by == "edge"

    def broken(text):
        raise RuntimeError("checker down")

    assert chat.create(ASK, accept=broken).routing.fallback_kind == "accept_error"
    assert create(chat, "async", ASK, accept=lambda text: False).routing.fallback_kind == "rejected"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_cost_counts_the_rejected_edge_answer_and_the_cloud_answer(router, stubs, mode):
    """estimated_cost is read from the Execution's steps: the answer each call returned, priced
    at its own endpoint's prices, a rejected edge answer included."""
    options = endpoints(stubs)
    options["edge"] = dataclasses.replace(options["edge"], input_price_per_1m=0.5, output_price_per_1m=0.25)
    with RoutedChat(router, **options, verify_edge_zone=True) as chat:
        completion = create(chat, mode, ASK, accept=lambda text: False)
    edge_step, _, cloud_step = completion.routing.steps
    assert (edge_step.result, edge_step.result.endpoint, cloud_step.result) == (
        "answer from edge",
        "edge",
        completion.text,
    )
    edge_usage, cloud_usage = edge_step.result.body["usage"], completion.body["usage"]
    edge_cost = (edge_usage["prompt_tokens"] * 0.5 + edge_usage["completion_tokens"] * 0.25) / 1e6
    cloud_cost = (cloud_usage["prompt_tokens"] + 2 * cloud_usage["completion_tokens"]) / 1e6
    assert edge_cost > 0 and completion.routing.estimated_cost == pytest.approx(edge_cost + cloud_cost)
    # The answers stay out of what the routing info shows and sends (repr, to_dict: the proxy's JSON).
    shown = repr(completion.routing) + json.dumps(completion.routing.to_dict())
    assert "answer from" not in shown


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_learned_accept_check_runs_on_the_answer_text(checked_chat, router, mode):
    completion = create(checked_chat, mode, ASK, accept="learned")
    steps = [(s.name, s.status) for s in completion.routing.steps]
    if getattr(router, "acceptor", None) is None:  # a bundle without an acceptance model checks nothing
        assert steps == [("edge", "ok")]
    else:
        assert steps[:2] in ([("edge", "ok"), ("accept", "ok")], [("edge", "ok"), ("accept", "rejected")])
        assert completion.routing.served_by == ("edge" if steps[1][1] == "ok" else "cloud")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_cloud_failure_is_raised_with_the_edge_error_attached(chat, stubs, mode):
    edge, cloud = stubs
    edge.behaviour.status, cloud.behaviour.status = 503, 500
    cloud.behaviour.echo_auth_in_errors = True  # the cloud repeats our key in its error body
    with pytest.raises(CloudCallError) as caught:
        create(chat, mode, ASK)
    error = caught.value
    assert isinstance(error.edge_error, UpstreamHTTPError) and error.edge_error.status == 503
    assert isinstance(error.__cause__, UpstreamHTTPError) and error.__cause__.status == 500
    assert "HTTP 500" in str(error) and "HTTP 503" in str(error)
    assert CLOUD_KEY not in str(error) and "[redacted]" in str(error) and CLOUD_KEY not in error.__cause__.detail
    assert error.decision.target == "edge"


def test_a_cloud_first_request_with_the_cloud_unreachable_raises(router, stubs):
    edge, _ = stubs
    with RoutedChat(router, edge=Endpoint(edge.url, "e"), cloud=Endpoint(dead_url(), "c", api_key=CLOUD_KEY)) as chat:
        with pytest.raises(CloudCallError) as caught:
            chat.create(LONG)
    assert caught.value.edge_error is None and isinstance(caught.value.__cause__, UpstreamUnreachable)
    assert edge.received == []


# Streams.
def text_of(chunks) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_a_stream_comes_from_the_edge(chat, stubs):
    with chat.create(ASK, stream=True) as stream:
        assert stream.routing.served_by == "edge" and stream.routing.seconds is None
        chunks = list(stream)
    assert text_of(chunks) == "answer from edge" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert stream.routing.seconds > 0 and stream.routing.estimated_cost is None  # no usage asked for
    assert stubs[0].received[-1].body["stream"] is True


STREAM_FAILURES = {
    "slow_first_token": ({"first_token_delay_s": 2.0}, "slow_first_token", "timeout"),
    "http_5xx": ({"status": 502}, "http_error", "error"),
    "malformed_first_event": ({"malformed": True}, "malformed", "error"),
}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("failure", list(STREAM_FAILURES))
def test_an_edge_stream_falls_back_before_anything_reaches_the_caller(chat, stubs, mode, failure):
    edge, cloud = stubs
    knobs, kind, status = STREAM_FAILURES[failure]
    for name, value in knobs.items():
        setattr(edge.behaviour, name, value)
    start = time.perf_counter()
    if mode == "sync":
        stream = chat.create(ASK, stream=True)
        routing, chunks = stream.routing, list(stream)
    else:

        async def run():
            async with await chat.acreate(ASK, stream=True) as stream:
                return stream.routing, [c async for c in stream]

        routing, chunks = asyncio.run(run())
    assert time.perf_counter() - start < 1.5  # the 0.3 s first-token limit, not the edge's 2 s
    assert text_of(chunks) == "answer from cloud" and routing.served_by == "cloud"
    assert routing.fallback_kind == kind and [(s.name, s.status) for s in routing.steps] == [
        ("edge", status),
        ("cloud", "ok"),
    ]


def test_a_stream_from_a_refused_edge_comes_from_the_cloud(router, stubs):
    with RoutedChat(router, **endpoints(stubs, edge_url=dead_url())) as chat:
        stream = chat.create(ASK, stream=True)
        assert text_of(list(stream)) == "answer from cloud" and stream.routing.fallback_kind == "connection_error"


def test_a_stream_that_breaks_after_its_first_chunk_raises_without_fallback(chat, stubs):
    edge, cloud = stubs
    edge.behaviour.break_after_first_chunk = True
    stream = chat.create(ASK, stream=True)
    got = []
    with pytest.raises(StreamInterrupted, match="broke after its first chunk"):
        for chunk in stream:
            got.append(chunk)
    assert text_of(got) == "answer" and stream.routing.served_by == "edge" and cloud.received == []


def test_an_async_stream_reports_its_cost_when_usage_is_sent(chat, stubs):
    async def run():
        stream = await chat.acreate(LONG, stream=True, stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        await chat.aclose()
        return stream.routing, chunks

    routing, chunks = asyncio.run(run())
    usage = chunks[-1]["usage"]
    assert routing.served_by == "cloud" and text_of(chunks) == "answer from cloud"
    assert routing.estimated_cost == pytest.approx((usage["prompt_tokens"] + 2 * usage["completion_tokens"]) / 1e6)


def test_streams_refuse_an_accept_check(chat):
    with pytest.raises(ValueError, match="accept does not apply to streams"):
        chat.create(ASK, stream=True, accept=lambda text: True)


# The conversation, the arguments, the hook.
def test_the_router_reads_the_latest_user_turn_first_then_newer_turns_then_the_system():
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And a larger one?"},
                {"type": "image_url", "image_url": {"url": "data:,"}},
            ],
        },
    ]
    assert (
        conversation_prompt(messages)
        == "And a larger one?\n\nassistant: 7\n\nuser: Name a prime.\n\nsystem: You are terse."
    )
    assert conversation_prompt(ASK) == "What is 2+2?"  # one turn routes exactly as router.route(text)
    assert conversation_prompt([{"role": "system", "content": "only a system turn"}]) == "only a system turn"
    assert conversation_prompt([*ASK, {"role": "assistant", "content": None, "tool_calls": []}]) == "What is 2+2?"


def test_bad_arguments_are_the_callers(chat):
    for bad in ([], "hello", [{"content": "no role"}], [{"role": "user", "content": 5}], [["user", "hi"]]):
        with pytest.raises(ValueError, match="messages"):
            chat.create(bad)
    with pytest.raises(TypeError, match="model= is not a request parameter"):
        chat.create(ASK, model="gpt")
    with pytest.raises(ValueError, match="precision"):
        chat.create(ASK, precision="fuzzy")
    with pytest.raises(ValueError, match="base_url"):
        Endpoint("http://user:pw@127.0.0.1/v1", "m")
    with pytest.raises(ValueError, match="http"):
        Endpoint("file:///etc/passwd", "m")
    assert CLOUD_KEY not in repr(Endpoint("http://127.0.0.1/v1", "m", api_key=CLOUD_KEY))


def test_on_routed_sees_every_answer_and_never_breaks_the_request(router, stubs, caplog):
    seen = []
    with RoutedChat(router, **endpoints(stubs), on_routed=seen.append) as chat:
        chat.create(ASK)
        list(chat.create(ASK, stream=True))
    assert [r.served_by for r in seen] == ["edge", "edge"] and seen[1].seconds is not None

    def broken(routing):
        raise RuntimeError("log store down")

    with RoutedChat(router, **endpoints(stubs), on_routed=broken) as chat, caplog.at_level(logging.WARNING):
        assert chat.create(ASK).text == "answer from edge"
    assert "on_routed raised" in caplog.text


@pytest.mark.parametrize("mode", ["sync", "async", "stream", "async_stream"])
def test_every_kind_of_request_is_recorded_in_the_routers_outcome_log(bundle, stubs, tmp_path, mode):
    """create(), acreate() and both kinds of stream go through Router.execute/aexecute: each
    leaves one request record with what ran and why it fell back (here the edge returns 502)."""
    from serving import Router
    from serving.monitoring._outcome_log import OutcomeLog
    from serving.testing import Behaviour

    stubs[0].behaviour = Behaviour(status=502)
    log = OutcomeLog(tmp_path / "logs")
    with RoutedChat(Router.load(bundle, strict=True, log=log), **endpoints(stubs)) as chat:
        if mode in ("sync", "async"):
            answer = create(chat, mode, ASK)
            assert answer.text == "answer from cloud"
        elif mode == "stream":
            with chat.create(ASK, stream=True) as stream:
                assert text_of(list(stream)) == "answer from cloud"
        else:

            async def run():
                stream = await chat.acreate(ASK, stream=True)
                async with stream:
                    chunks = [chunk async for chunk in stream]
                await chat.aclose()
                return chunks

            assert text_of(asyncio.run(run())) == "answer from cloud"
    log.close()
    (record,) = [json.loads(line) for f in (tmp_path / "logs").glob("*.jsonl") for line in f.read_text().splitlines()]
    assert (record["type"], record["prompt"], record["target"], record["served_by"]) == (
        "request",
        "What is 2+2?",
        "edge",
        "cloud",
    )
    assert record["fallback_reason"].startswith("left edge=") and record["edge_quality"] == 0.0
    assert [s["name"] for s in record["steps"]] == ["edge", "cloud"] and record["propensity"] == 1.0
    assert record["cloud_response"] == ("answer from cloud" if mode in ("sync", "async") else None)


def test_the_readme_example_runs_against_two_local_servers(bundle, stubs, monkeypatch):
    """README's routed-client example as written, with its two URLs pointed at the stubs."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    (example,) = [block for block in re.findall(r"```python\n(.*?)```", readme, re.S) if "RoutedChat(" in block]
    edge, cloud = stubs
    example = example.replace("http://127.0.0.1:11434/v1", edge.url).replace("https://api.example.com/v1", cloud.url)
    example = example.replace('Router.load("artifacts/router")', f"Router.load({str(bundle)!r})")
    monkeypatch.setenv("CLOUD_KEY", CLOUD_KEY)
    printed = []
    exec(compile(example, "README.md", "exec"), {"print": lambda *args: printed.append(args)})
    ((text, served_by, reason),) = printed
    assert text == f"answer from {served_by}" and served_by in ("edge", "cloud")
    assert reason is None  # both answered: nothing to fall back from
    assert len(example.strip().splitlines()) <= 10
