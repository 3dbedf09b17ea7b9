"""`pmoss summary`: the one screen that ends `make demo`, from the pipeline's small outputs."""

import json
import os
import subprocess
import sys


def _pmoss(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pmoss", *args], capture_output=True, text=True, cwd=cwd, timeout=120, env={**os.environ, "COLUMNS": "120"})


def test_summary_shows_headline_candidate_and_next_steps(tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval/metrics.json").write_text(json.dumps({"source": "sim", "n_cells": 4,
        "dt-base": {"vs_best": 0.9123, "vs_one_core": 1.05, "vs_oracle": 0.8, "cells_ge_best": 1},
        "dt-assistant": {"vs_best": 0.8, "vs_one_core": 0.95, "vs_oracle": 0.7, "cells_ge_best": 0}}))  # fmt: skip
    (tmp_path / "eval/registered.json").write_text(json.dumps({"name": "pmoss-dt", "version": 1, "alias": "candidate", "policy": "dt-base",
                                                               "versions": {"dt-base": 1, "dt-assistant": 2}}))  # fmt: skip
    (tmp_path / "eval/speedup.png").write_bytes(b"png")
    r = _pmoss("summary", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "0.912" in r.stdout and "1 of 4" in r.stdout and "source=sim" in r.stdout
    assert "pmoss-dt version 1 (dt-base) alias candidate" in r.stdout and "v2 dt-assistant" in r.stdout
    assert "eval/speedup.png" in r.stdout and "mlflow ui --backend-store-uri" in r.stdout
    assert len(r.stdout.splitlines()) <= 25  # one screen


def test_summary_before_the_pipeline_is_a_one_line_error(tmp_path):
    r = _pmoss("summary", cwd=tmp_path)
    assert r.returncode == 1 and "eval/metrics.json: not found" in r.stderr and "Traceback" not in r.stderr
