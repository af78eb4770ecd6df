"""Fit the familiarity reference (serving.novelty) on held-out in-distribution prompts.

The validation rows are split in two by prompt hash: the first half gives the embedding's
mean and spread and the set of tokens seen; on the second half, each measure's threshold is
the quantile that flags half of `share`, so that about `share` of in-distribution prompts
are unfamiliar. The unseen-token threshold never drops below `min_unseen_share`: a prompt
is not unfamiliar for one rare word.
"""
from __future__ import annotations

import numpy as np

from serving.novelty import Novelty


def measures(extractor, prompts, precisions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(embeddings, padded ids, mask) of prompts, as the SDK computes them."""
    ids, mask, _, _, _ = extractor.prepare(list(prompts), list(precisions))
    features = extractor.transform(list(prompts), list(precisions))
    return features[:, -extractor.spec.embedding_dim:], ids, mask


def fit_novelty(extractor, prompts, precisions, *, share: float, min_unseen_share: float) -> tuple[Novelty, dict]:
    """The reference and its manifest figures (thresholds, rows, flagged share on the calibration half)."""
    from data.prepare import hash_uniform

    embeddings, ids, mask = measures(extractor, prompts, precisions)
    first = hash_uniform(list(prompts), "novelty:") < 0.5
    if first.sum() < 10 or (~first).sum() < 10:
        raise ValueError(f"too few validation rows ({len(first)}) to fit the familiarity reference")
    seen = np.zeros(extractor.tokenizer.full.get_vocab_size(), dtype=np.float64)
    seen[np.unique(ids[first][mask[first] > 0])] = 1.0
    reference = Novelty(embeddings[first].mean(axis=0), embeddings[first].std(axis=0), seen,
                        embedding_threshold=1.0, unseen_threshold=1.0)
    distance, unseen = reference.components(embeddings[~first], ids[~first], mask[~first])
    reference.embedding_threshold = float(np.quantile(distance, 1 - share / 2))
    reference.unseen_threshold = float(max(np.quantile(unseen, 1 - share / 2), min_unseen_share))
    flagged = float((reference.scores(embeddings[~first], ids[~first], mask[~first]) > 1).mean())
    return reference, {"embedding_threshold": reference.embedding_threshold,
                       "unseen_threshold": reference.unseen_threshold, "target_share": share,
                       "fitted_rows": int(first.sum()), "calibration_rows": int((~first).sum()),
                       "flagged_share_calibration": flagged}


def scores(reference: Novelty, extractor, prompts, precisions) -> np.ndarray:
    """Novelty of each prompt, as the SDK computes it."""
    embeddings, ids, mask = measures(extractor, prompts, precisions)
    return reference.scores(embeddings, ids, mask)
