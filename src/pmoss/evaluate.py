"""The evaluation harness: learned schedules vs every baseline (and the oracle) through one backend.

For each machine x workload cell: a fresh snapshot under the running schedule (os-default, with a
seed no training episode used) is the model's only input; every schedule — learned, baseline,
oracle — is then measured by the same simulator with the same evaluation seeds. Output:
`metrics.json` (per-cell speedups and geometric means, for `dvc metrics show`) and a bar plot
that states its data source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field

from pmoss.io import atomic_write_text, load_model
from pmoss.policies import BASELINE_KINDS, generate
from pmoss.schedule import Schedule
from pmoss.workload import get_workload

EVAL_SEED_BASE = 1_000_003  # far from the hashed training seeds' typical values; runs are seeded base + r


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    machines: list[str] = Field(min_length=1)
    workloads: list[str] = Field(min_length=1)
    dataset: str = "dense"
    n_slices: int = 256
    n_records: int = 10_000_000
    window_s: float = 10.0
    runs: int = 3  # evaluation seeds per schedule
    baselines: list[str] = list(BASELINE_KINDS)
    oracle: bool = False
    target_factor: float = 2.0


def measure(machine: Any, workload: str, schedules: dict[str, Schedule], cfg: EvalConfig) -> dict[str, float]:
    """Mean throughput of each schedule over the evaluation seeds: one batched simulator call,
    the same seeds for every schedule of a cell."""
    from pmoss.sim import simulate_batch

    names = [n for n in schedules for _ in range(cfg.runs)]
    runs = [r for _ in schedules for r in range(cfg.runs)]
    rows = simulate_batch(machine, get_workload(workload), cfg.dataset, [schedules[n] for n in names], seeds=[EVAL_SEED_BASE + r for r in runs],
                          run_indices=runs, n_records=cfg.n_records, window_s=cfg.window_s)  # fmt: skip
    return {n: float(np.mean([r["throughput_qps"] for r, m in zip(rows, names, strict=True) if m == n])) for n in schedules}


def evaluate_cell(machine_name: str, workload: str, bundles: dict[str, Any], cfg: EvalConfig) -> dict[str, float]:
    from pmoss.infer import propose
    from pmoss.sim import load_sim_machine, simulate

    machine = load_sim_machine(machine_name)
    running = generate("os-default", machine, cfg.n_slices)
    snapshot = simulate(machine, get_workload(workload), cfg.dataset, running, seed=EVAL_SEED_BASE - 1, n_records=cfg.n_records, window_s=cfg.window_s)
    schedules = {kind: generate(kind, machine, cfg.n_slices) for kind in cfg.baselines}  # type: ignore[arg-type]
    for name, bundle in bundles.items():
        settings = {"target_factor": cfg.target_factor, **bundle.info.get("inference", {})}  # a version may carry its own
        schedules[name] = propose(bundle, machine, snapshot, **settings)
    if cfg.oracle:
        from pmoss.sim import oracle

        schedules["oracle"] = oracle(machine, get_workload(workload), cfg.dataset, cfg.n_slices, seed=0, n_records=cfg.n_records)[0]
    return measure(machine, workload, schedules, cfg)


def evaluate_cells(cfg: EvalConfig, bundles: dict[str, Any], progress: bool = True) -> dict[str, dict[str, float]]:
    """Every machine x workload cell of `cfg`: throughput of each baseline and each bundle."""
    from rich.progress import track

    todo = [(m, w) for m in cfg.machines for w in cfg.workloads]
    return {f"{m}|{w}": evaluate_cell(m, w, bundles, cfg) for m, w in track(todo, description="evaluate", disable=not progress)}


def summarise(cells: dict[str, dict[str, float]], learned: list[str], baselines: list[str]) -> dict[str, Any]:
    metrics: dict[str, Any] = {"source": "sim", "cells": {}, "geomean": {}}
    ratios: dict[str, dict[str, list[float]]] = {m: {"vs_best_baseline": [], "vs_oracle": []} for m in learned}
    for cell, tp in cells.items():
        best = max(tp[b] for b in baselines)
        entry: dict[str, Any] = {"best_baseline": max(baselines, key=lambda b: tp[b]), "best_baseline_qps": best}
        for m in learned:
            entry[f"{m}_vs_best_baseline"] = tp[m] / best
            ratios[m]["vs_best_baseline"].append(tp[m] / best)
            if "oracle" in tp:
                entry[f"{m}_vs_oracle"] = tp[m] / tp["oracle"]
                ratios[m]["vs_oracle"].append(tp[m] / tp["oracle"])
        metrics["cells"][cell] = entry
    for m, r in ratios.items():
        metrics["geomean"][m] = {k: float(np.exp(np.mean(np.log(v)))) for k, v in r.items() if v}
        metrics["geomean"][m]["cells_at_or_above_best_baseline"] = int(sum(x >= 1.0 for x in r["vs_best_baseline"]))
    metrics["n_cells"] = len(cells)
    return metrics


def plot(cells: dict[str, dict[str, float]], out: Path) -> None:
    """Per-machine bars: every policy's throughput relative to the cell's best baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    machines = sorted({c.split("|")[0] for c in cells})
    policies = list(next(iter(cells.values())))
    fig, axes = plt.subplots(len(machines), 1, figsize=(max(6, 1.2 * len(policies) * 2), 2.6 * len(machines)), squeeze=False)
    for ax, m in zip(axes[:, 0], machines, strict=True):
        mc = {c.split("|")[1]: tp for c, tp in cells.items() if c.startswith(f"{m}|")}
        width = 0.8 / len(policies)
        for i, p in enumerate(policies):
            vals = [tp[p] / max(v for k, v in tp.items() if k in BASELINE_KINDS) for tp in mc.values()]
            ax.bar(np.arange(len(mc)) + i * width, vals, width, label=p)
        ax.axhline(1.0, color="k", lw=0.6)
        ax.set_xticks(np.arange(len(mc)) + 0.4 - width / 2, list(mc))
        ax.set_ylabel("vs best baseline")
        ax.set_title(f"{m} (source=sim)", fontsize=9)
    axes[0, 0].legend(fontsize=6, ncol=4)
    fig.suptitle("Throughput relative to the best baseline — simulated testbed (source=sim)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def evaluate_command(
    config: Annotated[Path, typer.Argument(help="Evaluation set YAML (machines, workloads, seeds).")],
    model: Annotated[list[str], typer.Option(help="NAME=PATH of a model bundle (repeatable).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for metrics.json, cells.json and the plot.")] = Path("eval"),
    n_slices: Annotated[Optional[int], typer.Option(help="Override the config's slice count.")] = None,
    oracle: Annotated[Optional[bool], typer.Option("--oracle/--no-oracle", help="Also search an oracle schedule per cell.")] = None,
) -> None:
    """Run learned models, all baselines and (optionally) the oracle through one harness."""
    from pmoss.bundle import load_bundle

    cfg = load_model(EvalConfig, config)
    cfg = cfg.model_copy(update={k: v for k, v in {"n_slices": n_slices, "oracle": oracle}.items() if v is not None})
    bundles = {}
    for spec in model:
        name, sep, path = spec.partition("=")
        if not sep:
            raise typer.BadParameter(f"--model '{spec}': expected NAME=PATH")
        bundles[name] = load_bundle(Path(path))
    cells = evaluate_cells(cfg, bundles)
    metrics = summarise(cells, list(bundles), cfg.baselines)
    atomic_write_text(output / "metrics.json", json.dumps(metrics, indent=1) + "\n")
    atomic_write_text(output / "cells.json", json.dumps(cells, indent=1) + "\n")
    plot(cells, output / "speedup.png")
    typer.echo(yaml.safe_dump(metrics["geomean"], sort_keys=False))
