"""Dataset speed: (a) building the pre-training pool, (b) the training data loader vs a training step.

(a) `pmoss collect` + `pmoss dataset build` of datasets/pools/paper.yaml (5 machines x 5 workloads,
    404 episodes per cell, 256 slices; target <= 10 min on 2 cores). Baseline, same run: the
    per-episode path this replaced (one `simulate` call, one `episodes_to_table` and one
    `encode_snapshot` per episode), timed on a subset and expressed in episodes/s.
(b) Samples (episodes) per second the loader delivers — `pmoss.learn.train.EpisodeArrays` through a torch
    DataLoader plus the state features (`pmoss.learn.learner.batch_inputs`) — against the samples per second one optimisation step
    of the tiny model (training/dt-tiny.yaml) consumes, on the same data. Target: >= 10x.

Usage: python benchmarks/bench_dataset.py [--episodes-per-cell N] [--keep DIR]
All data is simulated (source=sim).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch

from pmoss.bench import best_time, write_record

REPO = Path(__file__).resolve().parents[1]
POOL = REPO / "datasets/pools/paper.yaml"


def du_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def bench_build(work: Path, episodes_per_cell: int) -> Path:
    from pmoss.collect.driver import collect
    from pmoss.collect.plan import load_pool
    from pmoss.data.dataset import build

    pool = load_pool(POOL, episodes_per_cell=episodes_per_cell)
    t0 = time.perf_counter()
    n = collect(pool, work / "raw", progress=False)
    t1 = time.perf_counter()
    build([work / "raw"], work / "offline", 0.1, 0.1)
    t2 = time.perf_counter()
    baseline = reference_eps(pool)
    write_record("dataset_pool_build", f"collect + build of {pool.name} pool ({n} episodes, {pool.n_slices} slices), episodes/s", n / (t2 - t0),
                 "episodes/s", "per-episode simulate + episodes_to_table + encode_snapshot (subset, same run)", baseline,
                 total_s=t2 - t0, collect_s=t1 - t0, build_s=t2 - t1, episodes=n, target_s=600.0, meets_target=t2 - t0 <= 600.0,
                 raw_mib=du_mib(work / "raw"), tokens_mib=du_mib(work / "offline"), source="sim")  # fmt: skip
    return work / "offline"


def reference_eps(pool, n: int = 100) -> float:
    """Episodes/s of the per-episode path (what collect + build did before vectorising)."""
    from pmoss.collect.driver import pending
    from pmoss.contracts.snapshot import episodes_to_table
    from pmoss.data.tokens import NO_GROUP_KINDS, encode_snapshot
    from pmoss.sim import load_sim_machine, simulate

    with tempfile.TemporaryDirectory() as empty:
        everything = pending(pool, Path(empty))
    todo = everything[:: max(1, len(everything) // n)][:n]  # spread over every cell and kind
    t0 = time.perf_counter()
    for spec, schedule in todo:
        m = load_sim_machine(spec.machine)
        row = simulate(m, spec.workload, spec.dataset, schedule, seed=spec.seed, run_index=spec.run_index, n_records=spec.n_records)
        table_row = episodes_to_table([row]).to_pylist()[0]
        if spec.kind not in NO_GROUP_KINDS:
            encode_snapshot(table_row, m)
    return len(todo) / (time.perf_counter() - t0)


def bench_loader(data: Path, steps: int = 3, batches: int = 12) -> None:
    from pmoss.contracts.io import load_model
    from pmoss.learn.learner import batch_inputs, sample_steps
    from pmoss.learn.model import DecisionTransformer
    from pmoss.learn.train import EpisodeArrays, TrainConfig, model_config_for

    cfg = load_model(TrainConfig, REPO / "training/dt-tiny.yaml")
    t0 = time.perf_counter()
    ds = EpisodeArrays(data, "train")
    load_s = time.perf_counter() - t0
    mc = model_config_for(ds.stats, cfg)
    loader = torch.utils.data.DataLoader(ds, batch_size=cfg.batch_size, shuffle=True, drop_last=True, num_workers=cfg.num_workers)
    tiles_of = lambda b: batch_inputs(b, sample_steps(b, cfg.loss_steps))  # noqa: E731
    it = iter(loader)
    t0 = time.perf_counter()
    got = [next(it) for _ in range(batches)]
    t1 = time.perf_counter()
    for batch in got:
        tiles_of(batch)
    t2 = time.perf_counter()
    n = batches * cfg.batch_size
    loader_sps = n / (t2 - t0)
    step_sps = cfg.batch_size / best_time(_train_step(DecisionTransformer(mc), cfg, got[0]), repeat=steps)
    write_record("dataset_loader_vs_step", f"loader samples/s (EpisodeArrays + DataLoader + state features, batch {cfg.batch_size}, "
                 f"{mc.n_slices} slices)", loader_sps, "samples/s",
                 "samples/s one training step of the tiny model (dt-tiny.yaml) consumes, same run", step_sps,
                 target_ratio=10.0, meets_target=loader_sps >= 10 * step_sps, batches_only_sps=n / (t1 - t0),
                 state_features_only_sps=n / (t2 - t1), episode_arrays_load_s=load_s, train_episodes=len(ds), source="sim")  # fmt: skip


def _train_step(model: torch.nn.Module, cfg, batch: dict):
    """One optimisation step on prebuilt state features: forward, cross-entropy on actions, backward, AdamW."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    steps = torch.arange(min(cfg.loss_steps or batch["actions"].shape[1], batch["actions"].shape[1])).expand(len(batch["actions"]), -1)
    from pmoss.learn.learner import batch_inputs

    summary, chosen, groups = batch_inputs(batch, steps)

    def step() -> None:
        logits = model(batch["meta"], batch["rtg"], summary, chosen, groups, batch["m_group_valid"], steps)  # [B, K, G]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), torch.gather(batch["actions"], 1, steps).flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes-per-cell", type=int, default=400)
    ap.add_argument("--keep", type=Path, help="Keep raw + tokens here (default: a temp dir, removed).")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-dataset-"))
    if (work / "raw").exists():  # collect would resume and time nothing
        raise SystemExit(f"{work / 'raw'} exists: pass an empty --keep directory")
    try:
        bench_loader(bench_build(work, args.episodes_per_cell))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
