"""`make conversations`: routing conversations, not prompts, offline (issue 47;
docs/evaluation.md#conversations-make-conversations).

Simulates conversations (data.simulator_conversations) or reads them (`--data`: N-endpoint logs whose
rows carry metadata {conversation, turn} and every endpoint's outcome), cuts the conversations into
K folds by the hash of their id (data.prepare.assign_splits: a conversation's turns are all in one
fold), and in each fold trains an N-endpoint bundle on the other folds' turns
(training.endpoint_bundle, rule best_under_price, its price set on validation rows) and replays the
fold's conversations through the SDK's Router under each policy (evaluation.conversations). Every
figure is the mean over the folds with the 95% corrected resampled t interval
(training.crossval.interval); differences are paired by fold. Writes `metrics.json` into `--out`
and prints the table.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

# The figures of each policy, and the pairs compared by fold (a - b).
FIGURE_KEYS = ("quality", "expected_quality", "cost", "reprefill", "switches", "ttft_s")
PAIRS = (("priced", "own"), ("priced", "sticky"), ("sticky", "own"), ("tuned", "own"), ("tuned", "sticky"))


def _get(fold: dict, path: tuple) -> float:
    value = fold
    for key in path:
        value = value.get(key, {}) if isinstance(value, dict) else {}
    return float(value) if isinstance(value, (int, float)) else float("nan")


def _pairs(policies) -> list[tuple[str, str]]:
    return [(a, b) for a, b in PAIRS if a in policies and b in policies]


def summarize(per_fold: list[dict], correction: float) -> dict:
    """Each figure's mean and interval over the folds, and the paired differences (module doc)."""
    from training.crossval import interval

    def over(path: tuple, minus: tuple | None = None) -> dict:
        values = [_get(f, path) - (_get(f, minus) if minus else 0.0) for f in per_fold]
        return interval(values, test_over_train=correction)

    out: dict[str, dict] = {}
    for block in ("operating", "cheapest_within"):
        for policy in per_fold[0][block]:
            for key in FIGURE_KEYS:
                out[f"{block} / {policy} / {key}"] = over((block, policy, key))
        for a, b in _pairs(per_fold[0][block]):
            for key in FIGURE_KEYS:
                out[f"{block} / {a} - {b} / {key}"] = over((block, a, key), (block, b, key))
    for measure, points in per_fold[0]["matched"].items():
        for label in points:
            path = ("matched", measure, label)
            out[f"matched {measure} / {label} / target"] = over((*path, "target"))
            out[f"matched {measure} / {label} / budget"] = over((*path, "budget"))
            for what in ("cost_at", "quality_at"):
                for policy in points[label][what]:
                    out[f"matched {measure} / {label} / {what} / {policy}"] = over((*path, what, policy))
                for a, b in _pairs(points[label][what]):
                    out[f"matched {measure} / {label} / {what} / {a} - {b}"] = over((*path, what, a), (*path, what, b))
    out["changed"] = over(("changed",))
    out["price"] = over(("price",))
    return out


def _table(estimates: dict, block: str, policies, title: str):
    from rich.table import Table

    table = Table(title=title)
    for column in ("policy", "quality", "expected quality", "cost / conversation", "re-prefill", "switches", "TTFT s"):
        table.add_column(column, justify="left" if column == "policy" else "right")

    def cell(key: str, fmt: str) -> str:
        e = estimates.get(key)
        if e is None or not math.isfinite(e["mean"]):
            return ""
        return f"{e['mean']:{fmt}} [{e['low']:{fmt}}, {e['high']:{fmt}}]"

    for policy in policies:
        formats = {
            "quality": "+.4f",
            "expected_quality": "+.4f",
            "cost": "+.5f",
            "reprefill": "+.5f",
            "switches": "+.2f",
            "ttft_s": "+.3f",
        }
        if " - " not in policy:
            formats = {k: v.lstrip("+") for k, v in formats.items()}
        table.add_row(policy, *(cell(f"{block} / {policy} / {k}", f) for k, f in formats.items()))
    return table


def _matched_table(estimates: dict, measure: str, labels, policies):
    """At each of own's points: each policy's cost at own's quality and quality at own's cost, minus
    own's (matched on `measure`)."""
    from rich.table import Table

    table = Table(title=f"matched on {measure}: at own's point, mean [95% interval] over folds")
    others = [p for p in ("priced", "tuned", "sticky") if p in policies]
    for column in ("own's price", f"own's {measure}", "own's cost"):
        table.add_column(column, justify="right")
    for what in ("cost", "quality"):
        for policy in others:
            table.add_column(f"{what}: {policy} - own", justify="right")

    def cell(key: str, fmt: str) -> str:
        e = estimates[key]
        if not e["n"]:
            return "never reached"
        said = f"{e['mean']:{fmt}} [{e['low']:{fmt}}, {e['high']:{fmt}}]"
        return said + (f" ({e['n']} folds)" if e["undefined"] else "")

    for label in labels:
        at = f"matched {measure} / {label}"
        table.add_row(
            label,
            cell(f"{at} / target", ".4f"),
            cell(f"{at} / budget", ".5f"),
            *(cell(f"{at} / cost_at / {p} - own", "+.5f") for p in others),
            *(cell(f"{at} / quality_at / {p} - own", "+.4f") for p in others),
        )
    return table


def main(
    data: Annotated[
        Optional[list[str]],
        typer.Option(help="N-endpoint logs of conversations to read instead of simulating (repeatable)"),
    ] = None,
    spec: Annotated[
        Optional[Path],
        typer.Option(
            help="simulation spec (endpoints + hidden skills), or a built-in one: default (the four cached "
            "endpoints), two-frontier (two frontier providers of one price)"
        ),
    ] = None,
    conversations: Annotated[int, typer.Option(help="conversations to simulate")] = 1000,
    seed: Annotated[int, typer.Option(help="simulation seed")] = 0,
    folds: Annotated[int, typer.Option(help="conversation-hash folds")] = 5,
    prices: Annotated[
        str, typer.Option(help="best_under_price prices (quality per dollar) tracing each policy's curve")
    ] = "1,2,5,10,20,50,100",
    weights: Annotated[str, typer.Option(help="priced stickiness's other weights (the weight curve)")] = "0.25,0.5,2,4",
    seconds_price: Annotated[
        Optional[float], typer.Option(help="Stickiness.seconds_price: dollars a second to first token (SDK default)")
    ] = None,
    budget_share: Annotated[
        float, typer.Option(help="the bundle's price: this share of the best single endpoint's cost, on validation")
    ] = 0.5,
    margin: Annotated[float, typer.Option(help="cheapest_within's margin, the default rule compared")] = 0.02,
    val_share: Annotated[
        float,
        typer.Option(help="conversations of each fold's training side kept to choose the stickiness on (0: none)"),
    ] = 0.15,
    cache_dir: Annotated[Path, typer.Option(help="encoder cache (the static tier's token table)")] = Path("data/cache"),
    out: Annotated[Path, typer.Option(help="report folder")] = Path("reports/conversations"),
) -> None:
    """Simulate (or read) conversations, train a bundle per conversation fold, replay the held-out
    conversations under each policy, and print and write the figures with their intervals."""
    import numpy as np
    from rich.console import Console

    from data.endpoint_logs import read_endpoint_logs
    from data.prepare import assign_splits
    from data.simulator_conversations import correlations, load_simulation, write_conversations
    from data.simulator_endpoints import TRUTH_FILE, read_truth
    from evaluation.conversations import POLICIES, conversation_ids, conversations_of, evaluate_fold
    from evaluation.endpoints import Choosers
    from serving.conversations._switch import Stickiness
    from serving.endpoints._record import EndpointSpecError
    from training.config import TrainConfig
    from training.endpoint_bundle import train_endpoint_bundle
    from training.endpoints import EndpointDataError, EndpointRows

    console = Console()
    started = time.perf_counter()
    try:
        sim = load_simulation(spec)
        grid = [float(x) for x in prices.split(",") if x.strip()]
        curve = [float(x) for x in weights.split(",") if x.strip()]
        knob = Stickiness(1.0, Stickiness().seconds_price if seconds_price is None else seconds_price)
    except (EndpointSpecError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    if not 3 <= folds <= 20:
        raise typer.BadParameter(f"--folds {folds}: must be in [3, 20]")
    if not 0.0 <= val_share < 1.0 - 1.0 / folds:
        raise typer.BadParameter(f"--val-share {val_share}: leaves no conversation to train on with {folds} folds")
    out.mkdir(parents=True, exist_ok=True)
    if data:
        paths = list(data)
    else:
        logs = out / "logs"
        write_conversations(logs, sim, conversations, seed=seed)
        paths = [str(logs)]
    names = sim.names
    frame, rejects = read_endpoint_logs(paths, names)
    for reject in rejects[:5]:
        console.print(f"[yellow]reject[/] {reject.file} {reject.location}: {reject.reason}")
    truths = [read_truth(p) for p in paths if (Path(p) / TRUTH_FILE).is_file()]
    truth = None
    if truths:
        import pandas as pd

        truth = pd.concat(truths, ignore_index=True)
    try:
        convs, incomplete = conversations_of(frame, names, truth, sim.output_tokens)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not convs:
        raise typer.BadParameter(f"no conversation with every endpoint's outcome on every turn in {paths}")
    console.print(
        f"{len(convs):,} conversations, {sum(len(c) for c in convs):,} turns ({incomplete} left out: an outcome "
        f"missing; {len(rejects)} rejected rows) from {', '.join(paths)}"
    )
    row_conversation = np.array(conversation_ids(frame))
    rows = EndpointRows.from_frame(frame, names)
    ids = [c.id for c in convs]
    config = TrainConfig.of({"cache_dir": str(cache_dir)})
    per_fold = []
    for fold in range(folds):
        split = dict(zip(ids, assign_splits(ids, val_share=val_share, test_share=1.0 / folds, offset=fold / folds)))
        train = np.array([split.get(c) == "train" for c in row_conversation])
        held = [c for c in convs if split[c.id] == "test"]
        validation = [c for c in convs if split[c.id] == "val"]
        work = out / "folds" / str(fold)
        try:
            train_endpoint_bundle(
                rows.subset(train),
                sim.endpoints,
                work / "bundle",
                mode="separate",
                rule="best_under_price",
                choosers=Choosers(budget_share=budget_share),
                output_tokens=sim.output_tokens,
                folds=10,
                config=config,
            )
        except EndpointDataError as exc:
            raise typer.BadParameter(f"fold {fold}: {exc}") from None
        figures = evaluate_fold(
            work / "bundle",
            held,
            work,
            prices=grid,
            weights=curve,
            seconds_price=knob.seconds_price,
            margin=margin,
            validation=validation,
        )
        per_fold.append(figures)
        (work / "figures.json").write_text(json.dumps(figures, default=float) + "\n", encoding="utf-8")
        op, tuned = figures["operating"], figures["tuned"]
        chose = (
            f"; tuned on {len(validation)}: weight {tuned['weight']:g}, {tuned['seconds_price']:g} $/s" if tuned else ""
        )
        console.print(
            f"fold {fold + 1}/{folds}: {len(held)} conversations, price {figures['price']:.3g}/${chose}; quality / cost: "
            + ", ".join(f"{p} {op[p]['quality']:.3f} ${op[p]['cost']:.4f}" for p in (*POLICIES, "oracle"))
        )
    # n_test / n_train of one fold for the corrected interval: the bundle learns from the other folds.
    correction = (1.0 / folds) / (1.0 - 1.0 / folds - val_share)
    estimates = summarize(per_fold, correction)
    report = {
        "data": paths,
        "simulated": None if data else {"conversations": conversations, "seed": seed, "spec": str(spec or "default")},
        "correlations": correlations(frame.assign(outcomes=_outcomes(frame, names)), truth)
        if truth is not None
        else None,
        "protocol": {
            "folds": folds,
            "split": "conversation-id hash (data.prepare.assign_splits): a conversation's turns in one fold",
            "bundle": "training.endpoint_bundle, separate heads, best_under_price at budget_share "
            f"{budget_share} of the best single endpoint's cost on its validation rows",
            "policies": {**{k: f"Stickiness({v})" for k, v in POLICIES.items()}, "weights": curve},
            "seconds_price": knob.seconds_price,
            "tuned": f"chosen on {val_share:.0%} of each fold's other conversations (not trained on): "
            "evaluation.conversations.choose"
            if val_share
            else None,
            "prices": grid,
            "cheapest_within_margin": margin,
            "interval": "corrected resampled t over folds (training.crossval.interval)",
        },
        "estimates": estimates,
        "per_fold": per_fold,
        "rejects": len(rejects),
        "incomplete_conversations": incomplete,
        "seconds": time.perf_counter() - started,
    }
    (out / "metrics.json").write_text(json.dumps(report, indent=2, default=float) + "\n", encoding="utf-8")
    ours = [*per_fold[0]["operating"]]
    operating = [*ours, *(f"{a} - {b}" for a, b in _pairs(ours))]
    console.print(_table(estimates, "operating", operating, f"{folds} folds, the bundle's price: mean [95% interval]"))
    console.print(
        _table(
            estimates,
            "cheapest_within",
            [*POLICIES, *(f"{a} - {b}" for a, b in _pairs(POLICIES))],
            f"the rule cheapest_within {margin}",
        )
    )
    for measure, points in per_fold[0]["matched"].items():
        console.print(_matched_table(estimates, measure, list(points), ours))
    console.print(f"wrote {out / 'metrics.json'} in {report['seconds']:.0f} s")


def _outcomes(frame, names):
    return [{n: q for n in names if math.isfinite(q := row[f"q_{n}"])} for _, row in frame.iterrows()]


if __name__ == "__main__":
    typer.run(main)
