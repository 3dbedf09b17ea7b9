"""Issue 40.8: the defaults that name a project's outputs (the MLflow store, eval/) resolve against
the project (contracts.io.project_root), not the working directory; with no project anywhere a
command says so instead of creating an empty store where it stands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pmoss.contracts import io
from pmoss.learn.tracking import default_tracking_uri

SRC = Path(__file__).resolve().parents[1] / "src"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTHONPATH")}
    return {**env, **extra}


def test_nearest_dvc_yaml_upwards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "outer/inner/deep").mkdir(parents=True)
    (tmp_path / "outer/dvc.yaml").write_text("stages: {}\n")
    assert io.project_root(tmp_path / "outer/inner/deep") == tmp_path / "outer"
    (tmp_path / "outer/inner/dvc.yaml").write_text("stages: {}\n")
    assert io.project_root(tmp_path / "outer/inner/deep") == tmp_path / "outer/inner"
    monkeypatch.chdir(tmp_path / "outer/inner/deep")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert default_tracking_uri() == f"sqlite:///{tmp_path}/outer/inner/mlflow/mlflow.db"


def test_outside_any_project_the_checkout_this_pmoss_runs_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert io.project_root() == io.REPO_ROOT  # the tests run from a checkout (it has dvc.yaml)


def test_no_project_is_an_error_not_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(io, "REPO_ROOT", tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(io.NoProjectError, match=r"no P-MOSS project in .* \(no dvc.yaml\).*MLFLOW_TRACKING_URI"):
        default_tracking_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert default_tracking_uri() == "http://127.0.0.1:5000"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pmoss as a non-editable install sees it: the package alone, in no checkout."""
    site = tmp_path_factory.mktemp("install") / "lib" / "site-packages"
    shutil.copytree(SRC / "pmoss", site / "pmoss", ignore=shutil.ignore_patterns("__pycache__"))
    return site


@pytest.mark.parametrize("command", [["registry", "list"], ["summary"]])
def test_commands_outside_a_project_say_so(installed: Path, tmp_path: Path, command: list[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "pmoss", *command], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env=_env(PYTHONPATH=str(installed)))  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no P-MOSS project in" in r.stderr and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == [], "a command outside a project left files where it ran"


def test_registry_list_in_a_subdirectory_uses_the_project_store(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "eval").mkdir()
    r = subprocess.run([sys.executable, "-m", "pmoss", "registry", "list"], cwd=tmp_path / "eval", capture_output=True, text=True,
                       timeout=120, env=_env(PYTHONPATH=str(installed)))  # fmt: skip
    assert f"sqlite:///{tmp_path}/mlflow/mlflow.db" in r.stderr + r.stdout
    assert not (tmp_path / "eval/mlflow").exists()
