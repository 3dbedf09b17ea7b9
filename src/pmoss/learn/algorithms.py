"""The learners by name (dt | bc | cql | critic). The learners themselves never import this registry,
so adding one is one new module plus one line here."""

from __future__ import annotations

import torch

from pmoss.learn.bc import BC
from pmoss.learn.config import TrainConfig
from pmoss.learn.cql import CQL
from pmoss.learn.critic import Critic
from pmoss.learn.dt import DT
from pmoss.learn.learner import Algorithm
from pmoss.learn.model import DTConfig


def build_algorithm(algo: str, model_cfg: DTConfig, cfg: TrainConfig, init_weights: dict[str, torch.Tensor] | None = None) -> Algorithm:
    """The algorithm named `algo` (dt | bc | cql | critic) around a fresh or given policy network."""
    classes: dict[str, type[Algorithm]] = {"dt": DT, "bc": BC, "cql": CQL, "critic": Critic}
    if algo not in classes:
        raise ValueError(f"algo '{algo}': expected one of {', '.join(classes)}")
    return classes[algo](model_cfg, cfg, init_weights)
