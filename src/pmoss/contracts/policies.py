"""Generators for every non-learned schedule kind, over the descriptor's real topology.

Deterministic by seed. Seed 0 gives the canonical baseline used in evaluation (nodes and cores in
tile order); other seeds permute the node order and the starting core, which is how the pools get
many distinct schedules of one kind. Every generated schedule is validated before it is returned.
"""

from __future__ import annotations

import numpy as np

from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import Kind, Schedule

# The paper's offline policy mix (DESIGN §5).
PAPER_MIX: dict[str, float] = {"sn-grouped": 0.146, "sn-mixed": 0.128, "sn-spread": 0.018, "sn-random": 0.710}
# The nine baselines every evaluation compares against (all kinds but `learned`).
BASELINE_KINDS: tuple[str, ...] = (
    "os-default", "os-interleave", "se-numa", "sn-numa",
    "sn-grouped", "sn-spread", "sn-mixed", "sn-random",
)  # fmt: skip


def generate(kind: Kind, machine: Machine, n_slices: int, seed: int = 0) -> Schedule:
    """A schedule of `kind` for `machine`; raises ValueError for `learned` (that comes from a model)."""
    if kind == "learned":
        raise ValueError("kind: 'learned' schedules come from a model, not a generator")
    rng = np.random.default_rng(seed)
    node_order = list(range(machine.numa_nodes)) if seed == 0 else [int(x) for x in rng.permutation(machine.numa_nodes)]
    if kind in ("os-default", "os-interleave"):
        nodes, cores = [-1] * n_slices, [-1] * n_slices
    elif kind in ("se-numa", "sn-numa"):
        nodes, cores = [node_order[i * machine.numa_nodes // n_slices] for i in range(n_slices)], [-1] * n_slices
    else:
        cores = _ONE_CORE[kind](machine, n_slices, node_order, rng, seed)
        nodes = [machine.cpu_by_id[c].node for c in cores]
    schedule = Schedule(
        machine=machine.name, n_slices=n_slices, kind=kind, node=nodes, core=cores,
        provenance={"generator": f"pmoss.contracts.policies:{kind}", "seed": seed},
    )  # fmt: skip
    return schedule.validate_for(machine)


def _ordered_workers(machine: Machine, node_order: list[int]) -> list[int]:
    return [cpu for node in node_order for cpu in machine.workers_by_node[node]]


def _grouped(machine: Machine, n: int, node_order: list[int], rng: np.random.Generator, seed: int) -> list[int]:
    """Adjacent slices on the same node and nearby cores: contiguous runs over the tile order."""
    workers = _ordered_workers(machine, node_order)
    shift = 0 if seed == 0 else int(rng.integers(len(workers)))
    return [workers[(i * len(workers) // n + shift) % len(workers)] for i in range(n)]


def _spread(machine: Machine, n: int, node_order: list[int], rng: np.random.Generator, seed: int) -> list[int]:
    """Adjacent slices round-robin over nodes; within a node, round-robin over its cores."""
    shift = 0 if seed == 0 else int(rng.integers(1 << 16))
    out = []
    for i in range(n):
        node = node_order[i % len(node_order)]
        local = machine.workers_by_node[node]
        out.append(local[(i // len(node_order) + shift) % len(local)])
    return out


def _mixed(machine: Machine, n: int, node_order: list[int], rng: np.random.Generator, seed: int) -> list[int]:
    """Blocks of adjacent slices on nearby cores of one node; blocks round-robin over nodes."""
    block = 4 if seed == 0 else int(rng.choice([2, 4, 8, 16]))
    used = [0] * machine.numa_nodes
    out = []
    for b in range(-(-n // block)):
        node = node_order[b % len(node_order)]
        local = machine.workers_by_node[node]
        for _ in range(min(block, n - b * block)):
            out.append(local[used[node] % len(local)])
            used[node] += 1
    return out


def _random(machine: Machine, n: int, node_order: list[int], rng: np.random.Generator, seed: int) -> list[int]:
    workers = machine.worker_cpus
    return [workers[int(i)] for i in rng.integers(len(workers), size=n)]


_ONE_CORE = {"sn-grouped": _grouped, "sn-spread": _spread, "sn-mixed": _mixed, "sn-random": _random}
