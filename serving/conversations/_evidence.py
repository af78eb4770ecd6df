"""The previous turn as evidence: how a conversation's last turn went moves each endpoint's
expected quality for this one, by weights learned from logs where turns are linked
(training.turn_evidence writes them into the bundle as turn_evidence.json; a bundle without it
decides every turn from its text alone).

Per endpoint e, a logistic model over what the router knows when the turn arrives:

    logit p'_e = w . [logit p_e, 1, log(turn), log(1 + history tokens) / 10,
                      served_e, served_e x trouble, trouble]

p_e is the bundle's calibrated P(e answers well | this turn's text); served_e whether e answered
the last turn; trouble whether that turn went badly (its first answer was rejected or its call
failed and another endpoint served, nothing served, or the app regenerated the answer). With the
weights [1, 0, 0, ...] the evidence changes nothing; a weight learned near 0 says the logs showed
no such effect.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from serving._router_error import RouterError
from serving.scoring._scorer import Scores

if TYPE_CHECKING:
    from serving.conversations._state import ConversationState

FEATURES = ("logit_p", "intercept", "log_turn", "log_history", "served", "served_trouble", "trouble")
TROUBLE = frozenset({"fallback", "rejected", "failed", "regenerated"})
FILE = "turn_evidence.json"
_EPS = 1e-4


class TurnEvidenceError(RouterError, ValueError):
    """A turn_evidence.json that cannot be used; the message names what is wrong."""


def features(p: float, endpoint: str, state: ConversationState) -> list[float]:
    """The model's inputs for endpoint `endpoint` with P(good) `p`, in the order of FEATURES."""
    p = min(max(p, _EPS), 1 - _EPS)  # so that its logit is finite
    served = 1.0 if state.endpoint == endpoint else 0.0
    trouble = 1.0 if state.outcome in TROUBLE else 0.0
    return [
        math.log(p / (1 - p)),
        1.0,
        math.log(state.turns + 1),
        math.log1p(state.history_tokens) / 10,
        served,
        served * trouble,
        trouble,
    ]


@dataclass(frozen=True)
class TurnEvidence:
    """Each endpoint's weights over FEATURES (module doc), and what they were fitted on."""

    weights: Mapping[str, tuple[float, ...]]
    rows: int = 0

    @classmethod
    def from_json(cls, raw: bytes | str, endpoints: Sequence[str]) -> TurnEvidence:
        try:
            data = json.loads(raw)
            if data.get("features") != list(FEATURES):
                raise TurnEvidenceError(f"{FILE}: features {data.get('features')!r}, expected {list(FEATURES)}")
            weights = {name: tuple(float(w) for w in data["weights"][name]) for name in endpoints}
            rows = int(data.get("rows", 0))
        except TurnEvidenceError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise TurnEvidenceError(f"{FILE}: {type(exc).__name__}: {exc}") from None
        for name, w in weights.items():
            if len(w) != len(FEATURES) or not all(math.isfinite(x) for x in w):
                raise TurnEvidenceError(f"{FILE}: endpoint {name!r} needs {len(FEATURES)} finite weights")
        return cls(weights, rows)

    def to_json(self) -> str:
        return json.dumps(
            {"features": list(FEATURES), "weights": {k: list(v) for k, v in self.weights.items()}, "rows": self.rows},
            indent=2,
        )

    def adjusted(self, expected: Sequence[float], names: Sequence[str], state: ConversationState) -> list[float]:
        """Each endpoint's expected quality given how the last turn went (a conversation with no
        turn yet: as it is)."""
        if state.turns == 0:
            return list(expected)
        out = []
        for p, name in zip(expected, names):
            z = sum(w * x for w, x in zip(self.weights[name], features(p, name, state)))
            out.append(1.0 / (1.0 + math.exp(-max(min(z, 30.0), -30.0))))
        return out


def with_evidence(
    scores: Scores,
    states: Sequence[ConversationState | None],
    names: Sequence[str],
    evidence: TurnEvidence,
    expected_gain: bool,
) -> Scores:
    """`scores` with each conversation turn's expected qualities moved by how its last turn went:
    an N-endpoint bundle's `expected`; a two-endpoint bundle's heads, and its score when it is the
    expected gain p_cloud - p_edge (an older bundle's score is left as it is). The same object when
    no request has a last turn."""
    rows = [(i, state) for i, state in enumerate(states) if state is not None and state.turns > 0]
    if not rows or scores.note is not None:
        return scores
    if scores.expected is not None:
        expected = scores.expected.copy()
        for i, state in rows:
            expected[i] = evidence.adjusted(expected[i].tolist(), names, state)
        return Scores(scores.n_tokens, novelty=scores.novelty, expected=expected)
    if scores.heads is None or scores.scores is None or not expected_gain:
        return scores
    heads, values = list(scores.heads), list(scores.scores)
    for i, state in rows:
        p_edge, p_cloud = evidence.adjusted(heads[i], names, state)
        heads[i], values[i] = (p_edge, p_cloud), p_cloud - p_edge
    return Scores(scores.n_tokens, scores=values, heads=heads, novelty=scores.novelty)
