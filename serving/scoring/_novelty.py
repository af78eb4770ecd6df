"""How unlike its training data a prompt is: the router's answer is an extrapolation there.

Two measures, each divided by its threshold, and the novelty is the larger:
- the embedding's distance from the fitted prompts: the mean squared z-score of the
  projected embedding's components (mean and spread fitted on in-distribution prompts);
- the share of the prompt's tokens that never occurred in those prompts (other scripts,
  unknown tokens, vocabulary of another domain).
A prompt is unfamiliar when its novelty exceeds 1. The thresholds are chosen at training
time so that a configured share of held-out in-distribution prompts is flagged. Both
measures use what routing computes anyway (token ids, the embedding): a few microseconds."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

# What the router does with an unfamiliar prompt.
UNFAMILIAR_POLICIES = ("edge_with_cloud_fallback", "rule_table", "learned")
CHUNK_ROWS = 16_384  # rows scored at a time by components_flat


class Novelty:
    """The fitted reference: embedding mean and spread, the tokens seen, the two thresholds."""

    def __init__(
        self, mean: ArrayLike, scale: ArrayLike, seen: ArrayLike, *, embedding_threshold: float, unseen_threshold: float
    ) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)
        self.inverse_scale = 1.0 / np.maximum(np.asarray(scale, dtype=np.float64), 1e-12)
        self.seen = np.asarray(seen, dtype=np.float64)
        self.embedding_threshold, self.unseen_threshold = float(embedding_threshold), float(unseen_threshold)

    def components_flat(
        self, embeddings: ArrayLike, ids: ArrayLike, lengths: ArrayLike, chunk_rows: int = CHUNK_ROWS
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(embedding distance, unseen-token share) per row, from the rows' unpadded ids one after another
        (`lengths` ids each). Rows go `chunk_rows` at a time (the per-token temporaries of 200,000 prompts
        at once took ~0.8 GB); each row's figures are the same whatever the chunk."""
        embeddings, ids = np.asarray(embeddings), np.asarray(ids)
        lengths = np.asarray(lengths, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        distance, unseen = np.empty(len(lengths)), np.empty(len(lengths))
        for start in range(0, len(lengths), chunk_rows):
            stop = min(start + chunk_rows, len(lengths))
            z = (np.asarray(embeddings[start:stop], dtype=np.float64) - self.mean) * self.inverse_scale
            distance[start:stop] = (z * z).mean(axis=1)
            n = lengths[start:stop]
            chunk_ids = np.minimum(ids[offsets[start] : offsets[stop]].astype(np.int64), len(self.seen) - 1)
            seen = np.bincount(np.repeat(np.arange(len(n)), n), weights=self.seen[chunk_ids], minlength=len(n))
            unseen[start:stop] = np.where(n > 0, 1.0 - seen / np.maximum(n, 1), 0.0)
        return distance, unseen

    def scores(self, embeddings: ArrayLike, ids: ArrayLike, mask: ArrayLike) -> NDArray[np.float64]:
        """Novelty per row; ids and mask padded [rows, tokens]."""
        mask = np.asarray(mask, dtype=bool)
        return self.scores_flat(embeddings, np.asarray(ids)[mask], mask.sum(axis=1))

    def scores_flat(self, embeddings: ArrayLike, ids: ArrayLike, lengths: ArrayLike) -> NDArray[np.float64]:
        distance, unseen = self.components_flat(embeddings, ids, lengths)
        return np.maximum(distance / self.embedding_threshold, unseen / self.unseen_threshold)

    def score_one(self, embedding: NDArray[np.floating[Any]], ids: NDArray[np.integer[Any]]) -> float:
        """`scores` for one prompt's embedding row and unpadded ids, in the fewest numpy calls; squares summed as
        `mean(axis=1)` sums a row (pairwise), not by `dot` (BLAS, another order): bit for bit as in a batch."""
        z = (embedding - self.mean) * self.inverse_scale
        unseen = 1.0 - float(self.seen[np.minimum(ids, len(self.seen) - 1)].sum()) / len(ids) if len(ids) else 0.0
        return max(float((z * z).sum()) / len(z) / self.embedding_threshold, unseen / self.unseen_threshold)

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, mean=self.mean, scale=1.0 / self.inverse_scale, seen=self.seen.astype(np.uint8))
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, content: bytes, *, embedding_threshold: float, unseen_threshold: float) -> "Novelty":
        with np.load(io.BytesIO(content), allow_pickle=False) as data:
            return cls(
                data["mean"],
                data["scale"],
                data["seen"],
                embedding_threshold=embedding_threshold,
                unseen_threshold=unseen_threshold,
            )
