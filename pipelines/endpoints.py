"""`make endpoints`: routing among N endpoints, offline (docs/endpoints.md).

Simulates N-endpoint logs from a spec (data.simulator_endpoints; default data/endpoints/four.yaml)
or reads them (`--data`, rows with `outcomes: {endpoint: quality}`), fits one calibrated outcome
model per endpoint in each prompt-hash fold, separate and shared (training.endpoints), compares
the two by paired cross-validation, and measures the choosers (serving.endpoints._choice) on the
held-out folds against every endpoint alone and the oracle (evaluation.endpoints). Writes
`metrics.json` and `quality_vs_cost.png` into `--out`; with `--bundle DIR`, also an N-endpoint
bundle of the chosen head mode and `--rule` (training.endpoint_bundle). With `--policy FILE`, what
that policy does to the held-out rows under `--rule`, decided by the SDK's own chooser
(evaluation.rules_effect): metrics.json's `policy`.
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
    from serving.endpoints._record import parse_endpoints, read_spec_document

    document = read_spec_document(spec)
    if isinstance(document, dict) and "skills" in document:
        sim = parse_simulation(document, source=str(spec))
        return sim.endpoints, sim
    return parse_endpoints(document, source=str(spec)), None


def _policy_of(path: Path | None, metadata: list[str] | None, names):
    """(the policy file's PolicySet for these endpoints, the --metadata mapping), or
    typer.BadParameter naming the file and what is wrong with it."""
    from evaluation.rules_effect import metadata_pairs
    from serving.policy._rules import PolicyFileError, PolicySet

    if path is None:
        if metadata:
            raise typer.BadParameter("--metadata is what --policy's rules read: give --policy FILE too")
        return None, None
    try:
        given = metadata_pairs(metadata or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--metadata") from None
    try:
        return PolicySet.load(path, endpoints=names), given
    except PolicyFileError as exc:
        raise typer.BadParameter(str(exc), param_hint="--policy") from None


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


def policy_folds(rows, fits, per_fold, endpoints, *, mode: str, rule: str, choosers, output_tokens: float, metadata):
    """Each fold's held-out rows that hold every endpoint's outcome, as evaluation.rules_effect
    reads them: the fold's `mode` models' probabilities (`fits`: training.endpoints.FoldFit), the
    SDK's chooser at `rule` and the fold's parameter (best_under_price: the price the fold set on
    its validation rows, `per_fold`'s), the logged cost (the spec's price where none is logged)
    and each row's `metadata` (a sequence aligned with `rows`)."""
    import numpy as np

    from evaluation.rules_effect import HeldOut
    from serving.bundle._manifest import EndpointsSection
    from serving.routing._chooser import Choice, Chooser
    from training.endpoints import CHARS_PER_TOKEN, expected_costs

    expected_cost, _ = expected_costs(endpoints, rows.prompts, output_tokens)
    cost = np.where(np.isfinite(rows.cost), rows.cost, expected_cost)
    complete = np.isfinite(rows.quality).all(axis=1)
    held = []
    for fit, figures in zip(fits, per_fold):
        test = fit.masks["test"]
        index = np.flatnonzero(test & complete)
        parameter = {
            "cheapest_within": choosers.margin,
            "cascade": choosers.start_margin,
            "best_under_price": figures["budget"]["price"],
        }[rule]
        section = EndpointsSection(endpoints, output_tokens, rule, float(parameter))
        held.append(
            HeldOut(
                chooser=Chooser(tuple(endpoints), Choice(section), model_version="make-endpoints", max_chars=1 << 30),
                prompts=[str(p) for p in rows.prompts[index]],
                precisions=[rows.precisions[i] for i in index],
                n_tokens=[len(str(p)) / CHARS_PER_TOKEN for p in rows.prompts[index]],
                expected=fit.predictions[mode]["test"][complete[test]],
                quality=rows.quality[index],
                cost=cost[index],
                metadata=[metadata[i] for i in index],
            )
        )
    return held


def _policy_table(effect: dict):
    """The policy's per-rule counts, shares and figures as rich tables (metrics.json's `policy`)."""
    from rich.table import Table

    rules = Table(title=f"policy {effect['source']} on {effect['rows']:,} held-out rows")
    for column in ("rule", "action", "endpoint", "rows", "share", "first endpoint changed", "left no endpoint"):
        rules.add_column(column, justify="left" if column in ("rule", "action", "endpoint") else "right")
    for name, rule in effect["rules"].items():
        rules.add_row(
            name,
            rule["action"],
            rule["endpoint"],
            f"{rule['rows']:,}",
            f"{rule['share']:.3f}",
            f"{rule['first_endpoint_changed']:,}",
            f"{rule['no_feasible_endpoint']:,}",
        )
    tables = [rules]
    if "figures" in effect:
        figures = Table(title=f"on the {effect['servable_rows']:,} rows servable with and without the policy")
        for column in ("figure", "without rules", "with rules", "difference", "95% (rows)", "95% (folds)"):
            figures.add_column(column, justify="left" if column == "figure" else "right")
        for name, f in effect["figures"].items():
            fmt = ".4f" if name.endswith("quality") else ".6f"
            low, high = f["interval"]
            folds = f.get("folds_interval", {})
            figures.add_row(
                name,
                f"{f['without_rules']:{fmt}}",
                f"{f['with_rules']:{fmt}}",
                f"{f['difference']:+{fmt}}",
                f"[{low:+{fmt}}, {high:+{fmt}}]",
                f"[{folds.get('low', float('nan')):+{fmt}}, {folds.get('high', float('nan')):+{fmt}}]",
            )
        for endpoint, share in effect["shares"]["without_rules"].items():
            after = effect["shares"]["with_rules"][endpoint]
            figures.add_row(f"share {endpoint}", f"{share:.3f}", f"{after:.3f}", f"{after - share:+.3f}", "", "")
        tables.append(figures)
    return tables


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
    policy: Annotated[
        Optional[Path],
        typer.Option(help="a policy file (docs/policies.md): its per-rule counts and effect under --rule, held out"),
    ] = None,
    metadata: Annotated[
        Optional[list[str]],
        typer.Option(help="request metadata for --policy's rules, KEY=VALUE (repeatable; over each row's own)"),
    ] = None,
    set_: Annotated[
        Optional[list[str]],
        typer.Option(
            "--set",
            help="a training option of the endpoint models, GROUP.KEY=VALUE (features.*, split.val_share, "
            "split.salt, boosting.*, model.calibration, endpoints.lgbm, seed; repeatable)",
        ),
    ] = None,
) -> None:
    """Simulate (or read) N-endpoint logs, fit per-endpoint outcome models, evaluate the choosers."""
    from rich.console import Console

    from data.endpoint_logs import read_endpoint_logs
    from data.simulator_endpoints import write_simulation
    from evaluation.endpoints import Choosers
    from evaluation.report import plot_quality_vs_cost
    from serving.bundle._manifest import ENDPOINT_RULES
    from serving.endpoints._record import EndpointSpecError
    from training.config import TrainConfig, parse_overrides
    from training.endpoints import EndpointDataError, EndpointRows, cross_validate_endpoints

    console = Console()
    started = time.perf_counter()
    try:
        endpoints, sim = _endpoints_of(spec)
        choosers = Choosers(margin, budget_share, start_margin, catch_rate)
        training = TrainConfig.of({"cache_dir": str(cache_dir)}, parse_overrides(set_ or []))
    except (EndpointSpecError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    if rule not in ENDPOINT_RULES:
        raise typer.BadParameter(f"--rule {rule!r}: choose one of {', '.join(ENDPOINT_RULES)}")
    rules, given = _policy_of(policy, metadata, endpoints.names)  # a bad file fails before any work
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
    fits = []

    def on_fold(fit) -> None:
        fits.append(fit)
        console.print(
            f"fold {fit.fold + 1}/{folds}: held-out log loss "
            + ", ".join(f"{mode} {figures['log_loss']:.4f}" for mode, figures in fit.figures.items())
        )

    try:
        result = cross_validate_endpoints(
            rows,
            endpoints,
            folds=folds,
            config=training,
            choosers=choosers,
            output_tokens=tokens,
            truth=truth,
            on_fold=on_fold,
        )
    except EndpointDataError as exc:
        raise typer.BadParameter(str(exc)) from None
    result.update(
        spec=endpoints.as_dict(),
        simulated=None if data else {"n": n, "seed": seed, "spec": str(spec)},
        rejects=len(rejects),
        seconds=time.perf_counter() - started,
    )
    # what the policy's folds and the bundle are decided with
    chosen = dict(mode=result["chosen_mode"], rule=rule, choosers=choosers, output_tokens=tokens)
    if rules is not None:
        from evaluation.rules_effect import policy_effect
        from training.crossval import interval
        from training.endpoints import fold_correction

        own = frame["metadata"].tolist() if "metadata" in frame else [None] * len(frame)
        own = [m if isinstance(m, dict) else None for m in own]
        held = policy_folds(rows, fits, result["per_fold"], endpoints, **chosen, metadata=own)
        effect = policy_effect(held, rules, metadata=given, catch_rate=catch_rate)
        correction = fold_correction(folds, training.split.val_share)
        for name, figure in effect.get("figures", {}).items():
            differences = [fold[name]["difference"] for fold in effect["per_fold"]]
            figure["folds_interval"] = interval(differences, test_over_train=correction)
        result["policy"] = {**effect, "choice_rule": rule, "head_mode": result["chosen_mode"]}
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
    if "policy" in result:
        effect = result["policy"]
        for table in _policy_table(effect):
            console.print(table)
        closed = effect["no_feasible_endpoint"]
        console.print(
            f"no endpoint left by the policy: {closed['rows']:,} rows ({closed['share']:.3f}), left out of the "
            f"figures; by rules: {closed['by_rules'] or 'none'}; no rule fired on {effect['no_rule']:,} rows"
        )
        for note in effect["notes"]:
            console.print(f"[yellow]note[/]: {note}")
    if bundle is not None:
        from training.endpoint_bundle import train_endpoint_bundle

        try:
            made = train_endpoint_bundle(
                rows,
                endpoints,
                bundle,
                **chosen,
                folds=folds,
                config=training,
                signing_key=signing_key,
                chosen_by={"chosen_by": result["head_modes"]["chosen_by"], "folds": folds},
            )
        except EndpointDataError as exc:
            raise typer.BadParameter(str(exc)) from None
        section, manifest = made.manifest.endpoints, made.manifest
        assert section is not None
        checked = manifest.acceptance.get("reason") or f"acceptance check parity {made.acceptance_parity:.1e}"
        console.print(
            f"wrote {bundle}: {made.models.mode} heads for {', '.join(section.names)}, {section.rule} "
            f"{section.parameter:.4g} (set on validation rows), SDK parity {made.parity:.1e}; familiarity "
            f"{manifest.novelty['flagged_share_calibration']:.1%} of held-out prompts unfamiliar; {checked}"
        )


if __name__ == "__main__":
    typer.run(main)
