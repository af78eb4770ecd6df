"""Reading what an OpenAI-compatible server sent back: a chat completion, or the chunks of a streamed
one. Anything that is not one is UpstreamMalformed, which falls back like any other edge failure."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

from serving.chat._errors import MAX_DETAIL_CHARS, StreamRedactor, UpstreamMalformed, _hunted, redact, redacted_json

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn, TypeVar

    from serving._json_types import JSONObject

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


# A choice's delta fields a stream spells out piece by piece, which a caller joins (as it does a function
# call's and each tool call's arguments); the others (role, a tool call's id or name) come whole.
DELTA_TEXTS = ("content", "refusal", "reasoning_content", "reasoning")


class ChunkRedactor:
    """A stream's chunks as the caller gets them, with each text they spell out (DELTA_TEXTS, a
    function call's or a tool call's arguments) redacted across chunks by a StreamRedactor of its
    own; what is held back comes in the choice's finish chunk, or in one more chunk by end(). With
    no key to hunt, chunks pass as they are. (clients/js/src/chat/responses.js's ChunkRedactor is the same.)"""

    def __init__(self, secrets: Sequence[str]) -> None:
        self._secrets = _hunted(secrets)
        self._texts: dict[tuple[int, str], StreamRedactor] = {}  # (choice index, place) -> its redactor
        self._last: Mapping[str, Any] | None = None  # the latest chunk: end()'s chunk carries its id and model

    def __repr__(self) -> str:  # never the keys, nor what is held of them
        return f"ChunkRedactor({len(self._secrets)} keys, {len(self._texts)} texts)"

    def chunk(self, chunk: Chunk) -> Chunk:
        """`chunk` with its texts cut where a key could still follow (held back), redacted; `chunk`
        itself when that changes nothing."""
        choices = chunk.get("choices")
        if not self._secrets or not isinstance(choices, list):
            return chunk
        self._last = chunk
        out = list(choices)
        for position, choice in enumerate(choices):
            if isinstance(choice, Mapping):
                index = _index(choice, position)
                delta = choice.get("delta")
                new = self._delta(index, delta) if isinstance(delta, Mapping) else delta
                if choice.get("finish_reason"):  # the choice's texts are complete
                    new = self._flushed(index, new)
                if new is not delta:
                    out[position] = {**choice, "delta": new}
        if all(new is old for new, old in zip(out, choices)):
            return chunk
        return {**chunk, "choices": out}  # type: ignore[return-value]  # a chunk as the input was

    def end(self, *, cut: bool = False) -> JSONObject | None:
        """What is still held back, as one more chunk (None when nothing is); `cut`: the stream
        broke, so an end that begins a key goes too."""
        choices: list[Any] = []
        for index in dict.fromkeys(key[0] for key in self._texts):  # each choice holding text, once
            delta = self._flushed(index, None, cut=cut)
            if delta is not None:
                choices.append({"index": index, "delta": delta, "finish_reason": None})
        if not choices:
            return None
        last = self._last or {}
        made: JSONObject = {"id": "chatcmpl-redacted", "object": "chat.completion.chunk"}
        made.update({name: last[name] for name in ("id", "object", "created", "model") if name in last})
        return {**made, "choices": choices}

    def _delta(self, index: int, delta: Mapping[str, Any]) -> Mapping[str, Any]:
        """`delta` with its texts pushed through their redactors; `delta` itself when that changes none."""
        out = dict(delta)
        for field in DELTA_TEXTS:
            if isinstance(delta.get(field), str):
                out[field] = self._push(index, field, delta[field])
        call = delta.get("function_call")
        if isinstance(call, Mapping) and isinstance(call.get("arguments"), str):
            out["function_call"] = {**call, "arguments": self._push(index, "function_call", call["arguments"])}
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            out["tool_calls"] = pushed = list(calls)
            for position, tool in enumerate(calls):
                function = tool.get("function") if isinstance(tool, Mapping) else None
                if isinstance(function, Mapping) and isinstance(function.get("arguments"), str):
                    arguments = self._push(index, f"tool_calls/{_index(tool, position)}", function["arguments"])
                    pushed[position] = {**tool, "function": {**function, "arguments": arguments}}
        return out if out != delta else delta

    def _push(self, index: int, place: str, piece: str) -> str:
        redactor = self._texts.get((index, place))
        if redactor is None:
            redactor = self._texts[index, place] = StreamRedactor(self._secrets)
        return redactor.push(piece)

    def _flushed(self, index: int, delta: Any, *, cut: bool = False) -> Any:
        """`delta` (None: none) with what is held back of the choice's texts appended, redacted;
        `delta` itself when nothing is."""
        out = delta
        for key in [key for key in self._texts if key[0] == index]:
            tail = self._texts.pop(key).flush(cut=cut)
            if not tail:
                continue
            place = key[1]
            out = dict(out) if isinstance(out, Mapping) else {}
            if place in DELTA_TEXTS:
                out[place] = _text(out.get(place)) + tail
            elif place == "function_call":
                call = out.get("function_call")
                call = call if isinstance(call, Mapping) else {}
                out["function_call"] = {**call, "arguments": _text(call.get("arguments")) + tail}
            else:  # tool_calls/<index>
                number = int(place.split("/")[1])
                calls = list(out["tool_calls"]) if isinstance(out.get("tool_calls"), list) else []
                at = next((i for i, c in enumerate(calls) if isinstance(c, Mapping) and _index(c, i) == number), None)
                if at is None:  # the delta has no entry for this tool call: one is added
                    at = len(calls)
                    calls.append({"index": number, "function": {}})
                tool: Mapping[str, Any] = calls[at]
                function: Mapping[str, Any] = tool["function"] if isinstance(tool.get("function"), Mapping) else {}
                calls[at] = {**tool, "function": {**function, "arguments": _text(function.get("arguments")) + tail}}
                out["tool_calls"] = calls
        return out


def _index(item: Mapping[str, Any], position: int) -> int:
    """An item's `index` (a choice's, a tool call's) when it is an integer, else its position."""
    index = item.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else position


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
