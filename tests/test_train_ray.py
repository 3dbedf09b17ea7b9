"""`pmoss train --ray`: the same Lightning learner under Ray Train with 2 CPU workers on a local cluster."""

from __future__ import annotations

import numpy as np
import pytest
from test_learners import TINY, make_tokens

from pmoss.learn.bundle import load_bundle
from pmoss.learn.train import TrainConfig


@pytest.mark.slow  # ~50 s on 2 cores (ray.init, two worker processes each importing Lightning): too slow for `ci`
def test_ray_two_cpu_workers_train_a_bundle(tmp_path, monkeypatch, capfd):
    ray = pytest.importorskip("ray")
    from pmoss.learn.ray_train import train_on_ray

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    data = make_tokens(tmp_path / "tok")
    # with its dashboard, as train_on_ray starts one: Train V2's placement-group cleaner polls the State API
    ray.init(num_cpus=2, object_store_memory=256 * 2**20, logging_level="WARNING")
    try:
        bundle = train_on_ray(data, tmp_path / "model", TrainConfig(**{**TINY, "max_steps": 4}), algo="dt", workers=2, quiet=True)
    finally:
        ray.shutdown()
    out = capfd.readouterr()
    noise = out.out + out.err
    # was: a warning a second ("Failed to query Ray Train Controller actor state") and GetTimeoutError tracebacks
    assert "Failed to query Ray Train Controller" not in noise and "GetTimeoutError" not in noise, noise[-3000:]
    assert "Reporting training result" not in noise and "Started training worker group" not in noise  # quiet: no INFO lines
    again = load_bundle(tmp_path / "model")
    assert again.info["ray_workers"] == 2 and again.info["algo"] == "dt"
    assert np.isfinite(bundle.info["train_metrics"]["train/loss"])
    assert (tmp_path / "model" / "checkpoints" / "last.ckpt").is_file()  # resumable like a local run
