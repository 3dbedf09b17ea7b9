"""State tokens over execution groups: what the model sees before slice t is placed (docs/design.md §4.4).

The state is kept per worker and read per candidate group (contracts/groups.py), so nothing in it
has the size of a training machine: a model schedules any machine, any number of slices.

Per worker w, over the slices s < t already placed (a slice's group shares it evenly):
  occ   sum 1/|g_s|            x W/N   (1.0 = the fair share of slices)
  load  sum share_s/|g_s|      x W     (1.0 = the fair share of queries; share = the slice's
                                        share of the snapshot's queries)
  feats sum feats_s/|g_s|      x W/N   (normalised per-slice counters)
Per group g at step t: the members' mean of those channels, their node's mean, the width, the
size, whether g (or its node) took slice t-1, and what g would carry with slice t on top
(share_t x W / |g|). The current slice's own counters are never visible at step t (the leakage
guard); its share of queries is: it is set by the workload's key distribution, not by the
schedule that ran (departure from docs/design.md §4.4, which shows only earlier slices).
Training builds all N steps at once (exclusive cumulative sums); rollout keeps a running state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pmoss.contracts.groups import WIDTHS, groups_of
from pmoss.contracts.machine import Machine

WORKER_CHANNELS = 2  # occ, load (+ features)
GROUP_STATIC = len(WIDTHS) + 2  # width one-hot, log2 size, share of its node
GROUP_DYNAMIC = 6  # node occ, node load, took slice t-1, its node took slice t-1, load per member with slice t, its node's with it
SUMMARY = 6  # share_t x N, position t/N, worker load max/std, node load max/min


def group_features(n_features: int) -> int:
    return WORKER_CHANNELS + n_features + GROUP_STATIC + GROUP_DYNAMIC


def summary_features(n_features: int) -> int:
    return SUMMARY + WORKER_CHANNELS + n_features


@dataclass
class MachineArrays:
    """One machine's groups as arrays, padded to (W, G, M) so machines batch together; a padded
    group is invalid, a padded worker belongs to nothing. Dense member matrices: a group's mean is
    one batched matmul (cheaper here than gathers; a 1024-worker machine's is 1.6 M entries)."""

    member: np.ndarray  # [G, W] 1/|g| where w is in g, else 0
    node_member: np.ndarray  # [M, W] 1/|node| where w is on the node, else 0
    group_static: np.ndarray  # [G, GROUP_STATIC]
    group_node: np.ndarray  # [G]
    group_size: np.ndarray  # [G]
    group_valid: np.ndarray  # [G] bool
    worker_node: np.ndarray  # [W]
    worker_valid: np.ndarray  # [W] bool
    node_workers: np.ndarray  # [M] workers per node (1 for padding)
    node_valid: np.ndarray  # [M] bool

    @property
    def sizes(self) -> tuple[int, int, int]:
        return self.worker_node.size, self.group_node.size, self.node_workers.size


def machine_arrays(machine: Machine, pad: tuple[int, int, int] | None = None) -> MachineArrays:
    """Arrays of `machine`'s candidate groups, padded to pad = (W, G, M) if given."""
    g = groups_of(machine)
    W, G, M = pad or (machine.n_workers, g.n, machine.numa_nodes)
    assert W >= machine.n_workers and G >= g.n and M >= machine.numa_nodes, f"{machine.name}: larger than the padding {pad}"
    worker_node = np.array([machine.cpu_by_id[c].node for c in machine.worker_cpus])
    node_workers = np.bincount(worker_node, minlength=M)
    static = np.zeros((G, GROUP_STATIC), np.float32)
    static[np.arange(g.n), g.width] = 1.0
    static[: g.n, len(WIDTHS)] = np.log2(g.size)
    static[: g.n, len(WIDTHS) + 1] = g.size / node_workers[g.node]

    def padded(a: np.ndarray, n: int, fill: float = 0) -> np.ndarray:
        return np.concatenate([a, np.full(n - a.size, fill, dtype=a.dtype)])

    member = np.zeros((G, W), np.float32)
    member[: g.n, : machine.n_workers] = g.member / g.size[:, None]
    node_member = np.zeros((M, W), np.float32)
    node_member[worker_node, np.arange(worker_node.size)] = 1.0 / node_workers[worker_node]
    return MachineArrays(
        member=member, node_member=node_member,
        group_static=static, group_node=padded(g.node, G), group_size=padded(g.size, G, 1),
        group_valid=padded(np.ones(g.n, bool), G, False), worker_node=padded(worker_node, W),
        worker_valid=padded(np.ones(machine.n_workers, bool), W, False), node_workers=np.maximum(node_workers, 1),
        node_valid=padded(np.ones(machine.numa_nodes, bool), M, False),
    )  # fmt: skip


def pad_of(machines: list[Machine]) -> tuple[int, int, int]:
    """The smallest padding that holds every machine in `machines`."""
    sizes = np.array([machine_arrays(m).sizes for m in machines])
    return tuple(int(x) for x in sizes.max(0))  # type: ignore[return-value]


def as_tensors(ma: MachineArrays) -> dict[str, torch.Tensor]:
    return {f"m_{k}": torch.from_numpy(np.ascontiguousarray(v)) for k, v in vars(ma).items()}


def _mean_over(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Weighted means over workers: weights [B, K, W], x [B, T, W, C] -> [B, T, K, C] (one bmm)."""
    B, T, W, C = x.shape
    y = torch.bmm(weights.to(x.dtype), x.permute(0, 2, 1, 3).reshape(B, W, T * C))  # [B, K, T*C]
    return y.view(B, -1, T, C).permute(0, 2, 1, 3)


def member_rows(groups: torch.Tensor, m: dict[str, torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """Each step's group as its member weights (1 / group size on its workers): groups [B, T] -> [B, T, W]."""
    B, T = groups.shape
    return torch.gather(m["m_member"], 1, groups[..., None].expand(B, T, m["m_member"].shape[-1])).to(dtype)


def spread(groups: torch.Tensor, values: torch.Tensor, m: dict[str, torch.Tensor]) -> torch.Tensor:
    """What each step's slice adds to each worker, split evenly over its group:
    groups [B, T], values [B, T, C] -> [B, T, W, C]."""
    return member_rows(groups, m, values.dtype)[..., None] * values[:, :, None, :]


def step_values(feats: torch.Tensor, share: torch.Tensor, n_slices: int, m: dict[str, torch.Tensor]) -> torch.Tensor:
    """What each step's slice brings (occ, load, feats), before it is split over its group:
    feats [B, T, F], share [B, T] -> [B, T, 2+F]."""
    n_w = m["m_worker_valid"].sum(-1).to(feats.dtype)[:, None, None]  # [B, 1, 1]
    return torch.cat([torch.ones_like(share)[..., None] / n_slices, share[..., None], feats / n_slices], -1) * n_w


def worker_increments(groups: torch.Tensor, feats: torch.Tensor, share: torch.Tensor, n_slices: int, m: dict[str, torch.Tensor]) -> torch.Tensor:
    """What each step's slice adds to each worker's channels (occ, load, feats), split evenly over
    its group: groups [B, T], feats [B, T, F], share [B, T] -> [B, T, W, 2+F]."""
    return spread(groups, step_values(feats, share, n_slices, m), m)


def summary_at(workers: torch.Tensor, share: torch.Tensor, t: torch.Tensor, n_slices: int, m: dict[str, torch.Tensor],
               mean: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """The state token's input at T steps: workers [B, T, W, 2+F] (occ, load, feats) before each
    step, share [B, T] this slice's share of queries, t [B, T] slice index -> [B, T, summary_features(F)].
    With `mean` (the channels' mean over valid workers [B, T, 2+F]) workers may hold occ and load only."""
    dt = workers.dtype
    big = torch.finfo(dt).max
    valid_w = m["m_worker_valid"][:, None, :]  # [B, 1, W]
    n_w = valid_w.sum(-1, keepdim=True).to(dt)  # [B, 1, 1]
    load = workers[..., 1]
    if mean is None:
        mean = (workers * valid_w[..., None]).sum(2) / n_w  # [B, T, C]
    std = (((load - mean[..., 1:2]) ** 2) * valid_w).sum(-1, keepdim=True).div(n_w).sqrt()[..., 0]
    nl = _mean_over(m["m_node_member"], workers[..., 1:2])[..., 0]  # [B, T, M] node load
    node_valid = m["m_node_valid"][:, None, :]
    summary = torch.stack([share * n_slices, t.to(dt) / n_slices, load.masked_fill(~valid_w, -big).amax(-1), std,
                           nl.masked_fill(~node_valid, -big).amax(-1), nl.masked_fill(~node_valid, big).amin(-1)], -1)  # fmt: skip
    return torch.cat([summary, mean], -1)


def groups_at(workers: torch.Tensor, prev: torch.Tensor, share: torch.Tensor, m: dict[str, torch.Tensor],
              idx: torch.Tensor | None = None, gmean: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Candidate-group features at T steps: workers [B, T, W, C] before each step, prev [B, T] group
    of the previous slice (-1 before the first), share [B, T]; idx [B, T, K] the groups to describe
    (None: every group, K = G) -> [B, T, K, group_features(F)]. With `gmean` (those groups' channel
    means over their members [B, T, K, C]) workers may hold occ and load only."""
    B, T, W, C = workers.shape
    dt = workers.dtype
    n_w = m["m_worker_valid"].sum(-1).to(dt)[:, None, None]  # [B, 1, 1]
    if gmean is not None:
        assert idx is not None, "gmean describes the groups at idx"
    elif idx is None:
        G = m["m_group_node"].shape[-1]
        idx = torch.arange(G, device=prev.device).expand(B, T, G)
        gmean = _mean_over(m["m_member"], workers)  # [B, T, G, C]: one bmm for every group
    else:
        rows = torch.gather(m["m_member"], 1, idx.flatten(1)[..., None].expand(-1, -1, W)).view(B, T, -1, W)  # [B, T, K, W]
        gmean = torch.einsum("btkw,btwc->btkc", rows.to(dt), workers)
    flat = idx.flatten(1)  # [B, T*K]

    def at(name: str) -> torch.Tensor:  # a per-group array at idx, [B, T, K]
        return torch.gather(m[name], 1, flat).view(idx.shape)

    gnode_idx = at("m_group_node")
    node = _mean_over(m["m_node_member"], workers[..., :2])  # [B, T, M, 2] node occ, load
    gnode = torch.gather(node, 2, gnode_idx[..., None].expand(-1, -1, -1, 2))  # [B, T, K, 2]
    took = (idx == prev[..., None]).to(dt)
    prev_node = torch.gather(m["m_group_node"], 1, prev.clamp(min=0))  # [B, T]
    node_took = ((gnode_idx == prev_node[..., None]) & (prev[..., None] >= 0)).to(dt)
    size = at("m_group_size").to(dt)
    node_size = torch.gather(m["m_node_workers"], 1, gnode_idx.flatten(1)).view(idx.shape).to(dt)
    added = share[..., None] * n_w / size  # what each member would carry of slice t
    dyn = torch.stack([gnode[..., 0], gnode[..., 1], took, node_took, added, gnode[..., 1] + share[..., None] * n_w / node_size], -1)
    static = torch.gather(m["m_group_static"], 1, flat[..., None].expand(-1, -1, GROUP_STATIC)).view(*idx.shape, GROUP_STATIC).to(dt)
    return torch.cat([gmean, static, dyn], -1)


def exclusive_cumsum(x: torch.Tensor) -> torch.Tensor:
    """What steps < t added, at step t, [B, T, ...] (slice t never sees itself, not even by rounding)."""
    return torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1).cumsum(1)


def window_slices(window: tuple[torch.Tensor, int]) -> torch.Tensor:
    """The slices [B, C] of a window (start [B], C) of each episode."""
    start, context = window
    return start[:, None] + torch.arange(context, device=start.device)


def at_slices(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [B, N, ...] at slices idx [B, K] -> [B, K, ...]."""
    return torch.gather(x, 1, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))


def teacher_forced(groups: torch.Tensor, feats: torch.Tensor, share: torch.Tensor, m: dict[str, torch.Tensor],
                   steps: torch.Tensor | None = None, window: tuple[torch.Tensor, int] | None = None,
                   before: bool = False) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """Model inputs of whole episodes whose groups are known (training): groups [B, N], feats
    [B, N, F], share [B, N] -> (summary [B, N, S], the chosen group's features [B, N, D], every
    group's features at `steps` [B, K] (default: every step) [B, K, G, D]). window (start [B], C):
    the inputs of C slices from start of each episode only ([B, C, ...]; steps count from start),
    with the state and positions of the whole episode. before: also the features of the group that
    took the slice before each window, [B, D] (zeros where a window starts its episode; None without
    a window): a one-token-a-slice model reads it in the window's first token."""
    workers, prev, summary, chosen, share, first = _path(groups, feats, share, m) if window is None else _window_path(groups, feats, share, m, *window)
    every = groups_at(workers, prev, share, m) if steps is None else groups_at(at_slices(workers, steps), at_slices(prev, steps), at_slices(share, steps), m)
    return (summary, chosen, every, first) if before else (summary, chosen, every)


def _path(groups: torch.Tensor, feats: torch.Tensor, share: torch.Tensor, m: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """(workers before each step, previous group, summary, chosen group's features) along known groups."""
    B, N = groups.shape
    workers = exclusive_cumsum(worker_increments(groups, feats, share, N, m))  # [B, N, W, 2+F]
    prev = torch.cat([groups.new_full((B, 1), -1), groups[:, :-1]], 1)
    t = torch.arange(N, device=groups.device).expand(B, N)
    summary = summary_at(workers, share, t, N, m)
    chosen = groups_at(workers, prev, share, m, groups[..., None])[:, :, 0]
    return workers, prev, summary, chosen, share, None


def _window_path(groups: torch.Tensor, feats: torch.Tensor, share: torch.Tensor, m: dict[str, torch.Tensor], start: torch.Tensor,
                 context: int) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """`_path` for the `context` slices from `start` [B] of each episode: what the slices before the
    window put on each worker is one sum, [B, W, 2+F], so no tensor has the episode's N x W x (2+F)
    size (a 2,048-slice episode on 1,024 workers: 176 MB each, held several times by the cumsum)."""
    B, N = groups.shape
    values = step_values(feats, share, N, m)  # [B, N, 2+F]
    rows = member_rows(groups, m, values.dtype)  # [B, N, W]
    earlier = (torch.arange(N, device=groups.device)[None, :] < start[:, None]).to(values.dtype)  # [B, N]
    base = torch.bmm((rows * earlier[..., None]).transpose(1, 2), values)  # [B, W, 2+F] placed before the window
    idx = window_slices((start, context))  # [B, C]
    g, v, r, sh = (at_slices(x, idx) for x in (groups, values, rows, share))
    workers = base[:, None] + exclusive_cumsum(r[..., None] * v[:, :, None, :])  # [B, C, W, 2+F] before each step
    prev = at_slices(torch.cat([groups.new_full((B, 1), -1), groups[:, :-1]], 1), idx)
    summary = summary_at(workers, sh, idx, N, m)
    chosen = groups_at(workers, prev, sh, m, g[..., None])[:, :, 0]
    # the slice before the window, s: the state before it is the window's less s's own share
    s, b = (start - 1).clamp(min=0), torch.arange(B, device=groups.device)
    before_s = (base - rows[b, s][..., None] * values[b, s][:, None, :])[:, None]  # [B, 1, W, 2+F]
    prev_s = torch.where(s > 0, groups[b, (s - 1).clamp(min=0)], -1)[:, None]
    first = groups_at(before_s, prev_s, share[b, s][:, None], m, groups[b, s][:, None, None])[:, 0, 0]  # [B, D]
    return workers, prev, summary, chosen, sh, first * (start > 0).to(first.dtype)[:, None]


def chosen_means(groups: torch.Tensor, values: torch.Tensor, sparse: SparseGroups) -> torch.Tensor:
    """What steps < t put on each member of step t's group, the members' mean: groups [B, N], values
    [B, N, C] (before the split over the group) -> [B, N, C]. Every group's mean kept incrementally,
    as RunningState does: one step adds to the R groups that share a worker with its group."""
    B, N, C = values.shape
    gmean = values.new_zeros(B, sparse.inv_size.shape[0] + 1, C)  # + the scratch group
    out = values.new_empty(B, N, C)
    b = torch.arange(B, device=values.device)
    over, coef = sparse.overlap[groups], sparse.overlap_coef[groups]  # [B, N, R]
    for t in range(N):
        out[:, t] = gmean[b, groups[:, t]]
        gmean.scatter_add_(1, over[:, t, :, None].expand(-1, -1, C), coef[:, t, :, None] * values[:, t, None])
    return out


def schedule_path(groups: torch.Tensor, feats: torch.Tensor, share: torch.Tensor, m: dict[str, torch.Tensor],
                  sparse: SparseGroups | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(summary [B, N, S], chosen group's features [B, N, D]) of whole schedules: the return model's input.
    sparse (one machine: every row of m the same): the chosen groups' means in O(N x R) instead of
    the [B, N, N] overlap product, whose N x N x W cost was 43 GFLOP for 10 candidates of 2,048
    slices on 1,024 workers (issue #39); equal up to float rounding.

    The same values as `_path` (up to float rounding) without its worker state [B, N, W, 2+F], which
    only teacher_forced needs (every group's features): what earlier slices put on slice t's group is
    the overlap of their member rows with its own (R R^T, [B, N, N], s < t) times their values, and
    the summary reads occupancy and load per worker only. 7x faster at the critic's batch (docs/model.md)."""
    B, N = groups.shape
    dt = feats.dtype
    rows = member_rows(groups, m, dt)  # [B, N, W]
    values = step_values(feats, share, N, m)  # [B, N, C]
    workers = exclusive_cumsum(rows[..., None] * values[:, :, None, :2])  # [B, N, W, 2]: occ, load
    valid = m["m_worker_valid"][:, None, :].to(dt)  # [B, 1, W]
    mean = exclusive_cumsum(values * (rows * valid).sum(-1, keepdim=True)) / valid.sum(-1, keepdim=True)  # [B, N, C]
    gmean = chosen_means(groups, values, sparse) if sparse is not None else torch.bmm(torch.bmm(rows, rows.transpose(1, 2)).tril(-1), values)  # [B, N, C]
    prev = torch.cat([groups.new_full((B, 1), -1), groups[:, :-1]], 1)
    t = torch.arange(N, device=groups.device).expand(B, N)
    summary = summary_at(workers, share, t, N, m, mean=mean)
    return summary, groups_at(workers, prev, share, m, groups[..., None], gmean=gmean[:, :, None])[:, :, 0]


@dataclass(frozen=True)
class SparseGroups:
    """One machine's candidate groups as sparse membership, for rollout: per-step work proportional
    to the sum of group sizes S (at most 4 W: one group per width and worker), not G x W (a dense
    [G, W] step was 1.2 M entries on a 1024-worker machine, 95 % of a 2,048-slice rollout, issue #39).
    Index W is a scratch worker and index G a scratch group: padding writes there, nothing reads them."""

    member_worker: torch.Tensor  # [S] every group's workers, group-major
    member_group: torch.Tensor  # [S] the group of each entry
    rows: torch.Tensor  # [G, L] each group's workers, padded with W; L = the largest group
    inv_size: torch.Tensor  # [G] 1/|g| in float32, the value m_member holds on each member
    overlap: torch.Tensor  # [G, R] the groups sharing a worker with g (g itself included), padded with G
    overlap_coef: torch.Tensor  # [G, R] |g & h| / (|g| |h|): what one unit spread over g adds to h's member mean


def sparse_groups(member: np.ndarray) -> SparseGroups:
    """The sparse form of a member matrix [G, W] (1/|g| on g's workers, as MachineArrays.member)."""
    G, W = member.shape
    g_of, w_of = np.nonzero(member)  # group-major, workers ascending within a group
    size = np.bincount(g_of, minlength=G)
    rows = np.full((G, max(int(size.max()), 1)), W, dtype=np.int64)
    rows[g_of, np.arange(g_of.size) - np.repeat(np.cumsum(size) - size, size)] = w_of
    # pairs of groups sharing a worker: entries sorted by worker, each paired with its worker's other entries
    by_w = np.argsort(w_of, kind="stable")
    gw, ww = g_of[by_w], w_of[by_w]
    per_w = np.bincount(ww, minlength=W).max()
    pairs = [np.stack([gw[: gw.size - d], gw[d:]]) [:, ww[: ww.size - d] == ww[d:]] for d in range(1, per_w)]
    # [2, P]: (g, h) once per shared worker, both orders, and (g, g) once per member of g
    pairs = np.concatenate([np.stack([g_of, g_of]), *pairs, *[p[::-1] for p in pairs]], axis=1)
    key, count = np.unique(pairs[0] * G + pairs[1], return_counts=True)  # count = |g & h|
    g, h = key // G, key % G
    n_over = np.bincount(g, minlength=G)
    overlap = np.full((G, max(int(n_over.max()), 1)), G, dtype=np.int64)
    coef = np.zeros(overlap.shape, dtype=np.float32)
    col = np.arange(g.size) - np.repeat(np.cumsum(n_over) - n_over, n_over)
    overlap[g, col] = h
    coef[g, col] = count / (size[g] * size[h])
    inv = member.max(1).astype(np.float32)
    t = torch.from_numpy
    return SparseGroups(t(w_of), t(g_of), t(rows), t(inv), t(overlap), t(coef))


class RunningState:
    """The state during rollout: starts empty, `place` adds one slice per step. Batched over B.

    Per-worker channels as training builds them (the summary reads them whole: O(W)), and each
    group's member mean kept incrementally: placing on group a adds |a & h| / (|a| |h|) x the slice's
    values to every group h that shares a worker with a, O(R) groups, where the dense form re-read
    all G x W memberships every step. The means differ from that form only by float rounding.
    A rollout reads `summary`, the node means and `rows` of the chosen groups, never every group's
    feature row (`features`, the reference: the head scores groups from their parts, learn/rollout.py)."""

    def __init__(self, m: dict[str, torch.Tensor], feats: torch.Tensor, share: torch.Tensor, sparse: SparseGroups | None = None):
        """m: machine tensors with a batch dim [B, ...] (one machine, unpadded); feats [N, F] and share [N]
        of the snapshot; sparse: sparse_groups of m's member matrix (built here when not given)."""
        self.m, self.feats, self.share = m, feats, share
        self.sparse = sparse or sparse_groups(m["m_member"][0].numpy())
        B, W = m["m_worker_node"].shape
        G, C = m["m_group_node"].shape[1], 2 + feats.shape[1]
        self.N = share.shape[0]
        self.workers = feats.new_zeros(B, W + 1, C)  # + the scratch worker
        self.gmean = feats.new_zeros(B, G + 1, C)  # + the scratch group
        self.idx = torch.arange(G).expand(B, 1, G)
        self.prev = torch.full((B, 1), -1, dtype=torch.long)
        self.t = 0
        # what every step reads and no placement changes, computed once
        self.values = step_values(feats[None], share[None], self.N, m)[0]  # [N, C] what each slice brings, as `place` spread it
        self.n_w = float(W)
        self.node_member = m["m_node_member"][:1].expand(B, -1, -1)  # [B, M, W]
        self.group_node = m["m_group_node"][0]  # [G]
        self.static = m["m_group_static"][0]  # [G, GROUP_STATIC]
        self.size = m["m_group_size"][0].to(feats.dtype)  # [G]
        self.node_size = m["m_node_workers"][0].to(feats.dtype)  # [M]
        # a group's row but its means and node state: static, 1/|g|, 1/|its node|
        self.group_table = torch.cat([self.static, 1 / self.size[:, None], 1 / self.node_size[self.group_node][:, None]], -1)
        self.batch = torch.arange(B)
        self.node = self.workers.new_zeros(B, self.node_member.shape[1], 2)  # node occ, load: `summary` sets it

    def features(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(summary [B, 1, S], every group's features [B, 1, G, D]) before slice t, as training builds them."""
        B, W1, C = self.workers.shape
        share = self.share[self.t].expand(B, 1)
        workers = self.workers[:, None, : W1 - 1]  # [B, 1, W, C]
        summary = summary_at(workers, share, torch.full((B, 1), self.t), self.N, self.m)
        return summary, groups_at(workers, self.prev, share, self.m, self.idx, self.gmean[:, None, :-1])

    def summary(self) -> torch.Tensor:
        """The state token's input before slice t, [B, 1, S] (`summary_at` of one step up to float
        rounding, in a third of its kernel calls), and each node's mean occupancy and load (`self.node`)."""
        workers = self.workers[:, :-1]  # [B, W, C]
        self.node = torch.bmm(self.node_member, workers[..., :2])  # [B, M, 2]
        std, _ = torch.std_mean(workers[..., 1], -1, correction=0)
        lo, hi = torch.aminmax(self.node[..., 1], dim=-1)
        head = torch.stack([torch.full_like(std, float(self.share[self.t]) * self.N), torch.full_like(std, self.t / self.N),
                            workers[..., 1].amax(-1), std, hi, lo], -1)  # fmt: skip
        return torch.cat([head, workers.sum(1) / self.n_w], -1)[:, None]

    def rows(self, groups: torch.Tensor) -> torch.Tensor:
        """The features of `groups` [B] before slice t (their rows of `features`), [B, D]; after `summary`."""
        b, n = self.batch, self.group_node[groups]  # [B]
        node, tab = self.node[b, n], self.group_table[groups]  # [B, 2], [B, GROUP_STATIC + 2]
        prev = self.prev[:, 0]
        took = (groups == prev).to(node.dtype)
        node_took = (n == self.group_node[prev]).to(node.dtype) if self.t > 0 else torch.zeros_like(took)
        sh = float(self.share[self.t]) * self.n_w
        dyn = torch.stack([node[:, 0], node[:, 1], took, node_took, sh * tab[:, -2], node[:, 1] + sh * tab[:, -1]], -1)
        return torch.cat([self.gmean[b, groups], tab[:, :-2], dyn], -1)

    def place(self, groups: torch.Tensor) -> None:
        """groups [B]: the groups given slice t."""
        B, _, C = self.workers.shape
        sp, t = self.sparse, self.t
        values = self.values[t].expand(B, C)
        rows = sp.rows[groups]  # [B, L]
        inc = sp.inv_size[groups][:, None] * values  # [B, C]: what each member gets, as `spread` computes it
        self.workers.scatter_add_(1, rows[..., None].expand(-1, -1, C), inc[:, None].expand(-1, rows.shape[1], -1))
        over, coef = sp.overlap[groups], sp.overlap_coef[groups]  # [B, R]
        self.gmean.scatter_add_(1, over[..., None].expand(-1, -1, C), coef[..., None] * values[:, None])
        self.prev = groups[:, None]
        self.t += 1
