"""`pmoss collect`: run a plan's episodes on a backend and write raw snapshot Parquet.

Output: `<out>/source=<src>/machine=<m>/workload=<w>/part-<hash>.parquet`, each file written
atomically by the driver. Resumable: the episode ids already present under `<out>` are skipped, so
re-running an interrupted plan finishes it without duplicating an episode.

Work is cut into chunks of one cell (machine, workload, dataset) each: one vectorised backend call
and one output file per chunk. `--ray` runs the chunks as Ray tasks; a chunk whose machine is bound
to a testbed host (pool field `hosts`) asks for the custom resource `host:<name>`, so it runs only
there. `--append DIR` adds validated raw episodes from elsewhere (e.g. schedule kind `learned`,
produced by serving a model) to the same tree — the fine-tuning dataset grows that way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import typer
from tqdm import tqdm

from pmoss.bench import Spread, ratio_spread, verdict
from pmoss.collect.plan import EpisodeSpec, Pool, check_memory, expand, load_pool
from pmoss.contracts.errors import ContractError
from pmoss.contracts.policies import generate
from pmoss.contracts.schedule import Schedule
from pmoss.contracts.snapshot import (
    SNAPSHOT_SCHEMA,
    SNAPSHOT_SCHEMA_VERSION,
    episode_id,
    raw_files,
    read_raw_file,
    write_parquet_atomic,
)

CHUNK = 256  # episodes per backend call and per Parquet file: bounds memory and the work lost to a kill
RAY_WAIT_S = 600.0  # no chunk finished for this long: report the stuck hosts instead of hanging

Chunk = list[tuple[EpisodeSpec, Schedule]]


class CollectError(ContractError):
    """Collection cannot go on (unknown machine, unreachable host, ...); the message says which."""


SearchKey = tuple[str, str, str, int, int, int, tuple[int, ...]]


def schedule_for(spec: EpisodeSpec, machine: Any, searched: dict[SearchKey, dict[int, Schedule]]) -> Schedule:
    """The episode's schedule; a search episode's comes from `searched` (see `searches`)."""
    if spec.kind == "search":
        return searched[_search_key(spec)][spec.budget]  # type: ignore[index]
    return generate(spec.kind, machine, spec.n_slices, seed=spec.schedule_seed)  # type: ignore[arg-type]


def _search_key(spec: EpisodeSpec) -> SearchKey:
    return (spec.machine, spec.workload, spec.dataset, spec.n_slices, spec.n_records, spec.schedule_seed, spec.budgets)


def _search(key: SearchKey) -> dict[int, Schedule]:
    """One oracle search over execution groups, read at every budget (one search serves a run's episodes)."""
    from pmoss.sim.oracle import trajectory

    machine, workload, dataset, n_slices, n_records, seed, budgets = key
    path = trajectory(machine, workload, dataset, n_slices, seed=seed, budgets=list(budgets), n_records=n_records, kind="search")
    return {b: s for b, (s, _) in zip(budgets, path, strict=True)}


def searches(specs: list[EpisodeSpec], workers: int | None = None, progress: str | None = None, quiet: bool = False) -> dict[SearchKey, dict[int, Schedule]]:
    """Every distinct search the plan's search episodes read, a worker process per core by default
    (`on_cores`): the demo's 16 searches were most of `collect`'s time (19 -> 10 s on 2 cores).
    `progress`: the title of their bar or progress lines (`on_cores`)."""
    from pmoss.sim.oracle import on_cores

    keys = list(dict.fromkeys(_search_key(s) for s in specs if s.kind == "search"))
    return dict(zip(keys, on_cores(_search, [(k,) for k in keys], workers, progress, "search", quiet), strict=True))


def spec_id(spec: EpisodeSpec, schedule: Schedule) -> str:
    return episode_id(spec.machine, spec.workload, spec.dataset, schedule.node, schedule.core, spec.kind, spec.seed, spec.run_index, schedule.width)


def done_ids(out: Path) -> set[str]:
    """Episode ids already collected under `out` (only complete files exist there). Each file is read
    whole and checked against its checksum: a corrupt part must not count its episodes as done."""
    if not out.exists():
        return set()
    ids: set[str] = set()
    for f in raw_files(out):
        try:
            ids.update(read_raw_file(f)["episode_id"].to_pylist())
        except ContractError as e:
            raise ContractError(f"{e}; or delete {f.name} and re-run collect") from e
    return ids


def load_backend_machine(backend: str, name: str, source: str = "pool", descriptor: str | None = None) -> Any:
    if backend == "runtime":
        return runtime_machine(name, descriptor)
    if backend == "sim":
        from pmoss.sim import UnknownMachineError, list_machines, load_sim_machine

        try:
            return load_sim_machine(name)
        except UnknownMachineError:
            raise CollectError(f"{source}: field 'machines': unknown simulated machine '{name}' (known: {', '.join(list_machines())}, gen-<seed> for a generated one)") from None
    raise CollectError(f"{source}: field 'backend': '{backend}' is not one of sim, runtime")


def runtime_machine(name: str, descriptor: str | None) -> Any:
    """A real host's descriptor: its file if the pool names one, else this host's sysfs."""
    from pmoss.collect.topology import discover
    from pmoss.contracts.machine import load_machine

    return load_machine(Path(descriptor)) if descriptor else discover(name=name)


def pending(pool: Pool, out: Path, source: str = "pool", progress: bool = True) -> Chunk:
    """The plan's episodes not yet under `out`, with their schedules, in plan order (`progress`: a bar
    for the oracle searches on a terminal, else progress lines)."""
    check_memory(pool, lambda field: f"{source}: field '{field}'", CHUNK)
    machines = {name: load_backend_machine(pool.backend, name, source, pool.descriptors.get(name)) for name in pool.machines}
    finished = done_ids(out)
    specs = list(expand(pool))
    searched = searches(specs, progress=f"collect {pool.name}: oracle searches", quiet=not progress)
    todo = []
    for spec in specs:
        schedule = schedule_for(spec, machines[spec.machine], searched)
        if spec_id(spec, schedule) not in finished:
            todo.append((spec, schedule))
    return todo


def plan_chunks(todo: Chunk, size: int = CHUNK) -> list[Chunk]:
    """Chunks of at most `size` episodes of one cell, in plan order (deterministic: same plan, same chunks)."""
    cells: dict[tuple, Chunk] = {}
    for spec, schedule in todo:
        cells.setdefault(spec.cell, []).append((spec, schedule))
    return [eps[i : i + size] for eps in cells.values() for i in range(0, len(eps), size)]


def run_chunk(chunk: Chunk) -> pa.Table:
    """Run one chunk (one cell) on its backend; the plan owns the episode ids, whatever the backend."""
    spec = chunk[0][0]
    if spec.backend == "runtime":
        return rows_to_table(run_runtime_chunk(chunk))
    from pmoss.sim import simulate_batch

    schedules = [s for _, s in chunk]
    rows = simulate_batch(spec.machine, spec.workload, spec.dataset, schedules, seeds=[s.seed for s, _ in chunk],
                          run_indices=[s.run_index for s, _ in chunk], n_records=spec.n_records, window_s=spec.window_s)  # fmt: skip
    for (s, schedule), row in zip(chunk, rows, strict=True):
        row["episode_id"] = spec_id(s, schedule)
    return rows_to_table(rows)


def run_runtime_chunk(chunk: Chunk) -> list[dict[str, Any]]:
    """One cell on this host's native runtime: load the keys once, then per episode enforce its
    schedule (validate -> migrate -> swap) and run the workload for the window."""
    from pmoss.collect.testbed import Testbed

    spec = chunk[0][0]
    bed = Testbed(runtime_machine(spec.machine, spec.descriptor), spec.n_records, spec.dataset, spec.n_slices)
    rows: dict[int, dict[str, Any]] = {}
    for i in interleave_kinds(chunk):
        s, schedule = chunk[i]
        bed.enforce(schedule)
        rows[i] = bed.run(s.workload, s.window_s, seed=s.seed, run_index=s.run_index)
        rows[i]["episode_id"] = spec_id(s, schedule)
    return [rows[i] for i in range(len(chunk))]  # plan order, whatever order they ran in


def interleave_kinds(chunk: Chunk) -> list[int]:
    """Indexes of a chunk's episodes round-robin over schedule kinds (A0 B0 C0 A1 B1 ...), so drift
    in a shared host's load hits every kind alike instead of one kind's whole block."""
    by_kind: dict[str, list[int]] = {}
    for i, (_, schedule) in enumerate(chunk):
        by_kind.setdefault(schedule.kind, []).append(i)
    rounds = max(map(len, by_kind.values()), default=0)
    return [eps[r] for r in range(rounds) for eps in by_kind.values() if r < len(eps)]


def kind_report(tables: list[pa.Table]) -> list[str]:
    """Per cell of real episodes: each kind's throughput as median [min-max] over its episodes,
    and each kind against the cell's best kind (by median) as a ratio with its spread and a
    verdict ("within noise" when the range includes 1.0). The episodes of a kind are repeats in
    the sense that matters here (same cell, interleaved with the other kinds); for generated
    kinds they also differ in their schedule seed."""
    cells: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for t in tables:
        for row in t.select(["machine", "workload", "dataset", "schedule_kind", "throughput_qps"]).to_pylist():
            cell = cells.setdefault((row["machine"], row["workload"], row["dataset"]), {})
            cell.setdefault(row["schedule_kind"], []).append(row["throughput_qps"])
    lines = []
    for (machine, workload, dataset), kinds in cells.items():
        best = max(kinds, key=lambda k: Spread.of(kinds[k]).median)
        lines.append(f"{machine} {workload} {dataset}: Mq/s median [min-max]; vs best ({best})")
        for kind, v in sorted(kinds.items(), key=lambda kv: -Spread.of(kv[1]).median):
            r = ratio_spread(v, kinds[best])
            vs = "best" if kind == best else f"{r.format(digits=3)} {verdict(r)}"
            lines.append(f"  {kind:<14} {Spread.of(v).format(1e6)}  n={len(v)}  {vs}")
    return lines


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Episode dicts -> a SNAPSHOT_SCHEMA table, list columns built from flat numpy buffers.

    Same result as `snapshot.episodes_to_table`, without a Python object per slice value (that
    path spent most of collect's time for 256-slice episodes)."""
    names = set(SNAPSHOT_SCHEMA.names)
    for r in rows:
        if set(r) - names:
            raise ContractError(f"episode {r.get('episode_id', '?')}: unknown column(s) {sorted(set(r) - names)}")
    cols = []
    for field in SNAPSHOT_SCHEMA:
        values = [r.get(field.name) for r in rows]
        if field.name == "schema_version":
            values = [SNAPSHOT_SCHEMA_VERSION if v is None else v for v in values]
        numeric_list = pa.types.is_list(field.type) and not pa.types.is_string(field.type.value_type)
        cols.append(_list_array(values, field.type) if numeric_list else pa.array(values, type=field.type))
    return pa.Table.from_arrays(cols, schema=SNAPSHOT_SCHEMA)


def _list_array(values: list[Any], typ: pa.ListType) -> pa.Array:
    """A list array from per-row sequences (None = a null list), via one flat buffer."""
    dtype = typ.value_type.to_pandas_dtype()
    parts = [np.asarray(v, dtype=dtype) for v in values if v is not None]
    lengths = np.asarray([0 if v is None else len(v) for v in values], dtype=np.int32)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    flat = pa.array(np.concatenate(parts) if parts else np.zeros(0, dtype), type=typ.value_type)
    mask = pa.array([v is None for v in values], type=pa.bool_())
    return pa.ListArray.from_arrays(offsets, flat, type=typ, mask=mask if any(v is None for v in values) else None)


def write_chunk(out: Path, table: pa.Table) -> Path:
    """One chunk -> one Parquet file named by its episode ids (the same chunk always gets the same name)."""
    source, machine, workload = (table[c][0].as_py() for c in ("source", "machine", "workload"))
    name = hashlib.sha256("".join(table["episode_id"].to_pylist()).encode()).hexdigest()[:16]
    path = out / f"source={source}" / f"machine={machine}" / f"workload={workload}" / f"part-{name}.parquet"
    write_parquet_atomic(table, path)
    return path


def remove_stale_temps(out: Path) -> None:
    """Temp files a killed writer left behind (`write_parquet_atomic` names them `.<file>.*.tmp`).

    Readers already ignore them; removing them keeps a resumed tree identical to a clean one.
    Assumes one collector per output tree, as resuming does anyway."""
    if out.is_dir():
        for p in out.rglob(".part-*.tmp"):
            p.unlink(missing_ok=True)


def run_local(chunks: list[Chunk]) -> Iterator[pa.Table]:
    for chunk in chunks:
        yield run_chunk(chunk)


def run_ray(chunks: list[Chunk], address: str | None, wait_s: float) -> Iterator[pa.Table]:
    """Chunks as Ray tasks, results in completion order; the driver alone writes files.

    A chunk bound to a host asks for a sliver of `host:<name>` (so any number of chunks share the
    host's CPUs). A request no node can satisfy would wait forever, so hosts are checked up front
    and `ray.wait` gives up after `wait_s` without progress, naming the hosts still waited for."""
    import ray  # seconds to import: only when asked for

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, log_to_driver=False)
    try:
        check_hosts(chunks, ray.cluster_resources())
        task = ray.remote(run_chunk)
        refs = {task.options(**task_options(c[0][0])).remote(c): c for c in chunks}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=wait_s)
            if not ready:
                _give_up(ray, refs, wait_s)
            chunk = refs.pop(ready[0])
            yield _ray_result(ray, ready[0], chunk)
    finally:
        if started:
            ray.shutdown()


def task_options(spec: EpisodeSpec) -> dict[str, Any]:
    return {"num_cpus": 1, "resources": {f"host:{spec.host}": 0.01} if spec.host else {}, "max_retries": 1}


def check_hosts(chunks: list[Chunk], resources: dict[str, float]) -> None:
    for chunk in chunks:
        spec = chunk[0][0]
        if spec.host and f"host:{spec.host}" not in resources:
            raise CollectError(f"hosts: machine '{spec.machine}' is bound to host '{spec.host}' but no Ray node offers resource "
                               f"'host:{spec.host}' (start it there with: ray start --address HEAD --resources '{{\"host:{spec.host}\": 1}}')")  # fmt: skip


def _give_up(ray: Any, refs: dict[Any, Chunk], wait_s: float) -> None:
    hosts = sorted({c[0][0].host or "any node" for c in refs.values()})
    for ref in refs:
        ray.cancel(ref, force=True)
    raise CollectError(f"ray: no chunk finished in {wait_s:g} s; {len(refs)} chunk(s) still wait for host(s) {', '.join(hosts)} "
                       "(is the host's node up? raise --ray-wait for slow backends); finished chunks are kept, re-run to resume")  # fmt: skip


def _ray_result(ray: Any, ref: Any, chunk: Chunk) -> pa.Table:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, ContractError):  # a user error inside the task: show it as one
            raise e.cause from None
        spec = chunk[0][0]
        raise CollectError(f"ray: chunk of {len(chunk)} episode(s) {spec.machine}/{spec.workload} failed on {spec.host or 'a worker'}: {e.cause!r}") from e


def collect(pool: Pool, out: Path, progress: bool = True, ray_address: str | None = None, use_ray: bool = False,
            wait_s: float = RAY_WAIT_S, source: str = "pool", written_tables: list[pa.Table] | None = None) -> int:  # fmt: skip
    """Run every pending episode of `pool`; returns how many episodes were written (and appends
    their tables to `written_tables` when given)."""
    chunks = plan_chunks(pending(pool, out, source, progress))
    return run_chunks(chunks, out, f"collect {pool.name}", progress, ray_address, use_ray, wait_s, written_tables)


def run_chunks(chunks: list[Chunk], out: Path, desc: str, progress: bool = True, ray_address: str | None = None, use_ray: bool = False,
               wait_s: float = RAY_WAIT_S, written_tables: list[pa.Table] | None = None) -> int:  # fmt: skip
    """Run the chunks locally or as Ray tasks and write one file per chunk under `out`; returns the
    episodes written. `progress`: a bar on a terminal; quiet or stdout no terminal (a DVC stage), a
    line every PMOSS_PROGRESS_S seconds instead (progress.py)."""
    from pmoss.progress import Ticker, line_interval, show_bar

    remove_stale_temps(out)
    tables = run_ray(chunks, ray_address, wait_s) if use_ray and chunks else run_local(chunks)  # nothing pending: no cluster
    written, total, bar = 0, sum(map(len, chunks)), show_bar(progress)
    with Ticker(desc, total, "episode", line_interval(bar)) as ticker, tqdm(total=total, desc=desc, unit="ep", disable=not bar) as tq:
        for table in tables:
            write_chunk(out, table)
            written += table.num_rows
            tq.update(table.num_rows)
            ticker.advance(table.num_rows)
            if written_tables is not None:
                written_tables.append(table)
    return written


def append_raw(src: Path, out: Path, machines: list[str], kinds: tuple[str, ...] = ("learned",)) -> int:
    """Copy raw episodes of `kinds` on `machines` from `src` into `out` (validated, no duplicates).

    This is how episodes produced by model schedules (kind `learned`) join the fine-tuning data.
    Every file is checked before anything is written, so a bad file leaves `out` untouched. An empty
    `src` adds nothing; a missing one is an error (a wrong path would silently add nothing)."""
    if not Path(src).is_dir():
        raise CollectError(f"--append {src}: no such directory")
    from pmoss.contracts.snapshot import check_file

    have, seen, keep = done_ids(out), {}, []
    for f in raw_files(src):
        t = read_raw_file(f)  # names the file on a newer schema or a missing column
        problems = check_file(f, t, seen)
        if problems:
            raise CollectError(problems[0])
        wanted = pc.and_(pc.is_in(t["machine"], pa.array(machines)), pc.is_in(t["schedule_kind"], pa.array(list(kinds))))
        keep.append(t.filter(pc.and_(wanted, pc.invert(pc.is_in(t["episode_id"], pa.array(sorted(have), pa.string()))))))
    added = 0
    for cell in (c for t in keep for c in _cells(t)):
        write_chunk(out, cell)
        added += cell.num_rows
    return added


def _cells(t: pa.Table) -> Iterator[pa.Table]:
    """Split a table by (source, machine, workload): the output tree is partitioned that way."""
    keys = sorted(set(zip(t["source"].to_pylist(), t["machine"].to_pylist(), t["workload"].to_pylist(), strict=True)))
    for src, m, w in keys:
        sel = pc.and_(pc.and_(pc.equal(t["source"], src), pc.equal(t["machine"], m)), pc.equal(t["workload"], w))
        yield t.filter(sel)


def collect_command(
    pool_file: Annotated[Path, typer.Argument(help="Pool / plan YAML (datasets/pools/*.yaml).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Root of the raw snapshot tree.")] = Path("datasets/raw"),
    episodes_per_cell: Annotated[Optional[int], typer.Option(help="Override the pool's episodes per cell.")] = None,
    n_slices: Annotated[Optional[int], typer.Option(help="Override the pool's slice count.")] = None,
    search_runs: Annotated[Optional[int], typer.Option(help="Override the pool's oracle searches per cell (kind search; 0 = the paper's mix only).")] = None,
    search_budgets: Annotated[Optional[str], typer.Option(help="Override the pool's search budgets, comma-separated model evaluations (e.g. 250,1000,4000).")] = None,
    runs_per_shared_kind: Annotated[Optional[int], typer.Option(help="Override the pool's runs of each shared kind per cell (os-default, ...: the snapshots a host starts from).")] = None,
    ray: Annotated[bool, typer.Option("--ray", help="Run chunks as Ray tasks (RAY_ADDRESS or --ray-address, else a local cluster).")] = False,
    ray_address: Annotated[Optional[str], typer.Option(help="Ray cluster to attach to (e.g. auto, ray://head:10001); implies --ray.")] = None,
    ray_wait: Annotated[float, typer.Option(help="Seconds without any finished chunk before giving up (names the stuck hosts).")] = RAY_WAIT_S,
    append: Annotated[Optional[list[Path]], typer.Option(help="Also add raw episodes of kind 'learned' for the pool's machines from this directory.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar (a line every PMOSS_PROGRESS_S seconds, default 30, instead).")] = False,
) -> None:
    """Run a plan's episodes (skipping finished ones) and write raw snapshot Parquet."""
    budgets = None
    if search_budgets is not None:
        try:
            budgets = [int(b) for b in search_budgets.split(",")]
        except ValueError:
            raise typer.BadParameter(f"'{search_budgets}': expected comma-separated integers", param_hint="--search-budgets") from None
    flags = {"episodes_per_cell": episodes_per_cell, "n_slices": n_slices, "search_runs": search_runs, "search_budgets": budgets,
             "runs_per_shared_kind": runs_per_shared_kind}
    pool = load_pool(pool_file, **flags)
    check_memory(pool, lambda f: f"--{f.replace('_', '-')} {flags[f]}" if flags.get(f) is not None else f"{pool_file}: field '{f}'", CHUNK)
    tables: list[pa.Table] = []
    n = collect(pool, output, progress=not quiet, ray_address=ray_address, use_ray=ray or ray_address is not None, wait_s=ray_wait,
                source=str(pool_file), written_tables=tables if pool.backend == "runtime" else None)  # only the runtime's report reads them back
    typer.echo(f"{pool.name}: wrote {n} new episode(s) under {output}")
    if pool.backend == "runtime":  # real hosts are noisy: every figure with its spread
        for line in kind_report(tables):
            typer.echo(line)
    for src in append or []:
        typer.echo(f"{src}: appended {append_raw(src, output, pool.machines)} episode(s) of kind 'learned'")
