"""N-endpoint outcome logs: one row per request with the quality of every endpoint that answered it.

    {"prompt": "...", "outcomes": {"phone-3b": 0, "onprem-8b": 1, "frontier": 1}}
    {"prompt": "...", "outcomes": {"cloud-mid": 1}, "routed_to": "cloud-mid", "propensity": 0.25}

`outcomes` maps endpoint names to a quality in [0, 1]; `responses` ({endpoint: text}, optional) the
answers behind them, which the acceptance check learns from (training.endpoint_bundle). A row whose outcomes miss an endpoint of
the spec is a one-outcome (or partial) row: it needs `routed_to` (the endpoint it ran on, whose
outcome it holds) and `propensity` (the probability with which the logging policy chose it), as
two-endpoint rows do (data.schema). Today's `edge_quality` / `cloud_quality` columns are the
two-endpoint spelling of `outcomes: {edge, cloud}`. `costs` ({endpoint: dollars}) is optional, and
so is `metadata` ({key: text}: the app's request metadata, which policy rules read;
evaluation.rules_effect).

Files are read by the same loaders as every log (data.logs: JSONL, CSV, Parquet, folders);
each bad row is a Reject naming the field, as data.schema's are.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from data.schema import Reject, RowError, check_row

OUTCOMES = "outcomes"
COSTS = "costs"
RESPONSES = "responses"
METADATA = "metadata"
TWO_ENDPOINT_COLUMNS = {"edge": "edge_quality", "cloud": "cloud_quality"}


def _object(value: object, field: str, shape: str) -> dict:
    """A row's mapping field as a dict: as given, or parsed from the JSON text CSV / Parquet carry
    it as; RowError naming `field` and the `shape` it must have otherwise."""
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            raise RowError(f"{field} is not a JSON object: {value[:80]!r}") from None
    if not isinstance(value, dict):
        raise RowError(f"{field} must be an object {shape}, got {type(value).__name__}")
    return value


def _by_endpoint(row: dict, field: str, names: Sequence[str], shape: str) -> dict:
    """The row's object `field` keyed by endpoint names of the spec; {} when absent (None, or NaN
    where CSV / Parquet leave it empty)."""
    value = row.get(field)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return {}
    value = _object(value, field, shape)
    for name in value:
        if name not in names:
            raise RowError(f"{field} names endpoint {name!r}, which is not in the spec ({', '.join(names)})")
    return value


def _map(row: dict, field: str, names: Sequence[str], *, unit: bool) -> dict[str, float]:
    out = {}
    for name, number in _by_endpoint(row, field, names, "{endpoint: number}").items():
        if number is None:
            continue
        if isinstance(number, bool):
            number = float(number)
        if not isinstance(number, (int, float)) or not math.isfinite(number):
            raise RowError(f"{field}.{name} is not a finite number: {number!r}")
        if unit and not 0.0 <= number <= 1.0:
            raise RowError(f"{field}.{name} is out of range [0, 1]: {number!r}")
        if not unit and number < 0:
            raise RowError(f"{field}.{name} is negative: {number!r}")
        out[name] = float(number)
    return out


def _metadata(row: dict) -> dict[str, str] | None:
    """The row's request metadata: None when absent, else an object of text values (CSV / Parquet
    carry it as JSON text), as the SDK takes it (serving.policy.check_metadata)."""
    value = row.get(METADATA)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    value = _object(value, METADATA, "{key: text}")
    for key, text in value.items():
        if not isinstance(text, str):
            raise RowError(f"{METADATA}.{key} must be text (request metadata is str to str), got {text!r}")
    return {str(key): text for key, text in value.items()}


def _responses(row: dict, names: Sequence[str], outcomes: dict) -> dict[str, str]:
    """The row's answers {endpoint: text} of the endpoints whose outcome the row holds (an answer not
    graded yet teaches nothing, and is left out); {} when absent."""
    out = {}
    for name, text in _by_endpoint(row, RESPONSES, names, "{endpoint: text}").items():
        if text is not None and not isinstance(text, str):
            raise RowError(f"{RESPONSES}.{name} must be text, got {type(text).__name__}")
        if text is not None and name in outcomes:
            out[name] = text
    return out


def check_endpoint_row(row: dict, names: Sequence[str], *, default_source: str) -> dict:
    """The row in canonical N-endpoint form (prompt, domain, precision, request_id, source,
    outcomes, costs, responses, routed_to, propensity, metadata), or RowError naming the field."""
    two_endpoint = OUTCOMES not in row and any(c in row for c in TWO_ENDPOINT_COLUMNS.values())
    if two_endpoint:
        missing = [side for side in TWO_ENDPOINT_COLUMNS if side not in names]
        if missing:
            raise RowError("edge_quality / cloud_quality rows need endpoints named edge and cloud in the spec")
        checked = check_row(row, default_source=default_source)
        outcomes = {side: checked[c] for side, c in TWO_ENDPOINT_COLUMNS.items() if checked[c] is not None}
        costs = {s: checked[f"{s}_cost"] for s in TWO_ENDPOINT_COLUMNS if checked.get(f"{s}_cost") is not None}
        keep = ("prompt", "domain", "precision", "request_id", "source", "routed_to", "propensity")
        answers = {"edge": checked["edge_response"]} if checked.get("edge_response") and "edge" in outcomes else {}
        return {
            **{k: checked[k] for k in keep},
            OUTCOMES: outcomes,
            COSTS: costs,
            RESPONSES: answers,
            METADATA: _metadata(row),
        }
    outcomes = _map(row, OUTCOMES, names, unit=True)
    if not outcomes:
        raise RowError("outcomes is missing or empty: no endpoint's quality is known for this row")
    # The prompt, precision, domain and ids by the canonical checks (one outcome stands in for both sides).
    first = next(iter(outcomes.values()))
    base = {k: v for k, v in row.items() if k not in (OUTCOMES, COSTS, RESPONSES, METADATA, "routed_to", "propensity")}
    checked = check_row({**base, "edge_quality": first, "cloud_quality": first}, default_source=default_source)
    routed_to, propensity = row.get("routed_to"), row.get("propensity")
    if routed_to is not None and routed_to not in names:
        raise RowError(f"routed_to {routed_to!r} is not an endpoint of the spec ({', '.join(names)})")
    if propensity is not None:
        if isinstance(propensity, bool) or not isinstance(propensity, (int, float)) or not 0.0 < propensity <= 1.0:
            raise RowError(f"propensity must be a probability in (0, 1], got {propensity!r}")
        propensity = float(propensity)
    if len(outcomes) < len(names):
        if routed_to is None or propensity is None:
            absent = [n for n in names if n not in outcomes]
            raise RowError(
                f"outcomes lack {', '.join(absent)}; a row without every endpoint's outcome needs `routed_to` and "
                "`propensity` (the probability with which the logging policy chose that endpoint)"
            )
        if routed_to not in outcomes:
            raise RowError(f"routed_to is {routed_to!r} but outcomes do not hold its quality")
    keep = ("prompt", "domain", "precision", "request_id", "source")
    return {
        **{k: checked[k] for k in keep},
        OUTCOMES: outcomes,
        COSTS: _map(row, COSTS, names, unit=False),
        RESPONSES: _responses(row, names, outcomes),
        "routed_to": routed_to,
        "propensity": propensity,
        METADATA: _metadata(row),
    }


def read_endpoint_logs(paths: Iterable, names: Sequence[str]):
    """(a DataFrame of checked rows with one `q_<endpoint>` column per endpoint, NaN where
    unknown, plus `cost_<endpoint>` where logged, `response_<endpoint>` (the answer's text, or None)
    and `metadata` (a dict, or None), and the rejects). Any file or folder the log loaders read
    (data.logs)."""
    import numpy as np
    import pandas as pd

    from data.logs import expand, iter_path

    rejects: list[Reject] = []
    rows = []
    for path in expand(paths):
        for raw in iter_path(path, rejects):
            try:
                checked = check_endpoint_row(raw.row, names, default_source=str(path))
            except RowError as exc:
                rejects.append(Reject(raw.file, raw.location, str(exc)))
                continue
            flat = {k: v for k, v in checked.items() if k not in (OUTCOMES, COSTS, RESPONSES)}
            for name in names:
                flat[f"q_{name}"] = checked[OUTCOMES].get(name, np.nan)
                flat[f"cost_{name}"] = checked[COSTS].get(name, np.nan)
                flat[f"response_{name}"] = checked[RESPONSES].get(name)
            rows.append(flat)
    return pd.DataFrame(rows), rejects
