"""Off-policy evaluation: what a bundle would do on traffic another router logged (assumptions and the propensity floor:
docs/traffic.md#off-policy-evaluation-make-evaluate-on-the-log). Each logged request ran first on side `a` (routed_to),
chosen with probability `p` (propensity), its outcome `r` there known; the bundle would send it first to `b`. Its
expected quality (first answer, before fallback): IPS, the mean of 1[a = b] r / p; SNIPS, that sum over the sum of
1[a = b] / p; DR, the mean of q̂_b(x) + 1[a = b] (r - q̂_a(x)) / p, q̂ the bundle's own outcome heads. The misroute rate
is exact where both outcomes are known, completed with the heads elsewhere. 95% intervals: percentile bootstrap over
requests (`rounds` resamples, fixed seed)."""

from __future__ import annotations

import numpy as np

from serving.dashboard._quality import snips  # one home for the formula: the dashboard shows it too

MIN_PROPENSITY = 0.01  # requests logged with a smaller propensity are left out, never weighted


def _arrays(routed_to, propensity, reward, target, min_propensity: float):
    a, b = (np.asarray([s == "cloud" for s in sides], dtype=bool) for sides in (routed_to, target))
    p, r = np.asarray(propensity, dtype=np.float64), np.asarray(reward, dtype=np.float64)
    if not 0 < min_propensity <= 1:
        raise ValueError(f"min_propensity={min_propensity!r} must be in (0, 1]")
    if np.isnan(p).any() or (p < min_propensity).any() or (p > 1).any():
        raise ValueError(
            f"every logged request needs a propensity in [{min_propensity}, 1] (min_propensity): "
            "leave out and report the others first"
        )
    if np.isnan(r).any():
        raise ValueError("every logged request needs the outcome of the side it ran on")
    return a, b, p, r


def _bootstrap(fn, n: int, rounds: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    draws = [fn(rng.integers(0, n, n)) for _ in range(rounds)]
    out = {}
    for key in draws[0]:
        values = np.array([d[key] for d in draws], dtype=np.float64)
        values = values[~np.isnan(values)]
        out[key] = [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))] if len(values) else None
    return out


def off_policy(
    *,
    routed_to,
    propensity,
    reward,
    target,
    p_edge,
    p_cloud,
    edge_quality=None,
    cloud_quality=None,
    margin: float = 0.0,
    rounds: int = 1000,
    seed: int = 0,
    min_propensity: float = MIN_PROPENSITY,
) -> dict:
    """The bundle's estimated figures on logged traffic, with 95% intervals, next to the logging
    policy's observed ones. `target`: the bundle's first side per request; `p_edge`, `p_cloud`: its
    heads; `edge_quality`, `cloud_quality`: both outcomes where known (NaN else). ValueError when a
    propensity is below `min_propensity`: callers leave such requests out and report them."""
    a, b, p, r = _arrays(routed_to, propensity, reward, target, min_propensity)
    q_edge, q_cloud = np.asarray(p_edge, np.float64), np.asarray(p_cloud, np.float64)
    q_a, q_b = np.where(a, q_cloud, q_edge), np.where(b, q_cloud, q_edge)
    n = len(a)
    edge_known = np.asarray(edge_quality if edge_quality is not None else np.full(n, np.nan), np.float64)
    cloud_known = np.asarray(cloud_quality if cloud_quality is not None else np.full(n, np.nan), np.float64)
    # P(cloud needed) per request: observed sides as observed, the other from the heads.
    edge = np.where(np.isnan(edge_known), q_edge, edge_known)
    cloud = np.where(np.isnan(cloud_known), q_cloud, cloud_known)
    both = ~np.isnan(edge_known) & ~np.isnan(cloud_known)
    needed = np.where(both, (cloud - edge > margin).astype(float), cloud * (1.0 - edge))
    misroute = np.where(b, 1.0 - needed, needed)

    def figures(index) -> dict:
        """IPS, SNIPS and DR (module doc) on the requests `index` picks."""
        match, outcome = (a[index] == b[index]).astype(np.float64), r[index]
        weighted = match / p[index]
        return {
            "ips": float((weighted * outcome).sum() / len(match)),
            "snips": _or_nan(snips(match, p[index], outcome)),
            "dr": float((q_b[index] + weighted * (outcome - q_a[index])).mean()),
        }

    point = figures(np.arange(n))
    intervals = _bootstrap(figures, n, rounds, seed)
    misroute_interval = _bootstrap(lambda i: {"m": float(misroute[i].mean())}, n, rounds, seed + 1)["m"]
    agree = a == b
    return {
        "requests": n,
        "agreement": float(agree.mean()),
        "min_propensity_where_agreeing": float(p[agree].min()) if agree.any() else None,
        "quality": {name: {"estimate": point[name], "ci95": intervals[name]} for name in ("ips", "snips", "dr")},
        "cloud_share": {"exact": float(b.mean())},
        "misroute_rate": {
            "model_completed": {"estimate": float(misroute.mean()), "ci95": misroute_interval},
            "both_outcomes_known": int(both.sum()),
        },
        "logging_policy": {"quality": float(r.mean()), "cloud_share": float(a.mean())},
        "assumptions": "the logging policy chose from what it logged; the side the bundle picks had a non-zero "
        "propensity (positivity); quality is that of the first answer, before any fallback",
    }


def logged_estimate(choice: np.ndarray, routed: np.ndarray, propensity: np.ndarray, quality, cost) -> dict:
    """SNIPS estimates of the mean quality and cost a chooser's `choice` (endpoint indices) would get
    on one-outcome rows that ran on `routed`, logged with `propensity`; rows below MIN_PROPENSITY
    are left out. `effective_rows`: (sum w)^2 / sum w^2, what the estimate is worth in rows."""
    kept = propensity >= MIN_PROPENSITY
    agree = ((choice == routed) & kept).astype(np.float64)
    p = np.where(kept, propensity, 1.0)
    weights = agree / p
    total, squares = float(weights.sum()), float((weights**2).sum())
    return {
        "quality": _or_nan(snips(agree, p, np.asarray(quality, dtype=np.float64))),
        "cost": _or_nan(snips(agree, p, np.asarray(cost, dtype=np.float64))),
        "agreeing_rows": int(agree.sum()),
        "effective_rows": total**2 / squares if squares > 0 else 0.0,
        "below_propensity_floor": int((~kept).sum()),
    }


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value
