"""`make promote BUNDLE=dir`: move the MLflow alias `champion` to the challenger bundle only
when it is at least as good on the same traffic (training.promotion says how it decides)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def main(bundle: Annotated[Path, typer.Option(help="the challenger bundle (trained and registered by make train)")],
         logs: Annotated[Optional[list[str]], typer.Option(help="SDK outcome logs to compare on (repeatable)")] = None,
         full_logs: Annotated[Optional[list[str]], typer.Option(help="logs with both outcomes (repeatable)")] = None,
         margin: float = 0.005, dry_run: Annotated[bool, typer.Option("--dry-run")] = False,
         model: str = "edge-cloud-router") -> None:
    """Promote the challenger to `champion` if it is at least as good (training.promotion says how it decides)."""
    import json

    from rich.console import Console

    from training.promotion import promote

    try:
        result = promote(bundle, logs=list(logs or []), full_logs=list(full_logs or []), margin=margin,
                         dry_run=dry_run, model=model)
    except (ValueError, FileNotFoundError) as exc:
        Console(stderr=True).print(f"[red]error[/]: {exc}")
        raise typer.Exit(2) from exc
    verdict = "promote" if result["promote"] else "keep the champion"
    Console().print(f"{'[dry run] ' if dry_run else ''}{verdict}: version {result['challenger_version']} vs "
                    f"champion {result['champion_version']}: {result['why']}")
    Console().print_json(json.dumps({k: result[k] for k in ("challenger", "champion")}))


if __name__ == "__main__":
    typer.run(main)
