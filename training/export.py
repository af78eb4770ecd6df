"""Export the LightGBM booster to ONNX and write the bundle folder atomically."""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

from serving.bundle import MANIFEST, manifest_digest, sha256_file


def booster_to_onnx(booster, n_features: int) -> bytes:
    """TreeEnsembleClassifier graph with input `features` and output `probabilities` [n, 2]."""
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    model = onnxmltools.convert_lightgbm(booster, initial_types=[("features", FloatTensorType([None, n_features]))],
                                         zipmap=False, target_opset=15)
    return model.SerializeToString()


def fuse(prefix: bytes, trees: bytes) -> bytes:
    """One graph: the prefix's `features` output feeds the tree model's `features` input."""
    import onnx
    from onnx import compose

    first, second = onnx.load_from_string(prefix), onnx.load_from_string(trees)
    # The converter stamps an older IR version than the prefix; both opsets are valid in the newer one.
    first.ir_version = second.ir_version = max(first.ir_version, second.ir_version)
    # Likewise its default-domain opset (it only uses ops unchanged since): align it with the prefix.
    default = {e.domain: e.version for e in first.opset_import}[""]
    for entry in second.opset_import:
        if entry.domain == "":
            entry.version = default
    first = compose.add_prefix(first, "embed_", rename_inputs=False, rename_outputs=False)
    merged = compose.merge_models(first, second, io_map=[("features", "features")], outputs=["probabilities"])
    onnx.checker.check_model(merged)
    return merged.SerializeToString()


def write_bundle(dest: Path, files: dict[str, bytes | Path], manifest: dict) -> Path:
    """Write files + manifest.json (with every file's SHA-256) into `dest`, atomically.

    Everything goes to a temporary sibling folder first, which is renamed into place
    only when complete: a crash leaves the previous bundle (or none), never half of one.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        checksums = {}
        for name, content in files.items():
            target = tmp / name
            if isinstance(content, Path):
                shutil.copyfile(content, target)
            else:
                target.write_bytes(content)
            checksums[name] = sha256_file(target)
        complete = {**manifest, "files": checksums}
        complete["manifest_sha256"] = manifest_digest(complete)
        with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
            json.dump(complete, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        old = None
        if dest.exists():
            old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:8]}"
            dest.rename(old)
        tmp.rename(dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
