"""The lexical stage of a training (`TrainConfig.lexical`): which training rows its regressions are
fitted on (a prompt-hash sample of at most `lexical_sample_rows`, the same prompts in either engine),
the fit, and the margins the boosters and the blend read, cross-fitted where the stage needs them.
The terms and the regressions themselves are training.lexical's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

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


def note_sample(console: Any, report: dict[str, Any], config: "TrainConfig", rows: int, sampled: int) -> None:
    """Record (report[SAMPLE_NOTE], the manifest's data block) and say how many training prompts
    (`sampled`) the regressions read when `lexical_sample_rows` cuts them among `rows` prepared rows."""
    fraction = sample_fraction_of(config, rows)
    if fraction >= 1.0:
        return
    report[SAMPLE_NOTE] = {"lexical_sample_rows": config.lexical.sample_rows, "fraction": fraction, "rows": sampled}
    console.print(
        f"[bold]lexical sample[/]: the regressions read {sampled} training prompts "
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


class LexicalRows(NamedTuple):
    """Which rows the lexical stage reads (training_rows, for_training)."""

    sample: np.ndarray  # the training rows the regressions are fitted on
    wanted: np.ndarray  # the rows whose margins something reads (NaN elsewhere)
    folds: np.ndarray | None  # each row's fold (-1 off the training rows), or None: no out-of-fold margins


def training_rows(config: "TrainConfig", prompts, train: np.ndarray, *, rows: int, refit: bool = False) -> LexicalRows:
    """The rows of `prompts` the regressions are fitted on: the training rows whose sampling number
    (training.sampling.sample_numbers, the boosters' sample's) falls below sample_fraction_of(`rows`,
    the prepared rows before any sampling). The folds (prompt hash; -1 off the training rows) when
    the trees read the margins ("features") or start from them (`lexical.start`), else None: a blend
    alone needs the shipped model only. The held-out rows' margins are always wanted (the blend is
    fitted and scored on them); the training rows' only when the trees read them or start from them
    (their out-of-fold margins) or cross-fitting's refit (`refit`) scores them in sample."""
    from training.sampling import sample_numbers

    prompts = np.asarray(prompts, dtype=object)
    train = np.asarray(train, dtype=bool)
    sample, fraction = train.copy(), sample_fraction_of(config, rows)
    if fraction < 1.0:
        sample[train] = sample_numbers(prompts[train], config) < fraction
    if config.lexical.mode == "blend" and not config.lexical.start:
        return LexicalRows(sample, np.ones(len(prompts), dtype=bool) if refit else ~train, None)
    folds = np.full(len(prompts), -1)
    folds[train] = fold_numbers(prompts[train], config.lexical.folds, config.split.salt)
    return LexicalRows(sample, np.ones(len(prompts), dtype=bool), folds)


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
    """The lexical stage of the local engine, of N endpoints and of the ablation: (the model fitted
    on the `sample` rows, float32 margins [rows, outcomes], NaN where `wanted` is false) of rows
    with `outcomes` and `weights` [rows, outcomes] (outcome_arrays: two-endpoint rows'), whose
    token ids (`tokens`, training.featurize.TokenRows) were kept for the rows where `kept` is true
    (the `sample` and `wanted` rows among them). `folds`: each row's fold (-1: not a training row),
    or None. With folds, a training row's margins are out of fold: from the model fitted on the
    sample rows of the other folds (module doc); every other wanted row gets the shipped model's.
    Only the sample's terms exist at once; the margins are computed CHUNK_ROWS prompts at a time."""
    kept = np.asarray(kept, dtype=bool)
    if ((sample | wanted) & ~kept).any():
        raise ValueError("the lexical stage needs the token ids of its sample and of every row it gives margins")

    def fit(rows: np.ndarray) -> LexicalModel:
        return fit_sample(config, tokens.subset(rows[kept]), outcomes[rows], weights[rows], vocabulary=vocabulary)

    def put(part: LexicalModel, rows: np.ndarray) -> None:
        out[rows] = part.margins_of_tokens(tokens.subset(rows[kept]))

    model = fit(sample)
    out = np.full((len(kept), len(model.bias)), np.nan, dtype=np.float32)
    put(model, wanted if folds is None else wanted & (folds < 0))
    for fold in () if folds is None else np.unique(folds[kept & (folds >= 0)]):
        put(fit(sample & (folds != fold)), wanted & (folds == fold))
    return model, out
