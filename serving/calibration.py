"""Calibrated probability from the model's raw probability. Parameters live in the manifest;
training applies the same function, so SDK and training scores agree."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

EPSILON = 1e-6  # float32-safe: older bundles' fused graphs clip with the same bound


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), EPSILON, 1 - EPSILON)
    return np.log(p / (1 - p))


def calibrator(params: dict) -> Callable[[float], float]:
    """The calibration as a function of one float: `sigmoid`: 1 / (1 + exp(-(a * logit(p) + b)))
    (Platt); `isotonic`: piecewise linear through the fitted points; `none`: p unchanged.

    Scalar math on purpose: a prompt gets the same bits alone and in a batch (vectorised
    kernels may round a batch differently), at well under a microsecond a prompt.
    """
    method = params.get("method")
    if method == "sigmoid":
        a, b = float(params["a"]), float(params["b"])

        def platt(p: float) -> float:
            p = min(max(p, EPSILON), 1 - EPSILON)
            return 1.0 / (1.0 + math.exp(-(a * math.log(p / (1 - p)) + b)))

        return platt
    if method == "isotonic":
        x, y = np.asarray(params["x"], dtype=np.float64), np.asarray(params["y"], dtype=np.float64)
        return lambda p: float(np.interp(p, x, y))
    if method == "none":
        return float
    raise ValueError(f"unknown calibration method {method!r} (expected sigmoid, isotonic or none)")


def apply_calibration(params: dict, raw_probability: np.ndarray) -> np.ndarray:
    """`calibrator(params)` on every element (float64)."""
    p = np.asarray(raw_probability, dtype=np.float64)
    calibrate = calibrator(params)
    return np.array([calibrate(v) for v in p.ravel().tolist()], dtype=np.float64).reshape(p.shape)
