"""How well does a critic rank dt-critic's candidates? (research harness, source=sim)

Per cell of an evaluation set: the candidate pool dt-critic ranks (the policy's greedy schedule,
k samples, the group heuristics; `rollout.candidate_pool`), every candidate measured on the
evaluation seeds next to every baseline (the same `evaluate.measure` the evaluation uses), then
each critic's pick with the keep-what-runs rule, as throughput / the cell's best baseline, and the
rank correlation of its predictions with the measurements; and what a keep rule weighs (the
top-ranked candidate, the running schedule, the critic's predicted level over the measured running
return), so other keep rules can be scored from the same output. Also the candidate set's upper bound
(the best candidate by measurement: what a perfect ranker would serve; not servable). Measuring
every candidate on evaluation seeds is for this comparison only, never for a served pick.

    python benchmarks/critic_ranking.py datasets/pools/eval-paper.yaml --policy models/base \
        --critic models/critic [--critic other/critic ...] [--n-slices 128] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import yaml
from scipy.stats import spearmanr

from pmoss.evaluate import EvalConfig, cell_baselines, cell_snapshot, measure
from pmoss.learn.bundle import load_bundle
from pmoss.learn.rollout import candidate_pool, critic_choice
from pmoss.sim import load_sim_machine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("eval_set", type=Path)
    ap.add_argument("--policy", type=Path, required=True, help="the model bundle that proposes the candidates")
    ap.add_argument("--critic", type=Path, action="append", required=True, help="a critic bundle to compare (repeatable)")
    ap.add_argument("--k", type=int, default=4, help="samples per snapshot (default: params.yaml critic.serve_k, 4)")
    ap.add_argument("--n-slices", type=int, default=128)
    ap.add_argument("--out", type=Path, help="write the per-cell results and the summary here (JSON)")
    a = ap.parse_args()
    cfg = EvalConfig.model_validate({**yaml.safe_load(a.eval_set.read_text()), "n_slices": a.n_slices})
    policy, critics = load_bundle(a.policy), [load_bundle(c) for c in a.critic]
    cells, logs = {}, {"upper bound": [], **{str(c): [] for c in a.critic}}
    for name in cfg.machines:
        m = load_sim_machine(name)
        for w in cfg.workloads:
            row = cell_snapshot(m, w, cfg)
            pool = candidate_pool(policy, m, row, k=a.k, candidates="samples+heuristics")
            base = cell_baselines(m, row, cfg)
            q = measure(m, w, {**base, **pool}, cfg)
            best = max(q[k] for k in cfg.baselines)
            q["running"] = q["os-default"]  # the evaluation's snapshot runs os-default
            truth = np.array([q[n] for n in pool])
            cell = {"upper bound": max(max(truth), q["running"]) / best}
            for path, c in zip(a.critic, critics, strict=True):
                chosen, pred = critic_choice(c, m, row, pool)  # dt-critic's own rule, keep-what-runs included
                rho = spearmanr(pred, truth).statistic
                top = list(pool)[int(np.argmax(pred))]
                scale = c.stats.best_return.get(f"{name}|{w}")
                cell[str(path)] = {"pick": chosen, "vs_best_baseline": q[chosen] / best, "spearman": float(rho),
                                   # what a keep rule weighs: the top candidate, what runs, the critic's level over the measured running return
                                   "top": top, "top_vs_best_baseline": q[top] / best, "running_vs_best_baseline": q["running"] / best,
                                   "predicted_over_running": None if scale is None else float(pred.max() * scale / (sum(row["queries"]) / row["window_s"]))}
            cells[f"{name}|{w}"] = cell
            logs["upper bound"].append(math.log(cell["upper bound"]))
            for path in a.critic:
                logs[str(path)].append(math.log(cell[str(path)]["vs_best_baseline"]))
            print(f"{name}|{w:14s} upper {cell['upper bound']:.3f}  " + "  ".join(
                f"{v['pick']}={v['vs_best_baseline']:.3f} (rho {v['spearman']:+.2f})" for k, v in cell.items() if k != "upper bound"), flush=True)
    summary = {k: {"geo_mean_vs_best_baseline": math.exp(np.mean(v)), "cells_ge_best": int(sum(x >= -1e-9 for x in v))} for k, v in logs.items()}
    for k, v in summary.items():
        print(f"{k}: geo-mean {v['geo_mean_vs_best_baseline']:.4f}, cells >= best {v['cells_ge_best']} of {len(cells)}  (source=sim)")
    if a.out:
        a.out.write_text(json.dumps({"source": "sim", "eval_set": str(a.eval_set), "policy": str(a.policy), "summary": summary, "cells": cells}, indent=1) + "\n")


if __name__ == "__main__":
    main()
