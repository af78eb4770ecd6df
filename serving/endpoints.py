"""Endpoints as data: the one record of a model a request may run on (docs/endpoints.md).

`Endpoint` (exported as `serving.Endpoint`, and as `serving.chat.Endpoint`) holds everything the
SDK knows of one endpoint:

- what the router decides with: `name`, `where` it runs (device | cloud), `price` (Price: per 1M
  input, output and cached-input tokens, and per call), `latency_ms`, `context_tokens`,
  `capabilities`, and `prefill_tokens_per_s` (how fast it reads a prompt; parsed and checked, not
  used yet). None is "not declared" for each of them;
- how it is called (all optional: an endpoint a bundle's manifest describes is only decided
  about): `base_url`, `model`, `api_key` (never in repr, str or a log line), `timeout_s`,
  `connect_timeout_s`, `first_token_timeout_s`, `max_response_bytes`, `headers`, and `params`,
  extra chat-completions parameters merged into every request sent to it (the endpoint's win
  over the request's: one model at two reasoning efforts is two endpoints; `model` is always the
  endpoint's).

Two costs, two methods: `call_cost(input_tokens, output_tokens)`, what a call of that size is
expected to cost (what the choosers price), and `answer_cost(usage)`, what an answer cost by its
`usage` (what RoutedChat reports).

Spec files and manifests:

    {"endpoints": [
      {"name": "phone-3b", "where": "device", "price": {"per_call": 0},
       "latency_ms": 120, "context_tokens": 4096, "capabilities": {"json": true, "languages": ["en"]}},
      {"name": "frontier", "where": "cloud", "price": {"per_1m_input": 3, "per_1m_output": 15},
       "latency_ms": 900, "context_tokens": 200000, "capabilities": {"images": true, "tools": true, "json": true},
       "base_url": "https://api.example.com/v1", "model": "big-model", "params": {"reasoning_effort": "high"}}
    ]}

The writer (`as_dict`) gives prices per 1M tokens; the reader also takes the earlier
`per_1k_input` / `per_1k_output`, as 1,000 times as much, and prices calls with the figure the file
gave, so a spec or a bundle written before costs exactly what it did, to the last bit. Call
settings are read from spec files (`call_settings=True`, the default), never from a manifest, and
a key never: the proxy's `--endpoints` file names the variable holding it (`key_env`).

Today's two-endpoint spelling, `{"edge": {...}, "cloud": {...}}`, is the same thing with two
endpoints named "edge" and "cloud" (each object an endpoint without its name; `where` defaults to
device and cloud, and every other field to baseline.md's figures).

Every field is checked when parsed; an error (EndpointSpecError) names the source, the endpoint
and the field, on one line that quotes values shortened (serving.documents.quoted). A spec file
is read by serving.documents: at most 1 MiB, nested at most 32 levels, no YAML aliases, no key
twice, every YAML key text (an unquoted `on:` is refused). The order of the list is kept: it is the order in which figures list endpoints,
never a preference (choosing among endpoints is evaluation.endpoints' job). Standard library
only, so any part of the SDK can read it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from serving.contract import CLOUD, DEFAULT_EDGE_CONTEXT_TOKENS, EDGE
from serving.documents import quoted, read_document
from serving.json_values import finite_number
from serving.language import serves
from serving.router_error import RouterError

if TYPE_CHECKING:
    from typing import TypeGuard

log = logging.getLogger("serving.chat")

WHERE = ("device", "cloud")
PRICE_KEYS = ("per_1m_input", "per_1m_output", "per_1m_cached_input", "per_call")
PER_1K_KEYS = ("per_1k_input", "per_1k_output")  # the earlier spelling, still read (x 1000)
CAPABILITY_FLAGS = ("images", "tools", "json")
CAPABILITY_KEYS = (*CAPABILITY_FLAGS, "languages")
ENDPOINT_KEYS = (
    "name",
    "where",
    "price",
    "latency_ms",
    "context_tokens",
    "capabilities",
    "description",
    "prefill_tokens_per_s",
)
# How an endpoint is called, in a spec file (never in a manifest; never the key itself).
CALL_KEYS = (
    "base_url",
    "model",
    "timeout_s",
    "connect_timeout_s",
    "first_token_timeout_s",
    "max_response_bytes",
    "headers",
    "params",
)
# What the decision reads: filled from another record where this one declares none (filled_from).
DECISION_FIELDS = ("where", "price", "latency_ms", "context_tokens", "capabilities", "prefill_tokens_per_s")
# Set by the client for every request, never by an endpoint's params: the model is the endpoint's,
# the messages the request's, and a stream is asked for by the caller.
RESERVED_PARAMS = ("model", "messages", "stream", "stream_options")
FILE_KEYS = ("endpoints", "description")
MAX_ENDPOINTS = 64
MAX_SPEC_BYTES = 1 << 20
MAX_TOKEN_COUNT = 10**9  # a usage count at or over this is not a count of one answer's tokens
# A name is written to logs, figures and headers as is: a short code, no spaces.
NAME_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
# The two-endpoint spelling's defaults (baseline.md: phone 120 ms and free; FP8 cloud $0.003 a
# request, 200 ms + 50 ms network). Context: the edge's default limit; the cloud's a large model's.
TWO_ENDPOINT_DEFAULTS: dict[str, dict[str, Any]] = {
    EDGE: {
        "where": "device",
        "price": {"per_call": 0.0},
        "latency_ms": 120.0,
        "context_tokens": DEFAULT_EDGE_CONTEXT_TOKENS,
    },
    CLOUD: {"where": "cloud", "price": {"per_call": 0.003}, "latency_ms": 250.0, "context_tokens": 128_000},
}


class EndpointSpecError(RouterError, ValueError):
    """An endpoint spec that cannot be used; the message names the source, the endpoint and the field."""


def _scaled(value: float, digits: int) -> float:
    """`value` x 10**digits in decimal, then the nearest float: 3e-05 per 1k is 0.03 per 1M, not
    0.030000000000000002 (and back again exactly, for any price written in decimal)."""
    return float(Decimal(repr(float(value))).scaleb(digits))


@dataclass(frozen=True, init=False)
class Price:
    """Per 1M input tokens, per 1M output tokens, per 1M cached input tokens (None: priced as
    input), and per call; all >= 0, in one currency (dollars in the specs here).

    Calls are priced per 1,000 tokens, as they always were: the per-1M figure / 1000 (in decimal,
    so exactly the per-1k price a spec used to say), or, for a price read from `per_1k_*` keys
    (Price.from_per_1k), the figure the spec gave, so an old spec or bundle prices every call
    exactly as before."""

    per_1m_input: float
    per_1m_output: float
    per_call: float
    per_1m_cached_input: float | None
    if TYPE_CHECKING:  # not fields: the per-1k rates calls are priced with, set by __init__ (and from_per_1k)
        _input_1k: float
        _output_1k: float
        _cached_1k: float | None

    def __init__(
        self,
        per_1m_input: float = 0.0,
        per_1m_output: float = 0.0,
        per_call: float = 0.0,
        per_1m_cached_input: float | None = None,
    ) -> None:
        given = {"per_1m_input": per_1m_input, "per_1m_output": per_1m_output, "per_call": per_call}
        if per_1m_cached_input is not None:
            given["per_1m_cached_input"] = per_1m_cached_input
        for key, value in given.items():
            number = finite_number(value)
            if number is None or number < 0:
                raise EndpointSpecError(f"price {key}={quoted(value)}: must be a finite number >= 0")
            object.__setattr__(self, key, number)
        if per_1m_cached_input is None:
            object.__setattr__(self, "per_1m_cached_input", None)
        # The per-1k rates calls are priced with: see the class doc.
        object.__setattr__(self, "_input_1k", _scaled(self.per_1m_input, -3))
        object.__setattr__(self, "_output_1k", _scaled(self.per_1m_output, -3))
        cached = self.per_1m_cached_input
        object.__setattr__(self, "_cached_1k", None if cached is None else _scaled(cached, -3))

    @classmethod
    def from_per_1k(
        cls,
        per_1k_input: float = 0.0,
        per_1k_output: float = 0.0,
        per_call: float = 0.0,
        per_1m_cached_input: float | None = None,
    ) -> "Price":
        """The price a spec gave per 1,000 tokens: its per-1M figures 1,000 times as much, and
        calls priced with the given per-1k figures themselves (bit for bit as before)."""
        price = cls(_scaled(per_1k_input, 3), _scaled(per_1k_output, 3), per_call, per_1m_cached_input)
        object.__setattr__(price, "_input_1k", float(per_1k_input))
        object.__setattr__(price, "_output_1k", float(per_1k_output))
        return price

    def call_cost(self, input_tokens: float, output_tokens: float = 0.0, cached_input_tokens: float = 0.0) -> float:
        """The price of one call with that many input tokens (of them `cached_input_tokens` read
        from the endpoint's prompt cache) and output tokens."""
        if not cached_input_tokens:  # the arithmetic every price has always had
            return self.per_call + self._input_1k * input_tokens / 1000.0 + self._output_1k * output_tokens / 1000.0
        cached = min(cached_input_tokens, input_tokens)
        cached_rate = self._input_1k if self._cached_1k is None else self._cached_1k
        return (
            self.per_call
            + self._input_1k * (input_tokens - cached) / 1000.0
            + cached_rate * cached / 1000.0
            + self._output_1k * output_tokens / 1000.0
        )

    def as_dict(self) -> dict[str, float]:
        out = {"per_1m_input": self.per_1m_input, "per_1m_output": self.per_1m_output, "per_call": self.per_call}
        if self.per_1m_cached_input is not None:
            out["per_1m_cached_input"] = self.per_1m_cached_input
        return out


@dataclass(frozen=True)
class Capabilities:
    """What an endpoint accepts; `languages` None when not known (then it is not a constraint)."""

    images: bool = False
    tools: bool = False
    json: bool = False
    languages: tuple[str, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"images": self.images, "tools": self.tools, "json": self.json}
        if self.languages is not None:
            out["languages"] = list(self.languages)
        return out


def _seconds(name: str, value: object, *, optional: bool) -> float | None:
    if value is None and optional:
        return None
    number = finite_number(value)
    if number is None or number <= 0:
        raise EndpointSpecError(f"{name}={quoted(value)}: must be a positive number of seconds")
    return number


@dataclass(frozen=True, init=False, repr=False)
class Endpoint:
    """One endpoint (the module doc): what the router decides with, and how it is called.

    Endpoint(base_url, model, *, name=None, where=None, price=None, latency_ms=None,
    context_tokens=None, capabilities=None, description="", prefill_tokens_per_s=None,
    api_key=None, timeout_s=60, connect_timeout_s=5, first_token_timeout_s=None,
    max_response_bytes=8 MiB, headers=None, params=None)

    name: a short code (letters, digits, _ . : -; at most 64); "" (the default): not named yet.
        RoutedChat names an endpoint given as edge=, cloud= or endpoints={name: ...} by that key
        when it has none.
    where: "device" or "cloud"; None: not declared.
    price: a Price (per 1M tokens and per call), or None: not declared (answer_cost is then None).
        The earlier keywords `input_price_per_1m` and `output_price_per_1m` are still taken: they
        set those two figures of the price (a figure not given is 0).
    latency_ms: the expected latency of one call. context_tokens: the longest prompt it takes.
    capabilities: serving.endpoints.Capabilities (a flag left out is false), or None: not declared,
        so not a constraint. When declared, a request needing what it lacks is never sent to it.
    prefill_tokens_per_s: how many prompt tokens a second it reads (not used by any decision yet).
    base_url: the API root, as OpenAI clients take it, e.g. "http://127.0.0.1:8080/v1"; requests
        go to `base_url + "/chat/completions"`. No credentials in it: the key goes in `api_key`,
        which is sent as `Authorization: Bearer ...` and never shown (repr, str, logs).
    model: the model name the server expects; always the one sent.
    timeout_s: an answer, streamed or not, must be complete within this, from the call to its last
        byte, however slowly the server sends. connect_timeout_s: for opening the connection.
    first_token_timeout_s: a stream's first chunk must arrive within this (at most `timeout_s`).
    max_response_bytes: a larger answer (or streamed event) is refused as malformed.
    headers: sent with every request (e.g. an organisation header); not for the key.
    params: chat-completions parameters merged into every request sent to it, e.g.
        {"reasoning_effort": "high", "max_tokens": 512}; where the request gives one too, the
        endpoint's wins (what the router chose is this endpoint as configured). JSON values only,
        no NaN or infinity; never model, messages, stream or stream_options.

    Wrong values are an EndpointSpecError (a ValueError) naming the field.
    """

    name: str
    where: str | None
    price: Price | None
    latency_ms: float | None
    context_tokens: int | None
    capabilities: Capabilities | None
    description: str
    prefill_tokens_per_s: float | None
    base_url: str | None
    model: str | None
    api_key: str | None = field(repr=False)
    timeout_s: float
    connect_timeout_s: float
    first_token_timeout_s: float | None
    max_response_bytes: int
    headers: Mapping[str, str] = field(repr=False, hash=False)
    params: Mapping[str, Any] = field(hash=False)  # Any: JSON values

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        *,
        name: str = "",
        where: str | None = None,
        price: Price | None = None,
        latency_ms: float | None = None,
        context_tokens: int | None = None,
        capabilities: Capabilities | None = None,
        description: str = "",
        prefill_tokens_per_s: float | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        first_token_timeout_s: float | None = None,
        max_response_bytes: int = 8 << 20,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        input_price_per_1m: float | None = None,
        output_price_per_1m: float | None = None,
    ) -> None:
        if not isinstance(name, str) or (name and not NAME_SHAPE.fullmatch(name)):
            raise EndpointSpecError(f"name={quoted(name)}: must be a short code (letters, digits, _ . : -; at most 64)")
        if where is not None and where not in WHERE:
            raise EndpointSpecError(f"where={quoted(where)}: must be one of {', '.join(WHERE)}")
        if input_price_per_1m is not None or output_price_per_1m is not None:  # the earlier keywords
            base = price or Price()
            price = Price(
                base.per_1m_input if input_price_per_1m is None else input_price_per_1m,
                base.per_1m_output if output_price_per_1m is None else output_price_per_1m,
                base.per_call,
                base.per_1m_cached_input,
            )
        if price is not None and not isinstance(price, Price):
            raise EndpointSpecError(f"price must be a serving.endpoints.Price or None, got {type(price).__name__}")
        if latency_ms is not None:
            latency = finite_number(latency_ms)
            if latency is None or latency < 0:
                raise EndpointSpecError(f"latency_ms={quoted(latency_ms)}: must be a finite number >= 0")
            latency_ms = latency
        if context_tokens is not None and not (
            isinstance(context_tokens, int) and not isinstance(context_tokens, bool) and context_tokens > 0
        ):
            raise EndpointSpecError(f"context_tokens={quoted(context_tokens)}: must be a whole number > 0, or None")
        if capabilities is not None and not isinstance(capabilities, Capabilities):
            raise EndpointSpecError(
                f"capabilities must be a serving.endpoints.Capabilities or None, got {type(capabilities).__name__}"
            )
        if not isinstance(description, str):
            raise EndpointSpecError(f"description must be text, got {type(description).__name__}")
        if prefill_tokens_per_s is not None:
            rate = finite_number(prefill_tokens_per_s)
            if rate is None or rate <= 0:
                raise EndpointSpecError(f"prefill_tokens_per_s={quoted(prefill_tokens_per_s)}: must be a number > 0")
            prefill_tokens_per_s = rate
        if base_url is not None:
            parts = urlsplit(base_url) if isinstance(base_url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise EndpointSpecError(
                    f"base_url={quoted(base_url)}: expected an http:// or https:// URL such as 'http://127.0.0.1:8080/v1'"
                )
            if parts.username or parts.password or parts.query or parts.fragment:
                raise EndpointSpecError(
                    "base_url must not carry credentials, a query or a fragment: put the key in api_key"
                )
        if model is not None and (not isinstance(model, str) or not model):
            raise EndpointSpecError(f"model={quoted(model)}: give the model name the server expects")
        if api_key is not None and not isinstance(api_key, str):
            raise EndpointSpecError(f"api_key must be text or None, got {type(api_key).__name__}")
        timeout = _seconds("timeout_s", timeout_s, optional=False)
        connect = _seconds("connect_timeout_s", connect_timeout_s, optional=False)
        first = _seconds("first_token_timeout_s", first_token_timeout_s, optional=True)
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or max_response_bytes < 1024:
            raise EndpointSpecError(f"max_response_bytes={quoted(max_response_bytes)}: must be an integer >= 1024")
        headers = _headers(headers)
        params = _params(params)
        values = {
            "name": name,
            "where": where,
            "price": price,
            "latency_ms": latency_ms,
            "context_tokens": context_tokens,
            "capabilities": capabilities,
            "description": description,
            "prefill_tokens_per_s": prefill_tokens_per_s,
            "base_url": base_url,
            "model": model,
            "api_key": api_key,
            "timeout_s": timeout,
            "connect_timeout_s": connect,
            "first_token_timeout_s": first,
            "max_response_bytes": max_response_bytes,
            "headers": headers,
            "params": params,
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __repr__(self) -> str:
        """The fields that say something (None, empty and default values left out); never the key
        or the headers."""
        shown = [
            f"{key}={value!r}"
            for key, value in self.__dict__.items()
            if key not in ("api_key", "headers") and value not in (None, "", {}) and _DEFAULTS.get(key) != value
        ]
        return f"Endpoint({', '.join(shown)})"

    __str__ = __repr__

    # What a call costs.
    def call_cost(
        self, input_tokens: float, output_tokens: float = 0.0, cached_input_tokens: float = 0.0
    ) -> float | None:
        """The expected price of one call with that many input (of them cached) and output tokens:
        what the choosers price (serving.endpoint_choice.call_costs); None without a price."""
        if self.price is None:
            return None
        return self.price.call_cost(input_tokens, output_tokens, cached_input_tokens)

    def answer_cost(self, usage: Any) -> float | None:
        """The price of one answer from its `usage` ({"prompt_tokens", "completion_tokens"}, and
        `prompt_tokens_details.cached_tokens` when the price has a cached-input figure): the call's
        price at those counts. None without a price or usage, and None with a warning when the
        counts are not token counts (integers from 0 to below MAX_TOKEN_COUNT: an upstream's
        400-digit count is no price). Never raises, whatever the usage holds."""
        if self.price is None or usage is None:
            return None
        counts = token_counts(usage)
        if counts is None:
            log.warning("the usage of an answer of %s holds no token counts: its cost is unknown", self.model)
            return None
        cached = cached_tokens(usage, counts[0]) if self.price.per_1m_cached_input is not None else 0
        cost = self.price.call_cost(counts[0], counts[1], cached)
        return cost if math.isfinite(cost) else None

    # What it takes.
    def fits(self, input_tokens: float) -> bool:
        """Whether a prompt of `input_tokens` tokens is within its context limit."""
        return self.context_tokens is None or input_tokens <= self.context_tokens

    def supports(
        self, *, images: bool = False, tools: bool = False, json: bool = False, language: str | None = None
    ) -> bool:
        """Whether it has every capability a request needs (an unknown language list allows any;
        languages compare by primary subtag, serving.language.serves)."""
        caps = self.capabilities
        if caps is None:
            return True
        if (images and not caps.images) or (tools and not caps.tools) or (json and not caps.json):
            return False
        return language is None or serves(caps.languages, language)

    # How it is called.
    @property
    def has_call_settings(self) -> bool:
        """Whether it has the call settings a client needs (base_url and model)."""
        return self.base_url is not None and self.model is not None

    def check_callable(self, who: str) -> None:
        """EndpointSpecError naming the endpoint unless it has base_url and model (`who` is what
        was about to call it)."""
        if not self.has_call_settings:
            missing = " and ".join(k for k in ("base_url", "model") if getattr(self, k) is None)
            raise EndpointSpecError(
                f"{who}: endpoint {quoted(self.name)} has no {missing}, so it cannot be called (an endpoint "
                "read from a bundle's manifest is only decided about): give it base_url= and model="
            )

    @property
    def url(self) -> str:
        """Where chat completions are posted."""
        self.check_callable("url")
        assert self.base_url is not None
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def first_chunk_timeout_s(self) -> float:
        return self.first_token_timeout_s or self.timeout_s

    def request_headers(self) -> dict[str, str]:
        headers = {**self.headers, "Accept": "application/json, text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def request_body(self, params: Mapping[str, Any], messages: Sequence[Any]) -> dict[str, Any]:
        """The chat-completions body for a request's `params` and `messages`: the request's
        parameters, this endpoint's `params` over them, then its model and the messages."""
        return {**params, **self.params, "model": self.model, "messages": list(messages)}

    # Records.
    def filled_from(self, other: Endpoint | None) -> Endpoint:
        """This record with each decision field it does not declare (DECISION_FIELDS: None) taken
        from `other` (the bundle's record of the same endpoint, say); itself when nothing is missing."""
        if other is None:
            return self
        missing = {
            key: getattr(other, key)
            for key in DECISION_FIELDS
            if getattr(self, key) is None and getattr(other, key) is not None
        }
        if not self.name and other.name:
            missing["name"] = other.name
        if not missing:
            return self
        filled = object.__new__(Endpoint)
        filled.__dict__.update(self.__dict__, **missing)  # both records were checked: nothing to check again
        return filled

    def as_dict(self, *, call_settings: bool = False) -> dict[str, Any]:
        """The endpoint as a spec file (and a manifest) holds it; with `call_settings`, how it is
        called too (never the key)."""
        out: dict[str, Any] = {
            "name": self.name,
            "where": self.where,
            "price": None if self.price is None else self.price.as_dict(),
            "latency_ms": self.latency_ms,
            "context_tokens": self.context_tokens,
        }
        if self.capabilities is not None:
            out["capabilities"] = self.capabilities.as_dict()
        if self.description:
            out["description"] = self.description
        if self.prefill_tokens_per_s is not None:
            out["prefill_tokens_per_s"] = self.prefill_tokens_per_s
        if call_settings and self.base_url is not None:
            out.update(
                base_url=self.base_url,
                model=self.model,
                timeout_s=self.timeout_s,
                connect_timeout_s=self.connect_timeout_s,
                max_response_bytes=self.max_response_bytes,
            )
            if self.first_token_timeout_s is not None:
                out["first_token_timeout_s"] = self.first_token_timeout_s
            if self.headers:
                out["headers"] = dict(self.headers)
            if self.params:
                out["params"] = json.loads(json.dumps(self.params))
        return out


_DEFAULTS = {"timeout_s": 60.0, "connect_timeout_s": 5.0, "max_response_bytes": 8 << 20}


def _headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise EndpointSpecError("headers must map header names to text")
    if any(name.lower() == "authorization" for name in headers):
        raise EndpointSpecError("headers must not carry Authorization: put the key in api_key")
    return dict(headers)


def _params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of `params` (JSON values only, no NaN or infinity, none of RESERVED_PARAMS)."""
    if params is None:
        return {}
    if not isinstance(params, Mapping) or not all(isinstance(key, str) for key in params):
        raise EndpointSpecError("params must map chat-completions parameter names to JSON values")
    reserved = [key for key in params if key in RESERVED_PARAMS]
    if reserved:
        raise EndpointSpecError(
            f"params must not set {reserved[0]!r}: the model is the endpoint's own `model`, the messages "
            "the request's, and a stream is asked for by the caller"
        )
    try:
        copied: dict[str, Any] = json.loads(json.dumps(dict(params), allow_nan=False))
    except (TypeError, ValueError, OverflowError) as exc:
        raise EndpointSpecError(f"params must hold JSON values only (no NaN or infinity): {exc}") from None
    return copied


def token_counts(usage: object) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) of an answer's usage when both are token counts
    (integers from 0 to below MAX_TOKEN_COUNT; JSON's true is not one), else None."""
    if not isinstance(usage, Mapping):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt, completion) if _is_count(prompt) and _is_count(completion) else None


def cached_tokens(usage: Mapping[str, Any], prompt_tokens: int) -> int:
    """The prompt tokens an answer's usage says were read from the cache
    (`prompt_tokens_details.cached_tokens`); 0 when it says none, or nothing that is a count of at
    most `prompt_tokens`."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return cached if _is_count(cached) and cached <= prompt_tokens else 0


def _is_count(n: object) -> TypeGuard[int]:
    """A token count: an integer from 0 to below MAX_TOKEN_COUNT (JSON's true is not one)."""
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n < MAX_TOKEN_COUNT


@dataclass(frozen=True)
class Endpoints:
    """The endpoints of a deployment, in their spec's order; names are unique."""

    endpoints: tuple[Endpoint, ...]
    source: str = "<endpoints>"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.endpoints)

    def __len__(self) -> int:
        return len(self.endpoints)

    def __iter__(self) -> Iterator[Endpoint]:
        return iter(self.endpoints)

    def __getitem__(self, name: str) -> Endpoint:
        for endpoint in self.endpoints:
            if endpoint.name == name:
                return endpoint
        raise KeyError(f"{self.source}: no endpoint named {quoted(name)}; the endpoints are {', '.join(self.names)}")

    def by_name(self) -> dict[str, Endpoint]:
        """name -> record, in order."""
        return {e.name: e for e in self.endpoints}

    def costs(self, input_tokens: float, output_tokens: float = 0.0) -> dict[str, float | None]:
        """Each endpoint's expected price of one call of that size (Endpoint.call_cost)."""
        return {e.name: e.call_cost(input_tokens, output_tokens) for e in self.endpoints}

    def as_dict(self, *, call_settings: bool = False) -> dict[str, Any]:
        return {"endpoints": [e.as_dict(call_settings=call_settings) for e in self.endpoints]}

    @classmethod
    def from_dict(cls, data: object, *, source: str = "<endpoints>", call_settings: bool = True) -> "Endpoints":
        return parse_endpoints(data, source=source, call_settings=call_settings)

    @classmethod
    def load(cls, path: str | Path) -> "Endpoints":
        return load_endpoints(path)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _number(value: object, where: str, *, integer: bool = False, positive: bool = False) -> float:
    """A finite number >= 0 (> 0 with `positive`; whole with `integer`), or EndpointSpecError at `where`."""
    number = None
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        with contextlib.suppress(OverflowError):  # an integer of 400 digits is no float
            number = float(value)
    if number is None or not math.isfinite(number):
        raise EndpointSpecError(f"{where} must be a finite number, got {_kind(value)} {quoted(value)}")
    if number < 0 or (positive and number == 0):
        raise EndpointSpecError(f"{where} must be {'> 0' if positive else '>= 0'}, got {quoted(value)}")
    if integer and number != int(number):
        raise EndpointSpecError(f"{where} must be a whole number, got {quoted(value)}")
    return number


def _object(value: object, where: str, allowed: Sequence[str]) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise EndpointSpecError(f"{where} must be an object, got {_kind(value)}")
    for key in value:
        if key not in allowed:
            raise EndpointSpecError(f"{where}: unknown key {quoted(key)}; allowed: {', '.join(allowed)}")
    return value


def _price(value: object, where: str) -> Price:
    price = _object(value, where, (*PRICE_KEYS, *PER_1K_KEYS))
    if not any(key in price for key in ("per_1m_input", "per_1m_output", "per_call", *PER_1K_KEYS)):
        raise EndpointSpecError(
            f"{where} is empty: give at least one of per_1m_input, per_1m_output, per_call (0 for free)"
        )
    numbers = {key: _number(price[key], f"{where}.{key}") for key in price}
    per_1k = [key for key in PER_1K_KEYS if key in numbers]
    per_1m = [key for key in ("per_1m_input", "per_1m_output") if key in numbers]
    if per_1k and per_1m:
        raise EndpointSpecError(
            f"{where}: {per_1k[0]} and {per_1m[0]} are two units for one price: give per_1m_input and "
            "per_1m_output (per_1k_* is the earlier spelling, 1,000 times smaller)"
        )
    cached = numbers.get("per_1m_cached_input")
    if per_1k:
        price_value = Price.from_per_1k(
            numbers.get("per_1k_input", 0.0), numbers.get("per_1k_output", 0.0), numbers.get("per_call", 0.0), cached
        )
        for key, scaled in (("per_1k_input", price_value.per_1m_input), ("per_1k_output", price_value.per_1m_output)):
            if not math.isfinite(scaled):
                raise EndpointSpecError(f"{where}.{key} is too large: 1,000 times it is no finite number")
        return price_value
    return Price(
        numbers.get("per_1m_input", 0.0), numbers.get("per_1m_output", 0.0), numbers.get("per_call", 0.0), cached
    )


def _capabilities(value: object, where: str) -> Capabilities:
    caps = _object(value, where, CAPABILITY_KEYS)
    flags: dict[str, bool] = {}
    for key in CAPABILITY_FLAGS:
        flag = caps.get(key, False)
        if not isinstance(flag, bool):
            raise EndpointSpecError(f"{where}.{key} must be true or false, got {_kind(flag)} {quoted(flag)}")
        flags[key] = flag
    languages = caps.get("languages")
    if languages is not None:
        if not isinstance(languages, list) or not languages:
            raise EndpointSpecError(f"{where}.languages must be a non-empty list of language codes, or absent")
        for code in languages:
            if not isinstance(code, str) or not re.fullmatch(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?", code):
                raise EndpointSpecError(
                    f"{where}.languages: {quoted(code)} is not a language code such as 'en' or 'pt-BR'"
                )
    return Capabilities(
        images=flags["images"],
        tools=flags["tools"],
        json=flags["json"],
        languages=None if languages is None else tuple(str(code).lower() for code in languages),
    )


def parse_endpoint(item: object, *, where: str, name: str | None = None, call_settings: bool = True) -> Endpoint:
    """One endpoint from its object; `name` given (the two-endpoint spelling) when the object has
    none. With `call_settings`, the object may say how the endpoint is called (CALL_KEYS)."""
    if not isinstance(item, dict):
        raise EndpointSpecError(f"{where} must be an object, got {_kind(item)}")
    if name is None:
        given = item.get("name")
        if not isinstance(given, str) or not NAME_SHAPE.fullmatch(given):
            raise EndpointSpecError(
                f"{where}.name must be a short code (letters, digits, _ . : -; at most 64), got {_kind(given)} {quoted(given)}"
            )
        name = given
        where = f"{where} ({quoted(name)})"
    elif "name" in item and item["name"] != name:
        raise EndpointSpecError(f"{where}.name is {quoted(item['name'])}; in the two-endpoint spelling it is its key")
    if call_settings and "api_key" in item:
        raise EndpointSpecError(
            f"{where}.api_key: a key never goes in a file; the proxy's --endpoints file names the environment "
            "variable that holds it (key_env), and RoutedChat takes Endpoint(..., api_key=...)"
        )
    fields = _object(item, where, (*ENDPOINT_KEYS, *CALL_KEYS) if call_settings else ENDPOINT_KEYS)
    for key in ("where", "price", "latency_ms", "context_tokens"):
        if key not in fields:
            raise EndpointSpecError(f"{where}: missing field {key!r}")
    place = fields["where"]
    if place not in WHERE:
        raise EndpointSpecError(f"{where}.where must be one of {', '.join(WHERE)}, got {quoted(place)}")
    description = fields.get("description", "")
    if not isinstance(description, str):
        raise EndpointSpecError(f"{where}.description must be text, got {_kind(description)}")
    prefill = fields.get("prefill_tokens_per_s")
    calls: dict[str, Any] = {key: fields[key] for key in CALL_KEYS if key in fields}  # Any: checked by Endpoint
    try:
        return Endpoint(
            name=name,
            where=str(place),
            price=_price(fields["price"], f"{where}.price"),
            latency_ms=_number(fields["latency_ms"], f"{where}.latency_ms"),
            context_tokens=int(
                _number(fields["context_tokens"], f"{where}.context_tokens", integer=True, positive=True)
            ),
            capabilities=_capabilities(fields.get("capabilities", {}), f"{where}.capabilities"),
            description=description,
            prefill_tokens_per_s=(
                None if prefill is None else _number(prefill, f"{where}.prefill_tokens_per_s", positive=True)
            ),
            **calls,
        )
    except EndpointSpecError as exc:
        if str(exc).startswith(where):
            raise
        raise EndpointSpecError(f"{where}: {exc}") from None
    except TypeError as exc:  # a call setting of the wrong kind (a list for a number, say)
        raise EndpointSpecError(f"{where}: {exc}") from None


def parse_endpoints(data: object, *, source: str = "<endpoints>", call_settings: bool = True) -> Endpoints:
    """Endpoints from a decoded spec: `{"endpoints": [...]}`, or the two-endpoint spelling
    `{"edge": {...}, "cloud": {...}}` (module doc). `call_settings=False` (a manifest) refuses
    how to call them. EndpointSpecError names what is wrong."""
    if not isinstance(data, dict):
        raise EndpointSpecError(f'{source}: an endpoint spec is an object {{"endpoints": [...]}}, got {_kind(data)}')
    if set(data) <= {EDGE, CLOUD} and data:
        return _two_endpoints(data, source, call_settings)
    for key in data:
        if key not in FILE_KEYS:
            raise EndpointSpecError(
                f"{source}: unknown key {quoted(key)}; a spec has {', '.join(FILE_KEYS)} (or is the two-endpoint "
                f"spelling with exactly the keys {EDGE!r} and {CLOUD!r})"
            )
    items = data.get("endpoints")
    if not isinstance(items, list) or not items:
        raise EndpointSpecError(f"{source}: key 'endpoints' must be a non-empty list of endpoints, got {_kind(items)}")
    if len(items) > MAX_ENDPOINTS:
        raise EndpointSpecError(f"{source}: {len(items)} endpoints, more than {MAX_ENDPOINTS}")
    endpoints: list[Endpoint] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        endpoint = parse_endpoint(item, where=f"{source}: endpoints[{index}]", call_settings=call_settings)
        if endpoint.name in seen:
            raise EndpointSpecError(
                f"{source}: endpoints[{index}].name {quoted(endpoint.name)} is also the name of endpoints[{seen[endpoint.name]}]"
            )
        seen[endpoint.name] = index
        endpoints.append(endpoint)
    return Endpoints(tuple(endpoints), source)


def _two_endpoints(data: Mapping[str, object], source: str, call_settings: bool) -> Endpoints:
    missing = [side for side in (EDGE, CLOUD) if side not in data]
    if missing:
        raise EndpointSpecError(
            f"{source}: the two-endpoint spelling needs both {EDGE!r} and {CLOUD!r}; missing {missing[0]!r}"
        )
    endpoints = []
    for side in (EDGE, CLOUD):
        item = data[side]
        if item is None:
            item = {}
        if not isinstance(item, dict):
            raise EndpointSpecError(
                f"{source}: {side} must be an object (an endpoint without its name), got {_kind(item)}"
            )
        merged = {**TWO_ENDPOINT_DEFAULTS[side], **item}
        endpoints.append(parse_endpoint(merged, where=f"{source}: {side}", name=side, call_settings=call_settings))
    return Endpoints(tuple(endpoints), source)


def two_endpoints(edge_context_tokens: int) -> tuple[Endpoint, Endpoint]:
    """A two-endpoint bundle's endpoints as its router sees them: the edge on the device with the
    bundle's context limit, the cloud with none declared (the prices are the two-endpoint
    spelling's defaults; capabilities not declared)."""
    edge = {**TWO_ENDPOINT_DEFAULTS[EDGE], "context_tokens": edge_context_tokens}
    cloud = parse_endpoint(TWO_ENDPOINT_DEFAULTS[CLOUD], where="the two-endpoint defaults", name=CLOUD)
    return (
        dataclasses.replace(parse_endpoint(edge, where="the two-endpoint defaults", name=EDGE), capabilities=None),
        dataclasses.replace(cloud, context_tokens=None, capabilities=None),
    )


def load_endpoints(path: str | Path, *, call_settings: bool = True) -> Endpoints:
    """The endpoint spec at `path`: JSON (.json), or YAML (.yaml / .yml) when PyYAML is installed
    (the `yaml` extra). EndpointSpecError for anything wrong, naming the endpoint and the field."""
    return parse_endpoints(read_spec_document(path), source=str(path), call_settings=call_settings)


def read_spec_document(path: str | Path) -> Any:
    """The decoded document of a spec file (JSON, or YAML with PyYAML), unchecked; EndpointSpecError
    when it cannot be read or decoded."""
    return read_document(path, what="endpoint spec", error=EndpointSpecError, max_bytes=MAX_SPEC_BYTES)
