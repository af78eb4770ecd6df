"""`make turn-evidence`: the previous turn as evidence (serving.conversations._evidence).

With `--bundle B --logs L --out-bundle O`: fit the weights for bundle B from logs whose rows link
turns (metadata {conversation, turn}, every endpoint's outcome or the served one's; conversations
B was not trained on) and write B again at O with turn_evidence.json (signed with
`--signing-key`); prints the log loss without and with them, cross-validated over the logs'
conversations first.

Without `--bundle`: what it adds on simulated conversations with known truth
(docs/conversations.md#the-previous-turn-as-evidence).

Simulates conversations (data.simulator_conversations), trains an N-endpoint bundle on the turns
of the first third, scores every turn of the rest with it (the SDK's route_batch), and
cross-validates the turn evidence (training.turn_evidence) over those conversations in `--folds`
folds: log loss of every endpoint's P(good answer) on the turns after the first, from the text
alone and with the last turn weighed, paired by fold. Writes `--out` (JSON) and prints the table.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path


def main(
    conversations: int = 1500,
    seed: int = 7,
    folds: int = 5,
    out: Path = Path("reports/turn_evidence.json"),
    cache: Path = Path("data/cache"),
    bundle: Path | None = None,
    logs: list[Path] | None = None,
    out_bundle: Path | None = None,
    signing_key: Path | None = None,
    output_tokens: float = 250.0,
) -> None:
    if bundle is not None:
        fit_for(bundle, logs or [], out_bundle, signing_key, folds, output_tokens, out)
        return
    from training.turn_evidence import crossval

    with tempfile.TemporaryDirectory(prefix="turn-evidence-") as folder:
        _, parts, names = simulated(Path(folder), conversations, seed, cache)
    figures = {"conversations": len(parts), "seed": seed, **crossval(parts, names, folds)}
    report(figures, folds, out, f"{len(parts)} held-out conversations")
    print(f"written to {out}")


def simulated(tmp: Path, conversations: int, seed: int, cache: Path, train_share: float = 1 / 3):
    """(a bundle trained in `tmp` on the turns of the first `train_share` of `conversations` simulated
    conversations, the other conversations' designs scored through the SDK, the endpoint names)."""
    from data.endpoint_logs import read_endpoint_logs
    from data.simulator_conversations import load_simulation, write_conversations
    from evaluation.endpoints import Choosers
    from training.config import TrainConfig
    from training.endpoint_bundle import train_endpoint_bundle
    from training.endpoints import EndpointRows
    from training.turn_evidence import linked_designs

    sim = load_simulation(None)
    write_conversations(tmp / "logs", sim, conversations, seed=seed)
    frame, _ = read_endpoint_logs([tmp / "logs"], sim.names)
    ids = [m["conversation"] for m in frame["metadata"]]
    first = set(sorted(set(ids))[: round(conversations * train_share)])
    made = train_endpoint_bundle(
        EndpointRows.from_frame(frame[[cid in first for cid in ids]].reset_index(drop=True), sim.names),
        sim.endpoints,
        tmp / "bundle",
        mode="separate",
        rule="cheapest_within",
        choosers=Choosers(),
        output_tokens=sim.output_tokens,
        config=TrainConfig(cache_dir=str(cache)),
    )
    others = frame[[cid not in first for cid in ids]].reset_index(drop=True)
    return made.folder, linked_designs(made.folder, others, sim.names, sim.output_tokens), list(sim.names)


def report(figures: dict, folds: int, out: Path, what: str) -> None:
    """Write the figures to `out` and print the paired comparison."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    d = figures["difference"]
    print(
        f"{what}, {folds} folds: log loss {figures['without']:.4f} from the text alone, "
        f"{figures['with']:.4f} with the last turn; paired difference {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"
    )


def fit_for(
    bundle: Path,
    logs: list[Path],
    out_bundle: Path | None,
    signing_key: Path | None,
    folds: int,
    output_tokens: float,
    out: Path,
) -> None:
    """The weights for `bundle` from linked `logs`, cross-validated, then fitted on every conversation."""
    from data.endpoint_logs import read_endpoint_logs
    from serving import Router
    from training.turn_evidence import crossval, fit_turn_evidence, linked_designs, with_turn_evidence

    if not logs or out_bundle is None:
        raise SystemExit(
            "--bundle needs --logs (linked turns) and --out-bundle (where the bundle with the weights goes)"
        )
    names = list(Router.load(bundle, strict=True).endpoint_names)
    frame, rejected = read_endpoint_logs(logs, names)
    parts = linked_designs(bundle, frame, names, output_tokens)
    figures = {"conversations": len(parts), "rejected_rows": len(rejected), **crossval(parts, names, folds)}
    written = with_turn_evidence(bundle, out_bundle, fit_turn_evidence(parts, names), signing_key=signing_key)
    report(figures, folds, out, f"{len(parts)} conversations")
    print(f"the bundle with turn_evidence.json: {written}; figures in {out}")


if __name__ == "__main__":
    import typer

    typer.run(main)
