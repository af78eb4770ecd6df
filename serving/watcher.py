"""Poll a bundle folder and update a Router when a new bundle lands there (Router.update
verifies it first; a refused bundle is reported once, then ignored until it changes again).

Deliver bundles to the folder atomically, as `make train` does (write beside, then rename):
the watcher reads the manifest's own `manifest_sha256` to notice a change and leaves every
check to Router.update.
"""
from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from serving.contract import MANIFEST_NAME, MAX_MANIFEST_BYTES

log = logging.getLogger("serving")


class BundleWatcher:
    """`BundleWatcher(router, folder).start()`; `stop()` ends the polling thread."""

    def __init__(self, router, folder: str | Path, *, interval_s: float = 30.0):
        self.router, self.folder, self.interval_s = router, Path(folder), interval_s
        self.last_update = None               # the Router.Update of the latest change seen
        self._seen: str | None = self._fingerprint()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _fingerprint(self) -> str | None:
        """The folder's manifest digest, or None when there is no readable manifest."""
        try:
            path = self.folder / MANIFEST_NAME
            if path.stat().st_size > MAX_MANIFEST_BYTES:
                return None
            value = json.loads(path.read_text(encoding="utf-8")).get("manifest_sha256")
            return value if isinstance(value, str) else None
        except (OSError, ValueError, AttributeError, RecursionError):
            return None

    def check_now(self):
        """Update the router if the folder holds a bundle not seen before; returns the Update or None."""
        current = self._fingerprint()
        if current is None or current == self._seen:
            return None
        self._seen = current
        self.last_update = self.router.update(self.folder)
        return self.last_update

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check_now()
            except Exception as exc:  # the watcher never takes the app down
                log.warning("bundle watcher: %r", exc)

    def start(self) -> "BundleWatcher":
        self._thread = threading.Thread(target=self._run, name="bundle-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
