"""What a policy file (serving.policy) does to logged traffic, offline, decided as the SDK decides
(docs/policies.md#what-a-policy-does-to-your-traffic-offline): rules_effect on two-endpoint rows
(`make evaluate POLICY=...`), policy_effect on N-endpoint folds (`make endpoints ARGS="--policy
FILE"`). Requests a policy leaves no endpoint are counted by the rules that closed them and left
out of every figure; budget and `needs` conditions never hold offline (the notes say so).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from evaluation import fallback
from evaluation.endpoints import shares
from evaluation.fallback import Catch
from evaluation.metrics import CostModel, paired, request_costs, zone_probabilities
from evaluation.rows import Rows
from serving._contract import CLOUD, EDGE, FALLBACK
from serving.endpoints._choice import cascade_expectation
from serving.policy._errors import NoFeasibleEndpoint
from serving.policy._rules import PolicySet
from serving.routing._chooser import Chooser, zone_decision
from serving.routing._decision import Decision
from serving.routing._request import Request
from serving.scoring._scorer import Scores

FIGURES = ("quality", "cost", "cascade_quality", "cascade_cost")  # N endpoints, per row


def _per_request(zones: np.ndarray, q_edge: np.ndarray, q_cloud: np.ndarray, catch: Catch, cost: CostModel) -> dict:
    """Per request, the expected quality with fallback, cloud calls and $ at each cloud price."""
    probs = zone_probabilities(zones)
    fires = probs[:, 1] * fallback.fires(q_edge, catch)
    quality = np.where(
        zones == CLOUD, q_cloud, np.where(zones == FALLBACK, fallback.fallback_quality(q_edge, q_cloud, catch), q_edge)
    )
    return {
        "quality_with_fallback": quality,
        "cloud_first_share": probs[:, 2],
        "expected_cloud_calls": probs[:, 2] + fires,
    } | {f"cost_per_request.{name}": values for name, values in request_costs(probs, fires, cost).items()}


def metadata_pairs(items: Sequence[str]) -> dict[str, str]:
    """`--metadata` KEY=VALUE strings as request metadata (str to str: values stay text);
    ValueError naming the first that is not one."""
    bad = [item for item in items if "=" not in item or not item.split("=", 1)[0]]
    if bad:
        raise ValueError(f"--metadata expects KEY=VALUE, got {bad[0]!r}")
    return dict(item.split("=", 1) for item in items)


def rules_effect(
    rows: Rows,
    policy: PolicySet,
    *,
    metadata: Mapping[str, str] | None = None,
    catch_rate: float = 0.5,
    cost: CostModel | None = None,
) -> dict:
    """The policy's effect on these rows (routed by the learned router: rows.zones are the SDK's)."""
    if rows.zones is None:
        raise ValueError("rules_effect needs the rows' learned zones (Rows.route or Rows.with_zones)")
    cost = cost or CostModel()
    catch = Catch.for_rows(rows.rejected, catch_rate)
    decisions: list[Decision | None] = []  # None: the rules leave no endpoint
    closed: Counter[tuple[str, ...]] = Counter()
    for prompt, precision, n_tokens, zone in zip(rows.prompts, rows.precisions, rows.n_tokens, rows.zones):
        try:
            decisions.append(zone_decision(zone, Request(prompt, precision, metadata), int(round(n_tokens)), policy))
        except NoFeasibleEndpoint as exc:
            closed[tuple(exc.rules)] += 1
            decisions.append(None)
    after = [d.zone if d is not None else None for d in decisions]
    fired = [d.rule if d is not None else None for d in decisions]
    servable = np.array([d is not None for d in decisions], dtype=bool)
    n = len(rows)
    by_rule: dict[str, dict] = {}
    for rule in policy.rules:
        mine = [i for i, name in enumerate(fired) if name == rule.name]
        moves = Counter(f"{rows.zones[i]}->{after[i]}" for i in mine if rows.zones[i] != after[i])
        by_rule[rule.name] = {
            "action": rule.action,
            "endpoint": rule.endpoint,
            "requests": len(mine),
            "share": len(mine) / n if n else float("nan"),
            "zone_changes": dict(sorted(moves.items())),
        }
    result: dict = {
        "source": policy.source,
        "version": policy.version,
        "metadata": dict(metadata or {}),
        "rows": n,
        "no_rule": sum(1 for d in decisions if d is not None and d.rule is None),
        "rules": by_rule,
        "no_feasible_endpoint": {"requests": int((~servable).sum()), "by_rules": _by_rules(closed)},
        "notes": _notes(policy),
    }
    if not servable.any():
        result["notes"].append("no request stays servable: no routing figures")
        return result
    zones_before = np.asarray(rows.zones, dtype=object)[servable]
    zones_after = np.array([z for z in after if z is not None], dtype=object)
    same = (rows.q_edge[servable], rows.q_cloud[servable], catch.take(servable), cost)  # the outcomes, rates, prices
    before, now = _per_request(zones_before, *same), _per_request(zones_after, *same)
    result["servable_rows"] = int(servable.sum())
    result["figures"] = {name: paired(before[name], now[name]) for name in before}
    result["zones"] = {
        "without_rules": {z: int((zones_before == z).sum()) for z in (EDGE, FALLBACK, CLOUD)},
        "with_rules": {z: int((zones_after == z).sum()) for z in (EDGE, FALLBACK, CLOUD)},
    }
    return result


@dataclass
class HeldOut:
    """One fold's held-out rows that hold every endpoint's outcome; its arrays are [rows, endpoints]."""

    chooser: Chooser  # the SDK's chooser at the fold's rule and parameter
    prompts: Sequence[str]
    precisions: Sequence[str | None]
    n_tokens: Sequence[float]  # each prompt's estimated input tokens
    expected: np.ndarray  # the fold's outcome models' probabilities
    quality: np.ndarray  # each endpoint's logged outcome
    cost: np.ndarray  # each endpoint's logged price
    metadata: Sequence[Mapping[str, str] | None]  # each row's own (None if none)


def _decide(chooser: Chooser, fold: HeldOut, i: int, policy, metadata) -> Decision:
    request = Request(fold.prompts[i], fold.precisions[i], metadata)
    return chooser.decisions([request], Scores([fold.n_tokens[i]], expected=fold.expected[i : i + 1]), policy)[0]


def _fired(policy: PolicySet, fold: HeldOut, i: int, metadata) -> list[str]:
    """The rules the verdict on a servable row holds: the force, each endpoint's forbid, the prefer."""
    verdict = policy.evaluate(fold.prompts[i], round(fold.n_tokens[i]), fold.precisions[i], metadata)
    rules = [verdict.forced] + list((verdict.forbidden_by or {}).values()) + [verdict.preferred]
    return list(dict.fromkeys(rule.name for rule in rules if rule is not None))


def _figures(decision: Decision, names: tuple[str, ...], quality: np.ndarray, cost: np.ndarray, catch_rate: float):
    assert decision.endpoint is not None
    first = names.index(decision.endpoint)
    order = [[names.index(name) for name in decision.cascade]]
    q, c = cascade_expectation(order, quality[None, :], cost[None, :], catch_rate)
    return first, (float(quality[first]), float(cost[first]), float(q[0]), float(c[0]))


def policy_effect(
    folds: Sequence[HeldOut], policy: PolicySet, *, metadata: Mapping[str, str] | None = None, catch_rate: float = 0.5
) -> dict:
    """The policy's effect on the folds' held-out rows (module doc); JSON-ready. `per_fold` holds
    each fold's means without and with the policy, for intervals over the folds."""
    if not folds:
        raise ValueError("policy_effect needs at least one fold of held-out rows")
    names = folds[0].chooser.names
    fired: Counter[str] = Counter()
    changed: Counter[str] = Counter()
    closed: Counter[tuple[str, ...]] = Counter()
    closing: Counter[str] = Counter()
    no_rule = unservable_anyway = 0
    firsts: list[tuple[int, int]] = []  # each servable row's first endpoint without and with the policy
    before: list[tuple[float, ...]] = []
    after: list[tuple[float, ...]] = []
    per_fold = []
    for fold in folds:
        start = len(before)
        for i in range(len(fold.prompts)):
            given = {**(fold.metadata[i] or {}), **(metadata or {})} or None
            try:
                plain = _decide(fold.chooser, fold, i, None, given)
            except NoFeasibleEndpoint:
                unservable_anyway += 1  # the context limits alone leave no endpoint: not the policy's doing
                continue
            try:
                ruled = _decide(fold.chooser, fold, i, policy, given)
            except NoFeasibleEndpoint as exc:
                closed[tuple(exc.rules)] += 1
                closing.update(dict.fromkeys(exc.rules, 1))
                fired.update(dict.fromkeys(exc.rules, 1))
                continue
            names_fired = _fired(policy, fold, i, given)
            fired.update(names_fired)
            if not names_fired:
                no_rule += 1
            k0, plain_figures = _figures(plain, names, fold.quality[i], fold.cost[i], catch_rate)
            k1, ruled_figures = _figures(ruled, names, fold.quality[i], fold.cost[i], catch_rate)
            if k0 != k1:
                changed.update(names_fired)
            firsts.append((k0, k1))
            before.append(plain_figures)
            after.append(ruled_figures)
        b, a = np.array(before[start:], float).reshape(-1, 4), np.array(after[start:], float).reshape(-1, 4)
        means = {"without_rules": b, "with_rules": a, "difference": a - b}
        figures = {f: {k: _mean(x[:, j]) for k, x in means.items()} for j, f in enumerate(FIGURES)}
        per_fold.append({"rows": len(fold.prompts), "servable_rows": len(b), **figures})
    unservable, rows = sum(closed.values()), sum(len(fold.prompts) for fold in folds)
    result: dict = {
        "source": policy.source,
        "version": policy.version,
        "endpoints": list(names),
        "metadata": dict(metadata or {}),
        "rows_with_metadata": sum(1 for fold in folds for m in fold.metadata if m),
        "rows": rows,
        "rules": {
            rule.name: {
                "action": rule.action,
                "endpoint": rule.endpoint,
                "rows": fired[rule.name],
                "share": fired[rule.name] / rows if rows else float("nan"),
                "first_endpoint_changed": changed[rule.name],
                "no_feasible_endpoint": closing[rule.name],
            }
            for rule in policy.rules
        },
        "no_rule": no_rule,
        "no_feasible_endpoint": {
            "rows": unservable,
            "share": unservable / rows if rows else float("nan"),
            "by_rules": _by_rules(closed),
        },
        "no_feasible_endpoint_without_policy": unservable_anyway,
        "servable_rows": len(before),
        "per_fold": per_fold,
        "notes": _notes(policy),
    }
    if not before:
        result["notes"].append("no row stays servable with the policy: no shares or figures")
        return result
    b, a, first = np.array(before, float), np.array(after, float), np.array(firsts)
    result["shares"] = {"without_rules": shares(first[:, 0], names), "with_rules": shares(first[:, 1], names)}
    result["figures"] = {f: paired(b[:, j], a[:, j]) for j, f in enumerate(FIGURES)}
    return result


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def _by_rules(closed: Counter) -> dict[str, int]:
    return {" + ".join(rules): count for rules, count in sorted(closed.items())}


def _notes(policy: PolicySet) -> list[str]:
    notes = []
    if any(rule.budget is not None for rule in policy.rules):
        notes.append("budget conditions read the Router's spending ledger, empty offline: they never hold here")
    if any(rule.needs for rule in policy.rules):
        notes.append("needs conditions read the request's capabilities, which logs do not hold: they never hold here")
    return notes
