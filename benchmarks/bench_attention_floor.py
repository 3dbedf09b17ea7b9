"""Where the floor of a 2,048-slice greedy rollout lies (issue #39's <= 1 s target, 16 nodes x 64
workers): today's rollout beside the attention it cannot avoid, for the reference policy (6 layers,
8 heads, 128 dims, 3 tokens a slice, attention over the whole episode) and for the layouts a
retrained policy could use (2 tokens a slice; attention bounded to the last W slices).

Attention alone: each step's 6 `scaled_dot_product_attention` calls of the new tokens against the
KV cache, as the rollout makes them, nothing else. Its arithmetic with the cache reads amortised:
the same products for 64 steps' queries in one call (what no sequential rollout can do, since each
step's query depends on the last choice): the arithmetic's own floor on this CPU. Random weights
and caches: speed does not depend on the values.

    .venv/bin/python benchmarks/bench_attention_floor.py [--threads 1]   # record: attention_floor_2048
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from bench_inference import _row, bundle_for, machine_64, machine_1024
from pmoss.bench import write_record
from pmoss.data.state import machine_arrays
from pmoss.learn.rollout import rollout

N, LAYERS, HEADS, DIM = 2048, 6, 8, 128


def attention_alone(tokens: int, window: int | None) -> float:
    """Wall time of the rollout's attention calls: `tokens` new tokens a slice, keys of the last `window` slices (None: all)."""
    t_max = tokens * N + 1
    k, v = torch.randn(LAYERS, 1, HEADS, t_max, DIM // HEADS), torch.randn(LAYERS, 1, HEADS, t_max, DIM // HEADS)
    q = torch.randn(1, HEADS, tokens, DIM // HEADS)
    t0 = time.perf_counter()
    for i in range(1, N + 1):
        n = tokens * i
        lo = max(0, n - tokens * window) if window else 0
        for layer in range(LAYERS):
            F.scaled_dot_product_attention(q, k[layer, :, :, lo:n], v[layer, :, :, lo:n])
    return time.perf_counter() - t0


def attention_batched(tokens: int = 3, per_call: int = 64) -> float:
    """The same products (whole-episode attention) with `per_call` steps' queries in one call."""
    t_max = tokens * N + 1
    k, v = torch.randn(LAYERS, 1, HEADS, t_max, DIM // HEADS), torch.randn(LAYERS, 1, HEADS, t_max, DIM // HEADS)
    t0 = time.perf_counter()
    for i0 in range(1, N + 1, per_call):
        n = tokens * min(N, i0 + per_call - 1)
        q = torch.randn(1, HEADS, tokens * per_call, DIM // HEADS)
        for layer in range(LAYERS):
            (q @ k[layer, :, :, :n].transpose(-1, -2)).softmax(-1) @ v[layer, :, :, :n]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: as bench_inference times batch-1 rollouts)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    b, big = bundle_for(machine_64()), machine_1024()
    model, row = b.model(), _row(big, N, np.random.default_rng(1))
    machine_arrays(big)  # the cached group list, built before the measurement as a server has it
    t0 = time.perf_counter()
    rollout(b, big, row, model=model)
    greedy = time.perf_counter() - t0
    with torch.inference_mode():
        layouts = {f"{tok}_tokens_window_{w or 'all'}": attention_alone(tok, w) for tok, w in ((3, None), (2, None), (3, 256), (2, 256), (2, 64))}
        batched = attention_batched()
    flop = 2 * sum(3 * 2 * DIM * 3 * i * LAYERS for i in range(1, N + 1))  # QK^T and AV of 3 queries against 3i keys, 6 layers
    kv_bytes = sum(3 * i * DIM * 4 * 2 * LAYERS for i in range(1, N + 1))
    write_record("attention_floor_2048", "greedy rollout, 2,048 slices, 1,024 workers (reference policy)", greedy, "s",
                 "its whole-episode attention alone (SDPA calls, 3 tokens a slice)", layouts["3_tokens_window_all"],
                 threads=args.threads, attention_alone_s=layouts, attention_arithmetic_batched_s=batched,
                 attention_gflop=flop / 1e9, kv_cache_read_gb=kv_bytes / 1e9, target_s=1.0)  # fmt: skip


if __name__ == "__main__":
    main()
