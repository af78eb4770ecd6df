"""Shared by the chat client and proxy tests: two stub upstreams on 127.0.0.1 (serving.chat.stub),
the router of the session's test bundle, and prompts whose zone the tests rely on."""
from __future__ import annotations

import socket

import pytest

from serving import Router
from serving.chat.stub import Behaviour, StubUpstream

CLOUD_KEY = "sk-cloud-7f3a9c1e5b2d4086-SECRET"
ASK = [{"role": "user", "content": "What is 2+2?"}]          # edge first
LONG = [{"role": "user", "content": "word " * 1500}]          # over the edge context limit: cloud first


@pytest.fixture(scope="module")
def stubs():
    """(edge, cloud) stub servers for the module; each test starts with default behaviour."""
    with StubUpstream("edge") as edge, StubUpstream("cloud") as cloud:
        yield edge, cloud


@pytest.fixture(autouse=True)
def fresh_stubs(request):
    if "stubs" in request.fixturenames:
        for stub in request.getfixturevalue("stubs"):
            stub.behaviour = Behaviour()
            stub.received.clear()


@pytest.fixture(scope="module")
def router(bundle):
    router = Router.load(bundle, strict=True)
    assert router.route(ASK[0]["content"]).target == "edge"
    assert router.route(LONG[0]["content"]).zone == "cloud"
    return router


def dead_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
