"""The model registry on MLflow: register trained bundles, fetch, list, roll back (the promotion gate is gate.py).

A version carries the bundle (weights + config + normalisation stats) as an MLflow pyfunc model,
and as tags: the model config, the dataset hash it was trained on, the git commit, and its
evaluation metrics. New versions get the alias `candidate`. Works against the sqlite store under
`mlflow/` (default) or any MLflow server named by MLFLOW_TRACKING_URI.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pmoss.contracts.errors import PmossError, brief
from pmoss.learn.bundle import BUNDLE_FILE, load_bundle
from pmoss.learn.tracking import ensure_experiment, mlflow_client

MODEL_NAMES = {"dt": "pmoss-dt", "bc": "pmoss-bc", "cql": "pmoss-cql"}
app = typer.Typer(help="Register and list model versions (MLflow registry).", no_args_is_help=True)


class RegistryError(PmossError):
    pass


def file_md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pyfunc_class():
    import mlflow.pyfunc

    class ScheduleModel(mlflow.pyfunc.PythonModel):
        """pyfunc wrapper: `load_context` loads the bundle; `predict` is not the serving path."""

        def load_context(self, context: Any) -> None:
            self.bundle = load_bundle(Path(context.artifacts["bundle"]))

        def predict(self, context, model_input, params=None):  # no hints: MLflow would try to infer a schema
            return {"config": asdict(self.bundle.config)}

    return ScheduleModel


def register(model_dir: Path, name: str, dataset: Path | None, metrics: Path | None, alias: str = "candidate") -> int:
    """Log `model_dir/model.pt` as a new version of `name`, tag it, point `alias` at it; returns the version."""
    mlflow = mlflow_client()
    bundle = load_bundle(model_dir)
    tags: dict[str, str] = {"git_commit": str(bundle.info.get("git_commit", "unknown")), "algo": str(bundle.info.get("algo", "dt")),
                            "model_config": json.dumps(asdict(bundle.config)), "source": "sim"}  # fmt: skip
    if dataset is not None:
        tags["dataset"] = str(dataset)
        tags["dataset_md5"] = file_md5(Path(dataset) / "tokens.parquet")
    eval_metrics = json.loads(Path(metrics).read_text()) if metrics else {}
    if eval_metrics:
        tags["eval_metrics"] = json.dumps(eval_metrics.get("geomean", {}))
    with mlflow.start_run(experiment_id=ensure_experiment("pmoss-registry"), run_name=f"register-{name}") as run:
        mlflow.set_tags(tags)
        mlflow.log_dict(asdict(bundle.stats), "normalisation_stats.json")
        for m, vals in eval_metrics.get("geomean", {}).items():
            mlflow.log_metrics({f"{m}.{k}": float(v) for k, v in vals.items()})
        mlflow.pyfunc.log_model(name="model", python_model=_pyfunc_class()(), artifacts={"bundle": str(Path(model_dir) / BUNDLE_FILE)},
                                pip_requirements=["torch==2.13.0", "pmoss"])  # fmt: skip
        version = mlflow.register_model(f"runs:/{run.info.run_id}/model", name)
    client = mlflow.MlflowClient()
    for k, v in tags.items():
        client.set_model_version_tag(name, version.version, k, v)
    client.set_registered_model_alias(name, alias, version.version)
    return int(version.version)


def fetch(uri: str) -> Path:
    """Download a registered model (`models:/NAME@ALIAS` or `models:/NAME/VERSION`) and return its bundle path."""
    mlflow = mlflow_client()
    try:
        local = Path(mlflow.artifacts.download_artifacts(uri))
    except mlflow.exceptions.MlflowException as e:
        raise RegistryError(f"{uri}: cannot load from the registry ({_first_line(e.message)})") from e
    found = sorted(local.rglob(BUNDLE_FILE))
    if not found:
        raise RegistryError(f"{uri}: the version has no {BUNDLE_FILE}")
    return found[0]


@app.command("register")
def register_command(
    model_dir: Annotated[Path, typer.Argument(help="Model directory holding model.pt.")],
    name: Annotated[str, typer.Option(help="Registered model name.")] = "pmoss-dt",
    dataset: Annotated[Optional[Path], typer.Option(help="The tokenised dataset it was trained on (hashed into a tag).")] = None,
    metrics: Annotated[Optional[Path], typer.Option(help="Evaluation metrics.json to attach.")] = None,
    alias: Annotated[str, typer.Option(help="Alias to point at the new version.")] = "candidate",
    receipt: Annotated[Optional[Path], typer.Option(help="Write {name, version, alias} JSON here (a DVC output).")] = None,
) -> None:
    """Register a trained model as a new version and move an alias (default `candidate`) to it."""
    version = register(model_dir, name, dataset, metrics, alias)
    if receipt:
        receipt.parent.mkdir(parents=True, exist_ok=True)
        receipt.write_text(json.dumps({"name": name, "version": version, "alias": alias}) + "\n")
    typer.echo(f"registered {name} version {version} (alias {alias})")


@app.command("list")
def list_command(name: Annotated[str, typer.Option(help="Registered model name.")] = "pmoss-dt") -> None:
    """List the versions of a registered model with their aliases."""
    mlflow = mlflow_client()
    client = mlflow.MlflowClient()
    versions = client.search_model_versions(f"name='{name}'")
    if not versions:
        raise RegistryError(f"{name}: no registered versions on {mlflow.get_tracking_uri()}")
    aliases: dict[str, list[str]] = {}  # search results carry no aliases on a server: ask the model
    for alias, version in client.get_registered_model(name).aliases.items():
        aliases.setdefault(str(version), []).append(alias)
    for v in sorted(versions, key=lambda v: int(v.version)):
        tags = client.get_model_version(name, v.version).tags
        typer.echo(f"{name} v{v.version}  aliases={','.join(sorted(aliases.get(str(v.version), []))) or '-'}  commit={tags.get('git_commit', '?')[:10]}  "
                   f"decision={tags.get('promotion_decision', '-')}  eval={tags.get('eval_metrics', '-')}")


# ---- promotion gate ------------------------------------------------------------------------------
CHAMPION, CANDIDATE = "champion", "candidate"
HISTORY_TAG = "champion_history"  # JSON list of earlier champion versions, newest last


def _version(client: Any, name: str, alias: str) -> Any | None:
    import mlflow

    try:
        return client.get_model_version_by_alias(name, alias)
    except mlflow.exceptions.MlflowException as e:
        if e.error_code in ("INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST"):  # no such alias / model
            return None
        raise RegistryError(f"{name}@{alias}: the registry did not answer ({_first_line(e.message)})") from e


def _first_line(message: str) -> str:
    """MLflow's messages carry the HTTP library's chain of causes and advice: keep the first sentence."""
    return brief(Exception(message or "no message"), 200)


def rollback(name: str) -> str:
    """Point `champion` back at the previous champion; returns that version."""
    client = mlflow_client().MlflowClient()
    history = json.loads(client.get_registered_model(name).tags.get(HISTORY_TAG, "[]"))
    if not history:
        raise RegistryError(f"{name}: no previous champion to roll back to")
    previous = history.pop()
    client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(history))
    client.set_registered_model_alias(name, CHAMPION, previous)
    return previous


@app.command("rollback")
def rollback_command(name: Annotated[str, typer.Option(help="Registered model name.")] = "pmoss-dt") -> None:
    """Restore the previous champion."""
    typer.echo(f"{name}: champion is version {rollback(name)} again")
