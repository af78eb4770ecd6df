"""The typed figures of an offline comparison, as evaluation.policies computes them and every reader takes them.
as_dict() gives the shapes metrics.json and bundle manifests have always had; from_dict() reads them back (a missing or
unknown key is an error that names it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="Record")


class Record:
    """as_dict / from_dict for a dataclass of plain values; an optional field (default None) is left
    out of as_dict when None, and None when from_dict's data lacks it."""

    what: ClassVar[str] = "figures"

    def as_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)  # type: ignore[call-overload]
        return {k: v for k, v in values.items() if v is not None or k not in _optional(type(self))}

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        return cls(**_fields_of(cls, data))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]


def _optional(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.default is None}


def _fields_of(cls, data: dict[str, Any]) -> dict[str, Any]:
    """`data`'s values of cls's fields: a clear error for a missing or unknown key."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.what}: expected a JSON object, got {type(data).__name__}")
    names = cls.names()
    missing = [n for n in names if n not in data and n not in _optional(cls)]
    unknown = [k for k in data if k not in names]
    if missing or unknown:
        problem = f"missing {', '.join(missing)}" if missing else f"unknown key {unknown[0]!r}"
        raise ValueError(f"{cls.what}: {problem} (expected {', '.join(names)})")
    return {n: data.get(n) for n in names}


@dataclass(frozen=True)
class Population(Record):
    """The evaluated rows, the qualities every policy is measured against, where the fallback's rates came from."""

    what: ClassVar[str] = "evaluated rows"
    rows: int
    cloud_needed_share: float
    all_edge_quality: float
    all_cloud_quality: float
    oracle_quality: float
    # measured_rows, assumed_rows, assumed_catch_rate (evaluation.fallback); None for pooled folds
    fallback_rates: dict[str, Any] | None = None


@dataclass(frozen=True)
class AtShare(Record):
    """A score's figures when its top `cloud_share` of requests go to the cloud."""

    what: ClassVar[str] = "figures at a cloud share"
    cloud_share: float
    quality: float
    quality_vs_all_cloud: float
    pgr: float
    misroute_rate: float
    under_routing: float
    over_routing: float


@dataclass(frozen=True)
class Cost(Record):
    """Expected $ under one cloud price: per request, in total, and against sending all to the cloud."""

    what: ClassVar[str] = "cost figures"
    per_request: float
    total: float
    reduction_vs_all_cloud: float


@dataclass(frozen=True)
class Latency(Record):
    """Expected latency on one edge device (ms)."""

    what: ClassVar[str] = "latency figures"
    mean_ms: float
    p95_ms: float


@dataclass(frozen=True)
class KeyFigures(Record):
    """What a training run keeps of a policy per split, and an evaluation per breakdown group."""

    what: ClassVar[str] = "policy figures"
    auc: float
    apgr: float
    cpt50: float
    cpt80: float
    cloud_share: float
    fallback_share: float
    misroute_rate: float
    under_routing: float
    over_routing: float
    quality: float
    quality_vs_all_cloud: float
    quality_with_fallback: float
    expected_cloud_calls: float


@dataclass(frozen=True)
class PolicyFigures(KeyFigures):
    """Everything measured of one policy on one set of rows."""

    pgr: float
    fallback_fires: float
    fallback_fires_in_zone: float
    fallback_recovered_quality: float
    cost: dict[str, Cost]  # by cloud price name
    latency: dict[str, Latency]  # by edge device
    at_matched_share: AtShare | None = None  # None for the fixed points (all-edge, all-cloud); their curve figures: NaN

    def key_figures(self) -> KeyFigures:
        return KeyFigures(**{name: getattr(self, name) for name in KeyFigures.names()})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyFigures:
        values = _fields_of(cls, data)
        matched = values["at_matched_share"]
        values["cost"] = {k: Cost.from_dict(v) for k, v in values["cost"].items()}
        values["latency"] = {k: Latency.from_dict(v) for k, v in values["latency"].items()}
        values["at_matched_share"] = AtShare.from_dict(matched) if matched is not None else None
        return cls(**values)


@dataclass(frozen=True)
class Comparison:
    """Every compared policy's figures on one Population."""

    population: Population
    matched_cloud_share: float  # the learned router's cloud-first share, where `at_matched_share` puts scored policies
    policies: dict[str, PolicyFigures]  # in evaluation.policies.POLICIES order

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.population.as_dict(),
            "matched_cloud_share": self.matched_cloud_share,
            "policies": {name: p.as_dict() for name, p in self.policies.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        if not isinstance(data, dict) or "policies" not in data or "matched_cloud_share" not in data:
            raise ValueError("a policy comparison needs `matched_cloud_share` and `policies`")
        return cls(
            Population.from_dict({k: v for k, v in data.items() if k not in ("matched_cloud_share", "policies")}),
            data["matched_cloud_share"],
            {name: PolicyFigures.from_dict(p) for name, p in data["policies"].items()},
        )

    def summary(self) -> SplitSummary:
        return SplitSummary(self.population, {name: p.key_figures() for name, p in self.policies.items()})


@dataclass(frozen=True)
class SplitSummary:
    """A split's (or breakdown group's) Population and each policy's KeyFigures; as a dict the
    policies sit beside the population's keys: {"rows": ..., "learned": {"apgr": ...}}."""

    population: Population
    policies: dict[str, KeyFigures]
    unfamiliar_share: float | None = None
    cross_validated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.population.as_dict(),
            **({"cross_validated": True} if self.cross_validated else {}),
            **({"unfamiliar_share": self.unfamiliar_share} if self.unfamiliar_share is not None else {}),
            **{name: p.as_dict() for name, p in self.policies.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SplitSummary:
        if not isinstance(data, dict):
            raise TypeError(f"a split summary must be a JSON object, got {type(data).__name__}")
        own = (*Population.names(), "unfamiliar_share", "cross_validated")
        return cls(
            Population.from_dict({k: v for k, v in data.items() if k in Population.names()}),
            {name: KeyFigures.from_dict(p) for name, p in data.items() if name not in own},
            unfamiliar_share=data.get("unfamiliar_share"),
            cross_validated=bool(data.get("cross_validated", False)),
        )


@dataclass(frozen=True)
class HeldOutSource:
    """Leave-one-source-out: one source's comparison by a router trained on the others, or that training's error."""

    figures: Comparison | None
    trained_on_rows: int | None = None
    unfamiliar_share: float | None = None
    in_distribution_apgr: float | None = None  # the bundle's own APGR on this source's rows
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.figures is None:
            return {"error": self.error}
        return {
            **self.figures.as_dict(),
            "trained_on_rows": self.trained_on_rows,
            "unfamiliar_share": self.unfamiliar_share,
            "in_distribution_apgr": self.in_distribution_apgr,
        }
