"""execute() runs timed edge calls on a small pool: a hanging edge costs a few threads, not one per call."""

from __future__ import annotations

import threading
import time

import pytest

from serving import Decision
from serving.execution._execute import EdgePool, execute


def decision(zone: str = "edge") -> Decision:
    return Decision.of_zone(zone, score=0.1, reason="test", degraded=False, model_version="t", n_tokens=10)


def cloud_ok(prompt):
    return f"cloud:{prompt}"


def edge_ok(prompt):
    return f"edge:{prompt}"


def served_by_edge_again(deadline_s: float = 10.0) -> bool:
    """A normal edge call is served by the edge once the pool has recovered."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if (
            execute(
                decision(), "p", edge=edge_ok, cloud=cloud_ok, edge_context_tokens=1024, edge_timeout_s=1.0
            ).served_by
            == "edge"
        ):
            return True
        time.sleep(0.05)
    return False


def test_a_hanging_edge_holds_a_bounded_number_of_threads_and_the_pool_recovers():
    release = threading.Event()
    calls = []

    def hanging(prompt):
        calls.append(prompt)
        release.wait()
        return "too late"

    baseline = threading.active_count()
    peak, results = baseline, []
    try:
        for i in range(2000):
            results.append(
                execute(
                    decision(), f"p{i}", edge=hanging, cloud=cloud_ok, edge_context_tokens=1024, edge_timeout_s=0.005
                )
            )
            peak = max(peak, threading.active_count())
    finally:
        release.set()
    assert peak <= baseline + 8, f"{peak - baseline} threads started for 2,000 edge calls"
    assert all(r.served_by == "cloud" and r.response == f"cloud:p{i}" for i, r in enumerate(results))
    timed_out = [r for r in results if r.steps[0].status == "timeout"]
    busy = [r for r in results if r.steps[0].status == "skipped"]
    assert len(timed_out) + len(busy) == 2000 and len(timed_out) == len(calls) <= 8
    assert all("exceeded 0.005 s" in r.fallback_reason for r in timed_out)
    assert all(
        r.fallback_reason.startswith("left edge=busy: edge busy")
        and r.fallback_reason.endswith(r.steps[0].detail)
        and [s.name for s in r.steps] == ["edge", "cloud"]
        for r in busy
    )
    assert served_by_edge_again()


def test_more_concurrent_calls_than_workers_wait_for_one_instead_of_skipping_the_edge():
    pool, lock, running, peak = EdgePool(2), threading.Lock(), [0], [0]

    def slow_edge(prompt):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return f"edge:{prompt}"

    results = [None] * 6

    def request(k):
        results[k] = execute(
            decision(),
            f"p{k}",
            edge=slow_edge,
            cloud=cloud_ok,
            edge_context_tokens=1024,
            edge_timeout_s=5.0,
            edge_pool=pool,
        )

    threads = [threading.Thread(target=request, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.response for r in results] == [f"edge:p{k}" for k in range(6)]
    assert peak[0] == 2  # never more edge calls at once than workers


def test_an_edge_that_times_out_by_itself_is_its_own_error_and_holds_no_worker():
    pool = EdgePool(1)

    def client_timeout(prompt):
        raise TimeoutError("read timed out after 0.2 s")

    result = execute(
        decision(),
        "p",
        edge=client_timeout,
        cloud=cloud_ok,
        edge_context_tokens=1024,
        edge_timeout_s=5.0,
        edge_pool=pool,
    )
    assert result.served_by == "cloud" and "read timed out" in result.fallback_reason
    assert pool.overrunning == 0
    assert (
        execute(
            decision(), "p", edge=edge_ok, cloud=cloud_ok, edge_context_tokens=1024, edge_timeout_s=5.0, edge_pool=pool
        ).served_by
        == "edge"
    )


def test_pool_size_must_be_positive():
    with pytest.raises(ValueError, match="at least one worker"):
        EdgePool(0)
