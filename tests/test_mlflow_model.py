"""MLflow as its users expect: the model logged in the run that trained it and registered from
there (git commit, dataset digest, params, metrics, a description saying why it is the candidate);
a pyfunc with a signature and an input example that answers schedule requests, served by
`mlflow models serve` on 127.0.0.1; a store a server wrote artifacts for gives a remedy, not
MLflow's riddle."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_learners import TINY, make_tokens
from test_registry import _bundle

from pmoss.learn.logged_model import RUN_FILE, dataset_digest, read_run_file
from pmoss.learn.train import TrainConfig, train
from pmoss.serve.registry import register, register_models


@pytest.fixture
def client(tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path}/mlflow/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)


def test_version_is_the_model_its_training_run_logged(tmp_path, client):
    data = make_tokens(tmp_path / "tok")
    train(data, tmp_path / "base", TrainConfig(**{**TINY, "max_steps": 2}), progress=False)
    run_file = read_run_file(tmp_path / "base")
    run = client.get_run(run_file["run_id"])
    assert run.data.tags["git_commit"] == run_file["git_commit"] and run.data.tags["algo"] == "dt"
    assert run.data.params["lr"] and "val/loss" in run.data.metrics
    (inp,) = run.inputs.dataset_inputs
    assert inp.dataset.name == "tok" and inp.dataset.digest == dataset_digest(data)[:36]
    model = client.get_logged_model(run_file["model_id"])
    assert model.source_run_id == run.info.run_id

    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"source": "sim", "n_cells": 1, "dt-base": {"vs_best": 1.05, "cells_ge_best": 1}}))
    versions, chosen, _ = register_models([f"dt-base={tmp_path / 'base'}"], "pmoss-dt", metrics)
    v = client.get_model_version("pmoss-dt", str(versions["dt-base"]))
    assert v.run_id == run.info.run_id  # registered from the training run, no copy in a register-* run
    assert v.tags["training_run"] == run.info.run_id and v.tags["eval.vs_best"] == "1.05"
    assert "dt-base is the 'candidate'" in v.description and "vs_best 1.05" in v.description
    assert client.get_logged_model(run_file["model_id"]).metrics[0].key.startswith("eval.")


def test_a_run_file_naming_a_run_this_store_lost_is_registered_anew(tmp_path, client):
    """mlflow/ removed and made anew (same URI): the bundle's run file names a run the store no
    longer has; the registry logs the bundle in a run of its own instead of failing."""
    from pmoss.learn.bundle import BUNDLE_FILE
    from pmoss.learn.tracking import default_tracking_uri
    from pmoss.contracts.checksum import file_digest

    model_dir = _bundle(tmp_path, "base")
    lost = {"run_id": "0" * 32, "tracking_uri": default_tracking_uri(), "git_commit": "test", "model_id": "m-lost",
            "bundle_sha256": file_digest(model_dir / BUNDLE_FILE), "model_uri": "models:/m-lost"}  # fmt: skip
    (model_dir / RUN_FILE).write_text(json.dumps(lost))
    version = register(model_dir, "pmoss-dt", None, None)
    run = client.get_run(client.get_model_version("pmoss-dt", str(version)).run_id)
    assert run.info.run_id != lost["run_id"] and run.info.run_name == "register-pmoss-dt"


def test_bundle_is_free_of_run_ids_and_the_run_file_is_ignored_by_dvc(tmp_path, client):
    import torch

    data = make_tokens(tmp_path / "tok")
    train(data, tmp_path / "m", TrainConfig(**{**TINY, "max_steps": 2}), progress=False)
    info = torch.load(tmp_path / "m" / "model.pt", weights_only=True)["info"]
    assert "mlflow_run_id" not in info and "git_commit" not in info
    repo = Path(__file__).resolve().parents[1]
    assert RUN_FILE in (repo / ".dvcignore").read_text().split()


def test_a_store_a_server_wrote_artifacts_for_names_the_remedy(tmp_path, client):
    from pmoss.learn.tracking import TrackingUnreachable

    client.create_experiment("pmoss-registry", artifact_location="mlflow-artifacts:/1")  # as `mlflow server` does
    with pytest.raises(TrackingUnreachable, match=r"MLFLOW_TRACKING_URI=http://HOST:PORT.*--no-serve-artifacts"):
        register(_bundle(tmp_path, "good"), "pmoss-dt", None, None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # ~20-40 s: the server imports MLflow and torch, loads the model
@pytest.mark.ci
def test_mlflow_models_serve_answers_schedule_requests(tmp_path, client):
    from pmoss.contracts.policies import generate
    from pmoss.contracts.schedule import Schedule
    from pmoss.contracts.workload import get_workload
    from pmoss.learn.pyfunc_io import snapshot_json
    from pmoss.sim import load_sim_machine, simulate

    version = register(_bundle(tmp_path, "good"), "pmoss-dt", None, None)
    client.set_registered_model_alias("pmoss-dt", "champion", str(version))
    from mlflow.models import get_model_info  # the version has a signature and an input example

    info = get_model_info(f"models:/pmoss-dt/{version}")
    assert [c["name"] for c in info.signature.inputs.to_dict()] == ["machine", "snapshot"] and info.saved_input_example_info

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/pmoss-dt@champion", "--env-manager", "local",
                               "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
                                                            # it execs `uvicorn` from PATH: the venv's, as `source .venv/bin/activate` gives
                                                            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})  # fmt: skip
    try:
        deadline = time.monotonic() + 180  # bounded: a server that never comes up fails the test
        while True:
            assert server.poll() is None, server.stdout.read().decode()[-3000:]
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5).status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert time.monotonic() < deadline, "mlflow models serve did not answer /ping in 180 s"
            time.sleep(1)
        m = load_sim_machine("intel-skx-4s")
        row = simulate(m, get_workload("ycsb-c"), "dense", generate("os-default", m, 32), seed=3)
        body = json.dumps({"dataframe_records": [{"machine": "intel-skx-4s", "snapshot": snapshot_json(row)}]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body, headers={"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(req, timeout=120).read())
        (pred,) = answer["predictions"]
        sched = Schedule.model_validate(json.loads(pred["schedule"])).validate_for(m)
        assert sched.kind == "learned" and sched.n_slices == 32
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)  # the server's own process group (uvicorn workers included)
            server.wait(timeout=30)
