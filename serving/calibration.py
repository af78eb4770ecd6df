"""Calibrated probability from the model's raw probability. Parameters live in the manifest;
training applies the same function, so SDK and training scores agree."""
from __future__ import annotations

import numpy as np

EPSILON = 1e-6  # float32-safe: the fused graph clips with the same bound


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), EPSILON, 1 - EPSILON)
    return np.log(p / (1 - p))


def apply_calibration(params: dict, raw_probability: np.ndarray) -> np.ndarray:
    """`sigmoid`: 1 / (1 + exp(-(a * logit(p) + b))) (Platt); `isotonic`: piecewise linear
    through the fitted points; `none`: p unchanged."""
    method = params.get("method")
    p = np.asarray(raw_probability, dtype=np.float64)
    if method == "sigmoid":
        return 1.0 / (1.0 + np.exp(-(params["a"] * logit(p) + params["b"])))
    if method == "isotonic":
        return np.interp(p, params["x"], params["y"])
    if method == "none":
        return p
    raise ValueError(f"unknown calibration method {method!r} (expected sigmoid, isotonic or none)")
