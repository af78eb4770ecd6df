"""Poll for new bundles and policy files and update a Router when one changes (docs/sdk.md,
docs/clients.md#bundles-from-a-url): BundleWatcher (a folder), BundleURLWatcher (a bundle published
over HTTP(S)), PolicyWatcher (a policy file). Router.update verifies a bundle first; a refused bundle
or policy is reported once, then ignored until it changes again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from serving._contract import MANIFEST_NAME, MAX_MANIFEST_BYTES
from serving._json_values import finite_number

if TYPE_CHECKING:
    from typing_extensions import Self

    from serving.routing._router import Router, Update

log = logging.getLogger("serving")


class _Poller:
    """Runs `check_now()` every `interval_s` on a daemon thread until `stop()`; never raises there."""

    name = "bundle-watcher"

    def __init__(self, interval_s: float) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s={interval_s!r}: must be a positive number of seconds")
        self.interval_s = interval_s
        self.last_update: Update | None = None  # the Router.Update of the latest change seen
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check_now(self) -> object:  # pragma: no cover - each watcher defines it
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check_now()
            except Exception as exc:  # the watcher never takes the app down
                log.warning("%s: %s", self.name, exc)

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)


def _digest(raw: bytes | None) -> str | None:
    """A manifest's own `manifest_sha256`, or None when `raw` is not a manifest that has one."""
    try:
        value = json.loads(raw).get("manifest_sha256") if raw is not None else None
    except (ValueError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, str) else None


class BundleWatcher(_Poller):
    """`BundleWatcher(router, folder).start()`; `stop()` ends the polling thread."""

    def __init__(self, router: Router, folder: str | Path, *, interval_s: float = 30.0) -> None:
        super().__init__(interval_s)
        self.router, self.folder = router, Path(folder)
        self._seen: str | None = self._fingerprint()

    def _fingerprint(self) -> str | None:
        """The folder's manifest digest, or None when there is no readable manifest."""
        try:
            path = self.folder / MANIFEST_NAME
            if path.stat().st_size > MAX_MANIFEST_BYTES:
                return None
            return _digest(path.read_bytes())
        except OSError:
            return None

    def check_now(self) -> Update | None:
        """Update the router if the folder holds a bundle not seen before; returns the Update or None."""
        current = self._fingerprint()
        if current is None or current == self._seen:
            return None
        self._seen = current
        self.last_update = self.router.update(self.folder)
        return self.last_update


class BundleURLWatcher(_Poller):
    """`BundleURLWatcher(router, "https://host/bundles/live").start()` polls BASE/manifest.json and
    downloads a new bundle (not one the router already runs) into a staging folder under
    `staging_root` (default the system's temporary folder). `headers` go to the base URL's origin
    only; `timeout_s` is the deadline of each whole request (serving.bundle._download)."""

    name = "bundle-url-watcher"

    def __init__(
        self,
        router: Router,
        base_url: str,
        *,
        interval_s: float = 300.0,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        staging_root: str | Path | None = None,
    ) -> None:
        from serving.bundle._download import check_base_url

        super().__init__(interval_s)
        seconds = finite_number(timeout_s)  # 10**400 too: it would overflow as a deadline
        if seconds is None or seconds <= 0:
            raise ValueError(f"timeout_s={timeout_s!r}: must be a positive number of seconds")
        self.router, self.base_url = router, check_base_url(base_url)
        self.headers, self.timeout_s, self.staging_root = dict(headers or {}), timeout_s, staging_root
        self._seen: str | None = None

    def check_now(self) -> Update | None:
        """Download and update to the published bundle if it is new; returns the Update or None.
        Raises DownloadError when the manifest or a file cannot be fetched (the next poll retries)."""
        from serving.bundle._download import download_bundle, fetch

        raw = fetch(
            f"{self.base_url}/{MANIFEST_NAME}", MAX_MANIFEST_BYTES, headers=self.headers, timeout_s=self.timeout_s
        )
        digest = _digest(raw)
        running = getattr(self.router.manifest, "manifest_sha256", None)
        if raw is None or digest is None or digest in (self._seen, running):  # raw None: digest None too
            return None
        folder = download_bundle(
            self.base_url, raw, headers=self.headers, timeout_s=self.timeout_s, staging_root=self.staging_root
        )
        try:
            self.last_update = self.router.update(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self._seen = digest
        return self.last_update


@dataclass(frozen=True)
class PolicyReload:
    """What one PolicyWatcher check did: `reloaded` or not, and why; `version`: the policy in force;
    `file_version`: the version of the bytes read (PolicySet.version's digest; None: unreadable)."""

    reloaded: bool
    reason: str
    version: str | None
    file_version: str | None = None


class PolicyWatcher(_Poller):
    """`PolicyWatcher(router, "policy.json").start()` reloads the policy file when it changes. A file read
    half-written fails its checks (JSON cut short does not parse; a YAML policy file ends with the line
    `...`), is kept out and read again when it changes; writing it beside, then renaming, avoids the warning."""

    name = "policy-watcher"

    def __init__(self, router: Router, path: str | Path, *, interval_s: float = 5.0) -> None:
        super().__init__(interval_s)
        self.router, self.path = router, Path(path)
        self.last_reload: PolicyReload | None = None
        current = router.policy
        self._seen: str | None = current.version if current is not None and current.source == str(self.path) else None

    def check_now(self) -> PolicyReload | None:
        """Reload the file if its bytes changed since the last check; returns the PolicyReload or None."""
        from serving.policy._rules import MAX_POLICY_BYTES, PolicyFileError, PolicySet

        try:
            with self.path.open("rb") as file:
                raw = file.read(MAX_POLICY_BYTES + 1)
        except OSError as exc:
            return self._kept(f"cannot read {self.path}: {exc.strerror or exc}", None)
        digest = hashlib.sha256(raw).hexdigest()[:12]
        if digest == self._seen:
            return None
        self._seen = digest
        try:
            if len(raw) > MAX_POLICY_BYTES:
                raise PolicyFileError(f"policy file {self.path}: over {MAX_POLICY_BYTES:,} bytes")
            policy = PolicySet.parse(raw, source=str(self.path), endpoints=self.router.policy_endpoints)
            previous = self.router.policy
            self.router.policy = policy  # PolicyFileError when it names other endpoints than the bundle's
        except PolicyFileError as exc:
            return self._kept(str(exc), digest)
        were = len(previous.rules) if previous is not None else "none"
        message = "policy reloaded from %s: version %s, %d rules (were %s)"
        log.info(message, self.path, policy.version, len(policy.rules), were)
        reason = f"now version {policy.version} from {self.path}"
        self.last_reload = PolicyReload(True, reason, policy.version, policy.version)
        return self.last_reload

    def _kept(self, why: str, digest: str | None) -> PolicyReload | None:
        """The current policy stays; said once per state of the file (its bytes' digest, and why)."""
        last = self.last_reload
        if last is not None and not last.reloaded and last.file_version == digest and last.reason.endswith(why):
            return None
        current = self.router.policy
        version = current.version if current is not None else None
        shown = f" (file version {digest})" if digest is not None else ""
        log.warning("policy not reloaded, keeping version %s: %s%s", version, why, shown)
        self.last_reload = PolicyReload(False, f"kept version {version}: {why}", version, digest)
        return self.last_reload
