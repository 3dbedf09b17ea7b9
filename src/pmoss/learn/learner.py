"""What the offline learners share: the algorithm interface, the optimiser, and turning a batch into model inputs.

Each algorithm lives in its own module (dt.py, bc.py, cql.py) and subclasses `Algorithm`: it owns
its networks and says how a batch becomes named loss parts (`losses`). Training runs them in two
ways over the same `losses`: the Lightning learner in train.py (checkpoints, MLflow, DDP/Ray), and
the plain `update(batch) -> dict[str, float]` loop here (CORL style; tests and benchmarks use it).
No Lightning import here: this module stays importable where only torch is installed.

Every algorithm's policy network is a `DecisionTransformer` (bc/cql with `use_return=False`), so a
bundle of any algorithm is rolled out by the same KV-cached loop in rollout.py; only the meaning of
the head differs: action logits (dt, bc) or Q-values over candidate groups (cql).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn as nn

from pmoss.data.state import at_slices, teacher_forced, window_slices
from pmoss.learn.model import DecisionTransformer, cosine_lr

if TYPE_CHECKING:
    from pmoss.learn.config import TrainConfig

# meta [B, M], feats [B, N, F], share [B, N], actions [B, N] (group indices), rtg [B, N], and the
# episode's machine as padded index arrays m_* (data/state.py; m_group_valid [B, G] masks padding)
Batch = dict[str, torch.Tensor]


def sample_steps(batch: Batch, k: int | None, n: int | None = None) -> torch.Tensor | None:
    """k slice indices per episode (sorted, without repeats) among its first n (default all N) whose
    action the loss scores, or None for all: the transformer always reads every slice, the per-group
    head is most of a step's cost."""
    B, N = batch["actions"].shape
    n = n or N
    if not k or k >= n:
        return None
    # drawn on the CPU generator (the same steps on any device, seeded runs reproduce), then moved
    return torch.rand(B, n).argsort(-1)[:, :k].sort(-1).values.to(batch["actions"].device)


Window = tuple[torch.Tensor, int]  # (first slice [B], slices C) of one window per episode


def sample_window(batch: Batch, context: int | None, generator: torch.Generator | None = None) -> Window | None:
    """A window of `context` slices in each episode, its first slice uniform over the episode, or
    None where the window holds the whole episode. A rollout longer than the model's training
    length attends to the meta token and the last `n_slices` slices (rollout.py), so a window cut
    from a longer episode, with its state and positions from the whole episode, is what such a step
    reads."""
    B, N = batch["actions"].shape
    if not context or context >= N:
        return None
    return torch.randint(0, N - context + 1, (B,), generator=generator).to(batch["actions"].device), context


def window_generator(training: bool) -> torch.Generator | None:
    """Where windows are drawn: training, the global RNG (seeded, saved in checkpoints); validation,
    the same windows at every pass (a loss curve that compares like with like)."""
    return None if training else torch.Generator().manual_seed(0)


def at_window(x: torch.Tensor, window: Window | None) -> torch.Tensor:
    """x [B, N, ...] in the window ([B, C, ...]; all of x without one)."""
    return x if window is None else at_slices(x, window_slices(window))


def episode_steps(steps: torch.Tensor | None, window: Window | None) -> torch.Tensor | None:
    """Steps counted from the window's first slice as slices of the episode (None: every slice of the window, or of the episode)."""
    if window is None:
        return steps
    return window_slices(window) if steps is None else window[0][:, None] + steps


def batch_inputs(batch: Batch, steps: torch.Tensor | None = None, window: Window | None = None, before: bool = False) -> tuple[torch.Tensor, ...]:
    """(state summaries [B, N, S], the data's groups' features [B, N, D], every group's features at
    `steps` [B, K, G, D]), teacher forced (slice t's own counters excluded); with a `window`, of its
    C slices only ([B, C, ...], steps counted from its first slice); before: and the action before
    the window (`teacher_forced`)."""
    # inputs, not parameters: no graph needed; and exact fp32 under bf16 autocast (masked max/min
    # use fp32's largest value, which bf16 cannot hold)
    with torch.no_grad(), torch.autocast(batch["actions"].device.type, enabled=False):
        return teacher_forced(batch["actions"], batch["feats"], batch["share"], batch, steps, window, before)


def policy_scores(model: DecisionTransformer, batch: Batch, steps: torch.Tensor | None = None, window: Window | None = None) -> torch.Tensor:
    """Teacher-forced scores [B, K, G] of the batch's policy network (logits or Q-values) at `steps`;
    with a `window` (`sample_window`), the model reads the meta token and the window's slices, and
    steps count from its first slice."""
    summary, chosen, groups, before = batch_inputs(batch, steps, window, before=True)
    return model(batch["meta"], at_window(batch["rtg"], window), summary, chosen, groups, batch["m_group_valid"], steps, before)


def at_steps(x: torch.Tensor, steps: torch.Tensor | None) -> torch.Tensor:
    """x [B, N] at steps [B, K] (all of x when steps is None)."""
    return x if steps is None else torch.gather(x, 1, steps)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW (no decay on embeddings, biases, norms) with linear warmup + cosine decay by step."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in named if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in named if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_lr(s, cfg.warmup, cfg.max_steps, 1.0))
    return opt, sched


class Algorithm(nn.Module, ABC):
    """An offline learner. Subclasses set `name`, build `self.model` (the policy that is bundled) and define `losses`."""

    name: ClassVar[str]
    model: DecisionTransformer

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__()
        self.train_cfg = cfg
        self._opt: tuple[torch.optim.Optimizer, Any] | None = None  # created on the first `update`
        self.step = 0

    @abstractmethod
    def losses(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Named loss parts and metrics (scalars); key 'loss' is the one minimised."""

    def after_update(self) -> None:
        """Called after every optimiser step (e.g. target-network tracking)."""

    def optimizer(self) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        return make_optimizer(self, self.train_cfg)

    def update(self, batch: Batch) -> dict[str, float]:
        """One gradient step without Lightning: the same losses, clipping and schedule as `pmoss train`."""
        if self._opt is None:
            self._opt = self.optimizer()
        opt, sched = self._opt
        self.train()
        parts = self.losses(batch)
        opt.zero_grad(set_to_none=True)
        parts["loss"].backward()
        torch.nn.utils.clip_grad_norm_(self.parameters(), self.train_cfg.grad_clip)
        opt.step()
        sched.step()
        self.after_update()
        self.step += 1
        return {k: float(v.detach()) for k, v in parts.items()}

    def training_state(self) -> dict[str, Any]:
        """Everything `update` needs to continue exactly: weights, optimiser, schedule, step, RNG."""
        if self._opt is None:
            self._opt = self.optimizer()
        opt, sched = self._opt
        return {"weights": self.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "step": self.step,
                "rng": torch.get_rng_state()}  # fmt: skip

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state["weights"])
        self._opt = self.optimizer()
        self._opt[0].load_state_dict(state["optimizer"])
        self._opt[1].load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        torch.set_rng_state(state["rng"])
