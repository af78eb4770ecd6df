"""Leave-one-source-out for `make evaluate`: how the router holds up under traffic shift.

For each held-out source, a router is trained on the rows of every other source and then
routes every row of the held-out source, which it never saw. Training is passed in
(`train`: rows of the other sources and a work folder -> a bundle folder), so this module
needs nothing of the training stack; `make evaluate` passes one that retrains with the
bundle's own settings, in a temporary folder with its own MLflow store, so neither the
user's bundle nor their registry is touched. The reference (evaluation.reference) is fitted
on the same rows of the other sources (their train split, thresholds on their val split).
"""

from __future__ import annotations

import logging
import re
import tempfile
from pathlib import Path
from typing import Callable

from evaluation.figures import HeldOutSource
from evaluation.policies import evaluate_policies
from evaluation.reference import ReferencePolicy
from evaluation.rows import Rows

log = logging.getLogger(__name__)
LOSO_POLICIES = ("learned", "rule_table", "rule_table_inferred", "reference", "random", "oracle")
# (rows of the other sources as a prepared frame, an empty work folder) -> the trained bundle's folder
Trainer = Callable[[object, Path], Path]


def leave_one_source_out(
    frame,
    *,
    train: Trainer,
    sources=None,
    batch_size: int = 256,
    progress=None,
    reference_target: dict | None = None,
    **options,
) -> dict[str, HeldOutSource]:
    """{source: HeldOutSource: LOSO_POLICIES compared on its rows (evaluate_policies) by a router
    trained on the other sources, or the error when that training failed}. Empty with one source.

    `frame` is a prepared log frame (merged rows with split and label); `reference_target`
    the threshold options of the reference (None: no reference); `options` go to
    evaluate_policies (catch_rate, cost, latency).
    """
    from serving import Router

    present = sorted(frame["source"].unique())
    unknown = [s for s in sources or () if s not in present]
    if unknown:
        raise ValueError(f"holdout source {unknown[0]!r} is not in the logs; sources: {', '.join(present)}")
    if len(present) < 2:
        return {}
    held_out = list(sources or present)
    task = progress.add_task("leave-one-source-out", total=len(held_out)) if progress else None
    results = {}
    with tempfile.TemporaryDirectory(prefix="loso-") as tmp:
        for source in held_out:
            work = Path(tmp) / re.sub(r"\W+", "_", source)
            work.mkdir()
            # Merged rows, so a prompt is never on both sides of the split.
            rest, held = frame[frame["source"] != source], frame[frame["source"] == source]
            try:
                bundle = train(rest, work)
            except Exception as exc:  # one failed training must not hide the other sources' figures
                log.warning("leave-one-source-out: training without %s failed: %s", source, exc)
                results[source] = HeldOutSource(None, error=f"{type(exc).__name__}: {exc}"[:300])
            else:
                rows = Rows.route(Router.load(bundle, strict=True), held, batch_size=batch_size)
                reference = ReferencePolicy.fit_frame(rest, **reference_target) if reference_target else None
                names = [n for n in LOSO_POLICIES if n != "reference" or reference is not None]
                figures, _ = evaluate_policies(rows.with_inferred_domains(), names, reference=reference, **options)
                results[source] = HeldOutSource(
                    figures,
                    trained_on_rows=int(len(rest)),
                    unfamiliar_share=float(rows.unfamiliar.mean()) if rows.unfamiliar is not None else None,
                )
            if progress:
                progress.advance(task)
    return results
