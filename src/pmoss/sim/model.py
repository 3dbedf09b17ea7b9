"""The performance model: cache hit rates, memory latency under load, throughput (batched).

Given per-slice demand (profile.py), a machine (hardware.py) and placements (placement.py), it
solves, for B episodes at once, the throughput X at which the busiest worker thread (or router,
memory channel, link) is just saturated, with memory latency depending on X through queueing.
Every equation is in docs/machine-model.md (section numbers in the comments).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pmoss.sim.caches import LINE, Objects, hit_rates, tree_objects
from pmoss.sim.hardware import HW
from pmoss.sim.placement import Placement
from pmoss.sim.profile import SliceProfile

NODE_LINES = 4096 / LINE
# instructions per query (§6): dispatch, per inner / leaf visit, per operation extra
INSN_DISPATCH, INSN_INNER, INSN_LEAF = 120.0, 55.0, 70.0
INSN_UPDATE, INSN_INSERT, INSN_SPLIT, INSN_SCAN_KEY, INSN_SHARED_QUEUE = 40.0, 250.0, 300.0, 10.0, 40.0
ROUTE_NS = 5.0  # router time per query (batched: hash, find slice, enqueue), one router per node (§8)
WRITE_SYNC_LINES = 2.0  # lines a write takes from the last writer: the node's lock word and the written line (RFO)
HANDOFF_LINES = 0.25  # queue-entry lines a worker pulls from its router per query (16 B entries)
QUEUE_C = 0.5  # loaded-latency curve: q(rho) = 1 + QUEUE_C rho^2 / (1 - rho) (§7)
RHO_MAX = 0.995
BRACKET = 256.0  # the root lies in [idle bound / BRACKET, idle bound]
MAX_WIDEN = 16  # bracket widenings by BRACKET each: 256^16 spans any finite throughput
ROOT_STEPS = 9  # Illinois steps: |X - X*| / X* < 1e-6 against a 50-step bisection (all machines, kinds)
SMT_PASSES = 2


@dataclass
class Demand:
    """Per query of each slice [B, N] (times in ns, traffic in 64-byte lines)."""

    insn: np.ndarray
    comp_ns: np.ndarray  # issue time without stalls (L1 hits included)
    fixed_ns: np.ndarray  # stalls that do not depend on load: L2/L3/L4 hits, hand-off, coherence
    mem_dep: np.ndarray  # lines paying the loaded DRAM latency (dependent misses + scan lines / MLP)
    read_lines: np.ndarray  # lines read from memory (DRAM, or an L4 in front of it)
    wb_lines: np.ndarray  # dirty lines written back to memory
    lines: np.ndarray  # all lines touched
    l1_miss_lines: np.ndarray
    l3_miss_lines: np.ndarray  # dependent and streamed lines that leave the L3
    c2c_lines: np.ndarray  # coherence transfers from another L3 domain
    write_lines: np.ndarray
    write_miss_lines: np.ndarray  # writes whose line is not in the L3
    tlb_misses: np.ndarray
    l4_share: np.ndarray  # share of memory reads an L4 serves (POWER8), not DRAM
    node_visits: np.ndarray  # [N] tree nodes visited per query


def demand(hw: HW, prof: SliceProfile, pl: Placement, hits: dict[str, np.ndarray]) -> Demand:
    """Per-query work of every slice from the hit rates (§6)."""
    obj = tree_objects(prof)
    _, update, insert, scan = prof.op_frac  # each [N]
    vl = obj.visits * obj.lines  # [N, C] lines touched per query, per class
    leaf_vl = vl * obj.is_leaf
    dot = lambda h, w: np.einsum("bnc,nc->bn", h, w)  # [B, N]
    S1, S2, S3 = (dot(hits[k], vl) for k in ("h1", "h2", "h3"))  # lines hitting L1 / L2 / L3
    L1, L2, L3 = (dot(hits[k], leaf_vl) for k in ("h1", "h2", "h3"))  # ... of them in leaves
    total, leaf_total = vl.sum(1), leaf_vl.sum(1)  # [N]
    leaf_miss = np.clip(1 - L3 / np.maximum(leaf_total, 1e-12), 0.0, 1.0)  # [B, N]
    l2, l3, sync, c2c, lost_miss = _coherence(pl, update + insert, (S1, S2, S3), (L1, L2, L3), leaf_total)
    followers = scan * prof.scan_followers  # [N] leaves reached through `next`: one dependent line each (§2.3)
    miss = _pos(total - S3 - lost_miss) + followers * leaf_miss  # [B, N] dependent lines leaving the L3 for memory
    sv = obj.visits * obj.stream  # [N, C] streamed lines per query (scans' key lines, §2.3)
    stream = sv.sum(1)  # [N]
    T1, T2, T3 = (dot(hits[k], sv) for k in ("s1", "s2", "s3"))  # streamed lines hitting L1 / L2 / L3
    stream_miss = _pos(stream - T3)  # [B, N]
    writes = update + insert * (prof.insert_shift_lines + NODE_LINES / prof.split_every)  # [N]
    mem_lines = miss + stream_miss
    l4 = np.minimum(dot(hits["h4"] * (1 - hits["h3"]), vl) / np.maximum(miss, 1e-12), 1.0) if hw.l4_nodes > 0 else np.zeros_like(miss)
    dep = miss + stream_miss / hw.uarch.stream_mlp  # latency-paying lines
    c2c_ns = ((pl.E @ hw.c2c_ns) * pl.E).sum(2)  # [B, N] mean transfer within the group
    handoff = HANDOFF_LINES * pl.E @ hw.c2c_ns.mean(0) + pl.shared * c2c_ns  # router + shared queue
    streamed_hits = (_pos(T2 - T1) * hw.l2_ns + _pos(T3 - T2) * hw.l3_ns) / hw.uarch.stream_mlp
    fixed = (l2 * hw.l2_ns + l3 * hw.l3_ns + sync * hw.uarch.c2c_domain_ns + c2c * c2c_ns + followers * (1 - leaf_miss) * hw.l3_ns + streamed_hits
             + handoff + dep * l4 * hw.uarch.l4_ns)  # fmt: skip
    cal = hw.calibration
    if cal is not None and cal.op_ns is not None:  # measured runtime overhead per query of each op (§14.3)
        fixed = fixed + np.asarray(cal.op_ns) @ prof.op_frac
    insn = _instructions(prof, obj, pl, INSN_SCAN_KEY if cal is None or cal.scan_key_insn is None else cal.scan_key_insn)
    shape = mem_lines.shape
    return Demand(
        insn=insn, comp_ns=insn / (hw.uarch.ipc * hw.machine.freq_ghz), fixed_ns=fixed, mem_dep=dep * (1 - l4),
        read_lines=mem_lines, wb_lines=writes * leaf_miss, lines=np.broadcast_to(total + followers + stream, shape),
        l1_miss_lines=_pos(total - S1) + followers + _pos(stream - T1), l3_miss_lines=mem_lines, c2c_lines=c2c,
        write_lines=np.broadcast_to(writes, shape), write_miss_lines=writes * leaf_miss,
        tlb_misses=_tlb_misses(hw, obj, hits["h2"], hits["h3"], followers), l4_share=l4, node_visits=obj.visits.sum(1) + followers,
    )  # fmt: skip


def batches_per_query(share: np.ndarray, pl: Placement, member: np.ndarray, batch_queries: int, queue_capacity: int) -> np.ndarray:
    """Expected batches per query of each slice under the runtime's work-conserving batching
    (§14.3): a worker drains its queue and runs what it drained grouped by slice, at most
    batch_queries to a batch. In a closed loop the routers keep the queues full, so a drain holds
    queue_capacity queries, of which slice s has its share of the thread's stream:
    b = min(batch_queries, max(1, queue_capacity * q)), q = (p_s / threads) / the mean load of
    its group's members. member [Gx, W]: 1/|g| per member of each group. -> [B, N]"""
    B, N = pl.exec_group.shape
    Gx = member.shape[0]
    key = (pl.exec_group + Gx * np.arange(B)[:, None]).ravel()
    thread_load = np.bincount(key, np.broadcast_to(share, (B, N)).ravel(), B * Gx).reshape(B, Gx) @ member  # [B, W]
    group_load = thread_load @ member.T  # [B, Gx] mean load of each group's members
    q = share[None, :] / _threads_per_slice(pl) / np.take_along_axis(group_load, pl.exec_group, axis=1)
    return 1.0 / np.clip(queue_capacity * q, 1.0, float(batch_queries))


def _pos(v: np.ndarray) -> np.ndarray:
    return np.maximum(v, 0.0)  # differences of hit sums: clip float round-off below 0


def _coherence(pl: Placement, wfrac: np.ndarray, hits: tuple, leaf_hits: tuple, leaf_total: np.ndarray) -> tuple[np.ndarray, ...]:
    """L2-hit, L3-hit, in-domain transfer and cross-domain transfer lines per query [B, N] once
    writes by other threads of a shared group invalidate copies: lost L2 copies refill from the L3
    (the group's other threads), lost L3 copies come from another domain, plus the lock and RFO
    lines of each write (§6): from another domain when the last writer ran there (1 - 1/span),
    from another core's private cache in the same domain otherwise (1/span - 1/threads).
    A leaf line another domain wrote since this core last read it comes from the writer's cache
    whether this L3 would have kept it or not, so those lines are cross-domain transfers out of the
    L3 hits and out of the misses alike (the last value: misses that become transfers), and a
    larger L3 never turns memory reads into transfers.
    hits / leaf_hits: lines hitting L1, L2, L3 (all classes / leaves only)."""
    (S1, S2, S3), (L1, L2, L3) = hits, leaf_hits
    threads = _threads_per_slice(pl)
    l2_lost = wfrac * (1 - 1 / threads) * (L2 - L1)
    l3_lost = wfrac * (1 - 1 / pl.span)
    l2 = _pos(S2 - S1 - l2_lost)
    l3 = _pos(S3 - S2 + l2_lost - l3_lost * (L3 - L1))
    sync = WRITE_SYNC_LINES * wfrac * _pos(1 / pl.span - 1 / threads)  # from another core of the same domain
    lost_miss = l3_lost * _pos(leaf_total - L3)
    return l2, l3, sync, l3_lost * (_pos(leaf_total - L1) + WRITE_SYNC_LINES), lost_miss


def _threads_per_slice(pl: Placement) -> np.ndarray:
    """[B, N] threads sharing the execution of each slice."""
    return pl.threads


def _instructions(prof: SliceProfile, obj: Objects, pl: Placement, scan_key_insn: float = INSN_SCAN_KEY) -> np.ndarray:
    _, update, insert, scan = prof.op_frac
    leaf = (obj.visits * obj.is_leaf).sum(1)  # [N]
    inner = (obj.visits * ~obj.is_leaf).sum(1)
    per_slice = (INSN_DISPATCH + INSN_INNER * inner + INSN_LEAF * leaf + INSN_UPDATE * update
                 + (INSN_INSERT + INSN_SPLIT / prof.split_every) * insert + scan_key_insn * prof.scan_keys * scan)  # fmt: skip
    return per_slice[None, :] + INSN_SHARED_QUEUE * pl.shared


def _tlb_misses(hw: HW, obj: Objects, h2: np.ndarray, h3: np.ndarray, followers: np.ndarray) -> np.ndarray:
    """Nodes are 4 KiB pages, so a DTLB covering t pages behaves like a cache of t nodes; its hit
    rate is interpolated between the L2's and the L3's in log capacity (§4). A scan's following
    leaves miss like the slice's leaves."""
    frac = np.clip(np.log(hw.uarch.tlb_entries / hw.l2_nodes) / np.log(hw.l3_nodes / hw.l2_nodes), 0, 1)
    h = (1 - frac) * h2 + frac * h3  # [B, N, C]
    leaf_visits = np.maximum((obj.visits * obj.is_leaf).sum(1), 1e-300)
    leaf_hit = np.einsum("bnc,nc->bn", h, obj.visits * obj.is_leaf) / leaf_visits
    return np.maximum(obj.visits.sum(1) - np.einsum("bnc,nc->bn", h, obj.visits), 0.0) + followers * (1 - leaf_hit)


@dataclass
class Solution:
    """The fixed point for B episodes. Traffic is per query of the whole workload."""

    X: np.ndarray  # [B] throughput, queries/s
    t_ns: np.ndarray  # [B, N] worker time per query of the slice
    mem_ns: np.ndarray  # [B, N] loaded DRAM latency of one line of the slice
    thread_util: np.ndarray  # [B, W]
    rho_mem: np.ndarray  # [B, M] memory channel utilisation per node
    rho_link: np.ndarray  # [B, 2L] per directed link
    node_read_bytes: np.ndarray  # [B, M]
    node_write_bytes: np.ndarray  # [B, M]
    link_bytes: np.ndarray  # [B, 2L]
    local_share: np.ndarray  # [B, N] share of the slice's memory lines on the executing node
    smt_slowdown: np.ndarray  # [B, N] how much sibling threads stretch the slice's queries
    bound: np.ndarray  # [B] what saturates: 0 a worker thread, 1 the routers, 2 memory or a link
    slice_share: np.ndarray | None = None  # [B, N] share of the completed queries per slice (None: the offered shares)


def queue_factor(rho: np.ndarray) -> np.ndarray:
    """Loaded latency over idle latency for a resource at utilisation rho (§7)."""
    rho = np.minimum(rho, RHO_MAX)
    return 1 + QUEUE_C * rho**2 / (1 - rho)


class _Loads:
    """Everything the fixed point needs that does not depend on X (§7, §10).

    Per-thread loads go through the execution groups: what each group carries (a bincount over its
    slices) spread over its threads by hw.groups.member [G+1, W] (1/|g| per member), so groups
    of different slices may overlap (a thread serves its own slices and wider groups' shares)."""

    def __init__(self, hw: HW, prof: SliceProfile, pl: Placement, d: Demand, done: np.ndarray | None = None):
        B = pl.exec_group.shape[0]
        M = hw.n_nodes
        member = hw.groups.member  # [Gx, W]
        Gx = member.shape[0]
        # done [B, N]: share of each slice's offered queries that complete (unbounded queues, §10.1)
        p = (prof.share[None, :] * (1.0 if done is None else done))[..., None]  # [B or 1, N, 1]
        rd = (p * d.read_lines[..., None] * LINE * pl.E).transpose(0, 2, 1) @ pl.P  # [B, Mcore, Mmem]
        wr = (p * d.wb_lines[..., None] * LINE * pl.E).transpose(0, 2, 1) @ pl.P
        self.node_read, self.node_write = rd.sum(1), wr.sum(1)  # [B, M]
        flow = rd.transpose(0, 2, 1) + wr  # [B, from, to]: reads flow memory -> core
        self.link = np.einsum("bij,ijd->bd", flow, hw.route)  # [B, 2L]
        self.on_route = hw.route.transpose(1, 0, 2) > 0  # [Mcore, Mmem, 2L]: path of a read
        self.local = np.einsum("bnm,bnm->bn", pl.E, pl.P)  # [B, N]
        key = (pl.exec_group + Gx * np.arange(B)[:, None]).ravel()  # [B*N] group of each slice
        self.per_group = lambda v: np.bincount(key, v.ravel(), B * Gx).reshape(B, Gx)  # [B, N] -> [B, Gx]
        per_thread = lambda v: hw.groups.to_threads(self.per_group(prof.share * v))  # [B, W] ns per workload query
        self.comp, self.fixed = per_thread(d.comp_ns), per_thread(d.fixed_ns)
        # memory-latency weight per group and memory node [B, Gx, M]; a group runs its queries on
        # each node in the fixed shares hw.groups.E (placement.from_groups: one node for every
        # candidate group), so the weight of a (core node, memory node) pair is E[g] x this: O(N M)
        # per episode, not O(N M^2)
        mkey = (key.reshape(B, -1)[..., None] * M + np.arange(M)).ravel()
        self.mem_g = np.bincount(mkey, (p * d.mem_dep[..., None] * pl.P).ravel(), B * Gx * M).reshape(B, Gx, M)
        self.groups = hw.groups
        cal = hw.calibration
        # per-batch cost per query of each slice [B, N] and per thread [B, W] (0 without batch_ns)
        if cal is None or cal.batch_ns is None:
            self.batch_slice_ns, self.batch_thread_ns = np.zeros(pl.exec_group.shape), np.zeros(self.comp.shape)
        else:
            self.batch_slice_ns = cal.batch_ns * batches_per_query(prof.share, pl, member, cal.batch_queries, cal.queue_capacity)
            self.batch_thread_ns = hw.groups.to_threads(self.per_group(self.batch_slice_ns * prof.share))

    def mem_thread(self, lat: np.ndarray) -> np.ndarray:
        """Memory stall per thread and workload query [B, W] at latencies lat [B, Mcore, Mmem]."""
        g = self.groups
        # a candidate group runs on its one node: its row of lat; the every-worker group on all of them
        per_group = np.einsum("bgj,bgj->bg", self.mem_g, lat[:, np.maximum(g.node, 0), :])  # [B, Gx]
        per_group[:, g.every_worker] = np.einsum("bj,bij,i->b", self.mem_g[:, g.every_worker], lat, g.E[g.every_worker])
        return g.to_threads(per_group)


def loaded_latency(hw: HW, ld: _Loads, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DRAM latency [B, Mcore, Mmem] at throughputs X [B], with memory and link utilisation."""
    rho_mem = X[:, None] * (ld.node_read + ld.node_write) / hw.bw_bytes  # [B, M]
    if hw.link_bytes.size:
        rho_link = X[:, None] * ld.link / hw.link_bytes  # [B, 2L]
        worst = (rho_link[:, None, None, :] * ld.on_route).max(-1)  # [B, Mcore, Mmem]
    else:
        rho_link, worst = np.zeros((X.size, 0)), np.zeros((X.size, 1, 1))
    hop = hw.dist_ns - np.diag(hw.dist_ns)[None, :]  # extra latency of a remote path
    lat = hw.dist_ns * queue_factor(rho_mem)[:, None, :] + hop * (queue_factor(worst) - 1)
    return lat, rho_mem, rho_link


def thread_util(hw: HW, ld: _Loads, lat: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Utilisation of every worker thread [B, W] at X, SMT contention included (§9).

    A group's work is spread evenly over its threads; a busy sibling slows a thread's compute by
    beta_c and its stalls by beta_m, times the sibling's utilisation."""
    B, W = ld.comp.shape
    stall = ld.fixed + ld.batch_thread_ns + ld.mem_thread(lat)  # [B, W] ns per workload query
    c, m = ld.comp * X[:, None] * 1e-9, stall * X[:, None] * 1e-9
    u = c + m
    ckey = (hw.worker_core[None, :] + hw.n_cores * np.arange(B)[:, None]).ravel()
    for _ in range(SMT_PASSES):
        busy = np.minimum(u, 1.0)
        siblings = np.bincount(ckey, busy.ravel(), B * hw.n_cores)[ckey].reshape(B, W) - busy
        u = c * (1 + hw.uarch.smt_beta_compute * siblings) + m * (1 + hw.uarch.smt_beta_memory * siblings)
    return u


def _pressure(hw: HW, ld: _Loads, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max utilisation over threads, routers and memory/links at X [B] -> ([B], which)."""
    lat, rho_mem, rho_link = loaded_latency(hw, ld, X)
    util = thread_util(hw, ld, lat, X)
    thread = util.max(1)
    cal = hw.calibration
    route_ns = ROUTE_NS if cal is None or cal.route_ns is None else cal.route_ns
    routers = hw.n_nodes * (1 if cal is None else cal.routers_per_node)
    router = X * route_ns * 1e-9 / routers
    if cal is not None and cal.shared_cpus is not None:  # routers share the workers' CPUs (§14.3)
        thread = np.maximum(thread, (util.sum(1) + X * route_ns * 1e-9) / cal.shared_cpus)
    channel = np.maximum(rho_mem.max(1), rho_link.max(1, initial=0.0)) / RHO_MAX
    stack = np.stack([thread, router, channel])  # [3, B]
    return stack.max(0), stack.argmax(0)


def solve(hw: HW, prof: SliceProfile, pl: Placement) -> tuple[Solution, Demand]:
    """Largest X with every resource at utilisation <= 1 (§10), or with unbounded queues the sum
    of the workers' completion rates (§10.1)."""
    d = demand(hw, prof, pl, hit_rates(hw, prof, pl))
    ld = _Loads(hw, prof, pl, d)
    if hw.calibration is not None and hw.calibration.queues == "unbounded":
        sol = _open_solution(hw, prof, pl, d, ld)
        for _ in range(CACHE_PASSES):  # the caches hold what completes, not what is offered
            d = demand(hw, prof, pl, hit_rates(hw, prof, pl, sol.slice_share))
            sol = _open_solution(hw, prof, pl, d, _Loads(hw, prof, pl, d))
        return sol, d
    return _solution(hw, pl, d, ld, largest_feasible(hw, ld)), d


CACHE_PASSES = 2  # unbounded queues: caches re-solved at the completed rates (changes X < 1 % after 2)
OPEN_PASSES = 24  # damped fixed-point passes: completion -> traffic -> latency -> completion (§10.1)


def _open_solution(hw: HW, prof: SliceProfile, pl: Placement, d: Demand, ld: _Loads) -> Solution:
    """Unbounded queues (§10.1): routers offer queries at their full rate lam and never wait; worker w
    would need utilisation u_w to serve all it is offered and completes the share f_w = min(1, 1/u_w);
    a slice's queries complete at the mean f of its group's members. Memory traffic follows the
    completed queries, so latency, u and f are solved as a damped fixed point."""
    cal = hw.calibration
    route_ns = ROUTE_NS if cal is None or cal.route_ns is None else cal.route_ns
    B = pl.exec_group.shape[0]
    lam = np.full(B, hw.n_nodes * cal.routers_per_node / (route_ns * 1e-9))  # every router at full speed
    member = hw.groups.member  # [Gx, W], 1/|g| per member
    log_f = np.zeros((B, hw.n_workers))
    for i in range(OPEN_PASSES):
        f_w = np.exp(log_f)
        done = np.take_along_axis(f_w @ member.T, pl.exec_group, axis=1)  # [B, N] mean over the group
        lat, _, _ = loaded_latency(hw, _Loads(hw, prof, pl, d, done), lam)
        u = thread_util(hw, ld, lat, lam)
        target = -np.log(np.maximum(u, 1.0))
        log_f = target if i == 0 else 0.5 * (log_f + target)
    f_w = np.exp(log_f)
    done = np.take_along_axis(f_w @ member.T, pl.exec_group, axis=1)
    completed = done * prof.share  # [B, N] per offered query
    X = lam * completed.sum(1)
    ldc = _Loads(hw, prof, pl, d, done)
    lat, rho_mem, rho_link = loaded_latency(hw, ldc, lam)
    util = thread_util(hw, ld, lat, lam)
    base = (ld.comp + ld.fixed + ld.mem_thread(lat)) * lam[:, None] * 1e-9
    per_query = (lam / X)[:, None]  # traffic per completed query
    return Solution(
        X=X, t_ns=d.comp_ns + d.fixed_ns + d.mem_dep * np.einsum("bnm,bmk,bnk->bn", pl.E, lat, pl.P),
        mem_ns=np.einsum("bnm,bmk,bnk->bn", pl.E, lat, pl.P), thread_util=np.minimum(util, 1.0), rho_mem=rho_mem,
        rho_link=rho_link, node_read_bytes=ldc.node_read * per_query, node_write_bytes=ldc.node_write * per_query,
        link_bytes=ldc.link * per_query, local_share=ld.local,
        smt_slowdown=_group_mean(hw, pl, util / np.maximum(base, 1e-300), base > 0), bound=np.zeros(B, dtype=np.int64),
        slice_share=completed / completed.sum(1, keepdims=True),
    )  # fmt: skip


def largest_feasible(hw: HW, ld: _Loads) -> np.ndarray:
    """Root of log pressure(X) = 0 by the Illinois variant of regula falsi on log X [B].

    pressure(X) ~ X * (slowly rising cost), so log pressure is nearly linear in log X and a few
    steps suffice; the bracket's feasible end is returned, so utilisation never exceeds 1."""
    f = lambda u: np.log(_pressure(hw, ld, np.exp(u))[0])
    b = -np.log(np.maximum(_pressure(hw, ld, np.ones(ld.comp.shape[0]))[0], 1e-30))  # SMT/queueing only slow
    if not np.all(np.isfinite(b)):
        raise ValueError("simulator: a schedule's resource pressure is not finite (NaN/inf in the machine's or the calibration's constants)")
    fb = f(b)
    for _ in range(MAX_WIDEN):
        if not np.any(fb < 0):
            break  # every cost per query is constant or rises with X, but round-off can leave b a hair feasible
        b, fb = np.where(fb < 0, b + np.log(BRACKET), b), np.where(fb < 0, f(b + np.log(BRACKET)), fb)
    fb = np.maximum(fb, 0.0)
    a = b - np.log(BRACKET)
    fa = f(a)
    for _ in range(MAX_WIDEN):
        if not np.any(fa > 0):
            break  # not feasible even at 1/BRACKET of the idle bound: widen
        a, fa = np.where(fa > 0, a - np.log(BRACKET), a), np.where(fa > 0, f(a - np.log(BRACKET)), fa)
    if np.any(fb < 0) or np.any(fa > 0) or not (np.all(np.isfinite(fa)) and np.all(np.isfinite(fb))):
        raise ValueError("simulator: no throughput bracket found (pressure NaN/inf or not monotone in X)")
    side = np.zeros(a.shape)  # +1: last step moved a, -1: moved b (for the Illinois halving)
    for _ in range(ROOT_STEPS):
        c = np.where(fb - fa > 1e-15, (a * fb - b * fa) / np.maximum(fb - fa, 1e-15), (a + b) / 2)
        fc = f(c)
        left = fc <= 0
        fb = np.where(left & (side > 0), fb / 2, fb)  # a moved twice in a row: halve f(b)
        fa = np.where(~left & (side < 0), fa / 2, fa)
        a, fa = np.where(left, c, a), np.where(left, fc, fa)
        b, fb = np.where(left, b, c), np.where(left, fb, fc)
        side = np.where(left, 1.0, -1.0)
    return np.exp(a)


def _solution(hw: HW, pl: Placement, d: Demand, ld: _Loads, X: np.ndarray) -> Solution:
    _, bound = _pressure(hw, ld, X)
    lat, rho_mem, rho_link = loaded_latency(hw, ld, X)
    mem_ns = np.einsum("bnm,bmk,bnk->bn", pl.E, lat, pl.P)  # [B, N]
    util = thread_util(hw, ld, lat, X)
    base = (ld.comp + ld.fixed + ld.batch_thread_ns + ld.mem_thread(lat)) * X[:, None] * 1e-9
    return Solution(
        X=X, t_ns=d.comp_ns + d.fixed_ns + ld.batch_slice_ns + d.mem_dep * mem_ns, mem_ns=mem_ns, thread_util=util,
        rho_mem=rho_mem, rho_link=rho_link, node_read_bytes=ld.node_read, node_write_bytes=ld.node_write,
        link_bytes=ld.link, local_share=ld.local, smt_slowdown=_group_mean(hw, pl, util / np.maximum(base, 1e-300), base > 0),
        bound=bound,
    )  # fmt: skip


def _group_mean(hw: HW, pl: Placement, per_thread: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mean of a per-thread value [B, W] over each slice's execution group (its valid threads) -> [B, N]."""
    member = hw.groups.member  # [Gx, W]
    total = np.where(valid, per_thread, 0.0) @ member.T  # [B, Gx]
    n = valid.astype(float) @ member.T
    per_group = np.where(n > 0, total / np.maximum(n, 1e-300), 1.0)
    return np.maximum(np.take_along_axis(per_group, pl.exec_group, axis=1), 1.0)
