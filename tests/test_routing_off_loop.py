"""Router.aexecute and aexecute_endpoints route a long prompt on a worker thread (serving.execute.off_loop):
the event loop keeps running other coroutines meanwhile; a short prompt routes inline. Without a
bundle (the rule table) and with a policy of detectors, which make a long prompt's routing slow.
The proxy process under the same load: tests/test_proxy_hardening.py."""

from __future__ import annotations

import asyncio
import threading
import time

from serving import Router
from serving.execute import INLINE_CHARS
from serving.policy import PolicySet

DETECTORS = ["email", "phone", "payment_card", "iban", "national_id", "credential", "ip_address"]
RULE = {"name": "pii", "when": {"detected": DETECTORS}, "then": "forbid", "endpoint": "cloud"}


def router(tmp_path) -> Router:
    return Router.load(tmp_path / "none", policy=PolicySet.from_dict({"rules": [RULE]}))


async def answer(prompt: str) -> str:
    return "fine"


def test_a_long_prompt_is_routed_while_the_event_loop_runs_other_coroutines(tmp_path):
    """Today the loop stood still for the whole route (the ticker's longest gap was the route's
    time). Generous bound: a third of the route; what can still hold the loop is one detector call
    that keeps the GIL."""
    chooser = router(tmp_path)
    prompt = ("DE12 " * (1 << 20))[: 1 << 20]  # 1 MiB, every group a candidate IBAN

    async def main() -> tuple[float, float]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        started = time.perf_counter()
        execution = await chooser.aexecute(prompt, answer, answer)
        routed = time.perf_counter() - started
        done.set()
        await ticking
        assert execution.response == "fine"
        return max(gaps), routed

    longest_gap, routed = asyncio.run(main())
    assert longest_gap < max(routed / 3, 0.1), (longest_gap, routed)


def test_a_short_prompt_routes_inline_and_a_long_one_on_the_routing_thread(tmp_path, monkeypatch):
    chooser = router(tmp_path)
    threads: list[str] = []
    prepared = chooser._prepared

    def spy(*args):
        threads.append(threading.current_thread().name)
        return prepared(*args)

    monkeypatch.setattr(chooser, "_prepared", spy)

    async def main() -> None:
        await chooser.aexecute("What is 2+2?", answer, answer)
        await chooser.aexecute("x" * (INLINE_CHARS + 1), answer, answer)
        await chooser.aexecute_endpoints("y" * (INLINE_CHARS + 1), {"edge": answer, "cloud": answer})

    asyncio.run(main())
    assert threads[0] == "MainThread" and all(t.startswith("serving-routing") for t in threads[1:]), threads
