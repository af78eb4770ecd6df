"""The reference policy (evaluation.reference): TF-IDF + logistic regression per outcome, fitted
on the train split of the shipped logs, thresholded on its val split, scored on its test split."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.policies import POLICIES, check_policies, evaluate_policies
from evaluation.reference import ReferenceModel, ReferencePolicy
from evaluation.rows import Rows
from serving._contract import CLOUD, EDGE, FALLBACK

TARGET = dict(target="quality", max_quality_drop=0.01, catch_rate=0.5)


def rows_of(frame) -> Rows:
    """Log rows as evaluation rows; the `learned` columns are placeholders (every request on the edge)."""
    n = len(frame)
    return Rows.from_frame(frame, scores=np.zeros(n), n_tokens=np.zeros(n), zones=[EDGE] * n)


@pytest.fixture(scope="module")
def shipped(real_data_dir, tmp_path_factory) -> dict[str, Rows]:
    """The shipped logs, merged and split as `make train` splits them: {split: rows}."""
    from training.config import TrainConfig
    from training.engines.local import prepare_frame

    config = TrainConfig(data=[str(real_data_dir)], reports_dir=str(tmp_path_factory.mktemp("reports")))
    frame = prepare_frame(config).frame
    return {split: rows_of(frame[frame["split"] == split]) for split in ("train", "val", "test")}


@pytest.fixture(scope="module")
def fitted(shipped) -> ReferencePolicy:
    return ReferencePolicy.fit(shipped["train"], shipped["val"], **TARGET)


@pytest.mark.real_data
def test_the_reference_beats_random_on_the_shipped_logs(shipped, fitted):
    test = shipped["test"]
    figures, curves = evaluate_policies(test, ["reference", "random", "oracle"], reference=fitted, catch_rate=0.5)
    reference, random = figures.policies["reference"], figures.policies["random"]
    assert reference.apgr > random.apgr + 0.1, (reference.apgr, random.apgr)
    assert reference.auc > random.auc and "reference" in curves
    # An operating point with zones, not only a curve: thresholds met the target on the val rows.
    assert fitted.thresholds.met_target and fitted.thresholds.rows == len(shipped["val"])
    assert -1.0 <= fitted.thresholds.lo <= fitted.thresholds.hi <= 1.0
    assert 0.0 < reference.cloud_share < 1.0 and 0.0 < reference.fallback_share < 1.0
    assert reference.quality_with_fallback > figures.population.all_cloud_quality - 0.03
    assert reference.fallback_fires > 0 and reference.at_matched_share is not None
    scores, zones = fitted.route(test)
    assert set(zones.tolist()) == {EDGE, FALLBACK, CLOUD}
    assert ((zones == CLOUD) == (scores > fitted.thresholds.hi)).all()
    assert fitted.model.rows == {"edge": len(shipped["train"]), "cloud": len(shipped["train"]), "without_text": 0}


@pytest.mark.real_data
def test_two_fits_give_the_same_scores(shipped, fitted):
    again = ReferencePolicy.fit(shipped["train"], shipped["val"], **TARGET)
    prompts = shipped["test"].prompts
    np.testing.assert_allclose(again.model.scores(prompts), fitted.model.scores(prompts), rtol=0, atol=1e-9)
    assert again.thresholds.lo == pytest.approx(fitted.thresholds.lo, abs=1e-9)
    assert again.thresholds.hi == pytest.approx(fitted.thresholds.hi, abs=1e-9)


def kinds(counts: dict[str, int]) -> list[str]:
    """Prompts of a few kinds (names of one length), the kind's word in each of its prompts, with
    varied filler of the same length in every kind."""
    return [f"{kind} question number {i:04d} about item{i % 7}" for kind, n in counts.items() for i in range(n)]


def test_graded_outcomes_are_fractional_successes():
    """A judge score q is q of a success: prompts that all score 0.25 on the edge get the same
    P(edge good) as prompts that pass one time in four, near 0.25 (a pass/fail cut at 0.5
    would learn 0 for the first kind)."""
    prompts = kinds({"alpha": 1000, "bravo": 1000, "delta": 1000})
    passes = (np.arange(1000) % 4 == 0).astype(float)
    q_edge = np.r_[np.full(1000, 0.25), passes, np.full(1000, 0.75)]
    q_cloud = np.r_[np.full(1000, 0.9), 1 - passes, np.full(1000, 0.6)]
    model = ReferenceModel.fit(prompts, q_edge, q_cloud)
    p_edge, p_cloud = model.probabilities(prompts)
    graded, binary, high = (p_edge[k * 1000 : (k + 1) * 1000].mean() for k in range(3))
    assert abs(graded - binary) < 0.02, (graded, binary)
    np.testing.assert_allclose([graded, high], [0.25, 0.75], atol=0.05)  # L2 shrinks a little towards 0.5
    np.testing.assert_allclose([p_cloud[:1000].mean(), p_cloud[2000:].mean()], [0.9, 0.6], atol=0.05)
    np.testing.assert_allclose(model.scores(prompts), p_cloud - p_edge, atol=1e-12)


def test_an_outcome_without_failures_gets_its_log_odds():
    """A set of rows where the cloud never fails (a small fold, say) is no error: the cloud
    model is a constant, its smoothed log-odds."""
    prompts = kinds({"alpha": 20, "bravo": 20})
    model = ReferenceModel.fit(prompts, np.r_[np.ones(20), np.zeros(20)], np.ones(40))
    p_edge, p_cloud = model.probabilities(prompts)
    np.testing.assert_allclose(p_cloud, 40.5 / 41, atol=1e-12)
    assert p_edge[:20].mean() > p_edge[20:].mean()


def test_unknown_outcomes_are_left_out_of_that_outcome_only():
    """NaN = unknown: the edge model learns from every row, the cloud model only from the rows
    whose cloud outcome is known. Here every `gamma` prompt lacks its cloud outcome; were those
    rows counted as failures (or successes), P(cloud good) of a gamma prompt would follow them."""
    prompts = kinds({"alpha": 200, "bravo": 200, "gamma": 200})
    q_edge = np.r_[np.ones(200), np.zeros(200), np.ones(200)]
    q_cloud = np.r_[np.ones(200), np.zeros(200), np.full(200, np.nan)]
    model = ReferenceModel.fit(prompts, q_edge, q_cloud)
    assert model.rows == {"edge": 600, "cloud": 400, "without_text": 0}
    p_edge, p_cloud = model.probabilities(prompts[400:])
    assert p_edge.mean() > 0.8  # the edge model did learn the gamma rows
    assert abs(p_cloud.mean() - 0.5) < 0.1  # the cloud model never saw one: no evidence either way
    # A row with neither outcome teaches nothing, not even the vocabulary.
    both_unknown = ReferenceModel.fit(
        prompts + ["delta words", "delta words"], np.r_[q_edge, np.nan, np.nan], np.r_[q_cloud, np.nan, np.nan]
    )
    assert both_unknown.rows == {"edge": 600, "cloud": 400, "without_text": 0}
    assert "delta" not in both_unknown.vectorizer.vocabulary_


def test_rows_logged_without_text_are_left_out_and_counted():
    """A row kept without its text (privacy="embedding") cannot teach a text model: left out of
    both fits, counted; scoring a prompt without text is an error that says so."""
    prompts = kinds({"alpha": 50, "bravo": 50})
    q = np.r_[np.ones(50), np.zeros(50)]
    model = ReferenceModel.fit(prompts + [None, None], np.r_[q, 1, 1], np.r_[1 - q, 0, 0])
    assert model.rows == {"edge": 100, "cloud": 100, "without_text": 2}
    reference = ReferenceModel.fit(prompts, q, 1 - q)
    np.testing.assert_allclose(model.scores(prompts), reference.scores(prompts), atol=1e-12)
    with pytest.raises(ValueError, match="1 of 3 rows have no prompt text"):
        model.scores(prompts[:2] + [None])


def test_thresholds_read_only_validation_rows_with_both_outcomes(shipped):
    train, val = shipped["train"].subset(np.arange(len(shipped["train"])) < 3000), shipped["val"]
    q_cloud = val.q_cloud.copy()
    q_cloud[:100] = np.nan
    import dataclasses

    policy = ReferencePolicy.fit(train, dataclasses.replace(val, q_cloud=q_cloud), **TARGET)
    assert policy.thresholds.rows == len(val) - 100


def test_bad_input_and_unfitted_use_are_clear_errors(shipped):
    assert "reference" in POLICIES and check_policies(["reference"]) == ["learned", "reference"]
    with pytest.raises(ValueError, match="reference policy was not fitted"):
        evaluate_policies(shipped["test"], ["reference"])
    prompts = kinds({"alpha": 5, "bravo": 5})
    with pytest.raises(ValueError, match="no row with text has a known cloud_quality"):
        ReferenceModel.fit(prompts, np.r_[np.ones(5), np.zeros(5)], np.full(10, np.nan))
    with pytest.raises(ValueError, match=r"edge_quality must lie in \[0, 1\].*1\.5"):
        ReferenceModel.fit(prompts, np.r_[np.full(5, 1.5), np.zeros(5)], np.r_[np.ones(5), np.zeros(5)])
    with pytest.raises(ValueError, match="no train rows"):
        ReferencePolicy.fit(shipped["train"].subset(np.zeros(len(shipped["train"]), bool)), shipped["val"], **TARGET)
