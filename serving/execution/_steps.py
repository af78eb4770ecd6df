"""What one request's execution records (its steps, tries and errors), and how each call in it is
timed, for serving.execution._execute's cascade; apps import them from serving."""

from __future__ import annotations

import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable

import serving.monitoring._telemetry as telemetry
from serving._router_error import RouterError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from serving.routing._decision import Decision

REASON_CHARS = 300  # a fallback reason is cut to this on the Execution (the outcome log redacts it whole first)


@dataclass
class Tried:
    """One endpoint of a decision's cascade; `outcome`: served, or why it was left (error, timeout,
    busy, context, rejected, forbidden). error: the class name of what ended it (an error, a timeout,
    a busy pool, a raising accept check), never its text. cost: the call's expected cost at its
    spec's price (0 when not called, None when called without a spec). `exception`: the exception
    itself, never shown, compared, logged or sent (the headers' error kinds read it)."""

    endpoint: str
    outcome: str
    seconds: float = 0.0
    error: str | None = None
    cost: float | None = 0.0
    exception: BaseException | None = field(default=None, repr=False, compare=False)

    def label(self) -> str:
        """`name=outcome`, with the error class for errors and a raising accept check:
        `onprem-8b=error:UpstreamHTTPError`, `phone-3b=rejected:ValueError`."""
        shown = f"{self.outcome}:{self.error}" if self.outcome in ("error", "rejected") and self.error else self.outcome
        return f"{self.endpoint}={shown}"

    def as_record(self) -> dict[str, Any]:
        """The outcome log's form (serving.monitoring._outcome_log: codes and numbers only)."""
        return {
            "endpoint": self.endpoint,
            "outcome": self.outcome,
            "ms": round(self.seconds * 1000, 3),
            "error": self.error,
            "cost": self.cost,
        }


@dataclass
class Step:
    """One thing that ran: which call, how it ended, how long it took; for an edge or cloud call
    that returned, `result`: what it returned (a rejected edge answer too). `result` is never
    shown (repr), compared, logged or sent: the outcome log and the proxy read name, status and seconds."""

    name: str  # an endpoint's name ("edge", "cloud", ...), or "accept" for the accept check
    status: str  # "ok" | "error" | "timeout" | "rejected" | "skipped"
    seconds: float
    detail: str = ""
    result: Any = field(default=None, repr=False, compare=False)


@dataclass
class Execution:
    """The response and how it was obtained."""

    response: Any
    served_by: str  # the serving endpoint's name ("edge" | "cloud" for a two-endpoint bundle)
    decision: Decision
    fallback_reason: str | None = None
    steps: list[Step] = field(default_factory=list)
    edge_error: BaseException | None = None  # the edge failure the cloud answered after, if any
    request_id: str | None = None  # set by Router.execute: the id router.feedback() takes
    # The fallback reason without anything from the request, errors named by their class
    # ("left edge=error:ConnectionError"): what the outcome log writes.
    fallback_code: str | None = None
    tried: list[Tried] = field(default_factory=list)  # each endpoint of the cascade reached, in order
    expected_cost: float | None = None  # of the calls made; None when one has no spec

    @property
    def fell_back(self) -> bool:
        return self.fallback_reason is not None


class CloudCallError(RouterError, RuntimeError):
    """The cloud call failed; `edge_error` holds the edge failure that led there, if any,
    `steps` the calls made and `decision` the routing decision carried out."""

    def __init__(
        self, message: str, *, edge_error: BaseException | None, steps: list[Step], decision: Decision | None = None
    ):
        super().__init__(message)
        self.edge_error, self.steps, self.decision = edge_error, steps, decision


class EndpointsFailed(CloudCallError):
    """No endpoint of the cascade served; `tried` says why each was left (the message names each).
    A CloudCallError, so code that handles the cloud failing handles this too; `edge_error` is
    the first endpoint's error, if it raised."""

    def __init__(
        self,
        message: str,
        *,
        tried: list[Tried],
        steps: list[Step],
        decision: Decision,
        first_error: BaseException | None,
    ) -> None:
        super().__init__(message, edge_error=first_error, steps=steps, decision=decision)
        self.tried = tried


class EdgeBusy(RouterError, RuntimeError):
    """No pool worker came free in time: the call is skipped (a `busy` try) and the cascade goes on."""


@contextmanager
def timed_step(steps: list[Step], name: str, *, endpoint: str | None = None) -> Iterator[Step]:
    """Record the enclosed call as a Step: ok (the yielded step, whose `result` the call sets),
    timeout (TimeoutError), skipped (EdgeBusy) or error; a plain context manager, so the sync and
    async paths time their calls alike. `endpoint`: an endpoint's name, which its span carries."""
    start, step = time.perf_counter(), Step(name, "ok", 0.0)
    attempt = telemetry.attempt(name, endpoint=endpoint)  # a child span while a tracer records the request; else None
    try:
        yield step
    except BaseException as exc:
        status = "cancelled"  # not an Exception (asyncio's cancellation, an interrupt): no step
        if isinstance(exc, (TimeoutError, EdgeBusy)):
            status = "timeout" if isinstance(exc, TimeoutError) else "skipped"
            steps.append(Step(name, status, time.perf_counter() - start, str(exc)))
        elif isinstance(exc, Exception):
            status = "error"
            steps.append(Step(name, status, time.perf_counter() - start, repr(exc)[:500]))
        if attempt is not None:
            attempt.ended(status, error=exc)
        raise
    step.seconds = time.perf_counter() - start
    steps.append(step)
    if attempt is not None:
        attempt.ended("ok", step.result)


async def within_deadline(call: Awaitable[Any], timeout_s: float | None, what: str = "edge call") -> Any:
    """Await `call`, cancelled after `timeout_s` with a TimeoutError naming `what`; a TimeoutError
    the call raises itself before then is raised as it is (not read as the call overrunning)."""
    if timeout_s is None:
        return await call
    import asyncio  # here, not at the top: it would add ~70 ms to `import serving`

    task = asyncio.ensure_future(call)
    try:
        done, _ = await asyncio.wait((task,), timeout=max(0.0, timeout_s))
    except asyncio.CancelledError:  # the caller gave up: so does the call
        task.cancel()
        raise
    if not done:
        task.cancel()
        with suppress(asyncio.CancelledError, Exception):  # its own failure while cancelled is not the answer
            await task  # let the cancelled call unwind before this returns
        raise TimeoutError(f"{what} exceeded {timeout_s:g} s")
    return task.result()
