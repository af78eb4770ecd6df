"""`make evaluate`'s options: typed, validated, with the defaults of docs/baseline.md."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from evaluation.fallback import check_catch_rate
from evaluation.metrics import DEFAULT_CLOUD_COSTS, DEFAULT_EDGE_MS, CostModel, LatencyModel
from evaluation.off_policy import MIN_PROPENSITY
from evaluation.policies import POLICIES, check_policies
from serving.routing._validation import check_metadata

SPLIT_NOTES = {  # the splits `--split` takes, and what each holds
    "test": "rows the bundle never saw: same hash split as its training",
    "val": "the bundle's validation rows, used for early stopping, calibration and thresholds",
    "train": "the rows the bundle was fitted on: optimistic",
    "all": "every row, including those the bundle was fitted on: optimistic when the logs overlap",
}


@dataclass
class EvalConfig:
    """Every knob of `make evaluate`; defaults follow docs/baseline.md."""

    bundle: str = "artifacts/router"
    logs: list[str] = field(default_factory=list)  # files, globs, folders; empty = default location
    out: str = "reports/latest"
    split: str = "test"
    policies: list[str] = field(default_factory=lambda: list(POLICIES))
    catch_rate: float = 0.5  # share of edge failures visible at run time
    edge_cost: float = 0.0
    cloud_cost: dict = field(default_factory=lambda: dict(DEFAULT_CLOUD_COSTS))
    edge_ms: dict = field(default_factory=lambda: dict(DEFAULT_EDGE_MS))
    cloud_ms: float = 200.0
    network_ms: float = 50.0
    calibration_bins: int = 10
    rule_weight_step: float = 0.1
    max_reject_share: float = 0.05
    min_propensity: float = MIN_PROPENSITY  # off-policy estimates leave out requests below it
    batch_size: int = 256
    leave_one_source_out: bool = False
    holdout_sources: list[str] = field(default_factory=list)  # empty = every source
    loso_overrides: dict = field(default_factory=dict)  # TrainConfig options for those trainings
    cache_dir: str = "data/cache"
    mlflow: bool = True
    # engine=dask: logs read, validated and split on a Dask cluster; scored here, a hash sample of at most
    # `sample_rows` rows per split (the train and val rows that fit the tuned rule table and the reference too).
    engine: str = "local"
    dask_scheduler: str | None = None  # empty: $DASK_SCHEDULER, else a LocalCluster
    dask_workers: int | None = None
    sample_rows: int = 200_000
    # A policy file (serving.policy) applied after the learned router, as the SDK applies it: its
    # per-rule counts and effect (evaluation.rules_effect); `metadata` stands for every request's.
    policy: str | None = None
    metadata: dict = field(default_factory=dict)

    def __post_init__(self):
        # A single value (e.g. `--set policies=oracle,random`) stands for a list, not its characters.
        for name in ("logs", "policies", "holdout_sources"):
            if isinstance(getattr(self, name), str):
                setattr(self, name, getattr(self, name).split(",") if name == "policies" else [getattr(self, name)])
        if not isinstance(self.engine, str):  # the engine registry (training.engines) checks the name
            raise ValueError(f"engine={self.engine!r} must be an engine name")
        if not isinstance(self.split, str) or self.split not in SPLIT_NOTES:
            raise ValueError(f"split={self.split!r} is unknown; choose one of {', '.join(SPLIT_NOTES)}")
        check_catch_rate(self.catch_rate)  # a bool is not a rate
        if not isinstance(self.min_propensity, (int, float)) or not 0 < self.min_propensity <= 1:
            raise ValueError(f"min_propensity={self.min_propensity!r} must be a number in (0, 1]")
        for name in ("calibration_bins", "batch_size", "sample_rows"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be an integer >= 1")
        self.policies = check_policies(self.policies)
        if self.policy is not None and not isinstance(self.policy, str):
            raise ValueError(f"policy={self.policy!r} must be the path of a policy file")
        try:
            check_metadata(self.metadata)
        except TypeError as exc:
            raise ValueError(f"metadata: {exc}") from None
        self.cost_model(), self.latency_model()  # validates the numbers

    @classmethod
    def from_options(cls, **options) -> "EvalConfig":
        """Options by name; dict options (cloud_cost, edge_ms) are merged into their defaults."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown option {unknown[0]!r}; known: {', '.join(sorted(known))}")
        for f in dataclasses.fields(cls):
            if f.name in ("cloud_cost", "edge_ms") and isinstance(options.get(f.name), dict):
                options[f.name] = {**f.default_factory(), **options[f.name]}
        return cls(**options)

    def cost_model(self) -> CostModel:
        return CostModel(edge=self.edge_cost, cloud=dict(self.cloud_cost))

    def latency_model(self) -> LatencyModel:
        return LatencyModel(edge_ms=dict(self.edge_ms), cloud_ms=self.cloud_ms, network_ms=self.network_ms)
