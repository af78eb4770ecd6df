"""Routing metrics (definitions: docs/metrics.md; N endpoints: docs/endpoints.md#definitions). Two endpoints:
per-request `q_edge`, `q_cloud` in [0, 1], and a score (higher = more cloud), a boolean `to_cloud`, or (n, 3) zone
probabilities over serving's ZONES (one-hot for a deterministic router, constant rows for random routing). Every figure
is an exact expectation, never a sample."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evaluation import fallback
from serving._contract import ZONES

Z95 = 1.959963984540054  # the normal 97.5% quantile


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
    pgr = (quality - edge) / (cloud - edge) if cloud != edge else np.full(n + 1, np.nan)
    return Curve(k / n, quality, pgr)


def apgr(curve: Curve) -> float:
    """Area under PGR(f) for f in [0, 1] (trapezoid). Random = 0.5; NaN if PGR is undefined."""
    return float(np.trapezoid(curve.pgr, curve.f))


def cpt(curve: Curve, target: float) -> float:
    """Smallest cloud share with PGR >= target, interpolated between curve points."""
    return first_reach(curve.f, curve.pgr, target)


def first_reach(x, y, target: float) -> float:
    """The least x at which the curve y(x) reaches `target`, interpolated; NaN when it never does."""
    hit = np.flatnonzero(np.asarray(y) >= target - 1e-12)
    if not len(hit):
        return float("nan")
    i = hit[0]
    if i == 0:
        return float(x[0])
    return float(x[i - 1] + (target - y[i - 1]) / (y[i] - y[i - 1]) * (x[i] - x[i - 1]))


def envelope(costs, qualities) -> tuple[np.ndarray, np.ndarray]:
    """The corners, by cost, of the upper concave envelope of (cost, quality) points: what mixing
    two prices at random can reach."""
    order = np.lexsort((-np.asarray(qualities), np.asarray(costs)))
    hull: list[tuple[float, float]] = []
    for c, q in zip(np.asarray(costs)[order], np.asarray(qualities)[order]):
        if hull and q <= hull[-1][1]:
            continue  # costs more, no better
        while len(hull) >= 2:
            (c1, q1), (c2, q2) = hull[-2], hull[-1]
            if (q2 - q1) * (c - c1) <= (q - q1) * (c2 - c1):  # the middle corner is under the chord
                hull.pop()
            else:
                break
        hull.append((float(c), float(q)))
    corners = np.array(hull)
    return corners[:, 0], corners[:, 1]


def area(corners_cost, corners_quality, *, low_cost, high_cost, low_quality, high_quality, points: int = 1001) -> float:
    """APGR for N endpoints (docs/endpoints.md#definitions): the envelope's mean normalized gain over
    [low_cost, high_cost], flat beyond its last corner; NaN when either span is empty."""
    if not high_cost > low_cost or not high_quality > low_quality:
        return float("nan")
    x = np.linspace(low_cost, high_cost, points)
    gain = (np.interp(x, corners_cost, corners_quality) - low_quality) / (high_quality - low_quality)
    return float(np.trapezoid(gain, x) / (high_cost - low_cost))


def auc(labels, scores) -> float:
    """ROC AUC of the score for the cloud-needed label; NaN when only one class is present."""
    labels, scores = _arrays(labels, scores)
    if labels.min() == labels.max():
        return float("nan")
    from scipy.stats import rankdata

    ranks = rankdata(scores)  # average ranks: ties count one half
    n_pos = int(labels.sum())
    n_neg = len(labels) - n_pos
    return float((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def operating_point(to_cloud, q_edge, q_cloud, needed) -> dict:
    """Cloud share, quality (before fallback) and misroutes of one set of decisions."""
    to_cloud, needed = np.asarray(to_cloud, dtype=bool), np.asarray(needed, dtype=bool)
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


def paired(before: np.ndarray, after: np.ndarray, *, z: float = Z95) -> dict:
    """Means without and with a change on the same rows, and their paired difference with its normal 95% interval."""
    diff = after - before
    half = z * float(diff.std(ddof=1)) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
    mean = float(diff.mean())
    return {
        "without_rules": float(before.mean()),
        "with_rules": float(after.mean()),
        "difference": mean,
        "interval": [mean - half, mean + half],
    }


DEFAULT_CLOUD_COSTS = {"fp8": 0.003, "fp16": 0.008}  # $ per request, baseline.md
DEFAULT_EDGE_MS = {"phone": 120.0, "laptop": 50.0}  # baseline.md targets


def _non_negative(model: str, values: dict) -> None:
    for name, value in values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
            raise ValueError(f"{model} {name}={value!r} must be a number >= 0")


@dataclass(frozen=True)
class CostModel:
    """$ per request: edge (configurable, default 0) and the cloud at each serving precision."""

    edge: float = 0.0
    cloud: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_CLOUD_COSTS))

    def __post_init__(self):
        _non_negative("cost", {"edge": self.edge, **{f"cloud.{k}": v for k, v in self.cloud.items()}})
        if not self.cloud:
            raise ValueError("cost model needs at least one cloud price")


@dataclass(frozen=True)
class LatencyModel:
    """Milliseconds: edge per device, cloud inference plus network (baseline.md defaults)."""

    edge_ms: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_EDGE_MS))
    cloud_ms: float = 200.0
    network_ms: float = 50.0

    def __post_init__(self):
        times = {"cloud_ms": self.cloud_ms, "network_ms": self.network_ms}
        _non_negative("latency", {**times, **{f"edge_ms.{k}": v for k, v in self.edge_ms.items()}})
        if not self.edge_ms:
            raise ValueError("latency model needs at least one edge device")


def zone_probabilities(zones) -> np.ndarray:
    """One-hot (n, 3) zone probabilities of a deterministic policy's zones."""
    zones = np.asarray(zones, dtype=object)
    unknown = set(zones.tolist()) - set(ZONES)
    if unknown:
        raise ValueError(f"unknown zone(s) {sorted(map(str, unknown))}; zones are {', '.join(ZONES)}")
    return np.stack([zones == z for z in ZONES], axis=1).astype(np.float64)


def random_zone_probabilities(n: int, *, cloud_share: float, fallback_share: float = 0.0) -> np.ndarray:
    """Each request in the cloud with probability `cloud_share`, the fallback zone `fallback_share`, else the edge."""
    if not (0 <= cloud_share <= 1 and 0 <= fallback_share <= 1 and cloud_share + fallback_share <= 1 + 1e-12):
        raise ValueError(f"bad random shares: cloud={cloud_share!r}, fallback={fallback_share!r}")
    edge = max(1.0 - cloud_share - fallback_share, 0.0)
    return np.tile([edge, fallback_share, cloud_share], (n, 1)).astype(np.float64)


def _check_probabilities(probs, *arrays) -> list[np.ndarray]:
    """[probs, *arrays]: the arrays checked (_arrays), then `probs` as their (n, 3) zone probabilities."""
    arrays, probs = _arrays(*arrays), np.asarray(probs, dtype=np.float64)
    n_rows = len(arrays[0])
    if probs.shape != (n_rows, 3):
        raise ValueError(f"zone probabilities must have shape ({n_rows}, 3), got {probs.shape}")
    if not np.allclose(probs.sum(axis=1), 1.0) or (probs < 0).any():
        raise ValueError("zone probabilities must be >= 0 and sum to 1 per request")
    return [probs, *arrays]


def _fires(probs, q_edge, catch_rate) -> np.ndarray:
    """Per request: probability that the fallback fires (fallback zone, edge fails, failure caught)."""
    return probs[:, 1] * fallback.fires(q_edge, catch_rate)


def pgr(quality: float, all_edge: float, all_cloud: float) -> float:
    """Share of the edge-to-cloud quality gap a quality closes; NaN when the gap is zero."""
    return float((quality - all_edge) / (all_cloud - all_edge)) if all_cloud != all_edge else float("nan")


def at_share(scores, q_edge, q_cloud, needed, share: float) -> dict:
    """Quality, PGR and misroutes when the top `share` of requests by score go to the cloud
    (tied scores spread evenly, as in quality_curve; interpolated between k/n)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"cloud share must be in [0, 1], got {share!r}")
    scores, q_edge, q_cloud, needed = _arrays(scores, q_edge, q_cloud, needed)
    curve = quality_curve(scores, q_edge, q_cloud)
    quality = float(np.interp(share, curve.f, curve.quality))
    # The same curve machinery counts misses: with q_edge = needed and q_cloud = 0, the
    # "quality" at f is the share of cloud-needed requests left on the edge.
    missed = quality_curve(scores, needed, np.zeros_like(needed))
    under = float(np.interp(share, missed.f, missed.quality))
    over = share - (needed.mean() - under)
    return {
        "cloud_share": float(share),
        "quality": quality,
        "quality_vs_all_cloud": quality - q_cloud.mean(),
        "pgr": pgr(quality, q_edge.mean(), q_cloud.mean()),
        "misroute_rate": under + over,
        "under_routing": under,
        "over_routing": float(over),
    }


def fallback_figures(probs, q_edge, q_cloud, *, catch_rate) -> dict:
    """How often the fallback fires (per request, per fallback-zone request) and the quality it
    recovers, net of good edge answers rejected."""
    probs, q_edge, q_cloud = _check_probabilities(probs, q_edge, q_cloud)
    fires = _fires(probs, q_edge, catch_rate)
    in_zone = probs[:, 1].sum()
    recovered = probs[:, 1] * (fallback.fallback_quality(q_edge, q_cloud, catch_rate) - q_edge)
    return {
        "fallback_fires": float(fires.mean()),
        "fallback_fires_in_zone": float(fires.sum() / in_zone) if in_zone > 0 else float("nan"),
        "fallback_recovered_quality": float(recovered.mean()),
    }


def request_costs(probs: np.ndarray, fires: np.ndarray, model: CostModel) -> dict[str, np.ndarray]:
    """$ of each request at each cloud price: cloud-first costs the cloud price; edge-first the edge
    price, plus the cloud price when the fallback fires (`fires`: its probability per request)."""
    edge_first = probs[:, 0] + probs[:, 1]
    return {name: probs[:, 2] * cloud + edge_first * model.edge + fires * cloud for name, cloud in model.cloud.items()}


def cost_figures(probs, q_edge, *, catch_rate, model: CostModel) -> dict:
    """Per cloud price: mean $ per request, total $, and the reduction vs sending all to the cloud."""
    probs, q_edge = _check_probabilities(probs, q_edge)
    out = {}
    for name, per_row in request_costs(probs, _fires(probs, q_edge, catch_rate), model).items():
        total, all_cloud = float(per_row.sum()), model.cloud[name] * len(per_row)
        out[name] = {
            "per_request": float(per_row.mean()),
            "total": total,
            "reduction_vs_all_cloud": 1.0 - total / all_cloud if all_cloud > 0 else float("nan"),
        }
    return out


def weighted_quantile(values, weights, q: float) -> float:
    """Smallest value whose cumulative weight reaches q of the total (inverted CDF)."""
    values, weights = np.asarray(values, dtype=np.float64).ravel(), np.asarray(weights, dtype=np.float64).ravel()
    if len(values) == 0 or weights.sum() <= 0:
        raise ValueError("no requests to evaluate: the input is empty")
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    index = np.searchsorted(cumulative, q * cumulative[-1] - 1e-12 * cumulative[-1])
    return float(values[order][min(index, len(values) - 1)])


def latency_figures(probs, q_edge, *, catch_rate, model: LatencyModel) -> dict:
    """Per edge device, mean and p95 ms: edge-first = edge; cloud-first = cloud + network; a fired fallback, both."""
    probs, q_edge = _check_probabilities(probs, q_edge)
    fires = _fires(probs, q_edge, catch_rate)
    cloud = model.cloud_ms + model.network_ms
    weights = np.stack([probs[:, 0] + probs[:, 1] - fires, probs[:, 2], fires], axis=1)
    out = {}
    for device, edge in model.edge_ms.items():
        values = np.broadcast_to([edge, cloud, edge + cloud], weights.shape)
        out[device] = {
            "mean_ms": float((weights * values).sum() / len(q_edge)),
            "p95_ms": weighted_quantile(values, weights, 0.95),
        }
    return out


def reliability(scores, labels, *, bins: int = 10) -> dict:
    """Reliability table over equal-width score bins (empty ones skipped) and the expected calibration error."""
    if not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    scores, labels = _arrays(scores, labels)
    if scores.min() < 0 or scores.max() > 1:
        raise ValueError(f"scores must be probabilities in [0, 1]; got range [{scores.min()}, {scores.max()}]")
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.minimum(np.searchsorted(edges, scores, side="right") - 1, bins - 1)  # 1.0 joins the last bin
    table, ece = [], 0.0
    for b in np.unique(index):  # the non-empty bins, in order
        rows = index == b
        mean_score, rate = float(scores[rows].mean()), float(labels[rows].mean())
        ece += rows.mean() * abs(mean_score - rate)
        table.append(
            {
                "lo": float(edges[b]),
                "hi": float(edges[b + 1]),
                "rows": int(rows.sum()),
                "mean_score": mean_score,
                "observed_rate": rate,
            }
        )
    return {"ece": float(ece), "bins": table}
