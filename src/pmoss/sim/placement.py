"""Schedules as arrays: who executes each slice and where its memory lives (batched).

A slice belongs to one *execution group*, a set of worker threads that share its queries evenly
(docs/contracts.md): one of the machine's candidate groups (a thread, a physical core, an L3
domain or a node, cut to the slice's node; `hw.groups`), or every worker for the os-* and se-numa
kinds. Groups of different slices may overlap. E[s, m] is the share of slice s's queries executed
on node m, P[s, m] the share of its memory on node m. docs/machine-model.md §5.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pmoss.contracts.schedule import ANY_WORKER_KINDS, ONE_CORE_KINDS, Schedule
from pmoss.sim.hardware import HW, balanced_kinds

LOADER_NODE = 0  # os-default: one loader thread first-touches every bulk-loaded page, on node 0


@dataclass
class Placement:
    """B episodes over N slices, M nodes. Group ids index `hw.groups`; cache-group ids < hw.groups.n_cache_groups."""

    exec_group: np.ndarray  # [B, N] execution group of each slice
    E: np.ndarray  # [B, N, M] share of queries executed per node
    P: np.ndarray  # [B, N, M] share of memory per node
    l2_group: np.ndarray  # [B, N] slices competing for the same L2 (one physical core, or the group's own)
    l3_group: np.ndarray  # [B, N] slices competing for the same L3 domain (or the group's own)
    span: np.ndarray  # [B, N] L3 domains whose threads execute the slice (1 = inside one domain)
    threads: np.ndarray  # [B, N] threads sharing the slice's queries

    @property
    def shared(self) -> np.ndarray:  # [B, N]
        return self.span > 1


FIELDS = tuple(Placement.__dataclass_fields__)


def from_groups(hw: HW, groups: np.ndarray, P: np.ndarray | None = None) -> Placement:
    """Any schedules given as execution-group indices [B, N] (into hw.groups); memory on the group's
    node unless P [B, N, M] says otherwise."""
    eg = hw.groups
    groups = np.asarray(groups, dtype=np.int64)
    E = eg.E[groups]
    return Placement(exec_group=groups, E=E, P=E if P is None else P, l2_group=eg.l2[groups], l3_group=eg.l3[groups],
                     span=eg.span[groups], threads=eg.size[groups].astype(float))  # fmt: skip


def from_actions(hw: HW, actions: np.ndarray) -> Placement:
    """One-core schedules given as worker indices [B, N] in [0, W) (a thread's group index is its worker index)."""
    return from_groups(hw, actions)


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


def schedule_groups(hw: HW, schedule: Schedule) -> np.ndarray:
    """Execution-group index of every slice [N] of a validated schedule (any kind)."""
    if schedule.kind in ANY_WORKER_KINDS:
        return np.full(schedule.n_slices, hw.groups.every_worker)
    return schedule.group_index(hw.machine)


def from_schedules(hw: HW, schedules: list[Schedule], actions: list[np.ndarray | None] | None = None) -> Placement:
    """Any mix of kinds (validated schedules of equal length). `actions`: worker indices of the
    one-core ones when the caller has them already (their group indices)."""
    groups = np.stack([_groups(hw, s, actions[i] if actions else None) for i, s in enumerate(schedules)])
    P = None
    placed = [s.kind for s in schedules]
    if any(k in ("os-default", "os-interleave", "se-numa") for k in placed):
        P = hw.groups.E[groups].copy()
        M = hw.n_nodes
        for b, s in enumerate(schedules):
            if s.kind == "os-default":
                P[b] = np.eye(M)[LOADER_NODE]
            elif s.kind == "os-interleave":
                P[b] = 1.0 / M
            elif s.kind == "se-numa":
                P[b] = np.eye(M)[np.asarray(s.node)]
            if s.kind in balanced_kinds(hw):
                P[b] = balanced(hw.groups.E[groups[b]])
    return from_groups(hw, groups, P)


def balanced(E: np.ndarray) -> np.ndarray:
    """Where automatic NUMA balancing leaves a page accessed from nodes in proportions E [..., M]
    (§5.2): Linux migrates a page to the node of a hinting fault only when the previous fault on it
    came from the same node (the two-fault filter of should_numa_migrate_memory), so a page moves
    to node m at a rate proportional to E_m^2 and spends that share of the time there. Pages
    accessed from one node go there; pages every node reads spread over them."""
    sq = E**2
    return sq / sq.sum(-1, keepdims=True)


def _groups(hw: HW, s: Schedule, actions: np.ndarray | None) -> np.ndarray:
    if actions is not None:
        return actions
    if s.kind in ONE_CORE_KINDS:
        acts = one_core_actions(hw, s)
        if acts is not None:
            return acts
    return schedule_groups(hw, s)


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
    return Placement(pl.exec_group, pl.E, P, pl.l2_group, pl.l3_group, pl.span, pl.threads)
