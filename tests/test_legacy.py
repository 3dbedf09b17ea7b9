"""Legacy knowledge-base import: raw counts put into the legacy encoding come back out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pmoss.collect.legacy import LEGACY_COUNTERS, N_COUNTERS, N_SLICES, import_legacy
from pmoss.contracts.errors import ContractError
from pmoss.contracts.snapshot import CORE_FEATURES, SNAPSHOT_SCHEMA, read_raw

SWEEPERS = (0, 8)  # one sweeper CPU per node, = directory names
ROWS = 3
INTERVAL_S = 40.0
INSTR_PER_SAMPLE = 5_000.0


def _fmt(header: list[str], values: np.ndarray) -> str:
    return " ".join(header + [repr(float(v)) for v in values])


def _raw_per_sample(rng: np.random.Generator) -> np.ndarray:
    """Per-sample raw counts [S, C]: constant within a slice, so the conversion is exact."""
    c = rng.integers(1, 400, size=(N_SLICES, N_COUNTERS)).astype(float)
    c[:, LEGACY_COUNTERS.index("instructions")] = INSTR_PER_SAMPLE
    return c


def make_kb(root: Path, seed: int = 0) -> dict:
    """Write a two-node legacy knowledge base; return the raw counts it encodes."""
    rng = np.random.default_rng(seed)
    per_sample = _raw_per_sample(rng)
    owner = np.arange(N_SLICES) % 2  # node 0 sweeper sees even slices, node 1 odd ones
    samples = rng.integers(1, 6, size=(ROWS, N_SLICES))  # per interval
    samples[1, 5] = 0  # slice 5 idle in interval 1
    kb = root / "kb"
    expected = {name: np.zeros((ROWS, N_SLICES)) for name in LEGACY_COUNTERS if name}
    mem = np.arange(ROWS * 72, dtype=float).reshape(ROWS, 72) + 1.0
    for node, cpu in enumerate(SWEEPERS):
        d = kb / str(cpu)
        d.mkdir(parents=True)
        mine = owner == node
        s = np.where(mine[None, :], samples, 0)  # [R, S]
        ratio = 1000.0 * per_sample / INSTR_PER_SAMPLE  # legacy per-sample encoding [S, C]
        ratio[:, LEGACY_COUNTERS.index("instructions")] = INSTR_PER_SAMPLE
        interval_sums = s[:, :, None] * ratio[None, :, :]  # [R, S, C]
        cum = np.cumsum(interval_sums, axis=0).reshape(ROWS, -1)
        data_rows = [_fmt(["cfg", str(40 * (r + 1)), "ycsb-a", str(cpu)], np.concatenate([cum[r], s[r] * 100])) for r in range(ROWS)]
        (d / "data_view.txt").write_text("\n".join(data_rows) + "\n")
        done = np.cumsum(s * 100, axis=0)
        (d / "query-exec_view.txt").write_text("\n".join(_fmt(["cfg", "0", "ycsb-a", str(cpu)], done[r]) for r in range(ROWS)) + "\n")
        mem_text = "\n".join(_fmt(["cfg", "0", "ycsb-a", str(cpu)], mem[r]) for r in range(ROWS)) if node == 1 else ""
        (d / "mem-channel_view.txt").write_text(mem_text)
        for name in expected:
            expected[name] += np.where(mine[None, :], s * per_sample[None, :, LEGACY_COUNTERS.index(name)], 0)
    (root / "hw.txt").write_text("2 4 6 2 3\n8\n0 8\n1 2 3 4 9 10 11 12\n")
    nodes = [i % 2 for i in range(N_SLICES)]
    cpus = [(1 + i % 4) if i % 2 == 0 else (9 + i % 4) for i in range(N_SLICES)]
    (root / "schedule.txt").write_text("\n".join(" ".join(map(str, (nodes + cpus)[i : i + 16])) for i in range(0, 512, 16)) + "\n")
    return {"kb": kb, "hw": root / "hw.txt", "schedule": root / "schedule.txt", "expected": expected, "samples": samples, "mem": mem, "nodes": nodes, "cpus": cpus}


@pytest.fixture
def kb(tmp_path: Path) -> dict:
    return make_kb(tmp_path)


def test_round_trip_raw_counts(kb: dict, tmp_path: Path) -> None:
    out = import_legacy(kb["kb"], kb["hw"], kb["schedule"], tmp_path / "out", interval_s=INTERVAL_S)
    t = read_raw(out)
    assert t.schema.equals(SNAPSHOT_SCHEMA, check_metadata=False)
    assert t.num_rows == ROWS  # one episode per snapshot row, both directories merged
    rows = t.to_pylist()
    assert len({r["episode_id"] for r in rows}) == ROWS
    for r, row in enumerate(rows):
        assert row["source"] == "legacy" and row["counter_mode"] == "legacy" and row["window_s"] == INTERVAL_S
        assert row["node"] == kb["nodes"] and row["core"] == kb["cpus"]
        assert row["queries"] == (kb["samples"][r] * 100).tolist()
        assert row["throughput_qps"] == pytest.approx(kb["samples"][r].sum() * 100 / INTERVAL_S)
        for name in CORE_FEATURES:
            np.testing.assert_allclose(row[name], kb["expected"][name][r], rtol=1e-9, err_msg=f"{name} row {r}")
        for name in ("page_faults", "nodes_visited"):
            assert row[name] is None and name in row["unavailable"]


def test_idle_slice_is_zero_not_null(kb: dict, tmp_path: Path) -> None:
    row = read_raw(import_legacy(kb["kb"], kb["hw"], kb["schedule"], tmp_path / "o")).to_pylist()[1]
    assert row["instructions"][5] == 0.0 and row["queries"][5] == 0


def test_offcore_rates_become_bytes(kb: dict, tmp_path: Path) -> None:
    rows = read_raw(import_legacy(kb["kb"], kb["hw"], kb["schedule"], tmp_path / "o", interval_s=10.0)).to_pylist()
    mem = kb["mem"]
    for r, row in enumerate(rows):
        # 2 nodes x 6 channels; MB/s x 1e6 x interval = bytes over the window
        assert row["imc_read_bytes"] == pytest.approx([mem[r, 0:6].sum() * 1e7, mem[r, 6:12].sum() * 1e7])
        assert row["imc_write_bytes"] == pytest.approx([mem[r, 24:30].sum() * 1e7, mem[r, 30:36].sum() * 1e7])
        assert row["link_in_bytes"] == mem[r, 48:60].tolist() and row["link_out_bytes"] == mem[r, 60:72].tolist()
        assert row["throughput_qps"] == pytest.approx(kb["samples"][r].sum() * 100 / 10.0)


def _assert_rejected(kb: dict, tmp_path: Path, *words: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(ContractError) as e:
        import_legacy(kb["kb"], kb["hw"], kb["schedule"], out)
    for w in words:
        assert w in str(e.value)
    assert not out.exists() or not any(out.iterdir()), "nothing written on error"


def test_wrong_column_count(kb: dict, tmp_path: Path) -> None:
    f = kb["kb"] / "8" / "data_view.txt"
    lines = f.read_text().splitlines()
    lines[1] += " 7"
    f.write_text("\n".join(lines) + "\n")
    _assert_rejected(kb, tmp_path, str(f), "row 2", "columns")


def test_non_numeric(kb: dict, tmp_path: Path) -> None:
    f = kb["kb"] / "0" / "query-exec_view.txt"
    f.write_text(f.read_text().replace(" 0.0", " zero", 1))
    _assert_rejected(kb, tmp_path, str(f), "row 1", "non-numeric")


def test_missing_directory(kb: dict, tmp_path: Path) -> None:
    for p in (kb["kb"] / "8").iterdir():
        p.unlink()
    (kb["kb"] / "8").rmdir()
    _assert_rejected(kb, tmp_path, str(kb["kb"] / "8"), "missing sweeper directory")


def test_bad_schedule(kb: dict, tmp_path: Path) -> None:
    kb["schedule"].write_text("0 1 2\n")
    _assert_rejected(kb, tmp_path, str(kb["schedule"]), "512")


def test_command_is_typer_compatible(kb: dict, tmp_path: Path) -> None:
    typer = pytest.importorskip("typer")
    from typer.testing import CliRunner

    from pmoss.collect.legacy import import_legacy_command

    app = typer.Typer()
    app.command()(import_legacy_command)
    res = CliRunner().invoke(app, [str(kb["kb"]), "--hw-config", str(kb["hw"]), "--schedule", str(kb["schedule"]), "--output", str(tmp_path / "c"), "--interval-s", "20"])
    assert res.exit_code == 0, res.output
    assert pq.read_table(res.output.strip()).num_rows == ROWS
