"""What the workload asks of each slice: B+-tree geometry, per-slice access shares, key ranges.

Everything here depends only on (workload, dataset, n_records, n_slices), never on the schedule,
so it is computed once and cached. Equations and assumptions: docs/machine-model.md §2-§3.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from pmoss.contracts.workload import Workload

LEAF_CAPACITY = 255  # entries per leaf (docs/design.md §5)
INNER_CAPACITY = 255  # a 4 KiB inner node: 8-byte keys + 8-byte child pointers
FILL = 0.69  # steady-state fill of a B+-tree built by random inserts (Yao's ln 2)
BULK_FILL = 1.0  # the runtime bulk-loads every slice's tree with full nodes (runtime.c: pm_tree_bulk_load(.., 100))
NODE_BYTES = 4096
ENTRY_BYTES = 16  # 64-bit key + 64-bit value
TOP_RANKS = 1 << 18
YCSB_ITEM_COUNT = 10_000_000_000  # ScrambledZipfianGenerator.ITEM_COUNT  # Zipf ranks placed exactly; the remaining tail mass is spread evenly
OPS = ("read", "update", "insert", "scan")
N_LEAF_CLASSES = 8  # popularity classes of leaves per slice: sizes 1, 1, 2, 4, ..., rest
INSERT_ORDERS = ("hashed", "append")
# an insert into a random position shifts half a leaf; a full leaf splits in half, so at steady
# fill (FILL) a leaf splits every LEAF_CAPACITY - FILL * LEAF_CAPACITY inserts. An append shifts
# nothing and the rightmost leaf splits every LEAF_CAPACITY - LEAF_CAPACITY // 2 - 1 appends
# (the left half stays behind, half full, and is never written again).
SHIFT_LINES = {"hashed": 0.5 * 176 * 16 / 64, "append": 0.0}
SPLIT_EVERY = {"hashed": float(LEAF_CAPACITY - 176), "append": float(LEAF_CAPACITY - LEAF_CAPACITY // 2 - 1)}


def insert_order(dataset: str) -> str:
    """Where the runtime's inserts land (runtime/src/workload.c new_key): `dense` appends keys past
    the largest one, so every insert goes to the last slice's rightmost leaf; `uniform` draws
    random 64-bit keys and `clustered` keys next to existing ones, both spread over the slices in
    proportion to their records, like YCSB's insertorder=hashed."""
    return "append" if dataset == "dense" else "hashed"


@dataclass(frozen=True)
class Geometry:
    n_records: int
    leaf_entries: float  # mean entries per leaf
    fanout: float  # mean children per inner node
    level_nodes: tuple[int, ...]  # node count per level, leaves first, root (1) last

    @property
    def height(self) -> int:
        return len(self.level_nodes)


def geometry(n_records: int, fill: float = FILL) -> Geometry:
    leaf_entries, fanout = LEAF_CAPACITY * fill, INNER_CAPACITY * fill
    levels = [max(1, int(np.ceil(n_records / leaf_entries)))]
    while levels[-1] > 1:
        levels.append(max(1, int(np.ceil(levels[-1] / fanout))))
    return Geometry(n_records, leaf_entries, fanout, tuple(levels))


@dataclass(frozen=True)
class SliceProfile:
    """Per-slice demand, independent of the schedule. Shares are of all queries (sum to 1)."""

    geometry: Geometry
    op_share: np.ndarray  # [4, N] share of all queries that are op o on slice s (OPS order)
    leaf_count: np.ndarray  # [N, K] leaves per popularity class
    leaf_visits: np.ndarray  # [N, K] visits per query of the slice to ONE leaf of the class
    leaf_top: np.ndarray  # [N, K] share of a leaf's visits that go to its most requested key (§4)
    inner_private: np.ndarray  # [I] inner nodes per level of each slice's subtree, root last (each visited 1/n per query)
    inner_keys: tuple[int, ...]  # [I] separator keys per inner node of each level (the root may hold few)
    scan_keys: float  # mean keys read by a scan
    inserts: str = "hashed"  # INSERT_ORDERS: where inserts land

    @property
    def insert_shift_lines(self) -> float:  # lines an insert shifts in its leaf
        return SHIFT_LINES[self.inserts]

    @property
    def split_every(self) -> float:  # inserts between two splits of the inserted-into leaf
        return SPLIT_EVERY[self.inserts]

    @property
    def scan_followers(self) -> float:  # leaves a scan reaches through `next` after its start leaf
        return max(self.scan_keys - 1.0, 0.0) / self.geometry.leaf_entries

    @property
    def share(self) -> np.ndarray:  # [N]
        return self.op_share.sum(0)

    @property
    def op_frac(self) -> np.ndarray:  # [4, N] op mix within each slice
        return self.op_share / np.maximum(self.share, 1e-300)


def fnv64(x: np.ndarray) -> np.ndarray:
    """YCSB's Utils.fnvhash64: FNV-1a over the 8 bytes of a long (low byte first), then abs()."""
    h = np.full(x.shape, 0xCBF29CE484222325, dtype=np.uint64)
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        for i in range(8):
            h ^= (x >> np.uint64(8 * i)) & np.uint64(0xFF)
            h *= np.uint64(0x100000001B3)
    return np.abs(h.view(np.int64)).view(np.uint64)  # Math.abs(Long.MIN_VALUE) stays negative: 1 in 2^64


def zipf_head(n: int, theta: float) -> tuple[np.ndarray, float]:
    """Probabilities of ranks 0..min(n, TOP_RANKS)-1 and the mass of the remaining tail."""
    m = min(n, TOP_RANKS)
    head = np.arange(1, m + 1, dtype=np.float64) ** -theta
    # tail sum_{r=m+1}^{n} r^-theta by the midpoint integral (error < 1e-6 of the total)
    a, b = m + 0.5, n + 0.5
    tail = np.log(b / a) if abs(theta - 1) < 1e-9 else (b ** (1 - theta) - a ** (1 - theta)) / (1 - theta)
    total = head.sum() + max(tail, 0.0)
    return head / total, max(tail, 0.0) / total


def key_mass(workload: Workload, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Where request keys fall: (key indices, their probabilities, mass spread evenly over all keys).

    Key index = rank in key order (0 = smallest loaded key)."""
    dist = workload.distribution
    if dist == "uniform":
        return np.zeros(0, np.int64), np.zeros(0), 1.0
    if dist == "hotspot":
        # YCSB HotspotIntegerGenerator: the hot set is the low end of the key range; a request
        # is uniform over the hot keys with probability hotspot_share, else over the cold keys
        hot = min(n - 1, max(1, int(n * workload.hotspot_fraction)))
        cold_each = (1 - workload.hotspot_share) / (n - hot)
        hot_each = workload.hotspot_share / hot - cold_each  # on top of the even spread
        return np.arange(hot, dtype=np.int64), np.full(hot, hot_each), cold_each * n
    if dist == "latest":  # newest (largest) keys are the most popular, not scrambled
        probs, tail = zipf_head(n, workload.zipf_theta)
        return n - 1 - np.arange(probs.size, dtype=np.int64), probs, tail
    # zipf: YCSB ScrambledZipfian draws a rank from a Zipf over 10^10 items and hashes it onto
    # the n keys, so the hottest key gets 1/zeta(10^10) and popular keys are scattered.
    probs, tail = zipf_head(YCSB_ITEM_COUNT, workload.zipf_theta)
    idx = (fnv64(np.arange(probs.size, dtype=np.uint64)) % np.uint64(n)).astype(np.int64)
    return idx, probs, tail


def tree_fill(workload: Workload, inserts: str) -> float:
    """Node fill (§3): the bulk-loaded trees stay full unless inserts land all over them (hashed
    order), which splits leaves towards the steady state; appends only add half-full leaves at
    the right end of the last slice."""
    return FILL if inserts == "hashed" and workload.mix.insert > 0 else BULK_FILL


@lru_cache(maxsize=64)
def slice_profile(workload: Workload, n_records: int, n_slices: int, inserts: str = "hashed") -> SliceProfile:
    """Per-slice demand for equal-count slices (cached; arrays are shared, do not modify).
    inserts: "hashed" (even over the slices' leaves) or "append" (all on the last slice's
    rightmost leaf); `insert_order(dataset)` says which the runtime does for a dataset."""
    if inserts not in INSERT_ORDERS:
        raise ValueError(f"inserts: must be one of {INSERT_ORDERS}, got {inserts!r}")
    geo = geometry(n_records, tree_fill(workload, inserts))
    n_leaves = int(np.ceil(n_records / n_slices / geo.leaf_entries))  # Ls, leaves per slice
    req, top = _request_leaf_mass(workload, n_records, n_slices, n_leaves)  # [N, Ls] each
    if inserts == "hashed":
        ins = np.full((n_slices, n_leaves), 1.0 / (n_slices * n_leaves))
    else:
        ins = np.zeros((n_slices, n_leaves))
        ins[-1, -1] = 1.0
    mix = workload.mix
    op_share = np.stack([mix.read * req.sum(1), mix.update * req.sum(1), mix.insert * ins.sum(1), mix.scan * req.sum(1)])
    # one search per operation; a scan's following leaves are reached through `next` (§2.3)
    visit_mass = (mix.read + mix.update + mix.scan) * req + mix.insert * ins  # [N, Ls]
    share = np.maximum(op_share.sum(0), 1e-300)  # [N]
    # the hottest key's share of its leaf's visits (reads, updates and scans start at it)
    top_share = (mix.read + mix.update + mix.scan) * top / np.maximum(visit_mass, 1e-300)
    count, visits, top_mean = _leaf_classes(visit_mass / share[:, None], top_share)
    nodes, keys = subtree_levels(geo, n_slices)
    return SliceProfile(geo, op_share, count, visits, top_mean, nodes, keys, workload.mean_scan, inserts)


def _request_leaf_mass(workload: Workload, n: int, n_slices: int, n_leaves: int) -> tuple[np.ndarray, np.ndarray]:
    """[N, Ls] probability that a request key falls in leaf l of slice s, and [N, Ls] the
    probability of the leaf's most requested key (its share of the even spread included)."""
    idx, probs, spread = key_mass(workload, n)
    idx, inv = np.unique(idx, return_inverse=True)  # several hot ranks can hash to one key
    probs = np.bincount(inv.ravel(), weights=probs, minlength=idx.size)
    s = idx * n_slices // n  # equal-count slices: slice of each key index
    lo = -(-s * n // n_slices)  # first key index of that slice (ceil(s n / N))
    leaf = np.minimum((idx - lo) * n_slices * n_leaves // n, n_leaves - 1)
    mass = np.bincount(s * n_leaves + leaf, weights=probs, minlength=n_slices * n_leaves)
    top = np.zeros(n_slices * n_leaves)
    np.maximum.at(top, s * n_leaves + leaf, probs)
    even = spread / n  # per key
    return (mass.reshape(n_slices, n_leaves) + spread / (n_slices * n_leaves),
            top.reshape(n_slices, n_leaves) + even)  # fmt: skip


def _leaf_classes(visits: np.ndarray, top: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bucket each slice's leaves by popularity: sizes 1, 1, 2, 4, ... and the rest.

    visits: [N, Ls] visits per query of the slice to each leaf, top: [N, Ls] the hottest key's
    share of the leaf's visits -> (count [N, K], mean visits [N, K], visit-weighted mean top [N, K])."""
    n_slices, n_leaves = visits.shape
    order = np.argsort(-visits, axis=1, kind="stable")
    ranked = np.take_along_axis(visits, order, 1)  # [N, Ls], most popular first
    ranked_top = np.take_along_axis(top, order, 1) * ranked
    edges = [0, 1] + [min(2**k, n_leaves) for k in range(1, N_LEAF_CLASSES - 1)] + [n_leaves]
    edges = np.minimum(np.array(edges), n_leaves)
    count = np.zeros((n_slices, N_LEAF_CLASSES))
    mean = np.zeros((n_slices, N_LEAF_CLASSES))
    top_mean = np.zeros((n_slices, N_LEAF_CLASSES))
    for k in range(N_LEAF_CLASSES):
        a, b = edges[k], edges[k + 1]
        if b > a:
            count[:, k] = b - a
            mean[:, k] = ranked[:, a:b].mean(1)
            top_mean[:, k] = ranked_top[:, a:b].sum(1) / np.maximum(ranked[:, a:b].sum(1), 1e-300)
    return count, mean, np.clip(top_mean, 0.0, 1.0)


def subtree_levels(geo: Geometry, n_slices: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """Inner levels of one slice's subtree (§3): the runtime keeps a tree per slice (runtime.c
    `trees[s]`) and its routers find the slice in the boundary array, so a worker visits only its
    slice's nodes -- nothing above the cut is shared. -> (nodes per level [I], separator keys per
    node of each level), leaves' parents first, the root (1 node) last; none for a one-leaf slice."""
    nodes, keys = [], []
    below = int(np.ceil(geo.n_records / n_slices / geo.leaf_entries))
    while below > 1:
        level = int(np.ceil(below / geo.fanout))
        nodes.append(float(level))
        keys.append(max(1, int(round(below / level)) - 1))
        below = level
    return np.array(nodes), tuple(keys)


# ---- key ranges per dataset ----------------------------------------------------------------------
CLUSTERS = 64  # `clustered`: dense runs of keys around this many random 64-bit bases


def slice_bounds(dataset: str, n_records: int, n_slices: int) -> tuple[np.ndarray, np.ndarray]:
    """(slice_lo, slice_hi) as uint64 [N]: the smallest and largest loaded key of each slice."""
    first = [-(-s * n_records // n_slices) for s in range(n_slices + 1)]  # key index boundaries
    key = _key_function(dataset, n_records)
    lo = np.array([key(first[s]) for s in range(n_slices)], dtype=np.uint64)
    hi = np.array([key(first[s + 1] - 1) for s in range(n_slices)], dtype=np.uint64)
    return lo, hi


def _key_function(dataset: str, n: int):
    """Key of the i-th smallest loaded key (exact for dense, expected order statistic otherwise)."""
    if dataset == "dense":
        return lambda i: i
    if dataset == "uniform":  # i-th of n uniform 64-bit keys sits near i/n of the key space
        return lambda i: min((2**64 - 1), (i * 2**64 + 2**63) // n)
    per = -(-n // CLUSTERS)
    bases = np.sort(np.random.default_rng(0).integers(0, 2**63, size=CLUSTERS, dtype=np.uint64)) * np.uint64(2)
    return lambda i: int(bases[i // per]) + i % per


def load_share(workload: Workload, n_records: int, n_slices: int, dataset: str) -> np.ndarray:
    """Each slice's share of the workload's queries [N]: the load `sn-hot` widens by when the
    simulator, not a snapshot, is the source."""
    return slice_profile(workload, n_records, n_slices, insert_order(dataset)).share
