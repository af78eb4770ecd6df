"""Conversations (docs/conversations.md): each conversation's state between turns, in this
process or in a real Redis; what moving a conversation costs (re-reading its history); and the
chooser weighing it, for N-endpoint and two-endpoint bundles, with the policy still in charge."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from serving import Request, Router
from serving.conversations._keeper import Conversations
from serving.conversations._state import ConversationState, Held
from serving.conversations._store import ConversationStoreError, MemoryStore, RedisStore
from serving.conversations._switch import Stickiness, SwitchPricing
from serving.endpoints._choice import call_costs, cheapest_within
from serving.endpoints._record import Endpoint, Price
from serving.policy import PolicySet
from tests.redis_server import free_port, redis_server
from tests.test_endpoint_bundle import TOPICS, variant
from tests.test_endpoint_bundle import trained as trained  # noqa: F401  # the session's N-endpoint bundle

NOW = 1_000_000.0
# Prompts long enough to carry a history of HISTORY tokens: each topic with a different background.
PROMPTS = [
    f"{topic} Background, part {k}: " + "the earlier discussion went on at length. " * 30
    for k, topic in enumerate(TOPICS * 5)
]
HISTORY = 150
# Short prompts of every difficulty: their turns go to every endpoint.
SHORT = [
    f"{topic} {ask}"
    for topic in TOPICS
    for ask in ("", "Please explain briefly.", "Answer in one word.", "Give the reasoning step by step.")
]


def conversation_on(endpoint: str, tokens: int = HISTORY, at: float | None = None) -> ConversationState:
    at = time.time() if at is None else at
    return ConversationState(1, endpoint, "served", tokens, (Held(endpoint, tokens, at),), at)


def routed(router: Router, store: MemoryStore, state: ConversationState | None, prompt: str, **fields):
    if state is not None:
        store.put("c", state)
    return router.route(Request(prompt, conversation="c", **fields))


# --- what a turn costs where ----------------------------------------------------------------------


def test_the_price_of_a_turn_counts_the_history_each_cache_lacks():
    device = Endpoint(name="phone", where="device", price=Price(per_call=0.0), prefill_tokens_per_s=1000)
    cached = Endpoint(name="cached", where="cloud", price=Price(2.0, 8.0, per_1m_cached_input=0.5))
    plain = Endpoint(name="plain", where="cloud", price=Price(2.0, 8.0))
    state = ConversationState(2, "cached", "served", 3000, (Held("phone", 2000, NOW), Held("cached", 3000, NOW)), NOW)
    delta, missing = SwitchPricing((device, cached, plain)).costs(state, 3500, 100, 0.01, NOW)
    # phone: 1,000 history tokens after its prefix, read at 1,000 tokens/s, a second priced at $0.01
    assert missing == [1000, 0, 0]
    assert delta[0] == pytest.approx(0.01)
    # cached: holds all 3,000: its discount, 3,000 tokens at $0.5 instead of $2 per 1M
    assert delta[1] == pytest.approx(-3000 * 1.5 / 1e6)
    assert delta[2] == 0.0  # no cache: it reads everything on every turn, wherever the conversation was
    # a provider's cache expires: after five minutes the cached endpoint reads it all again
    later = SwitchPricing((device, cached, plain)).costs(state, 3500, 100, 0.01, NOW + 301)
    assert later[1] == [1000, 3000, 0] and later[0][1] > 0


def test_a_history_longer_than_the_prompt_counts_as_the_prompt():
    device = Endpoint(name="phone", where="device", price=Price(per_call=0.0), prefill_tokens_per_s=100)
    state = ConversationState(3, "cloud", "served", 5000, (), NOW)
    _, missing = SwitchPricing((device,)).costs(state, 800, 0, 1.0, NOW)
    assert missing == [800]  # the app cut the history: only what is sent is read


def test_stickiness_is_one_knob_from_never_to_always():
    assert Stickiness(0).never and not Stickiness(0).always
    assert Stickiness(math.inf).always
    for bad in (-1, float("nan"), "1", True):
        with pytest.raises(ValueError, match="weight"):
            Stickiness(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seconds_price"):
        Stickiness(1, math.inf)


# --- the state and its stores ---------------------------------------------------------------------


def test_a_turn_moves_the_state_on_and_keeps_the_other_caches():
    state = ConversationState().after(
        "edge", input_tokens=100, output_tokens=40, on_device=True, outcome="served", now=1
    )
    state = state.after("cloud", input_tokens=180, output_tokens=60, on_device=False, outcome="fallback", now=2)
    assert (state.turns, state.endpoint, state.outcome, state.history_tokens) == (2, "cloud", "fallback", 240)
    assert state.holds("edge") == Held("edge", 140, 1)  # its prompt and its answer, from turn 1
    assert state.holds("cloud") == Held("cloud", 180, 2)  # a provider caches the prompt it was sent
    assert ConversationState.from_json(state.to_json()) == state
    with pytest.raises(ValueError, match="outcome"):
        state.after("edge", input_tokens=1, output_tokens=1, on_device=True, outcome="great", now=3)
    for bad in ("{}", "[]", '{"turns": -1}', "not json"):
        with pytest.raises(ValueError, match="not a conversation state"):
            ConversationState.from_json(bad)


def test_the_memory_store_is_bounded_by_count_and_age():
    store = MemoryStore(max_conversations=1000, max_age_s=60)
    now = time.time()
    for k in range(5000):
        store.put(f"c{k}", ConversationState(1, "edge", "served", k, (), now))
    assert len(store) == 1000
    assert store.get("c0") is None and store.get("c4999") is not None  # the least recently used went first
    store.get("c4000")  # used: kept over c4001 when one more arrives
    store.put("new", ConversationState(1, "edge", "served", 1, (), now))
    assert store.get("c4000") is not None and store.get("c4001") is None
    store.put("old", ConversationState(1, "edge", "served", 1, (), now - 61))
    assert store.get("old") is None  # older than max_age_s
    for bad in ({"max_conversations": 0}, {"max_age_s": 0}, {"max_conversations": 1.5}):
        with pytest.raises(ValueError):
            MemoryStore(**bad)  # type: ignore[arg-type]


def test_the_redis_store_keeps_state_for_every_process_and_lets_it_expire(tmp_path):
    with redis_server(tmp_path) as url:
        one, other = RedisStore(url, max_age_s=120), RedisStore(url, max_age_s=120)
        state = conversation_on("cloud")
        one.put("chat-1", state)
        assert other.get("chat-1") == state  # another client (another process) reads it
        assert other.get("chat-2") is None
        assert 0 < other.client.ttl("router:conversation:chat-1") <= 120
        other.client.set("router:conversation:bad", b"garbage")
        with pytest.raises(ConversationStoreError, match="router:conversation:bad"):
            one.get("bad")


def test_a_redis_store_that_is_down_is_a_clear_error_quickly():
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0")
    start = time.monotonic()
    with pytest.raises(ConversationStoreError, match="reading 'router:conversation:x'"):
        store.get("x")
    with pytest.raises(ConversationStoreError, match="writing"):
        store.put("x", ConversationState())
    assert time.monotonic() - start < 5


# --- N endpoints: the price of moving in the rule ---------------------------------------------------


def with_caches(data):
    """The bundle's endpoints with a prompt cache on the two per-token clouds (90% off input)."""
    for spec in data["endpoints"]["endpoints"]:
        price = spec.get("price", {})
        if price.get("per_1m_input"):
            price["per_1m_cached_input"] = price["per_1m_input"] / 10


@pytest.fixture(scope="module")
def simulated_prompts(tmp_path_factory) -> list[str]:
    """Prompts like the N-endpoint bundle's training prompts (its simulator, another seed)."""
    from data.endpoint_logs import read_endpoint_logs
    from data.simulator_endpoints import load_simulation, write_simulation

    sim = load_simulation(None)
    folder = tmp_path_factory.mktemp("prompts")
    write_simulation(folder, sim, 120, seed=11)
    frame, _ = read_endpoint_logs([folder], sim.names)
    return list(frame["prompt"])


@pytest.fixture(scope="module")
def cached_bundle(trained, tmp_path_factory):
    return variant(trained, tmp_path_factory.mktemp("cached"), with_caches)


def test_weight_zero_decides_every_turn_on_its_own(cached_bundle):
    store = MemoryStore()
    plain = Router.load(cached_bundle, strict=True, unfamiliar_policy="learned")
    never = Router.load(
        cached_bundle, strict=True, unfamiliar_policy="learned", conversations=store, stickiness=Stickiness(0)
    )
    for prompt in PROMPTS:
        alone = plain.route(prompt)
        turn = routed(never, store, conversation_on("frontier"), prompt)
        assert turn.cascade == alone.cascade and turn.turn == 2
        assert turn.switched is (turn.endpoint != "frontier")
        assert "cascade" in alone.to_dict() and "turn" not in alone.to_dict()  # a request without one reads as before


def test_always_stay_keeps_the_last_endpoint_first_while_it_may_serve(cached_bundle):
    store = MemoryStore()
    always = Router.load(
        cached_bundle, strict=True, unfamiliar_policy="learned", conversations=store, stickiness=Stickiness(math.inf)
    )
    for last in ("phone-3b", "cloud-mid", "frontier"):
        for prompt in PROMPTS:
            decision = routed(always, store, conversation_on(last), prompt)
            assert decision.endpoint == last and decision.switched is False, decision.reason
    # a policy that forbids the last endpoint wins: the conversation moves
    rule = {"name": "no-frontier", "when": {"metadata": {"tier": "free"}}, "then": "forbid", "endpoint": "frontier"}
    always.policy = PolicySet.from_dict({"rules": [rule]}, endpoints=always.endpoint_names)
    decision = routed(always, store, conversation_on("frontier"), PROMPTS[0], metadata={"tier": "free"})
    assert "frontier" not in decision.cascade and decision.switched is True
    assert decision.rule == "no-frontier"


def test_priced_turns_go_where_the_rule_prices_them_switch_included(cached_bundle, simulated_prompts):
    """The decision is the bundle's rule (cheapest_within) on the call prices plus each endpoint's
    price change for where the conversation has been, recomputed here from the parts."""
    store = MemoryStore()
    router = Router.load(
        cached_bundle,
        strict=True,
        unfamiliar_policy="learned",
        conversations=store,
        stickiness=Stickiness(1.0, seconds_price=0.5),
    )
    chooser = router._routing.chooser  # the bundle's endpoints and rule, as the router holds them
    section = chooser.rule.section
    stays = moves = 0
    for last in ("phone-3b", "cloud-mid", "frontier"):
        for prompt in simulated_prompts:
            state = conversation_on(last, 10_000, at=time.time())  # the whole prompt is history
            decision = routed(router, store, state, prompt)
            expected = np.array([[decision.expected[n] for n in chooser.names]])
            cost, fits = call_costs(chooser.endpoints, [decision.n_tokens], section.output_tokens)
            delta, _ = SwitchPricing(chooser.endpoints).costs(
                state, decision.n_tokens, section.output_tokens, 0.5, time.time()
            )
            first = cheapest_within(expected, cost + np.array(delta), section.parameter, fits)[0]
            plain = cheapest_within(expected, cost, section.parameter, fits)[0]
            assert decision.endpoint == chooser.names[first], decision.reason
            if first != plain and chooser.names[first] == last:
                stays += 1
                assert f"stays on {last}: {chooser.names[plain]}, which would read" in decision.reason
            if chooser.names[first] != last:
                moves += 1
                assert f"moves from {last} to {decision.endpoint}" in decision.reason
    assert stays and moves  # both happen on these prompts: the test reads both paths


# --- two endpoints: the switch in the bundle's own exchange rate -------------------------------------


def test_two_endpoint_turns_stay_when_always_and_lean_on_the_history_when_priced(bundle):
    store = MemoryStore()
    options = {"strict": True, "unfamiliar_policy": "learned", "conversations": store}
    always = Router.load(bundle, **options, stickiness=Stickiness(math.inf))
    # a second of waiting priced high, so that the device's re-read of a short history weighs
    priced = Router.load(bundle, **options, stickiness=Stickiness(1.0, seconds_price=0.5))
    plain = Router.load(bundle, strict=True, unfamiliar_policy="learned")
    toward_cloud = {"edge": 0, "edge_with_cloud_fallback": 1, "cloud": 2}
    moved = 0
    for prompt in SHORT:
        assert routed(always, store, conversation_on("cloud", 1000), prompt).endpoint == "cloud"
        assert routed(always, store, conversation_on("edge", 1000), prompt).target == "edge"
        alone, turn = plain.route(prompt), routed(priced, store, conversation_on("cloud", 1000), prompt)
        assert turn.score == alone.score  # the model's score as it is; the reason says what the switch did
        assert toward_cloud[turn.zone] >= toward_cloud[alone.zone], turn.reason
        if turn.zone != alone.zone:
            moved += 1
            assert "for the switch" in turn.reason, turn.reason
        # on the edge the device holds the history and the cloud (no prompt cache) reads it all
        # anyway: nothing to weigh, the turn is decided as on its own
        on_edge = routed(priced, store, conversation_on("edge", 1000), prompt)
        assert on_edge.cascade == alone.cascade
    # on the cloud, moving to the device means reading the history again there: turns lean to the cloud
    assert moved


# --- the turns a router runs --------------------------------------------------------------------


def test_execute_records_each_turn_where_it_was_served_and_how(bundle):
    store = MemoryStore()
    router = Router.load(bundle, strict=True, conversations=store, stickiness=Stickiness(math.inf))
    served: list[str] = []

    def edge(prompt):
        served.append("edge")
        raise ConnectionError("the phone is asleep")

    def cloud(prompt):
        served.append("cloud")
        return "an answer of a few words"

    first = router.execute(Request(PROMPTS[0], conversation="talk"), edge, cloud)
    state = store.get("talk")
    assert state is not None and (state.turns, state.endpoint) == (1, first.served_by)
    assert state.outcome == ("fallback" if first.fell_back else "served")
    second = router.execute(Request(PROMPTS[0] + " And the follow-up?", conversation="talk"), edge, cloud)
    assert second.decision.turn == 2 and second.decision.endpoint == first.served_by  # always stay
    assert store.get("talk").turns == 2
    assert router.record_turn("talk", "edge", input_tokens=400, output_tokens=50, outcome="regenerated")
    assert store.get("talk").outcome == "regenerated"
    with pytest.raises(ValueError, match="endpoints are edge, cloud"):
        router.record_turn("talk", "mars", input_tokens=1)


def test_two_routers_sharing_one_redis_continue_each_others_conversations(bundle, tmp_path):
    with redis_server(tmp_path) as url:
        one = Router.load(bundle, strict=True, conversations=RedisStore(url), stickiness=Stickiness(math.inf))
        other = Router.load(bundle, strict=True, conversations=RedisStore(url), stickiness=Stickiness(math.inf))
        first = one.execute(Request(PROMPTS[1], conversation="shared"), lambda p: "edge says", lambda p: "cloud says")
        decision = other.route(Request(PROMPTS[1] + " More?", conversation="shared"))
        assert decision.turn == 2 and decision.endpoint == first.served_by


def test_without_its_store_a_turn_is_decided_on_its_own_and_says_so(bundle):
    down = Conversations(RedisStore(f"redis://127.0.0.1:{free_port()}/0"))
    router = Router.load(bundle, strict=True, conversations=down.store)
    decision = router.route(Request(PROMPTS[2], conversation="lost"))
    assert decision.turn is None and "conversation state unavailable" in decision.reason
    assert decision.cascade == Router.load(bundle, strict=True).route(PROMPTS[2]).cascade
    execution = router.execute(Request(PROMPTS[2], conversation="lost"), lambda p: "edge", lambda p: "cloud")
    assert execution.response in ("edge", "cloud")  # the answer is never lost for it
