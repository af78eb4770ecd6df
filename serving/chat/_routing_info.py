"""What the routed chat client tells the caller about a request: where it went and why, each
call's time, and what it cost. The proxy turns the same record into headers and metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serving.chat._errors import failure_kind
from serving.execution._execute import Execution, Step, Tried, fallback_kind
from serving.routing._decision import Decision

if TYPE_CHECKING:
    from serving._json_types import JSONObject


@dataclass
class RoutingInfo:
    """How one request was served: the fields are described in docs/clients.md's `routing` table
    (a stream's `estimated_cost` and `seconds` are set once it has ended)."""

    decision: Decision
    served_by: str
    model: str
    fallback_reason: str | None
    fallback_kind: str | None
    steps: list[Step]
    estimated_cost: float | None = None
    seconds: float | None = None
    request_id: str | None = None
    tried: list[Tried] = field(default_factory=list)
    expected_cost: float | None = None

    @property
    def turn(self) -> int | None:
        return self.decision.turn

    @property
    def switched(self) -> bool | None:
        return self.decision.switched

    @property
    def switch(self) -> str | None:
        """What the decision's reason says of the request's conversation (as serving.routing._chooser.Turn.said
        and Conversations.states write it): its "conversation turn N" part (stays on, moves from ... to ...,
        with what the re-read costs), or that the state was unavailable (not the store's error); else None."""
        for part in self.decision.reason.split("; "):
            if part.startswith("conversation turn "):
                return part
            if part.startswith("conversation state unavailable"):
                return "conversation state unavailable: decided as a turn on its own"
        return None

    @classmethod
    def of(cls, execution: Execution, model: str) -> "RoutingInfo":
        return cls(
            execution.decision,
            execution.served_by,
            model,
            execution.fallback_reason,
            fallback_kind(execution, failure_kind),  # with the chat client's failure kinds
            execution.steps,
            request_id=getattr(execution, "request_id", None),
            tried=execution.tried,
            expected_cost=execution.expected_cost,
        )

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "decision": self.decision.to_dict(),
            "served_by": self.served_by,
            "model": self.model,
            "fallback_reason": self.fallback_reason,
            "fallback_kind": self.fallback_kind,
            "steps": [
                {"name": s.name, "status": s.status, "seconds": round(s.seconds, 6), "detail": s.detail}
                for s in self.steps
            ],
            "estimated_cost": self.estimated_cost,
            "seconds": self.seconds,
            "request_id": self.request_id,
        }
        if self.tried:
            record.update(tried=[t.as_record() for t in self.tried], expected_cost=self.expected_cost)
        return record


@dataclass
class Completion:
    """A non-streamed answer: `body`, the chat completion JSON exactly as the serving model's server sent
    it (a key of the client in it reads [redacted]); `routing`, how it was served; `text`, the assistant text."""

    body: JSONObject
    routing: RoutingInfo
    text: str = field(default="", repr=False)
