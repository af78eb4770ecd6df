"""Training from traffic where each request ran on one model: rows with one outcome
(docs/traffic.md#training-from-the-log, where the estimators and head sharing are measured).

Each outcome head learns from the rows where its own outcome is known. `partial_estimator`:
`plug_in` (the default) fits those rows unweighted, `ipw` weighs a one-outcome row by 1 /
propensity clipped at `max_ipw_weight`; both assume the logging router chose from what the
features see and gave every kind of prompt a chance on both sides (`explore_rate` > 0). With
`head_sharing: auto` the heads share one booster when the training rows knowing one outcome
outnumber those knowing both (share_heads). Thresholds and the split figures need both outcomes
of a request; logs without enough such rows stop training with BOTH_OUTCOMES_NEEDED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

SIDES = {"edge_quality": "weight_edge", "cloud_quality": "weight_cloud"}
WEIGHT_COLUMNS = tuple(SIDES.values())
COUNTED = ("both_outcomes", "edge_only", "cloud_only", "weights_clipped")  # partial_report's counts


# What to do when the validation or test rows with both outcomes are too few (training.engines.base).
BOTH_OUTCOMES_NEEDED = (
    "Rows that know one outcome (feedback for the side that ran) train the outcome heads, but only rows that "
    "know both can set the thresholds and measure a router: add logs with both outcomes (--data with a "
    "benchmark log such as data/raw/routellm, or an outcome log with shadow runs, Router.load(..., "
    "shadow_rate=...), whose answers make label grades)"
)

ESTIMATORS = ("plug_in", "ipw")
HEAD_SHARING = ("auto", "separate", "shared")


def share_heads(option: str, *, heads: int, both: int, one: int) -> bool:
    """Whether the outcome heads share one booster (module doc): `option` is `head_sharing`,
    `heads` how many the objective has, `both` / `one` how many training rows know both
    outcomes / one."""
    if option not in HEAD_SHARING:
        raise ValueError(f"unknown head_sharing {option!r}; choose one of {', '.join(HEAD_SHARING)}")
    if option == "shared" and heads < 2:
        raise ValueError("head_sharing=shared needs an objective with two or more heads (expected_gain)")
    return option == "shared" or (option == "auto" and heads > 1 and one > both)


def with_outcome_weights(frame: pd.DataFrame, *, estimator: str = "plug_in", max_weight: float = 20.0) -> pd.DataFrame:
    """The rows with `weight_edge` and `weight_cloud`: 0 where that outcome is unknown, else 1,
    or with `ipw` and one outcome known, min(1 / propensity, max_weight)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown partial_estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")
    edge_known, cloud_known = frame["edge_quality"].notna(), frame["cloud_quality"].notna()
    both = edge_known & cloud_known
    inverse = 1.0
    if estimator == "ipw" and "propensity" in frame:
        inverse = (1.0 / frame["propensity"].astype(float)).clip(upper=max_weight)
    one = np.where(both, 1.0, inverse)
    return frame.assign(
        weight_edge=np.where(edge_known, one, 0.0).astype(float),
        weight_cloud=np.where(cloud_known, one, 0.0).astype(float),
    )


def sides_known(*known) -> dict:
    """{"both": rows every head learns from, "one": rows that teach one head only}, from each
    head's known-rows mask (numpy or pandas: numbers; Dask: lazy sums); share_heads' counts."""
    if len(known) < 2:
        return {"both": 0, "one": 0}
    count = sum(k.astype(int) for k in known)
    return {"both": (count == len(known)).sum(), "one": (count == 1).sum()}


def head_rows(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows whose `column` is known, their weights) for the head that learns `column`; the
    cloud-needed label needs both outcomes."""
    known = known_rows(frame, column).to_numpy()
    if column in SIDES and SIDES[column] in frame:
        return known, frame[SIDES[column]].to_numpy(float)
    return known, np.ones(len(frame))


def known_rows(frame, column: str):
    """Which rows teach the head that learns `column` (a boolean Series; a pandas or a Dask frame)."""
    if column in SIDES:
        known = frame[column].notnull()  # notnull: Dask's Series has no notna
        return known & (frame[SIDES[column]] > 0) if SIDES[column] in frame else known
    return frame["edge_quality"].notnull() & frame["cloud_quality"].notnull()


def both_known(frame: pd.DataFrame) -> np.ndarray:
    return (frame["edge_quality"].notna() & frame["cloud_quality"].notna()).to_numpy()


def combined_report(counts, *, estimator: str = "plug_in", max_weight: float = 20.0) -> dict:
    """partial_report of a whole log from its parts' counts (one row per part, COUNTED columns; or
    one part's, a mapping of COUNTED)."""
    totals = {k: int(np.sum(counts[k])) for k in COUNTED if k in counts}
    clipped = totals.pop("weights_clipped", 0)
    return {
        **totals,
        "estimator": estimator,
        **({"max_ipw_weight": max_weight, "weights_clipped": clipped} if estimator == "ipw" else {}),
    }


def partial_report(frame: pd.DataFrame, *, estimator: str = "plug_in", max_weight: float = 20.0) -> dict:
    """How many rows of each kind training used, and (ipw) how many weights hit the clip."""
    edge, cloud = frame["edge_quality"].notna(), frame["cloud_quality"].notna()
    one_side = edge ^ cloud
    clipped = 0
    if "propensity" in frame and one_side.any():
        clipped = int((1.0 / frame.loc[one_side, "propensity"].astype(float) > max_weight).sum())
    counts = ((edge & cloud).sum(), (edge & ~cloud).sum(), (~edge & cloud).sum(), clipped)
    return combined_report(dict(zip(COUNTED, counts)), estimator=estimator, max_weight=max_weight)
