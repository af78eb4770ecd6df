"""The previous turn as evidence, learned (serving.conversations._evidence says how the SDK uses it).

From logs whose turns are linked (each row's conversation id and turn), for every turn after the
first: the bundle's P(good) of each endpoint on that turn's text, each endpoint's outcome on it,
and what the router knew of the turn before: which endpoint answered it and how it went. Logs
with every endpoint's outcome (simulated, or labelled offline) are read once for each endpoint
that could have answered the turn before (its outcome is what the router would have seen), so
the weights do not depend on the policy that wrote the logs; logs of served traffic give the one
that answered. Per endpoint, a logistic regression over serving.conversations._evidence.FEATURES
(L2, C=1, the intercept a feature): its weights go into the bundle as turn_evidence.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from serving.conversations._evidence import FEATURES, FILE, TurnEvidence, features
from serving.conversations._state import ConversationState

GOOD = 0.5  # an outcome at or above this is a good answer


def previous_state(
    n_tokens: Sequence[int], output_tokens: Sequence[float], served: str, good: bool, turn: int
) -> ConversationState:
    """The state after turn `turn` (1-based) of a conversation whose turns had `n_tokens` and
    `output_tokens`, the last answered by `served`, well or not (a bad answer reads as rejected)."""
    return ConversationState(
        turn, served, "served" if good else "rejected", int(n_tokens[turn - 1] + output_tokens[turn - 1]), (), 0.0
    )


def design(
    expected: np.ndarray, quality: np.ndarray, n_tokens: np.ndarray, output_tokens: np.ndarray, names: Sequence[str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For one conversation ([turns, N] probabilities and outcomes, per-turn tokens): each endpoint's
    (X, y) over its turns after the first, one row for each endpoint that could have answered the
    turn before (module doc)."""
    out: dict[str, tuple[list[list[float]], list[float]]] = {name: ([], []) for name in names}
    for t in range(1, len(quality)):
        for s, served in enumerate(names):
            if not np.isfinite(quality[t - 1, s]):
                continue
            state = previous_state(n_tokens, output_tokens, served, bool(quality[t - 1, s] >= GOOD), t)
            for e, name in enumerate(names):
                if np.isfinite(quality[t, e]):
                    out[name][0].append(features(float(expected[t, e]), name, state))
                    out[name][1].append(float(quality[t, e] >= GOOD))
    return {
        name: (np.array(x, dtype=np.float64).reshape(-1, len(FEATURES)), np.array(y)) for name, (x, y) in out.items()
    }


def fit_turn_evidence(parts: Sequence[dict[str, tuple[np.ndarray, np.ndarray]]], names: Sequence[str]) -> TurnEvidence:
    """The weights from the conversations' designs (`design` of each); ValueError for an endpoint
    without both outcomes among its rows."""
    from sklearn.linear_model import LogisticRegression

    weights: dict[str, tuple[float, ...]] = {}
    rows = 0
    for name in names:
        x = np.concatenate([p[name][0] for p in parts])
        y = np.concatenate([p[name][1] for p in parts])
        if len(np.unique(y)) < 2:
            raise ValueError(f"turn evidence: endpoint {name!r} has {len(y)} linked turns, all of one outcome")
        model = LogisticRegression(C=1.0, fit_intercept=False, max_iter=1000).fit(x, y)
        weights[name] = tuple(float(w) for w in model.coef_[0])
        rows += len(y)
    return TurnEvidence(weights, rows)


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def held_out_loss(
    evidence: TurnEvidence, parts: Sequence[dict[str, tuple[np.ndarray, np.ndarray]]], names: Sequence[str]
) -> dict[str, float]:
    """Log loss on the turns after the first of other conversations: the bundle's probabilities as
    they are (`without`) and moved by the evidence (`with`), over every endpoint's rows."""
    p_without, p_with, ys = [], [], []
    for name in names:
        x = np.concatenate([p[name][0] for p in parts])
        y = np.concatenate([p[name][1] for p in parts])
        z = x @ np.array(evidence.weights[name])
        p_without.append(1 / (1 + np.exp(-x[:, 0])))
        p_with.append(1 / (1 + np.exp(-z)))
        ys.append(y)
    y = np.concatenate(ys)
    return {
        "without": log_loss(np.concatenate(p_without), y),
        "with": log_loss(np.concatenate(p_with), y),
        "rows": len(y),
    }


def with_turn_evidence(
    bundle: str | Path, dest: str | Path, evidence: TurnEvidence, *, signing_key: Path | None = None
) -> Path:
    """`bundle` written again at `dest` with turn_evidence.json (training.writer: every file
    checksummed, the manifest digested, signed with `signing_key` when given, published atomically)."""
    from serving.bundle._bundle import read_bundle
    from training.writer import write_bundle

    source = read_bundle(bundle)
    files: dict[str, bytes | Path] = {name: source.content(name) for name in source.manifest.files}
    files[FILE] = evidence.to_json().encode()
    return write_bundle(Path(dest), files, source.manifest, signing_key=signing_key)


def linked_designs(bundle: str | Path, frame, names: Sequence[str], output_tokens: float) -> list:
    """Each conversation's design (`design`) from logs whose rows link turns (metadata
    {conversation, turn}: data.endpoint_logs' frame), every turn scored by the bundle through the
    SDK (route_batch: the probabilities the router will read), endpoints in `names`' order."""
    from evaluation.conversations import conversations_of
    from serving import Router

    conversations, _ = conversations_of(frame, names, output_tokens=output_tokens)
    router = Router.load(bundle, strict=True, unfamiliar_policy="learned")
    parts = []
    for conversation in conversations:
        decisions = router.route_batch(conversation.texts, conversation.precisions)
        expected = np.array([[d.expected[n] for n in names] for d in decisions])  # type: ignore[index]
        tokens = np.array([d.n_tokens for d in decisions])
        parts.append(design(expected, conversation.quality, tokens, conversation.output_tokens, names))
    return parts


def crossval(parts: Sequence[dict[str, tuple[np.ndarray, np.ndarray]]], names: Sequence[str], folds: int = 5) -> dict:
    """Log loss without and with the evidence on each fold of conversations (the weights fitted on
    the other folds), and their paired difference with its corrected 95% interval
    (training.crossval.interval)."""
    from training.crossval import interval

    order = np.arange(len(parts)) % folds
    per_fold = []
    for k in range(folds):
        fitted = fit_turn_evidence([p for p, f in zip(parts, order) if f != k], names)
        per_fold.append(held_out_loss(fitted, [p for p, f in zip(parts, order) if f == k], names))
    differences = [f["with"] - f["without"] for f in per_fold]
    return {
        "folds": per_fold,
        "without": float(np.mean([f["without"] for f in per_fold])),
        "with": float(np.mean([f["with"] for f in per_fold])),
        "difference": interval(differences, test_over_train=1.0 / (folds - 1)),
    }
