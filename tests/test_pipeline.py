"""The whole pipeline wired end to end: `dvc repro` in a scratch copy of the repo, on tiny params.

Checks what `make demo` promises: metrics for `dvc metrics show`, a plot, and a registered
`pmoss-dt` version with alias `candidate` visible through the MLflow client. A second repro must
rerun nothing (DVC tracks every dependency).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _copy_repo(dst: Path) -> None:
    for name in ("dvc.yaml", "params.yaml", ".dvcignore"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, dst / name)
    for name in ("datasets/pools", "datasets/learned", "training", "src/pmoss", ".dvc"):
        shutil.copytree(REPO / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "tmp", "cache"))


@pytest.mark.slow
@pytest.mark.ci
def test_dvc_repro_tiny(tmp_path):
    _copy_repo(tmp_path)
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params["offline"].update(episodes_per_cell=24, n_slices=32)
    params["pretrain"]["max_steps"] = 20
    params["finetune"].update(episodes_per_cell=12, max_steps=10)
    params["baselines"]["max_steps"] = 10
    params["evaluate"]["n_slices"] = 32
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow/mlflow.db", "DVC_NO_ANALYTICS": "1"}
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    run = lambda *a: subprocess.run([str(BIN / "dvc"), *a], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)  # noqa: E731
    r = run("repro")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval/metrics.json").read_text())
    assert metrics["source"] == "sim" and metrics["n_cells"] == 4
    assert {"dt-base", "dt-assistant", "bc", "cql"} <= set(metrics["geomean"])
    assert all(g["vs_best_baseline"] > 0 and g["vs_oracle"] > 0 for g in metrics["geomean"].values())
    assert (tmp_path / "eval/speedup.png").stat().st_size > 1000
    shown = run("metrics", "show")
    assert shown.returncode == 0 and "vs_best_baseline" in shown.stdout
    receipt = json.loads((tmp_path / "eval/registered.json").read_text())
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"], registry_uri=env["MLFLOW_TRACKING_URI"])
    version = client.get_model_version_by_alias("pmoss-dt", "candidate")
    assert int(version.version) == receipt["version"] == 2  # base is v1, the assistant v2
    assert version.tags["dataset"] == "datasets/finetune" and version.tags["git_commit"] and "dt-assistant" in version.tags["eval_metrics"]
    again = run("repro")
    assert again.returncode == 0 and "Running stage" not in again.stdout, again.stdout
