"""`pmoss improve`: online policy improvement in the simulator (expert iteration on the policy's own samples).

Offline imitation copies the data's schedules; what the served greedy rollout needs is to move toward
schedules *it can reach* that measure better. An iteration, on one cell of a training pool drawn at
random:
1. snapshot the cell under `os-default` with the simulator (training seeds, apart from every
   evaluation seed), the model's only input, as `pmoss evaluate` gives it;
2. roll out the greedy schedule and K samples (temperature T) in one batch, under the inference
   masks the served policy runs with (slice cap, load cap);
3. score all K + 1 with the simulator's noise-free throughput (the scorer; it costs training time
   only: the served policy stays one greedy rollout);
4. keep the best schedule ever measured for each (cell, snapshot) — its *elite* — and, where it
   beats this greedy schedule, one AdamW step on its masked log-likelihood (cross-entropy toward it,
   teacher-forced), so the greedy rollout moves toward it;
5. optionally (`--replay R`), in the same step, R elites of other cells (self-imitation), so steps
   on many cells do not move the few on one machine away; measured in docs/model.md: it keeps the
   demo's cells and gives up what the steps won on generated machines;
6. optionally (`--anchor DATA`), in the same step, the offline Decision Transformer loss on a batch
   of the pre-training data (teacher-forced cross-entropy, as `pmoss train`), weighted by
   `--anchor-weight`: the imitation the policy was trained with holds it where the online steps
   have no evidence (a behaviour-regularised improvement).

Plain REINFORCE on the same samples was tried first and is not offered (docs/model.md, "Online
improvement"): with the batch mean as its baseline it improved the sampled distribution while the
greedy rollout, what is served, fell below it. Every number comes from the simulated testbed
(source=sim); the pool must be a training pool (no unseen machine, no validation or unseen
generated seed).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import torch
import typer

from pmoss.contracts.errors import ContractError
from pmoss.learn.bundle import BUNDLE_FILE, Bundle
from pmoss.learn.learner import policy_scores
from pmoss.learn.rollout import return_to_go, rollout, snapshot_inputs


class ImproveError(ContractError):
    """Bad input to `pmoss improve`; the message names the option."""


@dataclass(frozen=True)
class ImproveConfig:
    iters: int = 500  # cells drawn (one rollout batch and at most one step each)
    k: int = 15  # samples beside the greedy rollout
    temperature: float = 1.0
    lr: float = 3e-4
    grad_clip: float = 1.0
    seed: int = 0
    snapshots_per_cell: int = 4  # distinct training snapshots a cell cycles through
    replay: int = 0  # elites of other cells imitated in each step (0: only the drawn cell's)
    anchor_weight: float = 1.0  # weight of the offline DT loss in each step (used only with an anchor dataset)
    anchor_batch: int = 16  # pre-training episodes per step (dt-tiny's batch size)
    anchor_loss_steps: int = 32  # their slices scored, as `pmoss train` (TrainConfig.loss_steps)


def cells_of(pool: Any) -> list[tuple[str, str]]:
    return [(m, w) for m in pool.machines for w in pool.workloads]


def snapshot(machine: Any, workload: str, pool: Any, i: int) -> dict[str, Any]:
    """A training snapshot under os-default (seeded by derive_seed, never an evaluation seed base)."""
    from pmoss.collect.plan import derive_seed
    from pmoss.contracts.policies import generate
    from pmoss.sim import simulate

    seed = derive_seed("improve-snapshot", machine.name, workload, i)
    return simulate(machine, workload, pool.datasets[0], generate("os-default", machine, pool.n_slices), seed=seed, n_records=pool.n_records,
                    window_s=pool.window_s)  # fmt: skip


@dataclass
class Elite:
    """The best schedule measured so far for one (cell, snapshot), with what the rollout masked."""

    qps: float
    actions: torch.Tensor  # [1, N] candidate-group indices
    blocked: torch.Tensor  # [1, N, G]


def masked_loglik(model: torch.nn.Module, bundle: Bundle, machine: Any, row: dict[str, Any], actions: torch.Tensor, blocked: torch.Tensor,
                  target_factor: float, arrays: dict[str, torch.Tensor] | None = None) -> torch.Tensor:  # fmt: skip
    """Log-likelihood [B] of whole schedules `actions` [B, N] under the rollout's masked distribution
    (`blocked` [B, N, G], what the rollout masked), teacher-forced and differentiable.
    arrays: the machine's `as_tensors(machine_arrays(machine))`, when the caller keeps them."""
    from pmoss.data.state import as_tensors, machine_arrays

    meta, feats, share = snapshot_inputs(bundle, machine, row)
    B = actions.shape[0]
    rtg = return_to_go(share, target_factor)
    arrays = arrays if arrays is not None else as_tensors(machine_arrays(machine))
    m = {k: v.unsqueeze(0).expand(B, *v.shape) for k, v in arrays.items()}
    batch = {"meta": meta.unsqueeze(0).expand(B, -1), "feats": feats.unsqueeze(0).expand(B, -1, -1),
             "share": torch.as_tensor(share, dtype=torch.float32).unsqueeze(0).expand(B, -1), "actions": actions,
             "rtg": rtg.unsqueeze(0).expand(B, -1), **m}  # fmt: skip
    scores = policy_scores(model, batch)  # [B, N, G]
    logp = torch.log_softmax(scores.masked_fill(blocked, float("-inf")), -1)
    return logp.gather(-1, actions[..., None]).squeeze(-1).sum(-1)


def improve(bundle: Bundle, pool: Any, cfg: ImproveConfig, progress: Any = None, anchor: Any = None) -> tuple[Bundle, list[dict[str, Any]]]:
    """`cfg.iters` iterations over the pool's cells; returns the improved bundle and one log entry per iteration.
    anchor: the pre-training data (a `train.EpisodeArrays` split, read with the bundle's stats) whose
    DT loss joins every step at `cfg.anchor_weight`."""
    from pmoss.contracts.schedule import Schedule
    from pmoss.data.state import as_tensors, machine_arrays
    from pmoss.learn.dt import action_losses
    from pmoss.sim import load_sim_machine, throughput

    torch.manual_seed(cfg.seed)
    model = bundle.model()  # eval mode: no dropout, so the sampled and the trained distribution are the same
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    target = float(bundle.info.get("inference", {}).get("target_factor", 2.0))
    cells, rng = cells_of(pool), np.random.default_rng(cfg.seed)
    machines: dict[str, tuple[Any, dict[str, torch.Tensor]]] = {}
    snapshots: dict[tuple[str, str, int], dict[str, Any]] = {}  # a cell's training snapshots, simulated once
    elites: dict[tuple[str, str, int], Elite] = {}
    log: list[dict[str, Any]] = []
    anchor_rng = np.random.default_rng([cfg.seed, 7])  # its own stream: the cell draws stay as without an anchor

    def anchor_loss() -> torch.Tensor:
        idx = anchor_rng.integers(len(anchor), size=cfg.anchor_batch)
        batch = torch.utils.data.default_collate([anchor[int(i)] for i in idx])
        return action_losses(model, batch, cfg.anchor_loss_steps)["loss"]

    def elite_nll(key: tuple[str, str, int]) -> torch.Tensor:  # per slice, differentiable
        (m, arrays), e = machines[key[0]], elites[key]
        return -masked_loglik(model, bundle, m, snapshots[key], e.actions, e.blocked, target, arrays)[0] / e.actions.shape[1]

    for it in range(cfg.iters):
        name, workload = cells[rng.integers(len(cells))]
        if name not in machines:
            m = load_sim_machine(name)
            machines[name] = (m, as_tensors(machine_arrays(m)))
        m = machines[name][0]
        key = (name, workload, it % cfg.snapshots_per_cell)
        row = snapshots.get(key) or snapshots.setdefault(key, snapshot(m, workload, pool, key[2]))
        blocked: list[torch.Tensor] = []
        # context: the whole episode, as the teacher-forced step that scores these samples reads it
        # (a pool of more slices than the model trained on would otherwise sample from a window)
        found, _ = rollout(bundle, m, row, target_factor=target, batch=cfg.k + 1, temperature=cfg.temperature, seed=cfg.seed * 1_000_003 + it,
                           model=model, greedy_first=True, blocked_out=blocked, context=row["n_slices"])  # fmt: skip
        qps = throughput(m, workload, pool.datasets[0], [Schedule.from_groups(m, a) for a in found], n_records=pool.n_records,
                         window_s=pool.window_s)  # fmt: skip
        best = int(np.argmax(qps))
        if key not in elites or qps[best] > elites[key].qps:
            elites[key] = Elite(float(qps[best]), torch.as_tensor(found[best : best + 1]), torch.stack(blocked, 1)[best : best + 1].clone())
        elite = elites[key]
        entry = {"iter": it, "machine": name, "workload": workload, "greedy_qps": float(qps[0]), "best_qps": float(qps[best]),
                 "elite_qps": elite.qps, "mean_sample_qps": float(qps[1:].mean()), "stepped": bool(elite.qps > qps[0])}  # fmt: skip
        if entry["stepped"]:
            others = [k for k in elites if k != key] if cfg.replay else []  # no replay draws no numbers: the cell draws stay as without it
            replayed = [others[j] for j in rng.permutation(len(others))[: cfg.replay]] if others else []
            with torch.enable_grad():
                nll = [elite_nll(k) for k in (key, *replayed)]
                # the drawn cell at full weight, the replayed ones together at the same: an anchor, not a brake
                loss = nll[0] + (torch.stack(nll[1:]).mean() if replayed else 0.0)
                if anchor is not None:
                    offline = anchor_loss()
                    loss = loss + cfg.anchor_weight * offline
                    entry["anchor_loss"] = float(offline.detach())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
            entry["loss"], entry["replayed"] = float(loss.detach()), len(replayed)
        log.append(entry)
        if progress is not None:
            progress(it + 1, entry)
    info = {**bundle.info, "improve": {**asdict(cfg), "anchored": anchor is not None, "cells": len(cells), "source": "sim",
                                       "stepped": sum(e["stepped"] for e in log)}}  # fmt: skip
    return Bundle(bundle.config, bundle.stats, {k: v.detach().clone() for k, v in model.state_dict().items()}, info, bundle.critic,
                  bundle.members), log  # fmt: skip


def improve_command(
    model: Annotated[Path, typer.Argument(help="The policy's model bundle (directory with model.pt, or the file).")],
    pool: Annotated[Path, typer.Option(help="Training pool YAML: its machines, workloads, dataset and slice count (no held-out machine).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for the improved model.pt and improve-log.json.")],
    iters: Annotated[int, typer.Option(help="Iterations (a cell drawn, K + 1 rollouts scored, at most one step).")] = ImproveConfig.iters,
    n_slices: Annotated[Optional[int], typer.Option(help="Override the pool's slice count.")] = None,
    k: Annotated[int, typer.Option("-k", "--k", help="Samples beside the greedy rollout.")] = ImproveConfig.k,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = ImproveConfig.temperature,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = ImproveConfig.lr,
    replay: Annotated[int, typer.Option(help="Elites (best measured schedules) of other cells imitated in each step, so steps on one cell do not undo another's.")] = ImproveConfig.replay,
    anchor: Annotated[Optional[Path], typer.Option(help="Tokenised pre-training dataset (e.g. datasets/offline): its DT loss joins every step, so the policy keeps what it imitated where the online steps say nothing.")] = None,
    anchor_weight: Annotated[float, typer.Option(help="Weight of the --anchor loss against the elite's.")] = ImproveConfig.anchor_weight,
    seed: Annotated[int, typer.Option(help="Cell draws, samples and snapshots.")] = ImproveConfig.seed,
    threads: Annotated[int, typer.Option(help="Torch threads. Each step's tensors are small: one thread ran 1 s an iteration where two took 12-15 s beside another job on 2 cores.")] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar (a line every PMOSS_PROGRESS_S seconds, default 30, instead).")] = False,
) -> None:
    """Improve a policy online in the simulator: imitate its best measured sample where it beats its greedy schedule (source=sim)."""
    from rich.progress import Progress

    from pmoss.collect.plan import load_pool
    from pmoss.learn.bundle import load_bundle, save_bundle
    from pmoss.progress import Ticker, line_interval, show_bar
    from pmoss.sim import check_training_machines

    for opt, v, least in (("--iters", iters, 1), ("-k", k, 1), ("--threads", threads, 1), ("--replay", replay, 0)):
        if v < least:
            raise ImproveError(f"{opt}: must be at least {least}, got {v}")
    for opt, x in (("--temperature", temperature), ("--lr", lr), ("--anchor-weight", anchor_weight)):
        if not math.isfinite(x) or x <= 0:
            raise ImproveError(f"{opt}: must be a positive number, got {x}")
    p = load_pool(pool, n_slices=n_slices)
    if p.backend != "sim":
        raise ImproveError(f"--pool {pool}: backend '{p.backend}'; improvement scores its samples with the simulator (backend sim)")
    check_training_machines(p.machines, f"--pool {pool}: machines")
    bundle = load_bundle(model)
    torch.set_num_threads(threads)
    cfg = ImproveConfig(iters=iters, k=k, temperature=temperature, lr=lr, seed=seed, replay=replay, anchor_weight=anchor_weight)
    anchor_set = _anchor_set(anchor, bundle) if anchor is not None else None
    t0, shown = time.perf_counter(), show_bar(not quiet)
    with Progress(disable=not shown, transient=True) as bar, Ticker("improve", iters, "iteration", line_interval(shown)) as ticker:
        task = bar.add_task("improve", total=iters)

        def step(done: int, entry: dict[str, Any]) -> None:
            bar.update(task, completed=done, description=f"improve: {entry['machine']}|{entry['workload']}")
            ticker.advance(1)

        improved, log = improve(bundle, p, cfg, step, anchor_set)
    output.mkdir(parents=True, exist_ok=True)
    save_bundle(improved, output / BUNDLE_FILE)
    record = {"source": "sim", "config": asdict(cfg), "pool": str(pool), "anchor": str(anchor) if anchor else None, "iterations": log}
    (output / "improve-log.json").write_text(json.dumps(record, indent=1) + "\n")
    stepped = sum(e["stepped"] for e in log)
    typer.echo(f"{output / BUNDLE_FILE}: {iters} iterations over {len(cells_of(p))} cells, {stepped} steps toward a cell's elite "
               f"({time.perf_counter() - t0:.0f} s, source=sim)")  # fmt: skip


def _anchor_set(path: Path, bundle: Bundle) -> Any:
    """The anchor dataset's training split, normalised with the bundle's stats (what the policy reads)."""
    from pmoss.data.tokens import Stats
    from pmoss.learn.train import EpisodeArrays

    if bundle.info.get("algo", "dt") != "dt":
        raise ImproveError(f"--anchor {path}: the anchor is the Decision Transformer's loss; this bundle is '{bundle.info.get('algo')}'")
    stats = path / "stats.json"  # its slice count first: episodes of another count would not even reshape
    n = Stats.from_json(stats.read_text(), source=str(stats)).n_slices if stats.is_file() else bundle.config.n_slices
    if n != bundle.config.n_slices:
        raise ImproveError(f"--anchor {path}: episodes of {n} slices; the model was trained on {bundle.config.n_slices}")
    try:
        data = EpisodeArrays(path, "train", bundle.stats)
    except ContractError as e:  # not a dataset, or a damaged one: load_tokens says which file
        raise ImproveError(f"--anchor {path}: {e}") from None
    if len(data) == 0:
        raise ImproveError(f"--anchor {path}: its training split has no episode")
    return data
