"""The prompt-hash sample that bounds what a training fits (the boosters' `max_train_rows`, the lexical
regressions' `lexical_sample_rows`): the same prompts in either engine, in any order or partitioning,
and a smaller sample inside a larger one. Below the engines and the stages that draw it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from training.config import TrainConfig

SAMPLE_SALT = "sample:"  # the sampling hash must not be the split hash


def sample_numbers(prompts, config: TrainConfig) -> np.ndarray:
    """Each prompt's sampling number in [0, 1): its hash, salted apart from the split's. A
    sample of about n of `rows` rows keeps the numbers below sample_fraction(n, rows): the
    same prompts in either engine, in any order or partitioning, and a smaller sample inside
    a larger one."""
    from data.prepare import hash_uniform

    return hash_uniform(prompts, SAMPLE_SALT + config.split.salt)


def sample_fraction(cap: int | None, expected_rows: float) -> float:
    """The share of `expected_rows` that keeps about `cap` of them (None: all)."""
    return 1.0 if cap is None else min(1.0, cap / max(expected_rows, 1.0))


def training_share(config: TrainConfig) -> float:
    return 1.0 - config.split.val_share - config.split.test_share
