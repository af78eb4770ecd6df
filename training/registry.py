"""Load a Router straight from the MLflow model registry (training extra only: needs mlflow)."""

from __future__ import annotations

from pathlib import Path


def router_from_mlflow(
    model_uri: str,
    *,
    tracking_uri: str = "sqlite:///mlruns/mlflow.db",
    dest: str | Path | None = None,
    strict: bool = True,
):
    """`router_from_mlflow("models:/edge-cloud-router@champion")`: download that version's
    bundle (to `dest`, or a temporary folder) and load it with serving.Router."""
    import mlflow

    from serving import Router

    mlflow.set_tracking_uri(tracking_uri)
    local = mlflow.artifacts.download_artifacts(
        artifact_uri=model_uri, dst_path=str(dest) if dest is not None else None
    )
    return Router.load(Path(local), strict=strict)
