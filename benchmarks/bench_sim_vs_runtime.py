"""Fidelity of the simulator against the real runtime on THIS host (docs/machine-model.md §14.3).

    cmake --build build -j2
    .venv/bin/python benchmarks/bench_sim_vs_runtime.py [--keys 1000000] [--seconds 2] [--reps 3]

1. Calibrate (single worker, uniform keys, NOT the predicted workloads): the worker CPU time per
   query (task_clock_ns / queries, software counter) of point lookups (ycsb-c mix, uniform keys)
   -> runtime overhead per query beyond the modelled instructions; of scans of 10 and of 100 keys (ycsb-e mix, uniform keys, fixed length)
   -> instructions per scanned key; the router alone (pmoss_bench_tree router: ycsb-c generation +
   slice lookup + enqueue) -> router ns per query; the routers share the worker CPUs here, and the
   CPUs the runtime really gets on this shared host are the median over the calibration runs of
   throughput x (worker + router ns per query) -> effective CPUs (the nominal 2 are recorded too).
2. Predict with `pmoss.sim.throughput(discover(name="localhost"), ..., calibration=cal)` the
   2-worker throughput of ycsb-c, ycsb-a, ycsb-e, rsi-20-30-50 (zipf 0.99) under sn-spread and
   os-default, and measure it on the runtime (Testbed, fresh index per run, median of --reps).
3. Write benchmarks/results/sim_vs_runtime_<kind>_<workload>.json: value = predicted,
   baseline = measured (same run), ratio, within_25pct, meets_target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from dataclasses import replace

import pyarrow.compute as pc

from pmoss.bench import write_record
from pmoss.policies import generate
from pmoss.runtime import Runtime, library_path
from pmoss.sim import Calibration, throughput
from pmoss.sim.calibration import fit_query_ns, fit_scan_key_insn
from pmoss.testbed import Testbed
from pmoss.topology import discover
from pmoss.workload import get_workload

WORKLOADS = ("ycsb-c", "ycsb-a", "ycsb-e", "rsi-20-30-50")
KINDS = ("sn-spread", "os-default")
N_SLICES = 256
SHORT, LONG = 10, 100  # scan lengths of the calibration scans


def _load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def worker_ns_per_query(n: int, seconds: float, reps: int, mix: str, **spec: object) -> tuple[float, list[tuple[float, float]]]:
    """Median over reps of single-worker CPU time per query (fresh index each rep), and every
    rep's (throughput, worker ns per query)."""
    out, runs = [], []
    for r in range(reps):
        rt = Runtime(n, dataset="dense", seed=1, n_slices=N_SLICES, max_workers=1, probe="software")
        before = rt.snapshot()
        res = rt.run(mix, seconds, seed=1 + r, **spec)
        gained = res["stats"].slices_since(before)
        q = pc.sum(gained.column("queries")).as_py()
        tc = pc.sum(gained.column("task_clock_ns")).as_py()
        out.append(tc / q)
        runs.append((res["throughput"], tc / q))
    return statistics.median(out), runs


def router_ns(n: int, seconds: float, reps: int) -> float:
    binary = library_path().parent / "pmoss_bench_tree"
    runs = []
    for _ in range(reps):
        r = json.loads(subprocess.run([str(binary), "router", str(n), str(seconds)], check=True, capture_output=True, text=True).stdout)
        runs.append(r["seconds"] / r["queries"] * 1e9)
    return statistics.median(runs)


def calibrate(machine, n: int, seconds: float, reps: int) -> tuple[Calibration, dict]:
    t0 = time.perf_counter()
    lookup, runs = worker_ns_per_query(n, seconds, reps, "ycsb-c", distribution="uniform")
    scans = {}
    for k in (SHORT, LONG):
        scans[k], more = worker_ns_per_query(n, seconds, reps, "ycsb-e", distribution="uniform", scan_min=k, scan_max=k)
        runs += more
    route = router_ns(n, seconds, reps)
    # CPUs the runtime actually got in the calibration runs: (worker + router) busy time per second
    effective = statistics.median(x * (t + route) * 1e-9 for x, t in runs)
    cal = Calibration(route_ns=route, shared_cpus=len(machine.worker_cpus), source=f"{machine.name}: bench_sim_vs_runtime.py single-worker uniform runs")
    w_lookup = get_workload("ycsb-c").model_copy(update={"name": "cal-lookup-uniform", "distribution": "uniform"})
    w_scan = {k: get_workload("ycsb-e").model_copy(update={"name": f"cal-scan{k}-uniform", "distribution": "uniform", "scan_min": k, "scan_max": k})
              for k in (SHORT, LONG)}  # fmt: skip
    cal = fit_query_ns(machine, w_lookup, lookup, cal, n_records=n, n_slices=N_SLICES)
    cal = fit_scan_key_insn(machine, w_scan[SHORT], w_scan[LONG], scans[SHORT], scans[LONG], cal, n_records=n, n_slices=N_SLICES)
    measured = {"lookup_worker_ns": lookup, f"scan{SHORT}_worker_ns": scans[SHORT], f"scan{LONG}_worker_ns": scans[LONG],
                "router_ns": route, "effective_cpus": effective, "calibration_s": time.perf_counter() - t0, "host_load": _load()}  # fmt: skip
    return replace(cal, shared_cpus=effective), measured


def measure(machine, kind: str, workload: str, n: int, seconds: float, reps: int) -> list[float]:
    """2-worker throughput on the runtime, fresh index per rep (inserts grow the tree)."""
    out = []
    for r in range(reps):
        tb = Testbed(machine, n_keys=n, dataset="dense", n_slices=N_SLICES, seed=1)
        tb.enforce(generate(kind, machine, tb.n_slices, seed=0))
        out.append(tb.run(workload, seconds, seed=1 + r, run_index=r)["throughput_qps"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args()
    machine = discover(name="localhost")
    cal, cal_measured = calibrate(machine, args.keys, args.seconds, args.reps)
    print(json.dumps({"calibration": cal.__dict__, **cal_measured}))
    for kind in args.kinds.split(","):
        for wl in args.workloads.split(","):
            sched = generate(kind, machine, N_SLICES, seed=0)
            predicted = float(throughput(machine, wl, "dense", [sched], n_records=args.keys, calibration=cal)[0])
            uncal = float(throughput(machine, wl, "dense", [sched], n_records=args.keys)[0])
            nominal = float(throughput(machine, wl, "dense", [sched], n_records=args.keys,
                                       calibration=replace(cal, shared_cpus=len(machine.worker_cpus)))[0])
            runs = measure(machine, kind, wl, args.keys, args.seconds, args.reps)
            measured = statistics.median(runs)
            within = abs(predicted / measured - 1) <= 0.25
            write_record(
                f"sim_vs_runtime_{kind.replace('-', '_')}_{wl.replace('-', '_')}",
                f"{wl} throughput, 2 workers + 1 router on this host's 2 CPUs, {args.keys} dense keys, {N_SLICES} slices, {kind}: "
                "calibrated simulator prediction",
                predicted, "queries/s", f"measured on the runtime (Testbed, median of {args.reps} x {args.seconds} s, same run)", measured,
                within_25pct=within, meets_target=within, measured_runs=runs, uncalibrated_prediction=uncal,
                prediction_nominal_cpus=nominal, nominal_ratio=nominal / measured,
                calibration={k: v for k, v in cal.__dict__.items()}, calibration_measurements=cal_measured,
                calibrated_on="single-worker uniform ycsb-c lookups, uniform ycsb-e scans of 10 and 100 keys, router alone (ycsb-c)",
                host_load=_load(),
            )  # fmt: skip


if __name__ == "__main__":
    main()
