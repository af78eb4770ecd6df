"""Reader for the SDK's outcome log (serving.monitoring._outcome_log): a folder of `outcomes-*.jsonl`
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

Every request record names the endpoint run first (`endpoint`), its bundle's `endpoints`, the
`cascade`, what was `tried` and the observed failures (`outcomes`), whatever the bundle; records
are told apart by their `endpoints`. One routed between edge and cloud (`endpoints` edge, cloud; or
naming no endpoint: written before every record did) becomes the two-endpoint row above, read from
its edge_quality / cloud_quality and `target` as ever (its `outcomes` repeat what they say, and a
failed cloud call is not read as a cloud outcome, so the rows are what they were); feedback
`outcomes` {edge, cloud} for it is read as edge_quality / cloud_quality. A request an N-endpoint
bundle routed (any other `endpoints`) becomes an N-endpoint row instead (data.endpoint_logs, what
`make endpoints --data` reads): `outcomes` {endpoint: quality} from the endpoints that failed or
timed out (0) and from feedback `outcomes` (later over earlier, per endpoint), `routed_to` the
endpoint chosen and `propensity`. Feedback that does not fit its request (edge_quality for an
N-endpoint request, an endpoint its bundle does not have, a quality outside [0, 1]) and a shadow
record for an N-endpoint request are rejects at their own line; the request's row stands on the
rest. An N-endpoint request logged without its text is a reject: N-endpoint training reads prompts.

A request in a conversation carries `conversation` (its id's pseudonym), `turn`, `switched` and
`switch_cost` (serving.monitoring._traffic); its row carries them as they are (CONVERSATION_FIELDS),
so that training can link a conversation's turns by conversation and turn. A record without them
(every request outside a conversation, and every record from before) reads as before.

Every record whose shape is not the SDK's is a reject at its own line, with the reason, and the read
goes on: a request whose `endpoint` / `endpoints` / `outcomes` are not a name, a list of names and an
object, a shadow record whose `side` is not edge or cloud; later records of a rejected request say so.
Lines the reader refuses (serving.monitoring._outcome_log.read_log_lines: longer than MAX_LINE_BYTES, not UTF-8,
not JSON, nested too deeply, a number that is not a finite double) and files that are not regular
files (a FIFO, a device) are rejects too. Values quoted in a reason are cut short and escaped (repr).
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any, Iterator

from data.readers import RawRow
from data.schema import TOKENS, Reject
from serving.monitoring._outcome_log import FILE_PATTERN as PATTERN
from serving.monitoring._outcome_log import LOG_FORMAT, open_log_file, parse_record_line, printable, read_log_lines


def is_outcome_log_folder(path: Path) -> bool:
    """A folder of outcome files whose records say that the SDK wrote them: the first line
    that is not blank, in any of the files (a file may be empty: a full disk refused its first
    batch). A bounded read: at most RECOGNISE_BYTES of each file."""
    if not path.is_dir():
        return False
    return any(_first_record_is_ours(file) for file in sorted(path.glob(PATTERN)))


RECOGNISE_BYTES = 1 << 20  # a request record with a long prompt and answer fits; a stray large file costs 1 MiB


def _first_record_is_ours(file: Path) -> bool:
    fh, _ = open_log_file(file)  # None for a FIFO or a device named like a log: never opened, never waited on
    if fh is None:
        return False
    try:
        with fh:
            head = fh.read(RECOGNISE_BYTES)
    except OSError:
        return False
    line = next((line for line in head.split(b"\n") if line.strip()), b"")
    record, _, _ = parse_record_line(line)  # None: nothing, a line longer than the bound or cut short, not JSON
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


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 2, 6, 4


def _shown(value: Any) -> str:
    """A logged value in a reject's reason: its repr (control characters escaped), cut short."""
    return _SHORT.repr(value)


def _name(text: str) -> str:
    """A logged id or name in a reason: as it is, escaped for the terminal, cut to 80 characters."""
    return printable(text if len(text) <= 80 else text[:77] + "...")


def _names(names: list[str]) -> str:
    return ", ".join(map(_name, names[:20])) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")


TWO_ENDPOINTS = ["edge", "cloud"]  # a record's `endpoints` when a two-endpoint bundle (or the rule table) routed it


def _names_endpoints(request: dict) -> bool:
    """Whether the record names its endpoint and its bundle's endpoints: every record since every
    bundle's record did, and an N-endpoint bundle's before; not a two-endpoint record from before."""
    return request.get("endpoint") is not None or request.get("endpoints") is not None


def _n_endpoint(request: dict) -> bool:
    """Whether an N-endpoint bundle routed the request: its record's `endpoints` are not edge and
    cloud (records before every bundle's record named its endpoints: it names the chosen `endpoint`)."""
    return _names_endpoints(request) and request.get("endpoints") != TWO_ENDPOINTS


CONVERSATION_FIELDS = ("conversation", "turn", "switched", "switch_cost")


def _conversation_problem(request: dict) -> str | None:
    """Why a request record's conversation fields are not of the shape the SDK writes, or None:
    `conversation` a non-empty text (the id's pseudonym), `turn` a whole number >= 1 or null,
    `switched` true, false or null, `switch_cost` a number or null; none of them without
    `conversation`."""
    conversation = request.get("conversation")
    if conversation is None:
        stray = [name for name in CONVERSATION_FIELDS[1:] if request.get(name) is not None]
        return f"{stray[0]} without a conversation" if stray else None
    if not isinstance(conversation, str) or not conversation:
        return f"conversation must be the conversation id's pseudonym (text), got {_shown(conversation)}"
    turn, switched, cost = request.get("turn"), request.get("switched"), request.get("switch_cost")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int) or turn < 1):
        return f"turn must be a whole number >= 1 or null, got {_shown(turn)}"
    if switched is not None and not isinstance(switched, bool):
        return f"switched must be true, false or null, got {_shown(switched)}"
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, (int, float))):
        return f"switch_cost must be a number or null, got {_shown(cost)}"
    return None


def _conversation(record: dict) -> dict:
    """The conversation fields a row carries (none for a request outside a conversation)."""
    if record.get("conversation") is None:
        return {}
    return {name: record.get(name) for name in CONVERSATION_FIELDS}


def _request_problem(request: dict) -> str | None:
    """Why a request record is not of the shape the SDK writes, or None. A record that names its
    endpoints names the chosen `endpoint` among its bundle's `endpoints` and the observed failures as
    `outcomes`; one in a conversation its conversation fields (_conversation_problem)."""
    problem = _conversation_problem(request)
    if problem is not None or not _names_endpoints(request):
        return problem
    endpoint, names, logged = request.get("endpoint"), request.get("endpoints"), request.get("outcomes")
    if not isinstance(endpoint, str) or not endpoint:
        return f"endpoint must be the chosen endpoint's name, got {_shown(endpoint)}"
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        return f"endpoints must be the list of the bundle's endpoint names, got {_shown(names)}"
    if endpoint not in names:
        return f"endpoint {_name(endpoint)!r} is not among the record's endpoints ({_names(names)})"
    if logged is not None and not isinstance(logged, dict):
        return f"outcomes must be an object {{endpoint: quality}}, got {_shown(logged)}"
    return None


def _outcomes_problem(record: dict, names: list[str], request_id: str) -> str | None:
    """Why a feedback record's `outcomes` do not fit a request routed among `names`, or None."""
    outcomes = record["outcomes"]
    if not isinstance(outcomes, dict) or not outcomes:
        return f"feedback outcomes must be a non-empty object {{endpoint: quality}}, got {_shown(outcomes)}"
    for name, quality in outcomes.items():
        if name not in names:
            return (
                f"feedback gives an outcome for endpoint {_name(name)!r}, which the bundle that routed request_id "
                f"{request_id} does not have ({_names(names)})"
            )
        if isinstance(quality, bool) or not isinstance(quality, (int, float)) or not 0.0 <= quality <= 1.0:
            return f"feedback outcomes.{_name(name)} is not a quality in [0, 1]: {_shown(quality)}"
    return None


def _mismatch(record: dict, request: dict) -> str | None:
    """Why a feedback or shadow record cannot apply to its request, or None. Feedback `outcomes` name
    the endpoints of the bundle that routed it, qualities in [0, 1] (a two-endpoint request's: edge
    and cloud, read as edge_quality / cloud_quality); N-endpoint requests take no edge_quality /
    cloud_quality; no N-endpoint request is shadowed; a shadow record names its side."""
    request_id, kind = _name(record["request_id"]), record["type"]
    if not _n_endpoint(request):
        if kind == "feedback" and record.get("outcomes") is not None:
            return _outcomes_problem(record, TWO_ENDPOINTS, request_id)
        if kind == "shadow" and record.get("side") not in ("edge", "cloud"):
            return f"shadow record's side must be edge or cloud, got {_shown(record.get('side'))}"
        return None
    names = request["endpoints"]  # a list of names (_request_problem)
    if kind == "shadow":
        return f"shadow record for request_id {request_id}, which an N-endpoint bundle routed (never shadowed)"
    if record.get("outcomes") is None:
        return (
            f"feedback gives edge_quality / cloud_quality for request_id {request_id}, which was routed among "
            f"{_names(names)}: N-endpoint feedback is outcomes {{endpoint: quality}}"
        )
    return _outcomes_problem(record, names, request_id)


def iter_outcome_log(folder: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """Canonical rows of an SDK outcome-log folder (see the module doc)."""
    requests: dict[str, tuple[str, str, dict]] = {}
    refused: dict[str, str] = {}  # request_id -> where its request record was rejected
    outcomes: dict[str, dict] = {}
    answers: dict[str, dict] = {}
    later: list[tuple[str, str, dict]] = []
    for file, location, record in _records(folder, rejects):
        kind, request_id = record.get("type"), record.get("request_id")
        if not isinstance(request_id, str) or not request_id:
            rejects.append(Reject(file, location, f"record without a request_id: {_shown(request_id)}"))
        elif kind == "request":
            if request_id in requests:
                first = requests[request_id]
                rejects.append(
                    Reject(
                        file,
                        location,
                        f"request_id {_name(request_id)} logged twice (first at {first[0]} {first[1]})",
                    )
                )
                continue
            problem = _request_problem(record)
            if problem is not None:
                rejects.append(Reject(file, location, problem))
                refused.setdefault(request_id, f"{file} {location}")
                continue
            requests[request_id] = (file, location, record)
            if _n_endpoint(record):  # the observed failures; the row's checks judge what they hold
                outcomes[request_id] = dict(record.get("outcomes") or {})
            else:
                _apply(outcomes.setdefault(request_id, {}), record, ("edge_quality", "cloud_quality"))
        elif kind in ("feedback", "shadow"):
            later.append((file, location, record))
        else:
            rejects.append(Reject(file, location, f"unknown record type {_shown(kind)}"))
    for file, location, record in sorted(later, key=lambda item: _time(item[2])):
        request_id = record["request_id"]
        if request_id not in requests:
            held = f"whose request record was rejected ({refused[request_id]})" if request_id in refused else None
            rejects.append(
                Reject(
                    file,
                    location,
                    f"{record['type']} for request_id {_name(request_id)}, " + (held or "which this log does not hold"),
                )
            )
            continue
        request = requests[request_id][2]
        problem = _mismatch(record, request)
        if problem is not None:
            rejects.append(Reject(file, location, problem))
        elif _n_endpoint(request):
            outcomes[request_id].update(record["outcomes"])  # later feedback over earlier, per endpoint
        elif record["type"] == "feedback" and record.get("outcomes") is not None:  # {edge, cloud}: the two qualities
            _apply(outcomes[request_id], record["outcomes"], ("edge", "cloud"))
        elif record["type"] == "feedback":
            _apply(outcomes[request_id], record, ("edge_quality", "cloud_quality"))
        else:
            side = record["side"]  # edge or cloud (_mismatch)
            if record.get("quality") is not None:
                outcomes[request_id].setdefault(f"{side}_quality", record["quality"])
            if isinstance(record.get("response"), str):
                answers.setdefault(request_id, {})[side] = record["response"]
    for index, (request_id, (file, location, record)) in enumerate(requests.items()):
        if _n_endpoint(record):
            if record.get("prompt") is None:
                rejects.append(Reject(file, location, _NO_TEXT.format(request_id=_name(request_id))))
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
                **_conversation(record),
            },
            index,
        )


_NO_TEXT = (
    "request_id {request_id}, routed by an N-endpoint bundle, was logged without its text (privacy "
    "token_ids or embedding): N-endpoint training reads prompts (log with privacy='text')"
)


def _endpoint_row(request_id: str, record: dict, outcomes: dict) -> dict:
    """An N-endpoint request's row (data.endpoint_logs: `outcomes`, `routed_to`, `propensity`,
    `responses`): the endpoint the bundle chose, with the probability it chose it, every outcome known
    so far, and the served answer (`response`; records from before have none)."""
    served, answer = record.get("served_by"), record.get("response")
    return {
        "request_id": request_id,
        "prompt": record.get("prompt"),
        "precision": record.get("precision"),
        "source": "sdk",
        "outcomes": outcomes,
        "routed_to": record.get("endpoint"),
        "propensity": record.get("propensity"),
        # the served answer (what the acceptance check learns from once its endpoint's outcome is known)
        **({"responses": {served: answer}} if isinstance(served, str) and isinstance(answer, str) else {}),
        **_conversation(record),
    }


def _time(record: dict) -> float:
    """The record's time for ordering feedback; 0.0 when it has none. The reader has refused every
    number that is not a finite double (a 400-digit integer), so float() cannot overflow."""
    value = record.get("time")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
