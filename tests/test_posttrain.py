"""Post-training loop: learned episodes are appended once, the fine-tuning data grows, every round
writes a bundle, and the report has one row per round x workload; bad options name themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from pmoss.contracts.errors import ContractError
from pmoss.contracts.snapshot import SLICE_FEATURES, raw_files
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.learn.bundle import Bundle, load_bundle, save_bundle
from pmoss.learn.model import DecisionTransformer, DTConfig
from pmoss.serve.posttrain import PostTrainConfig, post_train, table

N = 32
MACHINE = "intel-skx-4s"
TINY = {"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "dropout": 0.0}, "batch_size": 4}


def _base(path: Path) -> Path:
    """An untrained tiny model: post-training only needs one that proposes valid schedules."""
    torch.manual_seed(0)
    f, m = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(**TINY["model"], n_slices=N, n_features=f, n_meta=m)
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1.0] * f, meta_mean=[0.0] * m, meta_std=[1.0] * m, best_return={}, n_slices=N)  # fmt: skip
    save_bundle(Bundle(cfg, stats, DecisionTransformer(cfg).state_dict(), {"algo": "dt"}), path / "model.pt")
    return path


@pytest.fixture
def setup(tmp_path, monkeypatch) -> PostTrainConfig:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    pool = tmp_path / "pool.yaml"
    pool.write_text(f"name: pt\nmachines: [{MACHINE}]\nworkloads: [ycsb-c, scan]\nepisodes_per_cell: 8\nn_slices: {N}\nseed: 1\n")
    return PostTrainConfig(machine=MACHINE, model=_base(tmp_path / "base"), output=tmp_path / "out", rounds=2, pool=pool,
                           learned=tmp_path / "learned", steps=2, k=3, extra=TINY)  # fmt: skip


def _learned_ids(learned: Path) -> list[str]:
    return [i for f in raw_files(learned) for i in pq.read_table(f, columns=["episode_id"]).column(0).to_pylist()]


def _kinds(learned: Path) -> set[str]:
    return {k for f in raw_files(learned) for k in pq.read_table(f, columns=["schedule_kind"]).column(0).to_pylist()}


def test_two_rounds_grow_data_and_write_bundles(setup):
    cfg = setup
    report = post_train(cfg, progress=False)
    ids = _learned_ids(cfg.learned)
    # 2 rounds x 2 workloads x observe_runs episodes, each once, all of kind `learned`
    assert len(ids) == len(set(ids)) == 2 * 2 * cfg.observe_runs and _kinds(cfg.learned) == {"learned"}
    sizes = [r["dataset_episodes"] for r in report["rounds"]]
    assert sizes == [2 * 8 + 2 * cfg.observe_runs, 2 * 8 + 4 * cfg.observe_runs]  # pool episodes + learned so far
    for rnd, entry in enumerate(report["rounds"], start=1):
        assert load_bundle(cfg.output / f"round-{rnd}").info["init"] == str(cfg.model if rnd == 1 else cfg.output / f"round-{rnd - 1}")
    assert [(r["round"], r["workload"]) for r in report["rows"]] == [(1, "ycsb-c"), (1, "scan"), (2, "ycsb-c"), (2, "scan")]
    assert all(r["eval_qps"] > 0 and r["vs_best_baseline"] == r["eval_qps"] / r["best_baseline_qps"] for r in report["rows"])
    assert json.loads((cfg.output / "report.json").read_text())["source"] == "sim"
    assert (cfg.output / "post-training.png").stat().st_size > 0 and table(report).row_count == 4


def test_rerun_adds_no_duplicate_episodes(setup, tmp_path):
    cfg = setup
    one = PostTrainConfig(**{**cfg.__dict__, "rounds": 1})
    post_train(one, progress=False)
    first = sorted(_learned_ids(cfg.learned))
    report = post_train(one, progress=False)  # same model, seeds and schedules: the same episodes again
    assert sorted(_learned_ids(cfg.learned)) == first
    assert all(r["learned_added"] == 0 for r in report["rows"])


@pytest.mark.parametrize(
    ("change", "field"),
    [({"rounds": 0}, "--rounds"), ({"machine": "no-such-box"}, "--machine"), ({"model": Path("/nonexistent")}, "--model"),
     ({"workloads": ("nope",)}, "--workloads"), ({"k": 0}, "--k")],
)  # fmt: skip
def test_bad_input_names_the_option(setup, change, field):
    with pytest.raises(ContractError, match=field):
        post_train(PostTrainConfig(**{**setup.__dict__, **change}), progress=False)
