"""What moving a conversation costs, and how much that weighs (priced stickiness).

Every turn of a chat sends the whole history. An endpoint whose cache holds the history reads
it cheaply: a provider's prompt cache bills it at the cached-input price (the endpoint's
`per_1m_cached_input`), a device's KV cache does not read it again at all. Any other endpoint
reads it in full: at its input price, and at its prefill rate before the first token. So what a
turn costs on endpoint e depends on where the conversation has been:

    held_e    = the prefix of the history e's cache holds (0 once a provider's cache has expired)
    missing_e = history tokens - held_e                     what e would read again
    money_e   = e's call price with held_e tokens at the cached-input price, less its price with none
                (0 or less: the discount its cache earns; 0 without a cached-input price)
    time_e    = missing_e / prefill_tokens_per_s x seconds_price    the delay to the first token, priced
    delta_e   = money_e + time_e

An endpoint with no cache at all (no cached-input price, not on the device) reads everything on
every turn wherever the conversation was: its delta is 0. The endpoint that answered the last
turn holds the history: its delta is its discount alone.

The chooser (serving.routing._chooser) prices each endpoint at its call price + weight x delta_e
(N endpoints), or moves the score by the same dollars at the bundle's own exchange rate (two
endpoints), so each turn goes where expected quality net of price, switch cost included, is best.
weight 0: every turn on its own (as without conversations); 1: the turn at its price; inf: always
stay while the last endpoint may serve. A policy still forces and forbids: a forbidden endpoint is never stayed on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from serving.conversations._state import ConversationState
    from serving.endpoints._record import Endpoint, Price

# Prefill rates where an endpoint declares none, from the seed's latency model (data/simulator.py:
# a phone's edge model 0.15 ms a prompt token, the cloud 0.02 ms).
DEFAULT_PREFILL_TOKENS_PER_S = {"device": 1 / 0.00015, "cloud": 1 / 0.00002}
# How long a provider's prompt cache keeps a prefix (OpenAI and Anthropic: about five minutes
# without use); a device's cache lives as long as the conversation's state.
CLOUD_CACHE_TTL_S = 300.0


@dataclass(frozen=True)
class Stickiness:
    """How much a switch weighs (module doc): `weight`, the multiple of delta_e the chooser adds, and
    `seconds_price`, the dollars a second of time to first token is worth (by default one cloud call
    of the seed's price, $0.003, a second)."""

    weight: float = 1.0
    seconds_price: float = 0.003

    def __post_init__(self) -> None:
        for name in ("weight", "seconds_price"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                raise ValueError(f"Stickiness {name}={value!r}: must be a number >= 0 (math.inf allowed for weight)")
        if math.isinf(self.seconds_price):
            raise ValueError("Stickiness seconds_price must be finite")

    @property
    def always(self) -> bool:
        return math.isinf(self.weight)

    @property
    def never(self) -> bool:
        return self.weight == 0


PRICED = Stickiness()  # the default: a switch at its price


class SwitchPricing:
    """What a turn costs on each of a set of endpoints given where its conversation has been (module
    doc), what it reads of each endpoint looked up once (a chooser prices every turn with one)."""

    __slots__ = ("size", "_caching")

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self.size = len(endpoints)
        # (index, name, on the device, its price when it has a cached-input price, prefill tokens a second)
        self._caching: list[tuple[int, str, bool, Price | None, float]] = []
        for k, endpoint in enumerate(endpoints):
            on_device = endpoint.where == "device"
            price = endpoint.price
            cached_price = price if price is not None and price.per_1m_cached_input is not None else None
            if on_device or cached_price is not None:  # else no cache: it reads everything on every turn
                rate = endpoint.prefill_tokens_per_s or DEFAULT_PREFILL_TOKENS_PER_S[endpoint.where or "cloud"]
                self._caching.append((k, endpoint.name, on_device, cached_price, rate))

    def costs(
        self,
        state: ConversationState,
        input_tokens: float,
        output_tokens: float,
        seconds_price: float,
        now: float,
    ) -> tuple[list[float], list[int]]:
        """(each endpoint's delta in dollars, the history tokens it would read again) for a turn of
        `input_tokens` (the whole conversation as sent) in a conversation in `state` (module doc).
        Plain lists: a turn prices a handful of endpoints, where numpy's per-call cost would dominate."""
        history = min(state.history_tokens, int(input_tokens))
        delta = [0.0] * self.size
        missing = [0] * self.size
        for k, name, on_device, price, rate in self._caching:
            held = state.holds(name)
            holds = 0
            if held is not None and (on_device or now - held.at <= CLOUD_CACHE_TTL_S):
                holds = min(held.tokens, history)
            missing[k] = lacking = history - holds
            delta[k] = lacking / rate * seconds_price
            if price is not None and holds:  # its cache's discount
                delta[k] += price.call_cost(input_tokens, output_tokens, holds) - price.call_cost(
                    input_tokens, output_tokens
                )
        return delta, missing
