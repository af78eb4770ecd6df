"""Reading what an OpenAI-compatible server sent back: a chat completion, or the chunks of a
streamed one. Anything that is not one is UpstreamMalformed, which falls back like any other
edge failure."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

from serving.chat.errors import MAX_DETAIL_CHARS, UpstreamMalformed, redact, redacted_json

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn, TypeVar

    from serving.json_types import JSONObject

    Chunk = TypeVar("Chunk", bound=Mapping[str, Any])  # a stream event's object, as decoded


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def parse_json_object(endpoint: str, raw: bytes | str, what: str) -> JSONObject:
    """The JSON object in `raw`; UpstreamMalformed when it is not one (NaN and Infinity included,
    which Python reads but JSON does not have)."""
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # ValueError covers JSONDecodeError and bad UTF-8
        raise UpstreamMalformed(endpoint, f"{what} is not valid JSON ({exc})"[:MAX_DETAIL_CHARS]) from None
    if not isinstance(value, dict):
        raise UpstreamMalformed(endpoint, f"{what} is JSON but not an object")
    return value


def completion_text(endpoint: str, body: Mapping[str, Any]) -> str:
    """The assistant text of a chat completion body (its first choice); "" for a tool-call-only
    answer. UpstreamMalformed when the body has no choice with a message."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise UpstreamMalformed(endpoint, "the answer has no 'choices' (not a chat completion)")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise UpstreamMalformed(endpoint, "the answer's first choice has no 'message'")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    raise UpstreamMalformed(endpoint, "the answer's message content is neither text nor null")


def check_chunk(endpoint: str, chunk: Chunk, secrets: Sequence[str] = ()) -> Chunk:
    """A stream event's object, if it is a chunk; UpstreamMalformed for an error event (its text
    redacted of the secrets) or a non-chunk."""
    if "error" in chunk:
        detail = redacted_json(chunk["error"], secrets)
        raise UpstreamMalformed(endpoint, f"the stream carried an error: {detail}"[:MAX_DETAIL_CHARS])
    if not isinstance(chunk.get("choices", []), list):
        raise UpstreamMalformed(endpoint, "a stream chunk has 'choices' that is not a list")
    return chunk


def starts_answer(chunk: Mapping[str, Any]) -> bool:
    """Whether a chunk carries the answer's first token: content, a tool call, or the finish
    (an empty answer). A role-only chunk or a usage-only chunk does not."""
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        delta = choice.get("delta")
        if isinstance(delta, Mapping) and (delta.get("content") or delta.get("tool_calls")):
            return True
        if choice.get("finish_reason"):
            return True
    return False


def chunk_usage(chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The usage a chunk reports (the last chunk, when asked with stream_options.include_usage), or None."""
    usage = chunk.get("usage")
    return usage if isinstance(usage, Mapping) else None


def error_detail(raw: bytes, secrets: Sequence[str]) -> str:
    """The message of an HTTP error body ({"error": {"message": ...}}, {"error": "..."}, or text),
    with the secrets redacted, shortened. Redacted as the message reads: after the JSON escapes
    are decoded (`sk\\u002d...` is the key), before anything is cut, and an end that begins a key
    goes too (`raw` may stop where the read of a long body stopped), so no part of a key survives."""
    text = raw.decode(json.detect_encoding(raw), "replace")  # as json.loads reads bytes: UTF-8, -16 or -32
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body))
        if isinstance(error, dict):
            error = error.get("message", error)
        text = error if isinstance(error, str) else redacted_json(error, secrets)
    return redact(" ".join(text.split()), secrets, cut=body is None)[:MAX_DETAIL_CHARS]
