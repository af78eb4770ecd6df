"""Leave-one-source-out for `make evaluate`: how the router holds up under traffic shift.

For each held-out source, a router is trained (pipelines.train.run, same settings as the
bundle) on the rows of every other source, in a temporary folder with its own MLflow
store, so neither the user's bundle nor their registry is touched; its Router then
routes every row of the held-out source, which it never saw.
"""
from __future__ import annotations

import logging
import re
import tempfile
from pathlib import Path

log = logging.getLogger("pipelines.loso")
LOSO_POLICIES = ("learned", "rule_table", "rule_table_inferred", "random", "oracle")


def leave_one_source_out(frame, manifest: dict, *, sources=None, cache_dir: str = "data/cache",
                         overrides: dict | None = None, batch_size: int = 256, progress=None,
                         **options) -> dict:
    """{source: figures of LOSO_POLICIES on its rows (training.policies.evaluate_policies) and
    `trained_on_rows`, or {"error": ...} when that training failed}. Empty with one source.

    `frame` is a prepared log frame (pipelines.train.prepare_frame); `options` go to
    evaluate_policies (catch_rate, cost, latency).
    """
    from rich.console import Console

    from data.schema import COLUMNS
    from pipelines.evaluate import bundle_train_config
    from pipelines.train import run as train
    from serving import Router
    from training.policies import EvalRows, evaluate_policies

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
            rest[list(COLUMNS)].to_json(work / "train.jsonl", orient="records", lines=True, force_ascii=False)
            config = bundle_train_config(manifest, **{
                **(overrides or {}), "data": [str(work / "train.jsonl")], "bundle": str(work / "bundle"),
                "cache_dir": cache_dir, "artifact_root": str(work / "mlruns"), "reports_dir": str(work / "reports"),
                # One throw-away MLflow store for all of them: creating a store costs seconds.
                "tracking_uri": f"sqlite:///{tmp}/mlflow.db"})
            try:
                trained = train(config, console=Console(quiet=True))
            except Exception as exc:  # one failed training must not hide the other sources' figures
                log.warning("leave-one-source-out: training without %s failed: %s", source, exc)
                results[source] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            else:
                rows = EvalRows.route(Router.load(trained.bundle, strict=True), held,
                                      batch_size=batch_size).with_inferred_domains()
                figures, _ = evaluate_policies(rows, LOSO_POLICIES, **options)
                results[source] = {**figures, "trained_on_rows": int(len(rest))}
            if progress:
                progress.advance(task)
    return results
