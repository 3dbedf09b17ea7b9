"""benchmarks/load_cap_sweep.py: policies and mask-only at several inference load caps, on
validation sets only."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_serve import N, _bundle

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "load_cap_sweep.py"


def _val(path: Path, seed_base: int) -> Path:
    path.write_text(f"machines: [intel-skx-4s]\nworkloads: [ycsb-c]\nn_slices: {N}\nruns: 1\nseed_base: {seed_base}\n")
    return path


def test_each_cap_masks_the_policy_and_mask_only(tmp_path):
    out = tmp_path / "sweep.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--model", f"p={_bundle(tmp_path / 'p')}", "--val", str(_val(tmp_path / "val.yaml", 3000017)),
                        "--caps", "0.5,100", "--reference-cap", "100", "--inits", "2", "--out", str(out)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())
    tight, loose = rec["geo_mean"]["0.5"]["val.yaml"], rec["geo_mean"]["100.0"]["val.yaml"]
    assert set(tight) == {"p", "mask-only"} and all(v > 0 for v in (*tight.values(), *loose.values()))
    assert tight != loose  # the cap reaches the rollout (a cap of 100 fair shares binds nothing)
    assert rec["baseline_value"] == pytest.approx(loose["p"])
    assert {"machine", "date", "command"} <= set(rec)  # a trial run (--out) is a record like the others


def test_an_evaluation_set_or_an_unswept_reference_is_refused(tmp_path):
    model = f"p={_bundle(tmp_path / 'p')}"
    r = subprocess.run([sys.executable, str(SCRIPT), "--model", model, "--val", str(_val(tmp_path / "eval.yaml", 1000003))],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)  # fmt: skip
    assert r.returncode == 2 and "eval.yaml" in r.stderr and "validation" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--model", model, "--val", str(_val(tmp_path / "val.yaml", 3000017)), "--caps", "1.0"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)  # fmt: skip
    assert r.returncode == 2 and "--reference-cap 1.25" in r.stderr
