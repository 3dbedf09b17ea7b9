"""Schedules as arrays: who executes each slice and where its memory lives (batched).

A slice belongs to one *execution group* (a set of worker threads that share its queries evenly):
one thread for the one-core kinds, the node's workers for sn-numa, every worker for the
shared-everything kinds. E[s, m] is the share of slice s's queries executed on node m, P[s, m]
the share of its memory on node m. docs/machine-model.md §5.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pmoss.contracts.schedule import ONE_CORE_KINDS, Schedule
from pmoss.sim.hardware import HW

LOADER_NODE = 0  # os-default: one loader thread first-touches every bulk-loaded page, on node 0


@dataclass
class Placement:
    """B episodes over N slices; W workers, M nodes. Group ids < W; cache-group ids < max(W, C, D)."""

    exec_group: np.ndarray  # [B, N] execution group of each slice
    thread_group: np.ndarray  # [B, W] execution group of each worker thread
    E: np.ndarray  # [B, N, M] share of queries executed per node
    P: np.ndarray  # [B, N, M] share of memory per node
    l2_group: np.ndarray  # [B, N] slices competing for the same L2 (one physical core, or the group)
    l3_group: np.ndarray  # [B, N] slices competing for the same L3 domain (or the group)
    span: np.ndarray  # [B, N] L3 domains whose threads execute the slice (1 = one-core)

    @property
    def shared(self) -> np.ndarray:  # [B, N]
        return self.span > 1


FIELDS = tuple(Placement.__dataclass_fields__)


def from_actions(hw: HW, actions: np.ndarray) -> Placement:
    """One-core schedules given as worker indices. actions: [B, N] ints in [0, W)."""
    B, _ = actions.shape
    eye = np.eye(hw.n_nodes)
    node = hw.worker_node[actions]  # [B, N]
    return Placement(
        exec_group=actions, thread_group=np.broadcast_to(np.arange(hw.n_workers), (B, hw.n_workers)),
        E=eye[node], P=eye[node], l2_group=hw.worker_core[actions], l3_group=hw.worker_domain[actions],
        span=np.ones(actions.shape),
    )  # fmt: skip


def one_core_actions(hw: HW, schedule: Schedule) -> np.ndarray | None:
    """Worker indices [N] of a one-core schedule, or None when it does not fit the machine
    (the caller then asks `Schedule.validate_for` for the message naming the first bad slice)."""
    core, node = np.asarray(schedule.core), np.asarray(schedule.node)
    lookup = hw.cpu_to_worker
    if schedule.machine != hw.machine.name or core.min() < 0 or core.max() >= lookup.size:
        return None
    actions = lookup[core]
    if actions.min() < 0 or np.any(hw.worker_node[actions] != node):
        return None
    return actions


def from_schedules(hw: HW, schedules: list[Schedule], actions: list[np.ndarray | None] | None = None) -> Placement:
    """Any mix of kinds (validated schedules of equal length); one-core ones are batched.
    `actions`: their worker indices when the caller has them already (else computed here)."""
    one = [i for i, s in enumerate(schedules) if s.kind in ONE_CORE_KINDS]
    parts: dict[int, Placement] = {}
    if one:
        acts = [actions[i] if actions and actions[i] is not None else one_core_actions(hw, schedules[i]) for i in one]
        batch = from_actions(hw, np.stack(acts))
        for j, i in enumerate(one):
            parts[i] = Placement(*(np.asarray(getattr(batch, f))[j] for f in FIELDS))
    for i, s in enumerate(schedules):
        if i not in parts:
            parts[i] = _shared(hw, s)
    return Placement(*(np.stack([getattr(parts[i], f) for i in range(len(schedules))]) for f in FIELDS))


def _shared(hw: HW, schedule: Schedule) -> Placement:
    """os-default / os-interleave / se-numa execute on all workers; sn-numa on the node's workers."""
    n, M = schedule.n_slices, hw.n_nodes
    node = np.array(schedule.node)
    eye = np.eye(M)
    if schedule.kind == "os-default":
        P = np.broadcast_to(eye[LOADER_NODE], (n, M))
    elif schedule.kind == "os-interleave":
        P = np.full((n, M), 1.0 / M)
    else:
        P = eye[node]
    if schedule.kind == "sn-numa":
        group, thread_group, E = node, hw.worker_node.copy(), eye[node]
        span = hw.domains_per_node[node].astype(float)
    else:
        group, thread_group = np.zeros(n, dtype=np.int64), np.zeros(hw.n_workers, dtype=np.int64)
        E = np.broadcast_to(hw.workers_per_node / hw.n_workers, (n, M))
        span = np.full(n, float(hw.n_domains))
    return Placement(group, thread_group, np.array(E), np.array(P), group, group, span)


def grown_share(X: np.ndarray, insert_share: float, window_s: float, n_records: int) -> np.ndarray:
    """Mean share of a slice's accesses that go to memory allocated during the window [B].

    Inserts add X * insert_share records per second to a tree of n_records; after I inserts
    I / (n_records + I) of the records (and, with splits keeping leaves at a steady fill, of the
    leaves and of the accesses, which follow records) live in nodes allocated during the run. The
    window mean of that share with I growing linearly to g * n_records is 1 - ln(1 + g) / g."""
    g = np.asarray(X, dtype=float) * insert_share * window_s / n_records
    return np.where(g > 1e-9, 1 - np.log1p(g) / np.maximum(g, 1e-9), g / 2)


def with_first_touch(pl: Placement, rows: np.ndarray, grown: np.ndarray) -> Placement:
    """os-default rows (`rows` [B] bool): the `grown` share [B] of each slice's memory was first
    touched by the inserting workers, i.e. spread over nodes like the execution (E); the rest
    stays on the loader's node (§5)."""
    loader = np.zeros(pl.P.shape[-1])
    loader[LOADER_NODE] = 1.0
    f = np.where(rows, grown, 0.0)[:, None, None]  # [B, 1, 1]
    P = np.where(rows[:, None, None], (1 - f) * loader + f * pl.E, pl.P)
    return Placement(pl.exec_group, pl.thread_group, pl.E, P, pl.l2_group, pl.l3_group, pl.span)
