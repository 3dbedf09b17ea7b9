"""Issue #39: the rollout's sparse state (per-step work proportional to the sum of group sizes)
chooses the same schedules as the dense [groups x workers] rollout it replaced (tests/dense_rollout.py,
a frozen copy), on the demo's evaluation cells and on the 1,024-worker descriptor."""

from pathlib import Path

import numpy as np
import pytest
import torch
from dense_rollout import dense_rollout

from pmoss.contracts.snapshot import SLICE_FEATURES
from pmoss.data.state import as_tensors, machine_arrays, schedule_path, sparse_groups
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.evaluate import EvalConfig, cell_snapshot
from pmoss.learn.bundle import Bundle
from pmoss.learn.model import DecisionTransformer, DTConfig
from pmoss.learn.rollout import rollout
from pmoss.sim import load_sim_machine

ROOT = Path(__file__).resolve().parents[1]


def _bundle(seed: int, n_slices: int) -> Bundle:
    """A small random-weight policy: what is compared is the rollout's arithmetic, not what it learned."""
    torch.manual_seed(seed)
    f, k = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(n_layer=2, n_head=2, n_embd=32, group_hidden=16, dropout=0.0, n_slices=n_slices, n_features=f, n_meta=k)
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1e4] * f, meta_mean=[0.0] * k, meta_std=[1.0] * k, best_return={}, n_slices=n_slices)
    return Bundle(cfg, stats, DecisionTransformer(cfg).state_dict(), {"algo": "dt"})


def _same(bundle: Bundle, machine, row: dict, **kw) -> None:
    a, la = dense_rollout(bundle, machine, row, **kw)
    b, lb = rollout(bundle, machine, row, **kw)
    assert np.array_equal(a, b), f"{machine.name} {kw}: schedules differ at slices {np.nonzero((a != b).any(0))[0][:10]}"
    np.testing.assert_allclose(la, lb, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("machine_name", ["amd-milan-nps4", "intel-skx-4s"])
@pytest.mark.parametrize("workload", ["ycsb-c", "scan"])
def test_sparse_rollout_matches_dense_on_demo_cells(machine_name, workload):
    """The demo's evaluation cells (datasets/pools/eval-tiny.yaml: 128 slices, the os-default
    snapshot evaluate reads): greedy, and greedy + 4 samples in one batch as dt-critic proposes."""
    machine = load_sim_machine(machine_name)
    row = cell_snapshot(machine, workload, EvalConfig(machines=[machine_name], workloads=[workload], n_slices=128))
    bundle = _bundle(0, 128)
    _same(bundle, machine, row, batch=5, temperature=1.0, greedy_first=True)  # row 0 is the greedy rollout
    _same(_bundle(1, 128), machine, row, cap=1, load_cap=0.5)  # the capped-out fallback (least-loaded busiest member) on most steps


def test_sparse_rollout_matches_dense_on_1024_workers():
    """16 nodes x 64 workers (datasets/machines/large-2s-16n.yaml), fewer slices than a cell has: the dense form is slow."""
    machine = load_sim_machine(str(ROOT / "datasets" / "machines" / "large-2s-16n.yaml"))
    rng = np.random.default_rng(0)
    n = 48
    row = {"n_slices": n, "window_s": 1.0, "queries": rng.integers(1, 1000, n).tolist(),
           **{f: rng.uniform(0, 1e4, n).tolist() for f in SLICE_FEATURES},
           "imc_read_bytes": None, "imc_write_bytes": None, "link_in_bytes": None, "link_out_bytes": None}  # fmt: skip
    _same(_bundle(0, n), machine, row, batch=3, temperature=1.0, greedy_first=True)


def test_sparse_groups_overlap_is_the_dense_product():
    """overlap_coef is member @ member.T (|g & h| / (|g| |h|)) on the pairs it lists, and it lists every nonzero."""
    machine = load_sim_machine("amd-milan-nps4")
    member = machine_arrays(machine).member
    sp = sparse_groups(member)
    dense = member.astype(np.float64) @ member.T.astype(np.float64)
    G = member.shape[0]
    rebuilt = np.zeros((G, G + 1))
    np.add.at(rebuilt, (np.arange(G)[:, None].repeat(sp.overlap.shape[1], 1), sp.overlap.numpy()), sp.overlap_coef.numpy())
    np.testing.assert_allclose(rebuilt[:, :G], dense, rtol=1e-6, atol=0)
    assert sp.member_worker.numel() == int((member > 0).sum()) and (sp.rows.numpy() < member.shape[1]).sum() == sp.member_worker.numel()


def test_sparse_schedule_path_matches_dense():
    """The critic's input with the chosen groups' means kept incrementally (predict_returns) is the [B, N, N] product's."""
    machine = load_sim_machine("intel-skx-4s")
    arrays = machine_arrays(machine)
    rng = np.random.default_rng(0)
    B, n = 3, 64
    groups = torch.as_tensor(rng.integers(0, arrays.group_node.size, (B, n)))
    feats, share = torch.randn(B, n, len(SLICE_FEATURES)), torch.as_tensor(rng.dirichlet(np.ones(n), B), dtype=torch.float32)
    m = {k: v.unsqueeze(0).expand(B, *v.shape) for k, v in as_tensors(arrays).items()}
    dense, sparse = schedule_path(groups, feats, share, m), schedule_path(groups, feats, share, m, sparse_groups(arrays.member))
    for a, b in zip(dense, sparse, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_decoder_is_extend_bit_for_bit():
    """The rollout's functional decoder returns extend's bits, step by step (the same kernels, no module dispatch)."""
    model = DecisionTransformer(DTConfig(n_layer=2, n_head=2, n_embd=32, dropout=0.1)).eval()
    a, b = model.new_caches(2, 16), model.new_caches(2, 16)
    decode = model.decoder()
    with torch.inference_mode():
        for t, x in enumerate(torch.randn(5, 2, 3, 32)):
            x = x[:, :1] if t == 0 else x
            assert torch.equal(model.extend(x, a), decode(x, b)), t
    with pytest.raises(AssertionError, match="eval mode"):
        model.train().decoder()
