"""Run a request where the router says, falling back from the edge to the cloud.

Edge-first requests fall back to the cloud when the edge call raises, times out, finds
every edge worker busy, or the prompt exceeds the edge context limit. In the
edge_with_cloud_fallback zone the optional `accept(response)` check is also applied (the
router is unsure there); pass `verify_edge_zone=True` to check confident edge answers
too. A cloud failure is raised as CloudCallError with the edge error and the trace attached.

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
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable

from serving.decision import Decision
from serving.contract import CLOUD, FALLBACK


@dataclass
class Step:
    """One thing that ran: which call, how it ended, how long it took."""

    name: str          # "edge" | "accept" | "cloud"
    status: str        # "ok" | "error" | "timeout" | "rejected" | "skipped"
    seconds: float
    detail: str = ""


@dataclass
class Execution:
    """The response and how it was obtained."""

    response: Any
    served_by: str                     # "edge" | "cloud"
    decision: Decision
    fallback_reason: str | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def fell_back(self) -> bool:
        return self.fallback_reason is not None


class CloudCallError(RuntimeError):
    """The cloud call failed; `edge_error` holds the edge failure that led there, if any."""

    def __init__(self, message: str, *, edge_error: BaseException | None, steps: list[Step]):
        super().__init__(message)
        self.edge_error, self.steps = edge_error, steps


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
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._overrunning = 0  # calls whose caller timed out; each still holds a worker

    @property
    def overrunning(self) -> int:
        """How many workers are held by calls that overran their timeout."""
        return self._overrunning

    def call(self, fn: Callable[[str], Any], prompt: str, timeout_s: float):
        """fn(prompt) on a worker. TimeoutError if it has not returned within timeout_s (the
        worker stays with it), EdgeBusy if no worker came free in that time."""
        if self._pid != os.getpid():  # a forked child inherits this state but none of the threads
            self._reset()
        deadline = time.monotonic() + max(0.0, timeout_s)
        if self._overrunning >= self.size or not self._free.acquire(timeout=max(0.0, timeout_s)):
            raise EdgeBusy(f"edge busy: all {self.size} edge workers are running earlier calls"
                           f" ({self._overrunning} past their timeout)")
        try:
            self._start_workers()
        except BaseException:
            self._free.release()
            raise
        future: Future = Future()
        self._jobs.put((fn, prompt, future))
        try:
            future.exception(timeout=max(0.0, deadline - time.monotonic()))  # waits; raises only on timeout
        except FutureTimeout:
            with self._lock:
                self._overrunning += 1
            future.add_done_callback(self._overrun_ended)  # runs at once if the call has just returned
            raise TimeoutError(f"edge call exceeded {timeout_s:g} s") from None
        return future.result()

    def _overrun_ended(self, _future: Future) -> None:
        with self._lock:
            self._overrunning -= 1

    def _start_workers(self) -> None:
        if len(self._workers) == self.size:
            return
        with self._lock:
            while len(self._workers) < self.size:
                worker = threading.Thread(target=_serve, args=(self._jobs, self._free), daemon=True,
                                          name=f"edge-worker-{len(self._workers)}")
                worker.start()
                self._workers.append(worker)


def _serve(jobs: queue.SimpleQueue, free: threading.Semaphore) -> None:
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


def _timed(steps: list[Step], name: str, fn, *args):
    start = time.perf_counter()
    try:
        value = fn(*args)
    except (TimeoutError, EdgeBusy) as exc:
        status = "timeout" if isinstance(exc, TimeoutError) else "skipped"
        steps.append(Step(name, status, time.perf_counter() - start, str(exc)))
        raise
    except Exception as exc:
        steps.append(Step(name, "error", time.perf_counter() - start, repr(exc)[:500]))
        raise
    steps.append(Step(name, "ok", time.perf_counter() - start))
    return value


def execute(decision: Decision, prompt: str, *, edge: Callable[[str], Any], cloud: Callable[[str], Any],
            edge_context_tokens: int, edge_timeout_s: float | None = None,
            accept: Callable[[Any], bool] | None = None, verify_edge_zone: bool = False,
            edge_pool: EdgePool | None = None) -> Execution:
    """Carry out a routing decision; see the module doc."""
    steps: list[Step] = []
    edge_error: BaseException | None = None
    reason: str | None = None
    if decision.zone == CLOUD:
        pass
    elif decision.n_tokens > edge_context_tokens:
        reason = f"prompt of ~{decision.n_tokens} tokens exceeds the edge context limit of {edge_context_tokens}"
        steps.append(Step("edge", "skipped", 0.0, reason))
    else:
        try:
            if edge_timeout_s is None:
                response = _timed(steps, "edge", edge, prompt)
            else:
                response = _timed(steps, "edge", (edge_pool or default_edge_pool).call, edge, prompt, edge_timeout_s)
        except EdgeBusy as exc:
            edge_error, reason = exc, str(exc)
        except Exception as exc:
            edge_error, reason = exc, f"edge call failed: {exc!r}"[:300]
        else:
            if accept is None or not (decision.zone == FALLBACK or verify_edge_zone):
                return Execution(response, "edge", decision, None, steps)
            try:
                accepted = bool(_timed(steps, "accept", accept, response))
            except Exception as exc:
                edge_error, reason = exc, f"accept check raised: {exc!r}"[:300]
            else:
                if accepted:
                    return Execution(response, "edge", decision, None, steps)
                steps[-1].status, reason = "rejected", "accept check rejected the edge answer"
    try:
        response = _timed(steps, "cloud", cloud, prompt)
    except Exception as exc:
        raise CloudCallError(f"cloud call failed: {exc!r}" + (f" (after: {reason})" if reason else ""),
                             edge_error=edge_error, steps=steps) from exc
    return Execution(response, "cloud", decision, reason, steps)
