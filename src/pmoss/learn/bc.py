"""Behaviour cloning baseline: the Decision Transformer's backbone without return-to-go.

Trained on the top quantile of episodes by return within each machine x workload (the filter
lives in the data loader, `EpisodeArrays(top_quantile=...)`, so every algorithm sees the same
split); the loss is the DT's cross-entropy on actions. Without the filter this would clone the
mostly random behaviour policy of the offline pool (docs/design.md §5: 71% random schedules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pmoss.learn.dt import action_losses
from pmoss.learn.learner import Algorithm, Batch, window_generator
from pmoss.learn.model import DecisionTransformer, DTConfig

if TYPE_CHECKING:
    from pmoss.learn.config import TrainConfig


class BC(Algorithm):
    name = "bc"

    def __init__(self, model_cfg: DTConfig, cfg: TrainConfig, init_weights: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__(cfg)
        assert not model_cfg.use_return, "behaviour cloning must not see the return-to-go (use_return=False)"
        self.model = DecisionTransformer(model_cfg)
        if init_weights is not None:
            self.model.load_state_dict(init_weights)

    def losses(self, batch: Batch) -> dict[str, torch.Tensor]:
        return action_losses(self.model, batch, self.train_cfg.loss_steps if self.training else None, self.train_cfg.context, window_generator(self.training))
