"""Read and verify a routing bundle: manifest.json and the files it lists with their SHA-256
(docs/sdk.md#loading-a-bundle). Every listed file is read once, verified, and handed to the runtime
from memory: nothing the SDK uses is read from disk after it was checked, nothing unlisted at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from serving._contract import MANIFEST_NAME, MAX_FILE_BYTES, MAX_MANIFEST_BYTES, SCHEMA_VERSION
from serving._router_error import RouterError
from serving.bundle._manifest import Manifest, ManifestError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from serving._json_types import JSONObject
    from serving.bundle._signing import PinnedKey


class BundleError(RouterError, RuntimeError):
    """The bundle is missing, incomplete, tampered with, invalid, or of an unknown schema version."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(manifest: JSONObject) -> str:
    """SHA-256 of the manifest's canonical JSON without its own `manifest_sha256` field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def _read_plain_file(folder: Path, name: str, cap: int) -> bytes:
    """The bytes of `folder/name`: a regular file, not a symlink, at most `cap` bytes."""
    path = folder / name
    try:
        # O_NOFOLLOW: a symlink is refused by the open itself, not by a check that could race.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise BundleError(f"{folder}: {name} is listed in the manifest but missing") from None
    except OSError as exc:
        kind = "a symlink" if path.is_symlink() else "unreadable"
        raise BundleError(f"{folder}: {name} is {kind} ({exc.strerror}); bundle files must be plain files") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BundleError(f"{folder}: {name} is not a regular file")
        if info.st_size > cap:
            raise BundleError(f"{folder}: {name} is {info.st_size:,} bytes, over the limit of {cap:,}")
        content = fh.read(cap + 1)
    if len(content) > cap:
        raise BundleError(f"{folder}: {name} grew over the limit of {cap:,} bytes while being read")
    return content


@dataclass(frozen=True)
class Bundle:
    """A verified bundle: its manifest and the content of every listed file."""

    folder: Path
    manifest: Manifest
    contents: dict[str, bytes]

    def content(self, name: str) -> bytes:
        """A listed file's verified bytes; BundleError if the manifest does not list it."""
        try:
            return self.contents[name]
        except KeyError:
            raise BundleError(f"{self.folder}: the model needs {name}, which the manifest does not list") from None


def _check_signature(folder: Path, data: JSONObject, public_key: PinnedKey) -> None:
    """With a pinned key, the bundle must carry that key's signature of its manifest."""
    from serving.bundle._signing import SIGNATURE_NAME, SigningError, load_public_key, verify

    try:
        # a loaded key (it has `verify`) is used as it is; a path or bytes is read first
        key = cast("Ed25519PublicKey", public_key) if hasattr(public_key, "verify") else load_public_key(public_key)
        if not (folder / SIGNATURE_NAME).exists():
            raise SigningError(f"no {SIGNATURE_NAME}: the bundle is unsigned, but a public key is pinned")
        verify(data, _read_plain_file(folder, SIGNATURE_NAME, 1024), key)
    except (SigningError, OSError) as exc:
        raise BundleError(f"{folder}: signature check failed: {exc}") from None


def read_bundle(folder: str | Path, *, public_key: PinnedKey | None = None) -> Bundle:
    """Read, check and verify a bundle folder (module doc); BundleError on any problem. With `public_key`
    (a path, PEM or raw bytes: serving.bundle._signing), the manifest must carry its signature too."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BundleError(f"no bundle folder at {folder} (is this a bundle written by `make train`?)")
    try:
        data = json.loads(_read_plain_file(folder, MANIFEST_NAME, MAX_MANIFEST_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BundleError(f"{folder / MANIFEST_NAME} is not valid JSON: {exc}"[:300]) from None
    if not isinstance(data, dict):
        raise BundleError(f"{folder / MANIFEST_NAME} must hold a JSON object")
    if data.get("schema_version") == SCHEMA_VERSION and data.get("manifest_sha256") != manifest_digest(data):
        raise BundleError(f"{folder / MANIFEST_NAME} does not match its manifest_sha256: edited after it was written")
    try:
        manifest = Manifest.from_dict(data)  # an unknown schema version is refused here
    except ManifestError as exc:
        raise BundleError(f"{folder / MANIFEST_NAME}: {exc}") from None
    if not manifest.files:
        raise BundleError(f"{folder / MANIFEST_NAME}: no 'files' table")
    contents = {}
    for name, expected in manifest.files.items():
        content = _read_plain_file(folder, name, MAX_FILE_BYTES)
        actual = hashlib.sha256(content).hexdigest()
        if actual != expected:
            raise BundleError(
                f"{folder}: {name} does not match its checksum "
                f"(expected {expected[:12]}..., found {actual[:12]}...): modified or truncated"
            )
        contents[name] = content
    if public_key is not None:
        _check_signature(folder, data, public_key)
    return Bundle(folder, manifest, contents)


def read_manifest(folder: str | Path) -> Manifest:
    """The verified manifest of a bundle folder (every listed file is checked too)."""
    return read_bundle(folder).manifest
