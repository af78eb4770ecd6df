"""Rows logged without their text (privacy "token_ids" and "embedding"): the schema checks what
they carry, and training uses them only when it would compute the same inputs from the text."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from data.schema import RowError, check_row

PROMPTS = ["What is 2 + 2?", "Summarise the causes of the French Revolution in three sentences."]


@pytest.fixture(scope="module")
def plan(encoder_cache):
    """A fitted static-tier feature plan (its PCA on a few prompts), as a training run has one."""
    from training.featurize import fit_projection, n_scalar_features, plan_from, raw_stage

    built, raw = raw_stage("static", embedding_dim=8, max_tokens=None, max_chars=2048, cache_dir=encoder_cache)
    prompts = [f"Question {i}: how do {i} apples and {i * 3} pears compare in weight?" for i in range(40)]
    raw_features = raw.transform(prompts, [None] * len(prompts))
    return plan_from(built, raw, fit_projection(raw_features[:, n_scalar_features(raw.spec) :], 8, seed=0))


def logged_inputs(recipe, prompt: str, precision=None) -> dict:
    """What serving.routing._stages.model_inputs logs for `prompt` with privacy="token_ids", computed with `recipe`."""
    from training.featurize import n_scalar_features

    scalars, tokens = recipe.featurizer().prepare([prompt], [precision])
    return {
        "tokenizer_sha256": hashlib.sha256(recipe.tokenizer_json).hexdigest(),
        "max_tokens": recipe.spec.max_tokens,
        "add_special_tokens": recipe.spec.add_special_tokens,
        "input_ids": tokens.ids.astype(int).tolist(),
        "scalars": scalars[0].tolist(),
        "feature_names": list(recipe.spec.feature_names[: n_scalar_features(recipe.spec)]),
    }


def logged_embedding(plan, prompt: str, precision=None) -> dict:
    """What serving.routing._stages.model_inputs logs with privacy="embedding": the bundle's encoder.onnx
    (the raw static graph) run by the SDK on the prompt's ids."""
    from serving.features._extractor import OnnxEncoder

    tokens = logged_inputs(plan.serving, prompt, precision)
    ids = np.array([tokens.pop("input_ids")], dtype=np.int64)
    embedding = OnnxEncoder(plan.built.onnx_bytes)(ids, np.ones_like(ids))[0]
    return {
        **tokens,
        "encoder_sha256": hashlib.sha256(plan.built.onnx_bytes).hexdigest(),
        "embedding": embedding.tolist(),
    }


def test_features_from_logged_ids_equal_features_from_the_text_and_other_bundles_rows_are_left_out(plan):
    from training.token_rows import token_features

    rows = [logged_inputs(plan.serving, p, precision) for p, precision in zip(PROMPTS, [None, "exact"])]
    other_tokenizer = {**rows[0], "tokenizer_sha256": "0" * 64}
    other_scalars = {**rows[1], "feature_names": [f"x{i}" for i in range(len(rows[1]["feature_names"]))]}
    matrix, usable, skipped = token_features(
        plan, pd.DataFrame({"prompt_tokens": [rows[0], other_tokenizer, rows[1], other_scalars]})
    )
    assert usable.tolist() == [True, False, True, False]
    assert np.array_equal(matrix, plan.serving.transform(PROMPTS, [None, "exact"]))  # bit for bit
    assert skipped == {
        "logged by a bundle with another tokenizer_sha256 than this run's": 1,
        "logged by a bundle with another feature_names than this run's": 1,
    }


def test_features_from_a_logged_embedding_are_the_texts_and_another_encoders_are_left_out(plan):
    """privacy="embedding": this run's projection applied to the logged pooled embedding gives the
    features of the text (to float32 rounding: the bundle folds the projection into its table);
    rows of another encoder are counted, not used; id rows and embedding rows mix in order."""
    from training.token_rows import token_features

    embedded = [logged_embedding(plan, p, precision) for p, precision in zip(PROMPTS, [None, "exact"])]
    other_encoder = {**embedded[0], "encoder_sha256": "1" * 64}
    ids = logged_inputs(plan.serving, PROMPTS[1], "exact")
    matrix, usable, skipped = token_features(
        plan, pd.DataFrame({"prompt_tokens": [embedded[0], other_encoder, ids, embedded[1]]})
    )
    assert usable.tolist() == [True, False, True, True]
    expected = plan.serving.transform([PROMPTS[0], PROMPTS[1], PROMPTS[1]], [None, "exact", "exact"])
    assert np.abs(matrix - expected).max() < 1e-5 and np.array_equal(matrix[1], expected[1])
    assert skipped == {"logged by a bundle with another encoder_sha256 than this run's": 1}
    assert len(embedded[0]["embedding"]) == 384 and "input_ids" not in embedded[0]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"input_ids": []}, "input_ids must be a non-empty list"),
        ({"input_ids": [101, -3]}, "input_ids must be a non-empty list"),
        ({"max_tokens": 1}, "more than its max_tokens 1"),
        ({"scalars": [1.0]}, "must name each of the 1 scalars"),
        ({"scalars": None}, "prompt_tokens.scalars is missing or not list"),
        ({"tokenizer_sha256": 7}, "prompt_tokens.tokenizer_sha256 is missing or not str"),
    ],
)
def test_a_malformed_token_row_is_rejected_naming_the_field(change, message):
    tokens = {
        "tokenizer_sha256": "ab" * 32,
        "max_tokens": 256,
        "add_special_tokens": True,
        "input_ids": [101, 102],
        "scalars": [2.0, 0.5],
        "feature_names": ["n_tokens", "digits"],
    }
    row = {"prompt_tokens": {**tokens, **change}, "edge_quality": 1.0, "cloud_quality": 1.0}
    with pytest.raises(RowError, match=message.replace("(", r"\(")):
        check_row(row, default_source="t")
    checked = check_row({**row, "prompt_tokens": tokens}, default_source="t")
    assert checked["prompt"] is None and checked["prompt_tokens"] == tokens


@pytest.mark.parametrize(
    "change, message",
    [
        ({"embedding": []}, "embedding must be a non-empty list of finite numbers"),
        ({"embedding": [0.1, float("nan")]}, "embedding must be a non-empty list of finite numbers"),
        ({"encoder_sha256": None}, "prompt_tokens.encoder_sha256 is missing or not str"),
        ({"input_ids": [101]}, "holds both input_ids and an embedding"),
    ],
)
def test_a_malformed_embedding_row_is_rejected_naming_the_field(change, message):
    tokens = {
        "tokenizer_sha256": "ab" * 32,
        "max_tokens": 256,
        "add_special_tokens": True,
        "encoder_sha256": "cd" * 32,
        "embedding": [0.25, -0.5, 0.125],
        "scalars": [2.0, 0.5],
        "feature_names": ["n_tokens", "digits"],
    }
    row = {"prompt_tokens": {**tokens, **change}, "edge_quality": 1.0, "cloud_quality": 1.0}
    with pytest.raises(RowError, match=message):
        check_row(row, default_source="t")
    assert check_row({**row, "prompt_tokens": tokens}, default_source="t")["prompt_tokens"] == tokens
