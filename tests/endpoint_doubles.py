"""Shared by the N-endpoint tests: decisions that carry a cascade, a router double that hands out a
given cascade, and the endpoint specs of three endpoints of different price and context."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time

import pytest

from serving import Router
from serving.endpoints._record import parse_endpoints
from serving.routing._decision import Decision
from serving.testing import Behaviour, StubUpstream

SPECS = parse_endpoints(
    {
        "endpoints": [
            {"name": "phone-3b", "where": "device", "price": {"per_call": 0}, "latency_ms": 120, "context_tokens": 64},
            {
                "name": "onprem-8b",
                "where": "device",
                "price": {"per_1k_input": 0.0002},
                "latency_ms": 300,
                "context_tokens": 8192,
            },
            {
                "name": "frontier",
                "where": "cloud",
                "price": {"per_1k_input": 0.005, "per_call": 0.001},
                "latency_ms": 900,
                "context_tokens": 200000,
            },
        ]
    }
)
ORDER = ("phone-3b", "onprem-8b", "frontier")


def with_cascade(decision: Decision, cascade=ORDER, **changes) -> Decision:
    """`decision` with `cascade` (and any other field changed), as an N-endpoint bundle decides:
    every answer but the last checked; where each runs from SPECS (edge on the device)."""
    where = {e.name: e.where == "device" for e in SPECS}
    cascade = tuple(cascade)
    on_device = tuple(where.get(name, name == "edge") for name in cascade)
    return dataclasses.replace(decision, cascade=cascade, on_device=on_device, checked=cascade[:-1], **changes)


def decision(cascade=ORDER, *, n_tokens: int = 10, forbidden=(), zone: str = "edge_with_cloud_fallback", rule=None):
    base = Decision.of_zone(zone, score=0.0, reason="test", degraded=False, model_version="test", n_tokens=n_tokens)
    return with_cascade(base, cascade, forbidden=tuple(forbidden), rule=rule)


class CascadeRouter(Router):
    """A router (the rule table: no bundle needed) whose every decision carries `cascade`, and
    `changes` (n_tokens, forbidden, rule): what an N-endpoint bundle would decide. Its policy, outcome
    log and telemetry are the Router's own."""

    cascade: tuple[str, ...] = ORDER
    changes: dict = {}

    def _prepared(self, request, accept):
        routing, decided, check = super()._prepared(request, accept)
        return routing, with_cascade(decided, self.cascade, **self.changes), check


def cascade_router(tmp_path, **load_options) -> CascadeRouter:
    """A CascadeRouter whose endpoints are SPECS' (the names its records and feedback use), as an
    N-endpoint bundle's router has them; its decisions' cascades are `cascade`."""
    from serving.routing._chooser import Chooser

    router = CascadeRouter.load(tmp_path / "no-bundle", **load_options)
    assert router.degraded
    routing = router._routing
    routing.chooser = Chooser(
        tuple(SPECS), routing.chooser.rule, model_version=routing.model_version, max_chars=routing.chooser.max_chars
    )
    router.changes = {}
    return router


def upstream_fixtures(names):
    """(upstreams, fresh): pytest fixtures for a test module, assigned as `upstreams, fresh =
    upstream_fixtures(names)`: a StubUpstream on 127.0.0.1 per endpoint name for the module, and
    before each test that uses them, every stub back to default behaviour with nothing received."""

    @pytest.fixture(scope="module")
    def upstreams():
        with contextlib.ExitStack() as stack:
            yield {name: stack.enter_context(StubUpstream(name)) for name in names}

    @pytest.fixture(autouse=True)
    def fresh(request):
        if "upstreams" in request.fixturenames:
            for stub in request.getfixturevalue("upstreams").values():
                stub.behaviour = Behaviour()
                stub.received.clear()

    return upstreams, fresh


class Calls:
    """In-process endpoint calls by name for execute_endpoints, each answering "<name> answers
    <prompt>" and recording its name in `made`, in order. `fail`: an endpoint name, or a (name,
    prompt) pair, -> the exception its call raises; `slow`: a name -> seconds to sleep first.
    `sync` / `asyn`: name -> call for every one of `names`."""

    def __init__(self, names=ORDER, fail=None, slow=None):
        self.names, self.fail, self.slow = tuple(names), dict(fail or {}), slow or {}
        self.made: list[str] = []

    def _failure(self, name, prompt):
        return self.fail.get(name) or self.fail.get((name, prompt))

    def call(self, name):
        def run(prompt):
            self.made.append(name)
            time.sleep(self.slow.get(name, 0))
            if failure := self._failure(name, prompt):
                raise failure
            return f"{name} answers {prompt}"

        return run

    def acall(self, name):
        async def run(prompt):
            self.made.append(name)
            await asyncio.sleep(self.slow.get(name, 0))
            if failure := self._failure(name, prompt):
                raise failure
            return f"{name} answers {prompt}"

        return run

    @property
    def sync(self):
        return {name: self.call(name) for name in self.names}

    @property
    def asyn(self):
        return {name: self.acall(name) for name in self.names}
