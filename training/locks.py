"""An exclusive lock between processes: an OS file lock that dies with its holder, so a
killed process never leaves a stale lock behind."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def file_lock(path: Path, *, what: str | None = None) -> Iterator[bool]:
    """Hold the lock file `path` (created if needed) while the block runs. When another process
    holds it: with `what` (the thing protected, named in one warning) wait for it; without, do not
    wait. Yields whether this process holds it."""
    import fcntl

    if what is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if what is None:
                yield False
                return
            log.warning("another process is using %s; waiting for it", what)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
