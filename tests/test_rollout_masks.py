"""The rollout's third inference-only mask: no slice on a group that spans every worker (on a one-node
machine its node's group) unless the user lets it (`machine_wide`). A greedy chain that takes that
group never leaves it, as no cap ever turns a slice away from it (docs/model.md, "Single-node machines")."""

import numpy as np
import pytest
import torch

from pmoss.contracts.groups import WIDTHS, groups_of
from pmoss.contracts.snapshot import SLICE_FEATURES
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.evaluate import EvalConfig, cell_snapshot
from pmoss.learn.bundle import Bundle, untrained_like
from pmoss.learn.model import DecisionTransformer, DTConfig
from pmoss.learn.rollout import propose, rollout
from pmoss.sim import load_sim_machine


def _widest_first() -> Bundle:
    """A policy that scores a group by its size alone: the largest group always wins."""
    torch.manual_seed(0)
    f, k = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(n_layer=1, n_head=1, n_embd=16, group_hidden=4, dropout=0.0, n_slices=64, n_features=f, n_meta=k)
    model = DecisionTransformer(cfg)
    head, log2_size = model.head, 2 + f + len(WIDTHS)  # a group's row: member means of the 2 + F worker channels, then width one-hot, log2 size
    with torch.no_grad():
        for p in (head.group.weight, head.group.bias, head.query.weight, head.query.bias, head.score.bias):
            p.zero_()
        head.group.weight[:, log2_size] = 10.0
        head.score.weight.fill_(1.0)
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1e4] * f, meta_mean=[0.0] * k, meta_std=[1.0] * k, best_return={}, n_slices=64)
    return Bundle(cfg, stats, model.state_dict(), {"algo": "dt"})


def _cell(name: str) -> tuple:
    machine = load_sim_machine(name)
    return machine, cell_snapshot(machine, "ycsb-c", EvalConfig(machines=[name], workloads=["ycsb-c"], n_slices=64))


def test_a_one_node_machine_keeps_slices_off_the_group_of_every_worker():
    machine, row = _cell("nvidia-grace")
    assert machine.numa_nodes == 1
    wide = set(np.nonzero(groups_of(machine).size >= machine.n_workers)[0].tolist())
    assert wide, "nvidia-grace: its node's group spans every worker"
    bundle = _widest_first()
    # no load cap: 64 slices fit on Grace's 72 one-core groups under the slice cap, so a narrower group always fits
    free, _ = rollout(bundle, machine, row, load_cap=None, machine_wide=True)
    assert set(free[0].tolist()) <= wide, "unmasked, the widest-first policy takes the group of every worker on every slice"
    masked, _ = rollout(bundle, machine, row, load_cap=None, batch=3, temperature=1.0, greedy_first=True)
    assert not wide & set(masked.ravel().tolist())
    # a slice that fits under no cap may take it: the least-loaded groups, the widest among them
    tight, _ = rollout(bundle, machine, row, load_cap=0.01)
    assert set(tight[0].tolist()) <= wide
    # what a user switches off travels through propose and the mask-only control
    assert set(propose(bundle, machine, row, load_cap=None, machine_wide=True).group_index(machine).tolist()) <= wide
    assert not wide & set(propose(bundle, machine, row, load_cap=None).group_index(machine).tolist())
    control = untrained_like(Bundle(bundle.config, bundle.stats, bundle.state_dict, {"algo": "dt", "inference": {"machine_wide": True}}))
    assert control.info["inference"]["machine_wide"] is True


@pytest.mark.parametrize("name", ["amd-milan-nps4", "intel-skx-4s"])
def test_a_multi_node_machine_has_no_group_of_every_worker_so_nothing_changes(name):
    machine, row = _cell(name)
    assert (groups_of(machine).size < machine.n_workers).all()
    bundle = _widest_first()
    a, la = rollout(bundle, machine, row, batch=3, temperature=1.0, greedy_first=True)
    b, lb = rollout(bundle, machine, row, batch=3, temperature=1.0, greedy_first=True, machine_wide=True)
    assert np.array_equal(a, b)
    np.testing.assert_array_equal(la, lb)


def test_pmoss_schedule_lets_a_user_switch_the_mask_off(tmp_path):
    import subprocess
    import sys

    from pmoss.contracts.schedule import load_schedule
    from pmoss.contracts.snapshot import episodes_to_table, write_parquet_atomic
    from pmoss.learn.bundle import save_bundle

    machine, row = _cell("nvidia-grace")
    write_parquet_atomic(episodes_to_table([row]), tmp_path / "snap.parquet")
    save_bundle(_widest_first(), tmp_path / "model")
    wide = set(np.nonzero(groups_of(machine).size >= machine.n_workers)[0].tolist())
    base = [sys.executable, "-m", "pmoss", "schedule", "--model", str(tmp_path / "model"), "--snapshot", str(tmp_path / "snap.parquet"), "--no-load-cap"]
    for name, flags in {"masked": [], "machine-wide": ["--machine-wide"]}.items():
        r = subprocess.run([*base, *flags, "-o", str(tmp_path / f"{name}.json")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        chosen = set(load_schedule(tmp_path / f"{name}.json", machine).group_index(machine).tolist())
        assert (chosen <= wide) if flags else not (chosen & wide), name
