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


CHUNK_ROWS = 4096  # prompts tokenized at a time: the padded ids of every held-out prompt at once took GBs


def token_ids(extractor, prompts) -> tuple[np.ndarray, np.ndarray]:
    """Padded ids and mask of prompts, as the SDK tokenizes them (the embeddings come from
    the engine's feature matrix: the encoder does not run twice)."""
    prompts = list(prompts)
    ids, mask, _ = extractor.token_ids(extractor.heads(prompts), prompts)
    return ids, mask


def _chunked_ids(extractor, prompts: list) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """(start, stop, ids, mask) per chunk of CHUNK_ROWS prompts, held compactly (2-byte ids, a
    boolean mask: each chunk padded only to its own longest prompt)."""
    out = []
    for start in range(0, len(prompts), CHUNK_ROWS):
        ids, mask = token_ids(extractor, prompts[start: start + CHUNK_ROWS])
        small = ids.size == 0 or int(ids.max()) < 2**16
        out.append((start, start + len(ids), ids.astype(np.uint16 if small else np.int32), mask.astype(bool)))
    return out


def _per_chunk(chunks, rows: np.ndarray, measure) -> list:
    """`measure(start, stop, ids, mask)` on the chosen `rows` of each chunk (row-wise measures:
    the values do not depend on the chunking)."""
    return [measure(a, b, ids[rows[a:b]], mask[rows[a:b]]) for a, b, ids, mask in chunks]


def fit_novelty(extractor, prompts, embeddings: np.ndarray, *, share: float,
                min_unseen_share: float) -> tuple[Novelty, dict]:
    """The reference fitted on held-out rows (their prompts and projected embeddings), and its
    manifest figures (thresholds, rows, flagged share on the calibration half)."""
    from data.prepare import hash_uniform

    prompts = list(prompts)
    first = hash_uniform(prompts, "novelty:") < 0.5
    if first.sum() < 10 or (~first).sum() < 10:
        raise ValueError(f"too few validation rows ({len(first)}) to fit the familiarity reference")
    chunks = _chunked_ids(extractor, prompts)
    seen = np.zeros(extractor.tokenizer.full.get_vocab_size(), dtype=np.float64)
    for found in _per_chunk(chunks, first, lambda a, b, ids, mask: np.unique(ids[mask])):
        seen[found.astype(np.int64)] = 1.0
    reference = Novelty(embeddings[first].mean(axis=0), embeddings[first].std(axis=0), seen,
                        embedding_threshold=1.0, unseen_threshold=1.0)
    rest = ~first

    def rows_of(a, b):
        return embeddings[a:b][rest[a:b]]

    parts = _per_chunk(chunks, rest, lambda a, b, ids, mask: reference.components(rows_of(a, b), ids, mask))
    distance, unseen = (np.concatenate([p[i] for p in parts]) for i in (0, 1))
    reference.embedding_threshold = float(np.quantile(distance, 1 - share / 2))
    reference.unseen_threshold = float(max(np.quantile(unseen, 1 - share / 2), min_unseen_share))
    flagged = float((np.concatenate(_per_chunk(chunks, rest, lambda a, b, ids, mask: reference.scores(
        rows_of(a, b), ids, mask))) > 1).mean())
    return reference, {"embedding_threshold": reference.embedding_threshold,
                       "unseen_threshold": reference.unseen_threshold, "target_share": share,
                       "fitted_rows": int(first.sum()), "calibration_rows": int((~first).sum()),
                       "flagged_share_calibration": flagged}


def scores(reference: Novelty, extractor, prompts, embeddings: np.ndarray) -> np.ndarray:
    """Novelty of each prompt, as the SDK computes it (in chunks of CHUNK_ROWS prompts)."""
    prompts = list(prompts)
    out = [reference.scores(embeddings[a: a + CHUNK_ROWS], *token_ids(extractor, prompts[a: a + CHUNK_ROWS]))
           for a in range(0, len(prompts), CHUNK_ROWS)]
    return np.concatenate(out) if out else np.zeros(0)
