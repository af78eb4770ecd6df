"""The conversation simulator (data.simulator_conversations): conversations of several turns whose
request text is the conversation so far, every endpoint's outcome on every turn correlated within
a conversation, endpoints that declare prompt caches, rows the N-endpoint readers read."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data.endpoint_logs import read_endpoint_logs
from data.simulator import MANIFEST_NAME
from data.simulator_conversations import (
    ConversationModel,
    correlations,
    load_simulation,
    simulate,
    write_conversations,
)
from data.simulator_endpoints import ROWS_FILE, read_truth
from serving.chat._conversation import conversation_prompt
from serving.conversations._state import ConversationState
from serving.conversations._switch import SwitchPricing

SIM = load_simulation(None)


@pytest.fixture(scope="module")
def simulated():
    return simulate(SIM, 600, seed=3)


def test_the_same_seed_gives_the_same_conversations_whatever_their_number(simulated):
    rows, truth = simulated
    fewer, _ = simulate(SIM, 50, seed=3)
    head = rows[rows["conversation"].isin(set(fewer["conversation"]))].reset_index(drop=True)
    assert head.to_json() == fewer.to_json()
    other, _ = simulate(SIM, 50, seed=4)
    assert other["prompt"].tolist() != fewer["prompt"].tolist()


def test_each_turn_is_the_conversation_so_far(simulated):
    rows, truth = simulated
    turns = rows.groupby("conversation")["turn"].agg(["min", "max", "count"])
    assert (turns["min"] == 1).all() and (turns["count"] == turns["max"]).all()
    assert turns["max"].between(2, 8).all() and 4.0 < turns["max"].mean() < 4.8
    for _, conversation in list(rows.groupby("conversation"))[:40]:
        texts = conversation.sort_values("turn")["prompt"].tolist()
        for before, after in zip(texts, texts[1:]):
            asked = before.split("\n\nassistant: ")[0]  # the latest user message comes first
            assert len(after) > len(before) and f"user: {asked}" in after
        # the text is serving.chat's rule applied to the messages: the latest user message first
        assert conversation_prompt([{"role": "user", "content": texts[0]}]) == texts[0]
    assert set(truth["request_id"]) == set(rows["request_id"])
    assert all(m == {"conversation": c, "turn": str(t)} for m, c, t in zip(rows.metadata, rows.conversation, rows.turn))


def test_outcomes_are_correlated_within_a_conversation(simulated):
    rows, truth = simulated
    measured = correlations(rows, truth)
    # the shared topic and the user's level (module doc): about 0.4 between consecutive turns
    assert 0.3 < measured["difficulty"] < 0.55
    assert measured["outcome_phone-3b"] > 0.1 and measured["p_onprem-8b"] > 0.35
    assert measured["same_best_endpoint"] > 0.6
    independent, hidden = simulate(SIM, 600, seed=3, model=ConversationModel(keep_topic=0.0, user_sd=0.0))
    assert abs(correlations(independent, hidden)["difficulty"]) < 0.1
    kept = truth[truth["turn"] > 1]["topic_kept"].mean()
    assert 0.75 < kept < 0.85
    rates = {n: np.mean([o[n] for o in rows["outcomes"]]) for n in SIM.names}
    assert rates["phone-3b"] < rates["onprem-8b"] < rates["cloud-mid"] < rates["frontier"]


def test_the_endpoints_declare_caches_and_prefill_rates():
    by_name = {e.name: e for e in SIM.endpoints}
    assert by_name["frontier"].price.per_1m_cached_input == pytest.approx(0.5)  # a tenth of its input price
    assert by_name["cloud-mid"].price.per_1m_cached_input == pytest.approx(0.125)  # a quarter
    assert all(e.prefill_tokens_per_s for e in SIM.endpoints)
    state = ConversationState().after(
        "frontier", input_tokens=2000, output_tokens=300, on_device=False, outcome="served", now=0.0
    )
    delta, missing = SwitchPricing(list(SIM.endpoints)).costs(state, 2600, 250, 0.003, 1.0)
    # the frontier's cache holds the prompt it read: its discount, less reading the answer at 50,000 tokens/s
    assert delta[3] == pytest.approx(-2000 * 4.5 / 1e6 + 300 / 50_000 * 0.003)
    assert [int(m) for m in missing] == [2300, 2300, 2300, 300] and delta[0] > delta[1] > 0


def test_the_folder_is_read_by_the_log_readers(tmp_path):
    rows_file = write_conversations(tmp_path / "logs", SIM, 30, seed=1)
    assert rows_file.name == ROWS_FILE
    manifest = json.loads((tmp_path / "logs" / MANIFEST_NAME).read_text())
    assert manifest["synthetic"] and manifest["conversations"] == 30
    assert manifest["conversation_model"]["keep_topic"] == 0.8
    frame, rejects = read_endpoint_logs([tmp_path / "logs"], SIM.names)
    truth = read_truth(tmp_path / "logs")
    assert not rejects and len(frame) == manifest["turns"] == len(truth)
    assert frame["request_id"].str.match(r"sim-1-c\d+-t\d$").all()
    assert {m["conversation"] for m in frame["metadata"]} == {f"sim-1-c{k}" for k in range(30)}
    assert np.isfinite(frame[[f"q_{n}" for n in SIM.names]].to_numpy(float)).all()


def test_a_built_in_scenario_is_named_and_a_file_is_read(tmp_path):
    scenario = load_simulation("two-frontier")
    assert scenario.names == ("phone-3b", "cloud-mid", "frontier-a", "frontier-b")
    prices = {e.name: e.price for e in scenario.endpoints}
    assert prices["frontier-a"] == prices["frontier-b"] and prices["frontier-a"].per_1m_cached_input == 0.5
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**json.loads(json.dumps(SIM.as_dict())), "output_tokens": 100}))
    assert load_simulation(spec).output_tokens == 100
