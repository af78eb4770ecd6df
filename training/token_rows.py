"""Training rows logged without their text (serving.monitoring._outcome_log's privacy modes "token_ids",
`store_prompts=False`, and "embedding").

Such a row carries what the logging bundle computed from the prompt (data.schema.TOKENS): its
scalar inputs (token count, text statistics, declared precision) and either its token ids or
its encoder's pooled embedding before the projection, with what identifies them (the
tokenizer's SHA-256, the token limit, special tokens, the scalars' names, and for an embedding
the encoder's SHA-256). This run uses a row when it would have computed the same inputs from
the text:
- token ids: the same tokenizer, limit and scalar names; the embedding is then computed from
  the ids exactly as for any prompt (this run's encoder and projection);
- an embedding: the same encoder too (its graph, bit for bit: the static tier's token table,
  the transformer tier's weights); this run's projection is applied to it, so its features
  equal those of the text up to float32 rounding.
A row logged by a bundle with another tokenizer, encoder or other scalars is left out and
counted with the reason.

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


def token_features(plan, frame) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(features of the usable rows, columns = plan.spec.feature_names; a boolean mask of the
    usable rows of `frame`; {reason: rows} for the others). `plan`: this run's fitted
    training.featurize.FeaturePlan."""
    from training.featurize import n_scalar_features

    spec = plan.serving.spec
    inputs = {
        "tokenizer_sha256": hashlib.sha256(plan.serving.tokenizer_json).hexdigest(),
        "max_tokens": spec.max_tokens,
        "add_special_tokens": spec.add_special_tokens,
        "feature_names": list(spec.feature_names[: n_scalar_features(spec)]),
    }
    expected = {
        "input_ids": inputs,
        "embedding": {**inputs, "encoder_sha256": hashlib.sha256(plan.raw.encoder_onnx).hexdigest()},
    }
    skipped: Counter = Counter()
    usable = np.zeros(len(frame), dtype=bool)
    for i, logged in enumerate(frame[TOKENS]):
        differs = [name for name, value in expected[_kind(logged)].items() if logged[name] != value]
        if differs:
            skipped[f"logged by a bundle with another {' and '.join(differs)} than this run's"] += 1
        else:
            usable[i] = True
    matrix = np.zeros((len(frame), len(spec.feature_names)), dtype=np.float32)
    for kind, compute in (
        ("input_ids", lambda rows: embed_ids(plan.serving, rows)),
        ("embedding", lambda rows: plan.projection(np.array(rows, dtype=np.float32))),
    ):
        at = [i for i, logged in enumerate(frame[TOKENS]) if usable[i] and _kind(logged) == kind]
        if at:
            rows = [frame[TOKENS].iloc[i] for i in at]
            matrix[at] = np.concatenate(
                [np.array([r["scalars"] for r in rows], dtype=np.float32), compute([r[kind] for r in rows])], axis=1
            )
    return matrix[usable], usable, dict(skipped)


def _kind(logged: dict) -> str:
    """ "embedding" for a row logged with privacy="embedding", else "input_ids"."""
    return "embedding" if "embedding" in logged else "input_ids"


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
        input_ids[i, : len(row)], mask[i, : len(row)] = row, 1
    embedding = np.asarray(extractor.encoder(input_ids, mask, ()), dtype=np.float32)
    return embedding if extractor.projection is None else extractor.projection(embedding)
