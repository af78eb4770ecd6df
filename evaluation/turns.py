"""MT-Bench second turns: what knowing the first turn's outcome adds to routing (issue 47;
docs/evaluation.md#conversations-what-the-first-turn-tells-about-the-second). The turn-2 target is the cloud-needed
label the caller passes (training.labels.cloud_needed: evaluation sits below training)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from data.routellm import MT_BENCH_CATEGORY, iter_mt_bench
from data.schema import Reject, RowError, check_row
from evaluation.metrics import apgr, auc, operating_point, quality_curve
from serving.features._text_stats import text_statistics

# (domain, precision) as the loader writes them -> MT-Bench category; writing and roleplay share one pair.
CATEGORY = {
    pair: "/".join(c for c, p in MT_BENCH_CATEGORY.items() if p == pair) for pair in set(MT_BENCH_CATEGORY.values())
}
PREDICTORS = {"A": ("text",), "B": ("text", "turn1"), "A+": ("text", "category"), "B+": ("text", "category", "turn1")}
CARRY = "carry"  # turn 2 goes where turn 1 should have gone: turn 1's oracle, fitted to nothing
FEATURE_NAMES = {"text": "turn-2 text", "category": "category", "turn1": "turn-1 outcome"}
DESCRIPTION = {name: " + ".join(FEATURE_NAMES[g] for g in used) for name, used in PREDICTORS.items()}
DESCRIPTION[CARRY] = "turn 1's oracle carried over"
PAIRS = (("B", "A"), ("B+", "A+"), (CARRY, "A"), ("B", CARRY))


@dataclass(frozen=True)
class Conversations:
    ids: list[str]
    category: list[str]
    prompt2: list[str]  # the turn-2 request as the loader builds it: both user turns, no answers
    q_edge: np.ndarray  # [n, 2]: turn 1, turn 2, judge scores scaled to [0, 1]
    q_cloud: np.ndarray
    needed: np.ndarray  # [n, 2] the cloud-needed label per turn


def read_conversations(folder: Path, label: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Conversations:
    """Both turns of every MT-Bench question, rows checked by data.schema.check_row; a reject, or a
    turn without both scores, is an error."""
    rejects: list[Reject] = []
    turns: dict[str, dict[int, dict]] = {}
    for raw in iter_mt_bench(Path(folder), rejects):
        try:
            row = check_row(raw.row, default_source="mt_bench")
        except RowError as exc:
            rejects.append(Reject(raw.file, raw.location, str(exc)))
            continue
        qid, turn = row["request_id"].rsplit("/turn", 1)
        turns.setdefault(qid, {})[int(turn)] = row
    qualities = ("edge_quality", "cloud_quality")
    incomplete = [
        q for q, t in turns.items() if len(t) != 2 or any(r[f] is None for r in t.values() for f in qualities)
    ]
    if rejects or incomplete or not turns:
        raise ValueError(f"MT-Bench in {folder}: rejects {[str(r) for r in rejects][:5]}, incomplete {incomplete[:5]}")
    ids = sorted(turns, key=lambda q: int(q.rsplit("/", 1)[1]))
    q_edge, q_cloud = (np.array([[turns[q][k][f] for k in (1, 2)] for q in ids]) for f in qualities)
    return Conversations(
        ids=ids,
        category=[CATEGORY.get((turns[q][2]["domain"], turns[q][2]["precision"]), "other") for q in ids],
        prompt2=[turns[q][2]["prompt"] for q in ids],
        q_edge=q_edge,
        q_cloud=q_cloud,
        needed=np.stack([np.asarray(label(q_edge[:, k], q_cloud[:, k]), dtype=np.int8) for k in (0, 1)], axis=1),
    )


def features(conv: Conversations) -> dict[str, np.ndarray]:
    """The SDK's own text statistics of the turn-2 request (log1p: counts span 0 to thousands), the
    category one-hot, and turn 1's outcome: the edge's score and the cloud's margin over it."""
    cats = sorted(set(conv.category))
    return {
        "text": np.log1p(np.array([text_statistics(p, p) for p in conv.prompt2], dtype=np.float64)),
        "category": np.array([[c == k for k in cats] for c in conv.category], dtype=np.float64),
        "turn1": np.column_stack([conv.q_edge[:, 0], conv.q_cloud[:, 0] - conv.q_edge[:, 0]]),
    }


def out_of_fold(
    conv: Conversations, *, folds: int = 5, repeats: int = 20, seed: int = 0
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """P(cloud needed on turn 2) per predictor, [repeats, n], out of fold, every predictor on the same
    splits, and each row's fold per repeat. Logistic regression on standardized features, C = 1."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import RepeatedStratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    groups, y, n = features(conv), conv.needed[:, 1], len(conv.ids)
    out = {name: np.full((repeats, n), np.nan) for name in PREDICTORS}
    fold = np.full((repeats, n), -1)
    splits = RepeatedStratifiedKFold(n_splits=folds, n_repeats=repeats, random_state=seed).split(np.zeros(n), y)
    for i, (train, test) in enumerate(splits):
        fold[i // folds, test] = i % folds
        for name, used in PREDICTORS.items():
            x = np.hstack([groups[g] for g in used])
            model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, solver="newton-cg"))
            out[name][i // folds, test] = model.fit(x[train], y[train]).predict_proba(x[test])[:, 1]
    out[CARRY] = np.tile(conv.needed[:, 0].astype(np.float64), (repeats, 1))
    return out, fold


def figures(scores: np.ndarray, conv: Conversations, rows: np.ndarray, threshold: float) -> dict[str, float]:
    """The project's metrics on turn 2 for the conversations `rows`: AUC and APGR over the score,
    and the operating point of routing to the cloud when the score is above `threshold`."""
    q_edge, q_cloud, needed = conv.q_edge[rows, 1], conv.q_cloud[rows, 1], conv.needed[rows, 1]
    point = operating_point(scores[rows] > threshold, q_edge, q_cloud, needed)
    return {
        "auc": auc(needed, scores[rows]),
        "apgr": apgr(quality_curve(scores[rows], q_edge, q_cloud)),
        **{k: point[k] for k in ("cloud_share", "quality", "misroute_rate")},
    }


def compare(
    conv: Conversations, scores: dict[str, np.ndarray], *, threshold: float = 0.5, draws: int = 2000, seed: int = 0
) -> dict:
    """Point (mean over the CV repeats) and 95% percentile bootstrap interval of every predictor's
    figures and of the paired differences PAIRS, on the same draws; each draw scores one repeat's
    predictions, cycling through them, so the interval holds the partition's noise too."""
    n, repeats = len(conv.ids), next(iter(scores.values())).shape[0]
    every = np.arange(n)
    point = {k: _mean([figures(s[r], conv, every, threshold) for r in range(repeats)]) for k, s in scores.items()}
    rng = np.random.default_rng(seed)
    boot: dict[str, list[dict]] = {k: [] for k in scores}
    for b in range(draws):
        rows = rng.integers(0, n, n)
        for k, s in scores.items():
            boot[k].append(figures(s[b % repeats], conv, rows, threshold))
    predictors = {k: {m: _interval(point[k][m], [d[m] for d in boot[k]]) for m in point[k]} for k in scores}
    differences: dict = {}
    for b_name, a_name in PAIRS:
        diff = {m: [x[m] - y[m] for x, y in zip(boot[b_name], boot[a_name])] for m in point[b_name]}
        differences[f"{b_name} - {a_name}"] = {m: _interval(point[b_name][m] - point[a_name][m], diff[m]) for m in diff}
    return {"predictors": predictors, "differences": differences}


def label_counts(conv: Conversations) -> dict:
    t1, t2 = conv.needed[:, 0].astype(bool), conv.needed[:, 1].astype(bool)
    by_category = {
        c: {"n": int(m.sum()), "turn1_needed": int(t1[m].sum()), "turn2_needed": int(t2[m].sum())}
        for c in sorted(set(conv.category))
        for m in [np.array(conv.category) == c]
    }
    return {
        "conversations": len(conv.ids),
        "turn1_needed": int(t1.sum()),
        "turn2_needed": int(t2.sum()),
        "turn2_needed_when_turn1_needed": [int((t1 & t2).sum()), int(t1.sum())],
        "turn2_needed_when_turn1_not": [int((~t1 & t2).sum()), int((~t1).sum())],
        "by_category": by_category,
    }


def _mean(dicts: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([d[k] for d in dicts])) for k in dicts[0]}


def _interval(point: float, values: list[float]) -> dict:
    lo, hi = np.nanpercentile(values, [2.5, 97.5])
    return {"point": point, "low": float(lo), "high": float(hi)}
