"""Native runtime benchmarks (C code; Python only drives and records).

    cmake -S . -B build && cmake --build build -j2
    .venv/bin/python benchmarks/bench_runtime.py [--keys 10000000] [--seconds 3]

Writes benchmarks/results/runtime_*.json (docs/benchmarks-runtime.md):
- runtime_tree_lookup / runtime_tree_insert: single-thread pm_tree ops on --keys random 64-bit
  keys vs absl::btree_map (same keys, same order, same run; build/runtime/pmoss_bench_absl).
- runtime_ycsb_{a,c,e}_2w: throughput with 2 workers vs 1 worker (same run), --keys dense keys,
  256 slices, os-default schedule.
- runtime_router: one router's queries/s (generate ycsb-c + route + enqueue, no tree work)
  vs the 2-worker ycsb-c throughput (ratio > 1: the router is not the bottleneck).
- runtime_migration_per_slice: move_pages time per slice for --keys keys / 256 slices, all
  slices moved os-default -> se-numa node 0 (the SAME node: this host has one NUMA node),
  against the ~0.1 s/slice the P-MOSS paper reports (a published figure, not measured here).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from pmoss.bench import write_record
from pmoss.collect.runtime import Runtime, library_path

BUILD = library_path().parent
PAPER_MIGRATION_S_PER_SLICE = 0.1


def _run_json(*args: str) -> dict:
    out = subprocess.run([str(BUILD / args[0]), *args[1:]], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def _load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def bench_tree(n: int) -> None:
    ours = _run_json("pmoss_bench_tree", "tree", str(n))
    absl_bin = BUILD / "pmoss_bench_absl"
    if not absl_bin.exists():
        raise SystemExit(f"{absl_bin} missing: install libabsl-dev and re-run cmake")
    base = _run_json("pmoss_bench_absl", str(n))
    for op in ("lookup", "insert"):
        write_record(
            f"runtime_tree_{op}", f"single-thread pm_tree {op}s/s, {n} random uint64 keys, leaves 255",
            n / ours[f"{op}_s"], "ops/s", "absl::btree_map<uint64_t,uint64_t> (same keys, same run)",
            n / base[f"{op}_s"], host_load=_load(),
        )  # fmt: skip


def bench_throughput(n: int, seconds: float) -> float:
    """2-worker vs 1-worker throughput per mix; returns the 2-worker ycsb-c figure."""
    two = Runtime(n_keys=n, dataset="dense", seed=1, n_slices=256)
    one = Runtime(n_keys=n, dataset="dense", seed=1, n_slices=256, max_workers=1)
    ycsb_c = 0.0
    for mix in ("ycsb-a", "ycsb-c", "ycsb-e"):
        r2 = two.run(mix, seconds, seed=1)
        r1 = one.run(mix, seconds, seed=1)
        assert r2["completed"] == r2["dispatched"] and r1["completed"] == r1["dispatched"]
        if mix == "ycsb-c":
            ycsb_c = r2["throughput"]
        write_record(
            f"runtime_{mix.replace('-', '_')}_2w",
            f"{mix} throughput, 2 workers (1 router, sweepers floating), {n} dense keys, 256 slices, zipf 0.99",
            r2["throughput"], "queries/s", "same with 1 worker (same run)", r1["throughput"], host_load=_load(),
        )  # fmt: skip
    return ycsb_c


def bench_router(n: int, seconds: float, ycsb_c_2w: float) -> None:
    r = _run_json("pmoss_bench_tree", "router", str(n), str(seconds))
    write_record(
        "runtime_router", f"one router: ycsb-c zipf generation + slice lookup (256) + enqueue, {n} keys",
        r["queries"] / r["seconds"], "queries/s", "2-worker ycsb-c throughput end to end (same run)",
        ycsb_c_2w, host_load=_load(),
    )  # fmt: skip


def bench_migration(n: int) -> None:
    rt = Runtime(n_keys=n, dataset="dense", seed=1, n_slices=256)
    rep = rt.set_schedule([0] * 256, [-1] * 256, "se-numa")
    assert rep.slices_moved == 256 and rep.pages_failed == 0
    write_record(
        "runtime_migration_per_slice",
        f"move_pages time per slice, {n} keys / 256 slices, SAME node (1-node host: no data crosses nodes)",
        rep.seconds / rep.slices_moved, "s/slice", "P-MOSS paper, ~0.1 s per slice (published, not measured here)",
        PAPER_MIGRATION_S_PER_SLICE, pages_moved=rep.pages_moved, pages_failed=rep.pages_failed,
        pages_absent=rep.pages_absent, host_load=_load(),
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    if not Path(BUILD / "pmoss_bench_tree").exists():
        raise SystemExit(f"{BUILD}/pmoss_bench_tree missing: cmake -S . -B build && cmake --build build")
    bench_tree(args.keys)
    ycsb_c = bench_throughput(args.keys, args.seconds)
    bench_router(args.keys, args.seconds, ycsb_c)
    bench_migration(args.keys)


if __name__ == "__main__":
    main()
