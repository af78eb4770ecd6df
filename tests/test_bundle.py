"""Bundle writing is atomic and serialized; reading checks schema version and every file's checksum."""

from __future__ import annotations

import json

import pytest

import training.writer as writer
from serving.bundle._bundle import BundleError, read_manifest
from serving.bundle._manifest import Manifest
from serving.features._spec import FeatureSpec
from training.writer import write_bundle

MANIFEST = Manifest(
    model_version="test",
    feature_spec=FeatureSpec(tier="static"),
    calibration={"cloud_needed": {"method": "none"}},
    thresholds={"default": {"lo": 0.3, "hi": 0.7}},
)


def files():
    return {"router.onnx": b"model bytes", "tokenizer.json": b"{}"}


def test_written_bundle_verifies(tmp_path):
    dest = write_bundle(tmp_path / "router", files(), MANIFEST)
    manifest = read_manifest(dest)
    assert set(manifest.files) == {"router.onnx", "tokenizer.json"}
    assert manifest.band("exact") == (0.3, 0.7)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".router.lock", "router"]


def test_a_crash_mid_write_leaves_the_previous_bundle_whole(tmp_path, monkeypatch):
    dest = write_bundle(tmp_path / "router", files(), MANIFEST)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    real_hash = writer.sha256_file
    calls = []

    def crash_on_second_file(path):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt("power cut")
        return real_hash(path)

    monkeypatch.setattr(writer, "sha256_file", crash_on_second_file)
    with pytest.raises(KeyboardInterrupt):
        write_bundle(dest, {"router.onnx": b"NEW", "tokenizer.json": b"NEW"}, MANIFEST)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".router.lock", "router"]  # no temporary folder left
    read_manifest(dest)


def test_a_replaced_bundle_is_swapped_in_whole(tmp_path):
    dest = write_bundle(tmp_path / "router", files(), MANIFEST)
    write_bundle(dest, {"router.onnx": b"NEW", "tokenizer.json": b"{}"}, MANIFEST)
    assert (dest / "router.onnx").read_bytes() == b"NEW"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".router.lock", "router"]


def test_leftovers_of_a_killed_run_are_cleaned_and_a_parked_bundle_put_back(tmp_path):
    dest = write_bundle(tmp_path / "router", files(), MANIFEST)
    parked = tmp_path / ".router.old-deadbeef"
    dest.rename(parked)  # a run killed between the two renames of a swap
    (tmp_path / ".router.tmp-0badf00d").mkdir()  # a run killed while writing
    write_bundle(tmp_path / "other", files(), MANIFEST)  # another bundle path: not touched
    assert parked.exists()
    with writer.bundle_lock(dest):
        writer.clean_leftovers(dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.lock", ".router.lock", "other", "router"]
    read_manifest(dest)


def test_a_missing_source_file_fails_before_touching_the_bundle(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_bundle(tmp_path / "router", {"tokenizer.json": tmp_path / "missing.json"}, MANIFEST)
    assert [p.name for p in tmp_path.iterdir()] == [".router.lock"]


def test_tampered_truncated_or_unknown_bundles_are_refused(tmp_path):
    dest = write_bundle(tmp_path / "router", files(), MANIFEST)
    (dest / "router.onnx").write_bytes(b"model byte")  # truncated
    with pytest.raises(BundleError, match="router.onnx does not match its checksum"):
        read_manifest(dest)
    (dest / "router.onnx").unlink()
    with pytest.raises(BundleError, match="router.onnx is listed in the manifest but missing"):
        read_manifest(dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    (dest / "manifest.json").write_text(json.dumps({**manifest, "model_version": "other"}))
    with pytest.raises(BundleError, match="edited after it was written"):
        read_manifest(dest)
    (dest / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 99}))
    with pytest.raises(BundleError, match="schema_version: is not supported.*got 99"):
        read_manifest(dest)
    (dest / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        read_manifest(dest)
    with pytest.raises(BundleError, match="no bundle folder"):
        read_manifest(tmp_path / "elsewhere")
