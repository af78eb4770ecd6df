"""RoutedChat: an OpenAI-style chat client over two endpoints, the edge and the cloud, that asks
the router where each conversation runs and carries the decision out with the cloud as fallback.

    chat = RoutedChat(router, edge=Endpoint("http://127.0.0.1:8080/v1", "llama-3.2-3b"),
                      cloud=Endpoint("https://api.example.com/v1", "big-model", api_key=key))
    completion = chat.create([{"role": "user", "content": "What is 2 + 2?"}], precision="exact")
    completion.text, completion.body, completion.routing.served_by

The path of one request, in order:
  1. RoutedChat.create(messages, **params) (acreate() for asyncio; stream=True for a stream);
  2. ChatRequest.build (serving.chat._request) checks the messages and params, once, and reads the
     prompt the router routes from the messages (serving.chat._conversation: the latest user
     message first);
  3. Router.execute(request, edge.acomplete, cloud.acomplete) (Router.aexecute for acreate()
     and streams) routes and logs request.prompt, and calls the edge and/or the cloud with the
     request itself, by the fallback rules of serving.execution._execute;
  4. Upstream.acomplete(request) (serving.chat._upstream) is one endpoint's HTTP call; create()
     runs it on the client's event loop thread (LoopThread.call); a stream's call is
     Upstream.open_stream(request), which opens the stream up to its first token;
  5. Completion (serving.chat._routing_info): the answer that stands, and its RoutingInfo, read
     from the Execution: each step's time, and the cost of every answer a step returned (a
     rejected edge answer too). A stream is an AsyncChatStream / ChatStream (serving.chat._streams).

So the router's outcome log, exploration and shadow runs apply to all three kinds of request (a
stream's record carries no answer text, and streams get no shadow run). Every failure of an
endpoint is an exception of serving.chat._errors: the edge falls back, and a cloud failure raises
serving.CloudCallError with the edge's error attached (`.edge_error`). The accept check, where
it applies (the fallback zone, or every edge answer with verify_edge_zone=True), reads the
assistant message text.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import serving.monitoring._telemetry as telemetry
from serving.chat._conversation import conversation_prompt
from serving.chat._request import ChatRequest
from serving.chat._routing_info import Completion, RoutingInfo
from serving.chat._streams import AsyncChatStream, ChatStream, LoopThread
from serving.chat._upstream import Answer, Upstream
from serving.endpoints._record import Endpoint
from serving.execution._execute import check_names

if TYPE_CHECKING:
    from serving.chat._conversation import Message
    from serving.endpoints._record import Endpoints
    from serving.execution._execute import Execution, Step
    from serving.routing._router import Router

log = logging.getLogger("serving.chat")

_ROUTER_DEFAULT = object()  # accept not given: Router.execute's own default applies


class RoutedChat:
    """Chat completions from the edge or the cloud, as the router decides (see the module doc).

    router: a serving.Router (create() runs Router.execute, acreate() and streams Router.aexecute,
        so an outcome log on the router records every request).
    edge, cloud: the two endpoints (serving.Endpoint records, each with base_url and model).
    endpoints: instead of edge and cloud, N records by name (the names of the bundle's endpoints),
        tried in each decision's cascade order (serving.execution._execute; docs/endpoints.md#running-n-endpoints).
        RoutingInfo.tried then says which endpoints were tried and why each was left. A record
        without a name is given the key's; one named otherwise is a ValueError, and one without
        base_url or model an EndpointSpecError naming it. What a record declares of itself (context
        limit, price, where it runs, capabilities) is what the router reads for it; what it leaves
        undeclared (None) is the bundle's.
    specs: the earlier spelling (a serving.endpoints._record spec, or name -> its record): fills in what
        the records leave undeclared, before the bundle does.
    verify_edge_zone: apply the accept check to confident edge answers too, not only in the
        fallback zone (as Router.execute).
    to_prompt: messages -> the text the router routes; default the rule of serving.chat._conversation.
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
        edge: Endpoint | None = None,
        cloud: Endpoint | None = None,
        endpoints: Mapping[str, Endpoint] | None = None,
        specs: Endpoints | Mapping[str, Endpoint] | None = None,
        verify_edge_zone: bool = False,
        to_prompt: Callable[[Sequence[Message]], str] = conversation_prompt,
        on_routed: Callable[[RoutingInfo], None] | None = None,
    ) -> None:
        if endpoints is not None and (edge is not None or cloud is not None):
            raise TypeError("give edge= and cloud=, or endpoints=, not both")
        if endpoints is None and (edge is None or cloud is None):
            raise TypeError("RoutedChat needs endpoints= (name -> Endpoint), or edge= and cloud=")
        records: Mapping[str, object] = endpoints if endpoints is not None else {"edge": edge, "cloud": cloud}
        check_names(records)
        if not all(isinstance(endpoint, Endpoint) for endpoint in records.values()):
            raise TypeError("edge and cloud (each of endpoints) must be serving.Endpoint records")
        given = None if specs is None else specs if isinstance(specs, Mapping) else specs.by_name()
        named = {
            name: _named(name, endpoint, given) for name, endpoint in records.items() if isinstance(endpoint, Endpoint)
        }
        self.router = router
        self.edge, self.cloud = named.get("edge"), named.get("cloud")
        # tried in each decision's cascade order (serving.execution._execute); what each declares of itself (context,
        # price, where, capabilities) is what the router reads, the bundle's own where it declares nothing
        self.endpoints: Mapping[str, Endpoint] = named
        self.specs = specs
        keys = tuple(endpoint.api_key for endpoint in named.values())
        self._upstreams = {name: Upstream(name, endpoint, secrets=keys) for name, endpoint in named.items()}
        self._span_attributes = {  # each attempt span's model, host and port (serving.monitoring._telemetry)
            name: telemetry.endpoint_attributes(up.model, up.endpoint.url) for name, up in self._upstreams.items()
        }
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
        metadata: Mapping[str, str] | None = None,
        conversation: str | None = None,
        **params: Any,
    ) -> Completion | ChatStream:
        """The answer to a conversation, from the edge or the cloud (see the module doc).

        precision: "exact" | "standard" | "tolerant" | None, as Router.route takes it.
        stream: return a ChatStream of chunks instead (the accept check does not apply).
        accept: the check of an edge answer in the fallback zone, given the assistant text: a
            callable returning a bool, or "learned" for the bundle's acceptance check (as
            Router.execute takes it); default Router.execute's.
        metadata: the request's metadata for the router's policy (str to str; Router.route), never
            sent to an endpoint. An endpoint the policy forbids is never called, a fallback
            included: serving.policy.FallbackForbidden or NoFeasibleEndpoint instead.
        conversation: the conversation's id (1 to 256 printable characters; the app's own, the
            same for every turn), never sent to an endpoint: the router decides the turn with the
            conversation's state and records where it ran (docs/conversations.md); `routing.turn`
            and `routing.switched` say what it did. A stream's answer length is recorded at its end
            when the server reports usage (stream_options={"include_usage": True}), else as 0.
        params: any other chat-completions parameter (temperature, max_tokens, tools, ...),
            sent to whichever endpoint serves, with that endpoint's own `params` over them
            (Endpoint.params wins a parameter both give). `model` is set per Endpoint.
        What the request needs (image parts, tools, a JSON response format) is read from it
        (serving.endpoints._capabilities.needs_of) and passed to the router: an endpoint whose declared
        capabilities lack it (Endpoint.capabilities, else the bundle's) is never called,
        NoFeasibleEndpoint when none is left.
        Bad messages, or a NaN or infinite number anywhere in the request (JSON has none), are a
        ValueError naming where, before any call (ChatRequest.build).
        """
        request = ChatRequest.build(messages, params, self.to_prompt)
        loop = self._sync_loop()
        scope = telemetry.request(telemetry.CHAT)  # one span per request (joined when the proxy opened it)
        with scope as trace:
            trace.endpoints(self._span_attributes)
            if stream:
                opened = self._open_stream(request, precision, accept, metadata, scope, trace, conversation)
                return ChatStream(loop.run(opened), loop)
            started = time.perf_counter()
            calls = {name: functools.partial(loop.call, up.acomplete) for name, up in self._upstreams.items()}
            execution = self.router.execute(
                request, endpoints=calls, **self._options(precision, accept, metadata, request, conversation)
            )
            return self._completed(execution, started, trace, metadata)

    async def acreate(
        self,
        messages: Sequence[Message],
        *,
        precision: str | None = None,
        stream: bool = False,
        accept: object = _ROUTER_DEFAULT,
        metadata: Mapping[str, str] | None = None,
        conversation: str | None = None,
        **params: Any,
    ) -> Completion | AsyncChatStream:
        """create() for asyncio (Router.aexecute): the same rules, results and outcome record; a
        stream is an AsyncChatStream. `accept`, `metadata` and `conversation` as create() takes
        them; accept runs in the event loop, so keep it quick."""
        request = ChatRequest.build(messages, params, self.to_prompt)
        scope = telemetry.request(telemetry.CHAT)
        with scope as trace:
            trace.endpoints(self._span_attributes)
            if stream:
                return await self._open_stream(request, precision, accept, metadata, scope, trace, conversation)
            started = time.perf_counter()
            calls = {name: up.acomplete for name, up in self._upstreams.items()}
            execution = await self.router.aexecute(
                request, endpoints=calls, **self._options(precision, accept, metadata, request, conversation)
            )
            return self._completed(execution, started, trace, metadata)

    async def _open_stream(
        self,
        request: ChatRequest,
        precision: str | None,
        accept: object,
        metadata: Mapping[str, str] | None,
        scope: telemetry.Scope,
        trace: telemetry.Trace,
        conversation: str | None = None,
    ) -> AsyncChatStream:
        if accept is not _ROUTER_DEFAULT and accept is not None:
            raise ValueError(
                "accept does not apply to streams: an answer can only be judged once it is complete, "
                "and a stream has reached the caller by then"
            )
        started = time.perf_counter()
        with telemetry.within(trace):  # the sync client runs this on its loop thread: its span still holds
            opens = {name: up.open_stream for name, up in self._upstreams.items()}
            # No shadow run: the other endpoint would open a stream that nobody reads.
            execution = await self.router.aexecute(
                request,
                endpoints=opens,
                specs=self.endpoints,
                precision=precision,
                shadow=False,
                metadata=metadata,
                needs=request.needs or None,
                conversation=conversation,
            )
        upstream = self._upstream(execution.served_by)
        routing = RoutingInfo.of(execution, upstream.model)
        # the request's span ends with the stream
        ended = functools.partial(self._stream_ended, metadata, conversation)
        return AsyncChatStream(execution.response, upstream, routing, started, ended, trace, scope.keep_open())

    def _options(
        self,
        precision: str | None,
        accept: object,
        metadata: Mapping[str, str] | None,
        request: ChatRequest,
        conversation: str | None,
    ) -> dict[str, Any]:
        """The keyword arguments of Router.execute / aexecute (which check them) for a non-streamed
        request: its needs (serving.endpoints._capabilities) among them, read from the request once."""
        options = {
            "specs": self.endpoints,
            "precision": precision,
            "verify_edge_zone": self.verify_edge_zone,
            "metadata": metadata,
            "needs": request.needs or None,
            "conversation": conversation,
        }
        return options if accept is _ROUTER_DEFAULT else {**options, "accept": accept}

    # Results.
    def _upstream(self, name: str) -> Upstream:
        return self._upstreams[name]

    def _completed(
        self, execution: Execution, started: float, trace: telemetry.Trace, metadata: Mapping[str, str] | None
    ) -> Completion:
        answer: Answer = execution.response
        routing = RoutingInfo.of(execution, self._upstream(execution.served_by).model)
        routing.estimated_cost = self._cost(execution.steps)
        routing.seconds = time.perf_counter() - started
        trace.answered(fallback_kind=routing.fallback_kind, cost=routing.estimated_cost)
        self._answered(metadata, routing)
        return Completion(answer.body, routing, str(answer))

    def _cost(self, steps: Sequence[Step]) -> float | None:
        """The price of every answer the request produced (each call's Step.result: a rejected edge
        answer too), by its endpoint's prices; None when any is unknown (Endpoint.answer_cost: usage
        that is not token counts is unknown, never an error that would lose the answer)."""
        costs = [
            self._upstream(step.name).endpoint.answer_cost(step.result.body.get("usage"))
            for step in steps
            if isinstance(step.result, Answer)
        ]
        known = [cost for cost in costs if cost is not None]
        return sum(known) if known and len(known) == len(costs) else None

    def _stream_ended(
        self,
        metadata: Mapping[str, str] | None,
        conversation: str | None,
        routing: RoutingInfo,
        usage: Mapping[str, Any] | None,
    ) -> None:
        """A stream has ended (or was closed): a conversation's turn, recorded when the stream
        opened, gets its answer's length when the server reported usage; then as any answer."""
        tokens = completion_tokens(usage)
        turn = routing.decision.turn
        if conversation is not None and turn is not None and tokens:
            try:
                self.router.record_answer(conversation, turn=turn, endpoint=routing.served_by, output_tokens=tokens)
            except Exception as exc:  # the answer is the app's already: never break it here
                log.warning("recording the turn's answer length failed: %r", exc)
        self._answered(metadata, routing)

    def _answered(self, metadata: Mapping[str, str] | None, routing: RoutingInfo) -> None:
        """A request's answer is complete (a stream: at its end): its cost counts against the
        budgets its metadata names (Router.record_spend), and on_routed hears of it."""
        if metadata and routing.estimated_cost:
            try:
                self.router.record_spend(metadata, routing.estimated_cost)
            except Exception as exc:  # the answer is the app's already: never break it here
                log.warning("recording the request's spend failed: %r", exc)
        self._report(routing)

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
            for upstream in self._upstreams.values():
                loop.run(upstream.aclose())
            loop.close()

    async def aclose(self) -> None:
        """Close the current event loop's connection pools."""
        for upstream in self._upstreams.values():
            await upstream.aclose()

    def __enter__(self) -> "RoutedChat":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "RoutedChat":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def completion_tokens(usage: Mapping[str, Any] | None) -> int:
    """A usage's completion_tokens when it is a count (an integer from 0 to below 10^9), else 0."""
    value = usage.get("completion_tokens") if usage is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9 else 0


def _named(name: str, endpoint: Endpoint, specs: Mapping[str, Endpoint] | None) -> Endpoint:
    """The record RoutedChat calls `name` by: named so (a record named otherwise is a ValueError),
    what it does not declare taken from `specs` (the earlier specs= argument), and callable (base_url
    and model: EndpointSpecError naming it otherwise)."""
    if endpoint.name and endpoint.name != name:
        raise ValueError(
            f"RoutedChat was given the endpoint named {endpoint.name!r} as {name!r}: an endpoint's name is how "
            "decisions, logs and headers call it; give it under its own name (endpoints={e.name: e for e in ...})"
        )
    named = endpoint if endpoint.name == name else dataclasses.replace(endpoint, name=name)
    named = named.filled_from(specs.get(name) if specs is not None else None)
    named.check_callable("RoutedChat")
    return named
