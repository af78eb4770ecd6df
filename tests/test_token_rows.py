"""Rows logged without their text (store_prompts=False): the schema checks what they carry, and
training uses them only when it would compute the same inputs from the text."""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from data.schema import RowError, check_row


@pytest.fixture(scope="module")
def recipe(encoder_cache):
    from training.featurize import raw_stage

    return raw_stage("static", embedding_dim=32, max_tokens=None, max_chars=2048, cache_dir=encoder_cache)[1]


def logged_inputs(recipe, prompt: str, precision=None) -> dict:
    """What serving.routing.model_inputs logs for `prompt`, computed with `recipe`."""
    from training.featurize import n_scalar_features

    scalars, tokens = recipe.featurizer().prepare([prompt], [precision])
    return {"tokenizer_sha256": hashlib.sha256(recipe.tokenizer_json).hexdigest(), "max_tokens": recipe.spec.max_tokens,
            "add_special_tokens": recipe.spec.add_special_tokens, "input_ids": tokens.ids.astype(int).tolist(),
            "scalars": scalars[0].tolist(), "feature_names": list(recipe.spec.feature_names[:n_scalar_features(recipe.spec)])}


def test_features_from_logged_ids_equal_features_from_the_text_and_other_bundles_rows_are_left_out(recipe):
    from training.token_rows import token_features

    prompts = ["What is 2 + 2?", "Summarise the causes of the French Revolution in three sentences."]
    rows = [logged_inputs(recipe, p, precision) for p, precision in zip(prompts, [None, "exact"])]
    other_tokenizer = {**rows[0], "tokenizer_sha256": "0" * 64}
    other_scalars = {**rows[1], "feature_names": [f"x{i}" for i in range(len(rows[1]["feature_names"]))]}
    matrix, usable, skipped = token_features(recipe, pd.DataFrame({"prompt_tokens": [rows[0], other_tokenizer,
                                                                                      rows[1], other_scalars]}))
    assert usable.tolist() == [True, False, True, False]
    assert np.array_equal(matrix, recipe.transform(prompts, [None, "exact"]))  # bit for bit
    assert skipped == {"logged by a bundle with another tokenizer_sha256 than this run's": 1,
                       "logged by a bundle with another feature_names than this run's": 1}


@pytest.mark.parametrize("change, message", [
    ({"input_ids": []}, "input_ids must be a non-empty list"),
    ({"input_ids": [101, -3]}, "input_ids must be a non-empty list"),
    ({"max_tokens": 1}, "more than its max_tokens 1"),
    ({"scalars": [1.0]}, "must name each of the 1 scalars"),
    ({"scalars": None}, "prompt_tokens.scalars is missing or not list"),
    ({"tokenizer_sha256": 7}, "prompt_tokens.tokenizer_sha256 is missing or not str"),
])
def test_a_malformed_token_row_is_rejected_naming_the_field(change, message):
    tokens = {"tokenizer_sha256": "ab" * 32, "max_tokens": 256, "add_special_tokens": True, "input_ids": [101, 102],
              "scalars": [2.0, 0.5], "feature_names": ["n_tokens", "digits"]}
    row = {"prompt_tokens": {**tokens, **change}, "edge_quality": 1.0, "cloud_quality": 1.0}
    with pytest.raises(RowError, match=message.replace("(", r"\(")):
        check_row(row, default_source="t")
    checked = check_row({**row, "prompt_tokens": tokens}, default_source="t")
    assert checked["prompt"] is None and checked["prompt_tokens"] == tokens
