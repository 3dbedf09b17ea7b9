"""The Decision Transformer: a GPT over (meta, [return-to-go, state, action] x N slices).

Architecture only (no Lightning, no data I/O). Departures from the published research code are
deliberate and marked: a slice-index (timestep) embedding, return-to-go already scaled to O(1)
by the caller, and action logits masked by eligibility.

Token layout: position 0 = meta token; slice t uses positions 1+3t (rtg), 2+3t (state),
3+3t (action). The action for slice t is predicted from the hidden state at its state token,
which by causality sees the meta token, everything of slices < t, and rtg_t/state_t only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DTConfig:
    n_layer: int = 6
    n_head: int = 8
    n_embd: int = 128
    dropout: float = 0.1
    n_slices: int = 256  # context = one whole episode
    n_features: int = 19  # per-slice features summed into the core tile
    n_meta: int = 15
    tile_rows: int = 8  # NUMA nodes (padded)
    tile_cols: int = 80  # worker cores per node (padded)
    conv_channels: int = 32
    use_return: bool = True  # False = behaviour cloning on the same backbone

    @property
    def n_actions(self) -> int:
        return self.tile_rows * self.tile_cols  # an action is a tile cell

    @property
    def tile_channels(self) -> int:
        return 2 + self.n_features  # occupancy, eligibility, summed features


class KVCache:
    """One layer's keys and values during rollout, preallocated for the whole episode: [B, H, T_max, D].

    Writing new tokens in place instead of torch.cat-ing a growing tensor every step saves a copy
    of the whole cache per layer per step; `mask` slices one precomputed causal mask.
    """

    def __init__(self, batch: int, n_head: int, head_dim: int, causal: torch.Tensor, dtype: torch.dtype):
        max_tokens = causal.shape[0]  # causal: [T_max, T_max] lower-triangular bool, shared by all layers
        self.k = torch.empty(batch, n_head, max_tokens, head_dim, dtype=dtype, device=causal.device)
        self.v = torch.empty_like(self.k)
        self.causal = causal
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Store k, v [B, H, T, D]; return all keys/values so far and the new tokens' mask [T, length]."""
        start, end = self.length, self.length + k.shape[2]
        assert end <= self.k.shape[2], f"KV cache full: {end} tokens > {self.k.shape[2]}"
        self.k[:, :, start:end], self.v[:, :, start:end] = k, v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end], self.causal[start:end, :end]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must be a multiple of n_head"
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        if cache is not None and cache.length > 0:  # rollout: new tokens attend to all cached ones, causally among themselves
            k, v, mask = cache.append(k, v)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if T > 1 else None)
        else:
            if cache is not None:
                cache.append(k, v)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # [B, T, C]
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd), nn.Dropout(cfg.dropout)
        )

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache)
        return x + self.mlp(self.ln2(x))


class StateEncoder(nn.Module):
    """3 conv layers over the core tile [C, R, K] + a linear layer (DESIGN §5)."""

    def __init__(self, cfg: DTConfig):
        super().__init__()
        c = cfg.conv_channels
        self.conv = nn.Sequential(
            nn.Conv2d(cfg.tile_channels, c, 3, padding=1), nn.GELU(),
            nn.Conv2d(c, c, 3, padding=1), nn.GELU(),
            nn.Conv2d(c, c, 3, padding=1, stride=2), nn.GELU(),
        )  # fmt: skip
        r, k = (cfg.tile_rows + 1) // 2, (cfg.tile_cols + 1) // 2
        self.linear = nn.Linear(c * r * k, cfg.n_embd)

    def forward(self, tiles: torch.Tensor) -> torch.Tensor:
        B, T = tiles.shape[:2]
        h = self.conv(tiles.flatten(0, 1))  # [B*T, c, R/2, K/2]
        return self.linear(h.flatten(1)).view(B, T, -1)  # [B, T, n_embd]


class DecisionTransformer(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_meta = nn.Linear(cfg.n_meta, cfg.n_embd)
        self.embed_rtg = nn.Linear(1, cfg.n_embd)
        self.embed_state = StateEncoder(cfg)
        self.embed_action = nn.Embedding(cfg.n_actions, cfg.n_embd)
        self.embed_slice = nn.Embedding(cfg.n_slices, cfg.n_embd)  # departure: the research code had none
        self.embed_kind = nn.Embedding(3, cfg.n_embd)  # token type: rtg / state / action
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.n_actions)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def step_tokens(self, rtg: torch.Tensor, tiles: torch.Tensor, actions: torch.Tensor | None, t0: int) -> torch.Tensor:
        """Embed slices t0..t0+T-1: [B, T] rtg, [B, T, C, R, K] tiles, [B, T] actions (or None) -> [B, 3T or 2T, E]."""
        B, T = rtg.shape
        pos = self.embed_slice(torch.arange(t0, t0 + T, device=rtg.device))  # [T, E]
        r = self.embed_rtg(rtg.unsqueeze(-1) if self.cfg.use_return else torch.zeros_like(rtg).unsqueeze(-1))
        parts = [r + pos + self.embed_kind.weight[0], self.embed_state(tiles) + pos + self.embed_kind.weight[1]]
        if actions is not None:
            parts.append(self.embed_action(actions) + pos + self.embed_kind.weight[2])
        return torch.stack(parts, dim=2).flatten(1, 2)  # [B, T*len(parts), E], interleaved per slice

    def forward(self, meta: torch.Tensor, rtg: torch.Tensor, tiles: torch.Tensor, actions: torch.Tensor, eligible: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits [B, N, n_actions] for every slice; ineligible cells are -inf."""
        x = torch.cat([self.embed_meta(meta).unsqueeze(1), self.step_tokens(rtg, tiles, actions, 0)], dim=1)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x[:, 2::3])  # hidden states at the state tokens, [B, N, E]
        return self.head(h).masked_fill(~eligible.unsqueeze(1), float("-inf"))

    def action_token(self, actions: torch.Tensor, t: int) -> torch.Tensor:
        """Embedding of slice t's chosen action, [B] -> [B, 1, E] (rollout)."""
        return (self.embed_action(actions) + self.embed_slice.weight[t] + self.embed_kind.weight[2]).unsqueeze(1)

    def new_caches(self, batch: int, max_tokens: int | None = None) -> list[KVCache]:
        """Empty per-layer KV caches for a rollout of `batch` episodes (default: meta + 3 tokens per slice)."""
        c = self.cfg
        p = self.head.weight
        n = max_tokens or 1 + 3 * c.n_slices
        causal = torch.ones(n, n, dtype=torch.bool, device=p.device).tril()
        return [KVCache(batch, c.n_head, c.n_embd // c.n_head, causal, p.dtype) for _ in self.blocks]

    def extend(self, x: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
        """Run new tokens [B, T, E] through the blocks, appending to the per-layer KV caches."""
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, cache)
        return self.ln_f(x)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def cosine_lr(step: int, warmup: int, total: int, base: float, floor: float = 0.1) -> float:
    """Linear warmup then cosine decay to floor x base."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))
