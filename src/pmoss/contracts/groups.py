"""Execution groups (docs/contracts.md): the worker sets a slice may be given, and their canonical names.

A group is written as (anchor worker, width). Widths, narrowest first: `thread` (the anchor),
`core` (its SMT threads), `l3` (its L3 domain), `node` (every worker of its node); a group is always
cut to the anchor's node. Many (anchor, width) pairs name the same set, so each group has one
*canonical* anchor (its first worker in tile order) and a machine has one list of *candidate
groups*: every distinct set, each with the narrowest width that yields it. The simulator, the
oracle, the tokeniser and the model's action head all use this one list; a candidate's index is
the model's action.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from pmoss.contracts.machine import Machine

WIDTHS = ("thread", "core", "l3", "node")
WIDTH_CODE = {w: i for i, w in enumerate(WIDTHS)}


def _unit_keys(machine: Machine, width: int) -> list[tuple[int, ...]]:
    """Per worker index, the key of the unit it belongs to at this width (cut to its node)."""
    out = []
    for w, cpu in enumerate(machine.worker_cpus):
        c = machine.cpu_by_id[cpu]
        out.append(((w,), (c.node, c.core), (c.node, c.l3_domain), (c.node,))[width])
    return out


@dataclass(frozen=True, eq=False)
class Groups:
    """The candidate groups of one machine. G groups over W workers, M nodes."""

    width: np.ndarray  # [G] width code of each group (its narrowest width)
    anchor: np.ndarray  # [G] canonical anchor (worker index: the group's first worker)
    node: np.ndarray  # [G] node of each group
    member: np.ndarray  # [G, W] bool membership
    size: np.ndarray  # [G] workers in each group
    of_worker: np.ndarray  # [4, W] index of the group a worker's unit at each width resolves to

    @property
    def n(self) -> int:
        return int(self.width.size)

    def index(self, anchor: int, width: int | str) -> int:
        """Candidate index of (anchor worker index, width)."""
        code = WIDTH_CODE[width] if isinstance(width, str) else int(width)
        return int(self.of_worker[code, anchor])


@cache
def _groups_for(key: str, machine_json: str) -> Groups:
    machine = Machine.model_validate_json(machine_json)
    W = machine.n_workers
    seen: dict[frozenset[int], int] = {}
    width, anchor, node, members = [], [], [], []
    of_worker = np.zeros((len(WIDTHS), W), dtype=np.int64)
    for code in range(len(WIDTHS)):
        keys = _unit_keys(machine, code)
        units: dict[tuple[int, ...], list[int]] = {}
        for w, k in enumerate(keys):
            units.setdefault(k, []).append(w)
        for ws in units.values():
            s = frozenset(ws)
            if s not in seen:  # a set a narrower width already named keeps that width
                seen[s] = len(width)
                width.append(code)
                anchor.append(min(ws))
                node.append(machine.cpu_by_id[machine.worker_cpus[min(ws)]].node)
                members.append(sorted(ws))
            of_worker[code, ws] = seen[s]
    member = np.zeros((len(width), W), dtype=bool)
    for g, ws in enumerate(members):
        member[g, ws] = True
    return Groups(np.array(width), np.array(anchor), np.array(node), member, member.sum(1), of_worker)


def groups_of(machine: Machine) -> Groups:
    """The candidate groups of `machine` (cached per descriptor)."""
    return _groups_for(machine.name, machine.model_dump_json())
