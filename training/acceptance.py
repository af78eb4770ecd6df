"""Fit the acceptance check (serving.scoring._acceptance) on logged answers
(docs/training.md#the-acceptance-check).

Rows: every logged answer (data.prepare.response_rows), each with its own outcome, good when it
reaches `acceptance.good_quality`; answers of test-split prompts are only measured. The
non-test answers are cut into `acceptance.folds` folds by prompt hash and each fold predicted by
a model trained on the others: those out-of-fold predictions fit the Platt calibration and the
threshold (the `false_reject_rate` quantile of the good answers' probabilities) and give the
cross-fitted figures; the shipped model is trained on every non-test answer, its calibration
folded into the trees. Without enough answers (`acceptance.min_rows`, MIN_OF_EACH of each kind)
no model is fitted and the manifest says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evaluation.acceptance import rejected_share_by_prompt, separation_by_source
from serving.features._response_features import RESPONSE_FEATURES
from serving.scoring._acceptance import answer_matrix
from serving.scoring._calibration import apply_calibration
from training.config import TrainConfig

ACCEPTANCE_FILE = "acceptance.onnx"
MIN_OF_EACH = 20
PARITY_ANSWERS = 500  # answers the bundle's acceptance check is compared on
ANSWER_COLUMNS = ("prompt", "edge_response", "edge_logprob_mean", "edge_logprob_min")  # what the check reads of one
# Small trees: a few hundred answers, ~70 features.
ACCEPTANCE_LGBM = {
    "num_leaves": 15,
    "min_child_samples": 20,
    "learning_rate": 0.03,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
}


@dataclass
class AcceptanceFit:
    """The fitted check (or why there is none) and its held-out verdicts."""

    section: dict  # the manifest's `acceptance` entry
    file: bytes | None = None  # acceptance.onnx
    held_out: dict = field(default_factory=dict)  # split -> (prompts, sources, good, probability): val = out-of-fold
    # (answer row positions, the shipped model's P(good)): what the bundle's parity check compares
    parity: tuple = (np.zeros(0, dtype=np.int64), np.zeros(0))

    @property
    def fitted(self) -> bool:
        return self.file is not None

    def rejected_share(self, split: str, prompts, sources=None) -> np.ndarray | None:
        """Per prompt of a split (with `sources`: its answers from that source, as an N-endpoint
        row's first endpoint): share of its answers rejected; NaN without one (None: no check)."""
        if split not in self.held_out:
            return None
        answered, by, _, probability = self.held_out[split]
        keys, wanted = (answered, prompts) if sources is None else (zip(answered, by), zip(prompts, sources))
        return rejected_share_by_prompt(list(keys), probability < self.section["threshold"], list(wanted))


def _absent(reason: str) -> AcceptanceFit:
    return AcceptanceFit({"file": None, "reason": reason})


def fit_acceptance(config: TrainConfig, rows, extractor) -> AcceptanceFit:
    """The check from response rows (data.prepare.response_rows; None or empty: no answers);
    `extractor` computes the router's features of a text (training.featurize)."""
    import lightgbm as lgb

    from data.prepare import hash_uniform
    from training.export import booster_to_onnx, calibration_in_model
    from training.model import fit_calibration, lgbm_params, threads_for

    if rows is None or len(rows) == 0:
        return _absent("the training logs carry no edge answers (edge_response)")
    good = rows["edge_quality"].to_numpy() >= config.acceptance.good_quality
    split = rows["split"].to_numpy()
    fit = split != "test"
    n_good, n_bad = int(good[fit].sum()), int((~good[fit]).sum())
    if fit.sum() < config.acceptance.min_rows or min(n_good, n_bad) < MIN_OF_EACH:
        return _absent(
            f"too few edge answers to learn from: {int(fit.sum())} outside the test split "
            f"({n_good} good, {n_bad} failed); needs {config.acceptance.min_rows}, "
            f"and {MIN_OF_EACH} of each"
        )
    x = answer_matrix(
        *(rows[c].tolist() for c in ANSWER_COLUMNS),
        answer_features=lambda texts: extractor.transform(texts, [None] * len(texts)),
        max_chars=config.acceptance.max_response_chars,
    )
    params = lgbm_params(
        {**ACCEPTANCE_LGBM, "num_threads": threads_for(len(x)), **config.acceptance.lgbm},
        seed=config.seed,
        objective="binary",
    )

    def booster(rows_mask):
        data = lgb.Dataset(x[rows_mask], label=good[rows_mask].astype(float))
        return lgb.train(params, data, num_boost_round=config.acceptance.rounds)

    k = config.acceptance.folds
    folds = np.minimum((hash_uniform(rows["prompt"], salt="acceptance-folds") * k).astype(int), k - 1)
    out_of_fold = np.zeros(len(rows))
    for fold in range(k):
        held = fit & (folds == fold)
        if held.any():
            out_of_fold[held] = booster(fit & ~held).predict(x[held])
    calibration = fit_calibration(out_of_fold[fit], good[fit], method="sigmoid")
    calibrated = apply_calibration(calibration, out_of_fold)
    threshold = float(np.quantile(calibrated[fit & good], config.acceptance.false_reject_rate))
    final = booster(fit)
    test = split == "test"
    p_test = apply_calibration(calibration, final.predict(x[test])) if test.any() else np.zeros(0)
    # The parity check compares the test answers, or (cross-fitting's refit has no test split)
    # the first fitted ones: the shipped model is checked either way.
    checked = np.flatnonzero(test if test.any() else fit)[:PARITY_ANSWERS]
    parity = (checked, apply_calibration(calibration, final.predict(x[checked])))
    sources = rows["source"].to_numpy(dtype=object)
    val = split == "val"
    held_out = {
        "val": (rows["prompt"].to_numpy(object)[val], sources[val], good[val], calibrated[val]),
        "test": (rows["prompt"].to_numpy(object)[test], sources[test], good[test], p_test),
    }
    section = {
        "file": ACCEPTANCE_FILE,
        "n_features": int(x.shape[1]),
        "features": [*RESPONSE_FEATURES, *(f"answer_{n}" for n in extractor.spec.feature_names)],
        "calibration": {**calibration, "in_model": calibration_in_model(calibration)},
        "threshold": threshold,
        "false_reject_rate_target": config.acceptance.false_reject_rate,
        "good_quality": config.acceptance.good_quality,
        "max_response_chars": config.acceptance.max_response_chars,
        "trained_on": {
            "answers": int(fit.sum()),
            "good": n_good,
            "failed": n_bad,
            "per_source": {str(s): int((fit & (sources == s)).sum()) for s in sorted(set(sources[fit]))},
        },
        # Held-out figures: every non-test answer out of fold, and the test split.
        "cross_fitted": separation_by_source(calibrated[fit], good[fit], sources[fit], threshold),
        **({"test": separation_by_source(p_test, good[test], sources[test], threshold)} if test.any() else {}),
    }
    return AcceptanceFit(section, booster_to_onnx(final, x.shape[1], calibration), held_out, parity)


def check_acceptance_parity(folder, fit: AcceptanceFit, rows, *, public_key=None, tolerance: float = 1e-5) -> float:
    """Largest |P(good) difference| between the bundle's acceptor (SDK, from raw text) and
    training on the answers `fit.parity` names; RuntimeError above `tolerance`."""
    from serving.bundle._bundle import read_bundle
    from serving.scoring._acceptance import Acceptor
    from serving.scoring._scorer import Scorer

    positions, expected = fit.parity
    if not fit.fitted or len(positions) == 0:
        return 0.0
    test = rows.iloc[positions]
    bundle = read_bundle(folder, public_key=public_key)
    acceptor = Acceptor.from_bundle(bundle, Scorer(bundle))
    sdk = acceptor.probabilities(*(test[c].tolist() for c in ANSWER_COLUMNS))
    gap = float(np.max(np.abs(sdk - expected)))
    if gap > tolerance:
        raise RuntimeError(
            f"the bundle's acceptance check differs from training by {gap:.2e} (> {tolerance}); "
            "the bundle was not written"
        )
    return gap
