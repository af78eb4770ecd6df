"""One request as the dashboard sees it: where it went, what ran, how long each call took.

A RequestSummary holds codes, numbers and the bundle's version only, never the prompt, an answer, an
error message or a key: built from an outcome-log `request` record (`from_record`) or, in the proxy,
from a RoutingInfo (serving.proxy._dashboard). Feedback joins by request id (`outcomes_from_feedback`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from serving._json_values import finite_number
from serving._router_error import RouterError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

UNFAMILIAR_NOVELTY = 1.0  # a prompt is unfamiliar when its novelty exceeds this (serving.routing._stages)
NOT_CALLED = "skipped"  # a step with this status made no call (serving.execution._execute.Step)
JUDGING_STEPS = ("accept",)  # steps that judge an answer; every other step calls an endpoint (edge, cloud)
# A request's `time`: epoch seconds the SDK wrote (time.time()), from 1970 to the end of year 9999
# (what dates and the time axis can show); a time outside is a record the SDK did not write.
LATEST_TIME = 253402300799.0  # 9999-12-31T23:59:59Z


class RecordShapeError(RouterError, ValueError):
    """A record the dashboard cannot read: the message names the field and what was wrong."""


@dataclass(frozen=True, slots=True)
class Call:
    """One step of a request: `name` (edge, accept, cloud), its status, its milliseconds."""

    name: str
    status: str
    ms: float


@dataclass(frozen=True, slots=True)
class RequestSummary:
    """One routed request (module doc). `served_by`: None when no answer was served (the cloud failed
    too); `fallback`: the short reason the cloud answered an edge-first request; `unfamiliar`: None
    without a familiarity reference; `cost`: the measured price of its answers where the proxy knew it
    (endpoint prices configured), else None. In a conversation (else all None): `conversation` its id's
    pseudonym (serving.monitoring._outcome_log.pseudonym, never the id), `turn` (None when its state
    could not be read), `switched` (moved from its last turn's endpoint) and `switch_cost` (dollars the
    served endpoint paid over the last one to re-read the history; None on a first turn)."""

    time: float
    model_version: str
    zone: str | None
    target: str | None
    served_by: str | None
    fallback: str | None
    calls: tuple[Call, ...]
    unfamiliar: bool | None
    cost: float | None = None
    request_id: str | None = None
    explored: bool = False
    propensity: float | None = None
    edge_quality: float | None = None  # an outcome the request itself observed (a failed edge call: 0)
    conversation: str | None = None
    turn: int | None = None
    switched: bool | None = None
    switch_cost: float | None = None


def _number(record: Mapping[str, object], key: str, *, required: bool = False) -> float | None:
    value = record.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordShapeError(f"field {key!r} must be a finite number, not {_shown(value)}")
    number = finite_number(value)  # None for NaN, an infinity or an integer too large for a double
    if number is None:
        shown = repr(value) if isinstance(value, float) else f"an integer of {value.bit_length()} bits"
        raise RecordShapeError(f"field {key!r} must be a finite number, not {shown}")
    return number


def _code(record: Mapping[str, object], key: str, *, required: bool = False) -> str | None:
    value = record.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise RecordShapeError(f"field {key!r} must be text, not {_shown(value)}")
    return value


def _turn(record: Mapping[str, object]) -> int | None:
    value = record.get("turn")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 10**9:
        raise RecordShapeError(f"field 'turn' must be a whole number >= 1, not {_shown(value)}")
    return value


def _flag(record: Mapping[str, object], key: str) -> bool | None:
    value = record.get(key)
    if value is not None and not isinstance(value, bool):
        raise RecordShapeError(f"field {key!r} must be true or false, not {_shown(value)}")
    return value


def _shown(value: object) -> str:
    return "missing or null" if value is None else type(value).__name__


def _calls(steps: object) -> tuple[Call, ...]:
    if steps is None:
        return ()
    if not isinstance(steps, list):
        raise RecordShapeError(f"field 'steps' must be a list, not {_shown(steps)}")
    calls = []
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            raise RecordShapeError(f"steps[{index}] must be an object, not {_shown(step)}")
        try:
            name, status = _code(step, "name", required=True), _code(step, "status", required=True)
            ms = _number(step, "ms", required=True)
        except RecordShapeError as exc:
            raise RecordShapeError(f"steps[{index}]: {exc}") from None
        assert name is not None and status is not None and ms is not None  # required
        calls.append(Call(name, status, ms))
    return tuple(calls)


def fallback_kind(calls: tuple[Call, ...], reason: str | None) -> str | None:
    """The short reason the cloud served an edge-first request, from its logged steps and fallback code:
    context_limit, rejected, accept_error, edge_busy, timeout, or `edge error (Class)` as the log names the
    exception (the proxy's live window has the finer serving.chat._routing_info.fallback_kind); else None."""
    if reason is None:
        return None
    before_cloud = [c for c in calls if c.name != "cloud"]
    last = before_cloud[-1] if before_cloud else None
    if last is not None and last.name == "edge" and last.status == NOT_CALLED:
        return "context_limit"
    if last is not None and last.name == "accept":
        return "rejected" if last.status == "rejected" else "accept_error"
    if reason == "edge busy":
        return "edge_busy"
    if last is not None and last.status == "timeout":
        return "timeout"
    cause = reason.rpartition("(")[2].rstrip(")") if reason.endswith(")") else ""
    return f"edge error ({cause})" if cause else "edge error"


# A `tried` entry's reason for leaving an endpoint (serving.execution._execute) as fallback_kind names it.
TRIED_KINDS = {"context": "context_limit", "busy": "edge_busy", "timeout": "timeout", "forbidden": "forbidden"}


def tried_fallback_kind(tried: object) -> str | None:
    """Why the endpoint before the serving one was left, from an N-endpoint record's `tried`: fallback_kind's
    short reasons, `rejected` / `accept_error`, or `error (Class)`; None when the first served (or no list)."""
    if not isinstance(tried, list) or len(tried) < 2 or not all(isinstance(t, dict) for t in tried):
        return None
    left = tried[-2]
    outcome, error = left.get("outcome"), left.get("error")
    if outcome == "rejected":
        return "accept_error" if error else "rejected"
    if outcome in TRIED_KINDS:
        return TRIED_KINDS[str(outcome)]
    return f"error ({error})" if isinstance(error, str) and error else "error"


def from_record(record: Mapping[str, object]) -> RequestSummary:
    """The summary of one outcome-log `request` record (serving.monitoring._traffic writes them);
    RecordShapeError naming the field when the record does not have the shape the SDK writes."""
    if record.get("type") != "request":
        raise RecordShapeError(f"not a request record (type {record.get('type')!r})")
    calls = _calls(record.get("steps"))
    novelty = _number(record, "novelty")
    explored = record.get("explored", False)
    if not isinstance(explored, bool):
        raise RecordShapeError(f"field 'explored' must be true or false, not {_shown(explored)}")
    propensity = _number(record, "propensity")
    if propensity is not None and not 0 < propensity <= 1:
        raise RecordShapeError(f"field 'propensity' must be in (0, 1], not {propensity!r}")
    model_version = _code(record, "model_version", required=True)
    assert model_version is not None  # required
    time = _number(record, "time", required=True)
    assert time is not None  # required
    if not 0.0 <= time <= LATEST_TIME:
        raise RecordShapeError(
            f"field 'time' must be epoch seconds from 1970 to 9999 (at most {LATEST_TIME:.0f}), not {time!r}"
        )
    return RequestSummary(
        time=time,
        model_version=model_version,
        zone=_code(record, "zone"),
        target=_code(record, "target"),
        served_by=_code(record, "served_by"),
        fallback=(
            (tried_fallback_kind(record["tried"]) if record.get("served_by") is not None else None)
            if "tried" in record
            else fallback_kind(calls, _code(record, "fallback_reason"))
        ),
        calls=calls,
        unfamiliar=None if novelty is None else novelty > UNFAMILIAR_NOVELTY,
        request_id=_code(record, "request_id"),
        explored=explored,
        propensity=propensity,
        edge_quality=_number(record, "edge_quality"),
        conversation=_code(record, "conversation"),
        turn=_turn(record),
        switched=_flag(record, "switched"),
        switch_cost=_number(record, "switch_cost"),
    )


@dataclass(frozen=True)
class Outcomes:
    """What feedback says about one request: each side's quality in [0, 1], None when unknown."""

    edge: float | None = None
    cloud: float | None = None

    def of(self, side: str | None) -> float | None:
        return self.edge if side == "edge" else self.cloud if side == "cloud" else None


def outcomes_from_feedback(
    requests: Iterable[RequestSummary], feedback: Iterable[Mapping[str, object]]
) -> dict[str, Outcomes]:
    """request id -> its outcomes: the request's own (a failed edge call is an edge outcome of 0), then its
    `feedback` in time order, a later record replacing an earlier one per side (as data.sdk_logs joins them).
    Feedback for other requests is left out; RecordShapeError for a feedback record without the SDK's fields."""
    known = {r.request_id: Outcomes(edge=r.edge_quality) for r in requests if r.request_id is not None}
    parsed = []
    for record in feedback:
        request_id = _code(record, "request_id", required=True)
        assert request_id is not None  # required
        when = _number(record, "time") or 0.0
        edge, cloud = _number(record, "edge_quality"), _number(record, "cloud_quality")
        for name, value in (("edge_quality", edge), ("cloud_quality", cloud)):
            if value is not None and not 0 <= value <= 1:
                raise RecordShapeError(f"field {name!r} must be in [0, 1], not {value!r}")
        if request_id in known:
            parsed.append((when, request_id, edge, cloud))
    for _, request_id, edge, cloud in sorted(parsed, key=lambda item: item[0]):
        now = known[request_id]
        known[request_id] = Outcomes(
            edge=edge if edge is not None else now.edge, cloud=cloud if cloud is not None else now.cloud
        )
    return known
