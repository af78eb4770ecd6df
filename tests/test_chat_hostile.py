"""Hostile peers of the routed chat client and the proxy, all real servers and sockets on 127.0.0.1:
upstreams that put the caller's key into what they send back (plainly, JSON-escaped, in a header,
in an error event, in an answer, at the cut of a long error body), clients whose request bodies
crawl, and requests holding numbers JSON does not have."""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx2
import pytest

from serving import CloudCallError, cli
from serving.chat import Endpoint, RoutedChat
from serving.chat.errors import MIN_SECRET_CHARS
from serving.chat.upstream import MAX_ERROR_BODY_BYTES
from serving.proxy.config import UpstreamOptions
from tests.chat_stubs import (ASK, CLOUD_KEY, EDGE_KEY, LONG, EchoingUpstream, fresh_stubs, router,  # noqa: F401
                              stubs)
from tests.conftest import ROOT
from tests.test_proxy import TOKEN, client, config_for, running_proxy

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
    parts = {key[i:i + 2 * MIN_SECRET_CHARS] for i in range(len(key) - 2 * MIN_SECRET_CHARS + 1)}
    return [r for text in texts for r in readings(text) if any(p.lower() in r.lower() for p in parts)]


def completion_json(content: str) -> str:
    return json.dumps({"id": "chatcmpl-hostile", "object": "chat.completion", "model": "cloud-model",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "CONTENT"},
                                    "finish_reason": "stop"}]}).replace("CONTENT", content)


def chunk_events(content: str) -> str:
    chunk = {"id": "chatcmpl-hostile", "object": "chat.completion.chunk", "model": "cloud-model",
             "choices": [{"index": 0, "delta": {"content": "CONTENT"}, "finish_reason": None}]}
    end = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return f"data: {json.dumps(chunk).replace('CONTENT', content)}\n\ndata: {json.dumps(end)}\n\ndata: [DONE]\n\n"


def edge_options(url: str) -> UpstreamOptions:
    """A hostile edge with its own key; it answers at once, so its timeouts can be generous."""
    return UpstreamOptions(url, "edge-model", api_key=EDGE_KEY, timeout_s=10, first_token_timeout_s=10)


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
    with EchoingUpstream(401, text, encoding=encoding) as cloud, \
            RoutedChat(router, edge=Endpoint(edge.url, "edge-model"),
                       cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY)) as chat:
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
    with EchoingUpstream(200, event, SSE) as edge, \
            RoutedChat(router, edge=edge_options(edge.url).endpoint(),
                       cloud=Endpoint(cloud.url, "cloud-model")) as chat:
        with chat.create(ASK, stream=True) as stream:
            assert "".join(c["choices"][0]["delta"].get("content") or "" for c in stream if c["choices"]) == \
                "answer from cloud"
    routing = stream.routing
    assert routing.fallback_kind == "malformed" and "invalid key [redacted]" in routing.fallback_reason
    assert not leaks(EDGE_KEY, json.dumps(routing.to_dict()), repr(routing))


def test_a_content_type_carrying_the_key_is_not_quoted(router, stubs):
    _, cloud = stubs  # the header is shown lowercased: redacting after that would miss the key
    with EchoingUpstream(200, "{}", {"content-type": "Text/Plain-{key}"}) as edge, \
            RoutedChat(router, edge=edge_options(edge.url).endpoint(),
                       cloud=Endpoint(cloud.url, "cloud-model")) as chat:
        with chat.create(ASK, stream=True) as stream:
            list(stream)
    assert stream.routing.fallback_kind == "malformed" and "[redacted]" in stream.routing.fallback_reason
    assert not leaks(EDGE_KEY, json.dumps(stream.routing.to_dict()))


@pytest.mark.parametrize("form", ["{key}", "{key_escaped}"])
def test_an_answer_that_echoes_the_key_reaches_the_caller_redacted(router, stubs, form):
    edge, _ = stubs
    content = f"your key is {form}"
    with EchoingUpstream(200, completion_json(content)) as cloud, \
            RoutedChat(router, edge=Endpoint(edge.url, "edge-model"),
                       cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY)) as chat:
        completion = chat.create(LONG)
    assert completion.text == "your key is [redacted]" and completion.routing.served_by == "cloud"
    assert not leaks(CLOUD_KEY, json.dumps(completion.body), completion.text)
    with EchoingUpstream(200, chunk_events(content), SSE) as cloud, \
            RoutedChat(router, edge=Endpoint(edge.url, "edge-model"),
                       cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY)) as chat:
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
        with httpx2.stream("POST", f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {TOKEN}"},
                           json={"messages": messages, "stream": stream}) as response:
            text = response.read().decode()
        texts.append(str(response.headers) + text)
        return text

    with caplog.at_level(logging.DEBUG), EchoingUpstream(200, error_event, SSE) as edge:
        with running_proxy(router, config_for(stubs, edge=edge_options(edge.url))) as url:
            text = call(url, ASK, True)  # the edge's first event is the error: the cloud streams
        comment = json.loads(re.search(r"^: routing (.*)$", text, re.M).group(1))
        assert comment["served_by"] == "cloud" and "[redacted]" in comment["fallback_reason"]
        for body, headers, stream in ((completion_json("key {key_escaped}"), None, False),
                                      (chunk_events("key {key_escaped}"), SSE, True)):
            with EchoingUpstream(200, body, headers) as cloud, running_proxy(router, config_for(
                    stubs, edge=edge_options(edge.url),
                    cloud=UpstreamOptions(cloud.url, "cloud-model", api_key=CLOUD_KEY))) as url:
                assert "key [redacted]" in "".join(readings(call(url, LONG, stream)))
    assert stub_cloud.received[-1].body["stream"] is True
    assert not leaks(EDGE_KEY, *texts, caplog.text) and not leaks(CLOUD_KEY, *texts, caplog.text)


# Request validation.
NOT_JSON_NUMBERS = {  # body -> where the message must say the number is
    b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}': "temperature",
    b'{"messages": [{"role": "user", "content": "hi", "weight": Infinity}]}': "messages[0].weight",
    b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"x": -Infinity}]}': "tools[0].x",
    b'{"messages": [{"role": "user", "content": "hi"}], "top_p": 1e999}': "top_p",  # too large for a double
}


def test_the_proxy_refuses_numbers_json_does_not_have(proxy_url, stubs):
    for body, where in NOT_JSON_NUMBERS.items():
        response = httpx2.post(f"{proxy_url}/v1/chat/completions", content=body,
                               headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"})
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


@pytest.mark.parametrize("body, param", [
    ({"messages": ASK, "stream": True, "stream_options": "x"}, "stream_options"),
    ({"messages": ASK, "stream_options": ["include_usage"]}, "stream_options"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [5]}, "messages"),
    ({"messages": ASK, "stream": "yes"}, "stream"),
])
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
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(declared).encode() + b"\r\n\r\n{")
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


@contextlib.contextmanager
def serving_process(bundle, stubs, *options: str):
    """`python -m serving serve` on an ephemeral port of 127.0.0.1: yields (base URL, port)."""
    edge, cloud = stubs
    env = {**os.environ, "TEST_CLOUD_KEY": CLOUD_KEY, "ROUTER_PROXY_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "serving", "serve", "--bundle", str(bundle), "--port", "0", "--no-access-log",
         "--edge-url", edge.url, "--edge-model", "edge-model", "--cloud-url", cloud.url, "--cloud-model", "cloud-model",
         "--cloud-key-env", "TEST_CLOUD_KEY", *options],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not (match := re.search(r"serving on http://127\.0\.0\.1:(\d+)/v1", lines[-1] if lines else "")):
            line = process.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe from filling
        yield f"http://127.0.0.1:{match.group(1)}", int(match.group(1))
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
    with serving_process(bundle, stubs, "--max-concurrency", "8", "--body-timeout-s", "2") as (url, port):
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
        stop = threading.Event()

        def drip():
            while not stop.wait(0.25):
                try:
                    sock.send(b" ")
                except OSError:
                    return
        dripping = threading.Thread(target=drip, daemon=True)
        started = time.perf_counter()
        dripping.start()
        try:
            status, body = response_of(sock)
        finally:
            stop.set()
            dripping.join()
        elapsed = time.perf_counter() - started
        assert httpx2.get(f"{url}/health").status_code == 200
    assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
    assert elapsed < 6
    assert stubs[0].received == [] and stubs[1].received == []


def test_the_body_deadline_must_be_positive(capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main(["serve", "--bundle", "unused", "--edge-url", "http://127.0.0.1:9/v1", "--edge-model", "e",
                  "--cloud-url", "http://127.0.0.1:9/v1", "--cloud-model", "c", "--body-timeout-s", "0"])
    assert caught.value.code == 2 and "body_timeout_s" in capsys.readouterr().err
