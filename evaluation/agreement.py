"""How alike two routers' decisions are on the same prompts: what changes for the traffic
when one bundle replaces another (`make compare`, pipelines.compare)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np


def agreement(old, new, prompts: Sequence[str], precisions: Sequence[str | None]) -> dict:
    """Shares of the prompts on which routers `old` and `new` (serving.Router) agree on the zone and on the first side,
    the scores' correlation and largest difference, and the zone moves (`moves`: "old -> new": count)."""
    a, b = old.route_batch(list(prompts), list(precisions)), new.route_batch(list(prompts), list(precisions))
    zones_a, zones_b = np.array([d.zone for d in a]), np.array([d.zone for d in b])
    first_a, first_b = np.array([d.target for d in a]), np.array([d.target for d in b])
    scores_a, scores_b = np.array([d.score for d in a]), np.array([d.score for d in b])
    moves = Counter(f"{x} -> {y}" for x, y in zip(zones_a, zones_b) if x != y)
    return {
        "prompts": len(a),
        "zones_equal": float(np.mean(zones_a == zones_b)),
        "first_side_equal": float(np.mean(first_a == first_b)),
        "score_correlation": float(np.corrcoef(scores_a, scores_b)[0, 1]) if len(a) > 1 else 1.0,
        "max_score_difference": float(np.max(np.abs(scores_a - scores_b))) if len(a) else 0.0,
        "cloud_first_share": {"old": float(np.mean(first_a == "cloud")), "new": float(np.mean(first_b == "cloud"))},
        "moves": dict(moves.most_common()),
    }
