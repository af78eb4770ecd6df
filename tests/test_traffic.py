"""Learning from the app's own traffic: the SDK's outcome log, exploration and shadow runs,
feedback, reading the log back for training, and off-policy evaluation."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from serving import Router
from serving.monitoring._outcome_log import LOG_FORMAT, OutcomeLog
from tests.conftest import ROOT
from tests.judge import JudgeServer, make_label


def records(folder: Path) -> list[dict]:
    return [
        json.loads(line)
        for file in sorted(folder.glob("outcomes-*.jsonl"))
        for line in file.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def edge(prompt):
    return "edge answer"


def cloud(prompt):
    return "cloud answer"


# --- the log itself ----------------------------------------------------------------------


def test_records_are_written_off_the_request_path_and_rotated(tmp_path):
    log = OutcomeLog(tmp_path / "logs", max_file_bytes=2048)
    for i in range(200):
        assert log.append({"log": LOG_FORMAT, "type": "feedback", "request_id": f"r{i}", "edge_quality": 1.0})
    log.close()
    written = records(tmp_path / "logs")
    assert [r["request_id"] for r in written] == [f"r{i}" for i in range(200)]  # all, in order
    assert len(list((tmp_path / "logs").glob("outcomes-*.jsonl"))) > 3  # rotated
    assert (log.written, log.dropped) == (200, 0)


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path):
    log = OutcomeLog(tmp_path / "logs", max_queue=1, flush_interval_s=60)  # the writer waits: one slot, taken
    results = [log.append({"log": LOG_FORMAT, "type": "feedback", "request_id": f"r{i}"}) for i in range(50)]
    assert results == [True] + [False] * 49 and log.dropped == 49
    log.close()
    assert [r["request_id"] for r in records(tmp_path / "logs")] == ["r0"] and log.written == 1
    assert not log.append({"log": LOG_FORMAT, "type": "feedback", "request_id": "late"}) and log.dropped == 50


def test_request_ids_are_unique_and_differ_in_a_forked_child(tmp_path):
    from serving.monitoring._outcome_log import new_request_id

    ids = {new_request_id() for _ in range(10_000)}
    assert len(ids) == 10_000 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child's first id must not be the parent's next one
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.waitpid(child, 0)
    in_child = os.read(read, 64).decode()
    assert in_child != new_request_id() and in_child not in ids


def test_an_unwritable_folder_warns_once_counts_and_routing_continues(bundle, tmp_path, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the log folder should be")
    log = OutcomeLog(blocker / "logs")
    router = Router.load(bundle, log=log)
    with caplog.at_level(logging.WARNING, logger="serving"):
        runs = [router.execute(f"What is {i} plus {i}?", edge=edge, cloud=cloud) for i in range(5)]
        assert log.flush()
    assert all(r.response in ("edge answer", "cloud answer") for r in runs)
    assert log.dropped == 5 and log.written == 0 and "Error" in log.last_error
    assert len([r for r in caplog.records if "outcome log cannot write" in r.getMessage()]) == 1
    log.close()


KILLED_WRITER = """
import sys, time
sys.path.insert(0, {root!r})
from serving.monitoring._outcome_log import LOG_FORMAT, OutcomeLog
log = OutcomeLog({folder!r})
i = 0
while True:
    log.append({{"log": LOG_FORMAT, "type": "feedback", "request_id": f"r{{i}}", "edge_quality": 1.0,
                "source": "x" * 2000}})
    i += 1
    if i % 100 == 0:
        print(i, flush=True)
        time.sleep(0.01)
"""


def test_a_killed_process_leaves_only_whole_records_but_perhaps_a_cut_last_line(tmp_path):
    """SIGKILL mid-stream: every complete line is a record; the reader rejects a cut last line
    with its reason instead of failing, and keeps the rest."""
    from data.sdk_logs import iter_outcome_log

    folder = tmp_path / "logs"
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER.format(root=str(ROOT), folder=str(folder))], stdout=subprocess.DEVNULL
    )

    def on_disk() -> int:
        return sum(f.read_bytes().count(b"\n") for f in folder.glob("outcomes-*.jsonl"))

    deadline = time.monotonic() + 60
    while on_disk() < 900 and time.monotonic() < deadline:  # the writer is at work: kill it mid-stream
        time.sleep(0.01)
    written_before_kill = on_disk()
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    lines = [line for f in folder.glob("outcomes-*.jsonl") for line in f.read_text().split("\n") if line]
    parsed = []
    for line in lines[:-1]:
        parsed.append(json.loads(line))  # every line but perhaps the last is whole
    try:
        parsed.append(json.loads(lines[-1]))
    except ValueError:
        pass  # the one line the kill may have cut
    assert written_before_kill >= 900  # what had reached the disk stays there, whole
    assert len(parsed) >= 900 and [r["request_id"] for r in parsed] == [f"r{i}" for i in range(len(parsed))]
    rejects = []
    list(iter_outcome_log(folder, rejects))  # feedback without requests: each one a reject with a reason
    assert all(r.reason.startswith(("feedback for request_id", "not JSON")) for r in rejects)


def test_redaction_and_store_prompts_false(bundle, tmp_path):
    redacted = OutcomeLog(tmp_path / "redacted", redact=lambda text: text.replace("Alice", "[name]"))
    router = Router.load(bundle, log=redacted)
    router.execute("Alice asks: what is 2 + 2?", edge=lambda p: "Alice, it is 4", cloud=lambda p: "Alice: 4")
    redacted.close()
    text = "".join(p.read_text() for p in (tmp_path / "redacted").glob("*.jsonl"))
    assert "Alice" not in text and "[name] asks" in text

    private = OutcomeLog(tmp_path / "private", store_prompts=False)
    router = Router.load(bundle, log=private)
    router.execute("My account number is 99-1234, what is my balance?", edge=edge, cloud=cloud)
    private.close()
    (record,) = records(tmp_path / "private")
    assert "99-1234" not in json.dumps(record) and record["prompt"] is None
    assert record["edge_response"] is None and record["cloud_response"] is None
    features = record["features"]
    assert features["model_version"] == router.model_version and len(features["input_ids"]) > 5
    assert len(features["scalars"]) == len(features["feature_names"])


# --- the router's records, exploration, shadows, feedback ---------------------------------


def test_execute_records_what_was_decided_and_what_ran(bundle, tmp_path):
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(bundle, log=log)

    def failing_edge(prompt):
        raise ConnectionError("device asleep")

    run = router.execute("What is the capital of France?", edge=failing_edge, cloud=cloud, request_id="req-1")
    assert run.request_id == "req-1"
    assert router.feedback("req-1", cloud_quality=1.0, source="thumbs up")
    with pytest.raises(ValueError, match="cloud_quality=1.5"):
        router.feedback("req-1", cloud_quality=1.5)
    with pytest.raises(ValueError, match="needs edge_quality or cloud_quality"):
        router.feedback("req-1")
    log.close()
    request, feedback = records(tmp_path / "logs")
    decision = router.route("What is the capital of France?")
    assert request["type"] == "request" and request["request_id"] == "req-1"
    assert (request["zone"], request["score"], request["model_version"]) == (
        decision.zone,
        pytest.approx(decision.score),
        router.model_version,
    )
    assert request["propensity"] == 1.0 and request["explored"] is False
    if decision.target == "edge":  # the failed edge call is an observed edge failure
        assert request["served_by"] == "cloud" and request["edge_quality"] == 0.0
        assert (
            request["fallback_reason"] == "left edge=error:ConnectionError"
            and request["cloud_response"] == "cloud answer"
        )
        assert [s["name"] for s in request["steps"]] == ["edge", "cloud"]
    assert feedback == {
        **feedback,
        "type": "feedback",
        "request_id": "req-1",
        "cloud_quality": 1.0,
        "source": "thumbs up",
    }


def test_exploration_flips_the_first_side_at_the_rate_and_logs_the_propensity(bundle, tmp_path):
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(bundle, log=log, explore_rate=0.2, seed=7)
    prompts = [f"Question {i}: what is {i} times {i + 3}?" for i in range(400)]
    runs = [router.execute(p, edge=edge, cloud=cloud) for p in prompts]
    log.close()
    logged = records(tmp_path / "logs")
    explored = [r for r in logged if r["explored"]]
    assert 0.15 < len(explored) / len(logged) < 0.25
    assert {r["propensity"] for r in explored} == {0.2}
    assert {r["propensity"] for r in logged if not r["explored"]} == {0.8}
    for run, record, prompt in zip(runs, logged, prompts):
        chosen = router.route(prompt).target
        assert (record["target"] != chosen) == record["explored"]
        assert run.decision.target == record["target"]
    with pytest.raises(ValueError, match="need an outcome log"):
        Router.load(bundle, explore_rate=0.1)
    with pytest.raises(ValueError, match="explore_rate=1.5"):
        Router.load(bundle, log=OutcomeLog(tmp_path / "other"), explore_rate=1.5)


def test_shadow_runs_log_the_other_sides_answer_off_the_request_path(bundle, tmp_path):
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(bundle, log=log, shadow_rate=1.0, seed=0)
    slow_calls = []
    released = threading.Event()

    def slow_cloud(prompt):  # the shadow's call ends only when the test lets it (or after 10 s)
        released.wait(timeout=10)
        slow_calls.append(prompt)
        return "cloud answer"

    prompt = "What is 2 + 2?"
    assert router.route(prompt).target == "edge"
    run = router.execute(prompt, edge=edge, cloud=slow_cloud)
    assert run.served_by == "edge" and not slow_calls  # served without waiting for the shadow
    released.set()
    deadline = time.monotonic() + 5
    while not slow_calls and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.05)
    log.close()
    request, shadow = records(tmp_path / "logs")
    assert shadow == {
        **shadow,
        "type": "shadow",
        "request_id": run.request_id,
        "side": "cloud",
        "response": "cloud answer",
        "error": None,
    }


def test_aexecute_records_and_shadows_on_the_event_loop(bundle, tmp_path):
    """Router.aexecute: the same record as execute(); the shadow run is a task on the caller's
    loop that finishes after the answer was returned."""
    import asyncio

    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(bundle, log=log, shadow_rate=1.0, seed=0)
    shadowed = []

    async def edge_call(prompt):
        return "edge answer"

    async def cloud_call(prompt):
        await asyncio.sleep(0.2)
        shadowed.append(prompt)
        return "cloud answer"

    async def run():
        execution = await router.aexecute("What is 2 + 2?", edge_call, cloud_call)
        before = list(shadowed)
        for _ in range(100):  # the shadow task runs on this loop meanwhile
            if shadowed:
                break
            await asyncio.sleep(0.05)
        return execution, before

    execution, before = asyncio.run(run())
    assert execution.served_by == "edge" and before == [] and shadowed == ["What is 2 + 2?"]
    log.close()
    request, shadow = records(tmp_path / "logs")
    assert (request["type"], request["request_id"], request["served_by"], request["edge_response"]) == (
        "request",
        execution.request_id,
        "edge",
        "edge answer",
    )
    assert shadow == {
        **shadow,
        "type": "shadow",
        "request_id": execution.request_id,
        "side": "cloud",
        "response": "cloud answer",
        "error": None,
    }


# --- reading the log for training ----------------------------------------------------------


def test_the_log_reads_back_as_rows_with_the_outcomes_known_so_far(bundle, tmp_path):
    from data.logs import load_logs

    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(bundle, log=log, explore_rate=0.5, seed=1)
    runs = [router.execute(f"Tell me about topic number {i}", edge=edge, cloud=cloud) for i in range(30)]
    for run in runs[:20]:  # outcomes for the side that ran first; the last 10 wait for feedback
        router.feedback(run.request_id, **{f"{run.decision.target}_quality": 1.0})
    router.feedback("no-such-request", edge_quality=1.0)
    log.close()
    loaded = load_logs([tmp_path / "logs"], max_reject_share=0.2)
    assert len(loaded.rows) == 20
    kinds = [r.kind for r in loaded.rejects]
    assert kinds.count("unlabelled") == 10 and kinds.count("invalid") == 1
    assert "which this log does not hold" in next(r.reason for r in loaded.rejects if r.kind == "invalid")
    by_id = {r["request_id"]: r for r in loaded.rows}
    for run in runs[:20]:
        row = by_id[run.request_id]
        side = run.decision.target
        assert row["routed_to"] == side and row[f"{side}_quality"] == 1.0 and row["source"] == "sdk"
        assert row["propensity"] == 0.5


def test_rows_with_one_outcome_need_their_propensity():
    from data.schema import RowError, Unlabelled, check_row

    base = {"prompt": "p", "edge_quality": 1.0}
    with pytest.raises(RowError, match="needs `routed_to` and `propensity`"):
        check_row(base, default_source="s")
    with pytest.raises(RowError, match="ran as a fallback"):
        check_row({**base, "routed_to": "cloud", "propensity": 0.9}, default_source="s")
    with pytest.raises(RowError, match="propensity must be a probability"):
        check_row({**base, "routed_to": "edge", "propensity": 0}, default_source="s")
    with pytest.raises(Unlabelled):
        check_row({"prompt": "p", "routed_to": "edge", "propensity": 1.0}, default_source="s")
    row = check_row({**base, "routed_to": "edge", "propensity": 0.9}, default_source="s")
    assert (row["edge_quality"], row["cloud_quality"], row["propensity"]) == (1.0, None, 0.9)


def test_outcome_weights_per_estimator():
    import pandas as pd

    from training.partial import head_rows, with_outcome_weights

    frame = pd.DataFrame(
        {
            "prompt": ["a", "b", "c"],
            "edge_quality": [1.0, 0.0, np.nan],
            "cloud_quality": [1.0, np.nan, 1.0],
            "propensity": [np.nan, 0.1, 0.01],
        }
    )
    plug_in = with_outcome_weights(frame)
    assert plug_in["weight_edge"].tolist() == [1.0, 1.0, 0.0] and plug_in["weight_cloud"].tolist() == [1.0, 0.0, 1.0]
    ipw = with_outcome_weights(frame, estimator="ipw", max_weight=20)
    assert ipw["weight_edge"].tolist() == [1.0, pytest.approx(10.0), 0.0]
    assert ipw["weight_cloud"].tolist() == [1.0, 0.0, 20.0]  # 1 / 0.01, clipped
    known, weights = head_rows(ipw, "edge_quality")
    assert known.tolist() == [True, True, False]
    with pytest.raises(ValueError, match="unknown partial_estimator"):
        with_outcome_weights(frame, estimator="magic")


# --- off-policy evaluation ------------------------------------------------------------------


def test_off_policy_estimates_recover_a_known_policy_value():
    """Uniform random logging (p = 0.5), rewards drawn from known rates: IPS, SNIPS and DR of
    "always edge" land near the true edge rate, inside their intervals."""
    from evaluation.off_policy import off_policy

    rng = np.random.default_rng(0)
    n = 4000
    p_edge_true = rng.uniform(0.3, 0.9, n)
    p_cloud_true = np.clip(p_edge_true + 0.15, 0, 1)
    routed = np.where(rng.uniform(size=n) < 0.5, "edge", "cloud")
    reward = np.where(routed == "edge", rng.uniform(size=n) < p_edge_true, rng.uniform(size=n) < p_cloud_true)
    out = off_policy(
        routed_to=routed,
        propensity=np.full(n, 0.5),
        reward=reward.astype(float),
        target=["edge"] * n,
        p_edge=p_edge_true + rng.normal(0, 0.05, n),
        p_cloud=p_cloud_true,
        rounds=300,
    )
    truth = p_edge_true.mean()
    for name in ("ips", "snips", "dr"):
        estimate, (lo, hi) = out["quality"][name]["estimate"], out["quality"][name]["ci95"]
        assert abs(estimate - truth) < 0.03 and lo <= truth <= hi, name
    assert out["cloud_share"]["exact"] == 0.0 and out["agreement"] == pytest.approx((routed == "edge").mean())
    with pytest.raises(ValueError, match="propensity in"):
        off_policy(routed_to=["edge"], propensity=[0.0], reward=[1.0], target=["edge"], p_edge=[0.5], p_cloud=[0.5])


# --- make label: an LLM judge over an OpenAI-compatible endpoint -----------------------------


def graded_like_a_judge(prompt: str) -> str | None:
    """[[8]] for most answers, no rating for answers holding "ramble", HTTP 500 for "crash"."""
    if "crash" in prompt:
        return None
    return "Fine.\nRating: [[8]]" if "ramble" not in prompt else "I cannot decide."


def test_make_label_grades_logged_answers_with_a_judge(bundle, tmp_path, monkeypatch):
    import pipelines.label as label_command

    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(bundle, log=log)
    answers = {"What is 2 + 2?": "4", "Name a prime number.": "7 ramble", "Spell cat.": "c-a-t crash"}
    runs = {p: router.execute(p, edge=lambda p: answers[p], cloud=lambda p: answers[p]) for p in answers}
    log.close()
    judge = JudgeServer(graded_like_a_judge)
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "sk-judge-very-secret")
    monkeypatch.setattr(label_command, "BACKOFF_S", 0)  # no back-off waits in the test
    try:
        result = make_label(tmp_path / "logs", judge.url, "--api-key-env", "JUDGE_KEY_FOR_TEST")
    finally:
        judge.close()
    assert result.exit_code == 1, result.output  # one answer could not be graded
    assert "graded 1, already known 0, failed 2" in result.output and "sk-judge" not in result.output
    assert {r["auth"] for r in judge.requests} == {"Bearer sk-judge-very-secret"}
    assert {r["path"] for r in judge.requests} == {"/v1/chat/completions"}
    assert sum("crash" in r["body"]["messages"][-1]["content"] for r in judge.requests) == 3  # retried 5xx twice
    feedback = [r for r in records(tmp_path / "logs") if r["type"] == "feedback"]
    (graded,) = feedback
    run = runs["What is 2 + 2?"]
    assert graded["request_id"] == run.request_id and graded["source"] == "judge:judge-1"
    assert graded[f"{run.served_by}_quality"] == pytest.approx(7 / 9)
    # A second run grades nothing twice: the graded answer is now known.
    from pipelines.label import pending_answers

    todo, known, unreadable = pending_answers(tmp_path / "logs")
    assert known == 1 and len(todo) == 2 and unreadable == []


def test_make_label_says_how_many_lines_it_could_not_read_and_where(tmp_path, monkeypatch):
    """An unreadable line is not graded, and not passed over in silence: the summary counts such
    lines and names the first one's file and line (its terminal text escaped)."""
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(tmp_path / "no-bundle", log=log)  # the rule table decides: no bundle needed
    router.execute("What is 2 + 2?", edge=lambda p: "4", cloud=lambda p: "4")
    log.close()
    (file,) = sorted((tmp_path / "logs").glob("*.jsonl"))
    with file.open("ab") as fh:
        fh.write(b'{"log": "not json\x1b[31m\n')
    judge = JudgeServer(graded_like_a_judge)
    try:
        result = make_label(tmp_path / "logs", judge.url)
    finally:
        judge.close()
    assert result.exit_code == 0, result.output
    assert "graded 1" in result.output and "1 unreadable lines not graded" in result.output
    assert f"{file.name}:2:" in result.output and "\x1b" not in result.output


# --- training from, and evaluating on, the SDK's own logs -----------------------------------


@pytest.fixture(scope="module")
def replayed(bundle, small_routellm, tmp_path_factory):
    """A slice of the real logs replayed through Router.execute with exploration; the outcome of
    the side that ran first is fed back, as production would."""
    from data.logs import load_logs
    from data.prepare import merge_duplicates
    from pipelines.replay import replay

    frame = merge_duplicates(load_logs([small_routellm]).frame()).sample(n=1500, random_state=0)
    folder = tmp_path_factory.mktemp("replayed") / "outcomes"
    summary = replay(frame, bundle, folder, explore_rate=0.2, seed=0)
    return folder, summary


@pytest.mark.real_data
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["local", "dask"])
def test_make_train_reads_the_outcome_log_and_learns_from_one_outcome_rows(
    replayed, small_routellm, encoder_cache, tmp_path, engine
):
    """Both engines, with shared heads (training.partial.share_heads): `auto` would keep them
    separate here, as the replayed prompts join their benchmark rows, which know both outcomes."""
    from tests.conftest import QUICK_ACCEPTANCE_ROUNDS, config_for
    from training.engines.base import train

    folder, summary = replayed
    assert summary["written"] == 2 * summary["requests"] and summary["dropped"] == 0
    assert 0.1 < summary["explored"] / summary["requests"] < 0.3
    config = config_for(
        tmp_path,
        small_routellm,
        encoder_cache,
        engine={"name": engine, "dask_workers": 2},
        model={"head_sharing": "shared"},
        acceptance={"rounds": QUICK_ACCEPTANCE_ROUNDS},
    )
    config.data.append(str(folder))  # the benchmark slice (both outcomes) and the SDK's outcome log
    result = train(config)
    outcomes = result.manifest.data["outcomes"]
    assert outcomes["edge_only"] + outcomes["cloud_only"] == 1500 and outcomes["edge_only"] > 300
    assert outcomes["cloud_only"] > 100 and outcomes["estimator"] == "plug_in"
    assert result.manifest.data["duplicates_merged"] >= 1500  # replayed prompts joined their benchmark rows
    assert result.metrics["test"]["learned"]["apgr"] > 0.5  # figures on the rows with both outcomes
    # one booster, two heads; the training checked the bundle scores as it does (parity, from raw text)
    assert result.metrics["heads"] == "shared" and result.metrics["parity_max_abs_diff"] <= 1e-4


@pytest.mark.real_data
@pytest.mark.slow
def test_the_dask_engine_reads_a_request_without_outcome_as_unlabelled_not_invalid(bundle, tmp_path):
    from training.engines.dask_partitions import unit_frame

    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(bundle, log=log)
    router.execute("What is 2 + 2?", edge=edge, cloud=cloud)  # no feedback: no outcome yet
    log.close()
    (file,) = (tmp_path / "logs").glob("*.jsonl")
    frame = unit_frame(str(tmp_path / "logs"))
    assert len(frame) == 1 and frame["reject_kind"].tolist() == ["unlabelled"]
    assert frame["reject_reason"].iloc[0] and frame["prompt"].isna().all()


@pytest.mark.real_data
@pytest.mark.slow
def test_make_evaluate_on_sdk_logs_gives_off_policy_estimates(replayed, bundle, encoder_cache, tmp_path):
    from evaluation.config import EvalConfig
    from pipelines.evaluate import run

    folder, _ = replayed
    result = run(
        EvalConfig(
            bundle=str(bundle),
            logs=[str(folder)],
            out=str(tmp_path / "report"),
            split="all",
            cache_dir=str(encoder_cache),
            mlflow=False,
        )
    )
    ope = result.metrics["off_policy"]
    assert "figures" not in result.metrics and ope["requests"] == 1500
    # The logging policy was this very bundle, exploring 20%: it agrees with itself on ~80%,
    # and the three estimators of its unexplored quality agree with each other.
    assert 0.7 < ope["agreement"] < 0.9
    estimates = [ope["quality"][name]["estimate"] for name in ("ips", "snips", "dr")]
    assert max(estimates) - min(estimates) < 0.05
    for name in ("ips", "snips", "dr"):
        lo, hi = ope["quality"][name]["ci95"]
        assert lo < ope["quality"][name]["estimate"] < hi, name
    assert ope["cloud_share"]["exact"] == pytest.approx(ope["logging_policy"]["cloud_share"], abs=0.15)
    report = (tmp_path / "report" / "report.md").read_text()
    assert report.startswith("# Off-policy evaluation") and "| DR |" in report


def test_make_targets_run_the_commands():
    out = subprocess.run(
        ["make", "-n", "label", "replay", "LOGS=my/logs", "JUDGE_URL=http://127.0.0.1:9/v1", "JUDGE_MODEL=judge-1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-m pipelines.label --logs my/logs --base-url http://127.0.0.1:9/v1 --model judge-1" in out
    assert "-m pipelines.replay" in out


# --- promotion ------------------------------------------------------------------------------


def test_the_promotion_rule_both_ways():
    from training.promotion import decide

    champion = {"logged": {"quality": 0.80, "cloud_share": 0.40}}
    cheaper_same = {"logged": {"quality": 0.797, "cloud_share": 0.35}}
    better_dearer = {"logged": {"quality": 0.82, "cloud_share": 0.60}}
    worse = {"logged": {"quality": 0.78, "cloud_share": 0.20}}
    dearer_same = {"logged": {"quality": 0.80, "cloud_share": 0.45}}
    assert decide(cheaper_same, champion, margin=0.005)[0]
    assert decide(better_dearer, champion, margin=0.005)[0]
    assert not decide(worse, champion, margin=0.005)[0]
    assert not decide(dearer_same, champion, margin=0.005)[0]
    assert decide(worse, None, margin=0.005) == (True, "no champion yet: the first bundle becomes it")
    # Every set of logs must agree.
    mixed = {**cheaper_same, "full": {"quality": 0.70, "cloud_share": 0.35}}
    assert not decide(mixed, {**champion, "full": {"quality": 0.75, "cloud_share": 0.40}}, margin=0.005)[0]


@pytest.fixture(scope="module")
def private_training(bundle, small_routellm, encoder_cache, tmp_path_factory):
    """600 prompts of the slice replayed with OutcomeLog(store_prompts=False) (token ids and
    scalars, not one prompt), and one training on the slice's MMLU rows (no edge answers: no
    acceptance check to fit) and that log, registered in a fresh MLflow store: what the no-text
    test asserts on, and the first bundle the promotion test registers (one training for both)."""
    from data.logs import load_logs
    from data.prepare import merge_duplicates
    from pipelines.replay import replay
    from tests.conftest import config_for
    from training.engines.base import train

    tmp = tmp_path_factory.mktemp("private_training")
    frame = merge_duplicates(load_logs([small_routellm]).frame()).sample(n=600, random_state=1)
    folder = tmp / "private"
    replay(frame, bundle, folder, explore_rate=0.2, seed=0, store_prompts=False)
    store = f"sqlite:///{tmp}/mlflow.db"
    config = config_for(tmp / "a", small_routellm / "mmlu", encoder_cache, mlflow={"tracking_uri": store})
    config.data.append(str(folder))
    return SimpleNamespace(frame=frame, folder=folder, store=store, result=train(config))


@pytest.mark.real_data
@pytest.mark.slow
def test_make_promote_first_champion_dry_run_and_a_decision(
    replayed, private_training, small_routellm, encoder_cache, tmp_path
):
    from mlflow.tracking import MlflowClient

    from tests.conftest import config_for
    from training.engines.base import train
    from training.promotion import decide, promote

    folder, _ = replayed
    store = private_training.store  # nothing registered in it but `first`, and no champion yet
    # Both fitted on the slice's MMLU rows (no edge answers: no acceptance check to fit; the first
    # also on a one-outcome log, private_training), judged on the replayed log and on GSM8K's rows.
    first = private_training.result
    second = train(
        config_for(
            tmp_path / "b",
            small_routellm / "mmlu",
            encoder_cache,
            mlflow={"tracking_uri": store},
            boosting={"rounds": 3, "early_stopping_rounds": 1},
        )
    )
    client = MlflowClient(tracking_uri=store)
    options = {"logs": [str(folder)], "full_logs": [str(small_routellm / "gsm8k")]}
    made = promote(first.bundle, **options)
    assert made["promote"] and made["champion_version"] is None
    assert str(client.get_model_version_by_alias("edge-cloud-router", "champion").version) == first.model_version
    dry = promote(second.bundle, dry_run=True, **options)
    assert str(client.get_model_version_by_alias("edge-cloud-router", "champion").version) == first.model_version
    assert dry["champion_version"] == first.model_version and set(dry["challenger"]) == {"logged", "full"}
    real = promote(second.bundle, **options)
    assert real["promote"] == decide(real["challenger"], real["champion"], margin=0.005)[0] == dry["promote"]
    expected = second.model_version if real["promote"] else first.model_version
    assert str(client.get_model_version_by_alias("edge-cloud-router", "champion").version) == expected
    tags = client.get_run(second.run_id).data.tags
    assert tags["promotion.decision"].startswith("promoted" if real["promote"] else "kept champion")


@pytest.mark.real_data
@pytest.mark.slow
def test_make_train_learns_from_a_log_that_kept_no_text(private_training):
    """store_prompts=False: the log holds token ids and scalars, not one prompt; training uses
    them, and they are exactly what the new bundle computes from the text."""
    from data.logs import read_unit
    from training.engines.dask_partitions import unit_frame

    frame, folder, result = private_training.frame, private_training.folder, private_training.result
    text = "".join(f.read_text(encoding="utf-8") for f in folder.glob("*.jsonl"))
    assert not any(prompt in text for prompt in frame["prompt"])

    assert result.manifest.data["token_rows"] == {"read": 600, "used": 600, "skipped": {}}
    outcomes = result.manifest.data["outcomes"]
    assert outcomes["edge_only"] + outcomes["cloud_only"] >= 600 and outcomes["edge_only"] > 100

    # What was logged (in replay order) is what the new bundle computes from each prompt's text.
    logged = read_unit(folder).token_frame()["prompt_tokens"].tolist()
    assert len(logged) == 600
    new = Router.load(result.bundle, strict=True)._routing._scorer.extractor  # noqa: SLF001
    for tokens, prompt, precision in zip(logged, frame["prompt"], frame["precision"]):
        ids, mask, scalars, _, _ = new.prepare([prompt], [precision])
        assert tokens["input_ids"] == ids[0][mask[0] > 0].tolist() and tokens["scalars"] == scalars[0].tolist()

    # The Dask engine reads text rows only, and says so without counting them as bad data.
    rejects = unit_frame(str(folder))
    assert set(rejects["reject_kind"]) == {"no_text"} and "ENGINE=local" in rejects["reject_reason"].iloc[0]


def test_heads_are_shared_when_one_outcome_rows_outnumber_rows_with_both():
    import pandas as pd

    from training.partial import share_heads, sides_known

    edge = pd.Series([True, True, True, False, True])
    cloud = pd.Series([True, False, False, True, True])
    counts = sides_known(edge, cloud)
    assert {k: int(v) for k, v in counts.items()} == {"both": 2, "one": 3}
    assert share_heads("auto", heads=2, **counts)
    assert not share_heads("auto", heads=2, both=3, one=3)  # a tie: separate heads, as with full information
    assert not share_heads("auto", heads=1, both=0, one=5)  # one head (cloud_needed): nothing to share
    assert share_heads("shared", heads=2, both=5, one=0) and not share_heads("separate", heads=2, both=0, one=5)
    with pytest.raises(ValueError, match="needs an objective with two or more heads"):
        share_heads("shared", heads=1, both=0, one=0)
    with pytest.raises(ValueError, match="unknown head_sharing"):
        share_heads("always", heads=2, both=0, one=0)
