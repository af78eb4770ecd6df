"""Training rows logged without their text (the outcome log's privacy modes "token_ids",
`store_prompts=False`, and "embedding"; docs/traffic.md#privacy-what-each-mode-keeps-on-disk).

Such a row carries what the logging bundle computed (data.schema.TOKENS): its scalar inputs and
its token ids or its encoder's pooled embedding, with what identifies them (tokenizer and
encoder SHA-256, token limit, special tokens, scalar names). A row is used when this run would
have computed the same inputs from the text (token ids: the embedding computed from them as for
any prompt; an embedding: this run's projection applied to it), else left out and counted with
the reason. Without text there is no prompt hash: these rows always train, are never validation
or test rows and are not merged (the local engine; the Dask engine reports them as `no_text`).
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
