"""Simulated episodes: schema, determinism, counter consistency, availability, input errors."""

import numpy as np
import pytest

from pmoss.contracts.errors import ContractError
from pmoss.contracts.policies import generate
from pmoss.contracts.schedule import Schedule
from pmoss.contracts.snapshot import (
    CORE_FEATURES,
    OFFCORE_LINK,
    OFFCORE_NODE,
    SNAPSHOT_SCHEMA,
    episodes_to_table,
)
from pmoss.sim import load_sim_machine, simulate, simulate_batch, throughput
from pmoss.sim.episode import noise_key, resolve

N, N_REC = 32, 200_000
KW = dict(n_records=N_REC, window_s=2.0)


@pytest.fixture(scope="module")
def snb():
    return load_sim_machine("intel-snb-4s")


def test_row_fits_the_snapshot_schema(snb):
    rows = simulate_batch(snb, "ycsb-a", "uniform", [generate(k, snb, N, 1) for k in ("sn-mixed", "os-interleave")], seeds=[1, 2], **KW)
    table = episodes_to_table(rows)
    assert table.schema.equals(SNAPSHOT_SCHEMA, check_metadata=False) and table.num_rows == 2
    r = rows[0]
    assert (r["source"], r["counter_mode"], r["host"]) == ("sim", "sim", snb.name)
    assert r["collector"].startswith("pmoss.sim ")
    assert r["throughput_qps"] == pytest.approx(np.sum(r["queries"]) / 2.0)
    assert len(r["slice_lo"]) == N and all(len(r[f]) == N for f in CORE_FEATURES if r[f] is not None)


def test_deterministic_by_seed_and_noisy_across_seeds(snb):
    s = generate("sn-grouped", snb, N, 0)
    a, b = (simulate(snb, "ycsb-c", "dense", s, seed=7, **KW) for _ in range(2))
    c = simulate(snb, "ycsb-c", "dense", s, seed=8, **KW)
    assert a["episode_id"] == b["episode_id"] != c["episode_id"]
    assert a["throughput_qps"] == b["throughput_qps"] != c["throughput_qps"]
    assert np.array_equal(a["llc_misses"], b["llc_misses"])
    mean = throughput(snb, "ycsb-c", "dense", [s], n_records=N_REC)[0]
    assert abs(a["throughput_qps"] / mean - 1) < 0.15


def test_noise_follows_the_placement_not_the_kind_name(snb):
    """One placement under two kind names (a `learned` pick of a heuristic's groups) reads the same
    on the same seed and run; another placement, seed, run or memory policy reads differently."""
    s = generate("sn-grouped", snb, N, 0)
    same = Schedule.from_groups(snb, s.group_index(snb), model="test")
    a, b = simulate_batch(snb, "ycsb-a", "uniform", [s, same], seeds=3, run_indices=1, **KW)
    assert same.kind == "learned" and a["episode_id"] != b["episode_id"]
    assert a["throughput_qps"] == b["throughput_qps"] and np.array_equal(a["llc_misses"], b["llc_misses"])
    other = generate("sn-spread", snb, N, 0)
    c, d, e = simulate_batch(snb, "ycsb-a", "uniform", [other, s, s], seeds=[3, 4, 3], run_indices=[1, 1, 2], **KW)
    assert len({a["throughput_qps"], c["throughput_qps"], d["throughput_qps"], e["throughput_qps"]}) == 4
    # The memory policy is part of the key: the any-worker kinds run on the same workers, so only it
    # (and os-default's loader node) tells their noise streams apart.
    inp = resolve(snb, "ycsb-a", "uniform", N_REC, 2.0)
    every = np.full(N, 0)
    keys = {noise_key(inp, generate(k, snb, N, 0), every, 3, 1) for k in ("os-default", "os-interleave", "se-numa")}
    assert len(keys) == 3


def test_one_node_machine_reads_any_worker_kinds_as_its_node_group():
    """On one node every kind puts pages on that node and "every worker" is the node's group: the
    any-worker kinds, sn-numa and a learned pick of its groups are one placement and read one noise
    stream (a tie measures as a tie); a placement on other workers still reads its own."""
    grace = load_sim_machine("nvidia-grace")
    same = [generate(k, grace, N, 0) for k in ("os-default", "os-interleave", "se-numa", "sn-numa")]
    same.append(Schedule.from_groups(grace, same[-1].group_index(grace), model="test"))
    other = generate("sn-grouped", grace, N, 0)
    for w in ("ycsb-c", "rsi-20-30-50"):  # inserts too: os-default's first touch lands on the one node
        rows = simulate_batch(grace, w, "dense", [*same, other], seeds=3, run_indices=1, **KW)
        assert len({r["throughput_qps"] for r in rows[:-1]}) == 1 != len({r["throughput_qps"] for r in rows})
        assert all(np.array_equal(rows[0]["llc_misses"], r["llc_misses"]) for r in rows[1:-1])


def test_counters_are_consistent(snb):
    scheds = [generate("sn-spread", snb, N, 0), generate("os-interleave", snb, N, 0)]
    one, shared = simulate_batch(snb, "scan", "dense", scheds, seeds=3, n_records=5_000_000)  # > the L3s
    assert np.all(np.asarray(one["remote_dram_loads"]) == 0)  # one-core kinds keep memory local
    for r in (one, shared):
        q = np.asarray(r["queries"], dtype=float)
        assert all(np.all(np.asarray(r[f]) >= 0) for f in CORE_FEATURES if r[f] is not None)
        dram = np.asarray(r["local_dram_loads"]) + np.asarray(r["remote_dram_loads"])
        assert np.all(dram <= np.asarray(r["llc_misses"]) * 1.1 + 1)
        assert np.all(np.asarray(r["llc_misses"]) <= np.asarray(r["l1d_misses"]) * 1.1 + 1)
        assert np.all(np.asarray(r["cycles"]) >= np.asarray(r["cycles_mem_any"]))
        assert np.allclose(np.asarray(r["keys_scanned"]) / q, 50.5, rtol=0.1)
    assert np.sum(shared["remote_dram_loads"]) > 2 * np.sum(shared["local_dram_loads"])  # 3 of 4 nodes remote
    assert sum(shared["imc_read_bytes"]) > 0 and len(shared["link_in_bytes"]) == len(snb.links)


@pytest.mark.parametrize("name, offcore", [("amd-milan-nps1", False), ("nvidia-grace", False), ("intel-skx-4s", True)])
def test_vendor_availability_is_null_not_zero(name, offcore):
    m = load_sim_machine(name)
    r = simulate(m, "ycsb-c", "dense", generate("sn-grouped", m, N, 0), seed=0, **KW)
    for f in OFFCORE_NODE + OFFCORE_LINK:
        assert (r[f] is not None) == offcore and (f in r["unavailable"]) != offcore
    for f in r["unavailable"]:
        assert r[f] is None
    assert all(r[f] is not None for f in CORE_FEATURES if f not in r["unavailable"])


def test_batch_matches_single_episodes(snb):
    scheds = [generate(k, snb, N, 2) for k in ("sn-random", "sn-numa", "os-default")]
    batch = simulate_batch(snb, "rsi-25-50-25", "clustered", scheds, seeds=[5, 6, 7], **KW)
    single = [simulate(snb, "rsi-25-50-25", "clustered", s, seed=sd, **KW) for s, sd in zip(scheds, [5, 6, 7])]
    for a, b in zip(batch, single):
        assert a["throughput_qps"] == pytest.approx(b["throughput_qps"], rel=1e-9)


def test_schedule_for_another_machine_is_rejected_naming_the_slice(snb):
    other = load_sim_machine("intel-skx-4s")
    bad = generate("sn-grouped", other, N, 0).model_copy(update={"machine": snb.name})
    with pytest.raises(ContractError, match=r"schedules\[0\]: slice \d+"):
        simulate(snb, "ycsb-c", "dense", bad, seed=0, **KW)
    wrong = Schedule(machine=snb.name, n_slices=2, kind="sn-grouped", node=[0, 0], core=[0, 1])  # reserved CPUs
    with pytest.raises(ContractError, match="slice 0: core 0 is reserved"):
        simulate(snb, "ycsb-c", "dense", wrong, seed=0, **KW)


@pytest.mark.parametrize(
    "kwargs, field",
    [({"n_records": 0}, "n_records"), ({"n_records": -5}, "n_records"), ({"window_s": 0.0}, "window_s"),
     ({"dataset": "zipfian"}, "dataset"), ({"workload": "ycsb-z"}, "workload"), ({"n_records": 10}, "n_slices")],
)
def test_bad_inputs_name_the_field(snb, kwargs, field):
    args = {"workload": "ycsb-c", "dataset": "dense", "n_records": N_REC, "window_s": 1.0} | kwargs
    with pytest.raises(ContractError, match=field):
        simulate(snb, args.pop("workload"), args.pop("dataset"), generate("sn-grouped", snb, N, 0), seed=0, **args)


def test_bad_action_arrays_are_rejected(snb):
    with pytest.raises(ContractError, match="actions"):
        throughput(snb, "ycsb-c", "dense", np.full((1, N), 999), n_records=N_REC)


def test_counts_never_negative_on_any_pool_machine():
    """Raw counts are physical: rounding in miss rates must not produce -1e-8 (dataset validation rejects it)."""
    import numpy as np

    from pmoss.contracts.policies import BASELINE_KINDS, generate
    from pmoss.contracts.snapshot import SLICE_FEATURES
    from pmoss.contracts.workload import PAPER_WORKLOADS
    from pmoss.sim import list_machines, load_sim_machine, simulate_batch

    for name in list_machines():
        m = load_sim_machine(name)
        schedules = [generate(k, m, 64, seed=s) for k in BASELINE_KINDS for s in (0, 1)]
        for w in PAPER_WORKLOADS:
            for row in simulate_batch(m, w, "dense", schedules, seeds=list(range(len(schedules)))):
                for f in SLICE_FEATURES:
                    if row[f] is not None:
                        assert np.min(row[f]) >= 0, (name, w, row["schedule_kind"], f)
