"""The calibration hook of the simulator (docs/machine-model.md §14.3): math only, no runtime."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pmoss.policies import generate
from pmoss.sim import Calibration, throughput
from pmoss.sim.calibration import fit_ipc, fit_query_ns, fit_scan_key_insn, ipc_for, query_ns_for, scan_key_insn_for, worker_ns
from pmoss.sim.hardware import hw_for
from pmoss.sim.pool import load_sim_machine
from pmoss.workload import get_workload

N_REC, N = 100_000, 64
MACHINE = "amd-milan-nps1"


def _lookup():
    return get_workload("ycsb-c").model_copy(update={"name": "t-lookup", "distribution": "uniform"})


def test_empty_calibration_changes_nothing():
    m = load_sim_machine(MACHINE)
    s = [generate("sn-spread", m, N, seed=0)]
    for wl in ("ycsb-c", "ycsb-a", "ycsb-e"):
        assert throughput(m, wl, "dense", s, n_records=N_REC, calibration=Calibration())[0] == throughput(m, wl, "dense", s, n_records=N_REC)[0]
    assert hw_for(m, None) is hw_for(m)


def test_closed_forms():
    assert ipc_for(100.0, 60.0, 2.0, 160.0) == pytest.approx(1.0)  # rest 40; comp must double
    assert query_ns_for(100.0, 250.0) == 150.0
    assert scan_key_insn_for(900.0, 0.0, 90.0, 2.0, 2.5) == pytest.approx(50.0)  # 10 ns/key at 5 insn/ns
    assert scan_key_insn_for(10.0, 50.0, 90.0, 2.0, 2.5) == 0.0  # clamped
    with pytest.raises(ValueError):
        query_ns_for(100.0, 50.0)
    with pytest.raises(ValueError):
        ipc_for(100.0, 60.0, 2.0, 30.0)
    with pytest.raises(ValueError):
        Calibration(ipc=0.0)
    with pytest.raises(ValueError):
        Calibration(route_ns=-1.0)


@pytest.mark.parametrize("fit", ["query_ns", "ipc"])
def test_fit_reproduces_measured_worker_time(fit):
    m = load_sim_machine(MACHINE)
    t0, _ = worker_ns(m, _lookup(), None, n_records=N_REC, n_slices=N)
    target = 3.0 * t0
    f = fit_query_ns if fit == "query_ns" else fit_ipc
    cal = f(m, _lookup(), target, Calibration(), n_records=N_REC, n_slices=N)
    assert worker_ns(m, _lookup(), cal, n_records=N_REC, n_slices=N)[0] == pytest.approx(target, rel=1e-3)


def test_fit_scan_key_insn_reproduces_slope():
    m = load_sim_machine(MACHINE)
    short, long = (get_workload("ycsb-e").model_copy(update={"name": f"t-scan{k}", "distribution": "uniform", "scan_min": k, "scan_max": k}) for k in (10, 100))
    ts, tl = (worker_ns(m, w, None, n_records=N_REC, n_slices=N)[0] for w in (short, long))
    cal = fit_scan_key_insn(m, short, long, ts, ts + 2.0 * (tl - ts), Calibration(), n_records=N_REC, n_slices=N)
    fs, fl = (worker_ns(m, w, cal, n_records=N_REC, n_slices=N)[0] for w in (short, long))
    assert fl - fs == pytest.approx(2.0 * (tl - ts), rel=1e-3)


def test_shared_cpus_bound_and_router_cost():
    """All work of workers and routers fits into shared_cpus: X <= cpus / (t_worker + route)."""
    m = load_sim_machine(MACHINE)
    s = [generate("sn-spread", m, N, seed=0)]
    free = throughput(m, "ycsb-c", "dense", s, n_records=N_REC)[0]
    t, _ = worker_ns(m, _lookup(), None, n_records=N_REC, n_slices=N)
    cal = Calibration(route_ns=100.0, shared_cpus=1.0)
    X = throughput(m, "ycsb-c", "dense", s, n_records=N_REC, calibration=cal)[0]
    assert X < free
    assert X * 100e-9 < 1.0
    # one CPU for everything: at most 1e9 / (route + cheapest worker time) queries/s
    assert X <= 1e9 / 100.0
    halved = throughput(m, "ycsb-c", "dense", s, n_records=N_REC, calibration=Calibration(route_ns=100.0, shared_cpus=0.5))[0]
    assert halved == pytest.approx(X / 2, rel=0.02)
    slower = throughput(m, "ycsb-c", "dense", s, n_records=N_REC, calibration=Calibration(query_ns=500.0))[0]
    assert np.isfinite(slower) and slower < free


def test_groups_per_query_window_model():
    """One group per query with one-query windows; a slice that owns its worker costs 1/B groups per
    query; a cold slice among many about one; the fit recovers group_ns and query_ns."""
    from pmoss.sim.calibration import fit_group_ns, mean_groups_per_query
    from pmoss.sim.model import groups_per_query
    from pmoss.sim.placement import from_actions

    m = load_sim_machine(MACHINE)
    hw = hw_for(m)
    share = np.full(N, 1.0 / N)
    one_worker = from_actions(hw, np.zeros((1, N), dtype=np.int64))
    assert np.allclose(groups_per_query(share, one_worker, 1), 1.0)
    own = from_actions(hw, np.arange(N)[None, :] % hw.n_workers)  # N <= workers: every slice alone
    assert N <= hw.n_workers and np.allclose(groups_per_query(share, own, 100), 0.01)
    g = groups_per_query(share, one_worker, 100)[0]
    assert np.allclose(g, (1 - (1 - 1 / N) ** 100) / (100 / N))
    lookup = _lookup()
    truth = Calibration(query_ns=300.0, group_ns=900.0)
    t_one = worker_ns(m, lookup, replace(truth, window_queries=1), n_records=N_REC, n_slices=N)[0]
    t_many = worker_ns(m, lookup, replace(truth, window_queries=1000), n_records=N_REC, n_slices=N)[0]
    assert t_one - t_many == pytest.approx(900.0 * (1 - mean_groups_per_query(m, lookup, 1000, n_records=N_REC, n_slices=N)), rel=1e-3)
    cal = fit_group_ns(m, lookup, t_one, t_many, 1000, Calibration(), n_records=N_REC, n_slices=N)
    assert cal.group_ns == pytest.approx(900.0, rel=1e-3) and cal.query_ns == pytest.approx(300.0, rel=1e-2)
    assert cal.window_queries == 100
