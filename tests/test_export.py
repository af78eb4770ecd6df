"""The tree model's ONNX export: Platt calibration folded into the leaves, no no-op nodes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from serving.scoring._calibration import apply_calibration
from training.export import booster_to_onnx, calibration_in_model
from training.model import fit_calibration


@pytest.fixture(scope="module")
def booster_and_rows():
    import lightgbm as lgb

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 6)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] ** 2 + rng.normal(scale=0.8, size=len(x)) > 0.5).astype(int)
    booster = lgb.train(
        {"objective": "binary", "num_leaves": 15, "verbose": -1, "learning_rate": 0.2},
        lgb.Dataset(x, y),
        num_boost_round=40,
    )
    return booster, x, y


def onnx_probability(model: bytes, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(["probabilities"], {"features": x})[0][:, 1]


def test_platt_calibration_is_folded_into_the_trees(booster_and_rows):
    booster, x, y = booster_and_rows
    calibration = fit_calibration(booster.predict(x[:1000]), y[:1000], method="sigmoid")
    assert abs(calibration["a"] - 1) > 0.01 or abs(calibration["b"]) > 0.01  # a real correction to fold
    model = booster_to_onnx(booster, x.shape[1], calibration)
    assert calibration_in_model(calibration)
    expected = apply_calibration(calibration, booster.predict(x))
    assert np.max(np.abs(onnx_probability(model, x) - expected)) <= 1e-5
    # ...and differs from the uncalibrated probability, so the fold did something.
    assert np.max(np.abs(onnx_probability(model, x) - booster.predict(x))) > 1e-3


def test_other_calibrations_stay_with_the_sdk(booster_and_rows):
    booster, x, y = booster_and_rows
    calibration = fit_calibration(booster.predict(x[:1000]), y[:1000], method="isotonic")
    model = booster_to_onnx(booster, x.shape[1], calibration)
    assert not calibration_in_model(calibration)
    assert np.max(np.abs(onnx_probability(model, x) - booster.predict(x))) <= 1e-5


def test_export_has_no_no_op_nodes(booster_and_rows):
    booster, x, y = booster_and_rows
    graph = onnx.load_from_string(booster_to_onnx(booster, x.shape[1], {"method": "none"})).graph
    assert [n.op_type for n in graph.node] == ["TreeEnsembleClassifier"]
    assert not graph.initializer  # the multiply-by-one constant went with its node


def test_unknown_calibration_is_refused(booster_and_rows):
    booster, x, _ = booster_and_rows
    with pytest.raises(ValueError, match="unknown calibration"):
        booster_to_onnx(booster, x.shape[1], {"method": "beta"})


def test_outcome_heads_export_to_one_graph_with_graded_labels():
    """Cross-entropy heads (qualities in [0, 1], judge scores included) export through the
    binary converter to one graph, one output per head, each the calibrated probability."""
    import lightgbm as lgb

    from training.export import heads_to_onnx
    from training.model import Head, routing_score

    rng = np.random.default_rng(1)
    x = rng.normal(size=(3000, 5)).astype(np.float32)
    heads = []
    for name, column in (("edge", 0), ("cloud", 1)):
        q = np.clip(0.5 + 0.3 * x[:, column] + rng.normal(scale=0.2, size=len(x)), 0, 1)  # graded outcomes
        booster = lgb.train({"objective": "cross_entropy", "num_leaves": 7, "verbose": -1}, lgb.Dataset(x, q), 30)
        heads.append(Head(name, booster, fit_calibration(booster.predict(x[:1000]), q[:1000], method="sigmoid")))
    model, outputs = heads_to_onnx(heads, x.shape[1])
    assert outputs == ["edge_probabilities", "cloud_probabilities"]
    edge, cloud = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(outputs, {"features": x})
    expected = {h.name: h.predict(x) for h in heads}
    assert np.max(np.abs(edge[:, 1] - expected["edge"])) <= 1e-5
    assert np.max(np.abs(cloud[:, 1] - expected["cloud"])) <= 1e-5
    assert np.allclose(routing_score("expected_gain", expected), expected["cloud"] - expected["edge"])


def test_the_early_stopped_booster_is_cut_to_the_trees_a_retrain_would_grow():
    """fit_booster keeps the best round's trees of its one early-stopped run: the same trees,
    and so the same scores, as training again for exactly that many rounds."""
    import lightgbm as lgb

    from training.model import fit_booster, lgbm_params

    rng = np.random.default_rng(1)
    x = rng.normal(size=(6000, 8)).astype(np.float32)
    y = (x[:, 0] - x[:, 2] + rng.normal(size=len(x)) > 0).astype(float)
    x_val, y_val = x[5000:], y[5000:]
    cut = fit_booster(x[:5000], y[:5000], x_val, y_val, params={}, num_boost_round=600, early_stopping_rounds=20)
    assert 20 < cut.current_iteration() < 600  # it did stop early
    again = lgb.train(
        lgbm_params({}, seed=0), lgb.Dataset(x[:5000], label=y[:5000]), num_boost_round=cut.current_iteration()
    )
    assert np.array_equal(cut.predict(x_val), again.predict(x_val))
    none = {"method": "none"}
    assert np.array_equal(
        onnx_probability(booster_to_onnx(cut, 8, none), x_val), onnx_probability(booster_to_onnx(again, 8, none), x_val)
    )


def test_a_split_between_neighbouring_float32_values_routes_the_same_in_the_bundle():
    """LightGBM splits midway between two neighbouring float32 values it saw, and that double
    rounds (to even) onto the upper one in the converter's float32 thresholds: the upper value
    then took the other branch in the bundle (here 0.32 against 0.69). The export rounds every
    threshold down to a float32 first, which changes no LightGBM prediction."""
    import lightgbm as lgb
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    from training.export import _for_onnx

    rng = np.random.default_rng(0)
    a = np.float32(0.3)
    neighbours = np.array(
        [
            np.nextafter(a, np.float32(0)),
            a,
            np.nextafter(a, np.float32(1)),
            np.nextafter(np.nextafter(a, np.float32(1)), np.float32(1)),
        ],
        dtype=np.float32,
    )
    column = rng.choice(neighbours, size=4000)
    x = np.stack([column, rng.random(4000, dtype=np.float32)], axis=1)
    y = (column > a).astype(int) ^ (rng.random(4000) < 0.05)
    booster = lgb.train(
        {"objective": "binary", "verbose": -1, "min_data_in_leaf": 5, "num_leaves": 4},
        lgb.Dataset(x, y),
        num_boost_round=5,
    )
    rows = np.stack([neighbours, np.full(4, 0.5, dtype=np.float32)], axis=1)
    converted = onnxmltools.convert_lightgbm(
        booster, initial_types=[("features", FloatTensorType([None, 2]))], zipmap=False, target_opset=15
    )
    raw_onnx = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"features": rows}
    )[1][:, 1]
    assert np.abs(raw_onnx - booster.predict(rows)).max() > 0.1  # the rounding this guards against
    final = _for_onnx(booster)
    assert np.array_equal(final.predict(rows), booster.predict(rows))
    assert np.array_equal(final.predict(x), booster.predict(x))
    none = {"method": "none"}
    assert np.abs(onnx_probability(booster_to_onnx(booster, 2, none), rows) - booster.predict(rows)).max() < 1e-6


def test_shared_heads_export_with_their_side_appended_in_the_graph():
    """One shared booster (training.model.SIDE_FEATURE) is two heads: each head's graph pads
    `features` with its side, so the SDK feeds both the same input and gets each head's
    calibrated probability."""
    from training.config import TrainConfig
    from training.export import heads_to_onnx
    from training.model import fit_booster, fit_heads, stack_sides

    rng = np.random.default_rng(2)
    x = rng.normal(size=(4000, 5)).astype(np.float32)
    hard = x[:, 0] + rng.normal(scale=0.5, size=len(x))
    outcome = {"edge_quality": (hard < 0).astype(float), "cloud_quality": (hard < 1.0).astype(float)}
    train, val = slice(0, 3000), slice(3000, None)

    def fit_booster_for(columns, objective):
        assert columns == ("edge_quality", "cloud_quality")
        xt, yt, _ = stack_sides([(x[train], outcome[c][train], None) for c in columns])
        xv, yv, _ = stack_sides([(x[val], outcome[c][val], None) for c in columns])
        return fit_booster(xt, yt, xv, yv, params={"num_leaves": 7}, objective=objective, early_stopping_rounds=10)

    heads = fit_heads(
        "expected_gain",
        fit_booster_for,
        x[val],
        {c: v[val] for c, v in outcome.items()},
        TrainConfig(lexical={"mode": "none"}),
        shared=True,
    )
    assert [(h.name, h.side) for h in heads] == [("edge", 0), ("cloud", 1)] and heads[0].booster is heads[1].booster
    expected = {h.name: h.predict(x) for h in heads}
    assert expected["cloud"].mean() > expected["edge"].mean() + 0.2  # the side changes the prediction
    model, outputs = heads_to_onnx(heads, x.shape[1])
    edge, cloud = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(outputs, {"features": x})
    assert np.max(np.abs(edge[:, 1] - expected["edge"])) <= 1e-5
    assert np.max(np.abs(cloud[:, 1] - expected["cloud"])) <= 1e-5


def test_large_logs_learn_faster_and_small_ones_as_before():
    """learning_rate_for: 0.03 up to 100,000 rows, 0.1 from 500,000, log-linear between; a
    learning rate the user sets wins."""
    from training.model import fit_booster, learning_rate_for, lgbm_params

    assert learning_rate_for(12_000) == learning_rate_for(100_000) == 0.03
    assert learning_rate_for(500_000) == pytest.approx(0.1) and learning_rate_for(10_000_000) == pytest.approx(0.1)
    middle = learning_rate_for(int(np.sqrt(100_000 * 500_000)))
    assert middle == pytest.approx(np.sqrt(0.03 * 0.1), rel=1e-5)
    assert lgbm_params({}, seed=0, rows=1_000_000)["learning_rate"] == pytest.approx(0.1)
    assert lgbm_params({"learning_rate": 0.05}, seed=0, rows=1_000_000)["learning_rate"] == 0.05
    assert lgbm_params({}, seed=0)["learning_rate"] == 0.03
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1200, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(float)
    booster = fit_booster(x[:1000], y[:1000], x[1000:], y[1000:], params={}, num_boost_round=5)
    assert float(booster.params["learning_rate"]) == 0.03  # what the bundle's metrics report
