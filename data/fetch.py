"""The pinned public RouteLLM outcome logs: where they are published, and fetching them.

Files land in the layout the RouteLLM loader reads (mmlu/, gsm8k/, mt_bench/). They are
downloaded into a staging folder beside the destination and moved into it only when every
one of them is complete (the length the server announced) and matches its pinned SHA-256,
so a failed or interrupted fetch never leaves a folder that looks like logs. `make data`
(pipelines/fetch_data.py) and `make train` on a machine with no logs
(data.location.default_data_paths) both fetch through `fetch`. The base URLs can be pointed
elsewhere (a mirror, or a local server in tests) with ROUTER_ROUTELLM_URL and
ROUTER_FASTCHAT_URL.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from data.routellm import SUBJECT_DOMAIN

ROUTELLM_COMMIT = "0b64fdafe049e596a3f5657c219329f24af24198"
ROUTELLM_URL = f"https://raw.githubusercontent.com/lm-sys/RouteLLM/{ROUTELLM_COMMIT}"
# MT-Bench questions live in FastChat, which RouteLLM's MT-Bench evaluation reads.
FASTCHAT_COMMIT = "589532dcfa83700f950b9aa3983416c543afabc0"
FASTCHAT_URL = f"https://raw.githubusercontent.com/lm-sys/FastChat/{FASTCHAT_COMMIT}"
# SHA-256 of each file (by its path in the plan) at the pinned commits; a file listed here is
# rejected unless its bytes match.
PINNED_SHA256: Mapping[str, str] = {}


class DownloadError(RuntimeError):
    """A file could not be fetched; the message says which and what to do instead."""


def routellm_url() -> str:
    """The RouteLLM base URL: ROUTER_ROUTELLM_URL, else the pinned commit on GitHub."""
    return os.environ.get("ROUTER_ROUTELLM_URL") or ROUTELLM_URL


def fastchat_url() -> str:
    """The FastChat base URL (MT-Bench questions): ROUTER_FASTCHAT_URL, else the pinned commit."""
    return os.environ.get("ROUTER_FASTCHAT_URL") or FASTCHAT_URL


def file_plan(routellm_url: str = ROUTELLM_URL, fastchat_url: str = FASTCHAT_URL) -> list[tuple[str, str]]:
    """(destination relative path, source URL) for every file of the public logs."""
    evals = f"{routellm_url}/routellm/evals"
    plan = [(f"mmlu/mmlu_{s}.csv", f"{evals}/mmlu/responses/mmlu_{s}.csv") for s in sorted(SUBJECT_DOMAIN)]
    plan += [
        ("gsm8k/gsm8k_responses.csv", f"{evals}/gsm8k/gsm8k_responses.csv"),
        ("mt_bench/judgements.jsonl", f"{evals}/mt_bench/judgements.jsonl"),
        ("mt_bench/question.jsonl", f"{fastchat_url}/fastchat/llm_judge/data/mt_bench/question.jsonl"),
        ("LICENSE", f"{routellm_url}/LICENSE"),
    ]
    return plan


def download(url: str, target: Path, *, sha256: str | None = None, timeout: float = 30.0) -> None:
    """Fetch one URL to `target`, checking that all the bytes the server announced arrived
    (urllib returns a connection closed early as a short file) and, when given, their SHA-256.
    A failed download leaves no file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(target, "wb") as out:
            announced = response.headers.get("Content-Length")
            while chunk := response.read(1 << 16):
                digest.update(chunk)
                out.write(chunk)
            received = out.tell()
        if announced is not None and received != int(announced):
            raise DownloadError(
                f"could not download {url}: incomplete: {received} of {announced} bytes arrived. "
                "Run the command again; if it keeps failing, the server or a proxy cuts the transfer."
            )
        if sha256 is not None and digest.hexdigest() != sha256:
            raise DownloadError(
                f"{url} (saved as {target.name}) has SHA-256 {digest.hexdigest()}, not the pinned "
                f"{sha256}: the server does not hold the pinned files (a changed mirror, or a proxy "
                "that rewrites them). Use the default URL or a faithful mirror."
            )
    except (urllib.error.URLError, OSError) as exc:
        target.unlink(missing_ok=True)
        raise DownloadError(
            f"could not download {url}: {exc}. If this machine is offline, copy a RouteLLM data "
            "folder to it by hand and set ROUTER_DATA_DIR to that folder."
        ) from exc
    except DownloadError:
        target.unlink(missing_ok=True)
        raise


def fetch(
    dest: Path,
    *,
    routellm_url: str = ROUTELLM_URL,
    fastchat_url: str = FASTCHAT_URL,
    force: bool = False,
    checksums: Mapping[str, str] = PINNED_SHA256,
    progress: Callable[[], None] | None = None,
) -> list[Path]:
    """Download every planned file that is missing from `dest` (all of them with force) and
    return where they were written. Files arrive in `dest`.part and move into `dest` only
    when all of them are complete and verified; on any failure `dest` stays as it was and the
    staging folder is removed."""
    staging = dest.with_name(dest.name + ".part")
    shutil.rmtree(staging, ignore_errors=True)  # what an interrupted fetch left
    wanted = []
    try:
        for relative, url in file_plan(routellm_url, fastchat_url):
            if force or not (dest / relative).exists():
                download(url, staging / relative, sha256=checksums.get(relative))
                wanted.append(relative)
            if progress:
                progress()
        install(staging, dest, wanted)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [dest / relative for relative in wanted]


def install(staging: Path, dest: Path, files: list[str]) -> None:
    """Move the verified files from `staging` into `dest`: the whole folder in one rename when
    `dest` does not exist yet (the logs appear complete or not at all), file by file otherwise."""
    if not files:
        return
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(dest)
        return
    for relative in files:
        (dest / relative).parent.mkdir(parents=True, exist_ok=True)
        (staging / relative).replace(dest / relative)
