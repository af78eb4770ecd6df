"""Router.stages: the stages route() runs, public for profiling (`make bench`): each callable
gives what route() gets from it, `timed` records every stage of the calls made inside it and
nothing after, and a degraded router has none."""

from __future__ import annotations

import pytest

from serving import Router
from serving.routing._request import Request
from serving.scoring._scorer import Scores

pytestmark = pytest.mark.real_data

PROMPT = "Which of the following best explains the difference between gross margin and operating margin?"


@pytest.fixture(scope="module")
def router(bundle) -> Router:
    return Router.load(bundle, strict=True)


def test_the_stages_are_the_callables_route_runs(router):
    stages = router.stages
    assert stages.names == ("features", "model", "decision") and stages.encoder is None  # a fused bundle
    decision = router.route(PROMPT, precision="exact")
    ids, mask, scalars, heads, n_tokens = stages.features([PROMPT], ["exact"])
    assert round(n_tokens[0]) == decision.n_tokens and ids.shape == mask.shape
    feeds = {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
    outputs = stages.model(stages.scorer.outputs, feeds, None)
    assert len(outputs) == len(stages.scorer.outputs)
    scored = Scores([decision.n_tokens], scores=[decision.score], heads=[(decision.p_edge, decision.p_cloud)])
    (again,) = stages.decision([Request(PROMPT, precision="exact")], scored)
    # The learned decision; route() also passes the familiarity check's verdict.
    assert again.score == decision.score and again.reason in decision.reason
    assert again.zone == decision.zone or decision.unfamiliar


def test_timed_records_each_stage_of_each_call_inside_it_and_nothing_after(router):
    stages = router.stages
    untimed = router.route(PROMPT, precision="exact")
    records: list[tuple[str, int]] = []
    with stages.timed(lambda name, ns: records.append((name, ns))):
        timed = router.route(PROMPT, precision="exact")
        router.route_batch([PROMPT, "What is 2 + 2?"])
    assert [name for name, _ in records] == [
        "features",
        "model",
        "decision",
        "features",
        "model",
        "decision",
    ]  # route_batch: one model call, one call of the chooser for the batch
    assert all(isinstance(ns, int) and ns > 0 for _, ns in records)
    assert timed.to_dict() == untimed.to_dict()  # timing changes no decision
    router.route(PROMPT, precision="exact")
    assert len(records) == 6  # the stages are put back when the block ends
    with pytest.raises(RuntimeError):
        with stages.timed(lambda name, ns: records.append((name, ns))):
            raise RuntimeError("a profiler that fails")
    router.route(PROMPT, precision="exact")
    assert len(records) == 6  # put back after a failure too


def test_a_degraded_router_has_no_stages(tmp_path):
    assert Router.load(tmp_path / "no-bundle").stages is None
