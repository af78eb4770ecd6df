"""The offline evaluation of routing conversations (evaluation.conversations, make conversations):
held-out conversations replayed turn by turn through the SDK's Router, each turn priced on the
conversation's true cache state, the oracle, the curves and the matched comparison, and the
command's figures over conversation-hash folds."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from data.endpoint_logs import read_endpoint_logs
from data.simulator_conversations import load_simulation, write_conversations
from data.simulator_endpoints import read_truth
from evaluation.conversations import (
    CANDIDATES,
    Conversation,
    _walk,
    conversations_of,
    cost_at,
    oracle,
    quality_at,
    replay,
    turn_price,
    with_rule,
)
from serving import Request, Router
from serving.conversations._state import ConversationState
from serving.conversations._switch import Stickiness
from serving.endpoints._record import Endpoint, Price

SIM = load_simulation(None)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory, encoder_cache):
    """(a bundle trained with best_under_price on 300 simulated conversations' turns, the 80 conversations
    held out of its training, (the logs' folder, the held-out conversations' rows))."""
    from evaluation.endpoints import Choosers
    from training.config import TrainConfig
    from training.endpoint_bundle import train_endpoint_bundle
    from training.endpoints import EndpointRows

    tmp = tmp_path_factory.mktemp("conversations")
    write_conversations(tmp / "logs", SIM, 380, seed=5)
    frame, _ = read_endpoint_logs([tmp / "logs"], SIM.names)
    conversations, _ = conversations_of(frame, SIM.names, read_truth(tmp / "logs"))
    held = {c.id for c in conversations[:80]}
    train = np.array([m["conversation"] not in held for m in frame["metadata"]])
    train_endpoint_bundle(
        EndpointRows.from_frame(frame, SIM.names).subset(train),
        SIM.endpoints,
        tmp / "bundle",
        mode="separate",
        rule="best_under_price",
        choosers=Choosers(),
        output_tokens=SIM.output_tokens,
        folds=10,
        config=TrainConfig(cache_dir=str(encoder_cache)),
    )
    return tmp / "bundle", conversations[:80], (tmp / "logs", frame[~train].reset_index(drop=True))


def test_a_turn_is_priced_on_the_caches_it_finds():
    phone = Endpoint(name="phone", where="device", price=Price(per_call=0.0), latency_ms=100, prefill_tokens_per_s=1000)
    cached = Endpoint(name="cached", where="cloud", price=Price(2.0, 8.0, per_1m_cached_input=0.5), latency_ms=400)
    plain = Endpoint(name="plain", where="cloud", price=Price(1.0, 4.0), latency_ms=300, prefill_tokens_per_s=10_000)
    endpoints = [phone, cached, plain]
    state = ConversationState().after(
        "cached", input_tokens=1000, output_tokens=200, on_device=False, outcome="served", now=0
    )
    # the cached endpoint reads 1,000 of the 1,500 at the cached price and the rest (its answer, the new prompt) in full
    cost, ttft, reprefill = turn_price(endpoints, state, 1, 1500, 100, 1.0)
    assert cost == pytest.approx((500 * 2.0 + 1000 * 0.5 + 100 * 8.0) / 1e6)
    assert ttft == pytest.approx(0.4 + 500 / 50_000) and reprefill == 0.0  # it served the turn before: no move
    # the phone holds nothing: it reads all 1,500 tokens at 1,000 a second
    assert turn_price(endpoints, state, 0, 1500, 100, 1.0)[:2] == (0.0, pytest.approx(0.1 + 1.5))
    # no cache: the whole prompt at its price, wherever the conversation was
    cost, ttft, reprefill = turn_price(endpoints, state, 2, 1500, 100, 1.0)
    assert cost == pytest.approx((1500 * 1.0 + 100 * 4.0) / 1e6) and ttft == pytest.approx(0.3 + 0.15)
    assert reprefill == 0.0  # no cache to miss
    # a move back to `cached` after a turn on `plain` re-reads the 400 tokens of the turn it missed: the move's price
    moved = state.after("plain", input_tokens=1400, output_tokens=100, on_device=False, outcome="served", now=1)
    cost, _, reprefill = turn_price(endpoints, moved, 1, 1800, 100, 2.0, last_input=1400)
    assert cost == pytest.approx((800 * 2.0 + 1000 * 0.5 + 100 * 8.0) / 1e6)
    assert reprefill == pytest.approx(400 * (2.0 - 0.5) / 1e6)
    assert turn_price(endpoints, moved, 2, 1800, 100, 2.0, last_input=1400)[2] == 0.0  # it stays
    # a provider's cache expires after five minutes: the turn then pays the history in full
    assert turn_price(endpoints, state, 1, 1500, 100, 400.0)[0] == pytest.approx((1500 * 2.0 + 100 * 8.0) / 1e6)


def test_curves_are_read_at_a_quality_and_at_a_cost():
    costs, qualities = [1.0, 2.0, 3.0, 2.5], [0.5, 0.7, 0.8, 0.6]  # (2.5, 0.6) costs more than (2, 0.7): left out
    assert cost_at(costs, qualities, 0.6) == pytest.approx(1.5)
    assert cost_at(costs, qualities, 0.5) == 1.0 and math.isnan(cost_at(costs, qualities, 0.9))
    assert quality_at(costs, qualities, 2.5) == pytest.approx(0.75)
    assert quality_at(costs, qualities, 9.0) == 0.8 and math.isnan(quality_at(costs, qualities, 0.5))


def test_the_oracle_finds_the_best_sequence_with_the_switches_priced():
    endpoints = list(SIM.endpoints)
    rng = np.random.default_rng(0)
    for case in range(60):
        turns = int(rng.integers(2, 6))
        quality = (rng.random((turns, 4)) < 0.6).astype(float)
        tokens = np.cumsum(rng.integers(200, 1500, size=turns)).tolist()
        conversation = Conversation(f"c{case}", [""] * turns, [None] * turns, quality, None, np.full(turns, 250.0))
        found = oracle(endpoints, [conversation], [tokens])
        path = found.served[0]
        limits = [e.context_tokens for e in endpoints]
        feasible = [
            p for p in itertools.product(range(4), repeat=turns) if all(t <= limits[k] for t, k in zip(tokens, p))
        ]
        best = max(
            feasible,
            key=lambda p: (
                quality[np.arange(turns), list(p)].sum(),
                -sum(t[0] for t in _walk(endpoints, conversation, tokens, p)),
            ),
        )
        assert quality[np.arange(turns), path].sum() == quality[np.arange(turns), list(best)].sum()
        found_cost, best_cost = (
            found.per_conversation["cost"][0],
            sum(t[0] for t in _walk(endpoints, conversation, tokens, best)),
        )
        # exact unless the best path returns to an endpoint whose older cache the program does not price
        returns = any(best[t] in best[: t - 1] and best[t] != best[t - 1] for t in range(2, turns))
        assert found_cost == pytest.approx(best_cost) if not returns else found_cost <= best_cost * 1.2 + 1e-9


def test_the_replay_decides_each_turn_as_the_sdk_does(simulated):
    bundle, conversations, _ = simulated
    own = replay(bundle, conversations, Stickiness(0))
    # weight 0: every turn on its own, so each turn goes where route() sends its text without a conversation
    router = Router.load(bundle, strict=True)
    names = router.endpoint_names
    for conversation, served in zip(conversations[:30], own.served):
        alone = router.route_batch([Request(t, p) for t, p in zip(conversation.texts, conversation.precisions)])
        assert [names.index(d.cascade[0]) for d in alone] == served
    # the replay's cost of each conversation is its path priced on the state the SDK's store kept
    endpoints = list(router.manifest.endpoints.spec)
    for conversation, served, tokens, cost in zip(conversations, own.served, own.tokens, own.per_conversation["cost"]):
        assert sum(t[0] for t in _walk(endpoints, conversation, tokens, served)) == pytest.approx(
            cost, rel=1e-9, abs=1e-12
        )
    # always sticky: a conversation moves only when its endpoint cannot take the turn (its context)
    sticky = replay(bundle, conversations, Stickiness(math.inf))
    limits = [e.context_tokens for e in endpoints]
    for served, tokens in zip(sticky.served, sticky.tokens):
        for t in range(1, len(served)):
            assert served[t] == served[t - 1] or tokens[t] > limits[served[t - 1]]
    assert sticky.figures()["switches"] < 0.1 < own.figures()["switches"]
    found = oracle(endpoints, conversations, own.tokens).figures()
    assert found["quality"] >= max(own.figures()["quality"], sticky.figures()["quality"])


def test_a_variant_decides_by_another_rule_with_the_same_models(simulated, tmp_path):
    bundle, conversations, _ = simulated
    texts = [c.texts[0] for c in conversations]
    cheap = Router.load(with_rule(bundle, tmp_path / "cheap", "best_under_price", 1e6), strict=True).route_batch(texts)
    assert {d.cascade[0] for d in cheap} <= {"phone-3b", "onprem-8b"}  # a high price on cost: the cheapest that fits
    best = Router.load(with_rule(bundle, tmp_path / "best", "best_under_price", 0.0), strict=True).route_batch(texts)
    # price 0: the best expected quality first (an unfamiliar prompt gets the bundle's unfamiliar policy instead)
    assert all(d.expected[d.cascade[0]] == max(d.expected.values()) for d in best if not d.unfamiliar)
    assert sum(not d.unfamiliar for d in best) > 60


def test_make_conversations_compares_the_policies_over_conversation_folds(tmp_path, encoder_cache):
    from pipelines.conversations import main

    main(
        data=None,
        spec=None,
        conversations=300,
        seed=2,
        folds=3,
        prices="5,50",
        weights="2",
        seconds_price=None,
        budget_share=0.5,
        margin=0.02,
        val_share=0.2,
        cache_dir=encoder_cache,
        out=tmp_path,
    )
    report = json.loads((tmp_path / "metrics.json").read_text())
    estimates, folds = report["estimates"], report["per_fold"]
    assert len(folds) == 3 and sum(f["conversations"] for f in folds) == 300  # every conversation held out once
    for name, e in estimates.items():
        if e["n"] >= 2:
            assert e["low"] <= e["mean"] <= e["high"], name
    for fold in folds:
        op = fold["operating"]
        assert op["sticky"]["switches"] <= op["own"]["switches"]
        assert op["oracle"]["quality"] >= max(op[p]["quality"] for p in ("own", "priced", "sticky"))
        assert [c["price"] for c in fold["curves"]["own"]] == sorted({5.0, 50.0, fold["price"]})
        own = fold["curves"]["own"][[c["price"] for c in fold["curves"]["own"]].index(fold["price"])]
        assert own == {"price": fold["price"], **op["own"]}  # the operating point is on its curve
        # the stickiness chosen on the fold's validation conversations, one of the candidates
        tuned = fold["tuned"]
        assert (tuned["weight"], tuned["seconds_price"]) in CANDIDATES and "tuned" in op
        finite = {k: v for k, v in tuned["excess_cost"].items() if math.isfinite(v)}
        chosen = f"weight {tuned['weight']:g}, seconds_price {tuned['seconds_price']:g}"
        assert finite[chosen] == min(finite.values())
    difference = estimates["operating / priced - own / cost"]
    assert difference["mean"] == pytest.approx(
        np.mean([f["operating"]["priced"]["cost"] - f["operating"]["own"]["cost"] for f in folds])
    )
    assert report["correlations"]["difficulty"] > 0.2


def test_logged_turns_are_ordered_by_their_number_whatever_the_first_and_must_not_repeat():
    import pandas as pd

    from evaluation.conversations import logged_conversations

    def rows(links):
        return pd.DataFrame(
            {
                "request_id": [f"r{i}" for i in range(len(links))],
                "prompt": ["hello"] * len(links),
                "precision": [None] * len(links),
                "metadata": [{"conversation": c, "turn": t} for c, t in links],
                **{f"q_{n}": [np.nan] * len(links) for n in ("a", "b")},
            }
        )

    # numbered from 0 and from 5: whole (no bundle is needed: no turn has every outcome, none is replayed)
    found = logged_conversations(None, rows([("x", 1), ("x", 0), ("y", 5), ("y", 6), ("z", 0), ("z", 2)]), "ab", 1.0)
    assert found == {"conversations": 0, "partial": 1, "incomplete": 2}  # z lacks its turn 1
    with pytest.raises(ValueError, match=r"conversation 'y' has 2 rows numbered turn 6: each of its turns needs"):
        logged_conversations(None, rows([("x", 0), ("y", 5), ("y", 6), ("y", 6)]), "ab", 1.0)


def test_make_evaluate_replays_the_conversations_of_its_rows(simulated, tmp_path):
    from evaluation.conversations import logged_conversations
    from pipelines.evaluate import main

    bundle, conversations, (logs, held) = simulated
    names = SIM.names
    assert logged_conversations(bundle, held.drop(columns="metadata"), names, 250.0) is None  # rows on their own
    longer = next(c.id for c in conversations if len(c) >= 3)
    gap = np.array([m == {"conversation": longer, "turn": "2"} for m in held["metadata"]])
    found = logged_conversations(bundle, held[~gap], names, 250.0)
    assert found["conversations"] == 79 and found["partial"] == 1  # a conversation without its turn 2 is left out
    # the same turns numbered from 0, rows in reverse: the same conversations, in the same turn order
    from_zero = held[~gap].assign(metadata=[{**m, "turn": int(m["turn"]) - 1} for m in held[~gap]["metadata"]])
    again = logged_conversations(bundle, from_zero.iloc[::-1], names, 250.0)
    assert json.dumps(again, sort_keys=True) == json.dumps(found, sort_keys=True)
    main(
        bundle=str(bundle),
        logs=[str(logs)],
        split="all",
        leave_one_source_out=False,
        out=str(tmp_path),
        set_=["mlflow=false"],
    )
    linked = json.loads((tmp_path / "metrics.json").read_text())["conversations"]
    assert linked["conversations"] == 380 and set(linked["policies"]) == {"own", "sticky", "priced", "oracle"}
    assert linked["policies"]["sticky"]["switches"] < 0.1 < linked["policies"]["own"]["switches"]
    difference = linked["minus_own"]["priced"]["cost"]
    low, high = difference["interval"]
    assert low <= difference["difference"] <= high
    own, priced = linked["policies"]["own"]["cost"], linked["policies"]["priced"]["cost"]
    assert difference["difference"] == pytest.approx(priced - own)
