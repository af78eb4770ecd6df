"""The bundle manifest as a typed, validated record: training writes it; the SDK, evaluation and
`TrainConfig.from_manifest` read it. `Manifest.from_dict` checks every value before anything uses it
(types, ranges, required keys, bounds from serving._contract), raising ManifestError naming the key
and the bad value. Sections that only describe the run (encoder, target, label, split, metrics, data,
training, mlflow) are kept as plain dicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypedDict, cast

from serving._contract import (
    DEFAULT_EDGE_CONTEXT_TOKENS,
    MAX_CALIBRATION_POINTS,
    MAX_CHARS_LIMIT,
    MAX_EMBEDDING_DIM,
    MAX_TOKENS_LIMIT,
    PRECISIONS,
    SCHEMA_VERSION,
)
from serving._json_values import finite_number
from serving._router_error import RouterError
from serving.endpoints._record import Endpoints
from serving.features._spec import LEXICAL_MODES, FeatureSpec
from serving.features._text_stats import STAT_NAMES

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from typing import TypeVar

    import numpy as np
    from numpy.typing import NDArray

    from serving._json_types import JSONObject

    Probability = TypeVar("Probability", float, NDArray[np.float64])  # one prompt's, or a batch's

CALIBRATION_METHODS = ("sigmoid", "isotonic", "none")
# A bundle is one flat folder: a listed file is a plain name inside it, never a path.
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(RouterError, ValueError):
    """A manifest value is missing, of the wrong type or out of range."""


def _fail(key: str, rule: str, value: Any) -> ManifestError:
    shown = repr(value)
    return ManifestError(f"manifest {key}: {rule}, got {shown[:80]}{'...' if len(shown) > 80 else ''}")


def _section(data: JSONObject, key: str) -> JSONObject:
    """A dict-valued section; an absent one is empty."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise _fail(key, "must be an object", value)
    return value


def _number(section: JSONObject, key: str, path: str, *, lo: float, hi: float) -> float:
    number = finite_number(section.get(key))
    if number is None or not lo <= number <= hi:
        raise _fail(f"{path}.{key}", f"must be a finite number in [{lo:g}, {hi:g}]", section.get(key))
    return number


def _integer(section: JSONObject, key: str, path: str, *, lo: int, hi: int, default: int | None = None) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(f"{path}.{key}", f"must be an integer in [{lo}, {hi}]", value)
    return value


class ThresholdEntry(TypedDict, total=False):
    """One precision tag's fallback zone (evaluation.thresholds chose it) and the validation
    figures behind the choice (expected_quality, expected_cloud_calls, met_target, ...)."""

    lo: float
    hi: float


def band_of(thresholds: Mapping[str, ThresholdEntry], precision: str | None) -> tuple[float, float]:
    """(lo, hi), the fallback zone of a declared precision: edge below lo, cloud above hi. Undeclared or
    untuned tags use "default"."""
    entry = thresholds.get(precision) if precision is not None else None
    entry = entry or thresholds["default"]
    return float(entry["lo"]), float(entry["hi"])


@dataclass(frozen=True)
class Limits:
    edge_context_tokens: int = DEFAULT_EDGE_CONTEXT_TOKENS  # longer prompts go to the cloud first

    def to_dict(self, spec: FeatureSpec) -> dict[str, int]:
        # max_chars and max_tokens are the feature spec's; repeated here for readers of the file
        return {
            "edge_context_tokens": self.edge_context_tokens,
            "max_chars": spec.max_chars,
            "max_tokens": spec.max_tokens,
        }


class CalibrationParams(TypedDict, total=False):
    """One head's calibration, as serving.scoring._calibration reads it (`method` is always there); the
    manifest may hold more figures about it (`lexical_blend`), kept as they are."""

    method: str  # CALIBRATION_METHODS
    a: float  # sigmoid: 1 / (1 + exp(-(a * logit(p) + b)))
    b: float
    x: list[float]  # isotonic: the fitted points
    y: list[float]
    in_model: bool  # sigmoid folded into the model's graph
    lexical_blend: JSONObject  # the blend's weight and margin (training.lexical)


class NoveltySection(TypedDict, total=False):
    """The manifest's `novelty` (serving.scoring._novelty), the keys the SDK reads; {} for none. Training
    adds figures about the fit (target_share, fitted_rows, ...), kept as they are."""

    file: str  # the reference's file, unless in_model
    in_model: bool  # the graph computes the novelty, as output `output`
    output: str
    embedding_threshold: float
    unseen_threshold: float
    policy: str  # serving.scoring._novelty.UNFAMILIAR_POLICIES


class AcceptanceSection(TypedDict, total=False):
    """The manifest's `acceptance` (serving.scoring._acceptance), the keys the SDK reads; {} for none, and
    `{"file": None, "reason": ...}` for a bundle trained without answers. Training adds the
    feature names and figures, kept as they are."""

    file: str | None
    reason: str
    n_features: int
    threshold: float
    max_response_chars: int
    calibration: CalibrationParams


def check_calibration(data: Any, path: str = "calibration") -> CalibrationParams:
    """One head's calibration, validated (serving.scoring._calibration applies it)."""
    if not isinstance(data, dict):
        raise _fail(path, "must be an object", data)
    method = data.get("method")
    if method not in CALIBRATION_METHODS:
        raise _fail(f"{path}.method", f"must be one of {', '.join(CALIBRATION_METHODS)}", method)
    if "in_model" in data and not isinstance(data["in_model"], bool):
        raise _fail(f"{path}.in_model", "must be true or false", data["in_model"])
    if data.get("in_model") and method != "sigmoid":
        raise _fail(f"{path}.in_model", "only sigmoid calibration can be folded into the model", True)
    if method == "sigmoid":
        _number(data, "a", path, lo=-1e6, hi=1e6)
        _number(data, "b", path, lo=-1e6, hi=1e6)
    elif method == "isotonic":
        for key in ("x", "y"):
            points = data.get(key)
            if (
                not isinstance(points, list)
                or not 1 <= len(points) <= MAX_CALIBRATION_POINTS
                or not all(not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v <= 1 for v in points)
            ):
                raise _fail(f"{path}.{key}", f"must be 1 to {MAX_CALIBRATION_POINTS} numbers in [0, 1]", points)
        x, y = data["x"], data["y"]  # lists of numbers, as just checked
        if len(x) != len(y) or any(b < a for a, b in zip(x, x[1:])):
            raise _fail(f"{path}.x", f"must be increasing and as long as {path}.y", len(x))
    return cast("CalibrationParams", data)


@dataclass(frozen=True)
class ScoreSpec:
    """What the model outputs and how they make the routing score. `expected_gain`: one head per endpoint,
    P(edge good) and P(cloud good); the score is their difference, in [-1, 1]. `cloud_needed` (bundles
    from before expected gain, the default without a `score` section): one head, P(cloud needed), in
    [0, 1]. `outputs` are the graph's output names, one per head, whose column 1 is that head's
    probability. `endpoints` (N-endpoint bundles, docs/endpoints.md#n-endpoint-bundles): one head per
    endpoint of the manifest's `endpoints` section, in its order, and one output [n, N] of their
    calibrated probabilities; the choice rule, not thresholds, decides."""

    kind: str = "cloud_needed"
    heads: tuple[str, ...] = ("cloud_needed",)
    outputs: tuple[str, ...] = ("probabilities",)

    def to_dict(self) -> JSONObject:
        return {"kind": self.kind, "heads": list(self.heads), "outputs": list(self.outputs)}


SCORE_KINDS = {"expected_gain": (("edge", "cloud"), (-1.0, 1.0)), "cloud_needed": (("cloud_needed",), (0.0, 1.0))}
ENDPOINTS_KIND = "endpoints"  # N endpoints: heads are the endpoints section's names, no routing score


def routing_score(kind: str, probabilities: Mapping[str, Probability]) -> Probability:
    """The score thresholds cut, from each head's probability (numbers or numpy arrays): the
    cloud's expected gain P(cloud good) - P(edge good), or P(cloud needed)."""
    if kind == "expected_gain":
        return probabilities["cloud"] - probabilities["edge"]
    return probabilities["cloud_needed"]


def check_score(data: Any) -> ScoreSpec:
    if not isinstance(data, dict) or data.get("kind") not in (*SCORE_KINDS, ENDPOINTS_KIND):
        raise _fail("score.kind", f"must be one of {', '.join((*SCORE_KINDS, ENDPOINTS_KIND))}", data)
    heads, outputs = data.get("heads"), data.get("outputs")
    if data["kind"] == ENDPOINTS_KIND:
        if not isinstance(heads, list) or not heads or not all(isinstance(h, str) for h in heads):
            raise _fail("score.heads", "must list the endpoints' names (an endpoints bundle)", heads)
        if not isinstance(outputs, list) or len(outputs) != 1 or not isinstance(outputs[0], str) or not outputs[0]:
            raise _fail("score.outputs", "must name the one graph output of every endpoint's probability", outputs)
        return ScoreSpec(ENDPOINTS_KIND, tuple(heads), tuple(outputs))
    if heads != list(SCORE_KINDS[data["kind"]][0]):
        raise _fail("score.heads", f"must be {list(SCORE_KINDS[data['kind']][0])} for {data['kind']}", heads)
    if (
        not isinstance(outputs, list)
        or len(outputs) != len(heads)
        or not all(isinstance(o, str) and 0 < len(o) <= 64 for o in outputs)
        or len(set(outputs)) != len(outputs)
    ):
        raise _fail("score.outputs", "must name one distinct graph output per head", outputs)
    return ScoreSpec(data["kind"], tuple(heads), tuple(outputs))


def check_novelty(data: Any, files: Collection[str]) -> NoveltySection:
    """The familiarity reference (serving.scoring._novelty): its file, or `in_model` and the graph
    output that computes it; thresholds and policy; {} when absent."""
    from serving.scoring._novelty import UNFAMILIAR_POLICIES

    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _fail("novelty", "must be an object", data)
    if "in_model" in data and not isinstance(data["in_model"], bool):
        raise _fail("novelty.in_model", "must be true or false", data["in_model"])
    if data.get("in_model"):
        if not isinstance(data.get("output"), str) or not data["output"]:
            raise _fail("novelty.output", "must name the model output that computes the novelty", data.get("output"))
        if "file" in data:
            raise _fail(
                "novelty.file", "must be absent when novelty.in_model is true (the model computes it)", data["file"]
            )
    elif data.get("file") not in files:
        raise _fail("novelty.file", "must name a file the manifest lists", data.get("file"))
    _number(data, "embedding_threshold", "novelty", lo=1e-9, hi=1e9)
    _number(data, "unseen_threshold", "novelty", lo=1e-9, hi=1.0)
    if data.get("policy") not in UNFAMILIAR_POLICIES:
        raise _fail("novelty.policy", f"must be one of {', '.join(UNFAMILIAR_POLICIES)}", data.get("policy"))
    return cast("NoveltySection", data)


def check_acceptance(data: Any, files: Collection[str]) -> AcceptanceSection:
    """The acceptance check (serving.scoring._acceptance): its graph, feature count, calibration and
    threshold; `{"file": null, "reason": ...}` when training had no answers; {} before acceptance checks."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _fail("acceptance", "must be an object", data)
    if data.get("file") is None:
        if not isinstance(data.get("reason"), str):
            raise _fail("acceptance.reason", "must say why the bundle has no acceptance model", data.get("reason"))
        return cast("AcceptanceSection", data)
    if data["file"] not in files:
        raise _fail("acceptance.file", "must name a file the manifest lists", data.get("file"))
    _integer(data, "n_features", "acceptance", lo=1, hi=100_000)
    _number(data, "threshold", "acceptance", lo=0.0, hi=1.0)
    _integer(data, "max_response_chars", "acceptance", lo=1, hi=10_000_000)
    check_calibration(data.get("calibration"), "acceptance.calibration")
    return cast("AcceptanceSection", data)


# rule -> parameter
ENDPOINT_RULES = {"cheapest_within": "margin", "best_under_price": "price", "cascade": "start_margin"}
ENDPOINTS_KEYS = ("endpoints", "output_tokens", "choice", "head_mode", "validation")


@dataclass(frozen=True)
class EndpointsSection:
    """An N-endpoint bundle's endpoints and how it chooses among them (docs/endpoints.md): `spec` the
    endpoints in the graph's head order (serving.endpoints._record), `output_tokens` the answer length
    prices assume, `rule` (ENDPOINT_RULES: serving.endpoints._choice's function) and its one
    `parameter` (cheapest_within's margin, best_under_price's price on cost, cascade's start_margin),
    set on validation rows; `extra` what training wrote about it (head mode, validation figures)."""

    spec: Endpoints
    output_tokens: float
    rule: str
    parameter: float
    extra: JSONObject = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return self.spec.names

    def to_dict(self) -> JSONObject:
        choice = {**self.extra.get("choice", {}), "rule": self.rule, ENDPOINT_RULES[self.rule]: self.parameter}
        return {
            **{k: v for k, v in self.extra.items() if k != "choice"},
            "endpoints": self.spec.as_dict()["endpoints"],
            "output_tokens": self.output_tokens,
            "choice": choice,
        }


def check_endpoints(data: Any, score: ScoreSpec) -> EndpointsSection | None:
    """The `endpoints` section: present exactly when the score's kind is `endpoints`, its
    endpoints valid (serving.endpoints._record) and named as the score's heads, in their order."""
    from serving.endpoints._record import EndpointSpecError, parse_endpoints

    if score.kind != ENDPOINTS_KIND:
        if data is not None:
            raise _fail("endpoints", f"belongs to an endpoints bundle (score.kind {ENDPOINTS_KIND!r})", score.kind)
        return None
    if not isinstance(data, dict):
        raise _fail("endpoints", f"must be an object: score.kind {ENDPOINTS_KIND!r} needs the endpoints", data)
    unknown = sorted(set(data) - set(ENDPOINTS_KEYS))
    if unknown:
        raise _fail(
            "endpoints", f"has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(ENDPOINTS_KEYS)}", unknown
        )
    try:
        spec = parse_endpoints({"endpoints": data.get("endpoints")}, source="manifest endpoints", call_settings=False)
    except EndpointSpecError as error:
        raise ManifestError(str(error)) from None
    if spec.names != score.heads:
        raise _fail(
            "endpoints.endpoints",
            f"must name the model's heads in their order {list(score.heads)} (score.heads)",
            list(spec.names),
        )
    output_tokens = _number(data, "output_tokens", "endpoints", lo=0.0, hi=1e7)
    choice = data.get("choice")
    if not isinstance(choice, dict) or choice.get("rule") not in ENDPOINT_RULES:
        raise _fail("endpoints.choice.rule", f"must be one of {', '.join(ENDPOINT_RULES)}", choice)
    rule = choice["rule"]
    parameter = _number(choice, ENDPOINT_RULES[rule], "endpoints.choice", lo=0.0, hi=1e12)
    extra = {k: v for k, v in data.items() if k not in ("endpoints", "output_tokens")}
    return EndpointsSection(spec, output_tokens, rule, parameter, extra)


def check_calibrations(manifest: JSONObject, score: ScoreSpec) -> dict[str, CalibrationParams]:
    """Head -> calibration. A manifest without a `score` section has one flat calibration."""
    calibrations = manifest.get("calibration")
    if "score" not in manifest:
        return {score.heads[0]: check_calibration(calibrations)}
    if not isinstance(calibrations, dict) or set(calibrations) != set(score.heads):
        raise _fail("calibration", f"must hold one calibration per head ({', '.join(score.heads)})", calibrations)
    return {head: check_calibration(calibrations[head], f"calibration.{head}") for head in score.heads}


def check_feature_spec(data: Any) -> FeatureSpec:
    """The feature spec, with every field typed and bounded."""
    if not isinstance(data, dict):
        raise _fail("feature_spec", "must be an object", data)
    unknown = sorted(set(data) - {f.name for f in fields(FeatureSpec)})
    if unknown:
        raise _fail("feature_spec", f"has unknown field(s) {', '.join(unknown)}", unknown)
    if not isinstance(data.get("tier"), str):
        raise _fail("feature_spec.tier", "must be a string", data.get("tier"))
    for key in ("add_special_tokens", "encoder_row_wise", "fused"):
        if key in data and not isinstance(data[key], bool):
            raise _fail(f"feature_spec.{key}", "must be true or false", data[key])
    _integer(data, "max_tokens", "feature_spec", lo=1, hi=MAX_TOKENS_LIMIT, default=512)
    _integer(data, "max_chars", "feature_spec", lo=1, hi=MAX_CHARS_LIMIT, default=2048)
    _integer(data, "embedding_dim", "feature_spec", lo=1, hi=MAX_EMBEDDING_DIM, default=32)
    if list(data.get("stat_names", STAT_NAMES)) != list(STAT_NAMES):
        raise _fail(
            "feature_spec.stat_names",
            f"must be this library's text statistics {list(STAT_NAMES)}",
            data.get("stat_names"),
        )
    precisions = data.get("precisions", list(PRECISIONS))
    if (
        not isinstance(precisions, list)
        or not set(precisions) <= set(PRECISIONS)
        or len(set(precisions)) != len(precisions)
    ):
        raise _fail("feature_spec.precisions", f"must be distinct tags among {', '.join(PRECISIONS)}", precisions)
    if data.get("lexical", "none") not in LEXICAL_MODES:
        raise _fail("feature_spec.lexical", f"must be one of {', '.join(LEXICAL_MODES)}", data.get("lexical"))
    if data.get("lexical", "none") != "none" and not data.get("fused"):
        raise _fail("feature_spec.lexical", "needs the fused layout (model.onnx computes the margins)", data["lexical"])
    return FeatureSpec.from_dict(data)


def check_thresholds(data: Any, tags: Sequence[str], score: ScoreSpec) -> dict[str, ThresholdEntry]:
    """Per precision tag (and "default"): lo <= hi, both within the score's bounds; extra figures are
    kept. An endpoints bundle has none (its choice rule decides)."""
    if score.kind == ENDPOINTS_KIND:
        if data not in (None, {}):
            raise _fail(
                "thresholds", f"must be empty for score.kind {ENDPOINTS_KIND!r} (its choice rule decides)", data
            )
        return {}
    bounds = SCORE_KINDS[score.kind][1]
    if not isinstance(data, dict) or "default" not in data:
        raise _fail("thresholds", 'must be an object with a "default" entry', data)
    for key, entry in data.items():
        if key != "default" and key not in tags:
            raise _fail("thresholds", f"keys must be 'default' or a precision tag ({', '.join(tags)})", key)
        if not isinstance(entry, dict):
            raise _fail(f"thresholds.{key}", "must be an object with lo and hi", entry)
        lo = _number(entry, "lo", f"thresholds.{key}", lo=bounds[0], hi=bounds[1])
        hi = _number(entry, "hi", f"thresholds.{key}", lo=bounds[0], hi=bounds[1])
        if lo > hi:
            raise _fail(f"thresholds.{key}", "needs lo <= hi", (lo, hi))
    return cast("dict[str, ThresholdEntry]", data)


def check_files(data: Any) -> dict[str, str]:
    """File name -> SHA-256: plain names inside the bundle folder, hex digests."""
    if not isinstance(data, dict) or not data:
        raise _fail("files", "must be a non-empty object of file name -> SHA-256", data)
    for name, digest in data.items():
        if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
            raise _fail("files", "names must be plain file names inside the bundle (no path, no leading dot)", name)
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise _fail(f"files.{name}", "must be a lower-case hex SHA-256", digest)
    return data


@dataclass(frozen=True)
class Manifest:
    """Everything a bundle says about itself. Build it with `from_dict` (validated)."""

    model_version: str
    feature_spec: FeatureSpec
    calibration: dict[str, CalibrationParams]  # head -> its calibration (serving.scoring._calibration)
    thresholds: dict[str, ThresholdEntry]  # precision tag or "default" -> lo, hi and the figures behind them
    score: ScoreSpec = field(default_factory=ScoreSpec)
    limits: Limits = field(default_factory=Limits)
    novelty: NoveltySection = field(default_factory=NoveltySection)  # serving.scoring._novelty; {} for none
    acceptance: AcceptanceSection = field(default_factory=AcceptanceSection)  # serving.scoring._acceptance; {} for none
    endpoints: EndpointsSection | None = None  # N-endpoint bundles (score.kind "endpoints"); None otherwise
    files: dict[str, str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    created_at: str = ""
    # Sections that describe the run, as training wrote them.
    encoder: JSONObject = field(default_factory=dict)  # the encoder tier, and the key of the projection fitted on it
    target: JSONObject = field(default_factory=dict)  # kind (quality, budget) and its figures (training.config)
    label: JSONObject = field(default_factory=dict)  # margin_binary, margin_graded (training.labels)
    # The split by prompt hash (val_share, test_share, salt, offset), so evaluation finds the
    # unseen rows; cv_folds > 0: the bundle was cross-fitted on every row.
    split: JSONObject = field(default_factory=dict)
    # The run's figures per split, in evaluation.figures.SplitSummary's JSON form (its
    # from_dict reads them), and "cv": the cross-validation estimates when cross-fitted.
    metrics: JSONObject = field(default_factory=dict)
    data: JSONObject = field(default_factory=dict)  # the logs' report: rows, sources, rejects, ...
    training: JSONObject = field(default_factory=dict)  # engine
    mlflow: JSONObject = field(default_factory=dict)  # run_id, tracking_uri, registered_model
    manifest_sha256: str = ""

    def band(self, precision: str | None) -> tuple[float, float]:
        """The (lo, hi) of a precision tag in this manifest's thresholds (band_of)."""
        return band_of(self.thresholds, precision)

    @classmethod
    def from_dict(cls, data: Any) -> "Manifest":
        """Validate and type a manifest's JSON object; ManifestError says what is wrong and where."""
        if not isinstance(data, dict):
            raise _fail("", "must be a JSON object", type(data).__name__)
        if data.get("schema_version") != SCHEMA_VERSION:
            raise _fail(
                "schema_version", f"is not supported (this SDK reads {SCHEMA_VERSION})", data.get("schema_version")
            )
        model_version = data.get("model_version", "unknown")
        if not isinstance(model_version, str) or not 0 < len(model_version) <= 200:
            raise _fail("model_version", "must be a string of 1 to 200 characters", model_version)
        spec = check_feature_spec(data.get("feature_spec"))
        score = check_score(data["score"]) if "score" in data else ScoreSpec()
        limits = _section(data, "limits")
        # The sections that describe the run; Any: mypy checks **info against every field of Manifest
        info: dict[str, Any] = {
            key: _section(data, key)
            for key in ("encoder", "target", "label", "split", "metrics", "data", "training", "mlflow")
        }
        for key in ("created_at", "manifest_sha256"):
            if not isinstance(data.get(key, ""), str):
                raise _fail(key, "must be a string", data.get(key))
        return cls(
            model_version=model_version,
            feature_spec=spec,
            calibration=check_calibrations(data, score),
            score=score,
            thresholds=check_thresholds(data.get("thresholds"), spec.precisions, score),
            endpoints=check_endpoints(data.get("endpoints"), score),
            limits=Limits(
                _integer(
                    limits, "edge_context_tokens", "limits", lo=1, hi=10_000_000, default=DEFAULT_EDGE_CONTEXT_TOKENS
                )
            ),
            files=check_files(data.get("files")) if "files" in data else {},
            novelty=check_novelty(data.get("novelty"), data.get("files") or {}),
            acceptance=check_acceptance(data.get("acceptance"), data.get("files") or {}),
            created_at=data.get("created_at", ""),
            manifest_sha256=data.get("manifest_sha256", ""),
            **info,
        )

    def to_dict(self) -> JSONObject:
        """The JSON form (what manifest.json holds)."""
        out: JSONObject = {
            "schema_version": self.schema_version,
            "created_at": self.created_at,
            "model_version": self.model_version,
            "feature_spec": self.feature_spec.to_dict(),
            "encoder": self.encoder,
            "score": self.score.to_dict(),
            "calibration": self.calibration,
            "thresholds": self.thresholds,
            "target": self.target,
            "label": self.label,
            "split": self.split,
            "limits": self.limits.to_dict(self.feature_spec),
            "novelty": self.novelty or None,
            "acceptance": self.acceptance or None,
            "metrics": self.metrics,
            "data": self.data,
            "training": self.training,
            "mlflow": self.mlflow,
        }
        if self.endpoints is not None:
            out["endpoints"] = self.endpoints.to_dict()
        if self.files:
            out["files"] = self.files
        if self.manifest_sha256:
            out["manifest_sha256"] = self.manifest_sha256
        return out
