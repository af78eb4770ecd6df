"""The training label: does this request need the cloud? (definition: shared docs/metrics.md)"""

from __future__ import annotations

import numpy as np


def cloud_needed(edge_quality, cloud_quality, *, margin_binary: float = 0.0, margin_graded: float = 0.1) -> np.ndarray:
    """1 where the cloud beats the edge by more than the margin; both right or both wrong is 0.

    Right/wrong rows use `margin_binary` (0: any win counts); judge scores use
    `margin_graded`, so a small scoring wobble does not count as a cloud win.
    """
    edge = np.asarray(edge_quality, dtype=np.float64)
    cloud = np.asarray(cloud_quality, dtype=np.float64)
    binary = np.isin(edge, (0.0, 1.0)) & np.isin(cloud, (0.0, 1.0))  # right/wrong rows; else judge scores
    margin = np.where(binary, margin_binary, margin_graded)
    return (cloud - edge > margin).astype(np.int8)
