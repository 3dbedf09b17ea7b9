"""Collector overhead: throughput with per-slice profiling on vs off, and what batching costs in latency.

    cmake -S . -B build && cmake --build build -j2
    .venv/bin/python benchmarks/bench_collector.py [--seconds 2] [--rounds 5] [--workers 1] [--waits 0,10000] [--loads 0.3,0.5,0.7,0.8] [--parts overhead,latency,sweep,periods]

Profiling "on" is probe auto (software mode on hosts without a PMU) at granularity 100: a worker
collects queries into per-slice batches of <= 100 and runs due batches back to back; sampled
attribution (the runtime's default probe period, 100 ms) runs a slice's first batch and then at most
one batch per period between two probe readings, the rest between none; a partial batch runs as
soon as the worker's queue is empty (work-conserving) or, while queries keep coming, once its
oldest query waited batch_max_wait_us (default 0 with sampling; 1 ms when every batch is read).
"exact" (latency part) reads around every batch (probe_period_us 0), for reference.
Per-slice batching changes execution by itself (a slice's tree stays in cache for its whole
batch; queries wait), so every wait W is measured three ways:
- on: probe, wait W;
- off_batched: the same runtime with profiling off for its runs (Runtime.set_profiling), same
  batching (wait W) -- the baseline for the probing overhead proper, on the same tree;
- off: no probe, no wait (the runtime's default without a probe), a runtime of its own -- what a
  run without profiling looks like end to end.
Each other configuration is its own runtime (--keys dense keys: 1M and 10M by default, 256 slices, os-default schedule, --workers
workers); each round runs every configuration once, in rotated order, with the same seed, so
drift in machine load hits all alike; figures are medians over the rounds. --workers 1 (default)
keeps the worker the bottleneck, as with the paper's reserved router cores: on a 2-CPU host, two
workers share both CPUs with the floating router, the router becomes the bottleneck and the figure
measures CPU sharing instead of the worker path (0 = one worker per usable CPU).

Records (docs/benchmarks.md, "Collector overhead"):
- collector_overhead_ycsb_c / _ycsb_a: on vs off_batched at the default wait (goal: <= 1% loss);
  extras: probe reads per query, queries per batch, share of full batches, est_probe_loss_pct
  (reads per query x ns per read / worker ns per query: robust to machine load, unlike the
  throughput ratio), throughput of off and on/off ratio, p50/p99 latency of on, off_batched and
  off, host load.
- collector_overhead_ycsb_c_wait_<us>: the same for each --waits value (the trade-off).
- collector_overhead_ycsb_{c,a}_keys_10m: the same on plan.py's default index size (10M keys).
- collector_latency_ycsb_c[_keys_10m]_{closed,load_30,load_50,load_70,load_80}: p50 latency on vs off (medians, us;
  goal: ratio <= 1.2), each round's ratio paired (ratio_spread: median, min-max; verdict "within
  noise" when the range includes 1.0, "loss" when profiling is slower in every round); on and off
  are one runtime with profiling switched per run (two trees of the same keys differ by more than
  profiling costs: other_tree_p50_ratio_spread, a second unprofiled runtime vs off, says by how much),
  with throughput, p50, p99 and probe reads per query of both sides; closed loop (each side at its
  own maximum: latency there is queue fill / throughput) and open loop at the same offered rate for
  both (--loads x the profiled closed-loop median), the comparison "at the same throughput"
  (sustained_share: the worst round's achieved / offered rate over both sides, and per side;
  meets_target needs >= 0.99 and a median p50 ratio <= 1.2; saturated: the unprofiled side itself
  fell short of the offered rate, so the host, not profiling, set the latency at that load;
  p50_sign_test: in how many rounds profiling's p50 was the higher, with the sign test's p, and
  the same for the other tree: near saturation a round's p50 moves 10-100x, so the median ratio
  alone says little; p50_us_rounds: every round's p50 per side).
- collector_latency_periods_ycsb_c_keys_10m_load_80 (--parts periods): the probe period's trade-off,
  p50 ratio vs off and readings per query at each --periods value, interleaved in the same rounds,
  all on one runtime (period and profiling switched per run).
- collector_probe_read: ns per probe reading (build/runtime/pmoss_bench_probe) vs one getpid
  system call timed the same way in the same run.
- collector_sweep_round: one sweeping round (runtime snapshot of all per-slice counters) vs a
  sweeping + stitching round with a zero-length run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pmoss.bench import Spread, best_time, interleaved, ratio_spread, sign_test, verdict, write_record
from pmoss.collect.runtime import BATCH_MAX_WAIT_US_DEFAULT, Runtime, library_path
from pmoss.collect.testbed import Testbed
from pmoss.collect.topology import discover
from pmoss.contracts.policies import generate

KEYS, SLICES, GRANULARITY = 1_000_000, 256, 100
PLAN_KEYS = 10_000_000  # plan.py's default n_records: the index size datasets are collected at


@dataclass
class Config:
    rt: Runtime | Profiled
    runs: list[dict[str, Any]] = field(default_factory=list)

    def median(self, key: str) -> float:
        return float(np.median([r[key] for r in self.runs]))

    def latency_us(self) -> tuple[float, float]:
        return self.median("latency_p50_ns") / 1e3, self.median("latency_p99_ns") / 1e3

    def batching(self) -> dict[str, float]:
        done, batches = sum(r["completed"] for r in self.runs), sum(r["batches"] for r in self.runs)
        return {"reads_per_query": sum(r["probe_reads"] for r in self.runs) / done, "queries_per_batch": done / batches,
                "full_batch_share": sum(r["full_batches"] for r in self.runs) / batches}  # fmt: skip


def _tag(workload: str, keys: int) -> str:
    """A record name's workload and index size part: ycsb_c, ycsb_c_keys_10m, ycsb_c_keys_200000."""
    size = "" if keys == KEYS else f"_keys_{keys // 1_000_000}m" if keys % 1_000_000 == 0 else f"_keys_{keys}"
    return workload.replace("-", "_") + size


def csv_of(cast: Any) -> Any:
    """An argparse type: a non-empty comma-separated list of `cast` values, or a clear error."""
    def parse(text: str) -> list:
        try:
            values = [cast(x) for x in text.split(",") if x.strip()]
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
        if not values:
            raise argparse.ArgumentTypeError("needs at least one value")
        return values

    return parse


def _load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def overhead(workload: str, waits: list[int], seconds: float, rounds: int, workers: int, read_ns: float, keys: int = KEYS) -> None:
    def runtime(**kw: Any) -> Runtime:
        return Runtime(keys, n_slices=SLICES, batch_queries=GRANULARITY, max_workers=workers, **kw)

    off = Config(runtime())
    # on and off_batched: one runtime, profiling switched per run (one tree for both: two trees of
    # the same keys differ by more than profiling costs; see latency())
    probed = {w: runtime(batch_max_wait_us=w, probe="auto") for w in waits}
    pairs = {w: (Config(Profiled(rt, False)), Config(Profiled(rt, True))) for w, rt in probed.items()}
    order = [off, *[c for pair in pairs.values() for c in pair]]
    load_before = _load()
    for r in range(rounds):
        k = r % len(order)
        for c in order[k:] + order[:k]:
            c.runs.append(c.rt.run(workload, seconds, seed=r))
    t_off, (p50_off, p99_off) = off.median("throughput"), off.latency_us()
    n_workers = len(off.rt.worker_cpus())
    for w, (base, on) in pairs.items():
        v, b = on.median("throughput"), base.median("throughput")
        (p50, p99), (p50_b, p99_b) = on.latency_us(), base.latency_us()
        batching = on.batching()
        # load-robust estimate: read time per query over worker time per query
        est = 100 * batching["reads_per_query"] * read_ns * 1e-9 * v / n_workers
        name = f"collector_overhead_{workload.replace('-', '_')}" + ("" if w == BATCH_MAX_WAIT_US_DEFAULT else f"_wait_{w}")
        name += "" if keys == KEYS else f"_keys_{keys // 1_000_000}m"
        write_record(
            name, f"{workload} throughput, {keys:,} keys, with per-slice profiling (probe auto, batches of <= {GRANULARITY} queries per slice, max wait {w} us, {workers or 'all'} worker(s))",
            v, "queries/s", f"same batching without probe (same run, interleaved, median of {rounds} x {seconds} s)", b,
            # meets_target needs the estimate too: the measured ratio alone moves by +-4 points between runs
            loss_pct=100 * (1 - v / b), goal_loss_pct=1.0, meets_target=v / b >= 0.99 and est <= 1.0,
            batch_max_wait_us=w, workers=n_workers, **batching, est_probe_loss_pct=est,
            throughput_off=t_off, ratio_vs_off=v / t_off,
            latency_p50_us_on=p50, latency_p50_us_off_batched=p50_b, latency_p50_us_off=p50_off,
            latency_p99_us_on=p99, latency_p99_us_off_batched=p99_b, latency_p99_us_off=p99_off,
            host_load=f"{load_before} (before), {_load()} (after)",
        )  # fmt: skip


@dataclass
class Profiled:
    """A runtime with a probe, run with profiling on or off, on at a probe period (None: the
    default): every configuration of one runtime shares its tree."""

    rt: Runtime
    on: bool
    period_us: int | None = None

    def run(self, *args: Any, **kw: Any) -> dict[str, Any]:
        self.rt.set_profiling(self.on)
        if self.on:
            self.rt.set_probe_period(self.period_us)
        return self.rt.run(*args, **kw)


def measure_rounds(rts: dict[str, Runtime | Profiled], workload: str, seconds: float, rounds: int, offered: float) -> dict[str, dict[str, list[float]]]:
    """Every runtime once per round, in rotated order, at `offered` queries/s (0: closed loop):
    per runtime, each round's throughput, p50 and p99 (us) and probe reads per query."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in rts}

    def one(name: str) -> Any:
        def run(r: int) -> float:
            runs[name].append(rts[name].run(workload, seconds, seed=r, offered_qps=offered))
            return runs[name][-1]["throughput"]

        return run

    interleaved({name: one(name) for name in rts}, rounds)
    return {name: {"throughput": [o["throughput"] for o in rs], "p50": [o["latency_p50_ns"] / 1e3 for o in rs],
                   "p99": [o["latency_p99_ns"] / 1e3 for o in rs], "reads_per_query": [o["probe_reads"] / max(o["completed"], 1) for o in rs]}
            for name, rs in runs.items()}  # fmt: skip


def periods(workload: str, keys: int, seconds: float, rounds: int, workers: int, load: float, period_list: list[int]) -> None:
    """The probe period's trade-off: p50 latency of profiling at each period vs off, all interleaved
    in the same rounds, open loop at `load` x the lowest closed-loop median of the periods (the
    point where a reading's cost is amplified most by the queue), with readings per query. Every
    period and off are one runtime (Runtime.set_probe_period, set_profiling): one tree for all."""
    probed = Runtime(keys, probe="auto", n_slices=SLICES, batch_queries=GRANULARITY, max_workers=workers)
    rts = {"off": Profiled(probed, False), **{f"period_{p}": Profiled(probed, True, p) for p in period_list}}
    load_before = _load()
    closed = measure_rounds(rts, workload, seconds, rounds, 0.0)
    cap = min(Spread.of(closed[f"period_{p}"]["throughput"]).median for p in period_list)  # each period sustains the rate
    m = measure_rounds(rts, workload, seconds, rounds, load * cap)
    by_period = {}
    for p in period_list:
        on = m[f"period_{p}"]
        r = ratio_spread(on["p50"], m["off"]["p50"])
        by_period[str(p)] = {"p50_ratio_spread": r.as_dict(), "verdict": verdict(r, higher_is_better=False), "p50_us": Spread.of(on["p50"]).as_dict(),
                             "p50_sign_test": sign_test(on["p50"], m["off"]["p50"]),
                             "reads_per_query": float(np.mean(on["reads_per_query"])), "meets_target": r.median <= 1.2,
                             "closed_loop_throughput_ratio": ratio_spread(closed[f"period_{p}"]["throughput"], closed["off"]["throughput"]).as_dict()}  # fmt: skip
    best = min(period_list, key=lambda p: by_period[str(p)]["p50_ratio_spread"]["median"])
    tag = _tag(workload, keys)
    write_record(
        f"collector_latency_periods_{tag}_load_{round(100 * load)}",
        f"{workload} p50 latency with per-slice profiling at each probe period ({', '.join(f'{p // 1000} ms' for p in period_list)}), {keys:,} keys, "
        f"open loop at {load * cap:,.0f} queries/s offered to all ({load:.0%} of the slowest period's closed-loop median); value: the lowest median ratio's period",
        Spread.of(m[f"period_{best}"]["p50"]).median, "us", f"p50 without profiling (interleaved, median of {rounds} x {seconds} s)",
        Spread.of(m["off"]["p50"]).median, periods=by_period, p50_us_off=Spread.of(m["off"]["p50"]).as_dict(), offered_qps=load * cap,
        best_period_us=best, p50_us_rounds={k: d["p50"] for k, d in m.items()}, host_load=f"{load_before} (before), {_load()} (after)",
    )  # fmt: skip


def latency(workload: str, keys: int, seconds: float, rounds: int, workers: int, loads: list[float], period_us: int | None = None) -> None:
    """Profiling on (probe auto, sampled windows, default batching) vs off, and exact (every batch
    read) for reference, interleaved round by round: closed loop (each side's own maximum
    throughput), then open loop at the same offered rate for all, a fraction of the profiled
    side's closed-loop median (so each sustains it). On, off and exact are one runtime, profiling
    and period switched per run (Runtime.set_profiling, set_probe_period): two runtimes of the same keys differ by their trees'
    memory alone by up to 1.7x in p50 here, more than profiling costs. That difference is measured
    beside it: "off_other_tree", a second runtime without a probe, vs off."""
    mk = dict(n_slices=SLICES, batch_queries=GRANULARITY, max_workers=workers)
    probed = Runtime(keys, probe="auto", **mk)
    rts = {"on": Profiled(probed, True, period_us), "off": Profiled(probed, False), "exact": Profiled(probed, True, 0),
           "off_other_tree": Runtime(keys, **mk)}  # fmt: skip

    def measure(offered: float) -> dict[str, dict[str, list[float]]]:
        return measure_rounds(rts, workload, seconds, rounds, offered)

    load_before = _load()
    closed = measure(0.0)
    cap = Spread.of(closed["on"]["throughput"]).median
    tag = _tag(workload, keys)
    for load, offered in [(0.0, 0.0), *[(f, f * cap) for f in loads]]:
        m = closed if offered == 0 else measure(offered)
        p50 = ratio_spread(m["on"]["p50"], m["off"]["p50"])
        p50_exact = ratio_spread(m["exact"]["p50"], m["off"]["p50"])
        thr = ratio_spread(m["on"]["throughput"], m["off"]["throughput"])
        # share of the offered rate each side achieved in its worst round (closed loop: n/a). When
        # the unprofiled side falls short too, the host is saturated at this rate: no comparison
        # "at the same throughput" is possible there, whatever the p50 ratio says
        shares = {k: min(m[k]["throughput"]) / offered if offered else 1.0 for k in ("on", "off", "off_other_tree")}
        share = min(shares["on"], shares["off"])
        sustained = share >= 0.99
        loop = "closed loop" if offered == 0 else f"open loop at {offered:,.0f} queries/s offered to both ({load:.0%} of the profiled closed-loop median)"
        sp = {f"{k}_{name}": Spread.of(v).as_dict() for name, d in m.items() for k, v in d.items()}
        write_record(
            f"collector_latency_{tag}" + ("_closed" if offered == 0 else f"_load_{round(100 * load)}"),
            f"{workload} p50 latency with per-slice profiling (probe auto, sampled windows, default batching), {keys:,} keys, {loop}",
            Spread.of(m["on"]["p50"]).median, "us", f"p50 without profiling (interleaved ABAB, median of {rounds} x {seconds} s)",
            Spread.of(m["off"]["p50"]).median, ratio_spread=p50.as_dict(), verdict=verdict(p50, higher_is_better=False),
            goal_p50_ratio=1.2, meets_target=p50.median <= 1.2 and sustained, throughput_ratio=thr.as_dict(),
            exact_p50_ratio_spread=p50_exact.as_dict(),
            # where the ratio's range is too wide to read the median alone: in how many rounds
            # profiling was slower, and how likely so uneven a split is by chance
            p50_sign_test=sign_test(m["on"]["p50"], m["off"]["p50"]),
            other_tree_p50_ratio_spread=ratio_spread(m["off_other_tree"]["p50"], m["off"]["p50"]).as_dict(),
            other_tree_p50_sign_test=sign_test(m["off_other_tree"]["p50"], m["off"]["p50"]),
            other_tree_throughput_ratio=ratio_spread(m["off_other_tree"]["throughput"], m["off"]["throughput"]).as_dict(),
            # open loop: the question is whether each side kept up with the offered rate
            **({"throughput_verdict": verdict(thr)} if offered == 0 else {
                "sustained_share": share, "sustained_share_on": shares["on"], "sustained_share_off": shares["off"],
                "saturated": min(shares["off"], shares["off_other_tree"]) < 0.99}),  # fmt: skip
            offered_qps=offered, **sp, p50_us_rounds={k: d["p50"] for k, d in m.items()},
            host_load=f"{load_before} (before), {_load()} (after)",
        )  # fmt: skip


def probe_read() -> float:
    """Records one probe reading's cost; returns it in ns."""
    out = subprocess.run([str(library_path().parent / "pmoss_bench_probe")], check=True, capture_output=True, text=True)
    m = json.loads(out.stdout)
    write_record("collector_probe_read", f"one probe reading (pm_probe_read, {m['mode']} mode), ns; best of 7 x 100000", m["read_ns"], "ns",
                 "one getpid system call (same loop, same run)", m["getpid_ns"], syscalls_per_read=m["syscalls_per_read"],
                 rdpmc_per_read=m["rdpmc_per_read"], host_load=_load())  # fmt: skip
    return float(m["read_ns"])


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
    ap.add_argument("--workers", type=int, default=1, help="worker threads (default 1; 0 = one per usable CPU)")
    ap.add_argument("--waits", default="0,10000", help="extra batch_max_wait_us values for ycsb-c, comma-separated ('' for none; 10000 was the default before work-conserving batches)")
    ap.add_argument("--loads", type=csv_of(float), default="0.3,0.5,0.7,0.8", help="open-loop rates for the latency records, as fractions of the profiled closed-loop throughput")
    ap.add_argument("--parts", default="overhead,latency,sweep", help="which figures to measure (comma-separated: overhead, latency, sweep, periods; default all but periods)")
    ap.add_argument("--keys", type=csv_of(int), default=f"{KEYS},{PLAN_KEYS}",
                    help=f"index sizes, comma-separated (default {KEYS},{PLAN_KEYS}: an in-cache tree, where a reading weighs most, and plan.py's default n_records; the --waits sweep runs at the first)")
    ap.add_argument("--probe-period-us", type=int, default=None, help="probe period of the profiled side of the latency records (default: the runtime's, 100000)")
    ap.add_argument("--periods", type=csv_of(int), default="20000,50000,100000,200000", help="probe periods (us) compared by the 'periods' part, at the last --keys and the last --loads")
    args = ap.parse_args()
    if not (library_path().parent / "pmoss_bench_probe").exists():
        raise SystemExit(f"{library_path().parent}/pmoss_bench_probe missing: cmake -S . -B build && cmake --build build")
    extra = [int(w) for w in args.waits.split(",") if w.strip() and int(w) != BATCH_MAX_WAIT_US_DEFAULT]
    parts = set(args.parts.split(","))
    read_ns = probe_read()
    for i, keys in enumerate(args.keys):
        if "overhead" in parts:
            overhead("ycsb-c", [BATCH_MAX_WAIT_US_DEFAULT, *(extra if i == 0 else [])], args.seconds, args.rounds, args.workers, read_ns, keys)
            overhead("ycsb-a", [BATCH_MAX_WAIT_US_DEFAULT], args.seconds, args.rounds, args.workers, read_ns, keys)
        if "latency" in parts:
            latency("ycsb-c", keys, args.seconds, args.rounds, args.workers, args.loads, args.probe_period_us)
    if "periods" in parts:
        periods("ycsb-c", args.keys[-1], args.seconds, args.rounds, args.workers, args.loads[-1], args.periods)
    if "sweep" in parts:
        sweep_round()


if __name__ == "__main__":
    main()
