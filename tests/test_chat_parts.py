"""The routed chat client's and the proxy's parts that need no server: endpoint checks and costs,
error texts, redaction (before anything is cut), the log filter, and which hosts are loopback."""

from __future__ import annotations

import logging

import pytest

from serving import Price
from serving.chat import Endpoint
from serving.chat._errors import UpstreamMalformed, redact
from serving.chat._responses import completion_text, error_detail, parse_json_object, starts_answer
from serving.proxy._config import is_loopback
from serving.proxy._security import RedactingFilter

KEY = "sk-test-0123456789abcdef"


def test_the_cost_of_an_answer_needs_a_price_and_the_usage():
    priced = Endpoint("http://127.0.0.1:1/v1", "m", input_price_per_1m=3.0, output_price_per_1m=15.0)
    assert priced.answer_cost({"prompt_tokens": 1000, "completion_tokens": 100}) == pytest.approx(0.0045)
    for usage in (
        None,
        {},
        {"prompt_tokens": 10},
        {"prompt_tokens": "10", "completion_tokens": 1},
        {"prompt_tokens": True, "completion_tokens": 1},
        {"prompt_tokens": -1, "completion_tokens": 1},
    ):
        assert priced.answer_cost(usage) is None
    assert Endpoint("http://127.0.0.1:1/v1", "m").answer_cost({"prompt_tokens": 1, "completion_tokens": 1}) is None
    # one of the two earlier keywords alone: the other figure is 0, as a spec's price says
    only_input = Endpoint("http://127.0.0.1:1/v1", "m", input_price_per_1m=3.0)
    assert only_input.answer_cost({"prompt_tokens": 1000, "completion_tokens": 1000}) == pytest.approx(0.003)
    free = Endpoint("http://127.0.0.1:1/v1", "m", input_price_per_1m=0, output_price_per_1m=0)
    assert free.answer_cost({"prompt_tokens": 5, "completion_tokens": 5}) == 0.0


def test_an_answer_is_priced_per_call_and_its_cached_prompt_tokens_at_the_cached_price():
    price = Price(per_1m_input=2.0, per_1m_output=8.0, per_call=0.001, per_1m_cached_input=0.5)
    endpoint = Endpoint("http://127.0.0.1:1/v1", "m", price=price)
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 600}}
    assert endpoint.answer_cost(usage) == pytest.approx(0.001 + 400 * 2e-6 + 600 * 0.5e-6 + 100 * 8e-6)
    assert endpoint.call_cost(1000, 100, cached_input_tokens=600) == endpoint.answer_cost(usage)
    for details in ({"cached_tokens": 2000}, {"cached_tokens": -1}, {"cached_tokens": "600"}, None):  # not a count
        odd = {**usage, "prompt_tokens_details": details}
        assert endpoint.answer_cost(odd) == pytest.approx(0.001 + 1000 * 2e-6 + 100 * 8e-6)
    # without a cached figure, cached tokens cost what input tokens cost
    plain = Endpoint("http://127.0.0.1:1/v1", "m", price=Price(per_1m_input=2.0, per_1m_output=8.0))
    assert plain.answer_cost(usage) == pytest.approx(1000 * 2e-6 + 100 * 8e-6)


@pytest.mark.parametrize(
    "options, text",
    [
        (dict(base_url="127.0.0.1:8080/v1"), "http:// or https://"),
        (dict(base_url="http://h/v1?key=abc"), "query"),
        (dict(model=""), "model"),
        (dict(timeout_s=0), "timeout_s"),
        (dict(first_token_timeout_s=float("inf")), "first_token_timeout_s"),
        (dict(input_price_per_1m=-1), "per_1m_input"),
        (dict(headers={"Authorization": "Bearer x"}), "api_key"),
        (dict(params={"model": "other"}), "params must not set 'model'"),
        (dict(params={"stream": True}), "params must not set 'stream'"),
        (dict(params={"temperature": float("nan")}), "no NaN"),
        (dict(params={"x": object()}), "JSON values only"),
        (dict(where="edge"), "where"),
        (dict(name="two words"), "name"),
        (dict(context_tokens=0), "context_tokens"),
        (dict(prefill_tokens_per_s=0), "prefill_tokens_per_s"),
        (dict(timeout_s=10**400), "timeout_s"),
    ],
)
def test_endpoint_settings_are_checked(options, text):
    with pytest.raises(ValueError, match=text):
        Endpoint(**{"base_url": "http://127.0.0.1:8080/v1", "model": "m", **options})


def test_an_endpoint_never_shows_its_key():
    endpoint = Endpoint("http://127.0.0.1:8080/v1", "m", name="cloud", api_key=KEY, headers={"x-org": "o"})
    for shown in (
        repr(endpoint),
        str(endpoint),
        f"{endpoint}",
        repr([endpoint]),
        repr(endpoint.as_dict(call_settings=True)),
    ):
        assert KEY not in shown
    assert endpoint.request_headers()["Authorization"] == f"Bearer {KEY}"
    assert endpoint.url == "http://127.0.0.1:8080/v1/chat/completions"
    assert Endpoint("http://127.0.0.1:8080/v1", "m", api_key=KEY) == Endpoint(
        "http://127.0.0.1:8080/v1", "m", api_key=KEY
    )


def test_error_bodies_are_redacted_before_they_are_cut():
    padded = b'{"error": {"message": "' + b" " * 5000 + b"bad key " + KEY.encode() + b'"}}'
    assert error_detail(padded, [KEY]) == "bad key [redacted]"
    long = ("x" * 295 + KEY).encode()  # the key straddles the cut: no part of it may survive
    detail = error_detail(long, [KEY])
    assert KEY[:5] not in detail and len(detail) == 300
    assert error_detail(b'{"error": "quota exceeded"}', []) == "quota exceeded"
    assert redact("key x in text", ["x"]) == "key x in text"  # placeholders too short to hunt are left alone


def test_what_counts_as_a_chat_completion():
    assert completion_text("edge", {"choices": [{"message": {"content": "hi"}}]}) == "hi"
    assert completion_text("edge", {"choices": [{"message": {"content": None, "tool_calls": []}}]}) == ""
    assert (
        completion_text(
            "edge",
            {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]},
        )
        == "ab"
    )
    for body in ({}, {"choices": []}, {"choices": [{}]}, {"choices": [{"message": {"content": 5}}]}):
        with pytest.raises(UpstreamMalformed):
            completion_text("edge", body)
    for raw in (b"[]", b"not json", b'{"a": NaN}', b'{"a": Infinity}', b"\xff"):
        with pytest.raises(UpstreamMalformed):
            parse_json_object("edge", raw, "the answer")
    assert not starts_answer({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    assert starts_answer({"choices": [{"delta": {"content": "4"}}]})
    assert starts_answer({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    assert not starts_answer({"choices": [], "usage": {"prompt_tokens": 1}})


def test_the_log_filter_redacts_messages_arguments_and_tracebacks(caplog):
    logger = logging.getLogger("test.redaction")
    handler = logging.StreamHandler()
    records = []
    handler.emit = lambda record: records.append(handler.format(record))
    handler.addFilter(RedactingFilter([KEY, "", "abc"]))
    logger.addHandler(handler)
    try:
        logger.warning("key %s in %r", KEY, {"auth": KEY})
        logger.warning(f"inline {KEY}")
        try:
            raise RuntimeError(f"boom {KEY}")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert len(records) == 3 and all(KEY not in r for r in records)
    assert records[0] == "key [redacted] in {'auth': '[redacted]'}" and "boom [redacted]" in records[2]


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("myhost.local", False),
    ],
)
def test_which_hosts_are_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_the_proxy_watches_a_folder_or_a_url(tmp_path):
    from types import SimpleNamespace

    from serving.bundle._watcher import BundleURLWatcher, BundleWatcher
    from serving.proxy._config import ProxyConfig
    from serving.proxy._serve import watchers_for

    router = SimpleNamespace(manifest=None, update=lambda path: None)  # all a watcher uses of a Router
    config = lambda watch: ProxyConfig(  # noqa: E731
        bundle="b",
        edge=Endpoint("http://h/v1", "e"),
        cloud=Endpoint("http://h/v1", "c"),
        watch=watch,
        watch_interval_s=60,
    )
    assert watchers_for(router, config(None)) == []
    for source, kind in ((str(tmp_path), BundleWatcher), ("http://127.0.0.1:9/bundles/live", BundleURLWatcher)):
        (watcher,) = watchers_for(router, config(source))
        try:
            assert type(watcher) is kind and watcher._thread.is_alive()
        finally:
            watcher.stop()


def test_the_proxy_exits_1_when_it_cannot_listen(tmp_path):
    import socket
    import subprocess
    import sys

    from tests.conftest import ROOT

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "serving",
                "serve",
                "--bundle",
                str(tmp_path),
                "--port",
                str(taken.getsockname()[1]),
                "--edge-url",
                "http://127.0.0.1:9/v1",
                "--edge-model",
                "e",
                "--cloud-url",
                "http://127.0.0.1:9/v1",
                "--cloud-model",
                "c",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1 and "cannot start" in done.stderr and "Address already in use" in done.stderr


def test_a_bundle_that_cannot_load_frees_the_bound_address(tmp_path):
    """serve() binds before it loads the bundle; when the load fails (--strict) the socket is closed.
    In a process of its own: serve() sets up the process's logging."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    script = f"""
import serving.proxy._serve as s
from serving.chat import Endpoint
from serving.proxy._config import ProxyConfig
bound, bind = [], s.bind
s.bind = lambda host, port: bound.append(bind(host, port)) or bound[-1]
config = ProxyConfig(bundle={str(tmp_path / "no-bundle")!r}, strict=True, port=0,
                     edge=Endpoint("http://127.0.0.1:9/v1", "e"), cloud=Endpoint("http://127.0.0.1:9/v1", "c"))
print(s.serve(config), len(bound), bound[0].fileno())
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["1", "1", "-1"], done.stderr[-2000:]  # exit code 1, one socket, closed
