"""Exploration of N-endpoint decisions (serving.monitoring._traffic; docs/endpoints.md#from-your-traffic-to-n-
endpoint-training-rows): with `explore_rate` r, a request's first endpoint is drawn uniformly among
the k endpoints feasible for it, the rest of the decision's cascade following; the record's
`propensity` is the probability that the logging policy ran that endpoint first ((1 - r) + r / k for
the decided one, r / k for each other), so that one-outcome rows estimate every endpoint without the
bias of deterministic logging. The session's four-endpoint bundle, requests through Router.execute
and aexecute over local callables that record every call."""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter

import numpy as np
import pytest

from data.endpoint_logs import read_endpoint_logs
from data.simulator_endpoints import load_simulation, write_simulation
from evaluation.off_policy import logged_estimate
from serving import Router
from serving.chat import Endpoint, RoutedChat
from serving.endpoints._capabilities import Needs
from serving.monitoring._outcome_log import OutcomeLog
from serving.policy import PolicySet
from tests.endpoint_doubles import Calls, upstream_fixtures
from tests.test_endpoint_bundle import NAMES, trained, variant  # noqa: F401  (the N-endpoint bundle fixture)
from tests.test_endpoint_feedback import PROMPTS, records
from training.endpoints import EndpointRows

JOKE = "Tell me a joke about penguins."  # short: every endpoint's context holds it
CLOUD_ONES = ("onprem-8b", "cloud-mid", "frontier")  # where the bundle's spec runs them

upstreams, fresh = upstream_fixtures(NAMES)  # a stub server per endpoint on 127.0.0.1, reset before each test


def logging_router(folder, bundle, public=None, **options):
    log = OutcomeLog(folder)
    return Router.load(bundle, strict=True, public_key=public, log=log, **options), log


def requests_logged(folder) -> list[dict]:
    return [r for _, _, r in records(folder) if r["type"] == "request"]


def within_binomial(count: int, n: int, p: float) -> bool:
    """Whether `count` of `n` draws is a plausible Binomial(n, p) outcome (4.5 standard deviations)."""
    return abs(count / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n)


def test_first_endpoints_are_drawn_with_the_propensities_logged(trained, tmp_path):  # noqa: F811
    made, public = trained
    rate, n = 0.8, 2000
    router, log = logging_router(tmp_path / "logs", made.folder, public, explore_rate=rate, seed=11)
    decided = router.route(JOKE)
    stubs = Calls(NAMES)
    runs = [router.execute(JOKE, endpoints=stubs.sync) for _ in range(n)]
    log.close()
    logged = requests_logged(tmp_path / "logs")
    firsts = [r["endpoint"] for r in logged]
    assert stubs.made == firsts == [run.served_by for run in runs]  # the endpoint recorded is the one run first

    k = len(NAMES)  # no policy, no needs, a short prompt: every endpoint is feasible
    wanted = {name: rate / k + (1 - rate if name == decided.endpoint else 0.0) for name in NAMES}
    by_endpoint: dict[str, set[float]] = {}
    for record in logged:
        by_endpoint.setdefault(record["endpoint"], set()).add(record["propensity"])
        assert record["explored"] == (record["endpoint"] != decided.endpoint)
        # The explored endpoint first, then the decision's cascade in its order without it.
        rest = [name for name in decided.cascade if name != record["endpoint"]]
        assert record["cascade"] == [record["endpoint"], *rest]
    assert set(by_endpoint) == set(NAMES)
    for name, propensities in by_endpoint.items():
        (propensity,) = propensities
        assert propensity == pytest.approx(wanted[name])
    assert sum(wanted.values()) == pytest.approx(1.0)
    counts = Counter(firsts)
    for name in NAMES:
        assert within_binomial(counts[name], n, wanted[name]), (name, counts, wanted)

    # Seeded: the same seed draws the same first endpoints, another seed others.
    def drawn(seed: int, folder: str) -> list[str]:
        again, again_log = logging_router(tmp_path / folder, made.folder, public, explore_rate=rate, seed=seed)
        out = [again.execute(JOKE, endpoints=Calls(NAMES).sync).served_by for _ in range(60)]
        again_log.close()
        return out

    assert drawn(11, "same") == firsts[:60]
    assert drawn(12, "other") != firsts[:60]


def test_an_explored_endpoint_that_fails_hands_over_to_the_decided_one_sync_and_async(trained, tmp_path):  # noqa: F811
    made, public = trained
    decided = Router.load(made.folder, strict=True, public_key=public).route(JOKE)
    stubs = Calls(
        NAMES, fail={n: ConnectionError(f"{n} is down") for n in set(NAMES) - {decided.endpoint}}
    )  # only the decided endpoint answers
    router, log = logging_router(tmp_path / "logs", made.folder, public, explore_rate=1.0, seed=3)
    runs = [router.execute(JOKE, endpoints=stubs.sync) for _ in range(40)]

    async def asynchronous():
        return [await router.aexecute(JOKE, endpoints=stubs.asyn) for _ in range(40)]

    runs += asyncio.run(asynchronous())
    log.close()
    logged = requests_logged(tmp_path / "logs")
    explored = [(run, r) for run, r in zip(runs, logged) if r["explored"]]
    assert 0 < len(explored) < len(runs)  # r = 1 with k = 4: three in four
    assert any(r["explored"] for r in logged[:40]) and any(r["explored"] for r in logged[40:])  # sync, async
    for run, record in explored:
        assert record["endpoint"] != decided.endpoint
        assert [(t.endpoint, t.outcome) for t in run.tried] == [
            (record["endpoint"], "error"),
            (decided.endpoint, "served"),
        ]
        assert record["outcomes"] == {record["endpoint"]: 0.0}  # the explored call's failure: an observed 0
    for run, record in zip(runs, logged):
        assert record["propensity"] == pytest.approx(1 / len(NAMES))  # r = 1: (1 - 1) + 1 / 4 for each
        if not record["explored"]:
            assert [(t.endpoint, t.outcome) for t in run.tried] == [(decided.endpoint, "served")]


def test_routed_chat_explores_through_the_same_code_plain_and_streamed(trained, upstreams, tmp_path):  # noqa: F811
    made, public = trained
    router, log = logging_router(tmp_path / "logs", made.folder, public, explore_rate=1.0, seed=5)
    endpoints = {name: Endpoint(stub.url, f"{name}-model") for name, stub in upstreams.items()}
    ask = [{"role": "user", "content": JOKE}]
    with RoutedChat(router, endpoints=endpoints) as chat:  # specs: the bundle's own
        answers = [chat.create(ask) for _ in range(16)]
        for _ in range(4):
            with chat.create(ask, stream=True) as stream:
                text = "".join(c["choices"][0]["delta"].get("content") or "" for c in stream if c.get("choices"))
                assert text == f"answer from {stream.routing.served_by}"
    log.close()
    logged = requests_logged(tmp_path / "logs")
    assert [r["request_id"] for r in logged[:16]] == [a.routing.request_id for a in answers]
    firsts = Counter(r["endpoint"] for r in logged)
    # One call per request, to the endpoint recorded as run first; r = 1 among four: 0.25 each.
    assert {name: len(stub.received) for name, stub in upstreams.items()} == {n: firsts[n] for n in NAMES}
    assert len(firsts) >= 2 and any(r["explored"] for r in logged)
    assert all(r["propensity"] == pytest.approx(0.25) for r in logged)


def test_forbidden_endpoints_are_never_explored(trained, tmp_path):  # noqa: F811
    made, public = trained
    local = {"privacy": "local"}

    def device_only(*cloud):
        return PolicySet.from_dict(
            {
                "rules": [
                    {"name": f"private-{n}", "when": {"metadata": local}, "then": "forbid", "endpoint": n}
                    for n in cloud
                ]
            },
            endpoints=NAMES,
        )

    # The bundle's one device endpoint: private requests have one way to run (k = 1).
    router, log = logging_router(
        tmp_path / "one", made.folder, public, explore_rate=1.0, seed=0, policy=device_only(*CLOUD_ONES)
    )
    stubs = Calls(NAMES)
    for prompt in PROMPTS * 5:
        router.execute(prompt, endpoints=stubs.sync, metadata=local)
    log.close()
    assert set(stubs.made) == {"phone-3b"}
    assert {(r["endpoint"], r["propensity"], r["explored"]) for r in requests_logged(tmp_path / "one")} == {
        ("phone-3b", 1.0, False)
    }

    # onprem-8b running on the device too (the spec's `where`): private requests explore between the two only.
    def on_device(data):
        for endpoint in data["endpoints"]["endpoints"]:
            if endpoint["name"] == "onprem-8b":
                endpoint["where"] = "device"

    folder = variant(trained, tmp_path, on_device)
    router, log = logging_router(
        tmp_path / "two", folder, explore_rate=1.0, seed=0, policy=device_only("cloud-mid", "frontier")
    )
    stubs = Calls(NAMES)
    for prompt in PROMPTS * 10:
        router.execute(prompt, endpoints=stubs.sync, metadata=local)
    public_stubs = Calls(NAMES)
    for prompt in PROMPTS * 2:  # not private: every endpoint may be explored to
        router.execute(prompt, endpoints=public_stubs.sync)
    log.close()
    logged = requests_logged(tmp_path / "two")
    private, others = logged[: len(PROMPTS) * 10], logged[len(PROMPTS) * 10 :]
    assert set(stubs.made) == {"phone-3b", "onprem-8b"}  # both run first at times; nothing else ever runs
    assert {r["endpoint"] for r in private} == {"phone-3b", "onprem-8b"}
    assert all(r["propensity"] == pytest.approx(0.5) for r in private) and any(r["explored"] for r in private)
    assert all(set(r["cascade"]) <= {"phone-3b", "onprem-8b"} for r in private)
    assert {"cloud-mid", "frontier"} <= set(public_stubs.made)
    assert all(r["propensity"] == pytest.approx(0.25) for r in others)


def test_endpoints_the_request_cannot_use_are_never_explored(trained, tmp_path):  # noqa: F811
    made, public = trained
    router, log = logging_router(tmp_path / "logs", made.folder, public, explore_rate=0.5, seed=0)
    images = Calls(NAMES)
    for _ in range(30):  # only frontier declares images: one way to run
        router.execute(JOKE, endpoints=images.sync, needs=Needs(images=True))
    long_prompt = "word " * 5000  # over phone-3b's 4,096-token context, within the others'
    decided = router.route(long_prompt)
    assert "phone-3b" not in decided.cascade
    long = Calls(NAMES)
    for _ in range(200):
        router.execute(long_prompt, endpoints=long.sync)
    log.close()
    logged = requests_logged(tmp_path / "logs")
    assert set(images.made) == {"frontier"}
    assert {(r["endpoint"], r["propensity"], r["explored"]) for r in logged[:30]} == {("frontier", 1.0, False)}
    assert set(long.made) == set(NAMES) - {"phone-3b"}  # k = 3: explored among the three that hold it
    k = 3
    for record in logged[30:]:
        wanted = 0.5 / k + (0.5 if record["endpoint"] == decided.endpoint else 0.0)
        assert record["propensity"] == pytest.approx(wanted)


def test_explore_rate_0_records_the_decision_as_routed(trained, tmp_path):  # noqa: F811
    made, public = trained
    router, log = logging_router(tmp_path / "logs", made.folder, public, explore_rate=0.0, seed=0)
    decisions = [router.route(p) for p in PROMPTS]
    runs = [router.execute(p, endpoints=Calls(NAMES).sync) for p in PROMPTS]
    log.close()
    for decision, run, record in zip(decisions, runs, requests_logged(tmp_path / "logs")):
        assert run.decision == decision
        assert (record["endpoint"], record["cascade"], record["propensity"], record["explored"]) == (
            decision.endpoint,
            list(decision.cascade),
            1.0,
            False,
        )
        assert (record["zone"], record["target"], record["score"]) == (decision.zone, decision.target, decision.score)


def test_explored_one_outcome_logs_estimate_each_endpoint_near_the_complete_rows(trained, tmp_path):  # noqa: F811
    """SNIPS of each endpoint alone from one-outcome rows (feedback for the endpoint that ran only)
    against the same prompts' complete rows: deterministic logging overrates the endpoints the
    bundle sends easy prompts (phone-3b by ~0.28 on 3,000 prompts); exploring removes that."""
    made, public = trained
    sim = load_simulation(None)
    write_simulation(tmp_path / "sim", sim, 1200, seed=7)
    rows = [json.loads(line) for line in (tmp_path / "sim" / "rows.jsonl").read_text().splitlines()]
    truth = {name: float(np.mean([row["outcomes"][name] for row in rows])) for name in NAMES}

    def errors(rate: float) -> dict[str, float]:
        folder = tmp_path / f"logs-{rate}"
        router, log = logging_router(folder, made.folder, public, explore_rate=rate, seed=0)
        stubs = Calls(NAMES).sync
        for row in rows:
            run = router.execute(row["prompt"], endpoints=stubs, precision=row.get("precision"))
            first = run.decision.endpoint
            router.feedback(run.request_id, outcomes={first: row["outcomes"][first]})
        log.close()
        frame, rejects = read_endpoint_logs([folder], NAMES)
        assert rejects == [] and len(frame) == len(rows)
        got = EndpointRows.from_frame(frame, NAMES)
        quality = got.quality[np.arange(len(got)), got.routed]
        return {
            name: logged_estimate(np.full(len(got), k), got.routed, got.propensity, quality, np.zeros(len(got)))[
                "quality"
            ]
            - truth[name]
            for k, name in enumerate(NAMES)
        }

    deterministic, explored = errors(0.0), errors(0.3)
    assert deterministic["phone-3b"] > 0.15  # the bias exploration is for
    assert abs(explored["phone-3b"]) < deterministic["phone-3b"] - 0.1
    assert sum(map(abs, explored.values())) < sum(map(abs, deterministic.values())) - 0.2
