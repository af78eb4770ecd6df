"""execute(): what runs, when the cloud takes over, and what the trace says."""

from __future__ import annotations

import dataclasses
import time

import pytest

from serving import CloudCallError, Decision, Router
from serving.execution._execute import Step, execute


def decision(zone: str, n_tokens: int = 10) -> Decision:
    return Decision.of_zone(zone, score=0.5, reason="test", degraded=False, model_version="t", n_tokens=n_tokens)


def edge_ok(prompt):
    return f"edge:{prompt}"


def cloud_ok(prompt):
    return f"cloud:{prompt}"


def failing(prompt):
    raise ConnectionError("device busy")


def run(zone, **kwargs):
    options = {"edge": edge_ok, "cloud": cloud_ok, "edge_context_tokens": 1024, **kwargs}
    return execute(decision(zone, options.pop("n_tokens", 10)), "p", **options)


def test_cloud_first_never_touches_the_edge():
    result = run("cloud", edge=failing)
    assert (result.response, result.served_by, result.fell_back) == ("cloud:p", "cloud", False)
    assert [s.name for s in result.steps] == ["cloud"]


@pytest.mark.parametrize("zone", ["edge", "edge_with_cloud_fallback"])
def test_edge_first_answers_from_the_edge(zone):
    result = run(zone)
    assert (result.response, result.served_by, result.fallback_reason) == ("edge:p", "edge", None)
    assert [(s.name, s.status) for s in result.steps] == [("edge", "ok")]
    assert result.steps[0].seconds >= 0


@pytest.mark.parametrize("zone", ["edge", "edge_with_cloud_fallback"])
def test_edge_error_falls_back_with_the_reason(zone):
    result = run(zone, edge=failing)
    assert result.served_by == "cloud" and result.response == "cloud:p"
    assert "device busy" in result.fallback_reason
    assert [(s.name, s.status) for s in result.steps] == [("edge", "error"), ("cloud", "ok")]


def test_edge_timeout_falls_back_without_waiting():
    def slow(prompt):
        time.sleep(2)
        return "late"

    start = time.perf_counter()
    result = run("edge", edge=slow, edge_timeout_s=0.1)
    assert time.perf_counter() - start < 1.5
    assert result.served_by == "cloud" and "exceeded 0.1 s" in result.fallback_reason
    assert result.steps[0].status == "timeout"


def test_over_the_context_limit_skips_the_edge():
    result = run("edge_with_cloud_fallback", n_tokens=5000, edge=failing)
    assert result.served_by == "cloud" and "context limit of 1024" in result.fallback_reason
    assert [(s.name, s.status) for s in result.steps] == [("edge", "skipped"), ("cloud", "ok")]


def test_accept_check_applies_in_the_fallback_zone():
    rejected = run("edge_with_cloud_fallback", accept=lambda r: False)
    assert rejected.served_by == "cloud"
    assert rejected.fallback_reason == "left edge=rejected: the accept check rejected its answer"
    assert [(s.name, s.status) for s in rejected.steps] == [("edge", "ok"), ("accept", "rejected"), ("cloud", "ok")]
    accepted = run("edge_with_cloud_fallback", accept=lambda r: r.startswith("edge"))
    assert accepted.served_by == "edge"
    # Confident edge answers are not checked unless asked to be.
    assert run("edge", accept=lambda r: False).served_by == "edge"
    assert run("edge", accept=lambda r: False, verify_edge_zone=True).served_by == "cloud"


def test_cloud_failure_is_raised_with_the_edge_error_attached():
    def cloud_down(prompt):
        raise RuntimeError("503 from cloud")

    with pytest.raises(CloudCallError, match="edge=error:ConnectionError; cloud=error:RuntimeError") as caught:
        run("edge", edge=failing, cloud=cloud_down)
    assert isinstance(caught.value.edge_error, ConnectionError) and "device busy" in str(caught.value.edge_error)
    assert isinstance(caught.value.__cause__, RuntimeError) and "503 from cloud" in str(caught.value.__cause__)
    assert [s.status for s in caught.value.steps] == ["error", "error"]
    with pytest.raises(CloudCallError) as cloud_first:
        run("cloud", cloud=cloud_down)
    assert cloud_first.value.edge_error is None


@pytest.mark.real_data
def test_router_execute_end_to_end(bundle):
    router = Router.load(bundle, strict=True)
    calls = []
    result = router.execute(
        "What is 2 + 2?",
        edge=lambda p: calls.append("edge") or "4",
        cloud=lambda p: calls.append("cloud") or "4",
        precision="exact",
    )
    assert result.decision.target == calls[0] and result.response == "4"
    with pytest.raises(TypeError, match="must be a callable"):
        router.execute("hi", edge="not callable", cloud=cloud_ok)


@pytest.mark.real_data
def test_router_from_the_mlflow_registry(trained_small, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    from training.registry import router_from_mlflow

    cfg, result = trained_small
    mlflow.set_tracking_uri(cfg.mlflow.tracking_uri)
    MlflowClient().set_registered_model_alias(cfg.mlflow.registered_model, "champion", result.model_version)
    router = router_from_mlflow(
        f"models:/{cfg.mlflow.registered_model}@champion", tracking_uri=cfg.mlflow.tracking_uri, dest=tmp_path
    )
    assert not router.degraded and router.manifest.mlflow["run_id"] == result.run_id
    held = result.held_out.iloc[:20]
    scores = [router.route(p, precision=q).score for p, q in zip(held["prompt"], held["precision"])]
    assert max(abs(a - b) for a, b in zip(scores, held["score"])) <= 1e-5


# --- a request object instead of the prompt text ------------------------------------------


@dataclasses.dataclass(frozen=True)
class Asked:
    """A Routable request: the router reads `prompt`; the calls get the whole object."""

    prompt: str
    payload: str = "carried to the calls"


def test_a_request_object_reaches_the_calls_unchanged_and_each_step_keeps_its_answer():
    request, seen = Asked("p"), []

    def answering(name):
        def call(got):
            seen.append((name, got))
            return f"{name.upper()}-ANSWER"

        return call

    result = execute(
        decision("edge_with_cloud_fallback"),
        request,
        edge=answering("edge"),
        cloud=answering("cloud"),
        edge_context_tokens=1024,
        accept=lambda answer: False,
    )
    assert [(name, got is request) for name, got in seen] == [("edge", True), ("cloud", True)]
    assert (
        result.response == "CLOUD-ANSWER"
        and result.fallback_reason == "left edge=rejected: the accept check rejected its answer"
    )
    # Each call's Step keeps what it returned, the rejected edge answer too; the accept check keeps nothing.
    assert [(s.name, s.status, s.result) for s in result.steps] == [
        ("edge", "ok", "EDGE-ANSWER"),
        ("accept", "rejected", None),
        ("cloud", "ok", "CLOUD-ANSWER"),
    ]
    # Never shown: not in a Step's repr, nor the Execution's (whose response is the cloud answer).
    assert "EDGE-ANSWER" not in repr(result) and "CLOUD-ANSWER" not in repr(result.steps)
    assert result.steps[0] == Step("edge", "ok", result.steps[0].seconds)  # nor compared


def test_a_failed_call_keeps_no_result():
    result = run("edge", edge=failing)
    assert [(s.name, s.status, s.result) for s in result.steps] == [("edge", "error", None), ("cloud", "ok", "cloud:p")]


@pytest.mark.real_data
def test_router_routes_and_logs_a_request_objects_prompt_and_calls_with_the_object(bundle, tmp_path):
    """Router.execute(request, ...): request.prompt is what is routed and what the outcome log
    records; edge, cloud and the shadow run get the request object itself; a rejected edge
    answer (a Step result) is nowhere in the log."""
    import json

    from serving.monitoring._outcome_log import OutcomeLog

    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(bundle, strict=True, log=log, shadow_rate=1.0, seed=0)
    request, seen = Asked("What is 2 + 2?", payload="x" * 50), []
    assert router.route(request.prompt).target == "edge"

    def call(name, answer):
        return lambda got: seen.append((name, got)) or answer

    result = router.execute(
        request,
        call("edge", "REJECTED-EDGE-ANSWER"),
        call("cloud", "4"),
        accept=lambda answer: False,
        verify_edge_zone=True,
    )
    served = router.execute(request, call("edge", "4"), call("cloud", "SHADOW-CLOUD-ANSWER"))
    deadline = time.monotonic() + 5
    while len(seen) < 4 and time.monotonic() < deadline:  # the shadow (cloud) run of the second request
        time.sleep(0.02)
    log.close()
    assert [name for name, _ in seen] == ["edge", "cloud", "edge", "cloud"]
    assert all(got is request for _, got in seen)
    expected = router.route(request.prompt)
    assert (result.decision.zone, result.decision.score) == (expected.zone, expected.score)
    assert (result.served_by, result.steps[0].result, served.served_by) == ("cloud", "REJECTED-EDGE-ANSWER", "edge")
    on_disk = "".join(f.read_text() for f in sorted((tmp_path / "logs").glob("*.jsonl")))
    records = [json.loads(line) for line in on_disk.splitlines()]
    assert [(r["type"], r.get("prompt")) for r in records] == [
        ("request", "What is 2 + 2?"),
        ("request", "What is 2 + 2?"),
        ("shadow", None),
    ]
    assert records[2]["response"] == "SHADOW-CLOUD-ANSWER"
    assert "REJECTED-EDGE-ANSWER" not in on_disk and "x" * 50 not in on_disk
    with pytest.raises(TypeError, match=r"prompt must be str, a serving.Request, or a request whose \.prompt is str"):
        router.execute(Asked(None), edge_ok, cloud_ok)
    with pytest.raises(TypeError, match="prompt must be str, a serving.Request"):
        router.execute(b"bytes", edge_ok, cloud_ok)
