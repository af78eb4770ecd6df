"""Offline figures of a routing policy beyond quality and misroutes (shared docs/metrics.md):
values at a given cloud share, the fallback, cost and latency models, calibration.

A policy is described per request by its zone probabilities, an (n, 3) array over
(edge, edge_with_cloud_fallback, cloud): one-hot for a deterministic router, constant
rows for random routing. Every figure is an exact expectation, never a sample: in the
fallback zone the fallback fires as evaluation.fallback says; edge-zone requests are not
checked. The p95 latency is the inverted-CDF 95th percentile of the exact mixture.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evaluation import fallback
from evaluation.metrics import _arrays, quality_curve
from serving._contract import ZONES

ZONE_ORDER = ZONES  # columns of a zone-probability array
DEFAULT_CLOUD_COSTS = {"fp8": 0.003, "fp16": 0.008}  # $ per request, baseline.md
DEFAULT_EDGE_MS = {"phone": 120.0, "laptop": 50.0}  # baseline.md targets


@dataclass(frozen=True)
class CostModel:
    """$ per request: edge (configurable, default 0) and the cloud at each serving precision."""

    edge: float = 0.0
    cloud: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_CLOUD_COSTS))

    def __post_init__(self):
        values = {"edge": self.edge, **{f"cloud.{k}": v for k, v in self.cloud.items()}}
        for name, value in values.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                raise ValueError(f"cost {name}={value!r} must be a number >= 0")
        if not self.cloud:
            raise ValueError("cost model needs at least one cloud price")


@dataclass(frozen=True)
class LatencyModel:
    """Milliseconds: edge per device, cloud inference plus network (baseline.md defaults)."""

    edge_ms: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_EDGE_MS))
    cloud_ms: float = 200.0
    network_ms: float = 50.0

    def __post_init__(self):
        values = {
            "cloud_ms": self.cloud_ms,
            "network_ms": self.network_ms,
            **{f"edge_ms.{k}": v for k, v in self.edge_ms.items()},
        }
        for name, value in values.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                raise ValueError(f"latency {name}={value!r} must be a number >= 0")
        if not self.edge_ms:
            raise ValueError("latency model needs at least one edge device")


def zone_probabilities(zones) -> np.ndarray:
    """One-hot (n, 3) zone probabilities of a deterministic policy's zones."""
    zones = np.asarray(zones, dtype=object)
    unknown = set(zones.tolist()) - set(ZONE_ORDER)
    if unknown:
        raise ValueError(f"unknown zone(s) {sorted(map(str, unknown))}; zones are {', '.join(ZONE_ORDER)}")
    return np.stack([zones == z for z in ZONE_ORDER], axis=1).astype(np.float64)


def random_zone_probabilities(n: int, *, cloud_share: float, fallback_share: float = 0.0) -> np.ndarray:
    """Every request in the cloud with probability `cloud_share`, in the fallback zone with
    `fallback_share`, on the edge otherwise."""
    if not (0 <= cloud_share <= 1 and 0 <= fallback_share <= 1 and cloud_share + fallback_share <= 1 + 1e-12):
        raise ValueError(f"bad random shares: cloud={cloud_share!r}, fallback={fallback_share!r}")
    edge = max(1.0 - cloud_share - fallback_share, 0.0)
    return np.tile([edge, fallback_share, cloud_share], (n, 1)).astype(np.float64)


def _check_probabilities(probs, n_rows: int) -> np.ndarray:
    probs = np.asarray(probs, dtype=np.float64)
    if probs.shape != (n_rows, 3):
        raise ValueError(f"zone probabilities must have shape ({n_rows}, 3), got {probs.shape}")
    if not np.allclose(probs.sum(axis=1), 1.0) or (probs < 0).any():
        raise ValueError("zone probabilities must be >= 0 and sum to 1 per request")
    return probs


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
    """How often the fallback fires (per request, and per fallback-zone request) and the
    quality it recovers, net of good edge answers rejected (added to the mean quality)."""
    q_edge, q_cloud = _arrays(q_edge, q_cloud)
    probs = _check_probabilities(probs, len(q_edge))
    fires = _fires(probs, q_edge, catch_rate)
    in_zone = probs[:, 1].sum()
    recovered = probs[:, 1] * (fallback.fallback_quality(q_edge, q_cloud, catch_rate) - q_edge)
    return {
        "fallback_fires": float(fires.mean()),
        "fallback_fires_in_zone": float(fires.sum() / in_zone) if in_zone > 0 else float("nan"),
        "fallback_recovered_quality": float(recovered.mean()),
    }


def cost_figures(probs, q_edge, *, catch_rate, model: CostModel) -> dict:
    """Per cloud price: mean $ per request, total $, and the reduction vs sending all to the cloud.

    Cloud-first costs the cloud price; edge-first costs the edge price plus the cloud price
    when the fallback fires.
    """
    (q_edge,) = _arrays(q_edge)
    probs = _check_probabilities(probs, len(q_edge))
    fires = _fires(probs, q_edge, catch_rate)
    out = {}
    for name, cloud in model.cloud.items():
        per_row = probs[:, 2] * cloud + (probs[:, 0] + probs[:, 1]) * model.edge + fires * cloud
        total, all_cloud = float(per_row.sum()), cloud * len(per_row)
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
    """Per edge device: mean and p95 latency (ms). Edge-first = edge; cloud-first = cloud +
    network; a fired fallback = edge, then cloud + network."""
    (q_edge,) = _arrays(q_edge)
    probs = _check_probabilities(probs, len(q_edge))
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
    """Reliability table over equal-width score bins and the expected calibration error
    (sum over bins of rows share x |mean score - observed rate|; empty bins skipped)."""
    if not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    scores, labels = _arrays(scores, labels)
    if scores.min() < 0 or scores.max() > 1:
        raise ValueError(f"scores must be probabilities in [0, 1]; got range [{scores.min()}, {scores.max()}]")
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.minimum(np.searchsorted(edges, scores, side="right") - 1, bins - 1)  # 1.0 joins the last bin
    table, ece = [], 0.0
    for b in range(bins):
        rows = index == b
        if not rows.any():
            continue
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
