"""`pmoss collect` on the runtime backend: real episodes on this host, software counters and absent
off-core PMUs labelled, atomic files, deterministic episode ids, resume without duplicates."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
import yaml

from pmoss.collect import collector, testbed
from pmoss.collect.driver import collect, pending, spec_id
from pmoss.collect.plan import load_pool
from pmoss.collect.runtime import library_path
from pmoss.collect.testbed import counter_mode_reason
from pmoss.collect.topology import discover
from pmoss.contracts.snapshot import (
    CORE_FEATURES,
    OFFCORE_LINK,
    OFFCORE_NODE,
    raw_files,
    read_raw,
)
from pmoss.data.dataset import validate_raw

pytestmark = pytest.mark.skipif(not library_path().exists(), reason="libpmoss.so is not built (make native)")

BIN = Path(sys.executable).parent


def write_pool(tmp: Path, episodes_per_cell: int = 2, window_s: float = 0.2) -> Path:
    pool = tmp / "pool.yaml"
    pool.write_text(yaml.safe_dump({
        "name": "host", "backend": "runtime", "machines": ["localhost"], "hosts": {"localhost": "localhost"},
        "workloads": ["ycsb-c", "scan"], "mix": {"sn-random": 1.0}, "shared_kinds": ["os-default"],
        "episodes_per_cell": episodes_per_cell, "n_slices": 16, "n_records": 20000, "window_s": window_s,
    }))  # fmt: skip
    return pool


def planned_ids(pool_file: Path, tmp: Path) -> set[str]:
    """Episode ids from the plan alone (nothing run): what the collected rows must carry."""
    return {spec_id(s, sched) for s, sched in pending(load_pool(pool_file), tmp / "nothing-here")}


def host_has_uncore() -> bool:
    lib = collector.load_library(library_path())
    return bool(collector.discover_uncore(lib)["events"])


def test_runtime_backend_collect_and_resume(tmp_path, perf_events):
    pool = write_pool(tmp_path)
    out = tmp_path / "raw"
    assert collect(load_pool(pool), out, progress=False) == 6
    total, problems = validate_raw(out)
    assert total == 6 and problems == []
    t = read_raw(out).to_pylist()
    pmu = perf_events
    no_uncore = not host_has_uncore()
    for row in t:
        assert row["source"] == "real" and row["throughput_qps"] > 0 and sum(row["queries"]) > 0
        assert row["counter_mode"] in ("software", "hardware")
        if row["counter_mode"] == "software":  # no PMU: hardware counters are null and listed, never 0
            assert row["cycles"] is None and "cycles" in row["unavailable"]
        assert row["counter_mode_reason"] == counter_mode_reason("auto", row["counter_mode"] == "hardware", pmu)
        assert row["task_clock_ns"] is not None and sum(row["task_clock_ns"]) > 0
        assert row["keys_scanned"] is not None
        if no_uncore:  # this host: no memory-controller / link PMU, so off-core is null and listed
            for name in OFFCORE_NODE + OFFCORE_LINK:
                assert row[name] is None and name in row["unavailable"], name
    scans = [r for r in t if r["workload"] == "scan"]
    assert all(sum(r["keys_scanned"]) > 0 for r in scans)
    assert set(CORE_FEATURES) - set(t[0]["unavailable"]) >= {"task_clock_ns"}
    assert {r["episode_id"] for r in t} == planned_ids(pool, tmp_path)  # deterministic ids
    assert collect(load_pool(pool), out, progress=False) == 0  # resumable: nothing left to run


VM_FACTS = {"model": "zen3", "hardware_events": False, "software_events": True,
            "reason": "libpfm4 model zen3; kernel has no hardware PMU: perf_event_open(cycles) = ENOENT"}


def test_counter_mode_reason():
    assert counter_mode_reason("auto", False, VM_FACTS) == VM_FACTS["reason"]
    assert counter_mode_reason("software", False, VM_FACTS) == "software mode requested (probe=software)"
    usable = {**VM_FACTS, "hardware_events": True, "reason": "libpfm4 model zen3; hardware events open"}
    assert counter_mode_reason("auto", True, usable) == usable["reason"]
    assert "but no hardware event" in counter_mode_reason("auto", False, usable)


def test_episode_says_why_counters_are_software(monkeypatch, perf_events):
    """Issue #13's host (libpfm4 knows the CPU, the kernel has no PMU), faked: the episode row
    carries the facts' reason next to counter_mode; on this host's real facts likewise."""
    from pmoss.contracts.policies import generate

    real = perf_events
    assert real["reason"] and (real["model"] is None or real["model"] in real["reason"])
    monkeypatch.setattr("pmoss.collect.runtime.host_pmu_facts", lambda: VM_FACTS)
    machine = discover(name="localhost")
    bed = testbed.Testbed(machine, 20_000, n_slices=8, probe="auto", offcore=None)
    bed.enforce(generate("os-default", machine, 8, seed=1))
    row = bed.run("ycsb-c", 0.05, seed=1)
    assert row["counter_mode_reason"] == VM_FACTS["reason"]
    if row["counter_mode"] == "software":
        assert row["cycles"] is None and "cycles" in row["unavailable"]


def test_a_testbed_runtime_checks_schedules_against_its_machine(capfd):
    """The testbed gives the runtime its descriptor's name: a schedule for it goes in without the
    runtime's "accepted without checking" line (serve printed it), one for another machine is refused."""
    from pmoss.collect.runtime import ScheduleError
    from pmoss.contracts.policies import generate

    machine = discover(name="localhost")
    bed = testbed.Testbed(machine, 20_000, n_slices=8, probe=None, offcore=None)
    sched = generate("os-default", machine, 8, seed=1)
    bed.enforce(sched)
    assert "accepted without checking" not in capfd.readouterr().err
    with pytest.raises(ScheduleError, match='this host is "localhost"'):
        bed.rt.set_schedule(sched.node, sched.core, sched.kind, machine="another")


def test_runtime_backend_resume_skips_finished_episodes_and_never_duplicates(tmp_path, perf_events):
    """An interrupted plan: one cell's file was never renamed into place (its temp file is left);
    re-running runs exactly that cell's episodes and leaves the finished file untouched."""
    pool = write_pool(tmp_path)
    out = tmp_path / "raw"
    assert collect(load_pool(pool), out, progress=False) == 6
    files = raw_files(out)
    assert len(files) == 2  # one file per (machine, workload, dataset) cell
    lost, kept = files
    lost_ids = set(read_raw(lost)["episode_id"].to_pylist())
    kept_bytes = kept.read_bytes()
    lost.unlink()
    (lost.parent / f".{lost.name}.4242.tmp").write_bytes(b"PAR1 half written")
    todo = pending(load_pool(pool), out)
    assert {spec_id(s, sched) for s, sched in todo} == lost_ids  # finished episodes are skipped
    assert collect(load_pool(pool), out, progress=False) == len(lost_ids)
    ids = read_raw(out)["episode_id"].to_pylist()
    assert len(ids) == len(set(ids)) == 6 and set(ids) == planned_ids(pool, tmp_path)
    assert kept.read_bytes() == kept_bytes  # not re-run, not rewritten
    assert [p for p in out.rglob(".*")] == []  # the stale temp file is gone
    assert collect(load_pool(pool), out, progress=False) == 0


@pytest.mark.slow
def test_runtime_backend_kill_and_resume(tmp_path, perf_events):
    """SIGKILL `pmoss collect --backend runtime` mid-plan, re-run: every planned episode once."""
    pool = write_pool(tmp_path, episodes_per_cell=4, window_s=0.3)
    out = tmp_path / "raw"
    cmd = [str(BIN / "pmoss"), "collect", str(pool), "-q", "-o", str(out)]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out.exists() and raw_files(out)) and time.monotonic() < deadline:
        time.sleep(0.05)  # kill once the first cell is on disk, while the second one runs
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(raw_files(out)) == 1, "the plan should be cut mid-way (2 files in all)"
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    ids = read_raw(out)["episode_id"].to_pylist()
    assert len(ids) == len(set(ids)) == 10 and set(ids) == planned_ids(pool, tmp_path)
    assert [p for p in out.rglob(".*")] == []


def test_runtime_collect_command_prints_kinds_with_spread(tmp_path, perf_events):
    """`pmoss collect` on real hosts ends with each kind's throughput as median [min-max] and a
    verdict against the best kind, per cell."""
    from typer.testing import CliRunner

    from pmoss.collect.driver import collect_command

    app = typer.Typer()
    app.command()(collect_command)
    res = CliRunner().invoke(app, [str(write_pool(tmp_path)), "-q", "-o", str(tmp_path / "raw")])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    heads = [line for line in lines if "Mq/s median [min-max]; vs best" in line]
    assert len(heads) == 2  # one per cell (ycsb-c, scan)
    kinds = [line.split() for line in lines if line.startswith("  ")]
    assert {k[0] for k in kinds} == {"sn-random", "os-default"} and all("n=2" in k or "n=1" in k for k in kinds)
    assert all(k[-1] in ("best", "loss", "win") or k[-2:] == ["within", "noise"] for k in kinds)
