"""One chat request, checked once before anything is sent (ChatRequest): messages the API takes,
no `model` or `messages` among the parameters, and only numbers JSON can carry. Python's json
module reads NaN, Infinity and a number too large for a double (1e999, as infinity) and writes
them back as NaN / Infinity, which is not JSON: a strict server refuses such a request, a lax one
reads something else. So a request holding one is the caller's error, named with where it is,
before any call (the proxy answers it with 400).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from serving.chat._conversation import check_messages, conversation_prompt
from serving.endpoints._capabilities import NO_NEEDS, Needs, needs_of

if TYPE_CHECKING:
    from serving.chat._conversation import Message

MAX_PATH_CHARS = 200  # of where the number is, in a message
RESERVED = ("model", "messages")  # set by the client, never a request parameter


@dataclass(frozen=True)
class ChatRequest:
    """A chat request as checked (ChatRequest.build builds it): `messages`, `params` (every other
    chat-completions parameter, JSON values sent as they are), `prompt`, the text the router routes
    (a serving.execution._execute.Routable), and `needs`, the capabilities it needs of its endpoint
    (image parts, tools, a JSON response format: serving.endpoints._capabilities.needs_of)."""

    messages: Sequence[Message]
    params: Mapping[str, Any]  # Any: JSON values of any shape
    prompt: str
    needs: Needs = NO_NEEDS

    @classmethod
    def build(
        cls,
        messages: Sequence[Message],
        params: Mapping[str, Any],
        to_prompt: Callable[[Sequence[Message]], str] = conversation_prompt,
    ) -> "ChatRequest":
        """The checked request (module doc), its prompt read by `to_prompt`: TypeError for `model=` or
        `messages=` among the params or a prompt that is not a str, ValueError for bad messages or numbers."""
        for name in RESERVED:
            if name in params:
                raise TypeError(
                    f"{name}= is not a request parameter here: the model is set per Endpoint, "
                    "the messages are the first argument"
                )
        check_json_numbers(check_messages(messages), "messages")
        check_json_numbers(params)
        prompt = to_prompt(messages)
        if not isinstance(prompt, str):
            raise TypeError(f"to_prompt must return the prompt as a str, got {type(prompt).__name__}")
        return cls(messages, params, prompt, needs_of(messages, params))


def check_json_numbers(value: Any, where: str = "") -> None:
    """ValueError naming the first number in `value` (nested dicts and lists) that JSON cannot
    carry, e.g. "temperature is NaN" or "messages[0].weight is Infinity". Walks with a stack of its
    own, not by recursion, so a body nested as deep as the JSON parser allows is walked too."""
    stack = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            shown = path if len(path) <= MAX_PATH_CHARS else path[:MAX_PATH_CHARS] + "..."
            name = "NaN" if math.isnan(item) else "Infinity" if item > 0 else "-Infinity"
            raise ValueError(
                f"{shown or 'the value'} is {name}: JSON has no NaN or Infinity (a number beyond "
                "±1.8e308 reads as Infinity too); send a finite number"
            )
        if isinstance(item, Mapping):
            stack.extend(reversed([(f"{path}.{key}" if path else str(key), v) for key, v in item.items()]))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(item)]))
