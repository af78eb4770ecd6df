"""A real redis-server for the tests (Debian's package; `make test` installs it when missing):
started on a free loopback port in a temporary folder, without persistence, stopped after."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def redis_on(folder: Path, port: int | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A fresh redis-server on 127.0.0.1 (`port`, or a free one), running while the context is
    open: (its URL, its process; a test may kill it to see what a Redis that is down does)."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed: the conversation-store tests need it (apt install redis-server)"
    port = port or free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert process.poll() is None, f"redis-server exited with {process.returncode}"
                assert time.monotonic() < deadline, "redis-server did not start within 10 s"
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", process
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """The URL of a fresh redis-server (redis_on), running while the context is open."""
    with redis_on(folder) as (url, _):
        yield url
