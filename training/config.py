"""Training configuration: option groups with typed defaults and declared constraints
(training.options checks them), loaded from YAML/JSON and CLI overrides, saved with the run."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

from evaluation.thresholds import TARGETS
from serving._contract import DEFAULT_EDGE_CONTEXT_TOKENS, DEFAULT_MAX_CHARS
from serving.features._response_features import DEFAULT_MAX_RESPONSE_CHARS
from serving.features._spec import LEXICAL_MODES
from serving.scoring._novelty import UNFAMILIAR_POLICIES
from training.encoders import TIERS
from training.lexical import EXACT_WEIGHTINGS
from training.lexical import WEIGHTINGS as LEXICAL_WEIGHTINGS
from training.model import CALIBRATIONS, OBJECTIVES
from training.options import (
    FLAG,
    NAME,
    OPTIONAL_PATH,
    PATH,
    PATHS,
    TEXT,
    Check,
    Default,
    Rule,
    by,
    check,
    groups_of,
    integer,
    mapping,
    merged,
    needs,
    nested,
    number,
    one_of,
    option,
    options_of,
    preferring,
)
from training.partial import ESTIMATORS, HEAD_SHARING

LEXICAL_BLENDS = ("mixture", "stack")  # a blend's form (training.model.LexicalBlend)

# Where the logs are read, featurized and fitted (training.engines maps each to its module).
ENGINES = ("local", "dask")


DEFAULT_CV_FOLDS = 5
CV_FOLDS = Rule(
    lambda v: isinstance(v, int) and not isinstance(v, bool) and (v == 0 or 3 <= v <= 20),
    "must be 0 (a single split) or an integer in [3, 20]",
    2,
    (0, DEFAULT_CV_FOLDS),
)
LGBM = mapping("LightGBM parameters")
TARGET_OPTIONS = ("max_quality_drop", "cloud_budget", "fallback_catch_rate")  # the manifest's target, beside its kind


@dataclass
class Features:
    """What the router reads of a prompt (the manifest's feature_spec)."""

    tier: str = option(one_of(*TIERS), "static")  # embedding tier: static | transformer
    embedding_dim: int = option(integer(1), 32)  # PCA components kept from the embedding
    max_tokens: int | None = option(integer(8, empty=True), None)  # None: the tier's default
    max_chars: int = option(integer(64), DEFAULT_MAX_CHARS)  # text tokenized and scanned; bounds route() cost


@dataclass
class Split:
    """Which rows train, validate and test: a hash of the prompt (the manifest's split)."""

    val_share: float = option(number(0, 1, open_low=True, open_high=True), 0.15)
    test_share: float = option(number(0, 1), 0.15)
    salt: str = option(TEXT, "")
    offset: float = option(number(0, 1, open_high=True), 0.0)  # where the test split starts on the hash scale
    # cross-fitting's folds (training.crossval); 0: the quick single split; empty: 5 locally, 0 with Dask
    cv_folds: int | None = option(CV_FOLDS, None)
    # training prompts fitted (a prompt-hash sample); empty: all
    max_train_rows: int | None = option(integer(1, empty=True), 1_000_000)

    @property
    def hashed(self) -> dict:
        """How prompts are split: data.prepare.assign_splits' (and response_rows') keywords."""
        return {"val_share": self.val_share, "test_share": self.test_share, "salt": self.salt, "offset": self.offset}


@dataclass
class Label:
    """How two quality scores become the cloud-needed label (the manifest's label)."""

    margin_binary: float = option(number(0, 1), 0.0)
    margin_graded: float = option(number(0, 1), 0.1)  # judge scores: 1 point on 1-10 is 0.11


@dataclass
class Model:
    """The outcome heads: what they learn and how they are calibrated."""

    objective: str = option(one_of(*OBJECTIVES), "expected_gain")  # expected_gain (two outcome heads) | cloud_needed
    calibration: str = option(one_of(*CALIBRATIONS), "sigmoid")
    # auto | separate | shared outcome heads (training.partial)
    head_sharing: str = option(one_of(*HEAD_SHARING), "auto")
    # rows with one outcome: plug_in | ipw (training.partial)
    partial_estimator: str = option(one_of(*ESTIMATORS), "plug_in")
    max_ipw_weight: float = option(number(1), 20.0)  # ipw: 1 / propensity, clipped here
    precision_dropout: float = option(number(0, 1), 0.2)  # train rows shown without a declared precision


@dataclass
class Boosting:
    """The heads' LightGBM boosters."""

    rounds: int = option(integer(1), 2000)
    early_stopping_rounds: int = option(integer(1), 100)
    lgbm: dict[str, Any] = option(LGBM, factory=dict)  # over training.model.DEFAULT_LGBM


@dataclass
class Lexical:
    """Lexical evidence (training.lexical): each outcome's logistic-regression margin over the
    prompt's unigrams and hashed bigrams, computed in model.onnx (docs/training.md#options)."""

    # none | features (the trees' inputs) | blend (into each head); empty: blend where the rules let it run
    mode: str | None = option(one_of(*LEXICAL_MODES), None)
    blend: str = option(one_of(*LEXICAL_BLENDS), "stack")  # a blend's form (training.model)
    start: bool = option(FLAG, False)  # a stack's trees start boosting from their outcome's margin (init_score)
    weighting: str | None = option(one_of(*LEXICAL_WEIGHTINGS), None)  # empty: tfidf for a blend, mean for features
    c: float | None = option(number(0, open_low=True), None)  # inverse L2 regularization; empty: 1 (tfidf), 64
    folds: int = option(integer(2, 20), 5)  # out-of-fold margins' folds (features, start)
    # training prompts the regressions read (a prompt-hash sample, the same in both engines); empty: all
    sample_rows: int | None = option(integer(1, empty=True), 50_000)


@dataclass
class Routing:
    """The fallback thresholds' target (the manifest's target) and the routing limits."""

    target: str = option(one_of(*TARGETS), "quality")  # quality | budget
    max_quality_drop: float = option(number(0, 1), 0.01)
    cloud_budget: float = option(number(0, 1), 0.3)
    # assumed where no edge answers measure it (training.acceptance)
    fallback_catch_rate: float = option(number(0, 1), 0.5)
    min_rows_per_tag: int = option(integer(1), 200)  # validation rows a precision tag needs for its own thresholds
    # longer prompts go to the cloud first
    edge_context_tokens: int = option(integer(1, 10_000_000), DEFAULT_EDGE_CONTEXT_TOKENS)


@dataclass
class Acceptance:
    """The acceptance check, fitted when the logs carry edge answers (training.acceptance)."""

    false_reject_rate: float = option(number(0, 1), 0.12)  # share of good edge answers the threshold may reject
    good_quality: float = option(number(0, 1), 0.5)  # an edge answer with quality >= this is good
    min_rows: int = option(integer(1), 200)  # fewer answers (or < 20 of each kind): no model
    folds: int = option(integer(2, 20), 5)  # cross-fitting: calibration and threshold held out
    rounds: int = option(integer(1), 300)
    lgbm: dict[str, Any] = option(LGBM, factory=dict)
    # answers are cut to their last N characters (2,000)
    max_response_chars: int = option(integer(1), DEFAULT_MAX_RESPONSE_CHARS)


@dataclass
class Novelty:
    """The familiarity reference (training.novelty) and what unfamiliar prompts get."""

    share: float = option(number(0, 1), 0.03)  # share of in-distribution prompts flagged unfamiliar
    min_unseen_share: float = option(number(0, 1), 0.3)  # unseen-token share below this is never unfamiliar
    # edge_with_cloud_fallback | rule_table | learned (serving.scoring._novelty)
    unfamiliar_policy: str = option(one_of(*UNFAMILIAR_POLICIES), "edge_with_cloud_fallback")


@dataclass
class Endpoints:
    """The N-endpoint outcome models (`make endpoints`, training.endpoints): the router's
    features, split salt and validation share, boosting and calibration, and these."""

    # over boosting.lgbm. One thread: on a shared host, two LightGBM threads fitting small boosters
    # spent 10x longer spinning than fitting (13 s against 1.2 s for one 1,500-row booster at load 9).
    lgbm: dict[str, Any] = option(LGBM, factory=lambda: {"num_threads": 1})


@dataclass
class Engine:
    """Where the logs are read, featurized and fitted. Scale-out (dask): logs stay on the cluster
    in partitions; the client holds bounded, hash-chosen samples only."""

    name: str = option(one_of(*ENGINES), "local")  # local | dask
    # tcp://host:port; empty: $DASK_SCHEDULER, else a LocalCluster
    dask_scheduler: str | None = option(
        Rule(lambda v: v is None or isinstance(v, str), "must be empty or an address", 7), None
    )
    dask_workers: int | None = option(integer(1, empty=True), None)  # LocalCluster workers; empty: one per core
    # validated rows between passes; empty: cache_dir/dask-scratch
    dask_scratch: str | None = option(OPTIONAL_PATH, None)
    eval_sample_rows: int = option(integer(1), 200_000)  # val / test rows collected for thresholds and figures
    pca_sample_rows: int = option(integer(1), 50_000)  # training rows whose raw embeddings fit the projection


def _artifacts_beside(config) -> str:
    """`artifacts` beside a SQLite store, else mlruns/artifacts."""
    uri = str(config.mlflow.tracking_uri)
    store = uri.removeprefix("sqlite:///")
    return str(Path(store).parent / "artifacts") if store != uri else "mlruns/artifacts"


@dataclass
class MLflow:
    """The MLflow store, experiment and registered model of the run."""

    # $MLFLOW_TRACKING_URI when set (`make train MLRUNS=dir` sets it), else ./mlruns
    tracking_uri: str = option(
        NAME, factory=lambda: os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlruns/mlflow.db"
    )
    artifact_root: str = option(PATH, "")  # empty: `artifacts` beside a SQLite store, else mlruns/artifacts
    experiment: str = option(NAME, "edge-cloud-router")
    registered_model: str = option(NAME, "edge-cloud-router")


@dataclass
class Bundle:
    """What is written: the bundle's folder, its files, its signature and its parity check."""

    path: str = option(PATH, "artifacts/router")
    encoder: bool = option(FLAG, False)  # a static bundle also carries encoder.onnx (+47 MB): privacy="embedding"
    signing_key: str | None = option(OPTIONAL_PATH, None)  # Ed25519 private key (make keys): the bundle is signed
    parity_rows: int = option(integer(1), 5000)  # test rows the bundle is checked against (from raw text)


# The flat keys of before the groups -> their dotted keys (config files and --set still take them, with a
# warning): each group's flat keys, given as `old=new` where the option's name is not the flat key.
RENAMED = {
    old: f"{group}.{new or old}"
    for group, keys in {
        "features": "tier embedding_dim max_tokens max_chars",
        "split": "val_share test_share cv_folds max_train_rows split_salt=salt split_offset=offset",
        "label": "margin_binary margin_graded",
        "model": "objective calibration head_sharing partial_estimator max_ipw_weight precision_dropout",
        "boosting": "num_boost_round=rounds early_stopping_rounds lgbm",
        "lexical": "lexical=mode lexical_blend=blend lexical_start=start lexical_weighting=weighting lexical_c=c "
        "lexical_folds=folds lexical_sample_rows=sample_rows",
        "routing": "target max_quality_drop cloud_budget fallback_catch_rate min_rows_per_tag edge_context_tokens",
        "acceptance": "acceptance_false_reject_rate=false_reject_rate acceptance_good_quality=good_quality "
        "acceptance_min_rows=min_rows acceptance_folds=folds acceptance_rounds=rounds acceptance_lgbm=lgbm "
        "max_response_chars",
        "novelty": "novelty_share=share novelty_min_unseen_share=min_unseen_share unfamiliar_policy",
        "engine": "engine=name dask_scheduler dask_workers dask_scratch eval_sample_rows pca_sample_rows",
        "mlflow": "tracking_uri artifact_root experiment registered_model",
        "bundle": "bundle=path bundle_encoder=encoder signing_key parity_rows",
    }.items()
    for old, _, new in (key.partition("=") for key in keys.split())
}

BLEND_WHY = "the stack adds the margin the trees started from back into the graph's probability"
DASK_WHY = (
    "the trees would read every training row's out-of-fold margins, which the Dask engine does not compute on its "
    "workers (it trains lexical.mode=blend, the default)"
)


@dataclass
class TrainConfig:
    """Every knob of `make train`, in option groups. Defaults work on the shipped RouteLLM logs."""

    data: list = option(PATHS, factory=list)  # files, globs, folders, datasets; empty = default location
    max_reject_share: float = option(number(0, 1), 0.05)  # stop when more of the input is bad
    features: Features = field(default_factory=Features)
    split: Split = field(default_factory=Split)
    label: Label = field(default_factory=Label)
    model: Model = field(default_factory=Model)
    boosting: Boosting = field(default_factory=Boosting)
    lexical: Lexical = field(default_factory=Lexical)
    routing: Routing = field(default_factory=Routing)
    acceptance: Acceptance = field(default_factory=Acceptance)
    novelty: Novelty = field(default_factory=Novelty)
    endpoints: Endpoints = field(default_factory=Endpoints)
    engine: Engine = field(default_factory=Engine)
    bundle: Bundle = field(default_factory=Bundle)
    mlflow: MLflow = field(default_factory=MLflow)
    seed: int = option(integer(0), 0)  # LightGBM, PCA and precision dropout
    cache_dir: str = option(PATH, "data/cache")
    reports_dir: str = option(PATH, "reports/train")

    # Options left empty, filled in this order from the options before them.
    defaults: ClassVar = (
        Default("mlflow.artifact_root", _artifacts_beside),
        Default("lexical.mode", preferring("lexical.mode", "blend", "none")),
        Default("lexical.weighting", by("lexical.mode", {"blend": "tfidf"}, otherwise="mean")),
        Default("lexical.c", by("lexical.weighting", {"tfidf": 1.0}, otherwise=64.0)),
        Default("split.cv_folds", preferring("split.cv_folds", DEFAULT_CV_FOLDS, 0)),
    )
    # Rules across options, checked after each option's own.
    rules: ClassVar = (
        Check(
            "split.val_share",
            lambda c: c.split.val_share + c.split.test_share < 1,
            "needs split.val_share + split.test_share < 1",
            {"split.val_share": 0.5, "split.test_share": 0.5},
        ),
        *needs(
            f"""
model.head_sharing=shared needs model.objective={"|".join(k for k, heads in OBJECTIVES.items() if len(heads) > 1)}: one shared booster needs an objective with two or more heads
lexical.mode=features|blend needs features.tier=static: the margins are computed inside the fused model.onnx from the token ids, and the transformer tier's router.onnx reads only the projected features
lexical.mode=features needs engine.name=local: {DASK_WHY}
lexical.start=true needs engine.name=local: {DASK_WHY}
lexical.mode=blend needs model.objective=expected_gain: a blend mixes each outcome head with the lexical regression of the same outcome
lexical.mode=blend needs model.calibration=sigmoid|none: the graph mixes the calibrated probabilities, and only those calibrations are inside it
lexical.mode=features needs lexical.weighting={"|".join(EXACT_WEIGHTINGS)}: the trees split on the margins, which only those weightings compute bit-exactly in the graph
lexical.start=true needs lexical.mode=blend: {BLEND_WHY}
lexical.start=true needs lexical.blend=stack: {BLEND_WHY}
engine.name={"|".join(e for e in ENGINES if e != "local")} needs split.cv_folds=0: cross-fitting needs the local engine"""
        ),
    )

    def __post_init__(self):
        for name, group in groups_of(type(self)).items():  # each group its own (a mapping read as one)
            value = getattr(self, name)
            if isinstance(value, Mapping):
                setattr(self, name, group(**nested({name: value}, type(self), renamed={}).get(name, {})))
            elif isinstance(value, group):
                setattr(self, name, dataclasses.replace(value))
            else:
                raise ValueError(f"config {name}={value!r}: must be a mapping of {name}'s options")
        check(self)

    @classmethod
    def of(cls, *layers: "Mapping | TrainConfig", where: str = "config") -> "TrainConfig":
        """Options from `layers`, each on top of the ones before: TrainConfigs, or mappings of
        nested groups, dotted keys (`lexical.sample_rows`) or the flat keys of before the groups
        (a FutureWarning names the new key)."""
        given = [
            layer.options() if isinstance(layer, TrainConfig) else cls.nested(layer, where=where) for layer in layers
        ]
        return cls(**merged(*given))

    @classmethod
    def nested(cls, values: Mapping, *, where: str = "config", warn: bool = True) -> dict:
        """`values` as {group: {option: value}, option: value} (training.options.nested)."""
        return nested(values, cls, renamed=RENAMED, where=where, warn=warn)

    @classmethod
    def from_file(cls, path: str | Path, *overrides: Mapping) -> "TrainConfig":
        """Load YAML or JSON, then `overrides` on top; unknown keys are an error naming the key."""
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            values = yaml.safe_load(text) or {}
        else:
            values = json.loads(text)
        return cls.of(cls.nested(values, where=str(path)), *overrides)

    @classmethod
    def from_options(cls, path: str | Path | None, given: Mapping, *overrides: Mapping) -> "TrainConfig":
        """A command's options: the config file (if any), the options `given` (None: not given),
        then `overrides` (--set) on top."""
        given = {k: v for k, v in given.items() if v is not None}
        return cls.from_file(path, given, *overrides) if path else cls.of(given, *overrides)

    @classmethod
    def from_manifest(cls, manifest, *overrides: Mapping) -> "TrainConfig":
        """The settings a bundle was trained with (tier, label margins, split, calibration,
        threshold target, limits), as read from its manifest, then `overrides` on top."""
        spec, target = manifest.feature_spec, manifest.target
        settings = {
            "features": {k: getattr(spec, k) for k in ("tier", "embedding_dim", "max_tokens", "max_chars")},
            "model": {
                "objective": manifest.score.kind,
                "calibration": next(iter(manifest.calibration.values()))["method"],
            },
            "routing": {
                **({"target": target["kind"]} if "kind" in target else {}),
                **{k: target[k] for k in TARGET_OPTIONS if k in target},
                "edge_context_tokens": manifest.limits.edge_context_tokens,
            },
            # retraining from a bundle (leave-one-source-out) needs its split, not its cross-fitting
            "split": {
                **{k: v for k, v in manifest.split.items() if k in ("val_share", "test_share", "salt", "offset")},
                "cv_folds": 0,
            },
            "label": {k: v for k, v in manifest.label.items() if k in ("margin_binary", "margin_graded")},
            "novelty": {
                **({"unfamiliar_policy": manifest.novelty["policy"]} if "policy" in manifest.novelty else {}),
                **({"share": manifest.novelty["target_share"]} if "target_share" in manifest.novelty else {}),
            },
            "lexical": {"mode": spec.lexical},
        }
        return cls.of(settings, *overrides)

    def with_options(self, *layers: Mapping) -> "TrainConfig":
        """This configuration with `layers` on top (as `of`)."""
        return type(self).of(self, *layers)

    def options(self) -> dict:
        """Every option as given to the constructor: {group: {option: value}, option: value}."""
        return options_of(self)

    @property
    def rejects_path(self) -> Path:
        """Where the rejected rows of this run are written."""
        return Path(self.reports_dir) / "rejects.jsonl"

    def to_dict(self) -> dict:
        """The options as saved (MLflow's train_config.json, run.json): nested groups, a Dataset
        object among the logs by its name."""
        from data.hf_datasets import source_name

        values = {k: copy.deepcopy(v) for k, v in self.options().items() if k != "data"}
        return {"data": [source_name(item) for item in self.data], **values}


def parse_overrides(items: list[str]) -> dict:
    """`--set` pairs: ["boosting.lgbm.num_leaves=63", "routing.target=budget"] ->
    {"boosting": {"lgbm": {"num_leaves": 63}}, "routing": {"target": "budget"}}."""
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
