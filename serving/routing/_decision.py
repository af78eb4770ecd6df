"""The one result type every router returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from serving._contract import CLOUD, EDGE, FALLBACK

if TYPE_CHECKING:
    from serving._json_types import JSONObject


@dataclass(slots=True)
class Decision:
    """Where a request runs, in what order, and why; one vocabulary for every bundle.

    cascade: the endpoints execute() tries, in order, while an answer fails (an error, a
        timeout, the context limit, or the accept check on a checked answer); never one the
        policy forbids or one lacking what the request needs. A two-endpoint bundle's is
        ("edge",) or ("edge", "cloud") or ("cloud",)
    checked: the endpoints of the cascade whose answers execute()'s accept check reads before
        serving them: every one but the last for an N-endpoint bundle, the edge in a two-endpoint
        bundle's uncertain band, none where the bundle is confident
    on_device: for each endpoint of the cascade, whether it runs on the device (its spec's `where`)
    score: what the bundle's rule ranked by. For two-endpoint bundles trained on expected gain
        (the default), the cloud's expected gain p_cloud - p_edge, in [-1, 1], which the
        thresholds cut; for older ones the calibrated probability that the cloud is needed; for
        N-endpoint bundles the first endpoint's expected quality; for the rule table its score
    expected: each endpoint's calibrated P(good answer) by name (None for older bundles, the rule
        table, and an N-endpoint bundle that could not score)
    novelty: how unlike the training data the prompt is (serving.scoring._novelty); above 1 the prompt is
        `unfamiliar` and gets the unfamiliar policy, which the reason names (None for bundles
        without a familiarity reference)
    reason: short, human readable
    degraded: True when the learned router was unavailable (the rule table, or price order, decided)
    model_version: which model decided ("rule-table" for the rule table)
    rule: the policy rule that decided (serving.policy._rules: a force, else the first forbid, else
        a prefer; or the built-in needs:<capability>), or None; the reason then starts with it
    forbidden: the endpoints the policy forbids for this request (and those lacking what it needs):
        execute() never calls them, not as a fallback, an exploration or a shadow run
    turn: the request's turn in its conversation (1 for the first), None for a request without a
        conversation; switched: whether it moves the conversation from the endpoint that answered
        its last turn (the reason says what the switch costs: serving.conversations._switch)
    switch_costs: for a turn whose conversation has a last endpoint, each endpoint's price in dollars
        over staying on that one (delta_e - delta_last of serving.conversations._switch, unweighted:
        what re-reading the history there costs); None otherwise. Not in to_dict (the outcome
        record carries the served endpoint's as `switch_cost`)

    Derived, read-only, for two-endpoint code: `endpoint` (the cascade's first), `target` ("edge"
    when that runs on the device, else "cloud"), `zone` (cloud when the cloud runs first;
    edge_with_cloud_fallback when a checked device answer can fall back to the cloud; else edge),
    `p_edge` and `p_cloud` (a two-endpoint bundle's expected).

    A plain record (slots, not frozen: a frozen dataclass's __init__ costs ~5 us, a tenth of a
    short prompt's route()); the router keeps no reference to it.
    """

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
        cascade, on_device, checked = zone_cascade(zone)
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


# A two-endpoint zone as a cascade: (cascade, on_device, checked). The edge alone is still left
# for the cloud when its call fails.
Placement = tuple[tuple[str, ...], tuple[bool, ...], tuple[str, ...]]
_ZONES: dict[str, Placement] = {
    EDGE: ((EDGE, CLOUD), (True, False), ()),
    FALLBACK: ((EDGE, CLOUD), (True, False), (EDGE,)),
    CLOUD: ((CLOUD,), (False,), ()),
}


def zone_cascade(zone: str) -> Placement:
    """The (cascade, on_device, checked) of a two-endpoint zone."""
    return _ZONES[zone]
