"""Machine descriptor (docs/design.md §4.1): the topology and the physical facts of one host.

One YAML file per machine. `pmoss topology` writes one for this host from sysfs; the simulated
pool's descriptors ship in `pmoss/sim/machines/`. A descriptor is validated on load, and every
error names the field.
"""

from __future__ import annotations

from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from pmoss.contracts.io import dump_model, load_model
from pmoss.contracts.limits import MAX_CPUS, MAX_NODES

MACHINE_SCHEMA_VERSION = 1

Vendor = Literal["intel", "amd", "arm", "ibm", "other"]


# Numbers are strict (a YAML `true` is no number, though pydantic would read it as 1) and bounded by
# physics with room to spare, so a typo fails here, naming the field, not as an overflow or a huge
# array in the machine model.
CpuId = Annotated[int, Field(strict=True, ge=0, lt=MAX_CPUS)]  # also core and L3-domain ids
NodeId = Annotated[int, Field(strict=True, ge=0, lt=MAX_NODES)]  # also socket ids
Count = Annotated[int, Field(strict=True, ge=1, le=MAX_NODES)]  # sockets, NUMA nodes
GBps = Annotated[float, Field(strict=True, gt=0, le=1e5, allow_inf_nan=False)]  # 100 TB/s: beyond any HBM
Ns = Annotated[float, Field(strict=True, gt=0, le=1e5, allow_inf_nan=False)]  # 100 us: beyond any memory access
GiB = Annotated[float, Field(strict=True, gt=0, le=1 << 20, allow_inf_nan=False)]  # 1 PiB per node


def _size(most: float, default: Any = ...) -> Any:
    """A cache size: a strict positive number of at most `most`."""
    return Field(default, strict=True, gt=0, le=most, allow_inf_nan=False)


class Cpu(BaseModel):
    """One logical CPU and where it sits."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpu: CpuId
    socket: NodeId
    node: NodeId
    l3_domain: CpuId  # CPUs sharing one L3 slice have the same id, machine-wide
    core: CpuId  # physical core id, machine-wide
    smt_sibling_of: CpuId | None = None  # the first logical CPU of this core, None for that one


class Caches(BaseModel):
    model_config = ConfigDict(extra="forbid")
    l1d_kib: float = _size(4096)  # per core (today's largest: 192 KiB)
    l2_kib: float = _size(65536)  # per core (today's largest: a few MiB)
    l3_mib: float = _size(65536)  # per L3 domain (today's largest: ~100 MiB)
    l4_mib: float | None = _size(1 << 20, None)  # e.g. POWER8 Centaur buffer chips, per node; None: none


class Link(BaseModel):
    """A socket interconnect link (UPI, QPI, xGMI, X-Bus...)."""

    model_config = ConfigDict(extra="forbid")
    a: NodeId  # socket
    b: NodeId  # socket
    gbps: GBps  # per direction, GB/s


class Machine(BaseModel):
    """A host's topology and physics. Derived views (workers, tile layout) are cached properties."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = Field(MACHINE_SCHEMA_VERSION, strict=True, ge=1)
    name: str = Field(min_length=1)
    vendor: Vendor
    model: str = ""  # e.g. "AMD EPYC 7543"
    source: str = ""  # where the numbers come from (spec sheet, sysfs, measurement)
    sockets: Count
    numa_nodes: Count
    cpus: list[Cpu] = Field(min_length=1, max_length=MAX_CPUS)
    caches: Caches
    node_memory_gib: list[GiB] | None = None  # per node, None when unknown
    mem_bandwidth_gbps: list[GBps]  # per node
    local_latency_ns: Ns
    distance: list[list[Ns]]  # node x node: ns, or SLIT (10 = local)
    distance_unit: Literal["ns", "slit"] = "ns"
    links: list[Link] = Field([], max_length=MAX_NODES * MAX_NODES)
    freq_ghz: float = Field(strict=True, gt=0, le=20, allow_inf_nan=False)
    reserved_cpus: list[CpuId] = []  # router and sweeper CPUs, never given a slice

    @model_validator(mode="after")
    def _check(self) -> Machine:
        if self.schema_version > MACHINE_SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is newer than this pmoss ({MACHINE_SCHEMA_VERSION})")
        ids = [c.cpu for c in self.cpus]
        if len(set(ids)) != len(ids):
            dup = next(i for i, n in Counter(ids).items() if n > 1)
            raise ValueError(f"cpus: cpu {dup} is listed more than once (every CPU must be in exactly one node)")
        for c in self.cpus:
            if c.node >= self.numa_nodes:
                raise ValueError(f"cpus: cpu {c.cpu} is on node {c.node} but numa_nodes is {self.numa_nodes}")
            if c.socket >= self.sockets:
                raise ValueError(f"cpus: cpu {c.cpu} is on socket {c.socket} but sockets is {self.sockets}")
        empty = sorted(set(range(self.numa_nodes)) - {c.node for c in self.cpus})
        if empty:
            raise ValueError(f"numa_nodes: node {empty[0]} has no CPU")
        n = self.numa_nodes
        if len(self.distance) != n or any(len(r) != n for r in self.distance):
            raise ValueError(f"distance: must be a {n}x{n} matrix (numa_nodes = {n})")
        for i in range(n):
            for j in range(n):
                a, b = self.distance[i][j], self.distance[j][i]
                if abs(a - b) > 0.25 * max(a, b):
                    raise ValueError(f"distance: [{i}][{j}]={a} and [{j}][{i}]={b} differ by more than 25%")
                if self.distance[i][i] > a:
                    raise ValueError(f"distance: local distance [{i}][{i}] is larger than remote [{i}][{j}]")
        if len(self.mem_bandwidth_gbps) != n:
            raise ValueError(f"mem_bandwidth_gbps: needs one value per node ({n}), got {len(self.mem_bandwidth_gbps)}")
        if self.node_memory_gib is not None and len(self.node_memory_gib) != n:
            raise ValueError(f"node_memory_gib: needs one value per node ({n}), got {len(self.node_memory_gib)}")
        for link in self.links:
            if link.a >= self.sockets or link.b >= self.sockets or link.a == link.b:
                raise ValueError(f"links: link {link.a}-{link.b} does not join two sockets of {self.sockets}")
        bad = sorted(set(self.reserved_cpus) - set(ids))
        if bad:
            raise ValueError(f"reserved_cpus: cpu {bad[0]} does not exist")
        if not self.worker_cpus:
            raise ValueError("reserved_cpus: every CPU is reserved, no worker is left")
        return self

    # ---- derived views -------------------------------------------------------------------------
    @cached_property
    def cpu_by_id(self) -> dict[int, Cpu]:
        return {c.cpu: c for c in self.cpus}

    @cached_property
    def worker_cpus(self) -> list[int]:
        """Worker CPU ids in tile order: by (node, L3 domain, core, SMT thread).

        The action for a slice is an index into this list (the `SN:T` action space)."""
        reserved = set(self.reserved_cpus)
        workers = [c for c in self.cpus if c.cpu not in reserved]
        workers.sort(key=lambda c: (c.node, c.l3_domain, c.core, c.smt_sibling_of is not None, c.cpu))
        return [c.cpu for c in workers]

    @cached_property
    def worker_index(self) -> dict[int, int]:
        return {cpu: i for i, cpu in enumerate(self.worker_cpus)}

    @cached_property
    def workers_by_node(self) -> list[list[int]]:
        by_node: list[list[int]] = [[] for _ in range(self.numa_nodes)]
        for cpu in self.worker_cpus:
            by_node[self.cpu_by_id[cpu].node].append(cpu)
        return by_node

    @cached_property
    def tile_position(self) -> list[tuple[int, int]]:
        """(row = node, column = rank within the node) of each worker action index."""
        pos = []
        for cpu in self.worker_cpus:
            node = self.cpu_by_id[cpu].node
            pos.append((node, self.workers_by_node[node].index(cpu)))
        return pos

    @property
    def n_workers(self) -> int:
        return len(self.worker_cpus)

    @property
    def n_l3_domains(self) -> int:
        return len({c.l3_domain for c in self.cpus})

    def distance_ns(self) -> list[list[float]]:
        """The distance matrix in ns: SLIT values scale the local latency (SLIT 10 = local)."""
        if self.distance_unit == "ns":
            return [list(r) for r in self.distance]
        return [[self.local_latency_ns * d / 10.0 for d in r] for r in self.distance]


def default_reserved(cpus: list[Cpu], numa_nodes: int, routers_per_node: int = 1, sweepers_per_node: int = 1) -> list[int]:
    """One router and one core sweeper per node (docs/design.md §4.1): the first CPUs of each node.

    A node too small to keep at least two workers after that reserves nothing: its router and
    sweeper threads then share CPUs with workers (the runtime allows it on small hosts)."""
    reserved: list[int] = []
    per = routers_per_node + sweepers_per_node
    for node in range(numa_nodes):
        node_cpus = sorted((c for c in cpus if c.node == node), key=lambda c: (c.smt_sibling_of is not None, c.cpu))
        if len(node_cpus) >= per + 2:
            reserved += [c.cpu for c in node_cpus[:per]]
    return sorted(reserved)


def load_machine(path: Path) -> Machine:
    return load_model(Machine, Path(path))


def save_machine(machine: Machine, path: Path) -> None:
    dump_model(machine, Path(path))
