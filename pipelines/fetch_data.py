"""`make data`: download the pinned public RouteLLM outcome logs into data/raw/routellm.

The plan, the download and its checks live in data.fetch (`make train` on a machine with
no logs fetches through the same code); files already present are kept unless --force.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from data.fetch import DownloadError, fastchat_url, fetch, file_plan, routellm_url


def main(
    dest: Path = Path("data/raw/routellm"),
    routellm: Annotated[
        Optional[str],
        typer.Option("--routellm-url", help="RouteLLM base URL (default: ROUTER_ROUTELLM_URL, else the pinned commit)"),
    ] = None,
    fastchat: Annotated[
        Optional[str],
        typer.Option("--fastchat-url", help="FastChat base URL (default: ROUTER_FASTCHAT_URL, else the pinned commit)"),
    ] = None,
    force: bool = False,
) -> None:
    """Download the pinned public RouteLLM logs."""
    from rich.progress import Progress

    urls = {"routellm_url": routellm or routellm_url(), "fastchat_url": fastchat or fastchat_url()}
    plan = file_plan(**urls)
    try:
        with Progress() as bar:
            task = bar.add_task("downloading RouteLLM logs", total=len(plan))
            written = fetch(dest, force=force, progress=lambda: bar.advance(task), **urls)
    except DownloadError as exc:  # the reason is the message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from exc
    print(f"{len(written)} file(s) written, {len(plan) - len(written)} already present, in {dest}")


if __name__ == "__main__":
    typer.run(main)
