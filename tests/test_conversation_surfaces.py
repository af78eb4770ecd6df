"""Conversations everywhere a request goes, short of the proxy (tests/test_proxy_conversations.py):
the budgets' ledger shared through a real Redis (spent once across processes, fail closed when Redis
is down), the routed chat client's turns (sync, async, streamed) against stub servers that record
which endpoint served each turn, the outcome log's conversation fields (the id as its pseudonym),
data.sdk_logs reading them, and the dashboard's conversation panel (docs/conversations.md)."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

import serving.conversations._keeper as keeper
from data.sdk_logs import iter_outcome_log
from serving import Request, Router
from serving.chat import Endpoint, RoutedChat
from serving.conversations._state import ConversationState
from serving.conversations._store import ConversationStoreError, MemoryStore
from serving.conversations._switch import Stickiness
from serving.dashboard import compute_views, from_record, render_page
from serving.dashboard._summary import RecordShapeError
from serving.monitoring._outcome_log import OutcomeLog, pseudonym
from serving.policy import FallbackForbidden, PolicySet
from serving.policy._budgets import RedisSpending, window, window_end
from tests.chat_stubs import ASK, LONG, fresh_stubs, stubs  # noqa: F401  (fixtures)
from tests.redis_server import free_port, redis_on
from tests.test_dashboard import T0, Tables, counts, report, request_record

BUDGET = {"rules": [{"name": "budget-user", "when": {"budget": {"key": "user", "limit": 0.01, "period": "day"}},
                     "then": "forbid", "endpoint": "cloud"}]}  # fmt: skip


# --- the budgets' ledger in Redis ------------------------------------------------------------------


def test_two_ledgers_on_one_redis_spend_a_budget_once(tmp_path):
    with redis_on(tmp_path) as (url, _):
        one, other = RedisSpending(url), RedisSpending(url)
        keys = {"user", "team"}
        one.add({"user": "ana", "team": "red"}, 0.25, keys)
        other.add({"user": "ana"}, 0.5, keys)
        for ledger in (one, other):  # each process reads what both spent, once
            assert ledger.spent("user", "ana", "day") == ledger.spent("user", "ana", "month") == 0.75
            assert ledger.spent("team", "red", "hour") == 0.25 and ledger.spent("user", "bo", "day") == 0.0

        # many threads in two "processes" at once: every increment counts, none twice
        def spend(ledger: RedisSpending) -> None:
            for _ in range(100):
                ledger.add({"user": "cy"}, 0.01, keys)

        threads = [threading.Thread(target=spend, args=(ledger,)) for ledger in (one, other) * 3]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert one.spent("user", "cy", "day") == pytest.approx(6.0, abs=1e-9)
        assert one.errors == other.errors == 0 and len(one) == 0

        # one key per holder and window, expiring an hour after its window ends; no two holders share one
        client = redis.Redis.from_url(url)
        now = time.time()
        day = one.key("user", "ana", "day", window("day", now))
        assert client.ttl(day) == pytest.approx(window_end("day", window("day", now)) + 3600 - now, abs=5)
        assert one.key("a:b", "c", "day", 1) != one.key("a", "b:c", "day", 1)
        long = "x" * 10_000  # a holder value of any size takes a key of bounded size
        one.add({"user": long}, 1.0, keys)
        assert one.spent("user", long, "day") == 1.0 and len(one.key("user", long, "day", 1)) < 120


def test_the_month_window_ends_when_the_calendar_month_does():
    for moment, end in (("2026-12-15", "2027-01-01"), ("2026-02-03", "2026-03-01"), ("2026-01-31", "2026-02-01")):
        stamp = time.mktime(time.strptime(moment, "%Y-%m-%d")) - time.timezone
        assert (
            window_end("month", window("month", stamp)) == time.mktime(time.strptime(end, "%Y-%m-%d")) - time.timezone
        )
    assert window_end("hour", window("hour", 7200.5)) == 10800.0 and window_end("day", 0) == 86400.0


def test_without_redis_budgets_read_as_spent_and_spends_wait_for_it(tmp_path, caplog):
    port = free_port()
    with redis_on(tmp_path, port) as (url, process):
        ledger = RedisSpending(url, retry_s=0.5)
        ledger.add({"user": "ana"}, 0.002, {"user"})
        assert ledger.spent("user", "ana", "day") == 0.002
        process.terminate()
        process.wait(timeout=10)
        # fail closed: every holder reads as spent, so every budget rule holds
        assert ledger.spent("user", "bo", "day") == math.inf and ledger.errors == 1
        started = time.perf_counter()
        assert ledger.spent("user", "ana", "day") == math.inf  # within retry_s: not asked, no wait
        assert time.perf_counter() - started < 0.05 and ledger.errors == 2
        ledger.add({"user": "ana"}, 0.003, {"user"})  # kept in this process
        assert len(ledger) == 3 and "budget ledger unavailable" in caplog.text
        # a router with a budget rule decides with the rule holding: the cloud is forbidden
        policy = PolicySet.from_dict(BUDGET, endpoints=("edge", "cloud"))
        assert policy.evaluate("hi", 2, None, {"user": "newcomer"}, ledger).rule.name == "budget-user"
    time.sleep(0.6)
    with redis_on(tmp_path, port) as (url, _):  # back (empty: the server kept nothing)
        ledger.add({"user": "ana"}, 0.001, {"user"})  # writes what waited, with this spend
        assert len(ledger) == 0 and ledger.spent("user", "ana", "day") == pytest.approx(0.004)
        assert RedisSpending(url).spent("user", "ana", "month") == pytest.approx(0.004)
        assert "budget ledger reachable again" in caplog.text
        assert policy.evaluate("hi", 2, None, {"user": "newcomer"}, ledger).rule is None


def test_a_full_waiting_list_drops_and_counts_spends():
    ledger = RedisSpending(f"redis://127.0.0.1:{free_port()}/0", max_pending=3)
    ledger.add({"user": "ana"}, 1.0, {"user"})  # three keys: hour, day, month
    ledger.add({"user": "bo"}, 1.0, {"user"})
    assert len(ledger) == 3 and ledger.dropped == 3


# --- a conversation store that hangs ------------------------------------------------------------


class HangingStore:
    """A store behind a lost network: while `up` is False each call waits out its timeout, then fails."""

    def __init__(self) -> None:
        self.calls, self.up, self.states = 0, False, {}

    def _call(self) -> None:
        self.calls += 1
        if not self.up:
            time.sleep(0.2)
            raise ConversationStoreError("conversation store: reading: TimeoutError: timed out")

    def get(self, conversation):
        self._call()
        return self.states.get(conversation)

    def put(self, conversation, state) -> None:
        self._call()
        self.states[conversation] = state


def test_a_store_that_hangs_costs_one_timeout_a_second_not_two_per_request(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(keeper, "RETRY_S", 0.5)
    store = HangingStore()
    router = Router.load(tmp_path / "no-bundle", conversations=store)  # the rule table decides
    started = time.perf_counter()
    for _ in range(10):
        execution = router.execute(Request("What is 2+2?", conversation="c"), lambda p: "edge", lambda p: "cloud")
        assert execution.response in ("edge", "cloud")
        assert "conversation state unavailable" in execution.decision.reason
    assert store.calls == 1 and time.perf_counter() - started < 0.45  # one timeout, then not asked
    assert router.conversation_state_errors == 20  # each request's read and write, counted
    assert caplog.text.count("until the store answers") == 1  # one warning, not one per request
    store.up = True
    time.sleep(0.5)
    execution = router.execute(Request("What is 2+2?", conversation="c"), lambda p: "edge", lambda p: "cloud")
    assert "unavailable" not in execution.decision.reason and store.states["c"].turns == 1
    assert "conversation store reachable again" in caplog.text


def test_an_answers_length_written_after_an_outage_says_the_store_is_back(caplog, monkeypatch):
    monkeypatch.setattr(keeper, "RETRY_S", 0.05)
    store = HangingStore()
    conversations = keeper.Conversations(store)
    assert not conversations.record("c", None, input_tokens=10, output_tokens=0, on_device=False, outcome="failed")
    store.up = True
    store.states["c"] = ConversationState().after(
        "edge", input_tokens=10, output_tokens=0, on_device=True, outcome="served", now=time.time()
    )
    time.sleep(0.05)
    assert conversations.answered("c", 1, "edge", 25, on_device=True)  # a stream's length, at its end
    assert store.states["c"].history_tokens == 35 and "conversation store reachable again" in caplog.text
    assert not conversations.answered("c", 2, "edge", 25, on_device=True)  # not the turn the state holds


# --- the routed chat client's turns -------------------------------------------------------------


def chat_for(router: Router, stubs) -> RoutedChat:
    edge, cloud = stubs
    return RoutedChat(
        router,
        edge=Endpoint(edge.url, "edge-model", timeout_s=5, first_token_timeout_s=3),
        cloud=Endpoint(cloud.url, "cloud-model", timeout_s=5),
    )


# Turn 1 (its edge call failing: the cloud serves it) carries a history of ~400 tokens, within the
# edge's context, that the session's bundle knows well enough (novelty ~0.55) and sends edge first
# (expected gain ~0.1, its fallback band); so do the short follow-ups with it.
BACKGROUND = "I am planning a short trip to the seaside next weekend with my family and we like the beach. " * 20
FOLLOW_UPS = ["And 3+3?", "Thanks, and 4+4?", "Last one: 5+5?"]


def served_turns(chat: RoutedChat, stubs, conversation: str, first: str, follow_ups=FOLLOW_UPS) -> list:
    """Run a conversation, its edge failing on the first turn only, the history growing with each
    answer: (the endpoint the stubs saw answer each turn, its RoutingInfo)."""
    edge, cloud = stubs
    messages = [{"role": "user", "content": first}]
    turns = []
    for number, follow_up in enumerate([None, *follow_ups], 1):
        if follow_up is not None:
            messages.append({"role": "user", "content": follow_up})
        edge.behaviour.status = 503 if number == 1 else 200
        before = len(edge.received), len(cloud.received)
        completion = chat.create(messages, conversation=conversation)
        called = [name for name, stub, n in zip(("edge", "cloud"), stubs, before) if len(stub.received) > n]
        assert called[-1] == completion.routing.served_by  # the stub that answered is the one named
        turns.append((completion.routing.served_by, completion.routing))
        messages.append({"role": "assistant", "content": completion.text})
    return turns


@pytest.mark.real_data  # the session's trained test bundle routes
@pytest.mark.parametrize(
    "stickiness, served",
    [
        (Stickiness(0), ["cloud", "edge", "edge", "edge"]),  # never: each turn on its own
        (Stickiness(math.inf), ["cloud", "cloud", "cloud", "cloud"]),  # always: stays
        (Stickiness(1.0), ["cloud", "edge", "edge", "edge"]),  # priced: re-reading ~400 tokens costs little
        (Stickiness(1.0, seconds_price=0.5), ["cloud", "cloud", "cloud", "cloud"]),  # priced: a second is dear
    ],
    ids=["never", "always", "priced", "priced-dear-seconds"],
)
def test_a_conversation_switches_only_when_the_decision_says_so(bundle, stubs, stickiness, served):
    """Each turn's endpoint, as the stubs saw it, moves from the last turn's exactly when the
    decision says `switched`, and which turns move is the knob's: never decides each turn as on its
    own, always stays, priced stays when re-reading the history where it is not held costs more
    than the bundle's rule gains by moving (the reason says so)."""
    router = Router.load(bundle, strict=True, conversations=MemoryStore(), stickiness=stickiness)
    with chat_for(router, stubs) as chat:
        turns = served_turns(chat, stubs, "talk", BACKGROUND)
    assert [endpoint for endpoint, _ in turns] == served
    for number, (endpoint, routing) in enumerate(turns, 1):
        assert routing.turn == number and routing.switch.startswith(f"conversation turn {number}")
        if number == 1:
            assert routing.switched is None and routing.fallback_kind == "http_error"
            continue
        assert routing.fallback_reason is None
        assert routing.switched is (endpoint != turns[number - 2][0]), routing.decision.reason
    if stickiness.seconds_price == 0.5:  # the rule alone would have moved it: the reason says what staying saved
        assert "conversation turn 2 stays on cloud: edge, which would read" in turns[1][1].decision.reason


@pytest.mark.real_data
def test_always_stay_moves_a_conversation_its_endpoint_cannot_serve(bundle, stubs):
    router = Router.load(bundle, strict=True, stickiness=Stickiness(math.inf))
    with chat_for(router, stubs) as chat:
        first = chat.create(ASK, conversation="grows")
        longer = chat.create([*ASK, {"role": "assistant", "content": first.text}, *LONG], conversation="grows")
    assert (first.routing.served_by, longer.routing.served_by, longer.routing.switched) == ("edge", "cloud", True)


@pytest.mark.real_data
def test_with_weight_zero_each_turn_is_routed_as_on_its_own(bundle, stubs):
    plain = Router.load(bundle, strict=True)
    router = Router.load(bundle, strict=True, stickiness=Stickiness(0))
    prompts: list[str] = []
    original = chat_for(router, stubs)
    with original as chat:
        messages = [*ASK]
        for follow_up in [None, *FOLLOW_UPS, LONG[0]["content"]]:
            if follow_up is not None:
                messages.append({"role": "user", "content": follow_up})
            completion = chat.create(messages, conversation="alone")
            prompts.append(chat.to_prompt(messages))
            assert completion.routing.decision.cascade == plain.route(prompts[-1]).cascade
            messages.append({"role": "assistant", "content": completion.text})


@pytest.mark.real_data
def test_a_forbidden_endpoint_serves_no_turn_of_a_conversation(bundle, stubs):
    """Turn 1 is forced to the cloud; later turns are forbidden it. Always-stay would keep the
    conversation there: the policy moves it, and the cloud is never called again, a failing edge
    included (FallbackForbidden instead)."""
    edge, cloud = stubs
    rules = [
        {"name": "pro-cloud", "when": {"metadata": {"tier": "pro"}}, "then": "force", "endpoint": "cloud"},
        {"name": "free-no-cloud", "when": {"metadata": {"tier": "free"}}, "then": "forbid", "endpoint": "cloud"},
    ]
    router = Router.load(bundle, strict=True, policy=PolicySet.from_dict({"rules": rules}, endpoints=("edge", "cloud")),
                         stickiness=Stickiness(math.inf))  # fmt: skip
    with chat_for(router, stubs) as chat:
        first = chat.create(ASK, conversation="moved", metadata={"tier": "pro"})
        assert (first.routing.served_by, first.routing.turn) == ("cloud", 1)
        messages = [*ASK, {"role": "assistant", "content": first.text}]
        for n, follow_up in enumerate(["And 3+3?", "And 5+5?"], 2):
            messages.append({"role": "user", "content": follow_up})
            turn = chat.create(messages, conversation="moved", metadata={"tier": "free"})
            assert (turn.routing.served_by, turn.routing.turn, turn.routing.decision.rule) == (
                "edge",
                n,
                "free-no-cloud",
            )
            assert turn.routing.switched is (n == 2) and "cloud" in turn.routing.decision.forbidden
            messages.append({"role": "assistant", "content": turn.text})
        edge.behaviour.status = 503
        messages.append({"role": "user", "content": "And 6+6?"})
        with pytest.raises(FallbackForbidden):
            chat.create(messages, conversation="moved", metadata={"tier": "free"})
    assert len(cloud.received) == 1  # turn 1 only


@pytest.mark.real_data
def test_async_and_streamed_turns_carry_the_conversation(bundle, stubs):
    store = MemoryStore()
    router = Router.load(bundle, strict=True, conversations=store, stickiness=Stickiness(math.inf))

    async def turns() -> list:
        async with chat_for(router, stubs) as chat:
            first = await chat.acreate(ASK, conversation="mixed")
            stream = await chat.acreate(
                [*ASK, {"role": "user", "content": "And 3+3?"}],
                conversation="mixed",
                stream=True,
                stream_options={"include_usage": True},
            )
            async with stream:
                text = "".join([c["choices"][0]["delta"].get("content") or "" async for c in stream if c["choices"]])
            return [first.routing, stream.routing, text]

    first, streamed, text = asyncio.run(turns())
    assert (first.turn, streamed.turn, streamed.switched) == (1, 2, False) and text == "answer from edge"
    state = store.get("mixed")
    # the stream's turn, recorded when it opened, got its answer's 3 tokens (usage) at its end
    assert state.turns == 2 and state.history_tokens == streamed.decision.n_tokens + 3
    assert state.holds("edge").tokens == state.history_tokens  # the device holds what it wrote too
    with chat_for(router, stubs) as chat:  # sync, streamed without usage: the answer counts 0
        with chat.create([*ASK, {"role": "user", "content": "4+4?"}], conversation="mixed", stream=True) as stream:
            assert stream.routing.turn == 3 and "".join(c["choices"][0]["delta"].get("content") or "" for c in stream)
    assert store.get("mixed").history_tokens == stream.routing.decision.n_tokens


# --- the outcome log, data.sdk_logs and the dashboard --------------------------------------------


@pytest.mark.real_data
def test_the_outcome_log_writes_each_turn_with_its_conversations_pseudonym(bundle, tmp_path):
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(bundle, strict=True, log=log, stickiness=Stickiness(math.inf))
    calls = {"edge": lambda prompt: "edge says", "cloud": lambda prompt: "cloud says"}
    router.execute(Request("What is 2+2?", conversation="ana@example.com"), endpoints=calls)
    second = router.execute(Request("word " * 1500, conversation="ana@example.com"), endpoints=calls)
    router.execute(Request("What is 3+3?"), endpoints=calls)
    assert log.flush()
    lines = [json.loads(line) for file in sorted((tmp_path / "logs").glob("*.jsonl")) for line in file.open()]
    text = "".join(map(json.dumps, lines))
    assert "ana@example.com" not in text  # the id never reaches the disk
    turns = [r for r in lines if "conversation" in r]
    assert [r["conversation"] for r in turns] == [pseudonym("ana@example.com")] * 2
    assert [(r["turn"], r["switched"]) for r in turns] == [(1, None), (2, True)]
    assert turns[0]["switch_cost"] is None
    cost = second.decision.switch_costs["cloud"]
    assert turns[1]["switch_cost"] == cost and cost >= 0  # the cloud re-reads the history the device held
    plain = [r for r in lines if "conversation" not in r]
    assert len(plain) == 1 and not {"turn", "switched", "switch_cost"} & set(plain[0])  # as before
    # training's reader carries the fields on each turn's row, and reads the other as before
    rejects: list = []
    rows = {row.row["request_id"]: row.row for row in iter_outcome_log(tmp_path / "logs", rejects)}
    assert not rejects and len(rows) == 3
    assert sorted((r.get("conversation"), r.get("turn")) for r in rows.values() if "turn" in r) == [
        (pseudonym("ana@example.com"), 1),
        (pseudonym("ana@example.com"), 2),
    ]
    keyed = OutcomeLog(tmp_path / "keyed", conversation_key=b"k" * 32)
    assert (
        keyed._private({"conversation": "ana@example.com"})["conversation"]
        == pseudonym("ana@example.com", b"k" * 32)
        != pseudonym("ana@example.com")
    )
    keyed.close()
    log.close()


def test_the_log_reader_refuses_conversation_fields_of_another_shape(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    good = request_record(1, conversation="c1", turn=1, switched=None, switch_cost=None, prompt="hi")
    bad = [
        request_record(2, conversation="c1", turn=0, prompt="hi"),
        request_record(3, conversation="c1", turn=2, switched="yes", prompt="hi"),
        request_record(4, turn=2, prompt="hi"),
        request_record(5, conversation=7, prompt="hi"),
    ]
    (folder / "outcomes-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [good, *bad]))
    rejects: list = []
    rows = list(iter_outcome_log(folder, rejects))
    assert [row.row["request_id"] for row in rows] == ["r1"] and rows[0].row["conversation"] == "c1"
    assert [r.reason.split(", got")[0] for r in rejects] == [
        "turn must be a whole number >= 1 or null",
        "switched must be true, false or null",
        "turn without a conversation",
        "conversation must be the conversation id's pseudonym (text)",
    ]


def conversation_records() -> list[dict]:
    """Two conversations of three and two turns (one switch, re-read at $0.002), one turn decided
    without its state, and a request outside any conversation."""
    return [
        request_record(0, conversation="a", turn=1, switched=None, switch_cost=None),
        request_record(1, conversation="a", turn=2, switched=True, switch_cost=0.002, served_by="cloud"),
        request_record(2, conversation="a", turn=3, switched=False, switch_cost=0.0, served_by="cloud"),
        request_record(3, conversation="b", turn=1, switched=None, switch_cost=None),
        request_record(4, conversation="b", turn=None, switched=None, switch_cost=None),
        request_record(5),
    ]


def test_the_dashboard_counts_switches_per_conversation_and_the_reprefill_cost():
    views = compute_views([from_record(r) for r in conversation_records()])
    view = views.conversations
    assert (view.conversations, view.turns, view.switches, view.max_switches) == (2, 5, 1, 1)
    assert view.switches_per_conversation == 0.5 and view.by_switches == {"0": 1, "1": 1, "2": 0, "3+": 0}
    assert (view.reprefill_cost, view.priced_turns, view.unavailable) == (0.002, 2, 1)
    page = Tables(render_page(views, title="t", source="s", plots=False))
    summary = {key: cells[1] for key, cells in page.tables["conversation_summary"].items()}
    assert summary == {
        "conversations": "2",
        "turns": "5",
        "switches": "1",
        "switches_per_conversation": "0.50",
        "max_switches": "1",
        "reprefill_cost": "0.002000",
        "unavailable": "1",
    }
    assert counts(page.tables["switch_counts"]) == {"0": 1, "1": 1, "2": 0, "3+": 0}
    # records from before conversations read as before, and the panel says there are none
    old = compute_views([from_record(request_record(n)) for n in range(3)])
    assert old.conversations is None
    assert "No request in a conversation." in render_page(old, title="t", source="s", plots=False)
    with pytest.raises(RecordShapeError, match="field 'turn' must be a whole number"):
        from_record(request_record(9, conversation="a", turn="2"))
    assert T0  # the records' times (tests.test_dashboard)


def test_make_report_shows_the_conversations_of_an_outcome_log(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    lines = [{**record, "prompt": None} for record in conversation_records()]
    (folder / "outcomes-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "traffic.html"
    done = report("--logs", str(folder), "--out", str(out), "--since", "2026-01-01", "--until", "2027-01-01")
    assert done.returncode == 0, done.stderr
    summary = {key: cells[1] for key, cells in Tables(out.read_text()).tables["conversation_summary"].items()}
    assert (summary["conversations"], summary["switches"], summary["reprefill_cost"]) == ("2", "1", "0.002000")
