"""`make label` against judges on 127.0.0.1 that answer badly or slowly: every answer the judge
cannot grade is counted with its reason, printed as written, and no judge request outlives
`--timeout-s` (the happy path is tests/test_traffic.py::test_make_label_grades_logged_answers_with_a_judge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving import Router
from serving.monitoring._outcome_log import OutcomeLog
from tests.dripping import DrippingServer, elapsed
from tests.judge import JudgeServer, completion, make_label
from tests.test_endpoint_bundle import trained  # noqa: F401  (the session's N-endpoint bundle)


def outcome_log(folder: Path, answers: dict[str, str]) -> Path:
    """An outcome log of one served answer per prompt (a router on the rule table serves them)."""
    log = OutcomeLog(folder)
    router = Router.load(folder.parent / "no-bundle", log=log)
    for prompt in answers:
        router.execute(prompt, edge=lambda p: answers[p], cloud=lambda p: answers[p])
    log.close()
    return folder


def judging(replies: dict[str, object]) -> JudgeServer:
    """A judge whose reply content, for a graded answer holding one of `replies`' keys, is that
    key's value (any JSON value)."""
    return JudgeServer(lambda prompt: next(value for key, value in replies.items() if key in prompt))


def printed(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def feedback(folder: Path) -> list[dict]:
    return [
        r
        for f in sorted(folder.glob("*.jsonl"))
        for r in map(json.loads, f.read_text().splitlines())
        if r["type"] == "feedback"
    ]


def test_a_reply_whose_content_is_not_text_is_a_failed_grade_with_its_reason(tmp_path):
    """A number, or a list that holds no text parts, in the judge's `content` is counted as a
    failed grade (it ended the whole run with a TypeError); a list of text parts, as OpenAI
    servers may send, is read as its text."""
    logs = outcome_log(
        tmp_path / "logs", {"Pick a number.": "number-answer", "List it.": "list-answer", "Use parts.": "parts-answer"}
    )
    replies = {
        "number-answer": 8,
        "list-answer": ["Rating: [[8]]"],
        "parts-answer": [{"type": "text", "text": "Fine. Rating: "}, {"type": "text", "text": "[[8]]"}],
    }
    with judging(replies) as judge:
        result = make_label(logs, judge.url)
    assert result.exit_code == 1 and not isinstance(result.exception, TypeError), result.exception
    out = printed(result)
    assert "graded 1, already known 0, failed 2" in out
    assert "the answer's message content is neither text nor null: 1" in out
    assert "no text in the judge's reply: 1" in out
    (graded,) = feedback(logs)
    assert graded["edge_quality"] == pytest.approx(7 / 9) and graded["source"] == "judge:judge-1"


def test_failure_reasons_and_names_are_printed_as_written(tmp_path):
    """Reasons and paths reach the terminal literally, not as rich markup ("no [[rating]]"
    printed as "no []"; a folder named with "[/x]" raised rich's MarkupError)."""
    logs = outcome_log(tmp_path / "logs", {"Decide.": "ramble", "Decide again.": "ramble on"})
    with judging({"ramble": "I cannot decide."}) as judge:
        result = make_label(logs, judge.url)
        missing = make_label(tmp_path / "logs[/x] [bold]", judge.url)
    assert result.exit_code == 1
    assert "failed 2 (no [[rating]] in the judge's reply: 2)" in printed(result)
    assert missing.exit_code == 2 and "logs[/x] [bold] is not an outcome-log folder" in printed(missing)


@pytest.mark.parametrize("drip", ["headers", "body"])
def test_timeout_s_is_the_deadline_of_each_judge_request(tmp_path, drip):
    """A judge that sends its reply a byte every 0.25 s never trips a per-read timeout of 1 s;
    each request ends at `--timeout-s 1` instead (these 4 answers took 44 s, or 67 s when the
    headers drip, before), and is retried twice like any timeout."""
    logs = outcome_log(tmp_path / "logs", {f"Question {i}?": f"Answer {i}." for i in range(4)})
    with DrippingServer(completion("Rating: [[8]]"), drip=drip, interval_s=0.25) as judge:
        took, result = elapsed(make_label, logs, f"{judge.url}/v1", "--timeout-s", "1")
        attempts = judge.answered
    assert result.exit_code == 1 and "graded 0, already known 0, failed 4" in printed(result)
    assert "no complete answer from judge-1 within 1 s: 4" in printed(result)
    assert attempts == 12 and feedback(logs) == []
    assert took < 12  # 3 attempts of 1 s and 1.5 s of back-off, the 4 answers side by side


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--base-url", "ftp://judge.example/[/v1]"],
            "base_url='ftp://judge.example/[/v1]': expected an http:// or https:// URL",
        ),
        (["--timeout-s", "0"], "timeout_s=0.0: must be a positive number of seconds"),
    ],
)
def test_a_bad_judge_url_or_timeout_is_refused_before_any_request(tmp_path, args, message):
    """A clear error and exit 2 (both were tried, failed and retried for every answer before)."""
    logs = outcome_log(tmp_path / "logs", {"Decide.": "an answer"})
    with judging({"answer": "Rating: [[8]]"}) as judge:
        result = make_label(logs, judge.url, *args)  # the later --base-url wins
    assert result.exit_code == 2 and message in printed(result) and feedback(logs) == []


def test_make_label_grades_an_n_endpoint_bundles_answers_and_training_reads_the_grades(trained, tmp_path):  # noqa: F811
    """An N-endpoint bundle's request records hold the served answer (`response`, served_by naming its
    endpoint): the judge grades it, the feedback is `outcomes` {endpoint: quality}, the reader's row
    holds that outcome and the answer (what the acceptance check learns from), and a second run finds
    nothing left to grade."""
    from data.endpoint_logs import read_endpoint_logs
    from tests.endpoint_doubles import Calls
    from tests.test_endpoint_bundle import NAMES, TOPICS

    made, public = trained
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(made.folder, strict=True, public_key=public, log=log)
    runs = [router.execute(prompt, endpoints=Calls(NAMES).sync) for prompt in TOPICS[:3]]
    log.close()
    with judging({"answers": "Good. Rating: [[10]]"}) as judge:
        result = make_label(tmp_path / "logs", judge.url)
        again = make_label(tmp_path / "logs", judge.url)
    assert result.exit_code == 0 and "graded 3, already known 0, failed 0" in printed(result), result.output
    assert again.exit_code == 0 and "graded 0, already known 3, failed 0" in printed(again)
    graded = feedback(tmp_path / "logs")
    assert sorted((r["request_id"], r["outcomes"]) for r in graded) == sorted(
        (run.request_id, {run.served_by: 1.0}) for run in runs
    )
    frame, rejects = read_endpoint_logs([tmp_path / "logs"], NAMES)
    assert rejects == [] and len(frame) == 3
    for _, row in frame.iterrows():
        served = next(run.served_by for run in runs if run.request_id == row["request_id"])
        assert row[f"q_{served}"] == 1.0 and row[f"response_{served}"].startswith(f"{served} answers")
