"""The routing proxy end to end, with the `openai` package as its client: answers and streams from
the right model, fallbacks, OpenAI-format errors, /v1/models, /health, /metrics, and its security:
no open relay (token required beyond the loopback, 401 without it or with a wrong one), 413 for a
huge body, 503 when full, and the cloud key absent from every response and log line."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import httpx2
import openai
import pytest

from serving import _cli as cli
from serving.chat import Endpoint, RoutedChat
from serving.proxy._app import build_app
from serving.proxy._config import ProxyConfig
from serving.testing import LocalServer
from tests.chat_stubs import ASK, CLOUD_KEY, LONG, fresh_stubs, router, stubs  # noqa: F401  (fixtures)
from tests.conftest import ROOT

pytestmark = pytest.mark.real_data  # routing is the session's trained test bundle

TOKEN = "proxy-token-0123456789abcdef"


def config_for(stubs, **overrides) -> ProxyConfig:
    edge, cloud = stubs
    options = dict(
        bundle="(loaded by the test)",
        token=TOKEN,
        edge=Endpoint(edge.url, "edge-model", timeout_s=0.6, first_token_timeout_s=0.3),
        cloud=Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY, timeout_s=5.0),
    )
    return ProxyConfig(**{**options, **overrides})


@contextlib.contextmanager
def running_proxy(router, config: ProxyConfig):
    """The proxy app on 127.0.0.1 (an ephemeral port); yields its base URL."""
    chat = RoutedChat(router, edge=config.edge, cloud=config.cloud)
    server = LocalServer(build_app(chat, config), name="proxy", lifespan="on").start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        chat.close()


@pytest.fixture(scope="module")
def proxy(router, stubs):
    with running_proxy(router, config_for(stubs)) as url:
        yield url


def client(url: str, token: str = TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=20)


def content_of(stream) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_an_openai_client_gets_the_edge_answer_through_the_proxy(proxy, stubs):
    edge, cloud = stubs
    raw = client(proxy).chat.completions.with_raw_response.create(model="router", messages=ASK, temperature=0)
    completion = raw.parse()
    assert completion.choices[0].message.content == "answer from edge" and completion.id.startswith("chatcmpl-edge")
    assert completion.model == "edge-model"  # the serving model's answer, as it sent it
    assert (raw.headers["x-router-served-by"], raw.headers["x-router-model"]) == ("edge", "edge-model")
    assert raw.headers["x-router-zone"] in ("edge", "edge_with_cloud_fallback")
    assert "x-router-fallback" not in raw.headers
    assert edge.received[-1].body == {"model": "edge-model", "messages": ASK, "temperature": 0}
    assert "authorization" not in edge.received[-1].headers and cloud.received == []  # the client's token stays here


def test_a_cloud_first_request_reaches_the_cloud_with_its_key(proxy, stubs):
    edge, cloud = stubs
    raw = client(proxy).chat.completions.with_raw_response.create(model="router", messages=LONG)
    assert raw.parse().choices[0].message.content == "answer from cloud"
    assert (raw.headers["x-router-served-by"], raw.headers["x-router-zone"]) == ("cloud", "cloud")
    assert cloud.received[-1].headers["authorization"] == f"Bearer {CLOUD_KEY}" and edge.received == []


@pytest.mark.parametrize(
    "knobs, kind", [({"status": 503}, "http_error"), ({"malformed": True}, "malformed"), ({"delay_s": 5.0}, "timeout")]
)
def test_an_edge_failure_is_answered_by_the_cloud(proxy, stubs, knobs, kind):
    edge, _ = stubs
    for name, value in knobs.items():
        setattr(edge.behaviour, name, value)
    raw = client(proxy).chat.completions.with_raw_response.create(model="router", messages=ASK)
    assert raw.parse().choices[0].message.content == "answer from cloud"
    assert (raw.headers["x-router-served-by"], raw.headers["x-router-fallback"]) == ("cloud", kind)


def test_streams_through_the_proxy_with_the_openai_client(proxy, stubs):
    edge, _ = stubs
    with client(proxy).chat.completions.with_streaming_response.create(
        model="router", messages=ASK, stream=True
    ) as response:
        assert response.headers["x-router-served-by"] == "edge"
        assert content_of(response.parse()) == "answer from edge"
    # A slow first token (2 s against the 0.3 s limit): the cloud streams instead.
    edge.behaviour.first_token_delay_s = 2.0
    start = time.perf_counter()
    with client(proxy).chat.completions.with_streaming_response.create(
        model="router", messages=ASK, stream=True
    ) as response:
        assert response.headers["x-router-fallback"] == "slow_first_token"
        assert content_of(response.parse()) == "answer from cloud"
    assert time.perf_counter() - start < 1.5
    # The plain stream interface, with usage asked for.
    stream = client(proxy).chat.completions.create(
        model="router", messages=LONG, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "answer from cloud"
    assert chunks[-1].usage.completion_tokens == 3


def test_a_stream_that_breaks_after_its_first_token_ends_with_an_error_event(proxy, stubs):
    edge, cloud = stubs
    edge.behaviour.break_after_first_chunk = True
    got = []
    with pytest.raises(openai.APIError, match="broke after its first chunk"):
        for chunk in client(proxy).chat.completions.create(model="router", messages=ASK, stream=True):
            got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == "answer" and cloud.received == []  # too late for the cloud


def test_a_stream_ends_with_the_routing_comment_and_done(proxy):
    with httpx2.stream(
        "POST",
        f"{proxy}/v1/chat/completions",
        headers={"authorization": f"Bearer {TOKEN}"},
        json={"model": "router", "messages": ASK, "stream": True},
    ) as response:
        text = response.read().decode()
    assert response.headers["content-type"].startswith("text/event-stream")
    events = text.strip().split("\n\n")
    assert events[-1] == "data: [DONE]" and events[-2].startswith(": routing ")
    routing = json.loads(events[-2][len(": routing ") :])
    assert routing["served_by"] == "edge" and routing["seconds"] > 0 and routing["steps"][0]["name"] == "edge"
    assert all(json.loads(e[len("data: ") :])["object"] == "chat.completion.chunk" for e in events[:-2])


def test_a_cloud_failure_is_an_openai_error_naming_both_failures(proxy, stubs):
    edge, cloud = stubs
    edge.behaviour.status, cloud.behaviour.status = 503, 500
    cloud.behaviour.echo_auth_in_errors = True
    with pytest.raises(openai.APIStatusError) as caught:
        client(proxy).chat.completions.create(model="router", messages=ASK)
    error = caught.value
    assert error.status_code == 502 and error.body["code"] == "upstream_failed"
    assert "HTTP 500" in error.body["message"] and "HTTP 503" in error.body["message"]
    assert CLOUD_KEY not in error.response.text and "[redacted]" in error.response.text
    cloud.behaviour.status = 422  # the cloud refusing the request itself: its status is passed on
    with pytest.raises(openai.UnprocessableEntityError):
        client(proxy).chat.completions.create(model="router", messages=ASK)


def test_models_health_and_bad_requests(proxy):
    assert [m.id for m in client(proxy).models.list()] == ["router"]
    assert httpx2.get(f"{proxy}/health").json()["status"] == "ok"  # open without a token
    with pytest.raises(openai.NotFoundError) as caught:
        client(proxy).chat.completions.create(model="gpt-4o", messages=ASK)
    assert caught.value.body["code"] == "model_not_found"
    auth = {"authorization": f"Bearer {TOKEN}"}
    for body, text in (
        (b"{not json", "not valid JSON"),
        (b"[1]", "JSON object"),
        (json.dumps({"model": "router"}).encode(), "messages is required"),
        (json.dumps({"model": "router", "messages": []}).encode(), "messages must be a non-empty"),
        (json.dumps({"messages": ASK, "precision": "fuzzy"}).encode(), "precision"),
        (json.dumps({"messages": ASK, "stream": "yes"}).encode(), "stream must be"),
    ):
        response = httpx2.post(f"{proxy}/v1/chat/completions", content=body, headers=auth)
        assert response.status_code == 400 and text in response.json()["error"]["message"], body
    assert httpx2.get(f"{proxy}/v1/nowhere", headers=auth).json()["error"]["type"] == "not_found_error"
    wrong_method = httpx2.get(f"{proxy}/v1/chat/completions", headers=auth)  # 405 says what is allowed
    assert (wrong_method.status_code, wrong_method.headers.get("allow")) == (405, "POST")
    assert wrong_method.json()["error"]["type"] == "invalid_request_error"


def test_precision_is_taken_from_the_body_or_a_header(proxy):
    auth = {"authorization": f"Bearer {TOKEN}"}
    for extra, headers in (({"precision": "exact"}, {}), ({}, {"x-router-precision": "exact"})):
        with httpx2.stream(
            "POST",
            f"{proxy}/v1/chat/completions",
            headers={**auth, **headers},
            json={"messages": ASK, "stream": True, **extra},
        ) as response:
            comment = [e for e in response.read().decode().split("\n\n") if e.startswith(": routing ")][0]
        assert json.loads(comment[len(": routing ") :])["decision"]["precision"] == "exact"


def test_metrics_count_decisions_fallbacks_and_failures(router, stubs):
    edge, cloud = stubs
    with running_proxy(router, config_for(stubs)) as url:
        api = client(url)
        api.chat.completions.create(model="router", messages=ASK)
        api.chat.completions.create(model="router", messages=LONG)
        edge.behaviour.status = 503
        api.chat.completions.create(model="router", messages=ASK)
        list(api.chat.completions.create(model="router", messages=ASK, stream=True))
        cloud.behaviour.status = 500
        with pytest.raises(openai.InternalServerError):
            api.chat.completions.create(model="router", messages=ASK)
        with pytest.raises(openai.AuthenticationError):
            client(url, "wrong-token-0123456789").models.list()
        response = httpx2.get(f"{url}/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    metrics = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in response.text.splitlines()
        if line and not line.startswith("#")
    }
    zone = router.route(ASK[0]["content"]).zone
    assert metrics[f'router_decisions_total{{zone="{zone}"}}'] == 4
    assert metrics['router_decisions_total{zone="cloud"}'] == 1
    assert metrics['router_served_total{served_by="edge"}'] == 1
    assert metrics['router_served_total{served_by="cloud"}'] == 3
    assert metrics['router_fallbacks_total{reason="http_error"}'] == 2
    assert metrics['router_failed_requests_total{reason="cloud_http_error"}'] == 1
    assert metrics['router_failed_requests_total{reason="unauthorized"}'] == 1
    assert metrics['router_request_duration_seconds_count{served_by="cloud",stream="false"}'] == 2
    assert metrics['router_request_duration_seconds_count{served_by="cloud",stream="true"}'] == 1
    assert metrics['router_upstream_call_duration_seconds_count{status="error",step="edge"}'] == 3
    assert metrics["router_degraded"] == 0 and metrics["router_in_flight_requests"] == 0
    assert f'router_bundle_info{{model_version="{router.model_version}"}}' in metrics
    assert CLOUD_KEY not in response.text and TOKEN not in response.text


# Security.
def test_no_token_or_a_wrong_token_gets_401(proxy, stubs):
    response = httpx2.post(f"{proxy}/v1/chat/completions", json={"model": "router", "messages": ASK})
    assert response.status_code == 401 and response.json()["error"]["message"].startswith("missing bearer token")
    for token in ("wrong-token-0123456789", TOKEN[:-1], TOKEN + "x", TOKEN.upper()):
        with pytest.raises(openai.AuthenticationError) as caught:
            client(proxy, token).chat.completions.create(model="router", messages=ASK)
        assert caught.value.status_code == 401 and caught.value.body["code"] == "invalid_api_key"
    for path in ("/metrics", "/v1/models"):
        response = httpx2.get(f"{proxy}{path}")
        assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Bearer")
    assert httpx2.get(f"{proxy}/metrics", headers={"authorization": f"Basic {TOKEN}"}).status_code == 401
    assert stubs[0].received == [] and stubs[1].received == []  # nothing was relayed


def test_a_huge_body_gets_413(router, stubs):
    with running_proxy(router, config_for(stubs, max_body_bytes=64 << 10)) as url:
        huge = [{"role": "user", "content": "x" * (100 << 10)}]
        with pytest.raises(openai.APIStatusError) as caught:
            client(url).chat.completions.create(model="router", messages=huge)
        assert caught.value.status_code == 413 and caught.value.body["code"] == "request_too_large"

        def chunked():  # no Content-Length: the limit holds while the body is read
            yield b'{"model": "router", "messages": [{"role": "user", "content": "'
            for _ in range(100):
                yield b"x" * 1024
            yield b'"}]}'

        response = httpx2.post(
            f"{url}/v1/chat/completions",
            content=chunked(),
            headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
        )
        assert response.status_code == 413
    assert stubs[0].received == [] and stubs[1].received == []


def test_a_full_proxy_answers_503_with_retry_after(router, stubs):
    edge, _ = stubs
    edge.behaviour.delay_s = 1.0
    with running_proxy(router, config_for(stubs, max_concurrency=1, queue_timeout_s=0.1)) as url:
        import threading

        slow = threading.Thread(target=lambda: client(url).chat.completions.create(model="router", messages=ASK))
        slow.start()
        deadline = time.monotonic() + 30  # the slot is taken once the edge has the first request
        while not edge.received and time.monotonic() < deadline:  # (a fixed 0.3 s lost the race on a loaded host)
            time.sleep(0.01)
        assert edge.received, "the first request never reached the edge"
        response = httpx2.post(
            f"{url}/v1/chat/completions", json={"messages": ASK}, headers={"authorization": f"Bearer {TOKEN}"}
        )
        slow.join()
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "overloaded"
        edge.behaviour.delay_s = 0
        assert client(url).chat.completions.create(model="router", messages=ASK).choices[0].message.content


def test_a_failure_after_the_answer_frees_its_slot(router, stubs):
    """The bookkeeping after an answer (metrics, the recent-requests panel, the headers) failing
    must not keep the answer's slot, span or upstream stream: with one slot, the next request is
    served, not refused as overloaded."""
    config = config_for(stubs, max_concurrency=1, queue_timeout_s=0.1)
    chat = RoutedChat(router, edge=config.edge, cloud=config.cloud)
    app = build_app(chat, config)
    metrics, failed = app.state.metrics, []
    counted = metrics.routed

    def routed(routing) -> None:  # the metrics backend fails for the first two answers
        if len(failed) < 2:
            failed.append(routing.served_by)
            raise RuntimeError("metrics backend down")
        counted(routing)

    metrics.routed = routed
    server = LocalServer(app, name="proxy", lifespan="on").start()
    try:
        url, auth = f"http://127.0.0.1:{server.port}", {"authorization": f"Bearer {TOKEN}"}
        plain = httpx2.post(f"{url}/v1/chat/completions", json={"messages": ASK}, headers=auth)
        streamed = httpx2.post(f"{url}/v1/chat/completions", json={"messages": ASK, "stream": True}, headers=auth)
        assert (plain.status_code, streamed.status_code) == (500, 500) and len(failed) == 2
        assert client(url).chat.completions.create(model="router", messages=ASK).choices[0].message.content
        assert content_of(client(url).chat.completions.create(model="router", messages=ASK, stream=True))
        assert "router_in_flight_requests 0.0" in httpx2.get(f"{url}/metrics", headers=auth).text
    finally:
        server.stop()
        chat.close()


SERVE = [
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
]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.com"])
def test_it_refuses_to_listen_beyond_the_loopback_without_a_token(host, capsys, monkeypatch):
    monkeypatch.delenv("ROUTER_PROXY_TOKEN", raising=False)
    with pytest.raises(SystemExit) as caught:
        cli.main([*SERVE, "--host", host])
    assert caught.value.code == 2
    assert f"refusing to listen on {host}" in capsys.readouterr().err


def test_without_the_server_extra_serve_says_which_extra_to_install():
    """The server's packages missing (uvicorn here) is exit code 2 naming the extra, not a traceback."""
    script = "import sys; sys.modules['uvicorn'] = None; from serving._cli import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run([sys.executable, "-c", script, *SERVE], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 2 and "the proxy needs the server extra" in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr


def test_token_and_key_options_are_checked_before_anything_starts(capsys, monkeypatch):
    monkeypatch.setenv("ROUTER_PROXY_TOKEN", "short")
    with pytest.raises(SystemExit) as caught:
        cli.main([*SERVE, "--host", "0.0.0.0"])
    assert caught.value.code == 2 and "at least 16 characters" in capsys.readouterr().err
    monkeypatch.delenv("ROUTER_PROXY_TOKEN")
    with pytest.raises(SystemExit):
        cli.main([*SERVE, "--cloud-key-env", "NO_SUCH_VARIABLE_SET"])
    assert "NO_SUCH_VARIABLE_SET is not set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([*SERVE, "--edge-url", "ftp://127.0.0.1/v1"])
    assert "http:// or https://" in capsys.readouterr().err
    # With a token any address is accepted.
    assert (
        ProxyConfig(
            bundle="b",
            edge=Endpoint("http://h/v1", "e"),
            cloud=Endpoint("http://h/v1", "c"),
            host="0.0.0.0",
            token=TOKEN,
        ).host
        == "0.0.0.0"
    )


def test_the_cloud_key_never_reaches_a_response_or_a_log_line(router, stubs, caplog, capfd):
    edge, cloud = stubs
    cloud.behaviour.echo_auth_in_errors = edge.behaviour.echo_auth_in_errors = True
    bodies = []
    with caplog.at_level(logging.DEBUG), running_proxy(router, config_for(stubs)) as url:
        auth = {"authorization": f"Bearer {TOKEN}"}

        def call(**body):
            response = httpx2.post(f"{url}/v1/chat/completions", json={"messages": ASK, **body}, headers=auth)
            bodies.append(str(response.headers) + response.text)

        call()
        call(messages=LONG)
        call(stream=True)
        edge.behaviour.status = 401
        call()
        cloud.behaviour.status = 401  # a key the cloud refuses, echoed in its error
        call()
        call(stream=True)
        cloud.behaviour.status = 200
        cloud.behaviour.break_after_first_chunk = True
        call(messages=LONG, stream=True)
        for path in ("/metrics", "/health", "/v1/models"):
            response = httpx2.get(f"{url}{path}", headers=auth)
            bodies.append(str(response.headers) + response.text)
    assert any(r.name.startswith("httpcore2") for r in caplog.records)  # the HTTP stack's debug lines were seen
    assert any("[redacted]" in b for b in bodies)  # the cloud did echo the key; it was caught
    assert not [b for b in bodies if CLOUD_KEY in b]
    assert CLOUD_KEY not in caplog.text and CLOUD_KEY not in "".join(map(str, caplog.records))
    captured = capfd.readouterr()
    assert CLOUD_KEY not in captured.out + captured.err


def start_serving(bundle, stubs, *options: str, stdout=subprocess.DEVNULL) -> tuple[subprocess.Popen, int, list[str]]:
    """`python -m serving serve` on an ephemeral port of 127.0.0.1 in front of the stubs: (the
    process, its port, the lines it wrote to stderr up to "serving on ..."). The caller ends it."""
    edge, cloud = stubs
    env = {**os.environ, "TEST_CLOUD_KEY": CLOUD_KEY, "ROUTER_PROXY_TOKEN": TOKEN}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serving",
            "serve",
            "--bundle",
            str(bundle),
            "--port",
            "0",
            "--edge-url",
            edge.url,
            "--edge-model",
            "edge-model",
            "--cloud-url",
            cloud.url,
            "--cloud-model",
            "cloud-model",
            "--cloud-key-env",
            "TEST_CLOUD_KEY",
            *options,
        ],
        cwd=ROOT,
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        while not (match := re.search(r"serving on http://127\.0\.0\.1:(\d+)/v1", lines[-1] if lines else "")):
            line = process.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
    except BaseException:
        process.kill()
        raise
    return process, int(match.group(1)), lines


def test_the_command_serves_until_sigterm_then_shuts_down_cleanly(bundle, stubs, tmp_path):
    edge, cloud = stubs
    process, port, lines = start_serving(bundle, stubs, stdout=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        assert (
            client(url).chat.completions.create(model="router", messages=LONG).choices[0].message.content
            == "answer from cloud"
        )
        cloud.behaviour.status, cloud.behaviour.echo_auth_in_errors = 500, True
        with pytest.raises(openai.InternalServerError):
            client(url).chat.completions.create(model="router", messages=LONG)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill() if process.poll() is None else None
    assert process.returncode == 0, err
    err = "".join(lines) + err
    assert "shutdown complete" in err and "request failed" in err
    assert CLOUD_KEY not in err + out and TOKEN not in err + out
