"""`pmoss evaluate` of one cell on a 1,024-worker machine, by part (issue #39 item 3: ≤ 5 min here).

One cell as `evaluate_cells` runs it: the group oracle's search (its budget scales with the
machine), the running schedule's snapshot and every baseline, each served policy's proposal
(dt-base greedy, dt-critic best-of-K + critic as `candidate` serves, mask-only's MASK_INITS
initialisations), then one batched
simulator call measuring all of them over the evaluation seeds. The baseline, in the same run: the
same cell on the demo's evaluation machine (amd-milan-nps4, 128 slices). Models: the demo's
`models/base` and `models/dt-critic` (`make demo` writes them) or any bundles given.

    .venv/bin/python benchmarks/bench_evaluate.py [--slices-per-worker 0.5] [--model dt-base=models/base --model dt-critic=models/dt-critic]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from pmoss.bench import write_record
from pmoss.evaluate import MASK_INITS, EvalConfig, cell_baselines, cell_config, cell_oracle, cell_snapshot, mask_inits_of, measure, policy_specs
from pmoss.learn.bundle import load_bundle
from pmoss.learn.rollout import propose
from pmoss.sim import load_sim_machine

ROOT = Path(__file__).resolve().parents[1]
LARGE = "datasets/machines/large-2s-16n.yaml"  # 16 nodes x 64 workers


def one_cell(machine_ref: str, workload: str, bundles: dict, cfg: EvalConfig) -> dict[str, float]:
    """Seconds per part of one evaluated cell, the parts in evaluate's order."""
    machine = load_sim_machine(machine_ref)
    cfg = cell_config(machine, cfg)
    t: dict[str, float] = {"n_slices": cfg.n_slices, "workers": machine.n_workers}
    t0 = time.perf_counter()
    finalists = cell_oracle(machine, workload, cfg)  # the search, and its finalists among the cell's baselines
    t["oracle_search_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    snapshot = cell_snapshot(machine, workload, cfg)
    schedules = cell_baselines(machine, snapshot, cfg)
    t["snapshot_and_baselines_s"] = time.perf_counter() - t0
    for name, bundle in bundles.items():
        t0 = time.perf_counter()
        schedules[name] = propose(bundle, machine, snapshot, **{"target_factor": cfg.target_factor, **bundle.info.get("inference", {})})
        t[f"propose_{name}_s"] = time.perf_counter() - t0
    schedules["oracle"] = finalists.get("search", next(iter(finalists.values())))  # a baseline finalist is measured already
    t0 = time.perf_counter()
    measure(machine, workload, schedules, cfg)
    t["measure_s"] = time.perf_counter() - t0
    t["cell_s"] = sum(v for k, v in t.items() if k.endswith("_s"))
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", help="NAME=PATH of a bundle (repeatable); default: the demo's dt-base and dt-critic")
    ap.add_argument("--workload", default="ycsb-c")
    ap.add_argument("--runs", type=int, default=2, help="evaluation seeds per schedule (eval-large.yaml's 2)")
    ap.add_argument("--slices-per-worker", type=float, default=0.5, help="N = this x the workers (eval-large.yaml's 0.5: 512 slices; 2: 2,048)")
    args = ap.parse_args()
    if not args.model and not (ROOT / "models/dt-critic/model.pt").exists():
        print("bench_evaluate: skipped, no demo models (models/base, models/dt-critic): run `make demo` first or pass --model NAME=PATH")
        return  # `make bench` on a fresh clone runs every benchmark
    specs = policy_specs(args.model or [f"dt-base={ROOT / 'models/base'}", f"dt-critic={ROOT / 'models/dt-critic'}"])
    bundles = {name: load_bundle(path) for name, path in specs.items()}
    bundles |= mask_inits_of(next(iter(bundles.values())), MASK_INITS)
    common = {"workloads": [args.workload], "runs": args.runs, "oracle": True}
    small = one_cell("amd-milan-nps4", args.workload, bundles, EvalConfig(machines=["amd-milan-nps4"], n_slices=128, **common))
    large = one_cell(str(ROOT / LARGE), args.workload, bundles, EvalConfig(machines=[str(ROOT / LARGE)], slices_per_worker=args.slices_per_worker, **common))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    write_record(f"evaluate_cell_1024_workers_{large['n_slices']}", f"pmoss evaluate, one cell ({args.workload}, 16 nodes x 64 workers, {large['n_slices']} slices, oracle on, "
                 f"{', '.join(bundles)})", large["cell_s"], "s", "the same cell on amd-milan-nps4, 128 slices (same run)", small["cell_s"],
                 target_s=300.0, meets_target=large["cell_s"] <= 300.0, parts=large, baseline_parts=small, peak_rss_mib=peak,
                 models={n: str(p) for n, p in specs.items()})  # fmt: skip


if __name__ == "__main__":
    main()
