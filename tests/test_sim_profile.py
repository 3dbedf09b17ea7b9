"""Per-slice demand: access shares follow the YCSB generators, key ranges follow the dataset."""

import numpy as np
import pytest

from pmoss.contracts.workload import WORKLOADS, OpMix, Workload
from pmoss.sim.profile import (
    YCSB_ITEM_COUNT,
    fnv64,
    geometry,
    insert_order,
    slice_bounds,
    slice_profile,
    subtree_levels,
    zipf_head,
)

N_REC, N = 1_000_000, 64


def _fnv_reference(v: int) -> int:
    """YCSB Utils.fnvhash64 in plain Python (signed 64-bit arithmetic, then abs)."""
    h = 0xCBF29CE484222325
    for _ in range(8):
        h ^= v & 0xFF
        v >>= 8
        h = (h * 0x100000001B3) & (2**64 - 1)
    signed = h - 2**64 if h >= 2**63 else h
    return abs(signed)


def test_fnv64_matches_ycsb():
    xs = np.array([0, 1, 2, 12345, 2**40 + 7], dtype=np.uint64)
    assert [int(x) for x in fnv64(xs)] == [_fnv_reference(int(x)) for x in xs]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_shares_sum_to_one(name):
    prof = slice_profile(WORKLOADS[name], N_REC, N)
    assert prof.share.sum() == pytest.approx(1.0, abs=1e-9)
    assert np.allclose(prof.op_frac.sum(0), 1.0)
    visits = (prof.leaf_count * prof.leaf_visits).sum(1)  # leaf visits per query of each slice
    assert np.all(visits >= 1 - 1e-9)


def test_zipf_hottest_slice_holds_the_hottest_ycsb_rank():
    probs, _ = zipf_head(YCSB_ITEM_COUNT, 0.99)
    share = slice_profile(WORKLOADS["ycsb-c"], N_REC, N).share
    assert share.max() >= probs[0]  # 1 / zeta(10^10, 0.99) ~ 3.8 %
    assert share.max() < probs[0] + 5.0 / N


def test_uniform_hotspot_latest_shapes():
    uni = slice_profile(Workload(name="u", mix=OpMix(read=1.0), distribution="uniform"), N_REC, N).share
    assert np.allclose(uni, 1 / N)
    hot = slice_profile(Workload(name="h", mix=OpMix(read=1.0), distribution="hotspot"), N_REC, N).share
    hot_keys = int(0.2 * N) * N_REC / N  # the first 12 slices are all hot keys
    assert hot[: int(0.2 * N)].sum() == pytest.approx(0.8 * hot_keys / (0.2 * N_REC), rel=1e-6)
    latest = slice_profile(WORKLOADS["ycsb-d"], N_REC, N).share
    assert latest.argmax() == N - 1


def test_inserts_spread_evenly_over_slices():
    prof = slice_profile(WORKLOADS["rsi-20-30-50"], N_REC, N, "hashed")
    assert np.allclose(prof.op_share[2], 0.5 / N)


def test_dense_inserts_append_to_the_last_slice():
    """The runtime appends dense inserts past the largest key (workload.c new_key)."""
    assert insert_order("dense") == "append" and insert_order("uniform") == insert_order("clustered") == "hashed"
    prof = slice_profile(WORKLOADS["rsi-20-30-50"], N_REC, N, "append")
    assert prof.op_share[2, -1] == pytest.approx(0.5) and np.all(prof.op_share[2, :-1] == 0)
    assert prof.insert_shift_lines == 0 and prof.split_every > slice_profile(WORKLOADS["rsi-20-30-50"], N_REC, N).split_every
    with pytest.raises(ValueError):
        slice_profile(WORKLOADS["rsi-20-30-50"], N_REC, N, "sorted")


def test_each_slice_has_its_own_subtree():
    """The runtime keeps one tree per slice (routers find the slice), so every inner level a
    worker visits is its slice's own: 10M keys / 256 slices -> 223 leaves under 2 inner nodes
    under a 1-key root; a slice of one leaf has no inner level."""
    nodes, keys = subtree_levels(geometry(10_000_000), 256)
    assert nodes.tolist() == [2.0, 1.0] and keys == (111, 1)
    assert subtree_levels(geometry(40_000), 256)[0].size == 0
    # bulk-loaded full nodes (no inserts, or appends): 154 leaves of 254 keys under one root
    full = slice_profile(WORKLOADS["ycsb-c"], 10_000_000, 256)
    assert full.geometry.leaf_entries == 255 and full.inner_private.tolist() == [1.0] and full.inner_keys == (153,)
    assert slice_profile(WORKLOADS["rsi-20-30-50"], 10_000_000, 256, "append").geometry.leaf_entries == 255
    # inserts all over the tree split it towards the steady-state fill
    grown = slice_profile(WORKLOADS["rsi-20-30-50"], 10_000_000, 256, "hashed")
    assert grown.geometry.leaf_entries < 180 and grown.inner_private.tolist() == [2.0, 1.0]


def test_geometry_levels():
    g = geometry(10_000_000)
    assert g.level_nodes[-1] == 1 and g.height == 4
    assert g.level_nodes[0] == int(np.ceil(10_000_000 / g.leaf_entries))


@pytest.mark.parametrize("dataset", ["dense", "uniform", "clustered"])
def test_slice_bounds_are_ordered_and_disjoint(dataset):
    lo, hi = slice_bounds(dataset, N_REC, N)
    assert lo.dtype == np.uint64 and lo.size == N
    assert np.all(lo <= hi) and np.all(hi[:-1] < lo[1:])
    if dataset == "dense":
        assert lo[0] == 0 and hi[-1] == N_REC - 1
