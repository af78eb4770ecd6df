"""LightGBM heads of the router, fitted with early stopping on validation (in memory or on a
Dask cluster), then calibrated (docs/training.md#how-the-router-is-built).

A head predicts one probability: with `expected_gain` one per endpoint, P(edge good | prompt) and
P(cloud good | prompt) (cross-entropy on the observed quality), the routing score being
P(cloud good) - P(edge good); `cloud_needed` has one binary head. N endpoints are N heads
(training.endpoints). The outcome heads are separate boosters or one shared booster reading which
endpoint it predicts as its last feature (SIDE_FEATURE; training.partial.share_heads decides).
With the lexical blend (training.lexical), each head's calibrated probability p is combined with
its own outcome's lexical margin m on validation rows: a stack, sigmoid(a * logit(p) + b * m + c)
(`fit_stack`, the default), or a mixture, w * p + (1 - w) * sigmoid(m) (`fit_blend`); the bundle's
graph computes the same (training.export).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from serving.bundle._manifest import routing_score
from serving.features._spec import LEXICAL_NAMES
from serving.scoring._calibration import apply_calibration, logit

DEFAULT_LGBM = {
    "objective": "binary",
    "learning_rate": 0.03,
    "num_leaves": 31,
    "min_child_samples": 40,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "verbose": -1,
    "num_threads": 2,
    # With `deterministic`, the same rows give the same trees on every run and machine; LightGBM
    # otherwise picks row- or column-wise histograms by timing them, which can change the trees.
    "force_col_wise": True,
}
CALIBRATIONS = ("sigmoid", "isotonic", "none")
# objective -> its heads, each with the column it learns and LightGBM's objective for it
OBJECTIVES = {
    "expected_gain": {"edge": ("edge_quality", "cross_entropy"), "cloud": ("cloud_quality", "cross_entropy")},
    "cloud_needed": {"cloud_needed": ("label", "binary")},
}
SIDE_FEATURE = "outcome_side"  # a shared head's last input: which endpoint's outcome (0, 1, ...)
_METRICS = {"binary": "binary_logloss", "cross_entropy": "cross_entropy"}


@dataclass(frozen=True)
class LexicalBlend:
    """A head's mixture with lexical evidence: tree_weight * (calibrated trees) + (1 -
    tree_weight) * sigmoid(margin), the margin of lexical outcome `outcome` (an index into
    training.lexical.OUTCOMES, the head's own column). A blend's rows end with the margins,
    in that order (the served matrix of a blend: features, then LEXICAL_NAMES)."""

    outcome: int
    tree_weight: float | None  # None: a stack
    stack: tuple[float, float, float] | None = None  # (a, b, c): sigmoid(a * logit(trees) + b * margin + c)
    names: tuple[str, ...] = LEXICAL_NAMES  # the margins' columns, last in the rows (N endpoints: one each)

    def margin(self, x) -> np.ndarray:
        x = np.asarray(x)
        return np.asarray(x[:, x.shape[1] - len(self.names) + self.outcome], dtype=np.float64)

    def apply(self, trees: np.ndarray, x) -> np.ndarray:
        from scipy.special import expit

        if self.stack is not None:
            a, b, c = self.stack
            return expit(a * stack_logit(trees) + b * self.margin(x) + c)
        assert self.tree_weight is not None
        return self.tree_weight * np.asarray(trees, dtype=np.float64) + (1 - self.tree_weight) * expit(self.margin(x))

    def as_dict(self) -> dict:
        """What the manifest says about it (calibration.<head>.lexical_blend)."""
        form = {"tree_weight": self.tree_weight} if self.stack is None else dict(zip(("a", "b", "c"), self.stack))
        return {"form": "mixture" if self.stack is None else "stack", **form, "margin": self.names[self.outcome]}


# A stack reads logit(trees) with the trees' probability clipped to these float32 bounds (the
# graph's Clip), so a probability the float32 trees round to 0 or 1 stays finite.
STACK_CLIP = (float(np.float32(1e-6)), float(np.float32(1 - 1e-6)))


def stack_logit(trees) -> np.ndarray:
    """logit of the trees' probability clipped to STACK_CLIP."""
    p = np.clip(np.asarray(trees, dtype=np.float64), *STACK_CLIP)
    return np.log(p) - np.log1p(-p)


@dataclass
class Head:
    """One fitted probability: its booster (cut at the best round) and its calibration; with
    a shared booster, `side` is the SIDE_FEATURE value that makes it this head; with `blend`,
    the calibrated trees mixed with lexical evidence (module doc)."""

    name: str
    booster: object
    calibration: dict
    side: int | None = None
    blend: LexicalBlend | None = None

    def raw(self, x) -> np.ndarray:
        """The booster's probability before calibration. `x` may hold more columns than the
        booster reads (the lexical margins a blend mixes in, last): it reads its first ones."""
        x = np.asarray(x)
        x = x[:, : self.booster.num_feature() - (self.side is not None)]
        return self.booster.predict(x if self.side is None else with_side(x, self.side))

    def predict(self, x, raw: np.ndarray | None = None) -> np.ndarray:
        """The calibrated probability, blended when the head has a blend (the SDK must reproduce it).
        `raw`: this head's `raw(x)`, when the caller has it (the trees are not run again)."""
        calibrated = apply_calibration(self.calibration, self.raw(x) if raw is None else raw)
        return calibrated if self.blend is None else self.blend.apply(calibrated, x)


def with_side(x, side: int) -> np.ndarray:
    """`x` with the SIDE_FEATURE column appended, all `side`."""
    x = np.asarray(x)
    return np.concatenate([x, np.full((len(x), 1), side, dtype=x.dtype)], axis=1)


def stack_sides(parts) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One booster's rows from each of its heads' (x, y, weight or None), in side order: one head's
    as they are; a shared head's x with SIDE_FEATURE appended, y, and the weights (None when no
    side has any)."""
    if len(parts) == 1:
        return parts[0]
    x = np.concatenate([with_side(xs, side) for side, (xs, _, _) in enumerate(parts)])
    y = np.concatenate([np.asarray(ys, dtype=np.float64) for _, ys, _ in parts])
    weights = None
    if any(w is not None for _, _, w in parts):
        weights = np.concatenate(
            [np.ones(len(ys)) if w is None else np.asarray(w, dtype=np.float64) for _, ys, w in parts]
        )
    return x, y, weights


# The learning rate for large logs (learning_rate_for): DEFAULT_LGBM's up to the first row
# count, LARGE_LOG_LEARNING_RATE from the second, log-linear in the rows between.
LARGE_LOG_ROWS = (100_000, 500_000)
LARGE_LOG_LEARNING_RATE = 0.1
# Below this many rows a booster is fitted on one thread (threads_for): with OpenMP threads waiting
# passively, one thread is faster there (docs/performance.md#training-at-scale), and the trees are
# the same on any number of threads (column-wise histograms and `deterministic`).
ONE_THREAD_BELOW_ROWS = 100_000


def threads_for(rows: int) -> int:
    """LightGBM's threads for a fit on `rows` rows when the user sets none (ONE_THREAD_BELOW_ROWS)."""
    return 1 if rows < ONE_THREAD_BELOW_ROWS else int(DEFAULT_LGBM["num_threads"])


def learning_rate_for(rows: int) -> float:
    """The learning rate of a booster fitted on `rows` rows when the user sets none: at 0.03 a
    large log keeps several thousand trees, at 0.1 a few hundred for 0.003 less test APGR
    (docs/scale-out.md); small logs keep 0.03 and the trees they had."""
    low, high = LARGE_LOG_ROWS
    small, large = DEFAULT_LGBM["learning_rate"], LARGE_LOG_LEARNING_RATE
    share = np.clip(np.log(max(rows, 1) / low) / np.log(high / low), 0.0, 1.0)
    return float(small * (large / small) ** share)


def lgbm_params(overrides: dict, *, seed: int, objective: str = "binary", rows: int | None = None) -> dict:
    """DEFAULT_LGBM (with the learning rate and threads for `rows` training rows, when given), the
    user's options on top, then what every fit needs: the objective, the seed, deterministic tree
    building and the log-loss that early stopping watches."""
    scaled = {} if rows is None else {"learning_rate": learning_rate_for(rows), "num_threads": threads_for(rows)}
    return {
        **DEFAULT_LGBM,
        **scaled,
        **overrides,
        "objective": objective,
        "seed": seed,
        "deterministic": True,
        "metric": _METRICS[objective],
    }


def boosting(config, **lgbm) -> dict:
    """fit_booster's (and fit_booster_dask's) options from a TrainConfig: its LightGBM parameters
    (`lgbm` over them), rounds and seed."""
    rounds = dict(num_boost_round=config.boosting.rounds, early_stopping_rounds=config.boosting.early_stopping_rounds)
    return dict(params={**config.boosting.lgbm, **lgbm}, seed=config.seed, **rounds)


def fit_booster(
    x_train,
    y_train,
    x_val,
    y_val,
    *,
    params: dict,
    num_boost_round: int = 2000,
    early_stopping_rounds: int = 100,
    seed: int = 0,
    feature_names=None,
    objective: str = "binary",
    weight=None,
    val_weight=None,
    rounds: int | None = None,
    init_score=None,
    val_init_score=None,
):
    """Train until validation log-loss stops improving; returns the booster at its best round.
    `weight`, `val_weight`: per-row weights (training.partial), None for equal weights. With
    `rounds` (cross-fitting's refit on every row: training.crossval), exactly that many
    rounds and no validation rows (x_val, y_val None). `init_score`, `val_init_score`: each
    row's raw score before the first tree (TrainConfig.lexical_start), None for none; the
    booster's own output never includes it."""
    import lightgbm as lgb

    params = lgbm_params(params, seed=seed, objective=objective, rows=len(y_train))
    train = lgb.Dataset(
        x_train,
        label=y_train,
        weight=weight,
        init_score=init_score,
        feature_name=feature_names or "auto",
        free_raw_data=False,
    )
    if rounds is not None:
        return lgb.train(params, train, num_boost_round=rounds)
    val = lgb.Dataset(
        x_val, label=y_val, weight=val_weight, init_score=val_init_score, reference=train, free_raw_data=False
    )
    booster = lgb.train(
        params,
        train,
        num_boost_round=num_boost_round,
        valid_sets=[val],
        valid_names=["val"],
        callbacks=[lgb.early_stopping(early_stopping_rounds, verbose=False)],
    )
    # Keep only the trees up to the best round, so the ONNX export and predict() agree. Cut,
    # not retrained: with `deterministic` the first rounds of a longer run are the same trees
    # (tests/test_export.py checks), and a retrain cost ~45% of the fit again.
    return lgb.Booster(model_str=booster.model_to_string(num_iteration=booster.best_iteration or num_boost_round))


def blank_declared_precision(
    matrix: np.ndarray, feature_names: list[str], precisions, share: float, rng: np.random.Generator
) -> np.ndarray:
    """A copy with the declared-precision columns zeroed on a random `share` of rows, so the
    model also learns to route requests whose client declares no precision."""
    out = matrix.copy()
    cols = [feature_names.index(f"precision_{p}") for p in precisions]
    blank = np.flatnonzero(rng.random(len(out)) < share)
    out[np.ix_(blank, cols)] = 0.0
    return out


class SharedValidationStop:
    """Early stopping for LightGBM's Dask interface, which has none of its own.

    Each worker gets these callbacks (`callbacks()`) with the same validation sample. Before
    the first round the sample joins the worker's booster as a validation set, binned with
    the training set's bins, so LightGBM adds each new tree's output to its scores itself;
    after every round the stop reads the booster's metric on it. All workers see the same
    loss on the same (shared) trees and stop at the same round: none is left waiting.
    """

    order = 30

    def __init__(self, x_val: np.ndarray, y_val: np.ndarray, rounds: int, weight: np.ndarray | None = None):
        self.x_val, self.y_val, self.rounds = np.asarray(x_val), np.asarray(y_val, dtype=np.float64), rounds
        self.weight = None if weight is None else np.asarray(weight, dtype=np.float64)
        self.best_loss, self.best_round, self.best_result = np.inf, 0, None

    def callbacks(self) -> list:
        """The callback that adds the sample before the first round, then this stop."""
        import lightgbm as lgb

        def add_sample(env) -> None:
            if env.iteration == env.begin_iteration:
                env.model.add_valid(
                    lgb.Dataset(self.x_val, self.y_val, weight=self.weight, reference=env.model.train_set),
                    SHARED_VALIDATION,
                )

        add_sample.before_iteration, add_sample.order = True, 0
        return [add_sample, self]

    def __call__(self, env) -> None:
        import lightgbm as lgb

        result = next(r for r in env.model.eval_valid() if r[0] == SHARED_VALIDATION)
        if result[2] < self.best_loss:
            self.best_loss, self.best_round, self.best_result = result[2], env.iteration + 1, result
        elif env.iteration + 1 - self.best_round >= self.rounds:
            raise lgb.callback.EarlyStopException(self.best_round - 1, [self.best_result])


SHARED_VALIDATION = "shared_validation"


def fit_booster_dask(
    client,
    x_train,
    y_train,
    x_val,
    y_val,
    *,
    params: dict,
    num_boost_round: int = 2000,
    early_stopping_rounds: int = 100,
    seed: int = 0,
    objective: str = "binary",
    weight=None,
    val_weight=None,
):
    """`fit_booster` on a Dask cluster: `x_train`/`y_train` (and `weight`) are Dask collections
    that stay on the workers (lightgbm.dask, data-parallel); `x_val`/`y_val` (`val_weight`) are
    an in-memory sample that every worker evaluates (SharedValidationStop). Returns the
    booster cut at its best round."""
    import lightgbm as lgb
    from lightgbm.dask import DaskLGBMClassifier, DaskLGBMRegressor

    sizes = client.compute(y_train.map_partitions(len)).result()  # rows per partition
    # lightgbm.dask sets the threads of each worker itself
    params = {
        k: v
        for k, v in lgbm_params(params, seed=seed, objective=objective, rows=int(sizes.sum())).items()
        if k not in ("num_threads", "n_jobs")
    }
    # cross-entropy learns fractions in [0, 1], which the classifier interface would take for classes
    estimator = DaskLGBMClassifier if objective == "binary" else DaskLGBMRegressor
    model = estimator(client=client, n_estimators=num_boost_round, **params)
    placed = _placed(client, x_train, y_train, *([] if weight is None else [weight]), sizes=sizes)
    with warnings.catch_warnings():  # threads are set per worker by lightgbm.dask; its note says so
        warnings.filterwarnings("ignore", message="Parameter n_jobs will be ignored")
        model.fit(
            placed[0],
            placed[1],
            sample_weight=placed[2] if weight is not None else None,
            callbacks=SharedValidationStop(x_val, y_val, early_stopping_rounds, val_weight).callbacks(),
        )
    booster = model.to_local().booster_
    best = booster.best_iteration or booster.current_iteration()
    return lgb.Booster(model_str=booster.model_to_string(num_iteration=best))


def _placed(client, *collections, sizes=None) -> list:
    """Each of `collections` (aligned: the same rows in the same partitions) as one partition
    per worker, its rows dealt out like cards: row g of the collection (partitions in order)
    goes to worker g mod n (workers in name order), so each worker holds an equal share
    (within one row) of every partition, in the order the rows were read. A worker left
    without rows gets no partition, as LightGBM needs. `sizes`: the rows of each partition,
    when already counted.

    Equal shares of every partition, because LightGBM's data-parallel learner treats its
    machines as equal samples of the rows: it starts the booster from the plain mean of each
    machine's starting score (BoostFromScore, not weighted by rows), and each machine bins its
    share of the features from its own rows. Given whole partitions, a log in one file left
    one worker its ~14,000 rows and the other the merged repeats (a partition of their own:
    3 rows, all answered well); the start became the logit (0.7 + 34.5) / 2 and no tree
    could split.
    A fixed placement, because lightgbm.dask trains each worker on the parts it holds in the
    order the scheduler lists them, which changes the bins and the bagging: left to the
    scheduler, the same rows gave test APGR 0.656-0.691 over seven runs."""
    import dask.dataframe as dd

    workers = sorted(client.scheduler_info()["workers"].items(), key=lambda item: str(item[1].get("name", item[0])))
    addresses = [address for address, _ in workers]
    if sizes is None:
        sizes = client.compute(collections[0].map_partitions(len)).result()  # one number per partition
    shares = _dealt(np.asarray(sizes, dtype=np.int64), len(addresses))

    def placed(collection):
        parts, step = client.compute(collection.to_delayed()), len(addresses)
        return dd.from_delayed(
            [
                client.submit(
                    _joined,
                    *[client.submit(_every_nth, parts[i], first, step) for i, first in share],
                    workers=[address],
                    allow_other_workers=False,
                    pure=False,
                )
                for address, share in zip(addresses, shares)
                if share
            ],
            meta=collection._meta,
            verify_meta=False,
        )

    return [placed(collection) for collection in collections]


def _dealt(sizes: np.ndarray, workers: int) -> list[list[tuple[int, int]]]:
    """For each worker w, the (partition, first row) of its slices: rows first, first + n, ...
    of each partition that holds a row g with g mod n == w (g counted over all partitions)."""
    starts = np.cumsum(sizes) - sizes
    return [
        [
            (i, int((w - start) % workers))
            for i, (start, size) in enumerate(zip(starts, sizes))
            if (w - start) % workers < size
        ]
        for w in range(workers)
    ]


def _every_nth(part, first: int, step: int):
    """Rows first, first + step, ... of one partition (on the worker that holds it)."""
    return part.iloc[first::step]


def _joined(*parts):
    """Partitions as one (on the worker that is to hold them)."""
    import pandas as pd

    return pd.concat(parts) if len(parts) > 1 else parts[0]


def fit_calibration(raw_probability, labels, *, method: str = "sigmoid", sample_weight=None) -> dict:
    """Parameters for serving.scoring._calibration.apply_calibration, fitted on validation rows
    (weighted by `sample_weight` when given)."""
    if method not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {method!r}; choose one of {', '.join(CALIBRATIONS)}")
    labels = np.asarray(labels, dtype=np.float64)
    weight = np.ones(len(labels)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if method == "none":
        return {"method": "none"}
    if labels.min() == labels.max():
        # One value only: nothing to calibrate against; keep the model's own probability.
        return {"method": "none", "note": "validation labels have one value"}
    if method == "sigmoid":
        coefficients, intercept = _graded_logistic(logit(raw_probability)[:, None], labels, weight)
        return {"method": "sigmoid", "a": float(coefficients[0]), "b": intercept}
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(
        raw_probability, labels, sample_weight=weight
    )
    return {"method": "isotonic", "x": iso.X_thresholds_.tolist(), "y": iso.y_thresholds_.tolist()}


def _graded_logistic(z, target, weight) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) of an unregularized logistic regression of `target` in [0, 1] on
    the columns of `z`, weighted: a graded target q counts as q of a success and 1 - q of a failure."""
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=1e6, max_iter=1000).fit(
        np.r_[z, z],
        np.r_[np.ones(len(z)), np.zeros(len(z))],
        sample_weight=np.r_[target * weight, (1 - target) * weight],
    )
    return lr.coef_[0], float(lr.intercept_[0])


def blend_for(
    head: Head, outcome: int, x, target, weight=None, *, form="mixture", raw=None, names=LEXICAL_NAMES
) -> LexicalBlend:
    """`head`'s blend (`form`: mixture or stack) with the lexical margin `outcome` of `names` (its
    own outcome's), fitted on rows `x` (which end with the margins) with outcomes `target`; `raw`:
    the head's raw(x), when the caller has it."""
    trees = apply_calibration(head.calibration, head.raw(x) if raw is None else raw)
    fit = fit_stack if form == "stack" else fit_blend
    margin = LexicalBlend(outcome, 1.0, names=names).margin(x)
    return fit(trees, margin, target, outcome=outcome, sample_weight=weight, names=names)


def fit_stack(trees, lexical_margin, target, *, outcome: int, sample_weight=None, names=LEXICAL_NAMES) -> LexicalBlend:
    """The stack sigmoid(a * logit(trees) + b * margin + c) of least (weighted) log loss against
    `target` in [0, 1] (graded: fractional successes), an unregularized logistic regression."""
    target = np.asarray(target, dtype=np.float64)
    if not len(target):
        raise ValueError("no validation rows to fit the lexical stack on")
    weight = np.ones(len(target)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    z = np.column_stack([stack_logit(trees), np.asarray(lexical_margin, dtype=np.float64)])
    if target.min() == target.max():  # one value: nothing to fit against; the trees alone
        return LexicalBlend(outcome, None, (1.0, 0.0, 0.0), names)
    (a, b), c = _graded_logistic(z, target, weight)
    return LexicalBlend(outcome, None, (float(a), float(b), c), names)


BLEND_GRID = np.linspace(0.0, 1.0, 21)  # the trees' weights a blend chooses among


def fit_blend(trees, lexical_margin, target, *, outcome: int, sample_weight=None, names=LEXICAL_NAMES) -> LexicalBlend:
    """The tree weight w on BLEND_GRID whose mixture w * trees + (1 - w) * sigmoid(margin) has
    the least (weighted) log loss against `target` in [0, 1] (graded: fractional successes);
    the largest such w on ties (the trees alone when lexical evidence adds nothing)."""
    from scipy.special import expit

    trees, target = np.asarray(trees, dtype=np.float64), np.asarray(target, dtype=np.float64)
    lexical = expit(np.asarray(lexical_margin, dtype=np.float64))
    weight = np.ones(len(target)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if not len(target):
        raise ValueError("no validation rows to choose the lexical blend on")

    def loss(w: float) -> float:
        p = np.clip(w * trees + (1 - w) * lexical, 1e-9, 1 - 1e-9)
        return float(-np.sum(weight * (target * np.log(p) + (1 - target) * np.log(1 - p))))

    losses = np.array([loss(w) for w in BLEND_GRID])
    best = np.flatnonzero(losses <= losses.min() + 1e-12 * max(1.0, abs(losses.min())))[-1]
    return LexicalBlend(outcome, float(BLEND_GRID[best]), names=names)


def fit_heads(
    objective: str | dict,
    fit_booster_for,
    x_val,
    targets_val: dict,
    config,
    *,
    weights_val: dict | None = None,
    shared: bool = False,
    refit=None,
    margins: tuple[str, ...] = LEXICAL_NAMES,
) -> list[Head]:
    """Every head of `objective` (OBJECTIVES, or {head: (column, LightGBM objective)} of N endpoints),
    calibrated on validation as the TrainConfig `config` says (model.calibration, lexical.mode and
    lexical.blend). `fit_booster_for(columns, lgbm_objective)` fits one booster where the engine
    keeps its rows: on one column's known rows, or with `shared` on every head's column, stacked with
    SIDE_FEATURE appended (stack_sides). `targets_val` / `weights_val`: each column's validation
    values (NaN where unknown) and weights (None: equal). With the blend the rows of `x_val` end with
    the lexical `margins`, one per head, and each head's blend with its own is fitted after its
    calibration. `refit` (training.crossval.Refit): its calibrations and blends, by head name, are
    taken as they are instead: cross-fitting fits them on out-of-fold outputs."""
    specs = OBJECTIVES[objective] if isinstance(objective, str) else objective
    if shared:
        kinds = {lgbm_objective for _, lgbm_objective in specs.values()}
        if len(kinds) != 1:
            raise ValueError(f"objective {objective!r}: its heads cannot share one booster")
        booster = fit_booster_for(tuple(column for column, _ in specs.values()), kinds.pop())
        unfitted = [Head(name, booster, {}, side) for side, name in enumerate(specs)]
    else:
        unfitted = [
            Head(name, fit_booster_for((column,), lgbm_objective), {})
            for name, (column, lgbm_objective) in specs.items()
        ]
    if refit is not None:
        for head in unfitted:
            head.calibration, head.blend = refit.calibrations[head.name], refit.blends.get(head.name)
        return unfitted
    for outcome, (head, (column, _)) in enumerate(zip(unfitted, specs.values())):
        target = np.asarray(targets_val[column], dtype=np.float64)
        weight = np.ones(len(target)) if not weights_val else np.asarray(weights_val[column], dtype=np.float64)
        known = ~np.isnan(target) & (weight > 0)
        raw = head.raw(x_val[known])  # once: the calibration and the blend read the same trees' outputs
        method = config.model.calibration
        head.calibration = fit_calibration(raw, target[known], method=method, sample_weight=weight[known])
        if config.lexical.mode == "blend":
            rows = (x_val[known], target[known], weight[known])
            head.blend = blend_for(head, outcome, *rows, form=config.lexical.blend, raw=raw, names=margins)
    return unfitted


def target_columns(objective: str) -> tuple[str, ...]:
    """The log columns the heads of `objective` learn from."""
    return tuple(dict.fromkeys(column for column, _ in OBJECTIVES[objective].values()))


def predict(objective: str, heads: list[Head], x, raw: dict | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(routing score, each head's calibrated probability) for the rows of `x`; `raw`: each
    head's raw(x) by name, when the caller has them (the trees are not run again)."""
    probabilities = {head.name: head.predict(x, None if raw is None else raw[head.name]) for head in heads}
    return routing_score(objective, probabilities), probabilities
