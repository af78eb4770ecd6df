"""What the fallback zone is worth: the one place its expectation is written.

An edge-first request in the edge_with_cloud_fallback zone runs on the edge; when the
edge answer is wrong (probability 1 - q_edge) the app notices with probability
`catch_rate` (an error, a timeout, a rejecting accept check) and the cloud answers.
So per request the fallback fires with probability catch_rate * (1 - q_edge), costing
one cloud call, and the expected quality is q_edge + that probability * q_cloud.
Requests in the edge zone are not checked. Thresholds, the training summary and the
offline evaluation all use these two functions.
"""
from __future__ import annotations

import numpy as np


def check_catch_rate(catch_rate: float) -> float:
    if isinstance(catch_rate, bool) or not isinstance(catch_rate, (int, float)) or not 0.0 <= catch_rate <= 1.0:
        raise ValueError(f"catch_rate must be a number in [0, 1], got {catch_rate!r}")
    return float(catch_rate)


def fires(q_edge, catch_rate: float) -> np.ndarray:
    """Per fallback-zone request: probability that the fallback fires (= expected cloud calls)."""
    return check_catch_rate(catch_rate) * (1.0 - np.asarray(q_edge, dtype=np.float64))


def fallback_quality(q_edge, q_cloud, catch_rate: float) -> np.ndarray:
    """Per fallback-zone request: expected quality, the edge's plus what a fired fallback recovers."""
    return np.asarray(q_edge, dtype=np.float64) + fires(q_edge, catch_rate) * np.asarray(q_cloud, dtype=np.float64)
