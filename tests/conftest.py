"""Shared fixtures: fake sysfs trees and small descriptors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pmoss.contracts.machine import Caches, Cpu, Machine, default_reserved


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _ranges(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)


def make_sysfs(root: Path, sockets: int, nodes_per_socket: int, cores_per_node: int, smt: int, vendor: str = "GenuineIntel") -> Path:
    """A fake /sys + /proc tree. CPU numbering like Linux: all first threads, then the siblings."""
    n_nodes = sockets * nodes_per_socket
    n_cores = n_nodes * cores_per_node
    sys = root / "sys/devices/system"
    _write(sys / "cpu/online", f"0-{n_cores * smt - 1}")
    node_cpus: dict[int, list[int]] = {n: [] for n in range(n_nodes)}
    for thread in range(smt):
        for core in range(n_cores):
            cpu = thread * n_cores + core
            node = core // cores_per_node
            socket = node // nodes_per_socket
            node_cpus[node].append(cpu)
            siblings = [t * n_cores + core for t in range(smt)]
            l3 = [t * n_cores + c for t in range(smt) for c in range(node * cores_per_node, (node + 1) * cores_per_node)]
            d = sys / f"cpu/cpu{cpu}"
            _write(d / "topology/physical_package_id", str(socket))
            _write(d / "topology/core_id", str(core % (cores_per_node * nodes_per_socket)))
            _write(d / "topology/thread_siblings_list", _ranges(siblings))
            for idx, (level, ctype, size, shared) in enumerate(
                [(1, "Data", "32K", siblings), (1, "Instruction", "32K", siblings), (2, "Unified", "1024K", siblings), (3, "Unified", "16384K", sorted(l3))]
            ):
                c = d / f"cache/index{idx}"
                _write(c / "level", str(level))
                _write(c / "type", ctype)
                _write(c / "size", size)
                _write(c / "shared_cpu_list", _ranges(shared))
            _write(d / "cpufreq/cpuinfo_max_freq", "2600000")
    for node in range(n_nodes):
        d = sys / f"node/node{node}"
        _write(d / "cpulist", _ranges(sorted(node_cpus[node])))
        same_socket = lambda a, b: a // nodes_per_socket == b // nodes_per_socket  # noqa: E731
        _write(d / "distance", " ".join("10" if o == node else "11" if same_socket(o, node) else "21" for o in range(n_nodes)))
        _write(d / "meminfo", f"Node {node} MemTotal:       16777216 kB")
    _write(root / "proc/cpuinfo", f"processor\t: 0\nvendor_id\t: {vendor}\nmodel name\t: Fake CPU\ncpu MHz\t\t: 2600.000\n")
    return root


@pytest.fixture
def two_socket_eight_node(tmp_path: Path) -> Path:
    return make_sysfs(tmp_path / "2s8n", sockets=2, nodes_per_socket=4, cores_per_node=4, smt=2)


@pytest.fixture
def one_socket_smt(tmp_path: Path) -> Path:
    return make_sysfs(tmp_path / "1s", sockets=1, nodes_per_socket=1, cores_per_node=4, smt=2, vendor="AuthenticAMD")


def small_machine(name: str = "toy", nodes: int = 2, cpus_per_node: int = 6) -> Machine:
    cpus = [Cpu(cpu=i, socket=i // cpus_per_node, node=i // cpus_per_node, l3_domain=i // cpus_per_node, core=i) for i in range(nodes * cpus_per_node)]
    return Machine(
        name=name, vendor="intel", sockets=nodes, numa_nodes=nodes, cpus=cpus,
        caches=Caches(l1d_kib=32, l2_kib=1024, l3_mib=16), mem_bandwidth_gbps=[50.0] * nodes, local_latency_ns=90,
        distance=[[90.0 if a == b else 140.0 for b in range(nodes)] for a in range(nodes)], freq_ghz=2.5,
        reserved_cpus=default_reserved(cpus, nodes),
    )  # fmt: skip


@pytest.fixture
def toy_machine() -> Machine:
    return small_machine()


@pytest.fixture
def perf_events() -> dict:
    """The host's counter facts (pmoss.runtime.host_pmu_facts); skips a test that needs the probe
    where the kernel refuses every perf event (perf_event_paranoid 3 without CAP_PERFMON, a
    seccomp filter): there the runtime's probe cannot open, which is not what such a test checks."""
    from pmoss.collect import runtime as rtmod

    if not rtmod.library_path().exists():
        pytest.skip(f"{rtmod.library_path()} is not built (make native)")
    try:
        facts = rtmod.host_pmu_facts()
    except rtmod.NativeRuntimeError as exc:
        pytest.skip(str(exc))
    if not facts["software_events"]:
        pytest.skip(f"no perf event opens here: {facts['reason']}")
    return facts


def sim_dataset(root: Path, episodes: int, n_slices: int = 8) -> Path:
    """A tokenised dataset of simulated intel-skx-4s x ycsb-c episodes under root/ds (no hold-out)."""
    from pmoss.collect.driver import collect
    from pmoss.collect.plan import load_pool
    from pmoss.data.dataset import build

    (root / "pool.yaml").write_text(f"name: t\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nepisodes_per_cell: {episodes}\nn_slices: {n_slices}\n")
    collect(load_pool(root / "pool.yaml"), root / "raw", progress=False)
    build([root / "raw"], root / "ds", 0.0, 0.0)
    return root / "ds"
