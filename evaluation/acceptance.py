"""How well an acceptance check separates good edge answers from failures: AUC, catch rate and false-reject rate
(docs/metrics.md#the-acceptance-checks-figures), the same figures in training (held-out folds, its test split) and in
`make evaluate` (the SDK on held-out rows)."""

from __future__ import annotations

import numpy as np


def separation(probability, good, threshold: float) -> dict:
    """AUC, catch rate and false-reject rate of P(good) at `threshold` (accept when >= it)."""
    probability, good = np.asarray(probability, float), np.asarray(good, bool)
    rejected = probability < threshold
    n_good, n_bad = int(good.sum()), int((~good).sum())
    auc = None
    if n_good and n_bad:
        from sklearn.metrics import roc_auc_score

        auc = float(roc_auc_score(~good, -probability))  # failures ranked by how doubtful the answer looks
    return {
        "rows": len(good),
        "failures": n_bad,
        "auc": auc,
        "catch_rate": float(rejected[~good].mean()) if n_bad else None,
        "false_reject_rate": float(rejected[good].mean()) if n_good else None,
    }


def separation_by_source(probability, good, sources, threshold: float) -> dict:
    """`separation` over all rows, and per source under "per_source"."""
    probability, good, sources = np.asarray(probability, float), np.asarray(good, bool), np.asarray(sources, object)
    out = separation(probability, good, threshold)
    out["per_source"] = {
        str(s): separation(probability[sources == s], good[sources == s], threshold)
        for s in sorted(set(sources.tolist()), key=str)
    }
    return out


def roc_points(probability, good) -> dict:
    """The ROC curve as false-reject rate (x) against catch rate (y), for the report's plot."""
    from sklearn.metrics import roc_curve

    false_reject, catch, _ = roc_curve(~np.asarray(good, bool), -np.asarray(probability, float))
    return {"false_reject_rate": false_reject.tolist(), "catch_rate": catch.tolist()}


def rejected_share_by_prompt(prompts, rejected, wanted) -> np.ndarray:
    """Per prompt in `wanted`: the share of its logged answers (maybe several) the check rejects; NaN if none."""
    import pandas as pd

    share = pd.Series(np.asarray(rejected, float), index=list(prompts)).groupby(level=0).mean()
    return share.reindex(list(wanted)).to_numpy(float)
