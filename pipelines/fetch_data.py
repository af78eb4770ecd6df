"""`make data`: download the pinned public RouteLLM outcome logs into data/raw/routellm.

Files land in the layout the RouteLLM loader reads (mmlu/, gsm8k/, mt_bench/). Each file
is written to a temporary name and renamed when complete; files already present are
kept unless --force. The base URLs can be pointed elsewhere (a mirror, or a local
server in tests).
"""
from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path

from data.routellm import SUBJECT_DOMAIN

ROUTELLM_COMMIT = "0b64fdafe049e596a3f5657c219329f24af24198"
ROUTELLM_URL = f"https://raw.githubusercontent.com/lm-sys/RouteLLM/{ROUTELLM_COMMIT}"
# MT-Bench questions live in FastChat, which RouteLLM's MT-Bench evaluation reads.
FASTCHAT_COMMIT = "589532dcfa83700f950b9aa3983416c543afabc0"
FASTCHAT_URL = f"https://raw.githubusercontent.com/lm-sys/FastChat/{FASTCHAT_COMMIT}"


class DownloadError(RuntimeError):
    """A file could not be fetched; the message says which and what to do instead."""


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


def download(url: str, target: Path, *, timeout: float = 30.0) -> None:
    """Fetch one URL to `target` atomically."""
    tmp = target.with_name(target.name + ".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise DownloadError(
            f"could not download {url}: {exc}. If this machine is offline, copy a RouteLLM data "
            f"folder to {target.parent.parent} by hand or set ROUTER_DATA_DIR to one.") from exc
    tmp.replace(target)


def fetch(dest: Path, *, routellm_url: str = ROUTELLM_URL, fastchat_url: str = FASTCHAT_URL,
          force: bool = False, progress=None) -> list[Path]:
    """Download every planned file that is missing (all of them with force); returns what was written."""
    written = []
    for relative, url in file_plan(routellm_url, fastchat_url):
        target = dest / relative
        if force or not target.exists():
            download(url, target)
            written.append(target)
        if progress:
            progress()
    return written


def main(dest: Path = Path("data/raw/routellm"), routellm_url: str = ROUTELLM_URL,
         fastchat_url: str = FASTCHAT_URL, force: bool = False) -> None:
    """Download the pinned public RouteLLM logs."""
    from rich.progress import Progress

    plan = file_plan(routellm_url, fastchat_url)
    with Progress() as bar:
        task = bar.add_task("downloading RouteLLM logs", total=len(plan))
        written = fetch(dest, routellm_url=routellm_url, fastchat_url=fastchat_url, force=force,
                        progress=lambda: bar.advance(task))
    print(f"{len(written)} file(s) written, {len(plan) - len(written)} already present, in {dest}")


if __name__ == "__main__":
    import typer

    typer.run(main)
