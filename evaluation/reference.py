"""The reference every evaluation shows next to the learned router: a ten-minute baseline, TF-IDF word 1-2-grams plus
the log length and a logistic regression per outcome, thresholded on validation rows
(docs/evaluation.md#the-reference-a-ten-minute-baseline)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluation.fallback import Catch
from evaluation.rows import Rows, zones_at
from evaluation.thresholds import Thresholds, select_thresholds
from serving.bundle._manifest import SCORE_KINDS, routing_score

SCORE_KIND = "expected_gain"
C = 1.0  # inverse L2 strength of both outcome models: scikit-learn's default, not tuned
MAX_FEATURES = 200_000  # word 1-2-grams kept (the most frequent); the shipped logs have fewer


def _outcome(name: str, q, n: int) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    if q.shape != (n,):
        raise ValueError(f"{name}: {q.shape[0] if q.ndim else 'a scalar'} values for {n} prompts")
    known = q[~np.isnan(q)]
    if ((known < 0) | (known > 1)).any():
        raise ValueError(f"{name} must lie in [0, 1] (NaN: unknown), got {known[(known < 0) | (known > 1)][0]!r}")
    return q


def fit_outcome(x, q: np.ndarray, weight: np.ndarray | None = None, *, c: float) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) of a logistic regression of an outcome in [0, 1] on the rows of
    `x`, q counting as q of a success and 1 - q of a failure (times the row's weight); an outcome
    with no successes or no failures gets its smoothed log-odds and no terms."""
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    q = np.asarray(q, dtype=np.float64)
    weight = np.ones(len(q)) if weight is None else np.asarray(weight, dtype=np.float64)
    success, failure = float(np.sum(weight * q)), float(np.sum(weight * (1 - q)))
    if success <= 0 or failure <= 0:
        return np.zeros(x.shape[1]), float(np.log((success + 0.5) / (failure + 0.5)))
    weights = np.r_[weight * q, weight * (1 - q)]
    keep = weights > 0
    stacked = sp.vstack([x, x]).tocsr()[keep]
    labels = np.r_[np.ones(x.shape[0]), np.zeros(x.shape[0])][keep]
    # Newton-CG: on the shipped logs' 8,700 training rows it reaches lbfgs' optimum (loss within
    # 1e-6 of a 1e-8-tolerance fit) in 2 s; lbfgs at its default tolerance took 12-20 s and
    # stopped 0.6% above it, its margins up to 0.59 off.
    model = LogisticRegression(C=c, solver="newton-cg", max_iter=2000).fit(stacked, labels, sample_weight=weights[keep])
    return model.coef_[0].astype(np.float64), float(model.intercept_[0])


@dataclass
class ReferenceModel:
    """The TF-IDF vocabulary, the length column's scaling and the two outcome models, each (coefficients, intercept)."""

    vectorizer: object
    length_mean: float
    length_std: float
    edge: tuple[np.ndarray, float] | None
    cloud: tuple[np.ndarray, float] | None
    rows: dict  # {"edge": rows its model learned from, "cloud": ..., "without_text": rows left out}

    @classmethod
    def fit(cls, prompts, q_edge, q_cloud, *, c: float = C) -> ReferenceModel:
        """Fit on these prompts; each outcome model on the rows with text where its outcome is known."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        prompts = list(prompts)
        q_edge, q_cloud = (
            _outcome(name, q, len(prompts)) for name, q in (("edge_quality", q_edge), ("cloud_quality", q_cloud))
        )
        has_text = np.array([isinstance(p, str) for p in prompts], dtype=bool)
        known = {"edge": ~np.isnan(q_edge) & has_text, "cloud": ~np.isnan(q_cloud) & has_text}
        for side, rows in known.items():
            if not rows.any():
                raise ValueError(
                    f"no row with text has a known {side}_quality ({int((~has_text).sum())} of "
                    f"{len(prompts)} rows have no text): the reference's {side} model has nothing "
                    "to learn from"
                )
        vectorizer = TfidfVectorizer(
            ngram_range=(1, 2), sublinear_tf=True, min_df=2, max_features=MAX_FEATURES, dtype=np.float64
        )
        taught = known["edge"] | known["cloud"]
        texts = [p for p, k in zip(prompts, taught) if k]
        terms = vectorizer.fit_transform(texts)  # one pass over the text: vocabulary and rows
        lengths = _log_lengths(texts)
        counts = {**{side: int(rows.sum()) for side, rows in known.items()}, "without_text": int((~has_text).sum())}
        model = cls(vectorizer, float(lengths.mean()), float(lengths.std()) or 1.0, None, None, counts)
        x = model._with_length(terms, texts)
        model.edge, model.cloud = (
            fit_outcome(x[known[side][taught]], q[known[side]], c=c)
            for side, q in (("edge", q_edge), ("cloud", q_cloud))
        )
        return model

    def features(self, prompts):
        """TF-IDF word 1-2-grams and the standardized log character length, one sparse row per prompt."""
        prompts = list(prompts)
        missing = [i for i, p in enumerate(prompts) if not isinstance(p, str)]
        if missing:
            raise ValueError(
                f"{len(missing)} of {len(prompts)} rows have no prompt text (first: row {missing[0]}, "
                f"{prompts[missing[0]]!r}); the reference reads the text"
            )
        return self._with_length(self.vectorizer.transform(prompts), prompts)

    def _with_length(self, terms, prompts):
        import scipy.sparse as sp

        length = (_log_lengths(prompts) - self.length_mean) / self.length_std
        return sp.hstack([terms, sp.csr_matrix(length[:, None])], format="csr")

    def probabilities(self, prompts) -> tuple[np.ndarray, np.ndarray]:
        """(P(edge good), P(cloud good)) of each prompt."""
        from scipy.special import expit

        x = self.features(prompts)
        return tuple(expit(x @ coefficients + intercept) for coefficients, intercept in (self.edge, self.cloud))

    def scores(self, prompts) -> np.ndarray:
        """The router's expected-gain score, P(cloud good) - P(edge good)."""
        p_edge, p_cloud = self.probabilities(prompts)
        return routing_score(SCORE_KIND, {"edge": p_edge, "cloud": p_cloud})


def _log_lengths(prompts) -> np.ndarray:
    return np.log1p(np.array([len(p) for p in prompts], dtype=np.float64))


@dataclass
class ReferencePolicy:
    """The reference model and its two fallback thresholds: edge below `lo`, cloud above `hi`."""

    model: ReferenceModel
    thresholds: Thresholds
    target: str  # the threshold target it was fitted for (evaluation.thresholds.TARGETS)

    @classmethod
    def fit(cls, train_rows: Rows, val_rows: Rows, *, catch_rate: float = 0.5, **threshold_options) -> ReferencePolicy:
        """The model on `train_rows`; thresholds (select_thresholds options) on the `val_rows` with
        both outcomes, the acceptance check's verdicts as the fallback's rates where they carry them."""
        if len(train_rows) == 0:
            raise ValueError("no train rows to fit the reference on")
        model = ReferenceModel.fit(train_rows.prompts, train_rows.q_edge, train_rows.q_cloud)
        both = ~np.isnan(val_rows.q_edge) & ~np.isnan(val_rows.q_cloud)
        if not both.any():
            raise ValueError(
                f"none of the {len(val_rows)} validation rows has both outcomes: the reference's "
                "thresholds cannot be picked"
            )
        val = val_rows.subset(both)
        thresholds = select_thresholds(
            model.scores(val.prompts),
            val.q_edge,
            val.q_cloud,
            catch_rate=Catch.for_rows(val.rejected, catch_rate),
            bounds=SCORE_KINDS[SCORE_KIND][1],
            **threshold_options,
        )
        return cls(model, thresholds, threshold_options.get("target", "quality"))

    @classmethod
    def fit_frame(cls, frame, **threshold_options) -> ReferencePolicy:
        """`fit` on prepared log rows by their `split` column: `train` rows fit the model, `val` rows
        the thresholds (no router scored them: the reference reads the text and the outcomes)."""
        parts = {}
        for split in ("train", "val"):
            rows = frame[(frame["split"] == split).to_numpy()]
            if len(rows) == 0:
                raise ValueError(f"no {split}-split rows to fit the reference on")
            parts[split] = Rows.from_frame(rows, scores=np.full(len(rows), np.nan), n_tokens=np.full(len(rows), np.nan))
        return cls.fit(parts["train"], parts["val"], **threshold_options)

    def route(self, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
        """(score, zone) of each request."""
        scores = self.model.scores(rows.prompts)
        return scores, zones_at(scores, self.thresholds.lo, self.thresholds.hi)

    def as_dict(self) -> dict:
        """What metrics.json says about it: the rows each model learned from, the thresholds and their fit."""
        return {
            "features": f"TF-IDF word 1-2-grams (min_df 2, sublinear tf, {len(self.model.vectorizer.vocabulary_)} "
            "terms) + log length",
            "trained_on_rows": self.model.rows,
            "c": C,
            "lo": self.thresholds.lo,
            "hi": self.thresholds.hi,
            "target": self.target,
            "fit": self.thresholds.as_dict(),
        }
