"""Topology discovery: read a host's sysfs into a machine descriptor (docs/design.md §4.1).

Everything topological comes from sysfs (CPUs, packages, NUMA nodes, SLIT distances, L3 sharing,
SMT siblings, memory per node). Bandwidth and latency are not in sysfs: they are filled with
conservative defaults and the descriptor's `source` says so; measure them to replace the defaults.
`root` makes the reader testable against fake trees.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from pmoss.contracts.errors import PmossError
from pmoss.contracts.machine import Caches, Cpu, Machine, default_reserved

# Used only when sysfs/procfs do not say; reported in `source`.
DEFAULT_BANDWIDTH_GBPS = 20.0
DEFAULT_LOCAL_LATENCY_NS = 90.0
DEFAULT_FREQ_GHZ = 2.0


class TopologyError(PmossError):
    pass


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _read(path: Path, default: str | None = None) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        if default is None:
            raise TopologyError(f"{path}: cannot read (is this a Linux sysfs tree?)") from None
        return default


def _size_kib(text: str) -> float:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if not m:
        return 0.0
    return int(m.group(1)) * {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024 * 1024}[m.group(2)]


def _caches(cpu_dir: Path) -> dict[str, tuple[float, str]]:
    """{'L1d': (KiB, shared_cpu_list), 'L2': ..., 'L3': ...} for one CPU."""
    found = {}
    for index in sorted(cpu_dir.glob("cache/index*")):
        level, ctype = _read(index / "level", ""), _read(index / "type", "")
        name = {("1", "Data"): "L1d", ("2", "Unified"): "L2", ("3", "Unified"): "L3"}.get((level, ctype))
        if name:
            found[name] = (_size_kib(_read(index / "size", "0")), _read(index / "shared_cpu_list", ""))
    return found


def _nodes(sys: Path, cpus: list[int]) -> tuple[dict[int, int], list[list[float]], list[float] | None]:
    """cpu -> node, SLIT distance rows, and GiB per node; one node when the kernel has no NUMA."""
    node_dirs = sorted(sys.glob("devices/system/node/node[0-9]*"), key=lambda p: int(p.name[4:]))
    if not node_dirs:
        return {c: 0 for c in cpus}, [[10.0]], None
    ids = [int(p.name[4:]) for p in node_dirs]
    if ids != list(range(len(ids))):
        raise TopologyError(f"{sys}/devices/system/node: node ids {ids} are not 0..{len(ids) - 1}")
    cpu_node, distance, mem = {}, [], []
    for d in node_dirs:
        for c in parse_cpulist(_read(d / "cpulist", "")):
            cpu_node[c] = int(d.name[4:])
        distance.append([float(x) for x in _read(d / "distance").split()])
        m = re.search(r"MemTotal:\s+(\d+) kB", _read(d / "meminfo", ""))
        mem.append(int(m.group(1)) / 2**20 if m else 0.0)
    return cpu_node, distance, (mem if all(m > 0 for m in mem) else None)


def _vendor(root: Path) -> tuple[str, str]:
    info = _read(root / "proc/cpuinfo", "")
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    if "GenuineIntel" in info:
        return "intel", model
    if "AuthenticAMD" in info:
        return "amd", model
    if re.search(r"CPU implementer\s*:\s*0x", info):
        return "arm", model
    if re.search(r"^cpu\s*:\s*POWER", info, re.M):
        return "ibm", model
    return "other", model


def _freq_ghz(sys: Path, root: Path, cpu: int) -> tuple[float, bool]:
    khz = _read(sys / f"devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq", "")
    if khz.isdigit():
        return int(khz) / 1e6, True
    m = re.search(r"cpu MHz\s*:\s*([\d.]+)", _read(root / "proc/cpuinfo", ""))
    if m and float(m.group(1)) > 0:
        return float(m.group(1)) / 1000, True
    return DEFAULT_FREQ_GHZ, False


def discover(root: Path = Path("/"), name: str | None = None, routers_per_node: int = 1) -> Machine:
    """Build a descriptor from `root`/sys and `root`/proc; it reserves the CPUs a runtime with
    `routers_per_node` routers per node gives its routers and sweeper (default_reserved)."""
    root = Path(root)
    sys = root / "sys"
    cpus = parse_cpulist(_read(sys / "devices/system/cpu/online"))
    cpu_node, distance, mem = _nodes(sys, cpus)
    l3_ids: dict[str, int] = {}
    core_ids: dict[tuple[int, str], int] = {}
    rows, caches = [], {}
    for c in cpus:
        d = sys / f"devices/system/cpu/cpu{c}"
        socket = int(_read(d / "topology/physical_package_id", "0"))
        socket = max(socket, 0)  # some VMs report -1
        siblings = parse_cpulist(_read(d / "topology/thread_siblings_list", str(c)))
        caches = _caches(d) or caches
        l3_key = caches.get("L3", (0, f"socket{socket}"))[1] or f"socket{socket}"
        core = core_ids.setdefault((socket, _read(d / "topology/core_id", str(c))), len(core_ids))
        first = min(siblings)
        rows.append(Cpu(cpu=c, socket=socket, node=cpu_node.get(c, 0), l3_domain=l3_ids.setdefault(l3_key, len(l3_ids)),
                        core=core, smt_sibling_of=None if first == c else first))  # fmt: skip
    sockets = len({r.socket for r in rows})
    # Renumber sockets densely: the descriptor needs 0..sockets-1.
    sock_map = {s: i for i, s in enumerate(sorted({r.socket for r in rows}))}
    rows = [r.model_copy(update={"socket": sock_map[r.socket]}) for r in rows]
    vendor, model = _vendor(root)
    freq, freq_known = _freq_ghz(sys, root, cpus[0])
    n_nodes = len(distance)
    defaults = ["memory bandwidth", "local latency"] + ([] if freq_known else ["frequency"])
    return Machine(
        name=name or platform.node() or "host",
        vendor=vendor,
        model=model,
        source=f"sysfs under {root}; defaults (not measured): {', '.join(defaults)}",
        sockets=sockets,
        numa_nodes=n_nodes,
        cpus=rows,
        caches=Caches(
            l1d_kib=caches.get("L1d", (32.0, ""))[0] or 32.0,
            l2_kib=caches.get("L2", (1024.0, ""))[0] or 1024.0,
            l3_mib=(caches.get("L3", (0.0, ""))[0] or 8192.0) / 1024,
        ),
        node_memory_gib=mem,
        mem_bandwidth_gbps=[DEFAULT_BANDWIDTH_GBPS] * n_nodes,
        local_latency_ns=DEFAULT_LOCAL_LATENCY_NS,
        distance=distance,
        distance_unit="slit",
        freq_ghz=freq,
        reserved_cpus=default_reserved(rows, n_nodes, routers_per_node),
    )


def host_name() -> str:
    return os.uname().nodename or "host"
