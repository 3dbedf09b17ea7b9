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


def _train_in_a_fresh_process(root: Path, name: str, env: dict[str, str]) -> str:
    """`pmoss train` (as the pretrain stage runs it, a few steps) in a fresh process under `env`
    (over this one's, without pmoss's pins): the sha256 of the trained weights."""
    import os
    import subprocess
    import sys

    import torch

    from pmoss import SIMD_PIN
    from pmoss.learn.bundle import load_bundle

    clean = {k: v for k, v in os.environ.items() if k not in (*SIMD_PIN, "PMOSS_NATIVE_SIMD", "MKL_ENABLE_INSTRUCTIONS")}
    clean["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
    cmd = [str(Path(sys.executable).parent / "pmoss"), "train", "datasets/offline", "--output", f"models/{name}",
           "--config", str(REPO / "training/dt-tiny.yaml"), "--max-steps", "6", "--quiet"]  # fmt: skip
    subprocess.run(cmd, cwd=root, env={**clean, **env}, check=True, capture_output=True)
    weights = load_bundle(root / "models" / name).state_dict
    return hashlib.sha256(b"".join(t.numpy().tobytes() for t in (weights[k] for k in sorted(weights)) if isinstance(t, torch.Tensor))).hexdigest()


def test_training_computes_as_an_avx2_host_does(tmp_path, monkeypatch):
    """A model is trained with torch's, oneDNN's and MKL's AVX2 code on every x86-64 host: `pmoss
    train` here gives the same weights as with the CPU capped at AVX2 (what an AVX2-only host
    runs), and other weights where this host's AVX-512 code is allowed. On a host without AVX-512
    both sides run the same code by themselves, so there it cannot tell."""
    from pmoss import SIMD_PIN

    _collect_and_build(tmp_path, monkeypatch, datetime(2026, 1, 1, tzinfo=UTC))
    pinned = _train_in_a_fresh_process(tmp_path, "pinned", {})
    capped = {**SIMD_PIN, "MKL_ENABLE_INSTRUCTIONS": "AVX2", "PMOSS_NATIVE_SIMD": "1"}  # an AVX2-only host, pinned as pmoss pins
    assert _train_in_a_fresh_process(tmp_path, "capped", capped) == pinned
    if _native_capability().startswith("AVX512"):  # this host's own code gives other weights: what the pin is for
        assert _train_in_a_fresh_process(tmp_path, "native", {"PMOSS_NATIVE_SIMD": "1"}) != pinned


def _native_capability() -> str:
    """The CPU capability torch picks on this host by itself (a fresh process without pmoss's pins)."""
    import os
    import subprocess
    import sys

    from pmoss import SIMD_PIN

    clean = {k: v for k, v in os.environ.items() if k not in SIMD_PIN}
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True).stdout.strip()
