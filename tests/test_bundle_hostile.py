"""Hostile bundles: edited and re-sealed with correct checksums, so only the SDK's own checks
stand between them and the host app. Router.load(strict=False) never raises and degrades to
the rule table; route() never raises; strict mode raises BundleError and nothing else."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving import BundleError, Router
from serving._contract import MAX_MANIFEST_BYTES
from serving.bundle._bundle import manifest_digest

PROMPTS = ["What is 2+2?", "", "Summarise this contract. " * 300, "写一首关于秋天的诗", "\ud800 lone surrogate"]


def reseal(folder, manifest: dict) -> None:
    """Write `manifest` with correct file checksums and manifest_sha256: a forger's bundle."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if isinstance(files, dict):
        for name in list(files):
            path = folder / name if isinstance(name, str) else None
            if path is not None and path.is_file() and os.path.realpath(path).startswith(str(folder)):
                files[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    if isinstance(manifest, dict):
        manifest["manifest_sha256"] = manifest_digest(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def forged(bundle, tmp_path, name: str, edit) -> object:
    folder = tmp_path / name
    shutil.copytree(bundle, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.pop("manifest_sha256")
    manifest = edit(manifest, folder) or manifest
    reseal(folder, manifest)
    return folder


def assert_contained(folder) -> Router:
    """The promise, for one bundle folder."""
    router = Router.load(folder)  # must not raise
    for prompt in PROMPTS:
        for precision in (None, "exact", "tolerant"):
            decision = router.route(prompt, precision=precision)
            assert decision.zone in ("edge", "edge_with_cloud_fallback", "cloud")
            assert decision.score == decision.score  # not NaN
            assert "[nan" not in decision.reason.lower()  # no NaN thresholds in a decision
    assert len(router.route_batch(PROMPTS)) == len(PROMPTS)
    try:
        Router.load(folder, strict=True)
    except BundleError:
        pass  # the only exception strict mode may raise
    return router


def set_path(*keys, value):
    def edit(manifest, folder):
        node = manifest
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return edit


def delete(*keys):
    def edit(manifest, folder):
        node = manifest
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return edit


CASES = {
    "limits null": (set_path("limits", value=None), "limits: must be an object"),
    "limits a string": (set_path("limits", value="big"), "limits: must be an object"),
    "edge context negative": (set_path("limits", "edge_context_tokens", value=-5), "edge_context_tokens"),
    "thresholds missing": (delete("thresholds"), "thresholds"),
    "thresholds empty": (set_path("thresholds", value={}), 'thresholds: must be an object with a "default"'),
    "threshold not a number": (set_path("thresholds", "default", "lo", value="low"), "thresholds.default.lo"),
    "threshold NaN": (set_path("thresholds", "default", "hi", value=float("nan")), "thresholds.default.hi"),
    "threshold above 1": (set_path("thresholds", "exact", "hi", value=7), "thresholds.exact.hi"),
    "threshold lo above hi": (set_path("thresholds", "default", value={"lo": 0.9, "hi": 0.1}), "lo <= hi"),
    "threshold for an unknown tag": (set_path("thresholds", "sloppy", value={"lo": 0.1, "hi": 0.9}), "sloppy"),
    "max_tokens 1e8": (set_path("feature_spec", "max_tokens", value=100_000_000), "feature_spec.max_tokens"),
    "max_chars huge": (set_path("feature_spec", "max_chars", value=10**12), "feature_spec.max_chars"),
    "embedding_dim 0": (set_path("feature_spec", "embedding_dim", value=0), "feature_spec.embedding_dim"),
    "unknown spec field": (set_path("feature_spec", "evil", value=1), "unknown field"),
    "fused a string": (set_path("feature_spec", "fused", value="yes"), "feature_spec.fused"),
    "calibration unknown": (set_path("calibration", "edge", "method", value="magic"), "calibration.edge.method"),
    "calibration head missing": (delete("calibration", "cloud"), "one calibration per head"),
    "score kind unknown": (set_path("score", "kind", value="vibes"), "score.kind"),
    "score outputs not one per head": (set_path("score", "outputs", value=["x"]), "score.outputs"),
    "novelty policy unknown": (set_path("novelty", "policy", value="coin_flip"), "novelty.policy"),
    "novelty file beside the graph's": (set_path("novelty", "file", value="elsewhere.npz"), "novelty.file"),
    "novelty output empty": (set_path("novelty", "output", value=""), "novelty.output"),
    "novelty in_model not a bool": (set_path("novelty", "in_model", value="yes"), "novelty.in_model"),
    "novelty threshold negative": (set_path("novelty", "unseen_threshold", value=-1), "novelty.unseen_threshold"),
    "calibration a list": (set_path("calibration", value=[1, 2]), "one calibration per head"),
    "model_version a number": (set_path("model_version", value=5), "model_version"),
    "files with ../": (lambda m, f: m["files"].update({"../../etc/passwd": "0" * 64}), "plain file names"),
    "files with an absolute path": (lambda m, f: m["files"].update({"/etc/passwd": "0" * 64}), "plain file names"),
    "files empty": (set_path("files", value={}), "files"),
    "manifest a list": (lambda m, f: [m], "JSON object"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_edited_and_resealed_manifests_are_bundle_errors(bundle, tmp_path, case):
    edit, why = CASES[case]
    folder = forged(bundle, tmp_path, "forged", edit)
    router = assert_contained(folder)
    assert router.degraded and why in router.degraded_reason, router.degraded_reason
    with pytest.raises(BundleError, match=None):
        Router.load(folder, strict=True)


def test_a_symlinked_file_is_refused_even_inside_the_bundle(bundle, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_bytes((bundle / "tokenizer.json").read_bytes())

    def link(manifest, folder):
        (folder / "tokenizer.json").unlink()
        (folder / "tokenizer.json").symlink_to(outside)

    folder = forged(bundle, tmp_path, "linked", link)
    router = assert_contained(folder)
    assert router.degraded and "symlink" in router.degraded_reason


def test_a_symlinked_manifest_is_refused(bundle, tmp_path):
    folder = tmp_path / "b"
    shutil.copytree(bundle, folder)
    (folder / "manifest.json").rename(tmp_path / "real_manifest.json")
    (folder / "manifest.json").symlink_to(tmp_path / "real_manifest.json")
    router = assert_contained(folder)
    assert router.degraded and "symlink" in router.degraded_reason


def test_an_oversized_manifest_is_refused_before_it_is_parsed(bundle, tmp_path):
    folder = forged(bundle, tmp_path, "big", set_path("padding", value="x" * (MAX_MANIFEST_BYTES + 1)))
    router = assert_contained(folder)
    assert router.degraded and "over the limit" in router.degraded_reason


def test_a_deeply_nested_manifest_is_a_bundle_error(bundle, tmp_path):
    folder = tmp_path / "nested"
    shutil.copytree(bundle, folder)
    (folder / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    router = assert_contained(folder)
    assert router.degraded and "not valid JSON" in router.degraded_reason


def test_a_model_that_reads_unlisted_external_data_is_refused(bundle, tmp_path):
    """An ONNX graph whose weights live in a file beside it that the manifest does not list:
    the weights file is never read, even though it exists."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import set_external_data

    def swap_model(manifest, folder):
        weights = numpy_helper.from_array(np.zeros(4, dtype=np.float32), "w")
        (folder / "weights.bin").write_bytes(weights.raw_data)
        set_external_data(weights, location="weights.bin")
        weights.ClearField("raw_data")
        graph = helper.make_graph(
            [helper.make_node("Add", ["x", "w"], ["probabilities"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [4])],
            initializer=[weights],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
        model.ir_version = 8
        (folder / "model.onnx").write_bytes(model.SerializeToString())
        assert onnx.load(str(folder / "model.onnx"), load_external_data=True)  # valid from its path

    folder = forged(bundle, tmp_path, "external", swap_model)
    router = assert_contained(folder)
    assert router.degraded and "External data path" in router.degraded_reason


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def leaf_paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaf_paths(value, (*prefix, key))
    if prefix:
        yield prefix


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_resealed_edit_of_one_manifest_value_is_contained(bundle, tmp_path_factory, data):
    """Generated forgeries: one manifest value (at any depth, small sections excepted) replaced
    by any JSON value, checksums recomputed."""
    original = json.loads((bundle / "manifest.json").read_text())
    original.pop("manifest_sha256")
    paths = [p for p in leaf_paths(original) if p[0] not in ("metrics", "data", "files")]
    path = data.draw(st.sampled_from(paths))
    value = data.draw(JSON_VALUES)

    def edit(manifest, folder):
        node = manifest
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = copy.deepcopy(value)

    assert_contained(forged(bundle, tmp_path_factory.mktemp("fuzz"), "f", edit))
