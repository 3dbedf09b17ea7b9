"""Fitting a `Calibration` (pmoss.sim.hardware) from measurements on a real host's runtime.

docs/machine-model.md §14.3. The fits are closed-form inversions of the model's worker time per
query (§6): t = comp + fixed + batch + mem_dep * mem_ns, where comp = insn / (ipc * f) is the only
part that depends on the IPC, insn is linear in the instructions per scanned key, fixed holds the
per-operation overhead op_ns and batch = batch_ns / (expected batch size). Each constant comes from
a single-worker, single-operation run with uniform keys; only constants are fitted, never a
schedule kind's or a predicted workload's outcome.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import Schedule
from pmoss.contracts.workload import OpMix, Workload
from pmoss.sim.episode import model_run, resolve
from pmoss.sim.hardware import Calibration, hw_for
from pmoss.sim.model import batches_per_query
from pmoss.sim.placement import from_actions, from_schedules
from pmoss.sim.profile import insert_order, slice_profile

FIT_PASSES = 3  # mem_ns moves slightly with X (queueing): re-solve until the fit settles
OPS = ("read", "update", "insert", "scan")


def single_op(op: str, *, scan_len: int = 1) -> Workload:
    """A uniform-key workload of one operation (what a calibration run measures)."""
    return Workload(name=f"cal-{op}" + (f"{scan_len}" if op == "scan" else ""), mix=OpMix(**{op: 1.0}),
                    distribution="uniform", scan_min=scan_len, scan_max=scan_len)  # fmt: skip


def _one_worker(machine: Machine, workload: Workload, cal: Calibration | None, n_records: int, n_slices: int, dataset: str):
    inp = resolve(machine, workload, dataset, n_records, 1.0, cal)
    return model_run(inp, from_actions(hw_for(machine, cal), np.zeros((1, n_slices), dtype=np.int64)), n_slices)


def worker_ns(machine: Machine, workload: Workload, cal: Calibration | None, *, n_records: int, n_slices: int,
              dataset: str = "dense") -> tuple[float, float]:
    """Model's mean worker time per query (ns) with every slice on worker 0, and the part of it
    that is instruction issue (comp). Shares weight the slices as the workload does."""
    _, prof, sol, d = _one_worker(machine, workload, cal, n_records, n_slices, dataset)
    return float(prof.share @ sol.t_ns[0]), float(prof.share @ d.comp_ns[0])


def model_batches_per_query(machine: Machine, workload: Workload, cal: Calibration, *, n_records: int,
                            n_slices: int, dataset: str = "dense", schedule: Schedule | None = None) -> float:
    """Share-weighted batches per query (model.batches_per_query); every slice on worker 0 unless
    a schedule is given."""
    hw = hw_for(machine, cal)
    prof = slice_profile(workload, n_records, n_slices, insert_order(dataset))
    if schedule is None:
        pl = from_actions(hw, np.zeros((1, n_slices), dtype=np.int64))
    else:
        pl = from_schedules(hw, [schedule])
    return float(prof.share @ batches_per_query(prof.share, pl, hw.groups.member, cal.batch_queries, cal.queue_capacity)[0])


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


def op_ns_for(t_model: float, t_measured: float, op: str = "read") -> float:
    """Correction of an operation's worker ns per query so that the model's t_model becomes
    t_measured; signed, but the corrected cost must stay positive."""
    if t_measured <= 0:
        raise ValueError(f"{op}: measured {t_measured:.1f} ns/query: a calibration run's cost must be positive")
    return t_measured - t_model


def batch_ns_for(t_one: float, t_many: float, batches_one: float, batches_many: float) -> float:
    """Worker ns per batch from two runs of one workload whose measured batches per query differ
    (batches of 1 query and of up to batch_queries). Clamped at 0 (noise)."""
    return max(0.0, (t_one - t_many) / (batches_one - batches_many))


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


def fit_op_ns(machine: Machine, measured: dict[str, tuple[Workload, float]], cal: Calibration, *, n_records: int,
              n_slices: int, dataset: str = "dense") -> Calibration:
    """op_ns from single-operation runs: measured[op] = (its workload, worker ns per query with the
    batch cost already taken out). The model is evaluated without batch cost. An operation with no
    run of its own (`update` here: the runtime has no update-only mix) takes the read's value: the
    same dispatch path, the model's own instructions and write line make the difference."""
    nob = replace(cal, batch_ns=None, op_ns=(0.0,) * 4)
    op_ns = [0.0] * 4
    for _ in range(FIT_PASSES):
        for op, (w, t) in measured.items():
            i = OPS.index(op)
            t_model = worker_ns(machine, w, nob, n_records=n_records, n_slices=n_slices, dataset=dataset)[0] - op_ns[i]
            op_ns[i] = op_ns_for(t_model, t, op)
        for i, op in enumerate(OPS):
            if op not in measured:
                op_ns[i] = op_ns[OPS.index("read")]
        nob = replace(nob, op_ns=tuple(op_ns))
    return replace(cal, op_ns=tuple(op_ns))


def fit_scan_key_insn(machine: Machine, short: Workload, long: Workload, t_short: float, t_long: float, cal: Calibration,
                      *, n_records: int, n_slices: int) -> Calibration:
    zero = replace(cal, scan_key_insn=0.0, batch_ns=None)
    ts = worker_ns(machine, short, zero, n_records=n_records, n_slices=n_slices)[0]
    tl = worker_ns(machine, long, zero, n_records=n_records, n_slices=n_slices)[0]
    dkeys = keys_per_query(long, n_records, n_slices) - keys_per_query(short, n_records, n_slices)
    hw = hw_for(machine, cal)
    return replace(cal, scan_key_insn=scan_key_insn_for(t_long - t_short, tl - ts, dkeys, hw.uarch.ipc, machine.freq_ghz))



STREAM_MLP_RANGE = (1.0, 64.0)  # lines in flight: one at a time .. deeper than any core's prefetch queue
STREAM_MLP_STEPS = 12  # bisection in log mlp: |d mlp| / mlp < 0.03


def fit_stream_mlp(machine: Machine, short: Workload, long: Workload, t_short: float, t_long: float, cal: Calibration,
                   *, n_records: int, n_slices: int) -> Calibration:
    """Lines in flight for streamed scan lines (§14.3) such that the model's rise in scan cost
    from `short` to `long` on a tree of n_records (beyond the private caches) equals the measured
    t_long - t_short; the instructions per key must already be fitted (`fit_scan_key_insn` on a
    tree that fits the private caches). Clamped to STREAM_MLP_RANGE: a measured rise below the
    model's at the deepest prefetch means the streamed lines cost (almost) nothing extra here."""
    rise = lambda mlp: (worker_ns(machine, long, replace(cal, stream_mlp=mlp, batch_ns=None), n_records=n_records, n_slices=n_slices)[0]  # noqa: E731
                        - worker_ns(machine, short, replace(cal, stream_mlp=mlp, batch_ns=None), n_records=n_records, n_slices=n_slices)[0])
    target = t_long - t_short
    lo, hi = np.log(STREAM_MLP_RANGE[0]), np.log(STREAM_MLP_RANGE[1])
    if rise(STREAM_MLP_RANGE[1]) >= target:
        return replace(cal, stream_mlp=STREAM_MLP_RANGE[1])
    if rise(STREAM_MLP_RANGE[0]) <= target:
        return replace(cal, stream_mlp=STREAM_MLP_RANGE[0])
    for _ in range(STREAM_MLP_STEPS):  # the rise falls as more lines are in flight
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rise(float(np.exp(mid))) > target else (lo, mid)
    return replace(cal, stream_mlp=float(np.exp(0.5 * (lo + hi))))


L3_SHARE_MIN = 1 / 64
L3_SHARE_STEPS = 14  # bisection in log share: |d share| / share < 0.03


def fit_l3_share(machine: Machine, t_small: float, t_large: float, cal: Calibration, *, n_small: int, n_large: int,
                 n_slices: int) -> Calibration:
    """Share of the L3 the runtime gets (§14.3) such that the model's rise in single-worker
    uniform lookup cost from a tree that fits the private caches (n_small keys) to the predicted
    size (n_large) equals the measured rise t_large - t_small (ns, batch cost taken out of both).
    Uniform keys only; the per-query overheads cancel in the difference. 1 when the measured
    rise is no larger than the model's with the whole L3."""
    lookup = single_op("read")
    rise = lambda share: (worker_ns(machine, lookup, replace(cal, l3_share=share), n_records=n_large, n_slices=n_slices)[0]  # noqa: E731
                          - worker_ns(machine, lookup, replace(cal, l3_share=share), n_records=n_small, n_slices=n_slices)[0])
    target = t_large - t_small
    if rise(1.0) >= target:
        return replace(cal, l3_share=1.0)
    if rise(L3_SHARE_MIN) <= target:
        return replace(cal, l3_share=L3_SHARE_MIN)
    lo, hi = np.log(L3_SHARE_MIN), 0.0  # rise(exp(lo)) > target >= rise(exp(hi)): rise falls as the share grows
    for _ in range(L3_SHARE_STEPS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rise(float(np.exp(mid))) > target else (lo, mid)
    return replace(cal, l3_share=float(np.exp(0.5 * (lo + hi))))
