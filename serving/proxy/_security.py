"""What keeps the proxy from leaking or relaying (docs/clients.md#security): BearerAuth, the
bearer-token check of every request but /health (constant time, 401 before the body is read), and
RedactingFilter, which replaces every secret in the log records its handlers see (the second
line: errors are redacted where they are made, serving.chat._errors).
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import TYPE_CHECKING, Callable, Iterable

from starlette.responses import Response

from serving.chat._errors import _hunted, redact

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send


def error_body(message: str, kind: str, code: str | None = None) -> bytes:
    """An error in OpenAI's format: {"error": {"message", "type", "param": null, "code"}}."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


class BearerAuth:
    """ASGI middleware: 401 unless the request carries the bearer token (docs/clients.md#security)."""

    def __init__(self, app: ASGIApp, *, token: str | None, on_reject: Callable[[str], None]) -> None:
        self.app, self.on_reject = app, on_reject
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http" or scope["path"] == "/health":
            return await self.app(scope, receive, send)
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, credential = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self.token):
            return await self.app(scope, receive, send)
        self.on_reject("unauthorized")
        message = "missing bearer token" if not header else "invalid bearer token"
        body = error_body(f"{message}: send 'Authorization: Bearer <token>'", "authentication_error", "invalid_api_key")
        challenge = {"www-authenticate": 'Bearer realm="router"'}
        await Response(body, 401, challenge, media_type="application/json")(scope, receive, send)


class RedactingFilter(logging.Filter):
    """A handler filter that replaces the secrets in every record passing through (docs/clients.md#security)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = _hunted(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True

        def clean(value: object) -> object:
            return redact(value, self.secrets) if isinstance(value, str) else value

        record.msg = clean(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(clean(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: clean(v) for k, v in record.args.items()}
        try:
            message = record.getMessage()
        except Exception:  # a record that does not format is left to the handler to report
            message = ""
        if any(s in message for s in self.secrets):  # an argument that only shows the secret once formatted
            record.msg, record.args = redact(message, self.secrets), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info), self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True

    def install(self, logger_names: Iterable[str] = ("", "uvicorn", "uvicorn.error", "uvicorn.access")) -> None:
        """Put this filter on every handler of these loggers (the root's gets the records of all others)."""
        for name in logger_names:
            for handler in logging.getLogger(name).handlers:
                if self not in handler.filters:
                    handler.addFilter(self)
