"""`make label`: grade the answers in an SDK outcome log with an LLM judge.

For every logged answer whose quality is not known yet (the answer that served a request,
whatever the bundle, and a shadow run's answer), the judge model, behind any OpenAI-compatible
chat-completions endpoint, grades it with MT-Bench's single-answer template (a 1-10
rating in "[[ ]]"); the rating becomes a quality in [0, 1], (rating - 1) / 9, written back
to the same log folder as a `feedback` record with `source` "judge:<model>", which
training joins like any other feedback: edge_quality / cloud_quality for a request routed
between edge and cloud, `outcomes` {endpoint: quality} for an N-endpoint bundle's.

The judge's key is read from an environment variable (`--api-key-env`), never from the
command line. The judge is called through the routed chat client's HTTP side
(serving.chat._upstream): reads are bounded, a key the judge echoes is redacted from errors,
and each request must be complete within `--timeout-s`, however slowly the judge sends. An
answer the judge could not grade (an HTTP error or no complete answer after retries, a reply
that is not a chat completion, holds no text or no rating) gets no record and is counted by
reason; the run ends with how many were graded, skipped as already known, and failed, and
exits 1 when any failed. Lines of the log that cannot be read (serving.monitoring._outcome_log.read_log_lines)
are not graded, and the run says how many and where the first one is.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable

import typer

if TYPE_CHECKING:
    from serving.monitoring._outcome_log import LoggedLine

# MT-Bench's single-answer grading prompt (lm-sys/FastChat, judge_prompts "single-v1").
JUDGE_SYSTEM = "You are a helpful assistant."
JUDGE_TEMPLATE = (
    "[Instruction]\nPlease act as an impartial judge and evaluate the quality of the response provided by an AI "
    "assistant to the user question displayed below. Your evaluation should consider factors such as the "
    "helpfulness, relevance, accuracy, depth, creativity, and level of detail of the response. Begin your "
    "evaluation by providing a short explanation. Be as objective as possible. After providing your explanation, "
    'you must rate the response on a scale of 1 to 10 by strictly following this format: "[[rating]]", for '
    'example: "Rating: [[5]]".\n\n[Question]\n{question}\n\n[The Start of Assistant\'s Answer]\n{answer}\n'
    "[The End of Assistant's Answer]"
)
RATING = re.compile(r"\[\[(\d+(?:\.\d+)?)\]\]")
BACKOFF_S = 0.5  # before the first retry; doubled before each next one, at most 4 s


def rating_quality(reply: str) -> float | None:
    """(rating - 1) / 9 from the judge's reply ("[[7]]" -> 0.667); None without a 1-10 rating."""
    found = RATING.findall(reply or "")
    if not found:
        return None
    rating = float(found[-1])
    return (rating - 1.0) / 9.0 if 1.0 <= rating <= 10.0 else None


TWO_ENDPOINTS = ["edge", "cloud"]


def _two_endpoint(request: dict) -> bool:
    """Whether the request was routed between edge and cloud (its feedback is edge_quality /
    cloud_quality): its record names those endpoints, or none (written before every record did)."""
    names = request.get("endpoints")
    return names is None or names == TWO_ENDPOINTS


def _known(record: dict) -> set[str]:
    """The endpoints a request or feedback record gives a quality of: edge_quality / cloud_quality,
    and `outcomes` (an endpoint that failed, feedback of any endpoint)."""
    known = {side for side in ("edge", "cloud") if record.get(f"{side}_quality") is not None}
    outcomes = record.get("outcomes")
    if isinstance(outcomes, dict):
        known.update(name for name, quality in outcomes.items() if quality is not None)
    return known


def pending_answers(folder: Path) -> tuple[list[dict], int, list[LoggedLine]]:
    """(answers to grade: request_id, side (the endpoint that answered), question, answer, and whether
    the request's feedback is edge_quality / cloud_quality (`two_endpoint`) or outcomes; how many
    already have a quality; the lines that could not be read, each with its file, line and problem).
    Every bundle's request records hold the served answer: as edge_response / cloud_response from the
    endpoints named edge and cloud, else as `response` with `served_by` naming its endpoint."""
    from serving.monitoring._outcome_log import read_log_lines

    requests, known, shadows, unreadable = {}, set(), [], []
    for line in read_log_lines(folder):
        record = line.record
        if record is None:
            unreadable.append(line)
            continue
        kind, request_id = record.get("type"), record.get("request_id")
        if kind == "request":
            requests[request_id] = record
        if kind in ("request", "feedback"):
            known.update((request_id, name) for name in _known(record))
        elif kind == "shadow":
            shadows.append(record)
    answers = []
    for request_id, record in requests.items():
        served = [(side, record.get(f"{side}_response")) for side in ("edge", "cloud")]
        served.append((record.get("served_by"), record.get("response")))
        for side, answer in served:
            if isinstance(side, str) and isinstance(answer, str):
                answers.append(
                    {
                        "request_id": request_id,
                        "side": side,
                        "answer": answer,
                        "question": record.get("prompt"),
                        "two_endpoint": _two_endpoint(record),
                    }
                )
    for shadow in shadows:
        request = requests.get(shadow.get("request_id"))
        if request is not None and isinstance(shadow.get("response"), str):
            answers.append(
                {
                    "request_id": shadow["request_id"],
                    "side": shadow.get("side"),
                    "answer": shadow["response"],
                    "question": request.get("prompt"),
                    "two_endpoint": True,  # only two-endpoint requests are shadowed
                }
            )
    todo = [a for a in answers if a["question"] and (a["request_id"], a["side"]) not in known]
    return todo, len(answers) - len(todo), unreadable


class Judge:
    """One OpenAI-compatible chat-completions endpoint; each request complete within `timeout_s`
    or abandoned, and retried (`retries` times) after a timeout, a failed connection, 408, 429
    or 5xx. Used from one event loop at a time (`label` runs one)."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None, timeout_s: float = 60.0, retries: int = 2):
        from serving.chat._endpoint import Endpoint
        from serving.chat._upstream import Upstream

        self.model, self.retries = model, retries
        self._upstream = Upstream("judge", Endpoint(base_url, model, api_key=api_key, timeout_s=timeout_s))

    async def grade(self, question: str, answer: str) -> tuple[float | None, str | None]:
        """(quality, None) or (None, why not)."""
        from serving.chat._errors import UpstreamError, UpstreamHTTPError, UpstreamMalformed
        from serving.chat._request import ChatRequest

        messages = [
            {"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_TEMPLATE.format(question=question, answer=answer)},
        ]
        request = ChatRequest.build(messages, {"temperature": 0, "max_tokens": 1024})
        why = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(min(BACKOFF_S * 2 ** (attempt - 1), 4.0))
            try:
                reply = await self._upstream.acomplete(request)
            except UpstreamHTTPError as exc:
                why = f"HTTP {exc.status}"
                if exc.status not in (408, 429) and exc.status < 500:
                    return None, why  # a client error will not go away by retrying
            except UpstreamMalformed as exc:  # not a chat completion, or content neither text nor null
                return None, _reason(exc)
            except UpstreamError as exc:  # no complete answer in time, no connection: retried
                why = _reason(exc)
            else:
                if not reply.strip():
                    return None, "no text in the judge's reply"
                quality = rating_quality(reply)
                return (quality, None) if quality is not None else (None, "no [[rating]] in the judge's reply")
        return None, why

    async def aclose(self) -> None:
        """Close the connections of the running event loop."""
        await self._upstream.aclose()


def _reason(error) -> str:
    """An UpstreamError's message without the endpoint's name in front."""
    return str(error).removeprefix(f"{error.endpoint}: ")


async def _grade_all(
    judge: Judge, todo: list[dict], concurrency: int, record: Callable[[dict, float | None, str | None], None]
) -> None:
    """Grade every answer of `todo`, `concurrency` requests at a time; `record(item, quality, why)`
    as each grade ends, so that what was graded is kept if the run stops."""
    pending = iter(todo)

    async def worker() -> None:
        for item in pending:  # one iterator shared by the workers: each answer is graded once
            record(item, *await judge.grade(item["question"], item["answer"]))

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await judge.aclose()


def label(folder: Path, judge: Judge, *, concurrency: int = 4, limit: int | None = None) -> dict:
    """Grade the pending answers of `folder` and append their feedback records; returns the counts."""
    from serving.monitoring._outcome_log import LOG_FORMAT, OutcomeLog

    todo, known, unreadable = pending_answers(folder)
    todo = todo[:limit] if limit else todo
    log = OutcomeLog(folder)
    failures: dict[str, int] = {}
    graded = 0

    def record(item: dict, quality: float | None, why: str | None) -> None:
        nonlocal graded
        if quality is None:
            failures[why] = failures.get(why, 0) + 1
            return
        log.append(
            {
                "log": LOG_FORMAT,
                "type": "feedback",
                "request_id": item["request_id"],
                "time": time.time(),
                **(
                    {f"{item['side']}_quality": quality}
                    if item["two_endpoint"] and item["side"] in ("edge", "cloud")
                    else {"outcomes": {item["side"]: quality}}
                ),
                "source": f"judge:{judge.model}",
            }
        )
        graded += 1

    try:
        asyncio.run(_grade_all(judge, todo, concurrency, record))
    finally:
        log.close()
    return {
        "graded": graded,
        "already_known": known,
        "failed": sum(failures.values()),
        "failures": failures,
        "unreadable": len(unreadable),
        "first_unreadable": f"{unreadable[0].file}:{unreadable[0].line}: {unreadable[0].problem}"
        if unreadable
        else None,
        "written": log.written,
        "dropped": log.dropped,
    }


def main(
    folder: Annotated[Path, typer.Option("--logs", help="the SDK's outcome-log folder")],
    base_url: Annotated[str, typer.Option(help="the judge's OpenAI-compatible base URL, e.g. http://host/v1")],
    model: Annotated[str, typer.Option(help="the judge model's name")],
    api_key_env: Annotated[
        str, typer.Option(help="environment variable holding the judge's API key")
    ] = "JUDGE_API_KEY",
    concurrency: Annotated[int, typer.Option(min=1, help="judge requests at a time")] = 4,
    timeout_s: Annotated[float, typer.Option(help="each judge request's deadline, whole answer included")] = 60.0,
    limit: Annotated[int, typer.Option(help="grade at most N")] = 0,
) -> None:
    """Grade logged answers with an LLM judge and write their qualities back to the log (module doc)."""
    from rich.console import Console
    from rich.markup import escape

    from serving.monitoring._outcome_log import printable

    if not folder.is_dir():
        Console(stderr=True).print(f"[red]error[/]: {escape(str(folder))} is not an outcome-log folder", soft_wrap=True)
        raise typer.Exit(2)
    try:
        judge = Judge(base_url, model, api_key=os.environ.get(api_key_env), timeout_s=timeout_s)
    except ValueError as exc:  # the URL or the timeout
        Console(stderr=True).print(f"[red]error[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    result = label(folder, judge, concurrency=concurrency, limit=limit or None)
    reasons = ", ".join(f"{escape(why)}: {count}" for why, count in result["failures"].items())
    Console().print(
        f"graded {result['graded']}, already known {result['already_known']}, failed {result['failed']}"
        + (f" ({reasons})" if result["failed"] else "")
        + (
            f"; {result['unreadable']} unreadable lines not graded (first: {escape(printable(result['first_unreadable']))})"
            if result["unreadable"]
            else ""
        ),
        soft_wrap=True,
    )
    if result["failed"]:
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
