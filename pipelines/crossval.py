"""`make evaluate CV=5` and `make compare-configs A=a.yaml B=b.yaml`: cross-validated figures
with 95% intervals, and paired differences between two configurations on the same folds
(training.crossval).

One configuration: every policy's figures (learned router, reference, rule tables, random,
oracle), the learned router's paired differences with the reference and the rule tables, per
source too; written to OUT/cv.json. Two or more (`--compare A --compare B [--compare C ...]`):
each cross-validated on the same folds, and B - A (C - A, ...) of the learned router's
figures, A cross-validated once; written to OUT/compare.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from data.logs import SOURCES_HELP

# The figures the tables show, with how to print them.
SHOWN = {
    "apgr": ("APGR", "{:.3f}"),
    "cpt50": ("CPT(50%)", "{:.1%}"),
    "cpt80": ("CPT(80%)", "{:.1%}"),
    "auc": ("AUC (cloud needed)", "{:.3f}"),
    "quality": ("quality at the operating point", "{:.3f}"),
    "cloud_share": ("cloud share at the operating point", "{:.1%}"),
    "quality_with_fallback": ("quality with fallback", "{:.3f}"),
    "expected_cloud_calls": ("expected cloud calls", "{:.1%}"),
}
TABLE_POLICIES = ("learned", "reference", "rule_table", "tuned_rule_table", "random", "oracle")


def cell(estimate: dict, form: str, *, signed: bool = False) -> str:
    """'0.716 [0.680, 0.752]'; '-' when no fold defines the figure."""
    if not estimate["n"]:
        return "-"
    fmt = form.replace("{:", "{:+") if signed else form
    if estimate["n"] < 2:
        return fmt.format(estimate["mean"])
    return f"{fmt.format(estimate['mean'])} [{fmt.format(estimate['low'])}, {fmt.format(estimate['high'])}]"


def policy_table(summary: dict, title: str):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("figure (mean [95% interval])")
    shown = [p for p in TABLE_POLICIES if p in summary["policies"]]
    for policy in shown:
        table.add_column(policy, justify="right")
    for key, (label, form) in SHOWN.items():
        table.add_row(label, *(cell(summary["policies"][p][key], form) for p in shown))
    return table


def source_table(summary: dict, key: str = "apgr"):
    """One figure per source (rows) and policy (columns)."""
    from rich.table import Table

    label, form = SHOWN[key]
    table = Table(title=f"{label} per source")
    table.add_column("source")
    shown = [p for p in TABLE_POLICIES if p in summary["policies"]]
    for policy in shown:
        table.add_column(policy, justify="right")
    for source, policies in summary["by_source"].items():
        table.add_row(source, *(cell(policies[p][key], form) for p in shown))
    return table


def difference_table(differences: dict, title: str):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("figure")
    for name in differences:
        table.add_column(name, justify="right")
    for key, (label, form) in SHOWN.items():
        table.add_row(label, *(cell(d[key], form, signed=True) for d in differences.values()))
    return table


def _config(path: Optional[Path], data, engine, overrides: dict):
    from training.config import TrainConfig

    return TrainConfig.from_options(path, {"data": data or None, "engine.name": engine}, overrides)


def main(
    folds: Annotated[int, typer.Option(help="prompt-hash folds")] = 5,
    repeats: Annotated[int, typer.Option(help="cut the folds again with other salts, this many times in all")] = 1,
    config: Annotated[Optional[Path], typer.Option(help="YAML/JSON file of TrainConfig options")] = None,
    compare: Annotated[
        Optional[list[Path]],
        typer.Option(help="config files A, B, ... (repeat the option): paired B - A, C - A, ... on the same folds"),
    ] = None,
    data: Annotated[Optional[list[str]], typer.Option(help=f"{SOURCES_HELP} (repeatable)")] = None,
    engine: Annotated[Optional[str], typer.Option(help="local | dask")] = None,
    out: Annotated[Path, typer.Option(help="folder for cv.json / compare.json")] = Path("reports/cv"),
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="any training option, KEY=VALUE (e.g. lexical.mode=none)")
    ] = None,
) -> None:
    """Cross-validate one training configuration, or compare two."""
    from rich.console import Console

    from training.config import parse_overrides
    from training.crossval import check_folds, cross_validate
    from training.crossval import compare as paired

    console = Console()
    overrides = parse_overrides(set_ or [])
    out.mkdir(parents=True, exist_ok=True)
    if compare:
        if len(compare) < 2:
            raise typer.BadParameter(f"--compare needs at least two config files (A and B), got {len(compare)}")
        configs = [_config(path, data, engine, overrides) for path in compare]
        for cfg in configs:
            check_folds(cfg, folds, repeats)
        runs = []
        for path, cfg in zip(compare, configs):
            console.print(f"[bold]{path}[/]")
            runs.append(cross_validate(cfg, folds=folds, repeats=repeats, console=console))
        differences = {f"{path} - {compare[0]}": paired(runs[0], run) for path, run in zip(compare[1:], runs[1:])}
        result = {
            "A": str(compare[0]),
            "compared": [str(p) for p in compare[1:]],
            "differences": differences,
            "summaries": {str(p): run.summary() for p, run in zip(compare, runs)},
        }
        console.print(difference_table(differences, f"the learned router, paired over {folds} folds x {repeats}"))
        (out / "compare.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
        console.print(f"written: {out / 'compare.json'}")
        return
    cfg = _config(config, data, engine, overrides)
    check_folds(cfg, folds, repeats)
    summary = cross_validate(cfg, folds=folds, repeats=repeats, console=console).summary()
    console.print(policy_table(summary, f"{folds}-fold cross-validation x {repeats}: every stage refit per fold"))
    console.print(difference_table(summary["differences"], "the learned router minus each policy, paired by fold"))
    console.print(source_table(summary))
    (out / "cv.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    console.print(f"interval: {summary['interval']}\nwritten: {out / 'cv.json'}")


if __name__ == "__main__":
    typer.run(main)
