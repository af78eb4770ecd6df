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

N endpoints: given `endpoints=` (name -> call) instead of `edge` and `cloud`, both functions try
the decision's cascade in order instead (serving.execute_endpoints; docs/endpoints.md#running-n-endpoints).

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
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol, TypeVar, Union

import serving.telemetry as telemetry
from serving.contract import CLOUD, EDGE, FALLBACK
from serving.decision import Decision
from serving.execution import (  # the records and the call timing, shared with the N-endpoint cascade
    REASON_CHARS,
    CloudCallError,
    EdgeBusy,
    Execution,
    Step,
    Tried,
)
from serving.execution import timed_step as _step
from serving.execution import within_deadline as _within

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    from serving.endpoints import Endpoint

    # An edge call queued for a worker: the callable, its prompt (or request), and where its answer goes.
    # Answers are Any here and below: an edge or cloud callable returns whatever the app's client does.
    Job: TypeAlias = tuple[Callable[[Any], Any], Any, Future[Any]]
    # The accept check: answer -> its verdict, read by its truth (a bool, or serving.acceptance's Verdict).
    AcceptCheck: TypeAlias = Callable[[Any], object]


__all__ = [
    "REASON_CHARS",
    "CloudCallError",
    "EdgeBusy",
    "EdgePool",
    "Execution",
    "Routable",
    "Step",
    "Subject",
    "Tried",
    "aexecute",
    "default_edge_pool",
    "execute",
    "failure_kind",
    "fallback_kind",
    "prompt_text",
]


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


# Routing is CPU-bound (tokenization, the model, the policy's detectors: a 4 MiB prompt takes a
# second or more), so the async calls (Router.aexecute, aexecute_endpoints) route a prompt of more
# than INLINE_CHARS characters on a worker thread, and the event loop serves other requests
# meanwhile (the proxy's /health among them). A shorter prompt routes inline: it takes 0.2-0.6 ms,
# about the price of the hop to a thread and back (0.13 ms). One thread: a long prompt's routing
# holds the GIL nearly throughout (regular expressions, Python), so a second adds no speed, and
# each is one more the event loop waits for to get the GIL back (the proxy's /health with four
# 4 MiB prompts in progress waited up to 0.46-0.48 s with two threads, 0.24-0.30 s with one).
ROUTING_THREADS = 1
INLINE_CHARS = 2_048
_routing_pool: ThreadPoolExecutor | None = None
_routing_pool_lock = threading.Lock()
Result = TypeVar("Result")


async def off_loop(subject: object, fn: Callable[..., Result], *args: Any) -> Result:
    """fn(*args) for routing `subject` (a prompt, or a request whose `prompt` is the text): on the
    routing thread when its text is longer than INLINE_CHARS (in a copy of this context), else here."""
    global _routing_pool
    text = subject if isinstance(subject, str) else getattr(subject, "prompt", None)
    if not isinstance(text, str) or len(text) <= INLINE_CHARS:
        return fn(*args)
    import asyncio  # the SDK loads no asyncio until an async call
    import contextvars
    import functools

    with _routing_pool_lock:
        if _routing_pool is None:
            _routing_pool = ThreadPoolExecutor(ROUTING_THREADS, thread_name_prefix="serving-routing")
        pool = _routing_pool
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(pool, call)


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
    fell back): context_limit, rejected, accept_error, or the edge error's kind (`kind_of`). With N
    endpoints, why the endpoint before the serving one was left (serving.execute_endpoints.fallback_kind)."""
    if execution.fallback_reason is None:
        return None
    if execution.tried:
        from serving.execute_endpoints import fallback_kind as left_kind

        return left_kind(execution, kind_of)
    last = execution.steps[-2] if len(execution.steps) >= 2 else None  # the step before the cloud's
    if last is not None and last.name == "edge" and last.status == "skipped" and execution.edge_error is None:
        return "context_limit"
    if last is not None and last.name == "accept":
        return "rejected" if last.status == "rejected" else "accept_error"
    return kind_of(execution.edge_error)


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
        from serving.policy.errors import FallbackForbidden

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
    edge: Callable[[Subject], Any] | None = None,
    cloud: Callable[[Subject], Any] | None = None,
    edge_context_tokens: int | None = None,
    edge_timeout_s: float | None = None,
    accept: AcceptCheck | None = None,
    verify_edge_zone: bool = False,
    edge_pool: EdgePool | None = None,
    endpoints: Mapping[str, Callable[[Subject], Any]] | None = None,
    specs: Mapping[str, Endpoint] | None = None,
    timeouts: Mapping[str, float] | None = None,
    output_tokens: float = 0.0,
) -> Execution:
    """Carry out a routing decision: edge(prompt) and cloud(prompt) as it says (the prompt text
    or a Routable request, passed as given); see the module doc.

    Or, instead of `edge`, `cloud` and `edge_context_tokens`, N endpoints: `endpoints` maps each
    endpoint's name to its call, tried in the decision's cascade order (serving.execute_endpoints);
    `specs` (name -> serving.endpoints.Endpoint, e.g. an Endpoints spec's endpoints) gives their
    context limits and prices, `output_tokens` the answer's expected tokens the prices count
    (Execution.expected_cost), `timeouts` (name -> seconds) their deadlines (on `edge_pool`)."""
    with telemetry.request() as trace:  # joins the request's span when a caller opened one
        trace.decided(decision)
        if _n_endpoints(edge, cloud, edge_context_tokens, endpoints):
            from serving.execute_endpoints import run

            assert endpoints is not None  # _n_endpoints checked it
            execution = run(
                decision,
                prompt,
                endpoints,
                specs=specs,
                timeouts=timeouts,
                accept=accept,
                verify_edge_zone=verify_edge_zone,
                output_tokens=output_tokens,
                pool=edge_pool or default_edge_pool,
            )
        else:
            assert edge is not None and cloud is not None and edge_context_tokens is not None
            attempt = _Attempt(
                decision, edge_context_tokens=edge_context_tokens, accept=accept, verify_edge_zone=verify_edge_zone
            )
            execution = _execute(prompt, edge, cloud, edge_timeout_s, edge_pool, attempt)
        trace.executed(execution, fallback_kind)
    return execution


def _n_endpoints(edge: object, cloud: object, edge_context_tokens: object, endpoints: object) -> bool:
    """Whether the call names N endpoints (True) or the two sides (False); TypeError for a mix or neither."""
    if endpoints is not None:
        if edge is not None or cloud is not None:
            raise TypeError("give edge= and cloud=, or endpoints=, not both")
        return True
    if edge is None or cloud is None or edge_context_tokens is None:
        raise TypeError("execute() needs edge=, cloud= and edge_context_tokens=, or endpoints= (N endpoints)")
    return False


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
    edge: Callable[[Subject], Awaitable[Any]] | None = None,
    cloud: Callable[[Subject], Awaitable[Any]] | None = None,
    edge_context_tokens: int | None = None,
    edge_timeout_s: float | None = None,
    accept: AcceptCheck | None = None,
    verify_edge_zone: bool = False,
    endpoints: Mapping[str, Callable[[Subject], Awaitable[Any]]] | None = None,
    specs: Mapping[str, Endpoint] | None = None,
    timeouts: Mapping[str, float] | None = None,
    output_tokens: float = 0.0,
) -> Execution:
    """execute() for coroutines: `edge` and `cloud` (or each of `endpoints`) are async callables
    taking the prompt (or request).

    The same rules (_Attempt; serving.execute_endpoints for N endpoints) and the same Execution.
    With `edge_timeout_s` (`timeouts`) a call that overruns is cancelled (a coroutine can be
    stopped, unlike a thread, so no worker pool is needed) and the next endpoint serves. `accept`
    is a plain callable run in the event loop; keep it quick. asyncio only.
    """
    with telemetry.request() as trace:
        trace.decided(decision)
        if _n_endpoints(edge, cloud, edge_context_tokens, endpoints):
            from serving.execute_endpoints import arun

            assert endpoints is not None  # _n_endpoints checked it
            execution = await arun(
                decision,
                prompt,
                endpoints,
                specs=specs,
                timeouts=timeouts,
                accept=accept,
                verify_edge_zone=verify_edge_zone,
                output_tokens=output_tokens,
            )
        else:
            assert edge is not None and cloud is not None and edge_context_tokens is not None
            attempt = _Attempt(
                decision, edge_context_tokens=edge_context_tokens, accept=accept, verify_edge_zone=verify_edge_zone
            )
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
