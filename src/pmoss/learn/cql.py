"""Discrete conservative Q-learning baseline (Kumar et al., 2020) over candidate execution groups.

The Q-network is the Decision Transformer's backbone without return-to-go (same state encoder,
meta token and slice embedding); its head reads Q(history up to state t, cell) instead of action
logits, so the rollout in infer.py serves it unchanged (greedy = argmax Q under the same masks).

Loss = TD error against a Polyak-averaged target network
     + `return_weight` x regression of Q(s_t, a_t) on the Monte-Carlo return-to-go
     + `alpha` x CQL penalty (logsumexp over valid groups - Q of the data's cell).
Departure from the paper's setting (P-MOSS has no CQL baseline): rewards are the slice shares of
throughput scaled by the best return of the machine x workload (so returns are O(1)), and the
horizon is the episode's N slices with gamma = 1 by default; the return term anchors Q's scale,
because a slice's reward depends on where all the other slices went (weak per-step credit).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pmoss.learn.learner import Algorithm, Batch, at_steps, batch_inputs, sample_steps
from pmoss.learn.model import DecisionTransformer, DTConfig

if TYPE_CHECKING:
    from pmoss.learn.config import TrainConfig


def slice_rewards(rtg: torch.Tensor) -> torch.Tensor:
    """Per-slice rewards [B, N] back from the (scaled) return-to-go: r_t = rtg_t - rtg_{t+1}."""
    return rtg - F.pad(rtg[:, 1:], (0, 1))


class CQL(Algorithm):
    name = "cql"

    def __init__(self, model_cfg: DTConfig, cfg: TrainConfig, init_weights: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__(cfg)
        assert not model_cfg.use_return, "the Q-network does not see the return-to-go (use_return=False)"
        self.params = cfg.cql
        self.model = DecisionTransformer(model_cfg)
        if init_weights is not None:
            self.model.load_state_dict(init_weights)
        self.target = copy.deepcopy(self.model).requires_grad_(False)

    def losses(self, batch: Batch) -> dict[str, torch.Tensor]:
        B, N = batch["actions"].shape
        k = self.train_cfg.loss_steps if self.training else None
        steps = sample_steps(batch, k)
        if steps is None:
            steps = torch.arange(N, device=batch["actions"].device).expand(B, N)
        nxt = (steps + 1).clamp(max=N - 1)  # the TD target reads the next slice's Q
        summary, chosen, groups = batch_inputs(batch, torch.cat([steps, nxt], 1))
        K = steps.shape[1]
        valid = batch["m_group_valid"]
        q = self.model(batch["meta"], batch["rtg"], summary, chosen, groups[:, :K], valid, steps).float()  # [B, K, G]
        with torch.no_grad():
            self.target.eval()  # Lightning's .train() on the learner reaches it too: no dropout in targets
            q_next = self.target(batch["meta"], batch["rtg"], summary, chosen, groups[:, K:], valid, nxt).float()
        actions = at_steps(batch["actions"], steps)
        q_data = q.gather(-1, actions.unsqueeze(-1)).squeeze(-1)  # [B, K]
        rtg = batch["rtg"].float()
        reward = at_steps(slice_rewards(rtg), steps)
        next_v = q_next.max(-1).values * (steps < N - 1)  # 0 after the last slice
        td = F.mse_loss(q_data, reward + self.params.gamma * next_v)
        ret = F.mse_loss(q_data, at_steps(rtg, steps))
        penalty = self._cql_penalty(q, q_data)
        loss = td + self.params.return_weight * ret + self.params.alpha * penalty
        acc = (q.argmax(-1) == actions).float().mean()
        return {"loss": loss, "td": td, "return_mse": ret, "cql_penalty": penalty, "q_data": q_data.mean().detach(), "acc": acc}

    @staticmethod
    def _cql_penalty(q: torch.Tensor, q_data: torch.Tensor) -> torch.Tensor:
        """E[logsumexp_a Q(s, a) - Q(s, a_data)] over valid groups: pushes down actions the data never took."""
        return (torch.logsumexp(q, dim=-1) - q_data).mean()

    @torch.no_grad()
    def after_update(self) -> None:
        for p_t, p in zip(self.target.parameters(), self.model.parameters(), strict=True):
            p_t.lerp_(p, self.params.tau)
