"""Offline-evaluation figures (evaluation.metrics, evaluation.policies) on cases computed by hand,
including the degenerate ones: one class, tied scores, zero and full cloud share, empty input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.fallback import fallback_quality, fires
from evaluation.figures import Comparison, Cost, KeyFigures, SplitSummary
from evaluation.metrics import (
    CostModel,
    LatencyModel,
    at_share,
    cost_figures,
    fallback_figures,
    latency_figures,
    random_zone_probabilities,
    reliability,
    weighted_quantile,
    zone_probabilities,
)
from evaluation.policies import (
    TunedRules,
    check_policies,
    evaluate_policies,
    length_buckets,
    policy_figures,
    rule_table_scores,
    tune_rule_table,
)
from evaluation.rows import Rows
from serving._contract import CLOUD, EDGE, FALLBACK

# 4 requests: edge right on 0 and 1, cloud right on 0, 2, 3; the cloud is needed on 2 and 3.
Q_EDGE = np.array([1.0, 1.0, 0.0, 0.0])
Q_CLOUD = np.array([1.0, 0.0, 1.0, 1.0])
NEEDED = np.array([0, 0, 1, 1])
SCORES = np.array([0.1, 0.0, 0.9, 0.8])  # ranks 2, 3, 0, 1
ZONES = np.array([EDGE, FALLBACK, FALLBACK, CLOUD], dtype=object)
PHONE = LatencyModel(edge_ms={"phone": 120.0}, cloud_ms=200.0, network_ms=50.0)


# --- value at a cloud share -------------------------------------------------------------------------


def test_at_share_by_hand():
    half = at_share(SCORES, Q_EDGE, Q_CLOUD, NEEDED, 0.5)  # rows 2 and 3 to the cloud: the oracle's choice
    assert half == pytest.approx(
        {
            "cloud_share": 0.5,
            "quality": 1.0,
            "quality_vs_all_cloud": 0.25,
            "pgr": 2.0,
            "misroute_rate": 0.0,
            "under_routing": 0.0,
            "over_routing": 0.0,
        }
    )
    quarter = at_share(SCORES, Q_EDGE, Q_CLOUD, NEEDED, 0.25)  # row 2 only: row 3 under-routed
    assert (quarter["quality"], quarter["under_routing"], quarter["over_routing"]) == pytest.approx((0.75, 0.25, 0))
    between = at_share(SCORES, Q_EDGE, Q_CLOUD, NEEDED, 0.375)  # interpolated between k=1 and k=2
    assert (between["quality"], between["misroute_rate"]) == pytest.approx((0.875, 0.125))


def test_at_share_zero_and_full():
    zero = at_share(SCORES, Q_EDGE, Q_CLOUD, NEEDED, 0.0)
    assert zero == pytest.approx(
        {
            "cloud_share": 0.0,
            "quality": 0.5,
            "quality_vs_all_cloud": -0.25,
            "pgr": 0.0,
            "misroute_rate": 0.5,
            "under_routing": 0.5,
            "over_routing": 0.0,
        }
    )
    full = at_share(SCORES, Q_EDGE, Q_CLOUD, NEEDED, 1.0)
    assert (full["quality"], full["pgr"], full["under_routing"], full["over_routing"]) == pytest.approx(
        (0.75, 1, 0, 0.5)
    )


def test_at_share_tied_scores_is_the_random_expectation():
    tied = at_share(np.full(4, 0.5), Q_EDGE, Q_CLOUD, NEEDED, 0.5)
    # Half of each kind of row goes to the cloud: quality on the diagonal, half the needed ones missed.
    assert (tied["quality"], tied["under_routing"], tied["over_routing"]) == pytest.approx((0.625, 0.25, 0.25))


def test_at_share_one_class():
    same = np.array([1.0, 0.0, 1.0, 0.0])  # the cloud never beats the edge: nothing is needed
    nothing = at_share(SCORES, same, same, np.zeros(4), 0.25)
    assert (nothing["under_routing"], nothing["over_routing"]) == pytest.approx((0.0, 0.25))
    assert math.isnan(nothing["pgr"])  # no gap between all-edge and all-cloud to close
    everything = at_share(SCORES, np.zeros(4), np.ones(4), np.ones(4), 0.25)
    assert (everything["under_routing"], everything["over_routing"], everything["pgr"]) == pytest.approx(
        (0.75, 0, 0.25)
    )


def test_at_share_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        at_share([], [], [], [], 0.5)
    with pytest.raises(ValueError, match="1.5"):
        at_share(SCORES, Q_EDGE, Q_CLOUD, NEEDED, 1.5)


# --- fallback, cost, latency -------------------------------------------------------------------------


def test_fallback_by_hand_and_consistent_with_policy_figures():
    probs = zone_probabilities(ZONES)
    fb = fallback_figures(probs, Q_EDGE, Q_CLOUD, catch_rate=0.5)
    # Only row 2 can fire (fallback zone, edge wrong): 0.5 of the time, and the cloud is right then.
    assert fb == pytest.approx(
        {"fallback_fires": 0.125, "fallback_fires_in_zone": 0.25, "fallback_recovered_quality": 0.125}
    )
    assert policy_figures(SCORES, ZONES, Q_EDGE, Q_CLOUD, NEEDED)["quality"] == 0.75
    # The same expectation the thresholds optimise (evaluation.fallback), summed over the zone.
    in_zone = np.asarray(ZONES) == FALLBACK
    assert fb["fallback_fires"] == pytest.approx((fires(Q_EDGE, 0.5) * in_zone).mean())
    assert fb["fallback_recovered_quality"] == pytest.approx(
        ((fallback_quality(Q_EDGE, Q_CLOUD, 0.5) - Q_EDGE) * in_zone).mean()
    )
    assert fallback_figures(probs, Q_EDGE, Q_CLOUD, catch_rate=0.0)["fallback_fires"] == 0.0
    assert fallback_figures(probs, Q_EDGE, Q_CLOUD, catch_rate=1.0)["fallback_fires"] == 0.25
    no_zone = fallback_figures(zone_probabilities([EDGE] * 4), Q_EDGE, Q_CLOUD, catch_rate=0.5)
    assert no_zone["fallback_fires"] == 0.0 and math.isnan(no_zone["fallback_fires_in_zone"])
    with pytest.raises(ValueError, match="catch_rate.*1.2"):
        fallback_figures(probs, Q_EDGE, Q_CLOUD, catch_rate=1.2)


def test_cost_by_hand():
    model = CostModel(edge=0.001, cloud={"fp8": 0.003})
    cost = cost_figures(zone_probabilities(ZONES), Q_EDGE, catch_rate=0.5, model=model)["fp8"]
    # edge 0.001, fallback (edge right) 0.001, fallback (edge wrong) 0.001 + 0.5 * 0.003, cloud 0.003
    assert cost == pytest.approx({"per_request": 0.001875, "total": 0.0075, "reduction_vs_all_cloud": 0.375})
    free_edge = CostModel()  # baseline.md: edge 0, FP8 0.003, FP16 0.008
    all_edge = cost_figures(zone_probabilities([EDGE] * 4), Q_EDGE, catch_rate=0.5, model=free_edge)
    all_cloud = cost_figures(zone_probabilities([CLOUD] * 4), Q_EDGE, catch_rate=0.5, model=free_edge)
    assert all_edge["fp8"]["per_request"] == 0.0 and all_edge["fp16"]["reduction_vs_all_cloud"] == 1.0
    assert all_cloud["fp16"]["per_request"] == pytest.approx(0.008)
    assert all_cloud["fp8"]["reduction_vs_all_cloud"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="-1"):
        CostModel(edge=-1)


def test_latency_by_hand():
    latency = latency_figures(zone_probabilities(ZONES), Q_EDGE, catch_rate=0.5, model=PHONE)["phone"]
    # 120, 120, 120 or 120 + 250 (half each), 250: mean 183.75; weight of 370 ms is 0.5 of 4 > 5%.
    assert latency == pytest.approx({"mean_ms": 183.75, "p95_ms": 370.0})
    edge = latency_figures(zone_probabilities([EDGE] * 4), Q_EDGE, catch_rate=0.5, model=PHONE)["phone"]
    cloud = latency_figures(zone_probabilities([CLOUD] * 4), Q_EDGE, catch_rate=0.5, model=PHONE)["phone"]
    assert edge == {"mean_ms": 120.0, "p95_ms": 120.0} and cloud == {"mean_ms": 250.0, "p95_ms": 250.0}
    laptop = latency_figures(zone_probabilities([EDGE] * 4), Q_EDGE, catch_rate=0.5, model=LatencyModel())
    assert laptop["laptop"]["mean_ms"] == 50.0 and laptop["phone"]["mean_ms"] == 120.0


def test_weighted_quantile_matches_inverted_cdf():
    values = np.array([5.0, 1.0, 3.0, 3.0, 9.0, 7.0])
    for q in (0.05, 0.5, 0.95, 1.0):
        assert weighted_quantile(values, np.ones(6), q) == np.percentile(values, q * 100, method="inverted_cdf")
    assert weighted_quantile([1.0, 2.0], [0.9, 0.1], 0.95) == 2.0
    with pytest.raises(ValueError, match="empty"):
        weighted_quantile([], [], 0.5)


def test_random_zone_probabilities():
    probs = random_zone_probabilities(3, cloud_share=0.25, fallback_share=0.5)
    assert probs.tolist() == [[0.25, 0.5, 0.25]] * 3
    with pytest.raises(ValueError, match="0.8"):
        random_zone_probabilities(3, cloud_share=0.8, fallback_share=0.5)
    with pytest.raises(ValueError, match="bogus"):
        zone_probabilities(["bogus"])


# --- calibration ------------------------------------------------------------------------------------


def test_reliability_by_hand():
    table = reliability([0.05, 0.15, 0.15, 0.95], [0, 0, 1, 1], bins=10)
    # |0.05 - 0| * 1/4 + |0.15 - 0.5| * 2/4 + |0.95 - 1| * 1/4
    assert table["ece"] == pytest.approx(0.2)
    assert [(round(b["lo"], 9), b["rows"], b["observed_rate"]) for b in table["bins"]] == [
        (0.0, 1, 0.0),
        (0.1, 2, 0.5),
        (0.9, 1, 1.0),
    ]
    assert reliability([0.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], bins=4)["bins"][-1]["rows"] == 2  # 1.0 in the last bin
    assert reliability([0.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])["ece"] == 0.0


def test_reliability_degenerate():
    assert reliability([0.5, 0.5], [0, 1])["ece"] == 0.0  # tied scores, rate matches
    assert reliability([0.2, 0.2, 0.2], [0, 0, 0])["ece"] == pytest.approx(0.2)  # one class
    with pytest.raises(ValueError, match="empty"):
        reliability([], [])
    with pytest.raises(ValueError, match="1.5"):
        reliability([0.5, 1.5], [0, 1])
    with pytest.raises(ValueError, match="bins"):
        reliability([0.5], [1], bins=0)


# --- policies on the same rows ------------------------------------------------------------------------


def rows_of(q_edge, q_cloud, needed, *, scores, zones, n_tokens=None, domains=None, precisions=None):
    n = len(q_edge)
    return Rows.build(
        prompts=[f"prompt {i}" for i in range(n)],
        precisions=precisions or ["exact"] * n,
        domains=domains or [None] * n,
        sources=["s"] * n,
        n_tokens=n_tokens or [10] * n,
        q_edge=q_edge,
        q_cloud=q_cloud,
        needed=needed,
        scores=scores,
        zones=zones,
    )


def test_policies_by_hand():
    rows = rows_of(
        Q_EDGE,
        Q_CLOUD,
        NEEDED,
        scores=SCORES,
        zones=ZONES,
        n_tokens=[10, 2000, 10, 10],
        domains=["legal", None, "math", None],
        precisions=["exact", None, "standard", "exact"],
    )
    figures, curves = evaluate_policies(
        rows, ["rule_table", "random", "all_edge", "all_cloud", "oracle"], catch_rate=0.5
    )
    assert (
        figures.population.all_edge_quality,
        figures.population.all_cloud_quality,
        figures.population.oracle_quality,
    ) == (0.5, 0.75, 1.0)
    p = figures.policies
    assert list(p) == ["learned", "rule_table", "random", "all_edge", "all_cloud", "oracle"]
    assert figures.matched_cloud_share == 0.25 and p["learned"].misroute_rate == 0.25  # row 2 under
    # Rule scores 0.6, 0.4, 0.0, 0.3: fallback, fallback, edge, fallback (0.3 is inclusive).
    assert (p["rule_table"].cloud_share, p["rule_table"].fallback_share) == (0.0, 0.75)
    # Random at the learned shares (cloud 1/4, fallback 1/2): the expectation, exactly.
    assert p["random"].quality == pytest.approx(0.75 * 0.5 + 0.25 * 0.75)
    assert (p["random"].under_routing, p["random"].over_routing) == pytest.approx((0.75 * 0.5, 0.25 * 0.5))
    assert p["random"].apgr == pytest.approx(0.5)
    assert p["random"].fallback_fires == pytest.approx(0.5 * 0.5 * 0.5)  # zone share x catch x edge wrong
    assert (p["all_edge"].cloud_share, p["all_edge"].misroute_rate, p["all_edge"].quality) == (0.0, 0.5, 0.5)
    assert (p["all_cloud"].cloud_share, p["all_cloud"].over_routing) == (1.0, 0.5)
    assert math.isnan(p["all_edge"].apgr) and "all_edge" not in curves and p["all_cloud"].at_matched_share is None
    assert (p["oracle"].misroute_rate, p["oracle"].quality, p["oracle"].pgr) == (0.0, 1.0, 2.0)
    assert p["oracle"].at_matched_share.quality == pytest.approx(0.75)


def test_typed_figures_read_back_from_their_json(tmp_path):
    """Comparison and SplitSummary as metrics.json and manifests hold them: JSON and back gives
    the same figures; a missing or unknown key is an error that names it."""
    import json

    rows = rows_of(Q_EDGE, Q_CLOUD, NEEDED, scores=SCORES, zones=ZONES)
    figures, _ = evaluate_policies(rows, ["rule_table", "random", "all_edge", "oracle"], catch_rate=0.5)
    text = json.dumps(figures.as_dict())
    again = Comparison.from_dict(json.loads(text))
    assert json.dumps(again.as_dict()) == text and isinstance(again.policies["random"].cost["fp8"], Cost)
    assert again.policies["all_edge"].at_matched_share is None and again.population.rows == 4
    summary = figures.summary()
    assert set(summary.policies) == set(figures.policies)
    assert (
        SplitSummary.from_dict(json.loads(json.dumps(summary.as_dict()))).as_dict().keys() == summary.as_dict().keys()
    )
    assert summary.as_dict()["rule_table"]["apgr"] == figures.policies["rule_table"].apgr
    broken = summary.as_dict()
    del broken["learned"]["misroute_rate"]
    with pytest.raises(ValueError, match="policy figures: missing misroute_rate"):
        SplitSummary.from_dict(broken)
    with pytest.raises(ValueError, match="unknown key 'quality_at'"):
        KeyFigures.from_dict({**summary.policies["learned"].as_dict(), "quality_at": 0.1})


def test_policies_degenerate_rows():
    one_class = rows_of([1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0, 0, 0], scores=[0.2, 0.2, 0.2], zones=[EDGE, EDGE, EDGE])
    figures, _ = evaluate_policies(one_class, ["oracle", "random"])
    learned = figures.policies["learned"]
    assert math.isnan(learned.apgr) and math.isnan(learned.auc) and learned.misroute_rate == 0.0
    full = rows_of(Q_EDGE, Q_CLOUD, NEEDED, scores=[0.9] * 4, zones=[CLOUD] * 4)
    figures, _ = evaluate_policies(full, ["random"])
    assert figures.matched_cloud_share == 1.0
    assert figures.policies["random"].quality == pytest.approx(0.75)
    with pytest.raises(ValueError, match="empty"):
        evaluate_policies(full.subset(np.zeros(4, bool)), ["random"])


def test_policy_names_are_checked():
    assert check_policies(["oracle", "rule_table"]) == ["learned", "rule_table", "oracle"]
    with pytest.raises(ValueError, match="'magic'"):
        check_policies(["learned", "magic"])


def test_length_buckets():
    assert length_buckets([1, 64, 65, 256, 1024, 1025]).tolist() == [
        "up to 64 tokens",
        "up to 64 tokens",
        "65-256 tokens",
        "65-256 tokens",
        "257-1024 tokens",
        "over 1024 tokens",
    ]


# --- tuned rule table ---------------------------------------------------------------------------------


def test_tuned_rules_with_hand_weights_are_the_rule_table():
    n_tokens, domains = [10, 2000, 2000, 10, 2000], ["legal", "legal", None, None, "finance"]
    precisions = ["exact", "exact", None, "standard", "exact"]
    hand = TunedRules(units=10, weights=(4, 3, 3), lo=0.3, hi=0.7, fit={})
    scores = hand.scores(n_tokens, domains, precisions)
    assert scores.tolist() == rule_table_scores(n_tokens, domains, precisions).tolist() == [0.6, 1.0, 0.4, 0.0, 1.0]


def test_tuned_rules_find_what_the_hand_weights_miss():
    # Legal prompts need the cloud; long prompts do not. The hand table ranks long above legal.
    n_tokens = [2000] * 4 + [10] * 4 + [10] * 12
    domains = [None] * 4 + ["legal"] * 4 + [None] * 12
    q_edge = np.array([1.0] * 4 + [0.0] * 4 + [1.0] * 12)
    q_cloud = np.ones(20)
    tuned = tune_rule_table(
        n_tokens, domains, ["exact"] * 20, q_edge, q_cloud, target="quality", max_quality_drop=0.0, catch_rate=0.0
    )
    weights = tuned.as_dict()["weights"]
    assert weights["rule_domain"] > weights["long_prompt"]
    zones = [
        CLOUD if s > tuned.hi else EDGE if s < tuned.lo else FALLBACK
        for s in tuned.scores(n_tokens, domains, ["exact"] * 20)
    ]
    assert zones == [EDGE] * 4 + [CLOUD] * 4 + [EDGE] * 12  # exactly the oracle
    assert tuned.fit["expected_cloud_calls"] == pytest.approx(0.2) and tuned.fit["met_target"]


def test_tuned_rules_ties_keep_the_hand_weights_and_bad_step_is_an_error():
    tied = tune_rule_table([10] * 4, [None] * 4, ["exact"] * 4, np.ones(4), np.ones(4))
    assert tied.weights == (4, 3, 3)
    with pytest.raises(ValueError, match="0.3"):
        tune_rule_table([10], [None], ["exact"], [1.0], [1.0], step=0.3)
    with pytest.raises(ValueError, match="no rows"):
        tune_rule_table([], [], [], [], [])
