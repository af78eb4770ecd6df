"""Fallback threshold selection, the zone logic, and the hand rule table exactly as specified."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.thresholds import select_per_precision, select_thresholds
from serving._contract import zone_for
from serving.bundle._manifest import band_of as thresholds_for
from serving.routing._rule_table import infer_rule_domain, rule_score


def synthetic(n=2000, seed=0):
    """The score orders rows by how much the cloud helps; edge right 70%, cloud 85%."""
    rng = np.random.default_rng(seed)
    score = rng.random(n)
    q_edge = (rng.random(n) > score * 0.6).astype(float)
    q_cloud = (rng.random(n) < 0.85).astype(float)
    return score, q_edge, q_cloud


def zones(scores, t):
    return np.array([zone_for(s, t.lo, t.hi) for s in scores])


def test_quality_target_is_met_with_fewest_cloud_calls():
    score, q_edge, q_cloud = synthetic()
    t = select_thresholds(score, q_edge, q_cloud, target="quality", max_quality_drop=0.01, catch_rate=0.5)
    assert t.met_target and t.expected_quality >= q_cloud.mean() - 0.01
    z = zones(score, t)
    assert (z == "cloud").mean() == pytest.approx(t.cloud_first_share)
    # A looser target never needs more cloud calls.
    loose = select_thresholds(score, q_edge, q_cloud, target="quality", max_quality_drop=0.05, catch_rate=0.5)
    assert loose.expected_cloud_calls <= t.expected_cloud_calls


def test_budget_target_respects_the_budget():
    score, q_edge, q_cloud = synthetic()
    t = select_thresholds(score, q_edge, q_cloud, target="budget", cloud_budget=0.2, catch_rate=0.5)
    assert t.met_target and t.expected_cloud_calls <= 0.2 + 1e-9
    assert t.expected_quality > q_edge.mean()
    bigger = select_thresholds(score, q_edge, q_cloud, target="budget", cloud_budget=0.4, catch_rate=0.5)
    assert bigger.expected_quality >= t.expected_quality


def test_without_run_time_failure_signal_the_fallback_zone_is_useless():
    score, q_edge, q_cloud = synthetic()
    t = select_thresholds(score, q_edge, q_cloud, target="quality", catch_rate=0.0)
    assert t.fallback_share == 0.0  # it costs nothing but adds nothing: every row is edge or cloud


def test_unreachable_target_is_reported():
    score, q_edge, q_cloud = synthetic()
    t = select_thresholds(score, q_edge, q_cloud, target="budget", cloud_budget=0.0, catch_rate=1.0)
    assert t.expected_cloud_calls == 0.0 and t.met_target  # all edge-only is within a zero budget
    worse = select_thresholds(
        score, np.zeros_like(q_edge), np.ones_like(q_cloud), target="quality", max_quality_drop=0.0, catch_rate=0.0
    )
    assert worse.met_target and worse.cloud_first_share == 1.0


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="unknown threshold target 'cheap'"):
        select_thresholds([0.1], [1], [1], target="cheap")
    with pytest.raises(ValueError, match="zero validation rows"):
        select_thresholds([], [], [])


def test_per_precision_thresholds_fall_back_when_a_tag_is_rare():
    score, q_edge, q_cloud = synthetic(3000)
    tags = np.array(["exact"] * 2500 + ["tolerant"] * 100 + [None] * 400, dtype=object)
    chosen = select_per_precision(score, q_edge, q_cloud, tags, tags=("exact", "standard", "tolerant"), min_rows=200)
    assert chosen["exact"]["rows"] == 2500
    assert chosen["tolerant"]["lo"] == chosen["default"]["lo"] and "only 100 rows" in chosen["tolerant"]["source"]
    assert (
        thresholds_for(chosen, None)
        == thresholds_for(chosen, "standard")
        == (chosen["default"]["lo"], chosen["default"]["hi"])
    )


def test_zone_boundaries_are_inclusive_in_the_middle():
    assert [zone_for(s, 0.3, 0.7) for s in (0.29, 0.3, 0.5, 0.7, 0.71)] == [
        "edge",
        "edge_with_cloud_fallback",
        "edge_with_cloud_fallback",
        "edge_with_cloud_fallback",
        "cloud",
    ]


@pytest.mark.parametrize(
    "seq_len, domain, precision, score, zone",
    [
        (100, None, "standard", 0.0, "edge"),
        (100, "general", "exact", 0.3, "edge_with_cloud_fallback"),
        (100, "medical", "exact", 0.6, "edge_with_cloud_fallback"),
        (2000, None, "exact", 0.7, "edge_with_cloud_fallback"),  # 0.4 + 0.3 is exactly 0.7: inclusive
        (2000, "legal", None, 0.7, "edge_with_cloud_fallback"),
        (2000, "finance", "exact", 1.0, "cloud"),
        (1024, "legal", "exact", 0.6, "edge_with_cloud_fallback"),  # > 1024, not >=
        (1025, None, None, 0.4, "edge_with_cloud_fallback"),
    ],
)
def test_rule_table_exactly(seq_len, domain, precision, score, zone):
    assert rule_score(seq_len, domain, precision) == score
    assert zone_for(score, 0.3, 0.7) == zone


def test_rule_domain_from_text():
    assert infer_rule_domain("The patient presents with a fever and the physician orders blood tests") == "medical"
    assert infer_rule_domain("Is the contract enforceable in court if the defendant was a minor?") == "legal"
    assert infer_rule_domain("What is the tax on dividend income from my stock portfolio?") == "finance"
    assert infer_rule_domain("Write a poem about the sea") is None


def test_thresholds_of_an_expected_gain_score_use_its_range():
    """With scores in [-1, 1], an empty zone's threshold is the bound beyond every score."""
    scores = np.array([-0.4, -0.1, 0.2, 0.5])
    q_edge, q_cloud = np.array([1.0, 1.0, 1.0, 1.0]), np.array([0.0, 0.0, 0.0, 0.0])  # the edge is always right
    t = select_thresholds(scores, q_edge, q_cloud, bounds=(-1.0, 1.0))
    assert t.cloud_first_share == 0.0 and t.fallback_share == 0.0  # all edge: lo above every score
    assert t.lo == 1.0 and t.hi == 1.0
    t = select_thresholds(scores, 1 - q_edge, 1 - q_cloud, bounds=(-1.0, 1.0))  # only the cloud is ever right
    assert t.cloud_first_share == 1.0 and t.lo == -1.0 and t.hi == -1.0
