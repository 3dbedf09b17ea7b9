"""`pmoss serve`: the loop on the simulated backend, workload-change detection, champion reloads and faults."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import typer

from pmoss.contracts.errors import ContractError
from pmoss.contracts.snapshot import SLICE_FEATURES
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.learn.bundle import Bundle, save_bundle
from pmoss.learn.model import DecisionTransformer, DTConfig
from pmoss.serve.serve import (
    Champion,
    ServeConfig,
    SimBackend,
    Timeline,
    compare_phases,
    parse_phases,
    profile,
    serve,
    shift,
)
from pmoss.sim import load_sim_machine

N = 32


def _bundle(path: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    f, m = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(n_layer=1, n_head=2, n_embd=32, dropout=0.0, n_slices=N, n_features=f, n_meta=m)
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1.0] * f, meta_mean=[0.0] * m, meta_std=[1.0] * m,
                  best_return={"intel-skx-4s|ycsb-c": 1e8}, n_slices=N)  # fmt: skip
    save_bundle(Bundle(cfg, stats, DecisionTransformer(cfg).state_dict(), {"algo": "dt"}), path / "model.pt")
    return path


def test_parse_phases_errors():
    assert [p.workload for p in parse_phases("ycsb-c:2, scan:1.5")] == ["ycsb-c", "scan"]
    with pytest.raises(ContractError, match="unknown workload 'nope'"):
        parse_phases("nope:3")
    with pytest.raises(ContractError, match="WORKLOAD:SECONDS"):
        parse_phases("ycsb-c")
    with pytest.raises(ContractError, match="must be > 0"):
        parse_phases("ycsb-c:0")


def test_shift_detects_workload_change():
    from pmoss.contracts.policies import generate
    from pmoss.contracts.workload import get_workload
    from pmoss.sim import simulate

    m = load_sim_machine("intel-skx-4s")
    s = generate("sn-grouped", m, N)
    rows = {w: [simulate(m, get_workload(w), "dense", s, seed=i, n_records=1_000_000, window_s=1.0) for i in range(2)] for w in ("ycsb-c", "scan", "ycsb-d")}
    same = shift(profile(rows["ycsb-c"][0]), profile(rows["ycsb-c"][1]))
    assert same < 0.05
    assert shift(profile(rows["ycsb-c"][0]), profile(rows["scan"][0])) > 0.05  # scans appear
    assert shift(profile(rows["ycsb-c"][0]), profile(rows["ycsb-d"][0])) > 0.05  # the hot range moves


def test_serve_sim_end_to_end(tmp_path):
    timeline = Timeline()
    champion = Champion(str(_bundle(tmp_path)), timeline)
    backend = SimBackend(load_sim_machine("intel-skx-4s"), 1_000_000, "dense", N)
    timeline.clock = lambda: backend.t
    cfg = ServeConfig(parse_phases("ycsb-c:3,scan:3"))
    serve(backend, champion, cfg, timeline)
    events = [r["event"] for r in timeline.rows]
    assert events.count("throughput") == 6 and events.count("snapshot") == 6
    assert events.count("inference_start") == events.count("inference_end") == events.count("migration_end") == 2  # start + the shift to scans
    starts = [r["t_s"] for r in timeline.rows if r["event"] == "inference_start"]
    assert starts == sorted(starts)
    timeline.write(tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").num_rows == len(timeline.rows)
    phases = compare_phases(backend, timeline, cfg, ("os-default", "sn-grouped"), repeats=2)
    assert set(phases) == {"0:ycsb-c", "1:scan"}
    for e in phases.values():
        assert e["served"] > 0 and e["served_vs_best"] > 0 and e["repeats"] == 2
        assert set(e["spread"]) == {"served", "os-default", "sn-grouped"}
        assert all(s["n"] == 2 and s["min"] <= s["median"] <= s["max"] for s in e["spread"].values())
        assert e["served_vs_best_min"] <= e["served_vs_best"] <= e["served_vs_best_max"]
        noisy = e["served_vs_best_min"] <= 1.0 <= e["served_vs_best_max"]
        assert e["verdict"] == ("within noise" if noisy else "win" if e["served_vs_best_min"] > 1 else "loss")


def test_serve_command_writes_the_spread(tmp_path):
    """phases.json and the printed table carry median, min-max and the verdict per phase."""
    from typer.testing import CliRunner

    from pmoss.serve.serve import serve_command

    app = typer.Typer()
    app.command()(serve_command)
    out = tmp_path / "serve"
    res = CliRunner().invoke(app, ["--model", str(_bundle(tmp_path)), "--backend", "sim", "--keys", "1000000",
                                   "--phases", "ycsb-c:2", "--repeats", "2", "-o", str(out)], env={"COLUMNS": "200"})  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "phases.json").read_text())
    assert doc["source"] == "sim"
    e = doc["phases"]["0:ycsb-c"]
    assert e["repeats"] == 2 and e["spread"]["served"]["n"] == 2 and e["verdict"] in ("win", "loss", "within noise")
    printed = " ".join(res.output.split())  # the table title wraps
    assert "median [min-max] of 2 interleaved rounds" in printed and e["verdict"] in printed


def test_champion_reload_and_unreachable_server(tmp_path, monkeypatch):
    from pmoss.learn.tracking import mlflow_client
    from pmoss.serve.registry import register

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow/mlflow.db")
    v1 = register(_bundle(tmp_path / "a"), "pmoss-dt", None, None, alias="champion")
    timeline = Timeline()
    champion = Champion("models:/pmoss-dt@champion", timeline)
    champion.refresh()
    assert champion.version == str(v1) and champion.bundle is not None
    v2 = register(_bundle(tmp_path / "b", seed=1), "pmoss-dt", None, None, alias="candidate")
    champion.refresh()
    assert champion.version == str(v1)  # the alias did not move
    mlflow_client().MlflowClient().set_registered_model_alias("pmoss-dt", "champion", v2)
    champion.refresh()
    assert champion.version == str(v2)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens: serving keeps its model
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    before = champion.bundle
    champion.refresh()
    assert champion.bundle is before and champion.version == str(v2)
    errors = [json.loads(r["detail"]) for r in timeline.rows if r["event"] == "model_error"]
    assert errors and "http://127.0.0.1:9 cannot be reached" in errors[-1]["reason"]


def test_no_champion_keeps_the_heuristic_and_says_why(tmp_path, monkeypatch):
    from pmoss.learn.tracking import mlflow_client
    from pmoss.serve.registry import register

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow/mlflow.db")
    v = register(_bundle(tmp_path / "a"), "pmoss-dt", None, None)  # a candidate the gate refused: no champion
    client = mlflow_client().MlflowClient()
    client.set_model_version_tag("pmoss-dt", str(v), "promotion_decision", "refused")
    client.set_model_version_tag("pmoss-dt", str(v), "promotion_reason", "no better than the best heuristic: cell x is 9.0% worse")
    timeline = Timeline()
    champion = Champion("models:/pmoss-dt@champion", timeline)
    backend = SimBackend(load_sim_machine("intel-skx-4s"), 1_000_000, "dense", N)
    serve(backend, champion, ServeConfig(parse_phases("ycsb-c:2,scan:2"), check_model_every=1, initial_kind="sn-numa"), timeline)
    said = [json.loads(r["detail"])["reason"] for r in timeline.rows if r["event"] == "no_model"]
    assert len(said) == 1 and "gate refused every candidate (version 1: no better than the best heuristic" in said[0]  # said once
    assert "inference_start" not in [r["event"] for r in timeline.rows] and backend.schedule.kind == "sn-numa"
    client.set_registered_model_alias("pmoss-dt", "champion", str(v))  # promoted later: serving picks it up
    champion.refresh()
    assert champion.version == str(v) and champion.no_model is None


def test_serve_with_nothing_registered_serves_the_heuristic(tmp_path, monkeypatch):
    """Issue 40.10: an empty registry (no pmoss-dt at all) is 'no champion', not an error: the
    heuristic serves and the command says why."""
    from typer.testing import CliRunner

    from pmoss.serve.serve import serve_command

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow/mlflow.db")
    app = typer.Typer()
    app.command()(serve_command)
    res = CliRunner().invoke(app, ["--backend", "sim", "--machine", "intel-skx-4s", "--keys", "1000000", "--n-slices", str(N),
                                   "--phases", "ycsb-c:2", "--no-compare", "-o", str(tmp_path / "serve")], env={"COLUMNS": "200"})  # fmt: skip
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "serving the heuristic os-default: no model named pmoss-dt on sqlite:///" in said and "nothing is registered" in said
    rows = pq.read_table(tmp_path / "serve/timeline.parquet").to_pylist()
    assert [r["event"] for r in rows].count("no_model") == 1 and "inference_start" not in [r["event"] for r in rows]


def test_serve_keeps_schedule_when_model_cannot_load(tmp_path):
    timeline = Timeline()
    champion = Champion(str(tmp_path / "missing"), timeline)
    backend = SimBackend(load_sim_machine("intel-skx-4s"), 1_000_000, "dense", N)
    serve(backend, champion, ServeConfig(parse_phases("ycsb-c:2")), timeline)
    events = [r["event"] for r in timeline.rows]
    assert "model_error" in events and "inference_start" not in events
    assert backend.schedule.kind == "os-default"
    assert np.isfinite([r["throughput_qps"] for r in timeline.rows if r["event"] == "throughput"]).all()


def test_serve_runtime_backend_measures_overheads(tmp_path):
    from pmoss.collect.runtime import library_path

    if not library_path().exists():
        pytest.skip("libpmoss.so is not built (make native)")
    from pmoss.collect.topology import discover
    from pmoss.serve.serve import RuntimeBackend, overheads

    timeline = Timeline()
    champion = Champion(str(_bundle(tmp_path)), timeline)
    backend = RuntimeBackend(discover(name="localhost"), 50_000, "dense", N)
    serve(backend, champion, ServeConfig(parse_phases("ycsb-c:2,scan:2"), round_s=0.5), timeline)
    tp = [r for r in timeline.rows if r["event"] == "throughput"]
    assert len(tp) == 8 and all(r["throughput_qps"] > 0 for r in tp)
    assert all(json.loads(r["detail"])["latency_p99_ns"] >= json.loads(r["detail"])["latency_p50_ns"] > 0 for r in tp)
    over = overheads(timeline)
    assert over and all(o["snapshot_to_enforced_s"] >= o["inference_s"] > 0 for o in over)
    assert over[0]["p50_during"] is not None and over[0]["p99_before"] > 0
    assert backend.bed.schedule.kind == "learned"  # the model's schedule is the one running


class _RejectingBackend(SimBackend):
    """A runtime that refuses every learned schedule (as the C runtime does for a bad one)."""

    def enforce(self, schedule):
        from pmoss.contracts.schedule import ScheduleError

        if schedule.kind == "learned":
            raise ScheduleError("slice 3: core 99 does not exist")
        return super().enforce(schedule)


def test_rejected_schedule_keeps_the_current_one(tmp_path):
    timeline = Timeline()
    backend = _RejectingBackend(load_sim_machine("intel-skx-4s"), 1_000_000, "dense", N)
    serve(backend, Champion(str(_bundle(tmp_path)), timeline), ServeConfig(parse_phases("ycsb-c:3")), timeline)
    rejected = [json.loads(r["detail"]) for r in timeline.rows if r["event"] == "rejected"]
    assert rejected and "slice 3" in rejected[0]["reason"]
    assert backend.schedule.kind == "os-default"
    assert sum(r["event"] == "throughput" for r in timeline.rows) == 3  # serving went on


class _InterruptedBackend(SimBackend):
    def round(self, workload, seconds, seed):
        if seed == 2:
            raise KeyboardInterrupt
        return super().round(workload, seconds, seed)


def test_ctrl_c_stops_cleanly_with_the_timeline(tmp_path):
    timeline = Timeline()
    backend = _InterruptedBackend(load_sim_machine("intel-skx-4s"), 1_000_000, "dense", N)
    serve(backend, Champion(str(_bundle(tmp_path)), timeline), ServeConfig(parse_phases("ycsb-c:10")), timeline)
    assert timeline.rows[-1]["phase"] == "stopped"
    assert sum(r["event"] == "throughput" for r in timeline.rows) == 2
    timeline.write(tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").num_rows == len(timeline.rows)


def test_compare_phases_on_the_runtime_measures_spread(tmp_path):
    """On this host's real runtime: each schedule gets `repeats` interleaved rounds, and a verdict
    other than "within noise" only when the paired range lies entirely on one side of 1.0."""
    from pmoss.collect.runtime import library_path
    from pmoss.collect.topology import discover
    from pmoss.contracts.policies import generate
    from pmoss.serve.serve import RuntimeBackend

    if not library_path().exists():
        pytest.skip("libpmoss.so is not built")
    backend = RuntimeBackend(discover(), 20_000, "dense", 16)
    timeline = Timeline()
    timeline.served["0:ycsb-c"] = generate("sn-spread", backend.machine, 16)
    cfg = ServeConfig(parse_phases("ycsb-c:1"), round_s=0.1)
    e = compare_phases(backend, timeline, cfg, ("os-default", "sn-grouped"), repeats=3)["0:ycsb-c"]
    assert {s["n"] for s in e["spread"].values()} == {3}
    assert e["served_vs_best_min"] <= e["served_vs_best"] <= e["served_vs_best_max"]
    noisy = e["served_vs_best_min"] <= 1.0 <= e["served_vs_best_max"]
    assert (e["verdict"] == "within noise") == noisy
    assert e["served_while_serving"] is None  # no round was served in this timeline: null, not NaN
