"""`make train` end to end on real RouteLLM rows: bundle, MLflow, parity, cache, quality."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from serving.bundle._bundle import read_manifest
from serving.scoring._scorer import Scorer
from tests.conftest import QUICK_ACCEPTANCE_ROUNDS, config_for, seed_store
from training.config import TrainConfig
from training.engines.base import train as run

pytestmark = [pytest.mark.real_data, pytest.mark.slow]


@pytest.fixture(scope="module")
def trained(trained_small):
    return trained_small


def test_bundle_has_everything_serving_needs(trained):
    cfg, result = trained
    manifest = read_manifest(result.bundle)  # checks every file's SHA-256
    # Static tier: one fused graph from token ids and scalar features to the probabilities and
    # the novelty (no familiarity file: the reference is in the graph).
    assert set(manifest.files) == {"model.onnx", "tokenizer.json", "acceptance.onnx", "drift_reference.json"}
    assert manifest.novelty["in_model"] and manifest.novelty["output"] == "novelty" and "file" not in manifest.novelty
    assert manifest.feature_spec.fused is True
    assert not any(p.suffix in (".pkl", ".pickle", ".joblib") for p in result.bundle.iterdir())
    assert manifest.feature_spec.tier == "static"
    assert manifest.limits.edge_context_tokens == 1024
    assert manifest.mlflow["run_id"] == result.run_id
    assert {"default", "exact", "standard", "tolerant"} <= set(manifest.thresholds)
    for t in manifest.thresholds.values():
        assert -1.0 <= t["lo"] <= t["hi"] <= 1.0 and t["met_target"]  # expected gain: [-1, 1]
    test = manifest.metrics["test"]
    assert {"auc", "apgr", "cpt50", "cpt80", "misroute_rate", "cloud_share"} <= set(test["learned"])
    assert set(test["rule_table"]) == set(test["learned"])
    assert manifest.data["rows_per_source"].keys() == {"gsm8k", "mmlu", "mt_bench"}


def test_sdk_scores_match_the_training_pipeline(trained):
    _, result = trained
    held = result.held_out
    assert len(held) > 100
    scorer = Scorer.load(result.bundle)
    batch = scorer.scores(held["prompt"].tolist(), held["precision"].tolist())
    assert np.max(np.abs(batch - held["score"].to_numpy())) <= 1e-5
    one_by_one = np.array([scorer.scores([p], [q])[0] for p, q in zip(held["prompt"][:50], held["precision"][:50])])
    assert np.max(np.abs(one_by_one - held["score"].to_numpy()[:50])) <= 1e-5


def test_fused_graph_alone_gives_the_calibrated_score(trained):
    """model.onnx is one call from token ids and scalars to both calibrated heads (Platt folded
    into the trees), for runtimes that load it without this SDK: a bare onnxruntime session
    gives the training pipeline's scores, P(cloud good) - P(edge good)."""
    import onnxruntime as ort

    _, result = trained
    manifest = json.loads((result.bundle / "manifest.json").read_text())
    assert manifest["score"] == {
        "kind": "expected_gain",
        "heads": ["edge", "cloud"],
        "outputs": ["edge_probabilities", "cloud_probabilities"],
    }
    assert all(c["method"] == "sigmoid" and c["in_model"] is True for c in manifest["calibration"].values())
    session = ort.InferenceSession(str(result.bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    assert {o.name for o in session.get_outputs()} == {
        "edge_probabilities",
        "cloud_probabilities",
        "features",
        "novelty",
    }
    held = result.held_out[:64]
    ids, mask, scalars, _, _ = Scorer.load(result.bundle).extractor.prepare(
        held["prompt"].tolist(), held["precision"].tolist()
    )
    edge, cloud = session.run(
        ["edge_probabilities", "cloud_probabilities"], {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
    )
    assert np.max(np.abs(cloud[:, 1] - edge[:, 1] - held["score"].to_numpy())) <= 1e-5


def test_run_is_tracked_and_registered(trained):
    import mlflow
    from mlflow.tracking import MlflowClient

    cfg, result = trained
    mlflow.set_tracking_uri(cfg.mlflow.tracking_uri)
    client = MlflowClient()
    version = client.get_model_version(cfg.mlflow.registered_model, result.model_version)
    assert version.run_id == result.run_id
    run_data = client.get_run(result.run_id).data
    assert run_data.params["features.tier"] == "static"  # by dotted key
    assert "test.learned.apgr" in run_data.metrics and "parity_max_abs_diff" in run_data.metrics
    artifacts = {a.path for a in client.list_artifacts(result.run_id)}
    assert {"bundle", "data_fingerprint.json", "train_config.json"} <= artifacts
    saved = mlflow.artifacts.download_artifacts(
        run_id=result.run_id, artifact_path="train_config.json", dst_path=str(result.bundle.parent / "logged")
    )
    assert TrainConfig.from_file(saved) == cfg  # the logged config reproduces the run


def test_second_run_recomputes_static_embeddings_to_the_same_router(trained, trained_small_again):
    """The static tier keeps no embedding cache (recomputing is cheaper than reading 1.5 KB back;
    the transformer tier's cache: test_scale and the transformer test below): a second run gives
    the same figures."""
    cfg, first = trained
    second = trained_small_again
    assert second.metrics["embedding_cache"] == {"used": False, "hits": 0, "computed": 0}
    assert second.metrics["test"]["learned"]["apgr"] == first.metrics["test"]["learned"]["apgr"]


def test_full_logs_beat_the_rule_table(trained_full):
    """The headline claim: text-only features reach test APGR >= 0.62 on the shipped logs."""
    result = trained_full
    test = result.metrics["test"]
    assert test["learned"]["apgr"] >= 0.62, test["learned"]
    assert test["rule_table"]["apgr"] < test["learned"]["apgr"] - 0.05
    assert test["learned"]["quality_with_fallback"] >= test["all_cloud_quality"] - 0.02
    assert result.metrics["parity_max_abs_diff"] <= 1e-5


def test_cli_runs_and_rejects_bad_options(small_routellm, encoder_cache, tmp_path):
    env = {**os.environ, "COLUMNS": "160"}
    base = [
        sys.executable,
        "-m",
        "pipelines.train",
        "--data",
        str(small_routellm / "mt_bench"),
        "--data",
        str(small_routellm / "gsm8k"),
        "--bundle",
        str(tmp_path / "b"),
        "--set",
        f"mlflow.tracking_uri=sqlite:///{tmp_path}/mlflow.db",
        "--set",
        f"mlflow.artifact_root={tmp_path}/art",
        "--set",
        f"cache_dir={encoder_cache}",
        "--set",
        f"reports_dir={tmp_path}/reports",
        "--set",
        "routing.min_rows_per_tag=20",
        "--set",
        "boosting.lgbm.num_leaves=7",
        "--set",
        "split.cv_folds=0",
        "--set",
        f"acceptance.rounds={QUICK_ACCEPTANCE_ROUNDS}",
    ]
    seed_store(f"sqlite:///{tmp_path}/mlflow.db", encoder_cache)  # making a store: test_commands' `make train MLRUNS=`
    done = subprocess.run(base, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "APGR" in done.stdout and "hand rule table" in done.stdout
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["schema_version"] == 1
    bad = subprocess.run(base + ["--set", "model.calibration=magic"], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "model.calibration='magic'" in bad.stderr
    bad = subprocess.run(base + ["--engine", "spark"], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "engine.name='spark'" in bad.stderr and "local, dask" in bad.stderr


def test_transformer_tier_bundle_scores_like_training(small_routellm, encoder_cache, tmp_path):
    """The staged layout: int8 MiniLM encoder (one prompt per call), projection, trees."""
    from serving import Router

    result = run(
        config_for(
            tmp_path,
            small_routellm / "mt_bench",
            encoder_cache,
            features={"tier": "transformer"},
            routing={"min_rows_per_tag": 10},
            split={"val_share": 0.25, "test_share": 0.25},
        )
    )
    manifest = read_manifest(result.bundle)
    assert set(manifest.files) == {
        "encoder.onnx",
        "router.onnx",
        "projection.npz",
        "tokenizer.json",
        "novelty.npz",
        "drift_reference.json",
    }
    assert manifest.feature_spec.encoder_row_wise is True and manifest.feature_spec.fused is False
    held = result.held_out
    router = Router.load(result.bundle, strict=True)
    batch = router.route_batch(held["prompt"].tolist(), held["precision"].tolist())
    assert np.max(np.abs(np.array([d.score for d in batch]) - held["score"].to_numpy())) <= 1e-5
    single = [router.route(p, precision=q) for p, q in zip(held["prompt"], held["precision"])]
    assert [d.zone for d in single] == [d.zone for d in batch]
    assert max(abs(a.score - b.score) for a, b in zip(single, batch)) <= 1e-12
