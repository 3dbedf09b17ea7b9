"""`pmoss improve`: online improvement in the simulator (learn/improve.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_failure_modes import one_line_error, pmoss
from test_serve import _bundle

from pmoss.learn.bundle import load_bundle
from pmoss.learn.improve import ImproveConfig, improve, masked_loglik, snapshot
from pmoss.learn.rollout import rollout
from pmoss.sim import load_sim_machine

POOL = """name: t
backend: sim
machines: [intel-skx-4s]
workloads: [ycsb-c]
datasets: [dense]
mix: {sn-random: 1.0}
episodes_per_cell: 1
n_slices: 32
"""


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory) -> Path:
    return _bundle(tmp_path_factory.mktemp("model"))


def _pool(tmp_path: Path, text: str = POOL) -> Path:
    (tmp_path / "pool.yaml").write_text(text)
    return tmp_path / "pool.yaml"


@pytest.mark.parametrize("n", [32, 96])
def test_teacher_forced_loglik_is_the_rollouts(bundle_dir, tmp_path, n):
    """The step's objective scores the distribution the rollout sampled from: same masks, same
    state, same return-to-go, so the teacher-forced masked log-likelihood of each sampled schedule
    is the rollout's own (a wrong mask or state would move the policy toward something else); for a
    pool of more slices than the model trained on (32), with the whole-episode context improve samples with."""
    from pmoss.collect.plan import load_pool

    b = load_bundle(bundle_dir)
    m = load_sim_machine("intel-skx-4s")
    row = snapshot(m, "ycsb-c", load_pool(_pool(tmp_path, POOL.replace("n_slices: 32", f"n_slices: {n}"))), 0)
    blocked: list[torch.Tensor] = []
    found, loglik = rollout(b, m, row, batch=4, temperature=1.0, seed=3, greedy_first=True, blocked_out=blocked, context=row["n_slices"])
    assert len(blocked) == n and np.unique(found[:, 0]).size >= 1
    mask = torch.stack(blocked, 1).clone()
    ll = masked_loglik(b.model(), b, m, row, torch.as_tensor(found), mask, 2.0)
    np.testing.assert_allclose(ll.detach().numpy(), loglik, rtol=1e-4, atol=1e-3)
    # the masks bind: without them the same schedules are less likely (probability on blocked groups)
    free = masked_loglik(b.model(), b, m, row, torch.as_tensor(found), torch.zeros_like(mask), 2.0)
    assert (free.detach().numpy() < loglik - 1e-3).all()


def test_a_step_moves_the_greedy_rollout_toward_the_better_sample(bundle_dir, tmp_path):
    """Iterations that step raise the likelihood of the sample they imitated; iterations whose greedy
    schedule measured best change nothing."""
    from pmoss.collect.plan import load_pool

    b = load_bundle(bundle_dir)
    pool = load_pool(_pool(tmp_path))
    improved, log = improve(b, pool, ImproveConfig(iters=4, k=5, lr=1e-2, seed=1))
    assert len(log) == 4 and all(e["best_qps"] >= e["greedy_qps"] for e in log)
    assert any(e["stepped"] for e in log), log
    assert improved.info["improve"]["source"] == "sim" and improved.info["improve"]["stepped"] == sum(e["stepped"] for e in log)
    changed = any(not torch.equal(improved.state_dict[k], b.state_dict[k]) for k in b.state_dict)
    assert changed
    none, log0 = improve(b, pool, ImproveConfig(iters=1, k=1, lr=1e-2, seed=1, temperature=1e-6))  # samples = greedy: nothing beats it
    assert not log0[0]["stepped"] and all(torch.equal(none.state_dict[k], b.state_dict[k]) for k in b.state_dict)


def test_elites_keep_each_cells_best_and_replay_other_cells(bundle_dir, tmp_path):
    """A cell's elite is the best schedule measured for it so far, never lower; a step imitates it
    where the greedy schedule measures below it, and replays at most `replay` other cells' elites
    (none before another cell has one)."""
    from pmoss.collect.plan import load_pool

    b = load_bundle(bundle_dir)
    pool = load_pool(_pool(tmp_path, POOL.replace("[ycsb-c]", "[ycsb-c, scan]")))
    _, log = improve(b, pool, ImproveConfig(iters=8, k=3, lr=1e-2, seed=2, replay=2, snapshots_per_cell=1))
    best: dict[str, float] = {}
    for e in log:
        assert e["elite_qps"] == max(best.get(e["workload"], 0.0), e["best_qps"])
        best[e["workload"]] = e["elite_qps"]
        assert e["stepped"] == (e["elite_qps"] > e["greedy_qps"])
        if e["stepped"]:
            assert e["replayed"] == min(2, sum(w in best for w in ("ycsb-c", "scan")) - 1)
    assert any(e.get("replayed") for e in log), log


def test_the_anchor_holds_the_policy_on_its_offline_data(bundle_dir, tmp_path):
    """With --anchor, each step also descends the DT loss of the pre-training data: after the same
    iterations (same cell draws, samples and elites) the anchored policy fits that data better than
    the unanchored one, and the log carries the anchor's loss on every step."""
    from conftest import sim_dataset

    from pmoss.collect.plan import load_pool
    from pmoss.learn.dt import action_losses
    from pmoss.learn.improve import _anchor_set

    b = load_bundle(bundle_dir)
    pool = load_pool(_pool(tmp_path))
    data = _anchor_set(sim_dataset(tmp_path, episodes=6, n_slices=32), b)
    cfg = ImproveConfig(iters=6, k=5, lr=1e-2, seed=1, anchor_weight=5.0)
    free, log_free = improve(b, pool, cfg)
    held, log_held = improve(b, pool, cfg, anchor=data)
    assert [e["machine"] + e["workload"] for e in log_free] == [e["machine"] + e["workload"] for e in log_held]
    steps = [e for e in log_held if e["stepped"]]
    assert steps and all("anchor_loss" in e for e in steps) and held.info["improve"]["anchored"]
    batch = torch.utils.data.default_collate([data[i] for i in range(len(data))])

    def fit(bundle):
        with torch.no_grad():
            return float(action_losses(bundle.model(), batch)["loss"])

    assert fit(held) < fit(free) - 0.05, (fit(held), fit(free), fit(b))


def test_an_anchor_that_is_not_a_dataset_of_the_models_slices_is_refused(bundle_dir, tmp_path):
    from conftest import sim_dataset

    other = sim_dataset(tmp_path, episodes=2, n_slices=8)
    for path, needle in ((tmp_path, "not a tokenised dataset"), (other, "episodes of 8 slices")):
        out = tmp_path / "out"
        one_line_error(pmoss("improve", str(bundle_dir), "--pool", str(_pool(tmp_path)), "--anchor", str(path), "-o", str(out)), "--anchor", needle)
        assert not out.exists()


def test_cli_writes_bundle_and_log(bundle_dir, tmp_path):
    out = tmp_path / "improved"
    r = pmoss("improve", str(bundle_dir), "--pool", str(_pool(tmp_path)), "--iters", "2", "-k", "3", "-o", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    assert "source=sim" in r.stdout
    load_bundle(out)
    log = json.loads((out / "improve-log.json").read_text())
    assert log["source"] == "sim" and len(log["iterations"]) == 2


@pytest.mark.parametrize(("args", "needles"), [
    (["--iters", "0"], ["--iters: must be at least 1"]),
    (["--lr", "nan"], ["--lr: must be a positive number"]),
    (["--replay", "-1"], ["--replay: must be at least 0"]),
    (["--pool-text", POOL.replace("[intel-skx-4s]", "[gen-100000]")], ["gen-100000", "validation seeds", "training pool"]),
    (["--pool-text", POOL.replace("[intel-skx-4s]", "[ibm-power8]")], ["ibm-power8", "unseen machine"]),
])  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(bundle_dir, tmp_path, args, needles):
    pool = _pool(tmp_path, args[1]) if args[0] == "--pool-text" else _pool(tmp_path)
    extra = [] if args[0] == "--pool-text" else args
    out = tmp_path / "out"
    one_line_error(pmoss("improve", str(bundle_dir), "--pool", str(pool), "-o", str(out), *extra), *needles)
    assert not out.exists()


@pytest.mark.parametrize("slice_tokens", [3, 1])
def test_windowed_training_scores_are_the_windowed_rollouts(bundle_dir, tmp_path, slice_tokens):
    """Training on windows (`TrainConfig.context`) scores what a rollout longer than the model's
    n_slices (32) reads: slice t's scores from the window that ends at t (the meta token, the
    slices t - 31 .. t, with the state and positions of the whole episode; with one token a slice,
    the action before the window in its first token) give the rollout's own masked log-likelihood of
    a 96-slice schedule. A wrong window offset, state, position or previous action fails it."""
    import dataclasses

    from pmoss.collect.plan import load_pool
    from pmoss.data.state import as_tensors, machine_arrays
    from pmoss.learn.bundle import Bundle
    from pmoss.learn.learner import policy_scores
    from pmoss.learn.model import DecisionTransformer
    from pmoss.learn.rollout import return_to_go, snapshot_inputs

    b = load_bundle(bundle_dir)
    if slice_tokens == 1:  # the same shapes and statistics, one token a slice, random weights
        torch.manual_seed(0)
        cfg = dataclasses.replace(b.config, slice_tokens=1)
        net = DecisionTransformer(cfg)
        for layer in net.modules():  # weights of a trained model's scale: the previous action in the window's first token moves the scores
            if isinstance(layer, torch.nn.Linear):
                torch.nn.init.normal_(layer.weight, std=0.3)
        b = Bundle(cfg, b.stats, net.state_dict(), b.info)
    C, n = b.config.n_slices, 96
    m = load_sim_machine("intel-skx-4s")
    row = snapshot(m, "ycsb-c", load_pool(_pool(tmp_path, POOL.replace("n_slices: 32", f"n_slices: {n}"))), 0)
    blocked: list[torch.Tensor] = []
    found, loglik = rollout(b, m, row, batch=3, temperature=1.0, seed=5, greedy_first=True, blocked_out=blocked)  # the default context: 32
    meta, feats, share = snapshot_inputs(b, m, row)
    B = found.shape[0]
    batch = {"meta": meta.expand(B, -1), "feats": feats.expand(B, -1, -1), "share": torch.as_tensor(share, dtype=torch.float32).expand(B, -1),
             "actions": torch.as_tensor(found), "rtg": return_to_go(share, 2.0).expand(B, -1),
             **{k: v.expand(B, *v.shape) for k, v in as_tensors(machine_arrays(m)).items()}}  # fmt: skip
    model, ll = b.model(), torch.zeros(B)
    with torch.no_grad():
        for t in range(n):
            s = max(0, t - C + 1)
            scores = policy_scores(model, batch, torch.full((B, 1), t - s), (torch.full((B,), s), C))[:, 0]  # [B, G]
            logp = torch.log_softmax(scores.masked_fill(blocked[t], float("-inf")), -1)
            ll += logp.gather(-1, batch["actions"][:, t : t + 1])[:, 0]
    np.testing.assert_allclose(ll.numpy(), loglik, rtol=1e-4, atol=1e-3)
