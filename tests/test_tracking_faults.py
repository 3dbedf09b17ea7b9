"""An unreachable tracking server (a closed loopback port) makes every registry command end within
a few seconds with one line that says the server cannot be reached and names its URI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pmoss.contracts.errors import PmossError
from pmoss.learn.tracking import TrackingUnreachable, check_reachable, timeout_s

BIN = Path(sys.executable).parent
CLOSED = "http://127.0.0.1:9"  # discard port: nothing listens on loopback
BUDGET_S = 2.0
STARTUP_S = 20.0  # interpreter + imports on a loaded 2-core machine; the old behaviour took 250 s


def _run(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": CLOSED, "PMOSS_TRACKING_TIMEOUT_S": str(BUDGET_S)}
    for k in [k for k in env if k.startswith("MLFLOW_HTTP_REQUEST_")]:
        del env[k]  # the bounds must come from pmoss, not from the caller
    start = time.monotonic()
    r = subprocess.run([BIN / "pmoss", *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    return r, time.monotonic() - start


@pytest.mark.parametrize("args", [["registry", "list"], ["registry", "rollback"], ["registry", "promote", "--eval", "eval.yaml"]])
def test_registry_commands_fail_fast(tmp_path, args):
    (tmp_path / "eval.yaml").write_text("machines: [intel-skx-4s]\nworkloads: [ycsb-c]\n")
    r, elapsed = _run(args, tmp_path)
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"tracking server {CLOSED} cannot be reached" in lines[0], r.stderr
    assert elapsed < BUDGET_S + STARTUP_S, elapsed


def test_check_reachable_spends_its_budget_then_names_the_server():
    start = time.monotonic()
    with pytest.raises(TrackingUnreachable, match=r"http://127.0.0.1:9 cannot be reached \(.*tries in"):
        check_reachable(CLOSED, 1.0)
    assert 0.5 < time.monotonic() - start < 3.0  # retried within the budget, not once and not forever
    check_reachable("sqlite:////nonexistent/x.db", 1.0)  # a local store needs no network


def test_timeout_is_configurable(monkeypatch):
    monkeypatch.setenv("PMOSS_TRACKING_TIMEOUT_S", "0.5")
    assert timeout_s() == 0.5
    monkeypatch.setenv("PMOSS_TRACKING_TIMEOUT_S", "soon")
    with pytest.raises(PmossError, match="PMOSS_TRACKING_TIMEOUT_S='soon'"):
        timeout_s()
    monkeypatch.setenv("PMOSS_TRACKING_TIMEOUT_S", "0")  # 0 is no timeout a connection can meet
    with pytest.raises(PmossError, match="must be > 0 seconds"):
        timeout_s()


def test_promote_checks_its_eval_set_before_the_registry(tmp_path):
    (tmp_path / "eval.yaml").write_text("machines: [intel-skx-4s]\nworkloads: [ycsb-c]\nruns: -2\n")
    r, _ = _run(["registry", "promote", "--eval", "eval.yaml"], tmp_path)
    assert r.returncode == 1 and "eval.yaml: field 'runs'" in r.stderr and "cannot be reached" not in r.stderr, r.stderr


def test_an_mlflow_error_is_one_line(tmp_path):
    """Errors MLflow raises itself (here: an unknown model) end as one line too, not a traceback."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    r = subprocess.run([BIN / "pmoss", "registry", "rollback", "--name", "nope"], capture_output=True, text=True, env=env, timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:") or "Traceback" in line]
    assert r.returncode == 1 and len(lines) == 1 and "name=nope not found" in lines[0], r.stderr


def test_a_fresh_store_is_created_quietly(tmp_path):
    """The first command on a new sqlite store creates its tables without MLflow's INFO lines
    ("Creating initial MLflow database tables..."): the demo's log holds what the run says."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow/mlflow.db"}
    (tmp_path / "mlflow").mkdir()
    r = subprocess.run([BIN / "pmoss", "registry", "list"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert (tmp_path / "mlflow/mlflow.db").exists() and r.stderr.strip().splitlines() == [f"error: pmoss-dt: no registered versions on {env['MLFLOW_TRACKING_URI']}"], r.stderr
