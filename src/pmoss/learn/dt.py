"""Decision Transformer (the P-MOSS learner): cross-entropy on actions with teacher forcing.

The policy sees the return-to-go (scaled to O(1) by the best return of the machine x workload),
the state tile and earlier actions, and predicts slice t's action at slice t's state token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pmoss.learn.learner import Algorithm, Batch, batch_tiles
from pmoss.learn.model import DecisionTransformer, DTConfig

if TYPE_CHECKING:
    from pmoss.learn.config import TrainConfig


def action_losses(model: DecisionTransformer, batch: Batch) -> dict[str, torch.Tensor]:
    """Teacher-forced cross-entropy and accuracy of the data's actions (shared with behaviour cloning)."""
    logits = model(batch["meta"], batch["rtg"], batch_tiles(batch, model.cfg), batch["cells"], batch["eligible"])  # [B, N, A]
    loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["cells"].flatten())
    acc = (logits.argmax(-1) == batch["cells"]).float().mean()
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
        return action_losses(self.model, batch)
