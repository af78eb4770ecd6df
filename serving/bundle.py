"""Read and verify a routing bundle: manifest.json + the files it lists with their SHA-256."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


class BundleError(RuntimeError):
    """The bundle is missing, incomplete, tampered with, or of an unknown schema version."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(manifest: dict) -> str:
    """SHA-256 of the manifest's canonical JSON without its own `manifest_sha256` field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def read_manifest(folder: str | Path, *, verify: bool = True) -> dict:
    """The manifest of a bundle folder, after checking its schema version and every file's hash."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise BundleError(f"no {MANIFEST} in {folder} (is this a bundle written by `make train`?)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path} is unreadable: {exc}") from exc
    version = manifest.get("schema_version") if isinstance(manifest, dict) else None
    if version != SCHEMA_VERSION:
        raise BundleError(f"{path}: schema_version {version!r} is not supported (this SDK reads {SCHEMA_VERSION})")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BundleError(f"{path}: no 'files' table")
    if verify:
        if manifest.get("manifest_sha256") != manifest_digest(manifest):
            raise BundleError(f"{path} does not match its manifest_sha256: edited after it was written")
        for name, expected in files.items():
            file = folder / name
            if not file.is_file():
                raise BundleError(f"{folder}: {name} is listed in the manifest but missing")
            actual = sha256_file(file)
            if actual != expected:
                raise BundleError(f"{folder}: {name} does not match its checksum "
                                  f"(expected {expected[:12]}..., found {actual[:12]}...): modified or truncated")
    return manifest
