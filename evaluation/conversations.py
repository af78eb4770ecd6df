"""Offline evaluation of routing conversations (issue 47; docs/evaluation.md#conversations-make-conversations): held-out
conversations replayed turn by turn through the SDK's Router on an N-endpoint bundle (a fresh MemoryStore per policy,
record_turn after each turn) under each Stickiness of POLICIES, each turn priced by SwitchPricing on the conversation's
true cache state. A replay takes seconds: no provider cache expires."""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from evaluation.metrics import first_reach, paired
from serving.bundle._bundle import manifest_digest
from serving.bundle._manifest import ENDPOINT_RULES
from serving.conversations._state import ConversationState, Held
from serving.conversations._store import MemoryStore
from serving.conversations._switch import DEFAULT_PREFILL_TOKENS_PER_S, Stickiness, SwitchPricing
from serving.endpoints._record import Endpoint
from serving.routing._request import Request
from serving.routing._router import Router

FIGURES = ("quality", "expected_quality", "cost", "reprefill", "switches", "ttft_s", "turns")
# The policies compared: name -> Stickiness weight (own: each turn on its own; sticky: always stay).
POLICIES = {"own": 0.0, "sticky": math.inf, "priced": 1.0}
CURVE_WEIGHTS = (0.25, 0.5, 2.0, 4.0)
# What choose() tries on validation conversations: (weight, seconds_price), the SDK's default and none.
CANDIDATES = tuple((w, p) for w in (0.25, 0.5, 1.0, 2.0) for p in (0.0, Stickiness().seconds_price))


@dataclass
class Conversation:
    """One conversation's turns in order."""

    id: str
    texts: list[str]  # the requests
    precisions: list[str | None]  # as declared
    quality: np.ndarray  # every endpoint's outcome [turns, N]
    expected: np.ndarray | None  # the hidden probabilities [turns, N] (None unless simulated)
    output_tokens: np.ndarray  # the answers' lengths in tokens

    def __len__(self) -> int:
        return len(self.texts)


def _links(frame) -> list[dict]:
    """Each row's {conversation, turn}: its own columns where the reader kept them (the SDK's outcome
    log writes them), else its metadata's; ValueError when a row has neither."""
    if "conversation" in frame and "turn" in frame:
        return [{"conversation": c, "turn": t} for c, t in zip(frame["conversation"], frame["turn"])]
    links = [m if isinstance(m, dict) else {} for m in frame.get("metadata", [None] * len(frame))]
    if any("conversation" not in m or "turn" not in m for m in links):
        raise ValueError("every row needs metadata {conversation: id, turn: k} to be replayed as a conversation")
    return links


def conversation_ids(frame) -> list[str]:
    """Each row's conversation id (_links)."""
    return [str(link["conversation"]) for link in _links(frame)]


def conversations_of(frame, names: Sequence[str], truth=None, output_tokens: float = 250.0):
    """(the conversations of read_endpoint_logs' `frame`, linked by _links, how many were left out
    for lacking an endpoint's outcome on some turn). `truth`: the simulator's _truth.jsonl frame
    (hidden probabilities, answer lengths); without it every answer is `output_tokens` long."""
    names = list(names)
    rows = frame.assign(_cid=conversation_ids(frame), _turn=[int(m["turn"]) for m in _links(frame)])
    hidden = truth.set_index("request_id") if truth is not None else None
    out, incomplete = [], 0
    for cid, turns in rows.sort_values(["_cid", "_turn"]).groupby("_cid", sort=True):
        quality = turns[[f"q_{n}" for n in names]].to_numpy(float)
        if not np.isfinite(quality).all():
            incomplete += 1
            continue
        expected, tokens = None, np.full(len(turns), float(output_tokens))
        if hidden is not None and turns["request_id"].isin(hidden.index).all():
            known = hidden.loc[turns["request_id"]]
            expected = known[[f"p_{n}" for n in names]].to_numpy(float)
            tokens = known["output_tokens"].to_numpy(float)
        precisions = [p if isinstance(p, str) else None for p in turns["precision"]]
        out.append(Conversation(str(cid), list(turns["prompt"]), precisions, quality, expected, tokens))
    return out, incomplete


def turn_price(
    endpoints: Sequence[Endpoint],
    state: ConversationState,
    k: int,
    input_tokens: int,
    output_tokens: float,
    now: float,
    last_input: int | None = None,
) -> tuple[float, float, float]:
    """($ cost on endpoint k, time to first token in s, re-prefill: the cost over that had k served the turn before) of
    a turn in `state`; `last_input`: the turn before's input tokens (None on a first turn)."""
    endpoint, price = endpoints[k], endpoints[k].price
    delta, missing = SwitchPricing(endpoints).costs(state, input_tokens, output_tokens, 0.0, now)
    assert price is not None
    cost = price.call_cost(input_tokens, output_tokens) + float(delta[k])
    history, device = min(state.history_tokens, int(input_tokens)), endpoint.where == "device"
    held = history - int(missing[k]) if device or price.per_1m_cached_input is not None else 0  # else no cache
    rate = endpoint.prefill_tokens_per_s or DEFAULT_PREFILL_TOKENS_PER_S[endpoint.where or "cloud"]
    ttft = (endpoint.latency_ms or 0.0) / 1000.0 + (input_tokens - held) / rate
    reprefill = 0.0
    if last_input is not None and state.endpoint != endpoint.name and missing[k]:
        stayed = replace(
            state, endpoint=endpoint.name, held=(Held(endpoint.name, history if device else last_input, now),)
        )
        reprefill = cost - turn_price(endpoints, stayed, k, input_tokens, output_tokens, now)[0]
    return cost, ttft, reprefill


@dataclass
class Replay:
    """One policy on a set of conversations: per conversation (FIGURES), and each turn's endpoint."""

    per_conversation: dict[str, np.ndarray]
    served: list[list[int]]
    tokens: list[list[int]]  # each turn's input tokens as the SDK counted them
    endpoints: list[Endpoint]  # the bundle's, which `served` indexes

    def figures(self) -> dict[str, float]:
        return {k: float(np.nanmean(v)) if np.isfinite(v).any() else math.nan for k, v in self.per_conversation.items()}


def _figures(conversations, served, priced) -> dict[str, np.ndarray]:
    """Per conversation (FIGURES) from each turn's endpoint and its turn_price."""
    expected = [
        float(c.expected[np.arange(len(c)), s].mean()) if c.expected is not None else np.nan
        for c, s in zip(conversations, served)
    ]
    return {
        "quality": np.array([float(c.quality[np.arange(len(c)), s].mean()) for c, s in zip(conversations, served)]),
        "expected_quality": np.array(expected),
        "cost": np.array([sum(t[0] for t in turns) for turns in priced]),
        "reprefill": np.array([sum(t[2] for t in turns) for turns in priced]),
        "switches": np.array([sum(a != b for a, b in zip(s, s[1:])) for s in served], dtype=float),
        "ttft_s": np.array([float(np.mean([t[1] for t in turns])) for turns in priced]),
        "turns": np.array([len(c) for c in conversations], dtype=float),
    }


def replay(bundle: str | Path, conversations: Sequence[Conversation], stickiness: Stickiness) -> Replay:
    """Every conversation replayed through a Router on `bundle` with `stickiness`."""
    store = MemoryStore(max_conversations=max(1, len(conversations)))
    router = Router.load(bundle, strict=True, conversations=store, stickiness=stickiness)
    assert router.manifest is not None and router.manifest.endpoints is not None
    endpoints = list(router.manifest.endpoints.spec)
    names = [e.name for e in endpoints]
    served: list[list[int]] = [[] for _ in conversations]
    tokens: list[list[int]] = [[] for _ in conversations]
    priced: list[list[tuple[float, float, float]]] = [[] for _ in conversations]
    for turn in range(max(len(c) for c in conversations)):
        live = [i for i, c in enumerate(conversations) if turn < len(c)]
        requests = [
            Request(conversations[i].texts[turn], conversations[i].precisions[turn], conversation=conversations[i].id)
            for i in live
        ]
        for i, decision in zip(live, router.route_batch(requests)):
            conversation, k = conversations[i], names.index(decision.cascade[0])
            out = float(conversation.output_tokens[turn])
            state = store.get(conversation.id) or ConversationState()
            last = tokens[i][-1] if tokens[i] else None
            priced[i].append(turn_price(endpoints, state, k, decision.n_tokens, out, time.time(), last))
            served[i].append(k)
            tokens[i].append(decision.n_tokens)
            router.record_turn(conversation.id, names[k], input_tokens=decision.n_tokens, output_tokens=round(out))
    return Replay(_figures(conversations, served, priced), served, tokens, endpoints)


def _walk(endpoints, conversation: Conversation, tokens: Sequence[int], path: Sequence[int]) -> list[tuple]:
    """Each turn's turn_price serving `conversation` along `path`, the caches as the SDK's state keeps them."""
    state, priced = ConversationState(), []
    for turn, k in enumerate(path):
        out = float(conversation.output_tokens[turn])
        priced.append(turn_price(endpoints, state, k, tokens[turn], out, 0.0, tokens[turn - 1] if turn else None))
        state = state.after(
            endpoints[k].name,
            input_tokens=tokens[turn],
            output_tokens=round(out),
            on_device=endpoints[k].where == "device",
            outcome="served",
            now=0.0,
        )
    return priced


def oracle(endpoints: Sequence[Endpoint], conversations: Sequence[Conversation], tokens) -> Replay:
    """Per conversation, the endpoints with the most good turns and, among those, the least cost,
    every switch priced: a dynamic program over the endpoint of the turn before (a return to an older
    cache is priced as if it held none; the path's true cost is reported). `tokens`: a Replay's."""
    endpoints = list(endpoints)
    n = len(endpoints)
    limits = np.array([np.inf if e.context_tokens is None else e.context_tokens for e in endpoints])
    paths = []
    for conversation, counts in zip(conversations, tokens):
        value = np.zeros(n)  # the best (10 x good turns - cost) of a path ending on each endpoint
        back: list[np.ndarray] = []
        history = 0
        for turn, count in enumerate(counts):
            out = float(conversation.output_tokens[turn])
            gain = np.empty((n, n))  # [previous, next]
            for j in range(n):
                if turn == 0:
                    state = ConversationState()
                else:
                    held = Held(endpoints[j].name, history if endpoints[j].where == "device" else counts[turn - 1], 0.0)
                    state = ConversationState(turn, endpoints[j].name, "served", history, (held,), 0.0)
                for k in range(n):
                    cost = turn_price(endpoints, state, k, count, out, 0.0)[0]
                    gain[j, k] = 10.0 * conversation.quality[turn, k] - cost if count <= limits[k] else -np.inf
            total = value[:, None] + gain if turn else gain[:1].repeat(n, axis=0)
            back.append(np.argmax(total, axis=0))
            value = total.max(axis=0)
            history = count + round(out)
        path = [int(np.argmax(value))]
        for pointers in reversed(back[1:]):
            path.append(int(pointers[path[-1]]))
        paths.append(path[::-1])
    walked = [_walk(endpoints, c, t, p) for c, t, p in zip(conversations, tokens, paths)]
    return Replay(_figures(conversations, paths, walked), paths, [list(t) for t in tokens], endpoints)


def with_rule(bundle: str | Path, folder: str | Path, rule: str, parameter: float) -> Path:
    """A copy of `bundle` in `folder` whose endpoints choose by `rule` at `parameter` (the same models:
    its files hard-linked where the file system allows, its manifest edited and re-digested, unsigned)."""
    source, folder = Path(bundle), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((source / "manifest.json").read_text(encoding="utf-8"))
    for name in manifest["files"]:
        target = folder / name
        target.unlink(missing_ok=True)
        try:
            os.link(source / name, target)
        except OSError:
            shutil.copyfile(source / name, target)
    manifest["endpoints"]["choice"] = {"set_on": "evaluation.conversations.with_rule", "rule": rule}
    manifest["endpoints"]["choice"][ENDPOINT_RULES[rule]] = float(parameter)
    manifest["manifest_sha256"] = manifest_digest(manifest)
    (folder / "manifest.sig").unlink(missing_ok=True)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return folder


def frontier(costs, qualities) -> tuple[np.ndarray, np.ndarray]:
    """The points of a policy's (cost, quality) curve that no cheaper point matches, by cost."""
    order = np.lexsort((-np.asarray(qualities, float), np.asarray(costs, float)))
    c, q = np.asarray(costs, float)[order], np.asarray(qualities, float)[order]
    keep = q > np.maximum.accumulate(np.concatenate([[-np.inf], q[:-1]]))
    return c[keep], q[keep]


def cost_at(costs, qualities, target: float) -> float:
    """The least cost at which the curve reaches quality `target`, interpolated; NaN if it never does."""
    return first_reach(*frontier(costs, qualities), target)


def quality_at(costs, qualities, budget: float) -> float:
    """The curve's quality at cost `budget`, interpolated (flat beyond its costliest point); NaN below its cheapest."""
    c, q = frontier(costs, qualities)
    return float("nan") if budget < c[0] - 1e-12 else float(np.interp(budget, c, q))


def _price_of(bundle: str | Path) -> float:
    choice = json.loads((Path(bundle) / "manifest.json").read_text(encoding="utf-8"))["endpoints"]["choice"]
    if choice["rule"] != "best_under_price":
        raise ValueError(f"{bundle}: the conversations' evaluation needs a bundle trained with best_under_price")
    return float(choice["price"])


def _curves(bundle, conversations, work, policies: dict[str, Stickiness], prices, done=None) -> dict[str, list]:
    """Each policy's figures at the bundle's price (`done`: replays made there already) and at every
    price of `prices` (bundle variants, with_rule)."""
    price, done = _price_of(bundle), done or {}
    curves: dict[str, list[dict]] = {name: [] for name in policies}
    for p in sorted(set(prices) | {price}):
        variant = bundle if p == price else with_rule(bundle, Path(work) / f"price-{p:g}", "best_under_price", p)
        for name, stickiness in policies.items():
            run = done[name] if p == price and name in done else replay(variant, conversations, stickiness)
            curves[name].append({"price": p, **run.figures()})
    return curves


def _matched(curves: dict[str, list], measure: str, price: float) -> dict[str, dict]:
    """At each of own's points ("operating": the bundle's price), every policy's cost at own's quality
    there and quality at own's cost there, read on its curve."""
    xy = {n: ([x["cost"] for x in c], [x[measure] for x in c]) for n, c in curves.items()}
    return {
        ("operating" if point["price"] == price else f"{point['price']:g}"): {
            "price": point["price"],
            "target": point[measure],
            "budget": point["cost"],
            "cost_at": {n: cost_at(*xy[n], point[measure]) for n in curves},
            "quality_at": {n: quality_at(*xy[n], point["cost"]) for n in curves},
        }
        for point in curves["own"]
    }


def choose(bundle, validation: Sequence[Conversation], work, *, prices) -> dict:
    """Among CANDIDATES (weight, seconds_price), the priced stickiness whose curve costs least over own's on
    `validation` (mean excess cost_at at own's points, on hidden expected quality when known, else the outcomes)."""
    options = {f"weight {w:g}, seconds_price {p:g}": Stickiness(w, p) for w, p in CANDIDATES}
    curves = _curves(bundle, validation, Path(work) / "validation", {"own": Stickiness(0), **options}, prices)
    measure = "expected_quality" if np.isfinite(curves["own"][0]["expected_quality"]) else "quality"
    points = _matched(curves, measure, _price_of(bundle)).values()
    excess = {n: float(np.nanmean([p["cost_at"][n] - p["cost_at"]["own"] for p in points])) for n in options}
    name = min((n for n in options if np.isfinite(excess[n])), key=excess.__getitem__, default=next(iter(options)))
    chosen = options[name]
    return {"measure": measure, "excess_cost": excess, "weight": chosen.weight, "seconds_price": chosen.seconds_price}


def evaluate_fold(
    bundle: str | Path,
    conversations: Sequence[Conversation],
    work: str | Path,
    *,
    prices: Sequence[float],
    weights: Sequence[float] = CURVE_WEIGHTS,
    seconds_price: float = Stickiness().seconds_price,
    margin: float = 0.02,
    validation: Sequence[Conversation] = (),
) -> dict:
    """One fold's figures on its held-out `conversations` for a bundle trained with best_under_price:
    each policy (`tuned` chosen on `validation` conversations when given; priced at `weights` too)
    and the oracle at the bundle's price (`operating`), under cheapest_within at `margin`, at every
    price of `prices` (`curves`) and `matched` there, and the share of turns priced moved off own's."""
    price = _price_of(bundle)
    policies = {name: Stickiness(w, seconds_price) for name, w in POLICIES.items()}
    tuned = choose(bundle, validation, work, prices=prices) if validation else None
    if tuned is not None:
        policies["tuned"] = Stickiness(tuned["weight"], tuned["seconds_price"])
    extra = {f"priced x{w:g}": Stickiness(w, seconds_price) for w in weights}
    runs = {name: replay(bundle, conversations, s) for name, s in {**policies, **extra}.items()}
    operating = {name: run.figures() for name, run in runs.items()}
    operating["oracle"] = oracle(runs["own"].endpoints, conversations, runs["own"].tokens).figures()
    turns = sum(len(s) for s in runs["own"].served)
    changed = sum(a != b for x, y in zip(runs["own"].served, runs["priced"].served) for a, b in zip(x, y))
    variant = with_rule(bundle, Path(work) / "cheapest_within", "cheapest_within", margin)
    within = {name: replay(variant, conversations, policies[name]).figures() for name in POLICIES}
    curves = _curves(bundle, conversations, work, policies, prices, runs)
    measures = [m for m in ("quality", "expected_quality") if np.isfinite(operating["own"][m])]
    return {
        "conversations": len(conversations),
        "turns": turns,
        "price": price,
        "tuned": tuned,
        "operating": operating,
        "cheapest_within": within,
        "curves": curves,
        "matched": {measure: _matched(curves, measure, price) for measure in measures},
        "changed": changed / turns,
    }


def logged_conversations(bundle: str | Path, frame, names: Sequence[str], output_tokens: float) -> dict | None:
    """make evaluate's figures of the whole conversations in N-endpoint rows (None when the rows do not
    link turns): each of POLICIES and the oracle, and each policy minus own per conversation with its
    normal 95% interval. Turns go by their number, whatever the first (0, 1...); a conversation is whole
    when its numbers have no gap. ValueError naming a conversation that numbers two rows alike."""
    try:
        links = _links(frame)
    except ValueError:
        return None
    turns: dict[str, Counter[int]] = {}
    for link in links:
        turns.setdefault(str(link["conversation"]), Counter())[int(link["turn"])] += 1
    for cid, numbers in turns.items():
        turn, rows = numbers.most_common(1)[0]
        if rows > 1:
            raise ValueError(
                f"conversation {cid!r} has {rows} rows numbered turn {turn}: each of its turns needs a number of its own"
            )
    whole = {c for c, ts in turns.items() if len(ts) == max(ts) - min(ts) + 1}
    keep = [str(link["conversation"]) in whole for link in links]
    conversations, incomplete = conversations_of(frame[keep], names, output_tokens=output_tokens)
    out: dict = {"conversations": len(conversations), "partial": len(turns) - len(whole), "incomplete": incomplete}
    if not conversations:
        return out
    runs = {name: replay(bundle, conversations, Stickiness(weight)) for name, weight in POLICIES.items()}
    runs["oracle"] = oracle(runs["own"].endpoints, conversations, runs["own"].tokens)
    out["policies"] = {name: run.figures() for name, run in runs.items()}
    out["minus_own"] = {"priced": {}, "sticky": {}}
    for name, minus_own in out["minus_own"].items():
        for key in (k for k in FIGURES if k not in ("turns", "expected_quality")):
            both = paired(runs["own"].per_conversation[key], runs[name].per_conversation[key])
            minus_own[key] = {"difference": both["difference"], "interval": both["interval"]}
    return out
