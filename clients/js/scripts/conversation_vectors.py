"""The Python SDK's conversation turns on the JS SDK's two bundles, as JSON, so that the JS SDK can be
held to them (clients/js/test/conversation-parity.test.js and the browser tests):

    .venv/bin/python clients/js/scripts/conversation_vectors.py --bundle artifacts/js/bundle \\
        --endpoint-bundle artifacts/js/endpoint-bundle --out artifacts/js/conversation-vectors.json

For each bundle (`two`: the two-endpoint bundle; `n`: the four-endpoint one), decisions of requests
in a conversation whose state is given (serving.conversations: none yet, a turn no endpoint answered,
the last turn on each endpoint with histories of several lengths, several caches held, a provider's
cache expired or exactly at its age limit, a device's old cache, an endpoint this bundle does not
have), under several Stickiness knobs (weight 0, 1, 2.5, inf; seconds_price 0, 0.003, 0.05, 0.5),
with and without a policy that forbids the endpoint that answered the last turn. Every decision is
made at the fixed time NOW (the chooser's clock set to it), the states' times relative to it, so both SDKs
read the same cache ages. The steps are Chooser.decisions' own (feasible, turns, the rule), one
request at a time so that a request no endpoint may serve is written as its NoFeasibleEndpoint.

Variants: the bundle as it is, and for the N-endpoint bundle its manifest edited (re-digested,
unsigned; `manifest_text` holds it, so the other runtime loads these bytes): prompt caches on the
per-token clouds (per_1m_cached_input a tenth of per_1m_input) and a prefill rate declared on one,
under its own choice rule and the two others; and loaded with other unfamiliar policies. `degraded`
rows: the scores of a bundle that could not score (the rule table for two endpoints, price order for
N). `switch_costs`: SwitchPricing.costs itself on each variant's endpoints. `json`: ConversationState.to_json
texts, and texts from_json refuses.

The previous turn as evidence (serving.conversations._evidence): variants carrying turn_evidence.json
(training.turn_evidence.with_turn_evidence on the bundle, or on the edited N-endpoint one; the file's
text in `evidence_text`) with HAND-SET weights (evidence_weights: not fitted, each endpoint its own,
large enough that the last turn moves decisions; a fit on simulated conversations gives weights so
small that few decisions move, which would test little). They also run the evidence states: the last
turn on each endpoint with each outcome (served, fallback, rejected, failed, regenerated) after 1, 4
and 15 turns of 150 to 40,000 history tokens, a failed turn nothing served, a last endpoint the bundle
lacks, a state of no turns; weight 0, 1 and inf. Decisions are Chooser.decisions' own (the evidence
applied where the SDK applies it), at the fixed time NOW. `evidence`: TurnEvidence.adjusted on a grid
of probabilities and states, texts from_json refuses with Python's message, and what Router.load says
of a bundle whose file is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import shutil
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if importlib.util.find_spec("serving") is None:  # PYTHONPATH may name another checkout of the SDK
    sys.path.insert(0, str(ROOT))
else:  # the repository's other packages (pipelines), after the SDK found first
    sys.path.append(str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))

FORMAT = 1
NOW = 1_000_000.0
CONVERSATION = "chat-1"
TWO_PROMPTS = (
    "empty",
    "greeting",
    "thanks",
    "long_words",
    "many_tokens",
    "over_edge_context",
    "one_word_150",
    "subwords",
    "emoji",
    "japanese",
    "arabic",
    "controls",
    "latex",
    "code",
    "options",
    "currency",
    "percent",
    "answer_cue",
    "domains",
    "law_boundaries",
    "finance_words",
    "digits",
    "thai",
    "cyrillic",
)
N_PROMPTS = ("empty", "emoji_only", "thai", "long_words", "code", "latex")
# (weight, seconds_price): every turn on its own, priced at the default, priced with a second worth much,
# priced with time free, weighed more than its price, always stay.
STICKINESS = ((0.0, 0.003), (1.0, 0.003), (1.0, 0.5), (1.0, 0.0), (2.5, 0.05), (math.inf, 0.003))
FEW = (1, 2, 5)  # the knobs the extra variants and the policy rows run
HISTORIES = (150, 1000, 10_000)
EVIDENCE_KNOBS = (0, 1, 5)  # without stickiness, the switch at its price, always stay
EVIDENCE_TURNS = ((1, 150), (4, 2600), (15, 40_000))  # (turns so far, history tokens)
DEGRADED_NOTE = "degraded: scoring failed: RuntimeError('vectors')"


def state_cases(names: list[str], on_device: list[bool]) -> list[tuple[str, object]]:
    """(id, ConversationState or None) for a bundle's endpoints (module doc)."""
    from serving.conversations._state import ConversationState, Held

    def on(endpoint: str, tokens: int, age: float = 10.0, *others: Held) -> ConversationState:
        at = NOW - age
        return ConversationState(1, endpoint, "served", tokens, (*others, Held(endpoint, tokens, at)), at)

    device = [n for n, d in zip(names, on_device) if d]
    clouds = [n for n, d in zip(names, on_device) if not d]
    cases: list[tuple[str, object]] = [
        ("first", None),
        ("none_answered", ConversationState(2, None, "failed", 300, (), NOW - 20)),
    ]
    for name in names:
        for tokens in HISTORIES:
            cases.append((f"on_{name}_{tokens}", on(name, tokens)))
    for cloud in clouds:  # the device holds an earlier prefix, the cloud the last turn
        cases.append((f"{cloud}_after_device", on(cloud, 1000, 10.0, Held(device[0], 400, NOW - 200))))
    for cloud in clouds[-2:]:
        cases.append((f"{cloud}_expired", on(cloud, 1000, 301.0)))
        cases.append((f"{cloud}_at_ttl", on(cloud, 1000, 300.0)))
    cases.append((f"{device[0]}_old", on(device[0], 1000, 100_000.0)))
    # the last turn on a cloud, an earlier one on another cloud within its cache's life
    if len(clouds) > 1:
        cases.append(
            (f"{clouds[-1]}_after_{clouds[-2]}", on(clouds[-1], 2000, 30.0, Held(clouds[-2], 1500, NOW - 120)))
        )
    cases.append(("unknown_endpoint", on("mars", 1000, 5.0, Held(device[0], 800, NOW - 60))))
    return cases


def evidence_states(names: list[str], on_device: list[bool]) -> list[tuple[str, object]]:
    """(id, ConversationState) of last turns for the evidence (module doc)."""
    from serving.conversations._state import OUTCOMES, ConversationState, Held

    cases: list[tuple[str, object]] = []
    for outcome in OUTCOMES:
        for name, device in zip(names, on_device):
            for turns, tokens in EVIDENCE_TURNS:
                at = NOW - 17.0 * turns  # a provider's cache alive (under 300 s), never at its limit
                cached = Held(name, tokens if device else tokens - 40, at)
                state = ConversationState(turns, name, outcome, tokens, (cached,), at)
                cases.append((f"evidence_{outcome}_on_{name}_{turns}", state))
    cases.append(("evidence_failed_nothing_served", ConversationState(7, None, "failed", 5200, (), NOW - 40)))
    cases.append(("evidence_rejected_on_mars", ConversationState(3, "mars", "rejected", 900, (), NOW - 5)))
    cases.append(("evidence_no_turns", ConversationState(0, names[-1], "regenerated", 600, (), NOW - 5)))
    return cases


def evidence_weights(names: list[str]):
    """Hand-set weights over FEATURES (module doc): each endpoint its own, every feature weighing."""
    from serving.conversations._evidence import TurnEvidence

    weights = {}
    for k, name in enumerate(names):
        weights[name] = (
            0.55 + 0.3 * k,  # logit_p
            -0.21 + 0.173 * k,  # intercept
            0.262 - 0.091 * k,  # log_turn
            -0.337 + 0.129 * k,  # log_history
            0.58 + 0.211 * k,  # served
            -1.27 + 0.263 * k,  # served_trouble
            -0.61 + 0.197 * k,  # trouble
        )
    return TurnEvidence(weights, rows=0)


def forbid(endpoint: str) -> dict:
    return {
        "rules": [
            {"name": f"no-{endpoint}", "when": {"metadata": {"tier": "free"}}, "then": "forbid", "endpoint": endpoint}
        ]
    }


def with_caches(data: dict) -> None:
    """Prompt caches on the per-token clouds (a tenth of the input price), a prefill rate on the first."""
    declared = False
    for spec in data["endpoints"]["endpoints"]:
        price = spec.get("price", {})
        if price.get("per_1m_input"):
            price["per_1m_cached_input"] = price["per_1m_input"] / 10
            if not declared:
                spec["prefill_tokens_per_s"] = 20_000.0
                declared = True


def edited(bundle: Path, folder: Path, edit) -> str:
    """`bundle` copied into `folder` with its manifest edited, re-digested and unsigned; its manifest text."""
    from serving.bundle._bundle import manifest_digest

    shutil.copytree(bundle, folder)
    (folder / "manifest.sig").unlink(missing_ok=True)
    data = json.loads((folder / "manifest.json").read_text())
    edit(data)
    data["manifest_sha256"] = manifest_digest(data)
    text = json.dumps(data, indent=2)
    (folder / "manifest.json").write_text(text)
    return text


def with_rule(rule: str, parameter: float):
    from endpoint_vectors import VARIANT_KEY

    def edit(data: dict) -> None:
        with_caches(data)
        choice = data["endpoints"]["choice"]
        data["endpoints"]["choice"] = {
            **{k: v for k, v in choice.items() if k not in ("rule", "margin", "price", "start_margin")},
            "rule": rule,
            VARIANT_KEY[rule]: parameter,
        }

    return edit


def variant(
    name: str,
    folder: Path,
    text: str | None = None,
    unfamiliar: str | None = None,
    evidence: str | None = None,
    **how: object,
) -> dict:
    """One bundle variant: its name, folder, edited manifest (None: the bundle's own), unfamiliar policy and
    turn_evidence.json text (None: none; the variant then runs the evidence states too), and what it is
    asked: `knobs` (indices of STICKINESS), `precisions`, `policies` (rows with a policy forbidding the
    last endpoint), `degraded` (rows of a bundle that cannot score), `unfamiliar_only`."""
    return {
        "name": name,
        "folder": folder,
        "manifest_text": text,
        "unfamiliar_policy": unfamiliar,
        "evidence_text": evidence,
        **how,
    }


def with_evidence_file(bundle: Path, folder: Path, evidence) -> tuple[str, str]:
    """training.turn_evidence.with_turn_evidence of `bundle` into `folder`: (its manifest text, the file's text)."""
    from serving.conversations._evidence import FILE
    from training.turn_evidence import with_turn_evidence

    with_turn_evidence(bundle, folder, evidence)
    return (folder / "manifest.json").read_text(), (folder / FILE).read_text()


@contextlib.contextmanager
def fixed_now():
    """Chooser.decisions reading the caches' ages at NOW (its turns() takes time.time())."""
    from serving.routing import _chooser

    real = _chooser.time
    _chooser.time = types.SimpleNamespace(time=lambda: NOW)
    try:
        yield
    finally:
        _chooser.time = real


def knob(index: int) -> dict:
    weight, seconds = STICKINESS[index]
    return {"weight": "inf" if math.isinf(weight) else weight, "seconds_price": seconds}


def decide_one(chooser, routing, request, scores, policy, state, stickiness) -> dict:
    """Chooser.decisions for one request at NOW: the decision, or the NoFeasibleEndpoint."""
    from serving.policy import NoFeasibleEndpoint

    try:
        with fixed_now():
            decisions = chooser.decisions((request,), scores, policy, None, (state,), stickiness, routing.output_tokens)
        decision = decisions[0]
        return {
            "decision": decision.to_dict(),
            "switch_costs": decision.switch_costs,
        }  # the one field to_dict leaves out
    except NoFeasibleEndpoint as error:
        return {"error": "NoFeasibleEndpoint", "message": str(error), "rules": list(error.rules)}


def bundle_vectors(variants: list[dict], cases: list[tuple[str, str]], kind: str) -> dict:
    """Every variant's decisions on `cases` (module doc)."""
    from serving import Router
    from serving.conversations._switch import Stickiness
    from serving.policy import PolicySet
    from serving.routing._request import Request
    from serving.scoring._scorer import Scores

    knobs = [Stickiness(w, s) for w, s in STICKINESS]
    decisions: list[dict] = []
    written: list[dict] = []
    states: list[tuple[str, object]] = []
    policies: list[dict] = []
    endpoint_sets: list[tuple[int, tuple]] = []  # the main variants' endpoints, for switch_costs' own rows
    for v, variant in enumerate(variants):
        folder = variant["folder"]
        router = Router.load(folder, strict=True, unfamiliar_policy=variant["unfamiliar_policy"])
        routing = router._routing
        chooser = routing.chooser
        names = list(chooser.names)
        if not states:
            states = state_cases(names, list(chooser.on_device))
            base = len(states)
            states += evidence_states(names, list(chooser.on_device))
            policies = [{"endpoint": n, "policy": forbid(n)} for n in names]
        if (chooser.evidence is None) != (variant["evidence_text"] is None):
            raise SystemExit(f"variant {variant['name']}: turn evidence {'not ' * (chooser.evidence is None)}loaded")
        asked = states if variant["evidence_text"] is not None else states[:base]
        sets = {n: PolicySet.from_dict(forbid(n), endpoints=names) for n in names}
        if variant["policies"] and variant["evidence_text"] is None:  # an evidence variant's endpoints are its bundle's
            endpoint_sets.append((v, chooser.endpoints))
        knobs_here = variant["knobs"]
        for c, (_, prompt) in enumerate(cases):
            for precision in variant["precisions"]:
                plain = Request(prompt, precision=precision, conversation=CONVERSATION)
                free = Request(prompt, precision=precision, metadata={"tier": "free"}, conversation=CONVERSATION)
                scores = routing.scores((plain,))
                if variant["unfamiliar_only"] and (scores.novelty is None or scores.novelty[0] <= 1.0):
                    continue  # an unfamiliar policy decides only unfamiliar prompts
                for s, (_, state) in enumerate(asked):
                    for k in knobs_here:
                        row = {
                            "variant": v,
                            "case": c,
                            "precision": precision,
                            "state": s,
                            "stickiness": k,
                            "policy": None,
                        }
                        decisions.append({**row, **decide_one(chooser, routing, plain, scores, None, state, knobs[k])})
                    last = getattr(state, "endpoint", None)
                    if variant["policies"] and last in sets:  # a policy forbidding the last endpoint
                        for k in FEW:
                            row = {"variant": v, "case": c, "precision": precision, "state": s, "stickiness": k}
                            decision = decide_one(chooser, routing, free, scores, sets[last], state, knobs[k])
                            decisions.append({**row, "policy": names.index(last), **decision})
                if variant["degraded"] and precision is None:  # what a bundle that cannot score decides
                    counts = [routing._rules.count_tokens(prompt)]
                    degraded = Scores(counts, note=DEGRADED_NOTE)
                    for s, (_, state) in enumerate(asked):
                        for k in FEW:
                            row = {
                                "variant": v,
                                "case": c,
                                "precision": precision,
                                "state": s,
                                "stickiness": k,
                                "policy": None,
                            }
                            decisions.append(
                                {
                                    **row,
                                    "degraded": True,
                                    **decide_one(chooser, routing, plain, degraded, None, state, knobs[k]),
                                }
                            )
        written.append({key: variant[key] for key in ("name", "manifest_text", "unfamiliar_policy", "evidence_text")})
    return {
        "kind": kind,
        "endpoints": names,
        "variants": written,
        "cases": [{"id": i, "prompt": p} for i, p in cases],
        "states": [{"id": i, "text": None if st is None else st.to_json()} for i, st in states],
        "policies": policies,
        "decisions": decisions,
        "switch_costs": switch_cost_rows(endpoint_sets, states),
    }


def switch_cost_rows(endpoint_sets: list[tuple[int, tuple]], states: list[tuple[str, object]]) -> list[dict]:
    """SwitchPricing.costs on each variant's endpoints, for every state, prompt length, answer length, price of a second."""
    from serving.conversations._switch import SwitchPricing

    rows = []
    for v, endpoints in endpoint_sets:
        for s, (_, state) in enumerate(states):
            if state is None:
                continue
            for tokens in (20, 700, 5000):
                for output in (0.0, 250.0):
                    for seconds in (0.0, 0.003, 0.5):
                        delta, missing = SwitchPricing(endpoints).costs(state, tokens, output, seconds, NOW)
                        rows.append(
                            {
                                "variant": v,
                                "state": s,
                                "input_tokens": tokens,
                                "output_tokens": output,
                                "seconds_price": seconds,
                                "delta": list(delta),
                                "missing": list(missing),
                            }
                        )
    return rows


def json_cases() -> dict:
    """to_json texts of states (JS must write the same text) and texts from_json refuses."""
    from serving.conversations._state import ConversationState

    state = ConversationState().after(
        "edge", input_tokens=100, output_tokens=40, on_device=True, outcome="served", now=NOW
    )
    state = state.after("cloud", input_tokens=180, output_tokens=60, on_device=False, outcome="fallback", now=NOW + 1.5)
    texts = [state.to_json(), ConversationState().to_json(), state.marked("regenerated").to_json()]
    bad = [
        "{}",
        "[]",
        '{"turns": -1}',
        "not json",
        '{"turns":1.0,"endpoint":null,"outcome":null,"history_tokens":0,"held":[],"updated":0.0}',
        '{"turns":1,"endpoint":null,"outcome":"great","history_tokens":0,"held":[],"updated":0.0}',
        '{"turns":1,"endpoint":null,"outcome":null,"history_tokens":0,"held":[["e",1]],"updated":0.0}',
        '{"turns":1,"endpoint":null,"outcome":null,"history_tokens":true,"held":[],"updated":0.0}',
    ]
    refused = []
    for text in bad:
        try:
            ConversationState.from_json(text)
            refused.append({"text": text, "refused": False})
        except ValueError:
            refused.append({"text": text, "refused": True})
    return {"texts": texts, "refused": refused}


def with_evidence_text(bundle: Path, dest: Path, text: str) -> str:
    """A copy of `bundle` in `dest` whose turn_evidence.json holds `text` (listed and digested as
    with_turn_evidence lists it, unsigned); its manifest text."""
    import hashlib

    from serving.bundle._bundle import manifest_digest
    from serving.conversations._evidence import FILE

    shutil.copytree(bundle, dest)
    (dest / "manifest.sig").unlink(missing_ok=True)
    (dest / FILE).write_text(text)
    data = json.loads((dest / "manifest.json").read_text())
    data["files"][FILE] = hashlib.sha256(text.encode()).hexdigest()
    data["manifest_sha256"] = manifest_digest(data)
    manifest = json.dumps(data, indent=2)
    (dest / "manifest.json").write_text(manifest)
    return manifest


def evidence_cases(two_names: list[str], n_names: list[str], bundle: Path, tmp: Path) -> dict:
    """TurnEvidence itself (module doc): `sets` (weights files and the endpoints they are read for),
    `adjusted` (each set's adjusted probabilities on a grid of probabilities and states), `refused` (texts
    from_json refuses, with the error's class and message, and odd texts it takes), `loads` (a
    two-endpoint bundle whose file is refused: Router.load's message, the folder as {bundle})."""
    from serving import BundleError, Router
    from serving.conversations._evidence import FEATURES, TurnEvidence

    steep = TurnEvidence(
        {n: (11.5 - k, 7.25, 2.5, 3.125 * (k - 1), 9.0, -26.0 + k, -13.5) for k, n in enumerate(n_names)}, rows=12
    )
    sets = [
        ("two", two_names, evidence_weights(two_names)),
        ("n", n_names, evidence_weights(n_names)),
        ("steep", n_names, steep),  # weights that drive z past +-30 (the clipping)
    ]
    grid = (0.0, 1e-5, 1e-4, 0.000123, 0.03, 0.25, 0.5, 0.7311, 0.97, 0.9999, 0.99995, 1.0, 0.4142, 0.0625)
    adjusted = []
    for index, (_, names, evidence) in enumerate(sets):
        for _, state in evidence_states(names, [False] * len(names)):
            for j in range(len(grid)):
                expected = [grid[(j + 5 * k) % len(grid)] for k in range(len(names))]
                adjusted.append(
                    {
                        "set": index,
                        "state": state.to_json(),
                        "expected": expected,
                        "adjusted": evidence.adjusted(expected, names, state),
                    }
                )
    features = json.dumps(list(FEATURES))
    ok = ", ".join(["0.5"] * len(FEATURES))

    def weights(a: str, b: str = f"[{ok}]", extra: str = "", names: tuple[str, str] = ("a", "b")) -> str:
        return f'{{"features": {features}, "weights": {{"{names[0]}": {a}, "{names[1]}": {b}}}{extra}}}'

    texts = [
        '{"features": ["x"], "weights": {}}',
        '{"weights": {}}',
        f'{{"features": {json.dumps(list(FEATURES) + ["more"])}, "weights": {{}}}}',
        f'{{"features": {features}, "weights": {{"a": [1]}}}}',
        "not json",
        "[]",
        '"text"',
        "null",
        f'{{"features": {features}}}',
        f'{{"features": {features}, "weights": []}}',
        f'{{"features": {features}, "weights": "ab"}}',
        f'{{"features": {features}, "weights": 3}}',
        f'{{"features": {features}, "weights": null}}',
        weights("5"),
        weights("1.5"),
        weights("null"),
        weights('[1, 0, 0, 0, 0, 0, "x"]'),
        weights("[1, null, 0, 0, 0, 0, 0]"),
        weights("[1, [0], 0, 0, 0, 0, 0]"),
        weights("[1, {}, 0, 0, 0, 0, 0]"),
        weights("[1, 0, 0, 0, 0, 0, NaN]"),
        weights("[1, 0, 0, 0, 0, 0, Infinity]"),
        weights("[1, 0, 0, 0, 0, 0, 1e999]"),
        weights("[1, 0, 0, 0, 0, 0]"),
        weights("[1, 0, 0, 0, 0, 0, 0, 0]"),
        weights(f"[{ok}]", '[1, 0, 0, 0, 0, 0, "inf"]'),
        weights("[1, 0, 0, 0, 0, 0, " + "9" * 400 + "]"),
        weights(f"[{ok}]", extra=', "rows": NaN'),
        weights(f"[{ok}]", extra=', "rows": Infinity'),
        weights(f"[{ok}]", extra=', "rows": null'),
        weights(f"[{ok}]", extra=', "rows": "1.5"'),
        weights(f"[{ok}]", extra=', "rows": [3]'),
        # taken as Python takes them
        weights('"1000000"'),
        weights('[" 1 ", "2_5", true, false, 1e-3, "-0.0", "+7"]'),
        weights("[1, 0, 0, 0, 0, 0, " + "9" * 30 + "]"),
        weights(f"[{ok}]", extra=', "rows": 12.9'),
        weights(f"[{ok}]", extra=', "rows": " 4_000 "'),
        weights(f"[{ok}]", extra=', "rows": true'),
        f'{{"features": {features}, "weights": {{"a": [{ok}], "b": [{ok}], "c": "ignored"}}, "rows": 3}}',
        f'\ufeff{{"features": {features}, "weights": {{"a": [{ok}], "b": [{ok}]}}}}',
    ]
    refused = []
    for text in texts:
        try:
            evidence = TurnEvidence.from_json(text.encode(), ["a", "b"])
            refused.append(
                {
                    "text": text,
                    "error": None,
                    "weights": {k: list(v) for k, v in evidence.weights.items()},
                    "rows": evidence.rows,
                }
            )
        except Exception as error:  # noqa: BLE001 - from_json lets some through (OverflowError): recorded as they are
            refused.append({"text": text, "error": type(error).__name__, "message": str(error)})
    loads = []
    two = (two_names[0], two_names[1])
    bad_files = [texts[0], weights("5", names=two), weights(f"[{ok}]", extra=', "rows": Infinity', names=two)]
    for k, text in enumerate(bad_files):
        dest = tmp / f"refused-{k}"
        manifest = with_evidence_text(bundle, dest, text)
        try:
            Router.load(dest, strict=True)
            raise SystemExit(f"Router.load took a bundle whose turn_evidence.json is {text!r}")
        except BundleError as error:
            loads.append(
                {"manifest_text": manifest, "evidence_text": text, "message": str(error).replace(str(dest), "{bundle}")}
            )
    return {
        "sets": [{"name": name, "endpoints": names, "text": e.to_json()} for name, names, e in sets],
        "adjusted": adjusted,
        "refused": refused,
        "loads": loads,
    }


def main() -> None:
    from endpoint_vectors import VARIANT_PARAMETERS, simulated_prompts

    from pipelines.vectors import checked_round_trip, hard_cases
    from serving import Router
    from serving.bundle._bundle import read_bundle

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True, help="the two-endpoint bundle (make test-js's)")
    parser.add_argument("--endpoint-bundle", type=Path, required=True, help="an N-endpoint bundle")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    two_manifest = read_bundle(args.bundle).manifest
    n_manifest = read_bundle(args.endpoint_bundle).manifest
    section = n_manifest.endpoints
    if section is None or two_manifest.endpoints is not None:
        raise SystemExit("--bundle must be a two-endpoint bundle, --endpoint-bundle an N-endpoint one")

    hard = dict(hard_cases())
    talk = [
        (f"history_{k}", f"Topic {k}. Background, part {k}: " + "the earlier discussion went on at length. " * (10 * k))
        for k in (1, 3, 6, 12)
    ]
    two_cases = checked_round_trip([(i, hard[i]) for i in TWO_PROMPTS] + talk)
    simulated = [(f"sim_{i:02d}", p) for i, p in enumerate(simulated_prompts()[:12])]
    odd = [(i, hard[i]) for i in N_PROMPTS]
    n_cases = checked_round_trip(simulated + odd + [("over_4k", "word " * 5000), ("over_8k", "tell me, " * 6000)])

    everything = tuple(range(len(STICKINESS)))
    main_knobs = {"knobs": everything, "precisions": (None,), "unfamiliar_only": False}
    extra_knobs = {"knobs": FEW, "precisions": (None,), "policies": False, "degraded": False}
    with tempfile.TemporaryDirectory(prefix="conversation-vectors-") as folder:
        tmp = Path(folder)
        two_variants = [variant("bundle", args.bundle, **main_knobs, policies=True, degraded=True)]
        for policy in ("rule_table", "learned", "edge_with_cloud_fallback"):
            if policy != (two_manifest.novelty or {}).get("policy"):
                two_variants.append(
                    variant(f"unfamiliar_{policy}", args.bundle, unfamiliar=policy, **extra_knobs, unfamiliar_only=True)
                )
        cached = tmp / "cached"
        cached_text = edited(args.endpoint_bundle, cached, with_caches)
        n_variants = [
            variant("bundle", args.endpoint_bundle, **main_knobs, policies=False, degraded=False),
            variant("cached", cached, cached_text, **main_knobs, policies=True, degraded=True),
        ]
        for rule, parameter in VARIANT_PARAMETERS.items():
            if rule != section.rule:
                text = edited(args.endpoint_bundle, tmp / f"cached-{rule}", with_rule(rule, parameter))
                n_variants.append(
                    variant(f"cached_{rule}", tmp / f"cached-{rule}", text, **extra_knobs, unfamiliar_only=False)
                )
        for policy in ("rule_table", "learned"):
            if policy != (n_manifest.novelty or {}).get("policy"):
                n_variants.append(
                    variant(
                        f"cached_unfamiliar_{policy}", cached, cached_text, policy, **extra_knobs, unfamiliar_only=True
                    )
                )
        # the previous turn as evidence (module doc)
        evidence_knobs = {"knobs": EVIDENCE_KNOBS, "precisions": (None,), "unfamiliar_only": False}
        two_names = list(Router.load(args.bundle, strict=True)._routing.chooser.names)
        n_names = list(section.names)
        text, weights = with_evidence_file(args.bundle, tmp / "two-evidence", evidence_weights(two_names))
        two_variants.append(
            variant(
                "evidence", tmp / "two-evidence", text, evidence=weights, **evidence_knobs, policies=True, degraded=True
            )
        )
        two_variants.append(  # most of these prompts are unfamiliar: the learned policy keeps the zone the evidence moves
            variant(
                "evidence_learned",
                tmp / "two-evidence",
                text,
                "learned",
                weights,
                **evidence_knobs,
                policies=False,
                degraded=False,
            )
        )
        text, weights = with_evidence_file(args.endpoint_bundle, tmp / "n-evidence", evidence_weights(n_names))
        n_variants.append(
            variant(
                "evidence", tmp / "n-evidence", text, evidence=weights, **evidence_knobs, policies=False, degraded=False
            )
        )
        text, weights = with_evidence_file(cached, tmp / "cached-evidence", evidence_weights(n_names))
        n_variants.append(
            variant(
                "cached_evidence",
                tmp / "cached-evidence",
                text,
                evidence=weights,
                **evidence_knobs,
                policies=True,
                degraded=True,
            )
        )
        rule = "cascade" if section.rule != "cascade" else "best_under_price"
        text, weights = with_evidence_file(
            tmp / f"cached-{rule}", tmp / f"cached-{rule}-evidence", evidence_weights(n_names)
        )
        n_variants.append(
            variant(
                f"cached_{rule}_evidence",
                tmp / f"cached-{rule}-evidence",
                text,
                evidence=weights,
                **evidence_knobs,
                policies=False,
                degraded=False,
            )
        )
        two = bundle_vectors(two_variants, two_cases, "two")
        n = bundle_vectors(n_variants, n_cases, "n")
        evidence = evidence_cases(two_names, n_names, args.bundle, tmp)

    document = {
        "format": FORMAT,
        "now": NOW,
        "conversation": CONVERSATION,
        "stickiness": [knob(k) for k in range(len(STICKINESS))],
        "degraded_note": DEGRADED_NOTE,
        "bundles": {
            "two": {"manifest_sha256": two_manifest.manifest_sha256, **two},
            "n": {"manifest_sha256": n_manifest.manifest_sha256, **n},
        },
        "json": json_cases(),
        "evidence": evidence,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document))
    for name, part in document["bundles"].items():
        rows = part["decisions"]
        turns = [r["decision"] for r in rows if "decision" in r]
        print(
            f"wrote {args.out} [{name}]: {len(rows)} decisions ({len(rows) - len(turns)} NoFeasibleEndpoint) over "
            f"{len(part['variants'])} variants, {len(part['cases'])} prompts, {len(part['states'])} states; "
            f"{sum(bool(d.get('switched')) for d in turns)} move the conversation, "
            f"{sum(d.get('switched') is False for d in turns)} stay, {sum('for the switch' in d['reason'] for d in turns)} "
            f"with the score moved, {sum('which would read' in d['reason'] for d in turns)} kept by the switch's price; "
            f"{len(part['switch_costs'])} switch_costs rows; {sum('weighed in' in d['reason'] for d in turns)} with the last turn "
            "weighed in"
        )
    print(
        f"  evidence: {len(evidence['adjusted'])} adjusted rows, {len(evidence['refused'])} from_json texts "
        f"({sum(r['error'] is not None for r in evidence['refused'])} refused), {len(evidence['loads'])} bundles refused"
    )


if __name__ == "__main__":
    main()
