"""The proxy's ASGI app (starlette): OpenAI's chat-completions API in front of a RoutedChat.

    POST /v1/chat/completions   routed; JSON or a stream (SSE), the served model's answer as sent
    GET  /v1/models             the one routed model name (default "router")
    GET  /health                liveness and the bundle's state (open without a token)
    GET  /metrics               Prometheus text (serving.proxy._metrics)
    GET  /dashboard             the recent requests' traffic dashboard, HTML (serving.proxy._dashboard)

The x-router-* headers each answer carries, the error statuses and codes, policy metadata,
conversations and capabilities: docs/clients.md#the-proxy. A body is read whole within
body_timeout_s before its request takes one of max_concurrency slots, so a slow sender holds only
its own connection, and at most `body_reads` bodies are read at once. Error messages and the
routing comment name endpoints and models, never a URL, and hold no key or token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import serving.monitoring._telemetry as telemetry
from serving._router_error import RouterError
from serving.chat._client import RoutedChat
from serving.chat._errors import StreamInterrupted, UpstreamHTTPError, failure_kind, redact, redacted_json
from serving.chat._request import check_json_numbers
from serving.chat._routing_info import Completion, RoutingInfo
from serving.conversations._store import MAX_ID_CHARS, check_conversation_id
from serving.endpoints._capabilities import RULE_PREFIX
from serving.execution._execute import CloudCallError, tried_text
from serving.policy._errors import FallbackForbidden, NoFeasibleEndpoint
from serving.proxy._config import ProxyConfig
from serving.proxy._dashboard import RecentRequests, page_of
from serving.proxy._metrics import ProxyMetrics
from serving.proxy._security import BearerAuth, error_body
from serving.routing._validation import check_metadata

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence

    from starlette.types import Receive, Scope, Send

    from serving._json_types import JSONObject
    from serving.chat._streams import AsyncChatStream
    from serving.execution._execute import Step

log = logging.getLogger("serving.proxy")

PASSED_ON_STATUSES = (400, 404, 413, 422, 429)  # the cloud refusing the request itself: the client's to fix
CONVERSATION_HEADER = "x-router-conversation"
CONVERSATION_FIELDS = ("prompt_cache_key", "user")  # OpenAI's body fields a conversation falls back to, in order


class RequestError(RouterError):
    """A request the proxy answers with an error: HTTP status, OpenAI error type and code, metrics reason."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        *,
        code: str | None = None,
        reason: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.reason, self.headers = status, kind, code, reason, headers or {}
        # the zone and the calls of a routed request whose cloud call failed
        self.zone: str | None = None
        self.steps: Sequence[Step] = ()

    def response(self) -> Response:
        return Response(
            error_body(str(self), self.kind, self.code), self.status, self.headers, media_type="application/json"
        )


class _Handlers:
    def __init__(self, chat: RoutedChat, config: ProxyConfig, metrics: ProxyMetrics) -> None:
        self.chat, self.config, self.metrics, self.recent = chat, config, metrics, RecentRequests()
        self.slots = asyncio.Semaphore(config.max_concurrency)
        self.body_reads = asyncio.Semaphore(config.body_reads)
        self.created = int(time.time())

    async def chat_completions(self, request: Request) -> Response:
        started = time.perf_counter()
        request.state.conversation = None
        try:
            body = await self._read_body(request)  # before a slot: a slow sender holds only its own connection
            await self._wait_for_turn(
                self.slots, f"the router is serving {self.config.max_concurrency} requests", reason="overloaded"
            )
        except RequestError as error:
            self.metrics.failed(error.reason)
            return error.response()
        self.metrics.in_flight.inc()
        try:
            result, end_trace = await self._traced(body, request)
        except RequestError as error:
            self._release()
            self.metrics.failed(error.reason, zone=error.zone, steps=error.steps)
            return error.response()
        except BaseException:
            self._release()
            raise
        routing = result.routing

        async def release() -> None:  # what the answer holds: its slot, its span, its upstream stream
            async with contextlib.AsyncExitStack() as held:  # each step runs, whatever the one before raised
                held.callback(self._release)
                held.callback(end_trace)
                if not isinstance(result, Completion):
                    await result.aclose()

        try:
            if routing.fallback_kind is not None:
                fallback_reason = redact(routing.fallback_reason or "", self.config.secrets)
                log.info("edge-first request served by the cloud (%s): %s", routing.fallback_kind, fallback_reason)
            self.metrics.routed(routing)
            self.recent.add(routing, conversation=request.state.conversation)
            headers = routing_headers(routing)
            if not isinstance(result, Completion):
                self.metrics.first_chunk.labels(routing.served_by).observe(time.perf_counter() - started)
        except BaseException:  # the answer will not be sent (the app answers 500): free what it holds
            await release()
            raise
        if isinstance(result, Completion):  # not streamed
            await release()
            self.metrics.duration.labels(routing.served_by, "false").observe(time.perf_counter() - started)
            return _json_response(result.body, headers)

        async def finish() -> None:  # once, however the response ends: sent, client gone, or never started
            await release()
            self.metrics.duration.labels(routing.served_by, "true").observe(time.perf_counter() - started)

        return _Relay(
            self._relay(result), finish, headers={**headers, "cache-control": "no-cache", "x-accel-buffering": "no"}
        )

    async def _traced(
        self, body: JSONObject, request: Request
    ) -> tuple[Completion | AsyncChatStream, Callable[[], None]]:
        """_answer() within the request's span (serving.monitoring._telemetry), and what ends the span of a
        stream when the stream ends (a no-op for a Completion, whose span has ended)."""
        scope = telemetry.request(telemetry.CHAT, model=self.config.served_model, server=True, carrier=request.headers)
        with scope as trace:
            try:
                result = await self._answer(body, request)
            except RequestError as error:
                trace.refused(error.status, error.reason)
                raise
            return result, (telemetry.NOOP.end if isinstance(result, Completion) else scope.keep_open())

    async def _answer(self, body: JSONObject, request: Request) -> Completion | AsyncChatStream:
        """The Completion, or the AsyncChatStream when the request streams; RequestError for anything to refuse."""
        messages, stream, precision, metadata, params = self._parse(body, request)
        conversation = request.state.conversation = conversation_of(request, params)
        try:
            return await self.chat.acreate(
                messages, precision=precision, stream=stream, metadata=metadata, conversation=conversation, **params
            )
        except ValueError as exc:  # the messages or the precision
            raise _bad_request(str(exc)) from None
        except (CloudCallError, FallbackForbidden) as exc:
            raise self._upstream_failed(exc) from None
        except NoFeasibleEndpoint as exc:
            log.warning("request refused by policy: %s", exc)
            capability = bool(exc.rules) and exc.rules[0].startswith(RULE_PREFIX)  # needs:images
            raise RequestError(
                400 if capability else 403,
                str(exc),
                "invalid_request_error",
                code="no_capable_endpoint" if capability else "no_feasible_endpoint",
                reason="capability_no_endpoint" if capability else "policy_no_endpoint",
                headers={"x-router-rule": _header_text(exc.rules[0])} if exc.rules else {},
            ) from None

    def _release(self) -> None:
        self.slots.release()
        self.metrics.in_flight.dec()

    async def models(self, request: Request) -> Response:
        model = self.config.served_model
        entry = {"id": model, "object": "model", "created": self.created, "owned_by": "edge-cloud-router"}
        return JSONResponse({"object": "list", "data": [entry]})

    async def health(self, request: Request) -> Response:
        router = self.chat.router
        return JSONResponse({"status": "ok", "degraded": router.degraded, "model_version": router.model_version})

    async def metrics_page(self, request: Request) -> Response:
        content, content_type = self.metrics.exposition(request.headers.get("accept", ""))
        return Response(content, media_type=content_type)

    async def dashboard(self, request: Request) -> Response:
        page = await run_in_threadpool(page_of, self.recent, self.chat.router)  # drawn in a worker thread
        return HTMLResponse(page, headers={"cache-control": "no-store"})

    async def _wait_for_turn(self, turns: asyncio.Semaphore, busy: str, *, reason: str) -> None:
        """Take one of `turns` within queue_timeout_s; else 503 with Retry-After, saying `busy`."""
        timeout = self.config.queue_timeout_s
        try:
            if timeout <= 0 and turns.locked():
                raise asyncio.TimeoutError
            await asyncio.wait_for(turns.acquire(), timeout if timeout > 0 else None)
        except asyncio.TimeoutError:
            raise RequestError(
                503,
                f"{busy}; retry shortly",
                "server_overloaded",
                code="overloaded",
                reason=reason,
                headers={"retry-after": "1"},
            ) from None

    async def _read_body(self, request: Request) -> JSONObject:
        """The request's JSON object (module doc): 408 past body_timeout_s, closing the connection (the
        rest of the body is not waited for); a turn among `body_reads` is waited for like a slot."""
        await self._wait_for_turn(
            self.body_reads, f"the router is reading {self.config.body_reads} request bodies", reason="too_many_bodies"
        )
        limit = self.config.body_timeout_s
        try:
            return await asyncio.wait_for(self._read_json(request), limit)
        except asyncio.TimeoutError:
            raise RequestError(
                408,
                f"the request body did not arrive whole within {limit:g} s",
                "invalid_request_error",
                code="request_timeout",
                reason="body_timeout",
                headers={"connection": "close"},
            ) from None
        finally:
            self.body_reads.release()

    async def _read_json(self, request: Request) -> JSONObject:
        limit = self.config.max_body_bytes
        too_large = RequestError(
            413,
            f"request body over {limit:,} bytes",
            "invalid_request_error",
            code="request_too_large",
            reason="too_large",
        )
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > limit:
                raise too_large
        try:
            body = json.loads(raw)
            check_json_numbers(body)  # json reads NaN, Infinity and 1e999; none is JSON, nor forwardable as such
        except RecursionError:
            raise _bad_request("the request body is not valid JSON: nested too deeply") from None
        except ValueError as exc:  # JSONDecodeError (with its line and column), bad UTF-8, NaN / Infinity
            raise _bad_request(f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _bad_request("the request body must be a JSON object")
        return body

    def _parse(self, body: JSONObject, request: Request) -> tuple[Any, bool, Any, Any, JSONObject]:
        """(messages, stream, precision, metadata, the other parameters) of a chat-completions request.
        The messages and the precision are as the client sent them (Any: the chat client checks them)."""
        model = body.pop("model", None)
        if model is not None and model != self.config.served_model:
            raise RequestError(
                404,
                f"the model {str(model)[:100]!r} does not exist here: this proxy serves {self.config.served_model!r}",
                "invalid_request_error",
                code="model_not_found",
                reason="model_not_found",
            )
        stream = body.pop("stream", False)
        if not isinstance(stream, bool):
            raise _bad_request("stream must be true or false")
        precision = body.pop("precision", None) or request.headers.get("x-router-precision") or None
        metadata = body.pop("metadata", None)  # the policy's input: never forwarded upstream
        try:
            check_metadata(metadata)
        except TypeError as exc:
            raise _bad_request(str(exc)) from None
        if "messages" not in body:
            raise _bad_request("messages is required")
        return body.pop("messages"), stream, precision, metadata, body

    def _upstream_failed(self, exc: CloudCallError | FallbackForbidden) -> RequestError:
        """The error answer when the cloud failed too, or the allowed endpoint failed and the policy forbids
        the fallback (statuses: docs/clients.md#the-proxy), with the routed request's zone and calls (for
        /metrics) and, with N endpoints, x-router-tried (every endpoint tried, and why each was left)."""
        message = redact(str(exc), self.config.secrets)
        if isinstance(exc, FallbackForbidden):
            log.warning("request failed, fallback forbidden by policy: %s", message)
            error = RequestError(
                504 if isinstance(exc.edge_error, TimeoutError) else 502,
                message,
                "upstream_error",
                code="fallback_forbidden",
                reason="policy_fallback_forbidden",
                headers={"x-router-rule": _header_text(exc.rule)},
            )
        else:
            log.warning("request failed: %s", message)
            cause = exc.__cause__
            reason = f"cloud_{failure_kind(cause)}"
            if isinstance(cause, UpstreamHTTPError) and cause.status in PASSED_ON_STATUSES:
                kind = "rate_limit_error" if cause.status == 429 else "invalid_request_error"
                error = RequestError(cause.status, message, kind, code="upstream_refused", reason=reason)
            elif isinstance(cause, TimeoutError):
                error = RequestError(504, message, "upstream_error", code="upstream_timeout", reason=reason)
            else:
                error = RequestError(502, message, "upstream_error", code="upstream_failed", reason=reason)
        error.zone, error.steps = exc.decision.zone if exc.decision else None, exc.steps
        tried = getattr(exc, "tried", None)
        if tried:
            error.headers["x-router-tried"] = _header_text(tried_text(tried), limit=1000)
        return error

    async def _relay(self, stream: AsyncChatStream) -> AsyncIterator[bytes]:
        """The SSE body of a streamed answer: its chunks as sent, the routing comment, [DONE]; when the
        stream broke or anything failed here, an error event and [DONE] (a client never sees it cut)."""
        try:
            async for data in stream.raw():
                yield f"data: {data}\n\n".encode()
            routing = redacted_json(stream.routing.to_dict(), self.config.secrets)  # no key, whatever an upstream sent
            yield f": routing {routing}\n\ndata: [DONE]\n\n".encode()
        except StreamInterrupted as exc:
            self.metrics.failed("stream_interrupted")
            message = redact(str(exc), self.config.secrets)
            log.warning("stream broke: %s", message)
            yield b"data: " + error_body(message, "upstream_error", "stream_interrupted") + b"\n\ndata: [DONE]\n\n"
        except Exception as exc:  # a fault of the router's own: the client still gets an end it can read
            self.metrics.failed("stream_error")
            log.error("stream failed: %s", redact(repr(exc), self.config.secrets))
            message = "internal error in the router proxy while streaming"
            yield b"data: " + error_body(message, "server_error", "stream_error") + b"\n\ndata: [DONE]\n\n"


def conversation_of(request: Request, params: JSONObject) -> str | None:
    """The conversation a request belongs to: its x-router-conversation header (400 when that is no id),
    else the body's prompt_cache_key, else its user (a long or unprintable one as its SHA-256); or None."""
    named = request.headers.get(CONVERSATION_HEADER)
    if named is not None:
        try:
            return check_conversation_id(named, CONVERSATION_HEADER)
        except ValueError as exc:
            raise _bad_request(str(exc)) from None
    for field in CONVERSATION_FIELDS:
        value = params.get(field)
        if isinstance(value, str) and value:
            if len(value) <= MAX_ID_CHARS and value.isprintable():
                return value
            return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return None


def _bad_request(message: str) -> RequestError:
    return RequestError(400, message, "invalid_request_error", reason="bad_request")


def _json_response(body: JSONObject, headers: dict[str, str]) -> Response:
    """The upstream's answer as JSON; ASCII-escaped when it holds a lone surrogate (UTF-8 cannot carry one)."""
    try:
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        content = json.dumps(body, separators=(",", ":")).encode("ascii")
    return Response(content, headers=headers, media_type="application/json")


def routing_headers(routing: RoutingInfo) -> dict[str, str]:
    """How the answer was served, as response headers (docs/clients.md#the-proxy)."""
    headers = {
        "x-router-served-by": routing.served_by,
        "x-router-zone": routing.decision.zone,
        "x-router-model": _header_text(routing.model),
        "x-router-model-version": _header_text(routing.decision.model_version),
    }
    if routing.fallback_kind is not None:
        headers["x-router-fallback"] = routing.fallback_kind
    if routing.decision.rule is not None:
        headers["x-router-rule"] = _header_text(routing.decision.rule)
    if routing.tried:  # N endpoints: e.g. phone-3b=context,onprem-8b=served
        headers["x-router-tried"] = _header_text(tried_text(routing.tried), limit=1000)
        if routing.expected_cost is not None:
            headers["x-router-expected-cost"] = f"{routing.expected_cost:.6g}"
    if routing.turn is not None:
        headers["x-router-turn"] = str(routing.turn)
        headers["x-router-switched"] = "true" if routing.switched else "false"
    if routing.switch is not None:  # e.g. conversation turn 3 stays on edge
        headers["x-router-switch"] = _header_text(routing.switch)
    return headers


def _header_text(value: str, limit: int = 200) -> str:
    """Printable ASCII only, at most `limit` characters: safe as a header value."""
    return "".join(c if " " <= c <= "~" else "?" for c in value[:limit])


class _Relay(StreamingResponse):
    """A streamed answer that always runs `finish` (close the upstream stream, free the slot) when
    the response ends, also when the client left before the first byte and the body never started."""

    def __init__(
        self, body: AsyncIterator[bytes], finish: Callable[[], Awaitable[None]], *, headers: dict[str, str]
    ) -> None:
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self._finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._finish()


def build_app(chat: RoutedChat, config: ProxyConfig, *, on_shutdown: Iterable[Callable[[], None]] = ()) -> Starlette:
    """The ASGI app. `on_shutdown`: callables run when the server stops (the chat client's
    connections are closed then too)."""
    metrics = ProxyMetrics(chat.router)
    handlers = _Handlers(chat, config, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        for stop in on_shutdown:
            stop()
        await chat.aclose()

    async def http_error(request: Request, exc: HTTPException) -> Response:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return Response(  # its headers too: a 405's Allow
            error_body(str(exc.detail), kind), exc.status_code, headers=exc.headers, media_type="application/json"
        )

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("internal error: %s", redact(repr(exc), config.secrets))
        return Response(
            error_body("internal error in the router proxy", "server_error"), 500, media_type="application/json"
        )

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", handlers.chat_completions, methods=["POST"]),
            Route("/v1/models", handlers.models, methods=["GET"]),
            Route("/health", handlers.health, methods=["GET"]),
            Route("/metrics", handlers.metrics_page, methods=["GET"]),
            Route("/dashboard", handlers.dashboard, methods=["GET"]),
        ],
        middleware=[Middleware(BearerAuth, token=config.token, on_reject=lambda reason: metrics.failed(reason))],
        # starlette types every handler as taking an Exception; it calls http_error with HTTPExceptions only
        exception_handlers={HTTPException: http_error, Exception: server_error},  # type: ignore[dict-item]
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    return app
