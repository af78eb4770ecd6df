"""`make endpoints`: routing among N endpoints, offline (docs/endpoints.md).

Simulates N-endpoint logs from a spec (data.simulator_endpoints; default data/endpoints/four.yaml)
or reads them (`--data`, rows with `outcomes: {endpoint: quality}`), fits one calibrated outcome
model per endpoint in each prompt-hash fold, separate and shared (training.endpoints), compares
the two by paired cross-validation, and measures the choosers (serving.endpoint_choice) on the
held-out folds against every endpoint alone and the oracle (evaluation.endpoints). Writes
`metrics.json` and `quality_vs_cost.png` into `--out`; with `--bundle DIR`, also an N-endpoint
bundle of the chosen head mode and `--rule` (training.endpoint_bundle).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

DEFAULT_SPEC = Path("data/endpoints/four.yaml")


def _endpoints_of(spec: Path):
    """(endpoints, the simulation or None): a simulation spec (with `skills`) or an endpoint spec."""
    from data.simulator_endpoints import parse_simulation
    from serving.endpoints import parse_endpoints, read_spec_document

    document = read_spec_document(spec)
    if isinstance(document, dict) and "skills" in document:
        sim = parse_simulation(document, source=str(spec))
        return sim.endpoints, sim
    return parse_endpoints(document, source=str(spec)), None


def _truth(paths: list[str], request_ids, names):
    """The simulator's hidden probabilities of these rows ([rows, endpoints]) when the folders of
    `paths` hold them (`_truth.jsonl` beside simulated logs) for every row, else None."""
    import pandas as pd

    from data.simulator_endpoints import TRUTH_FILE, read_truth

    found = [read_truth(path) for path in paths if (Path(path) / TRUTH_FILE).is_file()]
    if not found:
        return None
    hidden = pd.concat(found, ignore_index=True).drop_duplicates("request_id").set_index("request_id")
    columns = [f"p_{name}" for name in names]
    if not set(columns) <= set(hidden.columns) or not set(request_ids) <= set(hidden.index):
        return None
    return hidden.loc[request_ids, columns].to_numpy(float)


def main(
    spec: Annotated[Path, typer.Option(help="endpoint spec, or a simulation spec (endpoints + hidden skills)")] = (
        DEFAULT_SPEC
    ),
    data: Annotated[
        Optional[list[str]], typer.Option(help="N-endpoint logs to read instead of simulating (repeatable)")
    ] = None,
    n: Annotated[int, typer.Option(help="rows to simulate")] = 6000,
    seed: Annotated[int, typer.Option(help="simulation seed")] = 0,
    folds: Annotated[int, typer.Option(help="prompt-hash folds")] = 5,
    output_tokens: Annotated[
        Optional[float], typer.Option(help="expected answer tokens for prices (default: the simulation's, else 250)")
    ] = None,
    margin: Annotated[float, typer.Option(help="cheapest endpoint within this of the best expected quality")] = 0.02,
    budget_share: Annotated[float, typer.Option(help="budget: this share of the best single endpoint's cost")] = 0.5,
    start_margin: Annotated[float, typer.Option(help="cascade: start within this of the best expected quality")] = 0.15,
    catch_rate: Annotated[float, typer.Option(help="cascade: share of bad answers caught and escalated")] = 0.5,
    cache_dir: Annotated[Path, typer.Option(help="encoder cache (the static tier's token table)")] = Path("data/cache"),
    out: Annotated[Path, typer.Option(help="report folder")] = Path("reports/endpoints"),
    bundle: Annotated[
        Optional[Path], typer.Option(help="also write an N-endpoint bundle here (the head mode the folds chose)")
    ] = None,
    rule: Annotated[
        str,
        typer.Option(
            help="the bundle's choice rule: cheapest_within (--margin), best_under_price (--budget-share), cascade (--start-margin)"
        ),
    ] = "cheapest_within",
    signing_key: Annotated[
        Optional[Path], typer.Option(help="sign the bundle with this Ed25519 key (make keys)")
    ] = None,
) -> None:
    """Simulate (or read) N-endpoint logs, fit per-endpoint outcome models, evaluate the choosers."""
    from rich.console import Console

    from data.endpoint_logs import read_endpoint_logs
    from data.simulator_endpoints import write_simulation
    from evaluation.endpoints import Choosers, plot_quality_vs_cost
    from serving.endpoints import EndpointSpecError
    from serving.manifest import ENDPOINT_RULES
    from training.endpoints import EndpointDataError, EndpointRows, EndpointTraining, cross_validate_endpoints

    console = Console()
    started = time.perf_counter()
    try:
        endpoints, sim = _endpoints_of(spec)
        choosers = Choosers(margin, budget_share, start_margin, catch_rate)
    except (EndpointSpecError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    if rule not in ENDPOINT_RULES:
        raise typer.BadParameter(f"--rule {rule!r}: choose one of {', '.join(ENDPOINT_RULES)}")
    out.mkdir(parents=True, exist_ok=True)
    if data:
        paths = list(data)
    else:
        if sim is None:
            raise typer.BadParameter(
                f"{spec} has no hidden skills to simulate from: give --data logs, or a simulation spec"
            )
        logs = out / "logs"
        write_simulation(logs, sim, n, seed=seed)
        paths = [str(logs)]
        console.print(f"simulated {n:,} synthetic rows for {', '.join(endpoints.names)} into {logs}")
    frame, rejects = read_endpoint_logs(paths, endpoints.names)
    for reject in rejects[:5]:
        console.print(f"[yellow]reject[/] {reject.file} {reject.location}: {reject.reason}")
    if not len(frame):
        raise typer.BadParameter(f"no valid N-endpoint row in {paths} ({len(rejects)} rejects)")
    rows = EndpointRows.from_frame(frame, endpoints.names)
    truth = _truth(paths, rows.request_ids, endpoints.names)
    tokens = output_tokens if output_tokens is not None else (sim.output_tokens if sim is not None else 250.0)
    try:
        result = cross_validate_endpoints(
            rows,
            endpoints,
            folds=folds,
            config=EndpointTraining(cache_dir=str(cache_dir)),
            choosers=choosers,
            output_tokens=tokens,
            truth=truth,
            on_fold=lambda fit: console.print(
                f"fold {fit.fold + 1}/{folds}: held-out log loss "
                + ", ".join(f"{mode} {figures['log_loss']:.4f}" for mode, figures in fit.figures.items())
            ),
        )
    except EndpointDataError as exc:
        raise typer.BadParameter(str(exc)) from None
    result.update(
        spec=endpoints.as_dict(),
        simulated=None if data else {"n": n, "seed": seed, "spec": str(spec)},
        rejects=len(rejects),
        seconds=time.perf_counter() - started,
    )
    (out / "metrics.json").write_text(json.dumps(result, indent=2, default=float) + "\n", encoding="utf-8")
    plot_quality_vs_cost(result["per_fold"], endpoints.names, out / "quality_vs_cost.png")
    for name, value in result["estimates"].items():
        console.print(f"{name:58s} {value['mean']:+.4f} [{value['low']:+.4f}, {value['high']:+.4f}]")
    difference = result["head_modes"]["shared - separate"]
    console.print(
        f"head mode: {result['chosen_mode']} (shared - separate: area "
        f"{difference['area_vs_best_single']['mean']:+.4f}, log loss {difference['log_loss']['mean']:+.4f}); "
        f"wrote {out / 'metrics.json'} and {out / 'quality_vs_cost.png'} in {result['seconds']:.0f} s"
    )
    if bundle is not None:
        from training.endpoint_bundle import train_endpoint_bundle

        made = train_endpoint_bundle(
            rows,
            endpoints,
            bundle,
            mode=result["chosen_mode"],
            rule=rule,
            choosers=choosers,
            output_tokens=tokens,
            folds=folds,
            config=EndpointTraining(cache_dir=str(cache_dir)),
            signing_key=signing_key,
            chosen_by={"chosen_by": result["head_modes"]["chosen_by"], "folds": folds},
        )
        section = made.manifest.endpoints
        assert section is not None
        console.print(
            f"wrote {bundle}: {made.models.mode} heads for {', '.join(section.names)}, {section.rule} "
            f"{section.parameter:.4g} (set on validation rows), SDK parity {made.parity:.1e}"
        )


if __name__ == "__main__":
    typer.run(main)
