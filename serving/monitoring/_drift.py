"""Drift: is the traffic a bundle serves still like the traffic it was trained on?

A bundle's `DriftReference` (DRIFT_REFERENCE_FILE) summarises its held-out rows as the bundle scores
them; `drift_report` compares an outcome log's request records (with their feedback) with it, by PSI,
KS and rate-change checks, and says stable, watch or retrain (docs/observability.md#drift: what is
kept, each check and its thresholds). Numpy only: the SDK and the proxy run it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

import numpy as np

from serving._contract import CLOUD, DRIFT_REFERENCE_FILE, EDGE, PRECISIONS, ZONES
from serving._json_values import finite_number
from serving._router_error import RouterError
from serving.features._documents import quoted
from serving.monitoring._outcome_log import FILE_PATTERN, LOG_FORMAT, printable, read_log_lines

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from serving._json_types import JSONObject
    from serving.bundle._bundle import Bundle
    from serving.execution._execute import Step
    from serving.routing._decision import Decision


REFERENCE_FORMAT = "edge-cloud-router/drift-reference/1"
BINS = 10  # deciles of the reference
QUANTILE_POINTS = 200  # the reference's quantiles kept for the KS test (its CDF to within 1/200)
PSI_FLOOR = 1e-4  # an empty bin's share, so that ln() stays finite
UNDECLARED = "undeclared"
FAILED_BELOW = 0.5  # an edge answer of quality below this is a failure

STABLE, WATCH, RETRAIN, UNKNOWN, SKIPPED = "stable", "watch", "retrain", "unknown", "skipped"
VERDICTS = (STABLE, WATCH, RETRAIN, UNKNOWN)
_RANK = {STABLE: 0, WATCH: 1, RETRAIN: 2}

# What the records carry, and whether the bundle computed it (compared on its own records only).
NUMERIC = ("score", "p_edge", "p_cloud", "novelty", "n_tokens", "prompt_chars")
CATEGORICAL = {"precision": (*PRECISIONS, UNDECLARED), "zone": ZONES}
RATES = ("unfamiliar", "acceptance", "edge_failure")
BUNDLE_COMPUTED = {"score", "p_edge", "p_cloud", "novelty", "zone", "unfamiliar", "acceptance", "edge_failure"}
# The direction of a rate that hurts: +1 a rise, -1 a drop.
_HARMFUL = {"unfamiliar": 1, "acceptance": -1, "edge_failure": 1}


class DriftInputError(RouterError, ValueError):
    """Records or a reference drift_report cannot read: the message says which and why."""


def _finite(values: ArrayLike) -> NDArray[np.float64]:
    array = np.asarray(values, dtype=np.float64).ravel()
    return array[np.isfinite(array)]


def _rounded(values: Iterable[float]) -> list[float]:
    return [float(f"{v:.7g}") for v in values]


@dataclass(frozen=True)
class Distribution:
    """A numeric value's reference: `cuts` split it into bins (bin i holds cuts[i-1] < x <= cuts[i]),
    `shares` is the reference's share in each, `quantiles` its values at levels (i + 0.5) / k."""

    cuts: tuple[float, ...]
    shares: tuple[float, ...]
    quantiles: tuple[float, ...]
    n: int

    @classmethod
    def of(cls, values: ArrayLike, bins: int = BINS) -> "Distribution":
        x = _finite(values)
        if not len(x):
            raise ValueError("no finite values to summarise")
        cuts = np.unique(np.quantile(x, np.arange(1, bins) / bins))
        shares = np.bincount(np.searchsorted(cuts, x, side="left"), minlength=len(cuts) + 1) / len(x)
        levels = (np.arange(QUANTILE_POINTS) + 0.5) / QUANTILE_POINTS
        return cls(tuple(_rounded(cuts)), tuple(_rounded(shares)), tuple(_rounded(np.quantile(x, levels))), len(x))

    def shares_of(self, values: ArrayLike) -> NDArray[np.float64]:
        """The share of `values` in each of the reference's bins."""
        x = _finite(values)
        counts = np.bincount(np.searchsorted(np.asarray(self.cuts), x, side="left"), minlength=len(self.shares))
        return counts / max(len(x), 1)

    def to_dict(self) -> JSONObject:
        return {"cuts": list(self.cuts), "shares": list(self.shares), "quantiles": list(self.quantiles), "n": self.n}

    @classmethod
    def from_dict(cls, data: Any, path: str) -> "Distribution":
        if not isinstance(data, dict):
            raise DriftInputError(f"{path}: must be an object")
        cuts, shares, quantiles = (_numbers(data.get(k), f"{path}.{k}") for k in ("cuts", "shares", "quantiles"))
        if len(shares) != len(cuts) + 1 or any(b <= a for a, b in zip(cuts, cuts[1:])) or not quantiles:
            raise DriftInputError(f"{path}: needs increasing cuts, one more share than cuts, and quantiles")
        return cls(cuts, shares, quantiles, _count(data.get("n"), f"{path}.n"))


@dataclass(frozen=True)
class Rate:
    """A share of `n` reference rows."""

    value: float
    n: int


def _numbers(value: Any, path: str) -> tuple[float, ...]:
    if not isinstance(value, list) or any(finite_number(v) is None for v in value):
        raise DriftInputError(f"{path}: must be a list of finite numbers")
    return tuple(float(v) for v in value)


def _count(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DriftInputError(f"{path}: must be a positive integer, got {value!r}")
    return value


def _share(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise DriftInputError(f"{path}: must be a number in [0, 1], got {value!r}")
    return float(value)


@dataclass(frozen=True)
class DriftReference:
    """What a bundle's training traffic looked like, through the bundle's eyes (module doc)."""

    model_version: str
    rows: int
    numeric: dict[str, Distribution]
    categorical: dict[str, dict[str, float]]  # name -> category -> share
    rates: dict[str, Rate]
    source: str = ""  # which rows it summarises

    @classmethod
    def build(
        cls,
        *,
        model_version: str,
        score: ArrayLike,
        precisions: Sequence[str | None],
        zones: Sequence[str],
        prompt_chars: ArrayLike | None = None,
        n_tokens: ArrayLike | None = None,
        p_edge: ArrayLike | None = None,
        p_cloud: ArrayLike | None = None,
        novelty: ArrayLike | None = None,
        edge_quality: ArrayLike | None = None,
        rejected: ArrayLike | None = None,
        source: str = "",
    ) -> "DriftReference":
        """The reference of held-out rows, aligned arrays; None for what the bundle lacks (no heads,
        no familiarity reference, no acceptance check). `rejected`: the share of each row's logged
        edge answers the acceptance check rejects, NaN where the row has none."""
        scores = np.asarray(score, dtype=np.float64)
        n = len(scores)
        if n == 0:
            raise ValueError("a drift reference needs at least one row")
        values = {"score": scores, "p_edge": p_edge, "p_cloud": p_cloud, "novelty": novelty}
        values.update({"n_tokens": n_tokens, "prompt_chars": prompt_chars})
        numeric = {k: Distribution.of(v) for k, v in values.items() if v is not None and len(_finite(v))}
        categorical = {
            "precision": _category_shares([p or UNDECLARED for p in precisions], CATEGORICAL["precision"]),
            "zone": _category_shares(list(zones), CATEGORICAL["zone"]),
        }
        rates = {}
        if novelty is not None:
            rates["unfamiliar"] = _rate(_finite(novelty) > 1.0)
        edge_first = np.asarray([z != CLOUD for z in zones])
        if rejected is not None:
            answered = _finite(np.asarray(rejected, dtype=np.float64)[edge_first])
            rates["acceptance"] = Rate(float(1.0 - answered.mean()), len(answered)) if len(answered) else None
        if edge_quality is not None:
            quality = _finite(np.asarray(edge_quality, dtype=np.float64)[edge_first])
            rates["edge_failure"] = _rate(quality < FAILED_BELOW)
        return cls(model_version, n, numeric, categorical, {k: v for k, v in rates.items() if v is not None}, source)

    def to_dict(self) -> JSONObject:
        return {
            "format": REFERENCE_FORMAT,
            "model_version": self.model_version,
            "rows": self.rows,
            "source": self.source,
            "numeric": {k: v.to_dict() for k, v in self.numeric.items()},
            "categorical": self.categorical,
            "rates": {k: asdict(v) for k, v in self.rates.items()},
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n").encode()

    @classmethod
    def from_dict(cls, data: Any) -> "DriftReference":
        """A reference's JSON form, checked; DriftInputError says what is wrong."""
        if not isinstance(data, dict) or data.get("format") != REFERENCE_FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise DriftInputError(f"not a drift reference of format {REFERENCE_FORMAT!r} (format: {got!r})")
        if not isinstance(data.get("model_version"), str) or not isinstance(data.get("source", ""), str):
            raise DriftInputError("drift reference: model_version and source must be strings")
        numeric, categorical, rates = (data.get(k) for k in ("numeric", "categorical", "rates"))
        if not (isinstance(numeric, dict) and isinstance(categorical, dict) and isinstance(rates, dict)):
            raise DriftInputError("drift reference: numeric, categorical and rates must be objects")
        unknown = (set(numeric) - set(NUMERIC)) | (set(categorical) - set(CATEGORICAL)) | (set(rates) - set(RATES))
        if unknown:
            raise DriftInputError(f"drift reference: unknown value(s) {', '.join(sorted(unknown))}")
        for name, shares in categorical.items():
            if not isinstance(shares, dict) or set(shares) != set(CATEGORICAL[name]):
                raise DriftInputError(
                    f"drift reference: categorical.{name} must give a share of each of {CATEGORICAL[name]}"
                )
        for name, rate in rates.items():
            if not isinstance(rate, dict):
                raise DriftInputError(f"drift reference: rates.{name} must be an object")
        return cls(
            model_version=data["model_version"],
            rows=_count(data.get("rows"), "drift reference rows"),
            numeric={k: Distribution.from_dict(v, f"drift reference numeric.{k}") for k, v in numeric.items()},
            categorical={
                k: {c: _share(s, f"drift reference categorical.{k}.{c}") for c, s in v.items()}
                for k, v in categorical.items()
            },
            rates={
                k: Rate(_share(v.get("value"), f"drift reference rates.{k}"), _count(v.get("n"), f"rates.{k}.n"))
                for k, v in rates.items()
            },
            source=data.get("source", ""),
        )

    @classmethod
    def from_bytes(cls, raw: bytes) -> "DriftReference":
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise DriftInputError(f"drift reference is not valid JSON: {exc}"[:300]) from None
        return cls.from_dict(data)

    @classmethod
    def from_bundle(cls, bundle: Bundle) -> "DriftReference | None":
        """The verified bundle's reference; None when it carries none (trained before drift references)."""
        if DRIFT_REFERENCE_FILE not in bundle.manifest.files:
            return None
        return cls.from_bytes(bundle.content(DRIFT_REFERENCE_FILE))


def _category_shares(values: Sequence[str], categories: Sequence[str]) -> dict[str, float]:
    n = max(len(values), 1)
    return {c: float(f"{sum(v == c for v in values) / n:.7g}") for c in categories}


def _rate(flags: NDArray[np.bool_]) -> Rate | None:
    return Rate(float(flags.mean()), len(flags)) if len(flags) else None


# The statistics.
def psi(reference: ArrayLike, current: ArrayLike, floor: float = PSI_FLOOR) -> float:
    """Population stability index of two share vectors over the same bins: the sum of
    (current - reference) * ln(current / reference), shares floored at `floor`."""
    expected = np.maximum(np.asarray(reference, dtype=np.float64), floor)
    actual = np.maximum(np.asarray(current, dtype=np.float64), floor)
    if expected.shape != actual.shape or expected.ndim != 1:
        raise ValueError(f"share vectors of different shapes: {expected.shape} and {actual.shape}")
    return float(np.sum((actual - expected) * np.log(actual / expected)))


def ks_test(reference_quantiles: ArrayLike, reference_n: int, current: ArrayLike) -> tuple[float, float]:
    """(D, p): the two-sample Kolmogorov-Smirnov statistic of `current` against a reference known by
    evenly spaced quantiles (its CDF to within one step), and the asymptotic p-value with Stephens'
    small-sample correction (Numerical Recipes, 3rd ed., 14.3.3) for samples of `reference_n` and len(current)."""
    ref = np.sort(_finite(reference_quantiles))
    cur = np.sort(_finite(current))
    if not len(ref) or not len(cur):
        raise ValueError("the KS test needs values on both sides")
    points = np.concatenate([ref, cur])
    gaps = np.searchsorted(ref, points, "right") / len(ref) - np.searchsorted(cur, points, "right") / len(cur)
    d = float(np.max(np.abs(gaps)))
    effective = math.sqrt(reference_n * len(cur) / (reference_n + len(cur)))
    lam = (effective + 0.12 + 0.11 / effective) * d
    if lam < 0.2:
        return d, 1.0
    k = np.arange(1, 101)
    p = 2.0 * float(np.sum((-1.0) ** (k - 1) * np.exp(-2.0 * k**2 * lam**2)))
    return d, min(max(p, 0.0), 1.0)


@dataclass(frozen=True)
class DriftThresholds:
    """When a check says watch or retrain (docs/observability.md#drift for each statistic)."""

    psi_watch: float = 0.1
    psi_retrain: float = 0.25
    ks_alpha: float = 0.01
    ks_min_statistic: float = 0.1
    rate_watch: float = 0.05  # a harmful change of a rate, in points, at the near end of its 95% interval
    rate_retrain: float = 0.10
    min_records: int = 100  # requests needed before a distribution is compared
    min_outcomes: int = 30  # requests with the outcome needed before a rate is compared

    def __post_init__(self) -> None:
        for low, high in (("psi_watch", "psi_retrain"), ("rate_watch", "rate_retrain")):
            a, b = getattr(self, low), getattr(self, high)
            if isinstance(a, bool) or isinstance(b, bool) or not 0 < a <= b:
                raise ValueError(f"{low}={a!r}, {high}={b!r}: need 0 < {low} <= {high}")
        if not 0 < self.ks_alpha < 1 or not 0 <= self.ks_min_statistic <= 1:
            raise ValueError(f"ks_alpha={self.ks_alpha!r} must be in (0, 1), ks_min_statistic in [0, 1]")
        for name in ("min_records", "min_outcomes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be an integer >= 1")


@dataclass(frozen=True)
class Check:
    """One comparison: `statistic` names what `value` is (psi, ks, change); `status` is stable,
    watch, retrain, or skipped (value None; `note` says why)."""

    name: str
    statistic: str
    value: float | None
    status: str
    reference: float | None = None  # for a rate: the reference's, and the log's
    current: float | None = None
    n: int = 0  # the records compared
    p_value: float | None = None
    note: str = ""


@dataclass(frozen=True)
class DriftReport:
    """drift_report's answer; as_dict() is its JSON form (make drift, the dashboard)."""

    verdict: str
    checks: tuple[Check, ...]
    reason: str
    records: int  # request records read
    compared: int  # of them, logged by the reference's bundle version
    model_version: str | None  # the reference's
    reference_missing: bool
    thresholds: DriftThresholds = field(default_factory=DriftThresholds)
    left_out: tuple[str, ...] = ()  # lines read_records left out ("file line N: why"): a last line cut short

    def as_dict(self) -> JSONObject:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "checks": [asdict(c) for c in self.checks],
            "records": self.records,
            "compared": self.compared,
            "model_version": self.model_version,
            "reference": "missing" if self.reference_missing else "present",
            "thresholds": asdict(self.thresholds),
            "left_out": list(self.left_out),
        }


# Reading the records.
@dataclass
class _Current:
    """The values of the request records, per name, and whether the reference's bundle version logged each."""

    records: int = 0
    values: dict[str, list[Any]] = field(default_factory=dict)
    own: list[bool] = field(default_factory=list)

    def add(self, name: str, value: Any) -> None:
        self.values.setdefault(name, []).append(value)

    def of(self, name: str, own_only: bool) -> list[Any]:
        return [v for v, o in zip(self.values.get(name, []), self.own) if o or not own_only]


def _number(record: Mapping[str, Any], key: str, where: str) -> float | None:
    value = record.get(key)
    if value is None:
        return None
    number = finite_number(value)
    if number is None:
        raise DriftInputError(f"{where}: {key} must be a finite number or null, got {quoted(value)}")
    return number


def _n_tokens(record: Mapping[str, Any], where: str) -> float | None:
    """The bundle's token estimate: the record's n_tokens (Decision.n_tokens), else from the logged
    model inputs (privacy modes without text, in logs written before records carried n_tokens)."""
    if record.get("n_tokens") is not None:
        return _number(record, "n_tokens", where)
    features = record.get("features")
    if not isinstance(features, dict):
        return None
    names, scalars = features.get("feature_names"), features.get("scalars")
    if not isinstance(names, list) or not isinstance(scalars, list) or "n_tokens" not in names:
        return None
    index = names.index("n_tokens")
    return finite_number(scalars[index]) if index < len(scalars) else None


def _read(records: Iterable[Mapping[str, Any]], model_version: str | None, left_out: Sequence[str] = ()) -> _Current:
    order: list[Mapping[str, Any]] = []
    edge_feedback: dict[str, float] = {}
    outcome_feedback: dict[str, dict[str, Any]] = {}  # request_id -> feedback `outcomes`, later over earlier
    for index, record in enumerate(records):
        where = f"record {index + 1}"
        if not isinstance(record, Mapping):
            raise DriftInputError(f"{where}: not a JSON object but {type(record).__name__}")
        if record.get("log") != LOG_FORMAT:
            raise DriftInputError(
                f"{where}: not an outcome record of {LOG_FORMAT!r} (its log field: {quoted(record.get('log'))})"
            )
        if record.get("type") == "request":
            order.append(record)
        elif record.get("type") == "feedback" and isinstance(record.get("request_id"), str):
            quality = _number(record, "edge_quality", where)
            if quality is not None:  # records come in time order: later feedback wins
                edge_feedback[record["request_id"]] = quality
            if isinstance(record.get("outcomes"), Mapping):
                outcome_feedback.setdefault(record["request_id"], {}).update(record["outcomes"])
    if not order:
        raise DriftInputError(
            "no request records: drift needs the outcome log of a router's execute() calls"
            + (f" (left out: {'; '.join(left_out[:3])})" if left_out else "")
        )
    current = _Current(records=len(order))
    for index, record in enumerate(order):
        where = f"request record {index + 1}"
        current.own.append(model_version is not None and record.get("model_version") == model_version)
        for key in ("score", "p_edge", "p_cloud", "novelty"):
            current.add(key, _number(record, key, where))
        novelty = _number(record, "novelty", where)
        current.add("unfamiliar", None if novelty is None else novelty > 1.0)
        current.add("n_tokens", _n_tokens(record, where))
        prompt = record.get("prompt")
        current.add("prompt_chars", float(len(prompt)) if isinstance(prompt, str) else None)
        precision = record.get("precision")
        current.add("precision", precision if precision in PRECISIONS else UNDECLARED)
        zone = record.get("zone")
        current.add("zone", zone if zone in ZONES else None)
        accept = record.get("accept")
        current.add("acceptance", bool(accept.get("accepted")) if isinstance(accept, dict) else None)
        request_id = record.get("request_id")
        logged = _number(record, "edge_quality", where)
        quality = edge_feedback.get(request_id, logged) if isinstance(request_id, str) else logged
        names = record.get("endpoints")
        if isinstance(names, list) and names != [EDGE, CLOUD]:  # logged by an N-endpoint bundle
            quality = _first_outcome(record, outcome_feedback.get(request_id) if isinstance(request_id, str) else None)
        edge_first = zone in ZONES and zone != CLOUD
        current.add("edge_failure", None if quality is None or not edge_first else quality < FAILED_BELOW)
    return current


def _first_outcome(record: Mapping[str, Any], feedback: Mapping[str, Any] | None) -> float | None:
    """The quality of an N-endpoint request's first endpoint (`endpoint`): its feedback's, else its observed
    failure (`outcomes`), else None; edge_failure counts it for edge-first zones, as edge_quality for two."""
    first = record.get("endpoint")
    logged = record.get("outcomes")
    for source in (feedback, logged if isinstance(logged, Mapping) else None):
        if source is not None and isinstance(first, str) and source.get(first) is not None:
            return finite_number(source[first])
    return None


# What drift reads of a record (_read, rescore): read_records keeps these fields only, so that the
# answers, steps and logged model inputs of a large log are not held while it is compared.
READ_FIELDS = (
    "log",
    "type",
    "request_id",
    "time",
    "model_version",
    "score",
    "p_edge",
    "p_cloud",
    "novelty",
    "n_tokens",
    "prompt",
    "precision",
    "zone",
    "accept",
    "edge_quality",
    "endpoint",
    "endpoints",
    "outcomes",
)


def _kept(record: JSONObject) -> JSONObject:
    """The fields of `record` drift reads (READ_FIELDS); of `features`, the scalars' names and values
    (_n_tokens), of `accept` its verdict."""
    kept: JSONObject = {key: record[key] for key in READ_FIELDS if key in record}
    accept, features = record.get("accept"), record.get("features")
    if isinstance(accept, dict):
        kept["accept"] = {"accepted": accept.get("accepted")}
    if isinstance(features, dict) and record.get("n_tokens") is None:
        kept["features"] = {"feature_names": features.get("feature_names"), "scalars": features.get("scalars")}
    return kept


def read_records(path: str, left_out: list[str] | None = None) -> list[JSONObject]:
    """The records of an outcome log folder (read_log_lines), in file order, with the fields drift
    reads (READ_FIELDS). DriftInputError naming the file and line for a folder without log files and
    for a file or line read_log_lines cannot use; a file's last line cut short (a writer killed
    mid-write, or still at work) is left out, and said so in `left_out` ("file line N: why")."""
    if not Path(path).is_dir() or not any(Path(path).glob(FILE_PATTERN)):
        raise DriftInputError(f"{path}: no {FILE_PATTERN} files (an OutcomeLog folder is needed)")
    out: list[JSONObject] = []
    for line in read_log_lines(path):
        if line.record is not None:
            out.append(_kept(line.record))
            continue
        # the file name escaped: make drift and make promote print the message to a terminal
        where = printable(f"{line.file} line {line.line}" if line.line else line.file)
        if line.cut_short:
            if left_out is not None:
                left_out.append(f"{where}: the last line, cut short ({line.problem})")
        else:
            raise DriftInputError(f"{where}: {line.problem}")
    return out


# The report.
def _status_of(value: float, watch: float, retrain: float) -> str:
    return RETRAIN if value >= retrain else WATCH if value >= watch else STABLE


def _skipped(name: str, statistic: str, note: str, n: int = 0) -> Check:
    return Check(name, statistic, None, SKIPPED, n=n, note=note)


def _numeric_checks(reference: DriftReference, current: _Current, limits: DriftThresholds) -> list[Check]:
    checks = []
    for name in NUMERIC:
        dist = reference.numeric.get(name)
        values = _finite([v for v in current.of(name, name in BUNDLE_COMPUTED) if v is not None])
        if dist is None:
            if len(values):
                checks.append(_skipped(name, "psi", "the reference has no such values", len(values)))
            continue
        if len(values) < limits.min_records:
            if name not in ("n_tokens", "prompt_chars") or len(values):  # one of the two is never logged
                checks.append(_skipped(name, "psi", f"{len(values)} records, {limits.min_records} needed", len(values)))
            continue
        value = psi(dist.shares, dist.shares_of(values))
        checks.append(Check(name, "psi", value, _status_of(value, limits.psi_watch, limits.psi_retrain), n=len(values)))
        if name == "score":
            d, p = ks_test(dist.quantiles, dist.n, values)
            flagged = p < limits.ks_alpha and d >= limits.ks_min_statistic
            checks.append(Check("score", "ks", d, WATCH if flagged else STABLE, n=len(values), p_value=p))
    for name, categories in CATEGORICAL.items():
        shares = reference.categorical.get(name)
        seen: list[str] = [v for v in current.of(name, name in BUNDLE_COMPUTED) if v is not None]
        if shares is None:
            continue
        if len(seen) < limits.min_records:
            checks.append(_skipped(name, "psi", f"{len(seen)} records, {limits.min_records} needed", len(seen)))
            continue
        now = _category_shares(seen, categories)
        value = psi([shares[c] for c in categories], [now[c] for c in categories])
        checks.append(Check(name, "psi", value, _status_of(value, limits.psi_watch, limits.psi_retrain), n=len(seen)))
    return checks


def _rate_checks(reference: DriftReference, current: _Current, limits: DriftThresholds) -> list[Check]:
    checks = []
    for name in RATES:
        flags = [bool(v) for v in current.of(name, True) if v is not None]
        base = reference.rates.get(name)
        if base is None:
            if flags:
                checks.append(_skipped(name, "change", "the reference has no such rate", len(flags)))
            continue
        if len(flags) < limits.min_outcomes:
            note = f"{len(flags)} requests with it, {limits.min_outcomes} needed"
            checks.append(Check(name, "change", None, SKIPPED, reference=base.value, n=len(flags), note=note))
            continue
        now = float(np.mean(flags))
        change = (now - base.value) * _HARMFUL[name]
        se = math.sqrt(base.value * (1 - base.value) / base.n + now * (1 - now) / len(flags))
        sure = change - 1.96 * se  # the near end of the 95% interval of the harmful change
        status = _status_of(sure, limits.rate_watch, limits.rate_retrain)
        checks.append(Check(name, "change", change, status, reference=base.value, current=now, n=len(flags)))
    return checks


def drift_report(
    reference: DriftReference | None,
    records: Iterable[Mapping[str, Any]],
    thresholds: DriftThresholds | None = None,
    *,
    left_out: Sequence[str] = (),
) -> DriftReport:
    """Compare an outcome log's records (dicts as read from its JSON lines: request and feedback records;
    shadow records are ignored) with a bundle's reference (module doc). DriftInputError for no request
    records or a record of another log format. `left_out`: lines read_records left out, for the report."""
    limits = thresholds or DriftThresholds()
    version = reference.model_version if reference is not None else None
    current = _read(records, version, left_out)
    skipped = tuple(left_out)
    if reference is None:
        reason = (
            "the bundle carries no drift reference (trained before drift references): retrain it to compare its traffic"
        )
        return DriftReport(UNKNOWN, (), reason, current.records, 0, None, True, limits, skipped)
    compared = sum(current.own)
    checks = _numeric_checks(reference, current, limits) + _rate_checks(reference, current, limits)
    judged = [c for c in checks if c.status in _RANK]
    verdict = max((c.status for c in judged), key=_RANK.__getitem__, default=STABLE)
    if not judged:
        reason = "nothing could be compared: too few records (see each check's note)"
        verdict = UNKNOWN
    elif verdict == STABLE:
        reason = f"{len(judged)} checks within their thresholds"
    else:
        worst = [f"{c.name} {c.statistic} {c.value:.3g}" for c in judged if c.status == verdict and c.value is not None]
        reason = ", ".join(worst)
    if compared < current.records:
        reason += (
            f"; {current.records - compared} of {current.records} requests were logged by another bundle version "
            "(or the rule table): compared on what does not depend on the bundle only"
        )
    if skipped:
        reason += f"; {len(skipped)} line(s) left out, a file's last line cut short: {skipped[0]}"
    return DriftReport(verdict, tuple(checks), reason, current.records, compared, version, False, limits, skipped)


def decision_record(decision: Decision, steps: Sequence[Step]) -> JSONObject:
    """What drift reads of one request, from its decision and calls, shaped as an outcome log's request
    record without any text (the proxy dashboard's live window). The first endpoint's failure (an error or
    a timeout) is its outcome 0: edge_quality for two endpoints, `outcomes` for N, as _read reads them."""
    accept = next((step for step in steps if step.name == "accept"), None)
    first = next((step for step in steps if step.name == decision.endpoint), None)
    failed = 0.0 if first is not None and first.status in ("error", "timeout") else None
    verdict = (
        {"accepted": accept.status == "ok"} if accept is not None and accept.status in ("ok", "rejected") else None
    )
    record: JSONObject = {
        "log": LOG_FORMAT,
        "type": "request",
        "model_version": decision.model_version,
        "score": decision.score,
        "zone": decision.zone,
        "p_edge": decision.p_edge,
        "p_cloud": decision.p_cloud,
        "novelty": decision.novelty,
        "precision": decision.precision,
        "n_tokens": decision.n_tokens,
        "accept": verdict,
    }
    if decision.cascade[0] not in (EDGE, CLOUD):  # an N-endpoint bundle: the first endpoint's outcome
        record["endpoint"] = decision.endpoint
        record["endpoints"] = list(decision.expected or decision.cascade)
        record["outcomes"] = {decision.endpoint: failed} if failed is not None else None
    else:
        record["edge_quality"] = failed if decision.endpoint == EDGE else None
    return record


class _Routes(Protocol):
    """What rescore needs of a router (serving.routing._router.Router, which imports this module)."""

    def route_batch(self, prompts: Sequence[str], precisions: Sequence[str | None] | None = None) -> list[Decision]: ...


def rescore(records: Iterable[Mapping[str, Any]], router: _Routes) -> list[JSONObject]:
    """The records with `router`'s decision (score, probabilities, novelty, zone, model_version) for each
    request record that kept its prompt text, others as they are: another bundle's log, made comparable with
    this bundle's reference (acceptance verdicts and outcomes stay those of the bundle that served)."""
    out = [dict(r) for r in records]
    targets = [r for r in out if r.get("type") == "request" and isinstance(r.get("prompt"), str) and r["prompt"]]
    precisions = [r.get("precision") if r.get("precision") in PRECISIONS else None for r in targets]
    decisions = router.route_batch([r["prompt"] for r in targets], precisions) if targets else []
    decided = ("score", "p_edge", "p_cloud", "novelty", "zone", "model_version")
    for record, decision in zip(targets, decisions):
        record.update({key: getattr(decision, key) for key in decided})
    return out
