"""An N-endpoint bundle's decisions (docs/endpoints.md#n-endpoint-bundles): each endpoint's
calibrated P(good answer) from the bundle's graph, the price of each call at the prompt's token
count, feasibility from the endpoints' context limits, the capabilities the request needs
(serving.capabilities: an endpoint lacking one is ruled out under the built-in rule
needs:<capability>; a request's language, declared or detected, when an endpoint declares
`languages`: serving.language) and the policy's verdict (serving.policy), then the bundle's choice rule (serving.endpoint_choice, the functions the offline evaluation
runs, so the SDK and `make endpoints` decide alike).

A Decision of an N-endpoint bundle: `endpoint` the first endpoint to run, `cascade` the order to
try them in when an answer fails (the rule's cascade, or the chosen endpoint then each costlier
one expected to do better: endpoint_choice.escalation), `expected` every endpoint's probability,
`score` the chosen endpoint's. `target` is "edge" when the first endpoint runs on the device,
else "cloud"; `zone` edge_with_cloud_fallback when a device endpoint comes first and a cloud
endpoint later in the cascade, else the target.

Policy rules name the bundle's endpoints (a policy for N endpoints has no `route` rules, which
set a two-endpoint zone): a forbidden endpoint is never in the cascade; a force leaves its
endpoint alone; a prefer puts its endpoint first when it is feasible (the cascade climbs from
it). No feasible endpoint: NoFeasibleEndpoint, naming the rules and the context limits involved;
never a silent default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, NoReturn, Sequence

import numpy as np

from serving.capabilities import declares_languages, lacking_text, rule_name, ruled_out, with_language
from serving.contract import cascade_placement
from serving.decision import Decision
from serving.endpoint_choice import NONE, best_under_price, call_costs, cascade, cheapest_within, escalation
from serving.language import shared_detector
from serving.manifest import ENDPOINT_RULES

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from serving.capabilities import Needs
    from serving.endpoints import Capabilities
    from serving.manifest import EndpointsSection
    from serving.policy.budgets import Spending
    from serving.policy.rules import PolicySet, Verdict

    _Lacking = Mapping[str, tuple[str, ...]]  # endpoint -> the needed capabilities it lacks


_NOTHING_LACKING: list[_Lacking] = [{}]  # times n: no request needs anything (never changed)


class EndpointChooser:
    """One N-endpoint bundle's choice among its endpoints (module doc); built once per bundle."""

    def __init__(self, section: EndpointsSection, model_version: str, max_chars: int) -> None:
        self.section = section
        self.endpoints = list(section.spec)
        self.names = section.names
        self.on_device = np.array([e.where == "device" for e in self.endpoints])
        self.rule, self.parameter = section.rule, section.parameter
        self.model_version, self.max_chars = model_version, max_chars
        self._index = {name: k for k, name in enumerate(self.names)}
        self._said = f"{self.rule} ({ENDPOINT_RULES[self.rule]} {self.parameter:.4g})"
        self.capabilities: dict[str, Capabilities | None] = {e.name: e.capabilities for e in self.endpoints}
        # Each request's language is read only when an endpoint declares languages (serving.language).
        self.detector = shared_detector() if declares_languages(self.capabilities) else None

    def check_policy(self, policy: PolicySet | None) -> None:
        """A policy must name this bundle's endpoints (PolicySet.load(path, endpoints=...))."""
        if policy is not None and tuple(policy.endpoints) != self.names:
            from serving.policy.rules import PolicyFileError

            raise PolicyFileError(
                f"{policy.source}: the policy is for endpoints {', '.join(policy.endpoints)}; this bundle "
                f"routes among {', '.join(self.names)}: load it with PolicySet.load(path, endpoints=...)"
            )

    def decisions(
        self,
        prompts: Sequence[str],
        precisions: Sequence[str | None],
        expected: NDArray[np.float64],
        n_tokens: Sequence[float],
        policy: PolicySet | None = None,
        metadata: Sequence[Mapping[str, str] | None] | None = None,
        spending: Spending | None = None,
        needs: Sequence[Needs | None] | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> list[Decision]:
        """The Decisions of scored prompts (`expected` [n, N] from the bundle's graph, `n_tokens`
        the SDK's counts; `needs` what each request needs, `capabilities` the endpoints' by name,
        default the bundle's specs'). NoFeasibleEndpoint for the first prompt no endpoint may serve."""
        tokens = [round(n) for n in n_tokens]
        cost, fits, feasible, verdicts, lacking = self._feasible(
            prompts, precisions, tokens, policy, metadata, spending, needs, capabilities
        )
        orders = self._orders(expected, cost, feasible, verdicts)
        return [
            self._decision(
                prompts[i], precisions[i], tokens[i], expected[i], cost[i], fits[i], orders[i], verdicts[i], lacking[i]
            )
            for i in range(len(prompts))
        ]

    def degraded(
        self,
        prompts: Sequence[str],
        precisions: Sequence[str | None],
        n_tokens: Sequence[int],
        note: str,
        policy: PolicySet | None = None,
        metadata: Sequence[Mapping[str, str] | None] | None = None,
        spending: Spending | None = None,
        needs: Sequence[Needs | None] | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> list[Decision]:
        """Decisions when the graph could not score (`note` says why): no expected quality, so the
        cheapest feasible endpoint first and then each costlier one, the policy, the capabilities
        and the context limits as ever; `degraded` set."""
        cost, fits, feasible, verdicts, lacking = self._feasible(
            prompts, precisions, list(n_tokens), policy, metadata, spending, needs, capabilities
        )
        first = best_under_price(np.zeros_like(cost), cost, 1.0, feasible)
        by_price = np.argsort(np.argsort(cost, axis=1, kind="stable"), axis=1).astype(np.float64)
        orders = escalation(by_price, cost, first, feasible)
        decisions = []
        for i, order in enumerate(orders):
            decision = self._decision(
                prompts[i],
                precisions[i],
                n_tokens[i],
                None,
                cost[i],
                fits[i],
                order,
                verdicts[i],
                lacking[i],
                note=note,
            )
            decisions.append(decision)
        return decisions

    def _feasible(
        self,
        prompts: Sequence[str],
        precisions: Sequence[str | None],
        tokens: Sequence[int],
        policy: PolicySet | None,
        metadata: Sequence[Mapping[str, str] | None] | None,
        spending: Spending | None,
        needs: Sequence[Needs | None] | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.bool_], list[Verdict | None], list[_Lacking]]:
        """(each call's price, whether the prompt fits each context, what may serve it, the policy's
        verdicts, the endpoints each request's needs rule out): NoFeasibleEndpoint when the policy
        forbids every endpoint."""
        cost, fits = call_costs(self.endpoints, tokens, self.section.output_tokens)
        n = len(prompts)
        needed = needs if needs is not None else [None] * n
        metadatas = metadata if metadata is not None else [None] * n
        feasible, lacking = fits, _NOTHING_LACKING * n
        known = capabilities if capabilities is not None else self.capabilities
        # Each request's language (declared, else detected) only when an endpoint declares languages.
        reads_language = self.detector is not None if capabilities is None else declares_languages(capabilities)
        if reads_language:
            detector = self.detector or shared_detector()
            needed = [with_language(w, p, m, detector) for w, p, m in zip(needed, prompts, metadatas)]
        if any(needed):
            lacking = [ruled_out(w, known, self.names) if w else {} for w in needed]
        if any(lacking):
            able = np.array([[name not in out for name in self.names] for out in lacking])
            feasible = fits & able.reshape(fits.shape)
        if policy is None:
            return cost, fits, feasible, [None] * n, lacking
        verdicts: list[Verdict | None] = [
            policy.evaluate(p, t, q, m, spending, w)
            for p, t, q, m, w in zip(prompts, tokens, precisions, metadatas, needed)
        ]
        allowed = np.array([[v is not None and name in v.allowed for name in self.names] for v in verdicts])
        return cost, fits, feasible & allowed.reshape(fits.shape), verdicts, lacking

    def _orders(
        self,
        expected: NDArray[np.float64],
        cost: NDArray[np.float64],
        feasible: NDArray[np.bool_],
        verdicts: Sequence[Verdict | None],
    ) -> list[list[int]]:
        """Each request's cascade: the rule's, or from the endpoint a policy puts first."""
        first = np.full(len(expected), NONE, dtype=np.int64)
        for row, verdict in enumerate(verdicts):
            soft = verdict.preferred if verdict is not None else None
            if soft is not None and soft.endpoint is not None and feasible[row, self._index[soft.endpoint]]:
                first[row] = self._index[soft.endpoint]
        plain = first == NONE
        if self.rule == "cascade":
            orders = cascade(expected, cost, self.parameter, feasible)
        else:
            orders = escalation(expected, cost, np.where(plain, self._first(expected, cost, feasible), NONE), feasible)
        if not plain.all():
            steered = escalation(expected, cost, first, feasible)
            orders = [steered[row] if not plain[row] else order for row, order in enumerate(orders)]
        return orders

    def _first(
        self, expected: NDArray[np.float64], cost: NDArray[np.float64], feasible: NDArray[np.bool_]
    ) -> NDArray[np.int64]:
        """The rule's first endpoint per request (a cascade's first step), NONE where none is feasible."""
        if self.rule == "cheapest_within":
            return cheapest_within(expected, cost, self.parameter, feasible)
        if self.rule == "best_under_price":
            return best_under_price(expected, cost, self.parameter, feasible)
        return np.array(
            [o[0] if o else NONE for o in cascade(expected, cost, self.parameter, feasible)], dtype=np.int64
        )

    def _decision(
        self,
        prompt: str,
        precision: str | None,
        n_tokens: int,
        expected: NDArray[np.float64] | None,
        cost: NDArray[np.float64],
        fits: NDArray[np.bool_],
        order: list[int],
        verdict: Verdict | None,
        lacking: _Lacking,
        *,
        note: str = "",
    ) -> Decision:
        names = self.names
        forbidden = tuple(n for n in names if verdict is not None and n not in verdict.allowed)
        rule = verdict.rule if verdict is not None else None
        if not order:
            self._none_feasible(n_tokens, fits, forbidden, rule.name if rule is not None else None, lacking)
        first = order[0]
        target, zone = cascade_placement([bool(self.on_device[k]) for k in order])
        steps = " -> ".join(names[k] for k in order)
        values = expected.tolist() if expected is not None else None
        if values is None:
            reason = (
                f"{note}: the cheapest feasible endpoint first, {names[first]} (${cost[first]:.5f}); cascade {steps}"
            )
        else:
            said = f"{names[first]} (expected {values[first]:.3f}, ${cost[first]:.5f})"
            reason = f"{self._said}: {said}; cascade {steps}"
        too_long = [names[k] for k in range(len(names)) if not fits[k]]
        if too_long:
            reason += f"; ~{n_tokens} tokens exceed the context of {', '.join(too_long)}"
        if len(prompt) > self.max_chars:
            reason += f"; features from the first {self.max_chars} characters"
        rule_said = rule.name if rule is not None else None
        if rule is not None:
            reason = f"policy '{rule.name}': {_policy_said(verdict, forbidden)}; model: {reason}"
        if lacking:  # ruled out like a forbidden endpoint, under the built-in needs:<capability> rule
            reason = f"{rule_name(lacking)}: {lacking_text(lacking)}; {reason}"
            forbidden = tuple(n for n in names if n in forbidden or n in lacking)
            rule_said = rule_said or rule_name(lacking)
        return Decision(
            target=target,
            zone=zone,
            score=values[first] if values is not None else 0.0,
            reason=reason,
            degraded=values is None,
            model_version=self.model_version,
            precision=precision,
            n_tokens=n_tokens,
            truncated=len(prompt) > self.max_chars,
            rule=rule_said,
            forbidden=forbidden,
            expected=dict(zip(names, values)) if values is not None else None,
            endpoint=names[first],
            cascade=tuple(names[k] for k in order),
        )

    def _none_feasible(
        self,
        n_tokens: int,
        fits: NDArray[np.bool_],
        forbidden: tuple[str, ...],
        rule: str | None,
        lacking: _Lacking,
    ) -> NoReturn:
        from serving.policy.errors import NoFeasibleEndpoint

        parts = []
        if forbidden:
            parts.append(f"the policy forbids {', '.join(forbidden)}" + (f" (policy '{rule}')" if rule else ""))
        if lacking:
            needed = dict.fromkeys(c for missing in lacking.values() for c in missing)
            parts.append(f"the request needs {', '.join(needed)} ({rule_name(lacking)}): {lacking_text(lacking)}")
            rule = rule or rule_name(lacking)
        too_long = [n for n, ok in zip(self.names, fits.tolist()) if not ok]
        if too_long:
            parts.append(f"~{n_tokens} tokens exceed the context of {', '.join(too_long)}")
        raise NoFeasibleEndpoint(
            f"no endpoint may serve this request: {'; '.join(parts)}", rules=[rule] if rule else []
        )


def _policy_said(verdict: Verdict | None, forbidden: tuple[str, ...]) -> str:
    """What the deciding rule did, as PolicySet.apply says it."""
    if verdict is None or verdict.rule is None:
        return ""
    rule = verdict.rule
    if verdict.forced is not None:
        return f"forced {rule.endpoint}"
    if rule is not verdict.preferred:
        return f"forbids {', '.join(forbidden)}"
    return f"routes {rule.zone}" if rule.zone is not None else f"prefers {rule.endpoint}"
