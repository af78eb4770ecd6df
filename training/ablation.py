"""The routing-score ablation behind the default objective (docs/routing-score.md,
`python -m pipelines.ablation`): the label (cloud needed vs expected gain) crossed with the
features (the router's own, plus the lexical margins as features or as the boosting start, or the
lexical model alone), each scored by test APGR and CPT(50%) over several hash splits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from training.featurize import TokenRows
from training.lexical import VOCABULARY, fold_numbers

VARIANTS = (
    "cloud needed, router features",
    "cloud needed, + lexical features",
    "expected gain, router features",
    "expected gain, + lexical features",
    "expected gain, lexical init_score",
    "expected gain, lexical model alone",
)


def lexical_margins(data: "Data", train: np.ndarray, *, c: float, folds: int = 5) -> dict[str, np.ndarray]:
    """{outcome: margins}: out of fold on the training rows (folds by prompt hash), the
    all-train model's elsewhere (training.lexical_stage.for_training, "mean" weighting)."""
    from training.config import TrainConfig
    from training.lexical_stage import for_training

    outcomes, every = np.c_[data.q_edge, data.q_cloud], np.ones(len(train), dtype=bool)
    fold = np.full(len(train), -1)
    fold[train] = fold_numbers(np.asarray(data.prompts, dtype=object)[train], folds)
    config = TrainConfig(lexical={"weighting": "mean", "c": c})
    _, margins = for_training(
        config, outcomes, np.ones_like(outcomes), data.tokens, every, train, every, fold, vocabulary=data.vocabulary
    )
    return {"q_edge": margins[:, 0].astype(np.float64), "q_cloud": margins[:, 1].astype(np.float64)}


@dataclass
class Data:
    features: np.ndarray
    tokens: TokenRows  # each prompt's token ids, the lexical regressions' terms
    q_edge: np.ndarray
    q_cloud: np.ndarray
    needed: np.ndarray
    prompts: list[str]
    vocabulary: int = VOCABULARY


def _lightgbm(x, y, objective: str, train, val, *, init=None, seed: int = 0) -> np.ndarray:
    """Probability of a LightGBM fitted on `train`, early-stopped on `val`, for every row."""
    import lightgbm as lgb

    from training.model import lgbm_params

    params = lgbm_params({}, seed=seed, objective=objective)
    start = (lambda rows: None) if init is None else (lambda rows: init[rows])
    fit_set = lgb.Dataset(x[train], y[train], init_score=start(train))
    val_set = lgb.Dataset(x[val], y[val], init_score=start(val), reference=fit_set)
    booster = lgb.train(params, fit_set, 2000, valid_sets=[val_set], callbacks=[lgb.early_stopping(100, verbose=False)])
    raw = booster.predict(x, raw_score=True, num_iteration=booster.best_iteration)
    return 1 / (1 + np.exp(-(raw + (0 if init is None else init))))


def variant_scores(data: Data, split: np.ndarray, *, c: float, seed: int = 0) -> dict[str, np.ndarray]:
    """The routing score of every variant, for every row, trained on this split."""
    train, val = split == "train", split == "val"
    margins = lexical_margins(data, train, c=c)
    with_lexical = np.c_[data.features, margins["q_edge"], margins["q_cloud"]]

    def gain(x, init=None):
        edge = _lightgbm(x, data.q_edge, "cross_entropy", train, val, init=None if init is None else init["q_edge"])
        cloud = _lightgbm(x, data.q_cloud, "cross_entropy", train, val, init=None if init is None else init["q_cloud"])
        return cloud - edge

    def sigmoid(m):
        return 1 / (1 + np.exp(-m))

    return dict(
        zip(
            VARIANTS,
            (
                _lightgbm(data.features, data.needed, "binary", train, val),
                _lightgbm(with_lexical, data.needed, "binary", train, val),
                gain(data.features),
                gain(with_lexical),
                gain(data.features, margins),
                sigmoid(margins["q_cloud"]) - sigmoid(margins["q_edge"]),
            ),
        )
    )


def ablation(data: Data, salts, *, c: float = 64.0, test_share: float = 0.15, val_share: float = 0.15) -> dict:
    """{variant: {"apgr": [per salt], "cpt50": [per salt]}} on each salt's test split."""
    import pandas as pd

    from data.prepare import assign_splits
    from evaluation.metrics import apgr, cpt, quality_curve

    out = {v: {"apgr": [], "cpt50": []} for v in VARIANTS}
    for salt in salts:
        split = assign_splits(pd.Series(data.prompts), val_share=val_share, test_share=test_share, salt=salt)
        test = split == "test"
        for variant, score in variant_scores(data, split, c=c).items():
            curve = quality_curve(score[test], data.q_edge[test], data.q_cloud[test])
            out[variant]["apgr"].append(apgr(curve))
            out[variant]["cpt50"].append(cpt(curve, 0.5))
    return out


def load(config) -> Data:
    """The logs and features `make train` would use (local engine, its default split for the PCA)."""
    from training.engines.local import prepare_frame
    from training.featurize import featurize

    frame = prepare_frame(config).frame
    prompts = frame["prompt"].tolist()
    train = (frame["split"] == "train").to_numpy()
    feats = featurize(config, prompts, frame["precision"].tolist(), train, keep_tokens=np.ones(len(prompts), bool))
    return Data(
        feats.matrix,
        feats.tokens,
        frame["edge_quality"].to_numpy(float),
        frame["cloud_quality"].to_numpy(float),
        frame["label"].to_numpy(),
        prompts,
        feats.plan.serving.featurizer().extractor.tokenizer.full.get_vocab_size(),
    )
