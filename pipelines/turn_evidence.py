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

import numpy as np


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
    from data.endpoint_logs import read_endpoint_logs
    from data.simulator_conversations import load_simulation, write_conversations
    from evaluation.conversations import conversations_of
    from evaluation.endpoints import Choosers
    from serving import Router
    from training.config import TrainConfig
    from training.endpoint_bundle import train_endpoint_bundle
    from training.endpoints import EndpointRows
    from training.turn_evidence import crossval, design

    sim = load_simulation(None)
    with tempfile.TemporaryDirectory(prefix="turn-evidence-") as folder:
        tmp = Path(folder)
        write_conversations(tmp / "logs", sim, conversations, seed=seed)
        frame, _ = read_endpoint_logs([tmp / "logs"], sim.names)
        ids = [m["conversation"] for m in frame["metadata"]]
        first = set(sorted(set(ids))[: conversations // 3])
        training = frame[[cid in first for cid in ids]].reset_index(drop=True)
        made = train_endpoint_bundle(
            EndpointRows.from_frame(training, sim.names),
            sim.endpoints,
            tmp / "bundle",
            mode="separate",
            rule="cheapest_within",
            choosers=Choosers(),
            output_tokens=sim.output_tokens,
            config=TrainConfig(cache_dir=str(cache)),
        )
        others, _ = conversations_of(frame[[cid not in first for cid in ids]].reset_index(drop=True), sim.names)
        router = Router.load(made.folder, strict=True, unfamiliar_policy="learned")
        parts = []
        for conversation in others:
            decisions = router.route_batch(conversation.texts, conversation.precisions)
            expected = np.array([[d.expected[n] for n in sim.names] for d in decisions])
            tokens = np.array([d.n_tokens for d in decisions])
            parts.append(design(expected, conversation.quality, tokens, conversation.output_tokens, sim.names))
    figures = {"conversations": len(others), "seed": seed, **crossval(parts, list(sim.names), folds)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    d = figures["difference"]
    print(
        f"{len(others)} held-out conversations, {folds} folds: log loss {figures['without']:.4f} from the text alone, "
        f"{figures['with']:.4f} with the last turn; paired difference {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"
    )
    print(f"written to {out}")


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
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    d = figures["difference"]
    print(
        f"{len(parts)} conversations, {folds} folds: log loss {figures['without']:.4f} from the text alone, "
        f"{figures['with']:.4f} with the last turn; paired difference {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"
    )
    print(f"the bundle with turn_evidence.json: {written}; figures in {out}")


if __name__ == "__main__":
    import typer

    typer.run(main)
