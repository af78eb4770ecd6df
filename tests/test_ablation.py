"""The routing-score ablation runs every variant on any logs (here: small synthetic data)."""

from __future__ import annotations

import numpy as np

from training.ablation import VARIANTS, Data, ablation
from training.featurize import TokenRows
from training.lexical import Terms


def test_lexical_rows_are_length_normalized_unigrams_and_hashed_bigrams():
    matrix = Terms.of_rows([[5, 6, 5], []]).normalized()
    row = matrix[0].toarray().ravel()
    assert row[5] == 2 / 5 and row[6] == 1 / 5  # 3 unigrams + 2 bigrams
    assert row.sum() == 1.0 and matrix[1].nnz == 0


def test_every_variant_is_scored_on_the_test_split():
    rng = np.random.default_rng(0)
    n = 900
    difficulty = rng.random(n)
    ids = [list(rng.integers(0, 50, size=8) + (100 if d > 0.6 else 0)) for d in difficulty]
    data = Data(
        features=np.c_[difficulty + rng.normal(scale=0.3, size=n), rng.random(n)].astype(np.float32),
        tokens=TokenRows.from_rows([np.asarray(r) for r in ids]),
        q_edge=(rng.random(n) > difficulty).astype(float),
        q_cloud=(rng.random(n) > difficulty / 3).astype(float),
        needed=None,
        prompts=[f"p{i}" for i in range(n)],
    )
    data.needed = ((data.q_cloud - data.q_edge) > 0).astype(int)
    results = ablation(data, [""], c=1.0)
    assert list(results) == list(VARIANTS)
    for figures in results.values():
        assert len(figures["apgr"]) == 1 and 0.0 < figures["apgr"][0] < 1.5
    assert results["expected gain, router features"]["apgr"][0] > 0.55  # the features carry the difficulty
