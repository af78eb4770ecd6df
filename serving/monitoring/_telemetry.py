"""Traces and metrics through OpenTelemetry: optional, and free when nobody listens.

Needs only the API (the `telemetry` extra). One span per request, whichever layer opens it first (the
proxy, RoutedChat, Router.execute), the layers below joining it, and a child span per attempt. No prompt,
answer, key or exception message ever enters a span or a metric: an error is its class name (error.type).
docs/observability.md#traces-and-metrics lists every span, attribute and metric, and what each costs.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, Sequence
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider
    from opentelemetry.util.types import AttributeValue

    from serving.routing._decision import Decision

    Attributes = dict[str, AttributeValue]

SCOPE = "serving"  # the instrumentation scope of every span and metric
EXECUTE, CHAT = "router.execute", "chat"  # request span names (a proxy's: "chat <served model>")
ATTEMPTS = ("shadow", "endpoint")  # the calls that get a child span ("endpoint": a call of the cascade, by name)
# Latency histogram boundaries in seconds, shared with the proxy's Prometheus histograms.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
MAX_TEXT = 200  # a model name the caller asked for is cut to this
MAX_TOKEN_COUNT = 10**9  # a usage count at or over this is not exported (as serving.chat._endpoint's)
# What an answer's `model` may add to its endpoint's declared model and still be exported as
# gen_ai.response.model: a dated version ("gpt-4o" answered as "gpt-4o-2024-08-06" or "gpt-4-0613").
DATED_VERSION = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{4})")
RECHECK_S = 1.0  # how often the global providers are looked up (a provider set later is used within this)


class Executed(Protocol):
    """What a request's outcome tells telemetry (serving.execution._steps.Execution, which imports
    this module): who served it, and each call's name and status."""

    @property
    def served_by(self) -> str: ...

    @property
    def steps(self) -> Sequence[Any]: ...  # Any: serving.execution._steps.Step (.name, .status)


def available() -> bool:
    """Whether the OpenTelemetry API can be imported (the `telemetry` extra)."""
    try:
        import opentelemetry.metrics  # noqa: F401
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


class _Instruments:
    """The tracer and the metric instruments, made once per pair of providers (None: the global one)."""

    def __init__(self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None) -> None:
        from opentelemetry import context, metrics, trace

        self.trace, self.context, self.metrics = trace, context, metrics  # for the calls below (no import per call)
        self.tracer_provider, self.meter_provider = tracer_provider, meter_provider
        self._listening, self._recheck_at = (False, False), -math.inf
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.decisions = meter.create_counter("router.decisions", "{request}", "Routing decisions, by zone")
        self.served = meter.create_counter("router.served", "{request}", "Answers, by the endpoint that served them")
        self.fallbacks = meter.create_counter(
            "router.fallbacks", "{request}", "Edge-first requests the cloud answered, by reason"
        )
        self.errors = meter.create_counter("router.errors", "{request}", "Requests that failed, by error class")
        self.duration = meter.create_histogram(
            "router.request.duration",
            "s",
            "From the call to the complete answer (a stream: to its end), by the endpoint that served it",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
        )
        self.cost = meter.create_counter(
            "router.cost", "{price}", "Estimated price of the answers, in the endpoints' price unit, by served endpoint"
        )
        self.conversation_state_errors = meter.create_counter(
            "router.conversation.state_errors",
            "{request}",
            "Requests decided without their conversation's state because the store could not be reached",
        )

    def listening(self) -> tuple[bool, bool]:
        """(whether spans, whether metric points have anywhere to go): a provider given, or a global one
        set, looked up at most every RECHECK_S (no lookup per request; one set later is used soon)."""
        now = time.monotonic()
        if now >= self._recheck_at:
            self._listening = (self._tracing(), self._metering())
            self._recheck_at = (
                now + RECHECK_S if self.tracer_provider is None or self.meter_provider is None else math.inf
            )
        return self._listening

    def _tracing(self) -> bool:
        if self.tracer_provider is not None:
            return True
        provider = self.trace.get_tracer_provider()
        return not isinstance(provider, (self.trace.ProxyTracerProvider, self.trace.NoOpTracerProvider))

    def _metering(self) -> bool:
        if self.meter_provider is not None:
            return True
        provider = self.metrics.get_meter_provider()
        proxy = type(provider).__name__ == "_ProxyMeterProvider"  # the API's global stand-in, not exported
        return not (proxy or isinstance(provider, self.metrics.NoOpMeterProvider))


_instruments: _Instruments | None = None  # made on first use, or by use()
_unavailable = False  # opentelemetry is imported but its API cannot be (a broken or partial install)
_made: dict[tuple[TracerProvider | None, MeterProvider | None], _Instruments] = {}
_current: contextvars.ContextVar[Trace | None] = contextvars.ContextVar(
    "serving.monitoring._telemetry.request", default=None
)


def use(tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None) -> None:
    """Send serving's spans and metrics to these providers (None: the global provider, the default).
    ImportError without the `telemetry` extra."""
    global _instruments, _unavailable
    if not available():
        raise ImportError(
            "serving.monitoring._telemetry needs opentelemetry-api: pip install 'edge-cloud-router[telemetry]'"
        )
    key = (tracer_provider, meter_provider)
    if key not in _made:  # instruments are made once per pair of providers
        _made[key] = _Instruments(tracer_provider, meter_provider)
    _instruments, _unavailable = _made[key], False


def _active() -> _Instruments | None:
    """The instruments, or None when nothing can listen (checked per request: a provider set later is used)."""
    global _instruments, _unavailable
    if _instruments is None:
        if _unavailable or "opentelemetry" not in sys.modules:  # no provider without importing the API first
            return None
        try:
            _instruments = _Instruments(None, None)
        except ImportError:
            _unavailable = True
            return None
    return _instruments


def request(
    name: str = EXECUTE, *, model: str | None = None, server: bool = False, carrier: Mapping[str, str] | None = None
) -> Scope:
    """The span of one request, as a context manager yielding its Trace: a new one, or the one a
    layer above (RoutedChat, the proxy) opened in this context, which it joins. name: EXECUTE or
    CHAT (then gen_ai.operation.name is "chat"); model: the model the caller asked for
    (gen_ai.request.model; the span is "chat <model>"); server: a SERVER span (the proxy); carrier:
    the incoming request's headers, whose trace context (W3C traceparent, or the app's propagator)
    the span continues. The span ends with the block, unless `keep_open()` hands its end to a stream."""
    current = _current.get()
    if current is not None:
        return _Joined(current)
    instruments = _active()
    if instruments is None:
        return NOOP
    tracing, metering = instruments.listening()
    if not (tracing or metering):
        return NOOP
    return Trace(instruments, name, model, server, tracing, metering, carrier)


def current() -> Trace:
    """The request open in this context, or a no-op one."""
    return _current.get() or NOOP


def attempt(name: str, side: str | None = None, *, endpoint: str | None = None) -> Attempt | None:
    """A child span of the current request for one attempt: an endpoint's call of the cascade
    (`endpoint`: its name; the attempt "endpoint" with attribute router.endpoint), or a shadow run
    ("shadow"; `side`: the endpoint it calls); None when no span records it. End it with Attempt.ended."""
    request = _current.get()
    name = "endpoint" if endpoint is not None else name
    if request is None or not request.recording or name not in ATTEMPTS:
        return None
    return request.attempt(name, side, endpoint)


def conversation_state_unavailable() -> None:
    """Count a request decided without its conversation's state (the store could not be reached)."""
    instruments = _active()
    if instruments is not None and instruments.listening()[1]:
        instruments.conversation_state_errors.add(1)


def endpoint_attributes(model: str, base_url: str) -> Attributes:
    """The attempt span attributes of an OpenAI-compatible endpoint: model, host and port (never
    the path or anything else of the URL). Computed once per endpoint by its owner."""
    parts = urlsplit(base_url)
    attributes: Attributes = {"gen_ai.operation.name": CHAT, "gen_ai.request.model": model}
    if parts.hostname:
        attributes["server.address"] = parts.hostname
        attributes["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
    return attributes


class Scope:
    """What request() returns: enters to the Trace it stands for."""

    def __enter__(self) -> Trace:
        raise NotImplementedError

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        return None

    def keep_open(self) -> Callable[[], None]:
        """Do not end the request when the block ends: call the function returned, when the
        answer ends (a stream). A joined scope returns a no-op: the owner ends it."""
        return NOOP.end


class _Joined(Scope):
    """A request opened by a layer above: this one adds to it and records its failure, never ends it."""

    def __init__(self, request: Trace) -> None:
        self.request = request

    def __enter__(self) -> Trace:
        return self.request

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        if error is not None:
            self.request.failed(error)


class Trace(Scope):
    """One request's span and what its metrics will say; everything is written once, at end()."""

    def __init__(
        self,
        instruments: _Instruments | None,
        name: str,
        model: str | None,
        server: bool,
        tracing: bool,
        metering: bool,
        carrier: Mapping[str, str] | None = None,
    ) -> None:
        self.metering = metering
        self.recording = False
        self.span: Span | None = None
        self._instruments = instruments
        self._started = time.perf_counter()
        self._decision: Decision | None = None
        self._execution: Executed | None = None
        self._fallback_of: Callable[[Any], str | None] | None = None
        self._served_by: str | None = None
        self._fallback_kind: str | None = None
        self._cost: float | None = None
        self._response: tuple[str | None, Any] = (None, None)  # (model, usage) of the latest answer
        self._error: str | None = None
        self._extra: Attributes = {}
        self._endpoints: Mapping[str, Attributes] = {}
        self._parent: Context | None = None
        self._token: Token[Trace | None] | None = None
        self._kept = self._ended = False
        if instruments is not None and tracing:
            kind = instruments.trace.SpanKind
            span_name = f"{CHAT} {model}" if model else name
            parent = None
            if carrier is not None:
                from opentelemetry import propagate

                parent = propagate.extract(carrier)
            self.span = instruments.tracer.start_span(
                span_name, context=parent, kind=kind.SERVER if server else kind.INTERNAL
            )
            self.recording = self.span.is_recording()
            if self.recording:
                if name == CHAT:
                    self._extra["gen_ai.operation.name"] = CHAT
                if model:
                    self._extra["gen_ai.request.model"] = model[:MAX_TEXT]

    def __enter__(self) -> Trace:
        self._token = _current.set(self)
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        if error is not None:
            self.failed(error)
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        if not self._kept:
            self.end()

    def keep_open(self) -> Callable[[], None]:
        self._kept = True
        return self.end

    # What the layers report.
    def decided(self, decision: Decision) -> None:
        """The decision carried out (after policy and exploration)."""
        self._decision = decision

    def executed(self, execution: Executed, fallback_kind: Callable[[Any], str | None]) -> None:
        """Who served, and why the cloud did if it did (`fallback_kind(execution)`: the reason's
        short name, asked for only when a span or a metric needs it)."""
        self._execution, self._served_by, self._fallback_of = execution, execution.served_by, fallback_kind

    def answered(self, *, fallback_kind: str | None, cost: float | None, usage: Any = None) -> None:
        """What the chat client knows beyond the Execution: the reason's short name, the estimated
        cost of every answer, and a stream's usage (known at its end)."""
        self._fallback_kind, self._cost = fallback_kind, cost
        if usage is not None:
            self._response = (self._response[0], usage)

    def endpoints(self, attributes: Mapping[str, Attributes]) -> None:
        """Each endpoint's attempt attributes (endpoint_attributes), by attempt side ("edge", "cloud") or endpoint name."""
        self._endpoints = attributes

    def failed(self, error: BaseException) -> None:
        """The request failed with `error`: its class name, the first one reported (the innermost)."""
        if self._error is None:
            self._error = type(error).__qualname__

    def refused(self, status: int, reason: str) -> None:
        """The proxy answered with an error status (reason: the proxy's low-cardinality name)."""
        self._extra["http.response.status_code"] = status
        if self._error is None:
            self._error = reason

    def attempt(self, name: str, side: str | None = None, endpoint_name: str | None = None) -> Attempt:
        assert self._instruments is not None and self.span is not None  # a recording request has both
        attributes: Attributes = dict(self._endpoints.get(endpoint_name or side or name) or {})
        model = attributes.get("gen_ai.request.model")
        attributes["router.attempt"] = name
        if side is not None:
            attributes["router.side"] = side
        if endpoint_name is not None:
            attributes["router.endpoint"] = endpoint_name
        if self._parent is None:  # the context of the request's span, the attempts' parent: made once
            self._parent = self._instruments.trace.set_span_in_context(self.span)
        span = self._instruments.tracer.start_span(
            f"{CHAT} {model}" if model else f"router.{name}",
            context=self._parent,
            kind=self._instruments.trace.SpanKind.CLIENT,
            attributes=attributes,
        )
        declared = model if isinstance(model, str) else None
        return Attempt(self, span, self._instruments, attach=name != "shadow", declared=declared)

    def end(self) -> None:
        """Write the span's attributes and the metric points, and end the span (once)."""
        if self._ended:
            return
        self._ended = True
        instruments, decision, served_by = self._instruments, self._decision, self._served_by
        assert instruments is not None  # only NOOP has none, and it is ended from the start
        fallback = self._fallback_kind
        if fallback is None and self._fallback_of is not None and self._execution is not None:
            fallback = self._fallback_of(self._execution)
        if self.metering:
            self._count(instruments, decision, served_by, fallback)
        if self.span is None:
            return
        if self.recording:
            self.span.set_attributes(self._attributes(decision, served_by, fallback))
            if self._error is not None:  # no description: a message may quote the prompt
                self.span.set_status(instruments.trace.StatusCode.ERROR)
        self.span.end()

    def _count(
        self, instruments: _Instruments, decision: Decision | None, served_by: str | None, fallback: str | None
    ) -> None:
        if decision is not None:
            instruments.decisions.add(1, {"router.zone": decision.zone})
        if self._error is not None:
            instruments.errors.add(1, {"error.type": self._error})
        elif served_by is not None:
            by = {"router.served_by": served_by}
            instruments.served.add(1, by)
            instruments.duration.record(time.perf_counter() - self._started, by)
            if self._cost is not None:
                instruments.cost.add(self._cost, by)
        if fallback is not None:
            instruments.fallbacks.add(1, {"router.fallback_reason": fallback})

    def _attributes(self, decision: Decision | None, served_by: str | None, fallback: str | None) -> Attributes:
        attributes = self._extra
        if decision is not None:
            attributes["router.zone"] = decision.zone
            attributes["router.score"] = decision.score
            attributes["router.unfamiliar"] = decision.unfamiliar
            attributes["router.degraded"] = decision.degraded
            attributes["router.model_version"] = decision.model_version
            for key, value in (
                ("router.p_edge", decision.p_edge),
                ("router.p_cloud", decision.p_cloud),
                ("router.rule", decision.rule),
                ("router.precision", decision.precision),
                ("router.conversation.turn", decision.turn),
                ("router.conversation.switched", decision.switched),
            ):
                if value is not None:
                    attributes[key] = value
        if served_by is not None:
            attributes["router.served_by"] = served_by
        if fallback is not None:
            attributes["router.fallback_reason"] = fallback
        if self._execution is not None:
            accept = next((s.status for s in self._execution.steps if s.name == "accept"), None)
            if accept is not None:
                attributes["router.accept"] = "accepted" if accept == "ok" else accept
        if self._cost is not None:
            attributes["router.cost"] = self._cost
        if served_by is not None:
            _add_response(attributes, *self._response)
        if self._error is not None:
            attributes["error.type"] = self._error
        return attributes


class Attempt:
    """One attempt's child span: an endpoint's call, current in this context while it runs, or a shadow run's."""

    __slots__ = ("request", "span", "_token", "_api", "_declared")

    def __init__(self, request: Trace, span: Span, api: _Instruments, *, attach: bool, declared: str | None) -> None:
        self.request, self.span, self._token, self._api = request, span, None, api
        self._declared = declared  # the endpoint's model as its record declares it (None: unknown)
        if attach:
            self._token = api.context.attach(api.trace.set_span_in_context(span))

    def ended(self, status: str, result: Any = None, error: BaseException | None = None) -> None:
        """The call ended: its Step status, what it returned, or the error it raised."""
        served_here = self._token is not None  # a shadow run's answer is not the request's
        if self._token is not None:
            self._api.context.detach(self._token)
            self._token = None
        attributes: Attributes = {"router.attempt.status": status}
        model, usage = _answer_facts(result, self._declared)
        if model is not None or usage is not None:
            _add_response(attributes, model, usage)
            if error is None and status == "ok" and served_here:
                self.request._response = (model, usage)  # the latest answer: the served one, once all are in
        if error is not None:
            attributes["error.type"] = type(error).__qualname__
            self.span.set_status(self._api.trace.StatusCode.ERROR)
        self.span.set_attributes(attributes)
        self.span.end()


def _answer_facts(result: Any, declared: str | None) -> tuple[str | None, Any]:
    """(model, usage) of an OpenAI-style answer's `body`, or of a stream's first chunks (`head`, as
    serving.chat._upstream keeps them), else (None, None); the model only when response_model allows it."""
    body = getattr(result, "body", None)
    if not isinstance(body, Mapping):
        head = getattr(result, "head", None)
        body = head[-1][1] if isinstance(head, list) and head and isinstance(head[-1], tuple) else None
        if not isinstance(body, Mapping):
            return None, None
    return response_model(body.get("model"), declared), body.get("usage")


def response_model(sent: object, declared: str | None) -> str | None:
    """What gen_ai.response.model may say of an answer whose `model` is `sent`: `sent` when it is the
    endpoint's `declared` model, or that with a dated version (DATED_VERSION); else None, not exported. An
    upstream writes what it likes there (an echo of the prompt would reach spans); a record is the app's own."""
    if not isinstance(sent, str) or not declared or len(sent) > MAX_TEXT:
        return None
    if sent == declared or (sent.startswith(declared) and DATED_VERSION.fullmatch(sent, len(declared))):
        return sent
    return None


def _add_response(attributes: Attributes, model: str | None, usage: Any) -> None:
    """gen_ai.response.model and the token counts of an answer's usage, when it has them."""
    if model is not None:
        attributes["gen_ai.response.model"] = model
    if isinstance(usage, Mapping):
        for key, name in (
            ("prompt_tokens", "gen_ai.usage.input_tokens"),
            ("completion_tokens", "gen_ai.usage.output_tokens"),
        ):
            count = usage.get(key)
            if isinstance(count, int) and not isinstance(count, bool) and 0 <= count < MAX_TOKEN_COUNT:
                attributes[name] = count


class _NoTrace(Trace):
    """What a request is while nothing listens (request() returns it, current() too): every report
    is dropped, nothing is kept, and it never ends (it is shared)."""

    def __init__(self) -> None:
        super().__init__(None, EXECUTE, None, False, False, False)
        self._ended = True

    def __enter__(self) -> Trace:
        return self

    def _drop(self, *args: Any, **kwargs: Any) -> None:
        return None

    __exit__ = decided = executed = answered = endpoints = failed = refused = _drop
    keep_open = Scope.keep_open  # NOOP.end, keeping nothing


@contextlib.contextmanager
def within(request: Trace) -> Iterator[None]:
    """Make `request` the current one in this context (a coroutine run on another thread's event
    loop, such as the sync chat client's), so that the layers it calls join it."""
    token = None if request is NOOP else _current.set(request)
    try:
        yield
    finally:
        if token is not None:
            _current.reset(token)


NOOP: Trace = _NoTrace()  # what current() returns with no request open
