"""Fidelity of the simulator against the real runtime on THIS host (docs/machine-model.md §14.3).

    cmake --build build -j2
    .venv/bin/python benchmarks/bench_sim_vs_runtime.py [--keys 1000000] [--seconds 2] [--reps 5] [--routers 1] [--tag T]

The host is shared: how much CPU the runtime's threads get changes run to run (2-4x), so the
wall-clock throughput measures the other jobs as much as this machine. The +-25 % check therefore
compares queries per worker-CPU-second: queries / sum of the per-slice task_clock_ns (the on-CPU
time of the worker threads while they execute slice batches; descheduled time is not counted).
The simulator's rows carry the same column with the same meaning (§11: task_clock_ns per query =
t_s * smt_slowdown), so both sides are computed by the same formula from a raw snapshot row.
Wall-clock numbers are recorded too, with the prediction that assumes the CPU capacity measured
in the calibration runs.

Each rep (interleaved, so calibration and predicted runs see the same background load):
1. Calibrate (single worker, uniform keys, single-operation runs, NOT the predicted mixes):
   worker CPU ns per query of point lookups (ycsb-c mix) with batches of 1 and of 100 queries
   -> cost per batch (probe reading + stats) from the measured batches per query; of the same
   lookups on a 60,000-key tree -> the share of the L3 the runtime's lines get (the model's rise
   in lookup cost from the small to the full tree matches the measured rise), then the read's
   overhead beyond the modelled instructions; of scans of exactly 10 and 100 keys (scan mix) on
   the 60,000-key tree -> instructions per scanned key (the streamed lines hit the private
   caches), on the full tree -> how many streamed lines the prefetchers keep in flight, and the
   scan's overhead; of inserts: the last slice of a uniform
   rsi-25-50-25 run with 1-key scans, where every insert lands (dense keys are appended) and
   which sees 1/256 of the other operations, taken out with the other slices' mean cost; the
   router alone (pmoss_bench_tree router) -> router ns per query; CPUs the runtime got in the
   calibration runs = throughput x (worker + router ns per query) -> effective CPUs (wall-clock
   prediction only, and only where routers share the workers' CPUs: a host of < 4 CPUs).
2. Measure every (kind, workload) with every worker of the host and --routers routers per node
   on the runtime (Testbed, fresh index; here 2 workers + 1 router on 2 shared CPUs), with its
   batches and probe readings per query. Every batch is read (probe period 0).
Then predict with the simulator (`discover(name="localhost")` + the calibration): each rep's
constants predict that rep's runs (the neighbours' load moves both alike), and the check is the
median over reps of predicted / measured queries per worker-CPU-second. One record per (kind,
workload): value = median per-rep prediction, baseline = measured median, check_ratio (the
median per-rep ratio) and within_25pct on it, the per-rep ratios, and the prediction from the
medians of the constants over reps (pooled_ratio); wall-clock predicted / measured, the worker CPU the runtime got, steal time, batches
per query (model and measured), and the busiest worker's share of
worker CPU (one-core kinds: the model's load balance) are extra fields.
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

from pmoss.bench import write_record
from pmoss.collect.runtime import Runtime, library_path
from pmoss.collect.testbed import Testbed
from pmoss.collect.topology import discover
from pmoss.contracts.policies import generate
from pmoss.contracts.schedule import ONE_CORE_KINDS
from pmoss.contracts.workload import get_workload
from pmoss.sim import Calibration, simulate_batch, throughput
from pmoss.sim.calibration import (
    batch_ns_for,
    fit_l3_share,
    fit_op_ns,
    fit_scan_key_insn,
    fit_stream_mlp,
    model_batches_per_query,
    single_op,
)

WORKLOADS = ("ycsb-c", "ycsb-a", "ycsb-e", "rsi-20-30-50")
KINDS = ("sn-spread", "os-default")
N_SLICES = 256
SHORT, LONG = 10, 100  # scan lengths of the calibration scans
SMALL_KEYS = 60_000  # a tree that fits the private caches: the L3 share comes from the rise beyond it
# Every batch is read (probe period 0): exact per-slice totals, where sampled windows would leave
# the other batches' CPU uncounted, and the per-batch term of §14.3 is what is measured and predicted.
PROBE_PERIOD_US = 0
QUEUE_CAPACITY = 1024  # the runtime's default queue_capacity: a closed-loop drain (model.batches_per_query)
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


def calibration_run(n: int, seconds: float, seed: int, mix: str, batch: int = 100, **spec: object) -> dict:
    """Single worker, fresh index, batches of up to `batch` queries: worker CPU ns per query
    (task_clock, software counter), measured batches per query, and the last slice's share and
    cost next to the other slices' (where dense inserts land)."""
    rt = Runtime(n, dataset="dense", seed=1, n_slices=N_SLICES, max_workers=1, probe="software", batch_queries=batch,
                 probe_period_us=PROBE_PERIOD_US, queue_capacity=QUEUE_CAPACITY)
    before = rt.snapshot()
    res = rt.run(mix, seconds, seed=seed, **spec)
    gained = res["stats"].slices_since(before)
    q = [float(v) for v in gained.column("queries").to_pylist()]
    tc = [float(v) for v in gained.column("task_clock_ns").to_pylist()]
    others_q, others_tc = sum(q[:-1]), sum(tc[:-1])
    return {"worker_ns": sum(tc) / sum(q), "throughput": res["throughput"], "batches_per_query": res["batches"] / res["completed"],
            "probe_reads_per_query": res["probe_reads"] / res["completed"], "last_share": q[-1] / sum(q),
            "last_ns": tc[-1] / q[-1], "others_ns": others_tc / others_q, "others_mean_q": others_q / (len(q) - 1),
            "last_q": q[-1]}  # fmt: skip


def router_ns(n: int, seconds: float) -> float:
    binary = library_path().parent / "pmoss_bench_tree"
    r = json.loads(subprocess.run([str(binary), "router", str(n), str(seconds)], check=True, capture_output=True, text=True).stdout)
    return r["seconds"] / r["queries"] * 1e9


def measured_run(machine, kind: str, workload: str, n: int, seconds: float, rep: int, routers: int) -> dict:
    """Every worker of the descriptor and `routers` routers per node on the runtime, fresh index
    (inserts grow the tree)."""
    tb = Testbed(machine, n_keys=n, dataset="dense", n_slices=N_SLICES, seed=1, probe_period_us=PROBE_PERIOD_US, routers_per_node=routers)
    tb.enforce(generate(kind, machine, tb.n_slices, seed=0))
    steal0 = _steal_jiffies()
    row = tb.run(workload, seconds, seed=1 + rep, run_index=rep)
    steal = (_steal_jiffies() - steal0) / os.sysconf("SC_CLK_TCK")
    per_cpu, cpu_s = cpu_normalised(row["queries"], row["task_clock_ns"])
    res = tb.last_result
    out = {"wall_qps": row["throughput_qps"], "per_cpu_qps": per_cpu, "worker_cpus": cpu_s / row["window_s"],
           "steal_cpus": steal / row["window_s"], "batches_per_query": res["batches"] / res["completed"],
           "probe_reads_per_query": res["probe_reads"] / res["completed"], "full_batch_share": res["full_batches"] / max(res["batches"], 1)}  # fmt: skip
    if kind in ONE_CORE_KINDS:
        out["busiest_worker_share"] = busiest_share(row["core"], row["task_clock_ns"])
    return out


def insert_ns(run: dict, batch_ns: float, cal: Calibration) -> float:
    """Worker ns per insert, batch cost taken out, from the last slice of a uniform rsi run: every
    (appended) insert lands there, next to the 1/256 share of reads and scans every slice gets,
    which is taken out at the other slices' mean cost. The slice is hot: its batches are full
    or wait-limited at its measured rate."""
    t = (run["last_ns"] * run["last_q"] - run["others_mean_q"] * run["others_ns"]) / (run["last_q"] - run["others_mean_q"])
    size = min(cal.batch_queries, max(1.0, cal.queue_capacity * run["last_share"]))
    return t - batch_ns / size


def fit(machine, n: int, cal_runs: list[dict], routes: list[float], routers: int) -> tuple[Calibration, dict]:
    """Calibration from the medians of the reps' single-operation runs."""
    med = lambda key, f="worker_ns": statistics.median(r[key][f] for r in cal_runs)  # noqa: E731
    route = statistics.median(routes)
    # CPUs the runtime actually got in the calibration runs: (worker + router) busy time per second
    effective = statistics.median(r[k]["throughput"] * (r[k]["worker_ns"] + route) * 1e-9 for r in cal_runs for k in r)
    batch = batch_ns_for(med("lookup_b1"), med("lookup_b100"), med("lookup_b1", "batches_per_query"), med("lookup_b100", "batches_per_query"))
    net = lambda key: med(key) - batch * med(key, "batches_per_query")  # noqa: E731  the run's batch cost taken out
    cal = Calibration(route_ns=route, batch_ns=batch, shared_cpus=len(machine.worker_cpus), queue_capacity=QUEUE_CAPACITY, routers_per_node=routers,
                      source=f"{machine.name}: bench_sim_vs_runtime.py single-worker single-operation uniform runs")  # fmt: skip
    cal = fit_l3_share(machine, net("lookup_small"), net("lookup_b100"), cal, n_small=SMALL_KEYS, n_large=n, n_slices=N_SLICES)
    short, long = single_op("scan", scan_len=SHORT), single_op("scan", scan_len=LONG)
    # instructions per key where the streamed lines hit the private caches, then how far the
    # prefetchers hide the streamed lines of the full tree (twice: each fit uses the other)
    for _ in range(2):
        cal = fit_scan_key_insn(machine, short, long, net(f"scan{SHORT}_small"), net(f"scan{LONG}_small"), cal, n_records=SMALL_KEYS, n_slices=N_SLICES)
        cal = fit_stream_mlp(machine, short, long, net(f"scan{SHORT}"), net(f"scan{LONG}"), cal, n_records=n, n_slices=N_SLICES)
    inserts = statistics.median(insert_ns(r["inserts"], batch, cal) for r in cal_runs)
    ops = {"read": (single_op("read"), net("lookup_b100")), "scan": (short, net(f"scan{SHORT}")), "insert": (single_op("insert"), inserts)}
    cal = fit_op_ns(machine, ops, cal, n_records=n, n_slices=N_SLICES)
    lookup_bpq = model_batches_per_query(machine, single_op("read"), cal, n_records=n, n_slices=N_SLICES)
    measured = {"lookup_b1_worker_ns": med("lookup_b1"), "lookup_b100_worker_ns": med("lookup_b100"),
                f"lookup_{SMALL_KEYS}_keys_worker_ns": med("lookup_small"), "l3_share": cal.l3_share,
                "lookup_b100_batches_per_query": med("lookup_b100", "batches_per_query"),
                "lookup_b100_batches_per_query_model": lookup_bpq,
                f"scan{SHORT}_worker_ns": med(f"scan{SHORT}"), f"scan{LONG}_worker_ns": med(f"scan{LONG}"),
                f"scan{SHORT}_{SMALL_KEYS}_keys_worker_ns": med(f"scan{SHORT}_small"), f"scan{LONG}_{SMALL_KEYS}_keys_worker_ns": med(f"scan{LONG}_small"),
                "stream_mlp": cal.stream_mlp, "scan_key_insn": cal.scan_key_insn,
                "insert_worker_ns_net_of_batches": inserts, "insert_run_last_slice_share": med("inserts", "last_share"),
                "router_ns": route, "effective_cpus": effective, "per_rep": cal_runs, "router_runs": routes}  # fmt: skip
    # routers and workers share CPUs only where the descriptor reserves none (a small host)
    return replace(cal, shared_cpus=None if machine.reserved_cpus else effective), measured


def predict(machine, kind: str, workload: str, n: int, cal: Calibration) -> dict:
    """The calibrated model's row (noise-free) in the same terms as the measurement."""
    sched = generate(kind, machine, N_SLICES, seed=0)
    row = simulate_batch(machine, workload, "dense", [sched], n_records=n, noise=False, calibration=cal)[0]
    per_cpu, cpu_s = cpu_normalised(row["queries"], row["task_clock_ns"])
    wall = float(throughput(machine, workload, "dense", [sched], n_records=n, calibration=cal)[0])
    out = {"per_cpu_qps": per_cpu, "wall_qps": wall, "worker_cpus": cpu_s / row["window_s"], "schedule": sched,
           "batches_per_query": model_batches_per_query(machine, get_workload(workload), cal, n_records=n, n_slices=N_SLICES, schedule=sched),
           "uncalibrated_wall_qps": float(throughput(machine, workload, "dense", [sched], n_records=n)[0])}  # fmt: skip
    if kind in ONE_CORE_KINDS:
        out["busiest_worker_share"] = busiest_share(list(row["core"]), list(row["task_clock_ns"]))
    return out


def cpu_normalised_prediction(machine, kind: str, workload: str, n: int, cal: Calibration) -> float:
    """Predicted queries per worker-CPU-second of one (kind, workload) under `cal`."""
    sched = generate(kind, machine, N_SLICES, seed=0)
    row = simulate_batch(machine, workload, "dense", [sched], n_records=n, noise=False, calibration=cal)[0]
    return cpu_normalised(row["queries"], row["task_clock_ns"])[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--routers", type=int, default=1, help="routers per node of the measured runs (a host with many workers needs several to keep them busy)")
    ap.add_argument("--tag", default="", help="suffix of the record names (another host's records beside this one's, e.g. 16cpu)")
    args = ap.parse_args()
    if args.routers < 1:
        ap.error(f"--routers: must be at least 1, got {args.routers}")
    machine = discover(name="localhost", routers_per_node=args.routers)
    suffix = f"_{args.tag}" if args.tag else ""
    share = "" if machine.reserved_cpus else " shared"
    layout = f"{machine.n_workers} workers + {args.routers * machine.numa_nodes} router(s) on this host's {len(machine.cpus)}{share} CPUs"
    configs = [(k, w) for k in args.kinds.split(",") for w in args.workloads.split(",")]
    run_id = datetime.now(UTC).isoformat(timespec="seconds")
    t0, load0 = time.perf_counter(), _load()
    cal_runs, routes, runs = [], [], {c: [] for c in configs}
    for rep in range(args.reps):
        cal_runs.append({
            "lookup_b1": calibration_run(args.keys, args.seconds, 1 + rep, "ycsb-c", batch=1, distribution="uniform"),
            "lookup_b100": calibration_run(args.keys, args.seconds, 1 + rep, "ycsb-c", distribution="uniform"),
            "lookup_small": calibration_run(SMALL_KEYS, args.seconds, 1 + rep, "ycsb-c", distribution="uniform"),
            **{f"scan{k}": calibration_run(args.keys, args.seconds, 1 + rep, "scan", distribution="uniform", scan_min=k, scan_max=k)
               for k in (SHORT, LONG)},
            **{f"scan{k}_small": calibration_run(SMALL_KEYS, args.seconds, 1 + rep, "scan", distribution="uniform", scan_min=k, scan_max=k)
               for k in (SHORT, LONG)},
            "inserts": calibration_run(args.keys, args.seconds, 1 + rep, "rsi-25-50-25", distribution="uniform", scan_min=1, scan_max=1),
        })  # fmt: skip
        routes.append(router_ns(args.keys, args.seconds))
        for c in configs:
            runs[c].append(measured_run(machine, *c, args.keys, args.seconds, rep, args.routers))
    cal, cal_measured = fit(machine, args.keys, cal_runs, routes, args.routers)
    # each rep's constants predict that rep's runs: the neighbours' load (how much of the L3 they
    # leave us) moves both alike, which medians of constants and of measurements pool away
    rep_cals = [fit(machine, args.keys, [cal_runs[i]], [routes[i]], args.routers)[0] for i in range(args.reps)]
    cal_measured.update(bench_s=time.perf_counter() - t0, host_load_start=load0, host_load_end=_load(),
                        per_rep_calibration=[dict(c.__dict__) for c in rep_cals])  # fmt: skip
    print(json.dumps({"calibration": cal.__dict__}))
    for kind, wl in configs:
        pred, meas = predict(machine, kind, wl, args.keys, cal), runs[(kind, wl)]
        med = {k: statistics.median(r[k] for r in meas) for k in meas[0]}
        rep_pred = [cpu_normalised_prediction(machine, kind, wl, args.keys, c) for c in rep_cals]
        rep_ratio = [p / r["per_cpu_qps"] for p, r in zip(rep_pred, meas, strict=True)]
        check_ratio = statistics.median(rep_ratio)
        within = bool(abs(check_ratio - 1) <= BAND)
        write_record(
            f"sim_vs_runtime_{kind.replace('-', '_')}_{wl.replace('-', '_')}{suffix}",
            f"{wl}, {layout}, {args.keys} dense keys, {N_SLICES} slices, {kind}: "
            "calibrated simulator prediction of queries per worker-CPU-second (task_clock)",
            statistics.median(rep_pred), "queries per worker-CPU-second",
            f"measured on the runtime (Testbed, median of {args.reps} x {args.seconds} s, interleaved with the calibration runs)",
            med["per_cpu_qps"], run_id=run_id, check="cpu-normalised, per rep", check_ratio=check_ratio, per_rep_ratios=rep_ratio,
            per_rep_predicted=rep_pred, pooled_predicted=pred["per_cpu_qps"], pooled_ratio=pred["per_cpu_qps"] / med["per_cpu_qps"],
            within_25pct=within, meets_target=within,
            wall_predicted_qps=pred["wall_qps"], wall_measured_qps=med["wall_qps"], wall_ratio=pred["wall_qps"] / med["wall_qps"],
            wall_within_25pct=bool(abs(pred["wall_qps"] / med["wall_qps"] - 1) <= BAND),
            uncalibrated_wall_prediction_qps=pred["uncalibrated_wall_qps"],
            predicted_busiest_worker_share=pred.get("busiest_worker_share"), measured_runs=meas,
            batches_per_query_model=pred["batches_per_query"],
            batches_per_query_measured=med["batches_per_query"], probe_reads_per_query_measured=med["probe_reads_per_query"],
            calibration=dict(cal.__dict__), calibration_measurements=cal_measured,
            calibrated_on=f"single-worker uniform runs: ycsb-c lookups (batches of 1 and 100 queries; {SMALL_KEYS} keys for the L3 share), scan-mix scans of 10 and 100 keys "
                          f"({SMALL_KEYS} keys: instructions per key; full tree: streamed-line MLP), "
                          "inserts from the last slice of rsi-25-50-25 with 1-key scans, router alone (ycsb-c)",
            host_load=_load(),
        )  # fmt: skip


if __name__ == "__main__":
    main()
