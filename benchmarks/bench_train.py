"""Pre-training throughput: samples (episodes) per second of Decision Transformer updates, tiny and paper config.

Data: synthetic random-policy episodes shaped like the paper's pool (256 slices, a 64-worker
4-node machine, 8 x 80 core tile), tokenised to disk and read back through `EpisodeArrays`
and a DataLoader as in `pmoss train`. One sample = one whole episode (N slices in context).
Baseline, same run: how many samples/s the data loader alone delivers (batches including tile
construction), i.e. the ceiling the learner could reach if the model cost nothing.
The update is `Algorithm.update` (same losses, AdamW, clipping and schedule as `pmoss train`,
without Lightning's per-step bookkeeping). Runs unchanged on a GPU host: CUDA + bf16 autocast.

    .venv/bin/python benchmarks/bench_train.py [--steps 3]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_inference import N, machine_64  # noqa: E402

from pmoss.bench import write_record  # noqa: E402
from pmoss.contracts.io import load_model  # noqa: E402
from pmoss.contracts.machine import save_machine  # noqa: E402
from pmoss.contracts.snapshot import SLICE_FEATURES  # noqa: E402
from pmoss.data.tokens import META_NAMES, TOKENS_SCHEMA, compute_stats  # noqa: E402
from pmoss.learn.algorithms import build_algorithm  # noqa: E402
from pmoss.learn.learner import batch_tiles  # noqa: E402
from pmoss.learn.train import (  # noqa: E402
    EpisodeArrays,
    StepBatchSampler,
    TrainConfig,
    model_config_for,
)

ROOT = Path(__file__).resolve().parents[1]


def synthetic_tokens(path: Path, episodes: int, seed: int = 0) -> Path:
    """Random-policy episodes on the 64-worker benchmark machine, written as a tokenised dataset."""
    m = machine_64()
    rng = np.random.default_rng(seed)
    cols = {f.name: [] for f in TOKENS_SCHEMA}
    for e in range(episodes):
        rewards = rng.uniform(1e3, 1e4, N).astype(np.float32)
        row = {"episode_id": f"bench-{e}", "source": "sim", "machine": m.name, "workload": "ycsb-c", "dataset": "dense",
               "schedule_kind": "sn-random", "split": "train", "n_slices": N, "meta": rng.normal(size=len(META_NAMES)).astype(np.float32),
               "features": rng.normal(size=N * len(SLICE_FEATURES)).astype(np.float32), "feature_mask": np.ones(len(SLICE_FEATURES), bool),
               "actions": rng.integers(0, m.n_workers, N).astype(np.int16), "rewards": rewards, "return": float(rewards.sum())}  # fmt: skip
        for k, v in row.items():
            cols[k].append(v)
    table = pa.Table.from_pydict(cols, schema=TOKENS_SCHEMA)
    pq.write_table(table, path / "tokens.parquet")
    (path / "stats.json").write_text(compute_stats(table, (8, 80)).to_json())
    save_machine(m, path / "machines" / f"{m.name}.yaml")
    return path


def loader(ds: EpisodeArrays, batch_size: int) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(ds, batch_sampler=StepBatchSampler(len(ds), batch_size, seed=0), generator=torch.Generator())


def loader_samples_per_s(ds: EpisodeArrays, cfg: TrainConfig, batches: int, device: torch.device) -> float:
    """Batches from disk-backed arrays to device, tiles built: everything the learner gets for free."""
    it = iter(loader(ds, cfg.batch_size))
    t0 = time.perf_counter()
    for _ in range(batches):
        batch = {k: v.to(device) for k, v in next(it).items()}
        batch_tiles(batch, model_config_for(ds.stats, cfg))
    _sync(device)
    return batches * cfg.batch_size / (time.perf_counter() - t0)


def train_samples_per_s(ds: EpisodeArrays, cfg: TrainConfig, steps: int, device: torch.device) -> tuple[float, int]:
    """Samples/s of full update steps (forward, backward, optimiser) after one warm-up step; and the model size."""
    torch.manual_seed(0)
    algo = build_algorithm("dt", model_config_for(ds.stats, cfg), cfg).to(device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    it = iter(loader(ds, cfg.batch_size))
    with autocast:
        algo.update({k: v.to(device) for k, v in next(it).items()})
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            out = algo.update({k: v.to(device) for k, v in next(it).items()})
        _sync(device)
    assert np.isfinite(out["loss"]), "training diverged in the benchmark"
    return steps * cfg.batch_size / (time.perf_counter() - t0), algo.model.num_params()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3, help="timed update steps per config (after one warm-up step)")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        path = synthetic_tokens(Path(tmp), episodes=96)
        ds = EpisodeArrays(path, "train")
        for name in ("tiny", "paper"):
            cfg = load_model(TrainConfig, ROOT / "training" / f"dt-{name}.yaml")
            base = loader_samples_per_s(ds, cfg, batches=max(4, args.steps), device=device)
            value, params = train_samples_per_s(ds, cfg, args.steps, device)
            write_record(f"train_samples_per_s_{name}", f"pre-training samples/s (dt-{name}.yaml, {N} slices, 64 workers, batch {cfg.batch_size})",
                         value, "samples/s", "data loader alone (same batches, tiles built)", base, device=str(device),
                         precision="bf16-mixed" if device.type == "cuda" else "fp32", params=params, threads=torch.get_num_threads())  # fmt: skip


if __name__ == "__main__":
    main()
