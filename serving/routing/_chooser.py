"""The one chooser: scored requests -> Decisions, for every bundle and for the rule table (docs/sdk.md, how the router
chooses). What may serve a request (context limits, needs and languages, the policy's verdict) is settled once, here;
the bundle's rule (Bands: two endpoints, a zone from the score's thresholds; Choice: N endpoints, expected quality and
prices) then orders what is left into the cascade. No endpoint left: NoFeasibleEndpoint, never a silent default."""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import time
from typing import TYPE_CHECKING, Mapping, NoReturn, Sequence

import numpy as np

from serving._contract import CLOUD, DEFAULT_EDGE_CONTEXT_TOKENS, EDGE, FALLBACK, SIDE_OF, zone_for
from serving.bundle._manifest import ENDPOINT_RULES
from serving.conversations._evidence import with_evidence
from serving.conversations._switch import PRICED, Stickiness, SwitchPricing
from serving.endpoints._capabilities import declares_languages, lacking_text, rule_name, ruled_out, with_language
from serving.endpoints._choice import NONE, best_under_price, call_costs, cascade, cheapest_within, escalation
from serving.features._language import shared_detector
from serving.routing._decision import ZONES, Decision

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from serving.bundle._manifest import EndpointsSection, Manifest
    from serving.conversations._evidence import TurnEvidence
    from serving.conversations._state import ConversationState
    from serving.endpoints._capabilities import Needs
    from serving.endpoints._record import Capabilities, Endpoint
    from serving.policy._budgets import Spending
    from serving.policy._rules import PolicySet, Rule, Verdict
    from serving.routing._request import Request
    from serving.routing._rule_table import RuleRouter
    from serving.scoring._scorer import Scores

    Lacking = Mapping[str, tuple[str, ...]]  # endpoint -> the needed capabilities it lacks


_NOTHING_LACKING: list[Lacking] = [{}]  # times n: no request needs anything (never changed)
SIDES = (EDGE, CLOUD)


@dataclasses.dataclass(slots=True)
class Turn:
    """One request's conversation as the rule reads it: its turn number, the endpoint (by index) that answered
    the last turn (None: none of this chooser's), each endpoint's dollar price change for where the conversation
    has been and the history tokens it would read again (serving.conversations._switch: delta, missing), the weight."""

    number: int
    last: int | None
    switch: list[float]
    missing: list[int]
    weight: float

    @property
    def priced(self) -> bool:
        """Whether the switch costs count: a finite weight above 0 and some endpoint's price moved."""
        return 0 < self.weight < math.inf and any(self.switch)

    def said(self, names: Sequence[str], first: int, plain: int | None) -> tuple[bool | None, str]:
        """(whether the conversation moves, what the reason says of it) once the rule put `first`
        first; `plain`: the rule's first without the conversation's prices (None: not asked)."""
        last = self.last
        if last is None:
            return None, f"conversation turn {self.number}"
        if first == last:
            why = f": {self._move(names, plain)}" if plain is not None and plain != last else ""
            return False, f"conversation turn {self.number} stays on {names[last]}{why}"
        return True, f"conversation turn {self.number} moves from {names[last]} to {self._move(names, first, 'reads')}"

    def over_staying(self, names: Sequence[str]) -> dict[str, float] | None:
        """Each endpoint's switch cost over staying on the last turn's (Decision.switch_costs); None without one."""
        if self.last is None:
            return None
        stay = self.switch[self.last]
        return {name: cost - stay for name, cost in zip(names, self.switch)}

    def _move(self, names: Sequence[str], to: int, verb: str = "would read") -> str:
        extra = self.switch[to] - self.switch[self.last] if self.last is not None else 0.0
        return f"{names[to]}, which {verb} {self.missing[to]} history tokens again (${extra:+.5f} over staying)"


@dataclasses.dataclass(slots=True)
class Feasible:
    """What the policy and the needs leave each request (the chooser's one policy point; context limits: the rule's)."""

    tokens: list[int]  # each request's token count
    lacking: list[Lacking]  # per request: the endpoints its needs rule out
    verdicts: list[Verdict | None]  # per request: the policy's verdict (None without a policy)
    turns: list[Turn | None] | None = None  # per request: its conversation (None: none has one)

    def allowed(self, names: Sequence[str]) -> NDArray[np.bool_]:
        """[requests, endpoints]: neither forbidden by the policy nor lacking what the request needs."""
        return np.array(
            [
                [name not in out and (v is None or name in v.allowed) for name in names]
                for out, v in zip(self.lacking, self.verdicts)
            ],
            dtype=bool,
        ).reshape(len(self.tokens), len(names))


class Chooser:
    """One bundle's choice among its endpoints (module doc); built once per bundle."""

    def __init__(
        self, endpoints: Sequence[Endpoint], rule: Bands | Choice, *, model_version: str, max_chars: int
    ) -> None:
        self.endpoints = tuple(endpoints)
        self.names = tuple(e.name for e in self.endpoints)
        self.index = {name: k for k, name in enumerate(self.names)}
        self.on_device = tuple(e.where == "device" for e in self.endpoints)
        self.switch_pricing = SwitchPricing(self.endpoints)  # what a conversation's turn costs on each
        self.rule = rule
        self.model_version, self.max_chars = model_version, max_chars
        # How the previous turn moves each endpoint's expected quality (the bundle's turn_evidence.json).
        self.evidence: TurnEvidence | None = None
        self.capabilities: dict[str, Capabilities | None] = {e.name: e.capabilities for e in self.endpoints}
        # Each request's language is read only when an endpoint declares languages (serving.features._language).
        self.detector = shared_detector() if declares_languages(self.capabilities) else None

    def check_policy(self, policy: PolicySet | None) -> None:
        """A policy must name this chooser's endpoints (PolicySet.load(path, endpoints=...))."""
        if policy is not None and tuple(policy.endpoints) != self.names:
            from serving.policy._rules import PolicyFileError

            raise PolicyFileError(
                f"{policy.source}: the policy is for endpoints {', '.join(policy.endpoints)}; this router "
                f"routes among {', '.join(self.names)}: load it with PolicySet.load(path, endpoints=...)"
            )

    def decisions(
        self,
        requests: Sequence[Request],
        scores: Scores,
        policy: PolicySet | None = None,
        spending: Spending | None = None,
        conversations: Sequence[ConversationState | None] | None = None,
        stickiness: Stickiness = PRICED,
        output_tokens: float = 0.0,
    ) -> list[Decision]:
        """The Decisions of scored requests; NoFeasibleEndpoint for the first no endpoint may serve.
        `conversations`: each request's state (None: not in one, or its first turn), whose switch costs
        the rule weighs as `stickiness` says; `output_tokens`: the answers' expected length."""
        feasible = self.feasible(requests, scores.n_tokens, policy, spending)
        if conversations is not None:
            feasible.turns = self.turns(requests, feasible.tokens, conversations, stickiness, output_tokens)
        evidence = self.evidence
        if conversations is None or evidence is None:
            return self.rule.decide(self, requests, scores, feasible)
        gain = isinstance(self.rule, Bands) and self.rule.expected_gain
        weighed = with_evidence(scores, conversations, self.names, evidence, gain)
        decisions = self.rule.decide(self, requests, weighed, feasible)
        if weighed is not scores:
            for decision, state in zip(decisions, conversations):
                if state is not None and state.turns > 0 and state.endpoint is not None:
                    decision.reason += f"; the last turn ({state.outcome} on {state.endpoint}) weighed in"
        return decisions

    def turns(
        self,
        requests: Sequence[Request],
        tokens: Sequence[int],
        states: Sequence[ConversationState | None],
        stickiness: Stickiness,
        output_tokens: float,
    ) -> list[Turn | None]:
        """Each request's Turn: None without a conversation; a first turn's has no last endpoint."""
        now, index, pricing = time.time(), self.index, self.switch_pricing
        out: list[Turn | None] = []
        for request, n_tokens, state in zip(requests, tokens, states):
            if request.conversation is None:
                out.append(None)
            elif state is None or state.endpoint is None:
                turns = 0 if state is None else state.turns
                out.append(Turn(turns + 1, None, [], [], stickiness.weight))
            else:
                switch, missing = pricing.costs(state, n_tokens, output_tokens, stickiness.seconds_price, now)
                out.append(Turn(state.turns + 1, index.get(state.endpoint), switch, missing, stickiness.weight))
        return out

    def feasible(
        self,
        requests: Sequence[Request],
        n_tokens: Sequence[float],
        policy: PolicySet | None,
        spending: Spending | None,
    ) -> Feasible:
        """What may serve each request: NoFeasibleEndpoint when the policy forbids every endpoint."""
        tokens = [round(n) for n in n_tokens]
        n = len(requests)
        needed: list[Needs | None] = [None] * n  # None: the request's own needs (PolicySet.evaluate)
        lacking: list[Lacking] = _NOTHING_LACKING * n
        if self.detector is not None or _needs_anything(requests):
            needed = [r.needs for r in requests]
            known = [r.capabilities if r.capabilities is not None else self.capabilities for r in requests]
            # Each request's language (declared, else detected) only when an endpoint declares languages.
            reads = [declares_languages(k) for k in known]
            if any(reads):
                detector = self.detector or shared_detector()
                needed = [
                    with_language(w, r.text, r.metadata, detector) if read else w
                    for w, r, read in zip(needed, requests, reads)
                ]
            lacking = [ruled_out(w, k, self.names) if w else {} for w, k in zip(needed, known)]
        if policy is None:
            return Feasible(tokens, lacking, [None] * n)
        if n == 1:  # route(): one request (a comprehension's frame costs it ~0.2 us)
            return Feasible(
                tokens, lacking, [policy.evaluate(requests[0], tokens[0], spending=spending, needs=needed[0])]
            )
        verdicts: list[Verdict | None] = [
            policy.evaluate(r, t, spending=spending, needs=w) for r, t, w in zip(requests, tokens, needed)
        ]
        return Feasible(tokens, lacking, verdicts)

    def explained(
        self, reason: str, verdict: Verdict | None, lacking: Lacking
    ) -> tuple[str, str | None, tuple[str, ...]]:
        """(the reason with the policy's and the needs' part before the model's, the deciding rule's
        name, the endpoints forbidden or ruled out), the same words for every bundle."""
        names = self.names
        forbidden: tuple[str, ...] = ()
        rule_said = None
        if verdict is not None and (rule := verdict.rule) is not None:
            forbidden = tuple(n for n in names if n not in verdict.allowed)
            reason = f"policy '{rule.name}': {_policy_said(verdict, forbidden)}; model: {reason}"
            rule_said = rule.name
        if lacking:  # ruled out like a forbidden endpoint, under the built-in needs:<capability> rule
            reason = f"{rule_name(lacking)}: {lacking_text(lacking)}; {reason}"
            forbidden = tuple(n for n in names if n in forbidden or n in lacking)
            rule_said = rule_said or rule_name(lacking)
        return reason, rule_said, forbidden

    def none_feasible(self, n_tokens: int, fits: Sequence[bool], verdict: Verdict | None, lacking: Lacking) -> NoReturn:
        """NoFeasibleEndpoint naming what left no endpoint: the policy, the needs, the context limits."""
        from serving.policy._errors import NoFeasibleEndpoint

        names = self.names
        rule = verdict.rule.name if verdict is not None and verdict.rule is not None else None
        forbidden = [n for n in names if verdict is not None and n not in verdict.allowed]
        parts = []
        if forbidden:
            parts.append(f"the policy forbids {', '.join(forbidden)}" + (f" (policy '{rule}')" if rule else ""))
        if lacking:
            needed = dict.fromkeys(c for missing in lacking.values() for c in missing)
            parts.append(f"the request needs {', '.join(needed)} ({rule_name(lacking)}): {lacking_text(lacking)}")
        too_long = [n for n, ok in zip(names, fits) if not ok]
        if too_long:
            parts.append(f"~{n_tokens} tokens exceed the context of {', '.join(too_long)}")
        rules = [r for r in (rule, rule_name(lacking) if lacking else None) if r]
        raise NoFeasibleEndpoint(f"no endpoint may serve this request: {'; '.join(parts)}", rules=rules)


class Bands:
    """A two-endpoint bundle's rule (module doc): thresholds on the score by precision, the edge's
    context limit, the unfamiliar policy; or, given `rules`, the rule table alone."""

    def __init__(
        self,
        manifest: Manifest | None,
        rules: RuleRouter,
        *,
        edge_context_tokens: int,
        unfamiliar_policy: str | None = None,
    ) -> None:
        self.manifest = manifest
        self.rules = rules
        self.edge_context_tokens = edge_context_tokens
        self.unfamiliar_policy = unfamiliar_policy
        self.expected_gain = manifest is not None and manifest.score.kind == "expected_gain"
        self._score_name = "expected gain" if self.expected_gain else "score"
        # (lo, hi, their printed forms, tag) by precision, filled on first use (see _band)
        self._bands: dict[str | None, tuple[float, float, str, str, str]] = {}

    def decide(
        self, chooser: Chooser, requests: Sequence[Request], scores: Scores, feasible: Feasible
    ) -> list[Decision]:
        out = []
        verdicts, lacking, model_version = feasible.verdicts, feasible.lacking, chooser.model_version
        for i, request in enumerate(requests):
            turn = None
            if scores.scores is None:  # the rule table decides
                decision = self.rules.decide(request.text, request.precision, degraded=True, note=scores.note or "")
            else:
                score, n_tokens = scores.scores[i], feasible.tokens[i]
                heads = scores.heads[i] if scores.heads is not None else ()
                novelty = scores.novelty[i] if scores.novelty is not None else None
                turn = feasible.turns[i] if feasible.turns is not None else None
                if turn is None:
                    zone, reason, truncated = self._model_zone(request, score, n_tokens, novelty)
                    switched = None
                else:
                    zone, reason, truncated, switched = self._turn_zone(
                        chooser, request, score, n_tokens, novelty, turn
                    )
                cascade, on_device, checked = ZONES[zone]
                decision = Decision(
                    cascade,
                    score,
                    reason,
                    False,
                    model_version,
                    on_device,
                    checked,
                    request.precision,
                    n_tokens,
                    truncated,
                    novelty,
                    novelty is not None and novelty > 1.0,
                    None,
                    (),
                    {EDGE: heads[0], CLOUD: heads[1]} if len(heads) == 2 else None,
                    turn.number if turn is not None else None,
                    switched,
                    turn.over_staying(SIDES) if turn is not None else None,
                )
            verdict = verdicts[i]
            if (verdict is not None and verdict.rule is not None) or lacking[i]:  # the policy's or the needs' say
                self.placed(chooser, decision, verdict, lacking[i])
                if turn is not None and turn.last is not None:
                    _placed_turn(decision, turn)
            out.append(decision)
        return out

    def placed(self, chooser: Chooser, decision: Decision, verdict: Verdict | None, lacking: Lacking) -> Decision:
        """A decision of a zone once the policy and the request's needs have had their say; in place."""
        zone = decision.zone
        if verdict is not None and verdict.rule is not None:
            soft = verdict.preferred
            if soft is not None and soft.zone is not None:
                zone = _zone(soft.zone, verdict.allowed, None)
            else:
                zone = _zone(zone, verdict.allowed, soft.endpoint if soft is not None else None)
        reason, rule, forbidden = chooser.explained(decision.reason, verdict, lacking)
        if lacking:
            allowed = [side for side in SIDES if side not in forbidden]
            if not allowed:
                chooser.none_feasible(decision.n_tokens, (True, True), verdict, lacking)
            if len(allowed) == 1:
                zone = allowed[0]
        cascade, on_device, checked = ZONES[zone]
        if forbidden and len(cascade) > 1:
            keep = [k for k, name in enumerate(cascade) if name not in forbidden]
            cascade, on_device = tuple(cascade[k] for k in keep), tuple(on_device[k] for k in keep)
            checked = tuple(name for name in checked if name in cascade)
        decision.cascade, decision.on_device, decision.checked = cascade, on_device, checked
        decision.reason, decision.rule, decision.forbidden = reason, rule, forbidden
        return decision

    def explored(
        self, decision: Decision, chooser: Chooser, rate: float, draw: random.Random
    ) -> tuple[Decision, bool, float]:
        """(the decision to carry out, whether explored, its propensity): with probability `rate` the other side first
        (edge -> cloud; cloud -> edge, cloud fallback); never over the edge's context, nor with a forbidden endpoint."""
        if not rate or decision.n_tokens > self.edge_context_tokens or decision.forbidden:
            return decision, False, 1.0
        if draw.random() >= rate:
            return decision, False, 1.0 - rate
        zone = CLOUD if decision.target == EDGE else FALLBACK
        first = CLOUD if zone == CLOUD else EDGE
        cascade, on_device, checked = ZONES[zone]
        explored = dataclasses.replace(
            decision,
            cascade=cascade,
            on_device=on_device,
            checked=checked,
            reason=f"explored ({rate:g}): {first} first instead of {decision.target}; {decision.reason}",
        )
        return explored, True, rate

    def _model_zone(
        self, request: Request, score: float, n_tokens: int, novelty: float | None
    ) -> tuple[str, str, bool]:
        """(zone, reason, whether the features read only the prompt's head) of one scored prompt."""
        precision = request.precision
        lo, hi, lo_text, hi_text, tag = self._bands.get(precision) or self._band(precision)
        zone = zone_for(score, lo, hi)
        if zone == CLOUD:
            reason = f"{self._score_name} {score:.3f} > {hi_text} ({tag})"
        elif zone == EDGE:
            reason = f"{self._score_name} {score:.3f} < {lo_text} ({tag})"
        else:
            reason = f"{self._score_name} {score:.3f} in [{lo_text}, {hi_text}] ({tag}): edge first, cloud fallback"
        if n_tokens > self.edge_context_tokens:  # said even when the score alone sends it to the cloud
            zone = CLOUD
            reason = f"~{n_tokens} tokens exceed the edge context limit of {self.edge_context_tokens}; {reason}"
        max_chars = self.rules.max_chars
        truncated = len(request.text) > max_chars
        if truncated:
            reason += f"; features from the first {max_chars} characters"
        if novelty is not None and novelty > 1.0:
            zone, reason = self._familiar(request, zone, reason, n_tokens, novelty)
        return zone, reason, truncated

    def _turn_zone(
        self, chooser: Chooser, request: Request, score: float, n_tokens: int, novelty: float | None, turn: Turn
    ) -> tuple[str, str, bool, bool | None]:
        """_model_zone for a conversation's turn, and whether the conversation moves: the switch costs move the
        score in the bundle's own exchange rate (its upper threshold is what a cloud call is worth: the rate is
        that threshold over the cloud call's price), or, weight inf, the last side first while it may serve."""
        last = turn.last
        if last is None:
            zone, reason, truncated = self._model_zone(request, score, n_tokens, novelty)
            return zone, f"{reason}; {turn.said(SIDES, 0, None)[1]}", truncated, None
        shift = lo = hi = 0.0
        if turn.weight != math.inf and turn.priced:
            lo, hi = (self._bands.get(request.precision) or self._band(request.precision))[:2]
            cloud_price = chooser.endpoints[1].call_cost(n_tokens) or 0.0
            if hi > 0 and cloud_price > 0:
                shift = hi / cloud_price * turn.weight * (turn.switch[1] - turn.switch[0])
        zone, reason, truncated = self._model_zone(request, score - shift, n_tokens, novelty)
        plain = zone  # the zone without the switch: the same unless the shift crossed a threshold
        if shift and zone_for(score, lo, hi) != zone_for(score - shift, lo, hi):
            plain = self._model_zone(request, score, n_tokens, novelty)[0]
        if turn.weight == math.inf and n_tokens <= self.edge_context_tokens:  # stay on the last side
            zone = CLOUD if last == 1 else (plain if plain != CLOUD else FALLBACK)
        switched, said = turn.said(SIDES, int(zone == CLOUD), int(plain == CLOUD))
        if shift:
            said += f" ({self._score_name} {score:.3f} {-shift:+.3f} for the switch)"
        return zone, f"{reason}; {said}", truncated, switched

    def _familiar(self, request: Request, zone: str, reason: str, n_tokens: int, novelty: float) -> tuple[str, str]:
        """An unfamiliar prompt gets the unfamiliar policy, except one too long for the edge: it stays on the cloud."""
        if self.unfamiliar_policy == "learned":
            return zone, reason + f"; unfamiliar prompt (novelty {novelty:.2f}), learned zone kept"
        note = f"unfamiliar prompt (novelty {novelty:.2f} > 1)"
        if n_tokens > self.edge_context_tokens:
            return zone, f"{note}; {reason}"
        if self.unfamiliar_policy == "rule_table":
            ruled = self.rules.decide(request.text, request.precision, note=note)
            return ruled.zone, f"{note}: {ruled.reason}"
        return FALLBACK, f"{note}: edge first, cloud fallback (learned: {reason})"

    def _band(self, precision: str | None) -> tuple[float, float, str, str, str]:
        """(lo, hi) of a precision with their printed forms and its tag, kept for the next call."""
        assert self.manifest is not None  # only a scored prompt has a band, and only a bundle scores
        lo, hi = self.manifest.band(precision)
        band = self._bands[precision] = (lo, hi, f"{lo:.3f}", f"{hi:.3f}", precision or "undeclared precision")
        return band


def zone_decision(
    zone: str, request: Request, n_tokens: int, policy: PolicySet | None, spending: Spending | None = None
) -> Decision:
    """A two-endpoint decision of `zone` for `request` with `policy` applied, as route() applies it
    (the offline evaluation's what-if: evaluation.rules_effect); NoFeasibleEndpoint as route()."""
    chooser, bands = _two_sides()
    feasible = chooser.feasible((request,), (n_tokens,), policy, spending)
    decision = Decision.of_zone(
        zone, score=0.0, reason="", degraded=False, model_version="", precision=request.precision, n_tokens=n_tokens
    )
    return bands.placed(chooser, decision, feasible.verdicts[0], feasible.lacking[0])


@functools.lru_cache(maxsize=1)
def _two_sides() -> tuple[Chooser, Bands]:
    from serving.endpoints._record import two_endpoints
    from serving.routing._rule_table import RuleRouter

    rules = RuleRouter()
    bands = Bands(None, rules, edge_context_tokens=DEFAULT_EDGE_CONTEXT_TOKENS)
    chooser = Chooser(two_endpoints(DEFAULT_EDGE_CONTEXT_TOKENS), bands, model_version="", max_chars=rules.max_chars)
    return chooser, bands


def _zone(model_zone: str, allowed: tuple[str, ...], first: str | None) -> str:
    """The zone for the allowed sides: one side alone is its own zone (no fallback); with both, a
    preferred side runs first (the edge with the cloud as fallback), else the model's zone stands."""
    if allowed == (EDGE,):
        return EDGE
    if allowed == (CLOUD,) or first == CLOUD:
        return CLOUD
    if first == EDGE and model_zone == CLOUD:
        return FALLBACK
    return model_zone


class Choice:
    """An N-endpoint bundle's rule (module doc), from its manifest's endpoints section, and what an
    unfamiliar prompt gets instead of the rule's cascade, `unfamiliar_policy` (docs/sdk.md,
    unfamiliar prompts: the N-endpoint column). A policy's prefer decides before either."""

    def __init__(self, section: EndpointsSection, *, unfamiliar_policy: str | None = None) -> None:
        self.section = section
        self.rule, self.parameter = section.rule, section.parameter
        self.unfamiliar_policy = unfamiliar_policy
        self._said = f"{self.rule} ({ENDPOINT_RULES[self.rule]} {self.parameter:.4g})"

    def decide(
        self, chooser: Chooser, requests: Sequence[Request], scores: Scores, feasible: Feasible
    ) -> list[Decision]:
        cost, fits = call_costs(chooser.endpoints, feasible.tokens, self.section.output_tokens)
        usable = fits & feasible.allowed(chooser.names)
        notes: list[tuple[str | None, str | None]] = [(None, None)] * len(requests)  # unfamiliar prompts'
        turns = feasible.turns
        priced = cost if turns is None else _with_switches(cost, turns)  # what each endpoint costs this turn
        orders = self._ordered(chooser, scores, priced, usable, feasible, notes)
        plain: list[int | None] = [None] * len(requests)  # the rule's first without the switch costs
        if turns is not None:
            unpriced = orders if priced is cost else self._ordered(chooser, scores, cost, usable, feasible, list(notes))
            plain = [o[0] if o else None for o in unpriced]
            _stay(orders, turns, usable, feasible.verdicts)
        return [
            self._decision(chooser, request, i, scores, cost[i], fits[i], feasible, orders[i], notes[i], plain[i])
            for i, request in enumerate(requests)
        ]

    def _ordered(
        self,
        chooser: Chooser,
        scores: Scores,
        cost: NDArray[np.float64],
        usable: NDArray[np.bool_],
        feasible: Feasible,
        notes: list[tuple[str | None, str | None]],
    ) -> list[list[int]]:
        """Each request's cascade at these prices (an unfamiliar prompt's say goes into `notes`)."""
        expected = scores.expected
        if expected is None:  # degraded: the cheapest feasible endpoint first, then each costlier one
            return _by_price(cost, usable)
        index = chooser.index  # the rule's cascade, or from the endpoint a policy puts first
        first = np.full(len(expected), NONE, dtype=np.int64)
        for row, verdict in enumerate(feasible.verdicts):
            soft = verdict.preferred if verdict is not None else None
            if soft is not None and soft.endpoint is not None and usable[row, index[soft.endpoint]]:
                first[row] = index[soft.endpoint]
        plain = first == NONE
        if self.rule != "cascade":
            pick = cheapest_within if self.rule == "cheapest_within" else best_under_price
            chosen = pick(expected, cost, self.parameter, usable)
            orders = escalation(expected, cost, np.where(plain, chosen, first), usable)
        else:
            orders = cascade(expected, cost, self.parameter, usable)
            if not plain.all():
                steered = escalation(expected, cost, first, usable)
                orders = [order if plain[row] else steered[row] for row, order in enumerate(orders)]
        if scores.novelty is not None:
            self._unfamiliar(chooser, scores, cost, usable, feasible.verdicts, orders, notes)
        return orders

    def _unfamiliar(
        self,
        chooser: Chooser,
        scores: Scores,
        cost: NDArray[np.float64],
        usable: NDArray[np.bool_],
        verdicts: Sequence[Verdict | None],
        orders: list[list[int]],
        notes: list[tuple[str | None, str | None]],
    ) -> None:
        """The unfamiliar prompts' cascades (class doc), in place, and what their reasons say: what
        chose the cascade instead of the rule, or after the rule's reason."""
        assert scores.novelty is not None and scores.expected is not None
        names, policy = chooser.names, self.unfamiliar_policy
        by_price: list[list[int]] | None = None
        for row, novelty in enumerate(scores.novelty):
            verdict = verdicts[row]
            if novelty <= 1.0 or not orders[row] or (verdict is not None and verdict.preferred is not None):
                continue
            note = f"unfamiliar prompt (novelty {novelty:.2f} > 1)"
            if policy == "learned":
                notes[row] = (None, f"unfamiliar prompt (novelty {novelty:.2f}), learned cascade kept")
                continue
            if policy == "rule_table":
                by_price = by_price or _by_price(cost, usable)
                orders[row] = by_price[row]
                first = orders[row][0]
                notes[row] = (f"{note}: by price, the cheapest first, {names[first]} (${cost[row, first]:.5f})", None)
                continue
            may_serve = np.flatnonzero(usable[row]).tolist()
            device = [k for k in may_serve if chooser.on_device[k]]
            if not device:
                notes[row] = (None, f"{note}, and no device endpoint may serve it: the rule's cascade kept")
                continue
            first = min(device, key=lambda k: (cost[row, k], k))
            expected = scores.expected[row]
            rest = [k for k in may_serve if k != first]
            best = max(rest, key=lambda k: (expected[k], -cost[row, k], -k)) if rest else None
            orders[row] = [first] if best is None else [first, best]
            behind = f", then the best expected, {names[best]} ({expected[best]:.3f})" if best is not None else ""
            said = f"{names[first]} (expected {expected[first]:.3f}, ${cost[row, first]:.5f}){behind}"
            notes[row] = (f"{note}: the cheapest device endpoint first, {said}", None)

    def explored(
        self, decision: Decision, chooser: Chooser, rate: float, draw: random.Random
    ) -> tuple[Decision, bool, float]:
        """As Bands.explored: with probability `rate` the first endpoint drawn uniformly among the k that
        may serve the request (the decided one included), then the cascade in its order without it;
        propensity 1 - rate + rate / k for the decided endpoint, rate / k for another; k = 1 is never
        explored. May serve: not forbidden (Decision.forbidden: the policy's and the needs', by name or
        by side as serving.execution._execute reads it) and a context that holds the prompt."""
        forbidden = decision.forbidden
        feasible = [
            e.name
            for e in chooser.endpoints
            if e.name not in forbidden
            and (e.where is None or SIDE_OF[e.where] not in forbidden)
            and e.fits(decision.n_tokens)
        ]
        k = len(feasible)
        if not rate or k < 2 or decision.endpoint not in feasible:
            return decision, False, 1.0
        share = rate / k
        decided = 1.0 - rate + share  # kept, or drawn again
        if draw.random() >= rate:
            return decision, False, decided
        first = feasible[draw.randrange(k)]
        if first == decision.endpoint:
            return decision, False, decided
        cascade = (first, *(name for name in decision.cascade if name != first))
        explored = dataclasses.replace(
            decision,
            cascade=cascade,
            on_device=tuple(chooser.on_device[chooser.index[name]] for name in cascade),
            checked=cascade[:-1],  # every answer but the last, as an N-endpoint cascade checks them
            score=decision.expected[first] if decision.expected is not None else decision.score,
            reason=f"explored ({rate:g}): {first} first instead of {decision.endpoint}; {decision.reason}",
        )
        return explored, True, share

    def _decision(
        self,
        chooser: Chooser,
        request: Request,
        row: int,
        scores: Scores,
        cost: NDArray[np.float64],
        fits: NDArray[np.bool_],
        feasible: Feasible,
        order: list[int],
        note: tuple[str | None, str | None] = (None, None),
        plain: int | None = None,
    ) -> Decision:
        names, n_tokens = chooser.names, feasible.tokens[row]
        verdict, lacking = feasible.verdicts[row], feasible.lacking[row]
        if not order:
            chooser.none_feasible(n_tokens, fits.tolist(), verdict, lacking)
        first = order[0]
        steps = " -> ".join(names[k] for k in order)
        values = scores.expected[row].tolist() if scores.expected is not None else None
        if values is None:
            reason = f"{scores.note}: the cheapest feasible endpoint first, {names[first]} (${cost[first]:.5f}); cascade {steps}"
        else:
            said = f"{names[first]} (expected {values[first]:.3f}, ${cost[first]:.5f})"
            instead, after = note  # an unfamiliar prompt's (_unfamiliar)
            reason = f"{instead or f'{self._said}: {said}'}; cascade {steps}" + (f"; {after}" if after else "")
        too_long = [names[k] for k in range(len(names)) if not fits[k]]
        if too_long:
            reason += f"; ~{n_tokens} tokens exceed the context of {', '.join(too_long)}"
        truncated = len(request.text) > chooser.max_chars
        if truncated:
            reason += f"; features from the first {chooser.max_chars} characters"
        turn = feasible.turns[row] if feasible.turns is not None else None
        switched = None
        if turn is not None:
            switched, said = turn.said(names, first, plain)
            reason += f"; {said}"
        reason, rule, forbidden = chooser.explained(reason, verdict, lacking)
        cascade_names = tuple(names[k] for k in order)
        novelty = scores.novelty[row] if scores.novelty is not None else None
        return Decision(
            cascade_names,
            values[first] if values is not None else 0.0,
            reason,
            values is None,
            chooser.model_version,
            tuple(chooser.on_device[k] for k in order),
            cascade_names[:-1],
            precision=request.precision,
            n_tokens=n_tokens,
            truncated=truncated,
            novelty=novelty,
            unfamiliar=novelty is not None and novelty > 1.0,
            rule=rule,
            forbidden=forbidden,
            expected=dict(zip(names, values)) if values is not None else None,
            turn=turn.number if turn is not None else None,
            switched=switched,
            switch_costs=turn.over_staying(names) if turn is not None else None,
        )


def _placed_turn(decision: Decision, turn: Turn) -> None:
    """A two-endpoint turn after the policy or the needs had their say (Bands.placed), in place: when they moved the
    first endpoint (a forbidden last one is never stayed on), `switched` and the reason's conversation part say so."""
    moved, said = turn.said(SIDES, SIDES.index(decision.endpoint), None)
    if moved == decision.switched:
        return
    ours = f"conversation turn {turn.number} "
    decision.reason = "; ".join(said if part.startswith(ours) else part for part in decision.reason.split("; "))
    decision.switched = moved


def _with_switches(cost: NDArray[np.float64], turns: Sequence[Turn | None]) -> NDArray[np.float64]:
    """Each call's price plus its weighted switch cost (the same array when no switch costs anything)."""
    rows = [(i, t) for i, t in enumerate(turns) if t is not None and t.priced]
    if not rows:
        return cost
    priced: NDArray[np.float64] = cost.copy()
    for i, turn in rows:
        priced[i] += turn.weight * np.asarray(turn.switch)
    return priced


def _stay(
    orders: list[list[int]], turns: Sequence[Turn | None], usable: NDArray[np.bool_], verdicts: Sequence[Verdict | None]
) -> None:
    """Always stay (weight inf): the endpoint that answered the last turn first while it may serve
    it (a policy's prefer still decides), the rest of the cascade behind it; in place."""
    for row, turn in enumerate(turns):
        if turn is None or turn.weight < math.inf or turn.last is None or not usable[row, turn.last]:
            continue
        verdict = verdicts[row]
        if verdict is not None and verdict.preferred is not None:
            continue
        last = turn.last
        orders[row] = [last, *(k for k in orders[row] if k != last)]


def _by_price(cost: NDArray[np.float64], usable: NDArray[np.bool_]) -> list[list[int]]:
    """Each request's cascade by price alone: the cheapest endpoint that may serve it first, then each
    costlier one (a bundle that cannot score; rule_table for an unfamiliar prompt)."""
    first = best_under_price(np.zeros_like(cost), cost, 1.0, usable)
    by_price = np.argsort(np.argsort(cost, axis=1, kind="stable"), axis=1).astype(np.float64)
    return escalation(by_price, cost, first, usable)


def _policy_said(verdict: Verdict, forbidden: tuple[str, ...]) -> str:
    """What the deciding rule did: forced, forbids, routes or prefers; and a prefer that also matched."""
    rule, soft = verdict.rule, verdict.preferred
    assert rule is not None
    if verdict.forced is not None:
        said = f"forced {rule.endpoint}"
    elif soft is None or rule is not soft:
        said = f"forbids {', '.join(forbidden)}"
    else:
        said = _said(soft)
    if soft is not None and rule is not soft:
        said += f"; policy '{soft.name}' {_said(soft)}"
    return said


def _said(rule: Rule) -> str:
    return f"routes {rule.zone}" if rule.zone is not None else f"prefers {rule.endpoint}"


def _needs_anything(requests: Sequence[Request]) -> bool:
    """Whether any request needs something, or brings endpoints' capabilities of its own (a loop:
    route() asks it of every request, and a generator costs it ~0.3 us more)."""
    for request in requests:
        if request.needs is not None or request.capabilities is not None:
            return True
    return False
