"""Discrete conservative Q-learning baseline (Kumar et al., 2020) over tile cells.

The Q-network is the Decision Transformer's backbone without return-to-go (same state encoder,
meta token and slice embedding); its head reads Q(history up to state t, cell) instead of action
logits, so the rollout in infer.py serves it unchanged (greedy = argmax Q under the same masks).

Loss = TD error against a Polyak-averaged target network
     + `return_weight` x regression of Q(s_t, a_t) on the Monte-Carlo return-to-go
     + `alpha` x CQL penalty (logsumexp over eligible cells - Q of the data's cell).
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

from pmoss.learn.learner import Algorithm, Batch, batch_tiles
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
        tiles = batch_tiles(batch, self.model.cfg)
        args = (batch["meta"], batch["rtg"], tiles, batch["cells"], batch["eligible"])
        q = self.model(*args).float()  # [B, N, A], -inf on ineligible cells
        with torch.no_grad():
            self.target.eval()  # Lightning's .train() on the learner reaches it too: no dropout in targets
            q_target = self.target(*args).float()
        q_data = q.gather(-1, batch["cells"].unsqueeze(-1)).squeeze(-1)  # [B, N]
        td = self._td_loss(q_data, q_target, batch)
        ret = F.mse_loss(q_data, batch["rtg"].float())
        penalty = self._cql_penalty(q, q_data)
        loss = td + self.params.return_weight * ret + self.params.alpha * penalty
        acc = (q.argmax(-1) == batch["cells"]).float().mean()
        return {"loss": loss, "td": td, "return_mse": ret, "cql_penalty": penalty, "q_data": q_data.mean().detach(), "acc": acc}

    def _td_loss(self, q_data: torch.Tensor, q_target: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Squared error to r_t + gamma max_a Q_target(s_{t+1}, a); the last slice bootstraps from nothing."""
        next_v = F.pad(q_target[:, 1:].max(-1).values, (0, 1))  # [B, N], 0 after the last slice
        y = slice_rewards(batch["rtg"].float()) + self.params.gamma * next_v
        return F.mse_loss(q_data, y)

    @staticmethod
    def _cql_penalty(q: torch.Tensor, q_data: torch.Tensor) -> torch.Tensor:
        """E[logsumexp_a Q(s, a) - Q(s, a_data)] over eligible cells: pushes down actions the data never took."""
        return (torch.logsumexp(q, dim=-1) - q_data).mean()

    @torch.no_grad()
    def after_update(self) -> None:
        for p_t, p in zip(self.target.parameters(), self.model.parameters(), strict=True):
            p_t.lerp_(p, self.params.tau)
