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


def _line_groups(entries: int, leaf: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lines of a node grouped by (touch probability u when its keys are requested evenly, on the
    path of its hottest key): -> (u [G], on_hot_path [G], lines per group [G]). The hottest key
    sits at a representative position, a third into the node."""
    u, path = search_lines(entries, leaf)
    hot = path[len(path) // 3].astype(float)
    used = (u > 0) | (hot > 0)
    pairs, mult = np.unique(np.stack([u[used], hot[used]], 1), axis=0, return_counts=True)
    return pairs[:, 0], pairs[:, 1], mult.astype(float)


_ENTRIES = int(round(LEAF_CAP * FILL))  # §3: the model's steady-state E (= F)
LEAF_GROUPS = _line_groups(_ENTRIES, True)
INNER_GROUPS = _line_groups(_ENTRIES, False)
LEAF_LINES = float(LEAF_GROUPS[0] @ LEAF_GROUPS[2])  # lines touched per leaf visit
INNER_LINES = float(INNER_GROUPS[0] @ INNER_GROUPS[2])  # per inner-node visit
INNER_HELD = float(INNER_GROUPS[2][INNER_GROUPS[0] > 0].sum())  # lines of a hot inner node that stay cached


@dataclass(frozen=True)
class Objects:
    """Tree nodes as cache objects per slice: leaf popularity classes, private inner levels
    (Che solves over these), then shared upper levels (always cached, see `hit_rates`)."""

    visits: np.ndarray  # [N, C] visits per query of the slice to the whole class
    count: np.ndarray  # [N, Cp] nodes per class (private classes only)
    node_visits: np.ndarray  # [N, Cp] visits per query of the slice to ONE node of the class
    lines: np.ndarray  # [C] lines touched per visit
    is_leaf: np.ndarray  # [C] bool

    @property
    def n_private(self) -> int:
        return self.count.shape[1]


@dataclass(frozen=True)
class Tables:
    """Per slice, on the log-tau GRID [J]: cache occupancy in lines g_s(tau) and its derivative
    [N, J], and the share of each private class's touched lines that hit [N, Cp, J]; footprint:
    lines of the slice's private nodes that a visit can touch [N] (the group fits if their sum does)."""

    occ: np.ndarray
    slope: np.ndarray
    hit: np.ndarray
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
    n_priv, n_shared = prof.inner_private.size, len(prof.shared_levels)
    count = np.concatenate([prof.leaf_count, np.broadcast_to(prof.inner_private, (n, n_priv))], axis=1)
    node_visits = np.concatenate([prof.leaf_visits, np.broadcast_to(1 / prof.inner_private, (n, n_priv))], axis=1)
    visits = np.concatenate([count * node_visits, np.ones((n, n_shared))], axis=1)  # [N, C]
    lines = np.array([LEAF_LINES] * k + [INNER_LINES] * (n_priv + n_shared))
    return Objects(visits, count, node_visits, lines, np.arange(lines.size) < k)


def _line_tables(prof: SliceProfile, obj: Objects) -> Tables:
    """A line of a node of class c touched with probability w per visit has rate
    share_s * v_c * w; per slice g_s(tau) = sum_c n_c sum_lines (1 - exp(-v_c w tau)), so Newton
    works on N values per episode. A leaf's line weights mix the even request pattern with its
    hottest key's path: w = (1 - top) u + top * on_path (§4)."""
    tau = 10.0 ** GRID  # [J]
    n, cp = obj.count.shape
    k = prof.leaf_count.shape[1]
    occ, slope = np.zeros((n, GRID.size)), np.zeros((n, GRID.size))
    hit, footprint = np.zeros((n, cp, GRID.size)), np.zeros(n)
    for c in range(cp):
        u, on_path, mult = LEAF_GROUPS if c < k else INNER_GROUPS
        top = prof.leaf_top[:, c] if c < k else np.zeros(n)
        w = (1 - top)[:, None] * u + top[:, None] * on_path  # [N, G]
        rate = obj.node_visits[:, c, None] * w  # [N, G] per query of the slice
        e = np.exp(-rate[..., None] * tau)  # [N, G, J]
        occ += obj.count[:, c, None] * np.einsum("g,ngj->nj", mult, 1 - e)
        slope += obj.count[:, c, None] * np.einsum("g,ng,ngj->nj", mult, rate, e)
        hit[:, c] = np.einsum("g,ng,ngj->nj", mult, w, 1 - e) / np.maximum(w @ mult, 1e-300)[:, None]
        footprint += obj.count[:, c] * ((w > 0) @ mult)
    return Tables(occ, slope, hit, footprint)


def _grid_position(tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index and weight for linear interpolation in log tau on GRID (clamped to its ends)."""
    x = (np.log10(np.maximum(tau, 1e-300)) - GRID[0]) * (1.0 / (GRID[1] - GRID[0]))
    x = np.clip(x, 0, GRID.size - 1.000001)
    j = x.astype(np.int64)
    return j, x - j


def _lookup(table: np.ndarray, base: np.ndarray, frac: np.ndarray) -> np.ndarray:
    flat = table.ravel()
    return flat[base] * (1 - frac) + flat[base + 1] * frac


def characteristic_time(prof: SliceProfile, group: np.ndarray, n_groups: int, capacity: np.ndarray) -> np.ndarray:
    """T per cache [K, B, G] for K cache sizes `capacity` [K, B, G] (lines) over the same groups
    [B, N]; FITS_T where the whole group fits (every line hits)."""
    _, obj, tab = _cached(prof)
    K = capacity.shape[0]
    B, n = group.shape
    size = B * n_groups
    key = (group + n_groups * np.arange(B)[:, None]).ravel()  # [B*N]
    share = np.broadcast_to(prof.share, (B, n)).ravel()
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


def _shared_nodes(prof: SliceProfile, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Distinct shared upper-level nodes each cache group holds [B, G]: adjacent slices in one
    group share them, so grouping frees capacity."""
    B, n = group.shape
    total = np.zeros(B * n_groups)
    gkey = group + n_groups * np.arange(B)[:, None]
    for nid in prof.shared_levels:
        n_up = int(nid.max()) + 1
        present = np.bincount((gkey * n_up + nid).ravel(), minlength=B * n_groups * n_up) > 0
        total += present.reshape(B * n_groups, n_up).sum(1)
    return total.reshape(B, n_groups)


def group_hits(prof: SliceProfile, group: np.ndarray, n_groups: int, capacities: list[float]) -> list[np.ndarray]:
    """Share of the touched lines that hit [B, N, C] per object class, for each cache size in
    `capacities` (lines per group). Shared upper levels always hit but their touched lines take
    their place in the cache."""
    _, obj, tab = _cached(prof)
    B, n = group.shape
    cp = obj.n_private
    held = _shared_nodes(prof, group, n_groups) * INNER_HELD  # [B, G] lines
    cap = np.stack([np.maximum(c - held, 1.0) for c in capacities])  # [K, B, G]
    T = characteristic_time(prof, group, n_groups, cap)  # [K, B, G]
    base = (np.arange(n)[:, None] * cp + np.arange(cp)) * GRID.size  # [N, Cp] rows of tab.hit
    out = []
    for k in range(len(capacities)):
        Ts = np.take_along_axis(T[k], group, axis=1)  # [B, N]
        j, frac = _grid_position(prof.share * Ts)  # [B, N]
        h = np.ones((B, n, obj.visits.shape[1]))
        hp = _lookup(tab.hit, base[None] + j[..., None], frac[..., None])  # [B, N, Cp]
        h[..., :cp] = np.where(Ts[..., None] >= FITS_T, 1.0, np.clip(hp, 0.0, 1.0))
        out.append(h)
    return out


def hit_rates(hw: HW, prof: SliceProfile, pl: Placement) -> dict[str, np.ndarray]:
    """Share of each object class's touched lines [B, N, C] that hit in L1, L2, L3 and (POWER8)
    L4 (§4). Capacities in lines; the L3's is the share of it the runtime gets (calibration
    `l3_share`: a host whose L3 domain other tenants use, §14.3; 1 on the pool machines)."""
    G = max(hw.n_workers, hw.n_cores, hw.n_domains)
    caches = hw.machine.caches
    cal = hw.calibration
    l3_share = 1.0 if cal is None or cal.l3_share is None else cal.l3_share
    h1, h2 = group_hits(prof, pl.l2_group, G, [caches.l1d_kib * 1024 / LINE, caches.l2_kib * 1024 / LINE])
    h2 = np.maximum(h2, h1)  # inclusive hierarchy
    h3 = np.maximum(group_hits(prof, pl.l3_group, G, [caches.l3_mib * 2**20 / LINE * l3_share])[0], h2)
    h4 = _l4_hits(hw, prof, pl, h3) if hw.l4_nodes > 0 else np.zeros_like(h3)
    return {"h1": h1, "h2": h2, "h3": h3, "h4": h4}


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


def _l4_hits(hw: HW, prof: SliceProfile, pl: Placement, h3: np.ndarray) -> np.ndarray:
    """A memory-side L4 caches the L3 misses to the memory it fronts: group = the slice's memory
    node (interleaved memory: all L4s act as one cache of M times the size)."""
    _, obj, _ = _cached(prof)
    B, n, _ = h3.shape
    p = obj.n_private
    rate = prof.share[None, :, None] * obj.node_visits[None] * np.maximum(1 - h3[..., :p], 0.0)  # [B, N, Cp]
    count = np.broadcast_to(obj.count, rate.shape)
    interleaved = pl.P.max(2) < 1.0  # [B, N]
    group = np.where(interleaved, hw.n_nodes, pl.P.argmax(2))  # id M = the pooled cache
    cap = np.concatenate([np.full(hw.n_nodes, hw.l4_nodes), [hw.l4_nodes * hw.n_nodes]])
    h = che_hits(rate.reshape(B, -1), count.reshape(B, -1), np.repeat(group, p, axis=1), hw.n_nodes + 1, cap[None])
    return np.concatenate([h.reshape(B, n, p), np.ones((B, n, h3.shape[2] - p))], axis=2)
