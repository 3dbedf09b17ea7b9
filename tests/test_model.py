"""The Decision Transformer: shapes, causality, masking, and a KV-cached rollout equal to the full forward."""

import numpy as np
import pytest
import torch
from conftest import small_machine

from pmoss.contracts.errors import PmossError
from pmoss.contracts.snapshot import SLICE_FEATURES
from pmoss.data.state import RunningTile, build_tiles, eligibility, tile_cells
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.learn.bundle import Bundle, load_bundle, save_bundle
from pmoss.learn.model import DecisionTransformer, DTConfig
from pmoss.learn.rollout import propose, rollout, snapshot_inputs

N = 12


def _bundle(machine, seed=0) -> Bundle:
    torch.manual_seed(seed)
    f, m = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(n_layer=2, n_head=2, n_embd=32, conv_channels=8, dropout=0.0, n_slices=N, n_features=f, n_meta=m, tile_rows=3, tile_cols=5)
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1.0] * f, meta_mean=[0.0] * m, meta_std=[1.0] * m,
                  best_return={f"{machine.name}|ycsb-c": 1000.0}, tile_rows=3, tile_cols=5, n_slices=N)  # fmt: skip
    return Bundle(cfg, stats, DecisionTransformer(cfg).state_dict(), {"algo": "dt"})


def _row(machine, rng) -> dict:
    row = {"n_slices": N, "window_s": 1.0, "queries": rng.integers(1, 100, N).tolist()}
    for name in SLICE_FEATURES:
        row[name] = rng.uniform(0, 1000, N).tolist()
    row.update(imc_read_bytes=None, imc_write_bytes=None, link_in_bytes=None, link_out_bytes=None)
    return row


def test_tiles_exclude_own_slice():
    m = small_machine(nodes=2, cpus_per_node=6)
    elig = eligibility(m, 3, 5)[None]
    cells = torch.tensor([tile_cells(m, 5)[i % m.n_workers] for i in range(N)])[None]
    feats = torch.randn(1, N, 4)
    tiles = build_tiles(cells, feats, elig, 3, 5)  # [1, N, 6, 3, 5]
    assert tiles.shape == (1, N, 6, 3, 5)
    assert tiles[0, 0, 0].abs().sum() == 0  # nothing placed before slice 0
    # Changing slice t's own features must not change tile t (no leakage), only later ones.
    feats2 = feats.clone()
    feats2[0, 5] += 10
    tiles2 = build_tiles(cells, feats2, elig, 3, 5)
    assert torch.equal(tiles[0, :6], tiles2[0, :6]) and not torch.equal(tiles[0, 6:], tiles2[0, 6:])
    # The running tile used by rollout equals the batch construction step by step.
    run = RunningTile(elig, N, 4, 3, 5)
    for t in range(N):
        assert torch.allclose(run.tile()[0, 0], tiles[0, t], atol=1e-6)
        run.place(cells[:, t], feats[:, t])


def test_causal_prediction_ignores_future():
    m = small_machine(nodes=2, cpus_per_node=6)
    b = _bundle(m)
    model = b.model()
    elig = eligibility(m, 3, 5)[None]
    cells = torch.tensor([tile_cells(m, 5)[i % m.n_workers] for i in range(N)])[None]
    feats, meta, rtg = torch.randn(1, N, len(SLICE_FEATURES)), torch.randn(1, len(META_NAMES)), torch.rand(1, N)
    out = model(meta, rtg, build_tiles(cells, feats, elig, 3, 5), cells, elig)
    assert out.shape == (1, N, 15) and torch.isinf(out[0, :, ~elig[0]]).all()
    cells2 = cells.clone()
    cells2[0, 7:] = cells[0, 0]
    out2 = model(meta, rtg, build_tiles(cells2, feats, elig, 3, 5), cells2, elig)
    assert torch.allclose(out[0, :8], out2[0, :8], atol=1e-5)  # slice t sees only actions < t
    assert not torch.allclose(out[0, 8:], out2[0, 8:])


def test_kv_rollout_matches_full_forward():
    m = small_machine(nodes=2, cpus_per_node=6)
    b = _bundle(m, seed=3)
    row = _row(m, np.random.default_rng(0))
    actions, _ = rollout(b, m, row, cap=N)  # cap never binds
    model = b.model()
    meta, feats, share = snapshot_inputs(b, m, row)
    cells = torch.tensor(np.asarray(tile_cells(m, 5))[actions[0]])[None]
    elig = eligibility(m, 3, 5)[None]
    rtg = torch.tensor(2.0 - 2.0 * np.concatenate([[0], np.cumsum(share)[:-1]]), dtype=torch.float32)[None]
    logits = model(meta[None], rtg, build_tiles(cells, feats[None], elig, 3, 5), cells, elig)
    assert torch.equal(logits.argmax(-1), cells)


def test_propose_valid_schedule_and_cap(tmp_path):
    m = small_machine(nodes=2, cpus_per_node=6)
    b = _bundle(m)
    row = _row(m, np.random.default_rng(1))
    s = propose(b, m, row, cap=2)
    assert s.kind == "learned" and s.validate_for(m)
    assert max(np.bincount(s.core)) <= 2
    k = propose(b, m, row, mode="best-of-k", k=4, score=lambda sch: -len(set(sch.core)))
    assert k.validate_for(m)
    save_bundle(b, tmp_path / "model.pt")
    again = load_bundle(tmp_path)
    assert again.config == b.config and propose(again, m, row, cap=2) == s


def test_machine_larger_than_the_tile_is_a_user_error():
    m = small_machine(nodes=2, cpus_per_node=8)  # 2 x 7 workers (one router/sweeper CPU reserved per node) or more
    with pytest.raises(PmossError, match=r"does not fit the model's 3x5 core tile.*--min-tile-cols"):
        eligibility(m, 3, 5)
