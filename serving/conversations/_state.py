"""One conversation's state between turns: how many turns were served, where the last one ran and
how it went, how long the history is, and the prefix of it each endpoint's cache holds: a device's
KV cache what it read and wrote (its prompt and its answer), a provider's prompt cache the prompt it
was sent. A turn served elsewhere leaves the others' prefixes as they were, so going back to an
endpoint re-reads only what came after its prefix (while its cache lives: serving.conversations._switch).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

# The outcomes a turn records (what the next turn reads as evidence).
OUTCOMES = ("served", "fallback", "rejected", "failed", "regenerated")


@dataclass(frozen=True, slots=True)
class Held:
    """How many of the conversation's tokens one endpoint's cache holds, and since when (time.time())."""

    endpoint: str
    tokens: int
    at: float


@dataclass(frozen=True, slots=True)
class ConversationState:
    """What the router knows of a conversation after its last turn (module doc): `endpoint` is None when
    none answered it, `outcome` one of OUTCOMES, `history_tokens` the length after it (its prompt and
    its answer), `held` each endpoint's cached prefix, `updated` the turn's time.time()."""

    turns: int = 0
    endpoint: str | None = None
    outcome: str | None = None
    history_tokens: int = 0
    held: tuple[Held, ...] = ()
    updated: float = 0.0

    def holds(self, endpoint: str) -> Held | None:
        for held in self.held:
            if held.endpoint == endpoint:
                return held
        return None

    def after(
        self,
        endpoint: str | None,
        *,
        input_tokens: int,
        output_tokens: int,
        on_device: bool,
        outcome: str,
        now: float,
    ) -> ConversationState:
        """The state once a turn of `input_tokens` was answered by `endpoint` in `output_tokens`
        (None: no endpoint answered; the caches stay as they were)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome={outcome!r}: one of {', '.join(OUTCOMES)}")
        history = max(0, int(input_tokens)) + max(0, int(output_tokens))
        held = self.held
        if endpoint is not None:
            cached = history if on_device else max(0, int(input_tokens))
            held = (*(h for h in held if h.endpoint != endpoint), Held(endpoint, cached, now))
        return ConversationState(self.turns + 1, endpoint, outcome, history, held, now)

    def answered(self, endpoint: str, output_tokens: int, *, on_device: bool) -> ConversationState:
        """The same turn with its answer's length known later (a stream's, at its end): the history
        grows by `output_tokens`, and so does the prefix `endpoint`'s cache holds when it is on the
        device (it wrote the answer); a provider's cache holds the prompt it was sent."""
        tokens = max(0, int(output_tokens))
        held = self.held
        if on_device:
            held = tuple(replace(h, tokens=h.tokens + tokens) if h.endpoint == endpoint else h for h in held)
        return replace(self, history_tokens=self.history_tokens + tokens, held=held)

    def marked(self, outcome: str) -> ConversationState:
        """The same state with the last turn's outcome changed (feedback: the app regenerated it)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome={outcome!r}: one of {', '.join(OUTCOMES)}")
        return replace(self, outcome=outcome)

    def to_json(self) -> str:
        """The fields in their order, each cache's prefix as [endpoint, tokens, at]."""
        held = [[h.endpoint, h.tokens, h.at] for h in self.held]
        return json.dumps({**asdict(self), "held": held}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> ConversationState:
        """The state written by to_json; ValueError naming what is wrong otherwise."""
        try:
            data: Any = json.loads(text)
            held = tuple(Held(str(e), _count(t), _time(a)) for e, t, a in data["held"])
            state = cls(
                _count(data["turns"]),
                None if data["endpoint"] is None else str(data["endpoint"]),
                None if data["outcome"] is None else str(data["outcome"]),
                _count(data["history_tokens"]),
                held,
                _time(data["updated"]),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"not a conversation state: {exc}") from exc
        if state.outcome is not None and state.outcome not in OUTCOMES:
            raise ValueError(f"not a conversation state: outcome {state.outcome!r}")
        return state


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{value!r} is not a token or turn count")
    return value


def _time(value: object) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not a time")
    return float(value)
