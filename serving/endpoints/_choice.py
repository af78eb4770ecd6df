"""Choosing among N endpoints from each endpoint's expected quality and cost
(docs/sdk.md#how-the-router-chooses): the rules cheapest_within, best_under_price and cascade.

Pure numpy over [requests, endpoints] matrices, so the SDK and the offline evaluation make the same decisions:
`expected` holds P(endpoint answers well | prompt) from the outcome models, `cost` the expected price of the call
(call_costs), `feasible` (optional, boolean) which endpoints a request may use at all (context limit,
capabilities, policy). A request with no feasible endpoint gets -1: the caller must say so, never pick one silently."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from serving.endpoints._record import Endpoint

Matrix = npt.NDArray[np.float64]
Choice = npt.NDArray[np.int64]
NONE = -1  # no feasible endpoint


def call_costs(
    endpoints: Sequence[Endpoint], input_tokens: npt.ArrayLike, output_tokens: float
) -> tuple[Matrix, npt.NDArray[np.bool_]]:
    """([requests, endpoints] each call's expected price, whether the prompt fits each endpoint's
    context) for prompts of `input_tokens` tokens and answers of `output_tokens`."""
    prices = [e.price for e in endpoints if e.price is not None]
    if len(prices) != len(endpoints):
        unpriced = next(e.name for e in endpoints if e.price is None)
        raise ValueError(f"endpoint {unpriced!r} has no price: the choosers price every endpoint they choose among")
    tokens = np.asarray(input_tokens, dtype=np.float64).reshape(-1)
    cost = np.array([[p.call_cost(t, output_tokens) for p in prices] for t in tokens.tolist()], dtype=np.float64)
    limits = [np.inf if e.context_tokens is None else e.context_tokens for e in endpoints]
    fits = tokens[:, None] <= np.array(limits, dtype=np.float64)[None, :]
    return cost.reshape(len(tokens), len(endpoints)), fits


def _inputs(
    expected: npt.ArrayLike, cost: npt.ArrayLike, feasible: npt.ArrayLike | None
) -> tuple[Matrix, Matrix, npt.NDArray[np.bool_]]:
    p = np.asarray(expected, dtype=np.float64)
    c = np.asarray(cost, dtype=np.float64)
    if p.ndim != 2 or c.shape != p.shape:
        raise ValueError(
            f"expected and cost must be [requests, endpoints] matrices of one shape, got {p.shape}, {c.shape}"
        )
    ok = np.ones(p.shape, dtype=bool) if feasible is None else np.asarray(feasible, dtype=bool)
    if ok.shape != p.shape:
        raise ValueError(f"feasible must have the shape of expected {p.shape}, got {ok.shape}")
    return p, c, ok & np.isfinite(p) & np.isfinite(c)


def _pick(score: Matrix, ok: npt.NDArray[np.bool_]) -> Choice:
    """Per row, the column of the largest score among ok ones (the first on ties); NONE if none is ok."""
    masked = np.where(ok, score, -np.inf)
    choice = np.argmax(masked, axis=1).astype(np.int64)
    return np.where(ok.any(axis=1), choice, NONE)


def cheapest_within(
    expected: npt.ArrayLike, cost: npt.ArrayLike, margin: float, feasible: npt.ArrayLike | None = None
) -> Choice:
    """Per request, the cheapest feasible endpoint whose expected quality is >= the best feasible
    one's minus `margin` (higher expected quality on equal cost)."""
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    p, c, ok = _inputs(expected, cost, feasible)
    best = np.max(np.where(ok, p, -np.inf), axis=1, keepdims=True)
    near = ok & (p >= best - margin - 1e-12)
    # Cheapest first, then the higher expected quality: the quality term never outweighs a cost step.
    scale = max(float(np.max(np.abs(c[np.isfinite(c)]), initial=0.0)), 1.0)
    return _pick(-c + 1e-9 * scale * p, near)


def best_under_price(
    expected: npt.ArrayLike, cost: npt.ArrayLike, price: float, feasible: npt.ArrayLike | None = None
) -> Choice:
    """Per request, the feasible endpoint with the largest expected quality - price x cost (the
    cheaper one on ties). price 0: the best expected quality; a large price: the cheapest."""
    if not price >= 0:
        raise ValueError(f"price must be >= 0, got {price!r}")
    p, c, ok = _inputs(expected, cost, feasible)
    return _pick(p - price * c - 1e-12 * c, ok)  # less 1e-12 x cost: the cheaper one on ties


def cascade(
    expected: npt.ArrayLike, cost: npt.ArrayLike, start_margin: float, feasible: npt.ArrayLike | None = None
) -> list[list[int]]:
    """Per request, the endpoints to try in order: the cheapest feasible one within `start_margin` of the best, then
    each costlier one expected to do better than every one before it, up to the best; [] when none is feasible."""
    if not start_margin >= 0:
        raise ValueError(f"start_margin must be >= 0, got {start_margin!r}")
    p, c, ok = _inputs(expected, cost, feasible)
    orders: list[list[int]] = []
    for row in range(len(p)):
        usable = np.flatnonzero(ok[row])  # none: floor -inf, and no step
        floor = float(p[row, usable].max(initial=-np.inf)) - start_margin - 1e-12
        orders.append(_climb(p[row], c[row], usable, floor=floor))
    return orders


def escalation(
    expected: npt.ArrayLike, cost: npt.ArrayLike, first: npt.ArrayLike, feasible: npt.ArrayLike | None = None
) -> list[list[int]]:
    """Per request, `first` (its chosen endpoint, e.g. cheapest_within's), then, as cascade climbs, each costlier
    feasible endpoint expected to beat every one before it: the order to try as answers fail; [] for a NONE `first`."""
    p, c, ok = _inputs(expected, cost, feasible)
    starts = np.asarray(first, dtype=np.int64)
    if starts.shape != (len(p),):
        raise ValueError(f"first must hold one endpoint per request ({len(p)}), got shape {starts.shape}")
    orders: list[list[int]] = []
    for row, start in enumerate(starts.tolist()):
        if start == NONE:
            orders.append([])
            continue
        if not 0 <= start < p.shape[1] or not ok[row, start]:
            raise ValueError(f"request {row}: first endpoint {start} is not a feasible endpoint")
        orders.append(_climb(p[row], c[row], np.flatnonzero(ok[row]), start=start))
    return orders


def _climb(
    p: Matrix, c: Matrix, usable: npt.NDArray[np.intp], *, floor: float = np.inf, start: int = NONE
) -> list[int]:
    """One request's steps: by cost (then quality), the first endpoint that is `start` or expected
    to reach `floor`, then each one expected to do better than every step before it."""
    steps: list[int] = []
    top = -np.inf
    for k in usable[np.lexsort((-p[usable], c[usable]))]:  # by cost, then quality
        if p[k] > top and (steps or k == start or p[k] >= floor):
            steps.append(int(k))
            top = float(p[k])
    return steps


def cascade_expectation(
    orders: list[list[int]], quality: npt.ArrayLike, cost: npt.ArrayLike, catch_rate: float
) -> tuple[Matrix, Matrix]:
    """(expected quality, expected cost) per request of running its cascade, where `quality` is each endpoint's
    probability of a good answer (the models' expectation, or the logged outcome) and a bad answer is caught, and
    the next endpoint tried, with probability `catch_rate`; the last step's answer stands. Outcomes are taken as
    independent given `quality` (exact for logged 0/1 outcomes, which carry their own dependence)."""
    if not 0.0 <= catch_rate <= 1.0:
        raise ValueError(f"catch_rate must be in [0, 1], got {catch_rate!r}")
    q = np.asarray(quality, dtype=np.float64)
    c = np.asarray(cost, dtype=np.float64)
    out_q, out_c = np.full(len(orders), np.nan), np.full(len(orders), np.nan)
    for row, steps in enumerate(orders):
        if not steps:
            continue
        reach, total_q, total_c = 1.0, 0.0, 0.0
        for k in steps:
            total_c += reach * c[row, k]
            total_q += reach * q[row, k]
            reach *= (1.0 - q[row, k]) * catch_rate
        out_q[row], out_c[row] = total_q, total_c
    return out_q, out_c
