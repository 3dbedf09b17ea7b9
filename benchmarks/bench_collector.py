"""Collector overhead: throughput with per-slice profiling on vs off, and what it costs in latency.

    cmake -S . -B build && cmake --build build -j2
    .venv/bin/python benchmarks/bench_collector.py [--seconds 2] [--rounds 5] [--waits 1000,100000]

Every configuration is a separate runtime (1M dense keys, 256 slices, os-default schedule, this
host's workers); each round runs every configuration once, in rotated order, with the same seed,
so drift in machine load hits all alike; figures are medians over the rounds. Profiling "on" is
probe auto (software mode on hosts without a PMU) at granularity 100 queries: a worker collects
queries into per-slice batches of <= 100 and runs due batches back to back, one probe reading
between two; a partial batch runs once its oldest query waited batch_max_wait_us. "Off" has no
probe (batches never wait then). Records (docs/benchmarks.md, "Collector overhead"):
- collector_overhead_ycsb_c / _ycsb_a: throughput on vs off at the default max wait; extras:
  loss_pct, probe reads per query, queries per batch, share of full batches, p50/p99 latency on
  and off, host load.
- collector_overhead_ycsb_c_wait_<us>: the same for each --waits value (the latency/overhead
  trade-off).
- collector_probe_read: ns per probe reading (build/runtime/pmoss_bench_probe) vs one getpid
  system call timed the same way in the same run.
- collector_sweep_round: one sweeping round (runtime snapshot of all per-slice counters) vs a
  sweeping + stitching round with a zero-length run.
Goal (issue #4): <= 1% throughput loss.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from dataclasses import dataclass, field

import numpy as np

from pmoss.bench import best_time, write_record
from pmoss.policies import generate
from pmoss.runtime import Runtime, config_defaults, library_path
from pmoss.testbed import Testbed
from pmoss.topology import discover

KEYS, SLICES, GRANULARITY = 1_000_000, 256, 100


@dataclass
class Config:
    name: str
    wait_us: int | None  # None: profiling off
    rt: Runtime
    runs: list[dict] = field(default_factory=list)

    def median(self, key: str) -> float:
        return float(np.median([r[key] for r in self.runs]))

    def summary(self) -> dict[str, float]:
        done = sum(r["completed"] for r in self.runs)
        batches = sum(r["batches"] for r in self.runs)
        return {
            "reads_per_query": sum(r["probe_reads"] for r in self.runs) / done,
            "queries_per_batch": done / batches,
            "full_batch_share": sum(r["full_batches"] for r in self.runs) / batches,
            "p50_us": self.median("latency_p50_ns") / 1e3,
            "p99_us": self.median("latency_p99_ns") / 1e3,
        }


def _load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def overhead(workload: str, waits: list[int], default_wait: int, seconds: float, rounds: int) -> None:
    configs = [Config("off", None, Runtime(KEYS, n_slices=SLICES, batch_queries=GRANULARITY))]
    for w in waits:
        rt = Runtime(KEYS, n_slices=SLICES, batch_queries=GRANULARITY, batch_max_wait_us=w, probe="auto")
        configs.append(Config(f"on_{w}", w, rt))
    load_before = _load()
    for r in range(rounds):
        k = r % len(configs)
        for c in configs[k:] + configs[:k]:
            c.runs.append(c.rt.run(workload, seconds, seed=r))
    off = configs[0]
    base, s_off = off.median("throughput"), off.summary()
    for c in configs[1:]:
        v, s = c.median("throughput"), c.summary()
        name = f"collector_overhead_{workload.replace('-', '_')}" + ("" if c.wait_us == default_wait else f"_wait_{c.wait_us}")
        write_record(
            name, f"{workload} throughput with per-slice profiling (probe auto, batches of <= {GRANULARITY} queries per slice, max wait {c.wait_us} us)",
            v, "queries/s", f"same runtime without probe (same run, interleaved, median of {rounds} x {seconds} s)", base,
            loss_pct=100 * (1 - v / base), goal_loss_pct=1.0, meets_target=v / base >= 0.99, batch_max_wait_us=c.wait_us,
            reads_per_query=s["reads_per_query"], queries_per_batch=s["queries_per_batch"], full_batch_share=s["full_batch_share"],
            latency_p50_us_on=s["p50_us"], latency_p50_us_off=s_off["p50_us"], latency_p99_us_on=s["p99_us"], latency_p99_us_off=s_off["p99_us"],
            host_load=f"{load_before} (before), {_load()} (after)",
        )  # fmt: skip


def probe_read() -> None:
    out = subprocess.run([str(library_path().parent / "pmoss_bench_probe")], check=True, capture_output=True, text=True)
    m = json.loads(out.stdout)
    write_record("collector_probe_read", f"one probe reading (pm_probe_read, {m['mode']} mode), ns; best of 7 x 100000", m["read_ns"], "ns",
                 "one getpid system call (same loop, same run)", m["getpid_ns"], syscalls_per_read=m["syscalls_per_read"],
                 rdpmc_per_read=m["rdpmc_per_read"], host_load=_load())  # fmt: skip


def sweep_round() -> None:
    bed = Testbed(discover(name="localhost"), KEYS, n_slices=SLICES, probe="auto")
    bed.enforce(generate("sn-spread", bed.machine, SLICES))
    bed.run("ycsb-c", 0.5, seed=1)
    sweep = best_time(bed.rt.snapshot, repeat=20)
    stitch = best_time(lambda: bed.run("ycsb-c", 0.0, seed=2), repeat=5)
    write_record("collector_sweep_round", "one sweeping round: runtime snapshot of all per-slice counters (256 slices)", sweep, "s",
                 "one sweeping + stitching round incl. a zero-length run and the raw snapshot row", stitch)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one run (default 2)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--waits", default="1000,100000", help="extra batch_max_wait_us values for ycsb-c, comma-separated ('' for none)")
    args = ap.parse_args()
    if not (library_path().parent / "pmoss_bench_probe").exists():
        raise SystemExit(f"{library_path().parent}/pmoss_bench_probe missing: cmake -S . -B build && cmake --build build")
    default_wait = config_defaults()["batch_max_wait_us"]
    extra = [int(w) for w in args.waits.split(",") if w.strip()]
    probe_read()
    overhead("ycsb-c", [default_wait, *[w for w in extra if w != default_wait]], default_wait, args.seconds, args.rounds)
    overhead("ycsb-a", [default_wait], default_wait, args.seconds, args.rounds)
    sweep_round()


if __name__ == "__main__":
    main()
