"""`make train`: outcome logs -> calibrated LightGBM router -> verified ONNX bundle, tracked in MLflow.

The stages live in training/ (training.engines.base.train: the chosen engine, then
thresholds, figures, bundle, parity check and MLflow); this command parses options and
prints the test-split figures.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from data.logs import SOURCES_HELP
from training.config import TrainConfig, parse_overrides


def main(
    bundle: Annotated[str, typer.Option(help="output folder of the bundle")] = "artifacts/router",
    tier: Annotated[str, typer.Option(help="embedding tier: static | transformer")] = "static",
    engine: Annotated[
        Optional[str], typer.Option(help="local (in memory, default) | dask (partitions on a Dask cluster)")
    ] = None,
    config: Annotated[Optional[Path], typer.Option(help="YAML/JSON file of TrainConfig options")] = None,
    data: Annotated[Optional[list[str]], typer.Option(help=f"{SOURCES_HELP} (repeatable)")] = None,
    target: Annotated[Optional[str], typer.Option(help="threshold target: quality | budget")] = None,
    cloud_budget: Annotated[Optional[float], typer.Option(help="expected cloud-call share for target=budget")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="any option, GROUP.KEY=VALUE (repeatable)")] = None,
) -> None:
    """Train the router on outcome logs and write a registered ONNX bundle."""
    from rich.console import Console
    from rich.markup import escape

    from data.location import NoLogsError
    from data.logs import DataQualityError
    from evaluation import headline
    from serving.monitoring._outcome_log import printable
    from training.engines.base import train

    logging.basicConfig(level=logging.WARNING)
    cfg = TrainConfig.from_options(
        config,
        {
            "bundle.path": bundle,
            "features.tier": tier,
            "engine.name": engine,
            "data": data or None,
            "routing.target": target,
            "routing.cloud_budget": cloud_budget,
        },
        parse_overrides(set_ or []),
    )
    console = Console()
    try:
        result = train(cfg, console=console)
    except (DataQualityError, NoLogsError) as exc:  # no logs, or logs that cannot train: the message says why
        # The message may quote the logs (a file name, a value): printed as text, never as terminal controls.
        Console(stderr=True).print("[red]error[/]:", escape(printable(str(exc))), soft_wrap=True)
        raise typer.Exit(2) from exc
    console.print(headline.rich_table(result.metrics))
    console.print(
        f"bundle: {result.bundle}  |  MLflow run {result.run_id}, registered "
        f"{cfg.mlflow.registered_model} version {result.model_version}  |  parity max |diff| "
        f"{result.metrics['parity_max_abs_diff']:.1e}  |  wall time {result.timings['total_s']:.1f}s"
    )


if __name__ == "__main__":
    typer.run(main)
