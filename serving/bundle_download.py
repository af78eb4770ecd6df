"""Download a bundle published over HTTP(S) into a private staging folder, within bounds.

A published bundle is a base URL serving the bundle folder's files: BASE/manifest.json, each
file the manifest lists (BASE/model.onnx, ...), and BASE/manifest.sig when the bundle is
signed. Nothing here trusts what it downloads: the file names are checked to be plain names
(serving.manifest's rule) before any is fetched, every read is capped (the manifest at
MAX_MANIFEST_BYTES, each file at MAX_FILE_BYTES, the whole bundle at MAX_BUNDLE_BYTES), only
http and https are followed (also on redirects), and everything else (checksums, values, the
pinned signature) is left to Router.update, which verifies the staged folder before using it.
Standard library only, so the SDK's core needs nothing more for it.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping
from urllib.parse import quote, urlsplit

from serving.contract import MANIFEST_NAME, MAX_FILE_BYTES
from serving.manifest import ManifestError, check_files
from serving.signing import SIGNATURE_NAME

MAX_BUNDLE_BYTES = 2 << 30
READ_BLOCK = 1 << 20


class DownloadError(RuntimeError):
    """The bundle could not be fetched; the message says which file and why."""


class _HTTPOnlyRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urlsplit(newurl).scheme not in ("http", "https"):
            raise DownloadError(f"{req.full_url} redirects to {newurl}: only http and https are followed")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_opener = urllib.request.build_opener(_HTTPOnlyRedirects)


def check_base_url(url: str) -> str:
    """`url` without a trailing slash, if it is an http(s) URL; ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: expected an http:// or https:// base URL of a bundle folder, without a query")
    return url.rstrip("/")


def fetch(url: str, cap: int, *, headers: Mapping[str, str], timeout_s: float, missing_ok: bool = False,
          into: Path | None = None) -> bytes | None:
    """The body at `url`, at most `cap` bytes (written to `into` instead, when given); None for a
    404 when `missing_ok`. DownloadError for anything else that is not a complete 200."""
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with _opener.open(request, timeout=timeout_s) as response:
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > cap:
                raise DownloadError(f"{url} is {int(declared):,} bytes, over the limit of {cap:,}")
            return _read(response, url, cap, into)
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and missing_ok:
            return None
        raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise DownloadError(f"{url}: {getattr(exc, 'reason', exc)}") from None


def _read(response, url: str, cap: int, into: Path | None) -> bytes | None:
    size, parts = 0, []
    with (open(into, "xb") if into is not None else _NoFile()) as out:
        while block := response.read(READ_BLOCK):
            size += len(block)
            if size > cap:
                raise DownloadError(f"{url} is over the limit of {cap:,} bytes")
            if into is not None:
                out.write(block)
            else:
                parts.append(block)
    return None if into is not None else b"".join(parts)


class _NoFile:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def download_bundle(base_url: str, manifest_raw: bytes, *, headers: Mapping[str, str] = {},
                    timeout_s: float = 60.0, staging_root: str | Path | None = None) -> Path:
    """A private folder (mode 700) holding `manifest_raw` (already fetched from base_url) and every
    file it lists, downloaded from base_url, plus manifest.sig when published. The caller loads
    it (Router.update) and removes it. DownloadError for any failure; nothing is left behind then."""
    try:
        manifest = json.loads(manifest_raw)
        names = list(check_files(manifest.get("files") if isinstance(manifest, dict) else None))
    except (ValueError, RecursionError, ManifestError) as exc:
        raise DownloadError(f"{base_url}/{MANIFEST_NAME} cannot be used: {exc}"[:500]) from None
    folder = Path(tempfile.mkdtemp(prefix="bundle-download-", dir=staging_root))  # mkdtemp: mode 700
    try:
        (folder / MANIFEST_NAME).write_bytes(manifest_raw)
        total = len(manifest_raw)
        for name in names:
            fetch(f"{base_url}/{quote(name)}", min(MAX_FILE_BYTES, MAX_BUNDLE_BYTES - total), headers=headers,
                  timeout_s=timeout_s, into=folder / name)
            total += os.path.getsize(folder / name)
        signature = fetch(f"{base_url}/{SIGNATURE_NAME}", 1024, headers=headers, timeout_s=timeout_s,
                          missing_ok=True)
        if signature is not None:
            (folder / SIGNATURE_NAME).write_bytes(signature)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder
