"""StubUpstream: a stand-in OpenAI-compatible chat-completions server on 127.0.0.1.

It answers POST /v1/chat/completions (JSON, or SSE chunks with `stream: true` ending with `data: [DONE]`,
and a usage chunk when `stream_options.include_usage` is set) and GET /v1/models, and a malformed request
(_request_problem) with 400 naming the parameter, as a real server does. `Behaviour` makes it fail in the
ways a client must survive; the answer names the stub ("answer from edge"), so a test can tell who served.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serving.testing._local_server import LocalServer

if TYPE_CHECKING:
    from typing import NoReturn

    from starlette.types import Receive, Scope, Send  # the ASGI interface's types, nothing of starlette

    from serving._json_types import JSONObject


@dataclass
class Behaviour:
    """How the stub answers (read at each request, so a test may change it between requests)."""

    reply: str = ""  # the answer text; default "answer from <name>"
    delay_s: float = 0.0  # before the response starts
    first_token_delay_s: float = 0.0  # streams: after the role chunk, before the first token
    chunk_delay_s: float = 0.0  # streams: between tokens
    status: int = 200  # another status answers an OpenAI-style error body
    error_message: str = "stub failure"
    malformed: bool = False  # 200 with a body (or a first stream event) that is not JSON
    break_after_first_chunk: bool = False  # streams: drop the connection after the first token
    echo_auth_in_errors: bool = False  # error bodies repeat the request's Authorization header


@dataclass
class Received:
    """One request the stub got."""

    path: str
    headers: dict[str, str]
    body: Any  # the decoded JSON body, whatever its shape (a malformed request's too); None if not JSON


@dataclass
class StubUpstream:
    """The stub as an ASGI app, and its own server on 127.0.0.1 (see the module doc)."""

    name: str = "stub"
    behaviour: Behaviour = field(default_factory=Behaviour)
    keep: int = 100  # requests remembered in `received`

    def __post_init__(self) -> None:
        self.received: list[Received] = []
        self.port: int | None = None
        self._server: LocalServer | None = None
        self._count = 0

    @property
    def url(self) -> str:
        """The API root to give a client, e.g. http://127.0.0.1:PORT/v1."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, port: int = 0) -> "StubUpstream":
        """Serve on 127.0.0.1 (an ephemeral port by default) from a daemon thread."""
        self._server = LocalServer(self, port=port, name=f"stub-{self.name}").start()
        self.port = self._server.port
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> "StubUpstream":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            event = await receive()
            raw += event.get("body", b"")
            if not event.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body: Any  # decoded JSON: checked by _request_problem before the answer reads it
        problem: tuple[str | None, str] | None
        try:
            body, problem = (json.loads(raw, parse_constant=_not_json) if raw else None), None
        except (ValueError, RecursionError) as exc:
            body, problem = None, (None, f"the request body is not valid JSON ({exc})")
        self.received.append(Received(scope["path"], headers, body))
        del self.received[: -self.keep]
        if scope["path"].endswith("/models"):
            return await _send_json(send, 200, {"object": "list", "data": [{"id": self.name, "object": "model"}]})
        if not scope["path"].endswith("/chat/completions"):
            return await _send_json(send, 404, {"error": {"message": f"no route {scope['path']}"}})
        problem = problem or _request_problem(body)
        if problem is not None:
            param, message = problem
            error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
            return await _send_json(send, 400, {"error": error})
        b = self.behaviour
        if await _client_left(receive, b.delay_s):
            return
        if b.status != 200:
            message = b.error_message + (f" (got {headers.get('authorization', '')})" if b.echo_auth_in_errors else "")
            return await _send_json(send, b.status, {"error": {"message": message, "type": "stub_error"}})
        self._count += 1
        answer = _Answer(self.name, self._count, body, b.reply or f"answer from {self.name}")
        if body.get("stream"):
            return await self._stream(receive, send, answer, body)
        if b.malformed:
            return await _send(send, 200, b"{this is not json")
        await _send_json(send, 200, answer.completion())

    async def _stream(self, receive: Receive, send: Send, answer: "_Answer", body: JSONObject) -> None:
        b = self.behaviour
        await _start(send, 200, [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")])

        async def event(data: str) -> None:
            await send({"type": "http.response.body", "body": f"data: {data}\n\n".encode(), "more_body": True})

        await event(json.dumps(answer.chunk({"role": "assistant", "content": ""})))
        if await _client_left(receive, b.first_token_delay_s):
            return
        if b.malformed:
            await event("{this is not json")
        for i, word in enumerate(answer.words):
            await event(json.dumps(answer.chunk({"content": word if i == 0 else " " + word})))
            if b.break_after_first_chunk:
                raise ConnectionAbortedError("stub: dropping the stream after its first chunk, as asked")
            if await _client_left(receive, b.chunk_delay_s):
                return
        await event(json.dumps(answer.chunk({}, finish="stop")))
        if (body.get("stream_options") or {}).get("include_usage"):
            await event(json.dumps({**answer.chunk({}), "choices": [], "usage": answer.usage()}))
        await event("[DONE]")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Answer:
    """The stub's answer to one request, as a completion or as chunks."""

    def __init__(self, name: str, number: int, body: JSONObject, text: str) -> None:
        self.id, self.model, self.text = f"chatcmpl-{name}-{number}", body.get("model", name), text
        self.words = text.split()
        self.prompt_tokens = sum(
            len(str(m.get("content", "")).split()) for m in body.get("messages") or [] if isinstance(m, dict)
        )

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": len(self.words),
            "total_tokens": self.prompt_tokens + len(self.words),
        }

    def _head(self, kind: str) -> JSONObject:
        return {"id": self.id, "object": kind, "created": int(time.time()), "model": self.model}

    def completion(self) -> JSONObject:
        choice = {"index": 0, "message": {"role": "assistant", "content": self.text}, "finish_reason": "stop"}
        return {**self._head("chat.completion"), "choices": [choice], "usage": self.usage()}

    def chunk(self, delta: JSONObject, finish: str | None = None) -> JSONObject:
        return {
            **self._head("chat.completion.chunk"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }


def _not_json(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _request_problem(body: object) -> tuple[str | None, str] | None:
    """(the parameter, what is wrong) when a chat-completions request is malformed, as a real server
    answers it with 400; None when it is well formed enough to answer."""
    if not isinstance(body, dict):
        return None, "the request body must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return "messages", "messages must be a list of objects"
    if not isinstance(body.get("stream", False), bool):
        return "stream", "stream must be true or false"
    if not isinstance(body.get("stream_options") or {}, dict):
        return "stream_options", "stream_options must be an object"
    return None


async def _client_left(receive: Receive, seconds: float) -> bool:
    """Wait `seconds` (after the request body was read); True as soon as the client disconnects."""
    if seconds <= 0:
        return False
    try:
        message = await asyncio.wait_for(receive(), seconds)
        return bool(message["type"] == "http.disconnect")
    except asyncio.TimeoutError:
        return False


async def _start(send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _send(send: Send, status: int, body: bytes) -> None:
    """A whole JSON response (or one that claims to be)."""
    await _start(send, status, [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())])
    await send({"type": "http.response.body", "body": body})


async def _send_json(send: Send, status: int, value: object) -> None:
    await _send(send, status, json.dumps(value).encode())
