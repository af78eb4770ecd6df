"""Shared by the chat client and proxy tests: two stub upstreams on 127.0.0.1 (serving.testing),
a hostile upstream that puts the caller's key into its answers, the router of the session's test
bundle, and prompts whose zone the tests rely on."""

from __future__ import annotations

import pytest

from serving import Router
from serving.testing import Behaviour, LocalServer, StubUpstream

CLOUD_KEY = "sk-cloud-7f3a9c1e5b2d4086-SECRET"
EDGE_KEY = "sk-edge-51d0c2b7e94a6f38-SECRET"
ASK = [{"role": "user", "content": "What is 2+2?"}]  # edge first
LONG = [{"role": "user", "content": "word " * 1500}]  # over the edge context limit: cloud first


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


def json_escaped(text: str) -> str:
    """`text` with every character written as a JSON \\u escape: valid JSON that decodes to `text`
    while holding none of its characters as they are."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


class EchoingUpstream:
    """A hostile OpenAI-compatible server on 127.0.0.1: every request gets `status`, `headers` and
    `body` as set, where "{key}" (in the body or a header value) stands for the bearer key the
    request carried and "{key_escaped}" for the same key as JSON \\u escapes; the body is sent in
    `encoding`.

        with EchoingUpstream(401, '{"error": {"message": "bad key {key_escaped}"}}') as cloud:
            ... Endpoint(cloud.url, "cloud-model", api_key=CLOUD_KEY) ...
    """

    def __init__(
        self, status: int = 200, body: str = "", headers: dict[str, str] | None = None, encoding: str = "utf-8"
    ):
        self.status, self.body, self.encoding = status, body, encoding
        self.headers = headers or {"content-type": "application/json"}
        self._server: LocalServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}/v1"

    def __enter__(self) -> "EchoingUpstream":
        self._server = LocalServer(self, name="echoing-upstream").start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        key = auth.removeprefix("Bearer ")

        def filled(text: str) -> str:
            return text.replace("{key_escaped}", json_escaped(key)).replace("{key}", key)

        body = filled(self.body).encode(self.encoding)
        headers = [(name.encode(), filled(value).encode("latin-1")) for name, value in self.headers.items()]
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
