"""`pmoss schedule`: one snapshot + a model -> a validated schedule file."""

import subprocess
import sys

from test_serve import _bundle

from pmoss.contracts.policies import generate
from pmoss.contracts.schedule import load_schedule
from pmoss.contracts.snapshot import episodes_to_table, write_parquet_atomic
from pmoss.contracts.workload import get_workload
from pmoss.sim import load_sim_machine, simulate


def test_schedule_from_snapshot(tmp_path):
    m = load_sim_machine("intel-skx-4s")
    row = simulate(m, get_workload("ycsb-c"), "dense", generate("os-default", m, 32), seed=1, n_records=1_000_000)
    write_parquet_atomic(episodes_to_table([row]), tmp_path / "snap.parquet")
    model = _bundle(tmp_path / "model")
    out = tmp_path / "s.json"
    r = subprocess.run([sys.executable, "-m", "pmoss", "schedule", "--model", str(model), "--snapshot", str(tmp_path / "snap.parquet"),
                        "--mode", "best-of-k", "--k", "3", "--score-sim", "-o", str(out)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = load_schedule(out, m)  # validated against the descriptor
    assert s.kind == "learned" and s.n_slices == 32 and s.provenance["mode"] == "best-of-k"
    bad = subprocess.run([sys.executable, "-m", "pmoss", "schedule", "--model", str(model), "--snapshot", str(tmp_path / "snap.parquet"),
                          "--episode", "nope"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 1 and "no episode 'nope'" in bad.stderr


def test_the_load_cap_is_the_users_to_set_or_switch_off(tmp_path):
    """A hot slice under a tight cap must be spread; with the cap off the untrained policy need not."""
    m = load_sim_machine("intel-skx-4s")
    row = simulate(m, get_workload("ycsb-c"), "dense", generate("os-default", m, 32), seed=1, n_records=1_000_000)
    write_parquet_atomic(episodes_to_table([row]), tmp_path / "snap.parquet")
    model = _bundle(tmp_path / "model")
    base = [sys.executable, "-m", "pmoss", "schedule", "--model", str(model), "--snapshot", str(tmp_path / "snap.parquet")]
    out = {}
    for name, flags in {"tight": ["--load-cap", "0.5"], "off": ["--no-load-cap"]}.items():
        r = subprocess.run([*base, *flags, "-o", str(tmp_path / f"{name}.json")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out[name] = load_schedule(tmp_path / f"{name}.json", m)
    assert out["tight"].core != out["off"].core or out["tight"].width != out["off"].width
    both = subprocess.run([*base, "--load-cap", "1", "--no-load-cap"], capture_output=True, text=True, timeout=120)
    assert both.returncode == 1 and "give one" in both.stderr
    zero = subprocess.run([*base, "--load-cap", "0"], capture_output=True, text=True, timeout=120)
    assert zero.returncode == 2 and "--load-cap" in zero.stderr


def test_the_context_is_the_users_to_set(tmp_path):
    """A snapshot longer than the model's training episodes: by default a step attends to the last
    n_slices slices, `--context` sets it (the slice count: the whole episode); both agree until the
    window first moves, and a context under 2 slices is refused."""
    from test_serve import N

    m = load_sim_machine("intel-skx-4s")
    row = simulate(m, get_workload("ycsb-c"), "dense", generate("os-default", m, 4 * N), seed=1, n_records=1_000_000)
    write_parquet_atomic(episodes_to_table([row]), tmp_path / "snap.parquet")
    base = [sys.executable, "-m", "pmoss", "schedule", "--model", str(_bundle(tmp_path / "model")), "--snapshot", str(tmp_path / "snap.parquet")]
    out = {}
    for name, flags in {"window": [], "whole": ["--context", str(4 * N)]}.items():
        r = subprocess.run([*base, *flags, "-o", str(tmp_path / f"{name}.json")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out[name] = load_schedule(tmp_path / f"{name}.json", m)
    assert out["window"].core[:N] == out["whole"].core[:N] and out["window"].n_slices == 4 * N
    assert out["whole"].provenance["context"] == 4 * N and "context" not in out["window"].provenance
    one = subprocess.run([*base, "--context", "1"], capture_output=True, text=True, timeout=120)
    assert one.returncode == 2 and "--context" in one.stderr
