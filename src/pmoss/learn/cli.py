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
    algo: Annotated[str, typer.Option(help="dt (Decision Transformer) | bc (behaviour cloning, top quantile) | cql (conservative Q-learning) | critic (return model that ranks candidate schedules).")] = "dt",
    init: Annotated[Optional[Path], typer.Option(help="Fine-tune from this model bundle (the base model).")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Override the config's max_steps.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Override the config's seed.")] = None,
    ray: Annotated[bool, typer.Option("--ray", help="Train under Ray Train (DDP over --workers processes).")] = False,
    workers: Annotated[int, typer.Option(help="Ray Train workers (with --ray).")] = 2,
    shuffle_returns: Annotated[Optional[int], typer.Option(help="Control run: permute return-to-go across episodes with this seed.")] = None,
    snapshots: Annotated[Optional[Path], typer.Option(help="--algo critic: the raw snapshots the dataset was built from (the critic's inputs).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Pre-train a Decision Transformer or a baseline (--algo), or fine-tune one with --init; logged to MLflow."""
    from pmoss.learn.train import train  # torch and Lightning: only when training
    cfg = load_model(TrainConfig, config)
    cfg = cfg.model_copy(update={k: v for k, v in {"max_steps": max_steps, "seed": seed}.items() if v is not None})
    if snapshots is not None:
        cfg = cfg.model_copy(update={"critic": cfg.critic.model_copy(update={"snapshots": str(snapshots)})})
    if ray:
        from pmoss.learn.ray_train import train_on_ray

        bundle = train_on_ray(data, output, cfg, init=init, algo=algo, workers=workers, shuffle_returns=shuffle_returns)
    else:
        bundle = train(data, output, cfg, init=init, algo=algo, progress=not quiet, shuffle_returns=shuffle_returns)
    typer.echo(f"{output / BUNDLE_FILE}: {bundle.info['train_metrics']}")


def attach_critic_command(
    policy: Annotated[Path, typer.Argument(help="The policy's model bundle (a dt model).")],
    critic: Annotated[Path, typer.Option(help="The return model's bundle (pmoss train --algo critic).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Model directory for the combined bundle (model.pt).")],
    k: Annotated[int, typer.Option(help="Samples the policy proposes next to its greedy schedule.")] = 16,
    temperature: Annotated[float, typer.Option(help="Sampling temperature of the proposals.")] = 1.0,
    candidates: Annotated[str, typer.Option(help="samples | samples+heuristics (the group heuristics, generated from the snapshot, are ranked too).")] = "samples+heuristics",
) -> None:
    """One bundle that proposes with the policy and picks with the critic (best-of-k, scorer critic):
    `pmoss evaluate`, the registry and `pmoss serve` run it like any model; the critic's time counts."""
    from pmoss.contracts.errors import ContractError
    from pmoss.learn.bundle import load_bundle, save_bundle
    from pmoss.learn.rollout import CANDIDATE_SETS

    if candidates not in CANDIDATE_SETS:
        raise typer.BadParameter(f"'{candidates}' is not one of {', '.join(CANDIDATE_SETS)}", param_hint="--candidates")
    pol, crit = load_bundle(policy), load_bundle(critic)
    if crit.info.get("algo") != "critic":
        raise ContractError(f"--critic {critic}: a '{crit.info.get('algo', 'dt')}' model, not a critic (pmoss train --algo critic)")
    if pol.info.get("algo", "dt") not in ("dt", "bc", "cql"):
        raise ContractError(f"{policy}: a '{pol.info.get('algo')}' model proposes no schedules; pass a dt, bc or cql model")
    inference = {**pol.info.get("inference", {}), "mode": "best-of-k", "k": k, "temperature": temperature, "scorer": "critic", "candidates": candidates}
    pol.info = {**pol.info, "inference": inference, "policy": str(policy), "critic": str(critic)}
    pol.critic = crit
    save_bundle(pol, output / BUNDLE_FILE)
    typer.echo(f"{output / BUNDLE_FILE}: {policy} proposes greedy + {k} samples, {critic} picks ({candidates})")
