"""Leakage guard on the evaluation harness: a Decision Transformer trained on shuffled returns must
not beat the same DT trained on the real returns.

Both models: the same small simulated dataset, seed, steps and config; only the return-to-go
sequences are permuted across episodes in the control (`shuffle_returns`). Both are judged by
`pmoss.evaluate` on the same cells, snapshot, target and held-out evaluation seeds.

Criterion (why not "greedy control <= greedy model"): one greedy schedule per cell is one draw, and
two models that differ only by chance (same returns, another training seed) were measured 36% apart
on a cell of this kind, in either direction — that comparison is a coin flip. Instead each policy
is judged on k sampled schedules per cell (`evaluate.sample_cells`): the control "beats" the model
when its mean log-throughput, averaged over cells, is higher by more than Z standard errors
(`evaluate.sampled_gap`, Welch). For two equivalent policies that happens with probability ~2%.
The positive control shows the same criterion fires when a policy is really better: the real model
sampled hot (temperature 2) without the slices-per-core cap is beaten by the control.
"""

from __future__ import annotations

import pytest

from pmoss.evaluate import EvalConfig, sample_cells, sampled_gap

# Below 1: draws near each policy's mode, where the two models' preferences differ (at 1 a tiny
# model's policy is close to uniform, so both would look like random placement).
TEMPERATURE = 0.5
Z = 2.0  # standard errors: one-sided ~2% false alarm for two equivalent policies
MACHINES, WORKLOADS, N_SLICES = ["intel-skx-4s", "amd-milan-nps4"], ["ycsb-c", "scan"], 32
TINY = {"model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "dropout": 0.1},
        "max_steps": 80, "batch_size": 16, "lr": 1e-3, "warmup": 10, "val_every": 80, "seed": 0}  # fmt: skip


def beats(samples: dict[str, dict[str, list[float]]], control: str, model: str) -> tuple[bool, str]:
    gap, se = sampled_gap(samples, control, model)
    return gap > Z * se, f"{control} - {model}: mean log-throughput gap {gap:+.4f}, standard error {se:.4f}"


@pytest.mark.slow
@pytest.mark.ci
def test_shuffled_return_control_does_not_beat_the_real_model(tmp_path, monkeypatch):
    from pmoss.collect.driver import collect
    from pmoss.collect.plan import Pool
    from pmoss.data.dataset import build
    from pmoss.learn.train import TrainConfig, train

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    pool = Pool(name="control", machines=MACHINES, workloads=WORKLOADS, episodes_per_cell=32, n_slices=N_SLICES, seed=0)
    collect(pool, tmp_path / "raw", progress=False)
    build([tmp_path / "raw"], tmp_path / "tok", val=0.1, test=0.0)
    cfg = TrainConfig(**TINY)
    real = train(tmp_path / "tok", tmp_path / "real", cfg, progress=False)
    control = train(tmp_path / "tok", tmp_path / "control", cfg, progress=False, shuffle_returns=0)
    assert control.info["shuffled_returns"] == 0 and real.info["shuffled_returns"] is None

    ev = EvalConfig(machines=MACHINES, workloads=WORKLOADS, n_slices=N_SLICES, runs=2)
    # No load cap (an inference mask): it makes every draw balanced, so the policies' own choices are compared.
    samples = sample_cells(ev, {"real": real, "control": control}, k=16, temperature=TEMPERATURE, load_cap=None)
    beaten, msg = beats(samples, "control", "real")
    print(msg)
    assert not beaten, f"the shuffled-return control beats the real model: {msg}"

    # Positive control: the criterion has the power to notice a better policy. The worse one is the
    # real model sampled hot without the slices-per-core cap, so slices pile up on some cores as in
    # sn-random (with the cap, N <= workers forces one slice per core and every draw is similar).
    hot = sample_cells(ev, {"real-hot": real}, k=16, temperature=2.0, cap=N_SLICES, load_cap=None)
    for cell in samples:
        samples[cell]["real-hot"] = hot[cell]["real-hot"]
    fired, msg = beats(samples, "control", "real-hot")
    print(msg)
    assert fired, f"positive control: a near-uniform policy should be beaten ({msg})"
