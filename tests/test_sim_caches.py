"""Line-granularity cache model (docs/machine-model.md §4) and the host's L3 share (§14.3)."""

from __future__ import annotations

import numpy as np
import pytest

from pmoss.sim import Calibration
from pmoss.sim.caches import INNER_LINES, LEAF_LINES, search_lines
from pmoss.sim.calibration import fit_l3_share, single_op, worker_ns
from pmoss.sim.pool import load_sim_machine
from pmoss.workload import OpMix, Workload

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
    assert 1.0 < whole_l3 < ratio, (whole_l3, ratio)


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
