"""`make compare OLD=dir NEW=dir LOGS=path`: how many routing decisions change when bundle NEW
replaces OLD, on a fixed sample of the logs' prompts (evaluation.agreement)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer


def sample(logs: list[str], rows: int) -> tuple[list[str], list]:
    """The `rows` prompts (and declared precisions) of `logs` with the smallest prompt hash:
    the same sample whatever the files' order or layout."""
    import numpy as np

    from data.logs import load_logs
    from data.prepare import hash_uniform

    frame = load_logs(logs, max_reject_share=1.0).frame().drop_duplicates("prompt")
    chosen = frame.iloc[np.argsort(hash_uniform(frame["prompt"], "compare:"), kind="stable")[:rows]]
    return chosen["prompt"].tolist(), chosen["precision"].tolist()


def main(
    old: Annotated[Path, typer.Option(help="the bundle in use")],
    new: Annotated[Path, typer.Option(help="the bundle that would replace it")],
    logs: Annotated[list[str], typer.Option(help="log file, glob or folder whose prompts are routed (repeatable)")],
    rows: Annotated[int, typer.Option(help="prompts in the sample")] = 4000,
    out: Annotated[Optional[Path], typer.Option(help="also write the figures here (JSON)")] = None,
) -> None:
    """Route the same prompts through both bundles and report what changes."""
    from rich.console import Console

    from evaluation.agreement import agreement
    from serving import Router

    prompts, precisions = sample(logs, rows)
    figures = {
        "old": str(old),
        "new": str(new),
        **agreement(Router.load(old, strict=True), Router.load(new, strict=True), prompts, precisions),
    }
    console = Console()
    console.print(
        f"{figures['prompts']} prompts: zones equal {figures['zones_equal']:.1%}, first side equal "
        f"{figures['first_side_equal']:.1%}, score correlation {figures['score_correlation']:.3f}; "
        f"cloud first {figures['cloud_first_share']['old']:.1%} -> {figures['cloud_first_share']['new']:.1%}"
    )
    console.print_json(json.dumps(figures["moves"]))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
