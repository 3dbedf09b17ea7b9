"""What a router pays per query on the runtime, by dispatch path and router count (docs/machine-model.md §8).

    cmake --build build -j2
    .venv/bin/python benchmarks/bench_dispatch.py [--routers 1 2 4] [--seconds 2] [--reps 2] [--tag T]

The simulator charges a router `route_ns` per query, measured on a router alone
(`pmoss_bench_tree router`: generate, find the slice, no queue). In a run the router also hands
each query to another core's queue, and for a group (width > thread) first reads up to four
members' loads to pick the least loaded one. This measures what that costs: every worker of the
host's descriptor and R routers per node run the closed-loop ycsb-c stream under one schedule of
each dispatch path (sn-spread: one worker per slice; os-default: round robin over all workers;
sn-numa: least loaded of a node group), the runtime's default sampled probe (as a collection runs
it). Where the routers cannot keep the workers busy the queues run dry: a worker's drain then
holds a query or two, so batches per query approach 1 (with full queues a drain holds 1,024
queries: ~0.25 for a worker serving all 256 slices, less for one serving a few). There the
routers are the bottleneck and a router's time per query is routers / throughput. Records:
dispatch_<kind>_<R>r[_T], value = that time per query, baseline = the router alone;
routers_bound = batches per query >= 0.5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess

from pmoss.bench import write_record
from pmoss.collect.runtime import library_path
from pmoss.collect.testbed import Testbed
from pmoss.collect.topology import discover
from pmoss.contracts.machine import Machine
from pmoss.contracts.policies import generate

KINDS = ("sn-spread", "os-default", "sn-numa")
N_SLICES = 256


def router_alone_ns(n: int, seconds: float) -> float:
    binary = library_path().parent / "pmoss_bench_tree"
    r = json.loads(subprocess.run([str(binary), "router", str(n), str(seconds)], check=True, capture_output=True, text=True).stdout)
    return r["seconds"] / r["queries"] * 1e9


def run(machine: Machine, kind: str, routers: int, n: int, seconds: float, rep: int, distribution: str | None) -> dict:
    tb = Testbed(machine, n_keys=n, dataset="dense", n_slices=N_SLICES, seed=1, routers_per_node=routers)
    tb.enforce(generate(kind, machine, tb.n_slices, seed=0))
    spec = {"distribution": distribution} if distribution else {}
    res = tb.rt.run("ycsb-c", seconds, seed=1 + rep, **spec)  # the runtime's own result: no snapshot row of another workload
    return {"qps": res["throughput"], "batches_per_query": res["batches"] / res["completed"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--distribution", choices=["zipf", "uniform"], default=None,
                    help="key distribution of the lookups (default: ycsb-c's Zipf 0.99); uniform sends no router to a hot queue")
    ap.add_argument("--tag", default="", help="suffix of the record names (e.g. 16cpu)")
    args = ap.parse_args()
    if min(args.routers) < 1:
        ap.error(f"--routers: every count must be at least 1, got {min(args.routers)}")
    alone = statistics.median(router_alone_ns(args.keys, args.seconds) for _ in range(args.reps))
    suffix = (f"_{args.distribution}" if args.distribution == "uniform" else "") + (f"_{args.tag}" if args.tag else "")
    keys = "uniform keys" if args.distribution == "uniform" else "Zipf 0.99"
    for routers in args.routers:
        machine = discover(name="localhost", routers_per_node=routers)
        for kind in args.kinds.split(","):
            runs = [run(machine, kind, routers, args.keys, args.seconds, rep, args.distribution) for rep in range(args.reps)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            per_query = routers * machine.numa_nodes / med["qps"] * 1e9
            write_record(
                f"dispatch_{kind.replace('-', '_')}_{routers}r{suffix}",
                f"ycsb-c ({keys}) closed loop, {machine.n_workers} workers + {routers * machine.numa_nodes} router(s) on this host's "
                f"{len(machine.cpus)} CPUs, {args.keys} dense keys, {N_SLICES} slices, {kind}: routers x 1e9 / throughput "
                "(a router's ns per query where the routers bound)",
                per_query, "ns per query", "the router alone (pmoss_bench_tree router: generate and find the slice, no queue)", alone,
                routers_bound=bool(med["batches_per_query"] >= 0.5), runs=runs, **med,
            )  # fmt: skip


if __name__ == "__main__":
    main()
