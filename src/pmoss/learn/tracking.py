"""Where MLflow runs and models live: the embedded sqlite store under `mlflow/`, or a server.

MLFLOW_TRACKING_URI overrides the default. With a sqlite store, artifacts go to `mlflow/artifacts`
next to the database (not to ./mlruns in whatever directory a command ran from).
"""

from __future__ import annotations

import os
from pathlib import Path


def default_tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path('mlflow/mlflow.db').resolve()}"


def artifact_location() -> str | None:
    uri = default_tracking_uri()
    if not uri.startswith("sqlite:///"):
        return None  # a server decides where its artifacts go
    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    return (db.parent / "artifacts").resolve().as_uri()


def mlflow_client():
    """The mlflow module, pointed at the tracking store and registry."""
    import mlflow

    mlflow.set_tracking_uri(default_tracking_uri())
    mlflow.set_registry_uri(default_tracking_uri())
    return mlflow


def ensure_experiment(name: str) -> str:
    mlflow = mlflow_client()
    exp = mlflow.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    return mlflow.create_experiment(name, artifact_location=artifact_location())
