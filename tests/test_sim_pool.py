"""The simulated pool: descriptors load, match their spec sheets, and unknown names fail clearly."""

import pytest

from pmoss.contracts.errors import ContractError
from pmoss.contracts.machine import default_reserved
from pmoss.sim import PAPER_MACHINES, UNSEEN_MACHINES, list_machines, load_sim_machine
from pmoss.sim.descriptors import SPECS, render
from pmoss.sim.pool import descriptor_path


def test_pool_is_the_papers_and_the_unseen_set():
    assert set(list_machines()) == set(PAPER_MACHINES) | set(UNSEEN_MACHINES)
    assert not set(PAPER_MACHINES) & set(UNSEEN_MACHINES)


@pytest.mark.parametrize("name", list_machines())
def test_descriptor_loads_with_source_and_default_reservations(name):
    m = load_sim_machine(name)
    assert m.name == name and m.source
    assert m.reserved_cpus == default_reserved(m.cpus, m.numa_nodes)
    text = descriptor_path(name).read_text()
    assert text.startswith("#") and "source:" in text


@pytest.mark.parametrize(
    "name, sockets, nodes, cpus, l3_domains, smt",
    [
        ("amd-milan-nps1", 2, 2, 128, 16, 2),
        ("amd-milan-nps4", 2, 8, 128, 16, 2),
        ("intel-skx-4s", 4, 8, 184, 8, 2),
        ("intel-snb-4s", 4, 4, 64, 4, 2),
        ("nvidia-grace", 1, 1, 72, 1, 1),
        ("ibm-power8", 2, 2, 160, 20, 8),
        ("intel-spr-snc4", 2, 8, 224, 8, 2),
        ("amd-genoa-nps4", 2, 8, 384, 24, 2),
        ("ampere-altra", 1, 1, 80, 1, 1),
        ("aws-graviton3", 1, 1, 64, 1, 1),
        ("amd-bergamo-nps4", 1, 4, 256, 16, 2),
    ],
)
def test_topology_matches_spec(name, sockets, nodes, cpus, l3_domains, smt):
    m = load_sim_machine(name)
    assert (m.sockets, m.numa_nodes, len(m.cpus), m.n_l3_domains) == (sockets, nodes, cpus, l3_domains)
    assert len(m.cpus) // len({c.core for c in m.cpus}) == smt
    per_node = [sum(c.node == node for c in m.cpus) for node in range(m.numa_nodes)]
    assert max(per_node) - min(per_node) <= smt  # uneven sockets (23 cores in 2 SNC halves) differ by one core


def test_power8_has_l4_and_skx_is_the_papers_92_cores_x_2_threads():
    assert load_sim_machine("ibm-power8").caches.l4_mib > 0
    skx = load_sim_machine("intel-skx-4s")  # P-MOSS §7.1: 4 sockets, 92 cores x 2 threads, SNC2
    assert len({c.core for c in skx.cpus}) == 92 and len(skx.cpus) == 184
    assert sorted({sum(c.node == n for c in skx.cpus) for n in range(8)}) == [22, 24]


def test_shipped_yaml_is_what_the_generator_writes():
    for spec in SPECS:
        assert descriptor_path(spec.name).read_text() == render(spec)


def test_unknown_machine_names_it_and_the_known_ones():
    with pytest.raises(ContractError, match="'nope'.*known: .*amd-milan-nps1.*gen-<seed>"):
        load_sim_machine("nope")
