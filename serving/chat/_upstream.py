"""HTTP to one OpenAI-compatible endpoint, with httpx2 (the `client` extra): the chat completion
of a ChatRequest (serving.chat._request), non-streamed (acomplete) or as a stream opened up to
its first chunk (open_stream): the calls Router.execute / aexecute makes.

Every way a call can fail becomes one of serving.chat._errors' exceptions, which the fallback rules
treat alike. Reads are bounded (`Endpoint.max_response_bytes`; 16 KiB of an error body) and so is
time: an answer, streamed or not, must be complete within `timeout_s` of the call, and a stream's
first token within `first_token_timeout_s`. httpx2's own timeouts bound each read, which a server
sending a byte now and then never trips; these are deadlines of the whole, enforced by cancelling
the call (asyncio.wait_for), which closes its connection. What an endpoint sends back is redacted
of every key the client holds (every endpoint's), as decoded, before anything keeps it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, AsyncGenerator, Sequence

try:
    import httpx2
except ImportError as exc:  # pragma: no cover - the client extra is installed in tests
    raise ImportError("the routed chat client needs httpx2: pip install 'edge-cloud-router[client]'") from exc

from serving.chat._errors import (
    SlowFirstToken,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamMalformed,
    UpstreamTimeout,
    UpstreamUnreachable,
    redact,
    redact_value,
)
from serving.chat._responses import check_chunk, completion_text, error_detail, parse_json_object, starts_answer

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    from serving._json_types import JSONObject
    from serving.chat._request import ChatRequest
    from serving.endpoints._record import Endpoint

    # A stream's events after the first chunk: (the data as sent, the chunk), each within the deadline.
    Events: TypeAlias = AsyncGenerator[tuple[str, JSONObject], None]

MAX_ERROR_BODY_BYTES = 16 << 10
LIMITS = httpx2.Limits(max_connections=256, max_keepalive_connections=64)


class Answer(str):
    """A non-streamed answer as the fallback rules see it: the assistant text, which an accept check
    reads; `body` is the whole chat completion and `endpoint` the name of the endpoint that gave it."""

    body: JSONObject
    endpoint: str

    def __new__(cls, text: str, body: JSONObject, endpoint: str) -> "Answer":
        answer = super().__new__(cls, text)
        answer.body, answer.endpoint = body, endpoint
        return answer


@dataclass
class OpenStream:
    """A stream read up to its first chunk: `head`, the (raw data, chunk) pairs read, the last of
    them the first to carry the answer; `events`, the rest (Events)."""

    endpoint: str
    response: httpx2.Response
    events: Events
    head: list[tuple[str, JSONObject]]


class Upstream:
    """One endpoint's HTTP side: one pooled async client per event loop. secrets: the client's other
    keys, redacted with this endpoint's own from all it sends back (module doc)."""

    def __init__(self, name: str, endpoint: Endpoint, *, secrets: Sequence[str | None] = ()) -> None:
        endpoint.check_callable(f"calling {name}")
        assert endpoint.model is not None  # checked just above
        self.name, self.endpoint, self.model = name, endpoint, endpoint.model
        self.secrets = tuple(s for s in (endpoint.api_key, *secrets) if s)
        self._timeout = httpx2.Timeout(endpoint.timeout_s, connect=endpoint.connect_timeout_s)
        self._headers = {**endpoint.request_headers(), "Content-Type": "application/json"}
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx2.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )  # event loop -> its AsyncClient
        self._lock = threading.Lock()

    def _body(self, request: ChatRequest, stream: bool) -> bytes:
        body = self.endpoint.request_body(request.params, request.messages)
        if stream:
            body["stream"] = True
        try:
            return json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the caller's JSON): sent escaped instead
            return json.dumps(body).encode("ascii")

    def _async_client(self) -> httpx2.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._lock:  # event loops in several threads may share this endpoint
            client = self._aclients.get(loop)
            if client is None:
                client = self._aclients[loop] = httpx2.AsyncClient(
                    timeout=self._timeout, limits=LIMITS, follow_redirects=False
                )
            return client

    async def aclose(self) -> None:
        """Close the current event loop's async client."""
        with self._lock:
            client = self._aclients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def acomplete(self, request: ChatRequest) -> Answer:
        """The endpoint's chat completion of `request`, complete within `timeout_s`; an UpstreamError for anything else."""
        client = self._async_client()  # outside the deadline: the first one of a loop takes a while to make
        try:
            return await asyncio.wait_for(self._acomplete(client, request), self.endpoint.timeout_s)
        except asyncio.TimeoutError:
            raise self._too_slow() from None

    async def _acomplete(self, client: httpx2.AsyncClient, request: ChatRequest) -> Answer:
        try:
            async with client.stream(
                "POST", self.endpoint.url, content=self._body(request, False), headers=self._headers
            ) as response:
                raw = await self._read(response)
        except httpx2.HTTPError as exc:
            raise self._transport_error(exc) from None
        if response.status_code >= 400:
            raise self._http_error(response.status_code, raw)
        body = redact_value(parse_json_object(self.name, raw, f"the answer of {self.endpoint.model}"), self.secrets)
        return Answer(completion_text(self.name, body), body, self.name)

    async def _read(self, response: httpx2.Response) -> bytes:
        """The body of `response`, within the module doc's bounds: an answer over them is UpstreamMalformed
        (Content-Length checked first), an error body is cut there and reading stops."""
        is_error = response.status_code >= 400
        limit = MAX_ERROR_BODY_BYTES if is_error else self.endpoint.max_response_bytes
        declared = response.headers.get("content-length", "")
        if not is_error and declared.isdigit() and int(declared) > limit:
            raise self._too_large(limit, int(declared))
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > limit:
                if is_error:
                    break
                raise self._too_large(limit, len(body))
        return bytes(body[:limit])

    def _too_large(self, limit: int, size: int) -> UpstreamMalformed:
        return UpstreamMalformed(
            self.name, f"the answer of {self.endpoint.model} is over {limit:,} bytes ({size:,} so far)"
        )

    def _http_error(self, status: int, raw: bytes) -> UpstreamHTTPError:
        detail = error_detail(raw, self.secrets)
        return UpstreamHTTPError(
            self.name,
            f"{self.endpoint.model} answered HTTP {status}" + (f": {detail}" if detail else ""),
            status=status,
            detail=detail,
        )

    def _too_slow(self, detail: str = "") -> UpstreamTimeout:
        return UpstreamTimeout(
            self.name, f"no complete answer from {self.endpoint.model} within {self.endpoint.timeout_s:g} s{detail}"
        )

    def _transport_error(self, exc: Exception) -> UpstreamError:
        text = redact(f"{type(exc).__name__}: {exc}", self.secrets)[:300]
        model = self.endpoint.model
        if isinstance(exc, httpx2.TimeoutException):
            return self._too_slow(f" ({text})")
        if isinstance(exc, (httpx2.DecodingError, httpx2.SSEError)):
            return UpstreamMalformed(self.name, f"unreadable answer from {model} ({text})")
        return UpstreamUnreachable(self.name, f"connection to {model} failed ({text})")

    async def open_stream(self, request: ChatRequest) -> OpenStream:
        """The endpoint's stream of `request`, read up to the first chunk that carries the answer, which must
        arrive within `first_token_timeout_s` (else SlowFirstToken); closed again on any failure.
        The rest must arrive within `timeout_s` of this call (else UpstreamTimeout from `events`)."""
        client = self._async_client()  # outside the deadlines, as for acomplete
        deadline = asyncio.get_running_loop().time() + self.endpoint.timeout_s
        limit = min(self.endpoint.first_chunk_timeout_s, self.endpoint.timeout_s)
        try:
            return await asyncio.wait_for(self._open_stream(client, request, deadline), limit)
        except asyncio.TimeoutError:
            raise SlowFirstToken(self.name, f"no first token from {self.endpoint.model} within {limit:g} s") from None

    async def _open_stream(self, client: httpx2.AsyncClient, request: ChatRequest, deadline: float) -> OpenStream:
        sent = client.build_request("POST", self.endpoint.url, content=self._body(request, True), headers=self._headers)
        try:
            response = await client.send(sent, stream=True)
        except httpx2.HTTPError as exc:
            raise self._transport_error(exc) from None
        events: Events | None = None
        try:
            if response.status_code >= 400:
                raise self._http_error(response.status_code, await self._read(response))
            content_type = response.headers.get("content-type", "")
            if content_type.partition(";")[0].strip().lower() != "text/event-stream":
                shown = redact(content_type, self.secrets)[:100] or "no content type"  # before any case change
                raise UpstreamMalformed(self.name, f"asked for a stream, {self.endpoint.model} answered {shown}")
            events = self.chunks(response, deadline)
            head: list[tuple[str, JSONObject]] = []
            async for item in events:
                head.append(item)
                if starts_answer(item[1]):
                    return OpenStream(self.name, response, events, head)
            raise UpstreamMalformed(self.name, f"the stream of {self.endpoint.model} ended before its first token")
        except BaseException as exc:  # includes the cancellation of a first chunk that came too late
            if events is not None:
                await events.aclose()
            await response.aclose()
            if isinstance(exc, httpx2.HTTPError):
                raise self._transport_error(exc) from None
            raise

    async def chunks(self, response: httpx2.Response, deadline: float) -> Events:
        """(data, chunk) of each event of an open stream, up to `data: [DONE]`: the data as sent, or
        written again from the redacted chunk when it held a key. UpstreamMalformed for an event
        that is not a chunk, UpstreamTimeout for one not arrived whole by `deadline` (the event
        loop's clock), httpx2 errors as they come."""
        events = httpx2.EventSource(response, max_event_size=self.endpoint.max_response_bytes).__aiter__()
        loop = asyncio.get_running_loop()
        while True:
            try:
                event = await asyncio.wait_for(events.__anext__(), max(0.0, deadline - loop.time()))
            except StopAsyncIteration:
                return
            except asyncio.TimeoutError:
                raise self._too_slow() from None
            if event.data == "[DONE]":
                return
            if not event.data:
                continue
            chunk = parse_json_object(self.name, event.data, f"a stream event of {self.endpoint.model}")
            clean = check_chunk(self.name, redact_value(chunk, self.secrets, event.data), self.secrets)
            yield (event.data if clean is chunk else json.dumps(clean)), clean
