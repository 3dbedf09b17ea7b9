"""`pmoss collect`: run a plan's episodes on a backend and write raw snapshot Parquet.

Output: `<out>/source=<src>/machine=<m>/workload=<w>/part-<hash>.parquet`, each file written
atomically. Resumable: the episode ids already present under `<out>` are skipped, so re-running
an interrupted plan finishes it without duplicating an episode.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import pyarrow.parquet as pq
import typer
from tqdm import tqdm

from pmoss.errors import ContractError
from pmoss.plan import EpisodeSpec, Pool, expand, load_pool
from pmoss.policies import generate
from pmoss.schedule import Schedule
from pmoss.snapshot import episode_id, episodes_to_table, raw_files, write_parquet_atomic
from pmoss.workload import get_workload

CHUNK = 512  # episodes per Parquet file: bounds the work lost to a kill


def schedule_for(spec: EpisodeSpec, machine: Any) -> Schedule:
    return generate(spec.kind, machine, spec.n_slices, seed=spec.schedule_seed)  # type: ignore[arg-type]


def spec_id(spec: EpisodeSpec, schedule: Schedule) -> str:
    return episode_id(spec.machine, spec.workload, spec.dataset, schedule.node, schedule.core, spec.kind, spec.seed, spec.run_index)


def done_ids(out: Path) -> set[str]:
    """Episode ids already collected under `out` (only complete files exist there)."""
    if not out.exists():
        return set()
    ids: set[str] = set()
    for f in raw_files(out):
        try:
            ids.update(pq.read_table(f, columns=["episode_id"]).column(0).to_pylist())
        except OSError as e:
            raise ContractError(f"{f}: unreadable raw file ({e}); delete it and re-run collect") from e
    return ids


def run_sim(specs: list[EpisodeSpec], schedules: list[Schedule]) -> list[dict[str, Any]]:
    """Simulate episodes (the sim backend). One machine per call keeps descriptor loading cheap."""
    from pmoss.sim import load_sim_machine, simulate

    rows, machines = [], {}
    for spec, schedule in zip(specs, schedules, strict=True):
        m = machines.get(spec.machine) or machines.setdefault(spec.machine, load_sim_machine(spec.machine))
        rows.append(simulate(m, get_workload(spec.workload), spec.dataset, schedule, seed=spec.seed,
                             run_index=spec.run_index, n_records=spec.n_records, window_s=spec.window_s))  # fmt: skip
    return rows


def load_backend_machine(backend: str, name: str) -> Any:
    if backend == "sim":
        from pmoss.sim import load_sim_machine

        return load_sim_machine(name)
    raise ContractError(f"backend: '{backend}' is not available in this build (use 'sim')")


def pending(pool: Pool, out: Path) -> Iterator[tuple[EpisodeSpec, Schedule]]:
    """The plan's episodes not yet under `out`, with their schedules."""
    machines = {name: load_backend_machine(pool.backend, name) for name in pool.machines}
    finished = done_ids(out)
    for spec in expand(pool):
        schedule = schedule_for(spec, machines[spec.machine])
        if spec_id(spec, schedule) not in finished:
            yield spec, schedule


def write_chunk(out: Path, source: str, rows: list[dict[str, Any]]) -> None:
    by_cell: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_cell[(r["machine"], r["workload"])].append(r)
    for (machine, workload), cell in by_cell.items():
        name = hashlib.sha256("".join(r["episode_id"] for r in cell).encode()).hexdigest()[:16]
        path = out / f"source={source}" / f"machine={machine}" / f"workload={workload}" / f"part-{name}.parquet"
        write_parquet_atomic(episodes_to_table(cell), path)


def _chunks(items: Iterable[Any], n: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for it in items:
        chunk.append(it)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def collect(pool: Pool, out: Path, progress: bool = True) -> int:
    """Run every pending episode of `pool`; returns how many episodes were written."""
    todo = list(pending(pool, out))
    written = 0
    with tqdm(total=len(todo), desc=f"collect {pool.name}", unit="ep", disable=not progress) as bar:
        for chunk in _chunks(todo, CHUNK):
            specs, schedules = [s for s, _ in chunk], [s for _, s in chunk]
            rows = run_sim(specs, schedules)
            for spec, schedule, row in zip(specs, schedules, rows, strict=True):
                row["episode_id"] = spec_id(spec, schedule)  # the plan owns ids, whatever the backend
            write_chunk(out, "sim", rows)
            written += len(rows)
            bar.update(len(rows))
    return written


def collect_command(
    pool_file: Annotated[Path, typer.Argument(help="Pool / plan YAML (datasets/pools/*.yaml).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Root of the raw snapshot tree.")] = Path("datasets/raw"),
    episodes_per_cell: Annotated[Optional[int], typer.Option(help="Override the pool's episodes per cell.")] = None,
    n_slices: Annotated[Optional[int], typer.Option(help="Override the pool's slice count.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Run a plan's episodes (skipping finished ones) and write raw snapshot Parquet."""
    pool = load_pool(pool_file, episodes_per_cell=episodes_per_cell, n_slices=n_slices)
    n = collect(pool, output, progress=not quiet)
    typer.echo(f"{pool.name}: wrote {n} new episode(s) under {output}")
