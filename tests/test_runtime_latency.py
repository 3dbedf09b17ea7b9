"""Query latency through the cffi binding: Runtime.latency() (reset-on-read) and the
per-run summary in Runtime.run(), also read from another thread while a run is in
progress (needs build/runtime/libpmoss.so)."""

from __future__ import annotations

import threading
import time

import pytest

from pmoss.collect import runtime as rtmod

pytestmark = pytest.mark.skipif(
    not rtmod.library_path().exists(),
    reason=f"{rtmod.library_path()} is not built (cmake -S . -B build && cmake --build build)",
)

N_SLICES = 32
KEYS = ("count", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns", "mean_ns")


@pytest.fixture()
def rt() -> rtmod.Runtime:
    return rtmod.Runtime(n_keys=50_000, dataset="dense", seed=3, n_slices=N_SLICES, queue_capacity=64)


def _ordered(lat: dict) -> bool:
    return 0 < lat["p50_ns"] <= lat["p90_ns"] <= lat["p99_ns"] <= lat["p999_ns"] <= lat["max_ns"]


def test_run_reports_latency(rt: rtmod.Runtime) -> None:
    assert rt.latency()["count"] == 0  # nothing ran yet
    out = rt.run("ycsb-c", seconds=0.2, seed=1)
    assert out["completed"] > 0
    assert 0 < out["latency_p50_ns"] <= out["latency_p99_ns"] <= out["latency_max_ns"]
    assert out["latency"]["count"] == out["completed"] and _ordered(out["latency"])
    lat = rt.latency()
    assert set(lat) == set(KEYS)
    # first read after the only run: that run, exactly
    assert lat["count"] == out["completed"]
    assert lat["p99_ns"] == out["latency_p99_ns"] and lat["max_ns"] == out["latency_max_ns"]
    assert _ordered(lat) and 0 < lat["mean_ns"] <= lat["max_ns"]
    # reset-on-read
    assert rt.latency() == {k: 0 for k in KEYS}


def test_latency_read_during_run(rt: rtmod.Runtime) -> None:
    result: dict = {}
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            result.update(rt.run("ycsb-b", seconds=0.6, seed=2, distribution="uniform"))
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    th = threading.Thread(target=serve)
    th.start()
    reads = []
    cpus = rt.worker_cpus()
    switched = False
    while th.is_alive():
        lat = rt.latency()
        if lat["count"]:
            assert _ordered(lat)
            if not switched and len(reads) >= 3:
                # a schedule switch from this thread while the run blocks the other one
                core = [cpus[i % len(cpus)] for i in range(N_SLICES)]
                rt.set_schedule([rt.cpu_node(c) for c in core], core, "sn-spread")
                switched = True
        reads.append(lat)
        time.sleep(0.02)
    th.join()
    assert not errors, errors
    reads.append(rt.latency())
    assert sum(1 for r in reads if r["count"]) >= 2  # progress seen mid-run
    assert switched
    # the intervals partition the run; run() still saw every query
    assert sum(r["count"] for r in reads) == result["completed"]
    assert result["latency"]["count"] == result["completed"]
    assert 0 < result["latency_p50_ns"] <= result["latency_p99_ns"] <= result["latency_max_ns"]
    assert max(r["max_ns"] for r in reads) == result["latency_max_ns"]
