"""A trained bundle's MLflow side: the run that made it carries the model, its dataset and code.

At the end of `pmoss train` (and `pmoss attach-critic`) the run that trained the bundle gets
- tags `git_commit` and `algo`, the dataset as an MLflow input (`log_input`: name, path, and the
  digest the tokenised data carries, docs/contracts.md), the params and metrics Lightning logged;
- the bundle as a pyfunc model `model` (serve/pyfunc_model.py: snapshot + machine in, schedule
  out, with a signature and an input example), for every policy (dt, bc, cql; not a lone critic,
  which proposes no schedule);
- and `MODEL_DIR/mlflow-run.json` says which run and model that was, so `pmoss registry register`
  registers that very model (a version linked to its training run) instead of logging a copy.

Why a file beside the bundle and not inside it: the bundle is a DVC output, and a run id (or the
git commit of the checkout that trained it) inside it made every fresh `dvc repro` of committed
params rewrite dvc.lock. The run file is left out of DVC's hashes (.dvcignore) and git; the
bundle holds only what the inputs determine, so the same inputs give the same bytes.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pmoss.contracts.io import atomic_write_text

RUN_FILE = "mlflow-run.json"
PYFUNC_CODE = Path(__file__).resolve().parents[1] / "serve" / "pyfunc_model.py"  # logged as models-from-code (no pickled object)
PIP_REQUIREMENTS = ["torch==2.13.0", "pmoss"]  # explicit: inferring them took 8.5 s (PITFALLS)
SCHEDULE_ALGOS = ("dt", "bc", "cql")  # policies: their bundles propose schedules


def read_run_file(model_dir: Path) -> dict[str, Any] | None:
    path = Path(model_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None  # a damaged provenance note: the registry logs the bundle anew instead


def dataset_digest(data: Path) -> str | None:
    """The content checksum the tokenised dataset carries (tokens.parquet's metadata), else None."""
    import pyarrow.parquet as pq

    from pmoss.contracts.checksum import CONTENT_KEY

    tokens = Path(data) / "tokens.parquet"
    if not tokens.is_file():
        return None
    meta = pq.read_schema(tokens).metadata or {}
    return meta.get(CONTENT_KEY, b"").decode() or None


def log_dataset(mlflow: Any, data: Path, context: str = "training") -> None:
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    with warnings.catch_warnings():  # "can be interpreted in multiple ways": both are the local-file source
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(str(Path(data).resolve()))
    mlflow.log_input(MetaDataset(source, name=Path(data).name, digest=(dataset_digest(data) or "unknown")[:36]), context=context)


def log_trained_model(run_id: str, model_dir: Path, data: Path | None, git_commit: str, tags: dict[str, str] | None = None, *,
                      write_run_file: bool = True, force_model: bool = False) -> dict[str, Any]:  # fmt: skip
    """Log `model_dir/model.pt` (and its provenance) into the run `run_id` (the pyfunc model for a
    policy, or with `force_model`); write the run file unless told not to. Returns the record."""
    from pmoss.learn.bundle import BUNDLE_FILE, load_bundle
    from pmoss.learn.tracking import default_tracking_uri, mlflow_client, without_mlflow_prints

    mlflow = mlflow_client()
    bundle_path = Path(model_dir) / BUNDLE_FILE
    bundle = load_bundle(bundle_path)
    algo = str(bundle.info.get("algo", "dt"))
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    record: dict[str, Any] = {"run_id": run_id, "tracking_uri": default_tracking_uri(), "git_commit": git_commit,
                              "bundle_sha256": _sha256(bundle_path), "model_uri": None, "model_id": None}  # fmt: skip
    with mlflow.start_run(run_id=run_id), without_mlflow_prints():
        mlflow.set_tags({"git_commit": git_commit, "algo": algo, **(tags or {})})
        if data is not None:
            log_dataset(mlflow, data)
        if algo in SCHEDULE_ALGOS or force_model:
            from pmoss.learn.pyfunc_io import example_input, signature

            example = example_input(bundle)
            # "Validating input example against model signature": an INFO line per training stage
            logging.getLogger("mlflow.pyfunc").setLevel(logging.WARNING)
            with _no_type_hint_advice(), warnings.catch_warnings():
                # a model of a real host's data has no simulated example: MLflow's advice says nothing new
                warnings.filterwarnings("ignore", message=".*input example was not provided.*", category=UserWarning)
                info = mlflow.pyfunc.log_model(name="model", python_model=str(PYFUNC_CODE), artifacts={"bundle": str(bundle_path)},
                                               signature=signature(), input_example=example, pip_requirements=PIP_REQUIREMENTS)  # fmt: skip
            record.update(model_uri=info.model_uri, model_id=info.model_id)
    if write_run_file:
        atomic_write_text(Path(model_dir) / RUN_FILE, json.dumps(record, indent=1) + "\n")
    return record


def log_attached_model(output: Path, policy: Path, critics: list[Path], params: dict[str, Any]) -> dict[str, Any]:
    """`pmoss attach-critic`'s bundle is made, not trained: a run of its own ("attach-critic-NAME")
    holds its params, the runs of its policy and critic(s) as tags, and the combined model."""
    from pmoss.learn.bundle import load_bundle
    from pmoss.learn.tracking import ensure_experiment, mlflow_client

    mlflow = mlflow_client()
    sources = {"policy_run": (read_run_file(policy) or {}).get("run_id", "-"),
               "critic_runs": ",".join((read_run_file(c) or {}).get("run_id", "-") for c in critics)}  # fmt: skip
    with mlflow.start_run(experiment_id=ensure_experiment("pmoss"), run_name=f"attach-critic-{Path(output).name}") as run:
        mlflow.log_params(params)
    data = load_bundle(policy).info.get("data")
    return log_trained_model(run.info.run_id, Path(output), Path(data) if data else None, git_commit(), tags=sources)


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@contextmanager
def _no_type_hint_advice() -> Iterator[None]:
    """MLflow advises "Add type hints to the `predict` method" each time it loads the model code
    (one line at the end of every training stage). The signature is given (pyfunc_io.signature)
    instead: type hints would make MLflow infer a second one. A warnings filter cannot drop the line
    (MLflow sets its own "once" filter around that check), so its helper is muted for this call."""
    from mlflow.pyfunc.utils import data_validation

    advise = data_validation.color_warning
    data_validation.color_warning = lambda *args, **kwargs: None
    try:
        yield
    finally:
        data_validation.color_warning = advise


def _sha256(path: Path) -> str:
    from pmoss.contracts.checksum import file_digest

    return file_digest(path, "sha256")
