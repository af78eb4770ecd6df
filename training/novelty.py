"""Fit the familiarity reference (serving.novelty) on held-out in-distribution prompts.

The validation rows are split in two by prompt hash: the first half gives the embedding's
mean and spread and the set of tokens seen; on the second half, each measure's threshold is
the quantile that flags half of `share`, so that about `share` of in-distribution prompts
are unfamiliar. The unseen-token threshold never drops below `min_unseen_share`: a prompt
is not unfamiliar for one rare word.

Both measures read what featurizing computed: the projected embeddings (the feature
matrix's last columns) and the token ids (training.featurize.TokenRows). An engine that
did not keep the ids (the transformer tier) gets them from `token_rows`, as the SDK
tokenizes.
"""
from __future__ import annotations

import numpy as np

from serving.novelty import Novelty
from training.featurize import TokenRows

CHUNK_ROWS = 4096  # prompts tokenized at a time: the padded ids of every held-out prompt at once took GBs
MIN_HALF_ROWS = 10  # validation rows in each half of the hash split, at least


def first_half(prompts) -> np.ndarray:
    """True for the validation prompts that give the reference, False for those that calibrate it."""
    from data.prepare import hash_uniform

    return hash_uniform(list(prompts), "novelty:") < 0.5


def too_few_rows(prompts) -> str | None:
    """Why these validation prompts cannot fit the reference (too few in a half), or None."""
    first = first_half(prompts)
    if first.sum() >= MIN_HALF_ROWS and (~first).sum() >= MIN_HALF_ROWS:
        return None
    return (f"{len(first)} validation rows with both outcomes ({int(first.sum())} and {int((~first).sum())} in the "
            f"two halves of the familiarity reference's hash split; at least {MIN_HALF_ROWS} in each half are needed)")


def token_rows(extractor, prompts) -> TokenRows:
    """The ids of `prompts` as the SDK's extractor tokenizes them, in chunks of CHUNK_ROWS."""
    prompts = list(prompts)
    parts = []
    for start in range(0, len(prompts), CHUNK_ROWS):
        chunk = prompts[start: start + CHUNK_ROWS]
        ids, mask, _ = extractor.token_ids(extractor.heads(chunk), chunk)
        parts.append(TokenRows.from_padded(ids, mask))
    return TokenRows.concat(parts)


def fit_novelty(prompts, tokens: TokenRows, embeddings: np.ndarray, *, vocabulary: int, share: float,
                min_unseen_share: float) -> tuple[Novelty, dict]:
    """The reference fitted on held-out rows (their prompts, token ids and projected
    embeddings), and its manifest figures (thresholds, rows, flagged share on the calibration half)."""
    from data.logs import DataQualityError
    from training.partial import BOTH_OUTCOMES_NEEDED

    short = too_few_rows(prompts)
    if short:
        raise DataQualityError(f"cannot fit the familiarity reference: {short}. {BOTH_OUTCOMES_NEEDED}")
    first = first_half(prompts)
    seen = np.zeros(vocabulary, dtype=np.float64)
    seen[np.unique(tokens.subset(first).ids).astype(np.int64)] = 1.0
    reference = Novelty(embeddings[first].mean(axis=0), embeddings[first].std(axis=0), seen,
                        embedding_threshold=1.0, unseen_threshold=1.0)
    rest = tokens.subset(~first)
    distance, unseen = reference.components_flat(embeddings[~first], rest.ids, rest.lengths)
    reference.embedding_threshold = float(np.quantile(distance, 1 - share / 2))
    reference.unseen_threshold = float(max(np.quantile(unseen, 1 - share / 2), min_unseen_share))
    flagged = float((reference.scores_flat(embeddings[~first], rest.ids, rest.lengths) > 1).mean())
    return reference, {"embedding_threshold": reference.embedding_threshold,
                       "unseen_threshold": reference.unseen_threshold, "target_share": share,
                       "fitted_rows": int(first.sum()), "calibration_rows": int((~first).sum()),
                       "flagged_share_calibration": flagged}
