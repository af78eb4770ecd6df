"""An exclusive lock between processes: an OS file lock that dies with its holder, so a
killed process never leaves a stale lock behind."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def file_lock(path: Path, *, what: str) -> Iterator[None]:
    """Hold the lock file `path` (created if needed); waits, with one warning, while another
    process holds it. `what` names the thing protected, for that warning."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("another process is using %s; waiting for it", what)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def held_lock(path: Path) -> Iterator[bool]:
    """Try once to take the lock file `path` (created if needed): yields whether this process
    now holds it (False: another process does), and releases it on exit."""
    import fcntl

    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
