"""Route, then run over N named endpoints: Router.execute / aexecute for `endpoints=` (name -> call).

    execution = execute_endpoints(router, prompt, {"phone-3b": on_device, "onprem-8b": onprem,
                                                   "frontier": frontier}, specs=load_endpoints("endpoints.yaml"))
    execution.served_by, [t.label() for t in execution.tried], execution.expected_cost

The decision is the router's (its policy applied, as Router.execute makes it), carried out by
serving.execute_endpoints' cascade, and recorded in the router's outcome log with the endpoints
tried (serving.traffic). RoutedChat and the proxy use these for their N endpoints. No shadow runs
(which endpoint would shadow is a choice of its own). With the router's `explore_rate`, a decision
with a cascade is explored on its first endpoint among the feasible ones, and the cascade carried
out is the explored one (serving.traffic's module doc); a two-endpoint bundle's zone is flipped as
Router.execute does. The proxy command loads its router without an outcome log, so it explores
nothing (exploring needs a log); a RoutedChat over a router with one explores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol

import serving.telemetry as telemetry
from serving.capabilities import declares_languages
from serving.execute import aexecute, execute, off_loop

if TYPE_CHECKING:
    from typing import Literal

    from serving.capabilities import Needs
    from serving.endpoints import Endpoint, Endpoints
    from serving.execute import AcceptCheck, EdgePool, Execution, Subject
    from serving.manifest import EndpointsSection
    from serving.routing import Routing
    from serving.traffic import Request


class Router(Protocol):
    """What these functions use of a serving.router.Router (named here, not imported: the Router's
    execute_endpoints imports this module)."""

    _traffic: Any  # serving.traffic.Traffic

    def _prepared(self, *args: Any) -> tuple[Routing, str, Any, AcceptCheck | None]: ...


def _section(routing: Routing) -> EndpointsSection | None:
    """An N-endpoint bundle's endpoints section; None for a two-endpoint or degraded one."""
    return routing.manifest.endpoints if routing.manifest is not None else None


def _specs(specs: Endpoints | Mapping[str, Endpoint] | None, routing: Routing) -> Mapping[str, Endpoint] | None:
    """A spec file's Endpoints (serving.endpoints) as name -> Endpoint; a mapping as it is; none
    given: an N-endpoint bundle's own (its manifest's endpoints section), else None."""
    if specs is None:
        section = _section(routing)
        if section is None:
            return None
        specs = section.spec
    if isinstance(specs, Mapping):
        return specs
    return {endpoint.name: endpoint for endpoint in specs}


def _output_tokens(routing: Routing) -> float:
    """The answer's expected tokens the calls' prices count: an N-endpoint bundle's own (what its
    choice priced), else none."""
    section = _section(routing)
    return 0.0 if section is None else section.output_tokens


def _prepared(
    router: Router,
    prompt: object,
    endpoints: Mapping[str, Callable[[Any], Any]],
    precision: str | None,
    accept: AcceptCheck | Literal["learned"] | None,
    metadata: Mapping[str, str] | None,
    request_id: str | None,
    asynchronous: bool,
    needs: Needs | None = None,
    specs: Endpoints | Mapping[str, Endpoint] | None = None,
) -> tuple[Routing, Any, AcceptCheck | None, Request | None]:
    """(the bundle, the decision, the accept check, the logged request or None), as Router.execute
    makes them; `needs` against the capabilities of the `specs` given (else the bundle's own)."""
    if not endpoints:
        raise ValueError("endpoints is empty: give at least one endpoint name -> call")
    first = next(iter(endpoints.values()))
    capabilities = None
    if specs is not None:
        given = specs if isinstance(specs, Mapping) else {endpoint.name: endpoint for endpoint in specs}
        declared = {name: endpoint.capabilities for name, endpoint in given.items()}
        # The given specs' capabilities decide when the request needs something, or when one of
        # them declares languages (every request has a language).
        capabilities = declared if needs is not None or declares_languages(declared) else None
    routing, text, decision, accept = router._prepared(
        prompt, first, first, precision, accept, metadata, needs, capabilities
    )
    request = router._traffic.request(
        routing,
        text,
        precision,
        decision,
        accept=accept,
        edge=first,
        cloud=first,
        request_id=request_id,
        asynchronous=asynchronous,
        shadow=False,
        subject=prompt,
    )
    return routing, decision, accept, request


def execute_endpoints(
    router: Router,
    prompt: Subject,
    endpoints: Mapping[str, Callable[[Subject], Any]],
    *,
    specs: Endpoints | Mapping[str, Endpoint] | None = None,
    timeouts: Mapping[str, float] | None = None,
    precision: str | None = None,
    accept: AcceptCheck | Literal["learned"] | None = None,
    verify_edge_zone: bool = False,
    edge_pool: EdgePool | None = None,
    request_id: str | None = None,
    metadata: Mapping[str, str] | None = None,
    needs: Needs | None = None,
) -> Execution:
    """Router.execute over N endpoints (module doc): `endpoints` name -> call, `specs` their
    context limits, prices and capabilities (an Endpoints spec or name -> Endpoint; default an
    N-endpoint bundle's own), `timeouts` name -> seconds, `needs` what the request needs of them
    (serving.capabilities: an endpoint lacking it is never called). Execution.expected_cost prices
    each call at the prompt's tokens and, with an N-endpoint bundle, the answer tokens its choice
    expected (its endpoints section's output_tokens)."""
    with telemetry.request():
        routing, decision, check, request = _prepared(
            router, prompt, endpoints, precision, accept, metadata, request_id, False, needs, specs
        )
        options: dict[str, Any] = {
            "endpoints": endpoints,
            "specs": _specs(specs, routing),
            "output_tokens": _output_tokens(routing),
            "timeouts": timeouts,
            "verify_edge_zone": verify_edge_zone,
            "edge_pool": edge_pool,
        }
        if request is None:
            return execute(decision, prompt, accept=check, **options)
        with request:  # recorded on the way out, a failure included
            request.execution = execute(request.decision, prompt, accept=request.accept, **options)
        return request.execution


async def aexecute_endpoints(
    router: Router,
    prompt: Subject,
    endpoints: Mapping[str, Callable[[Subject], Awaitable[Any]]],
    *,
    specs: Endpoints | Mapping[str, Endpoint] | None = None,
    timeouts: Mapping[str, float] | None = None,
    precision: str | None = None,
    accept: AcceptCheck | Literal["learned"] | None = None,
    verify_edge_zone: bool = False,
    request_id: str | None = None,
    metadata: Mapping[str, str] | None = None,
    needs: Needs | None = None,
) -> Execution:
    """execute_endpoints() for asyncio: each call an async callable (an overrunning one is cancelled).
    Routing a long prompt runs on a worker thread (serving.execute.off_loop), not on the event loop."""
    with telemetry.request():
        routing, decision, check, request = await off_loop(
            prompt, _prepared, router, prompt, endpoints, precision, accept, metadata, request_id, True, needs, specs
        )
        options: dict[str, Any] = {
            "endpoints": endpoints,
            "specs": _specs(specs, routing),
            "output_tokens": _output_tokens(routing),
            "timeouts": timeouts,
            "verify_edge_zone": verify_edge_zone,
        }
        if request is None:
            return await aexecute(decision, prompt, accept=check, **options)
        with request:
            request.execution = await aexecute(request.decision, prompt, accept=request.accept, **options)
        return request.execution
