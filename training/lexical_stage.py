"""The lexical stage of a training (`TrainConfig.lexical`): which training rows its regressions are
fitted on (a prompt-hash sample of at most `lexical_sample_rows`, the same prompts in either engine),
the fit, and the margins the boosters and the blend read, cross-fitted where the stage needs them.
The terms and the regressions themselves are training.lexical's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from training.lexical import OUTCOMES, LexicalModel, Terms, fold_numbers

if TYPE_CHECKING:
    import pandas as pd

    from training.config import TrainConfig
    from training.featurize import TokenRows

SAMPLE_NOTE = "lexical_sample"  # the data report's record of the regression's training sample


def outcome_arrays(frame: "pd.DataFrame") -> tuple[np.ndarray, np.ndarray]:
    """(outcomes [rows, OUTCOMES] with NaN where unknown, weights [rows, OUTCOMES]: each
    outcome's training.partial weight where it is known, else 0) of prepared rows."""
    from training.partial import head_rows

    outcomes = np.stack([frame[c].to_numpy(float) for c in OUTCOMES], axis=1)
    weights = np.stack(
        [np.where(known, weight, 0.0) for known, weight in (head_rows(frame, c) for c in OUTCOMES)], axis=1
    )
    return outcomes, weights


def sample_fraction_of(config: "TrainConfig", rows: int) -> float:
    """The share of the training prompts the regressions are fitted on (module doc, "At
    scale"): about `lexical_sample_rows` of the training rows expected among `rows` prepared
    rows, the same expectation the boosters' max_train_rows sample is drawn with in either
    engine (training.sampling.sample_fraction); 1.0 when they are fewer."""
    from training.sampling import sample_fraction, training_share

    return sample_fraction(config.lexical.sample_rows, rows * training_share(config))


def note_sample(console: Any, report: dict[str, Any], config: "TrainConfig", fraction: float, rows: int) -> None:
    """Record (report[SAMPLE_NOTE], the manifest's data block) and say how many training prompts
    the regressions read when `lexical_sample_rows` cuts them (`fraction` < 1)."""
    if fraction >= 1.0:
        return
    report[SAMPLE_NOTE] = {"lexical_sample_rows": config.lexical.sample_rows, "fraction": fraction, "rows": rows}
    console.print(
        f"[bold]lexical sample[/]: the regressions read {rows} training prompts "
        f"(lexical.sample_rows={config.lexical.sample_rows}, chosen by prompt hash)"
    )


def fit_sample(
    config: "TrainConfig", tokens: "TokenRows", outcomes: np.ndarray, weights: np.ndarray, *, vocabulary: int
) -> "LexicalModel":
    """The regressions the bundle ships, fitted on the sample's token ids (TokenRows, one per
    row of `outcomes` and `weights`): what both engines call, the Dask engine on the sample it
    collects from its workers."""
    terms = Terms.of_tokens(tokens, vocabulary)  # a chunk's temporaries at a time
    c, weighting = config.lexical.c, config.lexical.weighting
    assert c is not None and weighting is not None  # TrainConfig fills them in
    return LexicalModel.fit(terms, outcomes, weights, c=c, weighting=weighting)


def fitted_margins(
    config: "TrainConfig",
    tokens: "TokenRows",
    outcomes: np.ndarray,
    weights: np.ndarray,
    sample: np.ndarray,
    wanted: np.ndarray,
    folds: np.ndarray | None,
    *,
    vocabulary: int,
) -> tuple["LexicalModel", np.ndarray]:
    """(the model fitted on the `sample` rows, float32 margins [rows, outcomes]) from each
    row's token ids (`tokens`, TokenRows, one per row of `outcomes`), NaN where `wanted` is
    false. `folds`: each row's fold (-1: not a training row), or None. With folds, a training
    row's margins are out of fold: from the model fitted on the sample rows of the other folds
    (module doc); every other wanted row gets the shipped model's. Only the sample's terms
    exist at once; the margins are computed CHUNK_ROWS prompts at a time. With every training
    row in the sample, this is cross_fitted's result bit for bit."""
    model = fit_sample(config, tokens.subset(sample), outcomes[sample], weights[sample], vocabulary=vocabulary)
    margins = np.full((len(tokens), len(model.bias)), np.nan, dtype=np.float32)
    shipped = wanted if folds is None else wanted & (folds < 0)
    margins[shipped] = model.margins_of_tokens(tokens.subset(shipped))
    for fold in () if folds is None else np.unique(folds[folds >= 0]):
        rows = sample & (folds != fold)
        part = fit_sample(config, tokens.subset(rows), outcomes[rows], weights[rows], vocabulary=vocabulary)
        held = wanted & (folds == fold)
        margins[held] = part.margins_of_tokens(tokens.subset(held))
    return model, margins


def training_rows(
    config: "TrainConfig", prompts, train: np.ndarray, *, rows: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """(the rows of `prompts` the regressions are fitted on, each row's fold or None): the training
    rows whose sampling number (training.sampling.sample_numbers, the boosters' sample's) falls
    below sample_fraction_of(`rows`, the prepared rows before any sampling). The folds (prompt
    hash; -1 off the training rows) when the trees read the margins ("features") or start from
    them (`lexical.start`), else None: a blend alone needs the shipped model only."""
    from training.sampling import sample_numbers

    prompts = np.asarray(prompts, dtype=object)
    train = np.asarray(train, dtype=bool)
    sample, fraction = train.copy(), sample_fraction_of(config, rows)
    if fraction < 1.0:
        sample[train] = sample_numbers(prompts[train], config) < fraction
    if config.lexical.mode == "blend" and not config.lexical.start:
        return sample, None
    folds = np.full(len(prompts), -1)
    folds[train] = fold_numbers(prompts[train], config.lexical.folds, config.split.salt)
    return sample, folds


def for_training(
    config: "TrainConfig",
    outcomes: np.ndarray,
    weights: np.ndarray,
    tokens: "TokenRows",
    kept: np.ndarray,
    sample: np.ndarray,
    wanted: np.ndarray,
    folds: np.ndarray | None,
    *,
    vocabulary: int,
) -> tuple[LexicalModel, np.ndarray]:
    """The lexical stage of the local engine and of N endpoints: fitted_margins on rows with
    `outcomes` and `weights` [rows, outcomes] (outcome_arrays: two-endpoint rows'), whose token
    ids (`tokens`, training.featurize.TokenRows) were kept for the rows where `kept` is true (the
    `sample` and `wanted` rows among them); margins [rows, outcomes], NaN where not wanted."""
    kept = np.asarray(kept, dtype=bool)
    if (sample & ~kept).any() or (wanted & ~kept).any():
        raise ValueError("the lexical stage needs the token ids of its sample and of every row it gives margins")
    model, margins = fitted_margins(
        config,
        tokens,
        outcomes[kept],
        weights[kept],
        sample[kept],
        wanted[kept],
        None if folds is None else folds[kept],
        vocabulary=vocabulary,
    )
    out = np.full((len(kept), len(model.bias)), np.nan, dtype=np.float32)
    out[kept] = margins
    return model, out
