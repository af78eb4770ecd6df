"""`python -m pipelines.ablation`: the routing-score ablation of docs/routing-score.md (label x
features, test APGR and CPT(50%) per hash split, mean and spread), on the training logs."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from data.logs import SOURCES_HELP


def main(
    salts: Annotated[str, typer.Option(help="comma-separated split salts; '' is make train's split")] = ",a,b,c,d",
    data: Annotated[Optional[list[str]], typer.Option(help=f"{SOURCES_HELP} (default: the training logs)")] = None,
    c: Annotated[float, typer.Option(help="inverse regularization of the lexical logistic regressions")] = 64.0,
) -> None:
    """Print the ablation table."""
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    from training.ablation import ablation, load
    from training.config import TrainConfig

    names = salts.split(",")
    config = TrainConfig(**({"data": data} if data else {}), reports_dir="reports/ablation")
    results = ablation(load(config), names, c=c)
    table = Table(title=f"test APGR (CPT(50%)) per split salt: {', '.join(repr(s) for s in names)}")
    table.add_column("label, features")
    for salt in names:
        table.add_column(repr(salt), justify="right")
    table.add_column("mean APGR (sd)", justify="right")
    for variant, figures in results.items():
        cells = [f"{a:.3f} ({p:.1%})" for a, p in zip(figures["apgr"], figures["cpt50"])]
        table.add_row(variant, *cells, f"{np.mean(figures['apgr']):.3f} ({np.std(figures['apgr']):.3f})")
    Console().print(table)


if __name__ == "__main__":
    typer.run(main)
