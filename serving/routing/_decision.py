"""The one result type every router returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from serving._contract import CLOUD, EDGE, FALLBACK

if TYPE_CHECKING:
    from serving._json_types import JSONObject


@dataclass(slots=True)
class Decision:
    """Where a request runs, in what order, and why; one vocabulary for every bundle. docs/sdk.md (the
    Decision table) describes the fields and the derived, read-only `endpoint`, `target`, `zone`, `p_edge`
    and `p_cloud`; docs/conversations.md `turn`, `switched` and `switch_costs` (not in to_dict: the
    outcome record carries the served endpoint's as `switch_cost`).

    A plain record (slots, not frozen: a frozen dataclass's __init__ costs ~5 us, a tenth of a short
    prompt's route()); the router keeps no reference to it."""

    cascade: tuple[str, ...]
    score: float
    reason: str
    degraded: bool
    model_version: str
    on_device: tuple[bool, ...] = ()
    checked: tuple[str, ...] = ()
    precision: str | None = None
    n_tokens: int = 0
    truncated: bool = False
    novelty: float | None = None
    unfamiliar: bool = False
    rule: str | None = None
    forbidden: tuple[str, ...] = ()
    expected: dict[str, float] | None = None
    turn: int | None = None
    switched: bool | None = None
    switch_costs: dict[str, float] | None = None

    @classmethod
    def of_zone(cls, zone: str, **fields: Any) -> "Decision":  # Any: the other fields, of their own types
        """A two-endpoint decision from its zone (the rule table's, a bundle's bands')."""
        cascade, on_device, checked = ZONES[zone]
        return cls(cascade=cascade, on_device=on_device, checked=checked, **fields)

    @property
    def endpoint(self) -> str:
        return self.cascade[0]

    @property
    def target(self) -> str:
        return EDGE if self.on_device[0] else CLOUD

    @property
    def zone(self) -> str:
        on_device = self.on_device
        if not on_device[0]:
            return CLOUD
        return FALLBACK if self.checked and not all(on_device) else EDGE

    @property
    def p_edge(self) -> float | None:
        return self._two(EDGE)

    @property
    def p_cloud(self) -> float | None:
        return self._two(CLOUD)

    def _two(self, side: str) -> float | None:
        expected = self.expected
        return expected.get(side) if expected is not None and len(expected) == 2 else None

    def to_dict(self) -> JSONObject:
        """The JSON form: the fields, tuples as lists, and the derived endpoint, target, zone,
        p_edge and p_cloud (what logs and older readers read)."""
        data = asdict(self)
        del data["switch_costs"]
        if self.turn is None:  # a request without a conversation: the fields every reader knows
            del data["turn"], data["switched"]
        for key in ("cascade", "on_device", "checked", "forbidden"):
            data[key] = list(data[key])
        data.update(
            endpoint=self.endpoint, target=self.target, zone=self.zone, p_edge=self.p_edge, p_cloud=self.p_cloud
        )
        return data


# A two-endpoint zone as (cascade, on_device, checked); the edge alone is still left for the cloud when its call fails.
ZONES: dict[str, tuple[tuple[str, ...], tuple[bool, ...], tuple[str, ...]]] = {
    EDGE: ((EDGE, CLOUD), (True, False), ()),
    FALLBACK: ((EDGE, CLOUD), (True, False), (EDGE,)),
    CLOUD: ((CLOUD,), (False,), ()),
}
