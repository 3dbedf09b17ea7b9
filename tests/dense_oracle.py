"""A frozen copy of the oracle's dense parts before they were made linear in the machine
(issue #39): `_capped`'s busiest member of every group by a [starts, G, W] mask per slice, the
model's memory-latency weights per (group, core node, memory node), a bincount over
[B, N, M, M], and its per-group -> per-thread sums as dense [B, G, W] products. The reference tests/test_sim_oracle.py compares today's code against, and the
baseline benchmarks/bench_oracle.py times in the same run. Not used by the package; do not "fix" it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import numpy as np

from pmoss.contracts.groups import groups_of
from pmoss.contracts.schedule import LOAD_CAP
from pmoss.sim import model
from pmoss.sim.hardware import HW


def dense_capped(hw: HW, share: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    n_slices = share.size
    if n == 0:
        return np.zeros((0, n_slices), dtype=np.int64)
    g = groups_of(hw.machine)
    load = share * hw.n_workers
    per = g.member / g.size[:, None]
    wload = np.zeros((n, hw.n_workers))
    out = np.zeros((n, n_slices), dtype=np.int64)
    for t in range(n_slices):
        after = np.where(g.member[None], wload[:, None, :] + load[t] * per[None], 0).max(-1)  # [n, G]
        ok = after <= LOAD_CAP + 1e-9
        ok = np.where(ok.any(1, keepdims=True), ok, after <= after.min(1, keepdims=True) * (1 + 1e-9))
        pick = np.array([rng.choice(np.flatnonzero(r)) for r in ok], dtype=np.int64)
        out[:, t] = pick
        wload += load[t] * per[pick]
    return out


class DenseLoads(model._Loads):
    """_Loads with the memory-latency weights per (group, core node, memory node) pair, [B, Gx, M*M],
    and every per-group -> per-thread sum a dense [B, Gx] @ [Gx, W] product."""

    def __init__(self, hw, prof, pl, d, done=None):
        super().__init__(hw, prof, pl, d, done)
        self.member = member = hw.groups.member
        self.comp, self.fixed = (self.per_group(prof.share * v) @ member for v in (d.comp_ns, d.fixed_ns))
        if hw.calibration is not None and hw.calibration.batch_ns is not None:
            self.batch_thread_ns = self.per_group(self.batch_slice_ns * prof.share) @ member
        B, N = pl.exec_group.shape
        M, Gx = hw.n_nodes, member.shape[0]
        p = (prof.share[None, :] * (1.0 if done is None else done))[..., None]
        key = (pl.exec_group + Gx * np.arange(B)[:, None]).ravel()
        ep = p[..., None] * d.mem_dep[..., None, None] * pl.E[..., :, None] * pl.P[..., None, :]
        ekey = (key.reshape(B, -1)[..., None] * M * M + np.arange(M * M)).ravel()
        self.mem_g = np.bincount(ekey, ep.ravel(), B * Gx * M * M).reshape(B, Gx, M * M)

    def mem_thread(self, lat: np.ndarray) -> np.ndarray:
        B = lat.shape[0]
        return (self.mem_g @ lat.reshape(B, -1, 1))[..., 0] @ self.member


@contextlib.contextmanager
def before_issue_39() -> Iterator[None]:
    """The oracle and the model as they were: both dense parts patched in, restored on exit."""
    search = sys.modules["pmoss.sim.oracle"]  # the module (pmoss.sim.oracle the attribute is the function)
    saved = search._capped, model._Loads
    search._capped, model._Loads = dense_capped, DenseLoads
    try:
        yield
    finally:
        search._capped, model._Loads = saved
