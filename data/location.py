"""Where the outcome logs are, when the user names none."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

FETCHED = Path("data/raw/routellm")  # where `make data`, and a training that finds no logs, put the public logs
FALLBACKS = (FETCHED, Path("../shared/data/routellm"))


class NoLogsError(FileNotFoundError):
    """No logs in any default place and the public ones could not be fetched; the message
    says where it looked, what it tried and what to do."""


def default_data_paths() -> list[Path]:
    """ROUTER_DATA_DIR, else data/raw/routellm, else ../shared/data/routellm, else the pinned
    public RouteLLM logs fetched into data/raw/routellm (what `make data` does), so that a
    fresh clone trains with nothing set up. A ROUTER_DATA_DIR that does not exist is an error,
    never a reason to fetch: the user named it. The fetch is announced on stderr."""
    env = os.environ.get("ROUTER_DATA_DIR")
    if env:
        if not Path(env).exists():
            raise FileNotFoundError(
                f"ROUTER_DATA_DIR={env} does not exist. Point it at a folder of logs "
                "(canonical JSONL/CSV/Parquet or RouteLLM layout), or unset it."
            )
        return [Path(env)]
    for path in FALLBACKS:
        if path.exists():
            return [path]
    return [fetch_public_logs(say=lambda line: print(line, file=sys.stderr, flush=True))]


def fetch_public_logs(say: Callable[[str], None]) -> Path:
    """The pinned public logs, downloaded and verified into data/raw/routellm by data.fetch.fetch;
    `say` tells the user what is downloaded from where, and what arrived."""
    from data.fetch import DownloadError, fastchat_url, fetch, pinned_checksums, routellm_url

    urls = {"routellm_url": routellm_url(), "fastchat_url": fastchat_url()}
    searched = (
        f"ROUTER_DATA_DIR is not set, and neither {FALLBACKS[0]} nor {FALLBACKS[1]} exists (relative to {Path.cwd()})"
    )
    say(
        f"no outcome logs in the default places ({searched}): downloading the pinned public RouteLLM logs from "
        f"{urls['routellm_url']} and {urls['fastchat_url']} into {FETCHED}, as `make data` does"
    )
    try:
        checksums = pinned_checksums()
        written = fetch(FETCHED, checksums=checksums, **urls)
    except DownloadError as exc:
        raise NoLogsError(
            f"no outcome logs found: {searched}. Downloading the pinned public RouteLLM logs into {FETCHED} "
            f"failed, and nothing of it was kept: {exc} To train, connect this machine and run again (or run "
            f"`make data`), pass --data PATH, set ROUTER_DATA_DIR=/path/to/logs, or place the RouteLLM folder at "
            f"{FALLBACKS[1]}."
        ) from exc
    size = sum(path.stat().st_size for path in written)
    pinned = sum(str(path.relative_to(FETCHED)) in checksums for path in written)
    say(
        f"downloaded {len(written)} files ({size / 1e6:.1f} MB) into {FETCHED}, each with all the bytes the server "
        f"announced" + (f", {pinned} matching their pinned SHA-256" if pinned else "")
    )
    return FETCHED
