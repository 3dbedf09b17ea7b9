from pathlib import Path

import pytest

from pmoss.collect.topology import TopologyError, discover, parse_cpulist


def test_parse_cpulist():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_two_socket_eight_nodes(two_socket_eight_node: Path):
    m = discover(two_socket_eight_node, name="fake-2s8n")
    assert (m.sockets, m.numa_nodes, len(m.cpus)) == (2, 8, 64)
    assert m.vendor == "intel" and m.freq_ghz == pytest.approx(2.6)
    # Every node holds 4 cores x 2 threads, and its own L3 domain.
    for node in range(8):
        cpus = [c for c in m.cpus if c.node == node]
        assert len(cpus) == 8
        assert len({c.l3_domain for c in cpus}) == 1
        assert len({c.socket for c in cpus}) == 1
    assert m.n_l3_domains == 8
    # SLIT distances: 10 local, 11 same socket, 21 across sockets.
    assert m.distance[0][0] == 10 and m.distance[0][1] == 11 and m.distance[0][4] == 21
    assert m.distance_unit == "slit"
    # SMT: cpu 32 is the sibling of cpu 0.
    assert m.cpu_by_id[32].smt_sibling_of == 0 and m.cpu_by_id[0].smt_sibling_of is None
    assert m.cpu_by_id[32].core == m.cpu_by_id[0].core
    # One router + one sweeper reserved per node, never a sibling thread first.
    assert len(m.reserved_cpus) == 16 and m.n_workers == 48
    assert m.node_memory_gib == [16.0] * 8


def test_one_socket_smt(one_socket_smt: Path):
    m = discover(one_socket_smt)
    assert (m.sockets, m.numa_nodes, len(m.cpus), m.vendor) == (1, 1, 8, "amd")
    assert len({c.core for c in m.cpus}) == 4
    assert sum(c.smt_sibling_of is not None for c in m.cpus) == 4
    # Worker order: by core, first thread before its sibling.
    order = [(m.cpu_by_id[c].core, m.cpu_by_id[c].smt_sibling_of is not None) for c in m.worker_cpus]
    assert order == sorted(order)


def test_this_host():
    m = discover()
    assert m.numa_nodes >= 1 and len(m.cpus) >= 1
    assert sorted(c.cpu for c in m.cpus) == sorted(m.cpu_by_id)


def test_not_a_sysfs_tree(tmp_path: Path):
    with pytest.raises(TopologyError, match="cpu/online"):
        discover(tmp_path)
