"""The learned acceptance check: answer features, log fields, training, the SDK's
accept="learned", the fallback figures it measures, and bundles without one."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pandas as pd
import pytest

from serving.features._response_features import RESPONSE_FEATURES, response_features


def feature(values, name):
    return float(values[RESPONSE_FEATURES.index(name)])


# --- answer features --------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, steps, wrong",
    [
        ("16 - 3 - 4 = 9 eggs, so 9 * $2 = $18.", 2, 0),  # a chain is checked whole
        ("She has 3 + 4 = 8 apples.", 1, 1),
        ("That is 9 * 2 = <<9*2=18>>18 dollars.", 2, 0),  # calculator annotation and the step
        ("Total <<12*3=38>>38", 1, 1),  # a wrong calculator result
        ("(2 + 3) x 4 = 20 and 20% * 50 = 10", 2, 0),  # parentheses, x, percent
        ("Solve 2x + 3 = 7 for x.", 0, 0),  # algebra is not arithmetic
        ("1/0 = 5", 0, 0),  # nothing evaluable is skipped
    ],
)
def test_stated_arithmetic_is_recomputed(answer, steps, wrong):
    values = response_features("", answer)
    assert (feature(values, "n_steps"), feature(values, "n_wrong_steps")) == (steps, wrong)


def test_generic_signals_of_doubt_degeneration_and_truncation():
    prompt = "A farmer has 12 cows and buys 5 more. How many cows?"
    clean = response_features(prompt, "12 + 5 = 17.\nThe answer is 17.")
    assert feature(clean, "has_final_marker") == 1 and feature(clean, "final_number_derived") == 1
    assert feature(clean, "prompt_numbers_used") == 1 and feature(clean, "ends_open") == 0
    doubtful = response_features(prompt, "I'm sorry, I am not sure. Perhaps it is 17.5, wait, actually")
    assert feature(doubtful, "hedges") >= 2 and feature(doubtful, "refusals") >= 1
    assert feature(doubtful, "self_corrections") >= 2 and feature(doubtful, "final_number_fractional") == 1
    assert feature(doubtful, "ends_open") == 1
    looping = response_features(prompt, "The cows are many. " * 30)
    assert feature(looping, "repeated_trigram_share") > 0.8
    assert feature(response_features(prompt, "```python\nprint(17)\n"), "open_code_fence") == 1
    assert np.isnan(feature(clean, "logprob_mean"))
    with_logprobs = response_features(prompt, "17.", logprob_mean=-0.4, logprob_min=-3.5)
    assert (feature(with_logprobs, "logprob_mean"), feature(with_logprobs, "logprob_min")) == (
        pytest.approx(-0.4),
        pytest.approx(-3.5),
    )


def test_the_cost_is_bounded_by_the_answers_tail():
    """A huge answer is read only up to max_chars from its end (where the final answer is)."""
    tail = "so 3 + 4 = 7.\n#### 7"
    huge = "blah " * 200_000 + tail
    a = response_features("q", huge, max_chars=400)
    b = response_features("q", huge[-400:], max_chars=400)
    names = [n for n in RESPONSE_FEATURES if n not in ("log_chars", "log_length_ratio")]
    np.testing.assert_array_equal([feature(a, n) for n in names], [feature(b, n) for n in names])
    assert feature(a, "log_chars") > feature(b, "log_chars")  # the full length still counts


# --- log fields -------------------------------------------------------------------------


def test_answer_fields_are_validated_with_reasons():
    from data.schema import RowError, check_row

    base = {"prompt": "p", "edge_quality": 1, "cloud_quality": 0}
    row = check_row(
        {**base, "edge_response": "42", "edge_logprob_mean": -0.2, "edge_logprob_min": "-4"}, default_source="s"
    )
    assert (row["edge_response"], row["edge_logprob_mean"], row["edge_logprob_min"]) == ("42", -0.2, -4.0)
    assert check_row(base, default_source="s")["edge_response"] is None
    for bad, reason in [
        ({"edge_response": 42}, "edge_response is not text"),
        ({"edge_response": "a", "edge_logprob_mean": 0.5}, "cannot be positive"),
        ({"edge_logprob_min": -1.0}, "without edge_response"),
    ]:
        with pytest.raises(RowError, match=reason):
            check_row({**base, **bad}, default_source="s")


@pytest.mark.real_data
def test_routellm_logs_carry_gsm8k_and_mt_bench_answers(real_data_dir):
    from data.routellm import iter_routellm
    from data.schema import check_row

    rejects = []
    rows = [check_row(r.row, default_source="x") for r in iter_routellm(real_data_dir, rejects)]
    answered = pd.DataFrame([r for r in rows if r["edge_response"]])
    assert not rejects
    assert answered["source"].value_counts().to_dict() == {"gsm8k": 1068, "mt_bench": 160}
    mt = answered[answered["source"] == "mt_bench"]
    # The answers come out of the judge prompts without the judge's scaffolding.
    assert not mt["edge_response"].str.contains(r"\[The (?:Start|End) of|### (?:User|Assistant)").any()
    assert (mt["edge_response"].str.strip().str.len() > 0).all() and mt["edge_response"].str.len().median() > 500


# --- training, SDK, evaluation ----------------------------------------------------------


@pytest.mark.real_data
@pytest.mark.slow
def test_done_means_on_held_out_gsm8k_answers(trained_full):
    """The issue's bar, on the test split the check never saw (default `make train`)."""
    section = trained_full.manifest.acceptance
    gsm8k = section["test"]["per_source"]["gsm8k"]
    assert gsm8k["rows"] >= 150
    assert gsm8k["auc"] >= 0.75
    assert gsm8k["catch_rate"] >= 0.5 and gsm8k["false_reject_rate"] <= 0.15
    # Not a single-dataset trick: it learned from MT-Bench answers too and reports them.
    assert section["trained_on"]["per_source"]["mt_bench"] > 100
    assert "mt_bench" in section["test"]["per_source"]
    # The out-of-fold threshold holds the configured false-reject rate on the rows it was chosen on.
    assert section["cross_fitted"]["false_reject_rate"] == pytest.approx(0.12, abs=0.01)
    assert trained_full.metrics["acceptance_parity_max_abs_diff"] < 1e-5
    # The fallback figures use the measured verdicts where answers exist.
    rates = trained_full.metrics["test"]["fallback_rates"]
    assert rates["measured_rows"] == gsm8k["rows"] + section["test"]["per_source"]["mt_bench"]["rows"]


@pytest.mark.real_data
@pytest.mark.slow
def test_execute_accept_learned_rejects_a_wrong_answer(bundle):
    from serving import Router

    router = Router.load(bundle, strict=True)
    assert router.acceptor is not None
    prompt = "Tom has 12 marbles and buys 5 more bags of 3 marbles each. How many marbles does he have?"
    right = "He buys 5 * 3 = 15 marbles. 12 + 15 = 27.\n#### 27"
    wrong = "He buys 5 * 3 = 18 marbles. 12 + 18 = 31. I think maybe\n#### 31.5"
    verdict_right, verdict_wrong = router.acceptor.check(prompt, right), router.acceptor.check(prompt, wrong)
    assert verdict_right.probability > verdict_wrong.probability
    assert not verdict_wrong.accepted

    decision = router.route(prompt)
    run = router.execute(
        prompt, edge=lambda p: wrong, cloud=lambda p: "cloud: 27", accept="learned", verify_edge_zone=True
    )
    if decision.zone != "cloud":
        assert (
            run.served_by == "cloud"
            and run.fallback_reason == "left edge=rejected: the accept check rejected its answer"
        )
        assert [s.name for s in run.steps] == ["edge", "accept", "cloud"]
    # An edge callable that returns something other than text cannot be checked: the cloud answers.
    odd = router.execute(
        prompt, edge=lambda p: {"text": right}, cloud=lambda p: "cloud", accept="learned", verify_edge_zone=True
    )
    if decision.zone != "cloud":
        assert odd.served_by == "cloud" and "the accept check raised" in odd.fallback_reason
    with pytest.raises(TypeError, match="accept must be"):
        router.execute(prompt, edge=str, cloud=str, accept="learnt")


@pytest.fixture(scope="session")
def trained_without_answers(small_routellm, encoder_cache, tmp_path_factory):
    """`make train` on MMLU only: logs without any edge answer."""
    from tests.conftest import config_for
    from training.engines.base import train

    data = tmp_path_factory.mktemp("mmlu_only")
    shutil.copytree(small_routellm / "mmlu", data / "mmlu")
    return train(config_for(tmp_path_factory.mktemp("train_no_answers"), data, encoder_cache))


@pytest.mark.real_data
@pytest.mark.slow
def test_training_without_answers_says_the_bundle_has_no_check(trained_without_answers, caplog):
    from serving import Router

    manifest = json.loads((trained_without_answers.bundle / "manifest.json").read_text())
    assert manifest["acceptance"] == {"file": None, "reason": "the training logs carry no edge answers (edge_response)"}
    assert not (trained_without_answers.bundle / "acceptance.onnx").exists()
    assert trained_without_answers.metrics["test"]["fallback_rates"]["measured_rows"] == 0
    router = Router.load(trained_without_answers.bundle, strict=True)
    assert router.acceptor is None
    prompt = "What is the capital of France?"
    with caplog.at_level(logging.WARNING, logger="serving"):
        runs = [
            router.execute(
                prompt, edge=lambda p: "Paris", cloud=lambda p: "cloud", accept="learned", verify_edge_zone=True
            )
            for _ in range(3)
        ]
    warnings = [r for r in caplog.records if "no acceptance model" in r.getMessage()]
    assert len(warnings) == 1 and "no edge answers" in warnings[0].getMessage()
    if router.route(prompt).zone != "cloud":
        assert all(r.served_by == "edge" and "accept" not in [s.name for s in r.steps] for r in runs)


@pytest.mark.real_data
@pytest.mark.slow
def test_too_few_answers_give_no_model_and_say_why(small_routellm, encoder_cache, tmp_path):
    from tests.conftest import config_for
    from training.engines.base import train

    result = train(
        config_for(
            tmp_path,
            small_routellm / "mt_bench",
            encoder_cache,
            acceptance={"min_rows": 5000},
            routing={"min_rows_per_tag": 20},
        )
    )
    assert result.manifest.acceptance["file"] is None
    assert "too few edge answers" in result.manifest.acceptance["reason"]
    assert "needs 5000" in result.manifest.acceptance["reason"]  # the run's acceptance_min_rows


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda a: a.update(threshold=1.5), "acceptance.threshold"),
        (lambda a: a.update(file="missing.onnx"), "acceptance.file"),
        (lambda a: a.update(n_features=0), "acceptance.n_features"),
        (lambda a: a.update(calibration={"method": "magic"}), "acceptance.calibration.method"),
        (lambda a: a.update(file=None, reason=None), "acceptance.reason"),
    ],
)
def test_a_bad_acceptance_entry_is_refused_naming_the_field(edit, message):
    from serving.bundle._manifest import ManifestError, check_acceptance

    section = {
        "file": "acceptance.onnx",
        "n_features": 73,
        "threshold": 0.5,
        "max_response_chars": 4000,
        "calibration": {"method": "sigmoid", "a": 1.0, "b": 0.0, "in_model": True},
    }
    check_acceptance(dict(section), {"acceptance.onnx": "0" * 64})
    edit(section)
    with pytest.raises(ManifestError, match=message.replace(".", r"\.")):
        check_acceptance(section, {"acceptance.onnx": "0" * 64})


@pytest.mark.real_data
@pytest.mark.slow
def test_a_swapped_acceptance_graph_degrades_the_router(bundle, tmp_path):
    """A graph with the wrong input width is a bad bundle (strict: BundleError), even resealed."""
    from serving import Router
    from serving.bundle._bundle import BundleError
    from tests.test_bundle_hostile import reseal  # a forger's resealing: checksums rewritten

    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest.pop("manifest_sha256")
    manifest["acceptance"]["n_features"] += 1
    reseal(copy, manifest)
    with pytest.raises(BundleError, match="acceptance model inputs"):
        Router.load(copy, strict=True)
    assert Router.load(copy).degraded


# --- what the fallback is worth, measured ------------------------------------------------


def test_measured_verdicts_replace_the_assumed_catch_rate():
    from evaluation.fallback import Catch, fallback_quality, fires

    q_edge, q_cloud = np.array([1.0, 0.0, 1.0, 0.0]), np.array([1.0, 1.0, 0.0, 1.0])
    rates = Catch.for_rows([1.0, 0.0, np.nan, np.nan], assumed_catch_rate=0.5)
    # Row 0: a good answer rejected (a cloud call); row 1: a failure let through; rows 2-3 assumed.
    np.testing.assert_allclose(fires(q_edge, rates), [1.0, 0.0, 0.0, 0.5])
    np.testing.assert_allclose(fallback_quality(q_edge, q_cloud, rates), [1.0, 0.0, 1.0, 0.5])
    assert rates.describe(4) == {"measured_rows": 2, "assumed_rows": 2, "assumed_catch_rate": 0.5}
    # A number is an assumed catch rate with no false rejects, as before.
    np.testing.assert_allclose(fires(q_edge, 0.5), [0.0, 0.5, 0.0, 0.5])


def test_thresholds_use_each_rows_own_rates():
    """The chosen cut points' expected quality and cloud calls equal a direct recomputation with
    the per-row rates (which the search must reorder with the scores)."""
    from evaluation.fallback import Catch, fallback_quality, fires
    from evaluation.thresholds import select_thresholds

    rng = np.random.default_rng(3)
    n = 400
    scores = rng.uniform(-1, 1, n)
    q_edge = (rng.uniform(size=n) < 0.7 - 0.2 * scores).astype(float)
    q_cloud = (rng.uniform(size=n) < 0.85).astype(float)
    rejected = np.where(rng.uniform(size=n) < 0.5, np.nan, (rng.uniform(size=n) < 0.3).astype(float))
    rates = Catch.for_rows(rejected, 0.5)
    t = select_thresholds(scores, q_edge, q_cloud, catch_rate=rates, bounds=(-1.0, 1.0))
    edge, cloud = scores < t.lo, scores > t.hi
    middle = ~edge & ~cloud
    quality = np.where(edge, q_edge, np.where(cloud, q_cloud, fallback_quality(q_edge, q_cloud, rates)))
    calls = cloud + middle * fires(q_edge, rates)
    assert quality.mean() == pytest.approx(t.expected_quality, abs=1e-9)
    assert calls.mean() == pytest.approx(t.expected_cloud_calls, abs=1e-9)
