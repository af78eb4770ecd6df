"""execute() and aexecute() over N named endpoints (serving.execute_endpoints): the decision's
cascade is followed, and each reason to go on (an error, a timeout, the context limit, a rejected
answer) is taken and recorded in Execution.tried; a forbidden endpoint is never called; when none
serves, the error names every attempt. Plain callables that record their calls, and a telemetry
check that each attempt's span names its endpoint."""

from __future__ import annotations

import asyncio
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from serving import CloudCallError
from serving.execution._execute import EdgePool, EndpointsFailed, aexecute, execute, tried_text
from serving.monitoring import _telemetry as telemetry
from serving.policy import FallbackForbidden
from serving.routing._decision import Decision
from tests.endpoint_doubles import ORDER, SPECS, Calls, decision

SPEC_MAP = {e.name: e for e in SPECS}


def labels(execution_or_error) -> str:
    return tried_text(execution_or_error.tried)


def test_the_first_endpoint_of_the_cascade_serves_when_it_answers():
    calls = Calls()
    run = execute(decision(), "hi", endpoints=calls.sync, specs=SPEC_MAP)
    assert (run.served_by, run.response, calls.made) == ("phone-3b", "phone-3b answers hi", ["phone-3b"])
    assert labels(run) == "phone-3b=served" and run.fallback_reason is None
    assert run.expected_cost == 0.0


def test_the_cascade_order_is_the_decisions_not_the_mappings():
    calls = Calls(fail={"frontier": ConnectionError("down")})
    run = execute(decision(("frontier", "phone-3b", "onprem-8b")), "hi", endpoints=calls.sync)
    assert calls.made == ["frontier", "phone-3b"]
    assert labels(run) == "frontier=error:ConnectionError,phone-3b=served"
    assert run.fallback_code == "left frontier=error:ConnectionError"
    assert run.fallback_reason == "left frontier=error:ConnectionError: ConnectionError('down')"


def test_an_error_moves_on_to_the_next_endpoint_and_the_cost_counts_every_call():
    calls = Calls(fail={"phone-3b": RuntimeError("boom"), "onprem-8b": ConnectionError("refused")})
    run = execute(decision(n_tokens=50), "hi", endpoints=calls.sync, specs=SPEC_MAP)
    assert run.served_by == "frontier" and calls.made == list(ORDER)
    assert labels(run) == "phone-3b=error:RuntimeError,onprem-8b=error:ConnectionError,frontier=served"
    assert [t.error for t in run.tried] == ["RuntimeError", "ConnectionError", None]
    # phone free, on-prem 50 tokens at 0.0002 / 1k, frontier 0.001 a call + 50 at 0.005 / 1k
    assert run.expected_cost == pytest.approx(0 + 50 * 0.0002 / 1000 + 0.001 + 50 * 0.005 / 1000)
    assert isinstance(run.edge_error, RuntimeError)  # the first endpoint's error


def test_the_expected_cost_prices_the_answers_expected_tokens_too():
    """A call's price counts the answer's tokens the caller expects (`output_tokens`; an N-endpoint
    bundle's own when the router runs it): an endpoint priced by output is not nearly free."""
    from dataclasses import replace

    from serving.endpoints._record import Price

    output_priced = Price(per_1m_input=5.0, per_1m_output=15.0, per_call=0.001)
    specs = {**SPEC_MAP, "frontier": replace(SPEC_MAP["frontier"], price=output_priced)}
    failing = {"phone-3b": RuntimeError("boom"), "onprem-8b": ConnectionError("refused")}
    run = execute(decision(n_tokens=50), "hi", endpoints=Calls(fail=failing).sync, specs=specs, output_tokens=200)
    assert run.served_by == "frontier"
    assert [t.cost for t in run.tried] == pytest.approx(
        [0.0, 50 * 0.0002 / 1000, 0.001 + (50 * 0.005 + 200 * 0.015) / 1000]
    )
    assert run.expected_cost == pytest.approx(sum(t.cost for t in run.tried))
    unsaid = execute(decision(n_tokens=50), "hi", endpoints=Calls(fail=failing).sync, specs=specs)
    assert unsaid.expected_cost == pytest.approx(run.expected_cost - 200 * 0.015 / 1000)  # default: no answer tokens


def test_a_timeout_moves_on_sync_on_the_pool_and_async_by_cancelling():
    calls = Calls(slow={"phone-3b": 0.5})
    run = execute(
        decision(), "hi", endpoints=calls.sync, timeouts={"phone-3b": 0.05}, edge_pool=EdgePool(2), specs=SPEC_MAP
    )
    assert run.served_by == "onprem-8b" and labels(run) == "phone-3b=timeout,onprem-8b=served"
    assert run.tried[0].error == "TimeoutError" and run.steps[0].status == "timeout"
    acalls = Calls(slow={"phone-3b": 5})
    started = time.perf_counter()
    arun = asyncio.run(aexecute(decision(), "hi", endpoints=acalls.asyn, timeouts={"phone-3b": 0.05}))
    assert arun.served_by == "onprem-8b" and labels(arun) == "phone-3b=timeout,onprem-8b=served"
    assert time.perf_counter() - started < 4  # cancelled, not waited for


def test_a_timeout_names_the_endpoint_and_an_endpoints_own_timeout_error_is_its_own():
    calls = Calls(slow={"phone-3b": 0.5})
    run = execute(decision(), "hi", endpoints=calls.sync, timeouts={"phone-3b": 0.05}, edge_pool=EdgePool(2))
    assert "phone-3b call exceeded 0.05 s" in run.steps[0].detail
    arun = asyncio.run(
        aexecute(decision(), "hi", endpoints=Calls(slow={"phone-3b": 5}).asyn, timeouts={"phone-3b": 0.05})
    )
    assert "phone-3b call exceeded 0.05 s" in arun.steps[0].detail

    def gateway_timeout(prompt):
        raise TimeoutError("the gateway gave up after 30 s")

    async def agateway_timeout(prompt):
        gateway_timeout(prompt)

    sync_calls, async_calls = dict(calls.sync, **{"phone-3b": gateway_timeout}), dict(Calls().asyn)
    async_calls["phone-3b"] = agateway_timeout
    for run in (
        execute(decision(), "hi", endpoints=sync_calls, timeouts={"phone-3b": 5.0}, edge_pool=EdgePool(2)),
        asyncio.run(aexecute(decision(), "hi", endpoints=async_calls, timeouts={"phone-3b": 5.0})),
    ):
        assert run.served_by == "onprem-8b" and run.steps[0].status == "timeout"
        assert "the gateway gave up after 30 s" in run.steps[0].detail and "exceeded" not in run.steps[0].detail


def test_a_prompt_over_an_endpoints_context_limit_never_reaches_it():
    calls = Calls()
    run = execute(decision(n_tokens=100), "long", endpoints=calls.sync, specs=SPEC_MAP)  # phone-3b takes 64
    assert calls.made == ["onprem-8b"] and labels(run) == "phone-3b=context,onprem-8b=served"
    assert run.steps[0].status == "skipped" and "context limit of 64" in run.steps[0].detail
    assert run.tried[0].cost == 0.0  # not called, nothing spent


def test_a_rejected_answer_moves_on_and_the_last_answer_stands():
    calls = Calls()
    seen = []

    def accept(answer):
        seen.append(answer)
        return False  # rejects everything

    run = execute(decision(), "q", endpoints=calls.sync, accept=accept)
    assert calls.made == list(ORDER) and run.served_by == "frontier"
    assert labels(run) == "phone-3b=rejected,onprem-8b=rejected,frontier=served"
    assert seen == ["phone-3b answers q", "onprem-8b answers q"]  # the last answer is not judged
    assert [s.name for s in run.steps] == ["phone-3b", "accept", "onprem-8b", "accept", "frontier"]
    assert run.steps[0].result == "phone-3b answers q"  # the rejected answer is kept on its step


def test_an_accept_check_that_raises_counts_as_a_rejection_naming_its_class():
    def accept(answer):
        raise ValueError("judge down")

    run = execute(decision(("phone-3b", "frontier")), "q", endpoints=Calls().sync, accept=accept)
    assert labels(run) == "phone-3b=rejected:ValueError,frontier=served" and run.tried[0].error == "ValueError"


def test_a_forbidden_endpoint_is_never_called_and_no_other_serving_is_a_policy_error():
    calls = Calls(fail={"phone-3b": ConnectionError("down"), "onprem-8b": TimeoutError("slow")})
    with pytest.raises(FallbackForbidden) as caught:
        execute(decision(forbidden=("frontier",), rule="private"), "secret", endpoints=calls.sync)
    assert calls.made == ["phone-3b", "onprem-8b"]  # frontier never called
    error = caught.value
    assert error.rule == "private" and error.endpoint == "frontier"
    assert labels(error) == "phone-3b=error:ConnectionError,onprem-8b=timeout,frontier=forbidden"
    assert "policy 'private' forbids frontier" in str(error)


def test_forbidding_the_cloud_side_forbids_every_cloud_endpoint_of_the_specs():
    calls = Calls(fail={"phone-3b": ConnectionError("down"), "onprem-8b": ConnectionError("down")})
    with pytest.raises(FallbackForbidden):
        execute(decision(forbidden=("cloud",), rule="keep-local"), "secret", endpoints=calls.sync, specs=SPEC_MAP)
    assert "frontier" not in calls.made
    # Without specs it cannot know where frontier runs: refused before any call.
    calls = Calls()
    with pytest.raises(ValueError, match="does not say where"):
        execute(decision(forbidden=("cloud",), rule="keep-local"), "secret", endpoints=calls.sync)
    assert calls.made == []
    # With specs, a device endpoint still serves.
    run = execute(decision(forbidden=("cloud",)), "x", endpoints=Calls().sync, specs=SPEC_MAP)
    assert run.served_by == "phone-3b"


def test_when_every_endpoint_fails_the_error_names_each_attempt():
    calls = Calls(fail={n: ConnectionError(n) for n in ORDER})
    with pytest.raises(EndpointsFailed) as caught:
        execute(decision(n_tokens=100), "q", endpoints=calls.sync, specs=SPEC_MAP)
    error = caught.value
    assert isinstance(error, CloudCallError)  # handled wherever a cloud failure is
    assert str(error) == (
        "no endpoint served: phone-3b=context; onprem-8b=error:ConnectionError; frontier=error:ConnectionError"
        " (onprem-8b: onprem-8b; frontier: frontier)"
    )
    assert isinstance(error.__cause__, ConnectionError) and str(error.__cause__) == "frontier"
    with pytest.raises(EndpointsFailed, match="a=timeout; b=error:KeyError"):
        asyncio.run(
            aexecute(
                decision(("a", "b")),
                "q",
                endpoints=Calls(("a", "b"), fail={"a": TimeoutError(), "b": KeyError()}).asyn,
            )
        )


def test_a_decision_without_a_cascade_runs_its_zone_over_endpoints_named_edge_and_cloud():
    two = Calls(("edge", "cloud"), fail={"edge": ConnectionError("down")})
    plain = Decision.of_zone("edge", score=0.0, reason="t", degraded=False, model_version="t")
    run = execute(plain, "q", endpoints=two.sync)
    old = execute(plain, "q", edge=two.call("edge"), cloud=two.call("cloud"), edge_context_tokens=1000)
    assert (run.served_by, old.served_by) == ("cloud", "cloud")
    assert labels(run) == "edge=error:ConnectionError,cloud=served"
    cloud_zone = Decision.of_zone("cloud", score=0.0, reason="t", degraded=False, model_version="t")
    two.made.clear()
    assert execute(cloud_zone, "q", endpoints=two.sync).served_by == "cloud" and two.made == ["cloud"]
    # the accept check applies as on the two-endpoint path: in the fallback zone only
    reject = lambda answer: False  # noqa: E731
    edge_zone = Decision.of_zone("edge", score=0.0, reason="t", degraded=False, model_version="t")
    assert execute(edge_zone, "q", endpoints=Calls(("edge", "cloud")).sync, accept=reject).served_by == "edge"
    fallback = Decision.of_zone("edge_with_cloud_fallback", score=0.0, reason="t", degraded=False, model_version="t")
    assert execute(fallback, "q", endpoints=Calls(("edge", "cloud")).sync, accept=reject).served_by == "cloud"


def test_bad_arguments_are_clear_errors_before_any_call():
    calls = Calls()
    with pytest.raises(TypeError, match="not both"):
        execute(decision(), "q", edge=calls.call("x"), cloud=calls.call("y"), endpoints=calls.sync)
    with pytest.raises(TypeError, match=r"needs endpoints= \(name -> call\), or edge= and cloud="):
        execute(decision(), "q")
    with pytest.raises(ValueError, match="names 'frontier', which endpoints= does not have"):
        execute(decision(), "q", endpoints={"phone-3b": calls.call("a"), "onprem-8b": calls.call("b")})
    with pytest.raises(ValueError, match="is not an endpoint name"):
        execute(decision(("bad name",)), "q", endpoints={"bad name": calls.call("a")})
    with pytest.raises(TypeError, match="must be a callable"):
        execute(decision(("a",)), "q", endpoints={"a": "not callable"})
    assert calls.made == []


def test_each_attempt_is_a_child_span_naming_its_endpoint():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use(tracer_provider=provider)
    try:
        calls = Calls(fail={"phone-3b": ConnectionError("down")})
        execute(decision(), "q", endpoints=calls.sync)
    finally:
        telemetry.use()
    spans = exporter.get_finished_spans()
    (request,) = [s for s in spans if s.parent is None]
    attempts = sorted(
        (dict(s.attributes)["router.endpoint"], dict(s.attributes)["router.attempt.status"])
        for s in spans
        if s.parent is not None
    )
    assert attempts == [("onprem-8b", "ok"), ("phone-3b", "error")]
    assert all(dict(s.attributes)["router.attempt"] == "endpoint" for s in spans if s.parent is not None)
    assert dict(request.attributes)["router.served_by"] == "onprem-8b"
