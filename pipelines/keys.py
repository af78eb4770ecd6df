"""`make keys KEYS=dir`: a new Ed25519 key pair for signing bundles, dir/router.key and dir/router.pub."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def main(out: Annotated[Path, typer.Option(help="folder for router.key and router.pub")] = Path("keys")) -> None:
    """Generate the key pair; never overwrites an existing private key."""
    from training.keys import generate

    try:
        private, public = generate(out)
    except FileExistsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--out") from None
    print(f"private key: {private} (keep it out of bundles and git: `make train SIGNING_KEY={private}`)")
    print(f'public key: {public} (ship it with the app: `Router.load(path, public_key="{public}")`)')


if __name__ == "__main__":
    typer.run(main)
