"""What a policy file (serving.policy, docs/policies.md) does to logged traffic, offline.

`make evaluate POLICY=policy.yaml` applies the policy's rules to every evaluated request after the
learned router decided, exactly as the SDK does (serving.policy._rules.PolicySet.apply on the SDK's
own Decision), and reports:

- per rule: how many requests it decided (`Decision.rule`), its action, and how it moved them
  between zones (model zone -> zone after the rules);
- requests no endpoint may serve (NoFeasibleEndpoint: the SDK raises for them), by the rules that
  closed every endpoint;
- the routing figures on the requests that stay servable, with the model's zones and with the
  rules' (quality with fallback, cloud-first share, expected cloud calls, $ per request at each
  cloud price), and their paired difference per request with a 95% normal interval.

Every figure is an exact expectation over fallback catches, as in evaluation.policies. Rules read
the request's metadata, which logs do not hold: one mapping (`--metadata key=value`) stands for
every request. Budgets read the Router's spending ledger, which is empty offline: a budget
condition never holds here, and the report says when the policy has one.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from evaluation import fallback
from evaluation.fallback import Catch
from evaluation.policy_metrics import CostModel
from serving._contract import CLOUD, EDGE, FALLBACK
from serving.routing._chooser import zone_decision
from serving.routing._request import Request

if TYPE_CHECKING:
    from evaluation.rows import Rows
    from serving.policy._rules import PolicySet

Z = 1.959963984540054  # the normal 97.5% quantile


def _per_request(zones: np.ndarray, q_edge: np.ndarray, q_cloud: np.ndarray, catch: Catch, cost: CostModel) -> dict:
    """Per request, the expected quality with fallback, cloud calls and $ at each cloud price."""
    in_fallback = zones == FALLBACK
    fires = np.where(in_fallback, fallback.fires(q_edge, catch), 0.0)
    quality = np.where(
        zones == CLOUD, q_cloud, np.where(in_fallback, fallback.fallback_quality(q_edge, q_cloud, catch), q_edge)
    )
    first_cloud = (zones == CLOUD).astype(np.float64)
    calls = first_cloud + fires
    dollars = {
        name: first_cloud * price + (1 - first_cloud) * cost.edge + fires * price for name, price in cost.cloud.items()
    }
    return {"quality_with_fallback": quality, "cloud_first_share": first_cloud, "expected_cloud_calls": calls} | {
        f"cost_per_request.{name}": values for name, values in dollars.items()
    }


def metadata_pairs(items: Sequence[str]) -> dict[str, str]:
    """`--metadata` KEY=VALUE strings as request metadata (str to str: values stay text);
    ValueError naming the first that is not one."""
    bad = [item for item in items if "=" not in item or not item.split("=", 1)[0]]
    if bad:
        raise ValueError(f"--metadata expects KEY=VALUE, got {bad[0]!r}")
    return dict(item.split("=", 1) for item in items)


def paired(before: np.ndarray, after: np.ndarray) -> dict:
    """Means without and with the rules, and the paired per-row difference with its normal 95% interval."""
    diff = after - before
    half = Z * float(diff.std(ddof=1)) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
    mean = float(diff.mean())
    return {
        "without_rules": float(before.mean()),
        "with_rules": float(after.mean()),
        "difference": mean,
        "interval": [mean - half, mean + half],
    }


def rules_effect(
    rows: Rows,
    policy: PolicySet,
    *,
    metadata: Mapping[str, str] | None = None,
    catch_rate: float | Catch = 0.5,
    cost: CostModel | None = None,
) -> dict:
    """The policy's effect on these rows (routed by the learned router: rows.zones are the SDK's)."""
    from serving.policy._errors import NoFeasibleEndpoint

    if rows.zones is None:
        raise ValueError("rules_effect needs the rows' learned zones (Rows.route or Rows.with_zones)")
    cost = cost or CostModel()
    catch = catch_rate if isinstance(catch_rate, Catch) else Catch.for_rows(rows.rejected, catch_rate)
    after: list[str | None] = []
    fired: list[str | None] = []
    closed: Counter[tuple[str, ...]] = Counter()
    for prompt, precision, n_tokens, zone in zip(rows.prompts, rows.precisions, rows.n_tokens, rows.zones):
        try:
            decision = zone_decision(zone, Request(prompt, precision, metadata), int(round(n_tokens)), policy)
        except NoFeasibleEndpoint as exc:
            closed[tuple(exc.rules)] += 1
            after.append(None)
            fired.append(None)
            continue
        after.append(decision.zone)
        fired.append(decision.rule)
    servable = np.array([z is not None for z in after], dtype=bool)
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
        "no_rule": sum(1 for name, z in zip(fired, after) if name is None and z is not None),
        "rules": by_rule,
        "no_feasible_endpoint": {
            "requests": int((~servable).sum()),
            "by_rules": {" + ".join(names): count for names, count in sorted(closed.items())},
        },
        "notes": [],
    }
    if any(rule.budget is not None for rule in policy.rules):
        result["notes"].append(
            "budget conditions read the Router's spending ledger, empty offline: they never hold here"
        )
    if not servable.any():
        result["notes"].append("no request stays servable: no routing figures")
        return result
    zones_before = np.asarray(rows.zones, dtype=object)[servable]
    zones_after = np.array([z for z in after if z is not None], dtype=object)
    q_edge, q_cloud = rows.q_edge[servable], rows.q_cloud[servable]
    kept = catch.take(servable)
    before = _per_request(zones_before, q_edge, q_cloud, kept, cost)
    now = _per_request(zones_after, q_edge, q_cloud, kept, cost)
    result["servable_rows"] = int(servable.sum())
    result["figures"] = {name: paired(before[name], now[name]) for name in before}
    result["zones"] = {
        "without_rules": {z: int((zones_before == z).sum()) for z in (EDGE, FALLBACK, CLOUD)},
        "with_rules": {z: int((zones_after == z).sum()) for z in (EDGE, FALLBACK, CLOUD)},
    }
    return result
