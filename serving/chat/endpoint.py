"""One OpenAI-compatible chat-completions server, as the routed chat client sees it: where it
is, which model, how long to wait for it, and what its tokens cost."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from typing import TypeGuard

    from serving.endpoints import Capabilities

log = logging.getLogger("serving.chat")


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server and model: llama.cpp's server, Ollama, vLLM, MLC or a cloud API.

    base_url: the API root, as OpenAI clients take it, e.g. "http://127.0.0.1:8080/v1";
        requests go to `base_url + "/chat/completions"`. No credentials in it: put the key in
        `api_key`, which is sent as `Authorization: Bearer ...` and never printed (repr hides it).
    model: the model name the server expects in the request.
    timeout_s: an answer, streamed or not, must be complete within this, from the call to its
        last byte (connecting, the headers and the whole body), however slowly the server sends;
        a stream's first chunk too, unless `first_token_timeout_s` is shorter.
    connect_timeout_s: for opening the connection.
    first_token_timeout_s: a stream's first chunk must arrive within this (at most `timeout_s`).
        An edge stream that misses it falls back to the cloud; a cloud stream that misses it fails.
    input_price_per_1m, output_price_per_1m: price of a million prompt / completion tokens, in
        any currency; both set to get `routing.estimated_cost`. 0 for a model on the device.
    max_response_bytes: a larger non-streamed answer (or streamed event) is refused as malformed.
    headers: sent with every request (e.g. an organisation header); not for the key.
    capabilities: what the model accepts (serving.endpoints.Capabilities: images, tools, json; a
        flag left out is false), or None, the default: not declared, so not a constraint. When
        declared, a request needing what it lacks (serving.capabilities) is never sent to it.
    """

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    connect_timeout_s: float = 5.0
    first_token_timeout_s: float | None = None
    input_price_per_1m: float | None = None
    output_price_per_1m: float | None = None
    max_response_bytes: int = 8 << 20
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    capabilities: Capabilities | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url) if isinstance(self.base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"base_url={self.base_url!r}: expected an http:// or https:// URL such as 'http://127.0.0.1:8080/v1'"
            )
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("base_url must not carry credentials, a query or a fragment: put the key in api_key")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model={self.model!r}: give the model name the server expects")
        for name in ("timeout_s", "connect_timeout_s", "first_token_timeout_s"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ValueError(f"{name}={value!r}: must be a positive number of seconds")
        for name in ("input_price_per_1m", "output_price_per_1m"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 <= value < math.inf):
                raise ValueError(f"{name}={value!r}: must be a non-negative price or None")
        if not isinstance(self.max_response_bytes, int) or self.max_response_bytes < 1024:
            raise ValueError(f"max_response_bytes={self.max_response_bytes!r}: must be an integer >= 1024")
        if any(name.lower() == "authorization" for name in self.headers):
            raise ValueError("headers must not carry Authorization: put the key in api_key")
        if self.capabilities is not None:
            from serving.endpoints import Capabilities

            if not isinstance(self.capabilities, Capabilities):
                raise ValueError(
                    f"capabilities must be a serving.endpoints.Capabilities or None, got {type(self.capabilities).__name__}"
                )

    @property
    def url(self) -> str:
        """Where chat completions are posted."""
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def first_chunk_timeout_s(self) -> float:
        return self.first_token_timeout_s or self.timeout_s

    def request_headers(self) -> dict[str, str]:
        headers = {**self.headers, "Accept": "application/json, text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def cost(self, usage: Any) -> float | None:
        """The price of one answer from its `usage` ({"prompt_tokens", "completion_tokens"});
        None when a price is not configured or the usage is missing, and None with a warning
        when its counts are not token counts (integers from 0 to below MAX_TOKEN_COUNT: an
        upstream's 400-digit count is no price). Never raises, whatever the usage holds."""
        if self.input_price_per_1m is None or self.output_price_per_1m is None or usage is None:
            return None
        counts = token_counts(usage)
        if counts is None:
            log.warning("the usage of an answer of %s holds no token counts: its cost is unknown", self.model)
            return None
        cost = (counts[0] * self.input_price_per_1m + counts[1] * self.output_price_per_1m) / 1e6
        return cost if math.isfinite(cost) else None


MAX_TOKEN_COUNT = 10**9  # a usage count at or over this is not a count of one answer's tokens


def token_counts(usage: object) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) of an answer's usage when both are token counts
    (integers from 0 to below MAX_TOKEN_COUNT; JSON's true is not one), else None."""
    if not isinstance(usage, Mapping):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt, completion) if _is_count(prompt) and _is_count(completion) else None


def _is_count(n: object) -> TypeGuard[int]:
    """A token count: an integer from 0 to below MAX_TOKEN_COUNT (JSON's true is not one)."""
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n < MAX_TOKEN_COUNT
