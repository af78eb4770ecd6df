"""`make turn-evidence`: what the previous turn adds to each endpoint's expected quality, on simulated
conversations with known truth (docs/evaluation.md#the-previous-turn-as-evidence).

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
) -> None:
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


if __name__ == "__main__":
    import typer

    typer.run(main)
