"""The canonical log row, and the checks every row passes before it is used.

One row per request. Loaders for any format (canonical JSONL/CSV/Parquet, RouteLLM)
turn their input into dicts with these fields and pass them through `check_row`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from serving._contract import PRECISIONS

REQUIRED = ("prompt", "edge_quality", "cloud_quality")
OPTIONAL_TEXT = ("request_id", "domain", "precision", "source")
OPTIONAL_NUMBERS = ("edge_latency_ms", "cloud_latency_ms", "edge_cost", "cloud_cost")
# The edge's answer, for the acceptance check (training.acceptance): its text and, from edge
# runtimes that return token log-probabilities, their mean and minimum over the answer.
RESPONSE_TEXT = "edge_response"
RESPONSE_NUMBERS = ("edge_logprob_mean", "edge_logprob_min")
RESPONSE_COLUMNS = (RESPONSE_TEXT, *RESPONSE_NUMBERS)
# Rows from traffic where each request ran on one model: which side ran first, and the
# probability with which the logging policy chose it (training.partial weighs by it).
LOGGING_COLUMNS = ("routed_to", "propensity")
COLUMNS = (
    "request_id",
    "prompt",
    "domain",
    "precision",
    "edge_quality",
    "cloud_quality",
    *OPTIONAL_NUMBERS,
    "source",
    *RESPONSE_COLUMNS,
    *LOGGING_COLUMNS,
)
# A prompt logged without its text (serving.monitoring._outcome_log's privacy modes): the scalar inputs the
# logging bundle computed and either the prompt's token ids (privacy "token_ids") or its
# encoder's pooled embedding before the projection ("embedding"), with what identifies them
# (serving.routing._stages.model_inputs). Such a row has `prompt` None and this field instead; only the
# local training engine reads them (training.token_rows), everything else reports them as `no_text`.
TOKENS = "prompt_tokens"
_MODEL_INPUTS = {
    "tokenizer_sha256": str,
    "max_tokens": int,
    "add_special_tokens": bool,
    "scalars": list,
    "feature_names": list,
}
TOKEN_FIELDS = {**_MODEL_INPUTS, "input_ids": list}
EMBEDDING_FIELDS = {**_MODEL_INPUTS, "encoder_sha256": str, "embedding": list}


@dataclass(frozen=True)
class Reject:
    """A row or file that could not be used, with where it came from and why."""

    file: str
    location: str  # "line 12" (JSONL), "row 7" (CSV/Parquet), or "file"
    reason: str
    # "invalid": the row breaks the schema (counts against max_reject_share); "unlabelled": a
    # well-formed request whose outcome is not known yet (feedback or `make label` pending).
    kind: str = "invalid"

    def as_dict(self) -> dict[str, str]:
        out = {"file": self.file, "location": self.location, "reason": self.reason}
        return out if self.kind == "invalid" else {**out, "kind": self.kind}


class RowError(ValueError):
    """A row breaks the schema; the message says which field and how."""


class Unlabelled(RowError):
    """A well-formed row with no outcome yet: reported, not counted as bad data."""


def _missing(value: Any) -> bool:
    """None, or NaN: how pandas marks an empty text cell."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _number(row: dict, field: str) -> float | None:
    """The field as a float (NaN stays NaN: the caller says what it means), or None when it
    is absent, None or empty text. true/false, as JSON or as CSV text, are 1.0/0.0."""
    value = row.get(field)
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        value = value.strip().lower() == "true"
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise RowError(f"{field} is not a number: {value!r}") from None
    if math.isinf(number):
        raise RowError(f"{field} is not a finite number: {value!r}")
    return number


def _text(row: dict, field: str) -> str | None:
    value = row.get(field)
    if _missing(value):
        return None
    text = str(value).strip()
    return text or None


def check_row(row: dict, *, default_source: str) -> dict:
    """Return the row in canonical form, or raise RowError saying what is wrong. A row with
    `prompt_tokens` instead of a prompt (TOKENS) comes back with prompt None and them checked."""
    prompt = row.get("prompt")
    out: dict[str, Any] = {"prompt": prompt}
    if _missing(prompt) and not _missing(row.get(TOKENS)):
        out.update(prompt=None, **{TOKENS: check_prompt_tokens(row[TOKENS])})
    elif _missing(prompt) and TOKENS in row:
        raise RowError(
            f"logged without its text and without model inputs ({TOKENS} is null): the logging router "
            "could not compute them (no bundle, or privacy='embedding' with a bundle without its encoder)"
        )
    elif _missing(prompt):
        raise RowError("prompt is missing")
    elif not isinstance(prompt, str):
        raise RowError(f"prompt is not text: {type(prompt).__name__}")
    elif not prompt.strip():
        raise RowError("prompt is empty")

    for field in ("edge_quality", "cloud_quality"):
        value = _number(row, field)
        if value is not None and math.isnan(value):
            raise RowError(f"{field} is NaN, not a number in [0, 1]")
        if value is not None and not 0.0 <= value <= 1.0:
            raise RowError(f"{field} is out of range [0, 1]: {value!r}")
        out[field] = value
    out.update(_logging(row, out["edge_quality"], out["cloud_quality"]))

    precision = _text(row, "precision")
    if precision is not None:
        precision = precision.lower()
        if precision not in PRECISIONS:
            raise RowError(f"precision {row.get('precision')!r} is unknown; allowed: {', '.join(PRECISIONS)}")
    out["precision"] = precision

    domain = _text(row, "domain")
    out["domain"] = domain.lower() if domain else None
    out["request_id"] = _text(row, "request_id")
    out["source"] = _text(row, "source") or default_source
    for field in OPTIONAL_NUMBERS:
        value = _number(row, field)
        if value is not None and math.isnan(value):
            value = None  # how pandas and Arrow mark an empty optional number
        if value is not None and value < 0:
            raise RowError(f"{field} is negative: {value!r}")
        out[field] = value
    out.update(_response(row))
    return out


def check_prompt_tokens(value: Any) -> dict:
    """A prompt's logged model inputs (TOKENS): token ids (TOKEN_FIELDS) or an embedding
    (EMBEDDING_FIELDS), or RowError naming the field that is wrong."""
    if not isinstance(value, dict):
        raise RowError(f"{TOKENS} is not an object: {type(value).__name__}")
    if "input_ids" in value and "embedding" in value:
        raise RowError(f"{TOKENS} holds both input_ids and an embedding: a logging bundle writes one")
    fields = EMBEDDING_FIELDS if "embedding" in value else TOKEN_FIELDS
    for name, kind in fields.items():
        if not isinstance(value.get(name), kind) or (kind is int and isinstance(value[name], bool)):
            raise RowError(f"{TOKENS}.{name} is missing or not {kind.__name__}: {value.get(name)!r}"[:300])
    scalars, names = value["scalars"], value["feature_names"]
    if fields is TOKEN_FIELDS:
        ids = value["input_ids"]
        if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise RowError(f"{TOKENS}.input_ids must be a non-empty list of token ids (integers >= 0)")
        if len(ids) > value["max_tokens"]:
            raise RowError(f"{TOKENS}.input_ids holds {len(ids)} ids, more than its max_tokens {value['max_tokens']}")
    elif not value["embedding"] or not _finite_numbers(value["embedding"]):
        raise RowError(f"{TOKENS}.embedding must be a non-empty list of finite numbers")
    if not all(isinstance(n, str) for n in names) or len(names) != len(scalars):
        raise RowError(f"{TOKENS}.feature_names must name each of the {len(scalars)} scalars")
    if not _finite_numbers(scalars):
        raise RowError(f"{TOKENS}.scalars must be finite numbers")
    return {name: value[name] for name in fields}


def _finite_numbers(values: list) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in values)


def _logging(row: dict, edge: float | None, cloud: float | None) -> dict:
    """routed_to and propensity; a row may lack one outcome only when they say how the side
    whose outcome is known was chosen."""
    routed_to = _text(row, "routed_to")
    if routed_to is not None and routed_to not in ("edge", "cloud"):
        raise RowError(f"routed_to {routed_to!r} is unknown; allowed: edge, cloud")
    propensity = _number(row, "propensity")
    if propensity is not None and math.isnan(propensity):
        propensity = None  # how pandas and Arrow mark an empty optional number
    if propensity is not None and not 0.0 < propensity <= 1.0:
        raise RowError(f"propensity must be a probability in (0, 1], got {row.get('propensity')!r}")
    if edge is None and cloud is None:
        raise Unlabelled(
            "edge_quality and cloud_quality are both missing: no outcome known yet "
            "(router.feedback or make label gives one)"
        )
    if edge is None or cloud is None:
        known = "edge" if edge is not None else "cloud"
        missing = "cloud_quality" if known == "edge" else "edge_quality"
        if propensity is None or routed_to is None:
            raise RowError(
                f"{missing} is missing; a row with one outcome needs `routed_to` and `propensity` (the "
                "probability with which the logging policy chose that side), otherwise its outcome "
                "cannot be weighed against the traffic it stands for"
            )
        if routed_to != known:
            raise RowError(
                f"only the {known} outcome is known but the request was routed to {routed_to} first: "
                f"the {known} ran as a fallback, with no logged probability"
            )
    return {"routed_to": routed_to, "propensity": propensity}


def _response(row: dict) -> dict:
    """The optional edge answer and its log-probabilities (None when absent)."""
    response = row.get(RESPONSE_TEXT)
    if _missing(response) or response == "":
        response = None
    elif not isinstance(response, str):
        raise RowError(f"{RESPONSE_TEXT} is not text: {type(response).__name__}")
    out = {RESPONSE_TEXT: response}
    for field in RESPONSE_NUMBERS:
        value = _number(row, field)
        if value is not None and math.isnan(value):
            value = None
        if value is not None and value > 0:
            raise RowError(f"{field} is a log-probability and cannot be positive: {value!r}")
        if value is not None and response is None:
            raise RowError(f"{field} is given without {RESPONSE_TEXT}")
        out[field] = value
    return out
