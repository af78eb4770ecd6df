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


def fuse(prefix: bytes, trees: bytes, calibration: dict) -> bytes:
    """One graph from token ids and scalars to `probabilities` and, with Platt calibration,
    to the calibrated `score`: one onnxruntime call for any runtime that loads model.onnx.

    The Python SDK asks for `probabilities` only (onnxruntime then skips the ten float64
    calibration nodes, ~8 us a call) and applies the manifest's calibration to the one
    float per prompt (serving.calibration), so a prompt gets the same bits alone and in a
    batch; a test holds the graph's `score` to the SDK's. The calibration is checked here,
    so no bundle ships one the SDK cannot apply.
    """
    import onnx
    from onnx import compose

    from serving.calibration import calibrator

    calibrator(calibration)

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
    if calibration.get("method") == "sigmoid":
        _append_platt(merged.graph, a=calibration["a"], b=calibration["b"])
    onnx.checker.check_model(merged)
    return merged.SerializeToString()


def _append_platt(graph, *, a: float, b: float) -> None:
    """score = sigmoid(a * logit(clip(p1)) + b), the same formula as serving.calibration.

    Computed in float64, like the SDK's calibration, so the two agree to ~1e-16 (float32
    Log/Sigmoid kernels would also round a batch differently from one row)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from serving.calibration import EPSILON

    constants = {"cal_starts": np.array([1], np.int64), "cal_ends": np.array([2], np.int64),
                 "cal_axes": np.array([1], np.int64), "cal_lo": np.array(EPSILON, np.float64),
                 "cal_hi": np.array(1 - EPSILON, np.float64), "cal_one": np.array(1.0, np.float64),
                 "cal_a": np.array(a, np.float64), "cal_b": np.array(b, np.float64)}
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    graph.node.extend([
        helper.make_node("Slice", ["probabilities", "cal_starts", "cal_ends", "cal_axes"], ["cal_p32"]),
        helper.make_node("Cast", ["cal_p32"], ["cal_p"], to=TensorProto.DOUBLE),
        helper.make_node("Clip", ["cal_p", "cal_lo", "cal_hi"], ["cal_pc"]),
        helper.make_node("Sub", ["cal_one", "cal_pc"], ["cal_q"]),
        helper.make_node("Div", ["cal_pc", "cal_q"], ["cal_odds"]),
        helper.make_node("Log", ["cal_odds"], ["cal_logit"]),
        helper.make_node("Mul", ["cal_logit", "cal_a"], ["cal_scaled"]),
        helper.make_node("Add", ["cal_scaled", "cal_b"], ["cal_z"]),
        helper.make_node("Sigmoid", ["cal_z"], ["cal_score2d"]),
        helper.make_node("Squeeze", ["cal_score2d", "cal_axes"], ["score"]),
    ])
    graph.output.append(helper.make_tensor_value_info("score", TensorProto.DOUBLE, ["batch"]))


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
