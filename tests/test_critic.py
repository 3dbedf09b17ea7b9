"""The return model (learn/critic.py): its inputs never include its target's own measurements, it
trains, travels inside the policy's bundle under the bundle checksum, and ranks candidates at
inference (scorer critic)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
import torch
import yaml

from pmoss.contracts.errors import ContractError
from pmoss.contracts.schedule import ANY_WORKER_KINDS, Schedule
from pmoss.contracts.snapshot import read_raw
from pmoss.data.tokens import normalise_snapshot
from pmoss.learn.bundle import load_bundle
from pmoss.learn.config import TrainConfig
from pmoss.learn.rollout import HEURISTIC_CANDIDATES, propose
from pmoss.learn.train import EpisodeArrays, TrainError, train
from pmoss.sim import load_sim_machine

BIN = Path(sys.executable).parent
MACHINE = "intel-skx-4s"
TINY = {"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "dropout": 0.0}, "batch_size": 8, "lr": 3e-3, "warmup": 2, "val_every": 2, "max_steps": 2}


def pmoss(*args: str) -> None:
    subprocess.run([str(BIN / "pmoss"), *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def sim_data(tmp_path_factory) -> tuple[Path, Path]:
    """Raw simulated snapshots of one cell (the paper's mix and the shared kinds) and their dataset."""
    root = tmp_path_factory.mktemp("critic")
    pool = {"name": "critic-test", "backend": "sim", "machines": [MACHINE], "workloads": ["ycsb-c"], "datasets": ["dense"],
            "mix": {"sn-grouped": 0.25, "sn-mixed": 0.25, "sn-random": 0.5}, "shared_kinds": ["os-default", "os-interleave", "se-numa", "sn-numa"],
            "runs_per_shared_kind": 2, "episodes_per_cell": 24, "n_slices": 32, "seed": 0}  # fmt: skip
    (root / "pool.yaml").write_text(yaml.safe_dump(pool))
    pmoss("collect", str(root / "pool.yaml"), "--output", str(root / "raw"), "--quiet")
    pmoss("dataset", "build", str(root / "raw"), "--output", str(root / "data"), "--val", "0.2", "--test", "0")
    return root / "raw", root / "data"


def test_critic_reads_other_snapshots_of_its_cell(sim_data):
    """A raw row's counters scale with its own throughput: the critic must never be shown them
    next to its target; half of its snapshots are any-worker ones (the state a host starts from)."""
    raw, data = sim_data
    ds = EpisodeArrays(data, "train", contexts=4, snapshots=str(raw), seed=0)
    assert len(ds) == 4 * ds.size
    table = read_raw(raw)
    m = load_sim_machine(MACHINE)
    shared = table.filter(pc.is_in(table["schedule_kind"], value_set=pc.cast(list(ANY_WORKER_KINDS), "string"))).to_pylist()
    shared_feats = [normalise_snapshot(r, m, ds.stats)[1] for r in shared]
    for j in range(len(ds)):
        k, i = divmod(j, ds.size)
        c = ds.context[k, i]
        assert not np.array_equal(ds.snap_feats[c], ds.feats[i]), f"item {j}: episode {i} read with its own snapshot"
        if k % 2 == 0:
            assert any(np.allclose(ds.snap_feats[c], f) for f in shared_feats), f"item {j}: context {k} is not an any-worker snapshot"
        assert float(ds[j]["ret"]) == pytest.approx(ds.returns[i])  # the target is the episode's, not the snapshot's


def test_critic_normalises_by_the_snapshots_it_reads(sim_data, tmp_path, monkeypatch):
    """critic.stats 'snapshots': the tokens' statistics come from group schedules, under which some
    counters never move (spread at the floor), so an os-default snapshot reads ~1e6 in them; the
    critic's own statistics, from the raw training-split snapshots of every kind, keep what it reads
    O(1) and travel in its bundle."""
    from pmoss.data.dataset import load_tokens
    from pmoss.learn.critic import snapshot_stats

    raw, data = sim_data
    table, tok_stats, machines = load_tokens(data)
    stats = snapshot_stats(raw, data, table, tok_stats, machines)
    assert stats.best_return == tok_stats.best_return and stats.n_slices == tok_stats.n_slices
    m = load_sim_machine(MACHINE)
    shared = read_raw(raw).filter(pc.equal(read_raw(raw)["schedule_kind"], "os-default")).to_pylist()
    worst = lambda s: max(max(np.abs(normalise_snapshot(r, m, s)[1]).max(), np.abs(normalise_snapshot(r, m, s)[0]).max()) for r in shared)  # noqa: E731
    assert worst(tok_stats) > 1e3  # the drowning this exists for
    assert worst(stats) < 50

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    cfg = tmp_path / "critic.yaml"
    cfg.write_text(yaml.safe_dump({**TINY, "critic": {"contexts": 2, "stats": "snapshots"}}))
    pmoss("train", str(data), "-o", str(tmp_path / "critic"), "--algo", "critic", "--config", str(cfg), "--snapshots", str(raw), "--quiet")
    assert load_bundle(tmp_path / "critic").stats == stats


def test_grouped_items_are_one_decisions_candidates(sim_data):
    """critic.group M: an item is M schedules of one cell read with one snapshot (what dt-critic
    ranks at inference), its first the item's own episode, drawn the same on every read (resume)."""
    raw, data = sim_data
    flat = EpisodeArrays(data, "train", contexts=2, snapshots=str(raw), seed=0)
    ds = EpisodeArrays(data, "train", contexts=2, snapshots=str(raw), seed=0, group=4)
    assert len(ds) == len(flat)
    ds.cell_of = ["odd" if i % 2 else "even" for i in range(ds.size)]  # two cells, to see that partners stay in theirs
    ds.members = {c: np.asarray([i for i in range(ds.size) if ds.cell_of[i] == c]) for c in ("odd", "even")}
    for j in range(len(ds)):
        item, own = ds[j], flat[j]
        assert item["actions"].shape == (4, *own["actions"].shape) and item["ret"].shape == (4,)
        for key in ("meta", "feats", "share"):  # one snapshot for the whole group: the item's own context
            assert all(torch.equal(item[key][r], own[key]) for r in range(4)), (j, key)
        assert torch.equal(item["actions"][0], own["actions"]) and float(item["ret"][0]) == float(own["ret"])
        rows = {int(r) for ret in item["ret"] for r in np.flatnonzero(np.isclose(ds.returns, float(ret), rtol=0, atol=1e-6))}
        assert {ds.cell_of[r] for r in rows} == {ds.cell_of[j % ds.size]}, j
        assert torch.equal(ds[j]["actions"], item["actions"])  # a pure function of the item


def test_rank_loss_scores_the_order_within_a_group():
    from pmoss.learn.critic import pairwise_rank_loss

    target = torch.tensor([[0.9, 0.5, 0.7, 0.7]])
    right, wrong = torch.tensor([[0.3, 0.1, 0.2, 0.25]]), torch.tensor([[0.1, 0.3, 0.2, 0.15]])
    assert pairwise_rank_loss(right, target, 0.02) < 0.1 < pairwise_rank_loss(wrong, target, 0.02)
    assert float(pairwise_rank_loss(right + 5.0, target, 0.02)) == pytest.approx(float(pairwise_rank_loss(right, target, 0.02)), rel=1e-4)  # order, not level
    tied = torch.tensor([[0.3, 0.1, 0.2, 0.1]])  # the two 0.7s are not ordered: swapping their predictions changes nothing
    assert float(pairwise_rank_loss(tied, target, 0.02)) == pytest.approx(float(pairwise_rank_loss(tied[:, [0, 1, 3, 2]], target, 0.02)))


def test_running_schedule_is_read_back_from_its_snapshot(sim_data):
    """"Keep what runs" is a dt-critic outcome: every kind's schedule is rebuilt from its raw row."""
    raw, _ = sim_data
    m = load_sim_machine(MACHINE)
    for row in read_raw(raw).to_pylist():
        s = Schedule.of_snapshot(row).validate_for(m)
        assert (s.kind, s.node, s.core) == (row["schedule_kind"], row["node"], row["core"])
        if s.kind not in ANY_WORKER_KINDS:
            assert s.widths() == (row["width"] or s.widths())


def test_policy_with_no_return_token_is_refused(sim_data, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    _, data = sim_data
    with pytest.raises(TrainError, match="rtg_token"):
        train(data, tmp_path / "dt", TrainConfig(**{**TINY, "model": {**TINY["model"], "rtg_token": False}}), algo="dt", progress=False)
    assert not (tmp_path / "dt").exists()


def test_critic_needs_raw_snapshots(sim_data, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    _, data = sim_data
    with pytest.raises(TrainError, match="--snapshots"):
        train(data, tmp_path / "critic", TrainConfig(**TINY), algo="critic", progress=False)


def test_critic_attached_ranks_candidates_under_the_bundle_checksum(sim_data, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    raw, data = sim_data
    train(data, tmp_path / "base", TrainConfig(**TINY), algo="dt", progress=False)
    # rtg_token false, as the demo's critic-tiny.yaml: [state, action] a slice
    critic = train(data, tmp_path / "critic", TrainConfig(**{**TINY, "model": {**TINY["model"], "rtg_token": False},
                                                              "critic": {"contexts": 2, "snapshots": str(raw), "group": 3, "rank_weight": 1.0}}),
                   algo="critic", progress=False)  # fmt: skip
    assert critic.config.value_head and not critic.config.use_return and not critic.config.rtg_token
    assert not any(k.startswith("embed_rtg") for k in critic.state_dict)
    assert {"train/rank", "train/mse"} <= set(critic.info["train_metrics"])
    with pytest.raises(ContractError, match="not a critic"):
        pmoss_attach(tmp_path / "base", tmp_path / "base", tmp_path / "bad")
    pmoss_attach(tmp_path / "base", tmp_path / "critic", tmp_path / "paired")
    paired = load_bundle(tmp_path / "paired")
    assert paired.critic is not None and paired.info["inference"]["scorer"] == "critic"

    m = load_sim_machine(MACHINE)
    row = read_raw(raw).filter(pc.equal(read_raw(raw)["schedule_kind"], "os-default")).to_pylist()[0]
    s = propose(paired, m, row, **paired.info["inference"])
    pick, best = s.provenance["pick"], paired.critic.stats.best(MACHINE, "ycsb-c")
    measured = sum(row["queries"]) / row["window_s"]
    if pick == "running":  # no candidate predicted above the os-default return the snapshot measured
        assert s.kind == "os-default" and s.provenance["predicted_return"] * best <= measured
    else:
        assert s.kind == "learned" and s.validate_for(m) and s.provenance["predicted_return"] * best > measured
        assert pick in ("greedy", *HEURISTIC_CANDIDATES) or pick.startswith("sample"), pick
    # both outcomes, whatever this tiny critic predicts: shift its value head's output
    def shifted(by: float):
        weights = {**paired.critic.state_dict, "value_head.2.bias": paired.critic.state_dict["value_head.2.bias"] + by}
        return dataclasses.replace(paired, critic=dataclasses.replace(paired.critic, state_dict=weights))

    for by, kind in ((-100.0, "os-default"), (100.0, "learned")):
        s = propose(shifted(by), m, row, **paired.info["inference"])
        assert s.kind == kind and (s.provenance["pick"] == "running") == (kind == "os-default"), s.provenance
    # a workload the critic never trained on: no scale to compare its prediction with the measurement
    assert propose(shifted(-100.0), m, {**row, "workload": "scan"}, **paired.info["inference"]).kind == "learned"
    with pytest.raises(ValueError, match="carries no critic"):
        propose(load_bundle(tmp_path / "base"), m, row, mode="best-of-k", k=2, scorer="critic")

    # the critic's weights are covered by the bundle's checksum
    payload = torch.load(tmp_path / "paired" / "model.pt", weights_only=True)
    name = next(iter(payload["critic"]["state_dict"]))
    payload["critic"]["state_dict"][name] = payload["critic"]["state_dict"][name] + 1.0
    torch.save(payload, tmp_path / "paired" / "model.pt")
    with pytest.raises(ContractError, match="checksum mismatch"):
        load_bundle(tmp_path / "paired")


def pmoss_attach(policy: Path, critic: Path, output: Path) -> None:
    from pmoss.learn.cli import attach_critic_command

    attach_critic_command(policy, critic=[critic], output=output, k=3, temperature=1.0, candidates="samples+heuristics")


def test_an_ensemble_of_critics_predicts_its_members_mean(sim_data, tmp_path, monkeypatch):
    """critic.members 2: one `pmoss train` writes two critics (seeds 0, 1) as one bundle; attached, it
    ranks by the members' mean prediction; every member is under the bundle checksum, and a critic
    trained on other data is refused as a member."""
    from pmoss.learn.cli import attach_critic_command
    from pmoss.learn.critic import predict_returns
    from pmoss.learn.rollout import candidate_pool

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    raw, data = sim_data
    train(data, tmp_path / "base", TrainConfig(**TINY), algo="dt", progress=False)
    cfg = tmp_path / "critic.yaml"
    cfg.write_text(yaml.safe_dump({**TINY, "critic": {"contexts": 2, "members": 2}}))
    pmoss("train", str(data), "-o", str(tmp_path / "critic"), "--algo", "critic", "--config", str(cfg), "--snapshots", str(raw), "--quiet")
    ens = load_bundle(tmp_path / "critic")
    one = [load_bundle(tmp_path / "critic" / "members" / "1")]
    assert len(ens.members) == 1 and ens.members[0].info["seed"] == 1 and ens.info["seed"] == 0
    assert not torch.equal(*(next(iter(b.state_dict.values())) for b in (ens, one[0])))  # two seeds, two networks

    m = load_sim_machine(MACHINE)
    row = read_raw(raw).filter(pc.equal(read_raw(raw)["schedule_kind"], "os-default")).to_pylist()[0]
    pool = candidate_pool(load_bundle(tmp_path / "base"), m, row, k=3, candidates="samples+heuristics")
    head = dataclasses.replace(ens, members=[])
    each = [predict_returns(b, m, row, list(pool.values())) for b in (head, *one)]
    assert np.allclose(predict_returns(ens, m, row, list(pool.values())), np.mean(each, axis=0))

    # the same ensemble attached from its two files: one head, one member, as from the ensemble's own file
    attach_critic_command(tmp_path / "base", critic=[tmp_path / "critic" / "members" / "1", tmp_path / "critic"], output=tmp_path / "paired",
                          k=3, temperature=1.0, candidates="samples+heuristics")  # fmt: skip
    paired = load_bundle(tmp_path / "paired")
    assert len(paired.critic.members) == 2 and not any(b.members for b in paired.critic.members)
    assert propose(paired, m, row, **paired.info["inference"]).validate_for(m)
    payload = torch.load(tmp_path / "paired" / "model.pt", weights_only=True)
    name = next(iter(payload["critic"]["members"][1]["state_dict"]))
    payload["critic"]["members"][1]["state_dict"][name] += 1.0
    torch.save(payload, tmp_path / "paired" / "model.pt")
    with pytest.raises(ContractError, match="checksum mismatch"):
        load_bundle(tmp_path / "paired")
    other = dataclasses.replace(one[0], stats=dataclasses.replace(one[0].stats, best_return={}))
    from pmoss.learn.bundle import save_bundle

    save_bundle(other, tmp_path / "other" / "model.pt")
    with pytest.raises(ContractError, match="other data"):
        attach_critic_command(tmp_path / "base", critic=[tmp_path / "critic", tmp_path / "other"], output=tmp_path / "bad",
                              k=3, temperature=1.0, candidates="samples+heuristics")  # fmt: skip


def test_propose_measures_the_candidate_pool_from_training_snapshots(sim_data, tmp_path, monkeypatch):
    """`pmoss propose`: every distinct candidate inference would rank, from each os-default training
    snapshot, run once with a training seed as a `learned` episode; resumable; the critic trains on it."""
    import json

    from pmoss.evaluate import EVAL_SEED_BASE
    from pmoss.learn.rollout import candidate_pool

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    raw, data = sim_data
    pool = raw.parent / "pool.yaml"
    train(data, tmp_path / "base", TrainConfig(**TINY), algo="dt", progress=False)
    out = tmp_path / "proposals"
    args = ["propose", str(pool), "--model", str(tmp_path / "base"), "--snapshots", str(raw), "-o", str(out), "--per-cell", "2", "--k", "3", "--quiet"]
    pmoss(*args)
    rows = read_raw(out).to_pylist()
    running = {r["episode_id"]: r for r in read_raw(raw).to_pylist() if r["schedule_kind"] == "os-default"}
    prov = [json.loads(r["schedule_provenance"]) for r in rows]
    assert {r["schedule_kind"] for r in rows} == {"learned"} and {p["generator"] for p in prov} == {"pmoss propose"}
    assert {p["snapshot"] for p in prov} == set(sorted(running)[:2])  # the first two os-default snapshots, by id
    assert not {r["seed"] for r in rows} & set(range(EVAL_SEED_BASE - 1, EVAL_SEED_BASE + 64))  # never an evaluation seed
    # snapshot 0's episodes are exactly its distinct candidates (greedy, 3 samples, the heuristics)
    first = sorted(running)[0]
    m = load_sim_machine(MACHINE)
    expected = {(tuple(s.node), tuple(s.core)) for s in candidate_pool(load_bundle(tmp_path / "base"), m, running[first], k=3,
                                                                        candidates="samples+heuristics", seed=0).values()}  # fmt: skip
    got = [(tuple(r["node"]), tuple(r["core"])) for r, p in zip(rows, prov, strict=True) if p["snapshot"] == first]
    assert set(got) == expected and len(got) == len(set(got)), "a candidate missing, or one measured twice"
    assert {p["candidate"] for p in prov} >= {"greedy", *HEURISTIC_CANDIDATES}
    # resumable: nothing left to run
    done = subprocess.run([str(BIN / "pmoss"), *args], capture_output=True, text=True, check=True)
    assert "0 new proposal" in done.stdout
    # snapshots without the running kind: the error names the cell
    bare = subprocess.run([str(BIN / "pmoss"), *args[:5], str(out), *args[6:]], capture_output=True, text=True)
    assert bare.returncode != 0 and f"no os-default snapshot of {MACHINE}|ycsb-c|dense" in bare.stderr + bare.stdout
    # the critic's dataset: the offline episodes and the proposals
    pmoss("dataset", "build", str(raw), str(out), "--output", str(tmp_path / "critic-data"), "--val", "0.2", "--test", "0")
    critic = train(tmp_path / "critic-data", tmp_path / "critic", TrainConfig(**{**TINY, "critic": {"contexts": 2, "snapshots": str(raw)}}),
                   algo="critic", progress=False)  # fmt: skip
    assert critic.info["algo"] == "critic"
    # a critic proposes nothing: the error names its algo
    bad = subprocess.run([str(BIN / "pmoss"), *args[:3], str(tmp_path / "critic"), *args[4:]], capture_output=True, text=True)
    assert bad.returncode != 0 and "algo 'critic' has no rollout" in bad.stderr + bad.stdout
    # the cell's measured history (attach-critic --history): each kind's throughput over its
    # snapshot's best candidate, averaged over the cell's snapshots
    from pmoss.learn.history import kind_history
    from pmoss.learn.rollout import candidate_kind

    history = kind_history([out])
    cell = f"{MACHINE}|ycsb-c"
    by_snapshot: dict[str, list[tuple[str, float]]] = {}
    for r, p in zip(rows, prov, strict=True):
        if f"{r['machine']}|{r['workload']}" == cell:
            by_snapshot.setdefault(p["snapshot"], []).append((candidate_kind(p["candidate"]), r["throughput_qps"]))
    greedy = [next(q for k, q in found if k == "greedy") / max(q for _, q in found) for found in by_snapshot.values()]
    assert history[cell]["greedy"] == pytest.approx(np.mean(greedy)) and set(history[cell]) <= {"greedy", "sample", *HEURISTIC_CANDIDATES}
    assert all(0 < v <= 1 for kinds in history.values() for v in kinds.values())
    with pytest.raises(ContractError, match="--history .*: no proposals"):  # the offline pool holds none
        kind_history([raw])
    # weighted heavily, it decides the pick: the kind the cell measured best (the critic shifted so
    # that no candidate falls under the running return)
    pmoss("attach-critic", str(tmp_path / "base"), "--critic", str(tmp_path / "critic"), "-o", str(tmp_path / "paired"), "--k", "3",
          "--history", str(out), "--history-weight", "1000")  # fmt: skip
    paired = load_bundle(tmp_path / "paired")
    assert paired.info["history"]["weight"] == 1000 and paired.info["history"]["cells"] == history
    weights = {**paired.critic.state_dict, "value_head.2.bias": paired.critic.state_dict["value_head.2.bias"] + 100.0}
    paired = dataclasses.replace(paired, critic=dataclasses.replace(paired.critic, state_dict=weights))
    row = running[first]
    served = propose(paired, m, row, **paired.info["inference"])
    assert candidate_kind(served.provenance["pick"]) == max(history[cell], key=history[cell].get), (served.provenance, history[cell])
    assert served.provenance["history_weight"] == 1000  # the pick names what scored it
    # a kind the critic alone does not pick wins once the cell measured it best; another cell's history changes nothing
    alone = dataclasses.replace(paired, info={k: v for k, v in paired.info.items() if k != "history"})
    own = candidate_kind(propose(alone, m, row, **paired.info["inference"]).provenance["pick"])
    target = next(k for k in ("sn-spread", "sn-grouped", "greedy") if k != own)
    with_history = lambda cells: dataclasses.replace(paired, info={**paired.info, "history": {**paired.info["history"], "cells": cells}})  # noqa: E731
    assert propose(with_history({cell: {target: 1.0}}), m, row, **paired.info["inference"]).provenance["pick"] == target
    elsewhere = propose(with_history({"elsewhere|ycsb-c": {target: 1.0}}), m, row, **paired.info["inference"]).provenance
    assert candidate_kind(elsewhere["pick"]) == own and "history_weight" not in elsewhere


def test_a_capped_validation_pass_leaves_the_weights_alone(sim_data, tmp_path, monkeypatch):
    """val_items caps what a validation pass reads (the critic's split grows with its pool). The
    loss is a monitor and the model the last step's, so a capped pass must train the same bits."""
    raw, data = sim_data
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    weights, curves = [], []
    for cap in (None, 3):
        cfg = tmp_path / f"critic-{cap}.yaml"
        cfg.write_text(yaml.safe_dump({**TINY, "max_steps": 4, "val_every": 2, "val_items": cap, "model": {**TINY["model"], "dropout": 0.1},
                                       "critic": {"contexts": 2, "group": 2, "stats": "snapshots"}}))  # fmt: skip
        out = tmp_path / f"critic-{cap}"
        pmoss("train", str(data), "-o", str(out), "--algo", "critic", "--config", str(cfg), "--snapshots", str(raw), "--quiet")
        weights.append(load_bundle(out).state_dict)
        curves.append((out / "val-loss.csv").read_text())
    assert weights[0].keys() == weights[1].keys() and all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert curves[0] != curves[1]  # the cap did cut the pass: its loss is over 3 items, not the split
