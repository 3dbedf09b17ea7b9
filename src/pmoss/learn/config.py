"""Training configuration (training/*.yaml): the optimisation schedule and each learner's own
parameters. A leaf module, so the learners and the trainer both import it without a cycle."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ALGOS = ("dt", "bc", "cql", "critic")


class BCParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    top_quantile: float = Field(0.25, gt=0.0, le=1.0)  # fraction of each machine x workload's episodes kept, best first



class CQLParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(0.1, ge=0.0)  # weight of the conservative penalty (untuned; rewards are O(1/N) per slice)
    gamma: float = Field(1.0, gt=0.0, le=1.0)  # finite horizon of N slices: no discount needed
    tau: float = Field(0.005, gt=0.0, le=1.0)  # Polyak rate of the target network per update
    return_weight: float = Field(0.5, ge=0.0)  # weight of the Monte-Carlo return-to-go regression


class CriticParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    contexts: int = Field(4, ge=1)  # raw snapshots of the same cell each schedule is read with (critic.py)
    snapshots: str | None = None  # the raw snapshot directory they come from (`pmoss train --snapshots`)
    # group > 1: a training item is `group` schedules of one cell read with one snapshot (batch_size
    # counts items), as dt-critic's candidates are at inference, and rank_weight adds a pairwise
    # loss on their order to the return regression (critic.py)
    group: int = Field(1, ge=1)
    rank_weight: float = Field(0.0, ge=0.0)
    rank_scale: float = Field(0.02, gt=0.0)  # a predicted-return gap of this size is a confident order
    # members > 1: an ensemble, the same critic trained with seeds seed, seed+1, ...; it predicts their
    # mean (critic.predict_returns). Member 0 is in the model directory, member i in members/<i>/.
    members: int = Field(1, ge=1)
    # what the inputs are normalised by: "snapshots", the statistics of the raw training-split
    # snapshots the critic reads, of every schedule kind (critic.snapshot_stats); "tokens", the
    # tokenised training split's (the policy's: group schedules only, where some counters never move)
    stats: Literal["tokens", "snapshots"] = "snapshots"


class TrainConfig(BaseModel):
    """training/*.yaml: the model shape and the optimisation schedule."""

    model_config = ConfigDict(extra="forbid")
    model: dict[str, Any] = {}  # DTConfig fields; data-derived ones (tile, features, meta, slices) and use_return are filled in
    max_steps: int = 1000
    batch_size: int = 16  # per worker (under Ray the effective batch is workers x batch_size)
    lr: float = 6e-4
    weight_decay: float = 0.1
    warmup: int = 100
    grad_clip: float = 1.0
    val_every: int = 100  # steps between validation passes (and checkpoints)
    # items a validation pass reads at most, evenly spaced over the split (None: all). The loss is a
    # monitor (the model is the last step's), and the critic's split grows with its pool: read
    # whole, the paper grid's passes were 60 % of its critic training
    val_items: int | None = Field(default=None, ge=1)
    seed: int = 0
    num_workers: int = 0  # data loader processes
    loss_steps: int | None = 32  # slices per episode whose action loss a training step scores (None: all; validation: all)
    # context (dt, bc): a training item is a random window of this many slices of its episode, with
    # the meta token and the state and positions of the whole episode; the model's n_slices (what a
    # rollout step attends to) is this. Episodes longer than the window then train what a longer
    # rollout's step reads (docs/model.md). None: whole episodes
    context: int | None = Field(default=None, ge=2)
    bc: BCParams = BCParams()  # used by --algo bc
    cql: CQLParams = CQLParams()  # used by --algo cql
    critic: CriticParams = CriticParams()  # used by --algo critic


