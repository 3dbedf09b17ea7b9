"""Simulated episodes: run the model for schedules and emit raw snapshot rows (docs/design.md §4.3).

`simulate` gives one row, `simulate_batch` many (same machine, workload and dataset) through one
vectorised model call. Counters are raw counts over the window derived from the model's per-query
quantities (docs/machine-model.md §11), with multiplicative noise seeded by what runs (placement,
seed, run index: `noise_key`); a counter the simulated vendor's PMU lacks is null and named in
`unavailable`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pmoss import __version__
from pmoss.contracts.errors import ContractError
from pmoss.contracts.groups import groups_of
from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import ANY_WORKER_KINDS, ONE_CORE_KINDS, Schedule
from pmoss.contracts.snapshot import (
    CORE_FEATURES,
    OFFCORE_LINK,
    OFFCORE_NODE,
    SIM_TIMESTAMP,
    SOFTWARE_FEATURES,
    episode_id,
)
from pmoss.contracts.workload import Workload, check_dataset, get_workload
from pmoss.sim.hardware import HW, Calibration, balanced_kinds, hw_for
from pmoss.sim.model import Demand, Solution, solve
from pmoss.sim.placement import (
    Placement,
    from_actions,
    from_schedules,
    grown_share,
    one_core_actions,
    with_first_touch,
)
from pmoss.sim.pool import load_sim_machine
from pmoss.sim.profile import SliceProfile, insert_order, slice_bounds, slice_profile

COLLECTOR = f"pmoss.sim {__version__}"
NOISE_EPISODE = 0.02  # sigma of log throughput between runs of one schedule
NOISE_SLICE = 0.02  # sigma of a slice's common factor (all its counters move together)
NOISE_COUNTER = 0.01  # sigma of each counter on top
L1I_MISSES_PER_KINSN = 1.5  # tight index code: few i-cache misses
BRANCH_MISSES_PER_NODE = 1.5  # binary search over a node: about half of its compare branches
BRANCH_MISSES_PER_SCAN_KEY = 0.02
GROWTH_PASSES = 3  # os-default under inserts: X -> grown share -> X (monotone; 3 passes settle to < 1 %)
IDLE_WAKEUPS_PER_S = 1000.0  # an idle worker blocks on its queue: one context switch per wakeup

# Counters each simulated vendor's PMU cannot give per core (docs/machine-model.md §12).
UNAVAILABLE_CORE = {
    "intel": (),
    "amd": ("llc_write_misses", "mem_write_misses", "cycles_l3_miss", "cycles_mem_any"),
    "arm": ("llc_write_misses", "local_dram_loads", "cycles_l3_miss"),
    "ibm": ("llc_write_misses", "mem_write_misses"),
    "other": (),
}
UNAVAILABLE_CORE_BY_MODEL = {"E5-46": ("cycles_l3_miss",)}  # STALLS_L3_MISS arrived with Skylake
OFFCORE_VENDORS = ("intel",)  # paper: no off-core counters on AMD and ARM; POWER8 nest PMU needs PowerVM


class SimInputError(ContractError):
    """Bad input to the simulator; the message names the field."""


def unavailable_features(machine: Machine) -> list[str]:
    core = UNAVAILABLE_CORE[machine.vendor]
    for key, extra in UNAVAILABLE_CORE_BY_MODEL.items():
        if key in machine.model:
            core = tuple(core) + extra
    off = () if machine.vendor in OFFCORE_VENDORS else OFFCORE_NODE + OFFCORE_LINK
    return sorted(set(core)) + list(off)


@dataclass(frozen=True)
class Inputs:
    machine: Machine
    workload: Workload
    dataset: str
    n_records: int
    window_s: float
    calibration: Calibration | None = None  # measured host constants (docs/machine-model.md §14.3)


def resolve(machine: Machine | str, workload: Workload | str, dataset: str, n_records: int, window_s: float,
            calibration: Calibration | None = None) -> Inputs:
    """Validate and resolve the common inputs; errors name the field."""
    m = load_sim_machine(machine) if isinstance(machine, str) else machine
    w = get_workload(workload) if isinstance(workload, str) else workload
    if not isinstance(n_records, int | np.integer) or n_records <= 0:
        raise SimInputError(f"n_records: must be a positive integer, got {n_records!r}")
    if not window_s > 0:
        raise SimInputError(f"window_s: must be positive, got {window_s!r}")
    return Inputs(m, w, check_dataset(dataset), int(n_records), float(window_s), calibration)


def _check_slices(inp: Inputs, n_slices: int) -> None:
    if n_slices <= 0:
        raise SimInputError(f"n_slices: must be positive, got {n_slices}")
    if n_slices > inp.n_records:
        raise SimInputError(f"n_slices: {n_slices} slices need at least as many records (n_records={inp.n_records})")


def model_run(inp: Inputs, placement: Placement, n_slices: int, first_touch: np.ndarray | None = None
              ) -> tuple[HW, SliceProfile, Solution, Demand]:
    """The noise-free model for a batch of placements (all of `n_slices` slices).

    first_touch [B] bool: os-default rows, whose pages allocated by inserts during the window sit on
    the inserting workers' nodes (§5); their share grows with X, so X and the placement are solved
    as a fixed point (GROWTH_PASSES re-solves, only when such rows exist and the workload inserts)."""
    _check_slices(inp, n_slices)
    hw = hw_for(inp.machine, inp.calibration)
    prof = slice_profile(inp.workload, inp.n_records, n_slices, insert_order(inp.dataset))
    sol, d = solve(hw, prof, placement)
    insert = inp.workload.mix.insert
    # appended keys are never read back (reads and scans pick loaded keys) and the rightmost leaf
    # is first-touched by the inserting worker itself: no growth term for appends
    # with NUMA balancing on, os-default's pages follow their accessors whoever touched them first (§5.2)
    if first_touch is not None and first_touch.any() and insert > 0 and prof.inserts == "hashed" and "os-default" not in balanced_kinds(hw):
        for _ in range(GROWTH_PASSES):
            grown = grown_share(sol.X, insert, inp.window_s, inp.n_records)
            placement = with_first_touch(placement, first_touch, grown)
            sol, d = solve(hw, prof, placement)
    return hw, prof, sol, d


def throughput(machine: Machine | str, workload: Workload | str, dataset: str, schedules: Sequence[Schedule] | np.ndarray,
               *, n_records: int = 10_000_000, window_s: float = 10.0, calibration: Calibration | None = None) -> np.ndarray:
    """Noise-free total throughput [B] (queries/s) of schedules, or of one-core action arrays [B, N].
    window_s matters only for os-default under inserts (pages allocated during the window, §5).
    calibration: measured constants of a real host replacing the tables (`pmoss.sim.hardware.Calibration`)."""
    inp = resolve(machine, workload, dataset, n_records, window_s, calibration)
    hw = hw_for(inp.machine, inp.calibration)
    if isinstance(schedules, np.ndarray):
        actions = np.atleast_2d(schedules)
        if actions.min() < 0 or actions.max() >= hw.n_workers:
            raise SimInputError(f"actions: worker indices must be in [0, {hw.n_workers}) for {inp.machine.name}")
        return model_run(inp, from_actions(hw, actions), actions.shape[1])[2].X
    schedules, actions = _validated(inp, schedules)
    return model_run(inp, from_schedules(hw, schedules, actions), schedules[0].n_slices, _first_touch(schedules))[2].X


def _validated(inp: Inputs, schedules: Sequence[Schedule]) -> tuple[list[Schedule], list[np.ndarray | None]]:
    """Check every schedule against the machine (errors name the schedule and its first bad
    slice); returns them with the worker indices of the one-core ones."""
    schedules = list(schedules)
    if not schedules:
        raise SimInputError("schedules: need at least one schedule")
    hw = hw_for(inp.machine, inp.calibration)
    actions: list[np.ndarray | None] = []
    for i, s in enumerate(schedules):
        acts = one_core_actions(hw, s) if s.kind in ONE_CORE_KINDS else None  # fast vectorised check
        try:
            acts is not None or s.validate_for(inp.machine)
        except ContractError as e:
            raise SimInputError(f"schedules[{i}]: {e}") from None
        if s.n_slices != schedules[0].n_slices:
            raise SimInputError(f"schedules[{i}]: n_slices {s.n_slices} differs from schedules[0] ({schedules[0].n_slices}); batch equal sizes")
        actions.append(acts)
    return schedules, actions


def simulate(machine: Machine | str, workload: Workload | str, dataset: str, schedule: Schedule, *, seed: int,
             run_index: int = 0, n_records: int = 10_000_000, window_s: float = 10.0,
             calibration: Calibration | None = None) -> dict:
    """One simulated episode as a raw snapshot row (dict in `pmoss.contracts.snapshot.SNAPSHOT_SCHEMA`)."""
    return simulate_batch(machine, workload, dataset, [schedule], seeds=[seed], run_indices=[run_index],
                          n_records=n_records, window_s=window_s, calibration=calibration)[0]  # fmt: skip


def simulate_batch(machine: Machine | str, workload: Workload | str, dataset: str, schedules: Sequence[Schedule], *,
                   seeds: Sequence[int] | int = 0, run_indices: Sequence[int] | int = 0, n_records: int = 10_000_000,
                   window_s: float = 10.0, noise: bool = True, calibration: Calibration | None = None) -> list[dict]:
    """Many episodes of one machine / workload / dataset in one vectorised model call.

    seeds and run_indices: one per schedule, or one for all. noise=False gives the model's mean.
    calibration: measured host constants (`pmoss.sim.hardware.Calibration`), None for the tables."""
    inp = resolve(machine, workload, dataset, n_records, window_s, calibration)
    schedules, actions = _validated(inp, schedules)
    B = len(schedules)
    seeds, runs = _per_episode(seeds, B, "seeds"), _per_episode(run_indices, B, "run_indices")
    hw = hw_for(inp.machine, inp.calibration)
    pl = from_schedules(hw, schedules, actions)
    _, prof, sol, d = model_run(inp, pl, schedules[0].n_slices, _first_touch(schedules))
    ids = [episode_id(inp.machine.name, inp.workload.name, inp.dataset, s.node, s.core, s.kind, sd, r, s.width)
           for s, sd, r in zip(schedules, seeds, runs, strict=True)]  # fmt: skip
    keys = [noise_key(inp, s, pl.exec_group[b], sd, r) for b, (s, sd, r) in enumerate(zip(schedules, seeds, runs, strict=True))]
    rng = [np.random.default_rng([k, sd]) for k, sd in zip(keys, seeds, strict=True)]
    counts = episode_counts(hw, prof, pl, sol, d, inp.window_s, rng if noise else None)
    return _rows(inp, schedules, seeds, runs, ids, counts)


def noise_key(inp: Inputs, schedule: Schedule, exec_group: np.ndarray, seed: int, run_index: int) -> int:
    """The noise stream of one run: keyed on what the machine runs (memory policy, per-slice node
    and execution group), the seed and the run index, never on the schedule's name, so one
    placement measured under two kind names (a `learned` pick of a heuristic's groups) reads the
    same. Memory policy is the kind only where the kind decides where pages go. On a one-node
    machine nothing but that node holds pages and "every worker" is the node's group: the
    any-worker kinds run what sn-numa runs and read its noise (else the best of several measurements
    of one placement, not a better schedule, sets the best baseline; docs/benchmarks-model.md)."""
    memory, node = schedule.kind if schedule.kind in ANY_WORKER_KINDS else "nodes", list(map(int, schedule.node))
    group = exec_group.tolist()
    if inp.machine.numa_nodes == 1:
        g = groups_of(inp.machine)
        every = int(np.flatnonzero(g.member.all(axis=1))[0])  # the group of all workers (g.n: every worker)
        memory, node, group = "nodes", [0] * len(node), [every if x == g.n else x for x in group]
    parts = [inp.machine.name, inp.workload.name, inp.dataset, memory, node, group, seed, run_index]
    return int(hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24], 16)


def _first_touch(schedules: Sequence[Schedule]) -> np.ndarray:
    return np.array([s.kind == "os-default" for s in schedules])


def _per_episode(v: Sequence[int] | int, B: int, field: str) -> list[int]:
    out = [int(v)] * B if isinstance(v, int | np.integer) else [int(x) for x in v]
    if len(out) != B:
        raise SimInputError(f"{field}: has {len(out)} entries for {B} schedules")
    if any(x < 0 for x in out):
        raise SimInputError(f"{field}: must be non-negative")
    return out


def per_query_features(hw: HW, prof: SliceProfile, sol: Solution, d: Demand) -> dict[str, np.ndarray]:
    """Every portable per-slice feature per query of the slice, [B, N] (§11)."""
    f = hw.machine.freq_ghz
    _, _, insert, scan = prof.op_frac
    t_eff = sol.t_ns * sol.smt_slowdown  # wall time per query on its (possibly shared) core
    dram = d.read_lines * (1 - d.l4_share)
    shape = t_eff.shape
    b = lambda v: np.broadcast_to(v, shape)
    return {
        "instructions": d.insn, "cycles": t_eff * f, "l1i_misses": d.insn * L1I_MISSES_PER_KINSN / 1000,
        "branch_misses": b(d.node_visits * BRANCH_MISSES_PER_NODE + scan * prof.scan_keys * BRANCH_MISSES_PER_SCAN_KEY),
        "l1d_misses": d.l1_miss_lines, "llc_misses": d.l3_miss_lines, "llc_write_misses": d.write_miss_lines,
        "dtlb_misses": d.tlb_misses, "mem_accesses": d.lines + d.write_lines,
        "local_dram_loads": dram * sol.local_share, "remote_dram_loads": dram * (1 - sol.local_share),
        "mem_write_misses": d.wb_lines, "cycles_l3_miss": d.mem_dep * sol.mem_ns * f * sol.smt_slowdown,
        "cycles_mem_any": (t_eff - d.comp_ns) * f, "task_clock_ns": t_eff,
        "page_faults": b(insert / prof.split_every), "nodes_visited": b(d.node_visits), "keys_scanned": b(scan * prof.scan_keys),
    }  # fmt: skip


def episode_counts(hw: HW, prof: SliceProfile, pl: Placement, sol: Solution, d: Demand, window_s: float,
                   rngs: list[np.random.Generator] | None) -> dict[str, np.ndarray]:
    """Raw counts over the window: queries [B, N], every feature [B, N], off-core [B, M] / [B, L]."""
    B, n = sol.t_ns.shape
    per_q = per_query_features(hw, prof, sol, d)
    F, n_off = len(per_q), 2 * hw.n_nodes + sol.link_bytes.shape[1]
    sizes = np.cumsum([1, n, F * n, n_off])  # one draw per episode keeps each episode's noise its own
    z = np.stack([r.standard_normal(sizes[-1], dtype=np.float32) for r in rngs]) if rngs else np.zeros((B, sizes[-1]))
    ep, sl = np.exp(NOISE_EPISODE * z[:, :1]), np.exp(NOISE_SLICE * z[:, 1 : sizes[0] + n])  # [B, 1], [B, N]
    share = prof.share[None, :] if sol.slice_share is None else sol.slice_share  # completed queries per slice (§10.1)
    exact = sol.X[:, None] * share * window_s * ep * sl  # [B, N] queries, unrounded
    noise = np.exp(NOISE_COUNTER * z[:, sizes[1] : sizes[2]]).reshape(B, F, n)
    # Miss rates like 1 - hit can round to -1e-8: counts are physical, so clip at zero.
    out = {name: exact * np.maximum(v, 0.0) * noise[:, i] for i, (name, v) in enumerate(per_q.items())}
    out["context_switches"] = _idle_wakeups(hw, pl, sol, prof, window_s)
    out["queries"] = np.rint(exact).astype(np.int64)
    out["throughput"] = out["queries"].sum(1) / window_s
    volume = sol.X * window_s * ep[:, 0]  # [B] queries of the whole workload
    off = np.exp(NOISE_COUNTER * z[:, sizes[2] :])
    out["imc_read_bytes"] = volume[:, None] * sol.node_read_bytes * off[:, : hw.n_nodes]
    out["imc_write_bytes"] = volume[:, None] * sol.node_write_bytes * off[:, hw.n_nodes : 2 * hw.n_nodes]
    link = volume[:, None] * sol.link_bytes * off[:, 2 * hw.n_nodes :]  # [B, 2L]: a->b, b->a per link
    out["link_out_bytes"], out["link_in_bytes"] = link[:, 0::2], link[:, 1::2]  # seen from socket a
    return out


def _idle_wakeups(hw: HW, pl: Placement, sol: Solution, prof: SliceProfile, window_s: float) -> np.ndarray:
    """An idle worker sleeps on its queue and each wakeup is a context switch; a thread's wakeups
    are charged to the slices it serves in proportion to their queries on it. -> [B, N]"""
    B, W = sol.thread_util.shape
    member = hw.groups.member  # [Gx, W]
    Gx = member.shape[0]
    idle = 1 - np.minimum(sol.thread_util, 1.0)  # [B, W] thread-seconds idle per second
    key = (pl.exec_group + Gx * np.arange(B)[:, None]).ravel()
    group_share = np.bincount(key, np.broadcast_to(prof.share, pl.exec_group.shape).ravel(), B * Gx).reshape(B, Gx)
    load = group_share @ member  # [B, W] share of the queries each thread serves
    per_group = (idle / np.maximum(load, 1e-300)) @ member.T  # [B, Gx] idle charged per unit of share
    charged = np.take_along_axis(per_group, pl.exec_group, axis=1) * prof.share[None, :]
    return charged * IDLE_WAKEUPS_PER_S * window_s


def _rows(inp: Inputs, schedules: list[Schedule], seeds: list[int], runs: list[int], ids: list[str],
          counts: dict[str, np.ndarray]) -> list[dict]:
    """Split the batch arrays into one row per episode; unavailable counters become None."""
    missing = unavailable_features(inp.machine)
    n = schedules[0].n_slices
    lo, hi = slice_bounds(inp.dataset, inp.n_records, n)
    stamp, params = SIM_TIMESTAMP, inp.workload.params_json()
    features = [f for f in CORE_FEATURES + SOFTWARE_FEATURES + OFFCORE_NODE + OFFCORE_LINK]
    rows = []
    for b, s in enumerate(schedules):
        row = {
            "episode_id": ids[b], "source": "sim", "machine": inp.machine.name, "host": inp.machine.name,
            "workload": inp.workload.name, "workload_params": params, "dataset": inp.dataset,
            "n_records": inp.n_records, "schedule_kind": s.kind, "schedule_provenance": json.dumps(s.provenance, sort_keys=True),
            "seed": seeds[b], "run_index": runs[b], "n_slices": n, "window_s": inp.window_s,
            "throughput_qps": float(counts["throughput"][b]), "unavailable": list(missing), "counter_mode": "sim",
            "collector": COLLECTOR, "timestamp": stamp, "slice_lo": lo, "slice_hi": hi,
            "core": np.asarray(s.core, dtype=np.int32), "node": np.asarray(s.node, dtype=np.int32),
            "width": s.widths() if s.width is not None else None, "queries": counts["queries"][b],
        }  # fmt: skip
        for f in features:
            row[f] = None if f in missing else counts[f][b]
        rows.append(row)
    return rows
