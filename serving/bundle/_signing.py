"""Ed25519 signatures of bundles: who wrote a bundle, not only whether it is intact. The SHA-256 list
stops corruption, not someone who can rewrite a file and its checksum: training signs the manifest's
canonical JSON with the team's private key (`manifest.sig`), and an SDK given the public key accepts
only bundles that carry a valid signature (docs/sdk.md, "Signed bundles"). The cryptography is the
`cryptography` package's (the `[signing]` extra)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Union

from serving._router_error import RouterError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from typing_extensions import TypeAlias

    from serving._json_types import JSONObject

    # A key an app pins: a PEM file's path, PEM bytes, the 32 raw key bytes, or a loaded key.
    PinnedKey: TypeAlias = Union[str, Path, bytes, Ed25519PublicKey]

SIGNATURE_NAME = "manifest.sig"
SIGNATURE_BYTES = 64


class SigningError(RouterError, ValueError):
    """A key could not be read, or a signature does not verify."""


def signed_bytes(manifest: JSONObject) -> bytes:
    """What is signed: the manifest's canonical JSON (it lists every file's SHA-256)."""
    return json.dumps(manifest, sort_keys=True, ensure_ascii=True).encode()


def load_public_key(key: str | Path | bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file's path, PEM bytes, or the 32 raw key bytes."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:  # pragma: no cover - the [signing] extra is installed in tests
        raise SigningError(
            "verifying signed bundles needs the `cryptography` package: pip install 'edge-cloud-router[signing]'"
        ) from exc

    data = key if isinstance(key, bytes) else Path(key).read_bytes()
    try:
        if len(data) == 32:
            return ed25519.Ed25519PublicKey.from_public_bytes(data)
        loaded = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"not an Ed25519 public key: {exc}") from None
    if not isinstance(loaded, ed25519.Ed25519PublicKey):
        raise SigningError(f"not an Ed25519 public key: {type(loaded).__name__}")
    return loaded


def verify(manifest: JSONObject, signature: bytes, public_key: Ed25519PublicKey) -> None:
    """SigningError unless `signature` is `public_key`'s signature of the manifest."""
    from cryptography.exceptions import InvalidSignature  # installed: public_key is one of its keys

    if len(signature) != SIGNATURE_BYTES:
        raise SigningError(f"{SIGNATURE_NAME} holds {len(signature)} bytes, not an Ed25519 signature")
    try:
        public_key.verify(signature, signed_bytes(manifest))
    except InvalidSignature:
        raise SigningError(f"{SIGNATURE_NAME} is not a signature of this manifest by the pinned key") from None
