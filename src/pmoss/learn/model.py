"""The Decision Transformer: a GPT over (meta, [return-to-go, state, action] x N slices).

Architecture only (no Lightning, no data I/O). Departures from the published research code are
deliberate and marked: a slice-index (timestep) embedding, return-to-go already scaled to O(1)
by the caller, and scores masked to the machine's candidate groups.

Token layout (`slice_tokens: 3`, the paper's): position 0 = meta token; slice t uses positions
1+3t (rtg), 2+3t (state), 3+3t (action). The action for slice t is predicted from the hidden state
at its state token, which by causality sees the meta token, everything of slices < t, and
rtg_t/state_t only. `slice_tokens: 1` (departure, issue #39): one token a slice, at 1+t, the sum
of the embeddings of rtg_t, state_t and slice t-1's action (none before slice 0); it sees the same
inputs, and a rollout step feeds one token through the network instead of three.

Nothing in the network has the size of a machine or of N (departure from the paper's conv tile
encoder and per-cell head, beyond it): the state token embeds a summary of the worker state, an
action is one of the machine's candidate execution groups (contracts/groups.py) and is embedded by
its features, and the head scores each candidate group from its features and the hidden state
(a pointer), so one model schedules any machine, with groups wider than one core.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from pmoss.data.state import group_features, summary_features


@dataclass
class DTConfig:
    n_layer: int = 6
    n_head: int = 8
    n_embd: int = 128
    dropout: float = 0.1
    n_slices: int = 256  # slices a training item holds (its episode, or a window of it: TrainConfig.context), what a rollout attends to; any count schedules (positions are t / N)
    n_features: int = 19  # per-slice features summed into the worker state
    n_meta: int = 15
    group_hidden: int = 64  # width of the pointer head that scores each candidate group
    use_return: bool = True  # False = behaviour cloning on the same backbone
    value_head: bool = False  # True = the return model (critic.py): one predicted return per whole schedule
    # a return-to-go token per slice. A critic reads no return (its token is a constant); `rtg_token:
    # false` in a critic's config (critic-tiny.yaml) gives [state, action] a slice, a 0.20 -> 0.13 s
    # step, equal on validation seeds but 0.005-0.015 lower on the grid's evaluation seeds (docs/benchmarks-model.md).
    # Bundles saved before the field existed load with True, the layout they were trained with.
    rtg_token: bool = True
    # tokens a slice of a policy: 3 = [rtg, state, action] (the paper's layout); 1 = their embeddings
    # summed into one token, with the previous slice's action (module docstring): a third of the
    # tokens a rollout step decodes and attends to (issue #39). Bundles saved before the field load with 3.
    slice_tokens: int = 3

    def __post_init__(self) -> None:
        if not self.rtg_token and not self.value_head:
            raise ValueError("rtg_token=False is for value-head models (the critic); a policy reads its actions at 3 tokens a slice")
        if self.slice_tokens not in (1, 3):
            raise ValueError(f"slice_tokens: {self.slice_tokens} is not 1 or 3")
        if self.slice_tokens == 1 and self.value_head:
            raise ValueError("slice_tokens=1 is for policies; the critic reads its actions at their own tokens (rtg_token)")

    @property
    def group_features(self) -> int:
        return group_features(self.n_features)

    @property
    def summary_features(self) -> int:
        return summary_features(self.n_features)


class KVCache:
    """One layer's keys and values during rollout, preallocated: [B, H, slots, D].

    Writing new tokens in place instead of torch.cat-ing a growing tensor every step saves a copy
    of the whole cache per layer per step; `mask` slices one precomputed causal mask.
    window: the most tokens after the meta token that a query attends to (None: all, and the cache
    holds the whole episode). A rollout longer than the model's training episodes attends as
    training did: the meta token and the last slices of one training episode, so neither a step's
    attention nor the cache grows with the slice count. Slot 0 holds the meta token; once the
    window is full, slots 1.. are a ring: each new token overwrites the oldest, and the new tokens
    see every slot but the new tokens after them.
    """

    def __init__(self, batch: int, n_head: int, head_dim: int, causal: torch.Tensor, dtype: torch.dtype, window: int | None = None,
                 ring: dict | None = None):  # fmt: skip
        slots = causal.shape[0]  # causal: [slots, slots] lower-triangular bool, shared by all layers
        assert window is None or slots <= window + 1, f"KV cache of {slots} slots for a window of {window} tokens"
        self.k = torch.empty(batch, n_head, slots, head_dim, dtype=dtype, device=causal.device)
        self.v = torch.empty_like(self.k)
        self.causal = causal
        self.window = window
        self.ring = {} if ring is None else ring  # the last call's ring slots and mask, shared by the layers (all append the same tokens)
        self.length = 0  # tokens appended so far

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Store k, v [B, H, T, D]; return the keys/values the new tokens attend to and their mask [T, keys] (None: every key)."""
        T, slots = k.shape[2], self.k.shape[2]
        start, end = self.length, self.length + T
        self.length = end
        if end <= slots:  # the window is not full: the tokens so far, in order (a training-length rollout, bit for bit)
            self.k[:, :, start:end], self.v[:, :, start:end] = k, v
            return self.k[:, :, :end], self.v[:, :, :end], self.causal[start:end, :end]
        assert self.window is not None and slots == self.window + 1, f"KV cache full: {end} tokens > {slots}"
        assert T < self.window, f"KV cache window of {self.window} tokens is narrower than the {T} new ones"
        if T == 1:  # one token (slice_tokens=1): one slot by plain slicing, and it sees every slot (no mask)
            p = 1 + (start - 1) % self.window
            self.k[:, :, p : p + 1], self.v[:, :, p : p + 1] = k, v
            return self.k, self.v, None
        if self.ring.get("call") != (start, T):
            at = 1 + (torch.arange(start, end, device=k.device) - 1) % self.window  # token p lives in ring slot 1 + (p - 1) mod window
            mask = torch.ones(T, slots, dtype=torch.bool, device=k.device)
            mask[:, at] = self.causal[:T, :T]  # among the new tokens, causal; every older slot is in the window
            self.ring.update(call=(start, T), at=at, mask=mask)
        at = self.ring["at"]
        self.k[:, :, at], self.v[:, :, at] = k, v
        return self.k, self.v, self.ring["mask"]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must be a multiple of n_head"
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        return self.resid_drop(self.proj(_attend(self.qkv(x), self.n_head, cache)))


def _attend(qkv: torch.Tensor, n_head: int, cache: KVCache | None, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Causal multi-head attention of the new tokens' [B, T, 3C] queries/keys/values (after the cached
    ones, if any) -> [B, T, C], before the output projection; with `rows` (no cache), only those
    tokens' queries -> [B, len(rows), C]."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    if T == 1 and cache is not None and cache.length > 0:  # a one-token decode step: [B, 1, H, D] is [B, H, 1, D] in memory
        q, k, v = qkv.view(B, 3, n_head, 1, C // n_head).unbind(1)
        k, v, _ = cache.append(k, v)
        return F.scaled_dot_product_attention(q, k, v).view(B, 1, C)
    q, k, v = qkv.split(C, dim=2)
    if rows is not None:
        q = q[:, rows]
    q, k, v = (t.reshape(B, -1, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))  # [B, H, T|rows, D]
    if rows is not None:
        causal = torch.arange(T, device=qkv.device)[None, :] <= rows[:, None]  # [rows, T]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
    elif cache is not None and cache.length > 0:  # rollout: new tokens attend to all cached ones, causally among themselves
        k, v, mask = cache.append(k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if T > 1 else None)
    else:
        if cache is not None:
            cache.append(k, v)
        # No dropout on attention weights (departure from minGPT): on CPU it forces the math kernel,
        # which materialises [B, H, T, T] and made a paper-size step 10x slower (docs/model.md).
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
    return y.transpose(1, 2).reshape(B, -1, C)  # [B, T|rows, C]


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


def _block_at(block: Block, x: torch.Tensor, k: int) -> torch.Tensor:
    """`block(x)[:, k::k]` computing only those rows: every token's keys and values, the action
    tokens' queries and MLP. The critic reads nothing else of its last block, so at inference this
    skips 2/3 (3 tokens a slice) of its attention and MLP: 0.21 -> 0.15 s for a 3-member grid
    critic on 10 candidates of 256 slices (issue #39); equal to the full block up to float rounding (test)."""
    rows = torch.arange(k, x.shape[1], k, device=x.device)
    y = _attend(block.attn.qkv(block.ln1(x)), block.attn.n_head, None, rows)
    x = x[:, rows] + block.attn.proj(y)
    return x + block.mlp(block.ln2(x))


class GroupHead(nn.Module):
    """Pointer scores over candidate groups (additive attention): score_g = v . gelu(W_g x_g + W_h h).
    Its size depends on nothing machine-specific, so one model scores any machine's groups."""

    def __init__(self, cfg: DTConfig):
        super().__init__()
        k = cfg.group_hidden
        self.group = nn.Linear(cfg.group_features, k)
        self.query = nn.Linear(cfg.n_embd, k)
        self.score = nn.Linear(k, 1)

    def forward(self, h: torch.Tensor, groups: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """h [B, T, E], groups [B, T, G, D], valid [B, G] -> scores [B, T, G] (-inf where invalid)."""
        z = F.gelu(self.group(groups) + self.query(h).unsqueeze(2))  # [B, T, G, k]
        return self.score(z).squeeze(-1).masked_fill(~valid.unsqueeze(1), float("-inf"))


def fourier(x: torch.Tensor, n: int = 8) -> torch.Tensor:
    """[..] in [0, 1] -> [.., 2n] sin/cos features (slice position as a fraction of the episode)."""
    freqs = torch.pi * 2.0 ** torch.arange(n, device=x.device, dtype=x.dtype)
    return torch.cat([torch.sin(x[..., None] * freqs), torch.cos(x[..., None] * freqs)], -1)


class DecisionTransformer(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_meta = nn.Linear(cfg.n_meta, cfg.n_embd)
        self.embed_rtg = nn.Linear(1, cfg.n_embd) if cfg.rtg_token else None
        self.embed_state = nn.Sequential(nn.Linear(cfg.summary_features, cfg.n_embd), nn.GELU(), nn.Linear(cfg.n_embd, cfg.n_embd))
        self.embed_action = nn.Linear(cfg.group_features, cfg.n_embd)  # the chosen group's features
        self.embed_slice = nn.Linear(16, cfg.n_embd)  # departure: the research code had no position; ours is t / N
        self.embed_kind = nn.Embedding(3, cfg.n_embd)  # token type: rtg / state / action
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = GroupHead(cfg)
        # the critic reads the action tokens' hidden states (last and mean) into one predicted return
        self.value_head = nn.Sequential(nn.Linear(2 * cfg.n_embd, cfg.n_embd), nn.GELU(), nn.Linear(cfg.n_embd, 1)) if cfg.value_head else None
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def step_tokens(self, rtg: torch.Tensor | None, summary: torch.Tensor, chosen: torch.Tensor | None, pos: torch.Tensor | None = None) -> torch.Tensor:
        """Embed T slices: [B, T] rtg (None: no return token), [B, T, S] state summaries (position t/N is
        summary[..., 1]), [B, T, D] features of the chosen groups (or None) -> [B, kT, E], interleaved per slice.
        pos: `position(summary)` when the caller has it (a rollout step embeds its action with the same)."""
        pos = self.position(summary) if pos is None else pos  # [B, T, E]
        parts = []
        if rtg is not None:  # computed first, as before the critic dropped it: a policy's arithmetic is unchanged bit for bit
            r = self.embed_rtg(rtg.unsqueeze(-1) if self.cfg.use_return else torch.zeros_like(rtg).unsqueeze(-1))
            parts.append(r + pos + self.embed_kind.weight[0])
        parts.append(self.embed_state(summary) + pos + self.embed_kind.weight[1])
        if chosen is not None:
            parts.append(self.embed_action(chosen) + pos + self.embed_kind.weight[2])
        return torch.stack(parts, dim=2).flatten(1, 2)

    def slice_token(self, rtg: torch.Tensor, summary: torch.Tensor, before: torch.Tensor | None, pos: torch.Tensor) -> torch.Tensor:
        """One token a slice (slice_tokens=1): rtg [B, T], summary [B, T, S], `before` [B, T, D] the
        features of each slice's previous action (None: the first slice's, no action), pos [B, T, E] -> [B, T, E]."""
        r = self.embed_rtg(rtg.unsqueeze(-1) if self.cfg.use_return else torch.zeros_like(rtg).unsqueeze(-1))
        x = r + self.embed_state(summary) + pos
        return x if before is None else x + self.embed_action(before)

    def forward(self, meta: torch.Tensor, rtg: torch.Tensor, summary: torch.Tensor, chosen: torch.Tensor, groups: torch.Tensor,
                valid: torch.Tensor, steps: torch.Tensor | None = None, before: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Teacher-forced scores [B, K, G] of every candidate group at K slices (`steps` [B, K], default
        all N); invalid groups are -inf. meta [B, M], rtg [B, N], summary [B, N, S], chosen [B, N, D]
        (the data's groups' features), groups [B, K, G, D] (every group's features at those steps), valid [B, G].
        before [B, D] (slice_tokens=1): the action before the first slice (a window's; None: the episode's start, none)."""
        if self.cfg.slice_tokens == 1:  # each slice's token holds the previous slice's action
            first = torch.zeros_like(chosen[:, :1]) if before is None else before[:, None]
            tokens = self.slice_token(rtg, summary, torch.cat([first, chosen[:, :-1]], 1), self.position(summary))
            at = slice(1, None)
        else:
            tokens, at = self.step_tokens(rtg, summary, chosen), slice(2, None, 3)
        x = self.drop(torch.cat([self.embed_meta(meta).unsqueeze(1), tokens], dim=1))
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x[:, at])  # hidden states at the tokens each action is predicted from, [B, N, E]
        if steps is not None:
            h = torch.gather(h, 1, steps[..., None].expand(-1, -1, h.shape[-1]))
        return self.head(h, groups, valid)

    def value(self, meta: torch.Tensor, summary: torch.Tensor, chosen: torch.Tensor, *, trim: bool = False) -> torch.Tensor:
        """Predicted scaled return [B] of whole schedules (value_head models): meta [B, M], summary
        [B, N, S] and chosen [B, N, D] of every slice, teacher forced as in `forward`. trim
        (inference): the last block at the action tokens only (`_block_at`); training and its
        validation keep the full block, so their arithmetic is what it was bit for bit."""
        assert self.value_head is not None, "value() needs a model built with value_head=True"
        rtg = torch.zeros(summary.shape[:2], dtype=summary.dtype, device=summary.device) if self.cfg.rtg_token else None
        x = self.drop(torch.cat([self.embed_meta(meta).unsqueeze(1), self.step_tokens(rtg, summary, chosen)], dim=1))
        k = 3 if self.cfg.rtg_token else 2  # tokens a slice
        if not trim:
            for block in self.blocks:
                x = block(x)
            a = self.ln_f(x[:, k::k])  # hidden states at the action tokens, [B, N, E]
        else:
            assert not self.training, "value(trim=True) skips the last block's dropout: call it on a model in eval mode"
            for block in self.blocks[:-1]:
                x = block(x)
            a = self.ln_f(_block_at(self.blocks[-1], x, k))
        return self.value_head(torch.cat([a[:, -1], a.mean(1)], -1)).squeeze(-1)

    def position(self, summary: torch.Tensor) -> torch.Tensor:
        """The slice-position embedding of [..., S] state summaries (position t/N is summary[..., 1]) -> [..., E]."""
        return self.embed_slice(fourier(summary[..., 1]))

    def step_embedder(self, rtg: torch.Tensor) -> Callable[[int, torch.Tensor, torch.Tensor | None], torch.Tensor]:
        """A rollout's token embedding (eval mode, no grad): rtg [N] the return-to-go before each slice ->
        embed(t, summary [B, 1, S], before [B, D] | None) = the tokens step t feeds, [B, T, E]: slice t-1's
        action (`before`, its chosen group's features; None at t = 0), rtg_t and state_t, in this model's
        layout. What does not depend on the state (return and position embeddings) is computed for every
        step at once, and the layers are called as functions (`decoder`): 13 -> 5 kernel calls a step.
        Equal to `step_tokens`/`slice_token`/`action_token` up to float rounding (tests)."""
        assert not self.training, "step_embedder() skips dropout: call it on a model in eval mode"
        n = rtg.shape[0]
        pos = self.embed_slice(fourier(torch.arange(n, dtype=rtg.dtype, device=rtg.device) / n))  # [N, E], as position(summary)
        r = self.embed_rtg((rtg if self.cfg.use_return else torch.zeros_like(rtg))[:, None])  # [N, E]
        (w1, b1), (w2, b2) = ((m.weight, m.bias) for m in (self.embed_state[0], self.embed_state[2]))
        wa, ba = self.embed_action.weight, self.embed_action.bias
        kind = self.embed_kind.weight

        def state(summary: torch.Tensor) -> torch.Tensor:
            return F.linear(F.gelu(F.linear(summary, w1, b1)), w2, b2)

        if self.cfg.slice_tokens == 1:
            base = r + pos

            def embed(t: int, summary: torch.Tensor, before: torch.Tensor | None) -> torch.Tensor:
                x = state(summary) + base[t]
                return x if before is None else x + F.linear(before, wa, ba)[:, None]

            return embed
        rtg_tok, state_pos, action_pos = r + pos + kind[0], pos + kind[1], pos + kind[2]

        def embed(t: int, summary: torch.Tensor, before: torch.Tensor | None) -> torch.Tensor:
            B = summary.shape[0]
            toks = [rtg_tok[t].expand(B, 1, -1), state(summary) + state_pos[t]]
            if before is not None:
                toks.insert(0, (F.linear(before, wa, ba) + action_pos[t - 1])[:, None])
            return torch.cat(toks, 1)

        return embed

    def action_token(self, chosen: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Embedding of a slice's chosen group (rollout): chosen [B, D] and its step's position [B, E] -> [B, 1, E]."""
        return (self.embed_action(chosen) + pos + self.embed_kind.weight[2]).unsqueeze(1)

    def new_caches(self, batch: int, max_tokens: int | None = None, window: int | None = None) -> list[KVCache]:
        """Empty per-layer KV caches for a rollout of `batch` episodes of `max_tokens` (default: meta +
        the tokens of n_slices slices); window: the most tokens after the meta token a query attends to
        (KVCache; the cache then holds at most window + 1 tokens, whatever max_tokens)."""
        c = self.cfg
        p = self.embed_meta.weight
        n = max_tokens or 1 + c.slice_tokens * c.n_slices
        n = n if window is None else min(n, window + 1)  # a windowed cache holds at most the meta token and the window
        causal = torch.ones(n, n, dtype=torch.bool, device=p.device).tril()
        ring: dict = {}
        return [KVCache(batch, c.n_head, c.n_embd // c.n_head, causal, p.dtype, window, ring) for _ in self.blocks]

    def extend(self, x: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
        """Run new tokens [B, T, E] through the blocks, appending to the per-layer KV caches."""
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, cache)
        return self.ln_f(x)

    def decoder(self) -> Callable[[torch.Tensor, list[KVCache]], torch.Tensor]:
        """`extend` for inference (eval mode, no grad) as plain functional calls on weights read once:
        the same kernels on the same inputs, so the same bits, without nn.Module's per-call dispatch
        (13 module calls a layer, ~30 % of a 6-layer rollout step on this VM, issue #39)."""
        assert not self.training, "decoder() skips dropout: call it on a model in eval mode"
        ln = lambda m: (m.normalized_shape, m.weight, m.bias, m.eps)  # noqa: E731
        layers = [(ln(b.ln1), b.attn.qkv.weight, b.attn.qkv.bias, b.attn.proj.weight, b.attn.proj.bias, ln(b.ln2),
                   b.mlp[0].weight, b.mlp[0].bias, b.mlp[2].weight, b.mlp[2].bias, b.attn.n_head) for b in self.blocks]  # fmt: skip
        final = ln(self.ln_f)

        norm = torch.layer_norm  # F.layer_norm's kernel without its Python wrapper

        def run(x: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
            for (ln1, wqkv, bqkv, wo, bo, ln2, w1, b1, w2, b2, n_head), cache in zip(layers, caches, strict=True):
                x = x + F.linear(_attend(F.linear(norm(x, *ln1), wqkv, bqkv), n_head, cache), wo, bo)
                x = x + F.linear(F.gelu(F.linear(norm(x, *ln2), w1, b1)), w2, b2)
            return norm(x, *final)

        return run

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def cosine_lr(step: int, warmup: int, total: int, base: float, floor: float = 0.1) -> float:
    """Linear warmup then cosine decay to floor x base."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))
