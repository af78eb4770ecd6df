"""The offline evaluation of one bundle on prepared log rows: every figure `make evaluate` reports (docs/evaluation.md).
Loading the logs, training for leave-one-source-out (`train`) and MLflow are the caller's (pipelines.evaluate), so this
runs on any frame of prepared rows."""

from __future__ import annotations

import dataclasses
import logging
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from data.logs import below_propensity_floor
from evaluation.acceptance import rejected_share_by_prompt, roc_points, separation_by_source
from evaluation.config import SPLIT_NOTES, EvalConfig
from evaluation.figures import HeldOutSource
from evaluation.metrics import reliability
from evaluation.off_policy import MIN_PROPENSITY, off_policy
from evaluation.policies import breakdowns, evaluate_policies, tune_rule_table
from evaluation.reference import ReferencePolicy
from evaluation.rows import Rows, decide
from evaluation.rules_effect import rules_effect
from serving import Router
from serving.bundle._manifest import Manifest
from serving.policy._rules import PolicySet

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
    in_distribution: dict[str, float] | None = None,
    **options,
) -> dict[str, HeldOutSource]:
    """{source: HeldOutSource}: LOSO_POLICIES compared on the source's rows by a router trained on the
    other sources (or that training's error); empty with one source. `reference_target`: the reference's
    threshold options (None: no reference); `in_distribution`: the bundle's own APGR per source."""
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
                    in_distribution_apgr=(in_distribution or {}).get(source),
                )
            if progress:
                progress.advance(task)
    return results


@dataclass
class Evaluation:
    metrics: dict  # as in metrics.json
    curves: dict  # policy -> quality curve, for the plots


def _setup(config: EvalConfig, manifest: Manifest, data_report: dict, frame=None, rows: Rows | None = None) -> dict:
    """metrics.json's `setup`; without `rows` (no request has both outcomes) the bundle and logs alone."""
    read = {
        "bundle": str(config.bundle),
        "model_version": manifest.model_version,
        "mlflow_run_id": manifest.mlflow.get("run_id"),
        "logs": data_report["paths"],
        "rows_read": data_report["rows_read"],
        "rejected": data_report["rejected"],
    }
    if rows is None:
        return {**read, "split": config.split, "evaluated_rows": 0}
    return {
        **read,
        "prompts": int(len(frame)),
        "rows_per_split": {k: int(v) for k, v in frame["split"].value_counts().items()},
        "split": config.split,
        "split_note": SPLIT_NOTES[config.split],
        "evaluated_rows": len(rows),
        "catch_rate": config.catch_rate,
        "cost": dataclasses.asdict(config.cost_model()),
        "latency": dataclasses.asdict(config.latency_model()),
        "policies": list(config.policies),
    }


def calibration(rows: Rows, *, bins: int) -> dict:
    """Reliability of each probability the router outputs, against what was observed: the
    outcome heads against each endpoint's quality, or P(cloud needed) against the label."""
    pairs = {"P(edge good)": (rows.p_edge, rows.q_edge), "P(cloud good)": (rows.p_cloud, rows.q_cloud)}
    if rows.p_edge is None:
        pairs = {"P(cloud needed)": (rows.scores, rows.needed)}
    return {name: reliability(*pair, bins=bins) for name, pair in pairs.items()}


def familiarity(rows: Rows) -> dict | None:
    """How many evaluated prompts the router found unfamiliar, and how its decisions did on
    them against the rest (quality before fallback, and the all-edge / all-cloud references)."""
    if rows.unfamiliar is None:
        return None
    out = {"rows": len(rows), "unfamiliar_share": float(rows.unfamiliar.mean())}
    for name, group in (("unfamiliar", rows.unfamiliar), ("familiar", ~rows.unfamiliar)):
        if group.any():
            routed = np.where(rows.zones[group] == "cloud", rows.q_cloud[group], rows.q_edge[group])
            out[name] = {
                "rows": int(group.sum()),
                "quality": float(routed.mean()),
                "all_edge_quality": float(rows.q_edge[group].mean()),
                "all_cloud_quality": float(rows.q_cloud[group].mean()),
            }
    return out


def acceptance(router, manifest: Manifest, responses, split: str) -> tuple[dict, dict | None, object]:
    """The bundle's acceptance check on the evaluated split's logged edge answers, through the
    SDK: (figures for metrics.json, ROC points or None, (prompts, rejected) or None)."""
    section = manifest.acceptance
    if router.acceptor is None:
        why = section.get("reason") if section else "the bundle was trained before acceptance checks"
        return {"model": None, "reason": why}, None, None
    rows = responses if split == "all" or responses is None else responses[responses["split"] == split]
    if rows is None or len(rows) == 0:
        return {"model": True, "rows": 0, "reason": f"no logged edge answers in the {split} rows"}, None, None
    acceptor = router.acceptor
    columns = ("prompt", "edge_response", "edge_logprob_mean", "edge_logprob_min")
    probability = acceptor.probabilities(*(rows[c].tolist() for c in columns))
    good = rows["edge_quality"].to_numpy() >= section.get("good_quality", 0.5)
    figures = {
        "model": True,
        "threshold": acceptor.threshold,
        "false_reject_rate_target": section.get("false_reject_rate_target"),
        **separation_by_source(probability, good, rows["source"].to_numpy(object), acceptor.threshold),
    }
    roc = roc_points(probability, good) if good.any() and (~good).any() else None
    return figures, roc, (rows["prompt"].tolist(), probability < acceptor.threshold)


def assumption_check(rows: Rows, catch_rate: float) -> dict | None:
    """On the requests whose edge answer the check judged: the learned router's fallback figures with
    the measured verdicts, against those the assumed catch rate (no false rejects) would have claimed."""
    if rows.rejected is None or np.isnan(rows.rejected).all():
        return None
    answered = rows.subset(~np.isnan(rows.rejected))
    keys = ("fallback_fires", "quality_with_fallback", "expected_cloud_calls")
    out = {"rows": len(answered)}
    for name, version in (("measured", answered), ("assumed", dataclasses.replace(answered, rejected=None))):
        learned = evaluate_policies(version, ["learned"], catch_rate=catch_rate)[0].policies["learned"]
        out[name] = {k: getattr(learned, k) for k in keys}
    return out


LISTED_IDS = 20  # request ids listed of the requests left out below the propensity floor


def logged_traffic(
    router, frame, *, batch_size: int, margin: float = 0.0, min_propensity: float = MIN_PROPENSITY
) -> dict | None:
    """Off-policy estimates (evaluation.off_policy) of the bundle on the rows an SDK logged with the side
    that ran first, its propensity and its outcome (None without any). Requests below `min_propensity`
    are left out and listed (`below_min_propensity`: how many, the first request ids, why)."""
    if "propensity" not in frame or "routed_to" not in frame:
        return None
    side_quality = np.where(frame["routed_to"] == "cloud", frame["cloud_quality"], frame["edge_quality"]).astype(float)
    logged = (frame["propensity"].notna() & frame["routed_to"].notna()).to_numpy() & ~np.isnan(side_quality)
    if not logged.any():
        return None
    below = logged & (frame["propensity"] < min_propensity).to_numpy()
    left_out: dict[str, object] = {}
    if below.any():
        low = frame[below]
        left_out["below_min_propensity"] = {
            "rows": int(below.sum()),
            "request_ids": low["request_id"].tolist()[:LISTED_IDS],
            "reason": below_propensity_floor(float(low["propensity"].min()), min_propensity),
        }
        logged &= ~below
        if not logged.any():
            return {"skipped": f"every logged request is below the propensity floor {min_propensity}", **left_out}
    rows = frame[logged]
    decisions, _ = decide(router, rows["prompt"], rows["precision"], batch_size=batch_size)
    if any(d.p_edge is None for d in decisions):  # a bundle without outcome heads: its score stands in for neither
        return {"skipped": "the bundle has no outcome heads (P(edge good), P(cloud good)) for the DR estimate"}
    return {
        **off_policy(
            routed_to=rows["routed_to"].tolist(),
            propensity=rows["propensity"].to_numpy(float),
            reward=side_quality[logged],
            target=[d.target for d in decisions],
            p_edge=[d.p_edge for d in decisions],
            p_cloud=[d.p_cloud for d in decisions],
            edge_quality=rows["edge_quality"].to_numpy(float),
            cloud_quality=rows["cloud_quality"].to_numpy(float),
            margin=margin,
            min_propensity=min_propensity,
        ),
        **left_out,
    }


def evaluate(
    config: EvalConfig,
    *,
    router,
    manifest: Manifest,
    frame,
    data_report: dict,
    train: Trainer | None = None,
    progress=None,
    responses=None,
) -> Evaluation:
    """Every figure of the report; `train` retrains without a source (leave-one-source-out);
    `responses`: the logged edge answers (data.prepare.response_rows), which measure the
    acceptance check and, where they exist, the fallback's catch and false-reject rates."""
    policy = PolicySet.load(config.policy) if config.policy is not None else None  # a bad file fails first
    notes = [] if manifest.split else ["the manifest has no `split`: the default 15% / 15% hash split is assumed"]
    if manifest.split.get("cv_folds"):
        notes.append(
            f"the bundle was cross-fitted ({manifest.split['cv_folds']} folds) and trained on every row of its "
            "training logs: none of those rows is unseen, so figures on them are in sample; its estimates "
            "are the cross-validated ones (manifest metrics.cv, `make evaluate CV=5`)"
        )
    chosen = np.ones(len(frame), bool) if config.split == "all" else (frame["split"] == config.split).to_numpy()
    if not chosen.any():
        raise ValueError(
            f"no rows of split {config.split!r} in these logs (rows per split: "
            f"{frame['split'].value_counts().to_dict()}); try --split all"
        )
    traffic = logged_traffic(
        router,
        frame[chosen],
        batch_size=config.batch_size,
        margin=manifest.label.get("margin_binary", 0.0),
        min_propensity=config.min_propensity,
    )
    both = (frame["edge_quality"].notna() & frame["cloud_quality"].notna()).to_numpy()
    if not both[chosen].any():
        notes.append("no evaluated request has both outcomes: only the off-policy estimates are reported")
        return Evaluation({"setup": _setup(config, manifest, data_report), "off_policy": traffic, "notes": notes}, {})
    if not both.all():
        notes.append(f"{int((~both).sum())} requests with one outcome: in the off-policy estimates only")
        frame, chosen = frame[both], chosen[both]
    fit_rows, val_rows = ((frame["split"] == split).to_numpy() for split in ("train", "val"))
    # The bundle's own threshold target, as evaluation.thresholds options: the tuned rule table and
    # the reference are thresholded for what the learned router was.
    given = manifest.target
    target = {
        "target": given.get("kind", "quality"),
        "max_quality_drop": given.get("max_quality_drop", 0.01),
        "cloud_budget": given.get("cloud_budget", 0.3),
        "catch_rate": given.get("fallback_catch_rate", 0.5),
    }
    policies, tuned, tuned_info = list(config.policies), None, {"skipped": "not requested"}
    if "tuned_rule_table" in policies and not fit_rows.any():
        policies.remove("tuned_rule_table")
        tuned_info = {"skipped": "the logs have no rows in the bundle's train split to grid-search it on"}
        notes.append(f"tuned rule table: {tuned_info['skipped']}")
    reference, reference_info = None, {"skipped": "not requested"}
    if "reference" in policies and not (fit_rows.any() and val_rows.any()):
        policies.remove("reference")
        missing = " and ".join(name for name, rows in (("train", fit_rows), ("val", val_rows)) if not rows.any())
        reference_info = {"skipped": f"the logs have no rows in the bundle's {missing} split to fit it on"}
        notes.append(f"reference: {reference_info['skipped']}")
    routed = chosen.copy()
    if "tuned_rule_table" in policies or "reference" in policies:
        routed |= fit_rows
    if "reference" in policies:
        routed |= val_rows
    options = dict(catch_rate=config.catch_rate, cost=config.cost_model(), latency=config.latency_model())
    task = progress.add_task("routing through the SDK", total=int(routed.sum())) if progress else None
    advance = (lambda n: progress.advance(task, n)) if progress else None
    routed_rows = Rows.route(router, frame[routed], batch_size=config.batch_size, on_batch=advance)
    rows = routed_rows.subset(chosen[routed]).with_inferred_domains()
    accepted, roc, verdicts = acceptance(router, manifest, responses, config.split)
    if verdicts is not None:
        rows = rows.with_rejections(rejected_share_by_prompt(*verdicts, rows.prompts))
    fit = routed_rows.subset(fit_rows[routed])  # what the tuned rule table and the reference are fitted on
    if "tuned_rule_table" in policies:
        tuned = tune_rule_table(
            fit.n_tokens, fit.domains, fit.precisions, fit.q_edge, fit.q_cloud, step=config.rule_weight_step, **target
        )
        tuned_info = {**tuned.as_dict(), "target": target["target"]}
        if config.split in ("train", "all"):
            notes.append("the tuned rule table was fitted on the train rows, which this split includes")
    if "reference" in policies:
        started = time.perf_counter()
        reference = ReferencePolicy.fit(fit, routed_rows.subset(val_rows[routed]), **target)
        reference_info = {**reference.as_dict(), "fit_seconds": round(time.perf_counter() - started, 2)}
        if config.split != "test":
            notes.append(
                "the reference was fitted on the train rows and thresholded on the val rows: this split "
                "includes some of them"
            )
    fitted = dict(tuned=tuned, reference=reference)
    figures, curves = evaluate_policies(rows, policies, **fitted, **options)
    metrics = {
        "setup": _setup(config, manifest, data_report, frame, rows),
        "figures": figures,
        "calibration": calibration(rows, bins=config.calibration_bins),
        "breakdowns": breakdowns(rows, policies, **fitted, **options),
        "tuned_rule_table": tuned_info,
        "reference": reference_info,
        "novelty": familiarity(rows),
        "acceptance": accepted,
        "off_policy": traffic,
    }
    if policy is not None:
        metrics["rules"] = rules_effect(
            rows, policy, metadata=config.metadata, catch_rate=config.catch_rate, cost=options["cost"]
        )
    if accepted.get("rows"):
        accepted["assumption_check"] = assumption_check(rows, config.catch_rate)
    if config.leave_one_source_out:
        if train is None:
            raise ValueError("leave-one-source-out needs a way to train (the `train` argument)")
        metrics["leave_one_source_out"] = leave_one_source_out(
            frame,
            train=train,
            sources=config.holdout_sources,
            reference_target=target if reference else None,
            in_distribution={s: g.policies["learned"].apgr for s, g in metrics["breakdowns"]["source"].items()},
            batch_size=config.batch_size,
            progress=progress,
            **options,
        )
        if not metrics["leave_one_source_out"]:
            notes.append("leave-one-source-out skipped: the logs hold a single source")
    over_limit = int((rows.n_tokens > router.edge_context_tokens).sum())
    metrics["notes"] = notes + [
        "Every figure is an exact expectation (over fallback catches and random routing), not a sample.",
        f"{over_limit} evaluated prompts exceed the edge context limit ({router.edge_context_tokens} tokens): "
        "cloud-first at the learned operating point whatever their score; curves rank by score alone.",
    ]
    if roc is not None:
        accepted["roc"] = roc
    return Evaluation(metrics, curves)
