"""`python -m pipelines.mt_bench_turns`: on MT-Bench's second turns, routing with and without the
first turn's outcome (evaluation.turns; docs/evaluation.md#conversations-what-the-first-turn-tells-about-the-second).
Prints the table and writes every figure, with its 95% interval, as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def main(
    data: Annotated[
        Optional[Path],
        typer.Option(help="a RouteLLM folder or its mt_bench/ folder; default: as `make train` finds logs"),
    ] = None,
    out: Annotated[Path, typer.Option(help="where the JSON report goes")] = Path("reports/mt_bench_turns.json"),
    folds: int = 5,
    repeats: int = 20,
    draws: Annotated[int, typer.Option(help="bootstrap draws over conversations")] = 2000,
    threshold: Annotated[float, typer.Option(help="to the cloud when P(cloud needed) is above it")] = 0.5,
    seed: int = 0,
) -> None:
    """Fit the predictors on the same repeated stratified folds; print and write B - A with intervals."""
    import functools
    import json
    import time

    from data.location import default_data_paths
    from data.routellm import is_mt_bench_folder
    from evaluation.turns import DESCRIPTION, PREDICTORS, compare, label_counts, out_of_fold, read_conversations
    from serving.features._text_stats import STAT_NAMES
    from training.config import Label
    from training.labels import cloud_needed

    start = time.perf_counter()
    folder = data if data is not None else default_data_paths()[0]
    folder = folder if is_mt_bench_folder(folder) else folder / "mt_bench"
    margins = Label()
    label = functools.partial(cloud_needed, margin_binary=margins.margin_binary, margin_graded=margins.margin_graded)
    conv = read_conversations(folder, label)
    scores, _ = out_of_fold(conv, folds=folds, repeats=repeats, seed=seed)
    report = {
        "data": str(folder),
        "labels": label_counts(conv),
        "protocol": {
            "target": f"turn 2 cloud needed: cloud - edge > {margins.margin_graded} on the [0, 1] judge scale",
            "cv": f"repeated stratified {folds}-fold x {repeats}, the same splits for every predictor",
            "bootstrap_draws": draws,
            "threshold": threshold,
            "seed": seed,
            "predictors": {k: {"what": DESCRIPTION[k], "features": list(PREDICTORS.get(k, ()))} for k in DESCRIPTION},
            "text_features": list(STAT_NAMES),
            "turn1_features": ["edge turn-1 quality", "cloud - edge turn-1 quality"],
        },
        "all_edge_quality": float(conv.q_edge[:, 1].mean()),
        "all_cloud_quality": float(conv.q_cloud[:, 1].mean()),
        **compare(conv, scores, threshold=threshold, draws=draws, seed=seed),
    }
    report["seconds"] = round(time.perf_counter() - start, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    print(table(report))
    print(f"\nwrote {out} ({report['seconds']} s)")


def table(report: dict) -> str:
    """Point [95% interval] of AUC, APGR and the operating point, per predictor and paired difference."""
    counts = report["labels"]
    metrics = ("auc", "apgr", "quality", "misroute_rate", "cloud_share")
    lines = [
        f"MT-Bench turn 2: {counts['conversations']} conversations, cloud needed on turn 2 in {counts['turn2_needed']} "
        f"(after a turn 1 that needed it: {'/'.join(map(str, counts['turn2_needed_when_turn1_needed']))}; "
        f"otherwise {'/'.join(map(str, counts['turn2_needed_when_turn1_not']))})",
        f"all-edge quality {report['all_edge_quality']:.3f}, all-cloud {report['all_cloud_quality']:.3f}; "
        f"{report['protocol']['cv']}; {report['protocol']['bootstrap_draws']} bootstrap draws",
        "",
        *(f"  {k:6} {v['what']}" for k, v in report["protocol"]["predictors"].items()),
        "",
        f"{'':10}" + "".join(f"{m:>24}" for m in metrics),
    ]
    for section in ("predictors", "differences"):
        for name, figures in report[section].items():
            cells = [f"{f['point']:+.3f} [{f['low']:+.3f}, {f['high']:+.3f}]" for f in (figures[m] for m in metrics)]
            lines.append(f"{name:10}" + "".join(f"{c:>24}" for c in cells))
        lines.append("")
    return "\n".join(lines).rstrip()


if __name__ == "__main__":
    typer.run(main)
