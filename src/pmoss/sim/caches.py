"""Cache hit rates: Che's approximation for LRU over the cache lines of B+-tree nodes, per cache
group (batched).

An L1, L2 or L3 cache holds lines of the nodes of the slices that run on its core / L3 domain
(one-core kinds) or of every slice of the execution group (shared kinds). A node visit touches
only the lines of its binary search (§3), and they differ in popularity: the first probe's line
is touched by every visit, a line deep in the search by few, and a key requested again touches
the same lines. Che's approximation gives each line of access rate r the hit probability
1 - exp(-r T), with the characteristic time T of its cache solving sum(1 - exp(-r T)) = capacity
(in lines). docs/machine-model.md §4.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from pmoss.sim.hardware import HW
from pmoss.sim.placement import Placement
from pmoss.sim.profile import FILL, SliceProfile

LINE = 64
NODE_HEADER = 24  # bytes before the slots: version, count, leaf flag, next (runtime tree.c `node`)
SLOT = 8
LEAF_CAP, INNER_KEYS = 255, 254  # slot layout: leaf keys[255] then values; inner keys[254] then children
NEWTON_STEPS = 6  # Newton on Che's equation (concave in T, so monotone): 6 steps -> |dh| < 1e-4 (5: 8e-4)
GRID = np.linspace(-5.0, 11.0, 257)  # log10 of tau = share * T, the slice's queries within T
FITS_T = 1e250  # characteristic time of a cache that holds its whole group: every object hits


def search_lines(entries: int, leaf: bool) -> tuple[np.ndarray, np.ndarray]:
    """Lines of one node touched by a visit (§3): the header line, the lines of the probes of the
    runtime's binary search (lower_bound / child_index: mid = (lo + hi) / 2) and the value (leaf)
    or child-pointer (inner) line of the target. Targets uniform over the node's `entries` keys
    (leaf) or `entries` + 1 children (inner).
    -> (probability that a visit touches each line [L], lines of each target's visit [targets, L])."""
    n_slots = 2 * LEAF_CAP if leaf else 2 * INNER_KEYS + 1
    n_lines = -(-(NODE_HEADER + SLOT * n_slots) // LINE)
    line = lambda slot: (NODE_HEADER + SLOT * slot) // LINE  # noqa: E731
    targets = entries if leaf else entries + 1
    path = np.zeros((targets, n_lines), dtype=bool)
    for t in range(targets):
        path[t, 0] = True  # version and count
        lo, hi = 0, entries
        while lo < hi:
            mid = (lo + hi) // 2
            path[t, line(mid)] = True
            lo, hi = (mid + 1, hi) if mid < t else (lo, mid)
        path[t, line(min(t, entries - 1))] = True  # the found key (leaf) / last separator checked
        path[t, line((LEAF_CAP if leaf else INNER_KEYS) + t)] = True  # value / child pointer
    return path.mean(0), path


def scan_lines(entries: int, keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Lines of a leaf touched by a scan of `keys` keys starting at each target [entries, L]:
    (dependent: the header and the search's probe lines, no value line -- the runtime's workers
    copy keys only; streamed: the key lines it copies, beyond the dependent ones). Keys past the
    leaf's end are copied from the next leaf, whose lines are counted on this leaf's lines
    (leaves of a class are alike): its first key lines and its always-left search (§2.3)."""
    _, path = search_lines(entries, True)
    n_lines = path.shape[1]
    line = lambda slot: (NODE_HEADER + SLOT * slot) // LINE  # noqa: E731
    dep = path.copy()
    dep[:, -(-(NODE_HEADER + SLOT * LEAF_CAP) // LINE):] = False  # the value half (its first line also holds the last keys)
    stream = np.zeros_like(dep)
    follower = np.zeros(n_lines, dtype=bool)
    follower[[line(m) for m in _left_probes(entries)]] = True
    for t in range(entries):
        last = t + max(keys, 1) - 1
        stream[t, line(t) : line(min(last, entries - 1)) + 1] = True
        if last >= entries:  # the next leaf: its first keys and its search's probes
            stream[t, line(0) : line(min(last - entries, entries - 1)) + 1] = True
            stream[t] |= follower
    return dep, stream & ~dep


def _left_probes(entries: int) -> list[int]:
    """Slots the runtime's lower_bound probes for a key below all of a leaf's keys."""
    probes, lo, hi = [], 0, entries
    while lo < hi:
        mid = (lo + hi) // 2
        probes.append(mid)
        hi = mid
    return probes


_ENTRIES = int(round(LEAF_CAP * FILL))  # §3: the steady-state E (= F) of a tree grown by random inserts


@lru_cache(maxsize=32)
def leaf_basis(entries: int, scan_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """A leaf of `entries` keys: its lines grouped by their touch probabilities per visit [G, 6]
    -- columns: lookup (even keys, hottest key's path), scan dependent (even, hot), scan streamed
    (even, hot) -- and lines per group [G]. Lines with equal columns are one Che object class.
    The hottest key sits at a representative position, a third into the leaf."""
    u, path = search_lines(entries, True)
    dep, stream = scan_lines(entries, scan_keys)
    hot = entries // 3
    cols = np.stack([u, path[hot], dep.mean(0), dep[hot], stream.mean(0), stream[hot]], 1).astype(float)
    rows, mult = np.unique(cols[cols.any(1)], axis=0, return_counts=True)
    return rows, mult.astype(float)


@lru_cache(maxsize=32)
def inner_basis(keys: int) -> tuple[np.ndarray, np.ndarray]:
    """The same for an inner node of `keys` separators (every operation searches it alike)."""
    u, path = search_lines(keys, False)
    cols = np.stack([u, path[len(path) // 3], u, path[len(path) // 3], 0 * u, 0 * u], 1).astype(float)
    rows, mult = np.unique(cols[cols.any(1)], axis=0, return_counts=True)
    return rows, mult.astype(float)


LEAF_LINES = float(search_lines(_ENTRIES, True)[0].sum())  # lines touched per leaf visit of a lookup
INNER_LINES = float(search_lines(_ENTRIES, False)[0].sum())  # per visit of a full inner node


def line_weights(prof: SliceProfile, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Touch probability per visit of each line group of class c for every slice: (dependent
    [N, G], streamed [N, G], lines per group [G]). A slice's visits mix its op mix (scan share
    sigma) with the even keys and its hottest key (share `top` of the class's visits, §4)."""
    k = prof.leaf_count.shape[1]
    if c < k:
        rows, mult = leaf_basis(int(round(prof.geometry.leaf_entries)), int(round(prof.scan_keys)))
    else:
        rows, mult = inner_basis(prof.inner_keys[c - k])
    n = prof.share.size
    top = prof.leaf_top[:, c, None] if c < k else np.zeros((n, 1))
    sigma = prof.op_frac[3][:, None]
    even, hot = 1 - top, top
    dep = (1 - sigma) * (even * rows[:, 0] + hot * rows[:, 1]) + sigma * (even * rows[:, 2] + hot * rows[:, 3])
    stream = sigma * (even * rows[:, 4] + hot * rows[:, 5])
    return dep, stream, mult


@dataclass(frozen=True)
class Objects:
    """Tree nodes as cache objects per slice: leaf popularity classes, then the inner levels of
    the slice's subtree, root last (Che solves over all of them)."""

    visits: np.ndarray  # [N, C] visits per query of the slice to the whole class
    count: np.ndarray  # [N, C] nodes per class
    node_visits: np.ndarray  # [N, C] visits per query of the slice to ONE node of the class
    lines: np.ndarray  # [N, C] dependent lines touched per visit (search path; values for lookups)
    stream: np.ndarray  # [N, C] lines a visit streams (scans: the key lines copied beyond the search)
    is_leaf: np.ndarray  # [C] bool


@dataclass(frozen=True)
class Tables:
    """Per slice, on the log-tau GRID [J]: cache occupancy in lines g_s(tau) and its derivative
    [N, J], and the share of each class's dependent / streamed lines that hit [N, C, J]; footprint:
    lines of the slice's nodes that a visit can touch [N] (the group fits if their sum does)."""

    occ: np.ndarray
    slope: np.ndarray
    hit: np.ndarray  # of the dependent lines
    hit_stream: np.ndarray  # of the streamed lines
    footprint: np.ndarray


_OBJECTS: dict[int, tuple[SliceProfile, Objects, Tables]] = {}


def tree_objects(prof: SliceProfile) -> Objects:
    return _cached(prof)[1]


def _cached(prof: SliceProfile) -> tuple[SliceProfile, Objects, Tables]:
    """Objects and the line tables of a profile (profiles are cached and immutable)."""
    hit = _OBJECTS.get(id(prof))
    if hit is None or hit[0] is not prof:
        if len(_OBJECTS) > 128:
            _OBJECTS.clear()
        obj = _build_objects(prof)
        hit = _OBJECTS[id(prof)] = (prof, obj, _line_tables(prof, obj))
    return hit


def _build_objects(prof: SliceProfile) -> Objects:
    n, k = prof.leaf_count.shape
    n_inner = prof.inner_private.size
    count = np.concatenate([prof.leaf_count, np.broadcast_to(prof.inner_private, (n, n_inner))], axis=1)
    node_visits = np.concatenate([prof.leaf_visits, np.broadcast_to(1 / prof.inner_private, (n, n_inner))], axis=1)
    visits = count * node_visits  # [N, C]
    lines, stream = np.zeros((n, k + n_inner)), np.zeros((n, k + n_inner))
    for c in range(k + n_inner):
        dep, st, mult = line_weights(prof, c)
        lines[:, c], stream[:, c] = dep @ mult, st @ mult
    return Objects(visits, count, node_visits, lines, stream, np.arange(lines.shape[1]) < k)


def _line_tables(prof: SliceProfile, obj: Objects) -> Tables:
    """A line of a node of class c touched with probability w per visit has rate
    share_s * v_c * w; per slice g_s(tau) = sum_c n_c sum_lines (1 - exp(-v_c w tau)), so Newton
    works on N values per episode. w = dependent + streamed touches (`line_weights`, §4); the
    hit share is kept apart for the two, since only dependent lines pay the full latency."""
    tau = 10.0 ** GRID  # [J]
    n, cp = obj.count.shape
    occ, slope = np.zeros((n, GRID.size)), np.zeros((n, GRID.size))
    hit, hit_stream, footprint = np.zeros((n, cp, GRID.size)), np.ones((n, cp, GRID.size)), np.zeros(n)
    for c in range(cp):
        dep, stream, mult = line_weights(prof, c)  # [N, G], [N, G], [G]
        w = dep + stream
        rate = obj.node_visits[:, c, None] * w  # [N, G] per query of the slice
        e = np.exp(-rate[..., None] * tau)  # [N, G, J]
        occ += obj.count[:, c, None] * np.einsum("g,ngj->nj", mult, 1 - e)
        slope += obj.count[:, c, None] * np.einsum("g,ng,ngj->nj", mult, rate, e)
        hit[:, c] = np.einsum("g,ng,ngj->nj", mult, dep, 1 - e) / np.maximum(dep @ mult, 1e-300)[:, None]
        if stream.any():
            hit_stream[:, c] = np.einsum("g,ng,ngj->nj", mult, stream, 1 - e) / np.maximum(stream @ mult, 1e-300)[:, None]
        footprint += obj.count[:, c] * ((w > 0) @ mult)
    return Tables(occ, slope, hit, hit_stream, footprint)


def _grid_position(tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index and weight for linear interpolation in log tau on GRID (clamped to its ends)."""
    x = (np.log10(np.maximum(tau, 1e-300)) - GRID[0]) * (1.0 / (GRID[1] - GRID[0]))
    x = np.clip(x, 0, GRID.size - 1.000001)
    j = x.astype(np.int64)
    return j, x - j


def _lookup(table: np.ndarray, base: np.ndarray, frac: np.ndarray) -> np.ndarray:
    flat = table.ravel()
    return flat[base] * (1 - frac) + flat[base + 1] * frac


def characteristic_time(prof: SliceProfile, group: np.ndarray, n_groups: int, capacity: np.ndarray,
                        share: np.ndarray | None = None) -> np.ndarray:
    """T per cache [K, B, G] for K cache sizes `capacity` [K, B, G] (lines) over the same groups
    [B, N]; FITS_T where the whole group fits (every line hits)."""
    _, obj, tab = _cached(prof)
    K = capacity.shape[0]
    B, n = group.shape
    size = B * n_groups
    key = (group + n_groups * np.arange(B)[:, None]).ravel()  # [B*N]
    share = np.broadcast_to(prof.share if share is None else share, (B, n)).ravel()
    row_base = np.broadcast_to(np.arange(n) * GRID.size, (B, n)).ravel()
    cap = capacity.reshape(K, size)
    fits = np.bincount(key, np.broadcast_to(tab.footprint, (B, n)).ravel(), size) <= cap  # [K, B*G]
    kkey = (key + size * np.arange(K)[:, None]).ravel()  # [K*B*N]: one bincount for all K caches
    sum_k = lambda w: np.bincount(kkey, w.ravel(), K * size).reshape(K, size)
    T = cap / np.maximum(np.bincount(key, share * tab.slope.ravel()[row_base], size), 1e-300)  # 1st Newton step
    for _ in range(NEWTON_STEPS):
        j, frac = _grid_position(share * T[:, key])  # [K, B*N]
        f = sum_k(_lookup(tab.occ, row_base + j, frac)) - cap
        fp = sum_k(share * _lookup(tab.slope, row_base + j, frac))
        T = np.maximum(T - f / np.maximum(fp, 1e-300), T * 0.5)
    return np.where(fits, FITS_T, T).reshape(K, B, n_groups)


def group_hits(prof: SliceProfile, group: np.ndarray, n_groups: int, capacities: list,
               share: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Share of the dependent and of the streamed lines that hit ([B, N, C] each) per object
    class, for each cache size in `capacities` (lines: one per cache, or [B, G] per group)."""
    _, obj, tab = _cached(prof)
    B, n = group.shape
    cp = obj.count.shape[1]
    cap = np.stack([np.broadcast_to(np.asarray(c, dtype=float), (B, n_groups)) for c in capacities])  # [K, B, G]
    share = prof.share if share is None else share  # [N] or [B, N]: each slice's query rate (relative)
    T = characteristic_time(prof, group, n_groups, cap, share)  # [K, B, G]
    base = (np.arange(n)[:, None] * cp + np.arange(cp)) * GRID.size  # [N, C] rows of tab.hit
    out = []
    for k in range(len(capacities)):
        Ts = np.take_along_axis(T[k], group, axis=1)  # [B, N]
        j, frac = _grid_position(share * Ts)  # [B, N]
        fits = Ts[..., None] >= FITS_T
        dep, stream = (np.where(fits, 1.0, np.clip(_lookup(table, base[None] + j[..., None], frac[..., None]), 0.0, 1.0))
                       for table in (tab.hit, tab.hit_stream))  # [B, N, C] each
        out.append((dep, stream))
    return out


def hit_rates(hw: HW, prof: SliceProfile, pl: Placement, share: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Share of each object class's dependent lines [B, N, C] that hit in L1, L2, L3 and (POWER8)
    L4, and of its streamed lines in L1, L2, L3 (s1..s3) (§4). Capacities in lines; the L3's is
    the share of it the runtime gets (calibration `l3_share`: a host whose L3 domain other
    tenants use, §14.3; 1 on the pool machines), plus, where the L3 is a victim cache of the L2s
    (`Uarch.l3_victim`), the distinct L2s below it: their lines are not also in the L3.
    share [B, N]: the slices' relative query rates where they are not the offered ones (the
    completed queries under unbounded queues, §10.1)."""
    G = hw.groups.n_cache_groups
    caches = hw.machine.caches
    cal = hw.calibration
    l3_share = 1.0 if cal is None or cal.l3_share is None else cal.l3_share
    l2_lines = caches.l2_kib * 1024 / LINE
    (h1, s1), (h2, s2) = group_hits(prof, pl.l2_group, G, [caches.l1d_kib * 1024 / LINE, l2_lines], share)
    l3_lines = caches.l3_mib * 2**20 / LINE * l3_share
    if hw.uarch.l3_victim:
        l3_lines = l3_lines + l2_lines * distinct_below(pl.l2_group, pl.l3_group, G)
    h3, s3 = group_hits(prof, pl.l3_group, G, [l3_lines], share)[0]
    h2, s2 = np.maximum(h2, h1), np.maximum(s2, s1)  # inclusive hierarchy
    h3, s3 = np.maximum(h3, h2), np.maximum(s3, s2)
    h4 = _l4_hits(hw, prof, pl, h3, share) if hw.l4_nodes > 0 else np.zeros_like(h3)
    return {"h1": h1, "h2": h2, "h3": h3, "h4": h4, "s1": s1, "s2": s2, "s3": s3}


def distinct_below(inner: np.ndarray, outer: np.ndarray, n_groups: int) -> np.ndarray:
    """Distinct inner cache groups (L2s) among the slices of each outer group (L3) [B, G]: slices
    of one-core kinds fill different L2s below one L3, a shared group's L2s all hold the same
    hot set (one L2's worth of distinct lines)."""
    B, _ = inner.shape
    pairs = np.unique(((np.arange(B)[:, None] * n_groups + outer) * n_groups + inner).ravel())
    return np.bincount(pairs // n_groups, minlength=B * n_groups).reshape(B, n_groups).astype(float)


def che_hits(rate: np.ndarray, count: np.ndarray, group: np.ndarray, n_groups: int, capacity) -> np.ndarray:
    """Che's approximation for arbitrary objects [B, X] (rate, count, cache group); -> hits [B, X]."""
    B = rate.shape[0]
    key = (group + n_groups * np.arange(B)[:, None]).ravel()
    cap = np.broadcast_to(np.asarray(capacity, dtype=float), (B, n_groups)).ravel()
    size = B * n_groups
    r, c = rate.ravel(), count.ravel()
    fits = np.bincount(key, c, size) <= cap
    T = np.zeros(size)
    for _ in range(NEWTON_STEPS):
        e = np.exp(-r * T[key])
        f = np.bincount(key, c * (1 - e), size) - cap
        T = np.where(fits, T, T - f / np.maximum(np.bincount(key, c * r * e, size), 1e-300))
    return np.where(fits[key], 1.0, 1 - np.exp(-r * T[key])).reshape(rate.shape)


def _l4_hits(hw: HW, prof: SliceProfile, pl: Placement, h3: np.ndarray, share: np.ndarray | None = None) -> np.ndarray:
    """A memory-side L4 caches the L3 misses to the memory it fronts: group = the slice's memory
    node (interleaved memory: all L4s act as one cache of M times the size)."""
    _, obj, _ = _cached(prof)
    B, n, p = h3.shape
    share = np.broadcast_to(prof.share if share is None else share, (B, n))
    rate = share[..., None] * obj.node_visits[None] * np.maximum(1 - h3, 0.0)  # [B, N, C]
    count = np.broadcast_to(obj.count, rate.shape)
    interleaved = pl.P.max(2) < 1.0  # [B, N]
    group = np.where(interleaved, hw.n_nodes, pl.P.argmax(2))  # id M = the pooled cache
    cap = np.concatenate([np.full(hw.n_nodes, hw.l4_nodes), [hw.l4_nodes * hw.n_nodes]])
    h = che_hits(rate.reshape(B, -1), count.reshape(B, -1), np.repeat(group, p, axis=1), hw.n_nodes + 1, cap[None])
    return h.reshape(B, n, p)
