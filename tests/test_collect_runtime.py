"""`pmoss collect` on the runtime backend: real episodes on this host, software counters labelled."""

import pytest
import yaml

from pmoss.collect import collect
from pmoss.dataset import validate_raw
from pmoss.plan import load_pool
from pmoss.runtime import library_path
from pmoss.snapshot import CORE_FEATURES, read_raw

pytestmark = pytest.mark.skipif(not library_path().exists(), reason="libpmoss.so is not built (make native)")


def test_runtime_backend_collect_and_resume(tmp_path):
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump({
        "name": "host", "backend": "runtime", "machines": ["localhost"], "hosts": {"localhost": "localhost"},
        "workloads": ["ycsb-c", "scan"], "mix": {"sn-random": 1.0}, "shared_kinds": ["os-default"],
        "episodes_per_cell": 2, "n_slices": 16, "n_records": 20000, "window_s": 0.2,
    }))  # fmt: skip
    out = tmp_path / "raw"
    assert collect(load_pool(pool), out, progress=False) == 6
    total, problems = validate_raw(out)
    assert total == 6 and problems == []
    t = read_raw(out).to_pylist()
    for row in t:
        assert row["source"] == "real" and row["throughput_qps"] > 0 and sum(row["queries"]) > 0
        assert row["counter_mode"] in ("software", "hardware")
        if row["counter_mode"] == "software":  # no PMU: hardware counters are null and listed, never 0
            assert row["cycles"] is None and "cycles" in row["unavailable"]
        assert row["task_clock_ns"] is not None and sum(row["task_clock_ns"]) > 0
        assert row["keys_scanned"] is not None
    scans = [r for r in t if r["workload"] == "scan"]
    assert all(sum(r["keys_scanned"]) > 0 for r in scans)
    assert set(CORE_FEATURES) - set(t[0]["unavailable"]) >= {"task_clock_ns"}
    assert collect(load_pool(pool), out, progress=False) == 0  # resumable: nothing left to run
