"""MLflow: one run per training, bundle logged as artifacts and registered as a model version."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path

log = logging.getLogger(__name__)


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


@contextlib.contextmanager
def tracked_run(*, tracking_uri: str, artifact_root: str, experiment: str, run_name: str | None = None):
    """Start an MLflow run in `experiment` (created with artifacts under `artifact_root`)."""
    import mlflow

    if tracking_uri.startswith("sqlite:///"):
        Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(tracking_uri)
    if mlflow.get_experiment_by_name(experiment) is None:
        root = Path(artifact_root).resolve()
        root.mkdir(parents=True, exist_ok=True)
        mlflow.create_experiment(experiment, artifact_location=root.as_uri())
    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=run_name) as run:
        yield run


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
