"""The embedded SDK: Router.load / route / route_batch, failure behaviour, threads, light imports."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving import BundleError, Decision, Router
from serving._contract import ZONES

pytestmark = pytest.mark.real_data
HEAVY = ("torch", "sentence_transformers", "sklearn", "lightgbm", "mlflow", "datasets", "pandas")


@pytest.fixture(scope="module")
def router(bundle) -> Router:
    return Router.load(bundle, strict=True)


def assert_valid(d: Decision):
    assert d.zone in ZONES and d.target == ("cloud" if d.zone == "cloud" else "edge")
    assert -1.0 <= d.score <= 1.0 and isinstance(d.reason, str) and d.reason
    assert 0.0 <= d.p_edge <= 1.0 and 0.0 <= d.p_cloud <= 1.0 and d.score == pytest.approx(d.p_cloud - d.p_edge)
    assert d.model_version


def test_decision_fields(router):
    d = router.route("What is 17 * 23?", precision="exact")
    assert_valid(d)
    assert not d.degraded and router.degraded_reason is None
    assert d.model_version == router.manifest.model_version and d.precision == "exact"
    assert json.loads(json.dumps(d.to_dict()))["zone"] == d.zone


def test_scores_match_the_training_pipeline(router, trained_small):
    held = trained_small[1].held_out
    decisions = router.route_batch(held["prompt"].tolist(), held["precision"].tolist())
    assert np.max(np.abs(np.array([d.score for d in decisions]) - held["score"].to_numpy())) <= 1e-5


def test_batch_equals_one_by_one_in_one_onnxruntime_call(router, trained_small, monkeypatch):
    prompts = trained_small[1].held_out["prompt"].tolist()[:40]
    single = [router.route(p) for p in prompts]
    calls = []
    real = router._routing._scorer.run_model
    monkeypatch.setattr(router._routing._scorer, "run_model", lambda *a, **k: calls.append(1) or real(*a, **k))
    batch = router.route_batch(prompts)
    # Calibration runs per prompt on Python floats, after the graph: the very same decisions.
    assert [b.to_dict() for b in batch] == [one.to_dict() for one in single]
    assert len(calls) == 1  # the fused static graph: one onnxruntime call for the whole batch
    assert router.route_batch([]) == []


def test_context_limit_sends_long_prompts_to_the_cloud(router):
    d = router.route("Summarise this report. " + "The quarterly figures were stable. " * 400)
    assert d.zone == "cloud" and "edge context limit" in d.reason and d.n_tokens > 1024


@pytest.mark.parametrize(
    "prompt",
    [
        "",
        "   \n\t ",
        "x" * 1_000_000,
        "a\ud800b\udfff",
        "\x00\x01\x1b[31m\x7f",
        "日本語の質問ですか？",
        "مرحبا بالعالم",
        "🙂" * 5000,
        "\u202e\u200b" * 100,
    ],
)
def test_any_string_gets_a_valid_decision(router, prompt):
    d = router.route(prompt)
    assert_valid(d)
    assert not d.degraded
    assert d.truncated == (len(prompt) > router._routing._scorer.spec.max_chars)
    if d.truncated:
        assert f"first {router._routing._scorer.spec.max_chars} characters" in d.reason


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompt=st.text(alphabet=st.characters(codec=None), max_size=3000),
    precision=st.sampled_from([None, "exact", "standard", "tolerant"]),
)
def test_hypothesis_prompts(router, prompt, precision):
    d = router.route(prompt, precision=precision)
    assert_valid(d)
    assert not d.degraded


def test_bad_arguments_are_clear_errors(router):
    with pytest.raises(
        TypeError, match="prompt must be str, a serving.Request, or a request whose .prompt is str .*got bytes"
    ):
        router.route(b"hello")
    with pytest.raises(TypeError, match=r"prompts\[1\] must be str, .*got NoneType"):
        router.route_batch(["ok", None])
    with pytest.raises(ValueError, match="precision='approx' is not allowed; use one of exact, standard, tolerant"):
        router.route("hi", precision="approx")
    with pytest.raises(ValueError, match="2 items for 1 prompts"):
        router.route_batch(["a"], ["exact", "exact"])


def broken_bundles(src, tmp_path):
    missing = tmp_path / "missing"
    truncated = tmp_path / "truncated"
    shutil.copytree(src, truncated)
    data = (truncated / "model.onnx").read_bytes()
    (truncated / "model.onnx").write_bytes(data[: len(data) // 2])
    tampered = tmp_path / "tampered"
    shutil.copytree(src, tampered)
    data = bytearray((tampered / "tokenizer.json").read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    (tampered / "tokenizer.json").write_bytes(bytes(data))
    edited = tmp_path / "edited"
    shutil.copytree(src, edited)
    manifest = json.loads((edited / "manifest.json").read_text())
    manifest["thresholds"]["default"]["hi"] = 0.0
    (edited / "manifest.json").write_text(json.dumps(manifest))
    unknown = tmp_path / "unknown"
    shutil.copytree(src, unknown)
    manifest = json.loads((unknown / "manifest.json").read_text())
    (unknown / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 2}))
    return {
        "missing": (missing, "no bundle folder"),
        "truncated": (truncated, "model.onnx does not match"),
        "tampered": (tampered, "tokenizer.json does not match"),
        "edited": (edited, "manifest_sha256"),
        "unknown": (unknown, "schema_version: is not supported (this SDK reads 1), got 2"),
    }


def test_broken_bundles_degrade_to_the_rule_table(bundle, tmp_path, caplog):
    for name, (path, why) in broken_bundles(bundle, tmp_path).items():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="serving"):
            router = Router.load(path)
        assert router.degraded and why in router.degraded_reason, name
        assert [r.levelno for r in caplog.records] == [logging.WARNING], name
        d = router.route("The patient is bleeding. What dose of drug X?", precision="exact")
        assert d.degraded and d.model_version == "rule-table" and d.zone == "edge_with_cloud_fallback"
        assert "degraded" in d.reason
        with pytest.raises(BundleError, match=re.escape(why)):
            Router.load(path, strict=True)


def test_scoring_failure_gives_a_degraded_decision(bundle, monkeypatch):
    router = Router.load(bundle)

    def boom(*args, **kwargs):
        raise RuntimeError("onnxruntime exploded")

    monkeypatch.setattr(router._routing._scorer, "run_model", boom)
    d = router.route("What is the capital of France?")
    assert d.degraded and "onnxruntime exploded" in d.reason and d.zone in ZONES


def test_eight_threads_give_the_sequential_decisions(router, trained_small):
    prompts = trained_small[1].held_out["prompt"].tolist()[:200]
    expected = [router.route(p) for p in prompts]
    results: dict[int, list] = {}

    def worker(k):
        results[k] = [router.route(p) for p in prompts[k::8]]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(8):
        assert results[k] == expected[k::8]


def test_serving_imports_nothing_heavy(bundle):
    code = (
        "import sys\n"
        f"blocked = {HEAVY!r}\n"
        "sys.modules.update({m: None for m in blocked})\n"
        "from serving import Router\n"
        f"r = Router.load({str(bundle)!r}, strict=True)\n"
        "d = r.route('What is 2 + 2?', precision='exact')\n"
        "r.route_batch(['a', 'b'])\n"
        "assert not d.degraded, d\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_cli_single_prompt_and_stream(bundle):
    one = subprocess.run(
        [sys.executable, "-m", "serving", "route", "What is 17*23?", "--bundle", str(bundle), "--precision", "exact"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert one.returncode == 0, one.stderr
    decision = json.loads(one.stdout)
    assert decision["precision"] == "exact" and decision["zone"] in ZONES
    lines = '{"prompt": "hi", "id": 7}\nnot json\n{"prompt": "x", "precision": "fuzzy"}\n{"prompt": 3}\n'
    stream = subprocess.run(
        [sys.executable, "-m", "serving", "route", "--bundle", str(bundle), "--jsonl", "-"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = [json.loads(line) for line in stream.stdout.splitlines()]
    assert stream.returncode == 1  # some lines failed
    assert out[0]["id"] == 7 and out[0]["zone"] in ZONES
    assert out[1] == {"line": 2, "error": "unparsable JSON: Expecting value at column 1"}
    assert out[2]["line"] == 3 and "not allowed" in out[2]["error"]
    assert out[3]["line"] == 4 and "must be str" in out[3]["error"]
    degraded = subprocess.run(
        [sys.executable, "-m", "serving", "route", "hi", "--bundle", "/nonexistent"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert degraded.returncode == 0 and json.loads(degraded.stdout)["degraded"] is True
    strict = subprocess.run(
        [sys.executable, "-m", "serving", "route", "hi", "--bundle", "/nonexistent", "--strict"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert strict.returncode != 0 and "no bundle folder" in strict.stderr


def test_a_bundle_whose_manifest_lacks_the_optional_sections_still_loads(bundle, tmp_path):
    """Hand-made bundles: schema_version, model_version, feature_spec, score, calibration,
    thresholds, files (and novelty, when there is a familiarity reference) are all that
    routing reads; the rest describes the run."""
    from serving.bundle._bundle import manifest_digest

    folder = tmp_path / "minimal"
    shutil.copytree(bundle, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    required = (
        "schema_version",
        "model_version",
        "feature_spec",
        "score",
        "calibration",
        "thresholds",
        "novelty",
        "files",
    )
    minimal = {k: manifest[k] for k in required}
    minimal["manifest_sha256"] = manifest_digest(minimal)
    (folder / "manifest.json").write_text(json.dumps(minimal))
    router, original = Router.load(folder, strict=True), Router.load(bundle, strict=True)
    prompts = ["What is 2+2?", "Draft a lease termination letter under California law. " * 20]
    assert [d.to_dict() for d in router.route_batch(prompts)] == [d.to_dict() for d in original.route_batch(prompts)]
    assert router.edge_context_tokens == 1024


def test_bundles_from_before_expected_gain_load_and_route_as_before(small_routellm, encoder_cache, tmp_path):
    """A `cloud_needed` bundle in the manifest format of before (no `score` or `novelty`
    section, one flat calibration, output `probabilities`) routes on P(cloud needed), as it
    always did."""
    from serving.bundle._bundle import manifest_digest
    from tests.conftest import config_for
    from training.engines.base import train

    result = train(
        config_for(
            tmp_path / "run",
            small_routellm / "mt_bench",
            encoder_cache,
            model={"objective": "cloud_needed"},
            routing={"min_rows_per_tag": 20},
        )
    )
    old = tmp_path / "old"
    shutil.copytree(result.bundle, old)
    manifest = json.loads((old / "manifest.json").read_text())
    assert manifest["score"]["outputs"] == ["probabilities"]
    del manifest["score"], manifest["novelty"], manifest["manifest_sha256"]
    manifest["calibration"] = manifest["calibration"]["cloud_needed"]
    manifest["manifest_sha256"] = manifest_digest(manifest)
    (old / "manifest.json").write_text(json.dumps(manifest))
    router = Router.load(old, strict=True)
    prompts = result.held_out["prompt"].tolist()[:30]
    decisions = router.route_batch(prompts)
    assert all(
        0.0 <= d.score <= 1.0 and d.p_edge is None and d.novelty is None and d.reason.startswith("score")
        for d in decisions
    )
    assert np.allclose([d.score for d in decisions], result.held_out["score"][:30], atol=1e-5)
