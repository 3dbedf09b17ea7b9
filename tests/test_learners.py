"""Offline learners (dt, bc, cql): smoke + checkpoint round-trip, exact resume, and the leakage guard."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from conftest import small_machine

from pmoss.contracts.machine import save_machine
from pmoss.contracts.snapshot import SLICE_FEATURES
from pmoss.data.dataset import write_tokens
from pmoss.data.tokens import META_NAMES, TOKENS_SCHEMA, compute_stats, split_of
from pmoss.learn.algorithms import build_algorithm
from pmoss.learn.bundle import load_bundle
from pmoss.learn.rollout import propose
from pmoss.learn.train import (
    EpisodeArrays,
    StepBatchSampler,
    TrainConfig,
    model_config_for,
    top_quantile_mask,
)

N = 16
TINY = {"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "dropout": 0.1}, "batch_size": 8, "lr": 3e-3, "warmup": 2,
        "val_every": 2, "max_steps": 6}  # fmt: skip


def make_tokens(path: Path, episodes: int = 40, seed: int = 0, leak: bool = False) -> Path:
    """A tokenised dataset of random-policy episodes on a 2-node toy machine (no simulator needed).

    leak=True writes each slice's own action into its features (one-hot of the worker index): a
    state that showed slice t its own counters would give its action away.
    """
    m = small_machine(nodes=2, cpus_per_node=6)
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {f.name: [] for f in TOKENS_SCHEMA}
    for e in range(episodes):
        actions = rng.integers(0, m.n_workers, N)
        feats = rng.normal(0, 1, (N, len(SLICE_FEATURES))).astype(np.float32)
        if leak:
            feats[:, : m.n_workers] = np.eye(m.n_workers, dtype=np.float32)[actions] * 5
        rewards = rng.uniform(50, 150, N).astype(np.float32)
        eid = f"ep-{seed}-{e}"
        values = {"episode_id": eid, "source": "sim", "machine": m.name, "workload": "ycsb-c", "dataset": "dense", "schedule_kind": "sn-random",
                  "split": split_of(eid), "n_slices": N, "meta": rng.normal(0, 1, len(META_NAMES)).astype(np.float32), "features": feats.reshape(-1),
                  "feature_mask": np.ones(len(SLICE_FEATURES), bool), "actions": actions.astype(np.int32), "rewards": rewards,
                  "return": float(rewards.sum())}  # fmt: skip
        for k, v in values.items():
            rows[k].append(v)
    table = pa.Table.from_pydict(rows, schema=TOKENS_SCHEMA)
    path.mkdir(parents=True, exist_ok=True)
    (path / "stats.json").write_text(compute_stats(table).to_json())
    save_machine(m, path / "machines" / f"{m.name}.yaml")
    write_tokens(table, path)
    return path


def _batch(ds: EpisodeArrays, idx: list[int]) -> dict[str, torch.Tensor]:
    items = [ds[i] for i in idx]
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


def _row(machine, rng) -> dict:
    row = {"n_slices": N, "window_s": 1.0, "queries": rng.integers(1, 100, N).tolist()}
    row.update({name: rng.uniform(0, 1000, N).tolist() for name in SLICE_FEATURES})
    row.update(imc_read_bytes=None, imc_write_bytes=None, link_in_bytes=None, link_out_bytes=None)
    return row


@pytest.mark.parametrize("algo", ["dt", "bc", "cql"])
def test_learner_smoke_two_steps_and_checkpoint_round_trip(tmp_path, algo):
    data = make_tokens(tmp_path / "tok")
    cfg = TrainConfig(**TINY)
    ds = EpisodeArrays(data, "train", top_quantile=0.5 if algo == "bc" else None)
    model_cfg = model_config_for(ds.stats, cfg, algo)
    assert model_cfg.use_return == (algo == "dt")
    torch.manual_seed(0)
    learner = build_algorithm(algo, model_cfg, cfg)
    for step in range(2):
        out = learner.update(_batch(ds, [0, 1, 2, 3]))
        assert np.isfinite(out["loss"]), f"{algo} step {step}: loss {out['loss']}"
    torch.save(learner.training_state(), tmp_path / "state.pt")
    again = build_algorithm(algo, model_cfg, cfg)
    again.load_training_state(torch.load(tmp_path / "state.pt", weights_only=False))
    assert again.step == 2
    state = torch.get_rng_state()
    a = learner.update(_batch(ds, [4, 5, 6, 7]))
    torch.set_rng_state(state)
    b = again.update(_batch(ds, [4, 5, 6, 7]))
    assert a == b, "a restored learner must take exactly the same next step"


@pytest.mark.parametrize("algo", ["dt", "bc", "cql"])
def test_update_under_bf16_autocast(tmp_path, algo):
    """A GPU trains under bf16 autocast (`precision="bf16-mixed"`): the state features must stay
    fp32 (their masked max/min use fp32's largest value, which bf16 cannot hold) and the sampled
    loss steps live on the batch's device. CPU autocast reproduces what failed on an H100."""
    data = make_tokens(tmp_path / "tok")
    cfg = TrainConfig(**{**TINY, "loss_steps": 8})
    ds = EpisodeArrays(data, "train", top_quantile=0.5 if algo == "bc" else None)
    torch.manual_seed(0)
    learner = build_algorithm(algo, model_config_for(ds.stats, cfg, algo), cfg)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = learner.update(_batch(ds, [0, 1, 2, 3]))
    assert np.isfinite(out["loss"]), f"{algo} under bf16 autocast: loss {out['loss']}"


def test_bc_keeps_top_quantile_per_machine_workload():
    returns = np.array([1.0, 5.0, 3.0, 2.0, 10.0, 20.0, 30.0, 40.0])
    groups = ["a"] * 4 + ["b"] * 4
    keep = top_quantile_mask(returns, groups, 0.25)
    assert keep.tolist() == [False, True, False, False, False, False, False, True]  # the best of each group, not the global top 2


def test_step_sampler_is_a_function_of_step_and_rank():
    full = StepBatchSampler(10, 3, seed=1)
    it = iter(full)
    first = [next(it) for _ in range(7)]
    resumed = iter(StepBatchSampler(10, 3, seed=1, start_step=4))
    assert [next(resumed) for _ in range(3)] == first[4:]
    r0, r1 = iter(StepBatchSampler(10, 3, seed=1, rank=0, world=2)), iter(StepBatchSampler(10, 3, seed=1, rank=1, world=2))
    assert next(r0) == first[0] and next(r1) == first[1]  # ranks split the same global stream


@pytest.mark.parametrize("algo", ["dt", "bc", "cql"])
def test_trained_bundle_rolls_out(tmp_path, algo, monkeypatch):
    from pmoss.learn.train import train

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    data = make_tokens(tmp_path / "tok")
    cfg = TrainConfig(**{**TINY, "max_steps": 2})
    bundle = train(data, tmp_path / "model", cfg, algo=algo, progress=False)
    assert bundle.info["algo"] == algo and np.isfinite(bundle.info["train_metrics"]["train/loss"])
    again = load_bundle(tmp_path / "model")
    m = small_machine(nodes=2, cpus_per_node=6)
    row = _row(m, np.random.default_rng(0))
    s = propose(again, m, row)
    assert s.kind == "learned" and s.validate_for(m) and s == propose(bundle, m, row)


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.filterwarnings("ignore:Checkpoint directory:UserWarning")  # resuming into its own checkpoints is the point
def test_resume_after_stop_matches_uninterrupted_run(tmp_path, monkeypatch):
    """A run cut at step 4 and resumed from last.ckpt ends bit-identical to one that ran 8 steps straight."""
    from pmoss.learn.train import train

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    data = make_tokens(tmp_path / "tok")
    cfg = TrainConfig(**{**TINY, "max_steps": 8})
    straight = train(data, tmp_path / "straight", cfg, algo="cql", progress=False)
    train(data, tmp_path / "cut", cfg, algo="cql", progress=False, stop_after=4)
    resumed = train(data, tmp_path / "cut", cfg, algo="cql", progress=False)
    assert resumed.info["train_metrics"] == straight.info["train_metrics"]
    for k, v in straight.state_dict.items():
        assert torch.equal(v, resumed.state_dict[k]), f"{k} differs after resume"


def _accuracy(model, ds: EpisodeArrays) -> float:
    model.eval()
    with torch.no_grad():
        b = _batch(ds, list(range(len(ds))))
        from pmoss.learn.learner import policy_scores

        logits = policy_scores(model, b)
        return float((logits.argmax(-1) == b["actions"]).float().mean())


def _fit_on_leaky_data(tmp_path: Path, steps: int) -> tuple[float, float]:
    data = make_tokens(tmp_path / "leak", episodes=64, leak=True)
    held_out = make_tokens(tmp_path / "leak-eval", episodes=24, seed=1, leak=True)
    cfg = TrainConfig(**{**TINY, "max_steps": steps, "warmup": 5, "model": {**TINY["model"], "dropout": 0.0}})
    train_set = EpisodeArrays(data, "all")
    eval_set = EpisodeArrays(held_out, "all", stats=train_set.stats)
    torch.manual_seed(0)
    dt = build_algorithm("dt", model_config_for(train_set.stats, cfg, "dt"), cfg)
    sampler = iter(StepBatchSampler(len(train_set), 16, seed=0))
    for _ in range(steps):
        dt.update(_batch(train_set, next(sampler)))
    return _accuracy(dt.model, train_set), _accuracy(dt.model, eval_set)


def test_leakage_guard_own_counters_do_not_reveal_the_action(tmp_path, monkeypatch):
    """Random-policy episodes whose features encode their own action: the model must stay at chance.

    With the guard broken (a state that includes slice t's own counters), the same training finds
    the action: the positive control shows this test has the power to notice a leak.
    """
    chance = 1 / small_machine(nodes=2, cpus_per_node=6).n_workers
    _, held_out = _fit_on_leaky_data(tmp_path / "guarded", steps=120)
    assert held_out < chance + 0.08, f"held-out accuracy {held_out:.2f} vs chance {chance:.2f}: slice t's own counters leak into state t"

    import pmoss.data.state

    monkeypatch.setattr(pmoss.data.state, "exclusive_cumsum", lambda x: x.cumsum(1))  # slice t in its own state
    _, leaked = _fit_on_leaky_data(tmp_path / "leaky", steps=120)
    assert leaked > held_out + 0.2, f"positive control: a leaking state should be exploitable ({leaked:.2f} vs {held_out:.2f})"


def test_shuffled_returns_are_a_permutation(tmp_path):
    data = make_tokens(tmp_path / "tok")
    real, shuffled = EpisodeArrays(data, "train"), EpisodeArrays(data, "train", shuffle_returns=0)
    assert sorted(real.returns.tolist()) == sorted(shuffled.returns.tolist()) and not np.array_equal(real.rtg, shuffled.rtg)
    assert np.array_equal(real.actions, shuffled.actions)  # only the returns move, actions and states stay


# ---- issue 42: a damaged checkpoint, the loss history across a crash -----------------------------
def test_truncated_checkpoint_is_named_with_the_command_that_clears_it(tmp_path):
    """Every rerun failed with a 26-frame traceback naming no file; now one line, before MLflow."""
    import os
    import subprocess
    import sys

    data = make_tokens(tmp_path / "tok")
    (tmp_path / "tiny.yaml").write_text(TrainConfig(**TINY).model_dump_json())
    last = tmp_path / "m" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    torch.save({"state_dict": {"w": torch.zeros(1000)}, "global_step": 4}, last)
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    env = {**os.environ, "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}  # MLflow must not even be tried
    r = subprocess.run([Path(sys.executable).parent / "pmoss", "train", str(data), "-o", str(tmp_path / "m"), "--config", str(tmp_path / "tiny.yaml"), "-q"],
                       capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert f"{last}: damaged checkpoint" in lines[0] and f"`rm {last}`" in lines[0], lines[0]
    assert last.is_file()  # left for the user to inspect or restore


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.filterwarnings("ignore:Checkpoint directory:UserWarning")
def test_loss_history_survives_a_crash_and_resume(tmp_path, monkeypatch):
    """A run that dies between checkpoints (no on_train_end) and is resumed ends with the same
    loss curves as a run that never stopped (it lost the steps before the crash)."""
    import pmoss.learn.train as train_module

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    data = make_tokens(tmp_path / "tok")
    cfg = TrainConfig(**{**TINY, "max_steps": 30, "val_every": 10})
    train_module.train(data, tmp_path / "straight", cfg, algo="bc", progress=False)

    real = train_module.build_learner

    def crashing(algorithm):
        learner = real(algorithm)

        def on_train_batch_end(*args):
            if learner.trainer.global_step == 25:
                raise RuntimeError("crash")

        learner.on_train_batch_end = on_train_batch_end
        return learner

    monkeypatch.setattr(train_module, "build_learner", crashing)
    with pytest.raises(RuntimeError, match="crash"):
        train_module.train(data, tmp_path / "cut", cfg, algo="bc", progress=False)
    monkeypatch.setattr(train_module, "build_learner", real)
    train_module.train(data, tmp_path / "cut", cfg, algo="bc", progress=False)
    for name in ("train-loss.csv", "val-loss.csv"):
        straight, resumed = ((tmp_path / d / name).read_text() for d in ("straight", "cut"))
        assert resumed == straight and straight.count("\n") == 4, (name, straight, resumed)


def test_training_window_of_the_whole_episode_is_the_episode(tmp_path):
    """`context` >= N leaves training as it was, bit for bit (the scores, hence every step)."""
    from pmoss.learn.learner import policy_scores, sample_window

    ds = EpisodeArrays(make_tokens(tmp_path / "tok"), "train")
    batch = _batch(ds, [0, 1, 2, 3])
    torch.manual_seed(0)
    model = build_algorithm("dt", model_config_for(ds.stats, TrainConfig(**TINY), "dt"), TrainConfig(**TINY)).model.eval()
    assert sample_window(batch, N) is None and sample_window(batch, None) is None
    whole = policy_scores(model, batch)
    assert torch.equal(policy_scores(model, batch, None, (torch.zeros(4, dtype=torch.long), N)), whole)


@pytest.mark.parametrize("algo", ["dt", "bc"])
def test_training_windows_set_the_models_context(tmp_path, algo):
    """A model trained on windows of C slices attends to C slices when it rolls out (n_slices = C);
    windows are drawn inside the episode, and a critic or CQL refuses them."""
    from pmoss.learn.learner import sample_window
    from pmoss.learn.train import TrainError

    ds = EpisodeArrays(make_tokens(tmp_path / "tok"), "train")
    cfg = TrainConfig(**{**TINY, "context": 5})
    model_cfg = model_config_for(ds.stats, cfg, algo)
    assert model_cfg.n_slices == 5
    assert model_config_for(ds.stats, TrainConfig(**{**TINY, "context": 4 * N}), algo).n_slices == N
    batch = _batch(ds, list(range(8)))
    starts = torch.cat([sample_window(batch, 5)[0] for _ in range(200)])
    assert starts.min() == 0 and starts.max() == N - 5  # every window fits, the first and last ones occur
    torch.manual_seed(0)
    learner = build_algorithm(algo, model_cfg, cfg)
    assert np.isfinite(learner.update(batch)["loss"])
    learner.eval()
    assert learner.losses(batch)["loss"] == learner.losses(batch)["loss"]  # validation: the same windows every pass
    for bad in ("cql", "critic"):
        with pytest.raises(TrainError, match="context"):
            model_config_for(ds.stats, cfg, bad)
    one = TrainConfig(**{**TINY, "context": 5, "model": {**TINY["model"], "slice_tokens": 1}})  # one token a slice trains on windows too
    torch.manual_seed(0)
    assert np.isfinite(build_algorithm(algo, model_config_for(ds.stats, one, algo), one).update(batch)["loss"])


@pytest.mark.parametrize("algo", ["dt", "bc", "cql"])
def test_one_token_a_slice_policies_train(tmp_path, algo):
    """`slice_tokens: 1` under a config's `model` trains every policy learner; a critic refuses it by name."""
    from pmoss.learn.train import TrainError

    ds = EpisodeArrays(make_tokens(tmp_path / "tok"), "train")
    cfg = TrainConfig(**{**TINY, "model": {**TINY["model"], "slice_tokens": 1}})
    model_cfg = model_config_for(ds.stats, cfg, algo)
    assert model_cfg.slice_tokens == 1
    torch.manual_seed(0)
    learner = build_algorithm(algo, model_cfg, cfg)
    batch = _batch(ds, list(range(8)))
    first = learner.update(batch)["loss"]
    assert np.isfinite(first)
    with pytest.raises(TrainError, match="slice_tokens"):
        model_config_for(ds.stats, cfg, "critic")


def test_train_cli_context_errors_write_nothing(tmp_path):
    """`pmoss train --context`: below 2 slices is refused by the CLI (exit 2), windows for a learner
    that reads whole episodes with one line naming the field; neither leaves a model behind."""
    from test_failure_modes import one_line_error, pmoss

    data = make_tokens(tmp_path / "tok")
    one = pmoss("train", str(data), "-o", str(tmp_path / "m1"), "--context", "1", "--max-steps", "1", "--quiet")
    assert one.returncode == 2 and "--context" in one.stderr
    cql = pmoss("train", str(data), "-o", str(tmp_path / "m2"), "--algo", "cql", "--context", "4", "--max-steps", "1", "--quiet",
                env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"})  # fmt: skip
    one_line_error(cql, "context")
    assert not (tmp_path / "m1").exists() and not (tmp_path / "m2" / "model.pt").exists()


def test_fine_tuning_keeps_its_base_models_context(tmp_path, monkeypatch):
    """A base model attends to its n_slices: fine-tuning it on windows of another length is refused
    before any work, on windows of its own length accepted."""
    from pmoss.learn.train import TrainError, prepare, train

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    data = make_tokens(tmp_path / "tok")
    train(data, tmp_path / "base", TrainConfig(**{**TINY, "max_steps": 1, "context": 8}), progress=False)
    with pytest.raises(TrainError, match="attends to 8 slices"):
        prepare(data, TrainConfig(**{**TINY, "context": 4}), tmp_path / "base", "dt")
    assert prepare(data, TrainConfig(**{**TINY, "context": 8}), tmp_path / "base", "dt")[1].n_slices == 8


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "training").glob("*.yaml")), ids=lambda p: p.name)
def test_every_training_config_builds_its_model(path):
    """Each training/*.yaml reads as a TrainConfig and its `model:` as a DTConfig (a misspelt or
    invalid field fails here, not in a pipeline stage)."""
    import yaml

    from pmoss.learn.model import DTConfig

    cfg = TrainConfig(**yaml.safe_load(path.read_text()))
    DTConfig(**cfg.model, value_head="critic" in path.name)
