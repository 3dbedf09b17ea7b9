"""Reproducible data: the simulator's raw snapshots and the dataset built from them are
byte-identical for the same params, whenever and wherever they are written (DVC hashes them)."""

import hashlib
from datetime import UTC, datetime
from pathlib import Path

from pmoss.collect.driver import collect
from pmoss.collect.plan import load_pool
from pmoss.data.dataset import build

REPO = Path(__file__).resolve().parents[1]


def _collect_and_build(root: Path, monkeypatch, when: datetime) -> dict[str, str]:
    """collect + build as the DVC stages run them (relative paths from the repo root); returns
    every output file's sha256 by relative path."""
    import pmoss.contracts.snapshot as snapshot

    monkeypatch.chdir(root)
    monkeypatch.setattr(snapshot, "now_utc", lambda: when)  # a wall clock that differs between the runs
    pool = load_pool(REPO / "datasets/pools/tiny.yaml", episodes_per_cell=6, n_slices=16)
    assert collect(pool, Path("datasets/raw/offline"), progress=False) > 0
    build([Path("datasets/raw/offline")], Path("datasets/offline"), 0.1, 0.1)
    files = sorted(p for p in Path("datasets").rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_sim_collect_and_build_are_byte_identical(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _collect_and_build(tmp_path / "a", monkeypatch, datetime(2026, 1, 1, tzinfo=UTC))
    second = _collect_and_build(tmp_path / "b", monkeypatch, datetime(2027, 6, 30, 12, 0, 1, tzinfo=UTC))
    assert any(p.endswith(".parquet") and "raw" in p for p in first) and "datasets/offline/tokens.parquet" in first
    assert first == second


def _numpy_in_a_fresh_pmoss(env: dict[str, str]) -> list[str]:
    """NPY_DISABLE_CPU_FEATURES and `pmoss doctor`'s numpy_kernels verdict in a fresh process that imports pmoss first (as the CLI does)."""
    import os
    import subprocess
    import sys

    code = "import os, pmoss; from pmoss.doctor import check_numpy_kernels as c; print(os.environ.get('NPY_DISABLE_CPU_FEATURES', '-')); print(c().status)"
    clean = {k: v for k, v in os.environ.items() if k not in ("NPY_DISABLE_CPU_FEATURES", "PMOSS_NATIVE_SIMD")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True).stdout.split("\n")
    return out[:2]


def test_numpy_keeps_its_avx2_kernels_in_pmoss_processes():
    """NumPy's AVX-512 kernels round some results differently from its AVX2 ones (an AVX-512 host
    wrote other raw-data bytes for the demo's params): pmoss holds NumPy to AVX2 on every host."""
    disabled, verdict = _numpy_in_a_fresh_pmoss({})
    assert "X86_V4" in disabled.split() and "AVX512_ICL" in disabled.split() and verdict == "ok"
    assert _numpy_in_a_fresh_pmoss({"NPY_DISABLE_CPU_FEATURES": "AVX512_SPR"})[0] == "AVX512_SPR"  # the caller's own setting wins
    assert _numpy_in_a_fresh_pmoss({"PMOSS_NATIVE_SIMD": "1"})[0] == "-"  # the opt-out
