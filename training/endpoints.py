"""One calibrated outcome model per endpoint (N endpoints; docs/training.md#n-endpoints-one-outcome-model-per-endpoint):
P(endpoint answers well | prompt) from the router's own features (training.featurize) and, with
the lexical blend, each endpoint's lexical margin (training.lexical_stage), fitted and calibrated
by the two-endpoint code (training.model.fit_heads) with `endpoints.lgbm` over `boosting.lgbm`.

Two head modes, compared by paired cross-validation on the same prompt-hash folds: `separate` (a
booster per endpoint, on the rows where its outcome is known) and `shared` (one booster over every
endpoint's rows, reading the endpoint's index as SIDE_FEATURE). One-outcome rows (`routed_to`,
`propensity`) weigh 1 / propensity, normalised to mean 1 per endpoint. Fold k tests on the k-th
slice of the prompts' salted hash numbers, validates on the next `val_share` and trains on the
rest; the projection is refit on each fold's training rows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from training.config import TrainConfig

HEAD_MODES = ("separate", "shared")


class EndpointDataError(ValueError):
    """Logs or options the N-endpoint models cannot be fitted or evaluated on; the message says why."""


@dataclass
class EndpointRows:
    """Prompts with each endpoint's observed quality (NaN where unknown) and its fitting weight
    (0 where unknown), columns in `names` order; `cost` the logged price of each call (NaN where
    not logged)."""

    names: tuple[str, ...]
    prompts: np.ndarray
    precisions: list
    quality: np.ndarray  # [rows, endpoints]
    weight: np.ndarray  # [rows, endpoints]
    cost: np.ndarray  # [rows, endpoints]
    request_ids: np.ndarray
    # one-outcome rows: the endpoint index that ran (-1 for rows with every outcome, or none named)
    # and the probability with which the logging policy chose it (NaN where not logged)
    routed: np.ndarray | None = None
    propensity: np.ndarray | None = None
    # each endpoint's logged answer (object [rows, endpoints], None where not logged), or None: no answers
    responses: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.prompts)

    @classmethod
    def from_frame(cls, frame, names) -> "EndpointRows":
        """From data.endpoint_logs.read_endpoint_logs' frame."""
        names = tuple(names)
        quality = np.stack([frame[f"q_{n}"].to_numpy(float) for n in names], axis=1)
        cost = np.stack([frame[f"cost_{n}"].to_numpy(float) for n in names], axis=1)
        known = np.isfinite(quality)
        propensity = frame["propensity"].to_numpy(float) if "propensity" in frame else np.full(len(frame), np.nan)
        partial = ~known.all(axis=1)
        row_weight = np.where(partial & np.isfinite(propensity), 1.0 / np.where(partial, propensity, 1.0), 1.0)
        weight = np.where(known, row_weight[:, None], 0.0)
        for k in range(len(names)):  # mean 1 over each endpoint's known rows
            if known[:, k].any():
                weight[:, k] /= weight[known[:, k], k].mean()
        precisions = [p if isinstance(p, str) else None for p in frame["precision"]]
        ids = frame["request_id"].to_numpy(object) if "request_id" in frame else np.arange(len(frame)).astype(object)
        routed_to = frame["routed_to"] if "routed_to" in frame else [None] * len(frame)
        routed = np.array([names.index(r) if partial[i] and r in names else -1 for i, r in enumerate(routed_to)])
        responses = None
        if all(f"response_{n}" in frame for n in names):
            responses = np.stack(
                [[t if isinstance(t, str) else None for t in frame[f"response_{n}"]] for n in names], axis=1
            ).astype(object)
            responses = responses if any(t is not None for t in responses.ravel()) else None
        prompts = frame["prompt"].to_numpy(object)
        return cls(names, prompts, precisions, quality, weight, cost, ids, routed, propensity, responses)

    def subset(self, rows: np.ndarray) -> "EndpointRows":
        rows = np.asarray(rows)
        index = np.flatnonzero(rows) if rows.dtype == bool else rows
        columns = (getattr(self, f.name) for f in fields(self)[1:])  # every field but the names
        return EndpointRows(
            self.names,
            *(c if c is None else [c[i] for i in index] if isinstance(c, list) else c[index] for c in columns),
        )


def fold_masks(prompts, *, folds: int, fold: int, val_share: float, salt: str = "") -> dict[str, np.ndarray]:
    """Boolean train / val / test masks of fold `fold` of `folds` (module doc)."""
    from data.prepare import assign_splits

    if not 0 <= fold < folds:
        raise ValueError(f"fold {fold} is not one of 0..{folds - 1}")
    if not 0.0 < val_share < 0.5:
        raise ValueError(f"config split.val_share={val_share!r}: the N-endpoint folds need it in (0, 0.5)")
    split = assign_splits(prompts, val_share=val_share, test_share=1.0 / folds, salt=salt, offset=fold / folds)
    return {name: split == name for name in ("train", "val", "test")}


def served(rows: EndpointRows, train: np.ndarray, config: TrainConfig):
    """(the feature plan, the features, the rows as the heads read them): featurized, and with the
    lexical blend (`lexical.mode`, resolved as for two endpoints) each endpoint's lexical margin
    appended, from the regressions fitted on the training rows by the two-endpoint code
    (training.lexical_stage, one outcome per endpoint); NaN on the training rows, which the trees
    never read."""
    from training.featurize import featurize
    from training.lexical_stage import for_training, training_rows

    mode = config.lexical.mode
    if mode not in ("none", "blend") or config.lexical.start:
        raise EndpointDataError(
            f"config lexical.mode={mode!r}, lexical.start={config.lexical.start}: N-endpoint models take the "
            "lexical blend (lexical.mode=blend, without lexical.start) or none"
        )
    train = np.asarray(train, bool)
    if mode == "none":
        feats = featurize(config, rows.prompts, rows.precisions, train)
        return feats.plan, feats.matrix, feats.matrix
    lexical = training_rows(config, rows.prompts, train, rows=len(rows))
    kept = lexical.sample | lexical.wanted
    feats = featurize(config, rows.prompts, rows.precisions, train, keep_tokens=kept)
    vocabulary = feats.plan.serving.featurizer().extractor.tokenizer.full.get_vocab_size()
    model, margins = for_training(
        config, rows.quality, rows.weight, feats.tokens, kept, *lexical, vocabulary=vocabulary
    )
    return feats.plan.with_lexical(model, mode), feats.matrix, np.concatenate([feats.matrix, margins], axis=1)


@dataclass
class OutcomeModels:
    """Each endpoint's calibrated P(good answer): training.model.Head per endpoint, in order, named
    endpoint0, endpoint1, ... (the graph's tensors): its own booster (separate) or the one shared
    booster read with the endpoint's side, its calibration and, with the lexical blend, its blend."""

    names: tuple[str, ...]
    mode: str
    heads: list

    @property
    def trees(self) -> list[int]:
        return [h.booster.num_trees() for h in self.heads[: 1 if self.mode == "shared" else None]]

    def predict(self, x) -> np.ndarray:
        """[rows, endpoints] calibrated (and blended) probabilities of rows as `served` gives them."""
        return np.stack([head.predict(x) for head in self.heads], 1)


def _known(rows: EndpointRows, k: int) -> np.ndarray:
    return np.isfinite(rows.quality[:, k]) & (rows.weight[:, k] > 0)


def fit_outcome_models(
    x_train, train: EndpointRows, x_val, val: EndpointRows, *, mode: str, config: TrainConfig
) -> OutcomeModels:
    """Fit every endpoint's outcome model (`mode`: separate or shared, module doc) on the
    training rows, with early stopping, calibration and a lexical blend (when the rows end with
    the margins: `served`) on the validation rows: training.model.fit_heads, as two endpoints."""
    from training.model import boosting, fit_booster, fit_heads, stack_sides

    if mode not in HEAD_MODES:
        raise ValueError(f"unknown head mode {mode!r}; choose one of {', '.join(HEAD_MODES)}")
    names = train.names
    blend = config.lexical.mode == "blend"
    width = np.shape(x_train)[1] - len(names) * blend  # the trees' columns: a blend's margins follow them
    for k, name in enumerate(names):
        if _known(train, k).sum() < 20 or _known(val, k).sum() < 10:
            raise EndpointDataError(
                f"endpoint {name!r}: too few rows with its outcome to fit its model (< 20 train, < 10 val)"
            )

    def part(x, rows: EndpointRows, k: int):
        known = _known(rows, k)
        return np.asarray(x)[known, :width], rows.quality[known, k], rows.weight[known, k]

    def fit_booster_for(columns: tuple[str, ...], objective: str):
        (x_tr, y_tr, w_tr), (x_va, y_va, w_va) = (
            stack_sides([part(x, rows, names.index(c)) for c in columns])
            for x, rows in ((x_train, train), (x_val, val))
        )
        options = boosting(config, **config.endpoints.lgbm)
        return fit_booster(x_tr, y_tr, x_va, y_va, weight=w_tr, val_weight=w_va, objective=objective, **options)

    heads = fit_heads(
        {f"endpoint{k}": (name, "cross_entropy") for k, name in enumerate(names)},
        fit_booster_for,
        np.asarray(x_val),
        {name: val.quality[:, k] for k, name in enumerate(names)},
        config,
        weights_val={name: val.weight[:, k] for k, name in enumerate(names)},
        shared=mode == "shared",
        margins=tuple(f"lexical_{name}" for name in names),
    )
    return OutcomeModels(names, mode, heads)


def _known_cells(probability, quality, weight):
    """The flat (probability, quality, weight) of the cells whose outcome is known."""
    p, q, w = (np.asarray(a, float).ravel() for a in (probability, quality, weight))
    known = np.isfinite(q) & (w > 0)
    return p[known], q[known], w[known]


def log_loss(probability, quality, weight) -> float:
    """Weighted mean log loss over the known cells (quality in [0, 1]: fractional successes)."""
    p, q, w = _known_cells(np.clip(np.asarray(probability, float), 1e-9, 1 - 1e-9), quality, weight)
    return float(np.sum(w * -(q * np.log(p) + (1 - q) * np.log(1 - p))) / np.sum(w))


def brier(probability, quality, weight) -> float:
    """Weighted mean squared error of the probabilities over the known cells."""
    p, q, w = _known_cells(probability, quality, weight)
    return float(np.sum(w * (p - q) ** 2) / np.sum(w))


def calibration_gap(probability, quality, weight, bins: int = 10) -> float:
    """Expected calibration error: the weighted mean |mean predicted - mean observed| over
    probability deciles of the known cells."""
    p, q, w = _known_cells(probability, quality, weight)
    edges = np.quantile(p, np.linspace(0, 1, bins + 1))
    which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, bins - 1)
    gap = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            gap += w[inside].sum() * abs(
                np.average(p[inside], weights=w[inside]) - np.average(q[inside], weights=w[inside])
            )
    return float(gap / w.sum())


@dataclass
class FoldFit:
    """One fold: its rows' masks, and per head mode the models' predictions on its validation and
    test rows with their fit figures on the test rows."""

    fold: int
    masks: dict[str, np.ndarray]
    predictions: dict[str, dict[str, np.ndarray]]  # mode -> split (val, test) -> [rows, endpoints]
    figures: dict[str, dict[str, float]]  # mode -> log_loss, brier, calibration_gap
    trees: dict[str, list[int]]


def fit_fold(rows: EndpointRows, *, folds: int, fold: int, config: TrainConfig, modes=HEAD_MODES) -> FoldFit:
    """Featurize (projection on the fold's training rows) and fit every head mode on one fold."""
    masks = fold_masks(rows.prompts, folds=folds, fold=fold, val_share=config.split.val_share, salt=config.split.salt)
    _, _, x = served(rows, masks["train"], config)
    parts = {split: rows.subset(mask) for split, mask in masks.items()}
    predictions, figures, trees = {}, {}, {}
    for mode in modes:
        models = fit_outcome_models(
            x[masks["train"]], parts["train"], x[masks["val"]], parts["val"], mode=mode, config=config
        )
        predictions[mode] = {split: models.predict(x[masks[split]]) for split in ("val", "test")}
        test = (predictions[mode]["test"], parts["test"].quality, parts["test"].weight)
        figures[mode] = {f.__name__: f(*test) for f in (log_loss, brier, calibration_gap)}
        trees[mode] = models.trees
    return FoldFit(fold, masks, predictions, figures, trees)


def fold_correction(folds: int, val_share: float) -> float:
    """n_test / n_train of one fold, for the corrected interval: training.crossval's."""
    from training.config import TrainConfig
    from training.crossval import test_over_train

    return test_over_train(TrainConfig(split={"val_share": val_share}), folds)


CHOOSING_FIGURE = "area_vs_best_single"  # what picks the head mode: the choices' held-out curve area


def compare_modes(fits: list[FoldFit], per_mode: dict[str, list[dict]], *, folds: int, val_share: float) -> dict:
    """Each head mode's held-out figures over the folds (the fit's log loss, Brier score and
    calibration gap; the choosers' curve area, evaluation.endpoints) and the paired differences
    shared - separate, with the corrected resampled t interval (training.crossval.interval).
    `chosen`: the mode with the larger mean area (separate on a tie). Not the lower log loss: on
    simulated logs the shared booster predicted each endpoint's level as well or better and its
    choices among them were worse (docs/endpoints.md#one-outcome-model-per-endpoint)."""
    from training.crossval import interval

    correction = fold_correction(folds, val_share)
    modes = list(per_mode)
    figures = {
        m: [{**fit.figures[m], CHOOSING_FIGURE: fold[CHOOSING_FIGURE]} for fit, fold in zip(fits, per_mode[m])]
        for m in modes
    }
    names = list(figures[modes[0]][0])
    out: dict[str, Any] = {
        m: {f: interval([fold[f] for fold in figures[m]], test_over_train=correction) for f in names} for m in modes
    }
    if set(modes) == set(HEAD_MODES):
        out["shared - separate"] = {
            f: interval(
                [a[f] - b[f] for a, b in zip(figures["shared"], figures["separate"])], test_over_train=correction
            )
            for f in names
        }
    area = {m: out[m][CHOOSING_FIGURE]["mean"] for m in modes}
    out["chosen"] = max(modes, key=lambda m: (area[m] if np.isfinite(area[m]) else -np.inf, m == "separate"))
    out["chosen_by"] = f"the larger mean {CHOOSING_FIGURE}"
    return out


def estimates(per_fold: list[dict], names, *, folds: int, val_share: float) -> dict:
    """Mean and corrected 95% interval (training.crossval.interval) over the folds of every
    evaluation.endpoints.ESTIMATED figure and of each endpoint's quality and cost."""
    from evaluation.endpoints import ESTIMATED, figure_at
    from training.crossval import interval

    correction = fold_correction(folds, val_share)

    def over_folds(path) -> dict:
        return interval([figure_at(f, path) for f in per_fold], test_over_train=correction)

    return {
        **{" / ".join(path): over_folds(path) for path in ESTIMATED},
        **{f"single / {n} / {fig}": over_folds(("single", n, fig)) for n in names for fig in ("quality", "cost")},
    }


CHARS_PER_TOKEN = 4.2  # input tokens the chooser assumes per character (data.simulator's ratio)


def expected_costs(endpoints, prompts, output_tokens: float) -> tuple[np.ndarray, np.ndarray]:
    """([rows, endpoints] price each call is expected to cost, whether the prompt fits each
    endpoint's context), input tokens estimated from the prompt's characters."""
    from serving.endpoints._choice import call_costs

    return call_costs(
        list(endpoints), np.array([len(p) for p in prompts], dtype=float) / CHARS_PER_TOKEN, output_tokens
    )


def cross_validate_endpoints(
    rows: EndpointRows,
    endpoints,
    *,
    folds: int = 5,
    config: TrainConfig | None = None,
    choosers=None,
    output_tokens: float = 250.0,
    truth: np.ndarray | None = None,
    on_fold=None,
    modes: tuple[str, ...] = HEAD_MODES,
) -> dict:
    """Fit both head modes on every fold, compare them (compare_modes), and measure every
    evaluation.endpoints figure of each mode on each fold's test rows that hold every endpoint's
    outcome (prices set on its validation rows). `truth`: the simulator's hidden probabilities,
    [rows, endpoints], for the recovery figures; `modes`: the head modes fitted (both compare them).
    JSON-ready."""
    from evaluation.endpoints import Choosers, fold_figures
    from training.config import TrainConfig

    config = config or TrainConfig()
    if tuple(e.name for e in endpoints) != rows.names:
        raise EndpointDataError(
            f"the rows' endpoints {rows.names} are not the spec's {tuple(e.name for e in endpoints)}"
        )
    if not 3 <= folds <= 20:
        raise EndpointDataError(f"folds={folds!r}: must be an integer in [3, 20]")
    choosers = choosers or Choosers()
    expected_cost, feasible = expected_costs(endpoints, rows.prompts, output_tokens)
    cost = np.where(np.isfinite(rows.cost), rows.cost, expected_cost)
    complete = np.isfinite(rows.quality).all(axis=1)
    logged = (
        (rows.routed >= 0) & np.isfinite(rows.propensity)
        if rows.routed is not None and rows.propensity is not None
        else np.zeros(len(rows), bool)
    )
    if not complete.any():
        raise EndpointDataError(
            "no row holds every endpoint's outcome: the evaluation compares endpoints on the same prompts "
            "(one-outcome rows train the models but cannot score a choice among N offline)"
        )
    fits, per_mode = [], {m: [] for m in modes}
    for fold in range(folds):
        fit = fit_fold(rows, folds=folds, fold=fold, config=config, modes=modes)
        fits.append(fit)
        test = fit.masks["test"]
        one = test & logged  # the fold's one-outcome test rows: scored off-policy
        routed = rows.routed[one][:, None]
        columns = {"quality": rows.quality, "cost": cost, "expected_cost": expected_cost, "feasible": feasible}
        for mode in modes:
            part = {
                split: {
                    **{k: v[fit.masks[split] & complete] for k, v in columns.items()},
                    "expected": fit.predictions[mode][split][complete[fit.masks[split]]],
                    "truth": None if truth is None else truth[fit.masks[split] & complete],
                }
                for split in ("val", "test")
            }
            logged_part = {
                "expected": fit.predictions[mode]["test"][logged[test]],
                "expected_cost": expected_cost[one],
                "feasible": feasible[one],
                "routed": rows.routed[one],
                "propensity": rows.propensity[one],
                "quality": np.take_along_axis(rows.quality[one], routed, 1)[:, 0],
                "cost": np.take_along_axis(cost[one], routed, 1)[:, 0],
            }
            per_mode[mode].append(
                fold_figures(rows.names, val=part["val"], test=part["test"], choosers=choosers, logged=logged_part)
            )
        if on_fold is not None:
            on_fold(fit)
    comparison = compare_modes(fits, per_mode, folds=folds, val_share=config.split.val_share)
    chosen = comparison["chosen"]
    by_mode = {m: estimates(per_mode[m], rows.names, folds=folds, val_share=config.split.val_share) for m in modes}
    return {
        "endpoints": list(rows.names),
        "rows": int(len(rows)),
        "complete_rows": int(complete.sum()),
        "one_outcome_rows": int(logged.sum()),
        "folds": folds,
        "output_tokens": output_tokens,
        "choosers": dict(vars(choosers)),
        "head_modes": comparison,
        "chosen_mode": chosen,
        "estimates": by_mode[chosen],
        "estimates_by_mode": by_mode,
        "trees": {m: [f.trees[m] for f in fits] for m in modes},
        "per_fold": per_mode[chosen],
    }
