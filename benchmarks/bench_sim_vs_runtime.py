"""Fidelity of the simulator against the real runtime on THIS host (docs/machine-model.md §14.3).

    cmake --build build -j2
    .venv/bin/python benchmarks/bench_sim_vs_runtime.py [--keys 1000000] [--seconds 2] [--reps 3]

The host is shared: how much CPU the runtime's threads get changes run to run (2-4x), so the
wall-clock throughput measures the other jobs as much as this machine. The +-25 % check therefore
compares queries per worker-CPU-second: queries / sum of the per-slice task_clock_ns (the on-CPU
time of the worker threads while they execute slice groups; descheduled time is not counted).
The simulator's rows carry the same column with the same meaning (§11: task_clock_ns per query =
t_s * smt_slowdown), so both sides are computed by the same formula from a raw snapshot row.
Wall-clock numbers are recorded too, with the prediction that assumes the CPU capacity measured
in the calibration runs.

Each rep (interleaved, so calibration and predicted runs see the same background load):
1. Calibrate (single worker, uniform keys, NOT the predicted workloads): worker CPU ns per query
   of point lookups (ycsb-c mix) with drain windows of 1 and of 1000 queries -> cost per slice
   group of a window (probe reading + stats) and the runtime's other overhead per query beyond the
   modelled instructions (lookups with the default 100-query windows are run as a check); of scans of exactly 10 and 100 keys (ycsb-e mix) -> instructions per scanned key; the router
   alone (pmoss_bench_tree router) -> router ns per query; CPUs the runtime got in the calibration
   runs = throughput x (worker + router ns per query) -> effective CPUs (wall-clock prediction).
2. Measure every (kind, workload) with 2 workers + 1 router on the runtime (Testbed, fresh index).
Calibration constants are the medians over reps. Then predict with the simulator
(`discover(name="localhost")` + the calibration) and write one record per (kind, workload):
value = predicted queries per worker-CPU-second, baseline = measured median, within_25pct on
that ratio; wall-clock predicted / measured, the worker CPU the runtime got, steal time and the
busiest worker's share of worker CPU (one-core kinds: the model's load balance) are extra fields.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from dataclasses import replace
from datetime import UTC, datetime

import pyarrow.compute as pc

from pmoss.bench import write_record
from pmoss.policies import generate
from pmoss.runtime import Runtime, library_path
from pmoss.schedule import ONE_CORE_KINDS
from pmoss.sim import Calibration, simulate_batch, throughput
from pmoss.sim.calibration import fit_group_ns, fit_scan_key_insn, worker_ns
from pmoss.testbed import Testbed
from pmoss.topology import discover
from pmoss.workload import get_workload

WORKLOADS = ("ycsb-c", "ycsb-a", "ycsb-e", "rsi-20-30-50")
KINDS = ("sn-spread", "os-default")
N_SLICES = 256
SHORT, LONG = 10, 100  # scan lengths of the calibration scans
MANY = 1000  # drain window of the calibration run with few groups per query (queue capacity 1024)
BAND = 0.25


def _load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def _steal_jiffies() -> int:
    """Host-wide steal time (the hypervisor ran someone else on our vCPUs): task_clock cannot see it."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) if len(fields) > 8 else 0


def cpu_normalised(queries: list[int], task_clock_ns: list[int | float] | None) -> tuple[float, float]:
    """(queries per worker-CPU-second, worker CPU-seconds) of a row's per-slice columns."""
    if task_clock_ns is None:
        raise SystemExit("task_clock_ns: unavailable on this host (no software perf events?); the CPU-normalised check needs it")
    tc = float(sum(task_clock_ns))
    return float(sum(queries)) / tc * 1e9, tc * 1e-9


def busiest_share(core: list[int], task_clock_ns: list[int | float]) -> float:
    """Largest share of worker CPU spent by one worker core (one-core kinds): load balance."""
    per: dict[int, float] = {}
    for c, t in zip(core, task_clock_ns, strict=True):
        per[int(c)] = per.get(int(c), 0.0) + float(t)
    return float(max(per.values()) / sum(per.values()))


def calibration_run(n: int, seconds: float, seed: int, mix: str, window: int = 100, **spec: object) -> dict:
    """Single worker, fresh index, drain windows of `window` queries: worker CPU ns per query
    (task_clock, software counter)."""
    rt = Runtime(n, dataset="dense", seed=1, n_slices=N_SLICES, max_workers=1, probe="software", batch_queries=window)
    before = rt.snapshot()
    res = rt.run(mix, seconds, seed=seed, **spec)
    gained = res["stats"].slices_since(before)
    q = pc.sum(gained.column("queries")).as_py()
    tc = pc.sum(gained.column("task_clock_ns")).as_py()
    return {"worker_ns": tc / q, "throughput": res["throughput"]}


def router_ns(n: int, seconds: float) -> float:
    binary = library_path().parent / "pmoss_bench_tree"
    r = json.loads(subprocess.run([str(binary), "router", str(n), str(seconds)], check=True, capture_output=True, text=True).stdout)
    return r["seconds"] / r["queries"] * 1e9


def measured_run(machine, kind: str, workload: str, n: int, seconds: float, rep: int) -> dict:
    """2 workers + 1 router on the runtime, fresh index (inserts grow the tree)."""
    tb = Testbed(machine, n_keys=n, dataset="dense", n_slices=N_SLICES, seed=1)
    tb.enforce(generate(kind, machine, tb.n_slices, seed=0))
    steal0 = _steal_jiffies()
    row = tb.run(workload, seconds, seed=1 + rep, run_index=rep)
    steal = (_steal_jiffies() - steal0) / os.sysconf("SC_CLK_TCK")
    per_cpu, cpu_s = cpu_normalised(row["queries"], row["task_clock_ns"])
    out = {"wall_qps": row["throughput_qps"], "per_cpu_qps": per_cpu, "worker_cpus": cpu_s / row["window_s"],
           "steal_cpus": steal / row["window_s"]}  # fmt: skip
    if kind in ONE_CORE_KINDS:
        out["busiest_worker_share"] = busiest_share(row["core"], row["task_clock_ns"])
    return out


def fit(machine, n: int, cal_runs: list[dict], routes: list[float]) -> tuple[Calibration, dict]:
    """Calibration from the medians of the reps' calibration runs."""
    med = lambda key: statistics.median(r[key]["worker_ns"] for r in cal_runs)  # noqa: E731
    one, many, short, long = med("lookup_w1"), med(f"lookup_w{MANY}"), med(f"scan{SHORT}"), med(f"scan{LONG}")
    route = statistics.median(routes)
    # CPUs the runtime actually got in the calibration runs: (worker + router) busy time per second
    effective = statistics.median(r[k]["throughput"] * (r[k]["worker_ns"] + route) * 1e-9 for r in cal_runs for k in r)
    cal = Calibration(route_ns=route, shared_cpus=len(machine.worker_cpus), source=f"{machine.name}: bench_sim_vs_runtime.py single-worker uniform runs")
    w_lookup = get_workload("ycsb-c").model_copy(update={"name": "cal-lookup-uniform", "distribution": "uniform"})
    w_scan = {k: get_workload("ycsb-e").model_copy(update={"name": f"cal-scan{k}-uniform", "distribution": "uniform", "scan_min": k, "scan_max": k})
              for k in (SHORT, LONG)}  # fmt: skip
    cal = fit_group_ns(machine, w_lookup, one, many, MANY, cal, n_records=n, n_slices=N_SLICES)
    cal = fit_scan_key_insn(machine, w_scan[SHORT], w_scan[LONG], short, long, cal, n_records=n, n_slices=N_SLICES)
    check = worker_ns(machine, w_lookup, cal, n_records=n, n_slices=N_SLICES)[0]  # default windows: not fitted on
    measured = {"lookup_w1_worker_ns": one, f"lookup_w{MANY}_worker_ns": many, "lookup_w100_worker_ns": med("lookup_w100"),
                "lookup_w100_model_ns": check, f"scan{SHORT}_worker_ns": short, f"scan{LONG}_worker_ns": long,
                "router_ns": route, "effective_cpus": effective, "per_rep": cal_runs, "router_runs": routes}  # fmt: skip
    return replace(cal, shared_cpus=effective), measured


def predict(machine, kind: str, workload: str, n: int, cal: Calibration) -> dict:
    """The calibrated model's row (noise-free) in the same terms as the measurement."""
    sched = generate(kind, machine, N_SLICES, seed=0)
    row = simulate_batch(machine, workload, "dense", [sched], n_records=n, noise=False, calibration=cal)[0]
    per_cpu, cpu_s = cpu_normalised(row["queries"], row["task_clock_ns"])
    out = {"per_cpu_qps": per_cpu, "wall_qps": float(throughput(machine, workload, "dense", [sched], n_records=n, calibration=cal)[0]),
           "worker_cpus": cpu_s / row["window_s"],
           "uncalibrated_wall_qps": float(throughput(machine, workload, "dense", [sched], n_records=n)[0])}  # fmt: skip
    if kind in ONE_CORE_KINDS:
        out["busiest_worker_share"] = busiest_share(list(row["core"]), list(row["task_clock_ns"]))
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
    configs = [(k, w) for k in args.kinds.split(",") for w in args.workloads.split(",")]
    run_id = datetime.now(UTC).isoformat(timespec="seconds")
    t0, load0 = time.perf_counter(), _load()
    cal_runs, routes, runs = [], [], {c: [] for c in configs}
    for rep in range(args.reps):
        cal_runs.append({**{f"lookup_w{b}": calibration_run(args.keys, args.seconds, 1 + rep, "ycsb-c", window=b, distribution="uniform")
                            for b in (1, MANY, 100)},
                         **{f"scan{k}": calibration_run(args.keys, args.seconds, 1 + rep, "ycsb-e", distribution="uniform", scan_min=k, scan_max=k)
                            for k in (SHORT, LONG)}})  # fmt: skip
        routes.append(router_ns(args.keys, args.seconds))
        for c in configs:
            runs[c].append(measured_run(machine, *c, args.keys, args.seconds, rep))
    cal, cal_measured = fit(machine, args.keys, cal_runs, routes)
    cal_measured.update(bench_s=time.perf_counter() - t0, host_load_start=load0, host_load_end=_load())
    print(json.dumps({"calibration": cal.__dict__}))
    for kind, wl in configs:
        pred, meas = predict(machine, kind, wl, args.keys, cal), runs[(kind, wl)]
        med = {k: statistics.median(r[k] for r in meas) for k in meas[0]}
        within = bool(abs(pred["per_cpu_qps"] / med["per_cpu_qps"] - 1) <= BAND)
        write_record(
            f"sim_vs_runtime_{kind.replace('-', '_')}_{wl.replace('-', '_')}",
            f"{wl}, 2 workers + 1 router on this host's 2 shared CPUs, {args.keys} dense keys, {N_SLICES} slices, {kind}: "
            "calibrated simulator prediction of queries per worker-CPU-second (task_clock)",
            pred["per_cpu_qps"], "queries per worker-CPU-second",
            f"measured on the runtime (Testbed, median of {args.reps} x {args.seconds} s, interleaved with the calibration runs)",
            med["per_cpu_qps"], run_id=run_id, check="cpu-normalised", within_25pct=within, meets_target=within,
            wall_predicted_qps=pred["wall_qps"], wall_measured_qps=med["wall_qps"], wall_ratio=pred["wall_qps"] / med["wall_qps"],
            wall_within_25pct=bool(abs(pred["wall_qps"] / med["wall_qps"] - 1) <= BAND),
            uncalibrated_wall_prediction_qps=pred["uncalibrated_wall_qps"],
            predicted_busiest_worker_share=pred.get("busiest_worker_share"), measured_runs=meas,
            calibration=dict(cal.__dict__), calibration_measurements=cal_measured,
            calibrated_on="single-worker uniform ycsb-c lookups (windows of 1 and 1000 queries), uniform ycsb-e scans of 10 and 100 keys, router alone (ycsb-c)",
            host_load=_load(),
        )  # fmt: skip


if __name__ == "__main__":
    main()
