"""Training rows logged without their text (`OutcomeLog(store_prompts=False)`).

Such a row carries what the logging bundle computed from the prompt (data.schema.TOKENS):
its token ids, its scalar inputs (token count, text statistics, declared precision) and what
identifies them (the tokenizer's SHA-256, the token limit, special tokens, the scalars'
names). This run uses a row when it would have computed the same inputs from the text: the
same tokenizer, limit and scalar names. The embedding is then computed from the ids exactly
as for any prompt (this run's encoder and projection). A row logged by a bundle with another
tokenizer or other scalars is left out and counted with the reason.

Without the text there is no prompt hash and nothing for the text-based figures (the rule
table, domains), so these rows always train: they are never validation or test rows, and
repeats among them are not merged (the local engine only; the Dask engine reports them as
`no_text`).
"""
from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np

from data.schema import TOKENS


def token_features(recipe, frame) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(features of the usable rows, columns = recipe.spec.feature_names; a boolean mask of
    the usable rows of `frame`; {reason: rows} for the others). `recipe`: the serving
    FeatureRecipe of this run (training.featurize.FeaturePlan.serving)."""
    from training.featurize import n_scalar_features

    spec = recipe.spec
    expected = {"tokenizer_sha256": hashlib.sha256(recipe.tokenizer_json).hexdigest(), "max_tokens": spec.max_tokens,
                "add_special_tokens": spec.add_special_tokens,
                "feature_names": list(spec.feature_names[:n_scalar_features(spec)])}
    skipped: Counter = Counter()
    usable = np.zeros(len(frame), dtype=bool)
    for i, logged in enumerate(frame[TOKENS]):
        differs = [name for name, value in expected.items() if logged[name] != value]
        if differs:
            skipped[f"logged by a bundle with another {' and '.join(differs)} than this run's"] += 1
        else:
            usable[i] = True
    rows = [logged for logged, ok in zip(frame[TOKENS], usable) if ok]
    if not rows:
        return np.zeros((0, len(spec.feature_names)), dtype=np.float32), usable, dict(skipped)
    scalars = np.array([r["scalars"] for r in rows], dtype=np.float32)
    return np.concatenate([scalars, embed_ids(recipe, [r["input_ids"] for r in rows])], axis=1), usable, dict(skipped)


def embed_ids(recipe, ids: list[list[int]]) -> np.ndarray:
    """The (projected) embedding of prompts given as token ids (at least one), as the recipe
    computes it from their text."""
    from training.featurize import TokenRows

    featurizer = recipe.featurizer()
    lengths = np.array([len(r) for r in ids], dtype=np.int32)
    if featurizer.table is not None:
        flat = np.concatenate([np.asarray(r, dtype=np.int32) for r in ids])
        return featurizer.embed(TokenRows(flat, lengths))
    extractor = featurizer.extractor  # any other encoder: its graph on the padded ids
    input_ids = np.zeros((len(ids), int(lengths.max())), np.int64)
    mask = np.zeros_like(input_ids)
    for i, row in enumerate(ids):
        input_ids[i, :len(row)], mask[i, :len(row)] = row, 1
    embedding = np.asarray(extractor.encoder(input_ids, mask, ()), dtype=np.float32)
    return embedding if extractor.projection is None else extractor.projection(embedding)
