"""What can go wrong with an OpenAI-compatible endpoint, as exceptions the fallback rules
understand (every failure of an edge call falls back; a timeout is a TimeoutError, so the trace
marks its step "timeout"), and the short names (`kind`) that metrics and response headers use.
Messages name the endpoint and its model, never its URL or key, and any text an upstream sent back
passes through `redact` with the client's keys; a JSON value is redacted once decoded
(`redact_value`), where an escaped `sk\\u002d...` reads as the key.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from serving._router_error import RouterError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

REDACTED = "[redacted]"
MAX_DETAIL_CHARS = 300  # of an upstream's error text kept in a message
MIN_SECRET_CHARS = 4  # shorter "keys" (a local server's placeholder such as "x") are not hunted in text


class UpstreamError(RouterError):
    """An endpoint did not give a usable answer; `endpoint` is its name ("edge", "cloud", or any of N)."""

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
    """A short, fixed name for why a call failed (a metrics label, a response header): an
    UpstreamError's kind, else serving.execution._execute's (edge_busy, timeout, connection_error, error)."""
    if isinstance(error, UpstreamError):
        return error.kind
    from serving.execution._execute import failure_kind as call_failure_kind

    return call_failure_kind(error)


def redact(text: str, secrets: Sequence[str], *, cut: bool = False) -> str:
    """`text` with every secret (of MIN_SECRET_CHARS or more) replaced by [redacted]. cut: `text` may end
    where a read stopped (a body read up to a limit), so an end that begins a secret (MIN_SECRET_CHARS
    of it or more) goes too."""
    for secret in _hunted(secrets):
        text = text.replace(secret, REDACTED)
        if cut:
            for length in range(len(secret) - 1, MIN_SECRET_CHARS - 1, -1):
                if text.endswith(secret[:length]):
                    text = text[:-length] + REDACTED
                    break
    return text


class StreamRedactor:
    """One text that arrives in pieces (a stream's content, say), redacted across the pieces: each
    push() gives the text that is safe to show so far, redacted; flush() the rest at the end. The
    joined text is `redact` of the joined pieces (a text cut short: with `cut`), however it was cut.
    Held back is only the end of the text so far that begins a key (at most one character less than
    the longest key), until the next piece says whether the key follows; as `redact` replaces one key
    after the other, each key holds back on its own what the key before it gives.
    (clients/js/src/chat/errors.js's StreamRedactor is the same.)"""

    __slots__ = ("_secrets", "_tails")

    def __init__(self, secrets: Sequence[str]) -> None:
        self._secrets = _hunted(secrets)
        self._tails = [""] * len(self._secrets)  # the end of the text held back for each key

    def push(self, piece: str) -> str:
        """The text of `piece` (and of what was held before it) that no later piece can make part of a key, redacted."""
        for k, secret in enumerate(self._secrets):
            piece, self._tails[k] = _held_back(secret, self._tails[k] + piece)
        return piece

    def flush(self, *, cut: bool = False) -> str:
        """What is held back, redacted (`cut`: the text stopped short, so an end that begins a key
        goes too); the redactor starts afresh."""
        text = ""
        for k, secret in enumerate(self._secrets):
            text, tail = _held_back(secret, self._tails[k] + text)
            text += redact(tail, (secret,), cut=cut)
            self._tails[k] = ""
        return text

    def __repr__(self) -> str:  # never the keys, nor what is held of them
        return f"StreamRedactor({len(self._secrets)} keys)"


def _held_back(secret: str, text: str) -> tuple[str, str]:
    """(`text` up to where `secret` may still begin, with `secret` redacted; the rest, held back)."""
    cut = len(text) - _key_start(secret, text)
    # Never cut in two a key `redact` replaces (as str.replace finds them: leftmost first, not
    # overlapping): one that starts before the cut is whole in `text`, so the cut moves to its end.
    at = text.find(secret)
    while at != -1 and at < cut:
        cut = max(cut, at + len(secret))
        at = text.find(secret, at + len(secret))
    return text[:cut].replace(secret, REDACTED), text[cut:]


def _key_start(secret: str, text: str) -> int:
    """The length of the longest end of `text` that begins the key (and is not all of it)."""
    at = text.find(secret[0], max(0, len(text) - len(secret) + 1))
    while at != -1:
        if secret.startswith(text[at:]):
            return len(text) - at
        at = text.find(secret[0], at + 1)
    return 0


def redact_value(value: Any, secrets: Sequence[str], text: str | None = None) -> Any:  # Any: JSON of any shape
    """A decoded JSON value (dicts, lists, strings, numbers) with every secret in its strings and
    keys replaced; `value` itself when none holds one (so a caller can tell nothing changed).
    text: the JSON text `value` was decoded from, if known (a str: bytes may be UTF-16); one holding
    no secret and no escape decodes to strings holding none either, so `value` is not walked."""
    secrets = _hunted(secrets)
    if not secrets or (text is not None and "\\" not in text and not any(s in text for s in secrets)):
        return value
    return _redacted(value, secrets)


def redacted_json(value: Any, secrets: Sequence[str]) -> str:
    """`value` as JSON text (ASCII) holding no secret: redacted as decoded, then as written."""
    return redact(json.dumps(redact_value(value, secrets), default=str), secrets)


def _hunted(secrets: Iterable[str]) -> tuple[str, ...]:
    return tuple(s for s in secrets if s and len(s) >= MIN_SECRET_CHARS)


def _redacted(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets) if any(s in value for s in secrets) else value
    if isinstance(value, dict):
        items = [(_redacted(k, secrets), _redacted(v, secrets)) for k, v in value.items()]
        changed = any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(items, value.items()))
        return dict(items) if changed else value
    if isinstance(value, list):
        items = [_redacted(v, secrets) for v in value]
        return items if any(v is not v0 for v, v0 in zip(items, value)) else value
    return value
