"""Carrying out a decision: its cascade, one endpoint after another, until an answer stands
(docs/sdk.md#executing-a-decision). Router.execute, the routed chat client (its streams too) and
the proxy all come here. execute() calls plain callables, aexecute() coroutines, under the same
rules (_Cascade), and both return the same Execution. A plain call with a timeout runs on an EdgePool
(docs/sdk.md#edge-workers-and-timeouts): Python cannot stop a thread, so an overrunning call keeps
its worker until it returns; a coroutine that overruns is cancelled.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator, Mapping, Protocol, TypeVar, Union

import serving.monitoring._telemetry as telemetry
from serving._contract import CLOUD, EDGE, SIDE_OF
from serving.execution._steps import REASON_CHARS, CloudCallError, EdgeBusy, EndpointsFailed, Execution, Step, Tried
from serving.execution._steps import timed_step as _step
from serving.execution._steps import within_deadline as _within
from serving.routing._decision import Decision

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    from serving.endpoints._record import Endpoint

    # An edge call queued for a worker: the callable, its prompt (or request), and where its answer goes.
    # Answers are Any here and below: an edge or cloud callable returns whatever the app's client does.
    Job: TypeAlias = tuple[Callable[[Any], Any], Any, Future[Any]]
    # The accept check: answer -> its verdict, read by its truth (a bool, or serving.scoring._acceptance's Verdict).
    AcceptCheck: TypeAlias = Callable[[Any], object]


__all__ = ["CloudCallError", "EndpointsFailed", "Execution", "Step", "Tried"]  # _steps' names imported from here


class Routable(Protocol):
    """A request the router routes by its text: `prompt`. Router.execute passes the object itself
    to the edge and cloud calls, so they get everything the request carries (serving.chat.ChatRequest)."""

    @property
    def prompt(self) -> str: ...


# What execute() hands the edge and cloud calls: the prompt text, or a Routable request.
Subject = TypeVar("Subject", bound=Union[str, Routable])


# Routing is CPU-bound (a 4 MiB prompt takes a second or more), so Router.aexecute routes a prompt
# of more than INLINE_CHARS characters on a thread while the event loop serves other requests; a
# shorter one routes inline (0.2-0.6 ms, about the hop to a thread and back, 0.13 ms). One thread:
# routing holds the GIL nearly throughout, so a second adds no speed and only keeps the loop waiting
# longer (the proxy's /health, four 4 MiB prompts in progress: 0.46-0.48 s with two, 0.24-0.30 s with one).
ROUTING_THREADS = 1
INLINE_CHARS = 2_048
_routing_pool: ThreadPoolExecutor | None = None
_routing_pool_lock = threading.Lock()
Result = TypeVar("Result")
Named = TypeVar("Named")  # what named_calls names: a call, or an Endpoint record


async def off_loop(text: str, fn: Callable[..., Result], *args: Any) -> Result:
    """fn(*args) for routing `text`: on the routing thread when the text is longer than
    INLINE_CHARS (in a copy of this context), else here."""
    global _routing_pool
    if len(text) <= INLINE_CHARS:
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
    header): none, edge_busy, timeout, connection_error or error. serving.chat._errors.failure_kind
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


_LEFT_KINDS = {"context": "context_limit", "forbidden": "forbidden"}  # outcomes of endpoints never called


def fallback_kind(execution: Execution, kind_of: Callable[[BaseException | None], str] = failure_kind) -> str | None:
    """A short, fixed name for why the endpoint before the serving one was left (None when the first
    one reached served): context_limit, rejected, accept_error, forbidden, or its error's `kind_of`."""
    if len(execution.tried) < 2:
        return None
    last = execution.tried[-2]
    if last.outcome == "rejected":
        return "accept_error" if last.error else "rejected"
    return _LEFT_KINDS.get(last.outcome) or kind_of(last.exception)


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
        self.overrunning = 0  # calls whose caller timed out; each still holds a worker

    def call(self, fn: Callable[[Subject], Any], prompt: Subject, timeout_s: float, what: str = "edge call") -> Any:
        """fn(prompt) on a worker. TimeoutError naming `what` if it has not returned within
        timeout_s (the worker stays with it), EdgeBusy if no worker came free in that time. A
        TimeoutError that fn raises itself is raised as it is."""
        if self._pid != os.getpid():  # a forked child inherits this state but none of the threads
            self._reset()
        deadline = time.monotonic() + max(0.0, timeout_s)
        self._start_workers()
        if self.overrunning >= self.size or not self._free.acquire(timeout=max(0.0, timeout_s)):
            raise EdgeBusy(
                f"edge busy: all {self.size} edge workers are running earlier calls"
                f" ({self.overrunning} past their timeout)"
            )
        future: Future[Any] = Future()
        self._jobs.put((fn, prompt, future))
        try:
            future.exception(timeout=max(0.0, deadline - time.monotonic()))  # waits; raises only on timeout
        except FutureTimeout:
            with self._lock:
                self.overrunning += 1
            future.add_done_callback(self._overrun_ended)  # runs at once if the call has just returned
            raise TimeoutError(f"{what} exceeded {timeout_s:g} s") from None
        return future.result()

    def _overrun_ended(self, _future: Future[Any]) -> None:
        with self._lock:
            self.overrunning -= 1

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


def tried_text(tried: list[Tried]) -> str:
    """Every attempt as `name=outcome`, comma-separated (the proxy's x-router-tried header)."""
    return ",".join(t.label() for t in tried)


def check_names(endpoints: Mapping[str, object], what: str = "endpoints", *, callables: bool = False) -> None:
    """ValueError unless every key is an endpoint name (serving.endpoints._record.NAME_SHAPE: it is written
    to logs and headers as is); with `callables`, TypeError unless every value is callable."""
    from serving.endpoints._record import NAME_SHAPE

    if not endpoints:
        raise ValueError(f"{what} is empty: give at least one endpoint name -> call")
    for name, call in endpoints.items():
        if not isinstance(name, str) or not NAME_SHAPE.fullmatch(name):
            raise ValueError(f"{what}: {name!r} is not an endpoint name (letters, digits, _ . : -; at most 64)")
        if callables and not callable(call):
            raise TypeError(f"{what}[{name!r}] must be a callable taking the prompt (or request)")


def named_calls(
    edge: Named | None,
    cloud: Named | None,
    endpoints: Mapping[str, Named] | None,
    needs: str = "execute() needs endpoints= (name -> call)",
) -> Mapping[str, Named]:
    """The calls (or RoutedChat's Endpoint records) by endpoint name: `endpoints`, or edge= and
    cloud= as the endpoints "edge" and "cloud"; TypeError for a mix, or neither (`needs` says what)."""
    if endpoints is not None:
        if edge is not None or cloud is not None:
            raise TypeError("give edge= and cloud=, or endpoints=, not both")
        return endpoints
    if edge is None or cloud is None:
        raise TypeError(f"{needs}, or edge= and cloud=")
    return {EDGE: edge, CLOUD: cloud}


class _Cascade:
    """One request's rules (what to call next, whether an answer stands, what the trace and the
    fallback reason say), without the calls, which execute() and aexecute() make."""

    def __init__(
        self,
        decision: Decision,
        endpoints: Mapping[str, Any],
        specs: Mapping[str, Endpoint] | None,
        accept: AcceptCheck | None,
        verify_edge_zone: bool,
        output_tokens: float,
        timeouts: Mapping[str, float] | None,
        deadline: float | None,
    ) -> None:
        self.decision = decision
        self.output_tokens = output_tokens
        self.order = decision.cascade
        check_names(endpoints, callables=True)
        missing = [name for name in self.order if name not in endpoints]
        if missing:
            raise ValueError(
                f"the decision's order {', '.join(self.order)} names {', '.join(map(repr, missing))}, which "
                f"endpoints= does not have (it has {', '.join(endpoints)}): give a call for every endpoint of the bundle"
            )
        self.specs = specs or {}
        for side in (EDGE, CLOUD):
            unplaced = [n for n in self.order if n != side and getattr(self.specs.get(n), "where", None) is None]
            if side in decision.forbidden and side not in endpoints and unplaced:
                raise ValueError(
                    f"the policy forbids every {side} endpoint ('{decision.rule}'), and specs= does not say where "
                    f"{', '.join(unplaced)} run: give each endpoint's spec (serving.endpoints._record) so that none is called by mistake"
                )
        self.accept = accept
        self.checked = frozenset(self.order if verify_edge_zone else decision.checked) if accept else frozenset()
        self.timeouts = timeouts or {}
        self.deadline = deadline
        self.steps: list[Step] = []
        self.tried: list[Tried] = []
        self.first_error: BaseException | None = None
        self._forbade: str | None = None  # the first forbidden endpoint the cascade reached
        self._why = ""  # why the last endpoint left was left, in words (the fallback reason's end)

    def to_call(self) -> Iterator[tuple[str, bool]]:
        """(name, whether it is the last of the order) of each endpoint to call now, in order; a forbidden
        endpoint, a prompt over its context or a passed deadline is recorded as left instead."""
        forbidden, tokens = self.decision.forbidden, self.decision.n_tokens
        for i, name in enumerate(self.order):
            spec = self.specs.get(name)
            # Forbidden by name, or as a side: "cloud" forbids every endpoint whose spec runs in the cloud,
            # "edge" every one on the device (a policy written for two endpoints keeps its meaning).
            if name in forbidden or (spec is not None and spec.where is not None and SIDE_OF[spec.where] in forbidden):
                self._forbade = self._forbade or name
                self._why = f"policy '{self.decision.rule}' forbids it"
                self.tried.append(Tried(name, "forbidden"))
            elif spec is not None and not spec.fits(tokens):
                self._why = f"prompt of ~{tokens} tokens exceeds the context limit of {spec.context_tokens}"
                self.steps.append(Step(name, "skipped", 0.0, self._why))
                self.tried.append(Tried(name, "context"))
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                self.steps.append(Step(name, "skipped", 0.0, "the request's deadline has passed"))
                self.failed(name, TimeoutError("the request's deadline has passed"))
            else:
                yield name, i == len(self.order) - 1

    def timeout(self, name: str) -> float | None:
        """The call's time limit: its own timeout, cut to what is left before the deadline."""
        limit = self.timeouts.get(name)
        if self.deadline is None:
            return limit
        left = max(0.0, self.deadline - time.monotonic())
        return left if limit is None else min(limit, left)

    def _cost(self, name: str) -> float | None:
        spec = self.specs.get(name)
        return None if spec is None else spec.call_cost(self.decision.n_tokens, self.output_tokens)

    def failed(self, name: str, error: BaseException) -> None:
        """The call raised, timed out, or found no free worker."""
        outcome = "busy" if isinstance(error, EdgeBusy) else "timeout" if isinstance(error, TimeoutError) else "error"
        if not self.tried and (name != self.order[-1] or self.decision.forbidden):
            self.first_error = error  # the first endpoint's error, when another was to follow (or was forbidden)
        self._why = str(error) if isinstance(error, EdgeBusy) else repr(error)
        seconds = self.steps[-1].seconds if self.steps else 0.0
        self.tried.append(Tried(name, outcome, seconds, type(error).__name__, self._cost(name), error))

    def stands(self, name: str, response: Any, last: bool) -> bool:
        """Whether the answer is served: an unchecked one, and the last one of the order unless the
        policy forbade what would follow it; a checked one when `accept` holds."""
        seconds = self.steps[-1].seconds
        if name in self.checked and not (last and not self.decision.forbidden):
            assert self.accept is not None  # checked is empty without it
            try:
                with _step(self.steps, "accept"):
                    accepted = bool(self.accept(response))
            except Exception as exc:
                if not self.tried:
                    self.first_error = exc  # what the next endpoint answered after, as a failed call's error
                self._why = f"the accept check raised {exc!r}"
                self.tried.append(Tried(name, "rejected", seconds, type(exc).__name__, self._cost(name), exc))
                return False
            if not accepted:
                self._why = "the accept check rejected its answer"
                self.steps[-1].status = "rejected"
                self.tried.append(Tried(name, "rejected", seconds, None, self._cost(name)))
                return False
        self.tried.append(Tried(name, "served", seconds, None, self._cost(name)))
        return True

    def _reason(self) -> str:
        return "; ".join(t.label() for t in self.tried)

    def served(self, response: Any, name: str, trace: telemetry.Trace) -> Execution:
        """The Execution of `name`'s answer, reported to the request's trace."""
        left = self.tried[:-1]
        reason = code = None
        if left:
            code = f"left {', '.join(t.label() for t in left)}"
            reason = (f"{code}: {self._why}" if self._why else code)[:REASON_CHARS]
            code = code[:REASON_CHARS]
        execution = Execution(
            response, name, self.decision, reason, self.steps, edge_error=self.first_error, fallback_code=code
        )
        execution.tried = self.tried
        known = [t.cost for t in self.tried if t.cost is not None]  # None when a call had no spec
        execution.expected_cost = float(sum(known)) if len(known) == len(self.tried) else None
        trace.executed(execution, fallback_kind)
        return execution

    def last_error(self) -> BaseException | None:
        """The error of the last endpoint called (the cause of EndpointsFailed)."""
        return next((t.exception for t in reversed(self.tried) if t.exception is not None), None)

    def exhausted(self) -> Exception:
        """The error when no endpoint served (module doc)."""
        if self._forbade is None and self.decision.rule is not None:
            # The chooser leaves forbidden endpoints out of the cascade: the policy is still why none is left.
            self._forbade = next((name for name in self.decision.forbidden if name not in self.order), None)
        if self._forbade is not None:
            from serving.policy._errors import FallbackForbidden

            rule = self.decision.rule or "(unnamed)"
            error: Exception = FallbackForbidden(
                f"policy '{rule}' forbids {self._forbade}, and no allowed endpoint served: {self._reason()}"
                + (f" ({self._why})" if self._why and not self.last_error() else ""),
                rule=rule,
                endpoint=self._forbade,
                edge_error=self.first_error,
                steps=self.steps,
                decision=self.decision,
            )
            error.tried = self.tried  # type: ignore[attr-defined]  # read by the proxy and the outcome log
            return error
        errors = "; ".join(f"{t.endpoint}: {t.exception}" for t in self.tried if t.exception is not None)
        return EndpointsFailed(
            f"no endpoint served: {self._reason()}" + (f" ({errors})" if errors else ""),
            tried=self.tried,
            steps=self.steps,
            decision=self.decision,
            first_error=self.first_error,
        )


def execute(
    decision: Decision,
    prompt: Subject,
    *,
    endpoints: Mapping[str, Callable[[Subject], Any]] | None = None,
    edge: Callable[[Subject], Any] | None = None,
    cloud: Callable[[Subject], Any] | None = None,
    specs: Mapping[str, Endpoint] | None = None,
    edge_context_tokens: int | None = None,
    timeouts: Mapping[str, float] | None = None,
    edge_timeout_s: float | None = None,
    accept: AcceptCheck | None = None,
    verify_edge_zone: bool = False,
    edge_pool: EdgePool | None = None,
    output_tokens: float = 0.0,
    deadline: float | None = None,
) -> Execution:
    """Carry out a routing decision: `endpoints` name -> call (or edge= and cloud=); `specs` name ->
    Endpoint (context limits, prices, where each runs; edge_context_tokens: the edge's limit);
    `timeouts` name -> seconds (edge_timeout_s: the edge's), run on `edge_pool` (default: the
    process's); `deadline` a time.monotonic() no call outlives; `output_tokens` what expected_cost prices."""
    with telemetry.request() as trace:  # joins the request's span when a caller opened one
        trace.decided(decision)
        calls = named_calls(edge, cloud, endpoints)
        specs, timeouts = _edge_spelling(specs, edge_context_tokens, timeouts, edge_timeout_s)
        cascade = _Cascade(decision, calls, specs, accept, verify_edge_zone, output_tokens, timeouts, deadline)
        pool = edge_pool or default_edge_pool
        for name, last in cascade.to_call():
            call, limit = calls[name], cascade.timeout(name)
            try:
                with _step(cascade.steps, name, endpoint=name) as step:
                    if limit is None:
                        step.result = response = call(prompt)
                    else:
                        step.result = response = pool.call(call, prompt, limit, f"{name} call")
            except Exception as exc:
                cascade.failed(name, exc)
                continue
            if cascade.stands(name, response, last):
                return cascade.served(response, name, trace)
        raise cascade.exhausted() from cascade.last_error()


def _edge_spelling(
    specs: Mapping[str, Endpoint] | None,
    edge_context_tokens: int | None,
    timeouts: Mapping[str, float] | None,
    edge_timeout_s: float | None,
) -> tuple[Mapping[str, Endpoint] | None, Mapping[str, float] | None]:
    """`specs` and `timeouts` with the two-endpoint spellings, the edge's context limit and timeout, in them."""
    if edge_context_tokens is not None:
        from serving.endpoints._record import two_endpoints

        specs = {EDGE: two_endpoints(edge_context_tokens)[0], **(specs or {})}
    if edge_timeout_s is not None:
        timeouts = {EDGE: edge_timeout_s, **(timeouts or {})}
    return specs, timeouts


async def aexecute(
    decision: Decision,
    prompt: Subject,
    *,
    endpoints: Mapping[str, Callable[[Subject], Awaitable[Any]]] | None = None,
    edge: Callable[[Subject], Awaitable[Any]] | None = None,
    cloud: Callable[[Subject], Awaitable[Any]] | None = None,
    specs: Mapping[str, Endpoint] | None = None,
    edge_context_tokens: int | None = None,
    timeouts: Mapping[str, float] | None = None,
    edge_timeout_s: float | None = None,
    accept: AcceptCheck | None = None,
    verify_edge_zone: bool = False,
    output_tokens: float = 0.0,
    deadline: float | None = None,
) -> Execution:
    """execute() for coroutines (asyncio only): a call that overruns its timeout is cancelled, so no
    worker pool is needed. `accept` is a plain callable run in the event loop; keep it quick."""
    with telemetry.request() as trace:
        trace.decided(decision)
        calls = named_calls(edge, cloud, endpoints)
        specs, timeouts = _edge_spelling(specs, edge_context_tokens, timeouts, edge_timeout_s)
        cascade = _Cascade(decision, calls, specs, accept, verify_edge_zone, output_tokens, timeouts, deadline)
        for name, last in cascade.to_call():
            try:
                with _step(cascade.steps, name, endpoint=name) as step:
                    step.result = response = await _within(calls[name](prompt), cascade.timeout(name), f"{name} call")
            except Exception as exc:
                cascade.failed(name, exc)
                continue
            if cascade.stands(name, response, last):
                return cascade.served(response, name, trace)
        raise cascade.exhausted() from cascade.last_error()
