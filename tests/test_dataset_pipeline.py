"""The dataset stages under DVC in a scratch copy: `dvc exp run -S ...` scales the offline data, and
the fine-tuning stages (`collect-finetune`, `build-finetune`) collect the target machine's pool and
append the episodes served by a model (kind `learned`).

FINETUNE_STAGES / FINETUNE_PARAMS are the additions proposed for dvc.yaml / params.yaml; once the
real files carry them the copies there are used instead (setdefault), so this test checks those.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

FINETUNE_STAGES = {
    "collect-finetune": {
        "cmd": "pmoss collect ${finetune.pool} --output datasets/raw/finetune --episodes-per-cell ${finetune.episodes_per_cell}"
        " --n-slices ${offline.n_slices} --append ${finetune.learned} --quiet",
        "deps": ["${finetune.pool}", "${finetune.learned}", "src/pmoss/collect/driver.py", "src/pmoss/collect/plan.py", "src/pmoss/contracts/policies.py", "src/pmoss/sim"],
        "params": ["finetune", "offline.n_slices"],
        "outs": ["datasets/raw/finetune"],
    },
    "build-finetune": {
        "cmd": "pmoss dataset build datasets/raw/finetune --output datasets/finetune --val ${build.val} --test ${build.test}",
        "deps": ["datasets/raw/finetune", "src/pmoss/data/tokens.py", "src/pmoss/data/dataset.py", "src/pmoss/contracts/snapshot.py"],
        "params": ["build"],
        "outs": ["datasets/finetune"],
    },
}
FINETUNE_PARAMS = {"pool": "datasets/pools/finetune-tiny.yaml", "episodes_per_cell": 24, "learned": "datasets/learned"}


def scratch_repo(dst: Path) -> dict[str, str]:
    """A git repo with one commit holding the pipeline, the package and the proposed stages."""
    for name in ("dvc.yaml", "params.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(REPO / name, dst / name)
    for name in ("datasets/pools", "src/pmoss", ".dvc"):
        shutil.copytree(REPO / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "tmp", "cache"))
    dvc = yaml.safe_load((dst / "dvc.yaml").read_text())
    for name, stage in FINETUNE_STAGES.items():
        dvc["stages"].setdefault(name, stage)
    (dst / "dvc.yaml").write_text(yaml.safe_dump(dvc, sort_keys=False))
    params = yaml.safe_load((dst / "params.yaml").read_text())
    params.setdefault("finetune", FINETUNE_PARAMS)
    params["offline"].update(episodes_per_cell=8, n_slices=16)
    (dst / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    learned_episodes(dst / params["finetune"]["learned"], 16)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "scratch"]):
        subprocess.run(cmd, cwd=dst, env=env, check=True, capture_output=True)
    return env


def learned_episodes(dst: Path, n: int) -> None:
    """What serving writes: raw episodes of kind `learned` on the target machine."""
    from pmoss.collect.driver import rows_to_table
    from pmoss.contracts.schedule import Schedule
    from pmoss.contracts.snapshot import write_parquet_atomic
    from pmoss.sim import load_sim_machine, simulate_batch

    m = load_sim_machine("intel-skx-4s")
    cores = np.random.default_rng(0).choice(m.worker_cpus, (4, n))
    scheds = [Schedule(machine=m.name, n_slices=n, kind="learned", core=[int(x) for x in c], node=[m.cpu_by_id[int(x)].node for x in c],
                       provenance={"model": "pmoss-dt", "version": 1}) for c in cores]  # fmt: skip
    write_parquet_atomic(rows_to_table(simulate_batch(m, "ycsb-c", "dense", scheds, seeds=[1, 2, 3, 4])), dst / "served.parquet")
    (dst / "README.md").write_text("Episodes of model schedules (kind learned), appended to the fine-tuning data.\n")


@pytest.mark.slow
def test_dvc_exp_run_scales_offline_and_builds_finetune(tmp_path):
    env = scratch_repo(tmp_path)
    run = lambda *a: subprocess.run([str(BIN / "dvc"), *a], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)  # noqa: E731
    r = run("exp", "run", "build-offline", "-S", "offline.episodes_per_cell=6")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    offline = json.loads((tmp_path / "datasets/offline/dataset.json").read_text())
    mix = lambda d: sum(n for kind, n in d["kinds"].items() if kind in ("sn-grouped", "sn-mixed", "sn-spread", "sn-random"))  # noqa: E731
    assert mix(offline) == 2 * 2 * 6  # the paper's mix, 6 a cell of the tiny pool's 2 machines x 2 workloads (beside sn-numa and searches)
    r = run("exp", "run", "build-finetune", "-S", "finetune.episodes_per_cell=5")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    finetune = json.loads((tmp_path / "datasets/finetune/dataset.json").read_text())
    assert finetune["kinds"]["learned"] == 4 and mix(finetune) == 2 * 5  # the target's 2 workloads x 5, and the served episodes
    shown = run("exp", "show", "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    baseline = [rev for rev in json.loads(shown.stdout) if rev.get("experiments")]
    assert len(baseline[0]["experiments"]) == 2  # both runs are recorded as experiments of the commit
