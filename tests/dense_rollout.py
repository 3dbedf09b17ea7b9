"""A frozen copy of the rollout before issue #39 (dense [groups x workers] state per step): the
reference that tests/test_rollout_sparse.py compares today's schedules against, and the baseline
benchmarks/bench_inference.py times in the same run. Not used by the package; do not "fix" it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import LOAD_CAP
from pmoss.data.state import as_tensors, groups_at, machine_arrays, summary_at, worker_increments
from pmoss.learn.bundle import Bundle
from pmoss.learn.rollout import algo_of, snapshot_inputs


class DenseRunningState:
    """The pre-#39 RunningState: every group's mean read from the per-worker state by a [G, W] matmul."""

    def __init__(self, m: dict[str, torch.Tensor], feats: torch.Tensor, share: torch.Tensor):
        self.m, self.feats, self.share = m, feats, share
        B, W = m["m_worker_node"].shape
        self.N = share.shape[0]
        self.workers = feats.new_zeros(B, 1, W, 2 + feats.shape[1])
        self.prev = torch.full((B, 1), -1, dtype=torch.long)
        self.t = 0

    def features(self) -> tuple[torch.Tensor, torch.Tensor]:
        B = self.workers.shape[0]
        share = self.share[self.t].expand(B, 1)
        summary = summary_at(self.workers, share, torch.full((B, 1), self.t), self.N, self.m)
        return summary, groups_at(self.workers, self.prev, share, self.m)

    def place(self, groups: torch.Tensor) -> None:
        B = groups.shape[0]
        t = self.t
        inc = worker_increments(groups[:, None], self.feats[t].expand(B, 1, -1), self.share[t].expand(B, 1), self.N, self.m)
        self.workers = self.workers + inc
        self.prev = groups[:, None]
        self.t += 1


@torch.inference_mode()
def dense_rollout(
    bundle: Bundle, machine: Machine, row: dict[str, Any], *, target_factor: float = 2.0, batch: int = 1,
    temperature: float = 0.0, cap: float | None = None, load_cap: float | None = LOAD_CAP, seed: int = 0,
    model: torch.nn.Module | None = None, greedy_first: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """learn.rollout.rollout as of commit 6834b2c, verbatim but for the state class."""
    model = model or bundle.model()
    meta, feats, share = snapshot_inputs(bundle, machine, row)
    N = len(share)
    m = {k: v.unsqueeze(0).expand(batch, *v.shape) for k, v in as_tensors(machine_arrays(machine)).items()}
    valid = m["m_group_valid"]  # [B, G]
    member = m["m_member"][0] > 0  # [G, W]
    share_of = m["m_member"][0]  # [G, W]
    cap = cap or math.ceil(N / machine.n_workers)
    gen = torch.Generator().manual_seed(seed)
    state = DenseRunningState(m, torch.as_tensor(feats), torch.as_tensor(share, dtype=torch.float32))
    caches = model.new_caches(batch, 1 + 3 * N)
    algo_of(bundle)
    rtg_seq = torch.empty(N)
    rtg = torch.tensor(float(target_factor))
    for t in range(N):
        rtg_seq[t] = rtg
        rtg = rtg - float(share[t] * target_factor)
    occ = torch.zeros(batch, machine.n_workers)
    wload = torch.zeros(batch, machine.n_workers)
    lcap = float("inf") if load_cap is None else load_cap
    chosen = torch.zeros(batch, N, dtype=torch.long)
    loglik = torch.zeros(batch)
    rows = torch.arange(batch)
    x = model.embed_meta(meta).expand(batch, 1, -1)
    for t in range(N):
        summary, groups = state.features()
        x = torch.cat([x, model.step_tokens(rtg_seq[t].expand(batch, 1), summary, None)], dim=1)
        h = model.extend(x, caches)[:, -1:]
        after = (occ[:, None, :] + share_of).masked_fill(~member, 0).amax(-1)
        added = share_of * float(share[t] * machine.n_workers)
        after_load = (wload[:, None, :] + added).masked_fill(~member, 0).amax(-1)
        blocked = ~valid | (after > cap + 1e-6) | (after_load > lcap + 1e-6)
        least = after_load.masked_fill(~valid, float("inf")).amin(-1, keepdim=True)
        blocked = torch.where(blocked.all(-1, keepdim=True), ~valid | (after_load > least * (1 + 1e-6)), blocked)
        logp = torch.log_softmax(model.head(h, groups, valid)[:, 0].masked_fill(blocked, float("-inf")), -1)
        a = logp.argmax(-1) if temperature <= 0 else torch.multinomial(torch.softmax(logp / temperature, -1), 1, generator=gen).squeeze(-1)
        if greedy_first:
            a[0] = logp[0].argmax()
        loglik += logp[rows, a]
        chosen[:, t] = a
        state.place(a)
        occ += share_of[a]
        wload += added[a]
        x = model.action_token(groups[rows, 0, a], model.position(summary[:, 0]))
    return chosen.numpy(), loglik.numpy()
