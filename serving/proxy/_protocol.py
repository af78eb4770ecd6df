"""The proxy's HTTP/1.1 connections: uvicorn's h11 protocol, with deadlines on what a client sends
that nothing else bounds (docs/clients.md#secrets-deadlines-and-request-validation). uvicorn reads
a request's headers with no deadline, and reads and drops the rest of a body the app answered
without reading for as long as it comes. Here a request's headers must be complete within
`header_timeout_s` of the connection opening (or of the request's first byte on a kept-alive one),
else 408 with Connection: close; the rest of an unread body must arrive within `body_timeout_s` of
the answer, else the connection is closed. A body the app reads has the app's own deadline.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from serving.proxy._security import error_body


def with_deadlines(
    header_timeout_s: float, body_timeout_s: float, on_header_timeout: Callable[[], None]
) -> type[H11Protocol]:
    """The protocol class to give uvicorn (`uvicorn.Config(http=...)`); `on_header_timeout` is
    called for each 408 it sends (the proxy counts them)."""
    return type(
        "DeadlineH11Protocol",
        (DeadlineH11Protocol,),
        {
            "header_timeout_s": header_timeout_s,
            "body_timeout_s": body_timeout_s,
            "on_header_timeout": staticmethod(on_header_timeout),
        },
    )


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's H11Protocol with the module doc's deadlines: one timer per connection, for what it waits
    for ("headers" or "unread body"), not started again by each byte that arrives while it waits."""

    header_timeout_s: float  # these three are set by with_deadlines
    body_timeout_s: float
    on_header_timeout: Callable[[], None]

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # uvicorn's arguments, passed on as they are
        super().__init__(*args, **kwargs)
        self._waiting_for: str | None = None
        self._timer: asyncio.TimerHandle | None = None

    # uvicorn's H11Protocol narrows the transport to asyncio.Transport, with the same ignore
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._update_deadline(request_began=True)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._update_deadline(request_began=True)  # bytes of a request are here, or one is awaited with no timer

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._update_deadline(request_began=False)  # an idle connection is uvicorn's keep-alive timer's

    def connection_lost(self, exc: Exception | None) -> None:
        self._set_deadline(None)
        super().connection_lost(exc)

    def _update_deadline(self, request_began: bool) -> None:
        state = self.conn.their_state
        if state is h11.IDLE and request_began:
            self._set_deadline("headers")
        elif state is h11.SEND_BODY and self.cycle is not None and self.cycle.response_complete:
            self._set_deadline("unread body")
        else:  # the headers are in, and the app reads the body (under its own deadline) or it is all here
            self._set_deadline(None)

    def _set_deadline(self, waiting_for: str | None) -> None:
        if waiting_for == self._waiting_for:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting_for = waiting_for
        if waiting_for is not None and not self.transport.is_closing():
            delay = self.header_timeout_s if waiting_for == "headers" else self.body_timeout_s
            self._timer = self.loop.call_later(delay, self._expired)

    def _expired(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._waiting_for == "headers":  # no request was read: h11 cannot answer it, so the bytes go as they are
            body = error_body(
                f"the request headers did not arrive whole within {self.header_timeout_s:g} s",
                "invalid_request_error",
                "request_timeout",
            )
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
            )
            self.on_header_timeout()
        self.transport.close()
