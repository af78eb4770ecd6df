"""`make simulate N=... OUT=...`: write synthetic canonical-schema logs as Parquet shards.

A thin command over `data.simulator.write_shards`; see that module for the difficulty
model. The output is synthetic data, for scale and recovery tests, never for headline
quality figures.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer


def main(
    n: Annotated[str, typer.Option("--n", help="rows to write: 100000, 100_000 or 1e6")] = "100000",
    out: Annotated[Path, typer.Option(help="output folder (its part-*.parquet shards are replaced)")] = Path(
        "data/simulated"
    ),
    rows_per_shard: Annotated[int, typer.Option(help="rows per Parquet shard")] = 100_000,
    seed: Annotated[int, typer.Option(help="same seed and n give the same rows, whatever the shard size")] = 0,
    undeclared_share: Annotated[float, typer.Option(help="share of rows with no declared precision")] = 0.1,
    domain_mix: Annotated[
        Optional[str],
        typer.Option(
            help="domain shares, e.g. finance=0.6,legal=0.2: the other domains share the rest in their default "
            "proportions (docs/simulator.md)"
        ),
    ] = None,
    task_mix: Annotated[
        Optional[str], typer.Option(help="task form shares, e.g. prove=0.5,summarize=0.3, as --domain-mix")
    ] = None,
    endpoints: Annotated[
        Optional[Path],
        typer.Option(help="N-endpoint logs instead: a simulation spec (docs/simulator.md#n-endpoint-logs)"),
    ] = None,
    one_outcome: Annotated[bool, typer.Option(help="with --endpoints: one endpoint's outcome a row")] = False,
    answers: Annotated[bool, typer.Option(help="with --endpoints: each outcome's answer text (responses)")] = False,
) -> None:
    """Write N simulated (synthetic) request logs with edge/cloud outcomes into OUT."""
    if endpoints is not None:
        return _endpoint_logs(n, out, seed, endpoints, one_outcome, answers)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from data.simulator import MANIFEST_NAME, DifficultyModel, parse_count, parse_mix, write_shards

    try:
        rows = parse_count(n)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--n") from None
    if rows_per_shard < 1:
        raise typer.BadParameter(
            f"must be a positive whole number, got {rows_per_shard!r}", param_hint="--rows-per-shard"
        )
    if seed < 0:
        raise typer.BadParameter(f"must be >= 0, got {seed!r}", param_hint="--seed")
    mixes = {}
    for kind, text in (("domain", domain_mix), ("task", task_mix)):
        try:
            mixes[f"{kind}_mix"] = parse_mix(text, kind) if text is not None else None
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=f"--{kind}-mix") from None
    try:
        model = DifficultyModel(undeclared_share=undeclared_share, **mixes)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--undeclared-share") from None
    console = Console()
    start = time.perf_counter()
    with Progress(
        TextColumn("simulating (synthetic)"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("rows", total=rows)
        shards = write_shards(
            out, rows, rows_per_shard=rows_per_shard, seed=seed, model=model, on_rows=lambda k: bar.advance(task, k)
        )
    seconds = time.perf_counter() - start
    console.print(
        f"{rows:,} synthetic rows in {len(shards)} shard(s) under {out} (manifest {MANIFEST_NAME}), "
        f"seed {seed}, {seconds:.1f}s ({rows / max(seconds, 1e-9):,.0f} rows/s)"
    )


def _endpoint_logs(n: str, out: Path, seed: int, spec: Path, one_outcome: bool, answers: bool = False) -> None:
    """`--endpoints spec`: N-endpoint logs (data.simulator_endpoints) instead of edge/cloud ones."""
    from data.simulator import parse_count
    from data.simulator_endpoints import load_simulation, write_simulation
    from serving.endpoints._record import EndpointSpecError

    try:
        sim = load_simulation(spec)
        rows = write_simulation(out, sim, parse_count(n), seed=seed, one_outcome=one_outcome, answers=answers)
    except (EndpointSpecError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    print(f"{parse_count(n):,} synthetic rows for endpoints {', '.join(sim.names)} in {rows}")


if __name__ == "__main__":
    typer.run(main)
