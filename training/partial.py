"""Training from traffic where each request ran on one model: rows with one outcome.

Production logs (the SDK's outcome log, data.sdk_logs) know the outcome of the model that
answered, rarely of both. Each outcome head (training.model: P(edge good), P(cloud good))
learns from the rows where its own outcome is known, so a row with only the edge's outcome
trains the edge head and not the cloud head.

The rows a head sees are not a sample of the traffic: the logging router sent the prompts
it found easy to the edge, so the edge head sees mostly easy prompts. Two estimators
(`partial_estimator`):

- **plug_in** (the default): each head is fitted, unweighted, on the rows where its outcome
  is known. A head estimates P(good | prompt); the logging router chose the side from the
  prompt alone (and a logged coin when exploring), so among prompts alike, the rows where
  a side ran are a fair sample of that side's outcomes, and a flexible model learns the
  same conditional probability from them. Its assumptions: the choice depended on nothing
  the features do not see (true of the SDK's own logs: the decision is a function of the
  prompt and the exploration coin), and *positivity*: both sides have a non-zero
  probability for every kind of prompt, or there is nothing to learn the other side from
  there (`explore_rate` > 0 guarantees it).
- **ipw**: the same rows weighted by 1 / propensity of the known side, clipped at
  `max_ipw_weight` (20), so that each region of prompts counts as often as in the traffic.
  Same assumptions; it corrects a model that cannot fit every region, at the price of
  variance: an explored row weighs ~10 times a routine one.

Measured by `make replay` (bench/replay.json, docs/training.md): on the RouteLLM logs
replayed as one-outcome traffic, the plug-in estimator recovers more of the
both-outcomes router's APGR than inverse-propensity weighting, whose explored rows
dominate the loss; hence the default. The propensities are still what the off-policy
evaluation (evaluation.off_policy) needs.

The heads are fitted separately or as one shared booster (training.model, `head_sharing`):
with `auto`, shared when the training rows that know one outcome outnumber those that know
both (share_heads). A separate cloud head learns only from the prompts the logging router
sent to the cloud, mostly hard ones, plus the explored few; shared, it also learns from
every edge outcome what makes a prompt hard. Measured by `make replay` on three seeds
(docs/traffic.md): shared heads 0.690-0.696 test APGR against 0.659-0.685 separate; with
both outcomes of every prompt, separate heads win (0.709 against 0.697).

Thresholds and the split figures need both outcomes of a request, so they use the rows that
have both; training reports how many rows of each kind it used (`partial` in the metrics).
Logs without enough of them stop training with BOTH_OUTCOMES_NEEDED (training.engines.base).
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


def combined_report(counts: pd.DataFrame, *, estimator: str = "plug_in", max_weight: float = 20.0) -> dict:
    """partial_report of a whole log from its parts' counts (one row per part, COUNTED columns)."""
    totals = {k: int(counts[k].sum()) for k in COUNTED if k in counts}
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
    return {
        "both_outcomes": int((edge & cloud).sum()),
        "edge_only": int((edge & ~cloud).sum()),
        "cloud_only": int((~edge & cloud).sum()),
        "estimator": estimator,
        **({"max_ipw_weight": max_weight, "weights_clipped": clipped} if estimator == "ipw" else {}),
    }
