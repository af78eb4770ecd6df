"""Pick the two fallback thresholds per precision tag from calibrated validation scores (docs/training.md, step 7): edge
below lo, cloud above hi, edge_with_cloud_fallback in between (inclusive), the fallback zone valued by
evaluation.fallback. Targets: `quality`, the fewest expected cloud calls within `max_quality_drop` of all-cloud's
quality; `budget`, the best expected quality with expected cloud calls <= `cloud_budget`."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from evaluation.fallback import Catch, fallback_quality, fires

TARGETS = ("quality", "budget")


@dataclass(frozen=True)
class Thresholds:
    lo: float
    hi: float
    rows: int
    expected_quality: float
    all_cloud_quality: float
    all_edge_quality: float
    cloud_first_share: float
    fallback_share: float
    expected_cloud_calls: float
    met_target: bool

    def as_dict(self) -> dict:
        return asdict(self)


def _threshold_at(sorted_scores: np.ndarray, cut: int, *, empty: float) -> float:
    """Midpoint between the scores either side of a cut; `empty` when the cut is at an end."""
    return empty if cut in (0, len(sorted_scores)) else float((sorted_scores[cut - 1] + sorted_scores[cut]) / 2)


def select_thresholds(
    scores,
    q_edge,
    q_cloud,
    *,
    target: str = "quality",
    max_quality_drop: float = 0.01,
    cloud_budget: float = 0.3,
    catch_rate: float | Catch = 0.5,
    max_points: int = 256,
    bounds: tuple[float, float] = (0.0, 1.0),
) -> Thresholds:
    """Search every pair of cut points (lo <= hi) for the target; see the module doc. `bounds`
    is the score's range: a zone that holds no request gets the bound beyond every score."""
    if target not in TARGETS:
        raise ValueError(f"unknown threshold target {target!r}; choose one of {', '.join(TARGETS)}")
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) == 0:
        raise ValueError("cannot pick thresholds from zero validation rows")
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    qe, qc = np.asarray(q_edge, float)[order], np.asarray(q_cloud, float)[order]
    n = len(s)
    rates = Catch.of(catch_rate).take(order)
    p_edge, p_fb, p_fbc, p_cloud = (  # prefix sums
        np.concatenate([[0.0], np.cumsum(x)]) for x in (qe, fallback_quality(qe, qc, rates), fires(qe, rates), qc)
    )
    cuts = np.concatenate([[0], np.flatnonzero(np.diff(s) != 0) + 1, [n]])  # positions between distinct scores
    if len(cuts) > max_points:  # thinned to max_points
        cuts = cuts[np.unique(np.round(np.linspace(0, len(cuts) - 1, max_points)).astype(int))]
    a, b = np.meshgrid(cuts, cuts, indexing="ij")  # edge = [0, a), fallback = [a, b), cloud = [b, n)
    valid = a <= b
    quality = (p_edge[a] + (p_fb[b] - p_fb[a]) + (p_cloud[n] - p_cloud[b])) / n
    calls = ((p_fbc[b] - p_fbc[a]) + (n - b)) / n
    all_cloud = qc.mean()
    # Ties are broken towards quality, then fewer cloud calls, then a smaller fallback zone
    # (a fallback that cannot fire only adds the cost of checking the edge answer).
    fallback = (b - a) / n
    if target == "quality":
        ok = valid & (quality >= all_cloud - max_quality_drop - 1e-12)
        objective = np.where(ok, -calls + 1e-9 * quality - 1e-10 * fallback, -np.inf)
    else:
        ok = valid & (calls <= cloud_budget + 1e-12)
        objective = np.where(ok, quality - 1e-9 * calls - 1e-10 * fallback, -np.inf)
    met = bool(ok.any())
    if not met:  # unreachable target (e.g. budget below zero): the closest feasible policy
        objective = np.where(valid, quality if target == "quality" else -calls, -np.inf)
    i, j = np.unravel_index(np.argmax(objective), objective.shape)
    lo_cut, hi_cut = int(a[i, j]), int(b[i, j])
    return Thresholds(
        lo=_threshold_at(s, lo_cut, empty=bounds[0] if lo_cut == 0 else bounds[1]),
        hi=_threshold_at(s, hi_cut, empty=bounds[1] if hi_cut == n else bounds[0]),
        rows=n,
        expected_quality=float(quality[i, j]),
        all_cloud_quality=float(all_cloud),
        all_edge_quality=float(qe.mean()),
        cloud_first_share=(n - hi_cut) / n,
        fallback_share=(hi_cut - lo_cut) / n,
        expected_cloud_calls=float(calls[i, j]),
        met_target=met,
    )


def select_per_precision(
    scores, q_edge, q_cloud, precisions, *, tags, min_rows: int = 200, **options
) -> dict[str, dict]:
    """Thresholds for every tag with at least `min_rows` validation rows; the rest (and
    requests that declare no precision, key "default") use the thresholds of all rows."""
    scores, q_edge, q_cloud = (np.asarray(x, dtype=np.float64) for x in (scores, q_edge, q_cloud))
    precisions = np.asarray([p if p is not None else "" for p in precisions], dtype=object)
    rates = Catch.of(options.pop("catch_rate", 0.5))
    overall = select_thresholds(scores, q_edge, q_cloud, catch_rate=rates, **options)
    chosen = {"default": {**overall.as_dict(), "source": "all validation rows"}}
    for tag in tags:
        rows = precisions == tag
        count = int(rows.sum())
        t, source = overall, f"only {count} rows tagged {tag} (< {min_rows}): default thresholds"
        if count >= min_rows:
            t = select_thresholds(scores[rows], q_edge[rows], q_cloud[rows], catch_rate=rates.take(rows), **options)
            source = f"{count} validation rows tagged {tag}"
        chosen[tag] = {**t.as_dict(), "source": source}
    return chosen
