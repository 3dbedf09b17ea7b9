"""What one training run's luck is worth: a policy trained with several seeds vs mask-only with
several initialisations, on validation cells (research harness, source=sim; issue #41).

A demo figure of a trained policy is one draw: the same data and config with another seed (or the
same seed after a float-rounding change in the data) moves its geo-mean by a few hundredths and a
cell by up to 0.3 (docs/benchmarks-model.md, "The demo"). This trains `--seeds` policies on one
tokenised dataset (`pmoss train ... --seed s`, the CLI a user runs; MLflow runs go to a store under
--work, not the project's), builds as many mask-only controls (the first policy's network
untrained, initialised with seed s, under the same masks), measures every one greedily in every
cell of each --val set (`evaluate.evaluate_cells`, the evaluation's harness; no oracle) and reports,
per set, each policy's geo-mean over the cell's best baseline, the medians and ranges over seeds,
in how many of the seed x initialisation pairs the trained policy is above mask-only, how far a cell
moves from seed to seed, and whether a seed that is better on half of the set's machines is better
on the other half (if not, choosing a seed on validation cannot make the served policy better).

The sets must be validation sets (datasets/pools/val-*.yaml): their seeds are not the evaluation's,
so nothing here reads an evaluation seed.

    python benchmarks/seed_spread.py datasets/offline --val datasets/pools/val-tiny.yaml \
        --val datasets/pools/val-generated.yaml [--seeds 5] [--max-steps 300] [--tag demo]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pmoss.bench import write_record
from pmoss.contracts.errors import ContractError
from pmoss.evaluate import evaluate_cells, mask_inits_of
from pmoss.learn.bundle import load_bundle
from _research import geo, validation_sets  # benchmarks/_research.py, beside this script

ROOT = Path(__file__).resolve().parents[1]


def train(data: Path, out: Path, config: Path, steps: int, seed: int, work: Path) -> float | None:
    """`pmoss train` one policy -> wall seconds; None (not trained) when out/model.pt exists."""
    if (out / "model.pt").exists():
        return None
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    pmoss = Path(sys.executable).with_name("pmoss")
    t0 = time.perf_counter()
    subprocess.run([str(pmoss), "train", str(data), "--output", str(out), "--config", str(config), "--max-steps", str(steps),
                    "--seed", str(seed), "--quiet"], check=True, env=env)  # fmt: skip
    return time.perf_counter() - t0


def seed_transfer(cells: list[str], ratios: dict[str, list[float]], names: list[str], halvings: int = 1000) -> dict:
    """Is a seed's lead real? Split the set's machines in two at random (`halvings` times, seeded):
    the correlation of the seeds' geo-means on one half with those on the other, and what picking
    the best seed on one half gains on the other over the seeds' mean there (log ratio); None for
    both on a set of one machine. Also how far one cell moves between seeds: the standard deviation
    of its log ratio, averaged over cells."""
    logs = np.log(np.array([ratios[n] for n in names]))  # seeds x cells
    machines = np.array([c.split("|")[0] for c in cells])
    kinds = sorted(set(machines))
    out = {"cell_sd_log": float(logs.std(0, ddof=1).mean()) if len(names) > 1 else 0.0, "split_half_corr": None, "pick_on_half_gain": None,
           "machines": len(kinds), "halvings": halvings}  # fmt: skip
    if len(kinds) < 2:
        return out
    rng = np.random.default_rng(0)
    corr, gain = [], []
    for _ in range(halvings):
        a = np.isin(machines, rng.permutation(kinds)[: len(kinds) // 2])
        ga, gb = logs[:, a].mean(1), logs[:, ~a].mean(1)
        corr.append(float(np.corrcoef(ga, gb)[0, 1]) if ga.std() > 0 and gb.std() > 0 else 0.0)
        gain.append(float(gb[ga.argmax()] - gb.mean()))
    return out | {"split_half_corr": float(np.mean(corr)), "pick_on_half_gain": math.expm1(float(np.mean(gain)))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="tokenised dataset (pmoss dataset build), e.g. the demo's datasets/offline")
    ap.add_argument("--val", type=Path, action="append", required=True, help="a validation set (repeatable)")
    ap.add_argument("--seeds", type=int, default=5, help="training seeds and mask-only initialisations, 0..N-1 (default 5)")
    ap.add_argument("--config", type=Path, default=ROOT / "training/dt-tiny.yaml", help="training config (default: the demo's dt-tiny)")
    ap.add_argument("--max-steps", type=int, default=300, help="training steps (default 300, the demo's pretrain.max_steps)")
    ap.add_argument("--work", type=Path, default=Path("seed-spread"), help="where the policies and their MLflow store go (reused: a trained seed is not retrained)")
    ap.add_argument("--tag", default="demo", help="record name suffix: benchmarks/results/seed_spread_TAG.json")
    ap.add_argument("--out", type=Path, help="write the result here instead of the record (a trial run)")
    a = ap.parse_args()
    if a.seeds < 1:
        ap.error(f"--seeds {a.seeds}: at least 1")

    try:
        sets = validation_sets(a.val)
    except ContractError as e:
        ap.error(str(e))
    a.work.mkdir(parents=True, exist_ok=True)
    seeds = list(range(a.seeds))
    train_s = {}
    for s in seeds:
        print(f"seed_spread: training seed {s} ({a.max_steps} steps)", flush=True)
        train_s[s] = train(a.data, a.work / f"policy-s{s}", a.config, a.max_steps, s, a.work)
    policies = {f"policy-s{s}": load_bundle(a.work / f"policy-s{s}") for s in seeds}
    bundles = policies | mask_inits_of(policies["policy-s0"], a.seeds)  # mask-only-s0.. as evaluate builds them

    report: dict[str, dict] = {}
    for name, cfg in sets.items():
        print(f"seed_spread: measuring {len(bundles)} policies on {name}", flush=True)
        cells = evaluate_cells(cfg, bundles, progress=False)
        ratios = {b: [c[b] / max(c[k] for k in cfg.baselines) for c in cells.values()] for b in bundles}
        g = {b: geo(r) for b, r in ratios.items()}
        pol, msk = [g[f"policy-s{s}"] for s in seeds], [g[f"mask-only-s{s}"] for s in seeds]
        report[name] = {
            "cells": list(cells), "per_cell_ratio": ratios, "geo_mean": g,
            "policy_median": statistics.median(pol), "policy_range": [min(pol), max(pol)],
            "mask_only_median": statistics.median(msk), "mask_only_range": [min(msk), max(msk)],
            "policy_above_mask_pairs": sum(p > m for p in pol for m in msk), "pairs": len(pol) * len(msk),
            "policy_min_cell": {b: min(ratios[b]) for b in policies},
            "policy_seeds": seed_transfer(list(cells), ratios, list(policies)),
        }  # fmt: skip
        r = report[name]
        print(f"{name}: policy median {r['policy_median']:.3f} ({r['policy_range'][0]:.3f}-{r['policy_range'][1]:.3f}), "
              f"mask-only median {r['mask_only_median']:.3f} ({r['mask_only_range'][0]:.3f}-{r['mask_only_range'][1]:.3f}), "
              f"policy above mask-only in {r['policy_above_mask_pairs']} of {r['pairs']} pairs", flush=True)  # fmt: skip
        t = r["policy_seeds"]
        halves = (f"; a seed's geo-mean on half the machines vs the other half: correlation {t['split_half_corr']:.2f}, picking on one half "
                  f"gains {t['pick_on_half_gain']:+.4f} on the other") if t["split_half_corr"] is not None else " (one machine: no halves)"
        print(f"{name}: a cell moves {t['cell_sd_log']:.3f} (sd of log) between seeds{halves}", flush=True)

    pol_all = [geo([report[n]["geo_mean"][f"policy-s{s}"] for n in sets]) for s in seeds]
    msk_all = [geo([report[n]["geo_mean"][f"mask-only-s{s}"] for n in sets]) for s in seeds]
    record = dict(
        name=f"seed_spread_{a.tag}", metric=f"source=sim: geo-mean over the validation sets ({', '.join(sets)}) of a policy's throughput over the "
        f"cell's best baseline, median over {len(seeds)} training seeds ({a.config.name}, {a.max_steps} steps, data {a.data})",
        value=statistics.median(pol_all), unit="x best baseline",
        baseline=f"mask-only (the first policy's network untrained), median over {len(seeds)} initialisations",
        baseline_value=statistics.median(msk_all), policy_per_seed=pol_all, mask_only_per_init=msk_all, train_s=train_s, sets=report,
    )  # fmt: skip
    write_record(**record, out=a.out)


if __name__ == "__main__":
    main()
