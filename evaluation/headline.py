"""The headline figures of a training run (its test split: learned router next to the hand
rule table), as the terminal table `make train` prints and as the Markdown in README.md
(`make results`). One list of rows, so the two never disagree."""
from __future__ import annotations

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
    ("quality with fallback (measured acceptance verdicts where answers exist, else the assumed catch rate)", "quality_with_fallback", "{:.3f}"),
    ("expected cloud calls", "expected_cloud_calls", "{:.1%}"),
)
POLICIES = (("learned", "learned router"), ("rule_table", "hand rule table"))


def title(split: dict) -> str:
    return (f"test split: {split['rows']:,} prompts; all-edge quality {split['all_edge_quality']:.3f}, "
            f"all-cloud {split['all_cloud_quality']:.3f}, oracle {split['oracle_quality']:.3f}")


def cells(split: dict) -> list[list[str]]:
    """[label, learned, rule table] per row."""
    return [[label, *(fmt.format(split[name][key]) for name, _ in POLICIES)] for label, key, fmt in ROWS]


def markdown(split: dict) -> str:
    """The README table (rows and header line included)."""
    lines = [f"| {title(split)} | {' | '.join(head for _, head in POLICIES)} |", "| --- | ---: | ---: |"]
    lines += [f"| {label.strip() if not label.startswith('  ') else '&nbsp;&nbsp;' + label.strip()} | "
              f"{' | '.join(values)} |" for label, *values in cells(split)]
    return "\n".join(lines)


def rich_table(split: dict):
    """The same figures for the terminal."""
    from rich.table import Table

    table = Table(title=title(split))
    table.add_column("figure")
    for _, head in POLICIES:
        table.add_column(head, justify="right")
    for label, *values in cells(split):
        table.add_row(label.replace("**", ""), *values)
    return table
