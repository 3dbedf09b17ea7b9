"""Simulator speed: episodes/s of the batch path (raw snapshot rows) for 256 slices on a 64-core
descriptor (amd-milan-nps1), against the one-episode-at-a-time path measured in the same run.

    .venv/bin/python benchmarks/bench_sim.py [--episodes 512] [--batch 256]

Writes benchmarks/results/sim_speed.json (docs/benchmarks-sim.md).
"""

from __future__ import annotations

import argparse

from pmoss.bench import best_time, write_record
from pmoss.contracts.policies import PAPER_MIX, generate
from pmoss.sim import load_sim_machine, simulate, simulate_batch

MACHINE, WORKLOAD, DATASET, N_SLICES = "amd-milan-nps1", "ycsb-a", "dense", 256
TARGET_EPS = 1000.0


def pool(n: int) -> list:
    """n schedules in the paper's offline policy mix, distinct by generator seed."""
    m = load_sim_machine(MACHINE)
    kinds = [k for k, share in PAPER_MIX.items() for _ in range(round(share * 1000))]
    return [generate(kinds[(i * 7919) % len(kinds)], m, N_SLICES, i) for i in range(n)]  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--episodes", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--single", type=int, default=32, help="episodes for the one-at-a-time baseline")
    args = ap.parse_args()
    m = load_sim_machine(MACHINE)
    schedules = pool(args.episodes)
    seeds = list(range(args.episodes))

    def batched() -> None:
        for i in range(0, args.episodes, args.batch):
            simulate_batch(m, WORKLOAD, DATASET, schedules[i : i + args.batch], seeds=seeds[i : i + args.batch])

    def single() -> None:
        for s, seed in zip(schedules[: args.single], seeds, strict=False):
            simulate(m, WORKLOAD, DATASET, s, seed=seed)

    batched()  # warm the per-profile caches
    value = args.episodes / best_time(batched, repeat=3)
    base = args.single / best_time(single, repeat=3)
    write_record(
        "sim_speed", f"simulated episodes/s ({MACHINE}, 64 cores, {N_SLICES} slices, {WORKLOAD}, batch {args.batch}, rows incl. counters)",
        value, "episodes/s", "one episode at a time (simulate())", base,
        target_eps=TARGET_EPS, meets_target=value >= TARGET_EPS, vs_target=value / TARGET_EPS,
    )  # fmt: skip


if __name__ == "__main__":
    main()
