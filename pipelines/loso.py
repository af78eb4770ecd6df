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


def train_config_like(manifest: dict, data: Path, work: Path, *, cache_dir: str, overrides: dict | None = None):
    """A TrainConfig with the bundle's tier, label, split and target, writing only under `work`."""
    from training.config import TrainConfig

    spec, target, split, label = (manifest.get(k, {}) for k in ("feature_spec", "target", "split", "label"))
    options = dict(tier=spec.get("tier", "static"), embedding_dim=spec.get("embedding_dim", 32),
                   max_tokens=spec.get("max_tokens"),
                   calibration=manifest.get("calibration", {}).get("method", "sigmoid"),
                   target=target.get("kind", "quality"), max_quality_drop=target.get("max_quality_drop", 0.01),
                   cloud_budget=target.get("cloud_budget", 0.3),
                   fallback_catch_rate=target.get("fallback_catch_rate", 0.5),
                   val_share=split.get("val_share", 0.15), test_share=split.get("test_share", 0.15),
                   split_salt=split.get("salt", ""), margin_binary=label.get("margin_binary", 0.0),
                   margin_graded=label.get("margin_graded", 0.1),
                   edge_context_tokens=manifest.get("limits", {}).get("edge_context_tokens", 1024))
    return TrainConfig(**{**options, **(overrides or {}), "data": [str(data)], "bundle": str(work / "bundle"),
                          "cache_dir": cache_dir, "tracking_uri": f"sqlite:///{work}/mlflow.db",
                          "artifact_root": str(work / "mlruns"), "reports_dir": str(work / "reports")})


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
            config = train_config_like(manifest, work / "train.jsonl", work, cache_dir=cache_dir, overrides=overrides)
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
