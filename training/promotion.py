"""Promotion: move the MLflow alias `champion` to a challenger bundle only when it is at least
as good on the same traffic (`make promote BUNDLE=dir`, pipelines.promote; `make replay`).

Both routers are judged on the same logs: the SDK's outcome logs (`--logs`, one-outcome
traffic: the doubly robust estimate of each router's quality, evaluation.off_policy) and,
when given, logs with both outcomes (`--full-logs`: the quality of each router's first
answer, measured). Cost is the cloud-first share of each router's own decisions on those
prompts (exact). The challenger is promoted when, on every set of logs given,

    quality does not drop by more than `--margin` (default 0.005) and the cloud share does
    not rise, or quality rises by more than `--margin`.

The decision and its figures are recorded on the challenger's MLflow run (tag
`promotion.decision`, metrics `promotion.*`); `dry_run` changes nothing. When
the registered model has no champion yet, the challenger becomes it.
"""
from __future__ import annotations

from pathlib import Path

ALIAS = "champion"


def figures(router, *, logs: list[str], full_logs: list[str]) -> dict:
    """{"logged": {quality, cloud_share}, "full": {...}} of one router on the given logs."""
    import numpy as np

    from data.logs import load_logs
    from evaluation.run import logged_traffic

    out = {}
    if logs:
        ope = logged_traffic(router, load_logs(logs, max_reject_share=1.0).frame(), batch_size=256)
        if ope is None or "skipped" in ope:
            raise ValueError(f"no usable logged requests in {', '.join(logs)} for off-policy estimates")
        out["logged"] = {"quality": ope["quality"]["dr"]["estimate"], "quality_ci95": ope["quality"]["dr"]["ci95"],
                         "cloud_share": ope["cloud_share"]["exact"], "requests": ope["requests"]}
    if full_logs:
        frame = load_logs(full_logs).frame()
        frame = frame[frame["edge_quality"].notna() & frame["cloud_quality"].notna()]
        decisions = router.route_batch(frame["prompt"].tolist(), frame["precision"].tolist())
        cloud = np.array([d.target == "cloud" for d in decisions])
        quality = np.where(cloud, frame["cloud_quality"], frame["edge_quality"])
        out["full"] = {"quality": float(quality.mean()), "cloud_share": float(cloud.mean()), "requests": len(frame)}
    return out


def decide(challenger: dict, champion: dict | None, *, margin: float) -> tuple[bool, str]:
    """(promote?, why) from the two routers' figures (module doc)."""
    if champion is None:
        return True, f"no {ALIAS} yet: the first bundle becomes it"
    reasons = []
    for name, new in challenger.items():
        old = champion[name]
        dq, dc = new["quality"] - old["quality"], new["cloud_share"] - old["cloud_share"]
        if dq > margin:
            reasons.append((True, f"{name}: quality {dq:+.4f} (> +{margin})"))
        elif dq >= -margin and dc <= 0:
            reasons.append((True, f"{name}: quality {dq:+.4f} (within {margin}), cloud share {dc:+.4f}"))
        else:
            reasons.append((False, f"{name}: quality {dq:+.4f}, cloud share {dc:+.4f}"))
    ok = all(r for r, _ in reasons)
    return ok, "; ".join(why for _, why in reasons)


def model_version_of(client, model: str, run_id: str):
    versions = client.search_model_versions(f"name='{model}' and run_id='{run_id}'")
    if not versions:
        raise ValueError(f"the bundle's MLflow run {run_id} has no registered version of {model}")
    return max(versions, key=lambda v: int(v.version))


def promote(bundle: Path, *, logs: list[str], full_logs: list[str], margin: float = 0.005, dry_run: bool = False,
            model: str = "edge-cloud-router", tracking_uri: str | None = None) -> dict:
    """Compare, decide, record; returns the decision with its figures."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from serving import Router
    from training.registry import router_from_mlflow

    if not logs and not full_logs:
        raise ValueError("promotion needs logs to compare on: --logs (outcome logs) and/or --full-logs")
    challenger_router = Router.load(bundle, strict=True)
    manifest = challenger_router.manifest
    tracking_uri = tracking_uri or manifest.mlflow.get("tracking_uri")
    client = MlflowClient(tracking_uri=tracking_uri)
    version = model_version_of(client, model, manifest.mlflow["run_id"])
    try:
        current = client.get_model_version_by_alias(model, ALIAS)
    except mlflow.exceptions.MlflowException:
        current = None
    challenger = figures(challenger_router, logs=logs, full_logs=full_logs)
    champion = None
    if current is not None:
        champion = figures(router_from_mlflow(f"models:/{model}@{ALIAS}", tracking_uri=tracking_uri),
                           logs=logs, full_logs=full_logs)
    promoted, why = decide(challenger, champion, margin=margin)
    result = {"challenger_version": str(version.version),
              "champion_version": str(current.version) if current else None, "promote": promoted, "why": why, "dry_run": dry_run, "challenger": challenger, "champion": champion}
    if not dry_run:
        if promoted:
            client.set_registered_model_alias(model, ALIAS, version.version)
        run_id = manifest.mlflow["run_id"]
        client.set_tag(run_id, "promotion.decision", ("promoted" if promoted else "kept champion") + f": {why}"[:4900])
        for kind, values in challenger.items():
            for key in ("quality", "cloud_share"):
                client.log_metric(run_id, f"promotion.{kind}.{key}", values[key])
                if champion:
                    client.log_metric(run_id, f"promotion.{kind}.champion_{key}", champion[kind][key])
    return result
