"""The router's side of conversations: reading each request's state before it is decided, writing
the turn's outcome after it ran (Router.route, execute, aexecute, record_turn). A store that cannot
be reached never fails a request, and after a failure is not asked again for RETRY_S, so that a store
that hangs costs a request nothing meanwhile (docs/conversations.md#when-the-store-is-down)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable, Sequence

import serving.monitoring._telemetry as telemetry
from serving.conversations._state import ConversationState
from serving.conversations._store import ConversationStoreError, MemoryStore, check_conversation_id
from serving.conversations._switch import Stickiness

if TYPE_CHECKING:
    from serving.conversations._store import ConversationStore
    from serving.execution._steps import Execution
    from serving.routing._decision import Decision
    from serving.routing._request import Request

log = logging.getLogger("serving")

RETRY_S = 1.0  # after a failure, the store is not asked again for this long
_UNAVAILABLE = "conversation state unavailable ({}): decided as a turn on its own"  # a decision's reason ends so


class Conversations:
    """A store (default: this process's MemoryStore) and what a switch weighs (Stickiness)."""

    def __init__(self, store: ConversationStore | None = None, stickiness: Stickiness | None = None) -> None:
        self.store: ConversationStore = MemoryStore() if store is None else store
        self.stickiness = Stickiness() if stickiness is None else stickiness
        self.unavailable = 0  # store reads and writes that failed, or were not tried while it was down
        self._down_until = 0.0  # time.monotonic() before which the store is not asked again
        self._down = False

    def states(self, requests: Sequence[Request]) -> tuple[list[ConversationState | None] | None, str | None]:
        """(each request's conversation state, or None for all when none has a conversation or the
        store failed; what the reason says of a failure)."""
        ids = [r.conversation for r in requests]
        if ids.count(None) == len(ids):
            return None, None
        if self._down and self._skipping():
            return None, _UNAVAILABLE.format("the store failed within the last second")
        get = self.store.get
        try:
            states = [None if conversation is None else get(conversation) for conversation in ids]
        except ConversationStoreError as exc:
            self._failed("deciding without conversation state", exc)
            return None, _UNAVAILABLE.format(exc)
        if self._down:
            self._reachable_again()
        return states, None

    def _skipping(self) -> bool:
        """Whether the store failed less than RETRY_S ago (then it is not asked: counted as failed)."""
        if not self._down or time.monotonic() >= self._down_until:
            return False
        self.unavailable += 1
        telemetry.conversation_state_unavailable()
        return True

    def _failed(self, doing: str, exc: ConversationStoreError) -> None:
        self.unavailable += 1
        telemetry.conversation_state_unavailable()
        first, self._down, self._down_until = not self._down, True, time.monotonic() + RETRY_S
        if first:
            log.warning(
                "%s: %s; until the store answers, turns are decided without their state and not written "
                "(asked again every %g s; counted as router.conversation.state_errors)",
                doing,
                exc,
                RETRY_S,
            )
        else:
            log.debug("%s: %s", doing, exc)

    def _reachable_again(self) -> None:
        if self._down:
            self._down = False
            log.warning("conversation store reachable again")

    def record(
        self,
        conversation: str,
        endpoint: str | None,
        *,
        input_tokens: int,
        output_tokens: int,
        on_device: bool,
        outcome: str,
    ) -> bool:
        """Write a turn's outcome into the conversation's state; False (logged, counted) when the
        store cannot be reached: the app's answer is never lost for it."""
        check_conversation_id(conversation)
        if self._skipping():
            return False
        try:
            state = self.store.get(conversation) or ConversationState()
            after = state.after(
                endpoint,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                on_device=on_device,
                outcome=outcome,
                now=time.time(),
            )
            self.store.put(conversation, after)
        except ConversationStoreError as exc:
            self._failed("conversation state not written", exc)
            return False
        self._reachable_again()
        return True

    def answered(self, conversation: str, turn: int, endpoint: str, output_tokens: int, *, on_device: bool) -> bool:
        """Add the length of turn `turn`'s answer, known only later (a stream's, at its end), to the
        state recorded for it. False when not written: another turn was recorded since, `endpoint`
        did not serve it, or the store is unreachable (logged, counted)."""
        if output_tokens <= 0 or self._skipping():
            return False
        written = False
        try:
            state = self.store.get(conversation)
            if state is not None and state.turns == turn and state.endpoint == endpoint:
                self.store.put(conversation, state.answered(endpoint, output_tokens, on_device=on_device))
                written = True
        except ConversationStoreError as exc:
            self._failed("conversation state not written", exc)
            return False
        self._reachable_again()
        return written

    def executed(self, request: Request, decision: Decision, execution: Execution | None, output_tokens: int) -> None:
        """Record the turn execute() ran: who served it and how (served, a fallback after an
        error, a rejected answer), or that nothing served it."""
        if request.conversation is None:
            return
        served, on_device, outcome = None, False, "failed"  # nothing served it
        if execution is not None:
            served = execution.served_by
            on_device = dict(zip(decision.cascade, decision.on_device)).get(served, False)
            if execution.fallback_reason is None:
                outcome = "served"
            else:
                outcome = "rejected" if any(t.outcome == "rejected" for t in execution.tried) else "fallback"
        self.record(
            request.conversation,
            served,
            input_tokens=decision.n_tokens,
            output_tokens=0 if execution is None else output_tokens,
            on_device=on_device,
            outcome=outcome,
        )


def with_note(requests: Sequence[Request], decisions: list[Decision], note: str | None) -> list[Decision]:
    """The decisions, a store failure's note at the end of the reason of each in a conversation."""
    if note is not None:
        for request, decision in zip(requests, decisions):
            if request.conversation is not None:
                decision.reason += f"; {note}"
    return decisions


def answer_tokens(response: object, count_tokens: Callable[[str], int]) -> int:
    """The answer's length in tokens: its usage's completion_tokens when it reports one, else the
    text counted with the bundle's tokenizer, else 0."""
    usage = getattr(response, "usage", None)
    if usage is None:  # serving.chat's Answer: the upstream's JSON body
        body = getattr(response, "body", None)
        usage = body.get("usage") if isinstance(body, dict) else None
    completion = (
        usage.get("completion_tokens") if isinstance(usage, dict) else getattr(usage, "completion_tokens", None)
    )
    if isinstance(completion, int) and not isinstance(completion, bool) and 0 <= completion < 10**9:
        return completion
    return count_tokens(response) if isinstance(response, str) else 0
