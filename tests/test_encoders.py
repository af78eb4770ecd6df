"""The encoders' builds kept for a process (training.encoders): the static tier's table and
graph, and the weights' content key, are read once and again only when their file changes."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np

from training.encoders import build_static, model_key, static_table_path


def test_the_static_encoder_is_built_once_and_again_when_its_table_changes(encoder_cache, tmp_path):
    path = static_table_path(tmp_path)
    shutil.copyfile(static_table_path(encoder_cache / "encoders"), path)
    first = build_static(tmp_path)
    assert build_static(tmp_path) is first
    assert not first.table.flags.writeable  # shared by every training of the process
    changed = np.array(first.table)
    changed[1] += 1.0
    np.save(tmp_path / "next.npy", changed)
    (tmp_path / "next.npy").replace(path)
    again = build_static(tmp_path)
    assert again is not first
    np.testing.assert_array_equal(again.table, changed)
    assert again.onnx_bytes != first.onnx_bytes and again.key != first.key


def test_the_weights_key_is_their_content_hash_read_again_when_they_change(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights one")
    assert model_key(tmp_path) == hashlib.sha256(b"weights one").hexdigest()[:16]
    assert model_key(tmp_path) == model_key(tmp_path)
    (tmp_path / "next").write_bytes(b"weights two")
    (tmp_path / "next").replace(weights)
    assert model_key(tmp_path) == hashlib.sha256(b"weights two").hexdigest()[:16]
