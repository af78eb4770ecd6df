"""Promotion (docs/traffic.md#promotion-make-promote; `make promote`, `make replay`): move the
MLflow alias `champion` to a challenger bundle only when it is at least as good on the same
traffic. Both routers are judged on the SDK's outcome logs (`--logs`: the doubly robust quality,
evaluation.off_policy) and on logs with both outcomes (`--full-logs`: the quality of each router's
first answer), cost being each router's cloud-first share. The challenger is promoted when, on
every set of logs given, quality drops by at most `--margin` and the cloud share does not rise,
or quality rises by more than `--margin`. PromotionRefused (nothing decided, recorded or moved)
when a figure is not finite or rests on fewer than `--min-rows` rows; the decision and its
figures are recorded on the challenger's MLflow run unless `dry_run`.
"""

from __future__ import annotations

import math
from pathlib import Path

from evaluation.off_policy import MIN_PROPENSITY

ALIAS = "champion"
# Figures on fewer rows are refused: a quality in [0, 1] measured on 200 requests has a 95%
# interval of up to +-0.07, fourteen times the default margin.
MIN_ROWS = 200
LISTED_REJECTS = 5  # rejects of the --logs shown in the result, with file, line and reason


class PromotionRefused(ValueError):
    """The logs cannot support a decision; the message says why and what to do."""


def load(logs: list[str], full_logs: list[str], *, min_propensity: float) -> tuple:
    """(rows of --logs or None, their rejects, rows of --full-logs with both outcomes or None, how
    many --full-logs rows had one outcome)."""
    from data.logs import load_logs

    logged, rejects, full, one_outcome = None, [], None, 0
    if logs:
        loaded = load_logs(logs, max_reject_share=1.0, min_propensity=min_propensity)
        logged, rejects = loaded.frame(), loaded.rejects
    if full_logs:
        frame = load_logs(full_logs).frame()
        both = frame["edge_quality"].notna() & frame["cloud_quality"].notna()
        full, one_outcome = frame[both], int((~both).sum())
    return logged, rejects, full, one_outcome


def rejected(rejects) -> dict:
    """What the --logs lost: counts by kind, and the first bad rows with file, line and reason."""
    invalid = [r for r in rejects if r.kind == "invalid"]
    kinds: dict[str, int] = {}
    for r in rejects:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    return {
        "rows": len(rejects),
        "by_kind": kinds,
        "first": [f"{r.file} {r.location}: {r.reason}" for r in invalid[:LISTED_REJECTS]],
    }


def figures(
    router,
    *,
    logged=None,
    full=None,
    logs: list[str] = (),
    full_logs: list[str] = (),
    min_rows: int = MIN_ROWS,
    min_propensity: float = MIN_PROPENSITY,
    one_outcome: int = 0,
) -> dict:
    """{"logged": {quality, cloud_share, requests}, "full": {...}} of one router on the rows
    loaded from `logs` (`logged`) and `full_logs` (`full`, rows with both outcomes);
    PromotionRefused when either rests on fewer than `min_rows` rows."""
    import numpy as np

    from evaluation.run import logged_traffic

    out = {}
    if logged is not None:
        where = ", ".join(logs)
        ope = logged_traffic(router, logged, batch_size=256, min_propensity=min_propensity)
        if ope is None or "skipped" in ope:
            why = ope["skipped"] if ope else "no row carries the side that ran first, its propensity and its outcome"
            raise PromotionRefused(f"--logs {where}: no usable logged requests for off-policy estimates ({why})")
        if ope["requests"] < min_rows:
            raise PromotionRefused(
                f"--logs {where}: the estimates would rest on {ope['requests']} logged requests (side that ran "
                f"first, its propensity and its outcome), fewer than the {min_rows} required (--min-rows): "
                "log more traffic, or lower --min-rows knowing that the figures are that uncertain"
            )
        out["logged"] = {
            "quality": ope["quality"]["dr"]["estimate"],
            "quality_ci95": ope["quality"]["dr"]["ci95"],
            "cloud_share": ope["cloud_share"]["exact"],
            "requests": ope["requests"],
        }
    if full is not None:
        if len(full) < min_rows:
            raise PromotionRefused(
                f"--full-logs {', '.join(full_logs)}: {len(full)} prompts with both outcomes ({one_outcome} rows "
                f"with one: those belong in --logs), fewer than the {min_rows} required (--min-rows)"
            )
        decisions = router.route_batch(full["prompt"].tolist(), full["precision"].tolist())
        cloud = np.array([d.target == "cloud" for d in decisions])
        quality = np.where(cloud, full["cloud_quality"], full["edge_quality"])
        out["full"] = {"quality": float(quality.mean()), "cloud_share": float(cloud.mean()), "requests": len(full)}
    return out


def check_finite(figures: dict, who: str) -> None:
    """PromotionRefused naming the first figure that is not a finite number."""
    for kind, values in figures.items():
        for key in ("quality", "cloud_share"):
            value = values[key]
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise PromotionRefused(
                    f"{kind}: the {who}'s {key} is {value}, not a finite number: nothing to "
                    "compare (check the logs it was computed on)"
                )


def decide(challenger: dict, champion: dict | None, *, margin: float) -> tuple[bool, str]:
    """(promote?, why) from the two routers' figures (module doc); PromotionRefused when a
    figure is not a finite number."""
    check_finite(challenger, "challenger")
    if champion is None:
        return True, f"no {ALIAS} yet: the first bundle becomes it"
    check_finite(champion, ALIAS)
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


def promote(
    bundle: Path,
    *,
    logs: list[str],
    full_logs: list[str],
    margin: float = 0.005,
    dry_run: bool = False,
    model: str = "edge-cloud-router",
    tracking_uri: str | None = None,
    min_rows: int = MIN_ROWS,
    min_propensity: float = MIN_PROPENSITY,
) -> dict:
    """Compare, decide, record; returns the decision with its figures and the --logs' rejects.
    PromotionRefused (module doc) before anything is recorded or moved."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from serving import Router
    from training.registry import router_from_mlflow

    if not logs and not full_logs:
        raise ValueError("promotion needs logs to compare on: --logs (outcome logs) and/or --full-logs")
    if not isinstance(min_rows, int) or min_rows < 1:
        raise ValueError(f"min_rows={min_rows!r} must be an integer >= 1")
    if not 0 < min_propensity <= 1:
        raise ValueError(f"min_propensity={min_propensity!r} must be in (0, 1]")
    logged, rejects, full, one_outcome = load(logs, full_logs, min_propensity=min_propensity)
    options = dict(
        logged=logged,
        full=full,
        logs=logs,
        full_logs=full_logs,
        min_rows=min_rows,
        min_propensity=min_propensity,
        one_outcome=one_outcome,
    )
    challenger_router = Router.load(bundle, strict=True)
    manifest = challenger_router.manifest
    tracking_uri = tracking_uri or manifest.mlflow.get("tracking_uri")
    client = MlflowClient(tracking_uri=tracking_uri)
    versions = client.search_model_versions(f"name='{model}' and run_id='{manifest.mlflow['run_id']}'")
    if not versions:
        raise ValueError(f"the bundle's MLflow run {manifest.mlflow['run_id']} has no registered version of {model}")
    version = max(versions, key=lambda v: int(v.version))
    try:
        current = client.get_model_version_by_alias(model, ALIAS)
    except mlflow.exceptions.MlflowException:
        current = None
    challenger = figures(challenger_router, **options)
    champion = None
    if current is not None:
        champion = figures(router_from_mlflow(f"models:/{model}@{ALIAS}", tracking_uri=tracking_uri), **options)
    promoted, why = decide(challenger, champion, margin=margin)
    result = {
        "challenger_version": str(version.version),
        "champion_version": str(current.version) if current else None,
        "promote": promoted,
        "why": why,
        "dry_run": dry_run,
        "challenger": challenger,
        "champion": champion,
        "rejected": rejected(rejects) if logs else None,
    }
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
