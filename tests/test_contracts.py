"""Contracts as code: bad files name the file and the field; good ones round-trip."""


import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import small_machine
from hypothesis import given, settings
from hypothesis import strategies as st

from pmoss.collect.plan import expand, kind_counts, load_pool
from pmoss.contracts.checksum import stamp_table
from pmoss.contracts.errors import ContractError
from pmoss.contracts.machine import load_machine, save_machine
from pmoss.contracts.policies import BASELINE_KINDS, generate
from pmoss.contracts.schedule import (
    Schedule,
    ScheduleError,
    load_schedule,
    save_schedule,
)
from pmoss.contracts.snapshot import (
    SNAPSHOT_SCHEMA,
    episodes_to_table,
    read_raw,
    write_parquet_atomic,
)


def test_machine_roundtrip(tmp_path, toy_machine):
    save_machine(toy_machine, tmp_path / "m.yaml")
    assert load_machine(tmp_path / "m.yaml") == toy_machine


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d["cpus"].append(dict(d["cpus"][0])), "cpus"),  # a CPU listed twice
        (lambda d: d["cpus"][0].update(node=5), "cpus"),
        (lambda d: d.update(distance=[[90.0]]), "distance"),
        (lambda d: d.update(mem_bandwidth_gbps=[1.0]), "mem_bandwidth_gbps"),
        (lambda d: d["caches"].update(l3_mib=-1), "caches.l3_mib"),
        (lambda d: d.update(reserved_cpus=list(range(12))), "reserved_cpus"),
        (lambda d: d.update(schema_version=99), "schema_version"),
    ],
)
def test_bad_descriptor_names_file_and_field(tmp_path, toy_machine, edit, field):
    data = toy_machine.model_dump(mode="json")
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ContractError) as e:
        load_machine(path)
    assert str(path) in str(e.value) and field.split(".")[0] in str(e.value)


def test_malformed_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ContractError, match="broken.yaml: malformed"):
        load_machine(path)


def test_schedule_validation_names_first_bad_slice(toy_machine):
    s = generate("sn-grouped", toy_machine, 16)
    bad = s.model_copy(update={"node": [1 - n if i == 5 else n for i, n in enumerate(s.node)]})
    with pytest.raises(ScheduleError, match="slice 5: core .* is on node"):
        bad.validate_for(toy_machine)
    reserved = toy_machine.reserved_cpus[0]
    bad = s.model_copy(update={"core": [reserved if i == 3 else c for i, c in enumerate(s.core)],
                               "node": [toy_machine.cpu_by_id[reserved].node if i == 3 else n for i, n in enumerate(s.node)]})
    with pytest.raises(ScheduleError, match="slice 3: core .* is reserved"):
        bad.validate_for(toy_machine)
    with pytest.raises(ValueError, match="node: has 3 entries"):
        Schedule(machine="toy", n_slices=4, kind="sn-random", node=[0, 0, 0], core=[2, 2, 2, 2])


def test_schedule_file_roundtrip(tmp_path, toy_machine):
    s = generate("sn-mixed", toy_machine, 32, seed=4)
    save_schedule(s, tmp_path / "s.json")
    assert load_schedule(tmp_path / "s.json", toy_machine) == s


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(BASELINE_KINDS), nodes=st.integers(1, 4), per=st.integers(1, 8), n=st.integers(1, 300), seed=st.integers(0, 2**31))
def test_generators_valid_and_deterministic(kind, nodes, per, n, seed):
    m = small_machine(nodes=nodes, cpus_per_node=per)
    a, b = generate(kind, m, n, seed), generate(kind, m, n, seed)
    assert a == b and a.n_slices == n and a.validate_for(m)


def test_generator_shapes(toy_machine):
    m = toy_machine
    grouped = generate("sn-grouped", m, 64)
    assert grouped.node == sorted(grouped.node)  # adjacent slices stay together
    spread = generate("sn-spread", m, 64)
    assert all(spread.node[i] != spread.node[i + 1] for i in range(63))  # adjacent slices alternate nodes
    assert set(generate("sn-random", m, 256, seed=1).core) == set(m.worker_cpus)


def test_kind_counts_sum_exactly():
    c = kind_counts({"sn-grouped": 0.146, "sn-mixed": 0.128, "sn-spread": 0.018, "sn-random": 0.71}, 77)
    assert sum(c.values()) == 77 and c["sn-random"] == 55


def test_pool_errors(tmp_path):
    p = tmp_path / "pool.yaml"
    p.write_text("name: x\nmachines: [a]\nworkloads: [ycsb-z]\nepisodes_per_cell: 2\n")
    with pytest.raises(ContractError, match="pool.yaml: field 'workloads'.*unknown workload 'ycsb-z'"):
        load_pool(p)
    p.write_text("name: x\nmachines: [a]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\nmix: {sn-random: 0.5}\n")
    with pytest.raises(ContractError, match="sum to 0.5"):
        load_pool(p)
    p.write_text("name: x\nmachines: [a]\nworkloads: [ycsb-c]\nepisodes_per_cell: 3\n")
    specs = expand(load_pool(p))
    assert len(specs) == 3 and specs == expand(load_pool(p))


def _row(eid: str, n: int = 4) -> dict:
    from pmoss.contracts.snapshot import now_utc

    return dict(
        episode_id=eid, source="sim", machine="toy", host="toy", workload="ycsb-c", workload_params="{}", dataset="dense",
        n_records=100, schedule_kind="sn-random", schedule_provenance="{}", seed=1, run_index=0, n_slices=n, window_s=1.0,
        throughput_qps=10.0, unavailable=["cycles", "imc_read_bytes"], counter_mode="sim", collector="test", timestamp=now_utc(),
        slice_lo=list(range(n)), slice_hi=list(range(1, n + 1)), core=[0] * n, node=[0] * n, queries=[1] * n,
        instructions=np.arange(n, dtype=float), imc_write_bytes=[1.0],
    )


def test_snapshot_roundtrip_keeps_nulls(tmp_path):
    t = episodes_to_table([_row("a"), _row("b")])
    assert t.schema == SNAPSHOT_SCHEMA
    write_parquet_atomic(t, tmp_path / "x" / "part.parquet")
    back = read_raw(tmp_path / "x")
    assert back.num_rows == 2
    assert back["cycles"].null_count == 2 and back["instructions"][0].as_py() == [0, 1, 2, 3]
    assert not list((tmp_path / "x").glob(".*tmp"))


def test_snapshot_reads_files_without_counter_mode_reason(tmp_path):
    """counter_mode_reason came after version-1 files were written: such a file reads as null."""
    t = episodes_to_table([_row("a")])
    assert t["counter_mode_reason"].null_count == 1  # sim rows have none
    old = t.drop_columns(["counter_mode_reason"])
    pq.write_table(stamp_table(old), tmp_path / "old.parquet")
    back = read_raw(tmp_path / "old.parquet")
    assert back.schema == SNAPSHOT_SCHEMA and back["counter_mode_reason"].to_pylist() == [None]


def test_snapshot_rejects_newer_schema_and_garbage(tmp_path):
    t = episodes_to_table([_row("a")])
    meta = dict(t.schema.metadata)
    meta[b"pmoss.schema_version"] = b"99"
    pq.write_table(t.replace_schema_metadata(meta), tmp_path / "new.parquet")
    with pytest.raises(ContractError, match="new.parquet: field 'schema_version': 99 is newer"):
        read_raw(tmp_path / "new.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ContractError, match="junk.parquet: not a readable Parquet"):
        read_raw(tmp_path / "junk.parquet")
    with pytest.raises(ContractError, match="unknown column"):
        episodes_to_table([{**_row("a"), "bogus": 1}])


def test_random_width_widens_a_paper_mix_schedule():
    """Exploration data in group space (#41): the node layout of a paper-mix one-core schedule,
    each slice's group widened to a random width; deterministic by seed."""
    m = small_machine(nodes=2, cpus_per_node=8)
    for seed in range(6):
        s = generate("sn-random-width", m, 96, seed=seed)
        assert s == generate("sn-random-width", m, 96, seed=seed) and s.validate_for(m)
        base = generate(s.provenance["base"], m, 96, seed=seed)
        assert s.node == base.node  # a group is cut to its anchor's node: the layout is the base's
        assert len(set(s.widths())) > 1  # widths vary slice by slice


def test_pool_mix_takes_the_exploration_kind(tmp_path):
    p = tmp_path / "pool.yaml"
    p.write_text("name: x\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nepisodes_per_cell: 4\nmix: {sn-random-width: 0.5, sn-random: 0.5}\n")
    assert load_pool(p).mix["sn-random-width"] == 0.5
    p.write_text("name: x\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nepisodes_per_cell: 4\nmix: {sn-hot: 1.0}\n")
    with pytest.raises(ContractError, match="field 'mix': 'sn-hot' is not a generated mix kind"):
        load_pool(p)
