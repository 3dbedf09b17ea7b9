"""Collector overhead: throughput with per-slice profiling on vs off (granularity 100 queries),
YCSB-C and YCSB-A, measured alternately in the same run; and the cost of one sweeping + stitching
round (runtime snapshot + turning it into a raw snapshot row).

On this host the probe is in software mode (task-clock, page-faults, context-switches through
read()); with hardware counters and rdpmc the per-read cost is lower. Goal: <= 1% throughput loss.
Each worker drains up to 100 queued queries, groups them by slice and reads the probe once per
slice group (+1 per window), so the cost is ~(distinct slices per window + 1) / 100 reads per query.
"""

from __future__ import annotations

import numpy as np

from pmoss.bench import best_time, write_record
from pmoss.policies import generate
from pmoss.runtime import Runtime
from pmoss.testbed import Testbed
from pmoss.topology import discover

KEYS, SLICES, SECONDS, ROUNDS = 1_000_000, 256, 2.0, 3


def throughput(rt: Runtime, workload: str, seed: int) -> float:
    return rt.run(workload, SECONDS, seed=seed)["throughput"]


def main() -> None:
    off = Runtime(KEYS, n_slices=SLICES, batch_queries=100)
    on = Runtime(KEYS, n_slices=SLICES, batch_queries=100, probe="auto")
    for workload in ("ycsb-c", "ycsb-a"):
        t_off, t_on = [], []
        for r in range(ROUNDS):  # alternate, so drift in machine load hits both alike
            t_off.append(throughput(off, workload, r))
            t_on.append(throughput(on, workload, r))
        v_on, v_off = float(np.median(t_on)), float(np.median(t_off))
        write_record(f"collector_overhead_{workload.replace('-', '_')}", f"{workload} throughput with per-slice profiling (probe auto = software here; windows of <= 100 queries run grouped by slice, one read per slice group)",
                     v_on, "queries/s", "same runtime without probe (same run, alternating)", v_off, loss_pct=100 * (1 - v_on / v_off),
                     goal_loss_pct=1.0, meets_target=v_on / v_off >= 0.99)  # fmt: skip
    bed = Testbed(discover(name="localhost"), KEYS, n_slices=SLICES, probe="auto")
    bed.enforce(generate("sn-spread", bed.machine, SLICES))
    bed.run("ycsb-c", 0.5, seed=1)
    sweep = best_time(bed.rt.snapshot, repeat=20)
    stitch = best_time(lambda: bed.run("ycsb-c", 0.0, seed=2), repeat=5) - 0.0
    write_record("collector_sweep_round", "one sweeping round: runtime snapshot of all per-slice counters (256 slices)", sweep, "s",
                 "one sweeping + stitching round incl. a zero-length run and the raw snapshot row", stitch)  # fmt: skip


if __name__ == "__main__":
    main()
