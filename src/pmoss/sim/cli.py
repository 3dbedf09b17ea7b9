"""`pmoss sim ...`: the simulated testbed from the command line (mounted by pmoss.cli)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from pmoss.contracts.io import atomic_write_text
from pmoss.contracts.policies import BASELINE_KINDS, generate
from pmoss.contracts.workload import DATASETS, WORKLOADS
from pmoss.sim.episode import SimInputError, simulate
from pmoss.sim.pool import descriptor_text, list_machines, load_sim_machine

app = typer.Typer(help="Simulated testbed (every result says source=sim).", no_args_is_help=True, add_completion=False)
out = Console()


@app.command("list")
def list_command() -> None:
    """List the simulated machines."""
    table = Table(title="simulated machines (source=sim)")
    for col in ("name", "model", "sockets", "nodes", "CPUs", "workers"):
        table.add_column(col)
    for name in list_machines():
        m = load_sim_machine(name)
        table.add_row(name, m.model, str(m.sockets), str(m.numa_nodes), str(len(m.cpus)), str(m.n_workers))
    out.print(table)


@app.command("describe")
def describe_command(name: Annotated[str, typer.Argument(help="Machine name (see `pmoss sim list`), or gen-<seed> for a generated one.")]) -> None:
    """Print a machine's descriptor YAML."""
    print(descriptor_text(name), end="")


@app.command("fidelity")
def fidelity_command(
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the table and checks as JSON here.")] = None,
    oracle_budget: Annotated[Optional[int], typer.Option(help="Model evaluations per oracle search (default 600; with --paper 1500).")] = None,
    dataset: Annotated[str, typer.Option("--dataset", "-d", help=f"One of {', '.join(DATASETS)}. Default uniform: YCSB's default "
                                         "insertorder=hashed spreads inserts over the slices; dense appends every insert to the last slice.")] = "uniform",
    paper: Annotated[bool, typer.Option("--paper", help="Score the P-MOSS paper's calibration claims (read-write, lookup, "
                                        "core-to-core latency) under the paper's setup and runtime: one verdict per claim and the agreement.")] = False,
    n_records: Annotated[Optional[int], typer.Option("--records", help="With --paper: records in the tree (default the paper's 1000M).")] = None,
) -> None:
    """Paper machines x paper workloads under every baseline kind and the oracle (noise-free model);
    with --paper, the paper's calibration claims scored one by one (docs/machine-model.md §14.4)."""
    from pmoss.sim.fidelity import fidelity_checks, fidelity_table

    if oracle_budget is not None and oracle_budget <= 0:
        raise SimInputError(f"oracle_budget: must be positive, got {oracle_budget}")
    if paper:
        _paper_fidelity(output, oracle_budget, n_records)
        return
    oracle_budget = oracle_budget or 600
    if dataset not in DATASETS:
        raise SimInputError(f"dataset: unknown {dataset!r}; one of {', '.join(DATASETS)}")
    rows = fidelity_table(dataset=dataset, oracle_budget=oracle_budget)
    checks = fidelity_checks(rows)
    Console(width=max(out.width, 200)).print(_fidelity_rich(rows, dataset))  # 15 columns: never wrap them
    out.print(json.dumps(checks, indent=1))
    if output:
        atomic_write_text(output, json.dumps({"source": "sim", "rows": rows, "checks": checks}, indent=1) + "\n")
        out.print(f"wrote {output}")


def _paper_fidelity(output: Path | None, budget: int | None, n_records: int | None) -> None:
    from pmoss.sim.paper import ORACLE_BUDGET, agreement, paper_cells, score, shape

    if n_records is not None and n_records < 256:
        raise SimInputError(f"records: must be at least the 256 slices, got {n_records}")
    cells = paper_cells(n_records=n_records, budget=budget or ORACLE_BUDGET, progress="sim fidelity: paper cells")
    verdicts, figs = score(cells), shape(cells)
    agree = agreement(verdicts)
    table = Table(title="The P-MOSS paper's calibration claims vs the machine model (source=sim, the paper's runtime and setup)")
    for col in ("claim", "workload", "machine", "paper", "model", "verdict"):
        table.add_column(col)
    style = {"YES": "green", "PARTLY": "yellow", "NO": "red"}
    for v in verdicts:
        verdict = v["verdict"] if v["counted"] else f"{v['verdict']} (by construction, not counted)"
        table.add_row(v["id"], v["workload"] or "-", str(v["machine"] or "all"), str(v["want"]), str(v["got"]), f"[{style[v['verdict']]}]{verdict}[/]")
    Console(width=max(out.width, 160)).print(table)
    cols = ("os-default", "os-interleave", "se-numa", "sn-numa", "sn-grouped", "sn-mixed", "sn-spread", "sn-random", "sn-hot", "pmoss", "group-oracle")
    cells_t = Table(title="Throughput, Mq/s (source=sim; pmoss = the one-core oracle, P-MOSS's stand-in)")
    for col in ("machine", "workload", *cols):
        cells_t.add_column(col, justify="left" if col in ("machine", "workload") else "right")
    for c in cells:
        cells_t.add_row(c["machine"], c["workload"], *(f"{c[k] / 1e6:.1f}" for k in cols))
    Console(width=max(out.width, 200)).print(cells_t)
    out.print(f"agreement: [bold]{agree['YES']} of {agree['claims']} YES ({agree['yes_share']:.0%})[/bold], {agree['PARTLY']} partly, "
              f"{agree['NO']} no; {agree['by_construction']} hold by construction (not counted)")
    out.print(f"best one-core schedule over the best SN:T heuristic: median {figs['pmoss_over_best_sn_t_median']:.3f}x; "
              f"Skylake X read-write order of the coarse baselines: {' > '.join(figs['skx_read_write_order'])}")
    if output:
        doc = {"source": "sim", "runtime": "paper", "cells": cells, "verdicts": verdicts, "agreement": agree, "shape": figs}
        atomic_write_text(output, json.dumps(doc, indent=1) + "\n")
        out.print(f"wrote {output}")


def _fidelity_rich(rows: list[dict], dataset: str) -> Table:
    table = Table(title=f"Throughput, Mq/s (source=sim, noise-free model, dataset={dataset}, 256 slices)")
    for col in ("machine", "workload", *BASELINE_KINDS, "oracle", "best baseline", "best/worst baseline"):
        table.add_column(col, justify="left" if col in ("machine", "workload", "best baseline") else "right")
    for r in rows:
        vals = [f"{r[k] / 1e6:.1f}" for k in (*BASELINE_KINDS, "oracle")]
        table.add_row(r["machine"], r["workload"], *vals, r["best_baseline"], f"{r['spread']:.2f}")
    return table


@app.command("run")
def run_command(
    machine: Annotated[str, typer.Option("--machine", "-m", help="Simulated machine: a pool name (pmoss sim list) or a descriptor file.")],
    workload: Annotated[str, typer.Option("--workload", "-w", help=f"One of {', '.join(WORKLOADS)}.")],
    dataset: Annotated[str, typer.Option("--dataset", "-d", help=f"One of {', '.join(DATASETS)}.")] = "dense",
    kind: Annotated[str, typer.Option("--kind", "-k", help=f"Schedule kind: {', '.join(BASELINE_KINDS)}.")] = "sn-grouped",
    seed: Annotated[int, typer.Option(help="Episode seed (noise) and schedule generator seed.")] = 0,
    n_slices: Annotated[int, typer.Option(help="Number of slices.")] = 256,
    n_records: Annotated[int, typer.Option(help="Records in the tree.")] = 10_000_000,
    top: Annotated[int, typer.Option(help="How many of the busiest slices to show.")] = 10,
) -> None:
    """Simulate one episode and print its throughput and busiest slices."""
    if kind not in BASELINE_KINDS:
        raise SimInputError(f"kind: unknown schedule kind '{kind}' (known: {', '.join(BASELINE_KINDS)})")
    for field, v in (("n_slices", n_slices), ("n_records", n_records), ("top", top)):
        if v <= 0:
            raise SimInputError(f"{field}: must be positive, got {v}")
    m = load_sim_machine(machine)
    row = simulate(m, workload, dataset, generate(kind, m, n_slices, seed), seed=seed, n_records=n_records)  # type: ignore[arg-type]
    out.print(f"{machine} {workload} {dataset} {kind}: [bold]{row['throughput_qps'] / 1e6:.2f} Mq/s[/bold] (source=sim)")
    out.print(_top_slices(row, top))


def _top_slices(row: dict, top: int) -> Table:
    q = np.asarray(row["queries"])
    table = Table(title=f"top {min(top, q.size)} slices by queries")
    for col in ("slice", "core", "node", "queries", "share", "llc_misses/q", "cycles/q"):
        table.add_column(col, justify="right")
    for i in np.argsort(-q)[:top]:
        llc = "n/a" if row["llc_misses"] is None else f"{row['llc_misses'][i] / q[i]:.2f}"
        table.add_row(str(i), str(row["core"][i]), str(row["node"][i]), str(q[i]), f"{q[i] / q.sum():.3%}", llc, f"{row['cycles'][i] / q[i]:.0f}")
    return table


__all__ = ["app"]
