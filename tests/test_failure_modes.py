"""Issue 17's user errors, each one line naming the file / field / flag, exit 1, nothing written;
duplicated keys refused in every reader; a fast `pmoss --help`; defaults that work from anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sim_dataset
from test_serve import _bundle

from pmoss.collect.plan import load_pool
from pmoss.contracts.errors import ContractError
from pmoss.contracts.policies import generate
from pmoss.contracts.schedule import load_schedule, save_schedule
from pmoss.contracts.snapshot import episodes_to_table, write_parquet_atomic
from pmoss.contracts.workload import get_workload
from pmoss.sim import load_sim_machine, simulate

BIN = Path(sys.executable).parent
HEAVY = ("torch", "lightning", "mlflow", "ray", "pyarrow", "matplotlib")


def pmoss(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([BIN / "pmoss", *args], capture_output=True, text=True, cwd=cwd, timeout=300, env=env)


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ---- item 5: start-up and defaults -------------------------------------------------------------
def test_help_imports_no_heavy_library():
    code = "import sys; sys.argv = ['pmoss', '--help']\nfrom pmoss.cli import main\ntry:\n main()\nexcept SystemExit:\n pass\n" \
           f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "[]", r.stdout + r.stderr


def test_a_command_process_collects_rarely_and_skips_its_modules_at_exit():
    """The collector settings that save ~3 s of a training stage (docs/benchmarks.md): set by the
    entry point, and everything alive at the end frozen, on success and on a user error alike."""
    for argv, rc in ((["pmoss", "--help"], 0), (["pmoss", "evaluate", "/nonexistent.yaml", "--model", "a=b"], 1)):
        code = f"import gc, sys; sys.argv = {argv!r}\nfrom pmoss.cli import main, GC_THRESHOLD\ntry:\n main()\nexcept SystemExit as e:\n code = e.code\n" \
               "print(code or 0, gc.get_threshold()[0] == GC_THRESHOLD, gc.get_freeze_count() > 10000)"  # fmt: skip
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert r.stdout.splitlines()[-1].split() == [str(rc), "True", "True"], (argv, r.stdout, r.stderr)


def test_listed_help_is_each_commands_own():
    """The top-level listing reads help from the source; it must match what the mounted command says."""
    import importlib
    import inspect

    import typer

    from pmoss.cli import SUBCOMMANDS, _short_help

    for name, (module, attr) in SUBCOMMANDS.items():
        target = getattr(importlib.import_module(module), attr)
        real = target.info.help if isinstance(target, typer.Typer) else inspect.getdoc(target).split("\n\n")[0]
        assert _short_help(module, attr) == real and real, name


def test_train_default_config_from_another_directory(tmp_path):
    r = pmoss("train", str(tmp_path / "no-data"), "--output", str(tmp_path / "m"), cwd=tmp_path)
    one_line_error(r, "no-data", "not a tokenised dataset")  # the config was found: the data is what is missing
    assert not (tmp_path / "m").exists() and not (tmp_path / "mlflow").exists()


# ---- item 3: one-line errors, checked before work starts ---------------------------------------
@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return sim_dataset(tmp_path_factory.mktemp("fm"), episodes=2)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_train_on_corrupt_tokens(dataset, tmp_path, damage):
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(dataset, ds)
    data = (ds / "tokens.parquet").read_bytes()
    bad = data[: len(data) // 2] if damage == "truncate" else data[:1000] + bytes([data[1000] ^ 0xFF]) + data[1001:]  # in the data pages
    (ds / "tokens.parquet").write_bytes(bad)
    env = {**__import__("os").environ, "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}  # MLflow must not even be tried
    r = pmoss("train", str(ds), "--output", str(tmp_path / "m"), env=env)
    one_line_error(r, "tokens.parquet")
    assert not (tmp_path / "m").exists()


def test_schedule_any_slice_count(tmp_path):
    """The model has nothing sized by the slice count: a 16-slice snapshot with a 32-slice model works."""
    m = load_sim_machine("intel-skx-4s")
    row = simulate(m, get_workload("ycsb-c"), "dense", generate("os-default", m, 16), seed=1, n_records=100_000)
    write_parquet_atomic(episodes_to_table([row]), tmp_path / "snap.parquet")
    r = pmoss("schedule", "--model", str(_bundle(tmp_path / "model")), "--snapshot", str(tmp_path / "snap.parquet"), "-o", str(tmp_path / "s.json"))
    assert r.returncode == 0, r.stderr
    assert load_schedule(tmp_path / "s.json", m).n_slices == 16


EVAL = "machines: [intel-skx-4s]\nworkloads: [ycsb-c]\nn_records: 100000\nruns: 1\nbaselines: [os-default]\n"


def test_evaluate_other_slice_count(tmp_path):
    """Issue 17 case 3: `--n-slices 16` with a model trained on another count runs (nothing in it is sized by N)."""
    (tmp_path / "eval.yaml").write_text(EVAL)
    r = pmoss("evaluate", str(tmp_path / "eval.yaml"), "--model", f"dt={_bundle(tmp_path / 'model')}", "--n-slices", "16", "-o", str(tmp_path / "out"), "--quiet")
    assert r.returncode == 0, r.stderr
    schedules = json.loads((tmp_path / "out" / "schedules.json").read_text())
    counts = [s["n_slices"] for per in schedules.values() for s in per.values()]
    assert counts and set(counts) == {16}


@pytest.mark.parametrize(("patch", "needle"), [
    ("machines: [intel-skx-4s, nope-9000]", "field 'machines': unknown simulated machine 'nope-9000'"),
    ("workloads: [ycsb-c, ycsb-z]", "field 'workloads': unknown workload 'ycsb-z'"),
    ("runs: -2", "field 'runs'"),
    ("baselines: [os-default, sn-magic]", "field 'baselines': unknown schedule kind 'sn-magic'"),
    ("runs: 1\nruns: 2", "key 'runs' appears twice"),
])  # fmt: skip
def test_eval_config_checked_before_work(tmp_path, patch, needle):
    key = patch.split(":")[0]
    text = "\n".join(line for line in EVAL.splitlines() if not line.startswith(key + ":")) + "\n" + patch + "\n"
    (tmp_path / "eval.yaml").write_text(text)
    r = pmoss("evaluate", str(tmp_path / "eval.yaml"), "--model", f"dt={_bundle(tmp_path / 'model')}", "-o", str(tmp_path / "out"))
    one_line_error(r, "eval.yaml", needle)
    assert not (tmp_path / "out").exists()


def test_evaluate_flag_errors_blame_the_flag(tmp_path):
    (tmp_path / "eval.yaml").write_text(EVAL)
    r = pmoss("evaluate", str(tmp_path / "eval.yaml"), "--model", f"dt={_bundle(tmp_path / 'model')}", "--n-slices", "0", "-o", str(tmp_path / "o"))
    line = one_line_error(r, "--n-slices 0")
    assert "eval.yaml" not in line and not (tmp_path / "o").exists()


def test_collect_flag_errors_blame_the_flag(tmp_path):
    (tmp_path / "pool.yaml").write_text("name: t\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\nn_slices: 8\n")
    r = pmoss("collect", str(tmp_path / "pool.yaml"), "--episodes-per-cell", "-1", "-o", str(tmp_path / "raw"))
    line = one_line_error(r, "--episodes-per-cell -1")
    assert "pool.yaml" not in line and not (tmp_path / "raw").exists()
    (tmp_path / "pool.yaml").write_text("name: t\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nepisodes_per_cell: 0\nn_slices: 8\n")
    one_line_error(pmoss("collect", str(tmp_path / "pool.yaml"), "-o", str(tmp_path / "raw")), "pool.yaml: field 'episodes_per_cell'")


# ---- item 4: duplicated keys --------------------------------------------------------------------
def test_duplicated_keys_refused_everywhere(tmp_path):
    m = load_sim_machine("intel-skx-4s")
    save_schedule(generate("sn-numa", m, 8), tmp_path / "s.json")
    text = (tmp_path / "s.json").read_text()
    (tmp_path / "dup.json").write_text(text.replace('"kind":', '"kind": "os-default", "kind":', 1))
    json.loads((tmp_path / "dup.json").read_text())  # valid JSON, which keeps the last value
    with pytest.raises(ContractError, match=r"dup.json: key 'kind' appears twice"):
        load_schedule(tmp_path / "dup.json", m)
    (tmp_path / "pool.yaml").write_text("name: t\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nworkloads: [scan]\nepisodes_per_cell: 2\n")
    with pytest.raises(ContractError, match=r"pool.yaml: key 'workloads' appears twice \(line 4\)"):
        load_pool(tmp_path / "pool.yaml")
    (tmp_path / "nested.yaml").write_text("name: t\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\nmix: {sn-random: 0.5, sn-random: 0.5}\n")
    with pytest.raises(ContractError, match=r"nested.yaml: key 'sn-random' appears twice"):
        load_pool(tmp_path / "nested.yaml")
