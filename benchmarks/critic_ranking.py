"""How well does a critic rank dt-critic's candidates? (research harness, source=sim)

Per cell of an evaluation set: the candidate pool dt-critic ranks (the policy's greedy schedule,
k samples, the group heuristics; `rollout.candidate_pool`), every candidate measured on the
evaluation seeds next to every baseline (the same `evaluate.measure` the evaluation uses), then
each critic's pick with the keep-what-runs rule, as throughput / the cell's best baseline, and the
rank correlation of its predictions with the measurements; and what a keep rule weighs (the
top-ranked candidate, the running schedule, the critic's predicted level over the measured running
return), so other keep rules can be scored from the same output. Also the candidate set's upper bound
(the best candidate by measurement: what a perfect ranker would serve; not servable). With
--ensemble, also the critics' ensemble (their mean prediction, as `pmoss attach-critic --critic A
--critic B ...` serves it). The output keeps every candidate's measurement and each critic's
prediction of it, so other pick rules can be scored from it. Measuring every candidate on
evaluation seeds is for this comparison only, never for a served pick.

    python benchmarks/critic_ranking.py datasets/pools/val-paper.yaml --policy models/base \
        --critic models/critic [--critic other/critic ... [--ensemble]] [--n-slices 128] [--out results.json]
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
from pmoss.learn.bundle import ensemble_of, load_bundle
from pmoss.learn.history import kind_history
from pmoss.learn.rollout import candidate_pool, critic_choice
from pmoss.sim import load_sim_machine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("eval_set", type=Path)
    ap.add_argument("--policy", type=Path, required=True, help="the model bundle that proposes the candidates")
    ap.add_argument("--critic", type=Path, action="append", required=True, help="a critic bundle to compare (repeatable)")
    ap.add_argument("--k", type=int, default=4, help="samples per snapshot (default: params.yaml critic.serve_k, 4)")
    ap.add_argument("--temperature", type=float, default=1.0, help="the samples' temperature (default 1.0, as served)")
    ap.add_argument("--target-factor", type=float, default=2.0, help="the policy's target return factor (default 2.0, as served)")
    ap.add_argument("--seed", type=int, default=0, help="the samples' seed (default 0, as served)")
    ap.add_argument("--history", type=Path, action="append", help="raw proposals whose measured kinds join every critic's score (repeatable; attach-critic --history)")
    ap.add_argument("--history-weight", type=float, default=0.5, help="weight of --history (default 0.5, as attach-critic)")
    ap.add_argument("--n-slices", type=int, default=128)
    ap.add_argument("--ensemble", action="store_true", help="also the critics' ensemble (mean prediction), named 'ensemble'")
    ap.add_argument("--out", type=Path, help="write the per-cell results and the summary here (JSON)")
    a = ap.parse_args()
    cfg = EvalConfig.model_validate({**yaml.safe_load(a.eval_set.read_text()), "n_slices": a.n_slices})
    policy, loaded = load_bundle(a.policy), [load_bundle(c) for c in a.critic]
    critics = {str(path): c for path, c in zip(a.critic, loaded, strict=True)}
    if a.ensemble:
        critics["ensemble"] = ensemble_of(loaded)
    history = {"weight": a.history_weight, "cells": kind_history(a.history)} if a.history else None
    cells, logs = {}, {"upper bound": [], **{name: [] for name in critics}}
    for name in cfg.machines:
        m = load_sim_machine(name)
        for w in cfg.workloads:
            row = cell_snapshot(m, w, cfg)
            pool = candidate_pool(policy, m, row, k=a.k, temperature=a.temperature, target_factor=a.target_factor, seed=a.seed, candidates="samples+heuristics")
            base = cell_baselines(m, row, cfg)
            q = measure(m, w, {**base, **pool}, cfg)
            best = max(q[k] for k in cfg.baselines)
            q["running"] = q["os-default"]  # the evaluation's snapshot runs os-default
            truth = np.array([q[n] for n in pool])
            cell = {"upper bound": max(max(truth), q["running"]) / best, "measured": {n: q[n] / best for n in [*pool, "running"]}}
            for path, c in critics.items():
                chosen, pred = critic_choice(c, m, row, pool, history)  # dt-critic's own rule, keep-what-runs included
                rho = spearmanr(pred, truth).statistic
                top = list(pool)[int(np.argmax(pred))]
                scale = c.stats.best_return.get(f"{name}|{w}")
                cell[path] = {"pick": chosen, "predicted": dict(zip(pool, map(float, pred), strict=True)), "vs_best_baseline": q[chosen] / best, "spearman": float(rho),
                                   # what a keep rule weighs: the top candidate, what runs, the critic's level over the measured running return
                                   "top": top, "top_vs_best_baseline": q[top] / best, "running_vs_best_baseline": q["running"] / best,
                                   "predicted_over_running": None if scale is None else float(pred.max() * scale / (sum(row["queries"]) / row["window_s"]))}
            cells[f"{name}|{w}"] = cell
            logs["upper bound"].append(math.log(cell["upper bound"]))
            for path in critics:
                logs[path].append(math.log(cell[path]["vs_best_baseline"]))
            print(f"{name}|{w:14s} upper {cell['upper bound']:.3f}  " + "  ".join(
                f"{cell[k]['pick']}={cell[k]['vs_best_baseline']:.3f} (rho {cell[k]['spearman']:+.2f})" for k in critics), flush=True)
    summary = {k: {"geo_mean_vs_best_baseline": math.exp(np.mean(v)), "cells_ge_best": int(sum(x >= -1e-9 for x in v))} for k, v in logs.items()}
    for k, v in summary.items():
        print(f"{k}: geo-mean {v['geo_mean_vs_best_baseline']:.4f}, cells >= best {v['cells_ge_best']} of {len(cells)}  (source=sim)")
    if a.out:
        a.out.write_text(json.dumps({"source": "sim", "eval_set": str(a.eval_set), "policy": str(a.policy), "summary": summary, "cells": cells}, indent=1) + "\n")


if __name__ == "__main__":
    main()
