"""Off-policy quality from the outcome log's feedback: how good the first answers of a routing
policy ("router": the bundle without exploration, "all edge", "all cloud") would be on the logged
traffic (docs/observability.md#dashboard-and-report).

SNIPS: sum(w r) / sum(w), w = 1[the policy picks the side that ran] / propensity (`snips`, the formula's
one home: evaluation.off_policy computes with it). Coverage: the share of requests whose policy side could
run first; below 1 an estimate speaks for the covered requests only. Requests under MIN_PROPENSITY are left
out and counted; the 95% interval is a percentile bootstrap over requests (BOOTSTRAP_ROUNDS, fixed seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from serving.dashboard._summary import Outcomes, RequestSummary

MIN_PROPENSITY = 0.01  # evaluation.off_policy.MIN_PROPENSITY
BOOTSTRAP_ROUNDS = 500
POLICIES = ("router", "all edge", "all cloud")


@dataclass(frozen=True)
class PolicyEstimate:
    """One policy's estimated first-answer quality: `estimate` None when no request agrees with it."""

    policy: str
    estimate: float | None
    ci95: tuple[float, float] | None
    agreeing: int  # requests where the policy picks the side that ran
    coverage: float  # share of requests where the policy's side had a non-zero probability


@dataclass(frozen=True)
class QualityView:
    """The feedback panel: how many requests carry an outcome of the side that ran first, their
    observed mean (the logging router's, exploration included), and each policy's estimate."""

    labelled: int
    unlabelled: int
    below_floor: int
    observed: float | None
    estimates: tuple[PolicyEstimate, ...]


def snips(agree: np.ndarray, propensity: np.ndarray, reward: np.ndarray) -> float | None:
    """sum(w r) / sum(w) with w = agree / propensity; None when no request agrees."""
    weights = agree / propensity
    total = float(weights.sum())
    return float((weights * reward).sum() / total) if total > 0 else None


def _interval(agree: np.ndarray, propensity: np.ndarray, reward: np.ndarray) -> tuple[float, float] | None:
    rng = np.random.default_rng(0)
    n = len(agree)
    draws = []
    for _ in range(BOOTSTRAP_ROUNDS):
        index = rng.integers(0, n, n)
        value = snips(agree[index], propensity[index], reward[index])
        if value is not None:
            draws.append(value)
    if not draws:
        return None
    low, high = np.percentile(np.asarray(draws), [2.5, 97.5])
    return float(low), float(high)


def estimate_quality(requests: Sequence[RequestSummary], outcomes: Mapping[str, Outcomes]) -> QualityView | None:
    """The feedback panel (module doc) for `requests`, whose outcomes `outcomes` holds by request
    id; None when no request has the outcome of the side that ran first."""
    rows: list[tuple[str | None, bool, float, float]] = []  # (the side that ran first, explored, propensity, reward)
    unlabelled = below_floor = 0
    for request in requests:
        known = outcomes.get(request.request_id or "")
        r = known.of(request.target) if known is not None else None
        if r is None or request.target not in ("edge", "cloud"):
            unlabelled += 1
            continue
        p = 1.0 if request.propensity is None else request.propensity
        if p < MIN_PROPENSITY:
            below_floor += 1
            continue
        rows.append((request.target, request.explored, p, r))
    if not rows:
        return None
    first, explored, propensity, reward = zip(*rows)
    p_arr, r_arr = np.asarray(propensity, np.float64), np.asarray(reward, np.float64)
    agreeing = {  # with the side that ran first: an explored request's router ran the other side
        "router": [not e for e in explored],
        "all edge": [a == "edge" for a in first],
        "all cloud": [a == "cloud" for a in first],
    }
    estimates = []
    for policy in POLICIES:
        agree = np.asarray(agreeing[policy], np.float64)
        covered = (agree > 0) | (p_arr < 1.0)
        value = snips(agree, p_arr, r_arr)
        interval = _interval(agree, p_arr, r_arr) if value is not None else None
        estimates.append(PolicyEstimate(policy, value, interval, int(agree.sum()), float(covered.mean())))
    return QualityView(len(first), unlabelled, below_floor, float(r_arr.mean()), tuple(estimates))
