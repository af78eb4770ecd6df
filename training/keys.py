"""The team's bundle-signing key pair (Ed25519, the `cryptography` package): generate it,
and sign a manifest with its private half. The SDK verifies with the public half
(serving.bundle._signing). The private key stays with whoever trains: it never enters a bundle."""

from __future__ import annotations

import os
from pathlib import Path

from serving.bundle._signing import signed_bytes

PRIVATE_NAME, PUBLIC_NAME = "router.key", "router.pub"


def generate(folder: Path, *, overwrite: bool = False) -> tuple[Path, Path]:
    """Write folder/router.key (PEM, PKCS8, readable by the owner only) and folder/router.pub (PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    folder.mkdir(parents=True, exist_ok=True)
    private, public = folder / PRIVATE_NAME, folder / PUBLIC_NAME
    if private.exists() and not overwrite:
        raise FileExistsError(f"{private} exists; refusing to replace a signing key (remove it first)")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    descriptor = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as fh:
        fh.write(pem)
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def sign(manifest: dict, private_key: str | Path) -> bytes:
    """The Ed25519 signature of a manifest (its canonical JSON) with the PEM private key at `private_key`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = serialization.load_pem_private_key(Path(private_key).read_bytes(), password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError(f"{private_key} is not an Ed25519 private key")
    return key.sign(signed_bytes(manifest))
