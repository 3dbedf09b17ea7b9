"""The `pmoss` command line as a user meets it: --help everywhere, one-line errors, nothing written on failure."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pmoss.contracts.machine import load_machine


def pmoss(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pmoss", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_help_on_every_command():
    top = pmoss("--help")
    assert top.returncode == 0 and "topology" in top.stdout
    groups = {"": ["topology", "collect", "train", "evaluate"], "dataset": ["validate", "build", "report"], "registry": ["register", "list"], "sim": []}
    for group, commands in groups.items():
        prefix = [group] if group else []
        r = pmoss(*prefix, "--help")
        assert r.returncode == 0, r.stderr
        for c in commands:
            r = pmoss(*prefix, c, "--help")
            assert r.returncode == 0 and "Usage" in r.stdout, (group, c, r.stderr)


def test_topology_here(tmp_path):
    r = pmoss("topology")
    assert r.returncode == 0
    d = yaml.safe_load(r.stdout)
    assert d["numa_nodes"] >= 1 and len(d["cpus"]) >= 1
    out = tmp_path / "host.yaml"
    assert pmoss("topology", "--output", str(out)).returncode == 0
    assert load_machine(out).numa_nodes == d["numa_nodes"]


def test_topology_fake_tree(two_socket_eight_node, tmp_path):
    out = tmp_path / "fake.json"
    r = pmoss("topology", "--root", str(two_socket_eight_node), "--name", "fake", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert load_machine(out).numa_nodes == 8


@pytest.mark.parametrize(
    "args, needle",
    [
        (["topology", "--bogus"], "No such option"),
        (["topology", "--root", "/nonexistent-root"], "cpu/online"),
        (["collect", "/nonexistent/pool.yaml"], "no such file"),
        (["dataset", "validate", "/nonexistent/raw"], "no such file"),
        (["evaluate", "/nonexistent/eval.yaml", "--model", "x=y"], "no such file"),
    ],
)
def test_bad_input_one_line_error(args, needle, tmp_path):
    r = pmoss(*args, cwd=tmp_path)
    assert r.returncode != 0
    assert needle.lower() in r.stderr.lower()
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_malformed_pool_names_field(tmp_path):
    pool = tmp_path / "pool.yaml"
    pool.write_text("name: p\nmachines: [no-such-machine]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\n")
    r = pmoss("collect", str(pool), "-o", str(tmp_path / "raw"))
    assert r.returncode == 1 and "no-such-machine" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "raw").exists()
    pool.write_text("name: p\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\nmix: {sn-random: 0.3}\n")
    r = pmoss("collect", str(pool), "-o", str(tmp_path / "raw"))
    assert r.returncode == 1 and "field 'mix'" in r.stderr


@pytest.mark.parametrize("script", sorted(p.name for p in (Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py") if not p.name.startswith("_")))  # _*.py: helpers
def test_every_benchmark_answers_help_without_running(script):
    """`--help` prints usage and leaves the records alone (bench_inference.py once ran, and recorded '--help' as its command)."""
    root = Path(__file__).resolve().parents[1]
    before = {p: p.stat().st_mtime_ns for p in (root / "benchmarks" / "results").glob("*.json")}
    r = subprocess.run([sys.executable, str(root / "benchmarks" / script), "--help"], capture_output=True, text=True, cwd=root, timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout, (script, r.stderr[-500:])
    assert {p: p.stat().st_mtime_ns for p in (root / "benchmarks" / "results").glob("*.json")} == before
