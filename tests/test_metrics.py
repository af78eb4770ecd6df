"""Routing metrics on small cases computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.metrics import apgr, auc, cpt, operating_point, quality_curve

# 4 requests: edge right on 0 and 1, cloud right on 0, 2, 3.
Q_EDGE = np.array([1.0, 1.0, 0.0, 0.0])
Q_CLOUD = np.array([1.0, 0.0, 1.0, 1.0])


def test_curve_by_hand():
    # Scores send 2, then 3, then 0, then 1 to the cloud.
    curve = quality_curve([0.1, 0.0, 0.9, 0.8], Q_EDGE, Q_CLOUD)
    assert curve.quality.tolist() == [0.5, 0.75, 1.0, 1.0, 0.75]
    # all-edge 0.5, all-cloud 0.75: PGR = (q - 0.5) / 0.25
    assert curve.pgr.tolist() == [0.0, 1.0, 2.0, 2.0, 1.0]
    # trapezoid over f = 0, .25, .5, .75, 1
    assert apgr(curve) == pytest.approx(0.25 * (0.5 + 1.5 + 2.0 + 1.5))
    assert cpt(curve, 0.5) == pytest.approx(0.125)
    assert cpt(curve, 1.0) == pytest.approx(0.25)


def test_tied_scores_are_averaged_over_orders():
    curve = quality_curve([0.5, 0.5, 0.5, 0.5], Q_EDGE, Q_CLOUD)
    # One tied block: a straight line from all-edge to all-cloud, i.e. random routing.
    assert np.allclose(curve.quality, [0.5, 0.5625, 0.625, 0.6875, 0.75])
    assert apgr(curve) == pytest.approx(0.5)


def test_random_scores_give_apgr_near_half():
    rng = np.random.default_rng(0)
    q_edge, q_cloud = rng.integers(0, 2, 20000), rng.integers(0, 2, 20000)
    assert apgr(quality_curve(rng.random(20000), q_edge, q_cloud)) == pytest.approx(0.5, abs=0.03)


def test_degenerate_curves():
    same = np.array([1.0, 0.0])
    curve = quality_curve([0.2, 0.8], same, same)  # cloud never differs: PGR undefined
    assert np.isnan(apgr(curve)) and np.isnan(cpt(curve, 0.5))
    with pytest.raises(ValueError, match="empty"):
        quality_curve([], [], [])


def test_auc_with_ties_and_one_class():
    assert auc([0, 1, 0, 1], [0.1, 0.9, 0.2, 0.8]) == 1.0
    assert auc([0, 1], [0.5, 0.5]) == 0.5
    assert np.isnan(auc([1, 1], [0.1, 0.2]))


def test_operating_point_splits_misroutes():
    needed = np.array([0, 0, 1, 1])
    point = operating_point([True, False, False, True], Q_EDGE, Q_CLOUD, needed)
    assert point == {
        "cloud_share": 0.5,
        "quality": 0.75,
        "quality_vs_all_cloud": 0.0,
        "misroute_rate": 0.5,
        "under_routing": 0.25,
        "over_routing": 0.25,
    }
    everything_edge = operating_point([False] * 4, Q_EDGE, Q_CLOUD, needed)
    assert (everything_edge["cloud_share"], everything_edge["misroute_rate"]) == (0.0, 0.5)
    everything_cloud = operating_point([True] * 4, Q_EDGE, Q_CLOUD, needed)
    assert (everything_cloud["quality_vs_all_cloud"], everything_cloud["over_routing"]) == (0.0, 0.5)
