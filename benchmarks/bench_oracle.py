"""The group oracle's search on a 1,024-worker machine, against the search before issue #39's
oracle work (tests/dense_oracle.py: the capped starts' [starts, G, W] mask per slice, the
model's [B, N, M, M] memory weights and its dense [B, G] @ [G, W] sums) in the same run, and the
same pair on the demo's evaluation machine. Same schedule found (checked here), source=sim.

    .venv/bin/python benchmarks/bench_oracle.py [--slices 512] [--budget N] [--workload ycsb-c]

Writes benchmarks/results/oracle_search_1024_workers_<slices>.json (docs/benchmarks-inference.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pmoss.bench import write_record
from pmoss.sim import load_sim_machine, oracle
from pmoss.sim.oracle import budget_for

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from dense_oracle import before_issue_39  # noqa: E402  the search's dense parts before #39, frozen there for their equality tests

LARGE = ROOT / "datasets/machines/large-2s-16n.yaml"  # 16 nodes x 64 workers, as bench_evaluate's


def timed(machine, workload: str, n_slices: int, budget: int) -> tuple[float, float, object]:
    t0 = time.perf_counter()
    sched, x = oracle(machine, workload, "uniform", n_slices, seed=0, budget=budget)
    return time.perf_counter() - t0, x, sched


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, default=512, help="slices on the 1,024-worker machine (eval-large.yaml's 0.5 per worker: 512)")
    ap.add_argument("--budget", type=int, help="model evaluations (default: budget_for the machine, as evaluate's oracle)")
    ap.add_argument("--workload", default="ycsb-c")
    args = ap.parse_args()
    out = {}
    for label, ref, n in (("demo", "amd-milan-nps4", 128), ("large", str(LARGE), args.slices)):
        m = load_sim_machine(ref)
        budget = args.budget or budget_for(m)
        today = timed(m, args.workload, n, budget)
        with before_issue_39():
            before = timed(m, args.workload, n, budget)
        same = today[2] == before[2]
        print(f"{label}: {m.name}, {n} slices, budget {budget}: today {today[0]:.1f} s, before {before[0]:.1f} s "
              f"(ratio {today[0] / before[0]:.3f}); throughput {today[1]:.4g} vs {before[1]:.4g} q/s, same schedule: {same}")
        out[label] = {"machine": m.name, "n_slices": n, "budget": budget, "today_s": today[0], "before_s": before[0],
                      "throughput": today[1], "before_throughput": before[1], "same_schedule": same}
    large = out["large"]
    write_record(f"oracle_search_1024_workers_{args.slices}", f"group oracle search, {args.workload}, 16 nodes x 64 workers, {args.slices} slices, "
                 f"budget {large['budget']} (source=sim)", large["today_s"], "s", "the search before #39's oracle work (tests/dense_oracle.py), same run",
                 large["before_s"], demo=out["demo"], large=large)  # fmt: skip


if __name__ == "__main__":
    main()
