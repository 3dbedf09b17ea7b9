"""Inference speed: one 256-slice rollout on a 64-core descriptor (issue target: <= 1 s on 2 cores),
and 2,048 slices on a 16-node x 64-worker one (the largest machine a model must schedule without
retraining; issue #39 target <= 1 s), and dt-critic's best-of-K as served (K = params.yaml's
critic.serve_k: greedy + K samples in one batched rollout, the group heuristics, one critic pass) on
the same 256 slices (target <= 0.5 s) and on the 1,024 workers (target <= 2 s), for the paper-size
policy (and at 256 slices the grid's, dt-grid.yaml: its shape and token layout), at torch's default threads as `pmoss schedule`
runs it: the inference a critic-ranked version costs, scoring included.

    .venv/bin/python benchmarks/bench_inference.py [--quick]   # --quick skips the slow uncached baseline (keeps that record)

Baselines, same run: the same rollout without the KV cache (a full-context forward per slice), the
rollout before issue #39 (tests/dense_rollout.py: dense [groups x workers] state per step, whole
episode in the attention), greedy and as dt-critic serves it, and at 2,048 slices today's rollout
with the whole episode in the attention instead of the model's training length (256 slices here);
and at 2,048 slices the same shapes with one token a slice (slice_tokens: 1), greedy and served. Peak memory: how far one call raises a fresh process's peak RSS
(`--peak greedy|dense|served` prints just that).
Uses the paper's reference model size (6 layers, 8 heads, 128 dims) with random weights: speed
does not depend on what the weights learned.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import yaml

from pmoss.bench import best_time, write_record
from pmoss.contracts.machine import Caches, Cpu, Machine, default_reserved
from pmoss.contracts.policies import generate
from pmoss.contracts.snapshot import SLICE_FEATURES
from pmoss.data.state import as_tensors, machine_arrays, teacher_forced
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.learn.bundle import Bundle
from pmoss.learn.model import DecisionTransformer, DTConfig
from pmoss.learn.rollout import propose, rollout, snapshot_inputs

ROOT = Path(__file__).resolve().parent.parent
PARAMS = ROOT / "params.yaml"
sys.path.insert(0, str(ROOT / "tests"))
from dense_rollout import dense_rollout  # noqa: E402  the rollout before issue #39, frozen there for its equality test

import pmoss.learn.rollout as rollout_module  # noqa: E402

N = 256
THREADS = torch.get_num_threads()  # torch's default here, before main() pins 1 for the batch-1 rollouts


def machine_64() -> Machine:
    """64 workers: 2 sockets x 2 nodes x 17 CPUs (2 reserved per node)."""
    cpus = [Cpu(cpu=i, socket=i // 34, node=i // 17, l3_domain=i // 17, core=i) for i in range(68)]
    return Machine(name="bench-64", vendor="amd", sockets=2, numa_nodes=4, cpus=cpus, caches=Caches(l1d_kib=32, l2_kib=512, l3_mib=32),
                   mem_bandwidth_gbps=[50.0] * 4, local_latency_ns=90, distance=[[90.0 if a == b else 130.0 for b in range(4)] for a in range(4)],
                   freq_ghz=2.8, reserved_cpus=default_reserved(cpus, 4))  # fmt: skip


def bundle_for(m: Machine, **model: object) -> Bundle:
    f, k = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(n_slices=N, n_features=f, n_meta=k, dropout=0.0, **model)  # type: ignore[arg-type]
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1.0] * f, meta_mean=[0.0] * k, meta_std=[1.0] * k,
                  best_return={f"{m.name}|ycsb-c": 1.0}, n_slices=N)  # fmt: skip
    return Bundle(cfg, stats, DecisionTransformer(cfg).state_dict())


def machine_1024() -> Machine:
    """16 nodes x 64 workers (66 CPUs per node, 2 reserved), 2 sockets, 8 CPUs per L3 domain."""
    cpus = [Cpu(cpu=i, socket=i // 528, node=i // 66, l3_domain=i // 8, core=i) for i in range(16 * 66)]
    return Machine(name="bench-1024", vendor="amd", sockets=2, numa_nodes=16, cpus=cpus, caches=Caches(l1d_kib=32, l2_kib=1024, l3_mib=32),
                   mem_bandwidth_gbps=[40.0] * 16, local_latency_ns=100,
                   distance=[[100.0 if a == b else 130.0 if a // 8 == b // 8 else 200.0 for b in range(16)] for a in range(16)],
                   freq_ghz=2.4, reserved_cpus=default_reserved(cpus, 16))  # fmt: skip


@torch.no_grad()
def rollout_uncached(b: Bundle, m: Machine, row: dict, model: torch.nn.Module) -> None:
    """Greedy rollout re-running the whole context every step: what the cache saves."""
    meta, feats, share = snapshot_inputs(b, m, row)
    mt = {k: v[None] for k, v in as_tensors(machine_arrays(m)).items()}
    groups = torch.zeros(1, N, dtype=torch.long)
    share = torch.as_tensor(share, dtype=torch.float32)[None]
    rtg = torch.tensor(2.0 - 2.0 * np.concatenate([[0], np.cumsum(share[0])[:-1]]), dtype=torch.float32)[None]
    for t in range(N):
        summary, chosen, every = teacher_forced(groups[:, : t + 1], feats[None, : t + 1], share[:, : t + 1], mt, torch.tensor([[t]]))
        groups[0, t] = model(meta[None], rtg[:, : t + 1], summary, chosen, every, mt["m_group_valid"], torch.tensor([[t]]))[0, 0].argmax()


def _row(m: Machine, n: int, rng: np.random.Generator) -> dict:
    """A snapshot under os-default with random counters (dt-critic's keep rule reads its schedule)."""
    running = generate("os-default", m, n)
    return {"machine": m.name, "workload": "ycsb-c", "n_slices": n, "window_s": 1.0, "schedule_kind": running.kind,
            "node": running.node, "core": running.core, "width": None, "schedule_provenance": "{}",
            "queries": rng.integers(1, 1000, n).tolist(), **{f: rng.uniform(0, 1e6, n).tolist() for f in SLICE_FEATURES},
            "imc_read_bytes": None, "imc_write_bytes": None, "link_in_bytes": None, "link_out_bytes": None}  # fmt: skip


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Wall times of each function, called in turn `rounds` times (old and new share the machine's load)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            times[k].append(best_time(fn, repeat=1))
    return times


def before_39(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` run with the pre-#39 rollout wherever pmoss.learn.rollout calls `rollout` (propose, candidate_pool)."""

    def run() -> object:
        # the pre-#39 rollout read the whole episode and had no mask on groups of every worker (none of
        # the benchmark's machines, all multi-node, has one): it takes neither argument
        saved, rollout_module.rollout = rollout_module.rollout, lambda *a, context=None, machine_wide=False, **k: dense_rollout(*a, **k)
        try:
            return fn()
        finally:
            rollout_module.rollout = saved

    return run


def peak_mib(what: str, threads: int = 1) -> float:
    """Peak RSS growth (MiB) over one call in a fresh process (VmHWM reset before it): `what` = greedy | dense | served, at 2,048 slices on 1,024 workers."""
    out = subprocess.run([sys.executable, __file__, "--peak", what, "--threads", str(threads)], capture_output=True, text=True, check=True, timeout=3600)
    return float(out.stdout.split()[-1])


def _peak_child(what: str, threads: int) -> None:
    torch.set_num_threads(1 if what != "served" else threads)
    torch.manual_seed(0)
    b = bundle_for(machine_64())
    model, big = b.model(), machine_1024()
    row = _row(big, 2048, np.random.default_rng(1))
    call = {"greedy": lambda: rollout(b, big, row, model=model), "dense": lambda: dense_rollout(b, big, row, model=model),
            "served": lambda: propose(served_bundle(b, machine_64(), "critic-tiny.yaml", row), big, row, **served_settings())}[what]  # fmt: skip
    machine_arrays(big)  # the cached group list, built before the measurement as a server has it
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS (VmHWM) to the current RSS (Linux >= 4.0)
    before = _status_kib("VmRSS")
    call()
    print((_status_kib("VmHWM") - before) / 1024)


def _status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status, KiB."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def critic_of(m: Machine, config: str) -> Bundle:
    """The critic a training config builds (its shape, token layout and ensemble size), random weights."""
    cfg = yaml.safe_load((ROOT / "training" / config).read_text())
    shape = {k: v for k, v in cfg["model"].items() if k != "dropout"}
    critic = bundle_for(m, use_return=False, value_head=True, **shape)
    critic.info["algo"] = "critic"
    critic.members = [dataclasses.replace(critic) for _ in range(cfg.get("critic", {}).get("members", 1) - 1)]  # one value pass each
    return critic


def grid_policy(m: Machine) -> tuple[str, Bundle]:
    """The paper grid's policy (training/dt-grid.yaml: its shape and token layout) with random weights, and its description."""
    model = yaml.safe_load((ROOT / "training" / "dt-grid.yaml").read_text())["model"]
    shape = {k: v for k, v in model.items() if k != "dropout"}
    tokens = shape.get("slice_tokens", 3)
    size = f"{shape['n_layer']}L/{shape['n_head']}H/{shape['n_embd']}D{', one token a slice' if tokens == 1 else ''}, training/dt-grid.yaml"
    return size, bundle_for(m, **shape)


def served_bundle(policy: Bundle, m: Machine, config: str, row: dict) -> Bundle:
    """dt-critic as the pipeline attaches it: the policy, the critic, the cell's measured history (attach-critic --history)."""
    history = {"weight": 0.5, "cells": {f"{m.name}|{row['workload']}": {"greedy": 0.95, "sample": 0.96, "sn-hot": 0.8, "sn-numa": 0.7}}}
    return Bundle(policy.config, policy.stats, policy.state_dict, {"algo": "dt", "history": history}, critic_of(m, config))


def served_settings() -> dict:
    k = int(yaml.safe_load(PARAMS.read_text())["critic"]["serve_k"])  # what dt-critic serves
    return {"mode": "best-of-k", "k": k, "scorer": "critic", "candidates": "samples+heuristics"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the slow uncached baseline (keeps the inference_rollout_256 record) and the dense peak")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of today's and the pre-#39 rollout (medians reported); the 2,048-slice dense baseline runs once")
    ap.add_argument("--threads", type=int, default=THREADS, help="torch threads of the served (dt-critic) runs (default: torch's default, as `pmoss schedule`); 1 on a host with more runnable processes than cores, where 2 threads stall on each other")
    ap.add_argument("--peak", choices=["greedy", "dense", "served"], help="only print the peak RSS growth (MiB) of one such call at 2,048 slices on 1,024 workers (what peak_mib runs in a fresh process)")
    args = ap.parse_args()
    if args.peak:
        return _peak_child(args.peak, args.threads)
    quick, rounds, threads = args.quick, args.rounds, args.threads
    med = statistics.median
    torch.set_num_threads(1)  # small per-token ops: threads cost more than they give
    torch.manual_seed(0)  # the same random weights every run, so the chosen actions (and their cost) repeat
    m = machine_64()
    b = bundle_for(m)
    model = b.model()
    row = _row(m, N, np.random.default_rng(0))
    small = interleaved({"new": lambda: rollout(b, m, row, model=model), "before": lambda: dense_rollout(b, m, row, model=model)}, rounds)
    cached = med(small["new"])
    small_extra = {"before_39_s": med(small["before"]), "vs_before_39": med([a / c for a, c in zip(small["new"], small["before"], strict=True)]), "rounds": rounds}
    write_record("inference_rollout_256_before_39", "rollout time (greedy, 256 slices, 64 workers, 6L/8H/128D)", cached, "s",
                 "the rollout before issue #39 (tests/dense_rollout.py, same run, interleaved, medians)", small_extra["before_39_s"],
                 ratio_of_medians_per_round=small_extra["vs_before_39"], rounds=rounds)  # fmt: skip
    if not quick:  # --quick keeps the last full record: its baseline is the slow part
        uncached = best_time(lambda: rollout_uncached(b, m, row, model), repeat=1)
        write_record("inference_rollout_256", "rollout time (greedy, 256 slices, 64 workers, 6L/8H/128D)", cached, "s",
                     "same rollout without KV cache", uncached, target_s=1.0, meets_target=cached <= 1.0, **small_extra)  # fmt: skip
    # dt-critic as `pmoss schedule`/`serve` run it: torch's default threads (the batch of 17 rollouts
    # gains from both cores, unlike the batch-1 greedy rollout above).
    torch.set_num_threads(threads)
    settings = served_settings()
    k = settings["k"]
    for name, size, policy, config in (("inference_dt_critic_256", "6L/8H/128D", b, "critic-tiny.yaml"),
                                       ("inference_dt_critic_256_grid", *grid_policy(m), "critic-grid.yaml")):  # fmt: skip
        paired = served_bundle(policy, m, config, row)
        t = interleaved({"new": lambda: propose(paired, m, row, **settings), "before": before_39(lambda: propose(paired, m, row, **settings))}, rounds)  # type: ignore[arg-type]  # noqa: B023
        ranked = med(t["new"])
        critics = f"{1 + len(paired.critic.members)} x 2L critic" if paired.critic.members else "2L critic"
        write_record(name, f"dt-critic best-of-{k} + heuristics, critic-ranked (256 slices, 64 workers, {size} + {critics}, training/{config}, {threads} threads)", ranked, "s",
                     "greedy rollout of the 6L/8H/128D policy (same run, 1 thread)", cached, target_s=0.5, meets_target=ranked <= 0.5,
                     before_39_s=med(t["before"]), vs_before_39=med([a / c for a, c in zip(t["new"], t["before"], strict=True)]), rounds=rounds)  # fmt: skip
    torch.set_num_threads(1)
    big = machine_1024()
    n_big = 2048  # the slice count default_n_slices gives a 1024-worker machine (2 per worker)
    row_big = _row(big, n_big, np.random.default_rng(1))
    new_big = [best_time(lambda: rollout(b, big, row_big, model=model), repeat=1)]
    dense_big = best_time(lambda: dense_rollout(b, big, row_big, model=model), repeat=1)  # once: ~30 s on a quiet VM
    new_big += [best_time(lambda: rollout(b, big, row_big, model=model), repeat=1) for _ in range(max(rounds - 1, 1))]
    big_t = med(new_big)
    whole_big = best_time(lambda: rollout(b, big, row_big, model=model, context=n_big), repeat=1)  # once: the whole episode in the attention
    peaks = {"peak_rss_mib": peak_mib("greedy"), **({} if quick else {"before_39_peak_rss_mib": peak_mib("dense")})}
    write_record("inference_rollout_1024_workers", f"rollout time (greedy, {n_big} slices, 16 nodes x 64 workers, 6L/8H/128D)", big_t, "s",
                 "the rollout before issue #39 (tests/dense_rollout.py, same run, once)", dense_big, groups=len(machine_arrays(big).group_node),
                 target_s=1.0, meets_target=big_t <= 1.0, rollout_256_s=cached, rounds=len(new_big), context_slices=N,
                 whole_episode_s=whole_big, **peaks)  # fmt: skip
    torch.set_num_threads(threads)
    paired = served_bundle(b, m, "critic-tiny.yaml", row_big)
    served = [best_time(lambda: propose(paired, big, row_big, **settings), repeat=1) for _ in range(rounds)]  # type: ignore[arg-type]
    served_whole = best_time(lambda: propose(paired, big, row_big, **settings, context=n_big), repeat=1)  # type: ignore[arg-type]  # once: the whole episode
    write_record("inference_dt_critic_1024_workers", f"dt-critic best-of-{k} + heuristics, critic-ranked ({n_big} slices, 16 nodes x 64 workers, 6L/8H/128D + 2L critic, training/critic-tiny.yaml, {threads} threads)",
                 med(served), "s", "greedy rollout, same size (same run, 1 thread)", big_t, target_s=2.0, meets_target=med(served) <= 2.0,
                 rounds=rounds, whole_episode_s=served_whole, peak_rss_mib=peak_mib("served", threads))  # fmt: skip
    # One token a slice (slice_tokens: 1, docs/model.md): the same shapes, a third of the tokens a step decodes.
    torch.set_num_threads(1)
    one = {name: bundle_for(big, slice_tokens=1, **shape) for name, shape in (("reference", {}), ("grid", {"n_layer": 3, "n_head": 4}))}
    models = {name: b1.model() for name, b1 in one.items()}
    t1 = interleaved({name: lambda name=name: rollout(one[name], big, row_big, model=models[name]) for name in one}, rounds)
    write_record("inference_rollout_1024_workers_1token", f"rollout time (greedy, {n_big} slices, 16 nodes x 64 workers, 6L/8H/128D, one token a slice)",
                 med(t1["reference"]), "s", "the same policy shape at 3 tokens a slice (inference_rollout_1024_workers, same run)", big_t,
                 target_s=1.0, meets_target=med(t1["reference"]) <= 1.0, grid_shape_s=med(t1["grid"]), grid_shape="3L/4H/128D, one token a slice",
                 rounds=rounds, context_slices=N)  # fmt: skip
    torch.set_num_threads(threads)
    paired1 = served_bundle(one["reference"], big, "critic-tiny.yaml", row_big)
    served1 = [best_time(lambda: propose(paired1, big, row_big, **settings), repeat=1) for _ in range(rounds)]  # type: ignore[arg-type]
    write_record("inference_dt_critic_1024_workers_1token", f"dt-critic best-of-{k} + heuristics, critic-ranked ({n_big} slices, 16 nodes x 64 workers, 6L/8H/128D one token a slice + 2L critic, training/critic-tiny.yaml, {threads} threads)",
                 med(served1), "s", "the same at 3 tokens a slice (inference_dt_critic_1024_workers, same run)", med(served), target_s=2.0,
                 meets_target=med(served1) <= 2.0, rounds=rounds)  # fmt: skip


if __name__ == "__main__":
    main()
