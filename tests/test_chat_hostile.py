"""Hostile peers of the routed chat client and the proxy, all real servers and sockets on 127.0.0.1:
upstreams that put the caller's key into what they send back (plainly, JSON-escaped, in a header,
in an error event, in an answer, at the cut of a long error body), upstreams that answer a byte at a
time, clients whose request headers or bodies crawl, and requests holding numbers JSON does not
have."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import signal
import socket
import threading
import time

import httpx2
import pytest

from serving import CloudCallError
from serving import _cli as cli
from serving.chat import Endpoint, RoutedChat
from serving.chat._errors import MIN_SECRET_CHARS, SlowFirstToken, StreamInterrupted, UpstreamTimeout
from serving.chat._upstream import MAX_ERROR_BODY_BYTES
from tests.chat_stubs import ASK, CLOUD_KEY, EDGE_KEY, LONG, EchoingUpstream, fresh_stubs, router, stubs  # noqa: F401
from tests.dripping import DrippingServer, elapsed
from tests.test_proxy import TOKEN, client, config_for, running_proxy, start_serving

pytestmark = pytest.mark.real_data  # routing is the session's trained test bundle

SSE = {"content-type": "text/event-stream"}


def readings(text: str) -> list[str]:
    """`text` and every JSON value in it (a body, SSE data, the routing comment) as a reader sees it
    once decoded, so that a JSON-escaped key counts as the key."""
    found = [text, text.replace("\x00", "")]  # NULs between the letters (UTF-16 read as UTF-8) hide nothing
    for part in [text, *re.split(r"\n\n", text)]:
        part = re.sub(r"^(data: |: routing )", "", part.strip())
        with contextlib.suppress(ValueError):
            found.append(json.dumps(json.loads(part), ensure_ascii=False))
    return found


def leaks(key: str, *texts: str) -> list[str]:
    """The readings of `texts` that hold `key` (or any part of it MIN_SECRET_CHARS * 2 long)."""
    parts = {key[i : i + 2 * MIN_SECRET_CHARS] for i in range(len(key) - 2 * MIN_SECRET_CHARS + 1)}
    return [r for text in texts for r in readings(text) if any(p.lower() in r.lower() for p in parts)]


def completion_json(content: str) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-hostile",
            "object": "chat.completion",
            "model": "cloud-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "CONTENT"}, "finish_reason": "stop"}],
        }
    ).replace("CONTENT", content)


def chunk_event(content: str, finish: str | None = None) -> str:
    chunk = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "model": "cloud-model",
        "choices": [{"index": 0, "delta": {"content": "CONTENT"} if content else {}, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk).replace('CONTENT', content)}\n\n"


def chunk_events(content: str) -> str:
    return chunk_event(content) + chunk_event("", "stop") + "data: [DONE]\n\n"


def edge_options(url: str) -> Endpoint:
    """A hostile edge with its own key; it answers at once, so its timeouts can be generous."""
    return Endpoint(url, "edge-model", api_key=EDGE_KEY, timeout_s=10, first_token_timeout_s=10)


# Secrets: the routed chat client.
ERROR_BODIES = {  # what a cloud answering 401 sends back, in which encoding
    "json_escaped_message": ('{"error": {"message": "invalid key {key_escaped}"}}', "utf-8"),
    "json_escaped_in_an_object": ('{"error": {"code": "bad_key", "param": "{key_escaped}"}}', "utf-8"),
    "json_escaped_in_a_list": ('{"detail": ["invalid key", "{key_escaped}"]}', "utf-8"),
    "utf16_text": ("invalid key {key}", "utf-16-le"),
    "cut_through_the_key": (" " * (MAX_ERROR_BODY_BYTES - 12) + "{key}", "utf-8"),  # the 16 KiB read ends in the key
}


@pytest.mark.parametrize("body", list(ERROR_BODIES))
def test_a_cloud_error_that_echoes_the_key_in_any_form_never_shows_it(router, stubs, body):
    edge, _ = stubs
    edge.behaviour.status = 503
    text, encoding = ERROR_BODIES[body]
    with (
        EchoingUpstream(401, text, encoding=encoding) as cloud,
        RoutedChat(
            router, edge=Endpoint(edge.url, "edge-model"), cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY)
        ) as chat,
    ):
        with pytest.raises(CloudCallError) as caught:
            chat.create(ASK)
    error = caught.value
    assert "HTTP 401" in str(error) and "HTTP 503" in str(error)
    assert not leaks(CLOUD_KEY, str(error), repr(error), error.__cause__.detail, repr(error.steps))
    if body != "cut_through_the_key":
        assert "[redacted]" in error.__cause__.detail


@pytest.mark.parametrize("form", ["{key}", "{key_escaped}"])
def test_an_edge_stream_whose_first_event_is_an_error_echoing_the_key(router, stubs, form):
    _, cloud = stubs
    event = 'data: {"error": {"message": "invalid key FORM", "type": "auth"}}\n\n'.replace("FORM", form)
    with (
        EchoingUpstream(200, event, SSE) as edge,
        RoutedChat(router, edge=edge_options(edge.url), cloud=Endpoint(cloud.url, "cloud-model")) as chat,
    ):
        with chat.create(ASK, stream=True) as stream:
            assert (
                "".join(c["choices"][0]["delta"].get("content") or "" for c in stream if c["choices"])
                == "answer from cloud"
            )
    routing = stream.routing
    assert routing.fallback_kind == "malformed" and "invalid key [redacted]" in routing.fallback_reason
    assert not leaks(EDGE_KEY, json.dumps(routing.to_dict()), repr(routing))


def test_a_content_type_carrying_the_key_is_not_quoted(router, stubs):
    _, cloud = stubs  # the header is shown lowercased: redacting after that would miss the key
    with (
        EchoingUpstream(200, "{}", {"content-type": "Text/Plain-{key}"}) as edge,
        RoutedChat(router, edge=edge_options(edge.url), cloud=Endpoint(cloud.url, "cloud-model")) as chat,
    ):
        with chat.create(ASK, stream=True) as stream:
            list(stream)
    assert stream.routing.fallback_kind == "malformed" and "[redacted]" in stream.routing.fallback_reason
    assert not leaks(EDGE_KEY, json.dumps(stream.routing.to_dict()))


@pytest.mark.parametrize("form", ["{key}", "{key_escaped}"])
def test_an_answer_that_echoes_the_key_reaches_the_caller_redacted(router, stubs, form):
    edge, _ = stubs
    content = f"your key is {form}"
    with (
        EchoingUpstream(200, completion_json(content)) as cloud,
        RoutedChat(
            router, edge=Endpoint(edge.url, "edge-model"), cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY)
        ) as chat,
    ):
        completion = chat.create(LONG)
    assert completion.text == "your key is [redacted]" and completion.routing.served_by == "cloud"
    assert not leaks(CLOUD_KEY, json.dumps(completion.body), completion.text)
    with (
        EchoingUpstream(200, chunk_events(content), SSE) as cloud,
        RoutedChat(
            router, edge=Endpoint(edge.url, "edge-model"), cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY)
        ) as chat,
    ):
        with chat.create(LONG, stream=True) as stream:
            chunks = list(stream)
    assert chunks[0]["choices"][0]["delta"]["content"] == "your key is [redacted]"
    assert not leaks(CLOUD_KEY, json.dumps(chunks))


# Secrets: the proxy.
def test_the_proxy_carries_no_key_in_its_routing_comment_answers_or_logs(router, stubs, caplog):
    _, stub_cloud = stubs
    error_event = 'data: {"error": {"message": "invalid key {key_escaped}"}}\n\n'
    texts = []

    def call(url: str, messages, stream: bool) -> str:
        with httpx2.stream(
            "POST",
            f"{url}/v1/chat/completions",
            headers={"authorization": f"Bearer {TOKEN}"},
            json={"messages": messages, "stream": stream},
        ) as response:
            text = response.read().decode()
        texts.append(str(response.headers) + text)
        return text

    with caplog.at_level(logging.DEBUG), EchoingUpstream(200, error_event, SSE) as edge:
        with running_proxy(router, config_for(stubs, edge=edge_options(edge.url))) as url:
            text = call(url, ASK, True)  # the edge's first event is the error: the cloud streams
        comment = json.loads(re.search(r"^: routing (.*)$", text, re.M).group(1))
        assert comment["served_by"] == "cloud" and "[redacted]" in comment["fallback_reason"]
        for body, headers, stream in (
            (completion_json("key {key_escaped}"), None, False),
            (chunk_events("key {key_escaped}"), SSE, True),
        ):
            with (
                EchoingUpstream(200, body, headers) as cloud,
                running_proxy(
                    router,
                    config_for(
                        stubs,
                        edge=edge_options(edge.url),
                        cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY),
                    ),
                ) as url,
            ):
                assert "key [redacted]" in "".join(readings(call(url, LONG, stream)))
    assert stub_cloud.received[-1].body["stream"] is True
    assert not leaks(EDGE_KEY, *texts, caplog.text) and not leaks(CLOUD_KEY, *texts, caplog.text)


# Deadlines: slow upstreams.
def chat_with_cloud(router, stubs, cloud_url: str) -> RoutedChat:
    """A chat client whose cloud (LONG goes there first) is at `cloud_url`, with timeout_s=2."""
    return RoutedChat(
        router, edge=Endpoint(stubs[0].url, "edge-model"), cloud=Endpoint(cloud_url, "cloud-model", timeout_s=2)
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("drip", ["headers", "body"])
def test_a_non_streamed_answer_is_complete_within_timeout_s_however_slowly_it_comes(router, stubs, drip, mode):
    """A cloud that sends a byte every 0.3 s never lets a read wait long: timeout_s=2 ends the call
    at 2 s whether its headers or its body crawl (the sync call used to wait for the headers as long
    as they came: about 30 s here, then checked the deadline on the body's first bytes)."""
    answer = completion_json("an answer sent a byte at a time").encode()
    with DrippingServer(answer, drip=drip, interval_s=0.3) as cloud, chat_with_cloud(router, stubs, cloud.url) as chat:
        create = chat.create if mode == "sync" else (lambda messages: asyncio_run(chat.acreate(messages)))
        took, outcome = elapsed(create, LONG)
    assert isinstance(outcome, CloudCallError) and isinstance(outcome.__cause__, UpstreamTimeout), outcome
    assert "no complete answer from cloud-model within 2 s" in str(outcome)
    assert took < 6


def read_stream(chat: RoutedChat, mode: str, received: list[str]) -> None:
    """Read a stream of LONG to its end, keeping each chunk's content in `received`."""

    def keep(chunk: dict) -> None:
        received.extend(choice["delta"].get("content") or "" for choice in chunk["choices"])

    if mode == "sync":
        with chat.create(LONG, stream=True) as stream:
            for chunk in stream:
                keep(chunk)
        return

    async def run() -> None:
        try:
            async with await chat.acreate(LONG, stream=True) as stream:
                async for chunk in stream:
                    keep(chunk)
        finally:
            await chat.aclose()

    asyncio_run(run())


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("drip", ["headers", "body"])
def test_a_stream_is_complete_within_timeout_s_however_slowly_it_comes(router, stubs, drip, mode):
    """A stream whose headers crawl has no first token in time (SlowFirstToken); one whose first
    token comes at once and the rest a byte every 0.3 s is cut at timeout_s=2 with StreamInterrupted
    (every read used to get a byte in time, and the stream went on for its whole 145 s)."""
    first = chunk_event("the first token")
    rest = chunk_event("then a crawl, " * 10) + chunk_event("", "stop") + "data: [DONE]\n\n"
    received: list[str] = []
    with (
        DrippingServer(
            (first + rest).encode(), drip=drip, interval_s=0.3, content_type="text/event-stream", at_once=len(first)
        ) as cloud,
        chat_with_cloud(router, stubs, cloud.url) as chat,
    ):
        took, outcome = elapsed(read_stream, chat, mode, received)
    if drip == "headers":
        assert isinstance(outcome, CloudCallError) and isinstance(outcome.__cause__, SlowFirstToken), outcome
        assert received == []
    else:
        assert isinstance(outcome, StreamInterrupted), outcome
        assert "no complete answer from cloud-model within 2 s" in str(outcome)
        assert received == ["the first token"]
    assert took < 6


# Request validation.
NOT_JSON_NUMBERS = {  # body -> where the message must say the number is
    b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}': "temperature",
    b'{"messages": [{"role": "user", "content": "hi", "weight": Infinity}]}': "messages[0].weight",
    b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"x": -Infinity}]}': "tools[0].x",
    b'{"messages": [{"role": "user", "content": "hi"}], "top_p": 1e999}': "top_p",  # too large for a double
}


def test_the_proxy_refuses_numbers_json_does_not_have(proxy_url, stubs):
    for body, where in NOT_JSON_NUMBERS.items():
        response = httpx2.post(
            f"{proxy_url}/v1/chat/completions",
            content=body,
            headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
        )
        message = response.json()["error"]["message"]
        assert response.status_code == 400 and where in message and "JSON" in message, (body, message)
    assert stubs[0].received == [] and stubs[1].received == []  # nothing went upstream


@pytest.fixture(scope="module")
def proxy_url(router, stubs):
    with running_proxy(router, config_for(stubs)) as url:
        yield url


def test_the_chat_client_refuses_numbers_json_does_not_have(router, stubs):
    with RoutedChat(router, edge=Endpoint(stubs[0].url, "e"), cloud=Endpoint(stubs[1].url, "c")) as chat:
        with pytest.raises(ValueError, match=r"temperature .*JSON"):
            chat.create(ASK, temperature=math.nan)
        with pytest.raises(ValueError, match=r"messages\[0\]\.weight .*JSON"):
            chat.create([{"role": "user", "content": "hi", "weight": math.inf}])
        with pytest.raises(ValueError, match=r"response_format\.schema\[1\] .*JSON"):
            asyncio_run(chat.acreate(ASK, response_format={"schema": [1, -math.inf]}))
    assert stubs[0].received == [] and stubs[1].received == []


def asyncio_run(coroutine):
    import asyncio

    return asyncio.run(coroutine)


@pytest.mark.parametrize(
    "body, param",
    [
        ({"messages": ASK, "stream": True, "stream_options": "x"}, "stream_options"),
        ({"messages": ASK, "stream_options": ["include_usage"]}, "stream_options"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [5]}, "messages"),
        ({"messages": ASK, "stream": "yes"}, "stream"),
    ],
)
def test_the_stub_answers_a_bad_request_with_400_like_a_real_server(stubs, body, param):
    edge, _ = stubs
    response = httpx2.post(f"{edge.url}/chat/completions", json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
    nan = httpx2.post(f"{edge.url}/chat/completions", content=b'{"messages": [], "temperature": NaN}')
    assert nan.status_code == 400 and "JSON" in nan.json()["error"]["message"]
    ok = httpx2.post(f"{edge.url}/chat/completions", json={"messages": ASK, "stream_options": None})
    assert ok.status_code == 200


# Deadlines: slow request bodies.
def slow_body(port: int, declared: int = 1000) -> socket.socket:
    """A raw connection that sends a request's headers and the first byte of its body, then stalls."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(declared).encode() + b"\r\n\r\n{"
    )
    return sock


def response_of(sock: socket.socket) -> tuple[int, str]:
    """(status, body) of the response on a raw connection the server closes after answering."""
    data = b""
    with sock:
        while True:
            try:
                part = sock.recv(65536)
            except ConnectionResetError:  # a close with bytes of the body still unread: the answer came first
                break
            if not part:
                break
            data += part
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode()


def one_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of the next response on a raw connection that may stay open (the body
    by its Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(65536)
        assert part, f"the connection closed before a response: {data!r}"
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    while len(body) < int(headers.get("content-length", 0)):
        part = sock.recv(65536)
        assert part, "the connection closed in the middle of a response"
        body += part
    return int(status_line.split(" ", 2)[1]), headers, body


def closed_by_the_server(sock: socket.socket) -> None:
    """Return once the server has closed the connection (whatever else it sends is dropped); the
    socket's timeout (10 s) raises if it does not."""
    with sock:
        try:
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            pass


@contextlib.contextmanager
def dripping(sock: socket.socket, byte: bytes = b" ", interval_s: float = 0.25):
    """Send `byte` on `sock` every `interval_s` while the block runs (until the connection fails)."""
    stop = threading.Event()

    def drip():
        while not stop.wait(interval_s):
            try:
                sock.send(byte)
            except OSError:
                return

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def serving_process(bundle, stubs, *options: str):
    """`python -m serving serve` on an ephemeral port of 127.0.0.1: yields (base URL, port, pid)."""
    process, port, _ = start_serving(bundle, stubs, "--no-access-log", *options)
    try:
        threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe from filling
        yield f"http://127.0.0.1:{port}", port, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()


def test_slow_request_bodies_do_not_hold_the_slots(bundle, stubs):
    """8 connections that send headers and one byte of body, against --max-concurrency 8: every other
    client is still served, and each slow one gets 408 at the body deadline (2 s)."""
    with serving_process(bundle, stubs, "--max-concurrency", "8", "--body-timeout-s", "2") as (url, port, _):
        slow = [slow_body(port) for _ in range(8)]
        started = time.perf_counter()
        time.sleep(0.5)  # all eight are in, waiting for the rest of their bodies
        answer = client(url).chat.completions.create(model="router", messages=ASK)
        assert answer.choices[0].message.content == "answer from edge"
        answers = [response_of(sock) for sock in slow]
        elapsed = time.perf_counter() - started
    assert all(status == 408 and "request body" in body for status, body in answers), answers
    assert elapsed < 6  # the 2 s deadline, generously


def test_a_dripping_body_gets_408_at_the_deadline_not_per_read(router, stubs):
    """A body that arrives a byte every 0.25 s never lets a read wait long: only a deadline on the
    whole body ends it."""
    with running_proxy(router, config_for(stubs, body_timeout_s=2.0)) as url:
        sock = slow_body(int(url.rsplit(":", 1)[1]))
        started = time.perf_counter()
        with dripping(sock):
            status, body = response_of(sock)
        elapsed = time.perf_counter() - started
        assert httpx2.get(f"{url}/health").status_code == 200
    assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
    assert elapsed < 6
    assert stubs[0].received == [] and stubs[1].received == []


@pytest.mark.parametrize(
    "option, value, name",
    [
        ("--body-timeout-s", "0", "body_timeout_s"),
        ("--header-timeout-s", "-1", "header_timeout_s"),
        ("--max-body-reads", "0", "max_body_reads"),
    ],
)
def test_the_request_limits_must_be_positive(capsys, option, value, name):
    with pytest.raises(SystemExit) as caught:
        cli.main(
            [
                "serve",
                "--bundle",
                "unused",
                "--edge-url",
                "http://127.0.0.1:9/v1",
                "--edge-model",
                "e",
                "--cloud-url",
                "http://127.0.0.1:9/v1",
                "--cloud-model",
                "c",
                option,
                value,
            ]
        )
    assert caught.value.code == 2 and name in capsys.readouterr().err


# Deadlines: slow request headers, bodies nobody reads, and how many bodies are read at once.
REQUEST_LINE = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def raw_connection(port: int, sent: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(sent)
    return sock


def test_request_headers_that_crawl_or_never_end_get_408_at_the_deadline(bundle, stubs):
    """uvicorn reads a request's headers with no deadline, and its keep-alive timer stops at a
    request's first byte: a connection that sends nothing, one that sends half its headers and
    stalls, one that drips them a byte every 0.25 s, and one that does that after a first request
    on the same connection each held a socket for ever. With --header-timeout-s 2 each gets 408
    and is closed, and the proxy serves on."""
    with serving_process(bundle, stubs, "--header-timeout-s", "2") as (url, port, _):
        started = time.perf_counter()
        silent, stalled, crawling = (
            raw_connection(port),
            raw_connection(port, REQUEST_LINE),
            raw_connection(port, REQUEST_LINE),
        )
        kept = raw_connection(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert one_response(kept)[0] == 200
        kept.sendall(REQUEST_LINE)
        with dripping(crawling, b"x"), dripping(kept, b"x"):
            answers = [response_of(sock) for sock in (silent, stalled, crawling, kept)]
        took = time.perf_counter() - started
        assert (
            client(url).chat.completions.create(model="router", messages=ASK).choices[0].message.content
            == "answer from edge"
        )
    assert [status for status, _ in answers] == [408] * 4, answers
    assert all(json.loads(body)["error"]["code"] == "request_timeout" for _, body in answers)
    assert took < 6


def test_a_body_the_proxy_does_not_read_cannot_hold_the_connection(bundle, stubs):
    """A request answered without its body being read (no token: 401; /health) gets its answer at
    once; the rest of the body must then arrive within --body-timeout-s, or the connection is
    closed. Each byte of it used to put uvicorn's keep-alive timer off, so a client dripping it
    held the connection for as long as it liked."""
    declared = b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    with serving_process(bundle, stubs, "--body-timeout-s", "2") as (url, port, _):
        unauthorized = raw_connection(port, REQUEST_LINE + declared)
        health = raw_connection(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + declared)
        statuses = [one_response(sock)[0] for sock in (unauthorized, health)]
        started = time.perf_counter()
        with dripping(unauthorized), dripping(health):
            closed_by_the_server(unauthorized)
            closed_by_the_server(health)
        took = time.perf_counter() - started
    assert statuses == [401, 200]
    assert took < 6


def test_the_bodies_read_at_once_are_bounded(bundle, stubs):
    """A body being read holds up to --max-body-bytes; --max-body-reads (2 here) bounds how many are
    read at once, so a thousand slow senders cannot make the proxy hold a thousand bodies. A
    request past the limit waits up to --queue-timeout-s for its turn, then gets 503 with
    Retry-After; the bodies being read still end with 408 at their deadline, and then the proxy
    serves again."""
    with serving_process(
        bundle, stubs, "--max-body-reads", "2", "--queue-timeout-s", "0.2", "--body-timeout-s", "3"
    ) as (url, port, _):
        reading = [slow_body(port) for _ in range(2)]
        time.sleep(0.5)  # both are being read
        turned_away = [slow_body(port) for _ in range(3)]
        refusals = [one_response(sock) for sock in turned_away]
        timed_out = [response_of(sock) for sock in reading]
        answer = client(url).chat.completions.create(model="router", messages=ASK)
        for sock in turned_away:
            sock.close()
    assert [(status, headers.get("retry-after")) for status, headers, _ in refusals] == [(503, "1")] * 3
    assert all("request bodies" in json.loads(body)["error"]["message"] for _, _, body in refusals)
    assert [status for status, _ in timed_out] == [408, 408]
    assert answer.choices[0].message.content == "answer from edge"
