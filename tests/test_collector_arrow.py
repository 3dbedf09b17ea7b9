"""Python side of the collector: Arrow C Data export imported by pyarrow, event tables, uncore discovery."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pyarrow as pa
import pytest

from pmoss.collect import collector
from pmoss.contracts.snapshot import SLICE_FEATURES

NAMES = ["instructions", "task_clock_ns", "page_faults"]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory):
    """The collector shared library: $PMOSS_COLLECTOR_LIB, the repo build, or a fresh cmake build."""
    os.environ.setdefault("LIBPFM_ENCODE_INACTIVE", "1")  # encode every model's table on any host
    try:
        return collector.load_library()
    except collector.PmossError:
        return collector.load_library(collector.build_library(tmp_path_factory.mktemp("collector-build")))


def test_slice_batch_values_and_nulls(lib) -> None:
    before = [[10, 1000, None], [0, 0, None], [None, 5, None]]
    after = [[110, 1600, None], [0, 0, None], [None, 9, None]]
    batch = collector.slice_batch_from_counts(lib, NAMES, before, after, queries=[100, 0, 200], core=[3, 4, 5], node=[0, 0, 1])
    assert batch.schema.field("slice").type == pa.int32() and not batch.schema.field("slice").nullable
    assert batch.schema.field("queries").type == pa.int64()
    for n in NAMES:
        f = batch.schema.field(n)
        assert f.type == pa.float64() and f.nullable, n
    d = batch.to_pydict()
    assert d["slice"] == [0, 1, 2] and d["core"] == [3, 4, 5] and d["node"] == [0, 0, 1] and d["queries"] == [100, 0, 200]
    assert d["instructions"] == [100.0, 0.0, None]  # measured zero stays 0; unmeasured is null
    assert d["task_clock_ns"] == [600.0, 0.0, 4.0]
    assert d["page_faults"] == [None, None, None]
    assert batch.column("instructions").null_count == 1


def test_slice_batch_default_placement_and_release(lib) -> None:
    for _ in range(50):  # repeated import/free: release callbacks must free without crashing
        batch = collector.slice_batch_from_counts(lib, NAMES, [[0, 0, 0]] * 4, [[1, 2, 3]] * 4, queries=[1] * 4)
        assert batch.column("core").to_pylist() == [-1] * 4
        del batch


def test_offcore_batch_and_episode_columns(lib) -> None:
    values = {"imc_read_bytes": [64.0, 128.0], "imc_write_bytes": [None, 32.0], "link_in_bytes": [1.0, 2.0, 3.0]}
    oc = collector.offcore_batch(lib, values, n_nodes=2, n_links=3)
    d = oc.to_pydict()
    assert d["scope"] == ["node", "node", "link", "link", "link"] and d["index"] == [0, 1, 0, 1, 2]
    assert d["imc_read_bytes"] == [64.0, 128.0, None, None, None]
    assert d["imc_write_bytes"][:2] == [None, 32.0]
    assert d["link_in_bytes"] == [None, None, 1.0, 2.0, 3.0] and d["link_out_bytes"] == [None] * 5
    sl = collector.slice_batch_from_counts(lib, NAMES, [[0, 0, None]] * 2, [[5, 7, None]] * 2, queries=[100, 100], core=[1, 2], node=[0, 1])
    cols = collector.episode_columns(sl, oc)
    assert cols["instructions"] == [5.0, 5.0] and cols["task_clock_ns"] == [7.0, 7.0]
    assert cols["page_faults"] is None and "page_faults" in cols["unavailable"] and "llc_misses" in cols["unavailable"]
    assert set(cols["unavailable"]) == set(SLICE_FEATURES) - {"instructions", "task_clock_ns"} | {"link_out_bytes"}
    assert cols["imc_read_bytes"] == [64.0, 128.0] and cols["imc_write_bytes"] == [None, 32.0]
    assert cols["link_in_bytes"] == [1.0, 2.0, 3.0] and cols["link_out_bytes"] is None
    # a feature null on any slice is unavailable as a whole (a slice that ran nothing shows 0)
    sl = collector.slice_batch_from_counts(lib, NAMES, [[0, 0, None]] * 2, [[5, 7, None], [None, 0, None]], queries=[100, 0])
    cols = collector.episode_columns(sl)  # no off-core batch: every off-core feature unavailable
    assert cols["instructions"] is None and "instructions" in cols["unavailable"] and cols["task_clock_ns"] == [7.0, 0.0]
    assert {"imc_read_bytes", "imc_write_bytes", "link_in_bytes", "link_out_bytes"} <= set(cols["unavailable"])


_EVENT_TABLES = """
import json, os
os.environ["LIBPFM_ENCODE_INACTIVE"] = "1"
from pmoss.collect import collector
lib = collector.load_library()
out = {m: collector.event_table(lib, m) for m in ("skx", "zen3", "neoverse_v2")}
out["models"] = collector.models(lib)
try:
    collector.event_table(lib, "pentium4")
except collector.PmossError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""


def test_event_tables(lib) -> None:
    # libpfm reads LIBPFM_ENCODE_INACTIVE once per process, at its first use: another test may
    # already have used it (the runtime's probe), so the tables are encoded in a fresh process.
    import json
    import subprocess
    import sys

    env = {**os.environ, "PMOSS_COLLECTOR_LIB": lib._name}
    r = subprocess.run([sys.executable, "-c", _EVENT_TABLES], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"skx", "snb_ep", "icx", "spr", "zen3", "zen4", "neoverse_v2", "power8", "power9"} <= set(out["models"])
    skx = {r["feature"]: r for r in out["skx"]}
    assert (skx["llc_misses"]["type"], skx["llc_misses"]["config"]) == (4, 0x412E)
    assert (skx["mem_accesses"]["config"], skx["mem_accesses"]["config1"]) == (0x1BB, 0x3F84000001)
    zen3 = {r["feature"]: r for r in out["zen3"]}
    assert zen3["llc_write_misses"]["event"] is None and zen3["llc_write_misses"]["source"] == "unavailable"
    assert zen3["remote_dram_loads"]["config"] == 0x4043
    grace = {r["feature"]: r for r in out["neoverse_v2"]}
    assert grace["remote_dram_loads"]["config"] == 0x38 and grace["task_clock_ns"]["type"] == 1
    assert "unknown CPU model" in out["error"]


def _fake_pmu(root: Path, name: str, type_: int, cpumask: str, files: dict[str, str]) -> None:
    d = root / "bus" / "event_source" / "devices" / name
    (d / "format").mkdir(parents=True)
    (d / "events").mkdir()
    (d / "type").write_text(f"{type_}\n")
    (d / "cpumask").write_text(cpumask + "\n")
    for rel, text in files.items():
        (d / rel).write_text(text + "\n")


def test_discover_uncore_fake_trees(lib, tmp_path: Path) -> None:
    assert collector.discover_uncore(lib, tmp_path / "empty") == {"n_nodes": 0, "n_links": 0, "events": []}
    root = tmp_path / "spr"
    for n, cpus in enumerate(("0-3", "4-7")):
        (root / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True)
        (root / "devices" / "system" / "node" / f"node{n}" / "cpulist").write_text(cpus + "\n")
    # Sapphire Rapids names its CAS events with another umask; the sysfs spec must win.
    _fake_pmu(root, "uncore_imc_0", 30, "0,4", {"format/event": "config:0-7", "format/umask": "config:8-15", "events/cas_count_read": "event=0x05,umask=0xcf", "events/cas_count_write": "event=0x05,umask=0xf0"})
    found = collector.discover_uncore(lib, root)
    assert found["n_nodes"] == 2 and found["n_links"] == 0
    reads = sorted((e["scope_index"], e["config"]) for e in found["events"] if e["feature"] == "imc_read_bytes")
    assert reads == [(0, 0xCF05), (1, 0xCF05)]
    ev = next(e for e in found["events"] if e["feature"] == "imc_write_bytes")
    assert ev["bytes_per_count"] == 64.0 and ev["spec"] == "event=0x05,umask=0xf0" and ev["type"] == 30  # fields after the attr
    (root / "bus/event_source/devices/uncore_imc_0/type").write_text("x\n")
    with pytest.raises(collector.PmossError, match="uncore_imc_0/type"):
        collector.discover_uncore(lib, root)


def test_nan_is_not_a_value(lib) -> None:
    oc = collector.offcore_batch(lib, {"imc_read_bytes": [math.nan]}, n_nodes=1, n_links=0)
    assert oc.column("imc_read_bytes").to_pylist() == [None]


def test_estimated_totals_from_sampled_windows() -> None:
    """A counter covers only its slice's profiled queries: the total is scaled by queries /
    profiled_queries; a slice with queries but no window is not measured (null), one with no
    queries counts 0; the runtime's own counts are never scaled."""
    from pmoss.collect.collector import _estimated_totals

    cols = {"slice": [0, 1, 2], "core": [0, 0, 0], "node": [0, 0, 0], "queries": [100, 50, 0], "nodes_visited": [300.0, 150.0, 0.0],
            "keys_scanned": [0.0, 0.0, 0.0], "profiled_queries": [10.0, 0.0, 0.0], "task_clock_ns": [2000.0, 0.0, 0.0]}
    out = _estimated_totals(cols)
    assert out["task_clock_ns"] == [20000.0, None, 0.0]
    assert out["nodes_visited"] == cols["nodes_visited"] and out["queries"] == cols["queries"]
    assert _estimated_totals({"queries": [1], "task_clock_ns": [5.0]})["task_clock_ns"] == [5.0]  # no sampling stat: as counted
