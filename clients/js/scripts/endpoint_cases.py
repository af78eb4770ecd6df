"""The Python SDK's endpoint specs and choices on random inputs, as JSON on stdout, for the JS SDK's
parity test (clients/js/test/endpoints.test.js runs it at test time; nothing is committed):

- `choices`: random [requests, endpoints] matrices of expected quality and cost (drawn from small
  grids so that ties happen, some entries NaN or infinite, some rows with nothing feasible) with
  serving.endpoints._choice's cheapest_within, best_under_price, cascade, escalation (from
  cheapest_within's choice) and cascade_expectation on them;
- `call_costs`: random endpoint specs and token counts with call_costs' prices and fits;
- `specs`: endpoint specs, good and bad, each with its parsed form (Endpoints.as_dict) or the
  EndpointSpecError's text, and `supports` questions with Endpoint.supports' answers.

    .venv/bin/python clients/js/scripts/endpoint_cases.py [--seed 29] > cases.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from serving.endpoints._choice import (  # noqa: E402
    best_under_price,
    call_costs,
    cascade,
    cascade_expectation,
    cheapest_within,
    escalation,
)
import serving.endpoints._record  # noqa: E402
from serving.endpoints._record import EndpointSpecError, parse_endpoints  # noqa: E402

# Prices per 1M tokens, the per-1k keys still read (serving.endpoints._record since per_1m): specs of both
# spellings are written then; an SDK before it reads per_1k only.
PER_1M = hasattr(serving.endpoints._record, "PER_1K_KEYS")
PRICE_SPELLINGS = (("per_1k_input", "per_1k_output"),) + ((("per_1m_input", "per_1m_output"),) if PER_1M else ())

GOOD = {
    "endpoints": [
        {
            "name": "phone-3b",
            "where": "device",
            "price": {"per_call": 0},
            "latency_ms": 120,
            "context_tokens": 4096,
            "capabilities": {"json": True, "languages": ["en", "pt-BR"]},
        },
        {
            "name": "cloud-mid",
            "where": "cloud",
            "price": {"per_1k_input": 0.0005, "per_1k_output": 0.0015, "per_call": 0.0001},
            "latency_ms": 400.5,
            "context_tokens": 32000.0,
            "capabilities": {"tools": True},
        },
        {
            "name": "frontier",
            "where": "cloud",
            "price": {"per_1k_input": 0.003, "per_1k_output": 0.015},
            "latency_ms": 900,
            "context_tokens": 200000,
            "capabilities": {"images": True, "tools": True, "json": True},
            "description": "the large one",
        },
    ]
}


def edited(path: list, value=None, *, delete: bool = False, spec=None):
    """A copy of `spec` (GOOD) with the value at `path` replaced (or deleted)."""
    data = copy.deepcopy(GOOD if spec is None else spec)
    node = data
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


def spec_cases() -> list:
    """Specs that parse, and specs that do not (one fault each)."""
    first = ["endpoints", 0]
    specs = [
        GOOD,
        {"edge": {}, "cloud": {}},
        {"edge": None, "cloud": {"price": {"per_1k_input": 0.001}, "context_tokens": 64000}},
        {"edge": {"name": "edge", "latency_ms": 50}, "cloud": {"capabilities": {"images": True}}},
        {"endpoints": GOOD["endpoints"][:1], "description": "one"},
        [],
        "endpoints",
        None,
        {},
        {"endpoints": []},
        {"endpoints": {"a": 1}},
        {"endpoint": []},
        {"edge": {}},
        {"cloud": {}},
        {"edge": [], "cloud": {}},
        {"edge": {"name": "phone"}, "cloud": {}},
        {"edge": {"colour": "red"}, "cloud": {}},
        {"endpoints": [GOOD["endpoints"][0]] * 2},
        {"endpoints": [{**GOOD["endpoints"][0], "name": f"e{i}"} for i in range(65)]},
        {"endpoints": ["phone"]},
        edited([*first, "name"], "has space"),
        edited([*first, "name"], ""),
        edited([*first, "name"], "x" * 65),
        edited([*first, "name"], 7),
        edited([*first, "name"], delete=True),
        edited([*first, "where"], "edge"),
        edited([*first, "where"], delete=True),
        edited([*first, "price"], delete=True),
        edited([*first, "latency_ms"], delete=True),
        edited([*first, "context_tokens"], delete=True),
        edited([*first, "colour"], "red"),
        edited([*first, "price"], {}),
        edited([*first, "price"], []),
        edited([*first, "price"], {"per_token": 1}),
        edited([*first, "price", "per_call"], -1),
        edited([*first, "price", "per_call"], -0.5),
        edited([*first, "price", "per_call"], True),
        edited([*first, "price", "per_call"], "0"),
        edited([*first, "price", "per_call"], None),
        edited([*first, "price", "per_call"], float("nan")),
        edited([*first, "price", "per_call"], float("inf")),
        edited([*first, "latency_ms"], -1.0),
        edited([*first, "context_tokens"], 0),
        edited([*first, "context_tokens"], 0.0),
        edited([*first, "context_tokens"], 4096.5),
        edited([*first, "context_tokens"], -3),
        edited([*first, "context_tokens"], [4096]),
        edited([*first, "capabilities"], None),
        edited([*first, "capabilities"], {"video": True}),
        edited([*first, "capabilities", "json"], 1),
        edited([*first, "capabilities", "json"], "yes"),
        edited([*first, "capabilities", "languages"], []),
        edited([*first, "capabilities", "languages"], "en"),
        edited([*first, "capabilities", "languages"], ["english"]),
        edited([*first, "capabilities", "languages"], ["en", 3]),
        edited([*first, "capabilities", "languages"], ["en_US"]),
        edited([*first, "description"], 3),
        edited(["endpoints", 2, "name"], "phone-3b"),
        edited(["endpoints", 1, "name"], "it's"),
    ]
    if PER_1M:  # prices per 1M tokens (the earlier per_1k_* still read), and the record's newer keys
        specs += [
            edited([*first, "price"], {"per_1m_input": 3, "per_1m_output": 15}),
            edited([*first, "price"], {"per_1m_input": 0.5, "per_1m_cached_input": 0.05, "per_call": 0.0001}),
            edited([*first, "price"], {"per_1k_input": 3e-05, "per_1k_output": 0.0001}),
            edited([*first, "price"], {"per_1m_cached_input": 0.1}),
            edited([*first, "price"], {"per_1k_input": 0.001, "per_1m_output": 2}),
            edited([*first, "price"], {"per_1k_output": 1e306}),
            edited([*first, "price", "per_1m_input"], -1),
            edited([*first, "prefill_tokens_per_s"], 800),
            edited([*first, "prefill_tokens_per_s"], 0),
            edited([*first, "base_url"], "http://127.0.0.1:8080/v1"),
            edited([*first, "api_key"], "sk-x"),
            {"edge": {"price": {"per_1m_input": 0.1}}, "cloud": {"price": {"per_1k_output": 0.02}}},
        ]
    cases = []
    for i, spec in enumerate(specs):
        source = f"spec{i}.json"
        try:
            parsed = parse_endpoints(spec, source=source)
        except EndpointSpecError as error:
            cases.append({"spec": spec, "source": source, "error": str(error)})
        else:
            cases.append({"spec": spec, "source": source, "parsed": parsed.as_dict()})
    return cases


def supports_cases() -> list:
    endpoints = parse_endpoints(GOOD)
    questions = [
        {},
        {"images": True},
        {"tools": True},
        {"json": True},
        {"language": "EN"},
        {"language": "pt-br"},
        {"language": "de"},
        {"tools": True, "json": True},
        {"images": True, "language": "de"},
    ]
    return [{"endpoint": e.name, "ask": q, "answer": e.supports(**q)} for e in endpoints for q in questions]


def matrix(rng: np.random.Generator, rows: int, n: int) -> tuple:
    """(expected, cost, feasible) with ties, non-finite entries and rows with nothing feasible."""
    if rng.random() < 0.5:
        expected = rng.choice([0.1, 0.5, 0.5, 0.7, 0.9, 0.9, 0.91], size=(rows, n))
        cost = rng.choice([0.0, 0.001, 0.001, 0.003, 0.01, 2.5], size=(rows, n))
    else:
        expected = rng.random((rows, n))
        cost = rng.random((rows, n)) * rng.choice([1e-4, 1.0, 30.0])
    for values in (expected, cost):
        holes = rng.random((rows, n)) < 0.03
        values[holes] = rng.choice([np.nan, np.inf, -np.inf], size=int(holes.sum()))
    feasible = rng.random((rows, n)) < 0.8
    feasible[rng.random(rows) < 0.05] = False
    return expected, cost, feasible


def listed(values: np.ndarray) -> list:
    return values.tolist()


def choice_cases(rng: np.random.Generator, count: int = 60) -> list:
    cases = []
    for _ in range(count):
        rows, n = int(rng.integers(1, 40)), int(rng.integers(1, 7))
        expected, cost, feasible = matrix(rng, rows, n)
        margin = float(rng.choice([0.0, 0.01, 0.02, 0.1, 0.4, 1.0]))
        price = float(rng.choice([0.0, 0.5, 1.0, 10.0, 1000.0]))
        start_margin = float(rng.choice([0.0, 0.05, 0.15, 1.0]))
        catch_rate = float(rng.choice([0.0, 0.5, 0.9, 1.0]))
        given = None if rng.random() < 0.2 else feasible
        first = cheapest_within(expected, cost, margin, given)
        orders = cascade(expected, cost, start_margin, given)
        quality, total = cascade_expectation(orders, np.nan_to_num(expected, nan=0.5), cost, catch_rate)
        cases.append(
            {
                "expected": listed(expected),
                "cost": listed(cost),
                "feasible": None if given is None else listed(given),
                "margin": margin,
                "price": price,
                "start_margin": start_margin,
                "catch_rate": catch_rate,
                "cheapest_within": listed(first),
                "best_under_price": listed(best_under_price(expected, cost, price, given)),
                "cascade": orders,
                "escalation": escalation(expected, cost, first, given),
                "expectation_quality": listed(np.nan_to_num(expected, nan=0.5)),
                "cascade_quality": listed(quality),
                "cascade_cost": listed(total),
            }
        )
    return cases


def call_cost_cases(rng: np.random.Generator, count: int = 20) -> list:
    cases = []
    for _ in range(count):
        n = int(rng.integers(1, 6))
        spec = {
            "endpoints": [
                {
                    "name": f"e{k}",
                    "where": str(rng.choice(["device", "cloud"])),
                    "price": {
                        key: float(rng.choice([0.0, 0.0001, 0.003, 0.015, rng.random()]))
                        for key in (PRICE_SPELLINGS[int(rng.integers(len(PRICE_SPELLINGS)))] + ("per_call",))
                        if rng.random() < 0.7
                    }
                    or {"per_call": 0},
                    "latency_ms": 100,
                    "context_tokens": int(rng.choice([512, 1024, 4096, 128000])),
                }
                for k in range(n)
            ]
        }
        tokens = rng.choice([0, 1, 7, 511, 512, 513, 1024, 3000, 4096, 200000], size=int(rng.integers(1, 12)))
        output_tokens = float(rng.choice([0.0, 250.0, 333.3]))
        cost, fits = call_costs(list(parse_endpoints(spec)), tokens, output_tokens)
        cases.append(
            {
                "spec": spec,
                "tokens": tokens.tolist(),
                "output_tokens": output_tokens,
                "cost": listed(cost),
                "fits": listed(fits),
            }
        )
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    np.seterr(invalid="ignore")  # inf x 0 in best_under_price: NaN, refused as not finite
    document = {
        "seed": args.seed,
        "choices": choice_cases(rng),
        "call_costs": call_cost_cases(rng),
        "specs": spec_cases(),
        "supports": supports_cases(),
    }
    json.dump(document, sys.stdout)


if __name__ == "__main__":
    main()
