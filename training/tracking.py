"""MLflow: one run per training, the bundle logged and registered as a model version, and
an evaluation's figures logged under the run of the bundle it evaluated.

Every run records the host and process that own it. A run still RUNNING whose process is
gone (a killed training) is marked FAILED when the next training starts on that store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import time
from pathlib import Path

from training.locks import file_lock
from training.options import flat

log = logging.getLogger(__name__)
OWNER_TAG = "router.owner"  # "host:pid" of the process running the run


def _flatten(prefix: str, value, out: dict) -> dict:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = float(value)
    return out


def flat_metrics(metrics: dict) -> dict[str, float]:
    """{'test': {'learned': {'apgr': 0.6}}} -> {'test.learned.apgr': 0.6}; NaN dropped (MLflow rejects it)."""
    return {k: v for k, v in _flatten("", metrics, {}).items() if v == v}


def _alive(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's run: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_abandoned_runs(client, experiment_id: str) -> list[str]:
    """Mark FAILED the RUNNING runs of this host whose process no longer exists."""
    failed = []
    for run in client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'"):
        owner = run.data.tags.get(OWNER_TAG)
        if owner and not _alive(owner):
            client.set_terminated(run.info.run_id, status="FAILED")
            client.set_tag(run.info.run_id, "router.failure", f"process {owner} ended without finishing the run")
            failed.append(run.info.run_id)
    if failed:
        log.warning("marked %d abandoned MLflow run(s) FAILED: %s", len(failed), ", ".join(failed))
    return failed


def _store_lock(tracking_uri: str):
    """A lock beside a SQLite store (other stores serialize themselves)."""
    if not tracking_uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    store = Path(tracking_uri.removeprefix("sqlite:///"))
    return file_lock(store.with_name(store.name + ".lock"), what=f"MLflow store {store}")


@contextlib.contextmanager
def tracked_run(*, tracking_uri: str, artifact_root: str, experiment: str, run_name: str | None = None):
    """Start an MLflow run in `experiment` (created with artifacts under `artifact_root`)."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    with _store_lock(tracking_uri):  # creating a store's tables or an experiment is not safe to race
        found = mlflow.get_experiment_by_name(experiment)
        if found is None:
            root = Path(artifact_root).resolve()
            root.mkdir(parents=True, exist_ok=True)
            experiment_id = mlflow.create_experiment(experiment, artifact_location=root.as_uri())
        else:
            experiment_id = found.experiment_id
        fail_abandoned_runs(mlflow.tracking.MlflowClient(), experiment_id)
    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=run_name, tags={OWNER_TAG: f"{socket.gethostname()}:{os.getpid()}"}) as run:
        yield run


def log_training(config, data_report: dict, metrics: dict) -> None:
    """The active run's parameters, data fingerprint, config (reusable as CONFIG=), metrics, rejects."""
    import mlflow

    mlflow.log_params({k: str(v)[:500] for k, v in flat(config.to_dict()).items()})  # by dotted key
    mlflow.log_dict(data_report, "data_fingerprint.json")
    mlflow.log_dict(config.to_dict(), "train_config.json")
    mlflow.log_metrics(flat_metrics(metrics))
    if Path(data_report["rejects_file"]).exists():
        mlflow.log_artifact(data_report["rejects_file"])


def register_bundle(bundle: Path, *, model_name: str, run_id: str) -> str:
    """Log the bundle folder under the run and register it as a new version of `model_name`."""
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.log_artifacts(str(bundle), artifact_path="bundle")
    client = MlflowClient()
    try:
        client.get_registered_model(model_name)
    except mlflow.exceptions.MlflowException:
        client.create_registered_model(model_name, description="Edge/cloud routing bundle (ONNX + manifest)")
    source = f"{mlflow.get_artifact_uri('bundle')}"
    version = client.create_model_version(model_name, source=source, run_id=run_id)
    return str(version.version)


def log_evaluation(manifest, metrics: dict, files: list[Path]) -> tuple[str | None, str | None]:
    """An evaluation's metrics (flattened, `evaluate.<split>.` prefix) and files under the
    bundle's own run: (run id, None), or (None, why not) when that run cannot be found."""
    run_id, uri = manifest.mlflow.get("run_id"), manifest.mlflow.get("tracking_uri")
    if not run_id or not uri:
        return None, "the bundle's manifest names no MLflow run"
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return None, f"tracking store {uri} does not exist here (a bundle from elsewhere?)"
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        client.get_run(run_id)
    except Exception as exc:  # MlflowException for an unknown run, or an unreadable store
        return None, f"run {run_id} not found in {uri}: {exc}"
    view = {
        **metrics.get("figures", {}),
        **{k: v for k, v in metrics.items() if k not in ("setup", "notes", "figures")},
    }
    flat = flat_metrics({f"evaluate.{metrics['setup']['split']}": view})
    stamp = int(time.time() * 1000)
    items = [Metric(re.sub(r"[^\w\-. /:]", "_", k), v, stamp, 0) for k, v in flat.items()]
    for start in range(0, len(items), 1000):  # MLflow caps a batch at 1000 metrics
        client.log_batch(run_id, metrics=items[start : start + 1000])
    for path in files:
        client.log_artifact(run_id, str(path), artifact_path="evaluation")
    return run_id, None
