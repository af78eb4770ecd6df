"""A server on 127.0.0.1 that answers every request a byte at a time: the peer that a socket
timeout (which bounds each read, not the whole) cannot stop. Shared by the deadline tests."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class DrippingServer:
    """Answers any GET or POST with 200 and `body`, sending one byte every `interval_s`: the whole
    response (`drip="headers"`: the status line and headers come that slowly too), or the headers
    at once and then the body (`drip="body"`; its first `at_once` bytes come with the headers, as
    a stream's first event would). `answered` counts the requests it began to answer."""

    def __init__(
        self,
        body: bytes,
        *,
        drip: str = "body",
        interval_s: float = 0.5,
        content_type: str = "application/json",
        at_once: int = 0,
    ):
        if drip not in ("headers", "body"):
            raise ValueError(f"drip={drip!r}: 'headers' or 'body'")
        self.answered = 0
        counting = threading.Lock()
        stop = self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server interface
                with counting:
                    server.answered += 1
                head = (
                    f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n"
                ).encode()
                slow = head + body if drip == "headers" else body[at_once:]
                if drip == "body":
                    self.wfile.write(head + body[:at_once])
                try:
                    for i in range(len(slow)):
                        if stop.wait(interval_s):
                            return
                        self.wfile.write(slow[i : i + 1])
                except OSError:  # the client gave up
                    pass

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "DrippingServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def elapsed(fn, *args, **kwargs) -> tuple[float, object]:
    """(seconds `fn(*args, **kwargs)` took, what it returned or the exception it raised)."""
    start = time.monotonic()
    try:
        outcome = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the caller asserts what it was
        outcome = exc
    return time.monotonic() - start, outcome
