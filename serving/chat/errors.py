"""What can go wrong with an OpenAI-compatible endpoint, as exceptions the fallback rules
understand, and the short names (`kind`) that metrics and response headers use for them.

Every failure of an edge call, whatever its cause, falls back to the cloud (serving.execute);
a timeout is a TimeoutError, so the execution trace marks its step "timeout". Messages name
the endpoint ("edge"/"cloud") and its model, never its URL or key, and any text an upstream
sent back passes through `redact` with that endpoint's key first, so a server that echoes the
key cannot put it into an error, a log line or a proxy response.
"""
from __future__ import annotations

REDACTED = "[redacted]"
MAX_DETAIL_CHARS = 300  # of an upstream's error text kept in a message
MIN_SECRET_CHARS = 4    # shorter "keys" (a local server's placeholder such as "x") are not hunted in text


class UpstreamError(Exception):
    """An endpoint did not give a usable answer. `endpoint` is "edge" or "cloud"."""

    kind = "error"

    def __init__(self, endpoint: str, message: str):
        super().__init__(f"{endpoint}: {message}")
        self.endpoint = endpoint


class UpstreamUnreachable(UpstreamError, ConnectionError):
    """No connection, or the connection broke before a complete answer."""

    kind = "connection_error"


class UpstreamTimeout(UpstreamError, TimeoutError):
    """No complete answer within the endpoint's `timeout_s`."""

    kind = "timeout"


class SlowFirstToken(UpstreamTimeout):
    """A stream's first chunk did not arrive within `first_token_timeout_s`."""

    kind = "slow_first_token"


class UpstreamHTTPError(UpstreamError):
    """The endpoint answered with an HTTP error status; `status` is it, `detail` its redacted message."""

    kind = "http_error"

    def __init__(self, endpoint: str, message: str, *, status: int, detail: str = ""):
        super().__init__(endpoint, message)
        self.status, self.detail = status, detail


class UpstreamMalformed(UpstreamError):
    """The endpoint answered 2xx, but not with a chat completion (not JSON, no choices, too large...)."""

    kind = "malformed"


class StreamInterrupted(UpstreamError):
    """A stream broke after chunks had reached the caller: too late for a fallback."""

    kind = "stream_interrupted"


def failure_kind(error: BaseException | None) -> str:
    """A short, fixed name for why a call failed (a metrics label, a response header)."""
    if isinstance(error, UpstreamError):
        return error.kind
    if error is None:
        return "none"
    if type(error).__name__ == "EdgeBusy":  # serving.execute's; compared by name to keep this module free-standing
        return "edge_busy"
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, ConnectionError):
        return "connection_error"
    return "error"


def redact(text: str, secrets) -> str:
    """`text` with every secret (of MIN_SECRET_CHARS or more) replaced by [redacted]."""
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
    return text
