"""`pmoss train`: runs the trainer of train.py in this process, or under Ray Train (ray_train.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pmoss.contracts.io import load_model, shipped
from pmoss.learn.bundle import BUNDLE_FILE
from pmoss.learn.config import TrainConfig

DEFAULT_CONFIG = shipped("training/dt-tiny.yaml")


def train_command(
    data: Annotated[Path, typer.Argument(help="Tokenised dataset directory (pmoss dataset build).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Model directory: model.pt + checkpoints/.")],
    config: Annotated[Path, typer.Option(help="Training config YAML (default: the repository's training/dt-tiny.yaml, from any directory).")] = DEFAULT_CONFIG,
    algo: Annotated[str, typer.Option(help="dt (Decision Transformer) | bc (behaviour cloning, top quantile) | cql (conservative Q-learning).")] = "dt",
    init: Annotated[Optional[Path], typer.Option(help="Fine-tune from this model bundle (the base model).")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Override the config's max_steps.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Override the config's seed.")] = None,
    ray: Annotated[bool, typer.Option("--ray", help="Train under Ray Train (DDP over --workers processes).")] = False,
    workers: Annotated[int, typer.Option(help="Ray Train workers (with --ray).")] = 2,
    shuffle_returns: Annotated[Optional[int], typer.Option(help="Control run: permute return-to-go across episodes with this seed.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Pre-train a Decision Transformer or a baseline (--algo), or fine-tune one with --init; logged to MLflow."""
    from pmoss.learn.train import train  # torch and Lightning: only when training
    cfg = load_model(TrainConfig, config)
    cfg = cfg.model_copy(update={k: v for k, v in {"max_steps": max_steps, "seed": seed}.items() if v is not None})
    if ray:
        from pmoss.learn.ray_train import train_on_ray

        bundle = train_on_ray(data, output, cfg, init=init, algo=algo, workers=workers, shuffle_returns=shuffle_returns)
    else:
        bundle = train(data, output, cfg, init=init, algo=algo, progress=not quiet, shuffle_returns=shuffle_returns)
    typer.echo(f"{output / BUNDLE_FILE}: {bundle.info['train_metrics']}")
