"""Bundle writing is atomic; reading checks schema version and every file's checksum."""
from __future__ import annotations

import json

import pytest

import training.export as export
from serving.bundle import BundleError, read_manifest
from training.export import write_bundle

MANIFEST = {"schema_version": 1, "feature_spec": {}}


def files():
    return {"router.onnx": b"model bytes", "tokenizer.json": b"{}"}


def test_written_bundle_verifies(tmp_path):
    dest = write_bundle(tmp_path / "router", files(), MANIFEST)
    manifest = read_manifest(dest)
    assert set(manifest["files"]) == {"router.onnx", "tokenizer.json"}
    assert [p.name for p in tmp_path.iterdir()] == ["router"]


def test_a_crash_mid_write_leaves_the_previous_bundle_whole(tmp_path, monkeypatch):
    dest = write_bundle(tmp_path / "router", files(), MANIFEST)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    real_hash = export.sha256_file
    calls = []

    def crash_on_second_file(path):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt("power cut")
        return real_hash(path)

    monkeypatch.setattr(export, "sha256_file", crash_on_second_file)
    with pytest.raises(KeyboardInterrupt):
        write_bundle(dest, {"router.onnx": b"NEW", "tokenizer.json": b"NEW"}, MANIFEST)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["router"]  # no temporary folder left behind
    read_manifest(dest)


def test_a_missing_source_file_fails_before_touching_the_bundle(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_bundle(tmp_path / "router", {"tokenizer.json": tmp_path / "missing.json"}, MANIFEST)
    assert list(tmp_path.iterdir()) == []


def test_tampered_truncated_or_unknown_bundles_are_refused(tmp_path):
    dest = write_bundle(tmp_path / "router", files(), MANIFEST)
    (dest / "router.onnx").write_bytes(b"model byte")  # truncated
    with pytest.raises(BundleError, match="router.onnx does not match its checksum"):
        read_manifest(dest)
    (dest / "router.onnx").unlink()
    with pytest.raises(BundleError, match="router.onnx is listed in the manifest but missing"):
        read_manifest(dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    (dest / "manifest.json").write_text(json.dumps({**manifest, "feature_spec": {"tier": "other"}}))
    with pytest.raises(BundleError, match="edited after it was written"):
        read_manifest(dest)
    (dest / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 99}))
    with pytest.raises(BundleError, match="schema_version 99 is not supported"):
        read_manifest(dest)
    (dest / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="unreadable"):
        read_manifest(dest)
    with pytest.raises(BundleError, match="no manifest.json"):
        read_manifest(tmp_path / "elsewhere")
