"""`Fitted`: what a training engine hands back (training.engines), and everything after it
reads: the held-out stages (training.held_out), cross-validation (training.crossval) and the
shared finish (training.engines.base)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from evaluation.rows import Rows

if TYPE_CHECKING:
    import pandas as pd

    from training.featurize import FeaturePlan, TokenRows
    from training.model import Head


@dataclass
class Fitted:
    """What an engine hands back; everything after it is shared."""

    data_report: dict
    plan: FeaturePlan
    objective: str  # training.model.OBJECTIVES
    heads: list[Head]  # booster cut at its best round, calibration (and lexical blend)
    splits: dict[str, Rows]  # "val" / "test" rows with the training pipeline's scores
    embeddings: dict[
        str, np.ndarray
    ]  # "val" / "test": the rows' projected embeddings (the feature matrix's last columns)
    responses: pd.DataFrame | None = None  # rows with an edge answer, as logged (data.prepare.response_rows)
    tokens: dict[str, TokenRows] | None = None  # "val" / "test": the rows' token ids, if kept
    notes: dict = field(default_factory=dict)  # engine-specific figures, logged with the metrics
    # The training rows (unscored; outcomes NaN where unknown), or a hash sample of them: what
    # the reference policy and the tuned rule table are fitted on (training.crossval).
    train_rows: Rows | None = None
    # split -> head -> the booster's probability before calibration, for the rows of `splits`:
    # cross-fitting calibrates the refit on every row with the folds' (training.crossval).
    raw: dict | None = None
