"""From validated rows to a training table: merge duplicate prompts, split by prompt hash."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

QUALITY_AND_COSTS = ["edge_quality", "cloud_quality", "edge_latency_ms", "cloud_latency_ms", "edge_cost", "cloud_cost"]


def prompt_hash(prompt: str) -> str:
    """Stable content hash of a prompt (hex SHA-256 of its UTF-8 bytes)."""
    return hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()


TEXT_COLUMNS = ("request_id", "domain", "precision", "source")


def missing_text_as_none(frame: pd.DataFrame, columns=TEXT_COLUMNS) -> pd.DataFrame:
    """Optional text fields hold None when absent, never NaN (pandas >= 3 stores text as a
    string dtype whose missing value is NaN; the feature code expects None)."""
    for column in columns:
        if column in frame:
            frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


def _most_common(values: pd.Series):
    values = values.dropna()
    return values.mode().iloc[0] if len(values) else None


def merge_duplicates(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct prompt: outcomes averaged, labels by majority, `n_merged` counts rows.

    Only prompts that occur more than once go through the (slow, per-group) aggregation.
    Edge answers (data.schema.RESPONSE_COLUMNS) are dropped: an answer belongs to its own
    row's outcome, so the acceptance check learns from the rows as logged (response_rows).
    """
    from data.schema import RESPONSE_COLUMNS

    frame = frame.drop(columns=[c for c in RESPONSE_COLUMNS if c in frame])
    columns = list(frame.columns) + ["n_merged"]
    repeated = frame["prompt"].duplicated(keep=False)
    single = frame[~repeated].assign(n_merged=1)
    if not repeated.any():
        return single[columns].reset_index(drop=True)
    grouped = frame[repeated].groupby("prompt", sort=False)
    merged = grouped[QUALITY_AND_COSTS].mean()  # of the observed values: a missing outcome stays missing
    if "weight_edge" in frame:
        _merge_weighted_outcomes(frame[repeated], merged)
    for column in ("domain", "precision"):
        merged[column] = grouped[column].agg(_most_common)
    for column in columns:  # request_id, source and the rest: the first row's
        if column not in merged and column not in ("prompt", "n_merged"):
            merged[column] = grouped[column].first()
    merged["n_merged"] = grouped.size()
    merged = merged.reset_index()[columns]
    # Keep the order of first appearance, so results do not depend on which prompts repeat.
    first_seen = frame.reset_index(drop=True).drop_duplicates("prompt")["prompt"]
    order = pd.Series(range(len(first_seen)), index=first_seen.to_numpy())
    out = missing_text_as_none(pd.concat([single[columns], merged], ignore_index=True))
    return out.iloc[order.loc[out["prompt"]].argsort(kind="stable")].reset_index(drop=True)


def response_rows(
    frame: pd.DataFrame, *, val_share: float, test_share: float, salt: str = "", offset: float = 0.0
) -> pd.DataFrame:
    """The logged rows that carry an edge answer, each with its own outcome (not merged), with
    the split of its prompt (assign_splits): what the acceptance check learns and is tested on."""
    from data.schema import RESPONSE_COLUMNS

    columns = ["request_id", "prompt", "precision", "source", "edge_quality", "cloud_quality", *RESPONSE_COLUMNS]
    rows = frame.loc[frame["edge_response"].notna(), columns].reset_index(drop=True)
    return rows.assign(
        split=assign_splits(rows["prompt"], val_share=val_share, test_share=test_share, salt=salt, offset=offset)
    )


def _merge_weighted_outcomes(rows: pd.DataFrame, merged: pd.DataFrame) -> None:
    """Per side, for a repeated prompt: the outcome is the mean of the observed ones weighted by
    their inverse-propensity weights (`weight_edge`, `weight_cloud`: 0 where not observed), and
    the weight the mean of the observed rows' weights: the prompt still counts once."""
    by_prompt = rows["prompt"]
    for side in ("edge", "cloud"):
        quality, weight = rows[f"{side}_quality"], rows[f"weight_{side}"]
        total = weight.groupby(by_prompt, sort=False).sum()
        weighted = (quality.fillna(0.0) * weight).groupby(by_prompt, sort=False).sum()
        merged[f"{side}_quality"] = (weighted / total).where(total > 0)
        merged[f"weight_{side}"] = weight.where(weight > 0).groupby(by_prompt, sort=False).mean().fillna(0.0)


def hash_uniform(prompts, salt: str = "") -> np.ndarray:
    """A number in [0, 1) per prompt from the hash of salt + prompt: the same prompt gets the
    same number on any machine, in any order or partitioning (splits and samples use it)."""
    return np.array([int(prompt_hash(salt + p)[:12], 16) / 16**12 for p in prompts])


def assign_splits(
    prompts: pd.Series, *, val_share: float, test_share: float, salt: str = "", offset: float = 0.0
) -> np.ndarray:
    """'train' / 'val' / 'test' per prompt from its hash: the same prompt always lands together.
    The prompts whose hash number, shifted down by `offset` (mod 1), falls below `test_share`
    are the test split, the next `val_share` the validation split: with test_share = 1/K,
    the offsets 0, 1/K, ... 1 - 1/K give K disjoint test folds that cover every prompt
    (training.crossval)."""
    if not (0 <= val_share < 1 and 0 <= test_share < 1 and val_share + test_share < 1):
        raise ValueError(f"bad split shares: val={val_share!r}, test={test_share!r}")
    if not 0 <= offset < 1:
        raise ValueError(f"bad split offset: {offset!r} (must be in [0, 1))")
    u = hash_uniform(prompts, salt)
    if offset:
        u = (u - offset) % 1.0
    return np.where(u < test_share, "test", np.where(u < test_share + val_share, "val", "train"))


def content_sum64(frame: pd.DataFrame) -> int:
    """An order-free content hash of log rows: the sum, modulo 2**64, of each row's hash of
    (prompt, edge quality, cloud quality). Partial sums of any partitioning add up to it."""
    total = 0
    for prompt, edge, cloud in zip(frame["prompt"], frame["edge_quality"], frame["cloud_quality"]):
        row = hashlib.sha256(f"{prompt_hash(prompt)}:{edge:.6f}:{cloud:.6f}".encode()).digest()
        total = (total + int.from_bytes(row[:8], "big")) % 2**64
    return total


def rows_per_source(frame: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in frame["source"].value_counts().sort_index().items()}


def fingerprint(valid: pd.DataFrame, merged: pd.DataFrame) -> dict:
    """What ties a model to its data: prompts after merging, rows per source, and the content
    hash of the valid rows as read (before merging; both engines compute the same)."""
    return {
        "rows": int(len(merged)),
        "rows_per_source": rows_per_source(merged),
        "content_sum64": str(content_sum64(valid)),
    }
