"""Array views of a machine descriptor for the model, plus the few microarchitectural constants
a descriptor does not carry (IPC, cache latencies in cycles, SMT contention).

Constants are per vendor with overrides by CPU model; docs/machine-model.md §4 lists them with
their sources and how to argue with them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np

from pmoss.contracts.groups import groups_of
from pmoss.contracts.machine import Machine
from pmoss.sim.profile import NODE_BYTES


@dataclass(frozen=True)
class Uarch:
    ipc: float  # instructions per cycle of index code when no load is outstanding
    l2_cycles: float  # load-to-use latency of an L2 hit
    l3_cycles: float  # ... of an L3 hit in the core's own L3 domain
    l4_ns: float  # POWER8 Centaur L4 hit (unused without an L4)
    smt_beta_compute: float  # slowdown of a thread's compute per busy sibling thread
    smt_beta_memory: float  # ... of its memory stalls (overlap well across threads)
    stream_mlp: float  # lines in flight for a sequential leaf scan (hardware prefetch)
    tlb_entries: int  # second-level DTLB entries (4 KiB pages)
    l3_victim: bool  # the L3 holds lines evicted from the L2s (mostly exclusive), not copies of them
    c2c_domain_ns: float = 45.0  # a dirty line from another core of the same L3 domain (§6)
    c2c_socket_ns: float = 60.0  # ... from a core of another L3 domain of the same socket, same node distance


# Sources: Agner Fog's microarchitecture tables, Chips and Cheese (Zen 3, Skylake-SP, Neoverse V2,
# POWER8 articles), vendor optimisation guides. SMT betas: IBM/Intel SMT throughput reports.
# l3_victim: AMD Zen's L3 is a victim cache of its CCX's L2s; Skylake-SP made the L3
# non-inclusive; POWER8's L3 region is a victim cache of its core's L2. Sandy Bridge's L3 is
# inclusive; Grace's (Neoverse V2 + SCF) is left inclusive for want of a public statement.
UARCH = {
    "amd": Uarch(ipc=2.4, l2_cycles=14, l3_cycles=46, l4_ns=0, smt_beta_compute=0.7, smt_beta_memory=0.25, stream_mlp=8, tlb_entries=2048, l3_victim=True,
                 c2c_domain_ns=23.0, c2c_socket_ns=95.0),
    "intel": Uarch(ipc=2.2, l2_cycles=14, l3_cycles=70, l4_ns=0, smt_beta_compute=0.7, smt_beta_memory=0.25, stream_mlp=8, tlb_entries=1536, l3_victim=True,
                   c2c_domain_ns=50.0, c2c_socket_ns=50.0),
    "arm": Uarch(ipc=2.6, l2_cycles=12, l3_cycles=75, l4_ns=0, smt_beta_compute=0.7, smt_beta_memory=0.25, stream_mlp=10, tlb_entries=2048, l3_victim=False,
                 c2c_domain_ns=50.0, c2c_socket_ns=50.0),
    "ibm": Uarch(ipc=1.8, l2_cycles=13, l3_cycles=27, l4_ns=55, smt_beta_compute=0.25, smt_beta_memory=0.08, stream_mlp=8, tlb_entries=2048, l3_victim=True,
                 c2c_domain_ns=20.0, c2c_socket_ns=60.0),
    "other": Uarch(ipc=2.0, l2_cycles=14, l3_cycles=50, l4_ns=0, smt_beta_compute=0.7, smt_beta_memory=0.25, stream_mlp=8, tlb_entries=1536, l3_victim=False),
}
UARCH_BY_MODEL = {  # substring of Machine.model -> override
    "E5-46": Uarch(ipc=1.8, l2_cycles=12, l3_cycles=31, l4_ns=0, smt_beta_compute=0.7, smt_beta_memory=0.25, stream_mlp=6, tlb_entries=512, l3_victim=False,
                   c2c_domain_ns=45.0, c2c_socket_ns=45.0),
}


def uarch_for(machine: Machine) -> Uarch:
    for key, u in UARCH_BY_MODEL.items():
        if key in machine.model:
            return u
    return UARCH[machine.vendor]


@dataclass(frozen=True)
class HW:
    """The descriptor as arrays. W workers (tile order), M nodes, C physical cores, D L3 domains."""

    machine: Machine
    uarch: Uarch
    worker_node: np.ndarray  # [W]
    worker_domain: np.ndarray  # [W] dense L3 domain index
    worker_core: np.ndarray  # [W] dense physical core index
    cpu_to_worker: np.ndarray  # [max cpu id + 1] worker index of each CPU id, -1 if reserved
    workers_per_node: np.ndarray  # [M]
    domains_per_node: np.ndarray  # [M] L3 domains holding workers
    dist_ns: np.ndarray  # [M, M] core node x memory node
    c2c_ns: np.ndarray  # [M, M] cache-to-cache transfer between L3 domains on these nodes
    bw_bytes: np.ndarray  # [M] bytes/s
    route: np.ndarray  # [M, M, 2L] share of traffic from node i to node j on each directed link
    link_bytes: np.ndarray  # [2L] bytes/s per direction
    l2_nodes: float  # cache capacities in 4 KiB tree nodes
    l3_nodes: float
    l4_nodes: float  # per node, 0 without an L4
    groups: ExecGroups  # the execution groups a slice can be given (contracts/groups.py + "every worker")
    calibration: Calibration | None = None  # measured per-host constants (None: the tables)

    @property
    def n_workers(self) -> int:
        return self.worker_node.size

    @property
    def n_nodes(self) -> int:
        return self.dist_ns.shape[0]

    @property
    def n_cores(self) -> int:
        return int(self.worker_core.max()) + 1

    @property
    def n_domains(self) -> int:
        return int(self.worker_domain.max()) + 1

    @property
    def core_socket(self) -> np.ndarray:
        """[C] socket of each physical core (dense core index)."""
        sock = np.zeros(self.n_cores, dtype=np.int64)
        sock[self.worker_core] = [self.machine.cpu_by_id[c].socket for c in self.machine.worker_cpus]
        return sock

    @property
    def l2_ns(self) -> float:
        return self.uarch.l2_cycles / self.machine.freq_ghz

    @property
    def l3_ns(self) -> float:
        return self.uarch.l3_cycles / self.machine.freq_ghz


@dataclass(frozen=True)
class Calibration:
    """Constants measured on a real host's runtime that replace the table values for that host's
    descriptor (docs/machine-model.md §14.3). Every field left None keeps the table value, so
    `Calibration()` changes nothing; the pool machines are never calibrated.

    ipc: effective instructions per cycle of the index code (scales every instruction's time).
    op_ns: correction of the worker time per query of each operation (read, update, insert,
      scan), added to its fixed stalls: measured cost minus the model's, both under the
      calibration run's conditions (one worker, uniform keys, single-operation run). It replaces
      the table cost of the operation by the measured one there, while the model's differences
      between conditions (caches, placement, SMT) still apply elsewhere. Signed: it holds the
      runtime's overhead per query (dispatch, latency stamp, stats) and whatever the model misses
      (stalls the host's shared L3 and TLB cause), and it is negative where the table
      instruction counts exceed the measured cost (appends).
    batch_ns: worker time per batch (the runtime reads the probe once per batch and stores the
      batch's stats: runtime.c run_due), charged per query as batch_ns / b_s with b_s the
      expected batch size of slice s (`model.batches_per_query`); fitted from single-worker
      lookups with batches of 1 query and of batch_queries. None: no per-batch cost (the paper's
      rdpmc probe costs tens of ns).
    batch_queries, queue_capacity: the runtime's batch_queries (G) and queue_capacity (Q): a
      worker drains its queue (up to Q queries in a closed loop) and runs what it drained grouped
      by slice, G at most a batch (`model.batches_per_query`).
    routers_per_node: router threads per node (the runtime's routers_per_node; §8).
    scan_key_insn: instructions per key scanned (model default INSN_SCAN_KEY), fitted from the
      difference between single-worker scans of two lengths.
    route_ns: router CPU time per query (model default ROUTE_NS), measured on the router alone.
    shared_cpus: the routers run on the same CPUs as the workers (no reserved router CPUs): the
      busy time of all workers plus the routers' X * route_ns must fit into this many CPUs. May be
      fractional: the effective capacity the runtime gets on a host shared with other jobs.
    l3_share: share of each L3 domain's capacity the runtime's lines get (§4, §14.3): a guest
      whose L3 is shared with other tenants' cores keeps only part of it. Fitted from
      single-worker uniform lookups on a small and a large tree (`calibration.fit_l3_share`).
    stream_mlp: lines a core keeps in flight for a scan's streamed lines (the table's
      `Uarch.stream_mlp`: how far the hardware prefetchers run ahead). Fitted from the rise in
      scan cost with scan length on a tree beyond the private caches, once the instructions per
      key are known from a tree that fits them (`calibration.fit_stream_mlp`).
    queues: how the runtime's routers hand queries to workers (§10). "bounded" (this project's
      runtime): a router waits while the chosen worker's queue is full, so the busiest worker
      thread sets the throughput of the whole query stream. "unbounded" (the P-MOSS paper's
      prototype: TBB queues without a capacity, routers that never wait): every worker completes
      queries at its own capacity while a hot worker's backlog grows, and the measured
      throughput is the sum of the workers' completion rates (`PAPER_RUNTIME`).
    numa_balancing: the schedule kinds whose pages the kernel's automatic NUMA balancing moves
      (§5.2; on by default on multi-node Linux hosts): pages without a memory policy drift towards
      the nodes that access them; interleaved (MPOL_INTERLEAVE) and bound (MPOL_BIND) pages keep
      their policy. This runtime binds every kind's arena but os-default's; the paper's prototype
      placed slices with move_pages, which sets no policy, so se-numa's pages drift there too.
      () models a host with balancing off (sysctl kernel.numa_balancing=0).
    """

    ipc: float | None = None
    op_ns: tuple[float, float, float, float] | None = None
    batch_ns: float | None = None
    batch_queries: int = 100
    queue_capacity: int = 1024
    routers_per_node: int = 1
    scan_key_insn: float | None = None
    route_ns: float | None = None
    shared_cpus: float | None = None
    l3_share: float | None = None
    stream_mlp: float | None = None
    queues: str = "bounded"
    numa_balancing: tuple[str, ...] = ("os-default",)
    source: str = ""

    def __post_init__(self) -> None:
        if self.batch_queries < 1 or self.queue_capacity < 1 or self.routers_per_node < 1:
            raise ValueError("Calibration.batch_queries / queue_capacity / routers_per_node: must be >= 1, got "
                             f"{self.batch_queries!r} / {self.queue_capacity!r} / {self.routers_per_node!r}")
        if self.op_ns is not None and (len(self.op_ns) != 4 or not all(np.isfinite(v) for v in self.op_ns)):
            raise ValueError(f"Calibration.op_ns: must be 4 finite ns (read, update, insert, scan), got {self.op_ns!r}")
        if not set(self.numa_balancing) <= {"os-default", "se-numa"}:
            raise ValueError(f"Calibration.numa_balancing: only os-default and se-numa leave pages without a policy, got {self.numa_balancing!r}")
        if self.queues not in ("bounded", "unbounded"):
            raise ValueError(f"Calibration.queues: must be 'bounded' or 'unbounded', got {self.queues!r}")
        if self.l3_share is not None and not 0 < self.l3_share <= 1:
            raise ValueError(f"Calibration.l3_share: must be in (0, 1], got {self.l3_share!r}")
        positive = ("ipc", "shared_cpus", "stream_mlp")
        for f in ("ipc", "batch_ns", "scan_key_insn", "route_ns", "shared_cpus", "stream_mlp"):
            v = getattr(self, f)
            if v is not None and not (np.isfinite(v) and v >= 0 and (f not in positive or v > 0)):
                raise ValueError(f"Calibration.{f}: must be finite and {'positive' if f in positive else 'non-negative'}, got {v!r}")


# The runtime the P-MOSS paper measured with (its public prototype): per-worker queues without a
# capacity that routers never wait on, throughput = completions over the run (docs/machine-model.md
# §10.1). Used to check the machine model against the paper's measurements (pmoss.sim.paper).
PAPER_RUNTIME = Calibration(queues="unbounded", numa_balancing=("os-default", "se-numa"),
                            source="P-MOSS prototype: unbounded per-worker queues, routers never wait; NUMA balancing on")


DEFAULT_BALANCED = Calibration().numa_balancing  # pool machines without a calibration: this runtime, balancing on


def balanced_kinds(hw: HW) -> tuple[str, ...]:
    """Kinds whose pages NUMA balancing moves on this machine (none on one node: Linux turns it off)."""
    if hw.n_nodes < 2:
        return ()
    return DEFAULT_BALANCED if hw.calibration is None else hw.calibration.numa_balancing


def calibrated(hw: HW, cal: Calibration | None) -> HW:
    """hw with the measured constants of `cal` in place of the tables (hw itself when cal is None)."""
    if cal is None:
        return hw
    uarch = hw.uarch if cal.ipc is None else replace(hw.uarch, ipc=cal.ipc)
    uarch = uarch if cal.stream_mlp is None else replace(uarch, stream_mlp=cal.stream_mlp)
    return replace(hw, uarch=uarch, calibration=cal)


# A dirty line from a remote socket: request to its home, snoop, forward, in memory hops beyond the
# local distance (§6). Physical range [1, 2]; fitted by pmoss.sim.paper.fit_c2c_hop (scipy) to the
# paper's measured core-to-core spreads across sockets (C9), the one constant here without a
# public per-part figure.
C2C_HOP = 1.0  # the fit lands on the range's lower end (Sandy Bridge's two-hop socket pulls it down)


def c2c_nodes(uarch: Uarch, dist: np.ndarray, node_socket: np.ndarray, hop: float | None = None) -> np.ndarray:
    """[M, M] transfer of a dirty line between cores of two different L3 domains on nodes m, m'
    (§6): the on-die transfer inside a socket (NPS/SNC modes split memory, not the coherence
    fabric), plus 1.5x the extra memory distance across sockets.
    Sources (core-to-core "bouncing" latency charts of AnandTech's Milan, Skylake-SP and
    Sandy Bridge-EP reviews; Chips and Cheese): Zen 3 ~23 ns inside a CCX, ~95 ns between CCXs,
    ~200-230 ns across sockets; Skylake-SP mesh ~50 ns anywhere on the die (SNC halves ~1.1x),
    ~130-140 ns across UPI."""
    other = node_socket[:, None] != node_socket[None, :]
    return uarch.c2c_socket_ns + (C2C_HOP if hop is None else hop) * other * (dist - np.diag(dist)[:, None])


def core_to_core_ns(hw: HW, hop: float | None = None) -> np.ndarray:
    """[C, C] latency of moving a dirty line between two physical cores: the in-domain transfer
    inside one L3 domain, else the transfer between their nodes (hw.c2c_ns; with `hop`, the
    cross-socket factor of c2c_nodes in place of C2C_HOP)."""
    core_dom = np.zeros(hw.n_cores, dtype=np.int64)
    core_node = np.zeros(hw.n_cores, dtype=np.int64)
    core_dom[hw.worker_core], core_node[hw.worker_core] = hw.worker_domain, hw.worker_node
    nodes = hw.c2c_ns if hop is None else c2c_nodes(hw.uarch, hw.dist_ns, _node_socket(hw.machine), hop)
    out = nodes[core_node][:, core_node]
    return np.where(core_dom[:, None] == core_dom[None, :], hw.uarch.c2c_domain_ns, out)


_CACHE: dict[int, tuple[Machine, HW]] = {}


def hw_for(machine: Machine, calibration: Calibration | None = None) -> HW:
    """Cached per descriptor object (descriptors are treated as read-only once loaded);
    `calibration` overrides constants with measured ones (see `Calibration`)."""
    hit = _CACHE.get(id(machine))
    if hit is None or hit[0] is not machine:
        if len(_CACHE) > 64:
            _CACHE.clear()
        hit = _CACHE[id(machine)] = (machine, _build(machine))
    return calibrated(hit[1], calibration)


def _dense(values: list[int]) -> np.ndarray:
    _, inv = np.unique(np.array(values), return_inverse=True)
    return inv.astype(np.int64)


@dataclass(frozen=True)
class ExecGroups:
    """Execution groups as arrays: the machine's candidate groups (index g < G, contracts/groups.py)
    and one more, index G, for "every worker" (the os-* and se-numa kinds). Cache-group ids: a
    group that fits one physical core shares that core's L2 (id = its core), else its own L2 id;
    a group inside one L3 domain shares that domain's L3, else its own (ids: cores and domains
    below `offset`, groups from it), as the shared kinds always were (docs/machine-model.md §5)."""

    member: np.ndarray  # [G+1, W] 1/|g| where worker w is in g
    node: np.ndarray  # [G+1] node of the group (-1: every worker)
    size: np.ndarray  # [G+1] threads
    span: np.ndarray  # [G+1] L3 domains among its threads
    l2: np.ndarray  # [G+1] L2 cache-group id
    l3: np.ndarray  # [G+1] L3 cache-group id
    E: np.ndarray  # [G+1, M] share of its queries executed per node
    n_cache_groups: int
    pair_group: np.ndarray  # [S] the group of each (group, worker) membership, worker-major
    pair_weight: np.ndarray  # [S] its 1/|g|
    worker_start: np.ndarray  # [W] first membership of each worker

    @property
    def every_worker(self) -> int:
        return self.node.size - 1

    def to_threads(self, per_group: np.ndarray) -> np.ndarray:
        """[..., G+1] what each group carries -> [..., W] what each thread carries (per_group @ member)
        over the S memberships: O(S) instead of O(G W); equal up to float rounding."""
        return np.add.reduceat(per_group[..., self.pair_group] * self.pair_weight, self.worker_start, axis=-1)


def _exec_groups(m: Machine, node: np.ndarray, domain: np.ndarray, core: np.ndarray) -> ExecGroups:
    g = groups_of(m)
    W, M = node.size, m.numa_nodes
    member = np.vstack([g.member, np.ones((1, W), bool)])
    size = member.sum(1)
    span = np.array([np.unique(domain[row]).size for row in member])
    one_core = np.array([np.unique(core[row]).size == 1 for row in member])
    offset = max(int(core.max()), int(domain.max())) + 1
    ids = offset + np.arange(member.shape[0])
    first = member.argmax(1)
    E = np.vstack([np.eye(M)[g.node], np.bincount(node, minlength=M)[None] / W])
    pair_worker, pair_group = np.nonzero(member.T)  # worker-major; every worker is in its own thread group
    return ExecGroups(
        member=member / size[:, None], node=np.append(g.node, -1), size=size, span=span.astype(float),
        l2=np.where(one_core, core[first], ids), l3=np.where(span == 1, domain[first], ids), E=E,
        n_cache_groups=int(ids[-1]) + 1, pair_group=pair_group, pair_weight=1.0 / size[pair_group],
        worker_start=np.flatnonzero(np.r_[True, pair_worker[1:] != pair_worker[:-1]]),
    )  # fmt: skip


def _build(m: Machine) -> HW:
    cpus = [m.cpu_by_id[c] for c in m.worker_cpus]
    node = np.array([c.node for c in cpus])
    domain, core = _dense([c.l3_domain for c in cpus]), _dense([c.core for c in cpus])
    dom_per_node = np.array([len({int(d) for d in domain[node == n]}) for n in range(m.numa_nodes)])
    dist = np.array(m.distance_ns(), dtype=np.float64)
    route, link_bytes = _routes(m)
    cpu_to_worker = np.full(max(c.cpu for c in m.cpus) + 1, -1, dtype=np.int64)
    cpu_to_worker[m.worker_cpus] = np.arange(len(m.worker_cpus))
    l4 = (m.caches.l4_mib or 0.0) * 2**20 / NODE_BYTES
    return HW(
        machine=m, uarch=uarch_for(m), worker_node=node, worker_domain=domain, worker_core=core, cpu_to_worker=cpu_to_worker,
        workers_per_node=np.bincount(node, minlength=m.numa_nodes), domains_per_node=dom_per_node,
        dist_ns=dist, c2c_ns=c2c_nodes(uarch_for(m), dist, _node_socket(m)), bw_bytes=np.array(m.mem_bandwidth_gbps) * 1e9,
        route=route, link_bytes=link_bytes, l2_nodes=m.caches.l2_kib * 1024 / NODE_BYTES,
        l3_nodes=m.caches.l3_mib * 2**20 / NODE_BYTES, l4_nodes=l4, groups=_exec_groups(m, node, domain, core),
    )  # fmt: skip


def _node_socket(m: Machine) -> np.ndarray:
    out = np.zeros(m.numa_nodes, dtype=np.int64)
    for c in m.cpus:
        out[c.node] = c.socket
    return out


def _routes(m: Machine) -> tuple[np.ndarray, np.ndarray]:
    """Traffic between sockets follows every shortest path over the links, split evenly among
    paths and among parallel links. Returns route [M, M, 2L] (node pairs) and capacity [2L]."""
    n_links = len(m.links)
    sock_route = np.zeros((m.sockets, m.sockets, 2 * n_links))
    for a in range(m.sockets):
        for b in range(m.sockets):
            paths = _shortest_paths(m, a, b) if a != b else []
            for path in paths:
                for u, v in pairwise(path):
                    hop = [i for i, l in enumerate(m.links) if {l.a, l.b} == {u, v}]
                    for i in hop:
                        d = 2 * i if m.links[i].a == u else 2 * i + 1
                        sock_route[a, b, d] += 1.0 / (len(paths) * len(hop))
    node_socket = _node_socket(m)
    route = sock_route[node_socket][:, node_socket]  # [M, M, 2L]
    caps = np.repeat([l.gbps * 1e9 for l in m.links], 2) if n_links else np.zeros(0)
    return route, caps


def _shortest_paths(m: Machine, a: int, b: int) -> list[list[int]]:
    adj = {s: sorted({l.b for l in m.links if l.a == s} | {l.a for l in m.links if l.b == s}) for s in range(m.sockets)}
    frontier, seen = [[a]], {a}
    while frontier:
        done = [p for p in frontier if p[-1] == b]
        if done:
            return done
        nxt = [p + [v] for p in frontier for v in adj[p[-1]] if v not in seen]
        seen |= {p[-1] for p in nxt}
        frontier = nxt
    return []  # unconnected sockets: traffic is not charged to any link
