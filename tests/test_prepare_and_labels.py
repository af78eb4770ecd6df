"""Duplicate merging, hash splits, fingerprints, and the cloud-needed label."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from data.prepare import assign_splits, content_sum64, fingerprint, merge_duplicates
from data.schema import COLUMNS
from training.labels import cloud_needed


def frame(rows):
    return pd.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows])


def test_duplicate_prompts_are_merged_and_outcomes_averaged():
    merged = merge_duplicates(
        frame(
            [
                {
                    "request_id": "a",
                    "prompt": "same",
                    "edge_quality": 1.0,
                    "cloud_quality": 1.0,
                    "domain": "legal",
                    "source": "x",
                },
                {
                    "request_id": "b",
                    "prompt": "same",
                    "edge_quality": 0.0,
                    "cloud_quality": 1.0,
                    "domain": "legal",
                    "source": "y",
                },
                {"request_id": "c", "prompt": "other", "edge_quality": 0.0, "cloud_quality": 0.0, "source": "x"},
            ]
        )
    )
    assert len(merged) == 2
    same = merged.set_index("prompt").loc["same"]
    assert (same.edge_quality, same.cloud_quality, same.n_merged, same.request_id) == (0.5, 1.0, 2, "a")
    assert same.domain == "legal"


def test_merged_duplicates_without_precision_keep_none_not_nan():
    # Found at 1e5 simulated rows: a merged prompt with no declared precision came back as
    # NaN (pandas >= 3 string columns) and crashed the feature extractor.
    rows = [
        {
            "prompt": p,
            "edge_quality": 1.0,
            "cloud_quality": 1.0,
            "source": "x",
            "domain": "math",
            "precision": "exact" if p == "declared" else None,
        }
        for p in ("declared", "same", "same", "declared")
    ]
    merged = merge_duplicates(frame(rows)).set_index("prompt")
    assert merged.loc["same", "precision"] is None
    assert merged.loc["declared", "precision"] == "exact"


def test_splits_follow_the_prompt_hash():
    prompts = pd.Series([f"prompt {i}" for i in range(5000)])
    splits = assign_splits(prompts, val_share=0.15, test_share=0.15)
    shares = pd.Series(splits).value_counts(normalize=True)
    assert abs(shares["train"] - 0.70) < 0.03 and abs(shares["test"] - 0.15) < 0.03
    again = assign_splits(prompts[::-1].reset_index(drop=True), val_share=0.15, test_share=0.15)
    assert list(again[::-1]) == list(splits)  # depends on the text only, not the order
    assert list(assign_splits(prompts, val_share=0.15, test_share=0.15, salt="s")) != list(splits)
    with pytest.raises(ValueError, match="bad split shares"):
        assign_splits(prompts, val_share=0.6, test_share=0.5)


def test_fingerprint_counts_sources_and_changes_with_content():
    rows = [
        {"prompt": "p", "edge_quality": 1.0, "cloud_quality": 0.0, "source": "a"},
        {"prompt": "q", "edge_quality": 0.0, "cloud_quality": 1.0, "source": "b"},
    ]
    fp = fingerprint(frame(rows), frame(rows))
    assert fp["rows_per_source"] == {"a": 1, "b": 1} and fp["rows"] == 2
    # Order-free, and additive over any partitioning (the Dask engine sums partitions).
    assert fingerprint(frame(rows[::-1]), frame(rows))["content_sum64"] == fp["content_sum64"]
    assert (content_sum64(frame(rows[:1])) + content_sum64(frame(rows[1:]))) % 2**64 == int(fp["content_sum64"])
    rows[0]["cloud_quality"] = 1.0
    assert fingerprint(frame(rows), frame(rows))["content_sum64"] != fp["content_sum64"]


def test_label_binary_rows():
    edge = np.array([1, 1, 0, 0])
    cloud = np.array([1, 0, 1, 0])
    assert cloud_needed(edge, cloud).tolist() == [0, 0, 1, 0]  # only "cloud right, edge wrong"


def test_label_graded_rows_use_the_margin():
    edge = np.array([0.50, 0.50, 0.50])
    cloud = np.array([0.55, 0.65, 0.40])
    assert cloud_needed(edge, cloud, margin_graded=0.1).tolist() == [0, 1, 0]
    assert cloud_needed(edge, cloud, margin_graded=0.0).tolist() == [1, 1, 0]
