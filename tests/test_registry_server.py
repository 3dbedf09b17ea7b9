"""The registry CLI against a real `mlflow server` on loopback (MLFLOW_TRACKING_URI=http://...)."""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_registry import _bundle


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen(
        [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path}/server.db", "--artifacts-destination", str(tmp_path / "artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("mlflow server did not come up on loopback in 90 s")
    yield uri
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.ci
def test_registry_cli_on_mlflow_server(tmp_path, server):
    env = {**os.environ, "MLFLOW_TRACKING_URI": server}
    pmoss = lambda *a: subprocess.run([sys.executable, "-m", "pmoss", *a], capture_output=True, text=True, env=env, timeout=300)  # noqa: E731
    good, bad = _bundle(tmp_path, "good"), _bundle(tmp_path, "bad", worse=True)
    eval_cfg = tmp_path / "eval.yaml"
    eval_cfg.write_text("machines: [intel-skx-4s]\nworkloads: [ycsb-c]\nn_slices: 32\nruns: 1\nbaselines: [sn-grouped]\n")
    r = pmoss("registry", "register", str(good))
    assert r.returncode == 0 and "version 1" in r.stdout, r.stderr
    assert pmoss("registry", "promote", "--eval", str(eval_cfg)).returncode == 0
    assert pmoss("registry", "register", str(bad)).returncode == 0
    refused = pmoss("registry", "promote", "--eval", str(eval_cfg))
    assert refused.returncode == 2 and "refused" in refused.stdout
    listing = pmoss("registry", "list")
    rows = listing.stdout.splitlines()
    assert listing.returncode == 0 and any(re.search(r"\b1\b.*champion", r) for r in rows) and any(re.search(r"\b2\b.*candidate", r) for r in rows), listing.stdout
    assert not (tmp_path / "mlflow").exists()  # nothing went to a local store
