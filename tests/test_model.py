"""The Decision Transformer over execution groups: the state excludes slice t's own counters,
causality, masking, a KV-cached rollout equal to the full forward, and any machine size."""

import dataclasses

import numpy as np
import pytest
import torch
from conftest import small_machine

from pmoss.contracts.groups import groups_of
from pmoss.contracts.snapshot import SLICE_FEATURES
from pmoss.data.state import RunningState, as_tensors, machine_arrays, pad_of, schedule_path, teacher_forced
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.learn.bundle import Bundle, load_bundle, save_bundle
from pmoss.learn.model import DecisionTransformer, DTConfig
from pmoss.learn.rollout import propose, rollout, snapshot_inputs

N = 12


def _bundle(machine, seed=0, slice_tokens=3) -> Bundle:
    torch.manual_seed(seed)
    f, m = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(n_layer=2, n_head=2, n_embd=32, group_hidden=16, dropout=0.0, n_slices=N, n_features=f, n_meta=m, slice_tokens=slice_tokens)
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1.0] * f, meta_mean=[0.0] * m, meta_std=[1.0] * m,
                  best_return={f"{machine.name}|ycsb-c": 1000.0}, n_slices=N)  # fmt: skip
    return Bundle(cfg, stats, DecisionTransformer(cfg).state_dict(), {"algo": "dt"})


def _row(rng, n: int = N) -> dict:
    row = {"n_slices": n, "window_s": 1.0, "queries": rng.integers(1, 100, n).tolist()}
    for name in SLICE_FEATURES:
        row[name] = rng.uniform(0, 1000, n).tolist()
    row.update(imc_read_bytes=None, imc_write_bytes=None, link_in_bytes=None, link_out_bytes=None)
    return row


def _batched(machine, b: int = 1) -> dict[str, torch.Tensor]:
    return {k: v.unsqueeze(0).expand(b, *v.shape) for k, v in as_tensors(machine_arrays(machine)).items()}


def _episode(machine, rng, f: int = 4):
    g = groups_of(machine)
    groups = torch.as_tensor(rng.integers(0, g.n, N))[None]
    feats = torch.randn(1, N, f)
    share = torch.as_tensor(rng.dirichlet(np.ones(N)), dtype=torch.float32)[None]
    return groups, feats, share


def test_a_windows_inputs_are_the_episodes_in_that_window():
    """teacher_forced(window=(start, C)) computes the C slices' inputs from one sum of what the slices
    before the window placed: the same as the whole episode's inputs there, up to float rounding,
    with each episode's own start; steps count from the window's first slice."""
    m = small_machine(nodes=2, cpus_per_node=6)
    rng = np.random.default_rng(4)
    eps = [_episode(m, rng) for _ in range(3)]
    groups, feats, share = (torch.cat(x) for x in zip(*eps, strict=True))
    mt = _batched(m, 3)
    C = 5
    start = torch.tensor([0, 3, N - C])
    steps = torch.tensor([[0, 4], [1, 2], [3, 4]])
    summary, chosen, every = teacher_forced(groups, feats, share, mt)
    ws, wc, we = teacher_forced(groups, feats, share, mt, steps, (start, C))
    for b in range(3):
        s = int(start[b])
        torch.testing.assert_close(ws[b], summary[b, s : s + C], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(wc[b], chosen[b, s : s + C], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(we[b], every[b, s + steps[b]], rtol=1e-5, atol=1e-5)


def test_state_excludes_own_slice_and_running_state_matches():
    m = small_machine(nodes=2, cpus_per_node=6)
    mt = _batched(m)
    groups, feats, share = _episode(m, np.random.default_rng(0))
    summary, chosen, every = teacher_forced(groups, feats, share, mt)
    G = groups_of(m).n
    assert summary.shape[:2] == (1, N) and chosen.shape[:2] == (1, N) and every.shape[:3] == (1, N, G)
    assert every[0, 0, :, :6].abs().sum() == 0  # nothing placed before slice 0: no occupancy, load or features
    # Changing slice t's own counters must not change state t, only later ones.
    feats2 = feats.clone()
    feats2[0, 5] += 10
    s2, _, e2 = teacher_forced(groups, feats2, share, mt)
    assert torch.equal(every[0, :6], e2[0, :6]) and torch.equal(summary[0, :6], s2[0, :6])
    assert not torch.equal(every[0, 6:], e2[0, 6:])
    # The chosen group's features are that group's row of the every-group features.
    assert torch.allclose(chosen[0], every[0, torch.arange(N), groups[0]], atol=1e-6)
    # Rollout's running state equals the teacher-forced construction step by step.
    run = RunningState(mt, feats[0], share[0])
    for t in range(N):
        s_t, g_t = run.features()
        assert torch.allclose(s_t[0, 0], summary[0, t], atol=1e-5) and torch.allclose(g_t[0, 0], every[0, t], atol=1e-5), t
        run.place(groups[:, t])


def test_rollout_reads_the_running_state_as_training_builds_it():
    """The rollout's lean reads of the running state (the summary, the chosen groups' rows, the head's
    scores from the rows' parts: learn/rollout.PointerScores) equal the reference at every step:
    the feature rows of every group that training builds, and GroupHead over them."""
    from pmoss.learn.rollout import PointerScores

    m = small_machine(nodes=2, cpus_per_node=6)
    mt = _batched(m, 3)
    rng = np.random.default_rng(4)
    groups, feats, share = _episode(m, rng, len(SLICE_FEATURES))
    model = _bundle(m, seed=5).model()
    for p in model.head.parameters():  # weights of the scale training reaches, so every column of W_g counts
        torch.nn.init.normal_(p, std=0.5)
    run = RunningState(mt, feats[0], share[0])
    pointer = PointerScores(model.head, run)
    G = groups_of(m).n
    picks = torch.as_tensor(rng.integers(0, G, (3, N)))
    picks[1] = picks[0]  # two rows alike
    picks[2, 1::2] = picks[2, ::2]  # the same group twice in a row (`took`)
    for t in range(N):
        summary, every = run.features()
        torch.testing.assert_close(run.summary(), summary, rtol=1e-5, atol=1e-5)
        h = torch.randn(3, model.cfg.n_embd)
        torch.testing.assert_close(pointer(h), model.head(h[:, None], every, mt["m_group_valid"])[:, 0], rtol=1e-4, atol=1e-4)
        a = picks[:, t]
        torch.testing.assert_close(run.rows(a), every[torch.arange(3), 0, a], rtol=1e-5, atol=1e-6)
        pointer.place(a)
        run.place(a)


def test_schedule_path_matches_teacher_forced():
    """The return model's input, computed without the per-worker state of every channel, is the
    teacher-forced summary and chosen-group features (machines of two sizes padded into one batch)."""
    small, big = small_machine(nodes=2, cpus_per_node=6), small_machine(nodes=4, cpus_per_node=8)
    rng = np.random.default_rng(3)
    pad = pad_of([small, big])
    mt = {k: torch.stack([a, b]) for (k, a), b in zip(as_tensors(machine_arrays(small, pad)).items(), as_tensors(machine_arrays(big, pad)).values(), strict=True)}
    groups = torch.stack([torch.as_tensor(rng.integers(0, groups_of(x).n, N)) for x in (small, big)])
    feats, share = torch.randn(2, N, 4), torch.as_tensor(rng.dirichlet(np.ones(N), 2), dtype=torch.float32)
    summary, chosen, _ = teacher_forced(groups, feats, share, mt)
    s2, c2 = schedule_path(groups, feats, share, mt)
    assert s2.shape == summary.shape and c2.shape == chosen.shape
    assert torch.allclose(s2, summary, atol=1e-5) and torch.allclose(c2, chosen, atol=1e-5)
    # slice t's own counters reach only later slices' inputs here too
    feats[1, 5] += 10
    s3, c3 = schedule_path(groups, feats, share, mt)
    assert torch.equal(s3[1, :6], s2[1, :6]) and torch.equal(c3[1, :6], c2[1, :6]) and not torch.equal(s3[1, 6:], s2[1, 6:])


@pytest.mark.parametrize("slice_tokens", [3, 1])
def test_causal_prediction_ignores_future(slice_tokens):
    m = small_machine(nodes=2, cpus_per_node=6)
    model = _bundle(m, slice_tokens=slice_tokens).model()
    mt = _batched(m)
    rng = np.random.default_rng(1)
    groups, _, share = _episode(m, rng)
    feats = torch.randn(1, N, len(SLICE_FEATURES))
    meta, rtg = torch.randn(1, len(META_NAMES)), torch.rand(1, N)
    out = model(meta, rtg, *teacher_forced(groups, feats, share, mt), mt["m_group_valid"])
    assert out.shape == (1, N, groups_of(m).n) and torch.isfinite(out).all()
    groups2 = groups.clone()
    groups2[0, 7:] = groups[0, 0]
    out2 = model(meta, rtg, *teacher_forced(groups2, feats, share, mt), mt["m_group_valid"])
    assert torch.allclose(out[0, :8], out2[0, :8], atol=1e-5)  # slice t sees only actions < t
    assert not torch.allclose(out[0, 8:], out2[0, 8:])


def test_critic_tokens_without_return():
    """A critic with or without the return token (`rtg_token`) reads every slice's action; a critic
    saved before the field existed keeps the 3-token layout it was trained with; a policy needs it."""
    m = small_machine(nodes=2, cpus_per_node=6)
    mt = _batched(m)
    groups, _, share = _episode(m, np.random.default_rng(2))
    feats, meta = torch.randn(1, N, len(SLICE_FEATURES)), torch.randn(1, len(META_NAMES))
    base = _bundle(m).config
    for rtg_token in (False, True):
        torch.manual_seed(0)
        cfg = dataclasses.replace(base, use_return=False, value_head=True, rtg_token=rtg_token)
        model = DecisionTransformer(cfg).eval()
        assert (model.embed_rtg is None) == (not rtg_token)
        v = model.value(meta, *schedule_path(groups, feats, share, mt))
        other = groups.clone()
        other[0, -1] = (groups[0, -1] + 1) % groups_of(m).n
        assert v.shape == (1,) and not torch.allclose(v, model.value(meta, *schedule_path(other, feats, share, mt)))
    old = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "rtg_token"}  # a bundle from before the field
    assert DTConfig(**old).rtg_token
    with pytest.raises(ValueError, match="rtg_token"):
        DTConfig(rtg_token=False)


def test_critic_trimmed_last_block_equals_full():
    """Inference's critic (value(trim=True): the last block at the action tokens only) predicts what
    the full last block does, for either token layout, several schedules at once, and more than one layer."""
    m = small_machine(nodes=2, cpus_per_node=6)
    mt = {k: v.expand(3, *v.shape[1:]) for k, v in _batched(m).items()}
    rng = np.random.default_rng(4)
    groups = torch.cat([_episode(m, rng)[0] for _ in range(3)])
    share = torch.as_tensor(rng.dirichlet(np.ones(N)), dtype=torch.float32).expand(3, -1)
    feats, meta = torch.randn(3, N, len(SLICE_FEATURES)), torch.randn(3, len(META_NAMES))
    for rtg_token in (False, True):
        torch.manual_seed(1)
        cfg = dataclasses.replace(_bundle(m).config, use_return=False, value_head=True, rtg_token=rtg_token, n_layer=2)
        model = DecisionTransformer(cfg).eval()
        with torch.no_grad():
            full, trimmed = (model.value(meta, *schedule_path(groups, feats, share, mt), trim=t) for t in (False, True))
        assert torch.allclose(full, trimmed, rtol=1e-5, atol=1e-6) and not torch.allclose(full[0], full[1])


@pytest.mark.parametrize("slice_tokens", [3, 1])
def test_kv_rollout_matches_full_forward(slice_tokens):
    m = small_machine(nodes=2, cpus_per_node=6)
    b = _bundle(m, seed=3, slice_tokens=slice_tokens)
    row = _row(np.random.default_rng(0))
    chosen, _ = rollout(b, m, row, cap=N, load_cap=None)  # no cap binds
    model = b.model()
    meta, feats, share = snapshot_inputs(b, m, row)
    groups = torch.as_tensor(chosen)
    rtg = torch.tensor(2.0 - 2.0 * np.concatenate([[0], np.cumsum(share)[:-1]]), dtype=torch.float32)[None]
    mt = _batched(m)
    inputs = teacher_forced(groups, feats[None], torch.as_tensor(share, dtype=torch.float32)[None], mt)
    logits = model(meta[None], rtg, *inputs, mt["m_group_valid"])
    assert torch.equal(logits.argmax(-1), groups)
    # and the rollout's log-likelihood is the teacher-forced one, slice by slice
    sampled, loglik = rollout(b, m, row, cap=N, load_cap=None, batch=3, temperature=1.0, seed=1)
    for a, ll in zip(sampled, loglik, strict=True):
        scores = model(meta[None], rtg, *teacher_forced(torch.as_tensor(a)[None], feats[None], torch.as_tensor(share, dtype=torch.float32)[None], mt), mt["m_group_valid"])
        got = torch.log_softmax(scores.detach(), -1)[0, torch.arange(N), torch.as_tensor(a)].sum()
        assert abs(float(got) - float(ll)) < 1e-4


def test_one_token_a_slice_reads_the_same_inputs():
    """slice_tokens=1: each slice's token holds its return, its state and the previous slice's action,
    so the prediction for slice t moves with action t-1 (in its own token), and only slice 0 reads no action."""
    m = small_machine(nodes=2, cpus_per_node=6)
    model = _bundle(m, slice_tokens=1).model()
    mt = _batched(m)
    groups, _, share = _episode(m, np.random.default_rng(2))
    feats = torch.randn(1, N, len(SLICE_FEATURES))
    meta, rtg = torch.randn(1, len(META_NAMES)), torch.rand(1, N)
    summary, chosen, cand = teacher_forced(groups, feats, share, mt)
    out = model(meta, rtg, summary, chosen, cand, mt["m_group_valid"])
    moved = chosen.clone()
    moved[0, 4] += 1.0  # slice 4's action, as slice 5's token reads it (the state after is unchanged here)
    out2 = model(meta, rtg, summary, moved, cand, mt["m_group_valid"])
    assert torch.equal(out[0, :5], out2[0, :5]) and not torch.allclose(out[0, 5], out2[0, 5])
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in _bundle(m).model().parameters())
    with pytest.raises(ValueError, match="slice_tokens"):
        DTConfig(slice_tokens=2)
    with pytest.raises(ValueError, match="slice_tokens=1"):
        DTConfig(slice_tokens=1, value_head=True)


def _blocks_with_mask(model: DecisionTransformer, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The blocks over a whole sequence with an explicit boolean attention mask [T, T] (the reference)."""
    B, T, C = x.shape
    for blk in model.blocks:
        q, k, v = (t.reshape(B, T, blk.attn.n_head, -1).transpose(1, 2) for t in blk.attn.qkv(blk.ln1(x)).split(C, 2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + blk.attn.proj(y.transpose(1, 2).reshape(B, T, C))
        x = x + blk.mlp(blk.ln2(x))
    return model.ln_f(x)


@pytest.mark.parametrize("slice_tokens", [3, 1])
def test_windowed_kv_cache_is_banded_attention(slice_tokens):
    """A rollout longer than the model's training episodes attends, at each step, to the meta token and
    the last `window` tokens: the decoder with a windowed cache equals the blocks over the whole
    sequence under that banded mask, and differs from whole-episode attention once the window moves."""
    torch.manual_seed(0)
    model = DecisionTransformer(DTConfig(n_layer=2, n_head=2, n_embd=32, dropout=0.0, slice_tokens=slice_tokens)).eval()
    if slice_tokens == 3:  # meta + rtg + state, then the previous action + rtg + state per slice
        calls, window = [3] * 10, 3 * 3 - 1  # a context of 3 slices
    else:  # meta + the first slice's token, then one token a slice
        calls, window = [2] + [1] * 20, 3
    ends = np.cumsum(calls)
    T = int(ends[-1])
    x = torch.randn(2, T, 32)
    mask = torch.zeros(T, T, dtype=torch.bool)
    for n, e in zip(calls, ends, strict=True):
        for p in range(e - n, e):
            mask[p, 0] = True
            mask[p, max(0, e - window) : p + 1] = True
    with torch.inference_mode():
        windowed, whole = model.new_caches(2, T, window=window), model.new_caches(2, T)
        decode = model.decoder()
        got = torch.cat([decode(x[:, e - n : e], windowed) for n, e in zip(calls, ends, strict=True)], 1)
        full = torch.cat([decode(x[:, e - n : e], whole) for n, e in zip(calls, ends, strict=True)], 1)
        want = _blocks_with_mask(model, x, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(got[:, : window + 1], full[:, : window + 1])  # before the window moves: the whole-episode bits
    assert not torch.allclose(got[:, -calls[-1]:], full[:, -calls[-1]:], atol=1e-4)
    # the cache holds the meta token and the window, whatever the episode's length
    assert [c.k.shape[2] for c in model.new_caches(1, 3 * 10**6, window=window)] == [window + 1] * 2


@pytest.mark.parametrize("slice_tokens", [3, 1])
def test_rollout_context_defaults_to_the_training_length(slice_tokens):
    """Up to the training episode's length a rollout reads the whole episode; a longer one the last
    n_slices slices (its first n_slices choices are the whole-episode rollout's)."""
    m = small_machine(nodes=2, cpus_per_node=6)
    b = _bundle(m, seed=3, slice_tokens=slice_tokens)
    row = _row(np.random.default_rng(0), 4 * N)
    windowed, _ = rollout(b, m, row)
    whole, _ = rollout(b, m, row, context=4 * N)
    assert np.array_equal(windowed[:, :N], whole[:, :N])
    short = _row(np.random.default_rng(1))
    assert np.array_equal(rollout(b, m, short)[0], rollout(b, m, short, context=10 * N)[0])
    with pytest.raises(ValueError, match="context"):
        rollout(b, m, row, context=1)


def test_greedy_first_batches_the_greedy_rollout_with_samples():
    """dt-critic's candidates in one batched pass: row 0 is the greedy rollout, the rest sample."""
    m = small_machine(nodes=2, cpus_per_node=6)
    b = _bundle(m, seed=3)
    row = _row(np.random.default_rng(0))
    greedy, _ = rollout(b, m, row)
    batched, _ = rollout(b, m, row, batch=5, temperature=1.0, greedy_first=True)
    assert np.array_equal(batched[0], greedy[0])
    assert any(not np.array_equal(batched[i], greedy[0]) for i in range(1, 5))


def test_propose_valid_schedule_and_cap(tmp_path):
    m = small_machine(nodes=2, cpus_per_node=6)
    b = _bundle(m)
    row = _row(np.random.default_rng(1))
    s = propose(b, m, row, cap=2)
    assert s.kind == "learned" and s.validate_for(m)
    members = groups_of(m).member[s.group_index(m)]  # [N, W]
    assert (members / members.sum(1, keepdims=True)).sum(0).max() <= 2 + 1e-9  # slices per worker, a group's share each
    k = propose(b, m, row, mode="best-of-k", k=4, score=lambda sch: -len(set(sch.core)))
    assert k.validate_for(m)
    save_bundle(b, tmp_path / "model.pt")
    again = load_bundle(tmp_path)
    assert again.config == b.config and propose(again, m, row, cap=2) == s


def test_one_model_schedules_any_machine_and_slice_count():
    """A model built for a 2-node toy schedules a 16-node x 64-worker machine and another slice count."""
    b = _bundle(small_machine(nodes=2, cpus_per_node=6))
    big = small_machine(name="big", nodes=16, cpus_per_node=66)  # 64 workers per node after reserving router + sweeper
    assert max(len(w) for w in big.workers_by_node) >= 64
    for n in (N, 40):
        s = propose(b, big, _row(np.random.default_rng(2), n))
        assert s.n_slices == n and s.validate_for(big)
