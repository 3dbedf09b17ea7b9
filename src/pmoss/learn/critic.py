"""The return model (critic): how well would this whole schedule do, given a snapshot taken under another?

A Decision Transformer backbone without return-to-go (`value_head=True`) reads the snapshot's meta
and per-slice counters and a complete schedule as [state, action] tokens, and regresses the
schedule's return (scaled by the best return of the machine x workload, as the DT's targets).
It exists to rank candidate schedules at inference (best-of-K, `rollout.propose(scorer=...)`) on
a real host, where nothing else can say which candidate is better before it runs.

Inputs as at inference: a raw row's counters and offcore totals were measured under that row's own
schedule and scale with its throughput, so the critic never reads its target's own measurements.
Each training item pairs an episode's schedule and return with a raw snapshot of another episode of
the same machine x workload x dataset and split (`snapshot_contexts`), encoded by the path inference
uses. Half of them are snapshots under the any-worker kinds (os-default, os-interleave, se-numa):
the state a host starts from, which the tokenised dataset leaves out (no per-slice group), and
without which the critic's predictions from an os-default snapshot were all ~0.2 (docs/model.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from pmoss.contracts.errors import ContractError
from pmoss.contracts.schedule import ANY_WORKER_KINDS
from pmoss.data.state import as_tensors, machine_arrays, schedule_path, sparse_groups
from pmoss.learn.learner import Algorithm, Batch
from pmoss.learn.model import DecisionTransformer, DTConfig

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

    from pmoss.contracts.machine import Machine
    from pmoss.data.tokens import Stats
    from pmoss.contracts.schedule import Schedule
    from pmoss.learn.bundle import Bundle
    from pmoss.learn.config import TrainConfig


class Critic(Algorithm):
    name = "critic"

    def __init__(self, model_cfg: DTConfig, cfg: TrainConfig, init_weights: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__(cfg)
        assert model_cfg.value_head and not model_cfg.use_return, "the return model has a value head and no return-to-go input"
        self.model = DecisionTransformer(model_cfg)
        if init_weights is not None:
            self.model.load_state_dict(init_weights)

    def losses(self, batch: Batch) -> dict[str, torch.Tensor]:
        group = batch["ret"].shape[1] if batch["ret"].dim() == 2 else 1  # items of `group` schedules read with one snapshot
        if group > 1:
            batch = {k: v.flatten(0, 1) for k, v in batch.items()}
        with torch.no_grad():
            summary, chosen = schedule_path(batch["actions"], batch["feats"], batch["share"], batch)
        pred = self.model.value(batch["meta"], summary, chosen).float()
        target = batch["ret"].float()
        parts = {"mse": F.mse_loss(pred, target), "mae": (pred - target).abs().mean().detach()}
        parts["loss"] = parts["mse"]
        p = self.train_cfg.critic
        if group > 1 and p.rank_weight > 0:
            parts["rank"] = pairwise_rank_loss(pred.view(-1, group), target.view(-1, group), p.rank_scale)
            parts["loss"] = parts["mse"] + p.rank_weight * parts["rank"]
        return parts


def pairwise_rank_loss(pred: torch.Tensor, target: torch.Tensor, scale: float, tie: float = 1e-3) -> torch.Tensor:
    """Logistic loss on the order of every pair of schedules in a row of [B, M] (one snapshot, one
    cell): what dt-critic's pick depends on, which the return regression only reaches through the
    absolute level. Pairs whose returns differ by less than `tie` are not ordered."""
    dp = (pred[:, :, None] - pred[:, None, :]) / scale
    dt = target[:, :, None] - target[:, None, :]
    ordered = dt > tie
    if not ordered.any():
        return pred.sum() * 0.0
    return F.softplus(-dp[ordered]).mean()


@torch.inference_mode()
def predict_returns(bundle: Bundle, machine: Machine, row: dict[str, Any], schedules: list[Schedule]) -> np.ndarray:
    """The critic's predicted scaled return of each schedule [K] (groups only), from snapshot `row`;
    an ensemble's (`bundle.members`, same data and normalisation) is its members' mean: one seed's
    ranking of candidates a few percent apart moves with the seed (docs/benchmarks-model.md)."""
    from pmoss.data.tokens import normalise_snapshot

    if bundle.info.get("algo") != "critic":
        raise ValueError(f"scorer: the model bundle is a '{bundle.info.get('algo', 'dt')}' model, not a critic (pmoss train --algo critic)")
    meta_, feats_, share = normalise_snapshot(row, machine, bundle.stats)
    meta, feats = torch.from_numpy(meta_), torch.from_numpy(feats_)
    K = len(schedules)
    groups = torch.as_tensor(np.stack([s.group_index(machine) for s in schedules]), dtype=torch.long)  # [K, N]
    arrays = machine_arrays(machine)
    m = {k: v.unsqueeze(0).expand(K, *v.shape) for k, v in as_tensors(arrays).items()}
    summary, chosen = schedule_path(groups, feats.expand(K, *feats.shape), torch.as_tensor(share, dtype=torch.float32).expand(K, -1), m,
                                    sparse_groups(arrays.member))  # fmt: skip
    return np.mean([b.model().value(meta.expand(K, -1), summary, chosen, trim=True).numpy() for b in (bundle, *bundle.members)], axis=0)


def snapshot_stats(raw: Path, dataset: Path, tokens: pa.Table, stats: Stats, machines: dict[str, Machine]) -> Stats:
    """`stats` with the feature and meta spreads of the raw training-split snapshots of the dataset's
    cells (`tokens`: its table), every schedule kind: what the critic reads. The tokens' statistics
    come from group schedules only, which keep memory local, so remote loads and link traffic are
    constant (0) there and an os-default snapshot's read ~1e6 (tokens._scale), drowning every other input."""
    import dataclasses

    from pmoss.data.tokens import encode_snapshot, split_of, spreads

    cells = sorted({f"{m}|{w}|{d}" for m, w, d in zip(*(tokens[c].to_pylist() for c in ("machine", "workload", "dataset")), strict=True)})
    rows, val, test = _cell_rows(raw, cells, dataset)
    rows = [r for r in rows if split_of(r["episode_id"], val, test) == "train"]
    if not rows:
        raise ContractError(f"{raw}: no raw training-split snapshot of {dataset}'s cells; pass the directory the dataset was built from")
    enc = [encode_snapshot(r, machines[r["machine"]]) for r in rows]
    return dataclasses.replace(stats, **spreads(*(np.stack([e[i] for e in enc]) for i in range(3))))


def _cell_rows(raw: Path, cells: list[str], dataset: Path) -> tuple[list[dict[str, Any]], float, float]:
    """The raw rows of `cells` ("machine|workload|dataset"), and the dataset's val / test fractions."""
    import json

    import pyarrow as pa
    import pyarrow.compute as pc

    from pmoss.contracts.snapshot import read_raw

    fractions = json.loads((dataset / "dataset.json").read_text()) if (dataset / "dataset.json").is_file() else {}
    table = read_raw(raw)
    key = [f"{m}|{w}|{d}" for m, w, d in zip(*(table[c].to_pylist() for c in ("machine", "workload", "dataset")), strict=True)]
    table = table.filter(pc.is_in(pa.array(key, pa.string()), value_set=pa.array(sorted(set(cells)), pa.string())))
    return table.to_pylist(), fractions.get("val", 0.1), fractions.get("test", 0.1)


def snapshot_contexts(raw: Path, ids: list[str], cells: list[str], split: str, stats: Stats, machines: dict[str, Machine], k: int, seed: int,
                      dataset: Path) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:  # fmt: skip
    """The raw snapshots training items are read with: ((meta [R, M], feats [R, N, F], share [R, N])
    normalised as at inference, index [k, E] of episode e's r-th snapshot). Snapshots of e's cell
    ("machine|workload|dataset") and split, never e's own; even r from the any-worker kinds where the
    cell has one."""
    from pmoss.data.tokens import normalise_snapshot, split_of

    rows, val, test = _cell_rows(raw, cells, dataset)
    if not rows:
        raise ContractError(f"{raw}: no raw snapshot of the dataset's cells ({sorted(cells)[0]}, ...); pass the directory the dataset was built from")
    meta, feats, share, all_rows, by_cell, shared = [], [], [], {}, {}, {}
    for r, row in enumerate(rows):
        m_, f_, s_ = normalise_snapshot(row, machines[row["machine"]], stats)
        meta.append(m_), feats.append(f_), share.append(s_.astype(np.float32))
        cell = f"{row['machine']}|{row['workload']}|{row['dataset']}"
        all_rows.setdefault(cell, []).append(r)
        if split_of(row["episode_id"], val, test) == split or split not in ("train", "val", "test"):
            by_cell.setdefault(cell, []).append(r)
            if row["schedule_kind"] in ANY_WORKER_KINDS:
                shared.setdefault(cell, []).append(r)
    rng = np.random.default_rng(seed)
    index = np.zeros((k, len(cells)), dtype=np.int64)
    for e, cell in enumerate(cells):
        pool = by_cell.get(cell) or all_rows[cell]  # a split with no snapshot of the cell borrows the others'
        others = [r for r in pool if rows[r]["episode_id"] != ids[e]] or pool
        for r in range(k):
            choice = shared.get(cell) if r % 2 == 0 and shared.get(cell) else others
            index[r, e] = choice[int(rng.integers(len(choice)))]
    return (np.stack(meta), np.stack(feats), np.stack(share)), index

