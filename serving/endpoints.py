"""Endpoints as data: the models a request may run on, with their price, latency, context limit and
capabilities (docs/endpoints.md). Standard library only, so any part of the SDK can read it.

    {"endpoints": [
      {"name": "phone-3b", "where": "device", "price": {"per_call": 0},
       "latency_ms": 120, "context_tokens": 4096, "capabilities": {"json": true, "languages": ["en"]}},
      {"name": "frontier", "where": "cloud", "price": {"per_1k_input": 0.003, "per_1k_output": 0.015},
       "latency_ms": 900, "context_tokens": 200000, "capabilities": {"images": true, "tools": true, "json": true}}
    ]}

Today's two-endpoint spelling, `{"edge": {...}, "cloud": {...}}`, is the same thing with two
endpoints named "edge" and "cloud" (each object an endpoint without its name; `where` defaults to
device and cloud, and every other field to baseline.md's figures).

Every field is checked when parsed; an error (EndpointSpecError) names the source, the endpoint
and the field, on one line that quotes values shortened (serving.documents.quoted). A spec file
is read by serving.documents: at most 1 MiB, nested at most 32 levels, no YAML aliases, no key
twice, every YAML key text (an unquoted `on:` is refused). The order of the list is kept: it is the order in which figures list endpoints,
never a preference (choosing among endpoints is evaluation.endpoints' job).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from serving.contract import CLOUD, DEFAULT_EDGE_CONTEXT_TOKENS, EDGE
from serving.documents import quoted, read_document
from serving.language import serves
from serving.router_error import RouterError

WHERE = ("device", "cloud")
PRICE_KEYS = ("per_1k_input", "per_1k_output", "per_call")
CAPABILITY_FLAGS = ("images", "tools", "json")
CAPABILITY_KEYS = (*CAPABILITY_FLAGS, "languages")
ENDPOINT_KEYS = ("name", "where", "price", "latency_ms", "context_tokens", "capabilities", "description")
FILE_KEYS = ("endpoints", "description")
MAX_ENDPOINTS = 64
MAX_SPEC_BYTES = 1 << 20
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


@dataclass(frozen=True)
class Price:
    """Dollars: per 1,000 input tokens, per 1,000 output tokens, and per call; all >= 0."""

    per_1k_input: float = 0.0
    per_1k_output: float = 0.0
    per_call: float = 0.0

    def cost(self, input_tokens: float, output_tokens: float = 0.0) -> float:
        """The price of one call with that many input and output tokens."""
        return self.per_call + self.per_1k_input * input_tokens / 1000.0 + self.per_1k_output * output_tokens / 1000.0

    def as_dict(self) -> dict[str, float]:
        return {"per_1k_input": self.per_1k_input, "per_1k_output": self.per_1k_output, "per_call": self.per_call}


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


@dataclass(frozen=True)
class Endpoint:
    """One model a request may run on."""

    name: str
    where: str  # "device" | "cloud"
    price: Price
    latency_ms: float  # expected latency of one call
    context_tokens: int | None  # the longest prompt it takes; None: not declared, no limit
    capabilities: Capabilities | None = Capabilities()  # None: not declared, no constraint
    description: str = ""

    def cost(self, input_tokens: float, output_tokens: float = 0.0) -> float:
        return self.price.cost(input_tokens, output_tokens)

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

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "where": self.where,
            "price": self.price.as_dict(),
            "latency_ms": self.latency_ms,
            "context_tokens": self.context_tokens,
        }
        if self.capabilities is not None:
            out["capabilities"] = self.capabilities.as_dict()
        return {**out, "description": self.description} if self.description else out


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

    def costs(self, input_tokens: float, output_tokens: float = 0.0) -> dict[str, float]:
        """Each endpoint's price of one call of that size."""
        return {e.name: e.cost(input_tokens, output_tokens) for e in self.endpoints}

    def as_dict(self) -> dict[str, Any]:
        return {"endpoints": [e.as_dict() for e in self.endpoints]}

    @classmethod
    def from_dict(cls, data: object, *, source: str = "<endpoints>") -> "Endpoints":
        return parse_endpoints(data, source=source)

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
    price = _object(value, where, PRICE_KEYS)
    if not price:
        raise EndpointSpecError(f"{where} is empty: give at least one of {', '.join(PRICE_KEYS)} (0 for free)")
    return Price(**{key: _number(price[key], f"{where}.{key}") for key in price})


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


def parse_endpoint(item: object, *, where: str, name: str | None = None) -> Endpoint:
    """One endpoint from its object; `name` given (the two-endpoint spelling) when the object has none."""
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
    fields = _object(item, where, ENDPOINT_KEYS)
    for key in ("where", "price", "latency_ms", "context_tokens"):
        if key not in fields:
            raise EndpointSpecError(f"{where}: missing field {key!r}")
    place = fields["where"]
    if place not in WHERE:
        raise EndpointSpecError(f"{where}.where must be one of {', '.join(WHERE)}, got {quoted(place)}")
    description = fields.get("description", "")
    if not isinstance(description, str):
        raise EndpointSpecError(f"{where}.description must be text, got {_kind(description)}")
    return Endpoint(
        name=name,
        where=str(place),
        price=_price(fields["price"], f"{where}.price"),
        latency_ms=_number(fields["latency_ms"], f"{where}.latency_ms"),
        context_tokens=int(_number(fields["context_tokens"], f"{where}.context_tokens", integer=True, positive=True)),
        capabilities=_capabilities(fields.get("capabilities", {}), f"{where}.capabilities"),
        description=description,
    )


def parse_endpoints(data: object, *, source: str = "<endpoints>") -> Endpoints:
    """Endpoints from a decoded spec: `{"endpoints": [...]}`, or the two-endpoint spelling
    `{"edge": {...}, "cloud": {...}}` (module doc). EndpointSpecError names what is wrong."""
    if not isinstance(data, dict):
        raise EndpointSpecError(f'{source}: an endpoint spec is an object {{"endpoints": [...]}}, got {_kind(data)}')
    if set(data) <= {EDGE, CLOUD} and data:
        return _two_endpoints(data, source)
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
        endpoint = parse_endpoint(item, where=f"{source}: endpoints[{index}]")
        if endpoint.name in seen:
            raise EndpointSpecError(
                f"{source}: endpoints[{index}].name {quoted(endpoint.name)} is also the name of endpoints[{seen[endpoint.name]}]"
            )
        seen[endpoint.name] = index
        endpoints.append(endpoint)
    return Endpoints(tuple(endpoints), source)


def _two_endpoints(data: Mapping[str, object], source: str) -> Endpoints:
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
        endpoints.append(parse_endpoint(merged, where=f"{source}: {side}", name=side))
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


def load_endpoints(path: str | Path) -> Endpoints:
    """The endpoint spec at `path`: JSON (.json), or YAML (.yaml / .yml) when PyYAML is installed
    (the `yaml` extra). EndpointSpecError for anything wrong, naming the endpoint and the field."""
    return parse_endpoints(read_spec_document(path), source=str(path))


def read_spec_document(path: str | Path) -> Any:
    """The decoded document of a spec file (JSON, or YAML with PyYAML), unchecked; EndpointSpecError
    when it cannot be read or decoded."""
    return read_document(path, what="endpoint spec", error=EndpointSpecError, max_bytes=MAX_SPEC_BYTES)
