"""Line-granularity cache model (docs/machine-model.md §4) and the host's L3 share (§14.3)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pmoss.contracts.policies import generate
from pmoss.contracts.workload import OpMix, Workload, get_workload
from pmoss.sim import Calibration
from pmoss.sim.caches import (
    INNER_LINES,
    LEAF_LINES,
    distinct_below,
    hit_rates,
    scan_lines,
    search_lines,
)
from pmoss.sim.calibration import fit_l3_share, single_op, worker_ns
from pmoss.sim.hardware import hw_for
from pmoss.sim.placement import from_schedules
from pmoss.sim.pool import load_sim_machine
from pmoss.sim.profile import slice_profile

MACHINE = "amd-milan-nps1"  # AMD, 32 MiB L3 domains, like this project's host
N = 256


def _cost(machine, dist: str, n_records: int, cal: Calibration | None) -> float:
    lookup = Workload(name=f"t-{dist}", mix=OpMix(read=1.0), distribution=dist)
    return worker_ns(machine, lookup, cal, n_records=n_records, n_slices=N)[0]


def test_a_visit_touches_the_lines_of_its_binary_search():
    u, path = search_lines(176, leaf=True)
    assert u[0] == 1.0  # header (version, count) and the first probe's line: every visit
    assert 6.0 < LEAF_LINES < 7.5 and 6.0 < INNER_LINES < 7.5  # ~5 key lines + header + value/child
    assert np.allclose(path.sum(1).mean(), LEAF_LINES)
    assert (u > 0).sum() > 40  # over all keys most lines of the node are touched ...
    assert (u >= 0.25).sum() <= 8  # ... but only a few by a large share of visits


def test_zipf_lookups_are_much_cheaper_than_uniform_once_the_tree_leaves_the_l3():
    """Measured on this project's host (§14.3): single-worker zipf(0.99) lookups on 1 M keys cost
    ~1.4x less than uniform ones. Che over lines keeps the hot keys' search paths cached when
    whole nodes would not fit; with a small L3 share (a shared host) the difference is DRAM lines."""
    m = load_sim_machine(MACHINE)
    small_l3 = Calibration(l3_share=1 / 16)
    ratio = _cost(m, "uniform", 1_000_000, small_l3) / _cost(m, "zipf", 1_000_000, small_l3)
    assert ratio > 1.2
    # a tree that stays in the private caches leaves little to gain
    assert _cost(m, "uniform", 60_000, small_l3) / _cost(m, "zipf", 60_000, small_l3) < 1.12
    # the whole L3: the 1 M-key tree fits, the gap is L2/L3 hits only
    whole_l3 = _cost(m, "uniform", 1_000_000, None) / _cost(m, "zipf", 1_000_000, None)
    assert whole_l3 > 1.0, f"zipf no cheaper than uniform with the whole L3: {whole_l3:.3f}"
    assert whole_l3 < ratio, f"the whole L3 ({whole_l3:.3f}) should narrow the gap of the small share ({ratio:.3f})"


def test_a_smaller_l3_share_never_makes_lookups_cheaper():
    m = load_sim_machine(MACHINE)
    costs = [_cost(m, "uniform", 1_000_000, Calibration(l3_share=s)) for s in (1.0, 0.5, 0.25, 0.1, 0.03)]
    assert all(b >= a - 1e-6 for a, b in zip(costs, costs[1:], strict=False))
    assert costs[-1] > 1.5 * costs[0]


def test_fit_l3_share_reproduces_the_measured_rise():
    m = load_sim_machine(MACHINE)
    truth = Calibration(l3_share=0.1)
    t_small, t_large = _cost(m, "uniform", 60_000, truth), _cost(m, "uniform", 1_000_000, truth)
    fitted = fit_l3_share(m, t_small + 50.0, t_large + 50.0, Calibration(), n_small=60_000, n_large=1_000_000, n_slices=N)
    assert fitted.l3_share == pytest.approx(0.1, rel=0.05)  # per-query overheads cancel in the rise
    flat = fit_l3_share(m, 100.0, 101.0, Calibration(), n_small=60_000, n_large=1_000_000, n_slices=N)
    assert flat.l3_share == 1.0
    assert single_op("read").distribution == "uniform"  # the fit never sees zipf keys


def test_l3_share_is_validated():
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="l3_share"):
            Calibration(l3_share=bad)


def test_a_scan_copies_key_lines_and_reads_no_value():
    """The runtime's workers copy keys only (runtime.c run_query): a scan's lines are its search
    path without the value line plus the key lines it streams, 8 keys per line."""
    dep, stream = scan_lines(255, 50)
    value_half = -(-(24 + 8 * 255) // 64)  # the first line holding values only
    assert not dep[:, value_half:].any() and not stream[:, value_half:].any()
    assert 50 * 8 / 64 - 1 <= (dep | stream)[:, 1:value_half].sum(1).mean() - 1 <= 50 * 8 / 64 + 6
    assert not (dep & stream).any()  # a line is either on the dependent path or streamed
    _, long = scan_lines(255, 300)  # past the leaf's end: the next leaf's lines (wrapped onto this one's)
    assert long[:, :value_half].sum(1).min() >= 255 * 8 // 64 - 8


def test_a_victim_l3_adds_the_distinct_l2s_below_it():
    """Zen's L3 holds what the L2s evict, so slices spread over a domain's cores get its L3 plus
    their L2s; a shared group's L2s all hold the same hot set (one L2 of distinct lines)."""
    m = load_sim_machine(MACHINE)
    hw = hw_for(m, Calibration(l3_share=1 / 16))  # 2 MiB of each L3: the L2s below it matter
    G = hw.groups.n_cache_groups
    spread, shared = (from_schedules(hw, [generate(k, m, N, 0)]) for k in ("sn-spread", "os-default"))
    per_domain = distinct_below(spread.l2_group, spread.l3_group, G)[0]
    assert per_domain.max() == 4  # 4 cores per CCX, every one holds slices
    assert distinct_below(shared.l2_group, shared.l3_group, G)[0].max() == 1
    prof = slice_profile(get_workload("ycsb-c"), 10_000_000, N)
    victim = hit_rates(hw, prof, spread)["h3"]
    inclusive = hit_rates(replace(hw, uarch=replace(hw.uarch, l3_victim=False)), prof, spread)["h3"]
    assert np.all(victim >= inclusive - 1e-12) and np.any(victim > inclusive + 1e-6)
