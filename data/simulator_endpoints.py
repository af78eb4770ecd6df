"""Synthetic N-endpoint outcome logs (`make simulate ARGS="--endpoints spec.yaml"`, `make endpoints`):
the simulator's prompts and hidden difficulty (data.simulator), and for each endpoint a hidden
probability of success from the prompt's difficulty and domain and the endpoint's skill profile.

Hidden model, per endpoint e: P(e right) = sigmoid(intercept_e - slope_e * difficulty + domain_e[domain]).
A small model has a low intercept and a steep slope (it fails fast as prompts get harder); a
skill term lifts or lowers it on one domain (an 8B model tuned for code). So which endpoint is
the best value differs by prompt: a cheap model on easy prompts and in its domains, a frontier
model on hard ones. All endpoints face the same luck on `coupling` of the rows (a question that
fools one model tends to fool the others), independent luck on the rest.

Spec file (JSON, or YAML): `endpoints` is a serving.endpoints._record spec (names, prices, limits), and
`skills` maps each endpoint to its hidden `intercept`, `slope` and `domains` offsets;
`output_tokens` is the mean answer length the costs use. DEFAULT_SPEC is four endpoints.

Output folder: `rows.jsonl` (one row per request, `outcomes: {endpoint: 0/1}` and `costs:
{endpoint: $}`; with `one_outcome`, each row holds only the outcome of an endpoint drawn uniformly
at random, with `routed_to` and `propensity`; with `answers`, `responses`: each outcome's answer text,
answer_text), `_truth.jsonl` (request id, hidden difficulty and
each endpoint's hidden probability, so recovery is testable) and `_SIMULATED.yaml`, written last.
Loaders skip names starting with "_": the folder can be read as it is. Synthetic, labelled so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data.simulator import (
    BLOCK_ROWS,
    SOURCE,
    _check_int,
    _sigmoid,
    generate_rows,
    simulation_folder,
    write_manifest,
)
from data.simulator_text import DOMAIN_WEIGHTS
from serving.endpoints._record import Endpoints, EndpointSpecError, parse_endpoints, read_spec_document

GENERATOR_VERSION = "1"
ROWS_FILE = "rows.jsonl"
TRUTH_FILE = "_truth.jsonl"
SPEC_KEYS = ("endpoints", "skills", "output_tokens", "coupling", "description")
SKILL_KEYS = ("intercept", "slope", "domains")
CHARS_PER_TOKEN = 4.2  # data.simulator's estimate for this vocabulary

# Four endpoints of different price and skill: a free on-device 3B good at everyday questions, an
# on-prem 8B that beats the frontier model in code and math, a mid-price cloud model that beats it
# in the regulated domains, and the frontier model, best on hard prompts elsewhere.
DEFAULT_SPEC: dict[str, Any] = {
    "description": "four simulated endpoints (synthetic): phone 3B, on-prem 8B, mid-price cloud, frontier cloud",
    "endpoints": [
        {"name": "phone-3b", "where": "device", "price": {"per_call": 0.0}, "latency_ms": 150, "context_tokens": 4096},
        {
            "name": "onprem-8b",
            "where": "cloud",
            "price": {"per_call": 0.0004},
            "latency_ms": 300,
            "context_tokens": 8192,
        },
        {
            "name": "cloud-mid",
            "where": "cloud",
            "price": {"per_1k_input": 0.0005, "per_1k_output": 0.0015},
            "latency_ms": 500,
            "context_tokens": 128000,
        },
        {
            "name": "frontier",
            "where": "cloud",
            "price": {"per_1k_input": 0.005, "per_1k_output": 0.015},
            "latency_ms": 1200,
            "context_tokens": 200000,
            "capabilities": {"images": True, "tools": True, "json": True},
        },
    ],
    "skills": {
        "phone-3b": {"intercept": 1.0, "slope": 1.8, "domains": {"general": 1.5, "humanities": 1.0}},
        "onprem-8b": {
            "intercept": 1.2,
            "slope": 1.4,
            "domains": {"code": 2.4, "math": 2.0, "legal": -0.8, "medical": -0.5},
        },
        "cloud-mid": {
            "intercept": 1.8,
            "slope": 1.1,
            "domains": {"legal": 2.0, "finance": 1.9, "medical": 1.9, "science": 0.8, "code": -0.6},
        },
        "frontier": {"intercept": 2.6, "slope": 0.8, "domains": {}},
    },
    "output_tokens": 250,
    "coupling": 0.5,
}


@dataclass(frozen=True)
class Skill:
    """An endpoint's hidden profile: P(right) = sigmoid(intercept - slope * difficulty + domains[domain])."""

    intercept: float
    slope: float
    domains: dict[str, float]

    def probability(self, difficulty: np.ndarray, domains: np.ndarray) -> np.ndarray:
        shift = np.array([self.domains.get(d, 0.0) for d in domains], dtype=np.float64)
        return _sigmoid(self.intercept - self.slope * np.asarray(difficulty, np.float64) + shift)


@dataclass(frozen=True)
class EndpointSimulation:
    """The endpoints and their hidden skills, the mean answer length and the shared-luck share."""

    endpoints: Endpoints
    skills: dict[str, Skill]
    output_tokens: float = 250.0
    coupling: float = 0.5

    @property
    def names(self) -> tuple[str, ...]:
        return self.endpoints.names

    def as_dict(self) -> dict:
        return {
            **self.endpoints.as_dict(),
            "skills": {
                n: {"intercept": s.intercept, "slope": s.slope, "domains": s.domains} for n, s in self.skills.items()
            },
            "output_tokens": self.output_tokens,
            "coupling": self.coupling,
        }


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise EndpointSpecError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def parse_simulation(data: object, *, source: str = "<simulation>") -> EndpointSimulation:
    """An EndpointSimulation from a decoded spec (module doc); EndpointSpecError names what is wrong."""
    if not isinstance(data, dict):
        raise EndpointSpecError(f"{source}: a simulation spec is an object with endpoints and skills")
    for key in data:
        if key not in SPEC_KEYS:
            raise EndpointSpecError(f"{source}: unknown key {key!r}; a simulation spec has {', '.join(SPEC_KEYS)}")
    endpoints = parse_endpoints({"endpoints": data.get("endpoints")}, source=source)
    skills_in = data.get("skills")
    if not isinstance(skills_in, dict):
        raise EndpointSpecError(f"{source}: key 'skills' must map each endpoint to its hidden skill profile")
    skills = {}
    for name in endpoints.names:
        where = f"{source}: skills[{name!r}]"
        item = skills_in.get(name)
        if not isinstance(item, dict):
            raise EndpointSpecError(f"{where} is missing: every endpoint needs intercept, slope and domains")
        for key in item:
            if key not in SKILL_KEYS:
                raise EndpointSpecError(f"{where}: unknown key {key!r}; allowed: {', '.join(SKILL_KEYS)}")
        domains = item.get("domains") or {}
        if not isinstance(domains, dict):
            raise EndpointSpecError(f"{where}.domains must map domains to logit offsets")
        for domain in domains:
            if domain not in DOMAIN_WEIGHTS:
                raise EndpointSpecError(
                    f"{where}.domains: {domain!r} is not a simulated domain ({', '.join(DOMAIN_WEIGHTS)})"
                )
        slope = _number(item.get("slope"), f"{where}.slope")
        if slope < 0:
            raise EndpointSpecError(f"{where}.slope must be >= 0 (harder prompts are not easier), got {slope!r}")
        skills[name] = Skill(
            _number(item.get("intercept"), f"{where}.intercept"),
            slope,
            {d: _number(v, f"{where}.domains.{d}") for d, v in domains.items()},
        )
    extra = sorted(set(skills_in) - set(endpoints.names))
    if extra:
        raise EndpointSpecError(f"{source}: skills name {extra[0]!r}, which is not an endpoint")
    output_tokens = _number(data.get("output_tokens", 250), f"{source}: output_tokens")
    coupling = _number(data.get("coupling", 0.5), f"{source}: coupling")
    if output_tokens < 0 or not 0.0 <= coupling <= 1.0:
        raise EndpointSpecError(f"{source}: output_tokens must be >= 0 and coupling in [0, 1]")
    return EndpointSimulation(endpoints, skills, output_tokens, coupling)


def load_simulation(path: str | Path | None) -> EndpointSimulation:
    """The simulation spec at `path` (JSON, or YAML); DEFAULT_SPEC when None."""
    if path is None:
        return parse_simulation(DEFAULT_SPEC, source="data.simulator_endpoints.DEFAULT_SPEC")
    return parse_simulation(read_spec_document(path), source=str(path))


def simulate(sim: EndpointSimulation, n: int, *, seed: int = 0, one_outcome: bool = False, answers: bool = False):
    """(rows, truth): n rows as DataFrames. Rows: request_id, prompt, domain, precision, source,
    outcomes and costs (dicts), with `one_outcome` routed_to and propensity, and with `answers` each
    outcome's answer text (`responses`, answer_text: drawn from its own generator, so the other fields
    are those of the same seed without answers). Truth: request_id, difficulty, and p_<endpoint> for
    each endpoint. Same seed and n, same rows."""
    import pandas as pd

    _check_int("n", n, minimum=1)
    base = generate_rows(seed, 0, n, with_difficulty=True)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 29, n // BLOCK_ROWS]))
    names = sim.names
    difficulty, domains = base["difficulty"].to_numpy(float), base["domain"].to_numpy()
    p = np.stack([sim.skills[name].probability(difficulty, domains) for name in names], axis=1)
    shared, own, coupled = rng.random(n), rng.random((n, len(names))), rng.random(n) < sim.coupling
    luck = np.where(coupled[:, None], shared[:, None], own)
    right = (luck < p).astype(float)
    input_tokens = base["prompt"].str.len().to_numpy() / CHARS_PER_TOKEN
    output_tokens = sim.output_tokens * rng.lognormal(-0.125, 0.5, size=n)  # mean output_tokens
    costs = np.stack(
        [[e.call_cost(i, o) for i, o in zip(input_tokens, output_tokens)] for e in sim.endpoints], axis=1
    ).round(8)
    chosen = rng.integers(len(names), size=n) if one_outcome else None
    outcomes, cost_maps = [], []
    for i in range(n):
        keep = range(len(names)) if chosen is None else (int(chosen[i]),)
        outcomes.append({names[k]: right[i, k] for k in keep})
        cost_maps.append({names[k]: costs[i, k] for k in keep})
    rows = base[["request_id", "prompt", "domain", "precision"]].copy()
    rows["source"] = SOURCE
    rows["outcomes"], rows["costs"] = outcomes, cost_maps
    if chosen is not None:
        rows["routed_to"] = [names[k] for k in chosen]
        rows["propensity"] = 1.0 / len(names)
    if answers:
        said = np.random.default_rng(np.random.SeedSequence([seed, 31, n // BLOCK_ROWS]))
        rows["responses"] = [{name: answer_text(bool(q), said) for name, q in kept.items()} for kept in outcomes]
    truth = pd.DataFrame({"request_id": base["request_id"], "difficulty": difficulty})
    for k, name in enumerate(names):
        truth[f"p_{name}"] = p[:, k]
    return rows, truth


# What a simulated answer says (synthetic): a good answer ends on a stated result, a poor one
# hedges, repeats itself or stops mid-sentence (what serving.features._response_features reads); each
# outcome's answer is the other kind's in ANSWER_NOISE of the rows, so a check cannot be perfect.
GOOD_ANSWERS = (
    "Working through it: the two parts give {a} and {b}, so {a} + {b} = {c}. The answer is {c}.",
    "Step 1: {a} * 2 = {d}.\nStep 2: {d} + {b} = {e}.\nFinal answer: {e}",
    "Here is a concise answer. The key point is the second option, for the reasons above.\nThe answer is B.",
)
POOR_ANSWERS = (
    "I'm not sure, but it might be {a}, or possibly {b}; perhaps something else entirely.",
    "the result is {a} the result is {a} the result is {a} the result is {a} the result is",
    "Let me think about this carefully. First we consider {a} and then we",
)
ANSWER_NOISE = 0.15


def answer_text(good: bool, rng: np.random.Generator) -> str:
    """A simulated answer: of a good outcome mostly a GOOD_ANSWERS form, of a failed one mostly a
    POOR_ANSWERS form (the other kind in ANSWER_NOISE of them), with numbers drawn from `rng`."""
    kind = GOOD_ANSWERS if good != (rng.random() < ANSWER_NOISE) else POOR_ANSWERS
    a, b = (int(v) for v in rng.integers(2, 99, size=2))
    text = kind[int(rng.integers(len(kind)))]
    return text.format(a=a, b=b, c=a + b, d=a * 2, e=a * 2 + b)


def _write_jsonl(path: Path, frame) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as out:
            for record in frame.to_dict(orient="records"):
                clean = {
                    k: v for k, v in record.items() if not (isinstance(v, float) and np.isnan(v)) and v is not None
                }
                out.write(json.dumps(clean, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_simulation(
    out: str | Path, sim: EndpointSimulation, n: int, *, seed: int = 0, one_outcome: bool = False, answers: bool = False
) -> Path:
    """Write the rows, the hidden truth and the manifest (last) into folder `out`; return the rows file.
    `answers`: the rows carry each outcome's answer text (simulate)."""
    out = simulation_folder(out)
    rows, truth = simulate(sim, n, seed=seed, one_outcome=one_outcome, answers=answers)
    _write_jsonl(out / ROWS_FILE, rows)
    _write_jsonl(out / TRUTH_FILE, truth)
    manifest = {
        "description": "synthetic data: simulated N-endpoint outcome logs, not real requests; "
        "do not use for headline quality figures",
        "synthetic": True,
        "source": SOURCE,
        "generator": "data.simulator_endpoints",
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "n": n,
        "one_outcome": one_outcome,
        **({"answers": True} if answers else {}),
        "files": [ROWS_FILE, TRUTH_FILE],
        "simulation": sim.as_dict(),
    }
    write_manifest(out, manifest)
    return out / ROWS_FILE


def read_truth(folder: str | Path):
    """The hidden truth a simulation wrote beside its rows (`_truth.jsonl`), as a DataFrame."""
    import pandas as pd

    return pd.read_json(Path(folder) / TRUTH_FILE, lines=True)
