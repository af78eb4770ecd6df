"""Reader for the SDK's outcome log (serving.outcome_log): a folder of `outcomes-*.jsonl`
files, read as a whole because a request's later outcomes (feedback, shadow runs, judge
labels) may sit in other files than the request itself.

Each `request` record becomes one canonical row (data.schema): the prompt, the declared
precision, `routed_to` (the side that ran first) and `propensity` (the probability with
which the logging policy chose it), the edge's answer when it served, and the outcomes
known so far, from:
- the request itself: an edge call that failed or timed out is an edge failure (0);
- `shadow` records: a failed shadow edge run likewise; a shadow answer is kept for grading;
- `feedback` records (router.feedback, `make label`), applied in time order, later ones
  overriding earlier ones per side.
data.schema.check_row then decides: a row with no outcome yet is reported as unlabelled
(not counted as bad data), a row with one outcome needs its propensity, and so on. A request
logged with store_prompts=False becomes a row without text that carries the logged model
inputs instead (data.schema.TOKENS; training.token_rows).
Unparsable lines, records of an unknown type, a request id logged twice and feedback for a
request the folder does not hold are rejects with their file, line and reason.

A request an N-endpoint bundle routed (its record names the chosen `endpoint`) becomes an
N-endpoint row instead (data.endpoint_logs, what `make endpoints --data` reads): `outcomes`
{endpoint: quality} from the endpoints that failed or timed out (0) and from feedback `outcomes`
(later over earlier, per endpoint), `routed_to` the endpoint chosen and `propensity`. Feedback
that does not fit its request (edge_quality for an N-endpoint request, outcomes for a two-endpoint
one, an endpoint its bundle does not have, a quality outside [0, 1]) and a shadow record for an
N-endpoint request are rejects at their own line; the request's row stands on the rest. An
N-endpoint request logged without its text is a reject: N-endpoint training reads prompts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from data.readers import RawRow
from data.schema import TOKENS, Reject
from serving.outcome_log import FILE_PATTERN as PATTERN
from serving.outcome_log import LOG_FORMAT, read_log_lines


def is_outcome_log_folder(path: Path) -> bool:
    """A folder of outcome files whose records say that the SDK wrote them: the first line
    that is not blank, in any of the files (a file may be empty: a full disk refused its first
    batch). A bounded read: at most RECOGNISE_BYTES of each file."""
    if not path.is_dir():
        return False
    return any(_first_record_is_ours(file) for file in sorted(path.glob(PATTERN)))


RECOGNISE_BYTES = 1 << 20  # a request record with a long prompt and answer fits; a stray large file costs 1 MiB


def _first_record_is_ours(file: Path) -> bool:
    try:
        with open(file, "rb") as fh:
            head = fh.read(RECOGNISE_BYTES)
    except OSError:
        return False
    line = next((line for line in head.split(b"\n") if line.strip()), b"")
    try:
        record = json.loads(line.decode("utf-8", "replace"))
    except ValueError:  # nothing, or a line longer than the bound or cut short: not proof either way
        return False
    return isinstance(record, dict) and record.get("log") == LOG_FORMAT


def _records(folder: Path, rejects: list[Reject]) -> Iterator[tuple[str, str, dict]]:
    """(file, location, record) of every outcome record, files in name (time) order; every other
    line (not JSON: a process killed mid-write leaves at most its last line cut short; another
    format) and every unreadable file is a reject."""
    for line in read_log_lines(folder):
        if line.record is None:
            rejects.append(Reject(line.file, f"line {line.line}" if line.line else "file", line.problem or ""))
        else:
            yield line.file, f"line {line.line}", line.record


def _apply(outcomes: dict, record: dict, fields: tuple[str, str]) -> None:
    for field, side in zip(fields, ("edge_quality", "cloud_quality")):
        if record.get(field) is not None:
            outcomes[side] = record[field]


def _n_endpoint(request: dict) -> bool:
    """Whether an N-endpoint bundle routed the request (its record names the chosen `endpoint`)."""
    return request.get("endpoint") is not None


def _mismatch(record: dict, request: dict) -> str | None:
    """Why a feedback or shadow record cannot apply to its request, or None. N-endpoint requests take
    feedback `outcomes` for their bundle's endpoints, qualities in [0, 1]; two-endpoint ones take
    edge_quality / cloud_quality; no N-endpoint request is shadowed."""
    request_id, kind = record["request_id"], record["type"]
    if not _n_endpoint(request):
        if kind == "feedback" and record.get("outcomes") is not None:
            return (
                f"feedback gives outcomes for request_id {request_id}, which was routed between edge and cloud "
                "(its feedback is edge_quality / cloud_quality)"
            )
        return None
    names = request.get("endpoints") or []
    if kind == "shadow":
        return f"shadow record for request_id {request_id}, which an N-endpoint bundle routed (never shadowed)"
    outcomes = record.get("outcomes")
    if outcomes is None:
        return (
            f"feedback gives edge_quality / cloud_quality for request_id {request_id}, which was routed among "
            f"{', '.join(map(str, names))}: N-endpoint feedback is outcomes {{endpoint: quality}}"
        )
    if not isinstance(outcomes, dict) or not outcomes:
        return f"feedback outcomes must be a non-empty object {{endpoint: quality}}, got {str(outcomes)[:80]}"
    for name, quality in outcomes.items():
        if name not in names:
            return (
                f"feedback gives an outcome for endpoint {name[:80]!r}, which the bundle that routed request_id "
                f"{request_id} does not have ({', '.join(map(str, names))})"
            )
        if isinstance(quality, bool) or not isinstance(quality, (int, float)) or not 0.0 <= quality <= 1.0:
            return f"feedback outcomes.{name} is not a quality in [0, 1]: {str(quality)[:80]}"
    return None


def iter_outcome_log(folder: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """Canonical rows of an SDK outcome-log folder (see the module doc)."""
    requests: dict[str, tuple[str, str, dict]] = {}
    outcomes: dict[str, dict] = {}
    answers: dict[str, dict] = {}
    later: list[tuple[str, str, dict]] = []
    for file, location, record in _records(folder, rejects):
        kind, request_id = record.get("type"), record.get("request_id")
        if not isinstance(request_id, str) or not request_id:
            rejects.append(Reject(file, location, f"record without a request_id: {request_id!r}"))
        elif kind == "request":
            if request_id in requests:
                rejects.append(
                    Reject(
                        file,
                        location,
                        f"request_id {request_id} logged twice (first at "
                        f"{requests[request_id][0]} {requests[request_id][1]})",
                    )
                )
                continue
            requests[request_id] = (file, location, record)
            if _n_endpoint(record):  # the observed failures; the row's checks judge what they hold
                logged = record.get("outcomes")
                outcomes[request_id] = dict(logged) if isinstance(logged, dict) else {}
            else:
                _apply(outcomes.setdefault(request_id, {}), record, ("edge_quality", "cloud_quality"))
        elif kind in ("feedback", "shadow"):
            later.append((file, location, record))
        else:
            rejects.append(Reject(file, location, f"unknown record type {kind!r}"))
    for file, location, record in sorted(later, key=lambda item: _time(item[2])):
        request_id = record["request_id"]
        if request_id not in requests:
            rejects.append(
                Reject(file, location, f"{record['type']} for request_id {request_id}, which this log does not hold")
            )
            continue
        request = requests[request_id][2]
        problem = _mismatch(record, request)
        if problem is not None:
            rejects.append(Reject(file, location, problem))
        elif _n_endpoint(request):
            outcomes[request_id].update(record["outcomes"])  # later feedback over earlier, per endpoint
        elif record["type"] == "feedback":
            _apply(outcomes[request_id], record, ("edge_quality", "cloud_quality"))
        else:
            side = record.get("side")
            if record.get("quality") is not None and side in ("edge", "cloud"):
                outcomes[request_id].setdefault(f"{side}_quality", record["quality"])
            if isinstance(record.get("response"), str):
                answers.setdefault(request_id, {})[side] = record["response"]
    for index, (request_id, (file, location, record)) in enumerate(requests.items()):
        if _n_endpoint(record):
            if record.get("prompt") is None:
                rejects.append(Reject(file, location, _NO_TEXT.format(request_id=request_id)))
            else:
                yield RawRow(file, location, _endpoint_row(request_id, record, outcomes[request_id]), index)
            continue
        edge_answer = record.get("edge_response") or answers.get(request_id, {}).get("edge")
        yield RawRow(
            file,
            location,
            {
                "request_id": request_id,
                "prompt": record.get("prompt"),
                "precision": record.get("precision"),
                "source": "sdk",
                "routed_to": record.get("target"),
                "propensity": record.get("propensity"),
                "edge_response": edge_answer,
                **outcomes[request_id],
                # store_prompts=False: the model inputs the logging bundle computed (data.schema.TOKENS)
                **({TOKENS: record.get("features")} if record.get("prompt") is None else {}),
            },
            index,
        )


_NO_TEXT = (
    "request_id {request_id}, routed by an N-endpoint bundle, was logged without its text (privacy "
    "token_ids or embedding): N-endpoint training reads prompts (log with privacy='text')"
)


def _endpoint_row(request_id: str, record: dict, outcomes: dict) -> dict:
    """An N-endpoint request's row (data.endpoint_logs: `outcomes`, `routed_to`, `propensity`): the
    endpoint the bundle chose, with the probability it chose it, and every outcome known so far."""
    return {
        "request_id": request_id,
        "prompt": record.get("prompt"),
        "precision": record.get("precision"),
        "source": "sdk",
        "outcomes": outcomes,
        "routed_to": record.get("endpoint"),
        "propensity": record.get("propensity"),
    }


def _time(record: dict) -> float:
    value = record.get("time")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
