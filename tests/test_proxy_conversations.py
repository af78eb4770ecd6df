"""Conversations through the proxy (docs/conversations.md): the conversation a request belongs to
(the x-router-conversation header, else the body's prompt_cache_key, else its user; none of it
sent upstream but the body as the client sent it), the headers that say each turn, whether it
switched and why, against stub upstreams that record which one served each turn; two proxy
processes sharing one real redis-server (a conversation continues across them, a budget is spent
once), Redis killed mid-run (answers go on, the headers and /metrics say so); and the dashboard's
conversation panel in a real browser."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import subprocess
import time

import httpx2
import pytest
import redis

from serving import Router
from serving.conversations._store import MemoryStore
from serving.conversations._switch import Stickiness
from serving.policy._budgets import window
from serving.proxy._config import ConfigError, ProxyConfig
from tests.chat_stubs import ASK, CLOUD_KEY, LONG, fresh_stubs, stubs  # noqa: F401  (fixtures)
from tests.redis_server import redis_on
from tests.test_conversation_surfaces import BACKGROUND
from tests.test_dashboard import Tables, chromium_dom
from tests.test_proxy import TOKEN, config_for, running_proxy, start_serving
from tests.test_proxy_hardening import budget_rule, write_policy

pytestmark = pytest.mark.real_data  # routing is the session's trained test bundle

AUTH = {"authorization": f"Bearer {TOKEN}"}


def post(url: str, body: dict, conversation: str | None = None, **headers: str) -> httpx2.Response:
    if conversation is not None:
        headers["x-router-conversation"] = conversation
    response = httpx2.post(f"{url}/v1/chat/completions", json=body, headers={**AUTH, **headers}, timeout=60)
    assert response.status_code == 200, response.text
    return response


def answer(response: httpx2.Response) -> str:
    return response.json()["choices"][0]["message"]["content"]


@contextlib.contextmanager
def proxy_with(bundle, stubs, stickiness: Stickiness, **overrides):
    router = Router.load(bundle, strict=True, conversations=MemoryStore(), stickiness=stickiness)
    with running_proxy(router, config_for(stubs, **overrides)) as url:
        yield url, router


# --- one proxy ------------------------------------------------------------------------------------


def test_the_conversation_comes_from_the_header_then_the_body_and_nothing_of_it_goes_upstream(bundle, stubs):
    edge, _ = stubs
    with proxy_with(bundle, stubs, Stickiness()) as (url, _):
        first = post(url, {"messages": ASK}, "chat-1")
        assert (first.headers["x-router-turn"], first.headers["x-router-switched"]) == ("1", "false")
        assert first.headers["x-router-switch"] == "conversation turn 1"
        messages = [*ASK, {"role": "assistant", "content": answer(first)}, {"role": "user", "content": "And 3+3?"}]
        second = post(url, {"messages": messages}, "chat-1")
        assert second.headers["x-router-turn"] == "2"
        assert second.headers["x-router-switch"] == "conversation turn 2 stays on edge"
        # the header is never sent upstream, nor any x-router-*
        assert not [h for r in edge.received for h in r.headers if h.startswith("x-router")]
        # the OpenAI fields stand for the conversation, and go upstream as the client sent them
        keyed = post(url, {"messages": ASK, "prompt_cache_key": "cache-7", "user": "ana"})
        assert keyed.headers["x-router-turn"] == "1" and edge.received[-1].body["prompt_cache_key"] == "cache-7"
        assert post(url, {"messages": messages, "prompt_cache_key": "cache-7"}).headers["x-router-turn"] == "2"
        by_user = post(url, {"messages": ASK, "user": "bo"})
        assert by_user.headers["x-router-turn"] == "1" and edge.received[-1].body["user"] == "bo"
        assert post(url, {"messages": messages, "user": "bo"}).headers["x-router-turn"] == "2"
        long_user = "u" * 1000  # no id (over 256 characters): its digest stands for it, the body keeps it
        assert post(url, {"messages": ASK, "user": long_user}).headers["x-router-turn"] == "1"
        assert post(url, {"messages": messages, "user": long_user}).headers["x-router-turn"] == "2"
        assert edge.received[-1].body["user"] == long_user
        # without any of them, a request is on its own: no conversation headers
        alone = post(url, {"messages": ASK})
        assert not {"x-router-turn", "x-router-switched", "x-router-switch"} & set(alone.headers)
        bad = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"messages": ASK},
            headers={**AUTH, "x-router-conversation": "x" * 300},
            timeout=30,
        )
        assert bad.status_code == 400 and "x-router-conversation must be 1 to 256 printable" in bad.text


@pytest.mark.parametrize(
    "stickiness, served",
    [
        ("never", ["cloud", "edge", "edge"]),
        ("always", ["cloud", "cloud", "cloud"]),
        ("priced", ["cloud", "edge", "edge"]),
    ],
)
def test_through_the_proxy_a_turn_moves_exactly_when_its_headers_say_so(bundle, stubs, stickiness, served):
    """As tests/test_conversation_surfaces.py does it through RoutedChat: turn 1 on the cloud (the
    edge failing), the next ones edge first on their own; the stubs record who served each."""
    edge, cloud = stubs
    weight = dataclasses.replace(config_for(stubs), stickiness=stickiness).stickiness_weight  # --stickiness's names
    with proxy_with(bundle, stubs, Stickiness(weight)) as (url, _):
        messages = [{"role": "user", "content": BACKGROUND}]
        seen = []
        for number, follow_up in enumerate([None, "And 3+3?", "Thanks, and 4+4?"], 1):
            if follow_up is not None:
                messages.append({"role": "user", "content": follow_up})
            edge.behaviour.status = 503 if number == 1 else 200
            before = len(cloud.received)
            response = post(url, {"messages": messages}, f"trip-{stickiness}")
            endpoint = response.headers["x-router-served-by"]
            assert (endpoint == "cloud") is (len(cloud.received) > before)  # the stub that answered
            assert response.headers["x-router-turn"] == str(number)
            if number > 1:
                moved = endpoint != seen[-1]
                assert response.headers["x-router-switched"] == str(moved).lower()
                assert response.headers["x-router-switch"].startswith(
                    f"conversation turn {number} {'moves from' if moved else 'stays on'}"
                )
            seen.append(endpoint)
            messages.append({"role": "assistant", "content": answer(response)})
    assert seen == served


def test_a_forbidden_endpoint_serves_no_turn_through_the_proxy(bundle, stubs, tmp_path):
    edge, cloud = stubs
    rules = [
        {"name": "pro-cloud", "when": {"metadata": {"tier": "pro"}}, "then": "force", "endpoint": "cloud"},
        {"name": "free-no-cloud", "when": {"metadata": {"tier": "free"}}, "then": "forbid", "endpoint": "cloud"},
    ]
    router = Router.load(bundle, strict=True, policy=write_policy(tmp_path, rules), stickiness=Stickiness(math.inf))
    with running_proxy(router, config_for(stubs)) as url:
        first = post(url, {"messages": ASK, "metadata": {"tier": "pro"}}, "policed")
        assert first.headers["x-router-served-by"] == "cloud"
        messages = [*ASK, {"role": "assistant", "content": answer(first)}]
        for number in (2, 3):
            messages.append({"role": "user", "content": f"And {number}+{number}?"})
            turn = post(url, {"messages": messages, "metadata": {"tier": "free"}}, "policed")
            assert (turn.headers["x-router-served-by"], turn.headers["x-router-rule"]) == ("edge", "free-no-cloud")
            assert turn.headers["x-router-switched"] == ("true" if number == 2 else "false")
            messages.append({"role": "assistant", "content": answer(turn)})
        edge.behaviour.status = 503
        refused = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"messages": messages, "metadata": {"tier": "free"}},
            headers={**AUTH, "x-router-conversation": "policed"},
            timeout=30,
        )
        assert refused.status_code == 502 and refused.json()["error"]["code"] == "fallback_forbidden"
    assert len(cloud.received) == 1  # turn 1 only


def test_the_dashboard_shows_the_conversations_in_a_browser(bundle, stubs):
    edge, _ = stubs
    with proxy_with(bundle, stubs, Stickiness(0), token=None) as (url, _):
        for conversation in ("one", "two"):
            messages = [{"role": "user", "content": BACKGROUND}]
            for number, follow_up in enumerate([None, "And 3+3?"], 1):
                if follow_up is not None:
                    messages.append({"role": "user", "content": follow_up})
                edge.behaviour.status = 503 if number == 1 else 200  # turn 1 on the cloud, turn 2 moves
                response = httpx2.post(
                    f"{url}/v1/chat/completions",
                    json={"messages": messages},
                    headers={"x-router-conversation": conversation},
                    timeout=30,
                )
                messages.append({"role": "assistant", "content": answer(response)})
            assert response.headers["x-router-switched"] == "true"
        httpx2.post(f"{url}/v1/chat/completions", json={"messages": ASK}, timeout=30)  # outside any
        dom = chromium_dom(f"{url}/dashboard")
    summary = {key: cells[1] for key, cells in Tables(dom).tables["conversation_summary"].items()}
    assert (summary["conversations"], summary["turns"], summary["switches"]) == ("2", "4", "2")
    assert summary["switches_per_conversation"] == "1.00" and float(summary["reprefill_cost"]) > 0
    assert "one" not in re.findall(r"<td[^>]*>([^<]*)</td>", dom)  # no conversation id on the page


# --- two proxy processes, one Redis --------------------------------------------------------------


def metric(url: str, name: str) -> float:
    text = httpx2.get(f"{url}/metrics", headers=AUTH, timeout=30).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} not on /metrics"
    return float(found.group(1))


def test_two_proxy_processes_share_conversations_and_budgets_through_redis(bundle, stubs, tmp_path):
    edge, cloud = stubs
    policy = write_policy(tmp_path, [budget_rule("user", 0.001)])
    prices = ("--cloud-price-in", "10", "--cloud-price-out", "10")  # the edge costs nothing
    with redis_on(tmp_path) as (redis_url, redis_process):
        options = ("--redis", redis_url, "--stickiness", "always", "--policy", policy, *prices)
        one = start_serving(bundle, stubs, *options)
        other = start_serving(bundle, stubs, *options)
        try:
            a, b = (f"http://127.0.0.1:{port}" for _, port, _ in (one, other))
            assert f"conversations and budgets in Redis {redis_url}" in one[2][-1]
            # a conversation started on one proxy continues on the other, on the same endpoint
            first = post(a, {"messages": ASK}, "shared")
            messages = [*ASK, {"role": "assistant", "content": answer(first)}, {"role": "user", "content": "3+3?"}]
            second = post(b, {"messages": messages}, "shared")
            assert (second.headers["x-router-turn"], second.headers["x-router-switched"]) == ("2", "false")
            assert second.headers["x-router-served-by"] == first.headers["x-router-served-by"]
            messages += [{"role": "assistant", "content": answer(second)}, {"role": "user", "content": "4+4?"}]
            assert post(a, {"messages": messages}, "shared").headers["x-router-turn"] == "3"

            # a budget spent on one proxy is spent on the other, once
            ana = {"user": "ana"}
            assert "x-router-rule" not in post(b, {"messages": ASK, "metadata": ana}).headers  # nothing spent yet
            spent = post(a, {"messages": LONG, "metadata": ana})
            assert spent.headers["x-router-served-by"] == "cloud"
            usage = spent.json()["usage"]
            cost = (usage["prompt_tokens"] * 10 + usage["completion_tokens"] * 10) / 1e6
            over = post(b, {"messages": ASK, "metadata": ana})
            assert (over.headers["x-router-rule"], over.headers["x-router-served-by"]) == ("budget-user", "edge")
            day = window("day", time.time())
            key = f"router:budget:day:{day}:4:user:ana"
            assert float(redis.Redis.from_url(redis_url).get(key)) == pytest.approx(cost)  # counted once
            assert "x-router-rule" not in post(b, {"messages": ASK, "metadata": {"user": "bo"}}).headers
            calls = len(cloud.received)

            # Redis goes away: every request is still answered, decided without its conversation's
            # state (the headers say so, /metrics counts it), and budgets read as spent (fail closed)
            redis_process.terminate()
            redis_process.wait(timeout=10)
            for url in (a, b):
                lost = post(url, {"messages": messages}, "shared")
                assert "x-router-turn" not in lost.headers and "x-router-switched" not in lost.headers
                assert lost.headers["x-router-switch"] == (
                    "conversation state unavailable: decided as a turn on its own"
                )
                newcomer = post(url, {"messages": ASK, "metadata": {"user": "cy"}})
                assert newcomer.headers["x-router-rule"] == "budget-user"  # fail closed: kept off the cloud
                assert metric(url, "router_conversation_state_errors_total") >= 2  # the read and the write
                assert metric(url, "router_budget_ledger_errors_total") >= 1
            assert len(cloud.received) == calls
        finally:
            for process, _, _ in (one, other):
                process.terminate()
            for process, _, _ in (one, other):
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


def test_redis_options_are_checked_before_anything_starts(stubs, monkeypatch):
    import argparse

    from serving.proxy._config import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    edge, cloud = stubs
    base = [
        "--bundle",
        "b",
        "--edge-url",
        edge.url,
        "--edge-model",
        "e",
        "--cloud-url",
        cloud.url,
        "--cloud-model",
        "c",
    ]

    def config(*options: str, **environ: str) -> ProxyConfig:
        return ProxyConfig.from_args(parser.parse_args([*base, *options]), environ)

    assert config().redis is None and config().stickiness_weight == 1.0
    assert config("--stickiness", "always").stickiness_weight == math.inf
    assert config("--stickiness", "0.5").stickiness_weight == 0.5
    with pytest.raises(ConfigError, match="--stickiness 'sometimes': one of never, priced, always"):
        config("--stickiness", "sometimes")
    with pytest.raises(ConfigError, match="the URL holds a password.*--redis-env VAR"):
        config("--redis", "redis://:hunter2hunter2@127.0.0.1:6379/0")
    with_password = config("--redis-env", "ROUTER_REDIS", ROUTER_REDIS="redis://:hunter2hunter2@10.0.0.5:6379/0")
    assert "hunter2hunter2" in with_password.secrets and with_password.redis_shown == "redis://:***@10.0.0.5:6379/0"
    assert "hunter2" not in repr(with_password)
    with pytest.raises(ConfigError, match="must be redis://HOST:PORT/DB"):
        config("--redis", "http://127.0.0.1:6379")
    with pytest.raises(ConfigError, match="not both"):
        config("--redis", "redis://127.0.0.1:1/0", "--redis-env", "X", X="redis://127.0.0.1:1/0")
    assert dataclasses.replace(config(), redis="unix:///run/redis.sock").redis == "unix:///run/redis.sock"
    assert json.dumps(config("--redis", "redis://127.0.0.1:6379/0").redis) == '"redis://127.0.0.1:6379/0"'
    assert CLOUD_KEY  # (fixture module)
