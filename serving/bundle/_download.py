"""Download a bundle published over HTTP(S) into a private staging folder, within bounds
(docs/clients.md#bundles-from-a-url). Nothing downloaded is trusted: the file names are checked before
any is fetched, each request is bounded (fetch, _Deadline) and redirected safely (_SafeRedirects), and
Router.update verifies the staged folder before using it. Standard library only.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import quote, urlsplit, urlunsplit

from serving._contract import MANIFEST_NAME, MAX_FILE_BYTES
from serving._router_error import RouterError
from serving.bundle._bundle import sha256_file
from serving.bundle._manifest import check_files
from serving.bundle._signing import SIGNATURE_NAME

if TYPE_CHECKING:
    from typing import IO

MAX_BUNDLE_BYTES = 2 << 30
READ_BLOCK = 1 << 20
DEFAULT_PORTS = {"http": 80, "https": 443}


class DownloadError(RouterError, RuntimeError):
    """The bundle could not be fetched; the message says which file and why."""


def _origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port): two URLs with the same origin are the same server, as browsers judge it."""
    parts = urlsplit(url)
    return parts.scheme, parts.hostname or "", parts.port or DEFAULT_PORTS.get(parts.scheme, 0)


def _shown(url: str) -> str:
    """`url` as messages show it: without user info, query or fragment (a presigned URL's signature)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


class _SafeRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects to http(s) only, never from https down to http; a redirect to another origin goes without
    the caller's headers (urllib would copy them, Authorization included, to any host it names)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        scheme = urlsplit(newurl).scheme
        if scheme not in ("http", "https"):
            raise DownloadError(f"{req.full_url} redirects to {_shown(newurl)}: only http and https are followed")
        if urlsplit(req.full_url).scheme == "https" and scheme == "http":
            raise DownloadError(
                f"{req.full_url} redirects to {_shown(newurl)}: a redirect from https down to http is refused"
            )
        redirected = super().redirect_request(req, fp, code, msg, headers, newurl)
        if redirected is not None and _origin(redirected.full_url) != _origin(req.full_url):
            redirected.headers.clear()  # only the caller's headers; urllib adds Host and User-Agent itself
        return redirected


class _Deadline(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """The end of one request, redirects included: connecting, the headers and the whole body; and
    urllib's http and https handler for it, whose connections it watches. A socket timeout bounds
    each read, so a server that sends a byte now and then could hold a request for ever: at the
    deadline every connection the request opened is shut down, which ends whatever read is waiting
    on it, TLS or not. Each connection is watched through a duplicate of its socket: the duplicate
    stays valid when TLS takes the socket over, and its descriptor cannot be reused by another
    connection before the request ends."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self.timeout_s, self.end = timeout_s, time.monotonic() + timeout_s
        self.expired = False
        self._watched: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            watched, self._watched = self._watched, []
        for sock in watched:
            sock.close()

    def connect(
        self, address: tuple[str, int], timeout: object = None, source_address: tuple[str, int] | None = None
    ) -> socket.socket:
        # timeout: seconds, None, or socket's "global default" sentinel, as http.client passes it
        """socket.create_connection within what is left of the deadline, the connection watched."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the deadline of {self.timeout_s:g} s passed before connecting")
        limit = min(timeout, left) if isinstance(timeout, (int, float)) else left
        sock = socket.create_connection(address, limit, source_address)
        with self._lock:
            if not self.expired:
                self._watched.append(sock.dup())
                return sock
        sock.close()
        raise TimeoutError(f"the deadline of {self.timeout_s:g} s passed while connecting")

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._watched:
                with contextlib.suppress(OSError):  # already closed by the other side
                    sock.shutdown(socket.SHUT_RDWR)

    def watched(self, connection_class: type[http.client.HTTPConnection]) -> Callable[..., http.client.HTTPConnection]:
        """A factory of `connection_class` (http.client's) whose connections this deadline watches."""

        def connection(host: str, **kwargs: Any) -> http.client.HTTPConnection:
            conn = connection_class(host, **kwargs)
            # http.client's hook for opening the socket; typeshed does not declare it
            conn._create_connection = self.connect  # type: ignore[attr-defined]
            return conn

        return connection

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self.watched(http.client.HTTPConnection), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        # urllib's HTTPSHandler keeps its SSL context in _context, which typeshed does not declare
        context = self._context  # type: ignore[attr-defined]
        return self.do_open(self.watched(http.client.HTTPSConnection), req, context=context)


def check_base_url(url: str) -> str:
    """`url` without a trailing slash, if it is an http(s) URL; ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: expected an http:// or https:// base URL of a bundle folder, without a query")
    return url.rstrip("/")


def fetch(
    url: str,
    cap: int,
    *,
    headers: Mapping[str, str],
    timeout_s: float,
    missing_ok: bool = False,
    into: Path | None = None,
) -> bytes | None:
    """The body at `url`, at most `cap` bytes (written to `into` instead, when given), complete within
    `timeout_s` and as long as its Content-Length says; None for a 404 when `missing_ok`; else DownloadError."""
    request = urllib.request.Request(url, headers=dict(headers))
    with _Deadline(timeout_s) as deadline:
        opener = urllib.request.build_opener(_SafeRedirects, deadline)
        try:
            with opener.open(request, timeout=timeout_s) as response:
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > cap:
                    raise DownloadError(f"{url} is {int(declared):,} bytes, over the limit of {cap:,}")
                size, body = _read(response, url, cap, into)
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and missing_ok:
                return None
            raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            if deadline.expired or time.monotonic() >= deadline.end:
                raise _too_slow(url, timeout_s) from None
            raise DownloadError(f"{url}: {getattr(exc, 'reason', exc)}") from None
        if deadline.expired:  # a body cut at the deadline can end like a complete one
            raise _too_slow(url, timeout_s)
    if declared.isdigit() and size < int(declared):  # http.client ends a read at the close, without an error
        raise DownloadError(
            f"{url}: the connection closed after {size:,} of its {int(declared):,} bytes (Content-Length)"
        )
    return body


def _too_slow(url: str, timeout_s: float) -> DownloadError:
    return DownloadError(f"{url}: not complete within timeout_s={timeout_s:g} s")


def _read(response: http.client.HTTPResponse, url: str, cap: int, into: Path | None) -> tuple[int, bytes | None]:
    """(bytes read, the body or None when written to `into`), until the server ends the body."""
    size = 0
    with open(into, "xb") if into is not None else io.BytesIO() as out:
        while block := response.read(READ_BLOCK):
            size += len(block)
            if size > cap:
                raise DownloadError(f"{url} is over the limit of {cap:,} bytes")
            out.write(block)
        return size, out.getvalue() if isinstance(out, io.BytesIO) else None


def download_bundle(
    base_url: str,
    manifest_raw: bytes,
    *,
    headers: Mapping[str, str] = {},
    timeout_s: float = 60.0,
    staging_root: str | Path | None = None,
) -> Path:
    """A private folder (mode 700) holding `manifest_raw` (already fetched from base_url) and every
    file it lists, downloaded from base_url, plus manifest.sig when published. The caller loads
    it (Router.update) and removes it. DownloadError for any failure, a file whose SHA-256 is not
    the manifest's among them; nothing is left behind then."""
    try:
        manifest = json.loads(manifest_raw)
        files = check_files(manifest.get("files") if isinstance(manifest, dict) else None)
    except (ValueError, RecursionError) as exc:  # a ManifestError is a ValueError
        raise DownloadError(f"{base_url}/{MANIFEST_NAME} cannot be used: {exc}"[:500]) from None
    folder = Path(tempfile.mkdtemp(prefix="bundle-download-", dir=staging_root))  # mkdtemp: mode 700
    try:
        (folder / MANIFEST_NAME).write_bytes(manifest_raw)
        total = len(manifest_raw)
        for name, expected in files.items():
            url, cap = f"{base_url}/{quote(name)}", min(MAX_FILE_BYTES, MAX_BUNDLE_BYTES - total)
            fetch(url, cap, headers=headers, timeout_s=timeout_s, into=folder / name)
            actual = sha256_file(folder / name)
            if actual != expected:
                raise DownloadError(
                    f"{_shown(url)}: SHA-256 {actual[:12]}..., the manifest lists {expected[:12]}...: the store does "
                    "not hold the bundle its manifest describes (still being published?); fetched again at the next poll"
                )
            total += os.path.getsize(folder / name)
        signature = fetch(f"{base_url}/{SIGNATURE_NAME}", 1024, headers=headers, timeout_s=timeout_s, missing_ok=True)
        if signature is not None:
            (folder / SIGNATURE_NAME).write_bytes(signature)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder
