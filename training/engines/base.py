"""What every engine shares: the prepared rows, the `Fitted` result, and the finish.

`train(config)` runs the configured engine's fit, then `finish`: fallback thresholds on the
validation scores, figures of both splits, the manifest, the bundle (written and verified
in a temporary folder, then moved into place), the parity check against the SDK, and the
MLflow run with its registered model version. Last, `train` writes `<reports_dir>/run.json`:
the run's figures and what it was made from, read before it started (training.provenance).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluation.figures import SplitSummary
from evaluation.rows import Rows
from serving.bundle._manifest import Limits, Manifest, ScoreSpec
from training.config import TARGET_OPTIONS, TrainConfig
from training.fitted import Fitted
from training.held_out import Splits, bundle_files, fit_held_out_stages, with_learned_zones
from training.sampling import training_share

PARITY_TOLERANCE = 1e-5
PARITY_BATCH = 500  # test rows the SDK scores at a time in the parity check


@dataclass
class TrainResult:
    bundle: Path
    run_id: str
    model_version: str
    metrics: dict
    timings: dict
    manifest: Manifest
    test: Rows  # the test split with the training pipeline's scores

    def summary(self, split: str = "test") -> SplitSummary:
        """The figures the run kept of `split` ("test", or "val"), typed."""
        return SplitSummary.from_dict(self.metrics[split])

    @property
    def held_out(self):
        """The test rows as a DataFrame: request_id, prompt, precision, score."""
        import pandas as pd

        columns = {"request_id": "request_ids", "prompt": "prompts", "precision": "precisions", "score": "scores"}
        return pd.DataFrame({name: getattr(self.test, field) for name, field in columns.items()})


def split_and_label(frame, config: TrainConfig):
    """The rows with their split (prompt hash) and cloud-needed label, for either engine."""
    from data.prepare import assign_splits

    return frame.assign(
        split=assign_splits(frame["prompt"], **config.split.hashed),
        label=label_of(frame, config),
    )


def label_of(frame, config: TrainConfig) -> np.ndarray:
    """Each row's cloud-needed label (training.labels)."""
    from training.labels import cloud_needed

    labels = cloud_needed(frame["edge_quality"], frame["cloud_quality"], **vars(config.label))
    return np.asarray(labels, dtype=np.int64)


def note_training_sample(console, report: dict, config: TrainConfig, fraction: float, kept: int | None = None) -> None:
    """Record (report["training_sample"]) and say how many training prompts the fit reads
    when `max_train_rows` cuts them."""
    if fraction >= 1.0:
        return
    expected = report["rows"] * training_share(config)
    report["training_sample"] = {
        "max_train_rows": config.split.max_train_rows,
        "fraction": fraction,
        "rows": kept if kept is not None else round(expected * fraction),
    }
    console.print(
        f"[bold]training sample[/]: {'about ' if kept is None else ''}"
        f"{report['training_sample']['rows']} of ~{round(expected)} training prompts "
        f"(split.max_train_rows={config.split.max_train_rows}, chosen by prompt hash)"
    )


def print_logs(console, report: dict) -> None:
    """One line about the logs that were read."""
    where = f" in {report['units']} partitions" if "units" in report else ""
    console.print(
        f"[bold]logs[/]: {report['rows']} prompts{where} from {report['rows_per_source']}, "
        f"{report['rejected']} rejected (see {report['rejects_file']}), "
        f"{report['duplicates_merged']} duplicates merged"
    )


def split_figures(config: TrainConfig, splits: Splits, thresholds: dict) -> dict[str, SplitSummary]:
    """Validation and test figures of the learned router (zones as the SDK gives them,
    unfamiliar prompts included) and the hand rule table, on the held-out rows `splits`."""
    from evaluation.policies import summary

    return {
        name: dataclasses.replace(
            summary(with_learned_zones(config, rows, thresholds), catch_rate=config.routing.fallback_catch_rate),
            unfamiliar_share=float(rows.unfamiliar.mean()) if rows.unfamiliar is not None else None,
        )
        for name, rows in splits.items()
    }


def _calibration_section(head) -> dict:
    """A head's manifest calibration: its parameters, whether the graph applies them, and
    the lexical blend the graph computes after them (for readers; the SDK runs the graph)."""
    from training.export import calibration_in_model

    section = {**head.calibration, "in_model": calibration_in_model(head.calibration)}
    if head.blend is not None:
        section["lexical_blend"] = head.blend.as_dict()
    return section


def check_parity(folder: Path, prompts, precisions, expected: np.ndarray, *, public_key=None) -> float:
    """Largest |SDK - training| over these rows, the SDK reading the bundle from raw text (signature
    verified when a key is given): each prompt's score, or an N-endpoint bundle's [n, N]
    probabilities; RuntimeError above PARITY_TOLERANCE."""
    from serving.bundle._bundle import read_bundle
    from serving.scoring._scorer import Scorer

    scorer = Scorer(read_bundle(folder, public_key=public_key))
    score = (lambda p, q: scorer.expected(p, q)[0]) if scorer.endpoints else scorer.scores
    # In batches: the graph's temporaries grow with the batch times its longest prompt (the
    # embedding's gathered [batch, tokens, width] rows alone: ~0.3-0.6 GB for 5,000 rows of
    # 512 tokens), the largest of the training's peaks below a million rows (make scale).
    batches = [
        (list(prompts[a : a + PARITY_BATCH]), list(precisions[a : a + PARITY_BATCH]))
        for a in range(0, len(expected), PARITY_BATCH)
    ]
    sdk = np.concatenate([np.zeros((0, *np.shape(expected)[1:]))] + [score(*batch) for batch in batches])
    parity = float(np.max(np.abs(sdk - expected))) if len(expected) else 0.0
    if parity > PARITY_TOLERANCE:
        raise RuntimeError(
            f"bundle scores differ from the training pipeline by {parity:.2e} "
            f"(> {PARITY_TOLERANCE}); the bundle was not written"
        )
    return parity


@contextlib.contextmanager
def checked_bundle(path, files: dict, manifest: Manifest, rows, expected, acceptance, answers, *, signing_key=None):
    """The bundle written in its temporary folder (training.writer) and checked as a pinned SDK loads
    it: its scores of `rows` (prompts, precisions) from raw text must be `expected` (check_parity),
    its acceptance check's probabilities the trained one's. Yields (the staged bundle, both
    parities) for the caller to publish."""
    from training.acceptance import check_acceptance_parity
    from training.writer import staged_bundle

    signing_key = Path(signing_key) if signing_key else None
    public_key = None  # the signing key's public half: the parity check loads the bundle as a pinned SDK would
    if signing_key is not None:
        from cryptography.hazmat.primitives import serialization

        public_key = serialization.load_pem_private_key(signing_key.read_bytes(), password=None).public_key()
    with staged_bundle(Path(path), files, manifest, signing_key=signing_key) as staged:
        parity = check_parity(staged.folder, *rows, expected, public_key=public_key)
        yield staged, parity, check_acceptance_parity(staged.folder, acceptance, answers, public_key=public_key)


def finish(config: TrainConfig, fitted: Fitted, timings: dict, *, cv=None) -> TrainResult:
    """Thresholds, figures, verified bundle and MLflow registration (module doc)."""
    import mlflow

    from serving.monitoring._drift import DRIFT_REFERENCE_FILE
    from training.drift_reference import drift_reference
    from training.export import heads_to_onnx
    from training.stages import StageClock, metrics_of
    from training.tracking import log_training, register_bundle, tracked_run

    clock = StageClock(timings)
    held_out = fit_held_out_stages(config, fitted, clock)
    acceptance, thresholds = held_out.acceptance, held_out.thresholds
    reference, novelty = held_out.reference, held_out.novelty
    accepted = {k: acceptance.section[k] for k in ("cross_fitted", "test") if k in acceptance.section}
    # Cross-fitted: the folds' means as "test" (cv.summary() has every interval), the out-of-fold rows as
    # "val" (the refit's own rows are in sample and give no figure).
    summaries = split_figures(config, held_out.splits if cv is None else {"val": held_out.splits["val"]}, thresholds)
    if cv is not None:
        from training.crossval import headline_means

        summaries = {"test": headline_means(cv), **summaries}
    metrics = {
        **{split: s.as_dict() for split, s in summaries.items()},
        **({"cv": cv.summary()} if cv is not None else {}),
        "trees": {h.name: h.booster.num_trees() for h in fitted.heads},
        "learning_rate": {h.name: float(h.booster.params["learning_rate"]) for h in fitted.heads},
        "heads": "shared" if any(h.side is not None for h in fitted.heads) else "separate",
        **{
            key: {h.name: getattr(h.blend, field) for h in fitted.heads}
            for key, field in (("lexical_tree_weight", "tree_weight"), ("lexical_stack", "stack"))
            if any(h.blend is not None and (h.blend.stack is None) == (field == "tree_weight") for h in fitted.heads)
        },
        **({"acceptance": accepted} if accepted else {}),
        **fitted.notes,
    }
    clock.begin("mlflow")
    with tracked_run(
        tracking_uri=config.mlflow.tracking_uri,
        artifact_root=config.mlflow.artifact_root,
        experiment=config.mlflow.experiment,
    ) as mlrun:
        run_id = mlrun.info.run_id
        clock.begin("export_parity")
        trees, outputs = heads_to_onnx(fitted.heads, len(fitted.plan.spec.model_feature_names))
        files, novelty = bundle_files(
            fitted.plan, trees, reference, novelty, acceptance, with_encoder=config.bundle.encoder
        )
        manifest = Manifest(  # serving.bundle._manifest, without its file table
            model_version=f"{config.mlflow.registered_model}@run:{run_id[:12]}",
            feature_spec=fitted.plan.spec,
            created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            encoder={"tier": config.features.tier, "key": fitted.plan.built.key},
            score=ScoreSpec(fitted.objective, tuple(h.name for h in fitted.heads), tuple(outputs)),
            # in_model: the trees already output the calibrated probability (training.export)
            calibration={h.name: _calibration_section(h) for h in fitted.heads},
            thresholds=thresholds,
            target={"kind": config.routing.target, **{k: getattr(config.routing, k) for k in TARGET_OPTIONS}},
            label={"margin_binary": config.label.margin_binary, "margin_graded": config.label.margin_graded},
            # How rows were split, so evaluation can find the rows this model never saw.
            # cv_folds > 0: the bundle was fitted on every row, and no split of these logs is unseen.
            split={**config.split.hashed, "cv_folds": config.split.cv_folds},
            limits=Limits(edge_context_tokens=config.routing.edge_context_tokens),
            novelty=novelty,
            acceptance=acceptance.section,
            metrics={k: metrics[k] for k in ("test", "val", "cv") if k in metrics},
            data={k: v for k, v in fitted.data_report.items() if k != "paths"},
            training={"engine": config.engine.name},
            mlflow={"run_id": run_id, **{k: getattr(config.mlflow, k) for k in ("tracking_uri", "registered_model")}},
        )
        with clock.span("drift_reference"):  # serving.monitoring._drift: what the bundle's traffic looked like
            files[DRIFT_REFERENCE_FILE] = drift_reference(config, held_out, manifest.model_version).to_bytes()
        # The bundle must score exactly like the pipeline that trained it, from raw text.
        test, checked = held_out.splits["test"], slice(0, config.bundle.parity_rows)
        parity = ((test.prompts[checked], test.precisions[checked]), test.scores[checked], acceptance, fitted.responses)
        with checked_bundle(
            config.bundle.path, files, manifest, *parity, signing_key=config.bundle.signing_key
        ) as done:
            staged, metrics["parity_max_abs_diff"], metrics["acceptance_parity_max_abs_diff"] = done
            clock.begin("mlflow")
            staged.publish()  # still under the bundle's lock: what is registered is what was checked
            log_training(config, fitted.data_report, metrics)
            version = register_bundle(staged.folder, model_name=config.mlflow.registered_model, run_id=run_id)
    clock.end_run()
    mlflow.log_metrics(metrics_of(timings), run_id=run_id)
    return TrainResult(
        Path(config.bundle.path), run_id, version, metrics, timings, staged.manifest, held_out.splits["test"]
    )


def train(config: TrainConfig, *, console=None) -> TrainResult:
    """`make train`: the configured engine, then the shared finish."""
    from rich.console import Console

    from training.engines import get_engine
    from training.provenance import provenance, write_run
    from training.stages import run_timings

    console = console or Console()
    timings = run_timings()
    made_from = provenance(config)  # before the run: an edit made while it trains is not what it trained
    if config.split.cv_folds:
        from training.crossval import cross_fit

        cv, fitted = cross_fit(config, console=console, timings=timings)
        result = finish(config, fitted, timings, cv=cv)
    else:
        result = finish(config, get_engine(config.engine.name).fit(config, console, timings), timings)
    write_run(config, made_from, result.bundle.resolve(), result.run_id, result.metrics)
    return result
