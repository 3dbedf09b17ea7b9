"""The whole pipeline wired end to end: `dvc repro` in a scratch copy of the repo, on tiny params.

Checks what `make demo` promises: metrics for `dvc metrics show`, a plot, and a registered
`pmoss-dt` version with alias `candidate` visible through the MLflow client. A second repro must
rerun nothing (DVC tracks every dependency).
"""

import csv
import io
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


def _tiny_pipeline(tmp_path: Path, episodes: int, n_slices: int, pretrain_steps: int) -> dict[str, str]:
    """The repository's pipeline in `tmp_path` with tiny params; returns the environment to run it in."""
    _copy_repo(tmp_path)
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params["offline"].update(episodes_per_cell=episodes, n_slices=n_slices)
    params["pretrain"]["max_steps"] = pretrain_steps
    params["finetune"].update(episodes_per_cell=episodes // 2, max_steps=10, critic_steps=10)
    params["baselines"]["max_steps"] = 10
    params["critic"].update(max_steps=10, k=4, episodes_per_cell=episodes)
    # the critic's pool cut to the demo's machines and one generated machine (its own collection)
    critic = yaml.safe_load((tmp_path / params["critic"]["pool"]).read_text())
    critic["machines"] = [*critic["machines"][:2], "gen:0-0"]
    (tmp_path / "datasets/pools/critic-ci.yaml").write_text(yaml.safe_dump(critic))
    params["critic"]["pool"] = "datasets/pools/critic-ci.yaml"
    params["evaluate"]["n_slices"] = n_slices
    params["improve"]["iters"] = 6
    # the unseen set cut to two machines (one written from a spec, one generated from the held-back
    # seeds): the full set's oracle searches alone would take minutes
    unseen = yaml.safe_load((tmp_path / params["evaluate"]["unseen_config"]).read_text())
    unseen["machines"] = ["ibm-power8", "gen:900000-900000"]
    (tmp_path / "datasets/pools/eval-unseen-ci.yaml").write_text(yaml.safe_dump(unseen))
    params["evaluate"]["unseen_config"] = "datasets/pools/eval-unseen-ci.yaml"
    # the validation set cut to the demo's machines and one generated machine of the validation seeds
    val = yaml.safe_load((tmp_path / params["validate"]["config"]).read_text())
    val["machines"] = [*val["machines"][:2], "gen:100000-100000"]
    (tmp_path / "datasets/pools/val-demo-ci.yaml").write_text(yaml.safe_dump(val))
    params["validate"]["config"] = "datasets/pools/val-demo-ci.yaml"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow/mlflow.db", "DVC_NO_ANALYTICS": "1"}


@pytest.mark.slow
@pytest.mark.ci
def test_dvc_repro_tiny(tmp_path):
    env = _tiny_pipeline(tmp_path, episodes=24, n_slices=32, pretrain_steps=20)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    run = lambda *a: subprocess.run([str(BIN / "dvc"), *a], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)  # noqa: E731
    r = run("repro")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval/metrics.json").read_text())
    assert metrics["source"] == "sim" and metrics["n_cells"] == 4
    per = {k: v for k, v in metrics.items() if isinstance(v, dict)}
    assert set(per) == {"dt-base", "dt-improved", "dt-assistant", "bc", "cql", "dt-critic", "mask-only"} and set(metrics) == set(per) | {"source", "n_cells", "oracle_cells_ge_best"}
    assert 0 <= metrics["oracle_cells_ge_best"] <= metrics["n_cells"]
    figures = {"vs_best", "vs_one_core", "vs_oracle", "cells_ge_best"}
    assert all(g["vs_best"] > 0 and g["vs_oracle"] > 0 and set(g) == figures | {"own_picks"} for p, g in per.items() if p != "mask-only")
    # the control: the median over its initialisations (no one schedule, so no pick), their range and seed 0's
    assert set(per["mask-only"]) == figures | {"inits", "vs_best_min_init", "vs_best_max_init", "vs_best_s0"}
    assert per["mask-only"]["vs_best_min_init"] <= per["mask-only"]["vs_best"] <= per["mask-only"]["vs_best_max_init"]
    assert len(json.loads((tmp_path / "eval/cells-detail.json").read_text())["cells"]) == 4
    assert (tmp_path / "eval/speedup.png").stat().st_size > 1000
    assert (tmp_path / "models/base/train-loss.csv").read_text().startswith("step,train_loss\n10,")
    shown = run("metrics", "show")
    assert shown.returncode == 0 and "vs_best" in shown.stdout and "ycsb" not in shown.stdout  # headline only
    grid = [line.split() for line in run("metrics", "show", "eval/metrics.json").stdout.splitlines() if line.strip()]
    assert len(grid) == 2 and grid[1][0] == "eval/metrics.json" and len(grid[0]) == len(grid[1]) <= 1 + 41, grid  # README: one row of the 41
    receipt = json.loads((tmp_path / "eval/registered.json").read_text())
    # the candidate is chosen on the validation seeds (stage validate), never on the evaluation's
    validation = json.loads((tmp_path / "eval/val/metrics.json").read_text())
    assert validation["n_cells"] == 6 and "mask-only" not in validation and "vs_oracle" not in validation["dt-base"]
    from pmoss.evaluate import best_policy

    simplest_first = ["dt-base", "dt-improved", "dt-critic", "dt-assistant"]  # the register stage's order
    best, why = best_policy(validation, simplest_first, json.loads((tmp_path / "eval/val/cells-detail.json").read_text()))
    assert receipt["policy"] == best and receipt["why"] == why and receipt["versions"] == {p: i + 1 for i, p in enumerate(simplest_first)}
    assert receipt["chosen_by"] == "eval/val/metrics.json"
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"], registry_uri=env["MLFLOW_TRACKING_URI"])
    version = client.get_model_version_by_alias("pmoss-dt", "candidate")
    assert int(version.version) == receipt["version"]  # the best-validated, not the last registered
    assert "eval/val/metrics.json" in version.description
    dataset = {"dt-base": "datasets/offline", "dt-improved": "datasets/offline", "dt-assistant": "datasets/finetune", "dt-critic": "datasets/offline"}[best]  # its policy's
    assert version.tags["dataset"] == dataset and version.tags["git_commit"] and version.tags["policy"] == best
    assert float(version.tags["eval.vs_best"]) == pytest.approx(per[best]["vs_best"], rel=1e-3)
    again = run("repro")
    assert again.returncode == 0 and "Running stage" not in again.stdout, again.stdout
    # a reproduction leaves dvc.lock clean: the same inputs give the same bundle and report bytes
    # (no run id, git commit, absolute path or wall time inside a DVC output; docs/mlflow.md)
    lock = (tmp_path / "dvc.lock").read_text()
    for stage in ("pretrain", "improve", "post-train"):
        forced = run("repro", "--force", "--single-item", stage)
        assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr[-3000:]
        assert (tmp_path / "dvc.lock").read_text() == lock, f"rerunning {stage} changed dvc.lock"


DROP = r".*/.*|unseen\..*|.*\.(vs_one_core|cells_ge_best|own_picks|inits|vs_best_.*)"  # README's `dvc exp show --drop`: no dependency hashes, no unseen-machine columns, each policy's vs_best and vs_oracle


@pytest.mark.slow
def test_dvc_experiments_compare_readably(tmp_path):
    """Two `dvc exp run -S ...` on the tiny pipeline: `dvc exp show` compares them in a few columns
    holding the headline names, and the data-driven plots render for both experiments."""
    env = _tiny_pipeline(tmp_path, episodes=12, n_slices=16, pretrain_steps=10)
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    (tmp_path / ".gitignore").write_text("mlflow/\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "tiny"]):
        subprocess.run(cmd, cwd=tmp_path, env=env, check=True)
    run = lambda *a: subprocess.run([str(BIN / "dvc"), *a], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)  # noqa: E731
    for steps in (10, 20):
        r = run("exp", "run", "-S", f"pretrain.max_steps={steps}")
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    everything = run("exp", "show", "--only-changed", "--drop", ".*/.*", "--csv")
    assert "unseen.dt-base.vs_best" in everything.stdout  # the unseen machine's headline, its own columns
    shown = run("exp", "show", "--only-changed", "--drop", DROP, "--csv")  # as the README says: no dependency hashes
    assert shown.returncode == 0, shown.stderr
    rows = list(csv.reader(io.StringIO(shown.stdout)))
    header, exps = rows[0], [r[0] for r in rows[1:] if r and r[0] not in ("workspace", "")]  # experiment names
    metric_cols = [c for c in header if c.endswith((".vs_best", ".vs_one_core", ".vs_oracle", ".cells_ge_best", ".own_picks")) or c.startswith("mask-only.")]
    assert len(exps) == 2 and "pretrain.max_steps" in header, shown.stdout
    assert {"dt-base.vs_best", "dt-improved.vs_best", "dt-assistant.vs_best", "dt-critic.vs_best", "dt-base.vs_oracle"} <= set(metric_cols)
    # the "<= ~25 numbers": each policy's vs_best and vs_oracle (14 with six policies and the
    # control; `dvc metrics show` has all 41); beside them only DVC's 4 own columns, source, n_cells,
    # oracle_cells_ge_best (one number: the oracle's cells at or above the best baseline) and the changed param
    assert len(metric_cols) <= 14 and len(header) <= len(metric_cols) + 8, header
    assert "oracle_cells_ge_best" in header, header
    assert not any("ycsb" in c or "|" in c or "/" in c or "unseen" in c for c in header), header
    print(shown.stdout)  # for the record (pytest -s)
    table = subprocess.run([str(BIN / "dvc"), "exp", "show", "--only-changed", "--drop", DROP, "--no-pager"], cwd=tmp_path,
                           env={**env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=120)  # fmt: skip
    print(table.stdout)
    assert table.returncode == 0 and "dt-base.vs_best" in table.stdout and "dt-assistant.vs_best" in table.stdout
    plots = run("plots", "show", "--json")
    assert plots.returncode == 0, plots.stderr
    shown_plots = json.loads(plots.stdout)["data"]
    assert {"training loss", "eval/speedup.json"} <= set(shown_plots), list(shown_plots)
    diff = run("plots", "diff", *exps, "--json")  # two experiments side by side
    assert diff.returncode == 0 and "training loss" in json.loads(diff.stdout)["data"], diff.stderr
