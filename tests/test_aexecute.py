"""aexecute() applies execute()'s rules to coroutines: every scenario gives the same Execution
(or the same CloudCallError) whether the calls are plain functions or coroutines."""

from __future__ import annotations

import asyncio

import pytest

from serving import CloudCallError, Decision
from serving.execution._execute import aexecute, execute


def decision(zone: str, n_tokens: int = 10) -> Decision:
    return Decision.of_zone(zone, score=0.5, reason="test", degraded=False, model_version="t", n_tokens=n_tokens)


def answer(name):
    return lambda prompt: f"{name}:{prompt}"


def failing(message):
    def call(prompt):
        raise ConnectionError(message)

    return call


def as_coroutine(fn):
    async def call(prompt):
        return fn(prompt)

    return call


def run(mode: str, zone: str, *, edge=answer("edge"), cloud=answer("cloud"), n_tokens: int = 10, **options):  # noqa: B008
    """execute() or aexecute() on the same plain callables (wrapped as coroutines for the async one)."""
    args = dict(edge_context_tokens=1024, **options)
    if mode == "sync":
        return execute(decision(zone, n_tokens), "p", edge=edge, cloud=cloud, **args)
    return asyncio.run(
        aexecute(decision(zone, n_tokens), "p", edge=as_coroutine(edge), cloud=as_coroutine(cloud), **args)
    )


def trace(result):
    return (
        result.response,
        result.served_by,
        result.fallback_reason,
        [(s.name, s.status, s.detail, s.result) for s in result.steps],
    )


SCENARIOS = {
    "cloud first": dict(zone="cloud", edge=failing("never called")),
    "edge answers": dict(zone="edge"),
    "edge fails": dict(zone="edge_with_cloud_fallback", edge=failing("device busy")),
    "over the context limit": dict(zone="edge", n_tokens=5000, edge=failing("never called")),
    "accept rejects": dict(zone="edge_with_cloud_fallback", accept=lambda r: False),
    "accept passes": dict(zone="edge_with_cloud_fallback", accept=lambda r: r.startswith("edge")),
    "confident edge unchecked": dict(zone="edge", accept=lambda r: False),
    "confident edge checked": dict(zone="edge", accept=lambda r: False, verify_edge_zone=True),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_async_path_follows_the_same_rules(scenario):
    options = SCENARIOS[scenario]
    sync, async_ = run("sync", **options), run("async", **options)
    assert trace(sync) == trace(async_)
    assert type(sync.edge_error) is type(async_.edge_error)


def test_the_edge_error_is_kept_on_a_fallback():
    result = run("async", "edge", edge=failing("device busy"))
    assert isinstance(result.edge_error, ConnectionError) and "device busy" in result.fallback_reason
    assert run("async", "edge").edge_error is None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_cloud_failure_carries_the_edge_error_and_the_decision(mode):
    with pytest.raises(CloudCallError, match="edge=error:ConnectionError; cloud=error:ConnectionError") as caught:
        run(mode, "edge", edge=failing("device busy"), cloud=failing("cloud down"))
    assert isinstance(caught.value.edge_error, ConnectionError) and caught.value.decision.zone == "edge"
    assert "device busy" in str(caught.value.edge_error) and "cloud down" in str(caught.value.__cause__)
    assert [s.status for s in caught.value.steps] == ["error", "error"]


def test_an_overrunning_async_edge_is_cancelled_and_the_cloud_serves():
    cancelled = []

    async def slow(prompt):
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "late"

    async def main():
        return await aexecute(
            decision("edge"),
            "p",
            edge=slow,
            cloud=as_coroutine(answer("cloud")),
            edge_context_tokens=1024,
            edge_timeout_s=0.05,
        )

    result = asyncio.run(main())
    assert (
        result.served_by == "cloud"
        and result.fallback_reason == "left edge=timeout: TimeoutError('edge call exceeded 0.05 s')"
    )
    assert result.steps[0].status == "timeout" and cancelled == [True]


@pytest.mark.real_data
def test_router_aexecute_routes_a_request_objects_prompt_and_awaits_the_calls_with_it(bundle):
    from serving import Router
    from tests.test_sdk_execute import Asked

    router, request, seen = Router.load(bundle, strict=True), Asked("What is 2 + 2?"), []

    async def call(got):
        seen.append(got)
        return "answer"

    result = asyncio.run(router.aexecute(request, call, call, accept=lambda answer: False, verify_edge_zone=True))
    expected = router.route(request.prompt)
    assert (result.decision.zone, result.decision.score) == (expected.zone, expected.score)
    assert len(seen) == 2 and all(got is request for got in seen)  # edge, rejected, then the cloud
    assert [(s.name, s.result) for s in result.steps] == [("edge", "answer"), ("accept", None), ("cloud", "answer")]
