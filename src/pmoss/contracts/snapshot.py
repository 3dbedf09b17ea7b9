"""Raw snapshot contract (docs/design.md §4.3): one row per episode, per-slice values as list columns.

Real (runtime + collector), simulated and legacy episodes all use this schema; only `source`
tells them apart. Counters are raw counts, never ratios; a counter the host cannot provide is a
null list and is named in `unavailable`, never zeros.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pmoss.contracts.checksum import stamp_table, verify_table
from pmoss.contracts.errors import ContractError, brief
from pmoss.contracts.io import writing

SNAPSHOT_SCHEMA_VERSION = 1
SOURCES = ("real", "sim", "legacy")

# The paper's portable core features, grouped as in docs/design.md §4.3.
CORE_FEATURES: tuple[str, ...] = (
    # front-end
    "instructions", "cycles", "l1i_misses", "branch_misses",
    # cache
    "l1d_misses", "llc_misses", "llc_write_misses", "dtlb_misses",
    # memory
    "mem_accesses", "local_dram_loads", "remote_dram_loads", "mem_write_misses",
    "cycles_l3_miss", "cycles_mem_any",
    "task_clock_ns",
)  # fmt: skip
# Counts every host has: software events and the runtime's own per-slice counts.
SOFTWARE_FEATURES: tuple[str, ...] = ("page_faults", "context_switches", "nodes_visited", "keys_scanned")
SLICE_FEATURES: tuple[str, ...] = CORE_FEATURES + SOFTWARE_FEATURES
OFFCORE_NODE = ("imc_read_bytes", "imc_write_bytes")  # one value per NUMA node
OFFCORE_LINK = ("link_in_bytes", "link_out_bytes")  # one value per socket link

OPTIONAL_COLUMNS = ("counter_mode_reason", "width")  # may be absent from a file: read as null

_f64_list = pa.list_(pa.float64())
SNAPSHOT_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("machine", pa.string(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("workload", pa.string(), nullable=False),
        pa.field("workload_params", pa.string(), nullable=False),  # JSON
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("n_records", pa.int64(), nullable=False),
        pa.field("schedule_kind", pa.string(), nullable=False),
        pa.field("schedule_provenance", pa.string(), nullable=False),  # JSON
        pa.field("seed", pa.int64(), nullable=False),
        pa.field("run_index", pa.int32(), nullable=False),
        pa.field("n_slices", pa.int32(), nullable=False),
        pa.field("window_s", pa.float64(), nullable=False),
        pa.field("throughput_qps", pa.float64(), nullable=False),
        *[pa.field(name, _f64_list) for name in OFFCORE_NODE + OFFCORE_LINK],
        pa.field("unavailable", pa.list_(pa.string()), nullable=False),
        pa.field("counter_mode", pa.string(), nullable=False),  # hardware | software | sim | legacy
        pa.field("counter_mode_reason", pa.string()),  # real episodes: why hardware / software (null in older files)
        pa.field("collector", pa.string(), nullable=False),
        pa.field("schema_version", pa.int32(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
        # per slice (each list has n_slices entries)
        pa.field("slice_lo", pa.list_(pa.uint64()), nullable=False),
        pa.field("slice_hi", pa.list_(pa.uint64()), nullable=False),
        pa.field("core", pa.list_(pa.int32()), nullable=False),  # -1 when a set of cores executes it
        pa.field("node", pa.list_(pa.int32()), nullable=False),  # -1 when the OS placed it
        pa.field("width", pa.list_(pa.string())),  # execution-group width per slice (docs/contracts.md); null: the kind's own
        pa.field("queries", pa.list_(pa.int64()), nullable=False),
        *[pa.field(name, _f64_list) for name in SLICE_FEATURES],
    ],
    metadata={"pmoss.schema": "raw-snapshot", "pmoss.schema_version": str(SNAPSHOT_SCHEMA_VERSION)},
)


def episode_id(machine: str, workload: str, dataset: str, node: Sequence[int], core: Sequence[int], kind: str, seed: int, run_index: int,
               width: str | Sequence[str] | None = None) -> str:  # fmt: skip
    """Deterministic id of an episode: the same plan entry always gets the same id. A written width
    (schema 2 schedules that set one) joins the key; schedules without one keep their old ids."""
    parts = [machine, workload, dataset, kind, list(map(int, node)), list(map(int, core)), seed, run_index]
    key = json.dumps(parts if width is None else parts + [width if isinstance(width, str) else list(width)])
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def now_utc() -> datetime:
    return datetime.now(UTC)


# Simulated rows carry this instead of the wall clock: the same params give byte-identical Parquet
# on any machine, so DVC sees an unchanged pipeline (real and legacy rows keep when they were taken).
SIM_TIMESTAMP = datetime(1970, 1, 1, tzinfo=UTC)


def episodes_to_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Build a table from episode dicts; missing optional columns become null, extras are errors."""
    rows = list(rows)
    names = set(SNAPSHOT_SCHEMA.names)
    for r in rows:
        extra = set(r) - names
        if extra:
            raise ContractError(f"episode {r.get('episode_id', '?')}: unknown column(s) {sorted(extra)}")
    cols = {}
    for field in SNAPSHOT_SCHEMA:
        values = [_plain(r.get(field.name)) for r in rows]
        if field.name == "schema_version":
            values = [v if v is not None else SNAPSHOT_SCHEMA_VERSION for v in values]
        cols[field.name] = pa.array(values, type=field.type)
    return pa.Table.from_pydict(cols, schema=SNAPSHOT_SCHEMA)


def _plain(v: Any) -> Any:
    return v.tolist() if isinstance(v, np.ndarray) else v


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Temp file + fsync + rename: a crash never leaves a partial file under `path`. The file carries
    its content checksum (contracts/checksum.py), verified by `read_raw_file`."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            pq.write_table(stamp_table(table), tmp, compression="zstd")
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)  # pyarrow removes the file it failed to write itself
            raise


def raw_files(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ContractError(f"{path}: no such file or directory")
    return sorted(p for p in path.rglob("*.parquet") if not p.name.startswith("."))


def read_raw(path: Path) -> pa.Table:
    """Read every raw snapshot file under `path` (file or directory), checking each file's schema."""
    files = raw_files(path)
    if not files:
        raise ContractError(f"{path}: no raw snapshot Parquet files found")
    return pa.concat_tables([read_raw_file(f) for f in files])


def read_raw_file(path: Path) -> pa.Table:
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:  # a damaged file fails in many ways: one line for all
        raise ContractError(f"{path}: not a readable Parquet file ({brief(e)})") from e
    meta = table.schema.metadata or {}
    if meta.get(b"pmoss.schema") != b"raw-snapshot":
        raise ContractError(f"{path}: not a P-MOSS raw snapshot file (schema metadata missing)")
    version = meta.get(b"pmoss.schema_version", b"0")
    if not version.isdigit():
        raise ContractError(f"{path}: schema metadata 'pmoss.schema_version' is {version!r}, not a number; the file is corrupt")
    if int(version) > SNAPSHOT_SCHEMA_VERSION:
        raise ContractError(f"{path}: field 'schema_version': {int(version)} is newer than this pmoss ({SNAPSHOT_SCHEMA_VERSION}); upgrade pmoss")
    verify_table(table, path)  # before any cast: the digest is of the file's own columns
    for name in OPTIONAL_COLUMNS:  # added after files of this schema version were written: null there
        if name not in table.schema.names:
            table = table.append_column(SNAPSHOT_SCHEMA.field(name), pa.nulls(table.num_rows, SNAPSHOT_SCHEMA.field(name).type))
    missing = [n for n in SNAPSHOT_SCHEMA.names if n not in table.schema.names]
    if missing:
        raise ContractError(f"{path}: field '{missing[0]}' is missing")
    return table.select(SNAPSHOT_SCHEMA.names).cast(SNAPSHOT_SCHEMA)


# ---- validation ------------------------------------------------------------------------------------
LIST_COLUMNS = ("slice_lo", "slice_hi", "core", "node", "queries") + SLICE_FEATURES

MAX_PROBLEMS_PER_CHECK = 5  # per file and check: enough to see the pattern, never millions of lines


def check_file(f: Path, t: pa.Table, seen: dict[str, Path]) -> list[str]:
    """Problems of one raw file, including episode ids already `seen` in another file (updates `seen`)."""
    problems = [f"{f}: {p}" for p in _check_table(t)]
    for eid in t["episode_id"].to_pylist():
        if eid in seen:
            problems.append(f"{f}: episode {eid} duplicates one in {seen[eid]}")
        seen[eid] = f
    return problems


def _check_table(t: pa.Table) -> list[str]:
    """Episode-level and per-slice checks, one vectorised pass per column."""
    ids, out = t["episode_id"].to_pylist(), []

    def flag(bad: np.ndarray, msg: Callable[[int], str]) -> None:
        out.extend(f"episode {ids[i]}: {msg(i)}" for i in np.flatnonzero(bad)[:MAX_PROBLEMS_PER_CHECK])

    version, qps = t["schema_version"].to_numpy(), t["throughput_qps"].to_numpy()
    flag(version > SNAPSHOT_SCHEMA_VERSION, lambda i: f"field 'schema_version' {version[i]} is newer than this pmoss")
    sources = np.asarray(t["source"].to_pylist(), dtype=object)
    flag(~np.isin(sources, SOURCES), lambda i: f"field 'source' is '{sources[i]}'")
    flag(~(qps > 0), lambda i: f"field 'throughput_qps' is {qps[i]}, must be > 0")
    unavailable = [set(u) for u in t["unavailable"].to_pylist()]
    for col in LIST_COLUMNS:
        _check_list_column(t, col, np.asarray([col in u for u in unavailable], dtype=bool), flag)
    return out


def _check_list_column(t: pa.Table, col: str, listed: np.ndarray, flag: Callable[..., None]) -> None:
    arr = t[col].combine_chunks()
    null, n = arr.is_null().to_numpy(zero_copy_only=False), t["n_slices"].to_numpy()
    flag(null & ~listed, lambda i: f"field '{col}' is null but not listed in 'unavailable'")
    flag(~null & listed, lambda i: f"field '{col}' is listed unavailable but has values")
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy()
    bad_len = ~null & (lengths != n)
    flag(bad_len, lambda i: f"field '{col}' has {lengths[i]} slices, n_slices is {n[i]}")
    if col in SLICE_FEATURES + ("queries",):
        values = arr.flatten().to_numpy(zero_copy_only=False).astype(np.float64)  # null elements -> NaN
        bad = np.zeros(len(null), dtype=bool)
        bad[pc.list_parent_indices(arr).to_numpy()[~(values >= 0)]] = True  # negative or NaN
        flag(bad & ~bad_len, lambda i: f"field '{col}' has a negative, NaN or null count")
