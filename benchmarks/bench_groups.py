"""Execution groups on the paper grid: every baseline, the group heuristic, the one-core and the group oracle.

The 5 pool machines x the 5 paper workloads, and the unseen POWER8, at 128 and 256 slices;
noise-free model (source=sim), canonical seed-0 baselines (sn-hot given the workload's load), both
oracles at the machine-scaled default budget (`pmoss.sim.oracle.budget_for`). Writes
benchmarks/results/groups_grid_<N>.json and prints a Markdown table for docs/benchmarks-groups.md.
"""

from __future__ import annotations

import argparse
import json
import time

from pmoss.bench import RESULTS
from pmoss.contracts.policies import BASELINE_KINDS
from pmoss.contracts.workload import PAPER_WORKLOADS
from pmoss.sim import PAPER_MACHINES, PAPER_UNSEEN, load_sim_machine
from pmoss.sim.fidelity import fidelity_row
from pmoss.sim.oracle import budget_for


def grid(n_slices: int, dataset: str) -> list[dict]:
    rows = []
    for m in PAPER_MACHINES + PAPER_UNSEEN:  # the paper's grid and its unseen POWER8
        for w in PAPER_WORKLOADS:
            t = time.perf_counter()
            row = fidelity_row(m, w, dataset=dataset, n_slices=n_slices, oracle_budget=budget_for(load_sim_machine(m)), one_core_oracle=True)
            row["seconds"] = time.perf_counter() - t
            rows.append(row)
            print(f"{m} {w} N={n_slices}: group oracle / best baseline {row['oracle'] / max(row[k] for k in BASELINE_KINDS):.3f} ({row['seconds']:.0f} s)", flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    kinds = [k for k in BASELINE_KINDS]
    head = "| machine | workload | " + " | ".join(kinds) + " | one-core oracle | group oracle | group oracle / best baseline |"
    out = [head, "|" + "---|" * (len(kinds) + 5)]
    for r in rows:
        best = max(r[k] for k in kinds)
        vals = " | ".join(f"**{r[k] / best:.2f}**" if r[k] == best else f"{r[k] / best:.2f}" for k in kinds)
        out.append(f"| {r['machine']} | {r['workload']} | {vals} | {r['oracle_one_core'] / best:.2f} | {r['oracle'] / best:.2f} | {r['oracle'] / best:.3f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--dataset", default="uniform", help="key distribution (uniform: YCSB's hashed inserts, as `pmoss sim fidelity`)")
    args = ap.parse_args()
    for n in args.slices:
        rows = grid(n, args.dataset)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"groups_grid_{n}.json").write_text(json.dumps({"source": "sim", "n_slices": n, "dataset": args.dataset, "rows": rows}, indent=1) + "\n")
        print(f"\n### {n} slices (source=sim, noise-free, throughput relative to the best baseline of the cell)\n")
        print(markdown(rows))


if __name__ == "__main__":
    main()
