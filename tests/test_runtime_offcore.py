"""The runtime's off-core sweeper with the collector's real uncore path, end to end into snapshot rows.

This host has no uncore PMU, so a fake sysfs tree describes one: an `uncore_imc_0` whose `type` is
the kernel's software PMU and whose `cas_count_read/write` are cpu-clock. Discovery, the
system-wide perf_event_open per socket CPU, the reads every sweeping round, the Arrow export and the
import into pyarrow all run for real; only the PMU's identity is borrowed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmoss.collect import runtime as rtmod

pytestmark = pytest.mark.skipif(not rtmod.library_path().exists(), reason=f"{rtmod.library_path()} is not built (make native)")

CPUS = sorted(os.sched_getaffinity(0))[:2]  # one fake socket (and node) per CPU, at most two
NS_PER_S = 1e9
BYTES_PER_CAS = 64.0


@pytest.fixture
def imc_root() -> Iterator[Path]:
    """A sysfs tree with one software-backed IMC on every node (world-readable, like /sys)."""
    root = Path(tempfile.mkdtemp(prefix="pmoss-sysfs-"))
    for node, cpu in enumerate(CPUS):
        d = root / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(f"{cpu}\n")
    pmu = root / "bus" / "event_source" / "devices" / "uncore_imc_0"
    (pmu / "format").mkdir(parents=True)
    (pmu / "events").mkdir()
    (pmu / "type").write_text("1\n")  # PERF_TYPE_SOFTWARE
    (pmu / "cpumask").write_text(",".join(map(str, CPUS)) + "\n")
    (pmu / "format" / "event").write_text("config:0-7\n")
    for name in ("cas_count_read", "cas_count_write"):
        (pmu / "events" / name).write_text("event=0x0\n")  # cpu-clock: ns while enabled
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield root
    shutil.rmtree(root)


def _perf_refused_prefix() -> list[str] | None:
    """A command prefix under which system-wide perf_event_open is refused here, or None."""
    if int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) < 1:
        return None  # anyone may open system-wide events
    caps = int(next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("CapEff:")).split()[1], 16)
    if not caps & (1 << 21 | 1 << 38):  # neither CAP_SYS_ADMIN nor CAP_PERFMON: already refused
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--"] if setpriv else None


def test_offcore_readings_per_run_in_the_snapshot(imc_root: Path, perf_events) -> None:
    if _perf_refused_prefix() == []:
        pytest.skip("system-wide perf events are refused to this process")
    rt = rtmod.Runtime(20_000, n_slices=8, probe="software", offcore=str(imc_root))
    assert rt.snapshot().offcore.num_rows == 0  # no run yet: nothing read
    for seconds in (0.4, 0.05):
        t0 = time.monotonic()
        out = rt.run("ycsb-c", seconds, seed=1)
        call_s = time.monotonic() - t0
        snap = out["stats"]
        assert snap.offcore_error == ""
        oc = snap.offcore.to_pydict()
        assert oc["scope"] == ["node"] * len(CPUS) and oc["index"] == list(range(len(CPUS)))
        assert oc["link_in_bytes"] == oc["link_out_bytes"] == oc["imc_total_bytes"] == [None] * len(CPUS)
        for value in oc["imc_read_bytes"] + oc["imc_write_bytes"]:
            # cpu-clock counts the ns the sweeper kept it open: from before the run's window to
            # after it, and within this run call only — a total over runs would exceed call_s
            assert 0.5 * out["seconds"] < value / BYTES_PER_CAS / NS_PER_S < call_s + 0.01, (value, out["seconds"], call_s)


def test_testbed_rows_carry_offcore_readings(imc_root: Path, perf_events) -> None:
    if _perf_refused_prefix() == []:
        pytest.skip("system-wide perf events are refused to this process")
    from pmoss.collect.testbed import Testbed
    from pmoss.collect.topology import discover
    from pmoss.contracts.policies import generate

    bed = Testbed(discover(name="localhost"), 20_000, n_slices=8, probe="software", offcore=str(imc_root))
    bed.enforce(generate("sn-spread", bed.machine, 8))
    row = bed.run("ycsb-c", 0.1, seed=1)
    assert len(row["imc_read_bytes"]) == len(CPUS) and all(v > 0 for v in row["imc_read_bytes"] + row["imc_write_bytes"])
    assert row["link_in_bytes"] is None and row["link_out_bytes"] is None
    assert {"link_in_bytes", "link_out_bytes"} <= set(row["unavailable"])
    assert not {"imc_read_bytes", "imc_write_bytes"} & set(row["unavailable"])
    assert sum(row["queries"]) > 0 and row["counter_mode"] == "software"


_REFUSED_CHILD = """
import json, sys
from pmoss.contracts.policies import generate
from pmoss.collect.testbed import Testbed
from pmoss.collect.runtime import host_pmu_facts
from pmoss.collect.topology import discover
# without capabilities perf_event_paranoid 3 refuses even software events: then no probe (the
# off-core refusal is what this checks, not the counters)
probe = "software" if host_pmu_facts()["software_events"] else None
bed = Testbed(discover(name="localhost"), 20000, n_slices=8, probe=probe, offcore=sys.argv[1])
bed.enforce(generate("sn-spread", bed.machine, 8))
rows = [bed.run("ycsb-c", 0.05, seed=s) for s in (1, 2)]
keys = ("imc_read_bytes", "imc_write_bytes", "link_in_bytes", "link_out_bytes", "unavailable", "queries")
print(json.dumps([{k: r[k] for k in keys} for r in rows]))
"""


def test_refused_offcore_is_null_with_one_message(imc_root: Path) -> None:
    prefix = _perf_refused_prefix()
    if prefix is None:
        pytest.skip("cannot make perf refuse system-wide events here (perf_event_paranoid < 1 or no setpriv)")
    r = subprocess.run([*prefix, sys.executable, "-c", _REFUSED_CHILD, str(imc_root)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    for row in rows:  # the runs go on; off-core is null and listed, never 0
        assert sum(row["queries"]) > 0
        for name in ("imc_read_bytes", "imc_write_bytes", "link_in_bytes", "link_out_bytes"):
            assert row[name] is None and name in row["unavailable"]
    lines = [ln for ln in r.stderr.splitlines() if "off-core" in ln]
    assert len(lines) == 1, r.stderr  # one message for the process, not one per run
    assert "perf_event_paranoid" in lines[0] and "CAP_PERFMON" in lines[0]


def test_cli_prints_offcore_bytes_per_node(imc_root: Path) -> None:
    """`pmoss-runtime --offcore=ROOT` sweeps the same hook and prints the run's bytes per node."""
    if _perf_refused_prefix() == []:
        pytest.skip("system-wide perf events are refused to this process")
    binary = rtmod.library_path().parent / "pmoss-runtime"
    out = subprocess.run([str(binary), "--keys", "20000", "--slices", "8", "--seconds", "0.3", f"--offcore={imc_root}"],
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    lines = [ln for ln in out.splitlines() if ln.startswith("offcore")]
    assert [ln.split(":")[0] for ln in lines] == [f"offcore node {i}" for i in range(len(CPUS))]
    for ln in lines:
        fields = dict(f.split("=") for f in ln.split(":")[1].split())
        assert set(fields) == {"imc_read_bytes", "imc_write_bytes", "imc_total_bytes"}
        assert fields["imc_total_bytes"] == "null"
        # cpu-clock ns x 64 bytes per "CAS": at least the 0.3 s window, well under a minute
        for name in ("imc_read_bytes", "imc_write_bytes"):
            assert 0.3 * NS_PER_S * BYTES_PER_CAS <= float(fields[name]) < 60 * NS_PER_S * BYTES_PER_CAS
    missing = subprocess.run([str(binary), "--keys", "20000", "--slices", "8", "--seconds", "0.1", "--offcore=/nonexistent"],
                             check=True, capture_output=True, text=True).stdout  # fmt: skip
    assert "offcore: none" in missing
