"""Scoring choices among N endpoints on one-outcome logs (evaluation.off_policy.logged_estimate,
evaluation.endpoints.logged_figures and fold_figures' `logged` rows): each request ran on one endpoint, chosen by the
logging policy with a known propensity. Checked against the full-information truth on the same
synthetic requests, where every endpoint's outcome is known."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.endpoints import ESTIMATED, figure_at, fold_figures, logged_figures
from evaluation.off_policy import MIN_PROPENSITY, logged_estimate

NAMES = ("phone", "onprem", "mid", "frontier")
PRICES = np.array([0.0, 0.0004, 0.0005, 0.005])


def world(n: int, seed: int):
    """Per request each endpoint's success probability, drawn outcomes and costs, and a chooser
    that knows the probabilities roughly (the argmax of noisy ones)."""
    rng = np.random.default_rng(seed)
    skill = rng.beta(2, 2, size=(n, len(NAMES))) * np.array([0.7, 0.8, 0.9, 1.0])
    quality = (rng.random(skill.shape) < skill).astype(float)
    cost = np.tile(PRICES, (n, 1)) * rng.uniform(0.5, 1.5, size=(n, 1))
    choice = np.argmax(skill + rng.normal(0, 0.1, skill.shape), axis=1)
    return rng, skill, quality, cost, choice


def logged_by(rng, propensities: np.ndarray, quality: np.ndarray, cost: np.ndarray):
    """One outcome per request: the endpoint the logging policy drew, with its probability."""
    n = len(quality)
    routed = np.array([rng.choice(len(NAMES), p=p) for p in propensities])
    rows = np.arange(n)
    return routed, propensities[rows, routed], quality[rows, routed], cost[rows, routed]


@pytest.mark.parametrize("logging", ["uniform", "skewed"])
def test_the_estimate_recovers_the_full_information_figures(logging):
    rng, skill, quality, cost, choice = world(20_000, seed=3)
    n = len(quality)
    if logging == "uniform":
        propensities = np.full((n, len(NAMES)), 1 / len(NAMES))
    else:  # a logging policy that favours endpoints that do well on the request: agreeing rows are not a random sample
        logits = 3.0 * skill
        propensities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    routed, propensity, q, c = logged_by(rng, propensities, quality, cost)
    estimate = logged_estimate(choice, routed, propensity, q, c)
    rows = np.arange(n)
    true_quality, true_cost = quality[rows, choice].mean(), cost[rows, choice].mean()
    # The estimate's standard error, from its effective sample size (a Bernoulli outcome: sd <= 0.5).
    se = 0.5 / np.sqrt(estimate["effective_rows"])
    assert abs(estimate["quality"] - true_quality) < 4 * se, (estimate, true_quality)
    assert abs(estimate["cost"] - true_cost) < 0.05 * true_cost
    assert estimate["agreeing_rows"] == int((choice == routed).sum())
    if logging == "skewed":
        # Unweighted, the agreeing rows overstate the chooser: the logging policy ran good endpoints more often.
        naive = q[choice == routed].mean()
        assert naive - true_quality > 4 * se


def test_rows_below_the_propensity_floor_are_left_out_and_counted():
    routed = np.array([0, 0, 1, 1])
    propensity = np.array([0.5, MIN_PROPENSITY / 2, 0.5, 0.5])
    estimate = logged_estimate(np.zeros(4, int), routed, propensity, np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(4))
    assert estimate["below_propensity_floor"] == 1
    assert estimate["agreeing_rows"] == 1 and estimate["quality"] == 1.0  # the tiny-propensity failure is not counted
    nobody = logged_estimate(np.full(4, 3), routed, propensity, np.ones(4), np.ones(4))
    assert nobody["agreeing_rows"] == 0 and np.isnan(nobody["quality"]) and nobody["effective_rows"] == 0.0


def test_each_endpoint_alone_and_the_best_of_them():
    rng, _, quality, cost, choice = world(12_000, seed=5)
    n = len(quality)
    routed, propensity, q, c = logged_by(rng, np.full((n, len(NAMES)), 0.25), quality, cost)
    figures = logged_figures(
        NAMES, {"margin": choice}, {"routed": routed, "propensity": propensity, "quality": q, "cost": c}
    )
    true_single = quality.mean(axis=0)
    assert figures["best_single"] == NAMES[int(np.argmax(true_single))]
    for k, name in enumerate(NAMES):
        assert abs(figures["single"][name]["quality"] - true_single[k]) < 0.04
    margin = figures["margin"]
    best = figures["single"][figures["best_single"]]
    assert margin["quality_minus_best_single"] == pytest.approx(margin["quality"] - best["quality"])
    assert margin["cost_saved_vs_best_single"] == pytest.approx(1 - margin["cost"] / best["cost"])


def test_fold_figures_score_the_same_choosers_on_one_outcome_rows():
    rng, skill, quality, cost, _ = world(6_000, seed=7)
    expected = np.clip(skill + rng.normal(0, 0.05, skill.shape), 0, 1)
    feasible = np.ones_like(skill, dtype=bool)
    part = lambda s: {  # noqa: E731
        "quality": quality[s],
        "expected": expected[s],
        "cost": cost[s],
        "expected_cost": cost[s],
        "feasible": feasible[s],
    }
    val, test, one = slice(0, 1500), slice(1500, 3000), slice(3000, 6000)
    n = one.stop - one.start
    routed, propensity, q, c = logged_by(rng, np.full((n, len(NAMES)), 0.25), quality[one], cost[one])
    logged = {**part(one), "routed": routed, "propensity": propensity, "quality": q, "cost": c}
    figures = fold_figures(NAMES, val=part(val), test=part(test), logged=logged)
    assert figures["logged"]["rows"] == n
    # On these rows the margin chooser's full-information figure is known: the estimate is near it.
    full = fold_figures(NAMES, val=part(val), test=part(one))
    assert abs(figures["logged"]["margin"]["quality"] - full["margin"]["quality"]) < 0.05
    assert set(figures["logged"]) >= {"margin", "budget", "matched", "cascade_first", "single", "best_single"}
    for path in ESTIMATED:
        if path[0] == "logged":
            assert np.isfinite(figure_at(figures, path)), path
    assert "logged" not in full  # no one-outcome rows: no such figures, and the estimates read NaN
    assert np.isnan(figure_at(full, ("logged", "margin", "quality")))


@pytest.mark.slow
def test_cross_validation_scores_the_choosers_on_one_outcome_rows(tmp_path, encoder_cache):
    """A simulated log of complete rows and one-outcome rows (uniform logging): the one-outcome test
    rows of each fold are scored off-policy, and agree with the complete rows' figures."""
    from data.endpoint_logs import read_endpoint_logs
    from data.simulator_endpoints import load_simulation, write_simulation
    from training.config import TrainConfig
    from training.endpoints import EndpointRows, cross_validate_endpoints

    sim = load_simulation(None)
    write_simulation(tmp_path / "full", sim, 1500, seed=0)
    write_simulation(tmp_path / "one", sim, 3000, seed=1, one_outcome=True)
    frame, rejects = read_endpoint_logs([tmp_path / "full", tmp_path / "one"], sim.names)
    assert not rejects
    rows = EndpointRows.from_frame(frame, sim.names)
    one = rows.routed >= 0
    assert one.sum() == 3000 and (rows.propensity[one] == 0.25).all()
    ran = np.isfinite(rows.quality[one])  # the routed endpoint is the one whose outcome the row holds
    assert (ran.argmax(axis=1) == rows.routed[one]).all() and (ran.sum(axis=1) == 1).all()
    result = cross_validate_endpoints(
        rows,
        sim.endpoints,
        folds=3,
        config=TrainConfig(cache_dir=str(encoder_cache)),
        output_tokens=sim.output_tokens,
        modes=("separate",),
    )
    assert result["one_outcome_rows"] == 3000 and result["complete_rows"] == 1500
    assert sum(fold["logged"]["rows"] for fold in result["per_fold"]) == 3000  # each tested once
    figures = result["estimates"]
    for point in ("margin", "budget", "matched"):
        logged, complete = figures[f"logged / {point} / quality"], figures[f"{point} / quality"]
        assert logged["n"] == 3 and abs(logged["mean"] - complete["mean"]) < 0.05, (point, logged, complete)
