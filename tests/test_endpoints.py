"""N endpoints (docs/endpoints.md): the endpoint spec and its errors, the two-endpoint spelling, the
N-endpoint log rows, the choosers on hand-made cases, and on a small simulated log the issue's
claims: the router reaches the best single endpoint's quality at lower cost, and makes the
simulator's true best-value choice more often than any fixed endpoint (interval-based)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data.endpoint_logs import check_endpoint_row, read_endpoint_logs
from data.schema import RowError
from data.simulator_endpoints import (
    DEFAULT_SPEC,
    load_simulation,
    parse_simulation,
    read_truth,
    simulate,
    write_simulation,
)
from evaluation.endpoints import oracle
from evaluation.metrics import area, envelope, first_reach
from serving.endpoints._choice import NONE, best_under_price, cascade, cascade_expectation, cheapest_within
from serving.endpoints._record import EndpointSpecError, load_endpoints, parse_endpoints


def endpoint(name="a", **changes):
    item = {"name": name, "where": "cloud", "price": {"per_call": 0.001}, "latency_ms": 300, "context_tokens": 8000}
    return {**item, **changes}


# The endpoint spec.


def test_a_spec_parses_every_field_and_prices_a_call():
    spec = parse_endpoints(
        {
            "endpoints": [
                endpoint("phone", where="device", price={"per_call": 0}, capabilities={"languages": ["en", "pt-BR"]}),
                endpoint("big", price={"per_1k_input": 0.003, "per_1k_output": 0.015}, capabilities={"images": True}),
            ]
        }
    )
    assert spec.names == ("phone", "big")
    assert spec["big"].call_cost(1000, 2000) == pytest.approx(0.003 + 0.030)
    assert spec["phone"].call_cost(5000, 5000) == 0.0
    assert spec["big"].supports(images=True) and not spec["phone"].supports(images=True)
    assert spec["phone"].supports(language="pt-br") and not spec["phone"].supports(language="de")
    assert spec["big"].supports(language="de")  # languages not given: not a constraint
    assert spec["phone"].fits(8000) and not spec["phone"].fits(8001)
    assert parse_endpoints(spec.as_dict()) == spec.__class__(spec.endpoints, "<endpoints>")


@pytest.mark.parametrize(
    "item, message",
    [
        (endpoint(where="moon"), "endpoints[0] ('a').where must be one of device, cloud, got 'moon'"),
        (endpoint(price={"per_call": -1}), "endpoints[0] ('a').price.per_call must be >= 0"),
        (endpoint(price={}), "endpoints[0] ('a').price is empty"),
        (endpoint(price={"per_token": 1}), "endpoints[0] ('a').price: unknown key 'per_token'"),
        (endpoint(latency_ms="fast"), "endpoints[0] ('a').latency_ms must be a finite number, got str"),
        (endpoint(context_tokens=0), "endpoints[0] ('a').context_tokens must be > 0"),
        (endpoint(context_tokens=1.5), "endpoints[0] ('a').context_tokens must be a whole number"),
        (endpoint(capabilities={"images": "yes"}), "endpoints[0] ('a').capabilities.images must be true or false"),
        (endpoint(capabilities={"languages": ["english!"]}), "capabilities.languages: 'english!' is not a language"),
        (endpoint(name="has space"), "endpoints[0].name must be a short code"),
        (
            {k: v for k, v in endpoint().items() if k != "context_tokens"},
            "endpoints[0] ('a'): missing field 'context_tokens'",
        ),
        (endpoint(colour="red"), "endpoints[0] ('a'): unknown key 'colour'"),
    ],
)
def test_a_bad_field_is_an_error_naming_the_endpoint_and_the_field(item, message):
    with pytest.raises(EndpointSpecError) as error:
        parse_endpoints({"endpoints": [item]}, source="spec.yaml")
    assert str(error.value).startswith("spec.yaml: ") and message in str(error.value)


def test_a_spec_needs_a_list_of_uniquely_named_endpoints():
    for data, message in [
        ([], "an endpoint spec is an object"),
        ({"endpoints": []}, "key 'endpoints' must be a non-empty list"),
        ({"endpoint": []}, "unknown key 'endpoint'"),
        ({"endpoints": [endpoint("a"), endpoint("a")]}, "endpoints[1].name 'a' is also the name of endpoints[0]"),
    ]:
        with pytest.raises(EndpointSpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
            parse_endpoints(data)


def test_the_two_endpoint_spelling_is_two_endpoints_named_edge_and_cloud(tmp_path):
    spec = parse_endpoints({"edge": {}, "cloud": {"price": {"per_1k_input": 0.01}}})
    assert spec.names == ("edge", "cloud")
    assert (spec["edge"].where, spec["cloud"].where) == ("device", "cloud")
    assert spec["edge"].call_cost(500) == 0.0 and spec["cloud"].call_cost(500) == pytest.approx(0.005)
    with pytest.raises(EndpointSpecError, match="needs both 'edge' and 'cloud'; missing 'cloud'"):
        parse_endpoints({"edge": {}})
    with pytest.raises(EndpointSpecError, match="edge.where must be one of"):
        parse_endpoints({"edge": {"where": "phone"}, "cloud": {}})
    path = tmp_path / "two.json"
    path.write_text(json.dumps({"edge": None, "cloud": None}))
    assert load_endpoints(path).names == ("edge", "cloud")


def test_spec_files_are_json_or_yaml_and_a_broken_one_says_so(tmp_path):
    good = tmp_path / "spec.yaml"
    good.write_text(
        "endpoints:\n  - {name: a, where: device, price: {per_call: 0}, latency_ms: 9, context_tokens: 9}\n"
    )
    assert load_endpoints(good).names == ("a",)
    for name, text, message in [
        ("bad.yaml", "endpoints: [", "is not valid YAML"),
        ("bad.json", "{", "is not valid JSON"),
        ("spec.txt", "{}", "name it .json"),
    ]:
        (tmp_path / name).write_text(text)
        with pytest.raises(EndpointSpecError, match=message):
            load_endpoints(tmp_path / name)
    with pytest.raises(EndpointSpecError, match="cannot read endpoint spec"):
        load_endpoints(tmp_path / "absent.json")


# The simulation spec and the N-endpoint rows.


def test_the_shipped_simulation_spec_is_the_default_one():
    assert load_simulation("data/endpoints/four.yaml").as_dict() == load_simulation(None).as_dict()
    bad = json.loads(json.dumps(DEFAULT_SPEC))
    bad["skills"]["frontier"]["domains"] = {"astrology": 1.0}
    with pytest.raises(EndpointSpecError, match=r"skills\['frontier'\].domains: 'astrology' is not a simulated domain"):
        parse_simulation(bad)
    del bad["skills"]["frontier"]
    with pytest.raises(EndpointSpecError, match=r"skills\['frontier'\] is missing"):
        parse_simulation(bad)


def test_rows_are_checked_and_the_two_endpoint_columns_are_two_endpoints():
    names = ("small", "big")
    row = check_endpoint_row({"prompt": "hi", "outcomes": {"small": 1, "big": 0}}, names, default_source="x")
    assert row["outcomes"] == {"small": 1.0, "big": 0.0}
    one = {"prompt": "hi", "outcomes": {"big": 1}, "routed_to": "big", "propensity": 0.5}
    assert check_endpoint_row(one, names, default_source="x")["propensity"] == 0.5
    for bad, message in [
        ({"prompt": "hi", "outcomes": {"big": 1}}, "outcomes lack small; a row without every endpoint's outcome needs"),
        ({"prompt": "hi", "outcomes": {"huge": 1}}, "outcomes names endpoint 'huge', which is not in the spec"),
        ({"prompt": "hi", "outcomes": {"small": 2, "big": 1}}, r"outcomes.small is out of range \[0, 1\]"),
        ({"prompt": "hi", "outcomes": {}}, "outcomes is missing or empty"),
        ({**one, "routed_to": "small"}, "routed_to is 'small' but outcomes do not hold its quality"),
        ({**one, "propensity": 0}, r"propensity must be a probability in \(0, 1\]"),
        ({"outcomes": {"small": 1, "big": 1}}, "prompt is missing"),
    ]:
        with pytest.raises(RowError, match=message):
            check_endpoint_row(bad, names, default_source="x")
    two = check_endpoint_row(
        {"prompt": "hi", "edge_quality": 1, "cloud_quality": 0}, ("edge", "cloud"), default_source="x"
    )
    assert two["outcomes"] == {"edge": 1.0, "cloud": 0.0}
    with pytest.raises(RowError, match="need endpoints named edge and cloud"):
        check_endpoint_row({"prompt": "hi", "edge_quality": 1, "cloud_quality": 0}, names, default_source="x")


def test_simulated_rows_read_back_with_their_hidden_truth(tmp_path):
    sim = load_simulation(None)
    write_simulation(tmp_path / "full", sim, 300, seed=1)
    write_simulation(tmp_path / "one", sim, 300, seed=1, one_outcome=True)
    full, rejects = read_endpoint_logs([tmp_path / "full"], sim.names)
    assert not rejects and len(full) == 300 and full[[f"q_{n}" for n in sim.names]].notna().all().all()
    one, rejects = read_endpoint_logs([tmp_path / "one"], sim.names)
    assert not rejects and (one[[f"q_{n}" for n in sim.names]].notna().sum(axis=1) == 1).all()
    assert (one["propensity"] == 0.25).all() and set(one["routed_to"]) == set(sim.names)
    truth = read_truth(tmp_path / "full")
    assert list(truth["request_id"]) == list(full["request_id"])
    rows, hidden = simulate(sim, 300, seed=1)
    assert np.allclose(hidden[[f"p_{n}" for n in sim.names]], truth[[f"p_{n}" for n in sim.names]])
    # each endpoint's logged success rate follows its hidden probability
    logged = np.array([[r[n] for n in sim.names] for r in rows["outcomes"]])
    assert np.all(np.abs(logged.mean(axis=0) - hidden[[f"p_{n}" for n in sim.names]].mean().to_numpy()) < 0.08)


# The choosers.

P = np.array([[0.60, 0.80, 0.81], [0.90, 0.91, 0.95], [0.2, 0.5, 0.9]])
C = np.array([[0.0, 1.0, 10.0], [0.0, 1.0, 10.0], [0.0, 1.0, 10.0]])


def test_cheapest_within_a_margin_of_the_best():
    assert cheapest_within(P, C, 0.02).tolist() == [1, 2, 2]
    assert cheapest_within(P, C, 0.05).tolist() == [1, 0, 2]
    assert cheapest_within(P, C, 1.0).tolist() == [0, 0, 0]
    feasible = np.array([[True, False, True], [False, False, False], [True, True, True]])
    assert cheapest_within(P, C, 0.02, feasible).tolist() == [2, NONE, 2]


def test_best_under_a_price_on_cost():
    assert best_under_price(P, C, 0.0).tolist() == [2, 2, 2]
    assert best_under_price(P, C, 0.1).tolist() == [1, 0, 1]
    assert best_under_price(P, C, 1e6).tolist() == [0, 0, 0]


def test_a_cascade_climbs_from_the_cheapest_plausible_endpoint_and_its_expectation():
    assert cascade(P, C, 0.25) == [[0, 1, 2], [0, 1, 2], [2]]
    assert cascade(P, C, 0.02) == [[1, 2], [2], [2]]
    quality, cost = cascade_expectation([[0, 1]], [[0.5, 1.0]], [[1.0, 4.0]], catch_rate=0.5)
    # first: good half the time; a bad answer caught half the time goes on (0.25 reach the second)
    assert quality[0] == pytest.approx(0.5 + 0.25) and cost[0] == pytest.approx(1.0 + 0.25 * 4.0)
    quality, _ = cascade_expectation([[0, 1]], [[0.0, 1.0]], [[0.0, 0.0]], catch_rate=1.0)
    assert quality[0] == 1.0


def test_the_curve_area_and_the_oracle_on_a_hand_made_case():
    costs, qualities = envelope([0.0, 1.0, 0.5, 0.6], [0.5, 1.0, 0.6, 0.9])
    assert costs.tolist() == [0.0, 0.6, 1.0] and qualities.tolist() == [0.5, 0.9, 1.0]
    # the straight line between cheapest and best is 0.5; this curve: mean gain over [0, 1]
    assert area([0.0, 1.0], [0.5, 1.0], low_cost=0, high_cost=1, low_quality=0.5, high_quality=1.0) == pytest.approx(
        0.5
    )
    assert first_reach(costs, qualities, 0.7) == pytest.approx(0.3)
    assert np.isnan(first_reach(costs, qualities, 1.1))
    q = np.array([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert oracle(q, np.array([[0.0, 1.0, 2.0]] * 3)) == pytest.approx((2 / 3, 1 / 3))


def test_the_matched_quality_price_needs_two_rows_for_its_standard_error():
    import warnings

    from evaluation.endpoints import PRICE_GRID, price_for_quality

    quality = np.array([[0.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NaN standard deviation (a RuntimeWarning) on one row
        assert price_for_quality(P[:1], C[:1], quality[:1], target=2) == 0.0
        assert price_for_quality(P[:0], C[:0], quality[:0], target=2) == 0.0
        # three rows: up to a price at which rows 0 and 2 go to endpoint 0, which fails them
        assert 0.0 < price_for_quality(P, C, quality, target=2) < PRICE_GRID[-1]


# The claims on a small simulated log (4,000 rows, the four endpoints of data/endpoints/four.yaml,
# 3 prompt-hash folds, separate heads: the mode paired cross-validation chose in docs/endpoints.md). Interval-based: the corrected 95% interval over the folds.


@pytest.fixture(scope="module")
def simulated_run(tmp_path_factory, encoder_cache):
    from training.config import TrainConfig
    from training.endpoints import EndpointRows, cross_validate_endpoints

    folder = tmp_path_factory.mktemp("endpoints")
    sim = load_simulation(None)
    write_simulation(folder, sim, 4000, seed=0)
    frame, rejects = read_endpoint_logs([folder], sim.names)
    assert not rejects
    rows = EndpointRows.from_frame(frame, sim.names)
    hidden = read_truth(folder).set_index("request_id").loc[rows.request_ids, [f"p_{n}" for n in sim.names]]
    return cross_validate_endpoints(
        rows,
        sim.endpoints,
        folds=3,
        config=TrainConfig(cache_dir=str(encoder_cache)),
        output_tokens=sim.output_tokens,
        truth=hidden.to_numpy(float),
        modes=("separate",),
    )


@pytest.mark.slow
def test_the_router_reaches_the_best_single_endpoints_quality_at_lower_cost(simulated_run):
    figures = simulated_run["estimates"]
    assert {f["best_single"] for f in simulated_run["per_fold"]} == {"frontier"}
    # the cheapest endpoint within 0.02 of the best expected quality: not measurably worse than
    # the frontier model alone, at a measurably lower cost
    quality, saved = figures["margin / quality_minus_best_single"], figures["margin / cost_saved_vs_best_single"]
    assert quality["high"] >= 0.0 and quality["mean"] > -0.01, quality
    assert saved["low"] > 0.2, saved
    assert figures["area_vs_best_single"]["low"] > 0.5  # better than mixing cheapest and best at random
    # the budget (half the frontier's cost, its price set on validation rows) holds on held-out rows
    for fold in simulated_run["per_fold"]:
        assert fold["budget"]["cost"] <= 1.1 * fold["budget"]["budget"]


@pytest.mark.slow
def test_the_router_recovers_the_true_best_value_endpoint_better_than_any_fixed_one(simulated_run):
    figures = simulated_run["estimates"]
    gain = figures["recovery / agreement_minus_best_fixed"]
    assert gain["low"] > 0.0, gain
    for fold in simulated_run["per_fold"]:
        recovery = fold["recovery"]
        assert recovery["agreement"] > max(recovery["fixed_agreement"].values())
        # the cascade's expectation from the models is close to what the logged outcomes give
        cascade = fold["cascade"]
        assert abs(cascade["predicted_quality"] - cascade["quality"]) < 0.08


def test_with_two_endpoints_the_area_is_the_two_endpoint_apgr_of_the_curves_envelope():
    from evaluation.endpoints import curve
    from evaluation.metrics import apgr, quality_curve

    rng = np.random.default_rng(3)
    q = (rng.random((400, 2)) < [0.6, 0.8]).astype(float)
    # a score that ranks the cloud's gain well but not perfectly
    score = np.clip(0.5 + 0.3 * (q[:, 1] - q[:, 0]) + rng.normal(0, 0.1, 400), 0.001, 0.999)
    expected, cost = np.stack([np.zeros(400), score], axis=1), np.tile([0.0, 1.0], (400, 1))
    points = curve(expected, cost, q, cost, prices=np.concatenate([[0.0], np.sort(score), [1.0]]))
    corners = envelope(points[:, 1], points[:, 2])  # cost here is the cloud share
    two = quality_curve(score, q[:, 0], q[:, 1])
    n_area = area(*corners, low_cost=0.0, high_cost=1.0, low_quality=q[:, 0].mean(), high_quality=q[:, 1].mean())
    hull_cost, hull_quality = envelope(two.f, two.quality)
    hull_apgr = area(
        hull_cost, hull_quality, low_cost=0, high_cost=1, low_quality=two.quality[0], high_quality=two.quality[-1]
    )
    assert n_area == pytest.approx(hull_apgr, abs=2e-3)
    assert n_area >= apgr(two) - 1e-9  # the envelope is never below the curve


def test_folds_partition_the_prompts_and_one_outcome_rows_weigh_by_their_propensity():
    import pandas as pd

    from training.endpoints import EndpointRows, fold_masks

    prompts = [f"prompt {i}" for i in range(600)]
    tested = np.zeros(600, int)
    for fold in range(5):
        masks = fold_masks(prompts, folds=5, fold=fold, val_share=0.15)
        assert (masks["train"].astype(int) + masks["val"] + masks["test"] == 1).all()
        assert 0.1 < masks["val"].mean() < 0.2 and 0.6 < masks["train"].mean() < 0.7
        tested += masks["test"]
    assert (tested == 1).all()  # every prompt is tested in exactly one fold
    frame = pd.DataFrame(
        {
            "prompt": ["a", "b", "c"],
            "precision": [None, "exact", None],
            "q_small": [1.0, 0.0, np.nan],
            "cost_small": [np.nan] * 3,
            "q_big": [1.0, np.nan, 1.0],
            "cost_big": [np.nan] * 3,
            "propensity": [np.nan, 0.5, 0.25],
        }
    )
    rows = EndpointRows.from_frame(frame, ("small", "big"))
    # big: row a (full information, weight 1) and row c (chosen with probability 0.25, weight 4), mean 1
    assert rows.weight[:, 1].tolist() == pytest.approx([0.4, 0.0, 1.6])
    assert rows.weight[:, 0].tolist() == pytest.approx([2 / 3, 4 / 3, 0.0])
    assert rows.precisions == [None, "exact", None]


def test_make_endpoints_refuses_what_it_cannot_use(tmp_path):
    import typer

    from pipelines.endpoints import main

    spec = tmp_path / "plain.json"
    spec.write_text(json.dumps({"edge": {}, "cloud": {}}))
    with pytest.raises(typer.BadParameter, match="no hidden skills to simulate from: give --data logs"):
        main(spec=spec, out=tmp_path / "out")
    spec.write_text(json.dumps({"endpoints": [endpoint(price={"per_call": -1})]}))
    with pytest.raises(typer.BadParameter, match=r"endpoints\[0\] \('a'\).price.per_call must be >= 0"):
        main(spec=spec, out=tmp_path / "out")
    write_simulation(tmp_path / "one", load_simulation(None), 200, seed=2, one_outcome=True)
    with pytest.raises(typer.BadParameter, match="no row holds every endpoint's outcome"):
        main(data=[str(tmp_path / "one")], out=tmp_path / "out")


def test_rows_carry_their_answers_and_simulated_answers_leave_the_rest_as_it_was(tmp_path):
    from training.endpoints import EndpointRows

    names = ("small", "big")
    row = {"prompt": "hi", "outcomes": {"small": 1, "big": 0}, "responses": {"small": "ok", "big": None}}
    assert check_endpoint_row(row, names, default_source="x")["responses"] == {"small": "ok"}
    one = {"prompt": "hi", "outcomes": {"big": 1}, "routed_to": "big", "propensity": 0.5}
    graded = check_endpoint_row({**one, "responses": {"big": "b", "small": "s"}}, names, default_source="x")
    assert graded["responses"] == {"big": "b"}  # an answer without its outcome teaches nothing: left out
    for bad, message in [
        ({**row, "responses": {"huge": "x"}}, "responses names endpoint 'huge', which is not in the spec"),
        ({**row, "responses": {"small": 3}}, "responses.small must be text, got int"),
        ({**row, "responses": ["ok"]}, "responses must be an object"),
    ]:
        with pytest.raises(RowError, match=message):
            check_endpoint_row(bad, names, default_source="x")
    two = check_endpoint_row(
        {"prompt": "hi", "edge_quality": 1, "cloud_quality": 0, "edge_response": "4"},
        ("edge", "cloud"),
        default_source="x",
    )
    assert two["responses"] == {"edge": "4"}

    sim = load_simulation(None)
    plain, _ = simulate(sim, 200, seed=4)
    answered, _ = simulate(sim, 200, seed=4, answers=True)
    assert plain.equals(answered.drop(columns="responses"))
    assert all(set(r) == set(o) for r, o in zip(answered["responses"], answered["outcomes"]))
    write_simulation(tmp_path / "sim", sim, 200, seed=4, answers=True)
    frame, rejects = read_endpoint_logs([tmp_path / "sim"], sim.names)
    rows = EndpointRows.from_frame(frame, sim.names)
    assert (
        rejects == [] and rows.responses.shape == (200, 4) and all(isinstance(t, str) for t in rows.responses.ravel())
    )
