"""The calibration hook of the simulator (docs/machine-model.md §14.3): math only, no runtime."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pmoss.contracts.policies import generate
from pmoss.contracts.workload import get_workload
from pmoss.sim import Calibration, throughput
from pmoss.sim.calibration import (
    STREAM_MLP_RANGE,
    batch_ns_for,
    fit_ipc,
    fit_op_ns,
    fit_scan_key_insn,
    fit_stream_mlp,
    ipc_for,
    model_batches_per_query,
    op_ns_for,
    scan_key_insn_for,
    single_op,
    worker_ns,
)
from pmoss.sim.hardware import hw_for
from pmoss.sim.placement import from_schedules
from pmoss.sim.pool import load_sim_machine

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
    assert op_ns_for(100.0, 250.0) == 150.0
    assert op_ns_for(100.0, 60.0) == -40.0  # signed: the table cost can exceed the measured one
    assert batch_ns_for(1500.0, 520.0, 1.0, 0.02) == pytest.approx(1000.0)
    assert batch_ns_for(500.0, 520.0, 1.0, 0.02) == 0.0  # clamped (noise)
    assert scan_key_insn_for(900.0, 0.0, 90.0, 2.0, 2.5) == pytest.approx(50.0)  # 10 ns/key at 5 insn/ns
    assert scan_key_insn_for(10.0, 50.0, 90.0, 2.0, 2.5) == 0.0  # clamped
    with pytest.raises(ValueError):
        op_ns_for(100.0, 0.0)
    with pytest.raises(ValueError):
        Calibration(op_ns=(1.0, 2.0))
    with pytest.raises(ValueError):
        Calibration(batch_queries=0)
    with pytest.raises(ValueError):
        ipc_for(100.0, 60.0, 2.0, 30.0)
    with pytest.raises(ValueError):
        Calibration(ipc=0.0)
    with pytest.raises(ValueError):
        Calibration(route_ns=-1.0)


def test_fit_ipc_reproduces_measured_worker_time():
    m = load_sim_machine(MACHINE)
    t0, _ = worker_ns(m, _lookup(), None, n_records=N_REC, n_slices=N)
    cal = fit_ipc(m, _lookup(), 3.0 * t0, Calibration(), n_records=N_REC, n_slices=N)
    assert worker_ns(m, _lookup(), cal, n_records=N_REC, n_slices=N)[0] == pytest.approx(3.0 * t0, rel=1e-3)


def test_fit_op_ns_reproduces_each_operation():
    """Each single-operation run's measured cost comes back from the fitted model (inserts below
    the table cost too: appends to the last slice); update takes the read's correction."""
    m = load_sim_machine(MACHINE)
    ops = {"read": single_op("read"), "insert": single_op("insert"), "scan": single_op("scan", scan_len=10)}
    t0 = {op: worker_ns(m, w, None, n_records=N_REC, n_slices=N)[0] for op, w in ops.items()}
    target = {"read": 3.0 * t0["read"], "insert": 0.7 * t0["insert"], "scan": 2.0 * t0["scan"]}
    cal = fit_op_ns(m, {op: (ops[op], target[op]) for op in ops}, Calibration(batch_ns=500.0), n_records=N_REC, n_slices=N)
    nob = replace(cal, batch_ns=None)  # the targets are net of the batch cost
    for op, w in ops.items():
        assert worker_ns(m, w, nob, n_records=N_REC, n_slices=N)[0] == pytest.approx(target[op], rel=1e-3)
    assert cal.op_ns[2] < 0 and cal.op_ns[1] == cal.op_ns[0] and cal.batch_ns == 500.0


def test_fit_scan_key_insn_reproduces_slope():
    m = load_sim_machine(MACHINE)
    short, long = (get_workload("ycsb-e").model_copy(update={"name": f"t-scan{k}", "distribution": "uniform", "scan_min": k, "scan_max": k}) for k in (10, 100))
    ts, tl = (worker_ns(m, w, None, n_records=N_REC, n_slices=N)[0] for w in (short, long))
    cal = fit_scan_key_insn(m, short, long, ts, ts + 2.0 * (tl - ts), Calibration(), n_records=N_REC, n_slices=N)
    fs, fl = (worker_ns(m, w, cal, n_records=N_REC, n_slices=N)[0] for w in (short, long))
    assert fl - fs == pytest.approx(2.0 * (tl - ts), rel=1e-3)


def test_fit_stream_mlp_reproduces_the_rise_and_clamps():
    """On a tree beyond the caches, the rise from 10- to 100-key scans falls as the prefetchers
    keep more streamed lines in flight; the fit inverts it, and clamps where no depth explains it."""
    m = load_sim_machine(MACHINE)
    n = 2_000_000
    short, long = single_op("scan", scan_len=10), single_op("scan", scan_len=100)
    rise = {mlp: worker_ns(m, long, Calibration(stream_mlp=mlp), n_records=n, n_slices=N)[0]
            - worker_ns(m, short, Calibration(stream_mlp=mlp), n_records=n, n_slices=N)[0] for mlp in (2.0, 12.0, 64.0)}  # fmt: skip
    assert rise[2.0] > rise[12.0] > rise[64.0]  # deeper prefetch, cheaper streamed lines
    fitted = fit_stream_mlp(m, short, long, 100.0, 100.0 + rise[12.0], Calibration(), n_records=n, n_slices=N)
    assert fitted.stream_mlp == pytest.approx(12.0, rel=0.05)
    assert fit_stream_mlp(m, short, long, 100.0, 100.0, Calibration(), n_records=n, n_slices=N).stream_mlp == STREAM_MLP_RANGE[1]
    assert fit_stream_mlp(m, short, long, 0.0, 1e6, Calibration(), n_records=n, n_slices=N).stream_mlp == STREAM_MLP_RANGE[0]


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
    slower = throughput(m, "ycsb-c", "dense", s, n_records=N_REC, calibration=Calibration(op_ns=(500.0,) * 4))[0]
    assert np.isfinite(slower) and slower < free


def test_batches_per_query_per_slice_batching():
    """b = min(G, max(1, Q q)): a drained queue of Q queries grouped by slice, q the slice's share
    of its threads' stream."""
    from pmoss.sim.model import batches_per_query
    from pmoss.sim.placement import from_actions

    m = load_sim_machine(MACHINE)
    hw = hw_for(m)
    share = np.full(N, 1.0 / N)
    one = from_actions(hw, np.zeros((1, N), dtype=np.int64))
    bpq = lambda Q, pl=one, G=100: batches_per_query(share, pl, hw.groups.member, G, Q)[0]  # noqa: E731
    assert np.allclose(bpq(10 * N), 0.1)  # 10 queries of each slice per drain
    assert np.allclose(bpq(10 * N, G=4), 0.25)  # full batches
    assert np.allclose(bpq(N // 2), 1.0)  # a slice's queries alone
    # every worker serves every slice (os-default): each slice's share of a worker's stream is 1/N
    spread = from_schedules(hw, [generate("os-default", m, N, seed=0)])
    assert np.allclose(bpq(10 * N, spread), 0.1)
    # one-core kind: a worker's drain holds only its own slices, so their batches are larger
    own = from_schedules(hw, [generate("sn-spread", m, N, seed=0)])
    assert float(share @ bpq(10 * N, own)) < 0.1 / 2
    cal = Calibration(batch_ns=1000.0, queue_capacity=10 * N)
    assert model_batches_per_query(m, _lookup(), cal, n_records=N_REC, n_slices=N) == pytest.approx(0.1)


def test_batch_cost_saturates_the_worker():
    """The solved X saturates the worker (utilisation 1 with the batch cost included) even when
    the per-batch cost dwarfs the query."""
    from pmoss.sim.episode import model_run, resolve
    from pmoss.sim.placement import from_actions

    m = load_sim_machine(MACHINE)
    for batch_ns in (1_000.0, 100_000.0):
        cal = Calibration(batch_ns=batch_ns)
        inp = resolve(m, _lookup(), "dense", N_REC, 1.0, cal)
        _, prof, sol, _ = model_run(inp, from_actions(hw_for(m, cal), np.zeros((1, N), dtype=np.int64)), N)
        assert float(sol.X[0] * (prof.share @ sol.t_ns[0]) * 1e-9) == pytest.approx(1.0, rel=1e-3)


def test_routers_per_node_lift_the_router_bound():
    m = load_sim_machine(MACHINE)
    s = [generate("sn-spread", m, N, seed=0)]
    one = throughput(m, "ycsb-c", "dense", s, n_records=N_REC, calibration=Calibration(route_ns=1_000.0))[0]
    four = throughput(m, "ycsb-c", "dense", s, n_records=N_REC, calibration=Calibration(route_ns=1_000.0, routers_per_node=4))[0]
    assert one == pytest.approx(m.numa_nodes * 1e6, rel=1e-3)  # router-bound: one router per node at 1 us
    assert four > 1.5 * one
    with pytest.raises(ValueError, match="routers_per_node"):
        Calibration(routers_per_node=0)


@pytest.mark.parametrize("field", ["batch_ns", "ipc", "route_ns", "scan_key_insn", "shared_cpus", "stream_mlp"])
def test_non_finite_constant_names_the_field(field):
    with pytest.raises(ValueError, match=f"Calibration.{field}: must be finite"):
        Calibration(**{field: float("inf")})


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf x 0 on the way to the error under test
def test_non_finite_pressure_raises_instead_of_hanging():
    """The throughput root search widens its bracket until feasible: an infinite cost per query
    must end in an error, not loop (an inf batch cost slipped past validation before)."""
    m = load_sim_machine(MACHINE)
    cal = object.__new__(Calibration)  # bypass validation: the model's own guard is under test
    object.__setattr__(cal, "__dict__", {**Calibration(batch_queries=100).__dict__, "batch_ns": float("inf")})
    with pytest.raises(ValueError, match="not finite"):
        throughput(m, "ycsb-c", "dense", [generate("sn-spread", m, N, seed=0)], n_records=N_REC, calibration=cal)
