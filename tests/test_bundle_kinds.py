"""Every bundle gets every bundle feature, from the same code (issue 46): a two-endpoint bundle
(`make train`: the session's trained_small, real logs with edge answers) and an N-endpoint one
(training.endpoint_bundle: four simulated endpoints with answers) each carry a familiarity reference
computed in their graph, a learned acceptance check and a drift reference, and the same tests hold
for both: the SDK's novelty is the training pipeline's, an unfamiliar prompt gets the unfamiliar
policy, the acceptance check reads an answer as training did and execute() falls back past an answer
it rejects, and `make drift`'s report finds the bundle's own traffic like its reference and foreign
traffic unlike it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from serving import Router
from serving.monitoring._drift import DRIFT_REFERENCE_FILE
from serving.monitoring._outcome_log import OutcomeLog

FOREIGN = [  # prompts unlike both bundles' training data: another script, another register
    "请把这句话翻译成英文：我喜欢学习。",
    "今天天气怎么样？我们下午去公园散步好吗？",
    "Пожалуйста, объясните, как работает тепловой насос.",
    "日本語の文章：東京は日本の首都です。",
    "🙂🚀🔥 👩‍👩‍👧‍👦 🎉🎉🎉",
]


@dataclass
class Kind:
    """One bundle and what its training pipeline said of its held-out (test) rows."""

    name: str
    folder: Path
    prompts: list[str]
    precisions: list[str | None]
    novelty: np.ndarray  # the training pipeline's novelty of each prompt
    first_quality: dict[str, np.ndarray]  # endpoint -> each row's logged quality (NaN where unknown)
    acceptance_parity: float
    question: str  # a prompt, a good and a poor answer of the kind the acceptance check learned from
    good: str
    poor: str
    probabilities: np.ndarray  # the training pipeline's [prompts, heads] probabilities, blended (N: from raw text)


@pytest.fixture(scope="module")
def n_endpoint(tmp_path_factory, encoder_cache) -> Kind:
    """A four-endpoint bundle on 2,000 simulated rows with every endpoint's answer (cheapest_within,
    separate heads), once per test session."""
    from data.simulator_endpoints import GOOD_ANSWERS, POOR_ANSWERS
    from tests.conftest import once_per_session
    from tests.test_endpoint_bundle import simulated_bundle

    def build(tmp: Path) -> Kind:
        made, rows = simulated_bundle(tmp, encoder_cache, n=2000, seed=3, answers=True, acceptance={"rounds": 100})
        test = rows.subset(made.masks["test"])
        numbers = {"a": 12, "b": 30, "c": 42, "d": 24, "e": 54}
        return Kind(
            "n-endpoint",
            made.folder,
            [str(p) for p in test.prompts],
            list(test.precisions),
            made.novelty["test"],
            {name: test.quality[:, k] for k, name in enumerate(rows.names)},
            made.acceptance_parity,
            str(test.prompts[0]),
            GOOD_ANSWERS[0].format(**numbers),
            POOR_ANSWERS[0].format(**numbers),
            made.expected(test.prompts, test.precisions),
        )

    return once_per_session(tmp_path_factory, "bundle_kinds_n_endpoint", build)


@pytest.fixture(scope="module")
def two_endpoint(trained_small) -> Kind:
    _, result = trained_small
    test = result.test
    return Kind(
        "two-endpoint",
        result.bundle,
        [str(p) for p in test.prompts],
        list(test.precisions),
        test.novelty,
        {"edge": test.q_edge, "cloud": test.q_cloud},
        result.metrics["acceptance_parity_max_abs_diff"],
        "Tom has 12 marbles and buys 5 more bags of 3 marbles each. How many marbles does he have?",
        "He buys 5 * 3 = 15 marbles. 12 + 15 = 27.\n#### 27",
        "He buys 5 * 3 = 18 marbles. 12 + 18 = 31. I think maybe\n#### 31.5",
        np.stack([test.p_edge, test.p_cloud], axis=1),
    )


@pytest.fixture(
    params=[pytest.param("two_endpoint", marks=pytest.mark.real_data), "n_endpoint"],
    ids=["two-endpoint", "n-endpoint"],
)
def kind(request) -> Kind:
    return request.getfixturevalue(request.param)


def test_the_bundle_carries_familiarity_acceptance_and_drift(kind):
    router = Router.load(kind.folder, strict=True)
    manifest = router.manifest
    assert manifest.novelty["in_model"] and manifest.novelty["policy"] == "edge_with_cloud_fallback"
    assert manifest.novelty["output"] in {o.name for o in router.stages.scorer.session.get_outputs()}
    assert manifest.acceptance["file"] in manifest.files and router.acceptor is not None
    assert kind.acceptance_parity <= 1e-5
    assert DRIFT_REFERENCE_FILE in manifest.files
    reference = router.drift_reference()
    assert reference.model_version == manifest.model_version
    assert {"score", "novelty", "n_tokens", "prompt_chars"} <= set(reference.numeric)
    assert {"unfamiliar", "acceptance", "edge_failure"} <= set(reference.rates)
    assert 0.0 < reference.rates["unfamiliar"].value < 0.1


def test_the_lexical_blend_is_in_the_graph_and_the_sdk_reads_raw_text_as_training_did(kind):
    """The default lexical blend (training.lexical, the same stage and blend fit for two endpoints and N):
    each head blends its own outcome's TF-IDF margin, computed in model.onnx from the token ids; the
    SDK's probabilities of the held-out prompts from raw text are the training pipeline's."""
    from training.engines.base import PARITY_TOLERANCE

    router = Router.load(kind.folder, strict=True)
    manifest = router.manifest
    assert manifest.feature_spec.lexical == "blend"
    margins = [manifest.calibration[head]["lexical_blend"]["margin"] for head in manifest.score.heads]
    assert margins == [f"lexical_{name}" for name in manifest.score.heads]
    scores = router.stages.scorer.score(kind.prompts[:300], kind.precisions[:300])
    sdk = np.asarray(scores.heads if scores.expected is None else scores.expected, dtype=np.float64)
    assert sdk.shape == kind.probabilities[:300].shape
    assert np.max(np.abs(sdk - kind.probabilities[:300])) <= PARITY_TOLERANCE


def test_the_sdks_novelty_is_the_training_pipelines(kind):
    router = Router.load(kind.folder, strict=True)
    prompts, precisions = kind.prompts[:300], kind.precisions[:300]
    decisions = router.route_batch(prompts, precisions)
    novelty = np.array([d.novelty for d in decisions])
    assert np.max(np.abs(novelty - kind.novelty[: len(prompts)])) <= 1e-6
    assert [d.unfamiliar for d in decisions] == list(kind.novelty[: len(prompts)] > 1.0)
    assert np.mean(novelty > 1.0) < 0.1  # few held-out prompts are unfamiliar
    one = [router.route(p, precision=q) for p, q in zip(prompts[:40], precisions[:40])]
    assert [d.to_dict() for d in one] == [d.to_dict() for d in decisions[:40]]


def test_an_unfamiliar_prompt_gets_the_unfamiliar_policy(kind):
    """edge_with_cloud_fallback (the default): on the device first, its answer checked, a cloud endpoint
    behind it; rule_table and learned: as their names say, the reason saying why."""
    router = Router.load(kind.folder, strict=True)
    decisions = router.route_batch(FOREIGN)
    assert sum(d.unfamiliar for d in decisions) >= 3, [(d.novelty, d.reason) for d in decisions]
    for d in decisions:
        if d.unfamiliar:
            assert d.on_device[0] and not d.on_device[-1] and len(d.cascade) == 2, d
            assert d.checked == d.cascade[:1] and d.zone == "edge_with_cloud_fallback"
            assert d.reason.startswith("unfamiliar prompt (novelty ")
    learned = Router.load(kind.folder, strict=True, unfamiliar_policy="learned").route_batch(FOREIGN)
    ruled = Router.load(kind.folder, strict=True, unfamiliar_policy="rule_table").route_batch(FOREIGN)
    for d, kept, by_rule in zip(decisions, learned, ruled):
        assert kept.novelty == by_rule.novelty == d.novelty
        if d.unfamiliar:
            assert "learned" in kept.reason and "unfamiliar prompt" in kept.reason
            assert "unfamiliar prompt" in by_rule.reason
        else:
            assert kept.to_dict() == d.to_dict() == by_rule.to_dict()


def test_the_acceptance_check_rejects_a_poor_answer_and_execute_falls_back_past_it(kind):
    from serving.policy import PolicySet

    router = Router.load(kind.folder, strict=True)
    good, poor = router.acceptor.check(kind.question, kind.good), router.acceptor.check(kind.question, kind.poor)
    assert good.accepted and not poor.accepted and good.probability > poor.probability
    # The device endpoint first (a prefer), its answer checked (every answer but the last), the others behind.
    names = router.endpoint_names
    device = next(e.name for e in router._routing.chooser.endpoints if e.where == "device")
    prefer = PolicySet.from_dict(
        {"rules": [{"name": "device-first", "then": "prefer", "endpoint": device}]}, endpoints=names
    )
    router = Router.load(kind.folder, strict=True, policy=prefer)
    decision = router.route(kind.question)
    assert decision.cascade[0] == device and len(decision.cascade) >= 2, decision
    behind = decision.cascade[1]
    calls = {name: (lambda answer: lambda p: answer)(kind.poor if name == device else kind.good) for name in names}
    run = router.execute(kind.question, endpoints=calls, accept="learned", verify_edge_zone=True)
    assert run.served_by == behind and [t.label() for t in run.tried][:2] == [f"{device}=rejected", f"{behind}=served"]
    calls[device] = lambda p: kind.good
    assert router.execute(kind.question, endpoints=calls, accept="learned", verify_edge_zone=True).served_by == device


def test_make_drift_finds_the_bundles_own_traffic_like_its_reference_and_foreign_traffic_unlike_it(kind, tmp_path):
    from evaluation.drift import bundle_drift
    from serving.monitoring._drift import DriftThresholds

    def logged(folder: Path, rows, prompts=None) -> Path:
        """The held-out `rows` (or other `prompts`) executed with an outcome log, each with its first
        endpoint's logged outcome as feedback where known."""
        log = OutcomeLog(folder)
        router = Router.load(kind.folder, strict=True, log=log)
        calls = {n: (lambda p: "an answer") for n in router.endpoint_names}
        for i in rows:
            prompt, precision = (kind.prompts[i], kind.precisions[i]) if prompts is None else (prompts[i], None)
            run = router.execute(prompt, endpoints=calls, precision=precision)
            quality = kind.first_quality[run.decision.endpoint][i] if prompts is None else np.nan
            if np.isfinite(quality):
                router.feedback(run.request_id, outcomes={run.decision.endpoint: float(quality)})
        log.close()
        return folder

    sample = np.random.default_rng(0).permutation(len(kind.prompts))[:600]  # held-out rows, in no order
    # the N-endpoint bundle runs few of its few hundred test rows on the device first (18 with its lexical blend)
    fewer = DriftThresholds(min_outcomes=15)
    own = bundle_drift(kind.folder, [logged(tmp_path / "own", sample)], fewer)
    checks = {(c.name, c.statistic): c for c in own.checks}
    for name in ("score", "novelty", "prompt_chars", "precision", "zone"):
        assert checks[(name, "psi")].status != "skipped", checks[(name, "psi")]
    assert checks[("edge_failure", "change")].status != "skipped", checks[("edge_failure", "change")]
    assert own.verdict in ("stable", "watch") and checks[("unfamiliar", "change")].status == "stable", own.as_dict()

    foreign = [f"{FOREIGN[i % len(FOREIGN)]} ({i})" for i in range(150)]
    shifted = bundle_drift(kind.folder, [logged(tmp_path / "foreign", range(len(foreign)), foreign)], fewer)
    assert shifted.verdict == "retrain", shifted.as_dict()
    assert {(c.name, c.statistic): c for c in shifted.checks}[("unfamiliar", "change")].status == "retrain"
