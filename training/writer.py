"""Write a bundle so that its folder always holds a complete, verified bundle or the previous
one (docs/training.md#bundle-writing-guarantees): a lock on the path (`.NAME.lock` beside it),
leftovers of killed runs cleaned, files and manifest staged in a temporary sibling folder
(fsync'ed) where the caller checks them, then `publish()`: one atomic exchange of the two folders
on Linux (renameat2 RENAME_EXCHANGE), two renames elsewhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from serving._contract import MANIFEST_NAME
from serving.bundle._bundle import manifest_digest, sha256_file
from serving.bundle._manifest import Manifest
from serving.bundle._signing import SIGNATURE_NAME
from training.locks import file_lock

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _sibling(dest: Path, kind: str) -> Path:
    return dest.parent / f".{dest.name}.{kind}-{uuid.uuid4().hex[:8]}"


def bundle_lock(dest: Path):
    """The lock of bundle path `dest` (`.NAME.lock` beside it)."""
    return file_lock(dest.parent / f".{dest.name}.lock", what=f"bundle {dest}")


def clean_leftovers(dest: Path) -> None:
    """Under the lock: put back a parked previous bundle if a swap was cut short, and remove
    the temporary folders of killed runs."""
    parked = sorted(dest.parent.glob(f".{dest.name}.old-*"))
    if parked and not dest.exists():
        parked.pop().rename(dest)
    for leftover in [*parked, *dest.parent.glob(f".{dest.name}.tmp-*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the system cannot."""
    libc_name = ctypes.util.find_library("c")
    renameat2 = getattr(ctypes.CDLL(libc_name, use_errno=True), "renameat2", None) if libc_name else None
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: this file system or kernel cannot
        return False
    raise OSError(errno, f"cannot swap {a} and {b}: {os.strerror(errno)}")


def _write_files(
    folder: Path, files: dict[str, bytes | Path], manifest: Manifest, signing_key: Path | None = None
) -> Manifest:
    checksums = {}
    for name, content in files.items():
        target = folder / name
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        else:
            target.write_bytes(content)
        checksums[name] = sha256_file(target)
    data = {**manifest.to_dict(), "files": checksums}
    data["manifest_sha256"] = manifest_digest(data)
    with open(folder / MANIFEST_NAME, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    if signing_key is not None:  # serving.bundle._signing: the signature of the manifest, beside it
        from training.keys import sign

        (folder / SIGNATURE_NAME).write_bytes(sign(data, signing_key))
    return replace(manifest, files=checksums, manifest_sha256=data["manifest_sha256"])


@dataclass
class StagedBundle:
    """A complete bundle in its temporary folder, until `publish` moves it to `dest`."""

    folder: Path
    dest: Path
    manifest: Manifest

    def publish(self) -> None:
        """Put this bundle at `dest` in one step; the previous one (if any) is removed after."""
        if not self.dest.exists():
            self.folder.rename(self.dest)
        elif _exchange(self.folder, self.dest):
            shutil.rmtree(self.folder, ignore_errors=True)  # now holds the previous bundle
        else:
            parked = _sibling(self.dest, "old")
            self.dest.rename(parked)
            self.folder.rename(self.dest)
            shutil.rmtree(parked, ignore_errors=True)
        self.folder = self.dest


@contextlib.contextmanager
def staged_bundle(
    dest: Path, files: dict[str, bytes | Path], manifest: Manifest, *, signing_key: Path | None = None
) -> Iterator[StagedBundle]:
    """Lock `dest`, write the bundle (signed with `signing_key` when given) into a temporary
    folder and yield it; the caller checks it and calls publish(). Anything raised leaves
    `dest` as it was."""
    dest = Path(dest)
    with bundle_lock(dest):
        clean_leftovers(dest)
        tmp = _sibling(dest, "tmp")
        tmp.mkdir()
        try:
            yield StagedBundle(tmp, dest, _write_files(tmp, files, manifest, signing_key))
        finally:
            if tmp.exists():  # not published: an error, or the caller chose not to
                shutil.rmtree(tmp, ignore_errors=True)


def write_bundle(
    dest: Path, files: dict[str, bytes | Path], manifest: Manifest, *, signing_key: Path | None = None
) -> Path:
    """Write and publish a bundle with no further checks (tests and tools)."""
    with staged_bundle(dest, files, manifest, signing_key=signing_key) as staged:
        staged.publish()
    return Path(dest)
