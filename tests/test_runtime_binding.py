"""The native runtime through its cffi binding (needs build/runtime/libpmoss.so)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pmoss.collect import runtime as rtmod

pytestmark = pytest.mark.skipif(
    not rtmod.library_path().exists(),
    reason=f"{rtmod.library_path()} is not built (cmake -S . -B build && cmake --build build)",
)

N_SLICES = 32


@pytest.fixture(scope="module")
def rt() -> rtmod.Runtime:
    return rtmod.Runtime(n_keys=50_000, dataset="dense", seed=3, n_slices=N_SLICES, queue_capacity=64)


def probed(**kw) -> rtmod.Runtime:
    """A runtime with the collector's probe; the test is skipped where libpmoss has no collector."""
    try:
        return rtmod.Runtime(**kw)
    except rtmod.NativeRuntimeError as exc:
        pytest.skip(f"collector not linked into libpmoss: {exc}")


def _one_core(rt: rtmod.Runtime, shift: int = 0) -> tuple[list[int], list[int]]:
    cpus = rt.worker_cpus()
    core = [cpus[(i // 4 + shift) % len(cpus)] for i in range(N_SLICES)]
    return [rt.cpu_node(c) for c in core], core


def test_topology_and_bounds(rt: rtmod.Runtime) -> None:
    assert rt.n_nodes >= 1 and rt.worker_cpus()
    lower = rt.slice_bounds()
    assert len(lower) == N_SLICES and lower[0] == 0 and lower == sorted(lower)
    assert rt.n_keys() == 50_000
    assert rt.lookup(49_999) == 49_999 and rt.lookup(50_000) is None


@pytest.mark.parametrize("workload", ["ycsb-a", "ycsb-c", "ycsb-e", "rsi-25-50-25"])
def test_run_counts_add_up(rt: rtmod.Runtime, workload: str) -> None:
    out = rt.run(workload, seconds=0.1, seed=5)
    assert out["completed"] > 0
    assert out["completed"] == out["dispatched"]
    assert sum(out["slice_queries"]) == out["completed"]
    assert out["throughput"] > 0
    snap = out["stats"]  # no probe, no off-core hook: own counts only, no off-core rows
    assert snap.slices.schema.names == ["slice", "core", "node", "queries", "nodes_visited", "keys_scanned", "profiled_queries"]
    assert snap.offcore.num_rows == 0 and snap.offcore_error == ""


def test_every_kind_enforces(rt: rtmod.Runtime) -> None:
    for i, kind in enumerate(["sn-grouped", "sn-spread", "sn-mixed", "sn-random", "learned"]):
        node, core = _one_core(rt, i)
        rep = rt.set_schedule(node, core, kind)
        assert rep.pages_failed == 0
        assert rt.run("ycsb-c", 0.05, seed=i)["completed"] > 0
    for kind, node in [("se-numa", 0), ("sn-numa", 0), ("os-interleave", -1), ("os-default", -1)]:
        rt.set_schedule([node] * N_SLICES, [-1] * N_SLICES, kind)


def test_mixed_width_schedule_runs_and_loses_no_key(rt: rtmod.Runtime) -> None:
    """Execution groups through the binding: every width at once, then a bad width refused by name."""
    node, core = _one_core(rt)
    widths = [("thread", "core", "l3", "node")[i % 4] for i in range(N_SLICES)]
    rep = rt.set_schedule(node, core, "learned", width=widths)
    assert rep.pages_failed == 0
    out = rt.run("ycsb-c", 0.05, seed=7)
    assert out["completed"] > 0 and out["completed"] == out["dispatched"]
    widths[3] = "socket"
    with pytest.raises(rtmod.ScheduleError, match="socket"):
        rt.set_schedule(node, core, "learned", width=widths)
    with pytest.raises(rtmod.ScheduleError, match="width"):
        rt.set_schedule(node, core, "sn-grouped", width=["node"] * N_SLICES)  # a one-core kind is width thread only


def test_bad_schedule_names_first_slice(rt: rtmod.Runtime) -> None:
    node, core = _one_core(rt)
    core[9], core[12] = 4095, -1
    with pytest.raises(rtmod.ScheduleError, match=r"^slice 9: core 4095 does not exist"):
        rt.set_schedule(node, core, "sn-grouped")
    with pytest.raises(rtmod.ScheduleError, match="schedule has 3 slices but the runtime has 32"):
        rt.set_schedule([0, 0, 0], [-1, -1, -1], "se-numa")
    with pytest.raises(rtmod.ScheduleError, match="unknown schedule kind"):
        rt.set_schedule([0] * N_SLICES, [-1] * N_SLICES, "sn-best")
    # the previous schedule keeps running
    assert rt.run("ycsb-b", 0.05)["completed"] > 0


def test_schedule_json(rt: rtmod.Runtime) -> None:
    node, core = _one_core(rt)
    doc = {"schema_version": 1, "machine": "host", "n_slices": N_SLICES, "kind": "sn-grouped",
           "node": node, "core": core, "provenance": {"generator": "test", "seed": 1}}
    rt.set_schedule_json(json.dumps(doc))
    doc["node"] = node[:-1]
    with pytest.raises(rtmod.ScheduleError, match=f"node: has {N_SLICES - 1} entries but n_slices is {N_SLICES}"):
        rt.set_schedule_json(json.dumps(doc))


def test_snapshot_cumulative(rt: rtmod.Runtime) -> None:
    before = rt.snapshot()
    out = rt.run("ycsb-a", 0.05, seed=9)
    after = rt.snapshot()
    gained = [a - b for a, b in zip(after.column("queries"), before.column("queries"))]
    assert gained == out["slice_queries"] == after.slices_since(before).column("queries").to_pylist()
    assert after.column("slice") == list(range(N_SLICES))


def test_snapshot_carries_the_schedule_in_force(rt: rtmod.Runtime) -> None:
    node, core = _one_core(rt, 1)
    rt.set_schedule(node, core, "sn-grouped")
    snap = rt.snapshot()
    assert snap.column("core") == core and snap.column("node") == node
    rt.set_schedule([-1] * N_SLICES, [-1] * N_SLICES, "os-default")
    assert rt.snapshot().column("core") == [-1] * N_SLICES


def test_bad_workload_and_config() -> None:
    with pytest.raises(rtmod.NativeRuntimeError, match="unknown dataset"):
        rtmod.Runtime(n_keys=10, dataset="sparse", n_slices=4)
    small = rtmod.Runtime(n_keys=1000, n_slices=4)
    with pytest.raises(rtmod.NativeRuntimeError, match="ycsb-q"):
        small.run("ycsb-q", 0.01)


def test_collector_probe_software(perf_events) -> None:
    rt = probed(n_keys=20_000, n_slices=8, probe="software")
    out = rt.run("ycsb-c", 0.1)
    stats = out["stats"].slices.to_pydict()
    assert stats["queries"] == out["slice_queries"]
    busy = [i for i, q in enumerate(out["slice_queries"]) if q > 0]
    assert busy and all(stats["task_clock_ns"][i] > 0 for i in busy)
    # no hardware PMU in this VM: hardware features are null, never 0
    if stats["llc_misses"][busy[0]] is None:
        assert all(stats["llc_misses"][i] is None for i in busy)
    with pytest.raises(rtmod.NativeRuntimeError, match="probe must be one of"):
        rtmod.Runtime(n_keys=100, n_slices=2, probe="magic")


def test_collector_probe_hardware_only(perf_events) -> None:
    """hardware-only reaches the collector as hardware mode + hardware_only: without a PMU the
    run fails (hardware mode never degrades); with one, the software extras are null."""
    rt = probed(n_keys=20_000, n_slices=8, probe="hardware-only")
    pmu = perf_events  # not /sys/.../devices/cpu: hybrid Intel names its PMUs cpu_core/cpu_atom,
    usable = pmu["model"] is not None and pmu["hardware_events"]  # and a VM's libpfm4 may know a CPU the kernel cannot count
    try:
        out = rt.run("ycsb-c", 0.1)
    except rtmod.NativeRuntimeError:
        assert not usable, f"hardware events open here ({pmu['reason']}): hardware-only must open"
        return
    assert usable, f"hardware-only opened although {pmu['reason']}"
    stats = out["stats"].slices.to_pydict()
    busy = [i for i, q in enumerate(out["slice_queries"]) if q > 0]
    assert all(stats["task_clock_ns"][i] > 0 and stats["page_faults"][i] is None for i in busy)


def test_batches_and_probe_reads(perf_events) -> None:
    """Per-slice batches: a run of B batches costs B + 1 probe reads; without a probe, no reads."""
    rt = probed(n_keys=20_000, n_slices=8, probe="software", batch_queries=50, batch_max_wait_us=20_000, probe_period_us=0)
    out = rt.run("ycsb-c", 0.2)
    assert out["completed"] == out["dispatched"] == sum(out["slice_queries"])
    assert out["batches"] * 50 >= out["completed"] >= out["batches"] > 0
    assert out["batches"] < out["probe_reads"] <= 2 * out["batches"]
    assert 0 <= out["full_batches"] <= out["batches"]
    plain = rtmod.Runtime(n_keys=20_000, n_slices=8).run("ycsb-c", 0.05)
    assert plain["probe_reads"] == 0 and plain["batches"] > 0
    # an explicit wait batches without a probe too
    held = rtmod.Runtime(n_keys=20_000, n_slices=8, batch_max_wait_us=20_000).run("ycsb-c", 0.1)
    assert held["probe_reads"] == 0 and held["completed"] == held["dispatched"]
    with pytest.raises(rtmod.NativeRuntimeError, match="batch_max_wait_us"):
        rtmod.Runtime(n_keys=100, n_slices=2, batch_max_wait_us=-1)


def test_sampled_probe_estimates(perf_events) -> None:
    """The default probe period samples windows: fewer readings than batches, every busy slice
    profiled at least once, and the snapshot's totals are the windows' counts scaled by
    queries / profiled_queries (collector.episode_columns)."""
    from pmoss.collect.collector import episode_columns

    rt = probed(n_keys=20_000, n_slices=8, probe="software")
    out = rt.run("ycsb-c", 0.2)
    st = out["stats"].slices.to_pydict()
    busy = [i for i, q in enumerate(st["queries"]) if q > 0]
    assert busy and all(0 < st["profiled_queries"][i] <= st["queries"][i] for i in busy)
    assert 0 < out["probe_reads"] < out["batches"]
    cols = episode_columns(out["stats"].slices)
    for i in busy:
        assert cols["task_clock_ns"][i] == pytest.approx(st["task_clock_ns"][i] * st["queries"][i] / st["profiled_queries"][i])
    with pytest.raises(rtmod.NativeRuntimeError, match="probe_period_us"):
        rtmod.Runtime(n_keys=100, n_slices=2, probe_period_us=-1)


def test_set_profiling_toggles_the_probe_per_run(perf_events) -> None:
    """set_profiling(False): the next runs read no probe and add nothing to the probe columns, on
    the same tree; True again reads as before; True without a probe is refused."""
    rt = probed(n_keys=20_000, n_slices=8, probe="software", probe_period_us=0)
    on = rt.run("ycsb-c", 0.1)
    assert on["probe_reads"] > 0
    before = on["stats"].slices.to_pydict()
    rt.set_profiling(False)
    off = rt.run("ycsb-c", 0.1, seed=2)
    after = off["stats"].slices.to_pydict()
    assert off["probe_reads"] == 0 and off["completed"] == off["dispatched"] > 0
    assert after["profiled_queries"] == before["profiled_queries"] and after["task_clock_ns"] == before["task_clock_ns"]
    assert sum(after["queries"]) == sum(before["queries"]) + off["completed"]  # the runs still count
    rt.set_profiling(True)
    assert rt.run("ycsb-c", 0.1, seed=3)["probe_reads"] > 0
    with pytest.raises(rtmod.NativeRuntimeError, match="probe"):
        rtmod.Runtime(n_keys=100, n_slices=2).set_profiling(True)


def test_set_probe_period_changes_the_next_runs(perf_events) -> None:
    """set_probe_period on one tree: 0 reads around every batch, an hour profiles each slice's
    first batch only (at most two reads a slice per worker), None is the default again; a
    runtime without a probe, or a period out of range, is refused."""
    rt = probed(n_keys=20_000, n_slices=8, probe="software")
    rt.set_probe_period(0)
    every = rt.run("ycsb-c", 0.1)
    assert every["probe_reads"] > every["batches"] > 0
    rt.set_probe_period(3600 * 10**6)
    rare = rt.run("ycsb-c", 0.1, seed=2)
    assert rare["batches"] > 2 * 8 and 0 < rare["probe_reads"] <= 2 * 8 * len(rt.worker_cpus())
    rt.set_probe_period(None)
    assert rt.run("ycsb-c", 0.1, seed=3)["probe_reads"] > 0
    with pytest.raises(rtmod.NativeRuntimeError, match="probe_period_us"):
        rt.set_probe_period(-1)
    with pytest.raises(rtmod.NativeRuntimeError, match="probe"):
        rtmod.Runtime(n_keys=100, n_slices=2).set_probe_period(0)


def test_batch_wait_default_matches_header() -> None:
    header = (Path(__file__).resolve().parents[1] / "runtime/include/pmoss/runtime.h").read_text()
    m = re.search(r"#define PM_BATCH_MAX_WAIT_US_DEFAULT (\d+)", header)
    assert m and int(m.group(1)) == rtmod.BATCH_MAX_WAIT_US_DEFAULT


def test_open_loop_keeps_the_offered_rate(rt: rtmod.Runtime) -> None:
    """offered_qps paces the routers: the run never runs ahead of the offered rate (closed loop
    here does millions/s), every query is served, and a negative rate is refused."""
    out = rt.run("ycsb-c", 0.3, offered_qps=20_000)
    assert out["completed"] == out["dispatched"] > 0
    assert out["throughput"] <= 20_000 * 1.05
    with pytest.raises(rtmod.NativeRuntimeError, match="offered_qps"):
        rt.run("ycsb-c", 0.1, offered_qps=-1)
