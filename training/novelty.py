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


def token_ids(extractor, prompts) -> tuple[np.ndarray, np.ndarray]:
    """Padded ids and mask of prompts, as the SDK tokenizes them (the embeddings come from
    the engine's feature matrix: the encoder does not run twice)."""
    prompts = list(prompts)
    ids, mask, _ = extractor.token_ids(extractor.heads(prompts), prompts)
    return ids, mask


def fit_novelty(extractor, prompts, embeddings: np.ndarray, *, share: float,
                min_unseen_share: float) -> tuple[Novelty, dict]:
    """The reference fitted on held-out rows (their prompts and projected embeddings), and its
    manifest figures (thresholds, rows, flagged share on the calibration half)."""
    from data.prepare import hash_uniform

    ids, mask = token_ids(extractor, prompts)
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


def scores(reference: Novelty, extractor, prompts, embeddings: np.ndarray) -> np.ndarray:
    """Novelty of each prompt, as the SDK computes it."""
    ids, mask = token_ids(extractor, prompts)
    return reference.scores(embeddings, ids, mask)
