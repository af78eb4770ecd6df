"""`python -m serving serve`: load the bundle, build the app, and serve it with uvicorn until
SIGTERM or Ctrl-C, after which in-flight requests get up to shutdown_timeout_s to finish. The
socket is bound here, before uvicorn starts, so that port 0 works and a refused bind fails
before anything else. Every log handler is behind a RedactingFilter that knows the keys and the token.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import logging.config
import signal
import socket
import threading
from typing import TYPE_CHECKING

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from serving.bundle._bundle import BundleError
from serving.bundle._watcher import BundleURLWatcher, BundleWatcher, PolicyWatcher
from serving.chat._client import RoutedChat
from serving.conversations._store import RedisStore
from serving.conversations._switch import Stickiness
from serving.policy._budgets import RedisSpending
from serving.policy._rules import PolicyFileError
from serving.proxy._app import build_app
from serving.proxy._config import ProxyConfig
from serving.proxy._protocol import with_deadlines
from serving.proxy._security import RedactingFilter
from serving.routing._router import Router

if TYPE_CHECKING:
    from collections.abc import Iterator

    from serving._json_types import JSONObject

log = logging.getLogger("serving.proxy")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (IPv4 or IPv6)."""
    addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = addresses[0]
    # IPPROTO_TCP, never 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and
    # without it responses written in two parts wait ~40 ms for a delayed ACK (Nagle's algorithm)
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(2048)
    return sock


def log_config() -> JSONObject:
    """uvicorn's logging setup, plus the root logger (the router's own lines) on the same handler."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["default"]["fmt"] = "%(asctime)s %(levelprefix)s %(name)s: %(message)s"
    config["loggers"][""] = {"handlers": ["default"], "level": "INFO"}
    config["loggers"]["uvicorn"]["propagate"] = False
    config["loggers"]["httpx2"] = config["loggers"]["httpcore2"] = {"level": "WARNING"}
    return config


def watchers_for(router: Router, config: ProxyConfig) -> list[BundleWatcher | BundleURLWatcher | PolicyWatcher]:
    """The started watchers: of --watch (a folder or an http(s) URL) and of the --policy file."""
    watchers: list[BundleWatcher | BundleURLWatcher | PolicyWatcher] = []
    if config.watch:
        kind = BundleURLWatcher if config.watch.startswith(("http://", "https://")) else BundleWatcher
        watchers.append(kind(router, config.watch, interval_s=config.watch_interval_s).start())
    if config.policy:
        watchers.append(PolicyWatcher(router, config.policy, interval_s=config.policy_interval_s).start())
    return watchers


@contextlib.contextmanager
def _quiet_exit_signals() -> Iterator[None]:
    """SIGTERM and SIGINT while serving mean a clean shutdown and exit code 0: uvicorn shuts down on them,
    then raises the signal again for the handler it found: this one, which does nothing, so nothing is killed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(config: ProxyConfig) -> int:
    """Run the proxy until it is told to stop: 0 after a clean shutdown, 1 when it cannot start (the
    address is taken; with --strict, the bundle cannot load; the upstreams are not the bundle's endpoints)."""
    logging_setup = log_config()
    logging.config.dictConfig(logging_setup)
    redacting = RedactingFilter(config.secrets)
    redacting.install()
    try:
        sock = bind(config.host, config.port)
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    try:
        router = Router.load(
            config.bundle,
            strict=config.strict,
            public_key=config.public_key,
            policy=config.policy,
            conversations=RedisStore(config.redis) if config.redis is not None else None,  # None: the router's own
            stickiness=Stickiness(config.stickiness_weight),
        )
    except (OSError, BundleError, PolicyFileError) as exc:
        sock.close()  # the address is free again at once, for a retry or another process
        log.error("cannot start: %s", exc)
        return 1
    if config.redis is not None:
        router.spending = ledger = RedisSpending(config.redis)
        try:
            ledger.client.ping()
        except Exception as exc:  # redis.RedisError, OSError: the proxy serves anyway until Redis answers
            log.warning(
                "Redis %s does not answer (%s): serving anyway; until it does, turns are decided without their "
                "conversation's state and budgets read as spent",
                config.redis_shown,
                type(exc).__name__,
            )
    mismatch = config.bundle_mismatch(router.endpoint_names)
    if mismatch is not None:
        sock.close()
        log.error("cannot start: %s", mismatch)
        return 1
    chat = RoutedChat(router, endpoints=config.upstreams)
    app = build_app(chat, config, on_shutdown=[w.stop for w in watchers_for(router, config)])
    host, port = sock.getsockname()[:2]
    protocol = with_deadlines(
        config.header_timeout_s,
        config.body_timeout_s,
        on_header_timeout=lambda: app.state.metrics.failed("header_timeout"),
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            http=protocol,
            log_config=logging_setup,
            access_log=config.access_log,
            server_header=False,
            timeout_graceful_shutdown=max(1, round(config.shutdown_timeout_s)),
            timeout_keep_alive=5,
        )
    )
    redacting.install()  # uvicorn.Config set the handlers up again
    shown = f"[{host}]" if ":" in host else host
    log.info(
        "serving on http://%s:%s/v1 (model %r; %s; bundle %s%s; %s; conversations %s, stickiness %s)",
        shown,
        port,
        config.served_model,
        ", ".join(f"{name} {options.model}" for name, options in config.upstreams.items()),
        router.model_version,
        ", degraded" if router.degraded else "",
        "token required" if config.token else "no token",
        f"and budgets in Redis {config.redis_shown}" if config.redis else "in this process",
        config.stickiness,
    )
    with _quiet_exit_signals():
        server.run(sockets=[sock])
    chat.close()
    log.info("shutdown complete")
    return 0
