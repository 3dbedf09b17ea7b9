"""`pmoss summary`: the one screen that ends `make demo`, from the pipeline's small outputs."""

import json
import os
import subprocess
import sys


def _pmoss(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pmoss", *args], capture_output=True, text=True, cwd=cwd, timeout=120, env={**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "COLUMNS": "120"})


def _project(tmp_path):
    """A project directory (dvc.yaml marks it: contracts.io.project_root)."""
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    return tmp_path


def _outputs(tmp_path, **extra):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval/metrics.json").write_text(json.dumps({"source": "sim", "n_cells": 4, "oracle_cells_ge_best": 3,
        "dt-base": {"vs_best": 0.9123, "vs_one_core": 1.05, "vs_oracle": 0.8, "cells_ge_best": 1},
        "dt-assistant": {"vs_best": 0.8, "vs_one_core": 0.95, "vs_oracle": 0.7, "cells_ge_best": 0}, **extra}))  # fmt: skip
    (tmp_path / "eval/registered.json").write_text(json.dumps({"name": "pmoss-dt", "version": 1, "alias": "candidate", "policy": "dt-base",
                                                               "versions": {"dt-base": 1, "dt-assistant": 2}}))  # fmt: skip
    (tmp_path / "eval/speedup.png").write_bytes(b"png")


def test_summary_shows_headline_candidate_and_next_steps(tmp_path):
    _outputs(_project(tmp_path))
    r = _pmoss("summary", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "0.912" in r.stdout and "1 of 4" in r.stdout and "source=sim" in r.stdout
    assert "the oracle: at or above the best baseline in 3 of 4 cells" in r.stdout
    assert "pmoss-dt version 1 (dt-base) alias candidate" in r.stdout and "v2 dt-assistant" in r.stdout
    assert "eval/speedup.png" in r.stdout and "mlflow ui --backend-store-uri" in r.stdout
    assert len(r.stdout.splitlines()) <= 25  # one screen


def test_summary_before_the_pipeline_is_a_one_line_error(tmp_path):
    r = _pmoss("summary", cwd=_project(tmp_path))
    assert r.returncode == 1 and "eval/metrics.json: not found" in r.stderr and "Traceback" not in r.stderr


def test_summary_says_what_mask_only_is(tmp_path):
    """Issue 40.10: the control row is explained under the table, and only when it is there."""
    _outputs(_project(tmp_path), **{"mask-only": {"vs_best": 0.7, "vs_one_core": 0.8, "vs_oracle": 0.6, "cells_ge_best": 0}})
    r = _pmoss("summary", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "mask-only: a control, not a policy" in r.stdout and "untrained" in r.stdout
    assert len(r.stdout.splitlines()) <= 25


def test_summary_from_a_subdirectory_reads_the_project(tmp_path):
    """Issue 40.8: the project's eval/ wherever in the project the command runs."""
    _outputs(_project(tmp_path))
    (tmp_path / "models/base").mkdir(parents=True)
    r = _pmoss("summary", cwd=tmp_path / "models/base")
    assert r.returncode == 0, r.stderr
    assert "0.912" in r.stdout and f"{tmp_path}/eval/speedup.png" in r.stdout
    assert f"sqlite:///{tmp_path}/mlflow/mlflow.db" in r.stdout
