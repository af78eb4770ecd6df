"""Synthetic outcome logs (`make simulate`): canonical-schema rows drawn from a hidden difficulty model.

Labelled synthetic everywhere: `source` is "synthetic", request ids start with "sim-",
and every output folder holds a `_SIMULATED.yaml` manifest saying so. Headline quality
figures come from the real logs, never from these.

Difficulty model: each row's hidden difficulty is the sum of its sub-topic's and task
form's offsets, a per-step term for multi-step tasks, small terms for the three things
the hand rule table looks at (finance/medical/legal label, > 1,024 tokens, declared
`exact`) and Gaussian noise. P(edge right) and P(cloud right) are logistic in it, the
edge falling faster, so "cloud needed" concentrates on hard prompts, which may be short
("prove ...") while long ones are often easy ("summarize the document below").

Streaming and reproducibility: rows are generated in fixed blocks of `BLOCK_ROWS`, each
from its own generator seeded by (seed, block index), so a row's content depends only on
the seed and its global index, never on the shard size. `write_shards` holds at most
`ROW_GROUP_ROWS` rows in memory, whatever N is.
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from data.schema import COLUMNS, OPTIONAL_NUMBERS, RESPONSE_NUMBERS, RESPONSE_TEXT
from data.simulator_text import DOMAIN_WEIGHTS, STEP_DIFFICULTY, SUBTOPICS, TASKS, PromptPlan, compose
from serving._contract import PRECISIONS
from serving.routing import _rule_table as rules

__all__ = ["DifficultyModel", "GENERATOR_VERSION", "MANIFEST_NAME", "generate_rows", "parse_mix", "write_shards"]

GENERATOR_VERSION = "1"
BLOCK_ROWS = 1_000  # unit of seeding: never change without bumping GENERATOR_VERSION
ROW_GROUP_ROWS = 20_000  # rows held in memory (and written as one Parquet row group) at a time
SOURCE = "synthetic"
# Not `.json`: load_logs reads every .json file in a folder as JSONL logs, and this
# file must not become a rejected row. JSON text is valid YAML, so any reader parses it.
MANIFEST_NAME = "_SIMULATED.yaml"
SHARD_PATTERN = "part-{:05d}.parquet"
RULE_DOMAINS = tuple(sorted(rules.RULE_DOMAINS))  # a sequence: np.isin treats a set as one value
_DOMAINS = tuple(DOMAIN_WEIGHTS)
MIX_DEFAULTS = {"domain": dict(DOMAIN_WEIGHTS), "task": {t[0]: t[1] for t in TASKS}}  # parse_mix's default weights


def parse_count(text: str) -> int:
    """A row count: `100000`, `100_000` or `1e6`; anything not a positive integer is a ValueError."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise ValueError(f"must be a positive whole number, got {text!r}")
    return int(value)


@dataclass(frozen=True)
class DifficultyModel:
    """The hidden model: difficulty terms and the logistic outcome curves of both models."""

    noise_sd: float = 0.55
    rule_domain_shift: float = 0.15  # what the finance/medical/legal label adds (weak on purpose)
    long_prompt_shift: float = 0.10  # what > 1,024 tokens adds
    exact_shift: float = 0.10  # what a declared `exact` adds
    edge_intercept: float = 1.6
    edge_slope: float = 1.5
    cloud_intercept: float = 2.4
    cloud_slope: float = 1.0
    coupling: float = 0.7  # share of rows where both models face the same luck
    long_context_share: float = 0.12  # non-summary rows that carry background paragraphs
    undeclared_share: float = 0.10  # rows whose client declares no precision
    # The domains' and task forms' shares of the rows, (name, share) for each of them (parse_mix
    # builds them from `finance=0.6,...`); None: DOMAIN_WEIGHTS and TASKS' shares. A changed mix
    # is what a drifting app sends.
    domain_mix: tuple[tuple[str, float], ...] | None = None
    task_mix: tuple[tuple[str, float], ...] | None = None

    def __post_init__(self):
        for name in ("noise_sd", "edge_slope", "cloud_slope"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("coupling", "long_context_share", "undeclared_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")
        for kind, mix in (("domain", self.domain_mix), ("task", self.task_mix)):
            if mix is None:
                continue
            names, shares = tuple(MIX_DEFAULTS[kind]), dict(mix)
            if set(shares) != set(names) or len(mix) != len(names):
                raise ValueError(f"{kind}_mix must give each of {', '.join(names)} once, got {sorted(shares)}")
            if any(not 0.0 <= v <= 1.0 for v in shares.values()) or not math.isclose(sum(shares.values()), 1.0):
                raise ValueError(f"{kind}_mix shares must be in [0, 1] and add up to 1, got {mix}")

    def mix_p(self, kind: str) -> np.ndarray:
        """The probability of each domain ("domain") or task form ("task"), in MIX_DEFAULTS' order."""
        mix = self.domain_mix if kind == "domain" else self.task_mix
        shares = dict(mix) if mix is not None else MIX_DEFAULTS[kind]
        weights = [shares[name] for name in MIX_DEFAULTS[kind]]
        return np.array(weights) / sum(weights)  # a Python sum, as the rows before mixes were drawn with


def parse_mix(text: str, kind: str = "domain") -> tuple[tuple[str, float], ...]:
    """A DifficultyModel.domain_mix (kind "domain") or task_mix ("task") from `finance=0.6,legal=0.2`:
    the named ones get those shares, the others share what is left in proportion to their
    default weights (MIX_DEFAULTS); ValueError for an unknown name, a share outside [0, 1], a
    total over 1, or a total under 1 with every one named."""
    defaults = MIX_DEFAULTS[kind]
    given: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = (x.strip() for x in part.partition("="))
        if not sep or name not in defaults:
            raise ValueError(f"{part.strip()!r}: use {kind}=share with a {kind} among {', '.join(defaults)}")
        if name in given:
            raise ValueError(f"{name} is given twice")
        try:
            share = float(value)
        except ValueError:
            raise ValueError(f"{part.strip()!r}: the share must be a number") from None
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{part.strip()!r}: the share must be in [0, 1]")
        given[name] = share
    total, rest = sum(given.values()), [d for d in defaults if d not in given]
    if total > 1.0 + 1e-9:
        raise ValueError(f"the shares add up to {total:g}, over 1")
    if not rest and not math.isclose(total, 1.0):
        raise ValueError(f"every {kind} is named, so the shares must add up to 1, not {total:g}")
    left, weight = max(1.0 - total, 0.0), sum(defaults[d] for d in rest)
    shares = {**given, **{d: left * defaults[d] / weight for d in rest}}
    return tuple((d, shares[d]) for d in defaults)


MODEL = DifficultyModel()
# Declared precision by task form: answer-checkable tasks are mostly `exact`, open ones `tolerant`.
_PRECISION_P = {
    "recall": (0.55, 0.33, 0.12),
    "mcq": (0.83, 0.11, 0.06),
    "explain": (0.22, 0.45, 0.33),
    "summarize": (0.11, 0.39, 0.5),
    "calculate": (0.78, 0.17, 0.05),
    "multistep": (0.67, 0.22, 0.11),
    "code": (0.67, 0.28, 0.05),
    "prove": (0.78, 0.17, 0.05),
}

_PRECISION_CUM = np.array([np.cumsum(_PRECISION_P[t[0]]) / sum(_PRECISION_P[t[0]]) for t in TASKS])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def generate_block(seed: int, block: int, *, model: DifficultyModel = MODEL):
    """All `BLOCK_ROWS` rows of one block (canonical columns plus the hidden `difficulty`)."""
    import pandas as pd

    rng = np.random.default_rng(np.random.SeedSequence([seed, block]))
    text_rng = random.Random(int(rng.integers(2**63)))
    n = BLOCK_ROWS
    domain_idx = rng.choice(len(_DOMAINS), size=n, p=model.mix_p("domain"))
    sub_u, task_idx = rng.random(n), rng.choice(len(TASKS), size=n, p=model.mix_p("task"))
    steps_raw = 1 + rng.binomial(6, 0.35, size=n)
    context_u, context_n, summary_n = rng.random(n), rng.integers(1, 13, size=n), rng.integers(2, 17, size=n)
    precision_u, noise = rng.random(n), rng.normal(0.0, model.noise_sd, size=n)
    luck_shared, luck_edge, luck_cloud, coupled = rng.random((4, n))
    latency_noise = rng.lognormal(0.0, 0.25, size=(2, n))

    declared = precision_u >= model.undeclared_share
    rescaled = (precision_u - model.undeclared_share) / max(1.0 - model.undeclared_share, 1e-12)
    precision_idx = np.minimum((rescaled[:, None] > _PRECISION_CUM[task_idx]).sum(axis=1), len(PRECISIONS) - 1)

    prompts, domains, precisions, base = [], [], [], np.empty(n)
    for i in range(n):
        domain = _DOMAINS[domain_idx[i]]
        subtopic, sub_offset = SUBTOPICS[domain][int(sub_u[i] * len(SUBTOPICS[domain]))]
        task, _, task_offset, stepped = TASKS[task_idx[i]]
        steps = int(steps_raw[i]) if stepped else 1
        if task == "summarize":
            paragraphs, sub_offset = int(summary_n[i]), 0.3 * sub_offset  # the topic is only mentioned
        else:
            paragraphs = int(context_n[i]) if context_u[i] < model.long_context_share else 0
        prompts.append(compose(text_rng, PromptPlan(domain, subtopic, task, steps, paragraphs)))
        precisions.append(PRECISIONS[precision_idx[i]] if declared[i] else None)
        domains.append(domain)
        base[i] = sub_offset + task_offset + STEP_DIFFICULTY * (steps - 1)

    # ~4.2 characters a token for this vocabulary; only the > 1,024 flag and latency use it.
    tokens = np.array([len(p) for p in prompts]) / 4.2
    difficulty = (
        base
        + noise
        + model.rule_domain_shift * np.isin(domains, RULE_DOMAINS)
        + model.long_prompt_shift * (tokens > 1024)
        + model.exact_shift * (np.array(precisions, dtype=object) == "exact")
    )
    p_edge = _sigmoid(model.edge_intercept - model.edge_slope * difficulty)
    p_cloud = _sigmoid(model.cloud_intercept - model.cloud_slope * difficulty)
    shared = coupled < model.coupling
    edge_right = np.where(shared, luck_shared, luck_edge) < p_edge
    cloud_right = np.where(shared, luck_shared, luck_cloud) < p_cloud

    start = block * BLOCK_ROWS
    return pd.DataFrame(
        {
            "request_id": [f"sim-{seed}-{start + i}" for i in range(n)],
            "prompt": prompts,
            "domain": domains,
            "precision": precisions,
            "edge_quality": edge_right.astype(float),
            "cloud_quality": cloud_right.astype(float),
            # Phone edge model ~120 ms + prefill; cloud 200 ms + 50 ms network (shared/docs/baseline.md).
            "edge_latency_ms": np.round((120.0 + 0.15 * tokens) * latency_noise[0], 1),
            "cloud_latency_ms": np.round((250.0 + 0.02 * tokens) * latency_noise[1], 1),
            "edge_cost": 0.0,
            "cloud_cost": 0.003,
            "source": SOURCE,
            "difficulty": difficulty,
        }
    )


def generate_rows(seed: int, start: int, stop: int, *, with_difficulty: bool = False, model: DifficultyModel = MODEL):
    """Rows [start, stop) of the simulated log for `seed`, identical however the range is cut."""
    import pandas as pd

    _check_int("seed", seed, minimum=0)
    if not 0 <= start <= stop:
        raise ValueError(f"need 0 <= start <= stop, got start={start!r}, stop={stop!r}")
    if start == stop:
        return pd.DataFrame(columns=[*COLUMNS, *(["difficulty"] if with_difficulty else [])])
    first, last = start // BLOCK_ROWS, (stop - 1) // BLOCK_ROWS
    frames = [generate_block(seed, b, model=model) for b in range(first, last + 1)]
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    offset = first * BLOCK_ROWS
    frame = frame.iloc[start - offset : stop - offset].reset_index(drop=True)
    # Simulated rows carry no edge answers: those columns stay empty.
    frame = frame.reindex(columns=[*COLUMNS, *(["difficulty"] if with_difficulty else [])])
    return frame.astype({RESPONSE_TEXT: "str", "routed_to": "str"})


def _check_int(name: str, value, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _arrow_schema():
    import pyarrow as pa

    numbers = {"edge_quality", "cloud_quality", "propensity", *OPTIONAL_NUMBERS, *RESPONSE_NUMBERS}
    return pa.schema([(c, pa.float64() if c in numbers else pa.string()) for c in COLUMNS])


def _write_shard(
    path: Path, seed: int, start: int, stop: int, model: DifficultyModel, on_rows: Callable[[int], None] | None
) -> None:
    """One shard, written to a temporary name and renamed when complete; block by block."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema, tmp = _arrow_schema(), path.with_name(f".{path.name}.tmp")
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            # Cut at block boundaries so no block is generated twice inside a shard.
            cuts = [start, *range((start // BLOCK_ROWS + 1) * BLOCK_ROWS, stop, BLOCK_ROWS), stop]
            pending, held = [], 0
            for a, b in zip(cuts, cuts[1:]):
                pending.append(generate_rows(seed, a, b, model=model))
                held += b - a
                if held >= ROW_GROUP_ROWS or b == stop:
                    import pandas as pd

                    frame = pending[0] if len(pending) == 1 else pd.concat(pending, ignore_index=True)
                    writer.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
                    if on_rows:
                        on_rows(held)
                    pending, held = [], 0
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_shards(
    out: str | Path,
    n: int,
    *,
    rows_per_shard: int = 100_000,
    seed: int = 0,
    model: DifficultyModel = MODEL,
    on_shard: Callable[[Path, int], None] | None = None,
    on_rows: Callable[[int], None] | None = None,
) -> list[Path]:
    """Write `n` simulated rows into `out` as Parquet shards plus the manifest; return the shard paths.

    Earlier `part-*.parquet` shards and manifest in `out` are removed first (a smaller
    rerun must not leave stale rows behind); the manifest is written last, so its
    presence means the folder is complete. `on_shard(path, rows_done)` is called after each
    shard, `on_rows(k)` after each row group of k rows (progress bars).
    """
    _check_int("n", n, minimum=1)
    _check_int("rows_per_shard", rows_per_shard, minimum=1)
    _check_int("seed", seed, minimum=0)
    out = simulation_folder(out, stale="part-*.parquet")

    shards = []
    for index in range(math.ceil(n / rows_per_shard)):
        start, stop = index * rows_per_shard, min(n, (index + 1) * rows_per_shard)
        path = out / SHARD_PATTERN.format(index)
        _write_shard(path, seed, start, stop, model, on_rows)
        shards.append(path)
        if on_shard:
            on_shard(path, stop)
    manifest = {
        "description": "synthetic data: simulated edge/cloud outcome logs, not real requests; "
        "do not use for headline quality figures",
        "synthetic": True,
        "source": SOURCE,
        "generator": "data.simulator",
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "n": n,
        "rows_per_shard": rows_per_shard,
        "block_rows": BLOCK_ROWS,
        "shards": [p.name for p in shards],
        "difficulty_model": asdict(model),
    }
    write_manifest(out, manifest)
    return shards


def simulation_folder(out: str | Path, *, stale: str | None = None) -> Path:
    """`out` as the folder a simulation is written into: created, its manifest from an earlier run
    (and the files matching `stale`) removed, so that a smaller rerun leaves no stale rows behind;
    ValueError when it is a file."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a folder, but {str(out)!r} is a file")
    out.mkdir(parents=True, exist_ok=True)
    for path in [out / MANIFEST_NAME, *(out.glob(stale) if stale else ())]:
        path.unlink(missing_ok=True)
    return out


def write_manifest(out: Path, manifest: dict) -> None:
    """The manifest, written last and atomically: its presence means the folder is complete."""
    tmp = out / f".{MANIFEST_NAME}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out / MANIFEST_NAME)
