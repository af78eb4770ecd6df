"""Run a request where the router says, falling back from the edge to the cloud.

execute() runs plain callables, aexecute() coroutines; both follow the same rules, which live
in one place (_Attempt: whether the edge is tried, whether its answer stands, what the trace and
the fallback reason say), and return the same Execution. The routed chat client
(serving.chat) uses both, and its streams too.

What the calls get: the prompt text, or a request object with a `prompt` attribute (Routable,
such as serving.chat's ChatRequest), passed to edge and cloud as given; Router.execute routes
and logs its text (`prompt_text`). Each edge and cloud Step keeps what its call returned
(`Step.result`), so a caller can read every answer a request produced, a rejected one too.

Edge-first requests fall back to the cloud when the edge call raises, times out, finds
every edge worker busy, or the prompt exceeds the edge context limit. In the
edge_with_cloud_fallback zone the optional `accept(response)` check is also applied (the
router is unsure there); pass `verify_edge_zone=True` to check confident edge answers
too. A cloud failure is raised as CloudCallError with the edge error and the trace attached.
A decision whose policy forbids the cloud (Decision.forbidden, serving.policy.rules) never
calls it: where the cloud would serve, FallbackForbidden is raised instead, naming the rule.

Edge workers. With `edge_timeout_s` set, the edge call runs on an EdgePool: a fixed set
of daemon threads (4 by default, started on first use) shared by every execute() call in
the process, or pass `edge_pool=EdgePool(n)`, e.g. one per edge device, so that one
device hanging does not hold the other's workers. To resize the shared pool, set
`serving.execute.default_edge_pool = EdgePool(n)` at start-up. A call waits up to
`edge_timeout_s` in all for a free worker and for the answer. Python cannot stop a
thread, so a call that overruns keeps its worker until it returns; when every worker is
held that way, calls do not wait and do not start threads: the edge step is "skipped",
the reason starts with "edge busy", and the cloud serves, until the calls return.
Without `edge_timeout_s` the edge call runs in the caller's thread, and may block it.

So write an edge callable that stops on its own soon after the timeout, so that an
overrun frees its worker:
- an HTTP or socket client: give it its own timeout no longer than edge_timeout_s,
  e.g. `session.post(url, json={"prompt": prompt}, timeout=edge_timeout_s)`;
- a generation loop: check a deadline (or a threading.Event that the host sets) between
  tokens and raise when it has passed:

      def edge(prompt):
          deadline = time.monotonic() + EDGE_TIMEOUT_S
          tokens = []
          for token in model.generate(prompt):
              if time.monotonic() > deadline:
                  raise TimeoutError("edge generation overran")
              tokens.append(token)
          return "".join(tokens)
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, TypeVar, Union

import serving.telemetry as telemetry
from serving.contract import CLOUD, EDGE, FALLBACK
from serving.decision import Decision

if TYPE_CHECKING:
    from collections.abc import Iterator

    from typing_extensions import TypeAlias

    # An edge call queued for a worker: the callable, its prompt (or request), and where its answer goes.
    # Answers are Any here and below: an edge or cloud callable returns whatever the app's client does.
    Job: TypeAlias = tuple[Callable[[Any], Any], Any, Future[Any]]
    # The accept check: answer -> its verdict, read by its truth (a bool, or serving.acceptance's Verdict).
    AcceptCheck: TypeAlias = Callable[[Any], object]


class Routable(Protocol):
    """A request the router routes by its text: `prompt`. Router.execute passes the object itself
    to the edge and cloud calls, so they get everything the request carries (serving.chat.ChatRequest)."""

    @property
    def prompt(self) -> str: ...


# What execute() hands the edge and cloud calls: the prompt text, or a Routable request.
Subject = TypeVar("Subject", bound=Union[str, Routable])


def prompt_text(subject: object) -> str:
    """The text routed for `subject`: the string itself, or a Routable's `prompt`; TypeError for anything else."""
    text = subject if isinstance(subject, str) else getattr(subject, "prompt", None)
    if not isinstance(text, str):
        raise TypeError(
            f"prompt must be str, or a request whose .prompt is str (serving.execute.Routable), "
            f"got {type(subject).__name__}"
        )
    return text


REASON_CHARS = 300  # a fallback reason is cut to this on the Execution (the outcome log redacts it whole first)


@dataclass
class Step:
    """One thing that ran: which call, how it ended, how long it took; for an edge or cloud call
    that returned, `result`: what it returned (a rejected edge answer too). `result` is never
    shown (repr), compared, logged or sent: the outcome log and the proxy read name, status and seconds."""

    name: str  # "edge" | "accept" | "cloud"
    status: str  # "ok" | "error" | "timeout" | "rejected" | "skipped"
    seconds: float
    detail: str = ""
    result: Any = field(default=None, repr=False, compare=False)


@dataclass
class Execution:
    """The response and how it was obtained."""

    response: Any
    served_by: str  # "edge" | "cloud"
    decision: Decision
    fallback_reason: str | None = None
    steps: list[Step] = field(default_factory=list)
    edge_error: BaseException | None = None  # the edge failure the cloud answered after, if any
    request_id: str | None = None  # set by Router.execute: the id router.feedback() takes
    # The fallback reason without anything from the request: an exception is named by its
    # class ("edge call failed (ConnectionError)"). The outcome log writes this one.
    fallback_code: str | None = None

    @property
    def fell_back(self) -> bool:
        return self.fallback_reason is not None


def failure_kind(error: BaseException | None) -> str:
    """A short, fixed name for why a call failed (a metrics label, a span attribute, a response
    header): none, edge_busy, timeout, connection_error or error. serving.chat.errors.failure_kind
    adds the chat client's own kinds."""
    if error is None:
        return "none"
    if isinstance(error, EdgeBusy):
        return "edge_busy"
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, ConnectionError):
        return "connection_error"
    return "error"


def fallback_kind(execution: Execution, kind_of: Callable[[BaseException | None], str] = failure_kind) -> str | None:
    """A short, fixed name for why the cloud answered an edge-first request (None when nothing
    fell back): context_limit, rejected, accept_error, or the edge error's kind (`kind_of`)."""
    if execution.fallback_reason is None:
        return None
    last = execution.steps[-2] if len(execution.steps) >= 2 else None  # the step before the cloud's
    if last is not None and last.name == "edge" and last.status == "skipped" and execution.edge_error is None:
        return "context_limit"
    if last is not None and last.name == "accept":
        return "rejected" if last.status == "rejected" else "accept_error"
    return kind_of(execution.edge_error)


class CloudCallError(RuntimeError):
    """The cloud call failed; `edge_error` holds the edge failure that led there, if any,
    `steps` the calls made and `decision` the routing decision carried out."""

    def __init__(
        self, message: str, *, edge_error: BaseException | None, steps: list[Step], decision: Decision | None = None
    ):
        super().__init__(message)
        self.edge_error, self.steps, self.decision = edge_error, steps, decision


class EdgeBusy(RuntimeError):
    """No edge worker came free in time: the edge step is skipped and the cloud serves."""


class EdgePool:
    """Runs edge calls on at most `size` reused daemon threads (see the module doc)."""

    def __init__(self, size: int = 4):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size={size!r}: an edge pool needs at least one worker")
        self.size = size
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._free = threading.Semaphore(self.size)  # workers not running a call
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._overrunning = 0  # calls whose caller timed out; each still holds a worker

    @property
    def overrunning(self) -> int:
        """How many workers are held by calls that overran their timeout."""
        return self._overrunning

    def call(self, fn: Callable[[Subject], Any], prompt: Subject, timeout_s: float) -> Any:
        """fn(prompt) on a worker. TimeoutError if it has not returned within timeout_s (the
        worker stays with it), EdgeBusy if no worker came free in that time."""
        if self._pid != os.getpid():  # a forked child inherits this state but none of the threads
            self._reset()
        deadline = time.monotonic() + max(0.0, timeout_s)
        if self._overrunning >= self.size or not self._free.acquire(timeout=max(0.0, timeout_s)):
            raise EdgeBusy(
                f"edge busy: all {self.size} edge workers are running earlier calls"
                f" ({self._overrunning} past their timeout)"
            )
        try:
            self._start_workers()
        except BaseException:
            self._free.release()
            raise
        future: Future[Any] = Future()
        self._jobs.put((fn, prompt, future))
        try:
            future.exception(timeout=max(0.0, deadline - time.monotonic()))  # waits; raises only on timeout
        except FutureTimeout:
            with self._lock:
                self._overrunning += 1
            future.add_done_callback(self._overrun_ended)  # runs at once if the call has just returned
            raise TimeoutError(f"edge call exceeded {timeout_s:g} s") from None
        return future.result()

    def _overrun_ended(self, _future: Future[Any]) -> None:
        with self._lock:
            self._overrunning -= 1

    def _start_workers(self) -> None:
        if len(self._workers) == self.size:
            return
        with self._lock:
            while len(self._workers) < self.size:
                worker = threading.Thread(
                    target=_serve, args=(self._jobs, self._free), daemon=True, name=f"edge-worker-{len(self._workers)}"
                )
                worker.start()
                self._workers.append(worker)


def _serve(jobs: queue.SimpleQueue[Job], free: threading.Semaphore) -> None:
    """An edge worker: runs queued calls one after another, for the life of the process."""
    while True:
        fn, prompt, future = jobs.get()
        try:
            future.set_result(fn(prompt))
        except BaseException as exc:  # re-raised in the caller's thread
            future.set_exception(exc)
        finally:
            free.release()
            del fn, prompt, future  # keep nothing of a finished call


default_edge_pool = EdgePool()


@contextmanager
def _step(steps: list[Step], name: str) -> Iterator[Step]:
    """Record the enclosed call as a Step: ok, timeout (TimeoutError), skipped (EdgeBusy) or error.
    A plain context manager, so the sync and the async paths time their calls the same way. The
    call sets the yielded step's `result`; that step is the one recorded when the call returns."""
    start, step = time.perf_counter(), Step(name, "ok", 0.0)
    attempt = telemetry.attempt(name)  # a child span while a tracer records the request; else None
    try:
        yield step
    except (TimeoutError, EdgeBusy) as exc:
        status = "timeout" if isinstance(exc, TimeoutError) else "skipped"
        steps.append(Step(name, status, time.perf_counter() - start, str(exc)))
        if attempt is not None:
            attempt.ended(status, error=exc)
        raise
    except BaseException as exc:
        if isinstance(exc, Exception):
            steps.append(Step(name, "error", time.perf_counter() - start, repr(exc)[:500]))
        if attempt is not None:
            attempt.ended("error" if isinstance(exc, Exception) else "cancelled", error=exc)
        raise
    step.seconds = time.perf_counter() - start
    steps.append(step)
    if attempt is not None:
        attempt.ended("ok", step.result)


class _Attempt:
    """The fallback rules of one request, without the calls themselves.

    execute() and aexecute() make the calls and report each outcome here; this class alone
    decides whether the edge is tried, whether its answer stands, and what the trace and the
    fallback reason say. So the rules have one home whatever the transport (a plain call, a
    coroutine, or a stream opened up to its first token, as serving.chat does).
    """

    def __init__(
        self,
        decision: Decision,
        *,
        edge_context_tokens: int,
        accept: AcceptCheck | None = None,
        verify_edge_zone: bool = False,
    ) -> None:
        self.decision = decision
        self.steps: list[Step] = []
        self.edge_error: BaseException | None = None
        self.reason: str | None = None  # whole: cut to REASON_CHARS where it is shown (Execution)
        self.code: str | None = None  # the reason without anything from the request
        self._edge_context_tokens = edge_context_tokens
        self._accept = accept if decision.zone == FALLBACK or verify_edge_zone else None

    def edge_first(self) -> bool:
        """Whether to call the edge. An edge-first prompt over the edge context limit is not
        sent there: the edge step is recorded as skipped, with the reason."""
        if self.decision.zone == CLOUD or EDGE in self.decision.forbidden:
            return False
        if self.decision.n_tokens > self._edge_context_tokens:
            self.reason = self.code = (
                f"prompt of ~{self.decision.n_tokens} tokens exceeds the edge context limit "
                f"of {self._edge_context_tokens}"
            )
            self.steps.append(Step("edge", "skipped", 0.0, self.reason))
            return False
        return True

    def check_cloud(self) -> None:
        """Before any cloud call: FallbackForbidden when the policy forbids the cloud for this
        request (serving.policy.rules), carrying the rule, the edge's failure and the trace."""
        if CLOUD not in self.decision.forbidden:
            return
        from serving.policy.rules import FallbackForbidden

        rule = self.decision.rule or "(unnamed)"
        raise FallbackForbidden(
            f"policy '{rule}' forbids the cloud, and the edge did not serve: {self.code or 'not edge first'}",
            rule=rule,
            endpoint=CLOUD,
            edge_error=self.edge_error,
            steps=self.steps,
            decision=self.decision,
        ) from self.edge_error

    def edge_failed(self, error: BaseException) -> None:
        """The edge call raised, timed out or found no free worker: the cloud serves."""
        self.edge_error = error
        if isinstance(error, EdgeBusy):
            self.reason, self.code = str(error), "edge busy"
        else:
            self._because("edge call failed", error)

    def _because(self, what: str, error: BaseException) -> None:
        """The reason with the error's text, and its code with the error's class only."""
        self.reason, self.code = f"{what}: {error!r}", f"{what} ({type(error).__name__})"

    def edge_stands(self, response: Any) -> bool:
        """Whether the edge answer is served: always outside the checked zones, else when
        `accept(response)` holds. A rejection or a check that raises sends the request to the cloud."""
        if self._accept is None:
            return True
        try:
            with _step(self.steps, "accept"):
                accepted = bool(self._accept(response))
        except Exception as exc:
            self.edge_error = exc
            self._because("accept check raised", exc)
            return False
        if not accepted:
            self.steps[-1].status = "rejected"
            self.reason = self.code = "accept check rejected the edge answer"
        return accepted

    def served(self, response: Any, by: str) -> Execution:
        """The Execution of a request answered by `by` ("edge" or "cloud")."""
        if by != "cloud" or self.reason is None:
            return Execution(response, by, self.decision, None, self.steps)
        return Execution(
            response,
            by,
            self.decision,
            self.reason[:REASON_CHARS],
            self.steps,
            edge_error=self.edge_error,
            fallback_code=self.code,
        )

    def cloud_failed(self, error: BaseException) -> CloudCallError:
        """The error to raise when the cloud call failed, with the edge failure attached."""
        return CloudCallError(
            f"cloud call failed: {error!r}" + (f" (after: {self.reason})" if self.reason else ""),
            edge_error=self.edge_error,
            steps=self.steps,
            decision=self.decision,
        )


def execute(
    decision: Decision,
    prompt: Subject,
    *,
    edge: Callable[[Subject], Any],
    cloud: Callable[[Subject], Any],
    edge_context_tokens: int,
    edge_timeout_s: float | None = None,
    accept: AcceptCheck | None = None,
    verify_edge_zone: bool = False,
    edge_pool: EdgePool | None = None,
) -> Execution:
    """Carry out a routing decision: edge(prompt) and cloud(prompt) as it says (the prompt text
    or a Routable request, passed as given); see the module doc."""
    attempt = _Attempt(
        decision, edge_context_tokens=edge_context_tokens, accept=accept, verify_edge_zone=verify_edge_zone
    )
    with telemetry.request() as trace:  # joins the request's span when a caller opened one
        trace.decided(decision)
        execution = _execute(prompt, edge, cloud, edge_timeout_s, edge_pool, attempt)
        trace.executed(execution, fallback_kind)
    return execution


def _execute(
    prompt: Subject,
    edge: Callable[[Subject], Any],
    cloud: Callable[[Subject], Any],
    edge_timeout_s: float | None,
    edge_pool: EdgePool | None,
    attempt: _Attempt,
) -> Execution:
    if attempt.edge_first():
        try:
            with _step(attempt.steps, "edge") as step:
                if edge_timeout_s is None:
                    step.result = response = edge(prompt)
                else:
                    step.result = response = (edge_pool or default_edge_pool).call(edge, prompt, edge_timeout_s)
        except Exception as exc:
            attempt.edge_failed(exc)
        else:
            if attempt.edge_stands(response):
                return attempt.served(response, "edge")
    attempt.check_cloud()
    try:
        with _step(attempt.steps, "cloud") as step:
            step.result = response = cloud(prompt)
    except Exception as exc:
        raise attempt.cloud_failed(exc) from exc
    return attempt.served(response, "cloud")


async def aexecute(
    decision: Decision,
    prompt: Subject,
    *,
    edge: Callable[[Subject], Awaitable[Any]],
    cloud: Callable[[Subject], Awaitable[Any]],
    edge_context_tokens: int,
    edge_timeout_s: float | None = None,
    accept: AcceptCheck | None = None,
    verify_edge_zone: bool = False,
) -> Execution:
    """execute() for coroutines: `edge` and `cloud` are async callables taking the prompt (or request).

    The same rules (_Attempt) and the same Execution. With `edge_timeout_s` an edge call that
    overruns is cancelled (a coroutine can be stopped, unlike a thread, so no worker pool is
    needed) and the cloud serves. `accept` is a plain callable run in the event loop; keep it
    quick. asyncio only.
    """
    attempt = _Attempt(
        decision, edge_context_tokens=edge_context_tokens, accept=accept, verify_edge_zone=verify_edge_zone
    )
    with telemetry.request() as trace:
        trace.decided(decision)
        execution = await _aexecute(prompt, edge, cloud, edge_timeout_s, attempt)
        trace.executed(execution, fallback_kind)
    return execution


async def _aexecute(
    prompt: Subject,
    edge: Callable[[Subject], Awaitable[Any]],
    cloud: Callable[[Subject], Awaitable[Any]],
    edge_timeout_s: float | None,
    attempt: _Attempt,
) -> Execution:
    if attempt.edge_first():
        try:
            with _step(attempt.steps, "edge") as step:
                step.result = response = await _within(edge(prompt), edge_timeout_s)
        except Exception as exc:
            attempt.edge_failed(exc)
        else:
            if attempt.edge_stands(response):
                return attempt.served(response, "edge")
    attempt.check_cloud()
    try:
        with _step(attempt.steps, "cloud") as step:
            step.result = response = await cloud(prompt)
    except Exception as exc:
        raise attempt.cloud_failed(exc) from exc
    return attempt.served(response, "cloud")


async def _within(call: Awaitable[Any], timeout_s: float | None) -> Any:
    """Await `call`, cancelled after `timeout_s` with the TimeoutError execute() raises for the edge."""
    if timeout_s is None:
        return await call
    import asyncio  # here, not at the top: it would add ~70 ms to `import serving`

    try:
        return await asyncio.wait_for(call, max(0.0, timeout_s))
    except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11 on; another class before
        raise TimeoutError(f"edge call exceeded {timeout_s:g} s") from None
