"""The headline figures of a training run, as the terminal table `make train` prints and as the Markdown in README.md
(`make results`): one list of rows, so the two never disagree. A cross-fitted run shows cross-validated means with 95%
intervals; a single-split run its test split's figures."""

from __future__ import annotations

from evaluation.figures import SplitSummary
from evaluation.policies import POLICIES
from evaluation.report import table

# (label, key in the split's policy figures, format)
ROWS = (
    ("AUC (cloud needed)", "auc", "{:.3f}"),
    ("**APGR**", "apgr", "{:.3f}"),
    ("CPT(50%) (cloud share for half the quality gap)", "cpt50", "{:.1%}"),
    ("CPT(80%)", "cpt80", "{:.1%}"),
    ("cloud share at the operating point (cloud-first)", "cloud_share", "{:.1%}"),
    ("fallback-zone share", "fallback_share", "{:.1%}"),
    ("misroute rate", "misroute_rate", "{:.1%}"),
    ("  under-routing (cloud needed, sent to the edge)", "under_routing", "{:.1%}"),
    ("  over-routing (cloud not needed, sent to the cloud)", "over_routing", "{:.1%}"),
    ("quality before fallback", "quality", "{:.3f}"),
    ("quality vs all-cloud", "quality_vs_all_cloud", "{:+.3f}"),
    (
        "quality with fallback (measured acceptance verdicts where answers exist, else the assumed catch rate)",
        "quality_with_fallback",
        "{:.3f}",
    ),
    ("expected cloud calls", "expected_cloud_calls", "{:.1%}"),
)
SPLIT_POLICIES = ("learned", "rule_table")
CV_POLICIES = ("learned", "reference", "rule_table")
PAIRED = ("learned - reference", "router - reference (paired)")


def title(metrics: dict) -> str:
    split = SplitSummary.from_dict(metrics["test"]).population
    qualities = (
        f"all-edge quality {split.all_edge_quality:.3f}, all-cloud {split.all_cloud_quality:.3f}, "
        f"oracle {split.oracle_quality:.3f}"
    )
    if "cv" not in metrics:
        return f"test split: {split.rows:,} prompts; {qualities}"
    cv = metrics["cv"]
    repeats = f" x {cv['repeats']}" if cv["repeats"] > 1 else ""
    return f"{cv['folds']}-fold cross-validation{repeats} over {split.rows:,} prompts, mean [95% interval]; {qualities}"


def _with_interval(estimate: dict, fmt: str) -> str:
    if not estimate["n"]:
        return "n/a"
    if estimate["n"] < 2:
        return fmt.format(estimate["mean"])
    return f"{fmt.format(estimate['mean'])} [{fmt.format(estimate['low'])}, {fmt.format(estimate['high'])}]"


def heads(metrics: dict) -> list[str]:
    if "cv" not in metrics:
        return [POLICIES[name].label for name in SPLIT_POLICIES]
    shown = [POLICIES[name].label for name in CV_POLICIES if name in metrics["cv"]["policies"]]
    return shown + ([PAIRED[1]] if PAIRED[0] in metrics["cv"]["differences"] else [])


def cells(metrics: dict) -> list[list[str]]:
    """[label, one cell per column of `heads`] per row."""
    if "cv" not in metrics:
        test = SplitSummary.from_dict(metrics["test"]).policies
        return [[label, *(fmt.format(getattr(test[name], key)) for name in SPLIT_POLICIES)] for label, key, fmt in ROWS]
    cv, rows = metrics["cv"], []
    shown = [name for name in CV_POLICIES if name in cv["policies"]]
    for label, key, fmt in ROWS:
        row = [label, *(_with_interval(cv["policies"][name][key], fmt) for name in shown)]
        if PAIRED[0] in cv["differences"]:
            signed = fmt if "+" in fmt else fmt.replace("{:", "{:+")  # a difference shows its sign
            row.append(_with_interval(cv["differences"][PAIRED[0]][key], signed))
        rows.append(row)
    return rows


def markdown(metrics: dict) -> str:
    """The README table (rows and header line included); an indented label stays indented."""
    rows = [
        [label.strip() if not label.startswith("  ") else "&nbsp;&nbsp;" + label.strip(), *values]
        for label, *values in cells(metrics)
    ]
    return table([title(metrics), *heads(metrics)], rows)


def rich_table(metrics: dict):
    """The same figures for the terminal."""
    from rich.table import Column, Table

    terminal = Table("figure", *(Column(head, justify="right") for head in heads(metrics)), title=title(metrics))
    for label, *values in cells(metrics):
        terminal.add_row(label.replace("**", ""), *values)
    return terminal
