"""Calibrated probability from the model's raw probability. Parameters live in the manifest;
training applies the same function, so SDK and training scores agree."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from serving.bundle._manifest import CalibrationParams

EPSILON = 1e-6  # float32-safe: older bundles' fused graphs clip with the same bound


def logit(p: ArrayLike) -> NDArray[np.float64]:
    clipped = np.clip(np.asarray(p, dtype=np.float64), EPSILON, 1 - EPSILON)
    odds: NDArray[np.float64] = np.log(clipped / (1 - clipped))
    return odds


def calibrator(params: CalibrationParams) -> Callable[[float], float]:
    """The calibration as a function of one float: `sigmoid`: 1 / (1 + exp(-(a * logit(p) + b)))
    (Platt); `isotonic`: piecewise linear through the fitted points; `none`: p unchanged.

    Scalar math on purpose: a prompt gets the same bits alone and in a batch (vectorised
    kernels may round a batch differently), at well under a microsecond a prompt."""
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


def apply_calibration(params: CalibrationParams, raw_probability: ArrayLike) -> NDArray[np.float64]:
    """`calibrator(params)` on every element (float64)."""
    p = np.asarray(raw_probability, dtype=np.float64)
    calibrate = calibrator(params)
    return np.array([calibrate(v) for v in p.ravel().tolist()], dtype=np.float64).reshape(p.shape)
