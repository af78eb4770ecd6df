"""Serve any ASGI app on 127.0.0.1 from a daemon thread, in the test's own process."""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING

try:
    import uvicorn
except ImportError as exc:
    raise ImportError("serving.testing serves with uvicorn: pip install 'edge-cloud-router[server]'") from exc

from serving.proxy._serve import bind

if TYPE_CHECKING:
    from typing import Literal

    from starlette.types import ASGIApp  # the ASGI interface's type, nothing of starlette


class LocalServer:
    """An ASGI app served by uvicorn on 127.0.0.1 from a daemon thread: `LocalServer(app).start()`,
    then `port`, and `stop()` (which waits for in-flight requests up to a second). Serves the
    proxy's app as well as a stub: `LocalServer(build_app(chat, config), lifespan="on")`."""

    def __init__(
        self, app: ASGIApp, *, port: int = 0, name: str = "local-server", lifespan: Literal["auto", "on", "off"] = "off"
    ) -> None:
        self.app, self.name, self.lifespan = app, name, lifespan
        self._sock = bind("127.0.0.1", port)
        self.port: int = self._sock.getsockname()[1]
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> LocalServer:
        config = uvicorn.Config(
            self.app,
            lifespan=self.lifespan,
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=1,
            timeout_keep_alive=30,
        )
        server = self._server = uvicorn.Server(config)
        thread = self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [self._sock]}, daemon=True, name=self.name
        )
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:  # started with the server
                self._thread.join(timeout=10)
            self._server = None
        self._sock.close()


def dead_url() -> str:
    """An API root on 127.0.0.1 where nothing listens (connections refused): `Endpoint(dead_url(), "small")` is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
