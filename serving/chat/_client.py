"""RoutedChat: an OpenAI-style chat client over the bundle's endpoints (edge and cloud, or N by name)
that asks the router where each conversation runs and carries the decision out, falling back by the cascade.

    chat = RoutedChat(router, edge=Endpoint("http://127.0.0.1:8080/v1", "llama-3.2-3b"),
                      cloud=Endpoint("https://api.example.com/v1", "big-model", api_key=key))
    completion = chat.create([{"role": "user", "content": "What is 2 + 2?"}], precision="exact")
    completion.text, completion.body, completion.routing.served_by

A request is built and checked once (serving.chat._request.ChatRequest), routed and run by
Router.execute (create()) or Router.aexecute (acreate() and streams), whose calls are Upstream.acomplete
or Upstream.open_stream (serving.chat._upstream), and read into a Completion or a stream
(serving.chat._routing_info, serving.chat._streams). So the router's outcome log, exploration and
shadow runs apply to every kind of request (docs/clients.md#outcome-logging).
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
from serving.endpoints._record import Endpoint, _is_count
from serving.execution._execute import check_names, named_calls

if TYPE_CHECKING:
    from serving.chat._conversation import Message
    from serving.endpoints._record import Endpoints
    from serving.execution._execute import Execution, Step
    from serving.routing._router import Router

log = logging.getLogger("serving.chat")

_ROUTER_DEFAULT = object()  # accept not given: Router.execute's own default applies


class RoutedChat:
    """Chat completions from the endpoints, as the router decides (module doc; docs/clients.md#the-routed-chat-client).

    edge, cloud: the two endpoints (serving.Endpoint records, each with base_url and model); or
    endpoints: N records by name (the bundle's endpoint names), tried in each decision's cascade
        order. A record without a name is given the key's; one named otherwise is a ValueError, one
        without base_url or model an EndpointSpecError naming it. What a record leaves undeclared
        (None) is read from `specs` (the earlier spelling), then the bundle's.
    verify_edge_zone: apply the accept check to confident edge answers too (as Router.execute).
    to_prompt: messages -> the text the router routes; default serving.chat._conversation's rule.
    on_routed: called with the RoutingInfo of every request that got an answer, once it is final (a
        stream: when it ends or is closed); an exception it raises is logged, never passed on.

    Thread-safe: create() from many threads shares one connection pool per endpoint, on the client's
    event loop thread; acreate() keeps one pool per event loop. Close with close() / aclose(), or `with`.
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
        records = named_calls(edge, cloud, endpoints, "RoutedChat needs endpoints= (name -> Endpoint)")
        check_names(records)
        if not all(isinstance(endpoint, Endpoint) for endpoint in records.values()):
            raise TypeError("edge and cloud (each of endpoints) must be serving.Endpoint records")
        given = None if specs is None else specs if isinstance(specs, Mapping) else specs.by_name()
        named = {name: _named(name, endpoint, given) for name, endpoint in records.items()}
        self.router = router
        self.edge, self.cloud = named.get("edge"), named.get("cloud")
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

    # Any: **params are JSON values of any shape. accept: as Router.execute takes it, or _ROUTER_DEFAULT.
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
        """The answer to a conversation, from the edge or the cloud (docs/clients.md#the-routed-chat-client).

        precision: as Router.route takes it. stream: return a ChatStream of chunks instead.
        accept: the check of an edge answer in the fallback zone, given the assistant text: a callable
            returning a bool, or "learned" (as Router.execute takes it); default Router.execute's.
            Not for streams (ValueError).
        metadata: the request's metadata for the router's policy, never sent to an endpoint.
        conversation: the conversation's id (the app's own, the same every turn), never sent to an
            endpoint: the router decides the turn with its state and records where it ran
            (docs/conversations.md; `routing.turn`, `routing.switched`).
        params: any other chat-completions parameter, sent to whichever endpoint serves, with that
            endpoint's own `params` over them. What the request needs (image parts, tools, a JSON
            response format) rules out endpoints whose capabilities lack it.
        Bad messages, or a NaN or infinite number anywhere in the request, are a ValueError naming
        where, before any call (ChatRequest.build).
        """
        request = ChatRequest.build(messages, params, self.to_prompt)
        loop = self._sync_loop()
        scope = telemetry.request(telemetry.CHAT)  # one span per request (joined when the proxy opened it)
        with scope as trace:
            trace.endpoints(self._span_attributes)
            options = self._options(request, precision, accept, metadata, conversation, stream)
            if stream:
                return ChatStream(loop.run(self._open_stream(request, options, scope, trace)), loop)
            started = time.perf_counter()
            calls = {name: functools.partial(loop.call, up.acomplete) for name, up in self._upstreams.items()}
            execution = self.router.execute(request, endpoints=calls, **options)
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
        stream is an AsyncChatStream. accept runs in the event loop, so keep it quick."""
        request = ChatRequest.build(messages, params, self.to_prompt)
        scope = telemetry.request(telemetry.CHAT)
        with scope as trace:
            trace.endpoints(self._span_attributes)
            options = self._options(request, precision, accept, metadata, conversation, stream)
            if stream:
                return await self._open_stream(request, options, scope, trace)
            started = time.perf_counter()
            calls = {name: up.acomplete for name, up in self._upstreams.items()}
            execution = await self.router.aexecute(request, endpoints=calls, **options)
            return self._completed(execution, started, trace, metadata)

    def _options(
        self,
        request: ChatRequest,
        precision: str | None,
        accept: object,
        metadata: Mapping[str, str] | None,
        conversation: str | None,
        stream: bool,
    ) -> dict[str, Any]:
        """The keyword arguments of Router.execute / aexecute (which check them), the request's needs
        (serving.endpoints._capabilities) among them, read from the request once."""
        options: dict[str, Any] = {
            "specs": self.endpoints,
            "precision": precision,
            "metadata": metadata,
            "needs": request.needs or None,
            "conversation": conversation,
        }
        if stream:
            if accept is not _ROUTER_DEFAULT and accept is not None:
                raise ValueError(
                    "accept does not apply to streams: an answer can only be judged once it is complete, "
                    "and a stream has reached the caller by then"
                )
            # No shadow run: the other endpoint would open a stream that nobody reads.
            return {**options, "shadow": False}
        options["verify_edge_zone"] = self.verify_edge_zone
        return options if accept is _ROUTER_DEFAULT else {**options, "accept": accept}

    async def _open_stream(
        self, request: ChatRequest, options: dict[str, Any], scope: telemetry.Scope, trace: telemetry.Trace
    ) -> AsyncChatStream:
        started = time.perf_counter()
        with telemetry.within(trace):  # the sync client runs this on its loop thread: its span still holds
            opens = {name: up.open_stream for name, up in self._upstreams.items()}
            execution = await self.router.aexecute(request, endpoints=opens, **options)
        upstream = self._upstreams[execution.served_by]
        routing = RoutingInfo.of(execution, upstream.model)
        ended = functools.partial(self._stream_ended, options["metadata"], options["conversation"])
        # the request's span ends with the stream
        return AsyncChatStream(execution.response, upstream, routing, started, ended, trace, scope.keep_open())

    def _completed(
        self, execution: Execution, started: float, trace: telemetry.Trace, metadata: Mapping[str, str] | None
    ) -> Completion:
        answer: Answer = execution.response
        routing = RoutingInfo.of(execution, self._upstreams[execution.served_by].model)
        routing.estimated_cost = self._cost(execution.steps)
        routing.seconds = time.perf_counter() - started
        trace.answered(fallback_kind=routing.fallback_kind, cost=routing.estimated_cost)
        self._answered(metadata, routing)
        return Completion(answer.body, routing, str(answer))

    def _cost(self, steps: Sequence[Step]) -> float | None:
        """The price of every answer the request produced (a rejected edge answer too) at its endpoint's
        prices; None when any is unknown (Endpoint.answer_cost: usage not in token counts is unknown, not an error)."""
        costs = [
            self._upstreams[step.name].endpoint.answer_cost(step.result.body.get("usage"))
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
        tokens = usage.get("completion_tokens") if usage is not None else None
        turn = routing.decision.turn
        if conversation is not None and turn is not None and _is_count(tokens) and tokens:
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
        if self.on_routed is not None:
            try:
                self.on_routed(routing)
            except Exception as exc:  # an observer must never break the app's request
                log.warning("on_routed raised: %r", exc)

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


def _named(name: str, endpoint: Endpoint, specs: Mapping[str, Endpoint] | None) -> Endpoint:
    """The record RoutedChat calls `name` by: named so, filled from `specs`, callable (the class doc)."""
    if endpoint.name and endpoint.name != name:
        raise ValueError(
            f"RoutedChat was given the endpoint named {endpoint.name!r} as {name!r}: an endpoint's name is how "
            "decisions, logs and headers call it; give it under its own name (endpoints={e.name: e for e in ...})"
        )
    named = endpoint if endpoint.name == name else dataclasses.replace(endpoint, name=name)
    named = named.filled_from(specs.get(name) if specs is not None else None)
    named.check_callable("RoutedChat")
    return named
