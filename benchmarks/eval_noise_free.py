"""An evaluation's schedules re-measured by the simulator's noise-free model (research check, source=sim).

`pmoss evaluate` measures every schedule of a cell on the evaluation seeds, and "the best baseline"
is the best of eight such noisy means: where several baselines run one placement, or the learned
pick runs a baseline's placement, their measurements differ by noise only and the best of them
sits above what each would measure on average. This script takes the schedules an evaluation kept
(`schedules.json`: learned and oracle) and the cell's baselines (regenerated from the same
snapshot, as the evaluation does) and measures them with `simulate_batch(noise=False)`, the
model's mean: ties read as ties, so what a policy wins or loses here is the schedule, not the draw.
For reading a result only; the product's figures stay the evaluation's.

    python benchmarks/eval_noise_free.py eval datasets/pools/eval-paper.yaml \
        [--policies dt-critic,dt-base,oracle] [--n-slices 128] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import yaml

from pmoss.contracts.schedule import Schedule
from pmoss.contracts.workload import get_workload
from pmoss.evaluate import EvalConfig, cell_baselines, cell_snapshot
from pmoss.sim import load_sim_machine, simulate_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("eval_dir", type=Path, help="an evaluation's output directory (schedules.json, cells.json)")
    ap.add_argument("eval_set", type=Path, help="the evaluation config it ran (for the snapshot seeds and baselines)")
    ap.add_argument("--policies", default="dt-critic,dt-base,oracle", help="kept schedules to compare (comma-separated)")
    ap.add_argument("--n-slices", type=int, default=128)
    ap.add_argument("--out", type=Path, help="write the per-cell results and the summary here (JSON)")
    a = ap.parse_args()
    cfg = EvalConfig.model_validate({**yaml.safe_load(a.eval_set.read_text()), "n_slices": a.n_slices})
    kept = json.loads((a.eval_dir / "schedules.json").read_text())
    noisy = json.loads((a.eval_dir / "cells.json").read_text())
    noisy = noisy.get("cells", noisy)
    policies = a.policies.split(",")
    cells: dict[str, dict] = {}
    for cell, schedules in kept.items():
        name, workload = cell.split("|")
        m = load_sim_machine(name)
        runs: dict[str, Schedule] = cell_baselines(m, cell_snapshot(m, workload, cfg), cfg)
        runs |= {p: Schedule.model_validate(schedules[p]) for p in policies if p in schedules}
        rows = simulate_batch(m, get_workload(workload), cfg.dataset, list(runs.values()), seeds=cfg.seed_base, n_records=cfg.n_records,
                              window_s=cfg.window_s, noise=False)  # fmt: skip
        q = {n: r["throughput_qps"] for n, r in zip(runs, rows, strict=True)}
        best = max(cfg.baselines, key=q.__getitem__)
        best_noisy = max(noisy[cell][k] for k in cfg.baselines)
        cells[cell] = {"best_baseline": best, **{p: {"noise_free": q[p] / q[best], "evaluation": noisy[cell][p] / best_noisy} for p in policies if p in q}}
        print(f"{cell:30s} best {best:13s} " + " | ".join(f"{p} {v['noise_free']:.3f} (eval {v['evaluation']:.3f})" for p, v in cells[cell].items() if p != "best_baseline"))
    summary = {}
    for p in policies:
        got = [c[p] for c in cells.values() if p in c]
        summary[p] = {
            f"{how}_{stat}": val
            for how in ("noise_free", "evaluation")
            for stat, val in (("geo_mean_vs_best_baseline", math.exp(np.mean([math.log(g[how]) for g in got]))),
                              ("cells_ge_best", sum(g[how] >= 1 - 1e-12 for g in got)))  # fmt: skip
        }
        print(f"{p}: noise-free geo-mean {summary[p]['noise_free_geo_mean_vs_best_baseline']:.3f}, cells >= best "
              f"{summary[p]['noise_free_cells_ge_best']} of {len(got)} (evaluation: {summary[p]['evaluation_geo_mean_vs_best_baseline']:.3f}, "
              f"{summary[p]['evaluation_cells_ge_best']})")
    if a.out:
        a.out.write_text(json.dumps({"source": "sim", "eval_dir": str(a.eval_dir), "eval_set": str(a.eval_set), "summary": summary, "cells": cells}, indent=1))


if __name__ == "__main__":
    main()
