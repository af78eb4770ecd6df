"""Streamed answers of the routed chat client (docs/clients.md#streaming), opened by the same
fallback rules as any request (serving.execution._execute.aexecute): the "call" to an endpoint opens
its stream and reads it up to the first chunk that carries the answer, so an edge-first stream falls
back before anything has reached the caller; a stream that breaks after that raises
StreamInterrupted. A key of the client spelled out over several chunks is redacted too
(serving.chat._responses.ChunkRedactor). ChatStream, the sync client's, runs the AsyncChatStream on
the client's event loop thread (LoopThread, which runs its sync calls too).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Mapping

import httpx2

import serving.monitoring._telemetry as telemetry
from serving.chat._errors import StreamInterrupted, UpstreamError, redact
from serving.chat._responses import ChunkRedactor
from serving.chat._routing_info import RoutingInfo
from serving.chat._upstream import OpenStream, Upstream

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from typing import TypeVar

    from serving._json_types import JSONObject

    A = TypeVar("A")
    T = TypeVar("T")


class AsyncChatStream:
    """`async for chunk in stream`: the chunks (dicts) of the serving endpoint's stream, as it sent
    them. `routing` says who serves it and why; its `seconds` and `estimated_cost` are set when the
    stream ends. Close it (`aclose`, or `async with`) when not reading it to the end. `on_end` hears
    the routing and the usage the stream reported (None when it reported none, or broke)."""

    def __init__(
        self,
        opened: OpenStream,
        upstream: Upstream,
        routing: RoutingInfo,
        started: float,
        on_end: Callable[[RoutingInfo, Mapping[str, Any] | None], None],
        trace: telemetry.Trace = telemetry.NOOP,
        end_trace: Callable[[], None] = telemetry.NOOP.end,
    ) -> None:
        self.routing = routing
        self._opened, self._upstream, self._started, self._on_end = opened, upstream, started, on_end
        self._trace, self._end_trace = trace, end_trace  # the request's span, ended with the stream
        self._head = deque(opened.head)
        self._usage: Mapping[str, Any] | None = None  # the latest a chunk reported (Endpoint.answer_cost reads it)
        self._done = False
        self._redactor = ChunkRedactor(upstream.secrets)  # keys spelled out over several chunks
        self._broken: StreamInterrupted | None = None  # raised once the text held back has been given

    def __aiter__(self) -> "AsyncChatStream":
        return self

    async def __anext__(self) -> JSONObject:
        return (await self._next())[1]

    async def raw(self) -> AsyncIterator[str]:
        """The data of each event as the endpoint sent it (chunk JSON text), for relaying as is;
        written again from the redacted chunk when it held a key (serving.chat._upstream)."""
        while True:
            try:
                data, _ = await self._next()
            except StopAsyncIteration:
                return
            yield data

    async def _next(self) -> tuple[str, JSONObject]:
        if self._broken is not None:
            broken, self._broken = self._broken, None
            raise broken
        if self._head:
            item = self._head.popleft()
        elif self._done:
            raise StopAsyncIteration
        else:
            try:
                item = await self._opened.events.__anext__()
            except StopAsyncIteration:
                return await self._ended(None)
            except (UpstreamError, httpx2.HTTPError) as exc:
                text = redact(f"{type(exc).__name__}: {exc}", self._upstream.secrets)[:300]
                interrupted = StreamInterrupted(
                    self._opened.endpoint,
                    f"the stream of {self._upstream.endpoint.model} broke after its first chunk: {text}",
                )
                self._trace.failed(interrupted)
                return await self._ended(interrupted)
        usage = item[1].get("usage")  # the last chunk's, when asked with stream_options.include_usage
        if isinstance(usage, Mapping):
            self._usage = usage
        chunk = self._redactor.chunk(item[1])
        return item if chunk is item[1] else (json.dumps(chunk), chunk)

    async def _ended(self, broken: StreamInterrupted | None) -> tuple[str, JSONObject]:
        """The stream ended, or broke: the text held back as one more chunk, then the end or the break."""
        await self._finish(failed=broken is not None)
        held = self._redactor.end(cut=broken is not None)
        if held is None:
            if broken is None:
                raise StopAsyncIteration
            raise broken from None
        self._broken = broken
        return json.dumps(held), held

    async def aclose(self) -> None:
        """Stop reading and release the connection (safe to call more than once)."""
        self._broken = None
        if not self._done:
            await self._finish(failed=True)

    async def __aenter__(self) -> "AsyncChatStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _finish(self, failed: bool = False) -> None:
        self._done = True
        try:
            await self._opened.events.aclose()
            await self._opened.response.aclose()
        finally:
            self.routing.seconds = time.perf_counter() - self._started
            self.routing.estimated_cost = None if failed else self._upstream.endpoint.answer_cost(self._usage)
            self._on_end(self.routing, None if failed else self._usage)
            self._trace.answered(
                fallback_kind=self.routing.fallback_kind, cost=self.routing.estimated_cost, usage=self._usage
            )
            self._end_trace()


class ChatStream:
    """`for chunk in stream`: the sync face of an AsyncChatStream (see the module doc). Close it
    (`close`, or `with`) when not reading it to the end."""

    def __init__(self, stream: AsyncChatStream, loop: "LoopThread") -> None:
        self._stream, self._loop, self.routing = stream, loop, stream.routing

    def __iter__(self) -> "ChatStream":
        return self

    def __next__(self) -> JSONObject:
        try:
            return self._loop.run(self._stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        self._loop.run(self._stream.aclose())

    def __enter__(self) -> "ChatStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LoopThread:
    """An asyncio event loop on a daemon thread, for running coroutines from sync code: the sync
    calls get the async calls' deadlines, which cancel a call however slowly its server sends."""

    def __init__(self, name: str = "routed-chat-sync") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the loop and wait for its result (or exception); a caller interrupted
        while waiting (KeyboardInterrupt) cancels it. Not from the loop's own thread (a hook such
        as on_routed run by a stream), which would wait for itself: RuntimeError there."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError(
                "a sync call of the routed chat client on its own event loop thread would wait for "
                "itself: use acreate() there"
            )
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # nothing once the call is done; else the call stops with its caller
            raise

    def call(self, fn: Callable[[A], Coroutine[Any, Any, T]], argument: A) -> T:
        """fn(argument) run on the loop, as run() runs it: a coroutine function called as a plain
        one (`functools.partial(loop.call, upstream.acomplete)` is a sync edge or cloud call)."""
        return self.run(fn(argument))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
