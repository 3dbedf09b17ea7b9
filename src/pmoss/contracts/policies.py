"""Generators for every non-learned schedule kind, over the descriptor's real topology.

Deterministic by seed. Seed 0 gives the canonical baseline used in evaluation (nodes and cores in
tile order); other seeds permute the node order and the starting core, which is how the pools get
many distinct schedules of one kind. Every generated schedule is validated before it is returned.
"""

from __future__ import annotations

import numpy as np

from pmoss.contracts.groups import groups_of
from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import Kind, Schedule

# The paper's offline policy mix (docs/design.md §5).
PAPER_MIX: dict[str, float] = {"sn-grouped": 0.146, "sn-mixed": 0.128, "sn-spread": 0.018, "sn-random": 0.710}
# The baselines every evaluation compares against: the paper's eight and the group heuristic.
BASELINE_KINDS: tuple[str, ...] = (
    "os-default", "os-interleave", "se-numa", "sn-numa",
    "sn-grouped", "sn-spread", "sn-mixed", "sn-random", "sn-hot",
)  # fmt: skip


def generate(kind: Kind, machine: Machine, n_slices: int, seed: int = 0, load: np.ndarray | None = None) -> Schedule:
    """A schedule of `kind` for `machine`; raises ValueError for `learned` and `search` (those come
    from a model or a search). `load` [N]: each slice's share of the queries, for `sn-hot` (None:
    even; the simulator's profile or a snapshot's per-slice queries give it)."""
    if kind in ("learned", "search"):
        raise ValueError(f"kind: '{kind}' schedules come from a model or a search, not a generator")
    if kind == "sn-random-width":
        return _random_width(machine, n_slices, seed)
    if kind == "sn-hot":
        return _hot(machine, n_slices, seed, np.full(n_slices, 1 / n_slices) if load is None else np.asarray(load, dtype=float))
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


def _random_width(machine: Machine, n: int, seed: int) -> Schedule:
    """Exploration data in group space: a one-core schedule of the paper's mix (its kind drawn by
    the mix's weights) with each slice's group widened to a width drawn at random (thread, core, l3,
    node; equal odds). The paper's mix is one thread per slice, so its returns cannot tell widths
    apart; these episodes keep the mix's node layouts and vary only the width."""
    rng = np.random.default_rng([seed, 0x57])
    base = str(rng.choice(list(PAPER_MIX), p=np.array(list(PAPER_MIX.values())) / sum(PAPER_MIX.values())))
    g = groups_of(machine)
    anchors = [machine.worker_index[c] for c in generate(base, machine, n, seed=seed).core]  # type: ignore[arg-type]
    chosen = g.of_worker[rng.integers(len(g.of_worker), size=n), anchors]
    s = Schedule.from_groups(machine, chosen, kind="sn-random-width", generator="pmoss.contracts.policies:sn-random-width", seed=seed, base=base)
    return s.validate_for(machine)


HOT_NEED = 1.5  # widen a slice only past 1.5 workers' fair share: a group costs coherence and handoffs


def _hot(machine: Machine, n: int, seed: int, load: np.ndarray) -> Schedule:
    """The group heuristic a person would write: adjacent slices on one node in blocks of equal
    load; within a node, hottest first (LPT): a slice needing more than HOT_NEED workers' fair
    share gets the narrowest group of that node with that many workers, the others one worker;
    among those, the one whose busiest member ends least loaded (a group shares its load evenly)."""
    if load.shape != (n,) or not np.all(np.isfinite(load)) or load.min() < 0 or load.sum() <= 0:
        raise ValueError(f"load: needs {n} finite non-negative shares with a positive sum")
    g = groups_of(machine)
    share = load / load.sum()
    M, W = machine.numa_nodes, machine.n_workers
    order = list(range(M)) if seed == 0 else [int(x) for x in np.random.default_rng(seed).permutation(M)]
    cum = np.concatenate([[0.0], np.cumsum(share)])
    # contiguous node blocks cut where the running load crosses k/M (every node gets a block when n >= M)
    cut = np.searchsorted(cum, np.arange(1, M) / M)
    cut = np.clip(np.maximum(cut, np.arange(1, M)), 0, n - (M - np.arange(1, M))) if n >= M else np.minimum(cut, n)
    bounds = np.concatenate([[0], cut, [n]])
    worker_load = np.zeros(W)
    chosen = np.zeros(n, dtype=np.int64)
    for b in range(M):
        node = order[b]
        mine = np.flatnonzero(g.node == node)
        threads = mine[g.width[mine] == 0]
        slices = np.arange(bounds[b], bounds[b + 1])
        for i in slices[np.argsort(-share[slices], kind="stable")]:
            need = share[i] * W  # in workers' fair shares
            wide = mine[g.size[mine] >= need]  # none: the node's widest group (it may be named l3 where one L3 spans the node)
            cand = threads if need <= HOT_NEED else wide[g.size[wide] == g.size[wide].min()] if wide.size else mine[g.size[mine] == g.size[mine].max()]
            peak = (g.member[cand] * worker_load).max(1) + need / g.size[cand]  # busiest member afterwards
            pick = int(cand[np.argmin(peak)])
            chosen[i] = pick
            worker_load[g.member[pick]] += share[i] * W / g.size[pick]
    s = Schedule.from_groups(machine, chosen, kind="sn-hot", generator="pmoss.contracts.policies:sn-hot", seed=seed)
    return s.validate_for(machine)
