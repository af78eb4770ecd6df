"""Endpoints as data: `Endpoint` (`serving.Endpoint`, `serving.chat.Endpoint`), the one record of a
model a request may run on, and the spec files listing them (docs/sdk.md#the-endpoint-record: the
fields, the two-endpoint spelling, the earlier per_1k_* prices; docs/clients.md: call settings).

Every field is checked when parsed: EndpointSpecError names the source, the endpoint and the field on one
line, values shortened (quoted). A spec file is read by serving.features._documents (size and nesting bounded,
no YAML aliases, no key twice). Standard library only, so any part of the SDK can read it."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from dataclasses import InitVar, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from serving._contract import CLOUD, DEFAULT_EDGE_CONTEXT_TOKENS, EDGE
from serving._json_values import finite_number, json_kind
from serving._router_error import RouterError
from serving.features._documents import quoted, read_document
from serving.features._language import CODE_SHAPE, serves

if TYPE_CHECKING:
    from typing import TypeGuard

log = logging.getLogger("serving.chat")

WHERE = ("device", "cloud")
PRICE_KEYS = ("per_1m_input", "per_1m_output", "per_1m_cached_input", "per_call")
PER_1K_KEYS = ("per_1k_input", "per_1k_output")  # the earlier spelling, still read (x 1000)
CAPABILITY_FLAGS = ("images", "tools", "json")
CAPABILITY_KEYS = (*CAPABILITY_FLAGS, "languages")
ENDPOINT_KEYS = tuple(
    "name where price latency_ms context_tokens capabilities description prefill_tokens_per_s".split()
)
# How an endpoint is called, in a spec file (never in a manifest; never the key itself).
CALL_KEYS = tuple(
    "base_url model timeout_s connect_timeout_s first_token_timeout_s max_response_bytes headers params".split()
)
# What the decision reads: filled from another record where this one declares none (filled_from).
DECISION_FIELDS = ("where", "price", "latency_ms", "context_tokens", "capabilities", "prefill_tokens_per_s")
RESERVED_PARAMS = ("model", "messages", "stream", "stream_options")
FILE_KEYS = ("endpoints", "description")
MAX_ENDPOINTS = 64
MAX_SPEC_BYTES = 1 << 20
MAX_TOKEN_COUNT = 10**9  # a usage count at or over this is not a count of one answer's tokens
# A name is written to logs, figures and headers as is: a short code, no spaces.
NAME_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_NAME_MUST = "a short code (letters, digits, _ . : -; at most 64)"
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


@dataclass(frozen=True)
class Price:
    """Per 1M input, output and cached input tokens (None: priced as input) and per call; all >= 0,
    in one currency. Calls are priced per 1,000 tokens as they always were (the per-1M figure / 1000
    in decimal; from_per_1k: the per-1k figure given), so an old spec or bundle prices exactly as before."""

    per_1m_input: float = 0.0
    per_1m_output: float = 0.0
    per_call: float = 0.0
    per_1m_cached_input: float | None = None
    # The per-1k rates calls are priced with (the class doc), set by __post_init__ (and from_per_1k).
    _input_1k: float = field(init=False, repr=False, compare=False)
    _output_1k: float = field(init=False, repr=False, compare=False)
    _cached_1k: float | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for key in ("per_1m_input", "per_1m_output", "per_call", "per_1m_cached_input"):
            value = getattr(self, key)
            number = finite_number(value)
            if not (key == "per_1m_cached_input" and value is None) and (number is None or number < 0):
                raise EndpointSpecError(f"price {key}={quoted(value)}: must be a finite number >= 0")
            object.__setattr__(self, key, number)
        cached = self.per_1m_cached_input
        object.__setattr__(self, "_input_1k", _scaled(self.per_1m_input, -3))
        object.__setattr__(self, "_output_1k", _scaled(self.per_1m_output, -3))
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
        """The price of one call of that many input tokens (`cached_input_tokens` of them cached) and output tokens."""
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


def _whole(value: object, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _positive(value: Any) -> bool:
    return finite_number(value) is not None and value > 0


_SECONDS = "={value}: must be a positive number of seconds"
# Endpoint's checks of its arguments, in order: field -> whether None is allowed, the test of any
# other value, and the error after the field's name ({value}: the value quoted, {kind}: its type).
_CHECKS: dict[str, tuple[bool, Callable[[Any], object], str]] = {
    "name": (
        False,
        lambda v: isinstance(v, str) and (not v or NAME_SHAPE.fullmatch(v)),
        "={value}: must be " + _NAME_MUST,
    ),
    "where": (True, lambda v: v in WHERE, "={value}: must be one of " + ", ".join(WHERE)),
    "price": (True, lambda v: isinstance(v, Price), " must be a serving.endpoints._record.Price or None, got {kind}"),
    "latency_ms": (True, lambda v: finite_number(v) is not None and v >= 0, "={value}: must be a finite number >= 0"),
    "context_tokens": (True, lambda v: _whole(v, 1), "={value}: must be a whole number > 0, or None"),
    "capabilities": (
        True,
        lambda v: isinstance(v, Capabilities),
        " must be a serving.endpoints._record.Capabilities or None, got {kind}",
    ),
    "description": (False, lambda v: isinstance(v, str), " must be text, got {kind}"),
    "prefill_tokens_per_s": (True, _positive, "={value}: must be a number > 0"),
    "model": (True, lambda v: isinstance(v, str) and v, "={value}: give the model name the server expects"),
    "api_key": (True, lambda v: isinstance(v, str), " must be text or None, got {kind}"),
    "timeout_s": (False, _positive, _SECONDS),
    "connect_timeout_s": (False, _positive, _SECONDS),
    "first_token_timeout_s": (True, _positive, _SECONDS),
    "max_response_bytes": (False, lambda v: _whole(v, 1024), "={value}: must be an integer >= 1024"),
}
# The checked fields kept as floats (an int given, a float kept).
_FLOATS = ("latency_ms", "prefill_tokens_per_s", "timeout_s", "connect_timeout_s", "first_token_timeout_s")


@dataclass(frozen=True, kw_only=True, repr=False)
class Endpoint:
    """One endpoint: what the router decides with (None: not declared), and how it is called
    (docs/sdk.md#the-endpoint-record; the call settings in docs/clients.md). `api_key` is sent as
    `Authorization: Bearer ...` and never shown (repr, str, logs). The earlier keywords
    `input_price_per_1m` and `output_price_per_1m` set those two figures of the price (one not
    given keeps the price's, 0 without one). Wrong values are an EndpointSpecError naming the field."""

    name: str = ""
    where: str | None = None
    price: Price | None = None
    latency_ms: float | None = None
    context_tokens: int | None = None
    capabilities: Capabilities | None = None
    description: str = ""
    prefill_tokens_per_s: float | None = None
    base_url: str | None = field(default=None, kw_only=False)
    model: str | None = field(default=None, kw_only=False)
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    connect_timeout_s: float = 5.0
    first_token_timeout_s: float | None = None
    max_response_bytes: int = 8 << 20
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)  # Any: JSON values
    input_price_per_1m: InitVar[float | None] = None  # the earlier price keywords (the class doc)
    output_price_per_1m: InitVar[float | None] = None

    def __post_init__(self, input_price_per_1m: float | None, output_price_per_1m: float | None) -> None:
        for key, (optional, test, error) in _CHECKS.items():
            value = getattr(self, key)
            if not (optional and value is None) and not test(value):
                raise EndpointSpecError(key + error.format(value=quoted(value), kind=type(value).__name__))
        for key in _FLOATS:
            object.__setattr__(self, key, finite_number(getattr(self, key)))
        figures = {"per_1m_input": input_price_per_1m, "per_1m_output": output_price_per_1m}
        given = {key: value for key, value in figures.items() if value is not None}
        if given:
            object.__setattr__(self, "price", dataclasses.replace(self.price or Price(), **given))
        if self.base_url is not None:
            parts = urlsplit(self.base_url) if isinstance(self.base_url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise EndpointSpecError(
                    f"base_url={quoted(self.base_url)}: expected an http:// or https:// URL such as "
                    "'http://127.0.0.1:8080/v1'"
                )
            if parts.username or parts.password or parts.query or parts.fragment:
                raise EndpointSpecError(
                    "base_url must not carry credentials, a query or a fragment: put the key in api_key"
                )
        object.__setattr__(self, "headers", _headers(self.headers))
        object.__setattr__(self, "params", _params(self.params))

    def __repr__(self) -> str:
        """The fields that say something (not None, empty or a default); never the key or the headers."""
        shown = [
            f"{f.name}={value!r}"
            for f in dataclasses.fields(self)
            if f.repr and (value := getattr(self, f.name)) not in (None, "", {}, f.default)
        ]
        return f"Endpoint({', '.join(shown)})"

    __str__ = __repr__

    # What a call costs.
    def call_cost(
        self, input_tokens: float, output_tokens: float = 0.0, cached_input_tokens: float = 0.0
    ) -> float | None:
        """The expected price of one call with that many input (of them cached) and output tokens:
        what the choosers price (serving.endpoints._choice.call_costs); None without a price."""
        return None if self.price is None else self.price.call_cost(input_tokens, output_tokens, cached_input_tokens)

    def answer_cost(self, usage: Any) -> float | None:
        """The price of one answer at its `usage`'s token counts (cached ones too if the price has a cached-input
        figure); None without a price or usage, or, warned, without token counts (token_counts). Never raises."""
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
        languages compare by primary subtag, serving.features._language.serves)."""
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
        """EndpointSpecError naming the endpoint and `who` (its would-be caller) unless it has base_url and model."""
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
        """The endpoint as a spec file or a manifest holds it; `call_settings`: how it is called too (never the key)."""
        out: dict[str, Any] = {key: getattr(self, key) for key in ENDPOINT_KEYS}
        if self.price is not None:
            out["price"] = self.price.as_dict()
        if self.capabilities is not None:
            out["capabilities"] = self.capabilities.as_dict()
        if call_settings and self.base_url is not None:
            out.update({key: getattr(self, key) for key in CALL_KEYS})
            out.update(headers=dict(self.headers), params=json.loads(json.dumps(self.params)))
        always = ("name", "where", "price", "latency_ms", "context_tokens", "base_url", "model")  # None: not declared
        return {key: value for key, value in out.items() if key in always or value not in (None, "", {})}


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
    """(prompt_tokens, completion_tokens) of an answer's usage when both are token counts, else None."""
    if not isinstance(usage, Mapping):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt, completion) if _is_count(prompt) and _is_count(completion) else None


def cached_tokens(usage: Mapping[str, Any], prompt_tokens: int) -> int:
    """The prompt tokens an answer's usage says were read from the cache (`prompt_tokens_details.
    cached_tokens`); 0 when it says none, or nothing that is a count of at most `prompt_tokens`."""
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

    def as_dict(self, *, call_settings: bool = False) -> dict[str, Any]:
        return {"endpoints": [e.as_dict(call_settings=call_settings) for e in self.endpoints]}


def _number(value: object, where: str, *, integer: bool = False, positive: bool = False) -> float:
    """A finite number >= 0 (> 0 with `positive`; whole with `integer`), or EndpointSpecError at `where`."""
    number = finite_number(value)
    if number is None:
        raise EndpointSpecError(f"{where} must be a finite number, got {json_kind(value)} {quoted(value)}")
    if number < 0 or (positive and number == 0):
        raise EndpointSpecError(f"{where} must be {'> 0' if positive else '>= 0'}, got {quoted(value)}")
    if integer and number != int(number):
        raise EndpointSpecError(f"{where} must be a whole number, got {quoted(value)}")
    return number


def _object(value: object, where: str, allowed: Sequence[str]) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise EndpointSpecError(f"{where} must be an object, got {json_kind(value)}")
    for key in value:
        if key not in allowed:
            raise EndpointSpecError(f"{where}: unknown key {quoted(key)}; allowed: {', '.join(allowed)}")
    return value


def _price(value: object, where: str) -> Price:
    """A price in either unit: per_1m_* keys, or the earlier per_1k_* ones (Price.from_per_1k)."""
    price = _object(value, where, (*PRICE_KEYS, *PER_1K_KEYS))
    if not set(price) - {"per_1m_cached_input"}:
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
    for key in per_1k:
        if not math.isfinite(_scaled(numbers[key], 3)):
            raise EndpointSpecError(f"{where}.{key} is too large: 1,000 times it is no finite number")
    unit, make = ("per_1k", Price.from_per_1k) if per_1k else ("per_1m", Price)
    return make(
        numbers.get(f"{unit}_input", 0.0),
        numbers.get(f"{unit}_output", 0.0),
        numbers.get("per_call", 0.0),
        numbers.get("per_1m_cached_input"),
    )


def _capabilities(value: object, where: str) -> Capabilities:
    caps = _object(value, where, CAPABILITY_KEYS)
    flags: dict[str, bool] = {}
    for key in CAPABILITY_FLAGS:
        flag = caps.get(key, False)
        if not isinstance(flag, bool):
            raise EndpointSpecError(f"{where}.{key} must be true or false, got {json_kind(flag)} {quoted(flag)}")
        flags[key] = flag
    languages = caps.get("languages")
    if languages is not None:
        if not isinstance(languages, list) or not languages:
            raise EndpointSpecError(f"{where}.languages must be a non-empty list of language codes, or absent")
        for code in languages:
            if not isinstance(code, str) or not CODE_SHAPE.fullmatch(code):
                raise EndpointSpecError(
                    f"{where}.languages: {quoted(code)} is not a language code such as 'en' or 'pt-BR'"
                )
    return Capabilities(
        **flags, languages=None if languages is None else tuple(str(code).lower() for code in languages)
    )


def parse_endpoint(item: object, *, where: str, name: str | None = None, call_settings: bool = True) -> Endpoint:
    """One endpoint from its object; `name` given (the two-endpoint spelling) when the object has
    none. With `call_settings`, the object may say how the endpoint is called (CALL_KEYS)."""
    if not isinstance(item, dict):
        raise EndpointSpecError(f"{where} must be an object, got {json_kind(item)}")
    if name is None:
        given = item.get("name")
        if not isinstance(given, str) or not NAME_SHAPE.fullmatch(given):
            raise EndpointSpecError(f"{where}.name must be {_NAME_MUST}, got {json_kind(given)} {quoted(given)}")
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
        raise EndpointSpecError(f"{where}.description must be text, got {json_kind(description)}")
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
    """Endpoints from a decoded spec, `{"endpoints": [...]}` or the two-endpoint `{"edge": {...}, "cloud": {...}}`;
    `call_settings=False` (a manifest) refuses how to call them. EndpointSpecError names what is wrong."""
    if not isinstance(data, dict):
        raise EndpointSpecError(
            f'{source}: an endpoint spec is an object {{"endpoints": [...]}}, got {json_kind(data)}'
        )
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
        raise EndpointSpecError(
            f"{source}: key 'endpoints' must be a non-empty list of endpoints, got {json_kind(items)}"
        )
    if len(items) > MAX_ENDPOINTS:
        raise EndpointSpecError(f"{source}: {len(items)} endpoints, more than {MAX_ENDPOINTS}")
    endpoints: list[Endpoint] = []
    for index, item in enumerate(items):
        endpoint = parse_endpoint(item, where=f"{source}: endpoints[{index}]", call_settings=call_settings)
        names = [e.name for e in endpoints]
        if endpoint.name in names:
            raise EndpointSpecError(
                f"{source}: endpoints[{index}].name {quoted(endpoint.name)} is also the name of "
                f"endpoints[{names.index(endpoint.name)}]"
            )
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
        item = {} if data[side] is None else data[side]
        if not isinstance(item, dict):
            raise EndpointSpecError(
                f"{source}: {side} must be an object (an endpoint without its name), got {json_kind(item)}"
            )
        merged = {**TWO_ENDPOINT_DEFAULTS[side], **item}
        endpoints.append(parse_endpoint(merged, where=f"{source}: {side}", name=side, call_settings=call_settings))
    return Endpoints(tuple(endpoints), source)


def two_endpoints(edge_context_tokens: int) -> tuple[Endpoint, Endpoint]:
    """A two-endpoint bundle's endpoints as its router sees them: the two-endpoint spelling's defaults,
    with the bundle's context limit on the edge and none on the cloud; capabilities not declared."""
    defaults = {EDGE: {"context_tokens": edge_context_tokens}, CLOUD: {}}
    edge, cloud = parse_endpoints(defaults, source="the two-endpoint defaults")
    return (
        dataclasses.replace(edge, capabilities=None),
        dataclasses.replace(cloud, context_tokens=None, capabilities=None),
    )


def load_endpoints(path: str | Path, *, call_settings: bool = True) -> Endpoints:
    """The endpoint spec at `path`: JSON (.json), or YAML (.yaml / .yml) when PyYAML is installed
    (the `yaml` extra). EndpointSpecError for anything wrong, naming the endpoint and the field."""
    return parse_endpoints(read_spec_document(path), source=str(path), call_settings=call_settings)


def read_spec_document(path: str | Path) -> Any:
    """A spec file's decoded document (JSON, or YAML with PyYAML), unchecked; EndpointSpecError if unreadable."""
    return read_document(path, what="endpoint spec", error=EndpointSpecError, max_bytes=MAX_SPEC_BYTES)
