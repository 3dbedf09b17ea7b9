"""benchmarks/seed_spread.py: policies of several training seeds vs mask-only of as many
initialisations, on validation sets only."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import sim_dataset

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "seed_spread.py"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return sim_dataset(tmp_path_factory.mktemp("spread"), episodes=4)


def _val(path: Path, seed_base: int) -> Path:
    path.write_text(f"machines: [intel-skx-4s]\nworkloads: [ycsb-c]\nn_slices: 8\nruns: 1\nseed_base: {seed_base}\n")
    return path


def test_seeds_and_inits_measured_on_a_validation_set(dataset, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text("model: {n_layer: 1, n_head: 1, n_embd: 16, group_hidden: 8, dropout: 0.0}\nmax_steps: 2\nbatch_size: 2\n"
                      "lr: 0.001\nwarmup: 1\nval_every: 100\nseed: 0\n")  # fmt: skip
    out = tmp_path / "spread.json"
    r = subprocess.run([sys.executable, str(SCRIPT), str(dataset), "--val", str(_val(tmp_path / "val.yaml", 3000017)), "--seeds", "2",
                        "--config", str(config), "--max-steps", "3", "--work", str(tmp_path / "work"), "--out", str(out)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())
    res = rec["sets"]["val.yaml"]
    assert set(res["geo_mean"]) == {"policy-s0", "policy-s1", "mask-only-s0", "mask-only-s1"}
    assert res["pairs"] == 4 and 0 <= res["policy_above_mask_pairs"] <= 4
    assert all(v > 0 for v in res["geo_mean"].values())
    assert res["policy_seeds"]["machines"] == 1 and res["policy_seeds"]["split_half_corr"] is None  # one machine: no halves to compare
    assert "no halves" in r.stdout
    assert rec["value"] == pytest.approx(sorted(rec["policy_per_seed"])[0] / 2 + sorted(rec["policy_per_seed"])[1] / 2)
    # two seeds are two trainings, not one model under two names
    import torch

    from pmoss.learn.bundle import load_bundle

    w = [load_bundle(tmp_path / "work" / f"policy-s{s}").state_dict for s in (0, 1)]
    assert any(not torch.equal(w[0][k], w[1][k]) for k in w[0])


def test_seed_transfer_tells_a_real_lead_from_luck():
    """A seed better on every machine is found on either half of them; seeds whose lead flips from
    machine to machine are not, and picking one on half the machines gains nothing on the rest."""
    sys.path.insert(0, str(SCRIPT.parent))
    from seed_spread import seed_transfer

    rng = np.random.default_rng(1)
    cells = [f"m{i}|{w}" for i in range(12) for w in ("ycsb-c", "scan")]
    names = [f"policy-s{s}" for s in range(6)]
    noise = rng.normal(0, 0.03, (6, len(cells)))
    real = {n: np.exp(0.02 * k + noise[k]).tolist() for k, n in enumerate(names)}  # seed k is k x 2 % better everywhere
    luck = {n: np.exp(noise[k]).tolist() for k, n in enumerate(names)}
    t_real, t_luck = seed_transfer(cells, real, names, 200), seed_transfer(cells, luck, names, 200)
    assert t_real["split_half_corr"] > 0.8 and t_real["pick_on_half_gain"] > 0.03
    assert abs(t_luck["split_half_corr"]) < 0.3 and abs(t_luck["pick_on_half_gain"]) < 0.01
    assert t_luck["cell_sd_log"] == pytest.approx(0.03, rel=0.2) and t_real["machines"] == 12


def test_an_evaluation_set_is_refused(dataset, tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), str(dataset), "--val", str(_val(tmp_path / "eval.yaml", 1000003)), "--work", str(tmp_path / "w")],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)  # fmt: skip
    assert r.returncode == 2 and "eval.yaml" in r.stderr and "validation" in r.stderr
    assert not (tmp_path / "w").exists()  # refused before anything is trained
    bad = tmp_path / "bad.yaml"
    bad.write_text("machines: [no-such-machine]\nworkloads: [ycsb-c]\nseed_base: 3000017\n")
    for val, named in ((tmp_path / "missing.yaml", "missing.yaml"), (bad, "no-such-machine")):
        r = subprocess.run([sys.executable, str(SCRIPT), str(dataset), "--val", str(val), "--work", str(tmp_path / "w")],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300)  # fmt: skip
        assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "w").exists()
