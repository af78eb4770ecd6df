"""What a policy file (serving.policy, docs/policies.md) does to N-endpoint traffic, offline
(`make endpoints ARGS="--policy FILE"`, docs/endpoints.md#policies-on-n-endpoint-logs).

Every held-out row is decided twice by the SDK's own N-endpoint chooser
(serving.routing._chooser.Chooser.decisions, the call Router.route makes for an N-endpoint
bundle), on the fold's outcome models' probabilities: without the policy and with it, one row at
a time so that a row the policy leaves no endpoint raises NoFeasibleEndpoint for itself alone.
The report gives:

- per rule, the rows it fired on (PolicySet.evaluate's Verdict: the force that decided, the first
  forbid of each endpoint it removed, the prefer that decided), how many of them changed the first
  endpoint, and the rows it left no endpoint (the rules NoFeasibleEndpoint names);
- the rows no endpoint may serve with the policy: counted, by the rules that closed every
  endpoint, and left out of every figure (the SDK raises for them: never scored as quality 0,
  never sent elsewhere); rows no endpoint may serve even without it (context limits) likewise;
- on the rows servable both ways, each endpoint's share of first calls and the realized quality
  and cost of the first endpoint (the logged outcome and cost of the call) and of the whole
  cascade (cascade_expectation at the catch rate), without and with the policy, paired per row.

Rows carry their own request metadata (data.endpoint_logs' `metadata`); `metadata` given here is
laid over every row's (what-if: "every request from the free tier"). Detectors read the row's
prompt. Budgets read the Router's spending ledger and `needs` conditions the request's
capabilities, neither of which logs hold: such conditions never hold here (the report says so).
Prompts' token counts are estimated from their characters, as every `make endpoints` price is.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from evaluation.rules_effect import paired  # the paired per-row difference make evaluate POLICY= reports
from serving.endpoints._choice import cascade_expectation

if TYPE_CHECKING:
    from serving.policy._rules import PolicySet
    from serving.routing._chooser import Chooser
    from serving.routing._decision import Decision

FIGURES = ("quality", "cost", "cascade_quality", "cascade_cost")


@dataclass
class HeldOut:
    """One fold's held-out rows that hold every endpoint's outcome: `expected` the fold's outcome
    models' probabilities, `quality` and `cost` the logged outcome and price of each endpoint's
    call ([rows, endpoints]), `n_tokens` each prompt's estimated input tokens, `metadata` each row's
    own (None where it has none), `chooser` the SDK's chooser at the fold's rule and parameter."""

    chooser: Chooser
    prompts: Sequence[str]
    precisions: Sequence[str | None]
    n_tokens: Sequence[float]
    expected: np.ndarray
    quality: np.ndarray
    cost: np.ndarray
    metadata: Sequence[Mapping[str, str] | None]


def _decide(chooser: Chooser, fold: HeldOut, i: int, policy, metadata) -> Decision:
    from serving.routing._request import Request
    from serving.scoring._scorer import Scores

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
    from serving.policy._errors import NoFeasibleEndpoint

    if not folds:
        raise ValueError("policy_effect needs at least one fold of held-out rows")
    names = folds[0].chooser.names
    fired: Counter[str] = Counter()
    changed: Counter[str] = Counter()
    closed: Counter[tuple[str, ...]] = Counter()
    closing: Counter[str] = Counter()
    no_rule = unservable_anyway = rows = 0
    first_before: list[int] = []
    first_after: list[int] = []
    before: list[tuple[float, ...]] = []
    after: list[tuple[float, ...]] = []
    per_fold = []
    for fold in folds:
        start = len(before)
        for i in range(len(fold.prompts)):
            rows += 1
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
            first_before.append(k0)
            first_after.append(k1)
            before.append(plain_figures)
            after.append(ruled_figures)
        b, a = np.array(before[start:], float).reshape(-1, 4), np.array(after[start:], float).reshape(-1, 4)
        per_fold.append(
            {
                "rows": len(fold.prompts),
                "servable_rows": len(b),
                **{
                    f: {
                        "without_rules": _mean(b[:, j]),
                        "with_rules": _mean(a[:, j]),
                        "difference": _mean(a[:, j] - b[:, j]),
                    }
                    for j, f in enumerate(FIGURES)
                },
            }
        )
    unservable = sum(closed.values())
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
            "by_rules": {" + ".join(r): count for r, count in sorted(closed.items())},
        },
        "no_feasible_endpoint_without_policy": unservable_anyway,
        "servable_rows": len(before),
        "per_fold": per_fold,
        "notes": _notes(policy),
    }
    if not before:
        result["notes"].append("no row stays servable with the policy: no shares or figures")
        return result
    b, a = np.array(before, float), np.array(after, float)
    result["shares"] = {
        "without_rules": _shares(np.array(first_before), names),
        "with_rules": _shares(np.array(first_after), names),
    }
    result["figures"] = {f: paired(b[:, j], a[:, j]) for j, f in enumerate(FIGURES)}
    return result


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def _shares(first: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
    return {name: float(np.mean(first == k)) for k, name in enumerate(names)}


def _notes(policy: PolicySet) -> list[str]:
    notes = []
    if any(rule.budget is not None for rule in policy.rules):
        notes.append("budget conditions read the Router's spending ledger, empty offline: they never hold here")
    if any(rule.needs for rule in policy.rules):
        notes.append("needs conditions read the request's capabilities, which logs do not hold: they never hold here")
    return notes
