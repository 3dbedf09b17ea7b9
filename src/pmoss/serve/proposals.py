"""`pmoss propose`: the policy's own candidates, measured on the testbed — the critic's training data.

The critic ranks the policy's greedy schedule, its k samples and the group heuristics from one
snapshot (rollout.candidate_pool). Trained on the offline pool alone it has never seen a schedule
like the policy's samples and ranks them by extrapolation. This command closes that gap the way
the post-training loop does (the model proposes, the testbed measures, the episodes are appended):
for every cell of a pool it reads S of the pool's own raw snapshots under `os-default` (the state a
host runs before P-MOSS schedules it, and the evaluation's input), builds the candidate pool
inference builds from each, and runs every distinct candidate once on the pool's backend with a
training seed of its own. Output: raw episodes of kind `learned` (provenance: generator
`pmoss propose`, the model, the candidate's name, the snapshot), resumable like `pmoss collect`.
Evaluation snapshots and seeds are never read: the inputs are training snapshots only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import pyarrow as pa
import pyarrow.compute as pc
import typer

from pmoss.collect.driver import Chunk, CollectError, done_ids, load_backend_machine, plan_chunks, run_chunks, spec_id
from pmoss.collect.plan import EpisodeSpec, Pool, derive_seed, load_pool

RUNNING = "os-default"  # the kind whose snapshots the proposals are made from (what inference reads)


def snapshots_of(raw: pa.Table, pool: Pool, n_slices: int, per_cell: int) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """The first `per_cell` os-default snapshots (by episode id) of each pool cell at the model's
    slice count; a cell without one is an error that names it."""
    running: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in raw.filter(pc.and_(pc.equal(raw["schedule_kind"], RUNNING), pc.equal(raw["n_slices"], n_slices))).to_pylist():
        running.setdefault((r["machine"], r["workload"], r["dataset"]), []).append(r)
    out = {}
    for cell in ((m, w, d) for m in pool.machines for w in pool.workloads for d in pool.datasets):
        if cell not in running:
            raise CollectError(f"--snapshots: no {RUNNING} snapshot of {'|'.join(cell)} with {n_slices} slices "
                               f"(collect the pool with '{RUNNING}' in shared_kinds and --n-slices {n_slices})")  # fmt: skip
        out[cell] = sorted(running[cell], key=lambda r: r["episode_id"])[:per_cell]
    return out


def proposal_chunks(bundle: Any, pool: Pool, snapshots: dict[tuple[str, str, str], list[dict[str, Any]]], k: int, candidates: str,
                    model_name: str, out: Path, progress: bool = True) -> Chunk:  # fmt: skip
    """(spec, schedule) of every distinct candidate of every snapshot not yet under `out`; without a
    bar (`progress` false or stdout no terminal: a DVC stage), a line every PMOSS_PROGRESS_S seconds."""
    from pmoss.learn.bundle import ROLLOUT_SETTINGS
    from pmoss.learn.rollout import candidate_pool
    from pmoss.progress import Ticker, line_interval, show_bar

    settings = {"target_factor": 2.0, "temperature": 1.0, **{key: v for key, v in bundle.info.get("inference", {}).items()
                                                             if key in (*ROLLOUT_SETTINGS, "temperature")}}  # fmt: skip
    machines = {m: load_backend_machine(pool.backend, m, "pool", pool.descriptors.get(m)) for m in pool.machines}
    finished, todo = done_ids(out), []
    with Ticker(f"propose {pool.name}: candidates", sum(map(len, snapshots.values())), "snapshot", line_interval(show_bar(progress))) as ticker:
        for (machine, workload, dataset), rows in snapshots.items():
            for i, row in enumerate(rows):
                provenance = {"generator": "pmoss propose", "model": model_name, "snapshot": row["episode_id"]}
                found = candidate_pool(bundle, machines[machine], row, k=k, candidates=candidates, seed=i, **settings)
                seen: set[tuple] = set()
                for name, schedule in found.items():
                    key = (tuple(schedule.node), tuple(schedule.core), tuple(schedule.widths()))
                    if key in seen:  # a sample equal to the greedy schedule (or to another sample): measured once
                        continue
                    seen.add(key)
                    schedule = schedule.model_copy(update={"provenance": {**provenance, "candidate": name}})
                    seed = derive_seed("propose", machine, workload, dataset, row["episode_id"], name)
                    spec = EpisodeSpec(machine=machine, workload=workload, dataset=dataset, kind="learned", schedule_seed=i, seed=seed, run_index=0,
                                       n_slices=row["n_slices"], n_records=pool.n_records, window_s=pool.window_s, backend=pool.backend,
                                       host=pool.hosts.get(machine), descriptor=pool.descriptors.get(machine))  # fmt: skip
                    if spec_id(spec, schedule) not in finished:
                        todo.append((spec, schedule))
                ticker.advance()
    return todo


def propose_command(
    pool_file: Annotated[Path, typer.Argument(help="Pool YAML whose cells (machines x workloads x datasets) get proposals.")],
    model: Annotated[Path, typer.Option(help="The policy's model bundle (e.g. models/base).")],
    snapshots: Annotated[Path, typer.Option(help="Raw snapshots of the pool (its os-default episodes are the policy's inputs).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Root of the raw snapshot tree the proposals are written to.")],
    per_cell: Annotated[int, typer.Option(min=1, help="os-default snapshots per cell to propose from.")] = 4,
    k: Annotated[int, typer.Option(min=1, help="Samples per snapshot next to the greedy schedule (as the critic ranks at inference).")] = 16,
    candidates: Annotated[str, typer.Option(help="samples | samples+heuristics (the group heuristics from the snapshot are measured too).")] = "samples+heuristics",
    n_slices: Annotated[Optional[int], typer.Option(help="Override the pool's slice count (must be the model's).")] = None,
    ray: Annotated[bool, typer.Option("--ray", help="Run the episodes as Ray tasks (RAY_ADDRESS or --ray-address, else a local cluster).")] = False,
    ray_address: Annotated[Optional[str], typer.Option(help="Ray cluster to attach to; implies --ray.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar (a line every PMOSS_PROGRESS_S seconds, default 30, instead).")] = False,
) -> None:
    """Measure the policy's candidates (greedy, k samples, heuristics) from the pool's training
    snapshots on the testbed: raw episodes of kind 'learned' for the critic's dataset."""
    from pmoss.contracts.snapshot import read_raw
    from pmoss.learn.bundle import load_bundle
    from pmoss.learn.rollout import CANDIDATE_SETS, algo_of

    if candidates not in CANDIDATE_SETS:
        raise typer.BadParameter(f"'{candidates}' is not one of {', '.join(CANDIDATE_SETS)}", param_hint="--candidates")
    pool = load_pool(pool_file, n_slices=n_slices)
    bundle = load_bundle(model)
    algo_of(bundle)  # a critic or an unknown model proposes nothing: fails here, naming its algo
    if pool.n_slices != bundle.config.n_slices:
        raise typer.BadParameter(f"the pool schedules {pool.n_slices} slices, the model {bundle.config.n_slices}", param_hint="--n-slices")
    found = snapshots_of(read_raw(snapshots), pool, pool.n_slices, per_cell)
    name = bundle.info.get("registered_as") or str(model)
    todo = proposal_chunks(bundle, pool, found, k, candidates, name, output, progress=not quiet)
    n = run_chunks(plan_chunks(todo), output, f"propose {pool.name}", not quiet, ray_address, ray or ray_address is not None)
    cells = len(found)
    typer.echo(f"{pool.name}: {n} new proposal episode(s) from {sum(map(len, found.values()))} snapshot(s) of {cells} cell(s) under {output}")

