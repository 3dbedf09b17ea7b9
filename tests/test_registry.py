"""Registry: register -> candidate, the promotion gate (refuses a worse candidate), force, rollback."""

import json
from pathlib import Path

import pytest
import torch

from pmoss.contracts.snapshot import SLICE_FEATURES
from pmoss.data.state import GROUP_STATIC
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.learn.bundle import Bundle, save_bundle
from pmoss.learn.model import DecisionTransformer, DTConfig
from pmoss.serve.gate import gate, promote
from pmoss.serve.registry import RegistryError, fetch, register, rollback

N = 32


def test_gate_rules():
    champ = {"a": 100.0, "b": 100.0}
    assert gate({"a": 110.0, "b": 99.0}, champ)[0]  # better on average, no cell > 2% worse
    ok, why = gate({"a": 130.0, "b": 97.0}, champ)
    assert not ok and "cell b is 3.0% worse" in why
    ok, why = gate({"a": 100.0, "b": 100.0}, champ)
    assert not ok and "not higher" in why


def _bundle(tmp: Path, name: str, worse: bool = False) -> Path:
    torch.manual_seed(0)
    f, m = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(n_layer=1, n_head=2, n_embd=32, dropout=0.0, n_slices=N, n_features=f, n_meta=m)
    model = DecisionTransformer(cfg)
    info: dict = {"algo": "dt", "git_commit": "test"}
    if worse:  # every slice on one thread: the pointer head scores only "took the previous slice"
        took = 2 + f + GROUP_STATIC + 2  # group features: worker means, static, then dynamic (data/state.py)
        with torch.no_grad():
            for p in model.head.parameters():
                p.zero_()
            model.head.group.weight[0, took] = 100.0
            model.head.group.weight[0, 2 + f] = 10.0  # width thread first, so slice 0 also lands on one thread
            model.head.score.weight[0, 0] = 1.0
        info["inference"] = {"cap": N}
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1.0] * f, meta_mean=[0.0] * m, meta_std=[1.0] * m,
                  best_return={"intel-skx-4s|ycsb-c": 1e8}, n_slices=N)  # fmt: skip
    save_bundle(Bundle(cfg, stats, model.state_dict(), info), tmp / name / "model.pt")
    return tmp / name


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow/mlflow.db")
    eval_cfg = tmp_path / "eval.yaml"
    eval_cfg.write_text(f"machines: [intel-skx-4s]\nworkloads: [ycsb-c]\nn_slices: {N}\nruns: 1\nbaselines: [sn-grouped]\n")
    return eval_cfg


def test_promotion_gate_end_to_end(tmp_path, store):
    good, bad = _bundle(tmp_path, "good"), _bundle(tmp_path, "bad", worse=True)
    assert register(good, "pmoss-dt", None, None) == 1
    assert fetch("models:/pmoss-dt@candidate").is_file()
    accepted, why = promote("pmoss-dt", store)
    assert accepted and "no champion" in why
    assert register(bad, "pmoss-dt", None, None) == 2
    accepted, why = promote("pmoss-dt", store)
    assert not accepted and "worse than the champion" in why  # the deliberately worse candidate
    import mlflow

    client = mlflow.MlflowClient()
    assert str(client.get_model_version_by_alias("pmoss-dt", "champion").version) == "1"
    v2 = client.get_model_version("pmoss-dt", "2")
    assert v2.tags["promotion_decision"] == "refused"
    assert json.loads(v2.tags["promotion_champion_metrics"])["intel-skx-4s|ycsb-c"] > json.loads(v2.tags["promotion_candidate_metrics"])["intel-skx-4s|ycsb-c"]
    with pytest.raises(RegistryError, match="--reason"):
        promote("pmoss-dt", store, force=True)
    accepted, why = promote("pmoss-dt", store, force=True, reason="operator override for a test")
    assert accepted and "forced: operator override" in why
    assert str(client.get_model_version_by_alias("pmoss-dt", "champion").version) == "2"
    assert rollback("pmoss-dt") == "1"
    assert str(client.get_model_version_by_alias("pmoss-dt", "champion").version) == "1"
    with pytest.raises(RegistryError, match="no previous champion"):
        rollback("pmoss-dt")


def test_fetch_unknown_model(store):
    with pytest.raises(RegistryError, match="models:/nope@candidate"):
        fetch("models:/nope@candidate")
