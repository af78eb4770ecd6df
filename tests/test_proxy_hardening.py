"""The proxy process (`python -m serving serve`) under hostile load, against stub upstreams on
127.0.0.1: routing huge prompts through a policy's detectors leaves /health answering, a flood of
new budget holders never resets a budget already spent, and budget holder values of 1 MB do not
grow the process."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from pathlib import Path

import httpx2
import pytest

from tests.chat_stubs import ASK, LONG, fresh_stubs, stubs  # noqa: F401  (fixtures)
from tests.test_proxy import TOKEN, start_serving

pytestmark = pytest.mark.real_data  # the proxy loads the session's trained test bundle

AUTH = {"authorization": f"Bearer {TOKEN}"}
DETECTORS = ["email", "phone", "payment_card", "iban", "national_id", "credential", "ip_address"]


@contextlib.contextmanager
def proxy_process(bundle, stubs, *options: str):
    """The proxy process on an ephemeral port of 127.0.0.1: yields (its base URL, its pid)."""
    process, port, _ = start_serving(bundle, stubs, "--no-access-log", *options)
    try:
        threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe from filling
        yield f"http://127.0.0.1:{port}", process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()


def write_policy(folder: Path, rules: list[dict]) -> str:
    path = folder / "policy.json"
    path.write_text(json.dumps({"rules": rules}))
    return str(path)


def post(url: str, body: dict, timeout: float = 120) -> httpx2.Response:
    return httpx2.post(f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=timeout)


def test_health_answers_while_four_4mib_prompts_are_routed_through_detectors(bundle, stubs, tmp_path):
    """Routing ran on the event loop: /health waited for every route in progress (6.3 s here with
    four of these prompts at once, one route taking ~3 s). A long prompt is now routed on a worker
    thread; what can still hold /health is one call that keeps the GIL (a detector's regular
    expression over the whole prompt: ~0.2 s). Generous bound: a third of the quickest request."""
    rule = {"name": "pii", "when": {"detected": DETECTORS}, "then": "forbid", "endpoint": "cloud"}
    policy = write_policy(tmp_path, [rule])
    prompt = ("DE12 " * (4 << 20))[: (4 << 20) - 1024]  # every group a candidate IBAN: the detectors' slowest
    body = {"messages": [{"role": "user", "content": prompt}]}
    answered: list[tuple[int, float]] = []

    def send() -> None:
        started = time.perf_counter()
        status = post(url, body).status_code
        answered.append((status, time.perf_counter() - started))

    with proxy_process(bundle, stubs, "--policy", policy, "--queue-timeout-s", "60") as (url, _):
        assert post(url, {"messages": ASK}).status_code == 200  # warm
        senders = [threading.Thread(target=send) for _ in range(4)]
        for sender in senders:
            sender.start()
        waits = []
        with httpx2.Client(timeout=60) as client:
            while len(answered) < 4:
                asked = time.perf_counter()
                assert client.get(f"{url}/health").status_code == 200
                waits.append(time.perf_counter() - asked)
                time.sleep(0.02)
        for sender in senders:
            sender.join()
    assert [status for status, _ in answered] == [200] * 4
    quickest = min(seconds for _, seconds in answered)
    assert max(waits) < max(quickest / 3, 0.25), (max(waits), quickest, len(waits))


def budget_rule(key: str, limit: float) -> dict:
    return {
        "name": f"budget-{key}",
        "when": {"budget": {"key": key, "limit": limit, "period": "day"}},
        "then": "forbid",
        "endpoint": "cloud",
    }


def test_a_flood_of_new_budget_holders_never_resets_a_spent_budget(bundle, stubs, tmp_path):
    """The ledger holds 100,000 entries (a holder's hour, day and month). Today the least recently
    charged went first, spent or not: once ~33,000 other holders had spent, a spent budget began
    again. Here each flood request names a new holder under each of 300 budget keys (900 entries),
    so 120 requests overflow the ledger; the holder whose budget is spent stays over it."""
    keys = [f"k{i}" for i in range(300)]
    policy = write_policy(tmp_path, [budget_rule("user", 0.001), *(budget_rule(k, 1000.0) for k in keys)])
    prices = ("--edge-price-in", "1", "--edge-price-out", "1", "--cloud-price-in", "10", "--cloud-price-out", "10")
    with proxy_process(bundle, stubs, "--policy", policy, *prices) as (url, _):
        ana = {"user": "ana"}
        assert "x-router-rule" not in post(url, {"messages": ASK, "metadata": ana}).headers  # nothing spent yet
        spent = post(url, {"messages": LONG, "metadata": ana})  # the cloud answers: ~0.015 spent, over 0.001
        assert spent.headers["x-router-served-by"] == "cloud"
        assert post(url, {"messages": ASK, "metadata": ana}).headers["x-router-rule"] == "budget-user"
        with httpx2.Client(timeout=60, headers=AUTH) as client:
            for n in range(120):
                flood = {key: f"flood-{n}-{key}" for key in keys}
                response = client.post(f"{url}/v1/chat/completions", json={"messages": ASK, "metadata": flood})
                assert response.status_code == 200 and "x-router-rule" not in response.headers
        over = post(url, {"messages": ASK, "metadata": ana})
        assert over.headers.get("x-router-rule") == "budget-user"  # still spent: not forgotten
        assert "x-router-rule" not in post(url, {"messages": ASK, "metadata": {"user": "bo"}}).headers


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_budget_holder_values_of_1mb_do_not_grow_the_proxy(bundle, stubs, tmp_path):
    """Today the ledger kept each holder value as sent: 60 requests naming holders of 1 MB grew the
    proxy by 61 MB. A value over 64 characters is kept as its 32-byte digest."""
    policy = write_policy(tmp_path, [budget_rule("user", 1000.0)])
    prices = ("--edge-price-in", "1", "--edge-price-out", "1")
    with proxy_process(bundle, stubs, "--policy", policy, *prices) as (url, pid):
        with httpx2.Client(timeout=60, headers=AUTH) as client:

            def ask(n: int) -> None:
                body = {"messages": ASK, "metadata": {"user": f"{n}-" + "u" * (1 << 20)}}
                assert client.post(f"{url}/v1/chat/completions", json=body).status_code == 200

            for n in range(5):  # the process's own warm-up (buffers, the first allocations)
                ask(n)
            before = rss_bytes(pid)
            for n in range(5, 65):
                ask(n)
            grown = rss_bytes(pid) - before
    assert grown < 20 << 20, f"{grown / 1e6:.1f} MB"
