"""Fitting a `Calibration` (pmoss.sim.hardware) from measurements on a real host's runtime.

docs/machine-model.md §14.3. The fits are closed-form inversions of the model's worker time per
query (§6): t = comp + fixed + mem_dep * mem_ns, where comp = insn / (ipc * f) is the only part
that depends on the IPC and insn is linear in the instructions per scanned key. Only constants are
fitted, never a schedule kind's outcome.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pmoss.machine import Machine
from pmoss.sim.episode import model_run, resolve
from pmoss.sim.hardware import Calibration, hw_for
from pmoss.sim.model import groups_per_query
from pmoss.sim.placement import from_actions
from pmoss.sim.profile import slice_profile
from pmoss.workload import Workload

FIT_PASSES = 3  # mem_ns moves slightly with X (queueing): re-solve until the fit settles


def worker_ns(machine: Machine, workload: Workload, cal: Calibration | None, *, n_records: int, n_slices: int) -> tuple[float, float]:
    """Model's mean worker time per query (ns) with every slice on worker 0, and the part of it
    that is instruction issue (comp). Shares weight the slices as the workload does."""
    inp = resolve(machine, workload, "dense", n_records, 1.0, cal)
    hw = hw_for(machine, cal)
    _, prof, sol, d = model_run(inp, from_actions(hw, np.zeros((1, n_slices), dtype=np.int64)), n_slices)
    return float(prof.share @ sol.t_ns[0]), float(prof.share @ d.comp_ns[0])


def keys_per_query(workload: Workload, n_records: int, n_slices: int) -> float:
    """Keys scanned per query of the workload (scan share x scan length) as the model sees it."""
    prof = slice_profile(workload, n_records, n_slices)
    return float(prof.share @ (prof.op_frac[3] * np.broadcast_to(prof.scan_keys, prof.share.shape)))


def ipc_for(t_model: float, comp_model: float, ipc_model: float, t_measured: float) -> float:
    """IPC at which the model's time t_model (of which comp_model is issue time at ipc_model)
    becomes t_measured: comp scales as ipc_model / ipc, the rest does not."""
    rest = t_model - comp_model
    if t_measured <= rest:
        raise ValueError(f"measured {t_measured:.1f} ns/query is below the model's stall time {rest:.1f} ns: no IPC fits")
    return ipc_model * comp_model / (t_measured - rest)


def query_ns_for(t_model: float, t_measured: float) -> float:
    """Extra worker ns per query so that the model's time t_model becomes t_measured (>= 0)."""
    if t_measured < t_model:
        raise ValueError(f"measured {t_measured:.1f} ns/query is below the model's {t_model:.1f} ns: no overhead fits (try ipc)")
    return t_measured - t_model


def scan_key_insn_for(dt_measured: float, dt_model_no_insn: float, dkeys: float, ipc: float, freq_ghz: float) -> float:
    """Instructions per scanned key such that two scan lengths differing by dkeys keys differ by
    dt_measured ns/query; dt_model_no_insn is the model's difference with 0 instructions per key
    (stalls only). Clamped at 0: noise can make the measured slope smaller than the stalls."""
    return max(0.0, (dt_measured - dt_model_no_insn) * ipc * freq_ghz / dkeys)


def fit_ipc(machine: Machine, lookup: Workload, t_measured: float, cal: Calibration, *, n_records: int, n_slices: int) -> Calibration:
    for _ in range(FIT_PASSES):
        hw = hw_for(machine, cal)
        t, comp = worker_ns(machine, lookup, cal, n_records=n_records, n_slices=n_slices)
        cal = replace(cal, ipc=ipc_for(t, comp, hw.uarch.ipc, t_measured))
    return cal


def fit_query_ns(machine: Machine, lookup: Workload, t_measured: float, cal: Calibration, *, n_records: int, n_slices: int) -> Calibration:
    cal = replace(cal, query_ns=0.0)
    for _ in range(FIT_PASSES):
        t, _ = worker_ns(machine, lookup, cal, n_records=n_records, n_slices=n_slices)
        cal = replace(cal, query_ns=query_ns_for(t - cal.query_ns, t_measured))
    return cal


def group_ns_for(t_one: float, t_many: float, groups_many: float) -> float:
    """Worker ns per slice group from runs with one query per window (one group per query) and with
    windows of many queries (groups_many groups per query). Clamped at 0 (noise)."""
    return max(0.0, (t_one - t_many) / (1.0 - groups_many))


def mean_groups_per_query(machine: Machine, workload: Workload, window: int, *, n_records: int, n_slices: int) -> float:
    """Share-weighted groups per query with every slice on worker 0 and full windows."""
    hw = hw_for(machine, None)
    prof = slice_profile(workload, n_records, n_slices)
    pl = from_actions(hw, np.zeros((1, n_slices), dtype=np.int64))
    return float(prof.share @ groups_per_query(prof.share, pl, window)[0])


def fit_group_ns(machine: Machine, lookup: Workload, t_one: float, t_many: float, window_many: int, cal: Calibration,
                 *, n_records: int, n_slices: int) -> Calibration:
    """group_ns from single-worker lookups with windows of 1 and of window_many queries; query_ns
    then makes the one-query-window run's model time equal t_one. The result keeps cal's window."""
    g = mean_groups_per_query(machine, lookup, window_many, n_records=n_records, n_slices=n_slices)
    one = replace(cal, group_ns=group_ns_for(t_one, t_many, g), window_queries=1)
    return replace(fit_query_ns(machine, lookup, t_one, one, n_records=n_records, n_slices=n_slices), window_queries=cal.window_queries)


def fit_scan_key_insn(machine: Machine, short: Workload, long: Workload, t_short: float, t_long: float, cal: Calibration,
                      *, n_records: int, n_slices: int) -> Calibration:
    zero = replace(cal, scan_key_insn=0.0)
    ts = worker_ns(machine, short, zero, n_records=n_records, n_slices=n_slices)[0]
    tl = worker_ns(machine, long, zero, n_records=n_records, n_slices=n_slices)[0]
    dkeys = keys_per_query(long, n_records, n_slices) - keys_per_query(short, n_records, n_slices)
    hw = hw_for(machine, cal)
    return replace(cal, scan_key_insn=scan_key_insn_for(t_long - t_short, tl - ts, dkeys, hw.uarch.ipc, machine.freq_ghz))
