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
