"""RoutedChat: an OpenAI-style chat client over two endpoints, the edge and the cloud, that asks
the router where each conversation runs and carries the decision out with the cloud as fallback.

    chat = RoutedChat(router, edge=Endpoint("http://127.0.0.1:8080/v1", "llama-3.2-3b"),
                      cloud=Endpoint("https://api.example.com/v1", "big-model", api_key=key))
    completion = chat.create([{"role": "user", "content": "What is 2 + 2?"}], precision="exact")
    completion.text, completion.body, completion.routing.served_by

One home for the rules: a non-streamed create() is Router.execute() with HTTP calls as the
edge and cloud callables; acreate() is Router.aexecute() with the same calls as coroutines; a
stream is Router.aexecute() whose calls open a stream up to its first token
(serving.chat.streams). So the router's outcome log, exploration and shadow runs apply to
all three (a stream's record carries no answer text, and streams get no shadow run). Every failure of an endpoint is an exception of serving.chat.errors:
the edge falls back, and a cloud failure raises serving.CloudCallError with the edge's error
attached (`.edge_error`).

The router reads the conversation as one prompt (serving.chat.conversation: the latest user
message first). The accept check, where it applies (the fallback zone, or every edge answer
with verify_edge_zone=True), reads the assistant message text.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence

from serving.chat.conversation import check_messages, conversation_prompt
from serving.chat.endpoint import Endpoint
from serving.chat.request import check_json_numbers
from serving.chat.routing_info import Completion, RoutingInfo
from serving.chat.streams import AsyncChatStream, ChatStream, LoopThread
from serving.chat.upstream import Answer, Upstream
from serving.execute import Execution

if TYPE_CHECKING:
    from serving.chat.conversation import Message
    from serving.chat.upstream import OpenStream
    from serving.router import Router

log = logging.getLogger("serving.chat")

_ROUTER_DEFAULT = object()  # accept not given: Router.execute's own default applies
RESERVED = ("model", "messages")


class RoutedChat:
    """Chat completions from the edge or the cloud, as the router decides (see the module doc).

    router: a serving.Router (create() runs Router.execute, acreate() and streams Router.aexecute,
        so an outcome log on the router records every request).
    edge, cloud: the two Endpoints.
    verify_edge_zone: apply the accept check to confident edge answers too, not only in the
        fallback zone (as Router.execute).
    to_prompt: messages -> the text the router routes; default the rule of serving.chat.conversation.
    on_routed: called with the RoutingInfo of every request that got an answer, once it is
        final (a stream: when it ends or is closed). This is where outcome logging hooks in;
        an exception it raises is logged, never passed to the caller.

    Thread-safe; create() from many threads shares one connection pool per endpoint, on the
    client's event loop thread, where its calls run with the async calls' deadlines. acreate()
    keeps one pool per event loop. Close with close() / aclose(), or use `with` / `async with`.
    """

    def __init__(
        self,
        router: Router,
        *,
        edge: Endpoint,
        cloud: Endpoint,
        verify_edge_zone: bool = False,
        to_prompt: Callable[[Sequence[Message]], str] = conversation_prompt,
        on_routed: Callable[[RoutingInfo], None] | None = None,
    ) -> None:
        if not isinstance(edge, Endpoint) or not isinstance(cloud, Endpoint):
            raise TypeError("edge and cloud must be serving.chat.Endpoint objects")
        self.router = router
        self.edge, self.cloud = edge, cloud
        keys = (edge.api_key, cloud.api_key)
        self._edge, self._cloud = Upstream("edge", edge, secrets=keys), Upstream("cloud", cloud, secrets=keys)
        self.verify_edge_zone, self.to_prompt, self.on_routed = verify_edge_zone, to_prompt, on_routed
        self._loop: LoopThread | None = None
        self._loop_lock = threading.Lock()

    # Requests.
    # Any: **params are chat-completions parameters, JSON values of any shape. accept: a callable,
    # "learned", None, or _ROUTER_DEFAULT (as Router.execute takes it).
    def create(
        self,
        messages: Sequence[Message],
        *,
        precision: str | None = None,
        stream: bool = False,
        accept: object = _ROUTER_DEFAULT,
        **params: Any,
    ) -> Completion | ChatStream:
        """The answer to a conversation, from the edge or the cloud (see the module doc).

        precision: "exact" | "standard" | "tolerant" | None, as Router.route takes it.
        stream: return a ChatStream of chunks instead (the accept check does not apply).
        accept: the check of an edge answer in the fallback zone, given the assistant text: a
            callable returning a bool, or "learned" for the bundle's acceptance check (as
            Router.execute takes it); default Router.execute's.
        params: any other chat-completions parameter (temperature, max_tokens, tools, ...),
            sent to whichever endpoint serves. `model` is set per Endpoint.
        Bad messages, or a NaN or infinite number anywhere in the request (JSON has none), are a
        ValueError naming where, before any call.
        """
        prompt = self._prompt(messages, params)
        loop = self._sync_loop()
        if stream:
            _no_accept_for_streams(accept)
            return ChatStream(loop.run(self._open_stream(messages, prompt, precision, params)), loop)
        started = time.perf_counter()
        produced: list[Answer] = []

        def call(upstream: Upstream) -> Callable[[str], Answer]:
            return lambda _prompt: _kept(produced, loop.run(upstream.acomplete(messages, params)))

        options: dict[str, Any] = {} if accept is _ROUTER_DEFAULT else {"accept": accept}  # Router.execute checks it
        execution = self.router.execute(
            prompt,
            call(self._edge),
            call(self._cloud),
            precision=precision,
            verify_edge_zone=self.verify_edge_zone,
            **options,
        )
        return self._completed(execution, produced, started)

    async def acreate(
        self,
        messages: Sequence[Message],
        *,
        precision: str | None = None,
        stream: bool = False,
        accept: object = _ROUTER_DEFAULT,
        **params: Any,
    ) -> Completion | AsyncChatStream:
        """create() for asyncio (Router.aexecute): the same rules, results and outcome record; a
        stream is an AsyncChatStream. `accept` as create() takes it; it runs in the event loop,
        so keep it quick."""
        prompt = self._prompt(messages, params)
        if stream:
            _no_accept_for_streams(accept)
            return await self._open_stream(messages, prompt, precision, params)
        started = time.perf_counter()
        produced: list[Answer] = []

        def call(upstream: Upstream) -> Callable[[str], Awaitable[Answer]]:
            async def run(_prompt: str) -> Answer:
                return _kept(produced, await upstream.acomplete(messages, params))

            return run

        options: dict[str, Any] = {} if accept is _ROUTER_DEFAULT else {"accept": accept}  # Router.execute checks it
        execution = await self.router.aexecute(
            prompt,
            call(self._edge),
            call(self._cloud),
            precision=precision,
            verify_edge_zone=self.verify_edge_zone,
            **options,
        )
        return self._completed(execution, produced, started)

    async def _open_stream(
        self, messages: Sequence[Message], prompt: str, precision: str | None, params: Mapping[str, Any]
    ) -> AsyncChatStream:
        started = time.perf_counter()

        def call(upstream: Upstream) -> Callable[[str], Awaitable[OpenStream]]:
            return lambda _prompt: upstream.open_stream(messages, params)

        # No shadow run: the other side would open a stream that nobody reads.
        execution = await self.router.aexecute(
            prompt, call(self._edge), call(self._cloud), precision=precision, shadow=False
        )
        upstream = self._upstream(execution)
        return AsyncChatStream(
            execution.response, upstream, RoutingInfo.of(execution, upstream.endpoint.model), started, self._report
        )

    # Results.
    def _prompt(self, messages: Sequence[Message], params: Mapping[str, Any]) -> str:
        """The text the router routes; TypeError / ValueError for a request no endpoint should get."""
        for name in RESERVED:
            if name in params:
                raise TypeError(
                    f"{name}= is not a request parameter here: the model is set per Endpoint, "
                    "the messages are the first argument"
                )
        check_json_numbers(check_messages(messages), "messages")
        check_json_numbers(params)
        return self.to_prompt(messages)

    def _upstream(self, execution: Execution) -> Upstream:
        return self._edge if execution.served_by == "edge" else self._cloud

    def _completed(self, execution: Execution, produced: list[Answer], started: float) -> Completion:
        answer: Answer = execution.response
        routing = RoutingInfo.of(execution, self._upstream(execution).endpoint.model)
        costs = [
            (self._edge if a.endpoint == "edge" else self._cloud).endpoint.cost(a.body.get("usage")) for a in produced
        ]
        known = [cost for cost in costs if cost is not None]
        routing.estimated_cost = sum(known) if known and len(known) == len(costs) else None
        routing.seconds = time.perf_counter() - started
        self._report(routing)
        return Completion(answer.body, routing, str(answer))

    def _report(self, routing: RoutingInfo) -> None:
        if self.on_routed is None:
            return
        try:
            self.on_routed(routing)
        except Exception as exc:  # an observer must never break the app's request
            log.warning("on_routed raised: %r", exc)

    # Lifetime.
    def _sync_loop(self) -> LoopThread:
        with self._loop_lock:
            if self._loop is None:
                self._loop = LoopThread()
            return self._loop

    def close(self) -> None:
        """Close the sync calls' connection pools and their event loop thread."""
        with self._loop_lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.run(self._edge.aclose())
            loop.run(self._cloud.aclose())
            loop.close()

    async def aclose(self) -> None:
        """Close the current event loop's connection pools."""
        await self._edge.aclose()
        await self._cloud.aclose()

    def __enter__(self) -> "RoutedChat":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "RoutedChat":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _kept(produced: list[Answer], answer: Answer) -> Answer:
    """Remember every answer the request produced (for its cost), and pass it on."""
    produced.append(answer)
    return answer


def _no_accept_for_streams(accept: object) -> None:
    if accept is not _ROUTER_DEFAULT and accept is not None:
        raise ValueError(
            "accept does not apply to streams: an answer can only be judged once it is complete, "
            "and a stream has reached the caller by then"
        )
