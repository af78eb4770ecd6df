"""From an N-endpoint deployment's traffic to N-endpoint training rows (docs/endpoints.md#from-your-
traffic-to-n-endpoint-training-rows): the session's four-endpoint bundle routes real requests through
Router.execute over local stub endpoints, with an outcome log; `router.feedback(outcomes=...)`
gives endpoints' qualities; the log folder reads back (data.sdk_logs) into rows with `outcomes`, the
routed endpoint and its propensity, which data.endpoint_logs.read_endpoint_logs (what `make endpoints
--data` reads) accepts. Bad feedback is a clear error in the SDK and a reject at its file and line in
the reader; two-endpoint feedback writes exactly the record it wrote before."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from data.endpoint_logs import read_endpoint_logs
from data.sdk_logs import iter_outcome_log
from serving import EndpointsFailed, Router
from serving.monitoring._outcome_log import LOG_FORMAT, OutcomeLog
from tests.endpoint_doubles import Calls
from tests.test_endpoint_bundle import NAMES, TOPICS, climbing, trained  # noqa: F401  (the N-endpoint bundle fixture)
from training.endpoints import EndpointRows

PROMPTS = [
    *TOPICS,
    "What is 2 + 2?",
    "Draft a lease termination clause for a commercial tenant in breach of covenant.",
    "Summarise the causes of the French Revolution in three sentences.",
    "Translate 'good morning' into Spanish.",
]


def records(folder: Path) -> list[tuple[str, int, dict]]:
    """(file, line number, record) of every line of the log, in order."""
    return [
        (str(file), number, json.loads(line))
        for file in sorted(folder.glob("outcomes-*.jsonl"))
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1)
        if line.strip()
    ]


@pytest.fixture
def logged(trained, tmp_path):  # noqa: F811
    """The bundle's router with an outcome log, not exploring (explore_rate 0: every request runs
    as decided; tests/test_endpoint_exploration.py explores)."""
    made, public = trained
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(made.folder, strict=True, public_key=public, log=log, explore_rate=0.0, seed=0)
    yield router, log
    log.close()


@pytest.fixture
def logged_climbing(trained, tmp_path):  # noqa: F811
    """`logged` over the bundle with a wider margin (tests.test_endpoint_bundle.climbing), where
    most prompts have an endpoint to fall back to."""
    log = OutcomeLog(tmp_path / "logs")
    yield climbing(trained, tmp_path, log=log, explore_rate=0.0, seed=0), log
    log.close()


def test_traffic_with_outcome_feedback_becomes_n_endpoint_rows(logged_climbing, tmp_path):
    router, log = logged_climbing
    decisions = [router.route(p) for p in PROMPTS]
    climbing = next(i for i, d in enumerate(decisions) if len(d.cascade) > 1)  # somewhere to fall back to
    waiting = max(i for i in range(len(PROMPTS)) if i != climbing)  # no feedback: no outcome known yet
    stubs = Calls(NAMES, fail={(decisions[climbing].endpoint, PROMPTS[climbing]): ConnectionError("down")})
    runs = [router.execute(p, endpoints=stubs.sync) for p in PROMPTS]
    assert runs[climbing].served_by == decisions[climbing].cascade[1]
    expected: list[dict[str, float]] = []
    for i, run in enumerate(runs):
        outcomes = {run.decision.endpoint: 0.0} if i == climbing else {}  # the failed call: an observed 0
        if i != waiting:
            quality = float(i % 2)
            assert router.feedback(run.request_id, outcomes={run.served_by: quality}, source="thumbs")
            outcomes[run.served_by] = quality
        expected.append(outcomes)
    # Later feedback over earlier, per endpoint; and a judge's grade of an endpoint that never ran.
    other = next(name for name in NAMES if name != runs[0].served_by)
    assert router.feedback(runs[0].request_id, outcomes={runs[0].served_by: 0.25, other: 0.75}, source="judge:x")
    expected[0].update({runs[0].served_by: 0.25, other: 0.75})
    assert log.flush()

    logged_requests = [r for _, _, r in records(tmp_path / "logs") if r["type"] == "request"]
    assert [r["request_id"] for r in logged_requests] == [run.request_id for run in runs]
    for record, decision in zip(logged_requests, decisions):
        # Not exploring: the endpoint the bundle chose ran first, with probability 1.
        assert (record["endpoint"], record["cascade"]) == (decision.endpoint, list(decision.cascade))
        assert (record["propensity"], record["explored"], record["endpoints"]) == (1.0, False, list(NAMES))
    failed = logged_requests[climbing]
    assert failed["outcomes"] == {decisions[climbing].endpoint: 0.0}
    assert [(t["endpoint"], t["outcome"]) for t in failed["tried"]] == [
        (decisions[climbing].cascade[0], "error"),
        (decisions[climbing].cascade[1], "served"),
    ]

    rejects: list = []
    rows = [raw.row for raw in iter_outcome_log(tmp_path / "logs", rejects)]
    assert rejects == []
    assert [row["request_id"] for row in rows] == [run.request_id for run in runs]
    assert [row["outcomes"] for row in rows] == expected
    assert [row["routed_to"] for row in rows] == [d.endpoint for d in decisions]
    assert {row["propensity"] for row in rows} == {1.0} and {row["source"] for row in rows} == {"sdk"}

    frame, rejects = read_endpoint_logs([tmp_path / "logs"], NAMES)  # what make endpoints --data reads
    (unlabelled,) = rejects  # the request still waiting for feedback: said, not dropped
    request_file, request_line, _ = next(
        (f, n, r) for f, n, r in records(tmp_path / "logs") if r.get("request_id") == runs[waiting].request_id
    )
    assert (unlabelled.file, unlabelled.location) == (request_file, f"line {request_line}")
    assert "outcomes is missing or empty" in unlabelled.reason
    labelled = [i for i in range(len(runs)) if i != waiting]
    assert list(frame["request_id"]) == [runs[i].request_id for i in labelled]
    for name in NAMES:
        known = [expected[i].get(name, np.nan) for i in labelled]
        np.testing.assert_array_equal(frame[f"q_{name}"].to_numpy(float), known)
    rows_read = EndpointRows.from_frame(frame, NAMES)
    partial = ~np.isfinite(rows_read.quality).all(axis=1)
    assert partial.all()  # one or two outcomes each: weighed by their propensity
    assert [NAMES[k] for k in rows_read.routed] == [decisions[i].endpoint for i in labelled]
    np.testing.assert_array_equal(rows_read.propensity, np.ones(len(labelled)))


def test_async_requests_are_logged_alike(logged, tmp_path):
    router, log = logged
    run = asyncio.run(router.aexecute(PROMPTS[0], endpoints=Calls(NAMES).asyn))
    assert router.feedback(run.request_id, outcomes={run.served_by: 1.0})
    log.close()
    rejects: list = []
    (row,) = [raw.row for raw in iter_outcome_log(tmp_path / "logs", rejects)]
    assert rejects == []
    assert (row["routed_to"], row["propensity"], row["outcomes"]) == (
        run.decision.endpoint,
        1.0,
        {run.served_by: 1.0},
    )


def test_bad_outcome_feedback_is_a_clear_error_and_writes_nothing(trained, logged, tmp_path):  # noqa: F811
    router, log = logged
    run = router.execute(PROMPTS[0], endpoints=Calls(NAMES).sync)
    first = NAMES[0]
    cases = [
        ({"outcomes": {"ghost": 1.0}}, f"'ghost', which is not an endpoint of this router ({', '.join(NAMES)})"),
        ({"outcomes": {first: 1.5}}, f"outcomes['{first}']=1.5: must be a number in [0, 1]"),
        ({"outcomes": {first: True}}, f"outcomes['{first}']=True: must be a number in [0, 1]"),
        ({"outcomes": {first: None}}, f"outcomes['{first}']=None: must be a number in [0, 1]"),
        ({"outcomes": {}}, "outcomes is empty"),
        ({"outcomes": [(first, 1.0)]}, "outcomes must be a mapping {endpoint: quality}, got list"),
        ({"outcomes": {first: 1.0}, "edge_quality": 1.0}, "not both in one feedback"),
        ({"edge_quality": 1.0}, f"this router routes among {', '.join(NAMES)} (an N-endpoint bundle): give outcomes="),
        ({}, "give outcomes={endpoint: quality}"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            router.feedback(run.request_id, **kwargs)
    with pytest.raises(ValueError, match="request_id=''"):
        router.feedback("", outcomes={first: 1.0})
    log.close()
    assert [r["type"] for _, _, r in records(tmp_path / "logs")] == ["request"] and log.dropped == 0
    made, public = trained
    without_log = Router.load(made.folder, strict=True, public_key=public)
    assert without_log.feedback(run.request_id, outcomes={first: 1.0}) is False  # no log: nothing to record


def test_two_endpoint_feedback_writes_the_record_it_wrote_before(tmp_path):
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(tmp_path / "no-bundle", log=log)  # the rule table: edge and cloud
    run = router.execute("What is 2 + 2?", edge=lambda p: "edge answer", cloud=lambda p: "cloud answer")
    assert router.feedback(run.request_id, edge_quality=1.0, source="thumbs")
    assert router.feedback(run.request_id, cloud_quality=0.0)
    assert router.feedback(run.request_id, outcomes={"edge": 0.5})  # the N-endpoint spelling of the same
    for kwargs, message in (
        ({"outcomes": {"phone-3b": 1.0}}, "'phone-3b', which is not an endpoint of this router (edge, cloud)"),
        ({"outcomes": {"edge": 1.0}, "cloud_quality": 1.0}, "not both"),
        ({"edge_quality": 2.0}, "edge_quality=2.0: must be a number in [0, 1]"),
        ({}, "feedback needs edge_quality or cloud_quality"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            router.feedback(run.request_id, **kwargs)
    log.close()
    request, *feedback = [r for _, _, r in records(tmp_path / "logs")]
    # Every bundle's record names its endpoints; a two-endpoint one keeps what two-endpoint readers read.
    assert (request["endpoint"], request["endpoints"], request["outcomes"]) == (
        request["target"],
        ["edge", "cloud"],
        {},
    )
    assert request["cascade"][0] == request["target"] and [t["endpoint"] for t in request["tried"]] == ["edge"]
    assert request["edge_response"] == "edge answer" and request["response"] is None
    assert [list(r) for r in feedback] == [
        ["log", "type", "request_id", "time", "edge_quality", "cloud_quality", "source"]
    ] * 3
    assert [(r["edge_quality"], r["cloud_quality"], r["source"]) for r in feedback] == [
        (1.0, None, "thumbs"),
        (None, 0.0, None),
        (0.5, None, None),
    ]
    rejects: list = []
    (row,) = [raw.row for raw in iter_outcome_log(tmp_path / "logs", rejects)]
    assert rejects == [] and "outcomes" not in row
    assert (row["routed_to"], row["edge_quality"], row["cloud_quality"]) == (request["target"], 0.5, 0.0)


def test_feedback_that_does_not_fit_its_request_is_a_reject_at_its_own_line(trained, tmp_path):  # noqa: F811
    made, public = trained
    log = OutcomeLog(tmp_path / "logs")
    n_router = Router.load(made.folder, strict=True, public_key=public, log=log)
    two_router = Router.load(tmp_path / "no-bundle", log=log)  # one folder, both kinds of request
    n_run = n_router.execute(PROMPTS[1], endpoints=Calls(NAMES).sync, request_id="n-1")
    two_router.execute("What is 2 + 2?", edge=lambda p: "e", cloud=lambda p: "c", request_id="two-1")
    routed = n_run.decision.endpoint
    # What a hand-edited log or another tool might write: each marked by its source.
    bad = {
        "unknown-request": ("nobody", {"outcomes": {routed: 1.0}}),
        "unknown-endpoint": ("n-1", {"outcomes": {"ghost": 1.0}}),
        "out-of-range": ("n-1", {"outcomes": {routed: 1.5}}),
        "not-an-object": ("n-1", {"outcomes": [1.0]}),
        "two-endpoint-spelling": ("n-1", {"edge_quality": 1.0}),
        "n-endpoint-outcomes-for-two": ("two-1", {"outcomes": {routed: 1.0}}),
    }
    for source, (request_id, fields) in bad.items():
        log.append(
            {
                "log": LOG_FORMAT,
                "type": "feedback",
                "request_id": request_id,
                "time": time.time(),
                **fields,
                "source": source,
            }
        )
    log.append(
        {
            "log": LOG_FORMAT,
            "type": "shadow",
            "request_id": "n-1",
            "time": time.time(),
            "side": "cloud",
            "source": "shadow",
        }
    )
    assert n_router.feedback("n-1", outcomes={routed: 1.0}, source="valid")
    assert two_router.feedback("two-1", edge_quality=1.0, source="valid")
    log.close()
    lines = {r.get("source"): (f, f"line {n}") for f, n, r in records(tmp_path / "logs") if r["type"] != "request"}
    rejects: list = []
    rows = {raw.row["request_id"]: raw.row for raw in iter_outcome_log(tmp_path / "logs", rejects)}
    reasons = {(r.file, r.location): r.reason for r in rejects}
    assert len(rejects) == len(bad) + 1  # each bad record, nothing else
    names = ", ".join(NAMES)
    for source, reason in {
        "unknown-request": "feedback for request_id nobody, which this log does not hold",
        "unknown-endpoint": f"endpoint 'ghost', which the bundle that routed request_id n-1 does not have ({names})",
        "out-of-range": f"feedback outcomes.{routed} is not a quality in [0, 1]: 1.5",
        "not-an-object": "feedback outcomes must be a non-empty object",
        "two-endpoint-spelling": f"edge_quality / cloud_quality for request_id n-1, which was routed among {names}",
        "n-endpoint-outcomes-for-two": f"endpoint {routed!r}, which the bundle that routed request_id two-1 does not "
        "have (edge, cloud)",
        "shadow": "shadow record for request_id n-1, which an N-endpoint bundle routed",
    }.items():
        assert reason in reasons[lines[source]], (source, reasons)
    # The rows stand on the rest.
    assert (rows["n-1"]["outcomes"], rows["n-1"]["routed_to"]) == ({routed: 1.0}, routed)
    assert rows["two-1"]["edge_quality"] == 1.0 and "outcomes" not in rows["two-1"]
    # outcomes {edge, cloud} for a two-endpoint request: the other spelling of its two qualities
    log = OutcomeLog(tmp_path / "logs")
    log.append(
        {
            "log": LOG_FORMAT,
            "type": "feedback",
            "request_id": "two-1",
            "time": time.time() + 1,
            "outcomes": {"cloud": 0.25},
        }
    )
    log.close()
    rows = {raw.row["request_id"]: raw.row for raw in iter_outcome_log(tmp_path / "logs", [])}
    assert (rows["two-1"]["edge_quality"], rows["two-1"]["cloud_quality"]) == (1.0, 0.25)

    # An endpoint the spec of `make endpoints` does not have: the request's row is a reject at its line.
    spec = tuple(name for name in NAMES if name != routed)
    frame, rejects = read_endpoint_logs([tmp_path / "logs"], spec)
    request_lines = {
        r["request_id"]: (f, f"line {n}") for f, n, r in records(tmp_path / "logs") if r["type"] == "request"
    }
    reasons = {(r.file, r.location): r.reason for r in rejects}
    assert f"outcomes names endpoint {routed!r}, which is not in the spec" in reasons[request_lines["n-1"]]
    assert "need endpoints named edge and cloud" in reasons[request_lines["two-1"]]
    assert len(frame) == 0


def test_an_n_endpoint_request_logged_without_its_text_is_a_reject_saying_why(trained, tmp_path):  # noqa: F811
    made, public = trained
    log = OutcomeLog(tmp_path / "logs", privacy="token_ids")
    router = Router.load(made.folder, strict=True, public_key=public, log=log)
    run = router.execute(PROMPTS[0], endpoints=Calls(NAMES).sync)
    assert router.feedback(run.request_id, outcomes={run.served_by: 1.0})
    log.close()
    assert log.dropped == 0
    rejects: list = []
    assert list(iter_outcome_log(tmp_path / "logs", rejects)) == []
    (reject,) = rejects
    assert reject.location == "line 1" and "logged without its text" in reject.reason


NEW_FIELDS = ("endpoint", "endpoints", "cascade", "tried", "expected_cost", "outcomes", "response")


def test_every_record_has_one_shape_and_records_from_before_read_as_they_did(trained, tmp_path):  # noqa: F811
    """Both kinds of bundle write the same fields; the reader tells them apart by `endpoints`. Records
    written before (a two-endpoint one without those fields, an N-endpoint one without `tried` and
    `response`) give the rows they gave, and a two-endpoint record's new fields change nothing of its row
    (a failed cloud call in `outcomes` is not read as a cloud outcome)."""
    made, public = trained
    log = OutcomeLog(tmp_path / "logs")
    n_router = Router.load(made.folder, strict=True, public_key=public, log=log)
    two_router = Router.load(tmp_path / "no-bundle", log=log)
    n_router.execute(PROMPTS[1], endpoints=Calls(NAMES).sync, request_id="n-1")

    def cloud_down(prompt):
        raise ConnectionError("down")

    with pytest.raises(EndpointsFailed):  # edge and cloud both fail: the record holds both failures
        two_router.execute("What is 3 + 3?", edge=cloud_down, cloud=cloud_down, request_id="two-1")
    two_router.execute("What is 2 + 2?", edge=lambda p: "edge answer", cloud=cloud_down, request_id="two-2")
    assert two_router.feedback("two-2", edge_quality=1.0)
    log.close()
    written = {r["request_id"]: r for _, _, r in records(tmp_path / "logs") if r["type"] == "request"}
    assert set(written["n-1"]) == set(written["two-1"]) == set(written["two-2"])  # one shape
    assert written["two-1"]["outcomes"] == {"edge": 0.0, "cloud": 0.0} and written["two-1"]["endpoints"] == [
        "edge",
        "cloud",
    ]
    assert (
        written["n-1"]["response"].startswith(f"{written['n-1']['served_by']} answers")
        and written["n-1"]["edge_response"] is None
    )
    new_rows = {raw.row["request_id"]: raw.row for raw in iter_outcome_log(tmp_path / "logs", [])}
    assert (new_rows["two-1"]["edge_quality"], new_rows["two-1"].get("cloud_quality")) == (0.0, None)  # as before

    # The same log as the SDK wrote it before every record named its endpoints.
    old = tmp_path / "old"
    old.mkdir()
    lines = []
    for _, _, record in records(tmp_path / "logs"):
        if record["type"] == "request" and record["request_id"].startswith("two"):
            record = {k: v for k, v in record.items() if k not in NEW_FIELDS}
        elif record["type"] == "request":
            record = {k: v for k, v in record.items() if k not in ("tried", "expected_cost", "response")}
        lines.append(json.dumps(record))
    (old / "outcomes-0-1-0.jsonl").write_text("\n".join(lines) + "\n")
    rejects: list = []
    old_rows = {raw.row["request_id"]: raw.row for raw in iter_outcome_log(old, rejects)}
    assert new_rows["n-1"].pop("responses") == {written["n-1"]["served_by"]: written["n-1"]["response"]}
    assert rejects == [] and old_rows == new_rows
    assert old_rows["two-2"]["edge_quality"] == 1.0 and old_rows["n-1"]["routed_to"] == written["n-1"]["endpoint"]
