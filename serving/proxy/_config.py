"""The proxy's options: the command line of `python -m serving serve`, checked into a ProxyConfig
before anything starts. Loads nothing heavy (the CLI imports it to build its help). It binds
127.0.0.1 unless told otherwise and refuses any address beyond the loopback without a client
token; tokens and upstream keys come from environment variables, never from the command line,
and none is ever printed (docs/clients.md#security).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import math
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from serving._router_error import RouterError
from serving.features._documents import quoted

if TYPE_CHECKING:
    from typing import Callable

    from serving.endpoints._record import Capabilities, Endpoint, Endpoints

TOKEN_ENV = "ROUTER_PROXY_TOKEN"
STICKINESS = {"never": 0.0, "priced": 1.0, "always": math.inf}  # --stickiness's names for the weight
REDIS_SCHEMES = ("redis", "rediss", "unix")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MIN_TOKEN_CHARS = 16
SERVED_MODEL = "router"
# ProxyConfig's fields from_args builds itself; every other field is the `serve` option of its name
BUILT_FIELDS = ("edge", "cloud", "token", "endpoints", "redis")
# The earlier spelling of an --endpoints entry's call settings: an `upstream` object with these keys.
UPSTREAM_KEYS = ("url", "model", "key_env", "timeout_s", "first_token_timeout_s")


class ConfigError(RouterError, ValueError):
    """An option is missing or wrong; the message says which and what to do."""


def load_endpoints_file(path: str, environ: Mapping[str, str] = os.environ, *, token_env: str = TOKEN_ENV) -> Endpoints:
    """The proxy's N endpoints (`--endpoints FILE`, docs/clients.md#the-endpoints-file): an endpoint
    spec whose every entry also has its call settings (serving.endpoints._record.CALL_KEYS, or the
    earlier `upstream` object) and `key_env`, the environment variable holding its API key (never
    `token_env`). ConfigError naming the file, endpoint and field, on one line of bounded length."""
    from serving.endpoints._record import CALL_KEYS, Endpoints, EndpointSpecError, parse_endpoints, read_spec_document

    try:
        document = read_spec_document(path)
    except EndpointSpecError as exc:
        raise ConfigError(f"--endpoints: {exc}") from None
    items = document.get("endpoints") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f'--endpoints {path}: the file is an endpoint spec {{"endpoints": [...]}}')
    entries, key_envs = list(items), [None] * len(items)  # an entry that is no object: parse_endpoints refuses it
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        entry = {key: value for key, value in item.items() if key not in ("upstream", "key_env")}
        key_env = item.get("key_env")
        if "upstream" in item:
            upstream = item["upstream"]
            if not isinstance(upstream, dict):
                raise ConfigError(f"--endpoints {path}: endpoints[{index}].upstream must be an object")
            if "key_env" in item or any(key in item for key in CALL_KEYS):
                raise ConfigError(
                    f"--endpoints {path}: endpoints[{index}] gives its call settings both in the entry and in "
                    "'upstream': give them in the entry (base_url, model, key_env, ...)"
                )
            unknown = [key for key in upstream if key not in UPSTREAM_KEYS]
            if unknown:
                raise ConfigError(
                    f"--endpoints {path}: endpoints[{index}].upstream: unknown key {quoted(unknown[0])}; "
                    f"allowed: {', '.join(UPSTREAM_KEYS)}"
                )
            entry.update({"base_url" if key == "url" else key: v for key, v in upstream.items() if key != "key_env"})
            key_env = upstream.get("key_env")
        entries[index], key_envs[index] = entry, key_env
    try:
        records = parse_endpoints({**document, "endpoints": entries}, source=str(path))
    except EndpointSpecError as exc:
        raise ConfigError(f"--endpoints: {exc}") from None
    keyed = []
    for index, (record, key_env) in enumerate(zip(records, key_envs)):
        where = f"{path}: endpoints[{index}] ({quoted(record.name)})"
        if not record.has_call_settings:
            raise ConfigError(
                f"--endpoints {where} needs base_url and model: where the proxy sends its requests "
                "(and key_env when it takes a key)"
            )
        keyed.append(dataclasses.replace(record, api_key=_key(key_env, where, environ, token_env)))
    return Endpoints(tuple(keyed), str(path))


def _key(key_env: object, where: str, environ: Mapping[str, str], token_env: str) -> str | None:
    """The API key in the environment variable `key_env` names (None: no key)."""
    if key_env is None:
        return None
    if not isinstance(key_env, str) or not ENV_NAME.fullmatch(key_env):
        raise ConfigError(
            f"{where}.key_env must be the name of an environment variable "
            f"(letters, digits and _, at most 128), got {quoted(key_env)}"
        )
    if key_env in (token_env, TOKEN_ENV):
        raise ConfigError(
            f"{where}.key_env is {key_env}, the proxy's client token: it would be sent upstream "
            "as this endpoint's API key. Name the variable that holds the endpoint's own key"
        )
    api_key = environ.get(key_env) or None
    if api_key is None:
        raise ConfigError(f"{where}.key_env: the environment variable {key_env} is not set or empty")
    return api_key


@dataclass(frozen=True)
class ProxyConfig:
    """Everything the proxy needs; `from_args` builds it from the command line. Its upstreams are `edge`
    and `cloud`, or N `endpoints` (load_endpoints_file): serving.Endpoint records with base_url and model."""

    bundle: str
    edge: Endpoint | None = None
    cloud: Endpoint | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = field(default=None, repr=False)
    served_model: str = SERVED_MODEL
    max_body_bytes: int = 4 << 20
    max_concurrency: int = 64
    queue_timeout_s: float = 1.0
    body_timeout_s: float = 10.0
    header_timeout_s: float = 10.0
    max_body_reads: int | None = None  # None: twice max_concurrency
    shutdown_timeout_s: float = 10.0
    strict: bool = False
    public_key: str | None = None
    watch: str | None = None
    watch_interval_s: float = 60.0
    access_log: bool = True
    policy: str | None = None  # a policy file (serving.policy._rules), reloaded when it changes
    policy_interval_s: float = 5.0
    endpoints: Endpoints | None = None  # N endpoints instead of edge and cloud
    # Redis for conversation state and the budgets' ledger, shared by every proxy given the same
    # (None: both in this process); a URL that may hold a password
    redis: str | None = field(default=None, repr=False)
    stickiness: str = "priced"  # what a switch weighs: never, priced, always, or a weight (serving.Stickiness)

    def __post_init__(self) -> None:
        if self.endpoints is not None and (self.edge is not None or self.cloud is not None):
            raise ConfigError("give --endpoints FILE, or the --edge-* and --cloud-* options, not both")
        for side in ("edge", "cloud"):
            if self.endpoints is None and getattr(self, side) is None:
                raise ConfigError(f"--{side}-url and --{side}-model are required (or --endpoints FILE for N endpoints)")
        for name, record in self.upstreams.items():
            if not record.has_call_settings:
                raise ConfigError(f"the {name} endpoint needs base_url and model: where the proxy sends its requests")
        if self.token is not None:
            if len(self.token) < MIN_TOKEN_CHARS:
                raise ConfigError(
                    f"the client token must have at least {MIN_TOKEN_CHARS} characters; make one with "
                    "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
                )
            leaked = [name for name, options in self.upstreams.items() if options.api_key == self.token]
            if leaked:
                raise ConfigError(
                    f"the API key of {', '.join(leaked)} is the proxy's client token: it would be sent upstream. "
                    "Give each upstream its own key"
                )
        if not is_loopback(self.host) and not self.token:
            raise ConfigError(
                f"refusing to listen on {self.host}: beyond the loopback the proxy needs a client token, "
                f"or anyone who reaches it spends your cloud key. Set {TOKEN_ENV} (or --token-env NAME) "
                "to a random token of 16+ characters, or listen on 127.0.0.1"
            )
        for name in ("max_body_bytes", "max_concurrency", "max_body_reads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be at least 1")
        for name in ("body_timeout_s", "header_timeout_s", "policy_interval_s"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                raise ConfigError(
                    f"{name}={value!r} (--{name.replace('_', '-')}): must be a positive number of seconds"
                )
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port} is not a TCP port")
        self.stickiness_weight  # noqa: B018  (checked now, before anything starts)
        if self.redis is not None:
            check_redis_url(self.redis)

    @property
    def stickiness_weight(self) -> float:
        """--stickiness as serving.Stickiness's weight: never 0, priced 1, always inf, or the number."""
        named = STICKINESS.get(self.stickiness)
        if named is not None:
            return named
        try:
            weight = float(self.stickiness)
        except ValueError:
            weight = -1.0
        if not 0 <= weight < math.inf:
            raise ConfigError(
                f"--stickiness {quoted(self.stickiness)}: one of {', '.join(STICKINESS)}, or a weight >= 0 "
                "(the multiple of a switch's cost the router adds; docs/conversations.md)"
            )
        return weight

    @property
    def body_reads(self) -> int:
        """How many request bodies may be read at once (each up to max_body_bytes): by default twice
        the slots, so that as many slow senders as there are slots leave turns for the others."""
        return self.max_body_reads or 2 * self.max_concurrency

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never appear in a log line, a response or /metrics."""
        keys = [options.api_key for options in self.upstreams.values()]
        password = urllib.parse.urlsplit(self.redis).password if self.redis else None
        return tuple(s for s in (*keys, self.token, password) if s)

    @property
    def redis_shown(self) -> str | None:
        """The Redis URL as a log line may show it: without its password."""
        if self.redis is None:
            return None
        parts = urllib.parse.urlsplit(self.redis)
        if parts.password is None:
            return self.redis
        netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    @property
    def upstreams(self) -> dict[str, Endpoint]:
        """Every upstream by name: "edge" and "cloud", or the N endpoints'."""
        if self.endpoints is not None:
            return self.endpoints.by_name()
        assert self.edge is not None and self.cloud is not None  # __post_init__ checked it
        return {"edge": self.edge, "cloud": self.cloud}

    def bundle_mismatch(self, bundle_endpoints: tuple[str, ...]) -> str | None:
        """Why these upstreams cannot serve a bundle's decisions, or None: the bundle (its endpoint names:
        edge and cloud for a two-endpoint bundle and the rule table) needs an upstream for each, no other."""
        names = tuple(self.upstreams)
        if set(names) == set(bundle_endpoints):
            return None
        if set(bundle_endpoints) == {"edge", "cloud"}:
            return (
                f"the bundle routes between edge and cloud, and the upstreams are {', '.join(names)}: "
                "give --edge-* and --cloud-*, or an --endpoints file naming edge and cloud"
            )
        missing = [n for n in bundle_endpoints if n not in names]
        extra = [n for n in names if n not in bundle_endpoints]
        return (
            f"the bundle routes among {', '.join(bundle_endpoints)}; the upstreams"
            + (f" lack {', '.join(missing)}" if missing else "")
            + (" and" if missing and extra else "")
            + (f" add {', '.join(extra)}, which it never chooses" if extra else "")
            + ": give --endpoints FILE with one upstream per endpoint of the bundle"
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> "ProxyConfig":
        def secret(variable: str | None, what: str, required: bool) -> str | None:
            if not variable:
                return None
            value = environ.get(variable, "")
            if not value and required:
                raise ConfigError(f"{what}: the environment variable {variable} is not set or empty")
            return value or None

        def upstream(side: str) -> Endpoint | None:
            # Any: an argparse option, of the type add_arguments gave it
            get: Callable[[str], Any] = lambda name: getattr(args, f"{side}_{name}")  # noqa: E731
            if args.endpoints is not None:
                if get("url") or get("model"):
                    raise ConfigError(f"give --endpoints FILE, or --{side}-url and --{side}-model, not both")
                return None
            if not get("url") or not get("model"):
                return None  # __post_init__ says what is missing
            if get("key_env") in (args.token_env, TOKEN_ENV):
                raise ConfigError(
                    f"--{side}-key-env {get('key_env')}: that is the proxy's client token, which would be sent "
                    f"to the {side} model as its API key. Name the variable that holds the {side} model's own key"
                )
            from serving.endpoints._record import Endpoint, EndpointSpecError, Price

            prices = (get("price_in"), get("price_out"))
            try:
                return Endpoint(
                    get("url"),
                    get("model"),
                    name=side,
                    where="device" if side == "edge" else "cloud",
                    api_key=secret(get("key_env"), f"--{side}-key-env", True),
                    timeout_s=get("timeout_s"),
                    first_token_timeout_s=get("first_token_timeout_s"),
                    price=None if prices == (None, None) else Price(prices[0] or 0.0, prices[1] or 0.0),
                    capabilities=parse_capabilities(get("capabilities"), f"--{side}-capabilities"),
                )
            except EndpointSpecError as exc:
                raise ConfigError(f"--{side}-*: {exc}") from None

        token = secret(args.token_env, "--token-env", args.token_env != TOKEN_ENV)
        redis, redis_env = args.redis, args.redis_env
        if redis is not None and redis_env is not None:
            raise ConfigError("give --redis URL or --redis-env VAR, not both")
        if redis is not None and urllib.parse.urlsplit(redis).password:
            raise ConfigError(
                "--redis: the URL holds a password, which every local user can read on the command line (ps): "
                "put the URL in an environment variable and give --redis-env VAR"
            )
        if redis_env is not None:
            redis = secret(redis_env, "--redis-env", True)
        return cls(
            edge=upstream("edge"),
            cloud=upstream("cloud"),
            token=token,
            redis=redis,
            endpoints=(
                load_endpoints_file(args.endpoints, environ, token_env=args.token_env or TOKEN_ENV)
                if args.endpoints is not None
                else None
            ),
            **{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.name not in BUILT_FIELDS},
        )


def check_redis_url(url: str) -> None:
    """ConfigError unless `url` is a Redis URL (redis://, rediss:// or unix://), saying what is wrong
    without quoting it (it may hold a password)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is no number)
    except ValueError as exc:
        raise ConfigError(f"the Redis URL is not a URL: {exc}") from None
    if parts.scheme not in REDIS_SCHEMES or not (parts.hostname or parts.path):
        raise ConfigError(
            f"the Redis URL must be redis://HOST:PORT/DB (or rediss://, unix://PATH), got scheme {quoted(parts.scheme)}"
        )


def parse_capabilities(value: str | None, option: str) -> Capabilities | None:
    """`--edge-capabilities images,tools` as serving.endpoints._record.Capabilities: the flags listed are
    true and the others false ("none": all false); not given: None, not declared. ConfigError for
    an unknown name."""
    if value is None:
        return None
    from serving.endpoints._capabilities import CAPABILITIES
    from serving.endpoints._record import Capabilities

    names = [name.strip() for name in value.split(",") if name.strip()]
    if names == ["none"]:
        names = []
    unknown = [name for name in names if name not in CAPABILITIES]
    if unknown or not value.strip():
        raise ConfigError(
            f"{option} {quoted(value)}: list what the model accepts among {', '.join(CAPABILITIES)} "
            "(comma-separated), or none"
        )
    return Capabilities(images="images" in names, tools="tools" in names, json="json" in names)


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or "localhost"."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


SERVE_HELP = f"""\
An OpenAI-compatible server in front of the two endpoints (or N): POST /v1/chat/completions (JSON or
stream), GET /v1/models, /health, /metrics (Prometheus), /dashboard (the recent requests and drift,
one HTML page). Point any OpenAI client at http://HOST:PORT/v1 with the model name "{SERVED_MODEL}"; a
request may declare its precision in the body ("precision": "exact") or the x-router-precision header.

Keys are read from environment variables, never from the command line: --edge-key-env NAME,
--cloud-key-env NAME, and the client token from {TOKEN_ENV} (or --token-env NAME). With a
token, every request but /health needs "Authorization: Bearer TOKEN". Beyond the loopback the
proxy refuses to start without one (exit code 2).

Conversations: a request's conversation is its x-router-conversation header (else the body's
prompt_cache_key, else its user); each turn is decided with the conversation's state, and the answer
says x-router-turn, x-router-switched and x-router-switch. --redis URL (--redis-env VAR for a URL with a
password) keeps that state and the budgets' ledger in Redis, shared by every proxy given the same URL.

N endpoints: --endpoints FILE instead of the --edge-* and --cloud-* options (an endpoint spec whose
every endpoint has base_url and model; keys through each one's key_env, extra request parameters in
its params); one upstream per endpoint of an N-endpoint bundle, tried in each request's cascade order.

Exit codes: 0 after a clean shutdown (SIGTERM or Ctrl-C: in-flight requests finish, up to
--shutdown-timeout-s); 1 when it cannot start (the address is taken; with --strict, the bundle
cannot load; the upstreams are not the bundle's endpoints); 2 for bad options."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m serving serve`."""
    parser.add_argument("--bundle", required=True, help="bundle folder written by `make train`")
    for side, timeout, first in (("edge", 30.0, 2.0), ("cloud", 120.0, None)):
        group = parser.add_argument_group(f"{side} endpoint")
        group.add_argument(
            f"--{side}-url",
            metavar="URL",
            help=f"OpenAI-compatible API root of the {side} model, e.g. http://127.0.0.1:8080/v1",
        )
        group.add_argument(
            f"--{side}-model", metavar="NAME", help=f"model name the server expects (required with --{side}-url)"
        )
        group.add_argument(f"--{side}-key-env", metavar="VAR", help="environment variable holding its API key")
        group.add_argument(
            f"--{side}-timeout-s",
            type=float,
            default=timeout,
            metavar="S",
            help=f"an answer, streamed or not, must be complete within this (default {timeout:g})",
        )
        group.add_argument(
            f"--{side}-first-token-timeout-s",
            type=float,
            default=first,
            metavar="S",
            help="a stream's first token must arrive within this"
            + (f" (default {first:g}; later: cloud fallback)" if first else " (default: the timeout)"),
        )
        group.add_argument(f"--{side}-price-in", type=float, metavar="PRICE", help="price of 1M prompt tokens")
        group.add_argument(f"--{side}-price-out", type=float, metavar="PRICE", help="price of 1M completion tokens")
        group.add_argument(
            f"--{side}-capabilities",
            metavar="LIST",
            help="what the model accepts, comma-separated among images, tools, json (or none); a request needing "
            "one it lacks is never sent there (default: not declared, no constraint; docs/policies.md#capabilities)",
        )
    parser.add_argument(
        "--endpoints",
        metavar="FILE",
        help="N endpoints instead of --edge-* and --cloud-*: an endpoint spec (JSON, or YAML with the yaml extra) whose "
        "every endpoint also has base_url and model (and optionally key_env, timeout_s, connect_timeout_s, "
        "first_token_timeout_s, max_response_bytes, headers, params); requests try them in each decision's cascade "
        "order (docs/endpoints.md#running-n-endpoints)",
    )
    net = parser.add_argument_group("server")
    net.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    net.add_argument("--port", type=int, help="0 for any free port (default 8000)")
    net.add_argument(
        "--token-env", default=TOKEN_ENV, metavar="VAR", help=f"variable holding the client token (default {TOKEN_ENV})"
    )
    net.add_argument("--served-model", metavar="NAME", help=f"model name clients ask for (default {SERVED_MODEL})")
    net.add_argument("--max-body-bytes", type=int, metavar="N", help="larger requests get 413 (default 4 MiB)")
    net.add_argument(
        "--max-concurrency",
        type=int,
        metavar="N",
        help="requests served at once; more wait up to --queue-timeout-s, then get 503 (default 64)",
    )
    net.add_argument("--queue-timeout-s", type=float, metavar="S", help="(default 1)")
    net.add_argument(
        "--body-timeout-s",
        type=float,
        metavar="S",
        help="a request's whole body must arrive within this, else 408; it holds no slot while it "
        "arrives; a body answered without being read, within this of the answer, else the "
        "connection is closed (default 10)",
    )
    net.add_argument(
        "--header-timeout-s",
        type=float,
        metavar="S",
        help="a request's headers must arrive whole within this of the connection (or of their first "
        "byte on a kept-alive one), else 408 (default 10)",
    )
    net.add_argument(
        "--max-body-reads",
        type=int,
        metavar="N",
        help="request bodies read at once, each up to --max-body-bytes; more wait up to "
        "--queue-timeout-s, then get 503 (default: twice --max-concurrency)",
    )
    net.add_argument(
        "--shutdown-timeout-s",
        type=float,
        metavar="S",
        help="on SIGTERM, how long in-flight requests may take to finish (default 10)",
    )
    net.add_argument("--no-access-log", dest="access_log", action="store_false", help="no line per request")
    bundle = parser.add_argument_group("bundle")
    bundle.add_argument("--strict", action="store_true", help="refuse to start when the bundle cannot load")
    bundle.add_argument("--public-key", metavar="FILE", help="accept only bundles signed with this key")
    bundle.add_argument(
        "--watch", metavar="DIR_OR_URL", help="poll a folder or http(s) URL for new bundles; switch to them (verified)"
    )
    bundle.add_argument("--watch-interval-s", type=float, metavar="S", help="(default 60)")
    bundle.add_argument(
        "--policy",
        metavar="FILE",
        help="policy rules (JSON, or YAML with the yaml extra; docs/policies.md), reloaded when the file changes; "
        "requests pass their metadata in the body's `metadata` object",
    )
    bundle.add_argument("--policy-interval-s", type=float, metavar="S", help="(default 5)")
    shared = parser.add_argument_group("conversations and budgets")
    shared.add_argument(
        "--stickiness",
        metavar="WEIGHT",
        help="what moving a conversation to another endpoint weighs: never (every turn on its own), priced "
        "(the re-read of its history at its price; default), always (stay while the last endpoint may serve), "
        "or a weight >= 0 (docs/conversations.md)",
    )
    shared.add_argument(
        "--redis",
        metavar="URL",
        help="keep conversation state and the budgets' ledger in this Redis (redis://HOST:PORT/DB), shared by every "
        "proxy given it; default: in this process. Redis down: turns are decided without their state and "
        "budgets read as spent (docs/conversations.md)",
    )
    shared.add_argument(
        "--redis-env", metavar="VAR", help="the same URL read from this environment variable (one with a password)"
    )
    # every other option defaults to its ProxyConfig field's default (its help says which)
    fields = [f for f in dataclasses.fields(ProxyConfig) if f.default is not dataclasses.MISSING]
    parser.set_defaults(**{f.name: f.default for f in fields if f.name not in BUILT_FIELDS})
