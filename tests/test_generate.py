"""Generated machines (pmoss.sim.generate, docs/machine-model.md §17): byte-reproducible
descriptors inside the documented ranges, the `gen:A-B` pool syntax, the seed splits that keep
validation and unseen machines out of training, and the simulator and `pmoss collect` on them."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from pmoss.collect.plan import load_pool
from pmoss.contracts.errors import ContractError
from pmoss.contracts.io import load_model
from pmoss.contracts.machine import default_reserved, load_machine
from pmoss.contracts.policies import BASELINE_KINDS, generate
from pmoss.evaluate import EvalConfig
from pmoss.sim import UNSEEN_MACHINES, UnknownMachineError, check_training_machines, expand_generated, is_sim_machine, load_sim_machine, throughput
from pmoss.sim.descriptors import SPECS, render
from pmoss.sim.generate import GENERATED_SPLITS, MAX_RANGE, SHIPPED_SHAPES, generated_machine, generated_spec, split_of
from pmoss.sim.pool import descriptor_text

ROOT = Path(__file__).resolve().parents[1]
POOLS = ROOT / "datasets" / "pools"
# sha256 of render(generated_spec(0)). A change of the sampler, its ranges or the descriptor
# writer changes it: that changes every generated machine, so every dataset built on them. Update
# it only on purpose (and say so in the commit).
PINNED_SEED, PINNED_SHA256 = 0, "2ab2f874e9fb87585c28a20b3aba015311d3c1b4a3dbced5718b03caefdc5b4d"


def _sha(seed: int) -> str:
    return hashlib.sha256(render(generated_spec(seed)).encode()).hexdigest()


def test_descriptor_bytes_are_pinned_and_the_same_in_another_process():
    assert _sha(PINNED_SEED) == PINNED_SHA256
    seeds = [0, 17, 4321, 100_003, 900_001]
    code = "import hashlib, sys; from pmoss.sim.descriptors import render; from pmoss.sim.generate import generated_spec; " \
           "print(' '.join(hashlib.sha256(render(generated_spec(int(s))).encode()).hexdigest() for s in sys.argv[1:]))"  # fmt: skip
    other = subprocess.run([sys.executable, "-c", code, *map(str, seeds)], capture_output=True, text=True, check=True, timeout=120)
    assert other.stdout.split() == [_sha(s) for s in seeds]


def _domains(m) -> dict[int, set]:
    out: dict[int, set] = {}
    for c in m.cpus:
        out.setdefault(c.l3_domain, set()).add((c.node, c.socket))
    return out


@pytest.mark.parametrize("seed", [*range(150), *range(100_000, 100_010), *range(900_000, 900_010)])
def test_generated_machine_is_valid_and_inside_the_documented_ranges(seed):
    spec, m = generated_spec(seed), generated_machine(seed)
    threads, smt = len(m.cpus), spec.smt
    assert m.name == f"gen-{seed}" and 16 <= threads <= 512 and threads == spec.sockets * spec.cores_per_socket * smt
    assert spec.sockets in (1, 2, 4, 8) and 1 <= spec.nodes_per_socket <= 8
    assert m.vendor in ("intel", "amd", "arm", "ibm")
    assert smt in ((1, 2) if m.vendor in ("intel", "amd") else (1,) if m.vendor == "arm" else (4, 8))  # SMT4/8: POWER only
    assert m.vendor == "ibm" or m.caches.l4_mib is None  # an L4 (Centaur buffers) only on POWER
    per_domain = spec.cores_per_socket // spec.l3_per_socket
    assert 4 <= per_domain <= 16 if m.vendor != "ibm" else per_domain in (1, 2)  # POWER: an L3 region per core (pair)
    assert all(len(where) == 1 for where in _domains(m).values())  # an L3 domain never spans two nodes
    assert m.reserved_cpus == default_reserved(m.cpus, m.numa_nodes)
    d = np.array(m.distance)
    assert (np.diag(d) == m.local_latency_ns).all() and (d >= m.local_latency_ns).all() and (d == d.T).all()
    assert 75 <= m.local_latency_ns <= 125 and d.max() <= 125 + 110 + 70  # local + one hop + one further hop at most
    assert all(23 <= bw <= 576 for bw in m.mem_bandwidth_gbps) and 1.9 <= m.freq_ghz <= 3.8  # Rome NPS8 .. Zen 5c NPS1 (12 x 6000)
    assert (spec.vendor, spec.sockets, spec.nodes_per_socket, spec.l3_per_socket, spec.cores_per_socket, smt) not in SHIPPED_SHAPES
    assert split_of(seed) == ("train" if seed < 10_000 else "validation" if seed < 900_000 else "unseen")


def test_pool_range_syntax_is_inclusive_and_checked(tmp_path):
    assert expand_generated(["intel-skx-4s", "gen:3-5", "x.yaml"]) == ["intel-skx-4s", "gen-3", "gen-4", "gen-5", "x.yaml"]
    assert expand_generated(["gen:7-7"]) == ["gen-7"]
    for bad in ("gen:5-3", "gen:5", "gen:a-b", f"gen:0-{MAX_RANGE}"):
        with pytest.raises(ContractError, match="not a generated range"):
            expand_generated([bad])
    pool = tmp_path / "pool.yaml"
    pool.write_text('name: p\nmachines: [intel-skx-4s, "gen:10-12"]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\n')
    assert load_pool(pool).machines == ["intel-skx-4s", "gen-10", "gen-11", "gen-12"]
    pool.write_text('name: p\nmachines: ["gen:12-10"]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\n')
    with pytest.raises(ContractError, match=r"machines.*'gen:12-10' is not a generated range"):
        load_pool(pool)
    assert load_model(EvalConfig, POOLS / "val-generated.yaml").machines == [f"gen-{s}" for s in range(100_000, 100_008)]


def test_generated_names_load_cached_and_unknown_ones_fail():
    m = load_sim_machine("gen-17")
    assert m is load_sim_machine("gen-17") and m == generated_machine(17)
    assert is_sim_machine("gen-17") and is_sim_machine("ibm-power8") and not is_sim_machine("gen-017") and not is_sim_machine("gen")
    assert yaml.safe_load(descriptor_text("gen-17"))["name"] == "gen-17"
    for bad in ("gen-017", "gen--1", "genx-3"):
        with pytest.raises(UnknownMachineError, match="gen-<seed>"):
            load_sim_machine(bad)


def test_a_descriptor_file_cannot_take_a_generated_name(tmp_path):
    data = yaml.safe_load(descriptor_text("gen-3"))
    data["freq_ghz"] = 9.0
    (tmp_path / "fake.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ContractError, match="'gen-3' is a pool machine with another descriptor"):
        load_sim_machine(str(tmp_path / "fake.yaml"))


def test_single_node_validation_set_is_every_single_node_validation_machine():
    """val-single-node.yaml (docs/model.md, "Single-node machines") holds what its comment says."""
    from pmoss.sim import load_sim_machine

    lo, hi = GENERATED_SPLITS["validation"]
    single = [f"gen-{s}" for s in range(lo, hi + 1) if load_sim_machine(f"gen-{s}").numa_nodes == 1]
    assert sorted(load_model(EvalConfig, POOLS / "val-single-node.yaml").machines) == sorted(single)


def test_splits_keep_validation_and_unseen_out_of_every_training_pool():
    ranges = sorted(GENERATED_SPLITS.values())
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))  # disjoint
    training = [p for p in sorted(POOLS.glob("*.yaml")) if "episodes_per_cell" in yaml.safe_load(p.read_text())]
    assert {"tiny.yaml", "paper.yaml", "tiny-generated.yaml", "paper-generated.yaml"} <= {p.name for p in training}
    for p in training:
        check_training_machines(load_pool(p).machines, str(p))
    assert any(m.startswith("gen-") for m in load_pool(POOLS / "tiny-generated.yaml").machines)
    for name in ("val-generated.yaml", "val-generated-2.yaml", "val-demo.yaml", "val-grid.yaml", "val-single-node.yaml"):  # validation seeds only
        val = [m for m in load_model(EvalConfig, POOLS / name).machines if m.startswith("gen-")]
        assert val and all(split_of(int(m.removeprefix("gen-"))) == "validation" for m in val), name
    unseen = load_model(EvalConfig, POOLS / "eval-unseen-full.yaml").machines
    assert set(UNSEEN_MACHINES) <= set(unseen)
    gens = [m for m in unseen if m.startswith("gen-")]
    assert len(gens) >= 2 and all(split_of(int(m.removeprefix("gen-"))) == "unseen" for m in gens)
    demo = load_model(EvalConfig, POOLS / "eval-unseen.yaml").machines  # the demo's cut of it
    assert set(demo) <= set(unseen) and any(m.startswith("gen-") for m in demo)
    for held in ("ibm-power8", "amd-genoa-nps4", "gen-100000", "gen-900000", "gen-50000"):
        with pytest.raises(ContractError, match=f"'{held}' is"):
            check_training_machines(["intel-skx-4s", held])
    with pytest.raises(ContractError, match="'gen-10000' is a generated seed of no split"):
        check_training_machines(["gen:9998-10000"])


def test_unseen_descriptors_are_shipped_and_unseen_by_shape():
    shipped = {s.name for s in SPECS}
    assert set(UNSEEN_MACHINES) <= shipped
    # the generator redraws any shipped shape, so no generated machine twins an unseen one
    assert len(SHIPPED_SHAPES) == len(SPECS)


@pytest.mark.parametrize("seed", range(20))
def test_simulator_runs_every_baseline_on_generated_machines(seed):
    m = load_sim_machine(f"gen-{seed}")
    schedules = [generate(k, m, 32, seed=1) for k in BASELINE_KINDS]
    x = throughput(m, "ycsb-a", "dense", schedules, n_records=100_000)
    assert x.shape == (len(BASELINE_KINDS),) and np.isfinite(x).all() and (x > 0).all(), x


def pmoss(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pmoss", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_collect_and_build_carry_the_generated_descriptor(tmp_path):
    """`pmoss collect` on a pool with a generated range, then `pmoss dataset build`: the dataset's
    machines/ holds the generated descriptor, the same machine the generator makes."""
    pool = tmp_path / "pool.yaml"
    pool.write_text('name: g\nmachines: ["gen:5-5"]\nworkloads: [ycsb-c]\nshared_kinds: [os-default]\n'
                    "episodes_per_cell: 3\nn_slices: 16\nn_records: 100000\n")  # fmt: skip
    r = pmoss("collect", str(pool), "-o", "raw", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = pmoss("dataset", "build", "raw", "-o", "ds", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "ds" / "machines").iterdir()) == ["gen-5.yaml"]
    assert load_machine(tmp_path / "ds" / "machines" / "gen-5.yaml") == generated_machine(5)
