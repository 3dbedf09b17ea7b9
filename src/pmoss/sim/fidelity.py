"""Fidelity checks of the simulated testbed (docs/machine-model.md §14).

`fidelity_table` runs the paper's machines x workloads under every baseline kind (canonical seed-0
schedules, noise-free model) plus the oracle; `fidelity_checks` turns it into pass/fail facts:
the winning baseline differs across machines, and best/worst stays within the paper's range.
The third check (simulator vs the real runtime within +-25%) needs the runtime and is pending.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pmoss.policies import BASELINE_KINDS, generate
from pmoss.sim.episode import throughput
from pmoss.sim.oracle import oracle
from pmoss.sim.pool import PAPER_MACHINES, load_sim_machine
from pmoss.workload import PAPER_WORKLOADS

MAX_SPREAD = 6.5  # best/worst baseline; the paper's largest gap was 5.91x ("about 6x")


def fidelity_row(machine: str, workload: str, *, dataset: str = "dense", n_slices: int = 256,
                 oracle_budget: int = 600, n_records: int = 10_000_000) -> dict:
    """Throughput (queries/s) of every baseline kind and the oracle on one machine and workload."""
    m = load_sim_machine(machine)
    scheds = [generate(k, m, n_slices, 0) for k in BASELINE_KINDS]
    xs = throughput(m, workload, dataset, scheds, n_records=n_records)
    row = {"machine": machine, "workload": workload, "dataset": dataset, "source": "sim"}
    row.update({k: float(x) for k, x in zip(BASELINE_KINDS, xs, strict=True)})
    row["oracle"] = oracle(m, workload, dataset, n_slices, seed=0, budget=oracle_budget, n_records=n_records)[1]
    base = {k: row[k] for k in BASELINE_KINDS}
    row["best_baseline"] = max(base, key=base.get)
    row["worst_baseline"] = min(base, key=base.get)
    row["spread"] = max(base.values()) / min(base.values())  # best / worst baseline
    row["spread_with_oracle"] = max(row["oracle"], max(base.values())) / min(base.values())
    row["oracle_vs_best"] = row["oracle"] / max(base.values())
    return row


def fidelity_table(machines: Sequence[str] = PAPER_MACHINES, workloads: Sequence[str] = PAPER_WORKLOADS, *,
                   dataset: str = "dense", n_slices: int = 256, oracle_budget: int = 600) -> list[dict]:
    """One row per (machine, workload); see `fidelity_row`."""
    return [fidelity_row(m, w, dataset=dataset, n_slices=n_slices, oracle_budget=oracle_budget)
            for m in machines for w in workloads]  # fmt: skip


def fidelity_checks(table: list[dict]) -> dict:
    """The pass/fail facts of §14 (the runtime comparison is reported as pending, never faked)."""
    winners = {m: Counter(r["best_baseline"] for r in table if r["machine"] == m) for m in dict.fromkeys(r["machine"] for r in table)}
    top = {m: c.most_common(1)[0][0] for m, c in winners.items()}
    spread = max(r["spread"] for r in table)
    return {
        "max_spread_with_oracle": max(r["spread_with_oracle"] for r in table),
        "winner_per_machine": top,
        "winners_differ": len(set(top.values())) > 1 or len({r["best_baseline"] for r in table}) > 1,
        "max_spread": spread,
        "spread_ok": spread <= MAX_SPREAD,
        "runtime_within_25pct": "pending: needs the real runtime (docs/machine-model.md §14.3)",
    }
