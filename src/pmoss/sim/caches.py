"""Cache hit rates: Che's approximation for LRU over B+-tree nodes, per cache group (batched).

An L2 or L3 cache holds the nodes of the slices that run on its core / L3 domain (one-core
kinds) or of every slice of the execution group (shared kinds). Che's approximation gives each
object of access rate r the hit probability 1 - exp(-r T), with the characteristic time T of its
cache solving sum(count * (1 - exp(-r T))) = capacity. docs/machine-model.md §4.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pmoss.sim.hardware import HW
from pmoss.sim.placement import Placement
from pmoss.sim.profile import SliceProfile

LEAF_LINES = 6.0  # lines touched per leaf visit: ~5 by the binary search over keys + 1 value (§3)
INNER_LINES = 5.0  # lines touched per inner-node visit (binary search over ~176 separators)
LINE = 64
NEWTON_STEPS = 5  # Newton on Che's equation (concave in T, so monotone): 5 steps -> |dh| < 1e-4
GRID = np.linspace(-5.0, 9.0, 225)  # log10 of tau = share * T, the slice's queries within T
FITS_T = 1e250  # characteristic time of a cache that holds its whole group: every object hits


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


_OBJECTS: dict[int, tuple[SliceProfile, Objects, np.ndarray, np.ndarray]] = {}


def tree_objects(prof: SliceProfile) -> Objects:
    return _cached(prof)[1]


def _cached(prof: SliceProfile) -> tuple[SliceProfile, Objects, np.ndarray, np.ndarray]:
    """Objects and the occupancy table of a profile (profiles are cached and immutable)."""
    hit = _OBJECTS.get(id(prof))
    if hit is None or hit[0] is not prof:
        if len(_OBJECTS) > 128:
            _OBJECTS.clear()
        obj = _build_objects(prof)
        occ, slope = _occupancy_table(obj)
        hit = _OBJECTS[id(prof)] = (prof, obj, occ, slope)
    return hit


def _build_objects(prof: SliceProfile) -> Objects:
    n, k = prof.leaf_count.shape
    n_priv, n_shared = prof.inner_private.size, len(prof.shared_levels)
    count = np.concatenate([prof.leaf_count, np.broadcast_to(prof.inner_private, (n, n_priv))], axis=1)
    node_visits = np.concatenate([prof.leaf_visits, np.broadcast_to(1 / prof.inner_private, (n, n_priv))], axis=1)
    visits = np.concatenate([count * node_visits, np.ones((n, n_shared))], axis=1)  # [N, C]
    lines = np.array([LEAF_LINES] * k + [INNER_LINES] * (n_priv + n_shared))
    return Objects(visits, count, node_visits, lines, np.arange(lines.size) < k)


def _occupancy_table(obj: Objects) -> tuple[np.ndarray, np.ndarray]:
    """g_s(tau) = sum_c n (1 - exp(-v tau)) and its derivative, on the log-tau GRID: [N, J] each.

    The cache occupancy of slice s at characteristic time T is g_s(share_s T), so the Newton
    steps work on N values per episode instead of N x C."""
    tau = 10.0 ** GRID  # [J]
    e = np.exp(-obj.node_visits[..., None] * tau)  # [N, Cp, J]
    occ = (obj.count[..., None] * (1 - e)).sum(1)
    slope = (obj.count[..., None] * obj.node_visits[..., None] * e).sum(1)
    return occ, slope


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
    """T per cache [K, B, G] for K cache sizes `capacity` [K, B, G] (nodes) over the same groups
    [B, N]; FITS_T where the whole group fits (every object hits)."""
    _, obj, occ, slope = _cached(prof)
    K = capacity.shape[0]
    B, n = group.shape
    size = B * n_groups
    key = (group + n_groups * np.arange(B)[:, None]).ravel()  # [B*N]
    share = np.broadcast_to(prof.share, (B, n)).ravel()
    row_base = np.broadcast_to(np.arange(n) * GRID.size, (B, n)).ravel()
    cap = capacity.reshape(K, size)
    fits = np.bincount(key, np.broadcast_to(obj.count.sum(1), (B, n)).ravel(), size) <= cap  # [K, B*G]
    kkey = (key + size * np.arange(K)[:, None]).ravel()  # [K*B*N]: one bincount for all K caches
    sum_k = lambda w: np.bincount(kkey, w.ravel(), K * size).reshape(K, size)
    T = cap / np.maximum(np.bincount(key, share * slope.ravel()[row_base], size), 1e-300)  # 1st Newton step
    for _ in range(NEWTON_STEPS):
        j, frac = _grid_position(share * T[:, key])  # [K, B*N]
        f = sum_k(_lookup(occ, row_base + j, frac)) - cap
        fp = sum_k(share * _lookup(slope, row_base + j, frac))
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
    """Hit probability [B, N, C] of every object class, for each cache size in `capacities`
    (nodes per group). Shared upper levels always hit but take their place in the cache."""
    _, obj, _, _ = _cached(prof)
    B, n = group.shape
    held = _shared_nodes(prof, group, n_groups)  # [B, G]
    cap = np.stack([np.maximum(c - held, 1.0) for c in capacities])  # [K, B, G]
    T = characteristic_time(prof, group, n_groups, cap)  # [K, B, G]
    out = []
    for k in range(len(capacities)):
        Ts = np.take_along_axis(T[k], group, axis=1)  # [B, N]
        h = np.ones((B, n, obj.visits.shape[1]))
        h[..., : obj.n_private] = -np.expm1(-obj.node_visits[None] * (prof.share[:, None] * Ts[..., None]))
        out.append(h)
    return out


def hit_rates(hw: HW, prof: SliceProfile, pl: Placement) -> dict[str, np.ndarray]:
    """Hit probabilities per object class [B, N, C] in L1, L2, L3 and (POWER8) L4 (§4).

    L2 and L3 cache whole 4 KiB nodes; the L1 caches the lines of one visit (a key's search
    path through the node), so its capacity is counted in visit footprints."""
    G = max(hw.n_workers, hw.n_cores, hw.n_domains)
    visit_objects = hw.machine.caches.l1d_kib * 1024 / (LEAF_LINES * LINE)
    h1, h2 = group_hits(prof, pl.l2_group, G, [visit_objects, hw.l2_nodes])
    h2 = np.maximum(h2, h1)  # inclusive hierarchy
    h3 = np.maximum(group_hits(prof, pl.l3_group, G, [hw.l3_nodes])[0], h2)
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
    _, obj, _, _ = _cached(prof)
    B, n, _ = h3.shape
    p = obj.n_private
    rate = prof.share[None, :, None] * obj.node_visits[None] * (1 - h3[..., :p])  # [B, N, Cp]
    count = np.broadcast_to(obj.count, rate.shape)
    interleaved = pl.P.max(2) < 1.0  # [B, N]
    group = np.where(interleaved, hw.n_nodes, pl.P.argmax(2))  # id M = the pooled cache
    cap = np.concatenate([np.full(hw.n_nodes, hw.l4_nodes), [hw.l4_nodes * hw.n_nodes]])
    h = che_hits(rate.reshape(B, -1), count.reshape(B, -1), np.repeat(group, p, axis=1), hw.n_nodes + 1, cap[None])
    return np.concatenate([h.reshape(B, n, p), np.ones((B, n, h3.shape[2] - p))], axis=2)
