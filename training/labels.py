"""The training label: does this request need the cloud? (definition: shared docs/metrics.md)"""

from __future__ import annotations

import numpy as np


def is_graded(edge_quality: np.ndarray, cloud_quality: np.ndarray) -> np.ndarray:
    """Rows with judge-style scores (anything other than right/wrong 0/1 on both sides)."""
    binary = np.isin(edge_quality, (0.0, 1.0)) & np.isin(cloud_quality, (0.0, 1.0))
    return ~binary


def cloud_needed(edge_quality, cloud_quality, *, margin_binary: float = 0.0, margin_graded: float = 0.1) -> np.ndarray:
    """1 where the cloud beats the edge by more than the margin; both right or both wrong is 0.

    Right/wrong rows use `margin_binary` (0: any win counts); judge scores use
    `margin_graded`, so a small scoring wobble does not count as a cloud win.
    """
    edge = np.asarray(edge_quality, dtype=np.float64)
    cloud = np.asarray(cloud_quality, dtype=np.float64)
    margin = np.where(is_graded(edge, cloud), margin_graded, margin_binary)
    return (cloud - edge > margin).astype(np.int8)
