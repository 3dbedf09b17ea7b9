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
    context: Annotated[Optional[int], typer.Option(min=2, help="Override the config's context: train on a random window of this many slices of each episode (dt, bc), which is then what the model's rollouts attend to.")] = None,
    ray: Annotated[bool, typer.Option("--ray", help="Train under Ray Train (DDP over --workers processes).")] = False,
    workers: Annotated[int, typer.Option(help="Ray Train workers (with --ray).")] = 2,
    shuffle_returns: Annotated[Optional[int], typer.Option(help="Control run: permute return-to-go across episodes with this seed.")] = None,
    snapshots: Annotated[Optional[Path], typer.Option(help="--algo critic: the raw snapshots the dataset was built from (the critic's inputs).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar (a line every PMOSS_PROGRESS_S seconds, default 30, instead); with --ray, no Ray INFO lines.")] = False,
) -> None:
    """Pre-train a Decision Transformer or a baseline (--algo), or fine-tune one with --init; logged to MLflow."""
    from pmoss.learn.train import train  # torch and Lightning: only when training
    cfg = load_model(TrainConfig, config)
    cfg = cfg.model_copy(update={k: v for k, v in {"max_steps": max_steps, "seed": seed, "context": context}.items() if v is not None})
    if snapshots is not None:
        cfg = cfg.model_copy(update={"critic": cfg.critic.model_copy(update={"snapshots": str(snapshots)})})

    def run(out: Path, c: TrainConfig, start: Path | None):
        if ray:
            from pmoss.learn.ray_train import train_on_ray

            return train_on_ray(data, out, c, init=start, algo=algo, workers=workers, shuffle_returns=shuffle_returns, quiet=quiet)
        return train(data, out, c, init=start, algo=algo, progress=not quiet, shuffle_returns=shuffle_returns)

    bundle = run(output, cfg, init)
    members = cfg.critic.members if algo == "critic" else 1
    if members > 1:  # an ensemble of critics: each member its own run and seed; fine-tuned member by member
        from pmoss.learn.bundle import save_bundle

        def start(i: int) -> Path | None:  # member i of an ensemble --init, else the one --init
            own = (init if init.is_dir() else init.parent) / "members" / str(i) if init is not None else None
            return own if own is not None and (own / BUNDLE_FILE).is_file() else init

        bundle.members = [run(output / "members" / str(i), cfg.model_copy(update={"seed": cfg.seed + i}), start(i)) for i in range(1, members)]
        save_bundle(bundle, output / BUNDLE_FILE)
    typer.echo(f"{output / BUNDLE_FILE}: {bundle.info['train_metrics']}" + (f" (+ {members - 1} members, seeds {cfg.seed + 1}..{cfg.seed + members - 1})" if members > 1 else ""))


def attach_critic_command(
    policy: Annotated[Path, typer.Argument(help="The policy's model bundle (a dt model).")],
    critic: Annotated[list[Path], typer.Option(help="The return model's bundle (pmoss train --algo critic); repeat it for an ensemble of critics trained on the same data (other seeds): the pick is by their mean prediction.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Model directory for the combined bundle (model.pt).")],
    k: Annotated[int, typer.Option(help="Samples the policy proposes next to its greedy schedule.")] = 16,
    temperature: Annotated[float, typer.Option(help="Sampling temperature of the proposals.")] = 1.0,
    candidates: Annotated[str, typer.Option(help="samples | samples+heuristics (the group heuristics, generated from the snapshot, are ranked too).")] = "samples+heuristics",
    history: Annotated[Optional[list[Path]], typer.Option(help="Raw proposals (`pmoss propose` output; repeatable): what each candidate kind measured in each cell joins the critic's score.")] = None,
    history_weight: Annotated[float, typer.Option(min=0.0, help="Weight of --history's measured share next to the critic's prediction (both in units of the cell's best return).")] = 0.5,
) -> None:
    """One bundle that proposes with the policy and picks with the critic (best-of-k, scorer critic):
    `pmoss evaluate`, the registry and `pmoss serve` run it like any model; the critic's time counts."""
    from pmoss.contracts.errors import ContractError
    from pmoss.learn.bundle import ensemble_of, load_bundle, save_bundle
    from pmoss.learn.rollout import CANDIDATE_SETS

    if candidates not in CANDIDATE_SETS:
        raise typer.BadParameter(f"'{candidates}' is not one of {', '.join(CANDIDATE_SETS)}", param_hint="--candidates")
    pol, crits = load_bundle(policy), [load_bundle(c) for c in critic]
    for path, c in zip(critic, crits, strict=True):
        if c.info.get("algo") != "critic":
            raise ContractError(f"--critic {path}: a '{c.info.get('algo', 'dt')}' model, not a critic (pmoss train --algo critic)")
        # the mean of predictions is a mean of one quantity only when inputs and targets are normalised alike
        if c.stats != crits[0].stats or c.config != crits[0].config:
            raise ContractError(f"--critic {path}: trained on other data or with another network than --critic {critic[0]}; "
                                "an ensemble's critics share their dataset and config (train them with --seed)")
    if pol.info.get("algo", "dt") not in ("dt", "bc", "cql"):
        raise ContractError(f"{policy}: a '{pol.info.get('algo')}' model proposes no schedules; pass a dt, bc or cql model")
    inference = {**pol.info.get("inference", {}), "mode": "best-of-k", "k": k, "temperature": temperature, "scorer": "critic", "candidates": candidates}
    pol.info = {**pol.info, "inference": inference, "policy": str(policy), "critic": str(critic[0]) if len(critic) == 1 else [str(c) for c in critic]}
    pol.critic = ensemble_of(crits)
    if history:
        from pmoss.learn.history import kind_history

        pol.info["history"] = {"weight": history_weight, "from": [str(h) for h in history], "cells": kind_history(history)}
    save_bundle(pol, output / BUNDLE_FILE)
    from pmoss.learn.logged_model import log_attached_model

    log_attached_model(output, policy, critic, {"k": k, "temperature": temperature, "candidates": candidates, "history_weight": history_weight if history else 0.0})
    picks = f"{critic[0]} picks" if len(critic) == 1 else f"the mean of {len(critic)} critics ({', '.join(map(str, critic))}) picks"
    measured = f", plus {history_weight} x the measured history of {len(pol.info['history']['cells'])} cells" if history else ""
    typer.echo(f"{output / BUNDLE_FILE}: {policy} proposes greedy + {k} samples, {picks} ({candidates}){measured}")
