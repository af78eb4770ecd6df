"""The Python SDK's execute outcomes for scripted endpoint behaviours, as JSON, for the JS SDK's parity
tests (clients/js/test/execute-parity.test.js in Node and test-browser/page.js in Chromium replay
them through src/execute.js and require the same outcome).

Each scenario is a decision (cascade, on_device, checked, forbidden, rule, n_tokens: two-endpoint
zones and N-endpoint cascades, forbidden endpoints in and out of the cascade, sides forbidden), the
endpoints' specs (a spec document, or none; prices per 1k and per 1M, context limits, where each
runs), each endpoint's scripted behaviour (answers; raises an error of a named class; raises
TimeoutError; answers after a short delay; hangs past its timeout), the accept check's verdict on
each endpoint's answer (accepts, rejects, raises), verify_edge_zone, output_tokens and the request's
deadline (milliseconds from the run's start: passed already, or far off); and what
serving.execution._execute.aexecute did with it (asyncio, so an overrunning call is cancelled, as the JS SDK
abandons one): the endpoint that served and its answer, each endpoint reached (Tried: label, error
class, cost), the calls made in order, the steps (name, status, detail), fallback_code and
fallback_reason, expected_cost, edge_error's class; or the error (EndpointsFailed, FallbackForbidden
with its rule and endpoint, or an argument error) with its message.

    .venv/bin/python clients/js/scripts/execute_vectors.py --out artifacts/js/execute-vectors.json [--seed 46] [--n 400]
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import serving.endpoints._record  # noqa: E402
from serving.routing._decision import Decision  # noqa: E402
from serving.endpoints._record import parse_endpoints  # noqa: E402
from serving.execution._execute import EndpointsFailed, aexecute  # noqa: E402
from serving.policy import FallbackForbidden  # noqa: E402

FORMAT = 1
PROMPT = "q"
NAMES = ("phone-3b", "onprem-8b", "cloud-mid", "frontier")
DEVICE = {"phone-3b": True, "onprem-8b": False, "cloud-mid": False, "frontier": False, "edge": True, "cloud": False}
ERRORS = ("ConnectionError", "RuntimeError", "ValueError", "KeyError", "UpstreamHTTPError", "OSError")
HANG_MS = (15, 25)
PER_1M = hasattr(serving.endpoints._record, "PER_1K_KEYS")  # the Python SDK reads prices per 1M tokens (and per 1k)
ZONES = {
    "edge": {"cascade": ["edge", "cloud"], "on_device": [True, False], "checked": []},
    "edge_with_cloud_fallback": {"cascade": ["edge", "cloud"], "on_device": [True, False], "checked": ["edge"]},
    "cloud": {"cascade": ["cloud"], "on_device": [False], "checked": []},
}


def error_of(name: str, message: str) -> BaseException:
    """An exception of the class `name`: a built-in one, else a new Exception subclass of that name."""
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        cls = type(name, (Exception,), {})
    return cls(message) if message else cls()


async def run(scenario: dict[str, Any]) -> dict[str, Any]:
    """aexecute on the scenario; the outcome record (module doc)."""
    made: list[str] = []

    def call(name: str):
        behaviour = scenario["behaviours"].get(name, {})

        async def endpoint(prompt: str) -> str:
            made.append(name)
            if "delay_ms" in behaviour:
                await asyncio.sleep(behaviour["delay_ms"] / 1000)
            if behaviour.get("hang"):
                await asyncio.sleep(30)
            if "raise" in behaviour:
                raise error_of(behaviour["raise"], behaviour.get("message", ""))
            return f"{name} answers {prompt}"

        return endpoint

    names = scenario["names"]
    verdicts = scenario["accept"]

    def accept(answer: str) -> bool:
        verdict = verdicts.get(answer.split(" ")[0], {"verdict": True})
        if "raise" in verdict:
            raise error_of(verdict["raise"], verdict.get("message", ""))
        return bool(verdict["verdict"])

    fields = scenario["decision"]
    decision = Decision(
        cascade=tuple(fields["cascade"]),
        score=0.0,
        reason="t",
        degraded=False,
        model_version="t",
        on_device=tuple(fields["on_device"]),
        checked=tuple(fields["checked"]),
        n_tokens=fields["n_tokens"],
        rule=fields["rule"],
        forbidden=tuple(fields["forbidden"]),
    )
    specs = None
    if scenario["specs"] is not None:
        specs = {e.name: e for e in parse_endpoints(scenario["specs"], source="specs")}
    timeouts = {n: ms / 1000 for n, ms in scenario["timeouts_ms"].items()} if scenario["timeouts_ms"] else None
    deadline_ms = scenario.get("deadline_ms")
    deadline = None if deadline_ms is None else time.monotonic() + deadline_ms / 1000
    try:
        execution = await aexecute(
            decision,
            PROMPT,
            endpoints={n: call(n) for n in names},
            specs=specs,
            timeouts=timeouts,
            accept=accept if verdicts is not None else None,
            verify_edge_zone=scenario["verify_edge_zone"],
            output_tokens=scenario["output_tokens"],
            deadline=deadline,
        )
    except (EndpointsFailed, FallbackForbidden) as error:
        tried = getattr(error, "tried", [])
        out: dict[str, Any] = {
            "error": type(error).__name__,
            "message": str(error),
            "tried": [t.label() for t in tried],
            "tried_errors": [t.error for t in tried],
            "calls": made,
            "steps": [[s.name, s.status, s.detail] for s in error.steps],
            "edge_error": None if error.edge_error is None else type(error.edge_error).__name__,
            "cause": None if error.__cause__ is None else type(error.__cause__).__name__,
        }
        if isinstance(error, FallbackForbidden):
            out.update(rule=error.rule, endpoint=error.endpoint)
        return out
    except (ValueError, TypeError) as error:
        return {"error": type(error).__name__, "message": str(error), "calls": made, "argument": True}
    return {
        "served_by": execution.served_by,
        "response": execution.response,
        "tried": [t.label() for t in execution.tried],
        "tried_errors": [t.error for t in execution.tried],
        "tried_costs": [t.cost for t in execution.tried],
        "calls": made,
        "steps": [[s.name, s.status, s.detail] for s in execution.steps],
        "fallback_code": execution.fallback_code,
        "fallback_reason": execution.fallback_reason,
        "expected_cost": execution.expected_cost,
        "edge_error": None if execution.edge_error is None else type(execution.edge_error).__name__,
    }


def price(rng: random.Random) -> dict[str, float]:
    spelling = rng.choice(["per_1k", "per_1m"] if PER_1M else ["per_1k"])
    out = {}
    if rng.random() < 0.7:
        out[f"{spelling}_input"] = rng.choice([0.0, 0.0002, 0.003, 0.5, 3.0, 15.0, rng.random()])
    if rng.random() < 0.5:
        out[f"{spelling}_output"] = rng.choice([0.0, 0.0015, 0.015, 1.5, 15.0, rng.random()])
    if rng.random() < 0.5 or not out:
        out["per_call"] = rng.choice([0.0, 0.0001, 0.001, 0.003])
    return out


def spec_document(rng: random.Random, names: list[str], n_tokens: int) -> dict[str, Any] | None:
    """Specs for some or all of `names` (none at all a quarter of the time)."""
    if rng.random() < 0.25:
        return None
    chosen = [n for n in names if rng.random() < 0.85] or names[:1]
    return {
        "endpoints": [
            {
                "name": n,
                "where": "device" if DEVICE.get(n, False) else "cloud",
                "price": price(rng),
                "latency_ms": 100,
                "context_tokens": rng.choice([max(1, n_tokens - 1), n_tokens, n_tokens + 1, 64, 4096, 200000]),
            }
            for n in chosen
        ]
    }


def behaviour(rng: random.Random) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.45:
        return {}
    if roll < 0.7:
        return {"raise": rng.choice(ERRORS), "message": rng.choice(["down", "", "it's over", 'said "no"', "line\nbreak"])}
    if roll < 0.78:
        return {"raise": "TimeoutError", "message": "slow"}
    if roll < 0.85:
        return {"delay_ms": 3}
    return {"hang": True}


def random_scenario(rng: random.Random) -> dict[str, Any]:
    n_tokens = rng.choice([5, 60, 100, 5000, 300000])
    if rng.random() < 0.35:  # a two-endpoint zone, maybe with a side forbidden as the chooser would place it
        names = ["edge", "cloud"]
        zone = dict(ZONES[rng.choice(list(ZONES))])
        forbidden: list[str] = []
        roll = rng.random()
        if roll < 0.2 and zone["cascade"] == ["edge", "cloud"]:
            forbidden = ["cloud"]
            zone = {"cascade": ["edge"], "on_device": [True], "checked": zone["checked"]}
        elif roll < 0.3:
            forbidden = ["edge"]
            zone = dict(ZONES["cloud"])
        elif roll < 0.35:
            forbidden = [rng.choice(names)]  # forbidden yet in the cascade: the runner still never calls it
        decision = {**zone, "forbidden": forbidden, "rule": ("rule-" + forbidden[0]) if forbidden else None}
    else:
        names = list(NAMES)
        cascade = rng.sample(names, rng.randint(1, len(names)))
        checked = cascade[:-1] if rng.random() < 0.8 else [n for n in cascade if rng.random() < 0.5]
        forbidden = []
        roll = rng.random()
        if roll < 0.2:
            forbidden = [n for n in names if n not in cascade][:1]  # left out of the cascade by the chooser
        elif roll < 0.3:
            forbidden = [rng.choice(cascade)]
        elif roll < 0.38:
            forbidden = [rng.choice(["cloud", "edge"])]
        rule = None if not forbidden or rng.random() < 0.1 else rng.choice(["private", "no-frontier", "it's-a-rule"])
        decision = {"cascade": cascade, "on_device": [DEVICE[n] for n in cascade], "checked": checked, "forbidden": forbidden,
                    "rule": rule}
    decision["n_tokens"] = n_tokens
    behaviours = {n: behaviour(rng) for n in names}
    timeouts = {n: rng.choice(HANG_MS) for n, b in behaviours.items() if b.get("hang")}
    for n in names:
        # A timeout that no answer reaches; not on an endpoint that raises TimeoutError itself: Python's
        # within_deadline (serving.execution._steps) reads any TimeoutError out of asyncio.wait_for as the call
        # overrunning, and its step then says "<name> call exceeded 10 s" where the call failed at once
        # with its own error (the outcome and the label are the same; this SDK keeps the call's own text).
        if n not in timeouts and behaviours[n].get("raise") != "TimeoutError" and rng.random() < 0.2:
            timeouts[n] = 10_000
    accept = None
    if rng.random() < 0.7:
        accept = {}
        for n in names:
            roll = rng.random()
            if roll < 0.3:
                accept[n] = {"verdict": False}
            elif roll < 0.4:
                accept[n] = {"raise": rng.choice(["ValueError", "RuntimeError"]), "message": "judge down"}
    return {
        "names": names,
        "decision": decision,
        "specs": spec_document(rng, names, n_tokens),
        "behaviours": behaviours,
        "timeouts_ms": timeouts or None,
        "accept": accept,
        "verify_edge_zone": rng.random() < 0.2,
        "output_tokens": rng.choice([0.0, 250.0, 333.3]),
    }


def scenario(
    names, decision, *, specs=None, behaviours=None, timeouts_ms=None, accept=None, verify=False, output_tokens=0.0, deadline_ms=None
):
    out = {
        "names": list(names),
        "decision": {"forbidden": [], "rule": None, "n_tokens": 10, **decision},
        "specs": specs,
        "behaviours": behaviours or {},
        "timeouts_ms": timeouts_ms,
        "accept": accept,
        "verify_edge_zone": verify,
        "output_tokens": output_tokens,
    }
    return out if deadline_ms is None else {**out, "deadline_ms": deadline_ms}


def n_decision(cascade, **fields):
    return {"cascade": list(cascade), "on_device": [DEVICE.get(n, False) for n in cascade], "checked": list(cascade[:-1]), **fields}


SPECS = {
    "endpoints": [
        {"name": "phone-3b", "where": "device", "price": {"per_call": 0}, "latency_ms": 120, "context_tokens": 64},
        {"name": "onprem-8b", "where": "cloud", "price": {"per_1k_input": 0.0002}, "latency_ms": 300, "context_tokens": 8192},
        {"name": "cloud-mid", "where": "cloud", "price": {"per_1k_input": 0.0005, "per_1k_output": 0.0015}, "latency_ms": 500,
         "context_tokens": 128000},
        {"name": "frontier", "where": "cloud", "price": {"per_1k_input": 0.005, "per_call": 0.001}, "latency_ms": 900,
         "context_tokens": 200000},
    ]
}


def fixed_scenarios() -> list[dict[str, Any]]:
    """The cases the tests name: each reason to move on, alone and together, and each way none serves."""
    two = ["edge", "cloud"]
    down = {"raise": "ConnectionError", "message": "refused"}
    return [
        scenario(NAMES, n_decision(NAMES), specs=SPECS),
        scenario(NAMES, n_decision(["frontier", "phone-3b"]), behaviours={"frontier": down}),
        scenario(NAMES, n_decision(NAMES, n_tokens=100), specs=SPECS, output_tokens=250.0,
                 behaviours={"onprem-8b": {"raise": "RuntimeError", "message": "boom"}}),
        scenario(NAMES, n_decision(NAMES), behaviours={"phone-3b": {"hang": True}}, timeouts_ms={"phone-3b": 20}),
        scenario(NAMES, n_decision(NAMES), accept={n: {"verdict": False} for n in NAMES}),
        scenario(NAMES, n_decision(["phone-3b", "frontier"]), accept={"phone-3b": {"raise": "ValueError", "message": "judge down"}}),
        scenario(NAMES, n_decision(NAMES, forbidden=["frontier"], rule="private"),
                 behaviours={"phone-3b": down, "onprem-8b": {"raise": "TimeoutError", "message": "slow"}}),
        scenario(NAMES, n_decision(["phone-3b", "onprem-8b"], forbidden=["frontier"], rule="private"),
                 behaviours={"phone-3b": down, "onprem-8b": down}),
        scenario(NAMES, n_decision(["phone-3b", "onprem-8b"], forbidden=["frontier"], rule="private"),
                 accept={"phone-3b": {"verdict": False}, "onprem-8b": {"verdict": False}}),
        scenario(NAMES, n_decision(NAMES, forbidden=["cloud"], rule="keep-local"), specs=SPECS,
                 behaviours={"phone-3b": down}),
        scenario(NAMES, n_decision(NAMES, forbidden=["cloud"], rule="keep-local")),
        scenario(NAMES, n_decision(NAMES, n_tokens=100), specs=SPECS, behaviours={n: down for n in NAMES}),
        scenario(NAMES, n_decision(["phone-3b"], n_tokens=100), specs=SPECS),
        scenario(NAMES, n_decision(["phone-3b", "ghost"])),
        scenario(two, ZONES["edge"], behaviours={"edge": down}),
        scenario(two, ZONES["edge"], accept={"edge": {"verdict": False}}),
        scenario(two, ZONES["edge"], accept={"edge": {"verdict": False}}, verify=True),
        scenario(two, ZONES["edge_with_cloud_fallback"], accept={"edge": {"verdict": False}}),
        scenario(two, ZONES["edge_with_cloud_fallback"], behaviours={"edge": {"hang": True}}, timeouts_ms={"edge": 20}),
        scenario(two, ZONES["cloud"], behaviours={"cloud": down}),
        scenario(two, {"cascade": ["edge"], "on_device": [True], "checked": ["edge"], "forbidden": ["cloud"], "rule": "pii"},
                 accept={"edge": {"verdict": False}}),
        scenario(two, {"cascade": ["edge"], "on_device": [True], "checked": [], "forbidden": ["cloud"], "rule": "pii"},
                 behaviours={"edge": down}),
        scenario(two, {"cascade": ["edge"], "on_device": [True], "checked": [], "forbidden": ["cloud"], "rule": "pii", "n_tokens": 2000},
                 specs={"edge": {"context_tokens": 1024}, "cloud": {}}),
        scenario(two, {"cascade": ["edge"], "on_device": [True], "checked": [], "forbidden": ["cloud"], "rule": None},
                 behaviours={"edge": down}),
        # The request's deadline (Request.deadline), passed before the first call: every endpoint left is
        # skipped as a timeout, none called (a context limit or the policy first, as their checks come first).
        scenario(NAMES, n_decision(NAMES), deadline_ms=-1),
        scenario(NAMES, n_decision(NAMES, n_tokens=100), specs=SPECS, output_tokens=250.0, deadline_ms=-1),
        scenario(NAMES, n_decision(NAMES, forbidden=["cloud"], rule="keep-local"), specs=SPECS, deadline_ms=-1),
        scenario(NAMES, n_decision(["phone-3b", "onprem-8b"], forbidden=["frontier"], rule="private"), deadline_ms=-1),
        scenario(two, ZONES["edge_with_cloud_fallback"], accept={"edge": {"verdict": False}}, deadline_ms=-1),
        scenario(two, ZONES["cloud"], deadline_ms=-1),
        # A deadline far off: the calls' own timeouts stand (each is cut to what is left only when that is shorter).
        scenario(NAMES, n_decision(NAMES), behaviours={"phone-3b": {"hang": True}}, timeouts_ms={"phone-3b": 20}, deadline_ms=60_000),
        scenario(NAMES, n_decision(NAMES, n_tokens=100), specs=SPECS, behaviours={"onprem-8b": down}, deadline_ms=60_000),
        scenario(two, ZONES["edge"], behaviours={"edge": down}, deadline_ms=60_000),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--n", type=int, default=400, help="random scenarios besides the fixed ones")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    scenarios = fixed_scenarios() + [random_scenario(rng) for _ in range(args.n)]
    for item in scenarios:
        item["outcome"] = asyncio.run(run(item))
    document = {"format": FORMAT, "seed": args.seed, "prompt": PROMPT, "scenarios": scenarios}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(document, allow_nan=False), encoding="utf-8")
    kinds: dict[str, int] = {}
    for item in scenarios:
        outcome = item["outcome"]
        key = outcome.get("error") or "served"
        kinds[key] = kinds.get(key, 0) + 1
    print(f"{args.out}: {len(scenarios)} scenarios: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))


if __name__ == "__main__":
    main()
