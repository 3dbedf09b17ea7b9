"""Pre-training throughput: samples (episodes) per second of Decision Transformer updates, tiny and paper config.

Data: synthetic random-policy episodes shaped like the paper's pool (256 slices, a 64-worker
4-node machine), tokenised to disk and read back through `EpisodeArrays` and a DataLoader as in
`pmoss train`. One sample = one whole episode (N slices in context).
Baseline, same run: how many samples/s the data loader alone delivers (batches including the
state features), i.e. the ceiling the learner could reach if the model cost nothing.
Also recorded: where a step's time goes (state features, forward, backward + optimiser) and an
estimate of the step's FLOPs (matmuls, forward x 3 for forward + backward), so samples/s can be
read against what the arithmetic alone would take.
The update is `Algorithm.update` (same losses, AdamW, clipping and schedule as `pmoss train`,
without Lightning's per-step bookkeeping). Runs unchanged on a GPU host: CUDA + bf16 autocast.

    .venv/bin/python benchmarks/bench_train.py [--steps 3]
    .venv/bin/python benchmarks/bench_train.py --configs paper --machine 1024 --n-slices 2048 --batch-size 4 --episodes 8

The second form is issue #39's size (2,048-slice episodes on a 16-node x 64-worker machine); its
records are named `train_samples_per_s_<config>_<slices>x<workers>`. `--context C` trains each
episode in a random window of C slices (`pmoss train --context`, docs/model.md): the records end in
`_window<C>`.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_inference import N, machine_64, machine_1024  # noqa: E402

from pmoss.bench import write_record  # noqa: E402
from pmoss.contracts.io import load_model  # noqa: E402
from pmoss.contracts.machine import Machine, save_machine  # noqa: E402
from pmoss.contracts.snapshot import SLICE_FEATURES  # noqa: E402
from pmoss.data.dataset import write_tokens  # noqa: E402
from pmoss.data.tokens import META_NAMES, TOKENS_SCHEMA, compute_stats  # noqa: E402
from pmoss.learn.algorithms import build_algorithm  # noqa: E402
from pmoss.learn.learner import at_steps, at_window, batch_inputs, episode_steps, sample_steps, sample_window  # noqa: E402
from pmoss.learn.train import (  # noqa: E402
    EpisodeArrays,
    StepBatchSampler,
    TrainConfig,
    model_config_for,
)

ROOT = Path(__file__).resolve().parents[1]


def synthetic_tokens(path: Path, episodes: int, seed: int = 0, m: Machine | None = None, n: int = N) -> Path:
    """Random-policy episodes on a benchmark machine (64 workers by default), written as a tokenised dataset."""
    m = m or machine_64()
    N = n  # noqa: N806  the episode length, shadowing the module's default
    rng = np.random.default_rng(seed)
    cols = {f.name: [] for f in TOKENS_SCHEMA}
    for e in range(episodes):
        rewards = rng.uniform(1e3, 1e4, N).astype(np.float32)
        row = {"episode_id": f"bench-{e}", "source": "sim", "machine": m.name, "workload": "ycsb-c", "dataset": "dense",
               "schedule_kind": "sn-random", "split": "train", "n_slices": N, "meta": rng.normal(size=len(META_NAMES)).astype(np.float32),
               "features": rng.normal(size=N * len(SLICE_FEATURES)).astype(np.float32), "feature_mask": np.ones(len(SLICE_FEATURES), bool),
               "actions": rng.integers(0, m.n_workers, N).astype(np.int32), "rewards": rewards, "return": float(rewards.sum())}  # fmt: skip
        for k, v in row.items():
            cols[k].append(v)
    table = pa.Table.from_pydict(cols, schema=TOKENS_SCHEMA)
    (path / "stats.json").write_text(compute_stats(table).to_json())
    save_machine(m, path / "machines" / f"{m.name}.yaml")
    write_tokens(table, path)  # last: it records the checksums of the files above
    return path


def loader(ds: EpisodeArrays, batch_size: int) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(ds, batch_sampler=StepBatchSampler(len(ds), batch_size, seed=0), generator=torch.Generator())


def step_inputs(batch: dict, cfg: TrainConfig) -> tuple[torch.Tensor | None, tuple, torch.Tensor, torch.Tensor]:
    """What an update's forward reads, as `action_losses` builds it: (scored steps, (summary, chosen,
    every group's features, the action before the window: one token a slice), return-to-go, targets);
    with cfg.context, of one window per episode."""
    window = sample_window(batch, cfg.context)
    steps = sample_steps(batch, cfg.loss_steps, window[1] if window else None)
    inputs = batch_inputs(batch, steps, window, before=True)
    return steps, inputs, at_window(batch["rtg"], window), at_steps(batch["actions"], episode_steps(steps, window))


def loader_samples_per_s(ds: EpisodeArrays, cfg: TrainConfig, batches: int, device: torch.device) -> float:
    """Batches from disk-backed arrays to device, state features built: everything the learner gets for free."""
    it = iter(loader(ds, cfg.batch_size))
    t0 = time.perf_counter()
    for _ in range(batches):
        batch = {k: v.to(device) for k, v in next(it).items()}
        step_inputs(batch, cfg)
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


def step_flops(cfg: TrainConfig, ds: EpisodeArrays) -> float:
    """Matmul FLOPs of one update (2 per multiply-add; backward = 2 x forward)."""
    mc = model_config_for(ds.stats, cfg)
    B, N, E, L = cfg.batch_size, mc.n_slices, mc.n_embd, mc.n_layer
    T = 1 + mc.slice_tokens * N  # tokens an item holds
    G = int(ds.machine_tensors[ds.machine_of[0]]["m_group_valid"].sum())
    K = min(cfg.loss_steps or N, N)
    blocks = L * (2 * T * 12 * E * E + 2 * 2 * T * T * E)  # qkv/proj/mlp + attention scores and values, per episode
    head = 2 * K * G * (mc.group_features * mc.group_hidden + 2 * mc.group_hidden)
    embed = 2 * N * (mc.summary_features * E + E * E + mc.group_features * E + 16 * E)
    return 3.0 * B * (blocks + head + embed)


def profile_step(ds: EpisodeArrays, cfg: TrainConfig, device: torch.device, steps: int) -> dict[str, float]:
    """Seconds per step spent on state features, forward, and backward + optimiser (mean of `steps`)."""
    torch.manual_seed(0)
    algo = build_algorithm("dt", model_config_for(ds.stats, cfg), cfg).to(device)
    opt = torch.optim.AdamW(algo.parameters(), lr=1e-4)
    it = iter(loader(ds, cfg.batch_size))
    parts = {"state_features_s": 0.0, "forward_s": 0.0, "backward_optimiser_s": 0.0}
    for i in range(steps + 1):
        batch = {k: v.to(device) for k, v in next(it).items()}
        t0 = time.perf_counter()
        steps_k, (summary, chosen, groups, before), rtg, target = step_inputs(batch, cfg)
        _sync(device)
        t1 = time.perf_counter()
        logits = algo.model(batch["meta"], rtg, summary, chosen, groups, batch["m_group_valid"], steps_k, before)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
        _sync(device)
        t2 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        opt.step()
        _sync(device)
        t3 = time.perf_counter()
        if i:  # the first step warms up
            for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                parts[k] += v / steps
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3, help="timed update steps per config (after one warm-up step)")
    ap.add_argument("--configs", default="tiny,paper", help="comma-separated training/dt-NAME.yaml configs")
    ap.add_argument("--machine", choices=("64", "1024"), default="64", help="benchmark machine: 64 or 1024 workers")
    ap.add_argument("--n-slices", type=int, default=N, help="slices per episode (the model's context)")
    ap.add_argument("--batch-size", type=int, default=None, help="override the config's batch size (memory)")
    ap.add_argument("--episodes", type=int, default=96, help="synthetic episodes written to disk")
    ap.add_argument("--context", type=int, default=None, help="train on windows of this many slices of each episode (pmoss train --context)")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    m = machine_64() if args.machine == "64" else machine_1024()
    size = ("" if (args.machine, args.n_slices) == ("64", N) else f"_{args.n_slices}x{m.n_workers}") + (f"_window{args.context}" if args.context else "")
    with tempfile.TemporaryDirectory() as tmp:
        path = synthetic_tokens(Path(tmp), episodes=args.episodes, m=m, n=args.n_slices)
        ds = EpisodeArrays(path, "train")
        for name in args.configs.split(","):
            cfg = load_model(TrainConfig, ROOT / "training" / f"dt-{name}.yaml")
            if args.batch_size:
                cfg = cfg.model_copy(update={"batch_size": args.batch_size})
            if args.context:
                cfg = cfg.model_copy(update={"context": args.context})
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            base = loader_samples_per_s(ds, cfg, batches=max(4, args.steps), device=device)
            value, params = train_samples_per_s(ds, cfg, args.steps, device)
            flops = step_flops(cfg, ds)
            parts = profile_step(ds, cfg, device, args.steps)
            peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the process's peak so far (KiB on Linux): this config's, or an earlier one's if larger
            write_record(f"train_samples_per_s_{name}{size}", f"pre-training samples/s (dt-{name}.yaml, {args.n_slices} slices{f' in windows of {args.context}' if args.context else ''}, {m.n_workers} workers, batch {cfg.batch_size})",
                         value, "samples/s", "data loader alone (same batches, state features built)", base, device=str(device),
                         precision="bf16-mixed" if device.type == "cuda" else "fp32", params=params, threads=torch.get_num_threads(),
                         step_gflop=flops / 1e9, achieved_gflops=flops * value / cfg.batch_size / 1e9, loss_steps=cfg.loss_steps, context=cfg.context, gpu_peak_mib=peak, peak_rss_mib=rss, **parts)  # fmt: skip


if __name__ == "__main__":
    main()
