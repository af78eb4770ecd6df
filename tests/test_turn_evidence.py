"""The previous turn as evidence (serving.conversations._evidence, training.turn_evidence): weights
learned from simulated conversations whose outcomes are linked across turns (a user's level shared
by every turn) beat the bundle's text-only probabilities on other conversations, and the SDK
decides a conversation's turn with them exactly as they say."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from serving import MemoryStore, Request, Router, Stickiness
from serving.conversations._evidence import FEATURES, TurnEvidence, TurnEvidenceError, features
from serving.conversations._state import ConversationState
from training.turn_evidence import crossval, design, fit_turn_evidence, held_out_loss, with_turn_evidence


@pytest.fixture(scope="module")
def linked(tmp_path_factory, encoder_cache):
    """(a bundle trained on 300 simulated conversations' turns, 600 others' designs, the names)."""
    from pipelines.turn_evidence import simulated

    return simulated(tmp_path_factory.mktemp("turns"), 900, 7, encoder_cache)


def synthetic(conversations: int, seed: int, names=("small", "large")):
    """Designs of conversations whose every turn shares the user's level, which the text-only
    probabilities cannot see: each endpoint's P(good) = sigmoid(base + level), the model's
    sigmoid(base)."""
    rng = np.random.default_rng(seed)
    base = np.array([-0.2, 1.0])
    parts = []
    for _ in range(conversations):
        turns, level = int(rng.integers(2, 7)), rng.normal(0.0, 1.2)
        truth = 1 / (1 + np.exp(-(base + level)))
        quality = (rng.random((turns, len(names))) < truth).astype(float)
        expected = np.tile(1 / (1 + np.exp(-base)), (turns, 1))
        tokens = np.arange(1, turns + 1) * 300
        parts.append(design(expected, quality, tokens, np.full(turns, 150.0), list(names)))
    return parts, list(names)


def test_the_last_turn_tells_what_the_text_alone_does_not():
    parts, names = synthetic(1200, seed=3)
    evidence = fit_turn_evidence(parts[:600], names)
    loss = held_out_loss(evidence, parts[600:], names)
    assert loss["rows"] > 5000
    assert loss["with"] < loss["without"] - 0.01, loss  # on conversations the weights never saw (0.026 here)
    for name in names:  # a bad answer last turn (the user's level is low) lowers every endpoint's odds
        weights = dict(zip(FEATURES, evidence.weights[name]))
        assert weights["trouble"] < 0, (name, weights)
    cv = crossval(parts, names, folds=5)
    assert cv["difference"]["high"] < 0  # the paired interval excludes no effect


def test_the_sdk_weighs_the_last_turn_with_the_bundles_weights(linked, tmp_path):
    folder, parts, names = linked
    evidence = fit_turn_evidence(parts, names)
    weighed = with_turn_evidence(folder, tmp_path / "weighed", evidence)
    store = MemoryStore()
    plain = Router.load(folder, strict=True, unfamiliar_policy="learned")
    router = Router.load(
        weighed, strict=True, unfamiliar_policy="learned", conversations=store, stickiness=Stickiness(0)
    )
    text = "Following up on that: what is the derivative of x^3 sin(x)? Show the steps."
    alone = plain.route(text).expected
    for outcome in ("served", "rejected", "regenerated"):
        state = ConversationState(2, names[0], outcome, 400, (), time.time())
        store.put("c", state)
        decision = router.route(Request(text, conversation="c"))
        raw = [alone[n] for n in names]
        assert [decision.expected[n] for n in names] == pytest.approx(evidence.adjusted(raw, names, state))
        assert f"the last turn ({outcome} on {names[0]}) weighed in" in decision.reason
    # a first turn, and a request without a conversation, decide from the text alone
    assert router.route(Request(text, conversation="new")).expected == pytest.approx(alone)
    assert router.route(text).expected == pytest.approx(alone)


def test_weights_that_change_nothing_change_nothing_and_bad_files_are_refused():
    names = ["a", "b"]
    identity = TurnEvidence({n: (1.0,) + (0.0,) * (len(FEATURES) - 1) for n in names})
    state = ConversationState(3, "a", "rejected", 900, (), 0.0)
    assert identity.adjusted([0.3, 0.9], names, state) == pytest.approx([0.3, 0.9])
    assert features(0.5, "a", state)[FEATURES.index("served_trouble")] == 1.0
    assert features(0.5, "b", state)[FEATURES.index("served")] == 0.0
    assert math.isclose(features(0.5, "b", state)[FEATURES.index("log_turn")], math.log(4))
    assert TurnEvidence.from_json(identity.to_json(), names) == identity
    for raw, match in (
        ('{"features": ["x"], "weights": {}}', "features"),
        ('{"features": %s, "weights": {"a": [1]}}' % str(list(FEATURES)).replace("'", '"'), "'b'"),
        ("not json", "JSONDecodeError"),
    ):
        with pytest.raises(TurnEvidenceError, match=match):
            TurnEvidence.from_json(raw, names)


def test_make_turn_evidence_fits_a_bundles_weights_from_linked_logs_and_signs_it(linked, tmp_path):
    """pipelines/turn_evidence.py --bundle: conversations the bundle never saw, scored through the
    SDK; the bundle written again with the weights, signed, and loading with the team's key."""
    import json

    from data.simulator_conversations import load_simulation, write_conversations
    from pipelines.turn_evidence import fit_for
    from training.keys import generate
    from training.turn_evidence import linked_designs

    folder, _, names = linked
    write_conversations(tmp_path / "later", load_simulation(None), 120, seed=8)
    private, public = generate(tmp_path / "keys")
    fit_for(folder, [tmp_path / "later"], tmp_path / "weighed", private, 3, 250.0, tmp_path / "figures.json")
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["conversations"] == 120 and len(figures["folds"]) == 3
    router = Router.load(tmp_path / "weighed", strict=True, public_key=public)
    from data.endpoint_logs import read_endpoint_logs

    frame, _ = read_endpoint_logs([tmp_path / "later"], names)
    expected = fit_turn_evidence(linked_designs(folder, frame, names, 250.0), names)
    assert router._routing.chooser.evidence == expected  # the weights the logs give, in the bundle the SDK loads
