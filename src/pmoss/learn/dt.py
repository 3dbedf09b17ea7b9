"""Decision Transformer (the P-MOSS learner): cross-entropy on actions with teacher forcing.

The policy sees the return-to-go (scaled to O(1) by the best return of the machine x workload),
the worker state and earlier actions, and predicts slice t's action at slice t's state token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pmoss.learn.learner import Algorithm, Batch, at_steps, episode_steps, policy_scores, sample_steps, sample_window, window_generator
from pmoss.learn.model import DecisionTransformer, DTConfig

if TYPE_CHECKING:
    from pmoss.learn.config import TrainConfig


def action_losses(model: DecisionTransformer, batch: Batch, loss_steps: int | None = None, context: int | None = None,
                  window_gen: torch.Generator | None = None) -> dict[str, torch.Tensor]:  # fmt: skip
    """Teacher-forced cross-entropy and accuracy of the data's actions (shared with behaviour cloning),
    at `loss_steps` random slices per episode (an unbiased estimate of the all-slice loss); with
    `context`, of a random window of that many slices per episode (`sample_window`, drawn from
    `window_gen` if given)."""
    window = sample_window(batch, context, window_gen)
    steps = sample_steps(batch, loss_steps, window[1] if window else None)
    logits = policy_scores(model, batch, steps, window)  # [B, K, G]
    target = at_steps(batch["actions"], episode_steps(steps, window))
    loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())
    acc = (logits.argmax(-1) == target).float().mean()
    return {"loss": loss, "acc": acc}


class DT(Algorithm):
    name = "dt"

    def __init__(self, model_cfg: DTConfig, cfg: TrainConfig, init_weights: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__(cfg)
        assert model_cfg.use_return, "a Decision Transformer conditions on the return-to-go (use_return=True)"
        self.model = DecisionTransformer(model_cfg)
        if init_weights is not None:
            self.model.load_state_dict(init_weights)

    def losses(self, batch: Batch) -> dict[str, torch.Tensor]:
        return action_losses(self.model, batch, self.train_cfg.loss_steps if self.training else None, self.train_cfg.context, window_generator(self.training))
