"""Offline figures of routing among N endpoints on rows where every endpoint's outcome is logged (definitions:
docs/evaluation.md#definitions). Inputs are [rows, endpoints] matrices: `quality` the logged outcomes, `expected` the
outcome models' probabilities, `cost` each call's logged price (else the expected one), `expected_cost` the price the
chooser sees before the call, `feasible` the context limits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluation.metrics import area, envelope, first_reach, paired
from evaluation.off_policy import logged_estimate
from serving.endpoints._choice import NONE, best_under_price, cascade, cascade_expectation, cheapest_within

# Prices on cost (quality points per dollar) the curve sweeps: 0 (best expected quality) up to all on the cheapest.
PRICE_GRID = np.concatenate([[0.0], np.logspace(-1, 6, 141)])


@dataclass(frozen=True)
class Choosers:
    """The operating points' settings."""

    margin: float = 0.02
    budget_share: float = 0.5  # the budget, as a share of the best single endpoint's mean cost
    start_margin: float = 0.15
    catch_rate: float = 0.5
    truth_margin: float = 0.02  # the margin of the simulator's true best-value choice


def _picked(choice: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each row's value at its chosen endpoint; 0 where none was chosen (NONE)."""
    taken = choice != NONE
    return np.where(taken, values[np.arange(len(choice)), np.where(taken, choice, 0)], 0.0)


def realized(choice: np.ndarray, quality: np.ndarray, cost: np.ndarray) -> tuple[float, float]:
    """(mean quality, mean cost) of one endpoint per row; a row without one (NONE) counts 0 and $0."""
    return float(_picked(choice, quality).mean()), float(_picked(choice, cost).mean())


def oracle(quality: np.ndarray, cost: np.ndarray) -> tuple[float, float]:
    """Per row the cheapest endpoint among those with the best logged outcome: (quality, cost)."""
    choice = np.argmin(np.where(quality >= quality.max(axis=1, keepdims=True), cost, np.inf), axis=1)
    return realized(choice, quality, cost)


def curve(expected, expected_cost, quality, cost, feasible=None, prices=PRICE_GRID) -> np.ndarray:
    """[points, 3]: (price, mean cost, mean quality) of best_under_price at every price."""
    points = [
        (p, *realized(best_under_price(expected, expected_cost, p, feasible), quality, cost)[::-1]) for p in prices
    ]
    return np.array(points, dtype=float)


def price_for_budget(expected, expected_cost, budget: float, feasible=None) -> float:
    """The least price on cost at which best_under_price's mean expected cost on these (validation)
    rows is <= `budget`; the grid's largest if none."""
    points = curve(expected, expected_cost, expected, expected_cost, feasible)
    within = np.flatnonzero(points[:, 1] <= budget + 1e-12)
    return float(points[within[0], 0]) if len(within) else float(PRICE_GRID[-1])


def price_for_quality(expected, expected_cost, quality, target: int, feasible=None) -> float:
    """The largest price on cost at which best_under_price's logged quality on these (validation) rows
    beats endpoint `target` alone by at least one standard error of their paired difference (a price that
    merely matches it is chosen where luck favoured it, and falls short on new rows); 0 (the best expected
    quality) if no price does, and with fewer than two rows, which give no standard error."""
    if len(quality) < 2:
        return 0.0
    best = 0.0
    for price in PRICE_GRID:
        diff = _picked(best_under_price(expected, expected_cost, price, feasible), quality) - quality[:, target]
        if diff.mean() - diff.std(ddof=1) / np.sqrt(len(diff)) >= -1e-12:
            best = float(price)
    return best


def singles(names, quality: np.ndarray, cost: np.ndarray) -> tuple[dict, str]:
    """Each endpoint alone on these rows ({name: {quality, cost}}) and the best of them, the cheaper on ties."""
    single = {
        n: {"quality": float(quality[:, k].mean()), "cost": float(cost[:, k].mean())} for k, n in enumerate(names)
    }
    return single, max(names, key=lambda n: (single[n]["quality"], -single[n]["cost"]))


def _saved(cost: float, best: dict) -> float:
    """The share of the best single endpoint's cost saved."""
    return 1.0 - cost / best["cost"] if best["cost"] > 0 else float("nan")


def shares(choice: np.ndarray, names) -> dict[str, float]:
    return {name: float(np.mean(choice == k)) for k, name in enumerate(names)}


def logged_figures(names, choices: dict[str, np.ndarray], logged: dict) -> dict:
    """Off-policy estimates on a fold's one-outcome rows (`logged`: `routed`, `propensity`, the `quality` and `cost` of
    the call that ran): each endpoint alone, the best, and each of `choices` (endpoint indices per row) against it."""
    routed, propensity, q, c = (logged[k] for k in ("routed", "propensity", "quality", "cost"))
    n = len(routed)
    single = {name: logged_estimate(np.full(n, k), routed, propensity, q, c) for k, name in enumerate(names)}
    defined = [name for name in names if np.isfinite(single[name]["quality"])]
    best = max(defined, key=lambda name: (single[name]["quality"], -single[name]["cost"])) if defined else None
    out: dict = {"rows": n, "single": single, "best_single": best}
    for point, choice in choices.items():
        figures = logged_estimate(choice, routed, propensity, q, c)
        if best is not None:
            figures["quality_minus_best_single"] = figures["quality"] - single[best]["quality"]
            figures["cost_saved_vs_best_single"] = _saved(figures["cost"], single[best])
        out[point] = figures
    return out


def fold_figures(names, *, val: dict, test: dict, choosers: Choosers = Choosers(), logged: dict | None = None) -> dict:
    """Every figure of one fold: the price settings chosen on `val` rows, the figures measured on
    `test` rows (each the module's matrices, and `truth`, the hidden probabilities, when
    simulated). `logged`: the fold's one-outcome test rows, estimated off-policy (logged_figures)."""
    names = tuple(names)
    q, p, c, ec, ok = (test[k] for k in ("quality", "expected", "cost", "expected_cost", "feasible"))
    single, best_name = singles(names, q, c)
    cheap_name = min(names, key=lambda n: (single[n]["cost"], -single[n]["quality"]))
    best, cheap = single[best_name], single[cheap_name]
    oracle_q, oracle_c = oracle(q, c)
    points = curve(p, ec, q, c, ok)
    corners = envelope(points[:, 1], points[:, 2])
    span = dict(low_cost=cheap["cost"], high_cost=best["cost"], low_quality=cheap["quality"])

    # Chosen on validation rows: the price that keeps a budget, and that of matched quality (the
    # largest price at which they show no loss against the best single endpoint)
    val_best = int(np.argmax(val["quality"].mean(axis=0)))
    budget = choosers.budget_share * float(val["expected_cost"][:, val_best].mean())
    budget_price = price_for_budget(val["expected"], val["expected_cost"], budget, val["feasible"])
    match_price = price_for_quality(val["expected"], val["expected_cost"], val["quality"], val_best, val["feasible"])

    def choices(p, ec, ok) -> tuple[dict, list]:
        """Each operating point's endpoint per row, and the cascades."""
        orders = cascade(p, ec, choosers.start_margin, ok)
        return {
            "margin": cheapest_within(p, ec, choosers.margin, ok),
            "budget": best_under_price(p, ec, budget_price, ok),
            "matched": best_under_price(p, ec, match_price, ok),
            "cascade_first": np.array([o[0] if o else NONE for o in orders]),
        }, orders

    chosen, orders = choices(p, ec, ok)
    budget_point = _point(*realized(chosen["budget"], q, c), best, chosen["budget"], names, price=budget_price)
    # the cascade: its expected figures from the logged outcomes, and from the models
    cascade_q, cascade_c = cascade_expectation(orders, q, c, choosers.catch_rate)
    predicted_q, predicted_c = cascade_expectation(orders, p, ec, choosers.catch_rate)
    out = {
        "rows": int(len(q)),
        "single": single,
        "best_single": best_name,
        "cheapest_single": cheap_name,
        "oracle": {"quality": oracle_q, "cost": oracle_c},
        "curve": {"price": points[:, 0].tolist(), "cost": points[:, 1].tolist(), "quality": points[:, 2].tolist()},
        "area_vs_best_single": area(*corners, **span, high_quality=best["quality"]),
        "area_vs_oracle": area(*corners, **span, high_quality=oracle_q),
        "quality_at_best_single_cost_minus_best_single": float(np.interp(best["cost"], *corners) - best["quality"]),
        "cost_saved_at_best_single_quality": _saved(first_reach(*corners, best["quality"]), best),
        "matched": _point(*realized(chosen["matched"], q, c), best, chosen["matched"], names, price=match_price),
        "margin": _point(*realized(chosen["margin"], q, c), best, chosen["margin"], names, margin=choosers.margin),
        "budget": {**budget_point, "budget": budget, "over_budget": float(budget_point["cost"] - budget)},
        "cascade": {
            **_point(float(np.nanmean(cascade_q)), float(np.nanmean(cascade_c)), best, chosen["cascade_first"], names),
            "predicted_quality": float(np.nanmean(predicted_q)),
            "predicted_cost": float(np.nanmean(predicted_c)),
            "mean_steps": float(np.mean([len(o) for o in orders])),
            "catch_rate": choosers.catch_rate,
            "start_margin": choosers.start_margin,
        },
        "no_feasible_endpoint": float(np.mean(~ok.any(axis=1))),
    }
    if test.get("truth") is not None:
        out["recovery"] = recovery(names, test["truth"], p, ec, ok, choosers.truth_margin)
    if logged is not None and len(logged["routed"]):
        at = choices(logged["expected"], logged["expected_cost"], logged["feasible"])[0]
        out["logged"] = logged_figures(names, at, logged)
    return out


def _point(quality, cost, best, choice, names, **settings) -> dict:
    """An operating point: its quality and cost, against the best single endpoint, and its shares."""
    return {
        "quality": quality,
        "cost": cost,
        "quality_minus_best_single": quality - best["quality"],
        "cost_saved_vs_best_single": _saved(cost, best),
        "shares": shares(choice, names),
        **settings,
    }


def recovery(names, truth, expected, expected_cost, feasible, margin: float) -> dict:
    """How often the router's cheapest_within choice is the simulator's true best-value choice (the
    same on the hidden probabilities), against every fixed endpoint, and each one's true figures."""
    true_choice = cheapest_within(truth, expected_cost, margin, feasible)
    router_choice = cheapest_within(expected, expected_cost, margin, feasible)
    fixed = shares(true_choice, names)  # how often each endpoint alone is the true choice
    best_fixed = max(fixed, key=lambda n: fixed[n])
    agreement = float(np.mean(router_choice == true_choice))
    truth_q, truth_c = realized(true_choice, truth, expected_cost)
    router_q, router_c = realized(router_choice, truth, expected_cost)
    return {
        "margin": margin,
        "agreement": agreement,
        "fixed_agreement": fixed,
        "best_fixed": best_fixed,
        "agreement_minus_best_fixed": agreement - fixed[best_fixed],
        "true_choice": {"quality": truth_q, "cost": truth_c, "shares": fixed},
        "router_choice": {"quality": router_q, "cost": router_c, "shares": shares(router_choice, names)},
        "true_quality_lost": truth_q - router_q,
    }


POINT_FIGURES = ("quality", "cost", "quality_minus_best_single", "cost_saved_vs_best_single")  # an operating point's
# The figures estimated over folds with an interval (paths into fold_figures' output).
ESTIMATED = (
    ("area_vs_best_single",),
    ("area_vs_oracle",),
    ("cost_saved_at_best_single_quality",),
    ("quality_at_best_single_cost_minus_best_single",),
    ("oracle", "quality"),
    ("oracle", "cost"),
    *((point, figure) for point in ("matched", "margin", "budget", "cascade") for figure in POINT_FIGURES),
    ("budget", "over_budget"),
    ("cascade", "predicted_quality"),
    ("cascade", "predicted_cost"),
    ("recovery", "agreement"),
    ("recovery", "agreement_minus_best_fixed"),
    ("recovery", "true_quality_lost"),
    ("recovery", "router_choice", "cost"),
    ("recovery", "true_choice", "cost"),
    *(
        ("logged", point, figure)
        for point in ("margin", "budget", "matched", "cascade_first")
        for figure in POINT_FIGURES
    ),
)


def figure_at(figures: dict, path) -> float:
    """The figure at `path` (keys into fold_figures' output); NaN where a fold lacks it."""
    for key in path:
        if not isinstance(figures, dict) or key not in figures:
            return float("nan")
        figures = figures[key]
    return float(figures)


def bundle_figures(
    names,
    decisions,
    quality: np.ndarray,
    cost: np.ndarray,
    *,
    routed: np.ndarray | None = None,
    propensity: np.ndarray | None = None,
    catch_rate: float = 0.5,
) -> dict:
    """`make evaluate`'s figures of an N-endpoint bundle from the SDK's own Decisions of held-out
    rows: on the rows with every outcome, the first endpoint's against each endpoint alone, the best
    single (paired, with a 95% normal interval) and the oracle, and the whole cascade's expectation;
    first-call shares; on one-outcome rows (`routed`, `propensity`), SNIPS estimates. JSON-ready."""
    index = {name: k for k, name in enumerate(names)}
    choice = np.array([index[d.endpoint] for d in decisions], dtype=np.int64)
    orders = [[index[n] for n in d.cascade] for d in decisions]
    complete = np.isfinite(quality).all(axis=1)
    out: dict = {
        "rows": int(len(decisions)),
        "complete_rows": int(complete.sum()),
        "shares": shares(choice, names),
        "unfamiliar_share": float(np.mean([d.unfamiliar for d in decisions])) if decisions else float("nan"),
        "degraded": int(sum(d.degraded for d in decisions)),
    }
    if complete.any():
        q, c, chosen = quality[complete], cost[complete], choice[complete]
        single, best = singles(names, q, c)
        router_q, router_c = realized(chosen, q, c)
        # z 1.96, where the policy effects' intervals take the exact quantile: the figures as first reported
        versus = paired(q[:, index[best]], q[np.arange(len(q)), chosen], z=1.96)
        cascade_q, cascade_c = cascade_expectation([o for o, k in zip(orders, complete) if k], q, c, catch_rate)
        out.update(
            single=single,
            best_single=best,
            oracle=dict(zip(("quality", "cost"), oracle(q, c))),
            router={
                "quality": router_q,
                "cost": router_c,
                "quality_minus_best_single": versus["difference"],
                "quality_minus_best_single_ci95": versus["interval"],
                "cost_saved_vs_best_single": _saved(router_c, single[best]),
            },
            cascade={"catch_rate": catch_rate, "quality": float(cascade_q.mean()), "cost": float(cascade_c.mean())},
        )
    if routed is not None and propensity is not None:
        one = ~complete & (routed >= 0) & np.isfinite(propensity)
        if one.any():
            ran = routed[one]  # the endpoint each of those rows ran on, whose outcome it holds
            logged = dict(routed=ran, propensity=propensity[one], quality=quality[one, ran], cost=cost[one, ran])
            out["logged"] = logged_figures(names, {"router": choice[one]}, logged)
    return out
