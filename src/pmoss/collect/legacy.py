"""Import the published research code's knowledge-base files as raw snapshots (source="legacy").

Layout of a legacy knowledge base (KB_DIR):
  <sweeper cpu>/data_view.txt        one row per snapshot: 4 header columns (config tReel wkload
                                     iam), 256 slices x 16 counters (slice-major), 256 per-slice
                                     query counts (per interval, 100 queries per sample)
  <sweeper cpu>/query-exec_view.txt  4 header columns, 256 completed-query counts (cumulative)
  <sweeper cpu>/mem-channel_view.txt 4 header columns, 24 channel read MB/s, 24 write MB/s,
                                     12 link-in bytes, 12 link-out bytes (one directory has rows)

Counter conversion (why it is approximate): the legacy runtime stored, per 100-query sample s,
instructions i_s as a plain sum and every other counter as the ratio 1000 * c_s / i_s, and kept
running sums of both across snapshot rows. After differencing consecutive rows, an interval
holds I = sum_s i_s and R = sum_s 1000 * c_s / i_s over its n = queries / 100 samples. The raw
count sum_s c_s equals (R / n / 1000) * I exactly when every sample retired the same number of
instructions (or when c_s / i_s is uncorrelated with i_s); otherwise it is the best estimate the
stored sums allow. task-clock is assumed recorded in ns (perf's unit). The legacy "node read
miss" counter has no portable feature and is dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from pmoss.contracts.errors import ContractError
from pmoss.contracts.snapshot import (
    CORE_FEATURES,
    SOFTWARE_FEATURES,
    episode_id,
    episodes_to_table,
    now_utc,
    write_parquet_atomic,
)

N_SLICES = 256
N_HEADER = 4  # config tReel wkload iam
QUERIES_PER_SAMPLE = 100
# Column order of the 16 per-slice counters in data_view.txt -> portable feature (None: dropped).
LEGACY_COUNTERS: tuple[str | None, ...] = (
    "cycles", "instructions", "l1d_misses", "l1i_misses", "llc_misses", "branch_misses",
    None,  # node read miss: no portable feature
    "dtlb_misses", "mem_accesses", "llc_write_misses", "mem_write_misses",
    "local_dram_loads", "remote_dram_loads", "cycles_l3_miss", "cycles_mem_any", "task_clock_ns",
)  # fmt: skip
N_COUNTERS = len(LEGACY_COUNTERS)
INSTR_COL = LEGACY_COUNTERS.index("instructions")
MEM_CHANNELS, LINKS = 24, 12
BYTES_PER_MB = 1e6  # the legacy sweeper reported decimal MB/s


@dataclass(frozen=True)
class HwConfig:
    numa: int
    workers_per_numa: int
    mc_channels_per_numa: int
    sockets: int
    upi_links: int
    total_workers: int
    sweeper_cpus: tuple[int, ...]
    worker_cpus: tuple[int, ...]


@dataclass(frozen=True)
class Table:
    """One legacy view file: string headers [rows, 4] and float values [rows, cols]."""

    headers: list[list[str]]
    values: np.ndarray  # [rows, n_values]


def _ints(path: Path, line_no: int, text: str) -> list[int]:
    try:
        return [int(t) for t in text.split()]
    except ValueError as e:
        raise ContractError(f"{path}: line {line_no}: expected integers, got {text.strip()[:80]!r}") from e


def read_hw_config(path: Path) -> HwConfig:
    path = Path(path)
    if not path.is_file():
        raise ContractError(f"{path}: no such hw config file")
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    if len(lines) < 4:
        raise ContractError(f"{path}: expected 4 lines (shape, total workers, sweeper CPUs, worker CPUs), got {len(lines)}")
    shape = _ints(path, 1, lines[0])
    if len(shape) != 5:
        raise ContractError(f"{path}: line 1: expected 'numa workers_per_numa mc_channels_per_numa sockets upi_links', got {len(shape)} values")
    total = _ints(path, 2, lines[1])
    if len(total) != 1:
        raise ContractError(f"{path}: line 2: expected the total worker count")
    return HwConfig(*shape, total[0], tuple(_ints(path, 3, lines[2])), tuple(_ints(path, 4, lines[3])))


def read_schedule(path: Path) -> tuple[list[int], list[int]]:
    """(node per slice, cpu per slice) from 256 NUMA ids then 256 CPU ids."""
    path = Path(path)
    if not path.is_file():
        raise ContractError(f"{path}: no such schedule file")
    ids = _ints(path, 1, path.read_text().replace("\n", " "))
    if len(ids) != 2 * N_SLICES:
        raise ContractError(f"{path}: expected {2 * N_SLICES} ids (256 NUMA ids then 256 CPU ids), got {len(ids)}")
    return ids[:N_SLICES], ids[N_SLICES:]


def read_view(path: Path, n_values: int, required: bool = True) -> Table:
    """Parse a whitespace table with 4 header columns and n_values numbers per row."""
    if not path.is_file():
        if required:
            raise ContractError(f"{path}: no such file; every sweeper directory needs it")
        return Table([], np.zeros((0, n_values)))
    headers, rows = [], []
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        if len(tokens) != N_HEADER + n_values:
            raise ContractError(f"{path}: row {line_no}: expected {N_HEADER + n_values} columns, got {len(tokens)}")
        try:
            rows.append(np.array(tokens[N_HEADER:], dtype=np.float64))
        except ValueError as e:
            raise ContractError(f"{path}: row {line_no}: non-numeric value ({e})") from e
        headers.append(tokens[:N_HEADER])
    values = np.stack(rows) if rows else np.zeros((0, n_values))
    if not np.all(np.isfinite(values)):
        bad = int(np.argwhere(~np.isfinite(values))[0][0])
        raise ContractError(f"{path}: row {bad + 1}: non-finite value")
    return Table(headers, values)


def _diff_rows(cum: np.ndarray) -> np.ndarray:
    """Per-interval values from cumulative rows (the first interval starts at zero)."""
    return np.diff(cum, axis=0, prepend=np.zeros((1, *cum.shape[1:])))


def counters_to_raw(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """data_view values [rows, 4096 + 256] -> (raw counts [rows, 256, 16] with NaN = null, queries [rows, 256]).

    A slice with no samples in an interval gets 0 when its counters did not move (it ran
    nothing) and null when they did (the sums cannot be attributed).
    """
    rows = data.shape[0]
    sums = _diff_rows(data[:, : N_SLICES * N_COUNTERS].reshape(rows, N_SLICES, N_COUNTERS))  # [R, S, C]
    queries = data[:, N_SLICES * N_COUNTERS :]  # [R, S], already per interval
    samples = queries / QUERIES_PER_SAMPLE
    instr = sums[:, :, INSTR_COL]  # [R, S]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_ratio = sums / samples[:, :, None]  # [R, S, C]
        raw = mean_ratio / 1000.0 * instr[:, :, None]
    raw[:, :, INSTR_COL] = instr
    no_samples = samples[:, :, None] == 0
    moved = np.abs(sums) > 0
    raw = np.where(no_samples & ~moved, 0.0, raw)
    raw = np.where(no_samples & moved, np.nan, raw)
    return raw, queries


def _offcore(mem: Table, row: int, hw: HwConfig, interval_s: float) -> dict[str, Any]:
    if row >= mem.values.shape[0]:
        return {}
    v = mem.values[row]
    ch = hw.mc_channels_per_numa
    per_node = lambda a: [float(a[n * ch : (n + 1) * ch].sum() * BYTES_PER_MB * interval_s) for n in range(hw.numa)]  # noqa: E731
    return {
        "imc_read_bytes": per_node(v[:MEM_CHANNELS]),
        "imc_write_bytes": per_node(v[MEM_CHANNELS : 2 * MEM_CHANNELS]),
        # Assumed per-interval byte counts (not rates, not cumulative), as the column names say.
        "link_in_bytes": v[2 * MEM_CHANNELS : 2 * MEM_CHANNELS + LINKS].tolist(),
        "link_out_bytes": v[2 * MEM_CHANNELS + LINKS :].tolist(),
    }


def _check_dirs(kb_dir: Path, hw: HwConfig) -> list[Path]:
    if not kb_dir.is_dir():
        raise ContractError(f"{kb_dir}: no such knowledge-base directory")
    dirs = [kb_dir / str(cpu) for cpu in hw.sweeper_cpus]
    for d in dirs:
        if not d.is_dir():
            raise ContractError(f"{d}: missing sweeper directory (hw config line 3 lists CPU {d.name})")
    if hw.numa * hw.mc_channels_per_numa > MEM_CHANNELS:
        raise ContractError(f"hw config: {hw.numa} nodes x {hw.mc_channels_per_numa} channels exceed the {MEM_CHANNELS} channel columns")
    return dirs


def _merge_dirs(dirs: list[Path]) -> tuple[np.ndarray, np.ndarray, list[list[str]], Table]:
    """Sum raw counts and completed queries over sweeper directories (each covers its own workers)."""
    raw_sum = done_sum = headers = None
    mem = Table([], np.zeros((0, 4 * MEM_CHANNELS + LINKS)))
    for d in dirs:
        data = read_view(d / "data_view.txt", N_SLICES * N_COUNTERS + N_SLICES)
        done = read_view(d / "query-exec_view.txt", N_SLICES)
        if done.values.shape[0] != data.values.shape[0]:
            raise ContractError(f"{d / 'query-exec_view.txt'}: {done.values.shape[0]} rows, but data_view.txt has {data.values.shape[0]}")
        if raw_sum is not None and data.values.shape[0] != raw_sum.shape[0]:
            raise ContractError(f"{d / 'data_view.txt'}: {data.values.shape[0]} rows, other sweeper directories have {raw_sum.shape[0]}")
        raw, _ = counters_to_raw(data.values)
        done_i = _diff_rows(done.values)
        if raw_sum is None:
            raw_sum, done_sum, headers = raw, done_i, data.headers
        else:
            both_null = np.isnan(raw_sum) & np.isnan(raw)
            raw_sum = np.where(both_null, np.nan, np.nan_to_num(raw_sum) + np.nan_to_num(raw))
            done_sum = done_sum + done_i
        m = read_view(d / "mem-channel_view.txt", 2 * MEM_CHANNELS + 2 * LINKS, required=False)
        if m.values.shape[0]:
            mem = m
    assert raw_sum is not None and done_sum is not None and headers is not None, "at least one sweeper directory"
    return raw_sum, done_sum, headers, mem


def legacy_episodes(kb_dir: Path, hw_config: Path, schedule: Path, interval_s: float = 40.0, machine: str | None = None) -> list[dict[str, Any]]:
    """Pure part of the import: one episode dict (pmoss.contracts.snapshot schema) per snapshot row."""
    if not interval_s > 0:
        raise ContractError(f"--interval-s must be positive, got {interval_s}")
    kb_dir = Path(kb_dir)
    hw = read_hw_config(hw_config)
    node, core = read_schedule(schedule)
    raw, done, headers, mem = _merge_dirs(_check_dirs(kb_dir, hw))
    machine = machine or kb_dir.resolve().name
    stamp = now_utc()
    episodes = []
    for r, (config, t_reel, wkload, iam) in enumerate(headers):
        per_slice = {name: _nullable(raw[r, :, c]) for c, name in enumerate(LEGACY_COUNTERS) if name}
        queries = done[r]
        episodes.append({
            "episode_id": episode_id(machine, wkload, "legacy", node, core, "legacy", 0, r),
            "source": "legacy", "machine": machine, "host": machine, "workload": wkload,
            "workload_params": json.dumps({"config": config, "tReel": t_reel, "wkload": wkload, "iam": iam}),
            "dataset": "legacy", "n_records": -1, "schedule_kind": "legacy",
            "schedule_provenance": json.dumps({"generator": "legacy", "file": str(schedule)}),
            "seed": 0, "run_index": r, "n_slices": N_SLICES, "window_s": interval_s,
            "throughput_qps": float(queries.sum() / interval_s),
            **_offcore(mem, r, hw, interval_s),
            "unavailable": list(SOFTWARE_FEATURES), "counter_mode": "legacy", "collector": "pmoss.collect.legacy",
            "timestamp": stamp,
            # Key ranges are not in legacy files: ordinal [i, i + 1) ranges keep slice order.
            "slice_lo": list(range(N_SLICES)), "slice_hi": list(range(1, N_SLICES + 1)),
            "core": core, "node": node, "queries": [int(round(q)) for q in queries],
            **per_slice,
        })  # fmt: skip
    assert set(CORE_FEATURES) <= {n for n in LEGACY_COUNTERS if n}, "every core feature comes from a legacy column"
    return episodes


def _nullable(a: np.ndarray) -> list[float | None]:
    return [None if np.isnan(x) else float(x) for x in a]


def import_legacy(kb_dir: Path, hw_config: Path, schedule: Path, output: Path, interval_s: float = 40.0, machine: str | None = None) -> Path:
    """Convert a legacy knowledge base into one raw snapshot Parquet file under `output`.

    Everything is parsed and validated before anything is written, so malformed input leaves
    `output` untouched. Returns the written file.
    """
    table = episodes_to_table(legacy_episodes(kb_dir, hw_config, schedule, interval_s, machine))
    path = Path(output) / f"legacy-{Path(kb_dir).resolve().name}.parquet"
    write_parquet_atomic(table, path)
    return path


def import_legacy_command(
    kb_dir: Annotated[Path, typer.Argument(help="legacy knowledge base: one directory per sweeper CPU")],
    hw_config: Annotated[Path, typer.Option("--hw-config", help="legacy hw config file (4 lines)")],
    schedule: Annotated[Path, typer.Option("--schedule", help="256 NUMA ids then 256 CPU ids")],
    output: Annotated[Path, typer.Option("--output", help="directory for the raw snapshot Parquet file")],
    interval_s: Annotated[float, typer.Option("--interval-s", help="seconds between snapshot rows")] = 40.0,
) -> None:
    """Import legacy knowledge-base files as raw snapshots (source=legacy)."""
    path = import_legacy(kb_dir, hw_config, schedule, output, interval_s)
    typer.echo(str(path))
