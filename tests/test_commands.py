"""README commands that are not covered elsewhere: `make ui` serves the tracking store, `make train
MLRUNS=` and MLFLOW_TRACKING_URI choose the store training writes to."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request

import pytest

from tests.conftest import ROOT, make_env, seed_store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_make_ui_serves_the_registry(encoder_cache, tmp_path):
    """MLFLOW_WORKERS=1 (the `mlflow ui` option's variable): one server process to start, where
    the default four took 35 s of imports on 2 cores; how many serve is not what is tested. The
    store MLRUNS names is made already (conftest.seed_store): `make train MLRUNS=` below makes one."""
    seed_store(f"sqlite:///{tmp_path}/mlflow.db", encoder_cache)
    port = free_port()
    proc = subprocess.Popen(
        ["make", "-s", "ui", f"PORT={port}", f"MLRUNS={tmp_path}"],
        cwd=ROOT,
        env={**make_env(), "MLFLOW_WORKERS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline, body = time.monotonic() + 120, None
        while time.monotonic() < deadline and body is None:
            if proc.poll() is not None:
                pytest.fail(f"make ui exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=5"
                with urllib.request.urlopen(url, timeout=2) as response:
                    body = json.loads(response.read())
            except OSError:
                time.sleep(0.25)
        assert body is not None, "the MLflow UI did not answer within 120 s"
        assert "experiments" in body
    finally:
        import os
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.real_data
def test_bench_measures_every_figure(bundle, tmp_path):
    """`make bench` on a tiny repeat count: every figure is there and plausible (not a timing test)."""
    import json

    from pipelines.bench import main

    out = tmp_path / "results.json"
    main(bundle=bundle, out=out, repeat=20, batch=128, load_runs=1)
    results = json.loads(out.read_text())
    assert set(results["route"]) == {"16_tokens", "128_tokens", "512_tokens", "1MB_prompt"}
    for name in ("16_tokens", "128_tokens", "512_tokens"):
        figure = results["route"][name]
        wanted = int(name.split("_")[0])
        if wanted <= 128:
            assert abs(figure["tokens"] - wanted) <= 2
        else:  # the SDK tokenizes only the first max_chars characters
            assert 300 <= figure["tokens"] <= wanted
        assert set(figure["floor"]) == {"tokenize", "text_statistics", "model", "onnxruntime_noop"}
        assert 0 < figure["route"]["p50_us"] <= figure["route"]["p99_us"]
    assert [b["threads"] for b in results["route_batch"]] == [1, 2]
    assert all(b["prompts_per_s"] > 0 for b in results["route_batch"])
    assert 0 < results["load"]["import_plus_load_s"] and results["load"]["rss_mb_after_load"] > 10


@pytest.mark.real_data
def test_bench_takes_route_apart(bundle, tmp_path):
    """`bench --gap-only` on a tiny repeat count: every part is measured (not a timing test), and
    the router's model call is back in place afterwards."""
    import json

    import onnx

    from pipelines.bench import gap_figures, main, prompt_of, varied_prompts
    from serving import Router

    main(bundle=bundle, out=tmp_path / "results.json", repeat=20, gap_only=True)
    gap = json.loads((tmp_path / "gap.json").read_text())
    assert set(gap) == {"16_tokens", "128_tokens", "dispatch"}
    dispatch = gap.pop("dispatch")
    assert set(dispatch["chain_p50_us"]) == {"1_nodes", "50_nodes", "100_nodes", "200_nodes"}
    assert dispatch["per_node_us"] > 0 and all(v > 0 for v in dispatch["chain_p50_us"].values())
    assert set(dispatch["chain_after_route_python_p50_us"]) == set(dispatch["chain_p50_us"])
    nodes = len(onnx.load(str(bundle / "model.onnx")).graph.node)
    assert dispatch["model_nodes"] == nodes and 0 < dispatch["model_nodes_optimized"] <= nodes
    for figures in gap.values():
        assert {
            "route",
            "route_python",
            "glue",
            "model",
            "model_after_route_python",
            "route_python_after_model",
            "tokenize_and_statistics_after_model",
            "route_varied_prompts",
        } <= set(figures)
        assert all(v["p50_us"] > 0 for name, v in figures.items() if name != "glue")
    router = Router.load(bundle, strict=True)
    tokenizer = router.stages.scorer.extractor.tokenizer.full
    prompts = varied_prompts(tokenizer, 16, count=8)
    assert len(set(prompts)) == 8 and all(
        abs(len(tokenizer.encode(p, add_special_tokens=False).ids) - 16) <= 2 for p in prompts
    )
    model, before = router.stages.scorer.run_model, router.route(prompts[0]).score
    gap_figures(router, prompt_of(tokenizer, 16), prompts, repeat=10)
    assert router.stages.scorer.run_model is model and router.route(prompts[0]).score == before


@pytest.mark.slow
def test_make_train_writes_to_the_mlflow_store_mlruns_names(small_routellm, encoder_cache, tmp_path):
    """On MT-Bench's rows alone (too few edge answers for an acceptance check): what is tested
    is where the run writes, which any training does alike."""
    store = tmp_path / "store"
    args = (
        f"--data {small_routellm / 'mt_bench'} --set cache_dir={encoder_cache} "
        f"--set reports_dir={tmp_path / 'reports'} --set routing.min_rows_per_tag=20 --set split.cv_folds=0"
    )
    done = subprocess.run(
        ["make", "-s", "train", f"MLRUNS={store}", f"BUNDLE={tmp_path / 'bundle'}", f"ARGS={args}"],
        cwd=ROOT,
        env=make_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["mlflow"]["tracking_uri"] == f"sqlite:///{store}/mlflow.db"
    assert (store / "mlflow.db").is_file() and (store / "artifacts").is_dir()


def test_training_honours_mlflow_tracking_uri(monkeypatch, tmp_path):
    from training.config import TrainConfig

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/elsewhere/mlflow.db")
    config = TrainConfig()
    assert config.mlflow.tracking_uri == f"sqlite:///{tmp_path}/elsewhere/mlflow.db"
    assert config.mlflow.artifact_root == f"{tmp_path}/elsewhere/artifacts"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert TrainConfig().mlflow.tracking_uri == "sqlite:///mlruns/mlflow.db"
