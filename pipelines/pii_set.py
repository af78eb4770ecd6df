"""`python -m pipelines.pii_set`: write the content detectors' labelled set (data/policy/pii_labelled.jsonl).

A thin command over `data.pii_synthetic.generate`: seeded, so the shipped file is reproducible (the same
seed and counts write the same bytes), and built without the detectors it measures. Each line carries a
`form` tag (how its values are written, or "ordinary:<category>" for prompts without personal data),
which `make pii-eval` reports figures by.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_OUT = Path("data/policy/pii_labelled.jsonl")


def main(
    out: Annotated[Path, typer.Option(help="the JSONL file to write")] = DEFAULT_OUT,
    seed: Annotated[int, typer.Option(help="same seed, same lines")] = 29,
    per_detector: Annotated[int, typer.Option(help="positive prompts per detector")] = 40,
    negatives: Annotated[int, typer.Option(help="hard-negative prompts")] = 160,
) -> None:
    """Write the labelled set: positives for every detector, hard positives, hard negatives, mixed prompts,
    the values written in the forms of the hardening issue (and others), and ordinary prompts."""
    from data.pii_synthetic import generate, write

    if per_detector < 1 or negatives < 0:
        raise typer.BadParameter(f"counts must be positive, got {per_detector}, {negatives}")
    lines = generate(seed, per_detector=per_detector, negatives=negatives)
    write(lines, out)
    labels = sum(len(line["labels"]) for line in lines)
    forms = len({line["form"] for line in lines})
    print(f"wrote {len(lines)} prompts with {labels} labelled spans, in {forms} forms, to {out}")


if __name__ == "__main__":
    typer.run(main)
