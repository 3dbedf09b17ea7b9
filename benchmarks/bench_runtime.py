"""Native runtime benchmarks (C code; Python only drives and records).

    cmake -S . -B build && cmake --build build -j2
    .venv/bin/python benchmarks/bench_runtime.py [--keys 10000000] [--seconds 3] [--repeats 3]

Writes benchmarks/results/runtime_*.json (docs/benchmarks-runtime.md):
Comparisons are --repeats interleaved repeats (ABAB...): value and baseline are medians, with
min-max (value_spread, baseline_spread) and the round-paired ratio's range and verdict ("within
noise" when the range includes 1.0; pmoss.bench.verdict).
- runtime_tree_lookup / runtime_tree_insert: single-thread pm_tree ops on --keys random 64-bit
  keys vs absl::btree_map (same keys, same order; build/runtime/pmoss_bench_absl).
- runtime_ycsb_{a,c,e}_2w: throughput with 2 workers vs 1 worker, --keys dense keys,
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
from collections.abc import Callable
from pathlib import Path

from pmoss.bench import Spread, interleaved, ratio_spread, verdict, write_record
from pmoss.collect.runtime import Runtime, library_path

BUILD = library_path().parent
PAPER_MIGRATION_S_PER_SLICE = 0.1


def _run_json(*args: str) -> dict:
    out = subprocess.run([str(BUILD / args[0]), *args[1:]], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def _load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def bench_tree(n: int, repeats: int) -> None:
    if not (BUILD / "pmoss_bench_absl").exists():
        raise SystemExit(f"{BUILD / 'pmoss_bench_absl'} missing: install libabsl-dev and re-run cmake")
    # one process per side and round (each times lookups and inserts), sides alternating (ABAB...)
    out = interleaved({"ours": lambda r: _run_json("pmoss_bench_tree", "tree", str(n)), "absl": lambda r: _run_json("pmoss_bench_absl", str(n))}, repeats)
    for op in ("lookup", "insert"):
        rates = {name: [n / m[f"{op}_s"] for m in ms] for name, ms in out.items()}
        _record_pair(f"runtime_tree_{op}", f"single-thread pm_tree {op}s/s, {n} random uint64 keys, leaves 255", "ops/s",
                     "absl::btree_map<uint64_t,uint64_t> (same keys, same order)", rates["ours"], rates["absl"])  # fmt: skip


def _record_pair(name: str, metric: str, unit: str, baseline: str, ours: list[float], base: list[float]) -> None:
    """A record whose value and baseline are medians of interleaved repeats, with min-max and the
    round-paired ratio's range and verdict ("within noise" when it includes 1.0)."""
    ratio = ratio_spread(ours, base)
    write_record(name, metric, Spread.of(ours).median, unit, f"{baseline}; median of {len(base)} interleaved repeats",
                 Spread.of(base).median, value_spread=Spread.of(ours).as_dict(), baseline_spread=Spread.of(base).as_dict(),
                 ratio_spread=ratio.as_dict(), verdict=verdict(ratio), host_load=_load())  # fmt: skip


def bench_throughput(n: int, seconds: float, repeats: int) -> float:
    """2-worker vs 1-worker throughput per mix, interleaved repeats; returns the 2-worker ycsb-c median."""
    rts = {"two": Runtime(n_keys=n, dataset="dense", seed=1, n_slices=256),
           "one": Runtime(n_keys=n, dataset="dense", seed=1, n_slices=256, max_workers=1)}  # fmt: skip
    ycsb_c = 0.0
    for mix in ("ycsb-a", "ycsb-c", "ycsb-e"):

        def run(name: str, mix: str = mix) -> Callable[[int], float]:
            def one(r: int) -> float:
                out = rts[name].run(mix, seconds, seed=1 + r)
                assert out["completed"] == out["dispatched"]
                return out["throughput"]

            return one

        tp = interleaved({name: run(name) for name in rts}, repeats)
        if mix == "ycsb-c":
            ycsb_c = Spread.of(tp["two"]).median
        _record_pair(f"runtime_{mix.replace('-', '_')}_2w",
                     f"{mix} throughput, 2 workers (1 router, sweepers floating), {n} dense keys, 256 slices, zipf 0.99",
                     "queries/s", "same with 1 worker (same run)", tp["two"], tp["one"])  # fmt: skip
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
        f"migration time per slice, {n} keys / 256 slices, SAME node (1-node host: pages are located, none needs moving)",
        rep.seconds / rep.slices_moved, "s/slice", "P-MOSS paper, ~0.1 s per slice (published, not measured here)",
        PAPER_MIGRATION_S_PER_SLICE, pages_moved=rep.pages_moved, pages_failed=rep.pages_failed,
        pages_absent=rep.pages_absent, host_load=_load(),
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats per comparison (median, min-max, verdict; default 3)")
    args = ap.parse_args()
    if not Path(BUILD / "pmoss_bench_tree").exists():
        raise SystemExit(f"{BUILD}/pmoss_bench_tree missing: cmake -S . -B build && cmake --build build")
    bench_tree(args.keys, args.repeats)
    ycsb_c = bench_throughput(args.keys, args.seconds, args.repeats)
    bench_router(args.keys, args.seconds, ycsb_c)
    bench_migration(args.keys)


if __name__ == "__main__":
    main()
