"""Synthetic conversations (`make conversations`, docs/simulator.md#conversations): several turns each,
the request text the whole conversation so far, every endpoint's outcome on every turn, and the
hidden truth beside them. Synthetic and labelled so; for the offline evaluation of routing
conversations (evaluation.conversations), never for headline quality figures.

The same model as the N-endpoint logs (data.simulator_endpoints), one turn at a time: the prompt
templates and hidden difficulty terms of data.simulator / data.simulator_text, each endpoint's
hidden P(right) = sigmoid(intercept - slope * difficulty + domains[domain]) from the spec's skills,
the same luck for every endpoint on `coupling` of the turns. What a conversation adds:

- **Turns**: 2 + Binomial(6, 0.4) (2 to 8, mean 4.4).
- **Topic**: turn 1 draws a domain and sub-topic as a single request does; each later turn keeps
  them with probability `keep_topic` (0.8: a follow-up, opened with a phrase such as "Following up
  on that:"), else draws new ones (the user changes the subject). The task form is drawn afresh on
  every turn.
- **Difficulty**: the single-request terms (sub-topic + task form + steps + the rule table's small
  terms) + the user's level, one draw per conversation ~ N(0, user_sd = 0.5), + the turn's own noise
  ~ N(0, sqrt(0.55^2 - 0.5^2) = 0.23): the noise of a single request (sd 0.55) split into a part the
  conversation shares and a part each turn has, so a turn alone is a request of data.simulator's.
  Consecutive turns' hidden difficulty then correlates about 0.42, each endpoint's hidden
  probability 0.36-0.50 and its 0/1 outcomes up to 0.2 (correlations(); docs/simulator.md): set
  so that the probabilities correlate about as MT-Bench's judge scores of one model on turns 1 and
  2 do (0.51, docs/evaluation.md), graded scores of questions written to follow each other. The
  best endpoint of a turn (highest hidden probability) is the previous turn's in about 71%.
- **Answers**: each turn's answer is `output_tokens` x lognormal (mean `output_tokens`, as
  data.simulator_endpoints draws it) long, the same for every endpoint; the history holds the
  answer of an endpoint drawn uniformly per turn (`answered_by` in the truth), written by
  data.simulator_endpoints.answer_text from that endpoint's outcome and padded with filler to its
  length. So a turn's text, and its token count, is the same whichever endpoints served the
  conversation before (a replay re-routes the turns; in a deployment the history holds what was
  served).
- **Request text**: the conversation so far as serving.chat._conversation.conversation_prompt
  builds it (the latest user message, then the earlier turns newest first as "role: text"); it
  grows by every prompt and answer.

The spec's endpoints declare prompt caches and prefill rates (DEFAULT_SPEC; assumptions, docs):
what moving a conversation costs (serving.conversations._switch) depends on them.

Output folder: `rows.jsonl` in the N-endpoint log format (data.endpoint_logs: prompt, outcomes
and costs of every endpoint, the turn's call price with nothing cached) with `conversation` and
`turn` (1-based) on every row and in its `metadata` ({"conversation": id, "turn": "k"}, which the
log readers keep); `_truth.jsonl` (request id, conversation, turn, hidden difficulty, p_<endpoint>,
the answer's output tokens, whether the topic was kept, who wrote the history's answer, the user's
level); `_SIMULATED.yaml`, written last. Ids: conversation `sim-<seed>-c<k>`, request
`sim-<seed>-c<k>-t<turn>`. Each conversation is drawn from its own generator seeded by (seed, k):
the same seed gives the same conversations whatever their number.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data.simulator import (
    _PRECISION_CUM,
    MODEL,
    RULE_DOMAINS,
    SOURCE,
    _check_int,
    simulation_folder,
    write_manifest,
)
from data.simulator_endpoints import (
    CHARS_PER_TOKEN,
    ROWS_FILE,
    TRUTH_FILE,
    EndpointSimulation,
    _write_jsonl,
    answer_text,
    parse_simulation,
)
from data.simulator_endpoints import DEFAULT_SPEC as ENDPOINT_SPEC
from data.simulator_text import DOMAIN_WEIGHTS, STEP_DIFFICULTY, SUBTOPICS, TASKS, PromptPlan, compose, paragraph
from serving._contract import PRECISIONS
from serving.chat._conversation import conversation_prompt
from serving.endpoints._record import read_spec_document

GENERATOR_VERSION = "1"
CONVERSATION, TURN = "conversation", "turn"

# The four endpoints of data.simulator_endpoints with what a conversation's cost depends on
# (assumptions, docs/simulator.md#conversations): prefill rates from the seed's latency model
# (data.simulator: a phone reads 0.15 ms a prompt token, the cloud 0.02 ms), a device KV cache on
# the phone, prefix caching on the on-prem server (priced per call: a cache saves it time, not
# money), and providers' prompt caches at a quarter (the mid-price model) and a tenth (the frontier
# model) of the input price, as providers bill cached input today.
DEFAULT_SPEC: dict[str, Any] = copy.deepcopy(ENDPOINT_SPEC)
DEFAULT_SPEC["description"] = (
    "four simulated endpoints (synthetic) with prompt caches and prefill rates: phone 3B, on-prem 8B, "
    "mid-price cloud, frontier cloud"
)
_CACHES = {
    "phone-3b": ({}, 1 / 0.00015),
    "onprem-8b": ({"per_1m_cached_input": 0.0}, 1 / 0.00002),
    "cloud-mid": ({"per_1m_cached_input": 0.125}, 1 / 0.00002),
    "frontier": ({"per_1m_cached_input": 0.5}, 1 / 0.00002),
}
for _endpoint in DEFAULT_SPEC["endpoints"]:
    _price, _rate = _CACHES[_endpoint["name"]]
    _endpoint["price"].update(_price)
    _endpoint["prefill_tokens_per_s"] = round(_rate, 1)

# A scenario (docs/evaluation.md#conversations-make-conversations): two frontier providers of one price,
# each a little stronger in some domains, both caching at a tenth, beside the phone and the mid-price
# model; `make conversations ARGS="--spec two-frontier"`.
TWO_FRONTIER_SPEC: dict[str, Any] = {
    "description": "scenario (synthetic): phone 3B, mid-price cloud, two frontier providers of one price",
    "endpoints": [
        DEFAULT_SPEC["endpoints"][0],
        DEFAULT_SPEC["endpoints"][2],
        *({**DEFAULT_SPEC["endpoints"][3], "name": name} for name in ("frontier-a", "frontier-b")),
    ],
    "skills": {
        "phone-3b": DEFAULT_SPEC["skills"]["phone-3b"],
        "cloud-mid": {"intercept": 1.8, "slope": 1.1, "domains": {"legal": 1.0, "finance": 1.0, "medical": 1.0}},
        "frontier-a": {
            "intercept": 2.6,
            "slope": 0.8,
            "domains": {"legal": 0.6, "finance": 0.6, "medical": 0.6, "humanities": 0.4},
        },
        "frontier-b": {"intercept": 2.6, "slope": 0.8, "domains": {"code": 0.6, "math": 0.6, "science": 0.4}},
    },
    "output_tokens": 250,
    "coupling": 0.5,
}
SPECS = {"default": DEFAULT_SPEC, "two-frontier": TWO_FRONTIER_SPEC}

FOLLOW_UPS = (
    "Following up on that:",
    "Thanks. Related to this,",
    "One more thing on the same subject.",
    "Building on your last answer,",
    "Going a bit further:",
)


@dataclass(frozen=True)
class ConversationModel:
    """What a simulated conversation is made of (module doc)."""

    min_turns: int = 2
    max_turns: int = 8
    turns_p: float = 0.4  # turns = min_turns + Binomial(max_turns - min_turns, turns_p)
    keep_topic: float = 0.8  # each later turn keeps the domain and sub-topic with this probability
    user_sd: float = 0.5  # the conversation's shared difficulty shift (the user's level)

    def __post_init__(self) -> None:
        if not 1 <= self.min_turns <= self.max_turns:
            raise ValueError(f"need 1 <= min_turns <= max_turns, got {self.min_turns}, {self.max_turns}")
        for name in ("turns_p", "keep_topic"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")
        if not 0.0 <= self.user_sd <= MODEL.noise_sd:
            raise ValueError(f"user_sd must be in [0, {MODEL.noise_sd}] (a share of a request's noise)")

    @property
    def turn_sd(self) -> float:
        return math.sqrt(MODEL.noise_sd**2 - self.user_sd**2)


CONVERSATIONS = ConversationModel()


def load_simulation(path: str | Path | None) -> EndpointSimulation:
    """The simulation spec at `path` (data.simulator_endpoints' format), or one of SPECS by name;
    DEFAULT_SPEC when None."""
    name = "default" if path is None else str(path)
    if name in SPECS and not Path(name).is_file():
        return parse_simulation(SPECS[name], source=f"data.simulator_conversations.SPECS[{name!r}]")
    return parse_simulation(read_spec_document(path), source=str(path))


_DOMAINS = tuple(DOMAIN_WEIGHTS)
_DOMAIN_P = np.array([DOMAIN_WEIGHTS[d] for d in _DOMAINS]) / sum(DOMAIN_WEIGHTS.values())
_TASK_P = np.array([t[1] for t in TASKS]) / sum(t[1] for t in TASKS)


def _answer(good: bool, tokens: float, rng: np.random.Generator, text_rng: random.Random) -> str:
    """An answer of about `tokens` tokens: answer_text's verdict first, filler after it."""
    verdict, chars = answer_text(good, rng), int(tokens * CHARS_PER_TOKEN)
    text = verdict
    while len(text) < chars:
        text += " " + paragraph(text_rng)
    return text[: max(chars, len(verdict))].rstrip()


def _conversation(sim: EndpointSimulation, seed: int, k: int, model: ConversationModel) -> tuple[list, list]:
    """(rows, truth) of conversation k: one dict each per turn."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 47, k]))
    text_rng = random.Random(int(rng.integers(2**63)))
    names = sim.names
    cid = f"sim-{seed}-c{k}"
    turns = model.min_turns + int(rng.binomial(model.max_turns - model.min_turns, model.turns_p))
    level = float(rng.normal(0.0, model.user_sd))
    messages: list[dict[str, str]] = []
    rows, truth = [], []
    domain = subtopic = None
    for t in range(1, turns + 1):
        kept = t > 1 and rng.random() < model.keep_topic
        if not kept:
            domain = _DOMAINS[int(rng.choice(len(_DOMAINS), p=_DOMAIN_P))]
            subtopic = SUBTOPICS[domain][int(rng.integers(len(SUBTOPICS[domain])))]
        assert domain is not None and subtopic is not None
        task_index = int(rng.choice(len(TASKS), p=_TASK_P))
        task, _, task_offset, stepped = TASKS[task_index]
        steps = 1 + int(rng.binomial(6, 0.35)) if stepped else 1
        sub_offset = subtopic[1]
        if task == "summarize":
            paragraphs, sub_offset = int(rng.integers(2, 17)), 0.3 * sub_offset
        else:
            paragraphs = int(rng.integers(1, 13)) if rng.random() < MODEL.long_context_share else 0
        u = rng.random()
        precision = None
        if u >= MODEL.undeclared_share:
            rescaled = (u - MODEL.undeclared_share) / (1.0 - MODEL.undeclared_share)
            precision = PRECISIONS[min(int((rescaled > _PRECISION_CUM[task_index]).sum()), len(PRECISIONS) - 1)]
        asked = compose(text_rng, PromptPlan(domain, subtopic[0], task, steps, paragraphs))
        if kept:
            asked = f"{FOLLOW_UPS[int(rng.integers(len(FOLLOW_UPS)))]} {asked}"
        difficulty = (
            sub_offset
            + task_offset
            + STEP_DIFFICULTY * (steps - 1)
            + level
            + float(rng.normal(0.0, model.turn_sd))
            + MODEL.rule_domain_shift * (domain in RULE_DOMAINS)
            + MODEL.long_prompt_shift * (len(asked) / CHARS_PER_TOKEN > 1024)
            + MODEL.exact_shift * (precision == "exact")
        )
        p = np.array([float(sim.skills[n].probability(np.array([difficulty]), np.array([domain]))[0]) for n in names])
        luck = np.full(len(names), rng.random()) if rng.random() < sim.coupling else rng.random(len(names))
        right = (luck < p).astype(float)
        output_tokens = float(sim.output_tokens * rng.lognormal(-0.125, 0.5))
        messages.append({"role": "user", "content": asked})
        text = conversation_prompt(messages)
        input_tokens = len(text) / CHARS_PER_TOKEN
        writer = int(rng.integers(len(names)))
        messages.append({"role": "assistant", "content": _answer(bool(right[writer]), output_tokens, rng, text_rng)})
        rid = f"{cid}-t{t}"
        rows.append(
            {
                "request_id": rid,
                "prompt": text,
                "domain": domain,
                "precision": precision,
                "source": SOURCE,
                "outcomes": dict(zip(names, right.tolist())),
                "costs": {n: round(e.call_cost(input_tokens, output_tokens), 8) for n, e in zip(names, sim.endpoints)},
                CONVERSATION: cid,
                TURN: t,
                "metadata": {CONVERSATION: cid, TURN: str(t)},
            }
        )
        truth.append(
            {
                "request_id": rid,
                CONVERSATION: cid,
                TURN: t,
                "difficulty": difficulty,
                "output_tokens": round(output_tokens, 1),
                "topic_kept": bool(kept),
                "answered_by": names[writer],
                "user_level": level,
                **{f"p_{n}": float(q) for n, q in zip(names, p)},
            }
        )
    return rows, truth


def simulate(sim: EndpointSimulation, conversations: int, *, seed: int = 0, model: ConversationModel = CONVERSATIONS):
    """(rows, truth) of `conversations` conversations as DataFrames, one row per turn (module doc)."""
    import pandas as pd

    _check_int("conversations", conversations, minimum=1)
    _check_int("seed", seed, minimum=0)
    rows, truth = [], []
    for k in range(conversations):
        r, t = _conversation(sim, seed, k, model)
        rows += r
        truth += t
    return pd.DataFrame(rows), pd.DataFrame(truth)


def write_conversations(
    out: str | Path,
    sim: EndpointSimulation,
    conversations: int,
    *,
    seed: int = 0,
    model: ConversationModel = CONVERSATIONS,
) -> Path:
    """Write the rows, the hidden truth and the manifest (last) into folder `out`; return the rows file."""
    out = simulation_folder(out)
    rows, truth = simulate(sim, conversations, seed=seed, model=model)
    _write_jsonl(out / ROWS_FILE, rows)
    _write_jsonl(out / TRUTH_FILE, truth)
    manifest = {
        "description": "synthetic data: simulated conversations with N-endpoint outcomes, not real requests; "
        "do not use for headline quality figures",
        "synthetic": True,
        "source": SOURCE,
        "generator": "data.simulator_conversations",
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "conversations": conversations,
        "turns": len(rows),
        "conversation_model": asdict(model),
        "files": [ROWS_FILE, TRUTH_FILE],
        "simulation": sim.as_dict(),
    }
    write_manifest(out, manifest)
    return out / ROWS_FILE


def correlations(rows, truth) -> dict[str, float]:
    """How much consecutive turns of a conversation share: the correlation of their hidden difficulty,
    of each endpoint's outcomes (0/1) and hidden probabilities, and the share of turns whose best
    endpoint (highest hidden probability) is the previous turn's."""
    frame = truth.merge(rows[["request_id", "outcomes"]], on="request_id").sort_values([CONVERSATION, TURN])
    nxt = frame.groupby(CONVERSATION).shift(-1)
    pair = nxt[TURN].notna().to_numpy()
    out = {"difficulty": float(np.corrcoef(frame["difficulty"][pair], nxt["difficulty"][pair])[0, 1])}
    names = [c[2:] for c in truth.columns if c.startswith("p_")]
    for name in names:
        now = np.array([o[name] for o in frame["outcomes"]])[pair]
        later = np.array([o[name] if isinstance(o, dict) else np.nan for o in nxt["outcomes"]])[pair]
        out[f"outcome_{name}"] = float(np.corrcoef(now, later)[0, 1])
        out[f"p_{name}"] = float(np.corrcoef(frame[f"p_{name}"][pair], nxt[f"p_{name}"][pair])[0, 1])
    best = frame[[f"p_{n}" for n in names]].to_numpy().argmax(axis=1)
    best_next = nxt[[f"p_{n}" for n in names]].to_numpy()[pair].argmax(axis=1)
    out["same_best_endpoint"] = float((best[pair] == best_next).mean())
    return out
