"""`pmoss doctor`: every check in the JSON, every problem with its fix, and on a host without a
hardware PMU (this VM) the exact reason counters are software."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pmoss import doctor
from pmoss.collect import collector

CHECKS = ["numa", "perf_event_paranoid", "core_pmu", "uncore_pmu", "move_pages", "huge_pages", "numpy_kernels", "torch_kernels", "ray_node", "tracking"]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory):
    """The collector library: $PMOSS_COLLECTOR_LIB / $PMOSS_LIB, the repo build, or a fresh cmake build."""
    os.environ.setdefault("LIBPFM_ENCODE_INACTIVE", "1")  # encode another model's table (skx) on any host
    try:
        return collector.load_library()
    except collector.PmossError:
        return collector.load_library(collector.build_library(tmp_path_factory.mktemp("collector-build")))


def _pmu_dirs(root: Path, names: list[str]) -> Path:
    for n in names:
        (root / "bus/event_source/devices" / n).mkdir(parents=True)
    return root


def test_json_has_every_check_and_every_problem_names_its_fix(lib, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow/mlflow.db")
    monkeypatch.setenv("PMOSS_COLLECTOR_LIB", lib._name)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    r = subprocess.run([sys.executable, "-m", "pmoss", "doctor", "--json"], capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    out = json.loads(r.stdout)
    assert [c["name"] for c in out["checks"]] == CHECKS
    assert r.returncode == (0 if out["ok"] else 1)
    for c in out["checks"]:
        assert c["status"] in ("ok", "warn", "fail")
        assert c["status"] == "ok" or c["fix"], f"{c['name']} is {c['status']} without a fix"
    assert out["counter_mode"] in ("hardware", "software")


@pytest.mark.skipif(doctor.hardware_pmu(doctor.event_source_pmus()) is not None, reason="this host has a hardware PMU")
def test_on_a_host_without_a_cpu_pmu_it_says_exactly_why_counters_are_software(lib):
    check = doctor.check_core_pmu(lib)
    assert check.status == "warn" and check.data["counter_mode"] == "software"
    assert "no `cpu` PMU" in check.detail and "/sys/bus/event_source/devices has " in check.detail
    assert all(s != "open" for s in check.data["events"].values())  # no hardware event opened
    model = collector.detect_model(lib)
    if model:  # libpfm4 knowing the model is named, and said not to be enough
        assert f"libpfm4 knows the CPU as '{model}', but that is only the event table" in check.detail
    assert "pmu=on" in check.fix


def test_core_pmu_on_a_host_with_one(lib, tmp_path):
    sysfs = _pmu_dirs(tmp_path, ["cpu", "software"])
    # the host's own model encodes whatever state libpfm4 was initialised in by earlier tests (it
    # reads LIBPFM_ENCODE_INACTIVE once per process); another model needs that variable
    model = collector.detect_model(lib) or "skx"
    ok = doctor.check_core_pmu(lib, sysfs, opener=lambda attr: 0, model=model)
    if not ok.data["events"]:
        pytest.skip(f"libpfm4 in this process cannot encode {model}: {ok.detail}")
    assert ok.status == "ok" and ok.data["counter_mode"] == "hardware" and "core features open" in ok.detail
    busy = doctor.check_core_pmu(lib, sysfs, opener=lambda attr: -errno.EACCES, model=model)
    assert busy.status == "warn" and "EACCES" in busy.detail and busy.fix
    unknown = doctor.check_core_pmu(lib, sysfs, opener=lambda attr: 0, model=None)
    assert unknown.status == "warn" and "does not know this CPU" in unknown.detail


def test_numa_nodes_and_distances(two_socket_eight_node):
    check = doctor.check_numa(two_socket_eight_node / "sys")
    assert check.status == "ok" and check.data["nodes"] == list(range(8))
    assert check.data["distances"][0][:4] == [10, 11, 11, 11] and check.data["distances"][0][4] == 21


def test_paranoid_huge_pages_ray_and_tracking_name_their_fixes(tmp_path, monkeypatch):
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/perf_event_paranoid").write_text("2\n")
    assert "perf_event_paranoid=0" in doctor.check_paranoid(tmp_path / "proc").fix
    (tmp_path / "sys/kernel/mm/transparent_hugepage").mkdir(parents=True)
    (tmp_path / "sys/kernel/mm/transparent_hugepage/enabled").write_text("[always] madvise never\n")
    thp = doctor.check_huge_pages(tmp_path / "sys", tmp_path / "proc")
    assert thp.status == "warn" and "madvise" in thp.fix
    ray = doctor.check_ray("127.0.0.1:1", timeout_s=1)
    assert ray.status == "fail" and "ray start --head" in ray.fix
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    monkeypatch.setenv("PMOSS_TRACKING_TIMEOUT_S", "0.5")
    tracking = doctor.check_tracking()
    assert tracking.status == "fail" and "MLFLOW_TRACKING_URI" in tracking.fix


def test_move_pages_works_on_our_own_page():
    check = doctor.check_move_pages()
    assert check.status == "ok" and check.data["node"] >= 0


def test_numpy_kernels_warn_on_avx512_and_name_the_fix(monkeypatch):
    monkeypatch.delenv("PMOSS_NATIVE_SIMD", raising=False)
    ok = doctor.check_numpy_kernels(["X86_V3"])
    assert ok.status == "ok" and "X86_V3" in ok.detail
    wide = doctor.check_numpy_kernels(["X86_V3", "X86_V4", "AVX512_ICL"])
    assert wide.status == "warn" and "X86_V4, AVX512_ICL" in wide.detail and "import pmoss before numpy" in wide.fix
    monkeypatch.setenv("PMOSS_NATIVE_SIMD", "1")
    assert "PMOSS_NATIVE_SIMD=1" in doctor.check_numpy_kernels(["X86_V4"]).detail


def test_torch_kernels_warn_on_avx512_or_a_missing_pin_and_name_the_fix(monkeypatch):
    monkeypatch.delenv("PMOSS_NATIVE_SIMD", raising=False)
    for name, value in (("ATEN_CPU_CAPABILITY", "avx2"), ("ONEDNN_MAX_CPU_ISA", "AVX2"), ("MKL_CBWR", "AVX2")):
        monkeypatch.setenv(name, value)
    ok = doctor.check_torch_kernels("AVX2")
    assert ok.status == "ok" and "AVX2" in ok.detail
    assert doctor.check_torch_kernels("DEFAULT").status == "warn"  # no AVX2 code here: nothing to pin to
    wide = doctor.check_torch_kernels("AVX512")
    assert wide.status == "warn" and "AVX512 kernels" in wide.detail and "import pmoss first" in wide.fix
    monkeypatch.delenv("MKL_CBWR")
    assert doctor.check_torch_kernels("AVX2").status == "warn" and "MKL_CBWR not set" in doctor.check_torch_kernels("AVX2").detail
    monkeypatch.setenv("PMOSS_NATIVE_SIMD", "1")
    assert "PMOSS_NATIVE_SIMD=1" in doctor.check_torch_kernels("AVX512").detail
