"""Cross-validation: every headline figure as an estimate with an interval, and paired
comparisons of two configurations on the same folds (docs/evaluation.md#cross-validation-make-evaluate-cv5-make-compare-configs).

Folds: the prompts' salted hash numbers cut into K slices; fold k is a training whose
configuration differs only in `test_share = 1/K` and `offset = k/K` (fold_config), so every stage
is refit by the same code on rows that exclude the fold. On each fold's test rows: every policy's
figures, the reference and the tuned rule table fitted on the fold's training rows, per source
too. The interval is the corrected resampled t interval over the n = K x repeats fold values
(Nadeau & Bengio, 2003), mean +- t(n-1) * sd * sqrt(1/n + n_test/n_train), widened because the
folds' training sets overlap; a paired comparison is the same over the per-fold differences.
Cross-fitting (`cross_fit`, `split.cv_folds`) then refits the bundle on every row.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np

from evaluation.figures import KeyFigures, Population, SplitSummary
from evaluation.headline import CV_POLICIES
from evaluation.policies import POLICIES, SUMMARY_KEYS
from training.config import TrainConfig

# The figures estimated per policy: the training summary's.
FIGURES = SUMMARY_KEYS
REFERENCE_QUALITIES = ("all_edge_quality", "all_cloud_quality", "oracle_quality", "cloud_needed_share")
# Compared with the learned router on every fold: the ten-minute reference and the rule tables.
COMPARED = ("reference", "rule_table", "tuned_rule_table")
LEVEL = 0.95
INTERVAL = (
    "corrected resampled t over the fold figures (Nadeau & Bengio 2003): "
    "mean +- t(n-1) * sd * sqrt(1/n + n_test/n_train)"
)


def repeat_salt(config: TrainConfig, repeat: int) -> str:
    """The split salt of repeat `repeat`: the configuration's own for the first."""
    return config.split.salt if repeat == 0 else f"{config.split.salt}cv{repeat}"


def fold_config(config: TrainConfig, *, folds: int, fold: int, repeat: int = 0) -> TrainConfig:
    """The configuration whose test split is fold `fold` of `folds` (module doc)."""
    if not 0 <= fold < folds:
        raise ValueError(f"fold {fold} is not one of 0..{folds - 1}")
    return config.with_options(
        {
            "split": {
                "test_share": 1.0 / folds,
                "offset": fold / folds,
                "salt": repeat_salt(config, repeat),
                "cv_folds": 0,
            }
        }
    )


def check_folds(config: TrainConfig, folds: int, repeats: int) -> None:
    """ValueError naming the option unless `folds` and `repeats` can cross-validate `config`."""
    if not isinstance(folds, int) or not 3 <= folds <= 20:
        raise ValueError(f"cross-validation folds={folds!r}: must be an integer in [3, 20]")
    if not isinstance(repeats, int) or not 1 <= repeats <= 10:
        raise ValueError(f"cross-validation repeats={repeats!r}: must be an integer in [1, 10]")
    if config.split.val_share + 1.0 / folds >= 1.0:
        raise ValueError(
            f"folds={folds} with split.val_share={config.split.val_share}: a fold's test share (1/{folds}) and "
            "the validation share leave no training rows"
        )


def test_over_train(config: TrainConfig, folds: int) -> float:
    """n_test / n_train of one fold, for the interval's correction."""
    return (1.0 / folds) / (1.0 - 1.0 / folds - config.split.val_share)


def interval(values, *, test_over_train: float, level: float = LEVEL) -> dict:
    """Mean and corrected resampled t interval of per-fold values (module doc); NaN values
    (a figure a fold cannot define) are left out and counted."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)]
    n = len(finite)
    out = {"mean": float(finite.mean()) if n else float("nan"), "n": n, "undefined": int(len(values) - n)}
    if n < 2:
        return {**out, "sd": float("nan"), "low": float("nan"), "high": float("nan")}
    sd = float(finite.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd * math.sqrt(1.0 / n + test_over_train)
    return {**out, "sd": sd, "low": out["mean"] - half, "high": out["mean"] + half}


@dataclass
class Refit:
    """What cross-fitting's folds chose for the bundle's fit on every row (training.crossval):
    the rounds of each booster (by the first log column it learns), whether the heads share
    one booster, and each head's calibration and lexical blend (training.model.LexicalBlend),
    fitted on the folds' out-of-fold outputs."""

    rounds: dict[str, int]
    shared: bool
    calibrations: dict[str, dict]
    blends: dict = field(default_factory=dict)


@dataclass
class FoldResult:
    """One fold's figures on its test rows."""

    repeat: int
    fold: int
    test_rows: int  # test rows with both outcomes: the figures' rows
    train_rows: int
    figures: SplitSummary  # the test rows and every policy's key figures on them
    by_source: dict[str, SplitSummary]
    trees: dict  # head -> trees kept by early stopping
    seconds: float
    notes: list[str] = field(default_factory=list)
    shared: bool = False  # the heads shared one booster
    # The test rows (prompt, outcomes) and each head's booster output before calibration on
    # them: cross-fitting calibrates the refit on every row with these (cross_fit).
    out_of_fold: tuple | None = field(default=None, repr=False)


def _fitted_policies(config: TrainConfig, fitted, val, notes: list[str]):
    """The tuned rule table and the reference policy, fitted on the fold's training rows and
    thresholded on its validation rows, as the learned router is; None (with a note) when
    the engine did not hand back training rows."""
    from evaluation.policies import tune_rule_table
    from evaluation.reference import ReferencePolicy

    train = fitted.train_rows
    if train is None or not len(train):
        notes.append(
            f"the {config.engine.name} engine returned no training rows: reference and tuned rule table left out"
        )
        return None, None
    options = dict(
        target=config.routing.target,
        max_quality_drop=config.routing.max_quality_drop,
        cloud_budget=config.routing.cloud_budget,
        catch_rate=config.routing.fallback_catch_rate,
    )
    both = np.isfinite(train.q_edge) & np.isfinite(train.q_cloud)
    complete = train.subset(both)
    tuned = (
        tune_rule_table(
            complete.n_tokens, complete.domains, complete.precisions, complete.q_edge, complete.q_cloud, **options
        )
        if len(complete)
        else None
    )
    reference = ReferencePolicy.fit(train, val, **options)
    return tuned, reference


def run_fold(config: TrainConfig, *, repeat: int, fold: int, prepared=None) -> FoldResult:
    """Train fold `fold`'s configuration (every stage, as `make train` does, without writing a
    bundle) and score every policy on its test rows. `prepared`: the logs as the local engine
    read them once for every fold (training.engines.local.prepare_frame)."""
    from rich.console import Console

    from evaluation.policies import evaluate_policies
    from training.engines import get_engine
    from training.held_out import fit_held_out_stages, with_learned_zones
    from training.stages import StageClock

    started = time.perf_counter()
    timings = {"start": started}
    quiet = Console(quiet=True)
    engine = get_engine(config.engine.name)
    fitted = engine.fit(
        config, quiet, timings, keep_train_rows=True, **({"prepared": prepared} if prepared is not None else {})
    )
    held = fit_held_out_stages(config, fitted, StageClock(timings))
    test = with_learned_zones(config, held.splits["test"], held.thresholds).with_inferred_domains()
    notes: list[str] = []
    tuned, reference = _fitted_policies(config, fitted, held.splits["val"], notes)
    names = [n for n in POLICIES if (n != "tuned_rule_table" or tuned) and (n != "reference" or reference)]
    options = dict(tuned=tuned, reference=reference, catch_rate=config.routing.fallback_catch_rate)

    def table(rows) -> SplitSummary:  # the rows' reference qualities and every policy's key figures on them
        return evaluate_policies(rows, names, **options)[0].summary()

    by_source = {str(s): table(test.subset(test.sources == s)) for s in sorted(set(test.sources.tolist()))}
    raw = (fitted.raw or {}).get("test")
    trees = {h.name: h.booster.num_trees() for h in fitted.heads}
    train_rows = len(fitted.train_rows) if fitted.train_rows is not None else 0
    figures = (len(test), train_rows, table(test), by_source, trees, time.perf_counter() - started, notes)
    return FoldResult(
        repeat,
        fold,
        *figures,
        shared=any(h.side is not None for h in fitted.heads),
        out_of_fold=None if raw is None else (fitted.splits["test"], raw),
    )


@dataclass
class CrossValidation:
    """Every fold's result of one configuration, and the estimates over them."""

    config: TrainConfig
    folds: int
    repeats: int
    results: list[FoldResult]

    @property
    def correction(self) -> float:
        return test_over_train(self.config, self.folds)

    def values(self, policy: str, figure: str, *, source: str | None = None) -> np.ndarray:
        """The figure of `policy` on every fold (NaN where a fold lacks it), in fold order."""
        tables = [r.figures if source is None else r.by_source.get(source) for r in self.results]
        return np.array([getattr(t.policies.get(policy) if t else None, figure, np.nan) for t in tables], dtype=float)

    def estimate(self, policy: str, figure: str, *, source: str | None = None) -> dict:
        return interval(self.values(policy, figure, source=source), test_over_train=self.correction)

    def difference(self, a: str, b: str, figure: str, *, other: "CrossValidation | None" = None) -> dict:
        """Paired: `a`'s figure minus `b`'s on the same folds (b of `other` when given)."""
        second = other or self
        return interval(self.values(a, figure) - second.values(b, figure), test_over_train=self.correction)

    def policies(self) -> list[str]:
        return [p for p in POLICIES if any(p in r.figures.policies for r in self.results)]

    def sources(self) -> list[str]:
        return sorted({s for r in self.results for s in r.by_source})

    def summary(self) -> dict:
        """Estimates of every figure per policy, per source, and the learned router's paired
        differences with the compared policies: JSON-ready."""
        policies = self.policies()
        compared = [p for p in COMPARED if p in policies]
        return {
            "folds": self.folds,
            "repeats": self.repeats,
            "interval": INTERVAL,
            "level": LEVEL,
            "test_over_train": self.correction,
            "rows": {f"{k}_per_fold": [getattr(r, f"{k}_rows") for r in self.results] for k in ("test", "train")},
            "policies": {p: {f: self.estimate(p, f) for f in FIGURES} for p in policies},
            "differences": {f"learned - {p}": {f: self.difference("learned", p, f) for f in FIGURES} for p in compared},
            "by_source": {
                s: {p: {f: self.estimate(p, f, source=s) for f in FIGURES} for p in policies} for s in self.sources()
            },
            "trees": {h: [r.trees[h] for r in self.results] for h in self.results[0].trees},
            "pooled_reference_qualities": {
                k: float(np.mean([getattr(r.figures.population, k) for r in self.results])) for k in REFERENCE_QUALITIES
            },
            "seconds": [r.seconds for r in self.results],
            "per_fold": [
                {**{k: getattr(r, k) for k in ("repeat", "fold", "test_rows", "trees")}, "figures": r.figures.as_dict()}
                for r in self.results
            ],
            "notes": sorted({n for r in self.results for n in r.notes}),
        }


def read_once(config: TrainConfig):
    """The logs read and validated once for every fold, and tokenized once by the first fold
    (the local engine; None for others)."""
    from training.engines import get_engine
    from training.featurize import FirstPassMemo

    if config.engine.name != "local":
        return None
    return get_engine("local").prepare_frame(config)._replace(first_pass=FirstPassMemo())


def cross_validate(
    config: TrainConfig, *, folds: int = 5, repeats: int = 1, console=None, on_fold=None, prepared=None
) -> CrossValidation:
    """Cross-validate `config` (module doc). `on_fold(result)` is called after each fold;
    `prepared`: the logs already read (read_once)."""
    check_folds(config, folds, repeats)
    prepared = prepared if prepared is not None else read_once(config)
    results = []
    for repeat in range(repeats):
        for fold in range(folds):
            if console is not None:
                console.print(
                    f"[bold]fold {fold + 1}/{folds}[/] of repeat {repeat + 1}/{repeats} "
                    f"(salt {repeat_salt(config, repeat)!r})"
                )
            result = run_fold(
                fold_config(config, folds=folds, fold=fold, repeat=repeat), repeat=repeat, fold=fold, prepared=prepared
            )
            results.append(result)
            if on_fold is not None:
                on_fold(result)
    return CrossValidation(config, folds, repeats, results)


def compare(a: CrossValidation, b: CrossValidation) -> dict:
    """Paired differences B - A of the learned router's figures, fold by fold (the two must
    have been cut the same way: same folds, repeats and salt)."""
    if (a.folds, a.repeats, a.config.split.salt) != (b.folds, b.repeats, b.config.split.salt):
        raise ValueError(
            "the two cross-validations were not cut the same way: compare needs the same folds, "
            f"repeats and split salt (A: {a.folds}, {a.repeats}, {a.config.split.salt!r}; "
            f"B: {b.folds}, {b.repeats}, {b.config.split.salt!r})"
        )
    return {f: b.difference("learned", "learned", f, other=a) for f in FIGURES}


def headline_means(cv: CrossValidation) -> SplitSummary:
    """The cross-validated means as a split's training figures, for what reads a manifest's
    `metrics["test"]` (evaluation.headline, make promote)."""
    summary = cv.summary()
    population = Population(
        rows=int(sum(summary["rows"]["test_per_fold"])), fallback_rates=None, **summary["pooled_reference_qualities"]
    )
    means = {
        p: KeyFigures(**{f: summary["policies"][p][f]["mean"] for f in FIGURES})
        for p in CV_POLICIES
        if p in summary["policies"]
    }
    return SplitSummary(population, means, cross_validated=True)


def _pooled(cv: CrossValidation, key: str) -> np.ndarray:
    """The folds' out-of-fold outputs `key` (a head, or the lexical margins), in fold order."""
    return np.concatenate([r.out_of_fold[1][key] for r in cv.results])


def _refit_head(refit: Refit, head: str):
    """The refit's head `head` without its booster (training.model.Head): its probability of a
    booster output `raw` and lexical margins is `.predict(margins, raw)`."""
    from training.model import Head

    return Head(head, None, refit.calibrations[head], blend=refit.blends.get(head))


def out_of_fold_rows(cv: CrossValidation, rows, refit: Refit, objective: str):
    """`rows` (the refit's rows with both outcomes) with the folds' out-of-fold scores instead of
    the refit's in-sample ones, calibrated (and blended) as `refit` says: what the thresholds
    are chosen on."""
    from serving.bundle._manifest import routing_score
    from training.lexical import MARGINS_OUTPUT

    tested = np.concatenate([r.out_of_fold[0].prompts for r in cv.results])
    position = {prompt: i for i, prompt in enumerate(tested)}
    missing = [p for p in rows.prompts if p not in position]
    if missing:
        raise RuntimeError(
            f"{len(missing)} rows have no out-of-fold score (first: {missing[0][:80]!r}): the folds "
            "and the refit read different rows"
        )
    order = np.array([position[p] for p in rows.prompts], dtype=np.int64)
    margins = _pooled(cv, MARGINS_OUTPUT)[order] if refit.blends else None
    probabilities = {
        head: _refit_head(refit, head).predict(margins, _pooled(cv, head)[order]) for head in refit.calibrations
    }
    scores = routing_score(objective, probabilities)
    return dataclasses.replace(
        rows, scores=np.asarray(scores, float), p_edge=probabilities.get("edge"), p_cloud=probabilities.get("cloud")
    )


def refit_choices(cv: CrossValidation, config: TrainConfig):
    """The rounds (median of the folds' early-stopped rounds), head sharing (the folds'),
    calibrations and lexical blends (fitted on the pooled out-of-fold outputs) of the refit on
    every row."""
    from training.lexical import MARGINS_OUTPUT, OUTCOMES
    from training.model import OBJECTIVES, blend_for, fit_calibration

    if any(r.out_of_fold is None for r in cv.results):
        raise ValueError(
            f"the {config.engine.name} engine does not hand back out-of-fold outputs: cross-fitting "
            "(cv_folds > 0) needs the local engine; use cv_folds=0 with this engine"
        )
    heads = OBJECTIVES[config.model.objective]
    rounds = {column: int(np.median([r.trees[head] for r in cv.results])) for head, (column, _) in heads.items()}
    shared = sum(r.shared for r in cv.results) * 2 > len(cv.results)
    refit = Refit(rounds, shared, {})
    for head, (column, _) in heads.items():
        raw = _pooled(cv, head)
        target = np.concatenate([getattr(r.out_of_fold[0], _OUTCOME[column]) for r in cv.results])
        refit.calibrations[head] = fit_calibration(raw, target, method=config.model.calibration)
        if config.lexical.mode == "blend":
            margins, outcome = _pooled(cv, MARGINS_OUTPUT), OUTCOMES.index(column)
            refit.blends[head] = blend_for(
                _refit_head(refit, head), outcome, margins, target, form=config.lexical.blend, raw=raw
            )
    return refit


_OUTCOME = {"edge_quality": "q_edge", "cloud_quality": "q_cloud", "label": "needed"}


def cross_fit(config: TrainConfig, *, console, timings: dict):
    """`make train` with cv_folds = K: K folds cross-validate the configuration (the figures),
    then the bundle's heads are fitted on every row for the folds' rounds, calibrated on the
    folds' out-of-fold outputs, and its thresholds chosen on the out-of-fold scores.
    Returns (the cross-validation, the refit's Fitted with the out-of-fold rows as "val")."""
    from training.engines import get_engine

    prepared = read_once(config)
    cv = cross_validate(config, folds=config.split.cv_folds, console=console, prepared=prepared)
    refit = refit_choices(cv, config)
    console.print(
        f"[bold]refit on every row[/]: rounds {refit.rounds} (the folds' median), calibration on "
        f"{sum(r.test_rows for r in cv.results)} out-of-fold outputs"
    )
    fitted = get_engine(config.engine.name).fit(config, console, timings, refit=refit, prepared=prepared)
    fitted.splits["val"] = out_of_fold_rows(cv, fitted.splits["val"], refit, config.model.objective)
    return cv, fitted
