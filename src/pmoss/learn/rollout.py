"""Inference: an autoregressive rollout with a KV cache that turns one snapshot into a schedule.

Input: a machine descriptor, one raw snapshot taken under the currently running schedule, and a
target return (factor x the best throughput the model saw for that machine and workload; the
paper uses 2x). Each step feeds 2-3 new tokens through the cached transformer, so a rollout costs
N small forward passes instead of N full-context ones. Eligibility masking and a cap of k slices
per core (inference only) keep every action valid; the result is validated before it is returned.

Return-to-go after slice t decreases by the slice's share of the snapshot's throughput times the
target: the snapshot is the only evidence of how load spreads over slices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch

from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import Schedule
from pmoss.data.state import RunningTile, eligibility, tile_cells
from pmoss.data.tokens import encode_snapshot
from pmoss.learn.bundle import Bundle

Mode = Literal["greedy", "sample", "best-of-k"]


def snapshot_inputs(bundle: Bundle, machine: Machine, row: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Normalised (meta [M], feats [N, F]) and per-slice load shares [N] from a raw snapshot row."""
    s = bundle.stats
    if row["n_slices"] != bundle.config.n_slices:
        raise ValueError(f"snapshot: has {row['n_slices']} slices, the model schedules {bundle.config.n_slices}")
    feats, mask, meta = encode_snapshot(row, machine)
    feats = (feats - np.asarray(s.feature_mean)) / np.asarray(s.feature_std) * mask
    meta = (meta - np.asarray(s.meta_mean)) / np.asarray(s.meta_std)
    q = np.asarray(row["queries"], dtype=np.float64)
    share = q / q.sum() if q.sum() > 0 else np.full(len(q), 1 / len(q))
    return torch.tensor(meta, dtype=torch.float32), torch.tensor(feats, dtype=torch.float32), share


# What the model's head emits, by training algorithm: one rollout loop serves all of them, because
# greedy is the masked argmax either way and sampling is softmax(head / temperature) (for Q-values,
# a Boltzmann policy). Only the Decision Transformer is conditioned on a target return.
HEAD_KIND = {"dt": "logits", "bc": "logits", "cql": "q-values"}


def algo_of(bundle: Bundle) -> str:
    algo = bundle.info.get("algo", "dt")
    if algo not in HEAD_KIND:
        raise ValueError(f"model bundle: algo '{algo}' has no rollout; expected one of {', '.join(HEAD_KIND)}")
    return algo


@torch.inference_mode()
def rollout(
    bundle: Bundle, machine: Machine, row: dict[str, Any], *, target_factor: float = 2.0, batch: int = 1,
    temperature: float = 0.0, cap: int | None = None, seed: int = 0, model: torch.nn.Module | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`batch` rollouts in parallel; returns (worker actions [B, N], log-likelihoods [B]). temperature 0 = greedy."""
    cfg = bundle.config
    model = model or bundle.model()
    meta, feats, share = snapshot_inputs(bundle, machine, row)
    N, R, K = cfg.n_slices, cfg.tile_rows, cfg.tile_cols
    elig = eligibility(machine, R, K).unsqueeze(0).expand(batch, -1)  # [B, A]
    # Default: the fair share, as every one-core heuristic places; 2x it let cores run double load (0.62 -> 0.94 of the best one-core baseline on the demo).
    cap = cap or math.ceil(N / machine.n_workers)
    gen = torch.Generator().manual_seed(seed)
    tile = RunningTile(elig, N, cfg.n_features, R, K)
    caches = model.new_caches(batch)
    algo_of(bundle)  # a bundle of an unknown algorithm fails here, not with a wrong schedule
    # Return-to-go before each slice, [N]: the target minus the snapshot's load share already placed,
    # a float32 running total (bc/cql models ignore it: use_return=False).
    rtg_seq = torch.empty(N)
    rtg = torch.tensor(float(target_factor))
    for t in range(N):
        rtg_seq[t] = rtg
        rtg = rtg - float(share[t] * target_factor)
    blocked = ~elig.clone()  # [B, A] ineligible cells, and cores that reached the cap
    chosen = torch.zeros(batch, N, dtype=torch.long)
    loglik = torch.zeros(batch)
    rows = torch.arange(batch)
    x = model.embed_meta(meta).expand(batch, 1, -1)  # [B, 1, E]
    for t in range(N):
        x = torch.cat([x, model.step_tokens(rtg_seq[t].expand(batch, 1), tile.tile(), None, t)], dim=1)  # + rtg_t, state_t
        h = model.extend(x, caches)[:, -1]  # [B, E] at state_t
        logp = torch.log_softmax(model.head(h).masked_fill(blocked, float("-inf")), -1)  # [B, A]
        a = logp.argmax(-1) if temperature <= 0 else torch.multinomial(torch.softmax(logp / temperature, -1), 1, generator=gen).squeeze(-1)
        loglik += logp[rows, a]
        chosen[:, t] = a
        tile.place(a, feats[t].expand(batch, -1))
        blocked[rows, a] |= tile.occ[rows, a] >= cap
        x = model.action_token(a, t)  # fed with the next step's tokens
    cell_to_worker = torch.full((R * K,), -1, dtype=torch.long)
    cell_to_worker[torch.tensor(tile_cells(machine, K))] = torch.arange(machine.n_workers)
    return cell_to_worker[chosen].numpy(), loglik.numpy()


def propose(
    bundle: Bundle, machine: Machine, row: dict[str, Any], *, mode: Mode = "greedy", k: int = 8, temperature: float = 1.0,
    target_factor: float = 2.0, cap: int | None = None, seed: int = 0, score: Callable[[Schedule], float] | None = None,
) -> Schedule:
    """A validated `learned` schedule. best-of-k ranks k samples by `score` (e.g. a simulator) or by likelihood."""
    batch = 1 if mode == "greedy" else k if mode == "best-of-k" else 1
    temp = 0.0 if mode == "greedy" else temperature
    actions, loglik = rollout(bundle, machine, row, target_factor=target_factor, batch=batch, temperature=temp, cap=cap, seed=seed)
    provenance = {"model": bundle.info.get("registered_as") or bundle.info.get("algo", "dt"), "mode": mode, "seed": seed, "target_factor": target_factor}
    candidates = [Schedule.from_actions(machine, a.tolist(), **provenance) for a in actions]
    if len(candidates) == 1:
        best = candidates[0]
    elif score is not None:
        best = max(candidates, key=score)
    else:
        best = candidates[int(np.argmax(loglik))]
    return best.validate_for(machine)
