"""Learning from the app's own traffic, on the SDK side: exploration (`explore_rate`), shadow runs
(`shadow_rate`) and the request, feedback and shadow records of serving.monitoring._outcome_log
(docs/traffic.md: exploration, propensities, shadow runs and N-endpoint records). A request record
has one shape whatever the bundle: the N-endpoint fields beside the two-endpoint ones (_record).
"""

from __future__ import annotations

import functools
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

import serving.monitoring._telemetry as telemetry
from serving._contract import CLOUD, EDGE
from serving.monitoring._outcome_log import LOG_FORMAT, OutcomeLog, answer_text, new_request_id
from serving.routing._decision import Decision

if TYPE_CHECKING:
    import asyncio

    from typing_extensions import TypeAlias

    from serving.execution._execute import AcceptCheck, Execution
    from serving.monitoring._outcome_log import Record
    from serving.monitoring._telemetry import Attempt
    from serving.routing._request import Request as RouterRequest
    from serving.routing._stages import Routing

    # An edge or cloud call: prompt (or request) -> the answer, whatever the app's client returns
    # (or, with aexecute, an awaitable of it); Any, as serving.execution._execute takes them.
    Call: TypeAlias = Callable[[Any], Any]


FAILED = ("error", "timeout")  # the outcomes of serving.execution._execute.Tried that are an endpoint's failure


_A_QUALITY = " (1 = a good answer)"


def _rate(name: str, value: object, what: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}={value!r}: must be a number in [0, 1]{what}")
    return float(value)


def _quality(name: str, value: object) -> float | None:
    return None if value is None else _rate(name, value, _A_QUALITY)


def endpoint_outcomes(outcomes: object, names: tuple[str, ...]) -> dict[str, float]:
    """Feedback's `outcomes` checked: a non-empty mapping of endpoint names among `names` to qualities
    in [0, 1]; ValueError naming the endpoint otherwise."""
    if not isinstance(outcomes, Mapping):
        raise ValueError(f"outcomes must be a mapping {{endpoint: quality}}, got {type(outcomes).__name__}")
    if not outcomes:
        raise ValueError("outcomes is empty: give at least one endpoint's quality")
    checked = {}
    for name, quality in outcomes.items():
        if name not in names:
            raise ValueError(
                f"outcomes names {str(name)[:80]!r}, which is not an endpoint of this router ({', '.join(names)})"
            )
        checked[name] = _rate(f"outcomes[{name!r}]", quality, _A_QUALITY)  # None too: a quality is needed
    return checked


class Traffic:
    """A router's exploration, shadow runs and outcome records (module doc)."""

    def __init__(
        self,
        log: OutcomeLog | None,
        *,
        explore_rate: float = 0.0,
        shadow_rate: float = 0.0,
        max_shadows: int = 4,
        seed: int | None = None,
    ) -> None:
        if log is not None and not isinstance(log, OutcomeLog):
            raise TypeError(f"log must be a serving.monitoring._outcome_log.OutcomeLog, got {type(log).__name__}")
        self.log = log
        self.explore_rate, self.shadow_rate = _rate("explore_rate", explore_rate), _rate("shadow_rate", shadow_rate)
        if (self.explore_rate or self.shadow_rate) and log is None:
            raise ValueError(
                "explore_rate and shadow_rate need an outcome log (log=OutcomeLog(folder)): "
                "exploring without recording what happened teaches nothing"
            )
        self._random = random.Random(seed)
        self._shadows = threading.BoundedSemaphore(max_shadows)
        self._tasks: set[asyncio.Task[None]] = set()

    def request(
        self,
        routing: Routing,
        request: RouterRequest,
        decision: Decision,
        *,
        accept: AcceptCheck | None,
        calls: Mapping[str, Call],
        request_id: str | None,
        asynchronous: bool = False,
        shadow: bool = True,
    ) -> "LoggedRequest | None":
        """The logged request for one execute() (None without a log: nothing to record); `calls`
        the endpoints' calls, of which a shadow run makes one (shadow=False: none)."""
        if self.log is None:
            return None
        shadow_calls = calls if shadow else None
        return LoggedRequest(self, self.log, routing, request, decision, accept, shadow_calls, request_id, asynchronous)

    def feedback(
        self,
        request_id: str,
        *,
        edge_quality: float | None = None,
        cloud_quality: float | None = None,
        outcomes: Mapping[str, float] | None = None,
        endpoints: tuple[str, ...] = (EDGE, CLOUD),
        source: str | None = None,
    ) -> bool:
        """Append a later outcome for a request; False when there is no log or it dropped the record.
        `outcomes` ({endpoint: quality} over `endpoints`) serves every bundle; for the endpoints edge
        and cloud it is written as edge_quality / cloud_quality (what readers of two-endpoint logs
        read), which only they take. ValueError for bad input."""
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id={request_id!r}: must be the non-empty id execute() returned")
        two = tuple(endpoints) == (EDGE, CLOUD)
        given: dict[str, float] | None = None
        if outcomes is not None:
            if edge_quality is not None or cloud_quality is not None:
                raise ValueError(
                    "give outcomes={endpoint: quality} or edge_quality / cloud_quality, not both in one feedback"
                )
            given = endpoint_outcomes(outcomes, tuple(endpoints))
            if two:  # the two qualities' other spelling
                edge_quality, cloud_quality, given = given.get(EDGE), given.get(CLOUD), None
        elif not two:
            raise ValueError(
                f"this router routes among {', '.join(endpoints)} (an N-endpoint bundle): give "
                "outcomes={endpoint: quality}, not edge_quality / cloud_quality"
            )
        edge, cloud = _quality("edge_quality", edge_quality), _quality("cloud_quality", cloud_quality)
        if given is None and edge is None and cloud is None:
            raise ValueError("feedback needs edge_quality or cloud_quality (or outcomes={endpoint: quality})")
        if self.log is None:
            return False
        record: Record = {"log": LOG_FORMAT, "type": "feedback", "request_id": request_id, "time": time.time()}
        record.update({"outcomes": given} if given is not None else {"edge_quality": edge, "cloud_quality": cloud})
        record["source"] = source
        return self.log.append(record)

    def maybe_shadow(self, logged: "LoggedRequest") -> bool:
        """Run the side that did not answer on a sampled share of requests: on a thread, or an async one's loop."""
        execution = logged.execution
        if (
            logged.calls is None
            or not self.shadow_rate
            or execution is None
            or self._random.random() >= self.shadow_rate
        ):
            return False
        names = logged.routing.endpoint_names
        if len(names) != 2 or set(logged.calls) != set(names):
            return False  # which of N endpoints would shadow is a choice of its own: none does
        ran = {s.name for s in execution.steps if s.status not in ("skipped",)}
        side = names[1] if execution.served_by == names[0] else names[0]
        if side in ran or side in execution.decision.forbidden:
            return False  # both already ran (a fallback), or the policy forbids the other side
        if not self._shadows.acquire(blocking=False):
            return False  # max_shadows already running
        span = telemetry.attempt("shadow", side)  # a child of the request's span, when one records it
        args = (logged.request_id, logged.request.call_subject, side, logged.calls[side], span)
        if logged.asynchronous:
            import asyncio  # here, not at the top: it would add ~30 ms to Router.load

            task = asyncio.get_running_loop().create_task(self._ashadow(*args))
            self._tasks.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._tasks.discard)
        else:
            threading.Thread(target=self._shadow, args=args, daemon=True, name="router-shadow").start()
        return True

    def _shadow(
        self, request_id: str, prompt: object, side: str, fn: Callable[[Any], Any], span: Attempt | None
    ) -> None:
        start, response, error = time.perf_counter(), None, None
        try:
            response = fn(prompt)
        except BaseException as exc:  # a shadow run never reaches the app
            error = exc
        self._shadow_record(request_id, side, start, response, error, span)

    async def _ashadow(
        self, request_id: str, prompt: object, side: str, fn: Callable[[Any], Awaitable[Any]], span: Attempt | None
    ) -> None:
        start, response, error = time.perf_counter(), None, None
        try:
            response = await fn(prompt)
        except BaseException as exc:  # cancelled with its loop, or failed: never reaches the app
            error = exc
        self._shadow_record(request_id, side, start, response, error, span)

    def _shadow_record(
        self, request_id: str, side: str, start: float, response: Any, error: BaseException | None, span: Attempt | None
    ) -> None:
        """Free the shadow run's slot and append its record (answer and error as in _record)."""
        self._shadows.release()
        if span is not None:
            span.ended("ok" if error is None else "error", response, error)
        assert self.log is not None  # shadow runs need a log (checked in __init__)
        self.log.append(
            {
                "log": LOG_FORMAT,
                "type": "shadow",
                "request_id": request_id,
                "time": time.time(),
                "side": side,
                "response": _kept(answer_text(response)),
                "latency_ms": round((time.perf_counter() - start) * 1000, 3),
                "error": error,
                "quality": 0.0 if error is not None and side == EDGE else None,
            }
        )


class LoggedRequest:
    """One execute() under an outcome log: the decision as carried out (explored or not), the accept
    check wrapped to keep its verdict, and when the router's run has ended (finished) its record (built in
    the log's writer thread: the request pays only for queueing it) and perhaps a shadow run."""

    def __init__(
        self,
        traffic: Traffic,
        log: OutcomeLog,  # the traffic's
        routing: Routing,
        request: RouterRequest,
        decision: Decision,
        accept: AcceptCheck | None,
        calls: Mapping[str, Call] | None,
        request_id: str | None,
        asynchronous: bool,
    ) -> None:
        self.traffic, self.log, self.routing, self.request = traffic, log, routing, request
        self.request_id = request_id or new_request_id()
        chooser = routing.chooser  # its rule explores (serving.routing._chooser: Bands flips a zone, Choice draws)
        self.decision, self.explored, self.propensity = chooser.rule.explored(
            decision, chooser, traffic.explore_rate, traffic._random
        )
        self.asynchronous = asynchronous
        self.verdicts: list[object] = []  # what the accept check returned: a bool or a Verdict
        self.accept = None if accept is None else self._keeping_verdicts(accept)
        self.execution: Execution | None = None
        self.calls = calls  # the endpoints' calls, for a shadow run; None: no shadow run

    def _keeping_verdicts(self, check: AcceptCheck) -> AcceptCheck:
        def accept(answer: Any) -> object:
            verdict = check(answer)
            self.verdicts.append(verdict)
            return verdict

        return accept

    def finished(self, error: BaseException | None) -> None:
        """The run has ended (`error`: what it raised, which goes on to the caller): queue its record."""
        if self.execution is not None:
            self.execution.request_id = self.request_id
        self.log.append(functools.partial(self._record, time.time(), self.execution, error))
        self.traffic.maybe_shadow(self)

    def _record(self, when: float, execution: Execution | None, error: BaseException | None) -> Record:
        """The request record (in the writer thread). Texts and exceptions go in as they are: the
        log writes them as its privacy mode says (serving.monitoring._outcome_log.STRING_FIELDS)."""
        privacy, decision, request = self.log.privacy, self.decision, self.request
        steps = execution.steps if execution is not None else getattr(error, "steps", [])
        served_by = execution.served_by if execution is not None else None
        edge_step = next((s for s in steps if s.name == "edge"), None)
        tried = execution.tried if execution is not None else getattr(error, "tried", [])
        answer = _kept(answer_text(execution.response)) if execution is not None else None
        features = None if privacy == "text" else self.routing.model_inputs(request.text, request.precision, privacy)
        record: Record = {
            "log": LOG_FORMAT,
            "type": "request",
            "request_id": self.request_id,
            "time": when,
            "prompt": request.text,
            "features": features,
            "precision": request.precision,
            "n_tokens": decision.n_tokens,
            "model_version": decision.model_version,
            "score": decision.score,
            "zone": decision.zone,
            "target": decision.target,
            "p_edge": decision.p_edge,
            "p_cloud": decision.p_cloud,
            "novelty": decision.novelty,
            "rule": decision.rule,  # the policy rule's name; never what a detector found
            "forbidden": list(decision.forbidden),
            "explored": self.explored,
            "propensity": self.propensity,
            "served_by": served_by,
            "fallback_reason": execution.fallback_code if execution is not None else None,
            "fallback_error": execution.edge_error if execution is not None else None,
            "error": error,
            "steps": [{"name": s.name, "status": s.status, "ms": round(s.seconds * 1000, 3)} for s in steps],
            "accept": _verdict(self.verdicts[-1]) if self.verdicts else None,
            # The served answer: as `edge_response` / `cloud_response` from the endpoints named edge and
            # cloud (what readers of two-endpoint logs read), else as `response` (served_by names it).
            "edge_response": answer if served_by == EDGE else None,
            "cloud_response": answer if served_by == CLOUD else None,
            "response": answer if served_by not in (EDGE, CLOUD) else None,
            # An edge call that failed or timed out is an observed edge failure; everything
            # else is known only from later feedback (router.feedback, make label).
            "edge_quality": 0.0 if edge_step is not None and edge_step.status in ("error", "timeout") else None,
            "cloud_quality": None,
            # Every bundle's: the endpoint run first (with probability `propensity`); `outcomes`, as
            # edge_quality, holds the observed failures (0) only, the rest comes from feedback(outcomes=...).
            "endpoint": decision.endpoint,
            "endpoints": list(self.routing.endpoint_names),
            "cascade": list(decision.cascade),
            "tried": [t.as_record() for t in tried],
            "expected_cost": execution.expected_cost if execution is not None else None,
            "outcomes": {t.endpoint: 0.0 for t in tried if t.outcome in FAILED},
        }
        if request.conversation is not None:
            costs = decision.switch_costs
            record.update(
                conversation=request.conversation,  # the log writes its pseudonym
                turn=decision.turn,
                switched=decision.switched,
                switch_cost=costs.get(served_by) if costs is not None and served_by is not None else None,
            )
        return record


def _kept(text: str | None, limit: int = 100_000) -> str | None:
    return text[:limit] if isinstance(text, str) else None


def _verdict(verdict: object) -> dict[str, bool | float | None]:
    return {"accepted": bool(verdict), "probability": getattr(verdict, "probability", None)}
