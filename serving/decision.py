"""The one result type every router returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from serving.contract import first_target

if TYPE_CHECKING:
    from serving.json_types import JSONObject


@dataclass(slots=True)
class Decision:
    """Where a request runs first, and why.

    target: "edge" | "cloud" (where the request runs first)
    zone: "edge" | "edge_with_cloud_fallback" | "cloud"
    score: what the thresholds cut. For bundles trained on expected gain (the default), the
        cloud's expected gain p_cloud - p_edge, in [-1, 1]; for older bundles the calibrated
        probability that the cloud is needed; for the rule table its complexity score
    p_edge, p_cloud: calibrated P(edge answer good), P(cloud answer good) for the prompt
        (None when the bundle has no such heads, or the rule table decided)
    novelty: how unlike the training data the prompt is (serving.novelty); above 1 the
        prompt is `unfamiliar` and gets the unfamiliar policy, which the reason names
        (None for bundles without a familiarity reference)
    reason: short, human readable
    degraded: True when the learned router was unavailable and the rule table decided
    model_version: which model decided ("rule-table" for the rule table)
    rule: the policy rule that decided (serving.policy.rules: a force, else the first forbid, else
        a prefer), or None when no rule matched; the reason then starts with it
    forbidden: the endpoints the policy forbids for this request: execute() never calls them,
        not as a fallback, an exploration or a shadow run
    expected: each endpoint's calibrated P(good answer) by name: {"edge": p_edge, "cloud":
        p_cloud} for a two-endpoint bundle with both heads, every endpoint's for an N-endpoint
        bundle (docs/endpoints.md#n-endpoint-bundles); None otherwise (older bundles, the rule table)
    endpoint: the endpoint chosen to run first (N-endpoint bundles; None for two-endpoint ones,
        whose `target` says it)
    cascade: the endpoints execute() tries, in order, when an answer fails (the acceptance check,
        an error, a timeout, the context limit): `endpoint` first (N-endpoint bundles; () for
        two-endpoint ones, whose zone says it)

    A plain record (slots, not frozen: a frozen dataclass's __init__ costs ~5 us, a
    tenth of a short prompt's route()); the router keeps no reference to it.
    """

    target: str
    zone: str
    score: float
    reason: str
    degraded: bool
    model_version: str
    precision: str | None = None
    n_tokens: int = 0
    truncated: bool = False
    p_edge: float | None = None
    p_cloud: float | None = None
    novelty: float | None = None
    unfamiliar: bool = False
    rule: str | None = None
    forbidden: tuple[str, ...] = ()
    expected: dict[str, float] | None = None
    endpoint: str | None = None
    cascade: tuple[str, ...] = ()

    @classmethod
    def make(cls, zone: str, **fields: Any) -> "Decision":  # Any: the other fields, of their own types
        return cls(target=first_target(zone), zone=zone, **fields)

    def to_dict(self) -> JSONObject:
        """The JSON form: `forbidden` and `cascade` as lists, as JSON reads them back."""
        data = asdict(self)
        data["forbidden"] = list(self.forbidden)
        data["cascade"] = list(self.cascade)
        return data
