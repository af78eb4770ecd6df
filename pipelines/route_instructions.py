"""`make bench-instructions`: route() against the sum of its parts in CPU instructions, which a
shared host's load does not move (wall-time figures are `make bench`'s).

For each prompt length, valgrind's callgrind counts a process that loads the bundle and then
calls route() `--few` and `--many` times, and one that calls the parts alone on prepared inputs
(tokenize, text statistics, the model: what `make bench` calls the floor) as often. The
difference between the two counts, over the difference in calls, is the instructions of one
call: loading and warming up cancel out. Writes bench/instructions.json.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

MODES = ("route", "parts")


def calls(bundle: str, mode: str, n: int, length: int) -> None:
    """The counted process: load, warm up, then `n` calls of route() or of its parts."""
    from pipelines.bench import prompt_of
    from serving import Router
    from serving.features.text_stats import text_statistics

    router = Router.load(bundle, strict=True)
    stages = router.stages
    extractor, scorer = stages.scorer.extractor, stages.scorer
    prompt = prompt_of(extractor.tokenizer.full, length)
    heads = extractor.heads([prompt])
    ids, mask, scalars, _, _ = extractor.prepare([prompt], ["exact"])
    feeds = {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
    special = extractor.spec.add_special_tokens
    for _ in range(50):
        router.route(prompt, precision="exact")
    if mode == "route":
        for _ in range(n):
            router.route(prompt, precision="exact")
    else:
        for _ in range(n):
            extractor.tokenizer.ids(heads, add_special_tokens=special)
            text_statistics(prompt, heads[0])
            stages.model(scorer.outputs, feeds, None)


def counted(bundle: str, mode: str, n: int, length: int) -> int:
    """Instructions callgrind collects for one `calls` process."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "pipelines.route_instructions",
        "--calls-only",
        mode,
        "--bundle",
        bundle,
        "--few",
        str(n),
        "--lengths",
        str(length),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"valgrind failed ({done.returncode}): {done.stderr[-1000:]}")
    return int(found.group(1))


def main(
    bundle: Annotated[str, typer.Option(help="bundle folder")] = "artifacts/router",
    few: Annotated[int, typer.Option(help="calls in the first counted process")] = 200,
    many: Annotated[int, typer.Option(help="calls in the second")] = 1200,
    lengths: Annotated[str, typer.Option(help="prompt lengths in tokens, comma-separated")] = "16,128",
    out: Annotated[Path, typer.Option(help="results JSON")] = Path("bench/instructions.json"),
    calls_only: Annotated[str, typer.Option(help="internal: be the counted process (route | parts)", hidden=True)] = "",
) -> None:
    """Instructions per route() call and per call of its parts alone."""
    sizes = [int(x) for x in lengths.split(",") if x.strip()]
    if calls_only:
        if calls_only not in MODES:
            raise typer.BadParameter(f"use one of {', '.join(MODES)}", param_hint="--calls-only")
        calls(bundle, calls_only, few, sizes[0])
        return
    if not 0 < few < many:
        raise typer.BadParameter(f"need 0 < few < many, got {few} and {many}", param_hint="--few/--many")
    results = {}
    for length in sizes:
        per_call = {
            mode: (counted(bundle, mode, many, length) - counted(bundle, mode, few, length)) / (many - few)
            for mode in MODES
        }
        results[f"{length}_tokens"] = {**per_call, "route_over_parts": per_call["route"] / per_call["parts"]}
        print(
            f"~{length} tokens: route() {per_call['route']:,.0f} instructions, parts alone "
            f"{per_call['parts']:,.0f}: {per_call['route'] / per_call['parts']:.2f}x"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"bundle": bundle, "few": few, "many": many, **results}, indent=2) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    typer.run(main)
