"""Inference: an autoregressive rollout with a KV cache that turns one snapshot into a schedule.

Input: a machine descriptor, one raw snapshot taken under the currently running schedule, and a
target return (factor x the best throughput the model saw for that machine and workload; the
paper uses 2x). Each step feeds 2-3 new tokens (one with `slice_tokens: 1`) through the cached
transformer, so a rollout costs N small forward passes instead of N full-context ones. Eligibility masking and a cap of k slices
per core (inference only) keep every action valid; the result is validated before it is returned.

Return-to-go after slice t decreases by the slice's share of the snapshot's throughput times the
target: the snapshot is the only evidence of how load spreads over slices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import LOAD_CAP, Schedule
from pmoss.data.state import GROUP_STATIC, RunningState, SparseGroups, as_tensors, machine_arrays, sparse_groups
from pmoss.data.tokens import normalise_snapshot
from pmoss.learn.bundle import Bundle

Mode = Literal["greedy", "sample", "best-of-k"]


def snapshot_inputs(bundle: Bundle, machine: Machine, row: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Normalised (meta [M], feats [N, F]) and per-slice load shares [N] from a raw snapshot row."""
    meta, feats, share = normalise_snapshot(row, machine, bundle.stats)
    return torch.from_numpy(meta), torch.from_numpy(feats), share


# What the model's head emits, by training algorithm: one rollout loop serves all of them, because
# greedy is the masked argmax either way and sampling is softmax(head / temperature) (for Q-values,
# a Boltzmann policy). Only the Decision Transformer is conditioned on a target return.
HEAD_KIND = {"dt": "logits", "bc": "logits", "cql": "q-values"}


def algo_of(bundle: Bundle) -> str:
    algo = bundle.info.get("algo", "dt")
    if algo not in HEAD_KIND:
        raise ValueError(f"model bundle: algo '{algo}' has no rollout; expected one of {', '.join(HEAD_KIND)}")
    return algo


def return_to_go(share: np.ndarray, target_factor: float) -> torch.Tensor:
    """Return-to-go before each slice, [N]: the target minus the snapshot's load share already placed,
    a float32 running total (bc/cql models ignore it: use_return=False)."""
    rtg_seq = torch.empty(len(share))
    rtg = torch.tensor(float(target_factor))
    for t in range(len(share)):
        rtg_seq[t] = rtg
        rtg = rtg - float(share[t] * target_factor)
    return rtg_seq


class Busiest:
    """Each worker's slices and load (the inference caps' bookkeeping) and, per group, its busiest
    member's with one more slice on the group: one gather and one segment max over the S memberships
    per step. Exact: a slice adds the same 1/|g| (and load) to every member, so the busiest member
    after is the busiest before plus that amount, as the dense [G, W] form computed it."""

    def __init__(self, sparse: SparseGroups, batch: int, n_workers: int):
        self.sparse = sparse
        self.occ_load = torch.zeros(batch, n_workers + 1, 2)  # slices, load in fair shares (W x the queries' share); + the scratch worker
        self.segment = sparse.member_group[None, :, None].expand(batch, -1, 2)  # [B, S, 2]

    def after(self, added: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """added [G]: slice t's load per member of each group -> (slices, load) of each group's busiest member with slice t, [B, G] each."""
        sp = self.sparse
        B = self.occ_load.shape[0]
        busiest = self.occ_load.new_zeros(B, sp.inv_size.shape[0], 2).scatter_reduce_(1, self.segment, self.occ_load.index_select(1, sp.member_worker), "amax")
        return busiest[..., 0] + sp.inv_size, busiest[..., 1] + added

    def place(self, groups: torch.Tensor, added: torch.Tensor) -> None:
        """groups [B] took slice t, whose load per member of each group is `added` [G]."""
        rows = self.sparse.rows[groups]  # [B, L]
        inc = torch.stack([self.sparse.inv_size[groups], added[groups]], -1)  # [B, 2]
        self.occ_load.scatter_add_(1, rows[..., None].expand(-1, -1, 2), inc[:, None].expand(-1, rows.shape[1], -1))


class PointerScores:
    """The group head's scores of every group at one rollout step, from the running state's parts
    instead of every group's feature row (`GroupHead`: v . gelu(W_g x_g + W_h h)). W_g x_g is linear in
    x_g = [member means | static | dynamic], so: the static part is projected once; the member
    means' part is kept as the means are (`RunningState.place`: the groups sharing a worker with the
    chosen one); of the dynamic part, node occupancy and load (and whether the node took the last
    slice) are per node, what a member would carry of slice t is a fixed column times its share,
    and only the group that took the last slice gets its `took` column. Per step: O(M + G) kernels'
    worth of one [B, G, k] sum, where building the rows was ~25 kernel calls over [B, G, D].
    Equal to GroupHead over the full rows up to float rounding (tests/test_model.py)."""

    def __init__(self, head: torch.nn.Module, state: RunningState):
        w, C, S = head.group.weight, state.workers.shape[-1], GROUP_STATIC  # [k, D]
        wm, ws, wd = w[:, :C], w[:, C : C + S], w[:, C + S :]
        self.state, self.sparse = state, state.sparse
        self.means_w = wm.T.contiguous()  # [C, k]
        self.static = F.linear(state.static, ws, head.group.bias)  # [G, k]
        # per unit of share_t x W: what each member carries (column 4) and its node's load with it (column 5)
        self.share_w = wd[:, 4] / state.size[:, None] + wd[:, 5] / state.node_size[state.group_node][:, None]  # [G, k]
        self.node_w = torch.stack([wd[:, 0], wd[:, 1] + wd[:, 5]])  # [2, k]: node occ, node load
        self.took_w, self.node_took_w = wd[:, 2], wd[:, 3]
        self.query, self.score = head.query, head.score
        B, G1 = state.gmean.shape[:2]
        self.means = state.gmean.new_zeros(B, G1, w.shape[0])  # [B, G + 1, k]: the member means times W_g's columns
        self.proj = state.values @ self.means_w  # [N, k]: each slice's values through those columns

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """h [B, E] at slice t's token -> scores [B, G] (after `state.summary()`, which sets the node means)."""
        st = self.state
        b, gn = st.batch, st.group_node
        node = st.node @ self.node_w  # [B, M, k]
        if st.t > 0:  # every row has placed slice t-1
            prev = st.prev[:, 0]
            node.index_put_((b, gn[prev]), self.node_took_w, accumulate=True)
        z = torch.index_select(node, 1, gn).add_(self.means[:, :-1]).add_(self.static)
        z.add_(self.share_w, alpha=float(st.share[st.t]) * st.n_w)
        if st.t > 0:
            z.index_put_((b, prev), self.took_w, accumulate=True)
        z.add_(F.linear(h, self.query.weight, self.query.bias)[:, None])
        return F.linear(F.gelu(z), self.score.weight, self.score.bias)[..., 0]

    def place(self, groups: torch.Tensor) -> None:
        """groups [B] take slice t: before `state.place`."""
        st, sp = self.state, self.sparse
        over, coef = sp.overlap[groups], sp.overlap_coef[groups]  # [B, R]
        proj = self.proj[st.t]  # [k]
        self.means.scatter_add_(1, over[..., None].expand(-1, -1, proj.shape[0]), coef[..., None] * proj)


class PaperReads:
    """What a rollout step of the paper's layout (3 tokens a slice) reads: every group's feature row
    and GroupHead over them, the arithmetic its models were trained and evaluated with, bit for bit
    (the demo's and the grid's published figures reproduce)."""

    def __init__(self, model: torch.nn.Module, state: RunningState, rtg: torch.Tensor):
        self.model, self.state, self.rtg = model, state, rtg
        self.batch = torch.arange(state.workers.shape[0])
        self.valid = state.m["m_group_valid"]
        self.before: tuple[torch.Tensor, torch.Tensor] | None = None  # slice t-1's chosen rows and position

    def tokens(self, t: int) -> torch.Tensor:
        """Slice t-1's action token (t > 0), then rtg_t and state_t: [B, 2 or 3, E]."""
        m = self.model
        summary, self.groups = self.state.features()  # [B, 1, S], [B, 1, G, D]
        self.pos = m.position(summary)  # [B, 1, E]: the state's and, next step, the action's
        new = m.step_tokens(self.rtg[t].expand(summary.shape[0], 1), summary, None, self.pos)
        return new if self.before is None else torch.cat([m.action_token(*self.before), new], 1)

    def scores(self, h: torch.Tensor) -> torch.Tensor:
        return self.model.head(h[:, None], self.groups, self.valid)[:, 0]

    def place(self, a: torch.Tensor) -> None:
        self.before = (self.groups[self.batch, 0, a], self.pos[:, 0])
        self.state.place(a)


class LeanReads:
    """What a rollout step of one token a slice reads: the state's summary, the chosen groups' rows
    and the head's scores from the rows' parts (`RunningState.summary/rows`, `PointerScores`,
    `step_embedder`), about half the kernel calls of `PaperReads`. Equal to it up to float rounding,
    which is why only the new layout uses it: a rounding difference can flip a sampled slice, and
    the paper layout's published models keep their figures."""

    def __init__(self, model: torch.nn.Module, state: RunningState, rtg: torch.Tensor):
        self.state, self.embed, self.pointer = state, model.step_embedder(rtg), PointerScores(model.head, state)
        self.before: torch.Tensor | None = None  # slice t-1's chosen groups' features [B, D]

    def tokens(self, t: int) -> torch.Tensor:
        return self.embed(t, self.state.summary(), self.before)

    def scores(self, h: torch.Tensor) -> torch.Tensor:
        return self.pointer(h)

    def place(self, a: torch.Tensor) -> None:
        self.before = self.state.rows(a)
        self.pointer.place(a)
        self.state.place(a)


@torch.inference_mode()
def rollout(
    bundle: Bundle, machine: Machine, row: dict[str, Any], *, target_factor: float = 2.0, batch: int = 1,
    temperature: float = 0.0, cap: float | None = None, load_cap: float | None = LOAD_CAP, seed: int = 0,
    model: torch.nn.Module | None = None, greedy_first: bool = False, blocked_out: list[torch.Tensor] | None = None,
    context: int | None = None, machine_wide: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """`batch` rollouts in parallel; returns (candidate-group indices [B, N], log-likelihoods [B]).
    temperature 0 = greedy; greedy_first: row 0 is the greedy rollout and the others sample (one
    batched pass instead of two). Any machine and any slice count: nothing in the model has their size.
    cap: slices per worker; load_cap: load per worker in fair shares of the snapshot's queries
    (None: no load cap). Both are inference-only masks, like the paper's k-per-core cap.
    machine_wide: let a slice go to a group that spans every worker (on a one-node machine its node's
    group, or an L3 that spans the chip) while a narrower one fits under the caps; off by default, a
    third inference-only mask (docs/model.md, "Single-node machines").
    blocked_out: a list that receives each step's masked groups [B, G] (learn/improve.py scores the
    same masked distribution with gradients).
    context: the slices a step attends to (its own and the ones before it, besides the meta token);
    default the model's training episode length, as long a context as training ever showed it: a
    rollout of up to that many slices reads the whole episode, a longer one the last `context`
    slices, so its attention per step is bounded (issue #39). Pass N for the whole episode."""
    model = model or bundle.model()
    meta, feats, share = snapshot_inputs(bundle, machine, row)
    N = len(share)
    arrays = machine_arrays(machine)
    m = {k: v.unsqueeze(0).expand(batch, *v.shape) for k, v in as_tensors(arrays).items()}
    assert bool(m["m_group_valid"].all()), "rollout: one unpadded machine (every group valid)"
    sparse = sparse_groups(arrays.member)
    # A cap of k slices per worker (inference only; a slice counts 1/|g| on each member of its group).
    # Default: the fair share, as every one-core heuristic places (2x it let cores run double load).
    cap = cap or math.ceil(N / machine.n_workers)
    gen = torch.Generator().manual_seed(seed)
    state = RunningState(m, torch.as_tensor(feats), torch.as_tensor(share, dtype=torch.float32), sparse)
    context = context or model.cfg.n_slices
    if context < 2:
        raise ValueError(f"rollout: context must be at least 2 slices, got {context}")
    window = context if model.cfg.slice_tokens == 1 else 3 * context - 1  # what training's last slice sees after the meta token
    caches, decode = model.new_caches(batch, 1 + model.cfg.slice_tokens * N, window=window), model.decoder()
    algo_of(bundle)  # a bundle of an unknown algorithm fails here, not with a wrong schedule
    reads = (LeanReads if model.cfg.slice_tokens == 1 else PaperReads)(model, state, return_to_go(share, target_factor))
    busy = Busiest(sparse, batch, machine.n_workers)
    lcap = float("inf") if load_cap is None else load_cap
    # A group of every worker is the shared placement os-default already is; no multi-node machine has
    # one, and on a one-node machine a greedy chain that takes it never leaves it: each slice there
    # raises every worker's load alike, so no cap ever turns the next slice away. A slice that fits
    # under no cap may still take it (below).
    wide = torch.as_tensor(arrays.group_size >= machine.n_workers)
    if machine_wide or bool(wide.all()):
        wide = torch.zeros_like(wide)
    chosen, loglik = [], torch.zeros(batch)  # each step's groups [B]; the running total of their log-probabilities
    meta_token = model.embed_meta(meta).expand(batch, 1, -1)  # [B, 1, E]
    for t in range(N):
        x = reads.tokens(t)
        h = decode(torch.cat([meta_token, x], 1) if t == 0 else x, caches)[:, -1]  # [B, E] at the token slice t's action is predicted from
        added = sparse.inv_size * float(share[t] * machine.n_workers)  # [G] slice t's load on each member of each group
        after, after_load = busy.after(added)  # [B, G] busiest member's slices and load with slice t added
        blocked = (after > cap + 1e-6) | (after_load > lcap + 1e-6) | wide
        full = blocked.all(-1)
        if bool(full.any()):  # a slice that fits under no cap goes to the groups whose busiest member ends least loaded
            least = after_load.amin(-1, keepdim=True)  # a group of every worker among them: what a slice too hot for any narrower group needs
            blocked = torch.where(full[:, None], after_load > least * (1 + 1e-6), blocked)
        if blocked_out is not None:
            blocked_out.append(blocked)
        logp = torch.log_softmax(reads.scores(h).masked_fill_(blocked, float("-inf")), -1)  # [B, G]
        a = logp.argmax(-1) if temperature <= 0 else torch.multinomial(torch.softmax(logp / temperature, -1), 1, generator=gen).squeeze(-1)
        if greedy_first:
            a[0] = logp[0].argmax()
        loglik += logp.gather(1, a[:, None])[:, 0]
        chosen.append(a)
        reads.place(a)
        busy.place(a, added)
    return torch.stack(chosen, 1).numpy(), loglik.numpy()


Scorer = Literal["likelihood", "critic"]
# Group heuristics a critic may rank next to the model's samples (`candidates="samples+heuristics"`),
# generated from the snapshot alone (sn-hot widens the slices it measured hot), as on a real host.
HEURISTIC_CANDIDATES = ("sn-hot", "sn-numa", "sn-grouped", "sn-spread", "sn-mixed")
CANDIDATE_SETS = ("samples", "samples+heuristics")


def candidate_kind(name: str) -> str:
    """A candidate's kind from its name in `candidate_pool`: greedy, sample (sample<i>) or a heuristic's kind."""
    return "sample" if name.startswith("sample") else name


def candidate_pool(bundle: Bundle, machine: Machine, row: dict[str, Any], *, k: int, temperature: float = 1.0, target_factor: float = 2.0,
                   cap: float | None = None, load_cap: float | None = LOAD_CAP, seed: int = 0, candidates: str = "samples",
                   provenance: dict[str, Any] | None = None, context: int | None = None, machine_wide: bool = False) -> dict[str, Schedule]:  # fmt: skip
    """What a scorer ranks, as `learned` schedules by name: the greedy rollout ("greedy"), k samples
    ("sample<i>") and, with `candidates="samples+heuristics"`, the group heuristics generated from the
    snapshot (by kind). `pmoss propose` measures the same pool on the testbed for the critic's data."""
    from pmoss.contracts.policies import generate

    if candidates not in CANDIDATE_SETS:
        raise ValueError(f"candidates: '{candidates}' is not one of {', '.join(CANDIDATE_SETS)}")
    found, _ = rollout(bundle, machine, row, target_factor=target_factor, cap=cap, load_cap=load_cap, batch=k + 1, temperature=temperature,
                       seed=seed, greedy_first=True, context=context, machine_wide=machine_wide)  # fmt: skip
    pool = {"greedy": found[0], **{f"sample{i}": a for i, a in enumerate(found[1:])}}
    if candidates == "samples+heuristics":
        load = np.asarray(row["queries"], dtype=float)
        pool |= {kind: generate(kind, machine, len(load), load=load if kind == "sn-hot" else None).group_index(machine) for kind in HEURISTIC_CANDIDATES}  # type: ignore[arg-type]
    return {name: Schedule.from_groups(machine, groups, **(provenance or {})) for name, groups in pool.items()}


def propose(
    bundle: Bundle, machine: Machine, row: dict[str, Any], *, mode: Mode = "greedy", k: int = 8, temperature: float = 1.0,
    target_factor: float = 2.0, cap: float | None = None, load_cap: float | None = LOAD_CAP, seed: int = 0,
    score: Callable[[Schedule], float] | None = None, scorer: Scorer = "likelihood", candidates: str = "samples",
    context: int | None = None, machine_wide: bool = False,
) -> Schedule:
    """A validated `learned` schedule. best-of-k ranks the greedy schedule and k samples by `score`
    (e.g. a simulator, research only), by the attached critic (`scorer="critic"`, runs on a real host;
    `candidates="samples+heuristics"` adds the group heuristics), or by likelihood. context: the
    slices a rollout step attends to (`rollout`; default the model's training episode length)."""
    provenance = {"model": bundle.info.get("registered_as") or bundle.info.get("algo", "dt"), "mode": mode, "seed": seed, "target_factor": target_factor}
    if context is not None:  # set by the caller: the schedule says so (the default, the model's training length, is not written)
        provenance["context"] = context
    if mode == "best-of-k" and scorer == "critic":
        if bundle.critic is None:
            raise ValueError("scorer 'critic': this model bundle carries no critic (pmoss attach-critic)")
        pool = candidate_pool(bundle, machine, row, k=k, temperature=temperature, target_factor=target_factor, cap=cap, load_cap=load_cap,
                              seed=seed, candidates=candidates, provenance=provenance, context=context, machine_wide=machine_wide)  # fmt: skip
        return _critic_pick(bundle, machine, row, pool, {**provenance, "scorer": "critic", "candidates": candidates})
    batch = k if mode == "best-of-k" else 1
    temp = 0.0 if mode == "greedy" else temperature
    actions, loglik = rollout(bundle, machine, row, target_factor=target_factor, batch=batch, temperature=temp, cap=cap, load_cap=load_cap, seed=seed,
                              context=context, machine_wide=machine_wide)  # fmt: skip
    found = [Schedule.from_groups(machine, a, **provenance) for a in actions]
    if len(found) == 1:
        return found[0].validate_for(machine)
    if score is not None:
        return max(found, key=score).validate_for(machine)
    return found[int(np.argmax(loglik))].validate_for(machine)


def critic_choice(critic: Bundle, machine: Machine, row: dict[str, Any], pool: dict[str, Schedule],
                  history: dict[str, Any] | None = None) -> tuple[str, np.ndarray]:  # fmt: skip
    """dt-critic's rule: the name of the candidate the critic predicts best, or "running" where the
    critic trained on this machine x workload and predicts no candidate above the return the snapshot
    measured; and the predictions [K] (scaled by the cell's best training return). With `history`
    ({"weight": w, "cells": learn.history.kind_history}), a candidate's score is its prediction plus
    w x what its kind measured in this cell's proposals (a cell never measured adds nothing)."""
    from pmoss.learn.critic import predict_returns

    pred = predict_returns(critic, machine, row, list(pool.values()))
    # Keep what runs when no candidate is predicted to beat it: the snapshot measured the running
    # schedule's return; the critic's scale (its training's best return) is known for the cells it trained on.
    cell = f"{machine.name}|{row['workload']}"
    scale = critic.stats.best_return.get(cell)
    if scale is not None and pred.max() * scale <= sum(row["queries"]) / row["window_s"]:
        return "running", pred
    score = pred
    if history and cell in history["cells"]:
        measured = history["cells"][cell]
        score = pred + history["weight"] * np.array([measured.get(candidate_kind(name), 0.0) for name in pool])
    return list(pool)[int(np.argmax(score))], pred


def _critic_pick(bundle: Bundle, machine: Machine, row: dict[str, Any], pool: dict[str, Schedule], info: dict[str, Any]) -> Schedule:
    """The critic's choice (`critic_choice`) as a validated schedule; provenance names the pick and
    the critic's best prediction, and the history's weight where the cell's history joined the score."""
    history = bundle.info.get("history")
    cell = f"{machine.name}|{row['workload']}"
    pick, pred = critic_choice(bundle.critic, machine, row, pool, history)
    info = {**info, "pick": pick, "predicted_return": float(pred.max())}
    if history and pick != "running" and cell in history["cells"]:
        info["history_weight"] = history["weight"]
    if pick == "running":
        running = Schedule.of_snapshot(row)
        scale = bundle.critic.stats.best_return[cell]
        keep = {**info, "running": running.kind, "running_return": sum(row["queries"]) / row["window_s"] / scale}
        return running.model_copy(update={"provenance": keep}).validate_for(machine)
    return pool[pick].model_copy(update={"provenance": info}).validate_for(machine)
