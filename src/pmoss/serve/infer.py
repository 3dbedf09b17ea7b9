"""`pmoss schedule`: one snapshot and a trained model (a bundle path or a registry URI) in, a
validated `learned` schedule out (the rollout itself is pmoss.learn.rollout)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import Schedule


def schedule_command(
    model: Annotated[str, typer.Option(help="models:/NAME@ALIAS, models:/NAME/VERSION, or a bundle path.")],
    snapshot: Annotated[Path, typer.Option(help="Raw snapshot Parquet taken under the running schedule.")],
    episode: Annotated[Optional[str], typer.Option(help="Episode id in the snapshot file (default: the first).")] = None,
    machine: Annotated[Optional[str], typer.Option(help="Descriptor file or simulated machine name (default: the snapshot's machine, from the sim pool).")] = None,
    mode: Annotated[Optional[str], typer.Option(help="greedy, sample or best-of-k (default: the bundle's own inference settings, else greedy).")] = None,
    k: Annotated[int, typer.Option(help="Samples for best-of-k (ranked by likelihood, by an attached critic, or by the simulator with --score-sim).")] = 8,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    target_factor: Annotated[float, typer.Option(help="Initial return-to-go as a multiple of the best throughput seen (paper: 2).")] = 2.0,
    cap: Annotated[Optional[int], typer.Option(help="At most this many slices per core (default: the fair share, ceil(slices / workers)).")] = None,
    load_cap: Annotated[Optional[float], typer.Option(help="No worker above this many times its fair share of the snapshot's queries (default: the bundle's, else LOAD_CAP, 1.0).")] = None,
    no_load_cap: Annotated[bool, typer.Option("--no-load-cap", help="Switch the load cap off: only the slice cap masks the policy.")] = False,
    machine_wide: Annotated[bool, typer.Option("--machine-wide", help="Let a slice go to a group of every worker (a one-node machine's node group); masked by default.")] = False,
    context: Annotated[Optional[int], typer.Option(min=2, help="Slices a rollout step attends to (default: the model's training episode length; a longer rollout reads the last this many). The slice count or more: the whole episode.")] = None,
    score_sim: Annotated[bool, typer.Option(help="best-of-k: rank samples by simulated throughput (simulated machines only).")] = False,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the schedule JSON here (default: stdout).")] = None,
) -> None:
    """Propose a schedule from one snapshot with a trained model; the result is validated."""
    import json

    from pmoss.contracts.errors import ContractError
    from pmoss.contracts.schedule import save_schedule
    from pmoss.contracts.snapshot import read_raw
    from pmoss.learn.bundle import load_bundle

    if mode not in (None, "greedy", "sample", "best-of-k"):
        raise ContractError(f"--mode: '{mode}' is not greedy, sample or best-of-k")
    if load_cap is not None and load_cap <= 0:
        raise typer.BadParameter(f"{load_cap} is not above 0 (--no-load-cap switches the cap off)", param_hint="'--load-cap'")
    if no_load_cap and load_cap is not None:
        raise ContractError("--load-cap and --no-load-cap: give one")
    rows = read_raw(snapshot).to_pylist()
    row = next((r for r in rows if episode in (None, r["episode_id"])), None)
    if row is None:
        raise ContractError(f"{snapshot}: no episode '{episode}'")
    m = _machine(machine or row["machine"])
    if model.startswith("models:/"):
        from pmoss.serve.registry import fetch

        bundle = load_bundle(fetch(model))
    else:
        bundle = load_bundle(Path(model))
    score = _sim_score(m, row) if score_sim else None
    from pmoss.learn.rollout import propose  # torch: only when scheduling

    own = bundle.info.get("inference", {})  # e.g. dt-critic: best-of-k ranked by its critic
    settings = {**own, "target_factor": target_factor, "cap": cap} if mode is None else {"mode": mode, "k": k, "temperature": temperature, "target_factor": target_factor, "cap": cap}
    if no_load_cap or load_cap is not None:  # the masks are inference-only rules a user may change or switch off
        settings["load_cap"] = None if no_load_cap else load_cap
    if machine_wide:
        settings["machine_wide"] = True
    if context is not None:
        settings["context"] = context
    sched = propose(bundle, m, row, score=score, **settings)  # type: ignore[arg-type]
    if output is None:
        typer.echo(json.dumps(sched.model_dump(mode="json")))
    else:
        save_schedule(sched, output)
        typer.echo(f"wrote {output}: {sched.n_slices} slices on {len(set(sched.core))} cores of {m.name}")


def _machine(name: str) -> Machine:
    from pmoss.contracts.machine import load_machine

    if Path(name).is_file():
        return load_machine(Path(name))
    from pmoss.sim import load_sim_machine

    return load_sim_machine(name)


def _sim_score(machine: Machine, row: dict[str, Any]) -> Callable[[Schedule], float]:
    from pmoss.sim import throughput

    return lambda s: float(throughput(machine, row["workload"], row["dataset"], [s])[0])
