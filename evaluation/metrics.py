"""Routing metrics (definitions: shared docs/metrics.md, the RouteLLM paper's).

All functions take per-request arrays: `q_edge`, `q_cloud` in [0, 1], a router score
(higher = more cloud) or a boolean `to_cloud` (first target is the cloud).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _arrays(*arrays):
    out = [np.asarray(a, dtype=np.float64) for a in arrays]
    n = len(out[0])
    if n == 0:
        raise ValueError("no requests to evaluate: the input is empty")
    if any(len(a) != n for a in out):
        raise ValueError(f"arrays differ in length: {[len(a) for a in out]}")
    return out


@dataclass(frozen=True)
class Curve:
    """Quality when the top fraction `f` of requests (by score) goes to the cloud."""

    f: np.ndarray
    quality: np.ndarray
    pgr: np.ndarray  # NaN everywhere when all-cloud and all-edge quality are equal


def quality_curve(scores, q_edge, q_cloud) -> Curve:
    """Exact curve at every k/n; tied scores are spread evenly (the expectation over tie orders)."""
    scores, q_edge, q_cloud = _arrays(scores, q_edge, q_cloud)
    n = len(scores)
    order = np.argsort(-scores, kind="stable")
    gain = np.concatenate([[0.0], np.cumsum((q_cloud - q_edge)[order])])
    sorted_scores = scores[order]
    # Only block ends of tied scores are decisions a threshold can make; between them, interpolate.
    ends = np.concatenate([[0], np.flatnonzero(np.diff(sorted_scores) != 0) + 1, [n]])
    k = np.arange(n + 1)
    quality = (q_edge.sum() + np.interp(k, ends, gain[ends])) / n
    edge, cloud = q_edge.mean(), q_cloud.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        pgr = (quality - edge) / (cloud - edge) if cloud != edge else np.full(n + 1, np.nan)
    return Curve(k / n, quality, pgr)


def apgr(curve: Curve) -> float:
    """Area under PGR(f) for f in [0, 1] (trapezoid). Random = 0.5; NaN if PGR is undefined."""
    return float(np.trapezoid(curve.pgr, curve.f))


def cpt(curve: Curve, target: float) -> float:
    """Smallest cloud share with PGR >= target, interpolated between curve points."""
    pgr, f = curve.pgr, curve.f
    if np.isnan(pgr).all():
        return float("nan")
    hit = np.flatnonzero(pgr >= target - 1e-12)
    if len(hit) == 0:
        return float("nan")
    i = hit[0]
    if i == 0:
        return 0.0
    lo, hi = pgr[i - 1], pgr[i]
    return float(f[i - 1] + (target - lo) / (hi - lo) * (f[i] - f[i - 1]))


def auc(labels, scores) -> float:
    """ROC AUC of the score for the cloud-needed label; NaN when only one class is present."""
    labels, scores = np.asarray(labels), np.asarray(scores, dtype=np.float64)
    if len(labels) == 0:
        raise ValueError("no requests to evaluate: the input is empty")
    if labels.min() == labels.max():
        return float("nan")
    from scipy.stats import rankdata

    ranks = rankdata(scores)  # average ranks: ties count one half
    n_pos = int(labels.sum())
    n_neg = len(labels) - n_pos
    return float((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def operating_point(to_cloud, q_edge, q_cloud, needed) -> dict:
    """Cloud share, quality (before fallback) and misroutes of one set of decisions."""
    to_cloud = np.asarray(to_cloud, dtype=bool)
    needed = np.asarray(needed, dtype=bool)
    q_edge, q_cloud = _arrays(q_edge, q_cloud)
    quality = np.where(to_cloud, q_cloud, q_edge).mean()
    under = (~to_cloud & needed).mean()
    over = (to_cloud & ~needed).mean()
    return {
        "cloud_share": float(to_cloud.mean()),
        "quality": float(quality),
        "quality_vs_all_cloud": float(quality - q_cloud.mean()),
        "misroute_rate": float(under + over),
        "under_routing": float(under),
        "over_routing": float(over),
    }


def curve_summary(scores, q_edge, q_cloud, needed) -> dict:
    """AUC, APGR, CPT(50%), CPT(80%) of one score."""
    curve = quality_curve(scores, q_edge, q_cloud)
    return {"auc": auc(needed, scores), "apgr": apgr(curve), "cpt50": cpt(curve, 0.5), "cpt80": cpt(curve, 0.8)}
