"""Carrying out a decision over N named endpoints: a cascade (docs/endpoints.md#running-n-endpoints).

serving.execute.execute() / aexecute() come here when given `endpoints=` (name -> callable)
instead of `edge=` and `cloud=`. The order is the decision's `cascade` (the cheapest plausible
endpoint first, then each one up, serving.endpoint_choice.cascade); a decision without one (a
two-endpoint bundle) runs its zone's order over endpoints named "edge" and "cloud": the cloud
zone ("cloud",), the others ("edge", "cloud").

Each endpoint in the order is left for the next when:
- the policy forbids it (Decision.forbidden, by name; "cloud" forbids every endpoint whose spec runs
  in the cloud, "edge" every one on the device): it is never called, a fallback included
  ("forbidden"). A side forbidden without the specs that say where the endpoints run is a
  ValueError before any call;
- the prompt's tokens exceed its context limit (`specs[name].context_tokens`): not called ("context");
- the call raises ("error"), overruns its timeout ("timeout": `timeouts[name]`, with the deadline
  mechanics of the edge calls: an EdgePool thread for plain callables, cancellation for
  coroutines), or finds every pool worker held by overrunning calls ("busy");
- the `accept` check rejects its answer, or raises ("rejected"). The check applies to every answer
  of a cascade but the last one's, which stands; in a zone's order, as in the two-endpoint path,
  only in the fallback zone (or every edge answer with verify_edge_zone=True).
The first answer that is not left is served ("served"). Execution.tried lists each endpoint of
the order that was reached, in order, with why it was left (Tried), and Execution.expected_cost
what the calls made are expected to cost (each called endpoint's Endpoint.cost at the prompt's
input tokens and `output_tokens` expected answer tokens, an N-endpoint bundle's own when the router
runs it; None when a called endpoint has no spec). When no endpoint serves: FallbackForbidden
(serving.policy) naming the rule if the policy forbade an endpoint (one the cascade reached, or one
an N-endpoint bundle left out of it), else EndpointsFailed (a CloudCallError) naming every attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol

from serving.contract import CLOUD, EDGE, FALLBACK
from serving.endpoints import NAME_SHAPE
from serving.execution import (
    REASON_CHARS,
    CloudCallError,
    EdgeBusy,
    Execution,
    Step,
    Tried,
    timed_step,
    within_deadline,
)

if TYPE_CHECKING:
    from serving.decision import Decision
    from serving.endpoints import Endpoint

    # The accept check (serving.execute.AcceptCheck): answer -> its verdict, read by its truth.
    AcceptCheck = Callable[[Any], object]


class Pool(Protocol):
    """Where a call with a timeout runs (serving.execute.EdgePool)."""

    def call(self, fn: Callable[[Any], Any], prompt: Any, timeout_s: float) -> Any: ...


SIDES = {"device": EDGE, "cloud": CLOUD}  # an endpoint's `where` -> the two-endpoint side a policy may forbid
OUTCOMES = ("served", "error", "timeout", "busy", "context", "rejected", "forbidden")
ATTEMPT = "endpoint"  # the telemetry attempt kind of a named endpoint's call (serving.telemetry)


def tried_text(tried: list[Tried]) -> str:
    """Every attempt as `name=outcome`, comma-separated (the proxy's x-router-tried header)."""
    return ",".join(t.label() for t in tried)


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


def cascade_of(decision: Decision) -> tuple[tuple[str, ...], bool]:
    """(the endpoint names to try in order, whether an explicit cascade: its every answer but the
    last is checked). A decision without a cascade runs its zone's order (module doc)."""
    if decision.cascade:
        return decision.cascade, True
    if decision.endpoint:
        return (decision.endpoint,), True
    return ((CLOUD,) if decision.zone == CLOUD else (EDGE, CLOUD)), False


def check_names(endpoints: Mapping[str, object], what: str = "endpoints", *, callables: bool = False) -> None:
    """ValueError unless every key is an endpoint name (serving.endpoints.NAME_SHAPE: it is written
    to logs and headers as is); with `callables`, TypeError unless every value is callable."""
    if not endpoints:
        raise ValueError(f"{what} is empty: give at least one endpoint name -> call")
    for name, call in endpoints.items():
        if not isinstance(name, str) or not NAME_SHAPE.fullmatch(name):
            raise ValueError(f"{what}: {name!r} is not an endpoint name (letters, digits, _ . : -; at most 64)")
        if callables and not callable(call):
            raise TypeError(f"{what}[{name!r}] must be a callable taking the prompt (or request)")


class _Cascade:
    """The rules of one request over N endpoints, without the calls (as serving.execute._Attempt is
    for two): what to call next, why each was left, the Execution or the error."""

    def __init__(
        self,
        decision: Decision,
        endpoints: Mapping[str, Any],
        *,
        specs: Mapping[str, Endpoint] | None,
        accept: AcceptCheck | None,
        verify_edge_zone: bool,
        output_tokens: float = 0.0,
    ) -> None:
        self.decision = decision
        self.output_tokens = output_tokens
        self.order, explicit = cascade_of(decision)
        check_names(endpoints, callables=True)
        missing = [name for name in self.order if name not in endpoints]
        if missing:
            raise ValueError(
                f"the decision's order {', '.join(self.order)} names {', '.join(map(repr, missing))}, which "
                f"endpoints= does not have (it has {', '.join(endpoints)}): give a call for every endpoint of the bundle"
            )
        self.specs = specs or {}
        for side in (EDGE, CLOUD):
            unplaced = [n for n in self.order if n != side and n not in self.specs]
            if side in decision.forbidden and side not in endpoints and unplaced:
                raise ValueError(
                    f"the policy forbids every {side} endpoint ('{decision.rule}'), and specs= does not say where "
                    f"{', '.join(unplaced)} run: give each endpoint's spec (serving.endpoints) so that none is called by mistake"
                )
        self.checked = accept if explicit or decision.zone == FALLBACK or verify_edge_zone else None
        self.steps: list[Step] = []
        self.tried: list[Tried] = []
        self.first_error: BaseException | None = None
        self._forbade: str | None = None  # the first forbidden endpoint the cascade reached

    def to_call(self) -> list[tuple[str, bool]]:
        """(name, whether it is the last of the order) of each endpoint, in order."""
        return [(name, i == len(self.order) - 1) for i, name in enumerate(self.order)]

    def callable_now(self, name: str) -> bool:
        """Whether to call `name`; a forbidden endpoint or a prompt over its context is recorded as left."""
        if self._forbidden(name):
            self._forbade = self._forbade or name
            self.tried.append(Tried(name, "forbidden"))
            return False
        spec = self.specs.get(name)
        if spec is not None and not spec.fits(self.decision.n_tokens):
            detail = f"prompt of ~{self.decision.n_tokens} tokens exceeds the context limit of {spec.context_tokens}"
            self.steps.append(Step(name, "skipped", 0.0, detail))
            self.tried.append(Tried(name, "context"))
            return False
        return True

    def _forbidden(self, name: str) -> bool:
        """Forbidden by name, or as a side: "cloud" forbids every endpoint whose spec runs in the
        cloud, "edge" every one on the device (a policy written for two endpoints keeps its meaning)."""
        forbidden = self.decision.forbidden
        if name in forbidden:
            return True
        spec = self.specs.get(name)
        return spec is not None and SIDES[spec.where] in forbidden

    def _cost(self, name: str) -> float | None:
        spec = self.specs.get(name)
        return None if spec is None else spec.cost(self.decision.n_tokens, self.output_tokens)

    def failed(self, name: str, error: BaseException) -> None:
        """The call raised, timed out, or found no free worker."""
        outcome = "busy" if isinstance(error, EdgeBusy) else "timeout" if isinstance(error, TimeoutError) else "error"
        if self.first_error is None and not self.tried:
            self.first_error = error
        seconds = self.steps[-1].seconds if self.steps else 0.0
        self.tried.append(Tried(name, outcome, seconds, type(error).__name__, self._cost(name), error))

    def stands(self, name: str, response: Any, last: bool) -> bool:
        """Whether the answer is served: the last one of the order always; else when `accept` holds."""
        seconds = self.steps[-1].seconds
        if self.checked is None or last:
            self.tried.append(Tried(name, "served", seconds, None, self._cost(name)))
            return True
        try:
            with timed_step(self.steps, "accept"):
                accepted = bool(self.checked(response))
        except Exception as exc:
            self.tried.append(Tried(name, "rejected", seconds, type(exc).__name__, self._cost(name), exc))
            return False
        if not accepted:
            self.steps[-1].status = "rejected"
            self.tried.append(Tried(name, "rejected", seconds, None, self._cost(name)))
            return False
        self.tried.append(Tried(name, "served", seconds, None, self._cost(name)))
        return True

    def _reason(self) -> str:
        return "; ".join(t.label() for t in self.tried)

    def served(self, response: Any, name: str) -> Execution:
        left = self.tried[:-1]
        reason = code = None
        if left:
            reason = code = f"left {', '.join(t.label() for t in left)}"[:REASON_CHARS]
        execution = Execution(
            response, name, self.decision, reason, self.steps, edge_error=self.first_error, fallback_code=code
        )
        execution.tried = self.tried
        execution.expected_cost = self.expected_cost()
        return execution

    def expected_cost(self) -> float | None:
        costs = [t.cost for t in self.tried]
        return None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None))

    def last_error(self) -> BaseException | None:
        """The error of the last endpoint called (the cause of EndpointsFailed, as the cloud's is of CloudCallError)."""
        return next((t.exception for t in reversed(self.tried) if t.exception is not None), None)

    def exhausted(self) -> Exception:
        """The error when no endpoint served (module doc)."""
        if self._forbade is None and self.decision.rule is not None:
            # A bundle leaves forbidden endpoints out of the cascade: the policy is still why none is left.
            self._forbade = next((name for name in self.decision.forbidden if name not in self.order), None)
        if self._forbade is not None:
            from serving.policy.errors import FallbackForbidden

            rule = self.decision.rule or "(unnamed)"
            error: Exception = FallbackForbidden(
                f"policy '{rule}' forbids {self._forbade}, and no allowed endpoint served: {self._reason()}",
                rule=rule,
                endpoint=self._forbade,
                edge_error=self.first_error,
                steps=self.steps,
                decision=self.decision,
            )
            error.tried = self.tried  # type: ignore[attr-defined]  # read by the proxy and the outcome log
            return error
        return EndpointsFailed(
            f"no endpoint served: {self._reason()}",
            tried=self.tried,
            steps=self.steps,
            decision=self.decision,
            first_error=self.first_error,
        )


def run(
    decision: Decision,
    prompt: Any,
    endpoints: Mapping[str, Callable[[Any], Any]],
    *,
    specs: Mapping[str, Endpoint] | None = None,
    timeouts: Mapping[str, float] | None = None,
    accept: AcceptCheck | None = None,
    verify_edge_zone: bool = False,
    output_tokens: float = 0.0,
    pool: Pool,
) -> Execution:
    """The cascade with plain callables (module doc); a call with a timeout runs on `pool`."""
    cascade = _Cascade(
        decision, endpoints, specs=specs, accept=accept, verify_edge_zone=verify_edge_zone, output_tokens=output_tokens
    )
    limits = timeouts or {}
    for name, last in cascade.to_call():
        if not cascade.callable_now(name):
            continue
        call, limit = endpoints[name], limits.get(name)
        try:
            with timed_step(cascade.steps, name, endpoint=name) as step:
                if limit is None:
                    step.result = response = call(prompt)
                else:
                    step.result = response = pool.call(call, prompt, limit)
        except Exception as exc:
            cascade.failed(name, exc)
            continue
        if cascade.stands(name, response, last):
            return cascade.served(response, name)
    raise cascade.exhausted() from cascade.last_error()


async def arun(
    decision: Decision,
    prompt: Any,
    endpoints: Mapping[str, Callable[[Any], Awaitable[Any]]],
    *,
    specs: Mapping[str, Endpoint] | None = None,
    timeouts: Mapping[str, float] | None = None,
    accept: AcceptCheck | None = None,
    verify_edge_zone: bool = False,
    output_tokens: float = 0.0,
) -> Execution:
    """run() for coroutines: an overrunning call is cancelled."""
    cascade = _Cascade(
        decision, endpoints, specs=specs, accept=accept, verify_edge_zone=verify_edge_zone, output_tokens=output_tokens
    )
    limits = timeouts or {}
    for name, last in cascade.to_call():
        if not cascade.callable_now(name):
            continue
        try:
            with timed_step(cascade.steps, name, endpoint=name) as step:
                step.result = response = await within_deadline(
                    endpoints[name](prompt), limits.get(name), f"{name} call"
                )
        except Exception as exc:
            cascade.failed(name, exc)
            continue
        if cascade.stands(name, response, last):
            return cascade.served(response, name)
    raise cascade.exhausted() from cascade.last_error()


def fallback_kind(execution: Execution, kind_of: Callable[[BaseException | None], str]) -> str | None:
    """A short, fixed name for why the endpoint before the serving one was left (None when the
    first one reached served): context_limit, rejected, accept_error, forbidden, or its error's kind."""
    left = execution.tried[:-1]
    if not left:
        return None
    last = left[-1]
    if last.outcome == "context":
        return "context_limit"
    if last.outcome == "forbidden":
        return "forbidden"
    if last.outcome == "rejected":
        return "accept_error" if last.error else "rejected"
    return kind_of(last.exception)
