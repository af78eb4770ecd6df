"""Run a request where the router says, falling back from the edge to the cloud.

Edge-first requests fall back to the cloud when the edge call raises, times out, or the
prompt exceeds the edge context limit. In the edge_with_cloud_fallback zone the
optional `accept(response)` check is also applied (the router is unsure there); pass
`verify_edge_zone=True` to check confident edge answers too. A cloud failure is raised
as CloudCallError with the edge error and the trace attached.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from serving.decision import Decision
from serving.zones import CLOUD, FALLBACK


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


def _call_with_timeout(fn: Callable[[str], Any], prompt: str, timeout_s: float | None):
    """fn(prompt), or TimeoutError after timeout_s. The call runs on a daemon thread, which is
    abandoned (Python cannot stop it) if it overruns; make the edge client cancellable if that matters."""
    if timeout_s is None:
        return fn(prompt)
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = fn(prompt)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="edge-call", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"edge call exceeded {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _timed(steps: list[Step], name: str, fn, *args):
    start = time.perf_counter()
    try:
        value = fn(*args)
    except TimeoutError as exc:
        steps.append(Step(name, "timeout", time.perf_counter() - start, str(exc)))
        raise
    except Exception as exc:
        steps.append(Step(name, "error", time.perf_counter() - start, repr(exc)[:500]))
        raise
    steps.append(Step(name, "ok", time.perf_counter() - start))
    return value


def execute(decision: Decision, prompt: str, *, edge: Callable[[str], Any], cloud: Callable[[str], Any],
            edge_context_tokens: int, edge_timeout_s: float | None = None,
            accept: Callable[[Any], bool] | None = None, verify_edge_zone: bool = False) -> Execution:
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
            response = _timed(steps, "edge", _call_with_timeout, edge, prompt, edge_timeout_s)
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
