"""Physics monotonicity of the machine model (docs/machine-model.md §14.1)."""

from functools import partial

import numpy as np
import pytest

from pmoss.contracts.machine import Machine
from pmoss.contracts.policies import BASELINE_KINDS, generate
from pmoss.contracts.workload import WORKLOADS
from pmoss.sim import load_sim_machine, throughput
from pmoss.sim import throughput as _throughput
from pmoss.sim.hardware import hw_for
from pmoss.sim.model import solve
from pmoss.sim.placement import from_actions, from_schedules
from pmoss.sim.profile import slice_profile

N, N_REC = 64, 1_000_000
CASES = [("amd-milan-nps4", "ycsb-c"), ("intel-snb-4s", "scan"), ("intel-skx-4s", "rsi-20-30-50"), ("ibm-power8", "ycsb-a")]


def _variant(m: Machine, **changes) -> Machine:
    data = m.model_dump()
    for key, value in changes.items():
        if key.startswith("caches."):
            data["caches"][key.split(".")[1]] = value
        else:
            data[key] = value
    return Machine.model_validate(data)


def _schedules(m: Machine) -> list:
    return [generate(k, m, N, s) for k in BASELINE_KINDS for s in (0, 1)]


@pytest.mark.parametrize("name, workload", CASES)
def test_more_remote_placement_is_never_faster(name, workload):
    m = load_sim_machine(name)
    hw, prof = hw_for(m), slice_profile(WORKLOADS[workload], N_REC, N)
    rng = np.random.default_rng(0)
    actions = np.stack([rng.integers(hw.n_workers, size=N) for _ in range(3)])
    xs = []
    for frac in (0.0, 0.25, 0.5, 1.0):  # move the memory of a growing share of slices off-node
        pl = from_actions(hw, actions)
        moved = np.arange(N) < frac * N
        far = np.argmax(hw.dist_ns[hw.worker_node[actions]], axis=2)  # [B, N] the farthest node
        pl.P = np.where(moved[None, :, None], np.eye(hw.n_nodes)[far], pl.P)
        xs.append(solve(hw, prof, pl)[0].X)
    assert np.all(np.diff(np.array(xs), axis=0) <= 1e-9 * xs[0])


@pytest.mark.parametrize("name, workload", CASES)
def test_more_l3_is_never_slower(name, workload):
    m = load_sim_machine(name)
    big = _variant(m, **{"caches.l3_mib": m.caches.l3_mib * 2})
    base = throughput(m, workload, "dense", _schedules(m), n_records=N_REC)
    more = throughput(big, workload, "dense", [s.model_copy() for s in _schedules(m)], n_records=N_REC)
    assert np.all(more >= base * (1 - 1e-6))


def test_more_l3_is_faster_when_the_tree_does_not_fit():
    """Sandy Bridge's 16 MiB L3 per socket holds the lines a 1M-key tree's scans touch (keys
    only, §2.3), not those of a 4M-key tree: there the doubled L3 must help some schedule."""
    m = load_sim_machine("intel-snb-4s")
    big = _variant(m, **{"caches.l3_mib": m.caches.l3_mib * 2})
    base = throughput(m, "scan", "dense", _schedules(m), n_records=4 * N_REC)
    more = throughput(big, "scan", "dense", [s.model_copy() for s in _schedules(m)], n_records=4 * N_REC)
    assert np.all(more >= base * (1 - 1e-6))
    assert np.any(more > base * 1.05)


@pytest.mark.parametrize("name, workload", CASES)
def test_more_bandwidth_is_never_slower(name, workload):
    m = load_sim_machine(name)
    fast = _variant(m, mem_bandwidth_gbps=[b * 2 for b in m.mem_bandwidth_gbps], links=[{**l.model_dump(), "gbps": l.gbps * 2} for l in m.links])
    base = throughput(m, workload, "dense", _schedules(m), n_records=N_REC)
    more = throughput(fast, workload, "dense", _schedules(m), n_records=N_REC)
    assert np.all(more >= base * (1 - 1e-6))


@pytest.mark.parametrize("name, workload", CASES)
def test_throughput_never_exceeds_the_core_bound(name, workload):
    m = load_sim_machine(name)
    hw, prof = hw_for(m), slice_profile(WORKLOADS[workload], N_REC, N)
    sol, _ = solve(hw, prof, from_schedules(hw, _schedules(m)))
    assert np.all(sol.thread_util <= 1 + 1e-3)
    busy = (sol.X[:, None] * prof.share[None, :] * sol.t_ns * 1e-9).sum(1)  # worker-seconds per second
    assert np.all(busy <= hw.n_workers * (1 + 1e-3))
    assert np.all(sol.X <= hw.n_workers / (sol.t_ns.min(1) * 1e-9))


def test_one_core_kinds_read_only_local_memory():
    m = load_sim_machine("amd-milan-nps4")
    hw, prof = hw_for(m), slice_profile(WORKLOADS["ycsb-c"], N_REC, N)
    sol, _ = solve(hw, prof, from_schedules(hw, [generate("sn-random", m, N, 3), generate("os-interleave", m, N, 0)]))
    assert np.allclose(sol.local_share[0], 1.0)
    assert np.allclose(sol.local_share[1], 1 / m.numa_nodes)


def test_placement_changes_throughput_and_winners_depend_on_the_machine():
    """Placement moves throughput by > 1.2x on multi-node machines; on one-node Grace at 10M
    records the one router (5 ns a query) caps every schedule but one, and says so (bound 1)."""
    winners = set()
    for name in ("amd-milan-nps1", "intel-skx-4s", "amd-milan-nps4"):
        m = load_sim_machine(name)
        xs = throughput(m, "ycsb-c", "dense", [generate(k, m, 256, 0) for k in BASELINE_KINDS])
        assert xs.max() / xs.min() > 1.2
        winners.add(BASELINE_KINDS[int(xs.argmax())])
    assert len(winners) > 1
    hw = hw_for(load_sim_machine("nvidia-grace"))
    sol, _ = solve(hw, slice_profile(WORKLOADS["ycsb-c"], N_REC, 256), from_schedules(hw, [generate(k, hw.machine, 256, 0) for k in BASELINE_KINDS]))
    capped = sol.bound == 1
    assert capped.sum() >= len(BASELINE_KINDS) - 2 and np.allclose(sol.X[capped], hw.n_nodes / 5e-9)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["amd-milan-nps1", "intel-snb-4s", "ibm-power8", "nvidia-grace"]),
       workload=st.sampled_from(list(WORKLOADS)), seed=st.integers(0, 2**16))  # fmt: skip
def test_any_one_core_schedule_gives_a_finite_bounded_throughput(name, workload, seed):
    m = load_sim_machine(name)
    hw, prof = hw_for(m), slice_profile(WORKLOADS[workload], N_REC, N)
    actions = np.random.default_rng(seed).integers(hw.n_workers, size=(2, N))
    sol, d = solve(hw, prof, from_actions(hw, actions))
    assert np.all(np.isfinite(sol.X)) and np.all(sol.X > 0)
    assert np.all(sol.t_ns > 0) and np.all(sol.thread_util <= 1 + 1e-3)
    assert np.all(d.read_lines >= 0) and np.all(d.c2c_lines == 0)  # one-core: no coherence traffic


def test_os_default_first_touch_of_grown_pages():
    """os-default under inserts on a host with NUMA balancing off: pages allocated during the
    window sit on the inserting workers' nodes (§5.1), so a longer window (more growth) never
    lowers throughput, reaches at most the placement where all memory follows execution, and
    workloads without inserts do not move."""
    from pmoss.sim.hardware import Calibration
    from pmoss.sim.placement import grown_share

    off = Calibration(numa_balancing=())
    assert grown_share(np.array([0.0]), 0.5, 10.0, N_REC)[0] == 0.0
    g = grown_share(np.array([1e5, 1e6, 1e7, 1e9]), 0.5, 10.0, N_REC)
    assert np.all(np.diff(g) > 0) and np.all((g > 0) & (g < 1))
    m = load_sim_machine("amd-milan-nps4")
    sched = [generate("os-default", m, N, 0)]
    big = 10_000_000  # a tree that does not fit the caches: os-default is bound by the loader's node
    # uniform data: inserts are hashed over the slices, so reads reach the grown pages
    throughput = partial(_throughput, calibration=off)
    xs = [throughput(m, "rsi-20-30-50", "uniform", sched, n_records=big, window_s=w)[0] for w in (1e-6, 0.01, 0.1, 1.0, 10.0)]
    # (1.07x since written leaf lines come from the writers' caches, §6: less of the cost is DRAM traffic to the loader's node)
    assert np.all(np.diff(xs) >= -1e-6 * xs[0]) and xs[-1] > 1.05 * xs[0]
    assert throughput(m, "ycsb-c", "uniform", sched, n_records=big, window_s=0.01)[0] == throughput(m, "ycsb-c", "uniform", sched, n_records=big, window_s=10.0)[0]
    # dense data: appended keys are never read back, so the window does not matter
    dense = [throughput(m, "rsi-20-30-50", "dense", sched, n_records=big, window_s=w)[0] for w in (0.01, 10.0)]
    assert dense[0] == dense[1]
    interleave = throughput(m, "rsi-20-30-50", "uniform", [generate("os-interleave", m, N, 0)], n_records=big)[0]
    assert xs[-1] <= interleave * 1.001  # fully grown first touch spreads like execution: interleave at best


def test_numa_balancing_moves_policy_free_pages_towards_their_accessors():
    """§5.2: with balancing on (the default), os-default's bulk-loaded pages do not stay on the
    loader's node: pages every worker reads spread like interleave, whatever the window; with it
    off they stay (the loader's node binds). Bound kinds never move; one node: nothing to do."""
    from pmoss.sim.hardware import PAPER_RUNTIME, Calibration
    from pmoss.sim.placement import balanced

    assert np.allclose(balanced(np.array([0.5, 0.25, 0.25])), np.array([4, 1, 1]) / 6)
    assert np.allclose(balanced(np.eye(3)[1]), np.eye(3)[1])
    m = load_sim_machine("amd-milan-nps4")
    kinds = ["os-default", "os-interleave", "se-numa", "sn-numa"]
    scheds = [generate(k, m, N, 0) for k in kinds]
    R = 1_000_000_000  # a tree far beyond the caches: every query reads memory
    on = _throughput(m, "ycsb-c", "uniform", scheds, n_records=R)
    off = _throughput(m, "ycsb-c", "uniform", scheds, n_records=R, calibration=Calibration(numa_balancing=()))
    assert np.isclose(on[0], on[1]) and on[0] > 1.1 * off[0]  # loader's node no longer binds os-default
    assert np.allclose(on[1:], off[1:])  # interleaved and bound pages keep their policy
    paper = _throughput(m, "ycsb-c", "uniform", scheds, n_records=R, calibration=PAPER_RUNTIME)
    assert np.isclose(paper[2], paper[1], rtol=1e-3)  # move_pages sets no policy: se-numa's pages drift too


def test_writes_in_a_shared_group_move_lock_and_written_lines_between_its_threads():
    """A shared group's write takes the lock word and the written line from the last writer (§6):
    from another L3 domain (c2c) with probability 1 - 1/span, from another core of the same
    domain (an in-domain transfer) with 1/span - 1/threads. Leaf lines another domain wrote come
    from its cache whether they would have hit this L3 or not. One domain: no c2c, 2 w (1 - 1/threads)
    in-domain lines; one-core slices and read-only slices: none."""
    from dataclasses import replace

    from pmoss.sim.model import WRITE_SYNC_LINES, _coherence, _threads_per_slice

    hw = hw_for(load_sim_machine("amd-milan-nps1"))
    pl = from_schedules(hw, [generate("os-default", hw.machine, N, 0)])
    one_domain = replace(pl, span=np.ones_like(pl.span))
    rng = np.random.default_rng(0)
    s1 = rng.uniform(0, 5, (1, N))
    hits = (s1, s1 + 3, s1 + 6)  # L1 <= L2 <= L3 line hits
    total = s1[0] + 9  # leaf lines touched: 3 miss the L3
    w = np.full(N, 0.5)
    coh = lambda p, wf: _coherence(p, wf, hits, hits, total)  # noqa: E731
    for p in (pl, one_domain):
        threads = _threads_per_slice(p)
        assert np.all(threads > 1)
        r0, r1 = coh(p, 0 * w), coh(p, w)
        assert np.allclose(r0[3], 0) and np.allclose(r0[2], 0) and np.allclose(r0[4], 0)
        lost = w * (1 - 1 / p.span)
        assert np.allclose(r1[3], lost * (total - hits[0] + WRITE_SYNC_LINES))
        assert np.allclose(r1[4], lost * (total - hits[2]))  # misses that the writer's cache serves
        assert np.allclose(r1[2], WRITE_SYNC_LINES * w * np.maximum(1 / p.span - 1 / threads, 0))
    assert np.all(coh(one_domain, w)[2] > coh(one_domain, 0 * w)[2])
    one_core = from_actions(hw, np.zeros((1, N), dtype=np.int64))
    assert all(np.allclose(a, b) for a, b in zip(coh(one_core, w), coh(one_core, 0 * w)))
