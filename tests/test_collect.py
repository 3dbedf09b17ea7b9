"""`pmoss collect`: chunking, resumability, kill-and-resume, bad plans, appending learned episodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pmoss.collect.driver import (
    CollectError,
    append_raw,
    collect,
    pending,
    plan_chunks,
    rows_to_table,
    searches,
)
from pmoss.collect.plan import expand, load_pool
from pmoss.contracts.errors import ContractError
from pmoss.contracts.snapshot import (
    SNAPSHOT_SCHEMA,
    episodes_to_table,
    raw_files,
    read_raw,
    write_parquet_atomic,
)

BIN = Path(sys.executable).parent
POOL = """name: t
machines: [intel-skx-4s, amd-milan-nps4]
workloads: [ycsb-c, scan]
shared_kinds: [os-default]
episodes_per_cell: {epc}
n_slices: {n}
"""


def write_pool(tmp: Path, epc: int = 6, n: int = 16, extra: str = "") -> Path:
    p = tmp / "pool.yaml"
    p.write_text(POOL.format(epc=epc, n=n) + extra)
    return p


def table_of(root: Path) -> pa.Table:
    """Every raw row under `root`, sorted by id, without the collection timestamp (wall clock)."""
    t = read_raw(root).drop_columns(["timestamp"])
    return t.sort_by("episode_id")


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(".")]


def test_collect_writes_every_episode_once_and_resumes(tmp_path):
    pool = load_pool(write_pool(tmp_path))
    assert collect(pool, tmp_path / "raw", progress=False) == 4 * 7
    t = table_of(tmp_path / "raw")
    assert t.num_rows == 28 and len(set(t["episode_id"].to_pylist())) == 28
    assert collect(pool, tmp_path / "raw", progress=False) == 0  # nothing pending
    assert pending(pool, tmp_path / "raw") == []
    grown = pool.model_copy(update={"episodes_per_cell": 9})  # growth adds episodes, keeps the old ones
    assert collect(grown, tmp_path / "raw", progress=False) == 4 * 3
    assert set(t["episode_id"].to_pylist()) < set(table_of(tmp_path / "raw")["episode_id"].to_pylist())


def test_search_episodes_are_labelled_and_resumable(tmp_path):
    """kind search: one oracle search per run, read at each budget; provenance says generator=search."""
    pool = load_pool(write_pool(tmp_path, epc=2, extra="search_runs: 1\nsearch_budgets: [100, 300]\n"))
    assert collect(pool, tmp_path / "raw", progress=False) == 4 * (3 + 2)
    t = read_raw(tmp_path / "raw").to_pylist()
    search = [r for r in t if r["schedule_kind"] == "search"]
    assert len(search) == 4 * 2
    prov = [json.loads(r["schedule_provenance"]) for r in search]
    assert {p["generator"] for p in prov} == {"search"} and {p["budget"] for p in prov} == {100, 300}
    assert collect(pool, tmp_path / "raw", progress=False) == 0  # the same searches give the same ids


def test_searches_on_several_cores_are_the_ones_run_one_after_another(tmp_path):
    """The plan's searches run in worker processes: each cell's schedules must be its own search's."""
    pool = load_pool(write_pool(tmp_path, epc=1, extra="search_runs: 2\nsearch_budgets: [100, 300]\n"))
    specs = list(expand(pool))
    parallel, serial = searches(specs, workers=2), searches(specs, workers=1)
    assert len(serial) == 4 * 2 and list(parallel) == list(serial)
    for key, by_budget in serial.items():
        assert {b: s.model_dump() for b, s in parallel[key].items()} == {b: s.model_dump() for b, s in by_budget.items()}, key


def test_chunks_are_one_cell_each_and_bounded(tmp_path):
    pool = load_pool(write_pool(tmp_path, epc=10))
    chunks = plan_chunks(pending(pool, tmp_path / "raw"), size=4)
    assert sum(map(len, chunks)) == 4 * 11 and max(map(len, chunks)) == 4
    assert all(len({spec.cell for spec, _ in c}) == 1 for c in chunks)


def test_rows_to_table_matches_the_reference_builder():
    from pmoss.contracts.policies import generate
    from pmoss.sim import load_sim_machine, simulate_batch

    m = load_sim_machine("amd-milan-nps4")  # AMD: null counters and null off-core lists
    scheds = [generate("sn-random", m, 8, seed=s) for s in (1, 2)]
    rows = simulate_batch(m, "ycsb-c", "dense", scheds, seeds=[1, 2])
    fast, ref = rows_to_table(rows), episodes_to_table(rows)
    assert fast.schema == SNAPSHOT_SCHEMA and fast.equals(ref)
    assert fast["cycles_l3_miss"].null_count == 2 and fast["imc_read_bytes"].null_count == 2


@pytest.mark.slow
def test_kill_and_resume_equals_an_uninterrupted_run(tmp_path):
    """SIGKILL mid-plan, re-run: same episode ids, identical rows, no duplicates, no temp files."""
    pool = write_pool(tmp_path, epc=300, n=64)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    cmd = [str(BIN / "pmoss"), "collect", str(pool), "-q", "-o"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen([*cmd, str(killed)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (killed.exists() and raw_files(killed)) and time.monotonic() < deadline:
        time.sleep(0.05)  # kill once the first chunk is on disk: mid-plan, not before it started
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first = len(raw_files(killed))
    assert 0 < first < 8, "the plan should be cut mid-way (8 files in all)"
    subprocess.run([*cmd, str(killed)], env=env, check=True, capture_output=True)
    subprocess.run([*cmd, str(tmp_path / "whole")], env=env, check=True, capture_output=True)
    a, b = table_of(killed), table_of(tmp_path / "whole")
    assert a.num_rows == b.num_rows == 4 * 301 and len(set(a["episode_id"].to_pylist())) == a.num_rows
    assert a.equals(b)
    assert temp_files(killed) == []


def test_a_killed_writer_leaves_only_its_temp_file_which_resume_ignores(tmp_path):
    """What SIGKILL inside write_parquet_atomic leaves (a dot-temp file) is invisible to readers."""
    pool = load_pool(write_pool(tmp_path, epc=2))
    out = tmp_path / "raw" / "source=sim" / "machine=intel-skx-4s" / "workload=scan"
    out.mkdir(parents=True)
    (out / ".part-x.parquet.123.tmp").write_bytes(b"PAR1 half written")
    assert collect(pool, tmp_path / "raw", progress=False) == 12
    assert read_raw(tmp_path / "raw").num_rows == 12
    assert temp_files(tmp_path / "raw") == []  # the resumed run cleans up after the killed one


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("", None),
        ("mix: {sn-random: 0.5, sn-grouped: 0.2}\n", "field 'mix'.*sum to 0.7"),
        ("hosts: {ibm-power8: lab-1}\n", "field 'hosts'.*'ibm-power8' is not in machines"),
        ("backend: runtime\nhosts: {intel-skx-4s: lab-1}\n", "field 'hosts'.*'amd-milan-nps4' has no host"),
        ("backend: runtime\nhosts: {intel-skx-4s: a, amd-milan-nps4: b}\nsearch_runs: 1\n", "field 'search_runs'.*use backend sim"),
    ],
)
def test_bad_pools_name_the_field(tmp_path, extra, field):
    path = write_pool(tmp_path, extra=extra)
    if field is None:
        load_pool(path)
        return
    with pytest.raises(ContractError, match=field):
        load_pool(path)


def test_unknown_machine_or_workload_fails_before_anything_is_written(tmp_path):
    path = tmp_path / "pool.yaml"
    path.write_text("name: x\nmachines: [intel-skx-4s, cray-1]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\nn_slices: 8\n")
    with pytest.raises(CollectError, match="pool.yaml: field 'machines': unknown simulated machine 'cray-1'"):
        collect(load_pool(path), tmp_path / "raw", progress=False, source=str(path))
    assert not (tmp_path / "raw").exists()
    path.write_text("name: x\nmachines: [intel-skx-4s]\nworkloads: [ycsb-q]\nepisodes_per_cell: 2\n")
    with pytest.raises(ContractError, match="pool.yaml: field 'workloads'.*unknown workload 'ycsb-q'"):
        load_pool(path)


def test_cli_reports_a_bad_pool_in_one_line(tmp_path):
    path = write_pool(tmp_path, extra="mix: {sn-random: 0.9}\n")
    r = subprocess.run([str(BIN / "pmoss"), "collect", str(path), "-o", str(tmp_path / "raw")], capture_output=True, text=True)
    assert r.returncode == 1 and "field 'mix'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "raw").exists()


def learned_rows(tmp_path: Path, machine: str = "intel-skx-4s", n: int = 16) -> Path:
    """Raw episodes as serving would write them: schedules of kind `learned`."""
    from pmoss.contracts.schedule import Schedule
    from pmoss.sim import load_sim_machine, simulate_batch

    m = load_sim_machine(machine)
    rng = np.random.default_rng(0)
    scheds = []
    for _ in range(3):
        cores = [int(c) for c in rng.choice(m.worker_cpus, n)]
        scheds.append(Schedule(machine=machine, n_slices=n, kind="learned", node=[m.cpu_by_id[c].node for c in cores], core=cores,
                               provenance={"model": "pmoss-dt", "version": 1}))  # fmt: skip
    rows = simulate_batch(m, "ycsb-c", "dense", scheds, seeds=[1, 2, 3])
    src = tmp_path / "learned"
    write_parquet_atomic(rows_to_table(rows), src / "served.parquet")
    return src


def test_append_learned_episodes_once(tmp_path):
    src = learned_rows(tmp_path)
    out = tmp_path / "raw"
    assert append_raw(src, out, ["intel-skx-4s"]) == 3
    assert append_raw(src, out, ["intel-skx-4s"]) == 0  # already there: no duplicates
    assert append_raw(src, tmp_path / "other", ["amd-milan-nps4"]) == 0  # another machine's data stays out
    t = read_raw(out)
    assert set(t["schedule_kind"].to_pylist()) == {"learned"}
    with pytest.raises(CollectError, match="--append .*nope: no such directory"):
        append_raw(tmp_path / "nope", out, ["intel-skx-4s"])


def test_append_rejects_a_newer_schema_naming_the_file(tmp_path):
    src = learned_rows(tmp_path)
    t = pq.read_table(src / "served.parquet")
    meta = {**t.schema.metadata, b"pmoss.schema_version": b"7"}
    pq.write_table(t.replace_schema_metadata(meta), src / "future.parquet")
    with pytest.raises(ContractError, match="future.parquet: field 'schema_version': 7 is newer"):
        append_raw(src, tmp_path / "raw", ["intel-skx-4s"])
    assert not (tmp_path / "raw").exists() or raw_files(tmp_path / "raw") == []


def test_runtime_chunks_interleave_kinds_and_report_spread():
    """Real episodes run round-robin over kinds; the report gives median [min-max] per kind and
    calls a ratio whose range includes 1.0 noise."""
    import pyarrow as pa

    from types import SimpleNamespace

    from pmoss.collect.driver import interleave_kinds, kind_report

    def ep(kind: str) -> tuple[None, SimpleNamespace]:
        return None, SimpleNamespace(kind=kind)  # only the kind decides the order

    chunk = [ep("sn-random"), ep("sn-random"), ep("sn-random"), ep("os-default"), ep("os-default")]
    assert interleave_kinds(chunk) == [0, 3, 1, 4, 2]
    cell = {"machine": "m", "workload": "ycsb-c", "dataset": "dense"}
    rows = [{**cell, "schedule_kind": k, "throughput_qps": v * 1e6} for k, v in
            [("a", 2.0), ("a", 2.2), ("b", 1.0), ("b", 1.1), ("c", 2.1), ("c", 1.5)]]  # fmt: skip
    lines = kind_report([pa.Table.from_pylist(rows)])
    assert lines[0] == "m ycsb-c dense: Mq/s median [min-max]; vs best (a)"
    by_kind = {line.split()[0]: line for line in lines[1:]}
    assert by_kind["a"].endswith("best") and "2.10 [2.00-2.20]" in by_kind["a"]
    assert by_kind["b"].endswith("loss")  # 1.0/2.0 .. 1.1/2.2: always below
    assert by_kind["c"].endswith("within noise")  # 2.1/2.0 = 1.05 but 1.5/2.2 = 0.68


def test_an_override_plans_the_episodes_of_the_pool_it_stands_for(tmp_path):
    """`--runs-per-shared-kind` (params critic.runs_per_shared_kind) replaced a copy of the pool
    with the field changed: the episodes, seeds included, are the copy's, whatever the pool's name."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    pool = yaml.safe_load((root / "datasets/pools/tiny-generated.yaml").read_text())
    copy = tmp_path / "copy.yaml"
    copy.write_text(yaml.safe_dump({**pool, "name": "another-name", "runs_per_shared_kind": 4}, sort_keys=False))
    over = expand(load_pool(root / "datasets/pools/tiny-generated.yaml", runs_per_shared_kind=4))
    assert over == expand(load_pool(copy))
    assert len(over) > len(expand(load_pool(root / "datasets/pools/tiny-generated.yaml")))  # four os-default runs a cell, not one
