"""Training configuration: typed defaults, loaded from YAML/JSON and CLI overrides, saved with the run."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.thresholds import TARGETS
from serving.contract import DEFAULT_EDGE_CONTEXT_TOKENS, DEFAULT_MAX_CHARS
from serving.features.spec import LEXICAL_MODES
from serving.novelty import UNFAMILIAR_POLICIES
from serving.response_features import DEFAULT_MAX_RESPONSE_CHARS
from training.lexical import EXACT_WEIGHTINGS
from training.lexical import WEIGHTINGS as LEXICAL_WEIGHTINGS
from training.model import CALIBRATIONS, OBJECTIVES

LEXICAL_BLENDS = ("mixture", "stack")  # a blend's form (training.model.LexicalBlend)

# Where the logs are read, featurized and fitted (training.engines maps each to its module).
ENGINES = ("local", "dask")


DEFAULT_CV_FOLDS = 5


@dataclass
class TrainConfig:
    """Every knob of `make train`. Defaults work on the shipped RouteLLM logs."""

    data: list[str] = field(default_factory=list)  # files, globs, folders; empty = default location
    bundle: str = "artifacts/router"
    tier: str = "static"
    # The static tier's bundle also carries its encoder before the projection (encoder.onnx, the
    # 384-wide token table: +47 MB), which OutcomeLog(privacy="embedding") needs; the
    # transformer tier's bundle always carries it.
    bundle_encoder: bool = False
    embedding_dim: int = 32  # PCA components kept from the embedding
    max_tokens: int | None = None  # None: the tier's default
    max_chars: int = DEFAULT_MAX_CHARS  # text tokenized and scanned; bounds route() cost
    val_share: float = 0.15
    test_share: float = 0.15
    split_salt: str = ""
    split_offset: float = 0.0  # where the test split starts on the hash scale
    # Cross-fitting (training.crossval): K prompt-hash folds estimate every figure with an interval,
    # and the bundle is fitted on every row with calibration and thresholds from out-of-fold
    # scores. 0: the quick single split (train / val / test by prompt hash, the figures of one
    # split). Empty: 5 with the local engine, 0 with Dask (cross-fitting needs the local engine).
    cv_folds: int | None = None
    margin_binary: float = 0.0
    margin_graded: float = 0.1  # judge scores: 1 point on 1-10 is 0.11
    max_reject_share: float = 0.05
    precision_dropout: float = 0.2  # train rows shown without a declared precision
    objective: str = "expected_gain"  # expected_gain (two outcome heads) | cloud_needed
    # Lexical evidence (training.lexical): each outcome's logistic-regression margin over the
    # prompt's unigrams and hashed bigrams, computed in model.onnx (+2.3 MB). "features" adds the
    # margins to the trees' inputs (training rows get out-of-fold margins: lexical_folds folds by
    # prompt hash); "blend" mixes each head's calibrated probability with sigmoid(margin), the
    # weight chosen on validation (training.model.fit_blend). Empty: blend where it can run (the
    # static tier, either engine, expected gain, sigmoid or no calibration), else none; paired
    # cross-validation chose it (docs/routing-score.md#decisions-by-paired-cross-validation).
    lexical: str | None = None  # none | features | blend
    # A blend's form (training.model): "stack", sigmoid(a * logit(trees) + b * margin + c) with
    # a, b, c fitted on validation; "mixture", w * trees + (1 - w) * sigmoid(margin).
    lexical_blend: str = "stack"
    # With a stack: each head's trees start boosting from its outcome's lexical margin (LightGBM's
    # init_score; training rows' margins out of fold, lexical_folds folds by prompt hash), so they
    # learn what the margin misses; the stack, which reads logit(trees) and the margin, adds the
    # margin back in the graph.
    lexical_start: bool = False
    # The regression's rows (training.lexical.WEIGHTINGS): "tfidf", sublinear tf * idf scaled to
    # unit L2 norm (the reference's recipe on WordPiece terms); "mean", counts / number of terms;
    # "idf", counts * idf scaled to sum 1. `features` needs mean or idf: their margins are
    # bit-exact in the graph. Empty: tfidf for a blend, mean for features.
    lexical_weighting: str | None = None
    lexical_c: float | None = None  # the regressions' inverse L2 regularization; empty: 1 (tfidf), 64 (mean, idf)
    lexical_folds: int = 5
    # Training prompts the regressions are fitted on (idf included): above it, a prompt-hash
    # sample inside the boosters' max_train_rows sample, the same prompts in both engines; the
    # margins of every other row come from that fit (training.lexical, "At scale"). Empty: all.
    lexical_sample_rows: int | None = 50_000
    lgbm: dict[str, Any] = field(default_factory=dict)
    num_boost_round: int = 2000
    early_stopping_rounds: int = 100
    calibration: str = "sigmoid"
    target: str = "quality"
    max_quality_drop: float = 0.01
    cloud_budget: float = 0.3
    fallback_catch_rate: float = 0.5  # assumed where no edge answers measure it (training.acceptance)
    # The acceptance check, fitted when the logs carry edge answers (training.acceptance).
    acceptance_false_reject_rate: float = 0.12  # share of good edge answers the threshold may reject
    acceptance_good_quality: float = 0.5  # an edge answer with quality >= this is good
    acceptance_min_rows: int = 200  # fewer answers (or < 20 of each kind): no model
    acceptance_folds: int = 5  # cross-fitting: calibration and threshold held out
    acceptance_rounds: int = 300
    acceptance_lgbm: dict[str, Any] = field(default_factory=dict)
    partial_estimator: str = "plug_in"  # rows with one outcome: plug_in | ipw (training.partial)
    max_ipw_weight: float = 20.0  # ipw: 1 / propensity, clipped here
    head_sharing: str = "auto"  # auto | separate | shared outcome heads (training.partial)
    max_response_chars: int = DEFAULT_MAX_RESPONSE_CHARS  # answers are cut to their last N characters (2,000)
    min_rows_per_tag: int = 200
    edge_context_tokens: int = DEFAULT_EDGE_CONTEXT_TOKENS
    novelty_share: float = 0.03  # share of in-distribution prompts flagged unfamiliar
    novelty_min_unseen_share: float = 0.3  # unseen-token share below this is never unfamiliar
    unfamiliar_policy: str = "edge_with_cloud_fallback"  # or rule_table | learned (serving.novelty)
    seed: int = 0
    max_train_rows: int | None = 1_000_000  # training prompts fitted (a prompt-hash sample); empty: all
    parity_rows: int = 5000  # test rows the bundle is checked against (from raw text)
    # Scale-out (engine=dask): logs stay on the cluster in partitions; the client holds
    # bounded, hash-chosen samples only.
    engine: str = "local"  # local | dask
    dask_scheduler: str | None = None  # tcp://host:port; empty: $DASK_SCHEDULER, else a LocalCluster
    dask_workers: int | None = None  # LocalCluster workers; empty: one per core
    dask_scratch: str | None = None  # validated rows between passes; empty: cache_dir/dask-scratch
    eval_sample_rows: int = 200_000  # val / test rows collected for thresholds and figures
    pca_sample_rows: int = 50_000  # training rows whose raw embeddings fit the projection
    # MLflow store: $MLFLOW_TRACKING_URI when set (`make train MLRUNS=dir` sets it), else ./mlruns
    tracking_uri: str = field(
        default_factory=lambda: os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlruns/mlflow.db"
    )
    artifact_root: str = ""  # empty: `artifacts` beside a SQLite store, else mlruns/artifacts
    experiment: str = "edge-cloud-router"
    registered_model: str = "edge-cloud-router"
    signing_key: str | None = None  # Ed25519 private key (make keys): the bundle is signed
    cache_dir: str = "data/cache"
    reports_dir: str = "reports/train"

    def __post_init__(self):
        if not self.artifact_root:
            store = self.tracking_uri.removeprefix("sqlite:///")
            self.artifact_root = (
                str(Path(store).parent / "artifacts") if store != self.tracking_uri else "mlruns/artifacts"
            )

        def check(ok: bool, name: str, rule: str):
            if not ok:
                raise ValueError(f"config {name}={getattr(self, name)!r}: {rule}")

        from training.encoders import TIERS

        check(self.tier in TIERS, "tier", f"must be one of {', '.join(TIERS)}")
        check(isinstance(self.bundle_encoder, bool), "bundle_encoder", "must be true or false")
        check(self.engine in ENGINES, "engine", f"must be one of {', '.join(ENGINES)}")
        for name in (
            "parity_rows",
            "eval_sample_rows",
            "pca_sample_rows",
            "acceptance_min_rows",
            "acceptance_rounds",
            "max_response_chars",
        ):
            check(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, name, "must be an integer >= 1")
        check(
            self.max_train_rows is None or (isinstance(self.max_train_rows, int) and self.max_train_rows >= 1),
            "max_train_rows",
            "must be empty or an integer >= 1",
        )
        check(
            self.lexical_sample_rows is None
            or (isinstance(self.lexical_sample_rows, int) and self.lexical_sample_rows >= 1),
            "lexical_sample_rows",
            "must be empty or an integer >= 1",
        )
        check(
            self.dask_workers is None or (isinstance(self.dask_workers, int) and self.dask_workers >= 1),
            "dask_workers",
            "must be empty or an integer >= 1",
        )
        check(self.calibration in CALIBRATIONS, "calibration", f"must be one of {', '.join(CALIBRATIONS)}")
        check(self.objective in OBJECTIVES, "objective", f"must be one of {', '.join(OBJECTIVES)}")
        check(
            self.unfamiliar_policy in UNFAMILIAR_POLICIES,
            "unfamiliar_policy",
            f"must be one of {', '.join(UNFAMILIAR_POLICIES)}",
        )
        check(self.target in TARGETS, "target", f"must be one of {', '.join(TARGETS)}")
        for name in (
            "val_share",
            "test_share",
            "margin_binary",
            "margin_graded",
            "max_reject_share",
            "precision_dropout",
            "max_quality_drop",
            "cloud_budget",
            "fallback_catch_rate",
            "novelty_share",
            "novelty_min_unseen_share",
            "acceptance_false_reject_rate",
            "acceptance_good_quality",
        ):
            check(
                isinstance(getattr(self, name), (int, float)) and 0 <= getattr(self, name) <= 1,
                name,
                "must be a number in [0, 1]",
            )
        check(
            self.val_share > 0 and self.val_share + self.test_share < 1,
            "val_share",
            "needs val_share > 0 and val_share + test_share < 1",
        )
        check(
            isinstance(self.split_offset, (int, float)) and 0 <= self.split_offset < 1,
            "split_offset",
            "must be a number in [0, 1)",
        )
        check(isinstance(self.embedding_dim, int) and self.embedding_dim >= 1, "embedding_dim", "must be >= 1")
        check(
            self.max_tokens is None or (isinstance(self.max_tokens, int) and self.max_tokens >= 8),
            "max_tokens",
            "must be empty or an integer >= 8",
        )
        check(isinstance(self.max_chars, int) and self.max_chars >= 64, "max_chars", "must be an integer >= 64")
        check(isinstance(self.data, list), "data", "must be a list of paths")
        from training.partial import ESTIMATORS, HEAD_SHARING

        check(self.partial_estimator in ESTIMATORS, "partial_estimator", f"must be one of {', '.join(ESTIMATORS)}")
        check(self.head_sharing in HEAD_SHARING, "head_sharing", f"must be one of {', '.join(HEAD_SHARING)}")
        check(
            self.head_sharing != "shared" or len(OBJECTIVES.get(self.objective, ())) > 1,
            "head_sharing",
            f"shared needs an objective with two or more heads, not {self.objective!r}",
        )
        check(
            isinstance(self.max_ipw_weight, (int, float)) and self.max_ipw_weight >= 1,
            "max_ipw_weight",
            "must be a number >= 1",
        )
        check(
            isinstance(self.acceptance_folds, int) and 2 <= self.acceptance_folds <= 20,
            "acceptance_folds",
            "must be an integer in [2, 20]",
        )
        if self.lexical is None:
            self.lexical = (
                "blend"
                if (self.tier, self.objective) == ("static", "expected_gain")
                and self.calibration in ("sigmoid", "none")
                else "none"
            )
        check(self.lexical in LEXICAL_MODES, "lexical", f"must be one of {', '.join(LEXICAL_MODES)}")
        check(
            self.lexical == "none" or self.tier == "static",
            "lexical",
            f"needs tier=static, not {self.tier!r}: the margins are computed inside the fused model.onnx from the "
            "token ids, and the transformer tier's router.onnx reads only the projected features",
        )
        check(
            self.engine == "local" or (self.lexical, self.lexical_start) in (("none", False), ("blend", False)),
            "lexical",
            f"{self.lexical!r}{' with lexical_start' if self.lexical_start else ''} needs engine=local, not "
            f"{self.engine!r}: the trees would read every training row's out-of-fold margins, which the Dask "
            "engine does not compute on its workers (it trains lexical=blend, the default)",
        )
        check(
            self.lexical != "blend" or self.objective == "expected_gain",
            "lexical",
            f"blend needs objective=expected_gain, not {self.objective!r}: it mixes each outcome head with the "
            "lexical regression of the same outcome",
        )
        check(
            self.lexical != "blend" or self.calibration in ("sigmoid", "none"),
            "lexical",
            f"blend needs calibration=sigmoid or none, not {self.calibration!r}: the graph mixes the calibrated "
            "probabilities, and only those calibrations are inside it",
        )
        if self.lexical_weighting is None:
            self.lexical_weighting = "tfidf" if self.lexical == "blend" else "mean"
        check(
            self.lexical_weighting in LEXICAL_WEIGHTINGS,
            "lexical_weighting",
            f"must be one of {', '.join(LEXICAL_WEIGHTINGS)}",
        )
        check(
            self.lexical != "features" or self.lexical_weighting in EXACT_WEIGHTINGS,
            "lexical_weighting",
            f"features needs {' or '.join(EXACT_WEIGHTINGS)}: the trees split on the margins, which only those forms "
            "compute bit-exactly in the graph",
        )
        check(self.lexical_blend in LEXICAL_BLENDS, "lexical_blend", f"must be one of {', '.join(LEXICAL_BLENDS)}")
        check(isinstance(self.lexical_start, bool), "lexical_start", "must be true or false")
        check(
            not self.lexical_start or (self.lexical, self.lexical_blend) == ("blend", "stack"),
            "lexical_start",
            f"needs lexical=blend with lexical_blend=stack, not {self.lexical!r} / {self.lexical_blend!r}: the "
            "stack adds the margin the trees started from back into the graph's probability",
        )
        if self.lexical_c is None:
            self.lexical_c = 1.0 if self.lexical_weighting == "tfidf" else 64.0
        check(isinstance(self.lexical_c, (int, float)) and self.lexical_c > 0, "lexical_c", "must be a number > 0")
        check(
            isinstance(self.lexical_folds, int) and 2 <= self.lexical_folds <= 20,
            "lexical_folds",
            "must be an integer in [2, 20]",
        )
        if self.cv_folds is None:
            self.cv_folds = DEFAULT_CV_FOLDS if self.engine == "local" else 0
        check(
            isinstance(self.cv_folds, int) and (self.cv_folds == 0 or 3 <= self.cv_folds <= 20),
            "cv_folds",
            "must be 0 (a single split) or an integer in [3, 20]",
        )
        check(
            self.cv_folds == 0 or self.engine == "local",
            "cv_folds",
            f"cross-fitting needs the local engine; set cv_folds=0 with engine={self.engine}",
        )

    @classmethod
    def from_file(cls, path: str | Path, **overrides) -> "TrainConfig":
        """Load YAML or JSON; unknown keys are an error naming the key."""
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            values = yaml.safe_load(text) or {}
        else:
            values = json.loads(text)
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a mapping of option -> value")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{path}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**{**values, **{k: v for k, v in overrides.items() if v is not None}})

    @classmethod
    def from_options(cls, path: str | Path | None, overrides: dict) -> "TrainConfig":
        """A command's options: the config file (if any), then the options given (None: not given) on top."""
        overrides = {k: v for k, v in overrides.items() if v is not None}
        return cls.from_file(path, **overrides) if path else cls(**overrides)

    @classmethod
    def from_manifest(cls, manifest, **overrides) -> "TrainConfig":
        """The settings a bundle was trained with (tier, label margins, split, calibration,
        threshold target, limits), as read from its manifest, then `overrides` on top."""
        spec, target, split, label = manifest.feature_spec, manifest.target, manifest.split, manifest.label
        defaults = cls()
        settings = dict(
            tier=spec.tier,
            embedding_dim=spec.embedding_dim,
            max_tokens=spec.max_tokens,
            max_chars=spec.max_chars,
            objective=manifest.score.kind,
            calibration=next(iter(manifest.calibration.values()))["method"],
            target=target.get("kind", defaults.target),
            max_quality_drop=target.get("max_quality_drop", defaults.max_quality_drop),
            cloud_budget=target.get("cloud_budget", defaults.cloud_budget),
            fallback_catch_rate=target.get("fallback_catch_rate", defaults.fallback_catch_rate),
            val_share=split.get("val_share", defaults.val_share),
            test_share=split.get("test_share", defaults.test_share),
            split_salt=split.get("salt", defaults.split_salt),
            split_offset=split.get("offset", defaults.split_offset),
            # retraining from a bundle (leave-one-source-out) needs its split, not its cross-fitting
            cv_folds=0,
            margin_binary=label.get("margin_binary", defaults.margin_binary),
            margin_graded=label.get("margin_graded", defaults.margin_graded),
            edge_context_tokens=manifest.limits.edge_context_tokens,
            unfamiliar_policy=manifest.novelty.get("policy", defaults.unfamiliar_policy),
            novelty_share=manifest.novelty.get("target_share", defaults.novelty_share),
            lexical=spec.lexical,
        )
        return cls(**{**settings, **overrides})

    @property
    def rejects_path(self) -> Path:
        """Where the rejected rows of this run are written."""
        return Path(self.reports_dir) / "rejects.jsonl"

    def to_dict(self) -> dict:
        from data.hf_datasets import source_name  # a Dataset object among the logs is saved by its name

        return dataclasses.asdict(dataclasses.replace(self, data=[source_name(item) for item in self.data]))


def parse_overrides(items: list[str]) -> dict:
    """`--set` pairs: ["lgbm.num_leaves=63", "target=budget"] -> {"lgbm": {"num_leaves": 63}, "target": "budget"}."""
    import yaml

    out: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        node = out
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return out
