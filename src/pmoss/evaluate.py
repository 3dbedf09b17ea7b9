"""The evaluation harness: learned schedules vs every baseline (and the oracle) through one backend.

For each machine x workload cell: a fresh snapshot under the running schedule (os-default, with a
seed no training episode used) is the model's only input; every schedule — learned, baseline,
oracle — is then measured by the same simulator with the same evaluation seeds. Output:
`metrics.json` (the headline geometric means per policy, for `dvc metrics show` / `dvc exp show`),
`cells-detail.json` (the same ratios per cell), `cells.json` (throughput per cell and policy),
`speedup.json` (plot data for `dvc plots`) and plots that state their data source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pmoss.contracts.errors import ContractError
from pmoss.contracts.groups import groups_of
from pmoss.contracts.io import atomic_write_text, load_model_with_flags, one_of
from pmoss.contracts.limits import MAX_RECORDS, MAX_SLICES, at_most, require_memory, sim_bytes
from pmoss.contracts.policies import BASELINE_KINDS, generate
from pmoss.contracts.schedule import ANY_WORKER_KINDS, LOAD_CAP, ONE_CORE_KINDS, Schedule, slices_for
from pmoss.contracts.workload import DATASETS, WORKLOADS, get_workload

DETAIL_FILE = "cells-detail.json"  # written beside an evaluation's metrics.json (per-cell ratios)
MASK_CONTROL = "mask-only"  # an untrained network under the same inference masks: what the masks alone reach
# mask-only is the per-cell median over this many initialisations (seeds 0..N-1): one init is one
# draw, and on the demo's validation cells the five draws spread 0.85-1.27x the best baseline
# (benchmarks/seed_spread.py, docs/benchmarks-model.md)
MASK_INITS = 5
# model throughputs this close are a tie for the oracle (its finalists, cell_oracle): far below what
# an evaluation resolves (a run's noise is 2 %, ~0.7 % over the grid's 8 runs; sim/episode.py), and
# any-worker kinds differ by less (Skylake X x rsi-20-30-50: os-interleave and se-numa 1.2e-7 apart)
ORACLE_TIE = 1e-3
EVAL_SEED_BASE = 1_000_003  # far from the hashed training seeds' typical values; runs are seeded base + r


class EvalConfig(BaseModel):
    """Checked whole on load (names, counts), so a bad cell fails before the first one runs. Numbers
    and the flag are strict, as a machine descriptor's (contracts/machine.py): a YAML `true` is no
    number, though pydantic would read it as 1 (nor is "3" or 3.0 a count, 1 a flag)."""

    model_config = ConfigDict(extra="forbid")
    machines: list[str] = Field(min_length=1)  # pool names, generated ranges gen:A-B, descriptor files, or directories of them
    workloads: Annotated[list[str], one_of(WORKLOADS, "workload")] = Field(min_length=1)
    dataset: Annotated[str, one_of(DATASETS, "dataset")] = "dense"
    n_slices: Annotated[int, Field(ge=1, strict=True), at_most(MAX_SLICES, "the runtime's slice cap")] = 256
    slices_per_worker: float | None = Field(None, gt=0, le=1024, strict=True)  # set: each machine gets slices_for(machine, this) slices instead of n_slices
    n_records: Annotated[int, Field(ge=1, strict=True), at_most(MAX_RECORDS, "2**40 records, 16 TiB of keys and values: more than any machine holds")] = 10_000_000  # fmt: skip
    window_s: float = Field(10.0, gt=0, strict=True, allow_inf_nan=False)
    runs: int = Field(3, ge=1, strict=True)  # evaluation seeds per schedule
    baselines: Annotated[list[str], one_of(BASELINE_KINDS, "schedule kind")] = list(BASELINE_KINDS)
    oracle: bool = Field(False, strict=True)
    target_factor: float = Field(2.0, gt=0, strict=True, allow_inf_nan=False)
    context: int | None = Field(None, ge=2, strict=True)  # slices a rollout step attends to (None: each model's training length)
    # the snapshot is seeded seed_base - 1, run r seed_base + r; another base gives a validation set
    # (design choices) whose seeds the evaluation never reads
    seed_base: int = Field(EVAL_SEED_BASE, ge=1, strict=True)

    @field_validator("machines")
    @classmethod
    def _known_machines(cls, refs: list[str]) -> list[str]:
        """Every machine loads; generated ranges come back as their names (files and directories as given)."""
        from pmoss.sim import expand_generated, expand_machines, load_sim_machine

        try:
            for ref in expand_machines(refs):
                load_sim_machine(ref)
            return expand_generated(refs)
        except ContractError as e:
            raise ValueError(str(e).removeprefix("machine: ")) from None


def check_memory(cfg: EvalConfig, n_policies: int, where: Any) -> None:
    """Refuse an evaluation whose per-cell simulator call (every baseline, policy and the oracle,
    `runs` seeds each) needs more memory than this machine has; `where(field)` names the field."""
    from pmoss.sim import expand_machines, load_sim_machine

    machines = [load_sim_machine(m) for m in expand_machines(cfg.machines)]
    n = max(cell_config(m, cfg).n_slices for m in machines)
    schedules = len(cfg.baselines) + n_policies + cfg.oracle
    field = "runs" if cfg.runs / 3 > n / 256 else ("slices_per_worker" if cfg.slices_per_worker else "n_slices")  # the one furthest above its default
    require_memory(sim_bytes(schedules * cfg.runs, n, max(m.n_workers for m in machines)), where(field), f"{schedules} schedules x {cfg.runs} runs of {n} slices in one simulator call", f"lower {field}")


def measure(machine: Any, workload: str, schedules: dict[str, Schedule], cfg: EvalConfig) -> dict[str, float]:
    """Mean throughput of each schedule over the evaluation seeds: one batched simulator call,
    the same seeds for every schedule of a cell."""
    from pmoss.sim import simulate_batch

    names = [n for n in schedules for _ in range(cfg.runs)]
    runs = [r for _ in schedules for r in range(cfg.runs)]
    rows = simulate_batch(machine, get_workload(workload), cfg.dataset, [schedules[n] for n in names], seeds=[cfg.seed_base + r for r in runs],
                          run_indices=runs, n_records=cfg.n_records, window_s=cfg.window_s)  # fmt: skip
    return {n: float(np.mean([r["throughput_qps"] for r, m in zip(rows, names, strict=True) if m == n])) for n in schedules}


def cell_snapshot(machine: Any, workload: str, cfg: EvalConfig) -> dict[str, Any]:
    """The model's only input in a cell: one snapshot under os-default, with a seed no training episode used."""
    from pmoss.sim import simulate

    running = generate("os-default", machine, cfg.n_slices)
    return simulate(machine, get_workload(workload), cfg.dataset, running, seed=cfg.seed_base - 1, n_records=cfg.n_records, window_s=cfg.window_s)


def cell_baselines(machine: Any, snapshot: dict[str, Any], cfg: EvalConfig) -> dict[str, Schedule]:
    """The cell's baseline schedules by kind; sn-hot widens the slices the snapshot measured hot."""
    load = np.asarray(snapshot["queries"], dtype=float)
    return {kind: generate(kind, machine, cfg.n_slices, load=load if kind == "sn-hot" else None) for kind in cfg.baselines}  # type: ignore[arg-type]


def cell_config(machine: Any, cfg: EvalConfig) -> EvalConfig:
    """`cfg` with the machine's slice count when slices scale with the machine (slices_per_worker)."""
    return cfg.model_copy(update={"n_slices": slices_for(machine, cfg.slices_per_worker)}) if cfg.slices_per_worker else cfg


def cell_oracle(machine: Any, workload: str, cfg: EvalConfig) -> dict[str, Schedule]:
    """The oracle's finalists in a cell, {"search" or a baseline kind: schedule}: of the group
    search's schedule and the cell's own baseline schedules (the ones evaluate_cell measures), those
    within ORACLE_TIE of the highest noise-free throughput. A baseline is there where the search
    cannot reach it (an any-worker kind, outside the group space) or ties it (at a router or
    bandwidth bound many schedules do); among finalists the cell's measurement decides
    (evaluate_cell), so the oracle never reads below a baseline it ties or beats on the model."""
    from pmoss.sim import oracle, throughput

    cfg = cell_config(machine, cfg)
    cands = {"search": oracle(machine, get_workload(workload), cfg.dataset, cfg.n_slices, seed=0, n_records=cfg.n_records)[0]}
    cands |= cell_baselines(machine, cell_snapshot(machine, workload, cfg), cfg)
    x = throughput(machine, get_workload(workload), cfg.dataset, list(cands.values()), n_records=cfg.n_records, window_s=cfg.window_s)
    top = x >= x.max() * (1 - ORACLE_TIE)
    return {name: s for (name, s), t in zip(cands.items(), top, strict=True) if t}


def evaluate_cell(machine_name: str, workload: str, bundles: dict[str, Any], cfg: EvalConfig, keep: dict[str, Schedule] | None = None,
                  oracle: dict[str, Schedule] | None = None) -> dict[str, float]:  # fmt: skip
    """Throughput per policy in one cell (and of the oracle, the best measured of its finalists
    `oracle` (cell_oracle), when given); learned and oracle schedules are also put in `keep`."""
    from pmoss.learn.rollout import propose
    from pmoss.sim import load_sim_machine

    machine = load_sim_machine(machine_name)
    cfg = cell_config(machine, cfg)
    snapshot = cell_snapshot(machine, workload, cfg)
    schedules = cell_baselines(machine, snapshot, cfg)
    for name, bundle in bundles.items():
        settings = {"target_factor": cfg.target_factor, **bundle.info.get("inference", {})}  # a version may carry its own
        if cfg.context is not None:
            settings["context"] = cfg.context
        schedules[name] = propose(bundle, machine, snapshot, **settings)
    if oracle:
        schedules["oracle"] = oracle["search"] if "search" in oracle else next(iter(oracle.values()))
    tp = measure(machine, workload, schedules, cfg)
    if oracle:
        finalists = {n: tp["oracle" if n == "search" else n] for n in oracle}
        pick = max(finalists, key=finalists.__getitem__)
        schedules["oracle"], tp["oracle"] = oracle[pick], finalists[pick]
    if keep is not None:
        keep.update({n: s for n, s in schedules.items() if n not in cfg.baselines})
    return tp


def evaluate_cells(cfg: EvalConfig, bundles: dict[str, Any], progress: bool = True, keep: dict[str, dict[str, Schedule]] | None = None) -> dict[str, dict[str, float]]:
    """Every machine x workload cell of `cfg`: throughput of each baseline and each bundle.
    With `keep`, the learned/oracle schedules of each cell are collected there too. `progress`: a
    bar on a terminal; else (or not `progress`) a line every PMOSS_PROGRESS_S seconds (progress.py)."""
    from rich.progress import track

    from pmoss.progress import Ticker, line_interval, show_bar
    from pmoss.sim import expand_machines, load_sim_machine
    from pmoss.sim.oracle import on_cores

    names = [load_sim_machine(m).name for m in expand_machines(cfg.machines)]  # files and directories too; all checked first
    pairs = [(m, w) for m in names for w in cfg.workloads]
    # the oracle searches first, a worker process per core: the machine itself goes to the worker (a
    # descriptor file's machine is known by name only in this process)
    oracles: list[dict[str, Schedule] | None] = [None] * len(pairs)
    if cfg.oracle:
        oracles = on_cores(cell_oracle, [(load_sim_machine(m), w, cfg) for m, w in pairs], progress="evaluate: oracle searches", unit="search",
                           quiet=not progress)  # fmt: skip
    cells = {}
    bar = show_bar(progress)
    with Ticker("evaluate", len(pairs), "cell", line_interval(bar)) as ticker:
        for (m, w), oracle in track(list(zip(pairs, oracles, strict=True)), description="evaluate", disable=not bar):
            cells[f"{m}|{w}"] = evaluate_cell(m, w, bundles, cfg, keep.setdefault(f"{m}|{w}", {}) if keep is not None else None, oracle)
            ticker.advance()
    return cells


def sample_cells(cfg: EvalConfig, bundles: dict[str, Any], k: int = 16, temperature: float = 1.0, seed: int = 0,
                 cap: int | None = None, load_cap: float | None = LOAD_CAP) -> dict[str, dict[str, list[float]]]:  # fmt: skip
    """Throughput of `k` schedules sampled from each bundle's policy in every cell: the same snapshot,
    target and evaluation seeds as `evaluate_cells`, so a policy is judged on k draws instead of on
    its one greedy schedule (whose rank against another model's is close to a coin flip when the
    two policies are similar). `cap` overrides the slices-per-core cap (default: as in propose);
    `load_cap` the load cap (None: off, to compare what the policies themselves choose)."""
    from pmoss.learn.rollout import rollout
    from pmoss.sim import load_sim_machine

    out: dict[str, dict[str, list[float]]] = {}
    for m in cfg.machines:
        machine = load_sim_machine(m)
        for w in cfg.workloads:
            snapshot = cell_snapshot(machine, w, cfg)
            schedules: dict[str, Schedule] = {}
            for name, bundle in bundles.items():
                settings = {"target_factor": cfg.target_factor, **bundle.info.get("inference", {})}
                groups, _ = rollout(bundle, machine, snapshot, target_factor=settings["target_factor"], batch=k, temperature=temperature,
                                    cap=cap or settings.get("cap"), load_cap=load_cap, seed=seed, machine_wide=settings.get("machine_wide", False))  # fmt: skip
                for i, g in enumerate(groups):
                    schedules[f"{name}#{i}"] = Schedule.from_groups(machine, g, model=name, mode="sample", seed=seed).validate_for(machine)
            tp = measure(machine, w, schedules, cfg)
            out[f"{m}|{w}"] = {name: [tp[f"{name}#{i}"] for i in range(k)] for name in bundles}
    return out


def sampled_gap(samples: dict[str, dict[str, list[float]]], a: str, b: str) -> tuple[float, float]:
    """Mean log-throughput of policy `a` minus policy `b` over their sampled schedules, averaged over
    cells, and its standard error (Welch: the two policies' draws are independent). A positive gap
    of several standard errors means `a` is better than `b` beyond sampling chance."""
    gaps, var = [], 0.0
    for per in samples.values():
        la, lb = np.log(per[a]), np.log(per[b])
        gaps.append(la.mean() - lb.mean())
        var += la.var(ddof=1) / len(la) + lb.var(ddof=1) / len(lb)
    return float(np.mean(gaps)), float(np.sqrt(var) / len(gaps))


HEADLINE_KEYS = ("vs_best_baseline", "vs_best_one_core_baseline", "vs_oracle")
# Short names in metrics.json: `dvc exp show` makes each a column "POLICY.NAME" and a table of
# 4 policies x 4 figures must stay readable in a terminal.
HEADLINE_NAMES = {"vs_best_baseline": "vs_best", "vs_best_one_core_baseline": "vs_one_core", "vs_oracle": "vs_oracle"}
CELLS_AT_BEST = "cells_ge_best"  # cells where the policy is at or above the best baseline
ORACLE_AT_BEST = "oracle_cells_ge_best"  # cells where the oracle measured at or above the best baseline
OWN_PICKS = "own_picks"  # cells where what the policy served is its own proposal (not a heuristic, not the running schedule)


def pick_of(schedule: Schedule) -> str:
    """What a served schedule is: "own" (the policy's greedy rollout or one of its samples),
    "heuristic" (a group heuristic a critic picked among the candidates) or "running" (a critic kept
    the schedule that ran). A plain rollout is its own proposal."""
    pick = (schedule.provenance or {}).get("pick")
    if pick is None or pick == "greedy" or str(pick).startswith("sample"):
        return "own"
    return "running" if pick == "running" else "heuristic"


def mask_inits_of(first: Any, n: int) -> dict[str, Any]:
    """The mask control's initialisations: `first`'s network untrained with seeds 0..n-1."""
    from pmoss.learn.bundle import untrained_like

    return {f"{MASK_CONTROL}-s{s}": untrained_like(first, seed=s) for s in range(n)}


def fold_mask_inits(cells: dict[str, dict[str, float]], schedules: dict[str, dict[str, Schedule]] | None = None) -> dict[str, dict[str, float]]:
    """Replace each cell's mask-only-sK entries by MASK_CONTROL, their median throughput (their
    schedules are dropped: the median is no one schedule). -> {cell: {init name: throughput}}."""
    inits: dict[str, dict[str, float]] = {}
    for cell, tp in cells.items():
        inits[cell] = {n: tp.pop(n) for n in [n for n in tp if n.startswith(f"{MASK_CONTROL}-s")]}
        if inits[cell]:
            tp[MASK_CONTROL] = float(np.median(list(inits[cell].values())))
        for n in inits[cell]:
            (schedules or {}).get(cell, {}).pop(n, None)
    return inits


def summarise(cells: dict[str, dict[str, float]], learned: list[str], baselines: list[str],
              schedules: dict[str, dict[str, Schedule]] | None = None,
              mask_inits: dict[str, dict[str, float]] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """(headline, detail). Headline (`metrics.json`, what `dvc metrics show` / `dvc exp show` print):
    per learned policy the geometric means over cells vs the best baseline (`vs_best`, the target),
    vs the best one-core baseline (`vs_one_core`: what one core per slice can express) and vs the
    oracle (the best schedule known for the cell: the oracle's, or the best baseline where that
    measured higher still; the detail's `oracle_from` names it, "search" or a baseline kind), and
    how many cells are at or above the best baseline (`cells_ge_best`; the oracle's own count:
    `oracle_cells_ge_best`); with the served `schedules`, in how many cells the policy served its
    own proposal rather than a heuristic or the running schedule (`own_picks`). With
    `mask_inits` (fold_mask_inits), mask-only's entry also says how many initialisations its median
    is over (`inits`), the lowest and highest of their own geo-means vs the best baseline, and
    seed 0's alone (`vs_best_s0`: the single control of evaluations before 2026-11-28).
    Detail (`cells-detail.json`): the same ratios per cell, and each policy's pick (`POLICY_pick`)."""
    one_core = [b for b in baselines if b in ONE_CORE_KINDS]
    detail: dict[str, Any] = {"source": "sim", "cells": {}}
    ratios: dict[str, dict[str, list[float]]] = {m: {k: [] for k in HEADLINE_KEYS} for m in learned}
    for cell, tp in cells.items():
        best = max(tp[b] for b in baselines)
        entry: dict[str, Any] = {"best_baseline": max(baselines, key=lambda b: tp[b]), "best_baseline_qps": best}
        refs = {"vs_best_baseline": best}
        if one_core:
            entry["best_one_core_baseline"] = max(one_core, key=lambda b: tp[b])
            refs["vs_best_one_core_baseline"] = entry["best_one_core_baseline_qps"] = max(tp[b] for b in one_core)
        if "oracle" in tp:
            # the reference is the best schedule known for the cell: the oracle's (its search's, or a
            # baseline it ties or that the search cannot reach, cell_oracle), or a baseline that
            # measured higher still (noise alone: the model scores it lower); which one is said per cell
            refs["vs_oracle"] = max(tp["oracle"], best)
            own = (schedules or {}).get(cell, {}).get("oracle")
            entry["oracle_from"] = (entry["best_baseline"] if tp["oracle"] < best
                                    else own.kind if own is not None and own.kind in baselines else "search")  # fmt: skip
            entry["oracle_vs_best_baseline"] = tp["oracle"] / best
        for n, q in (mask_inits or {}).get(cell, {}).items():
            entry[f"{n}_vs_best_baseline"] = q / best
        for m in learned:
            for k, ref in refs.items():
                entry[f"{m}_{k}"] = tp[m] / ref
                ratios[m][k].append(tp[m] / ref)
            if schedules is not None and m in schedules.get(cell, {}):
                entry[f"{m}_pick"] = pick_of(schedules[cell][m])
        detail["cells"][cell] = entry
    headline: dict[str, Any] = {"source": "sim", "n_cells": len(cells)}
    if any("oracle_vs_best_baseline" in e for e in detail["cells"].values()):
        headline[ORACLE_AT_BEST] = int(sum(e["oracle_vs_best_baseline"] >= 1.0 for e in detail["cells"].values()))
    for m, r in ratios.items():
        headline[m] = {HEADLINE_NAMES[k]: round(float(np.exp(np.mean(np.log(v)))), 4) for k, v in r.items() if v}
        headline[m][CELLS_AT_BEST] = int(sum(x >= 1.0 for x in r["vs_best_baseline"]))
        picks = [e[f"{m}_pick"] for e in detail["cells"].values() if f"{m}_pick" in e]
        if picks:
            headline[m][OWN_PICKS] = picks.count("own")
    names = sorted({n for per in (mask_inits or {}).values() for n in per})
    if names and MASK_CONTROL in headline:
        geo = {n: float(np.exp(np.mean([np.log(detail["cells"][c][f"{n}_vs_best_baseline"]) for c in cells]))) for n in names}
        headline[MASK_CONTROL] |= {"inits": len(names), "vs_best_min_init": round(min(geo.values()), 4), "vs_best_max_init": round(max(geo.values()), 4)}
        if f"{MASK_CONTROL}-s0" in geo:
            headline[MASK_CONTROL]["vs_best_s0"] = round(geo[f"{MASK_CONTROL}-s0"], 4)
    return headline, detail


def policy_figures(headline: dict[str, Any]) -> dict[str, dict[str, float]]:
    """POLICY -> its headline figures, from a metrics.json (the entries that are not source/n_cells)."""
    return {k: v for k, v in headline.items() if isinstance(v, dict)}


def best_policy(headline: dict[str, Any], policies: list[str], detail: dict[str, Any] | None = None) -> tuple[str, str]:
    """The policy to serve among `policies`, listed simplest first, and why.

    Without per-cell ratios (`detail`, an evaluation's cells-detail.json) the highest geometric
    mean vs the best baseline. With them, the one-standard-error rule (Hastie, Tibshirani and
    Friedman, The Elements of Statistical Learning, 7.10): the first of `policies` whose geo-mean
    is within one standard error of the highest one's, the error of the mean over cells of their
    paired log-ratio. A validation set of tens of cells cannot tell policies a percent apart, and
    there the simpler policy (fewer stages to train, less inference time) is the better bet.
    """
    per = policy_figures(headline)
    missing = [p for p in policies if p not in per]
    if missing:
        raise ContractError(f"metrics: policy '{missing[0]}' is not evaluated (have: {', '.join(per)})")
    if detail is None:
        top = max(policies, key=lambda p: per[p]["vs_best"])
        return top, f"the best geo-mean vs the best baseline ({per[top]['vs_best']:.4g})"
    cells = detail.get("cells", {})
    col = "{}_vs_best_baseline"
    absent = [(c, p) for c in cells for p in policies if col.format(p) not in cells[c]]
    if absent:
        raise ContractError(f"cells-detail: cell '{absent[0][0]}' has no figure for policy '{absent[0][1]}'")
    log = {p: np.log([cells[c][col.format(p)] for c in cells]) for p in policies}
    top = max(policies, key=lambda p: log[p].mean())  # the unrounded geo-mean: the headline's 4 decimals can tie
    for p in policies:
        gap = log[top] - log[p]
        se = float(gap.std(ddof=1) / np.sqrt(len(gap))) if len(gap) > 1 else 0.0
        if p == top or gap.mean() <= se:
            break
    if p == top:
        return top, f"the best geo-mean vs the best baseline ({per[top]['vs_best']:.4g}), no simpler policy within one standard error of it"
    return p, (f"the simplest policy within one standard error of the best geo-mean vs the best baseline: {p} {per[p]['vs_best']:.4g} vs "
               f"{top} {per[top]['vs_best']:.4g}, mean log-ratio gap {gap.mean():.4f} <= standard error {se:.4f} over {len(gap)} cells")


def speedup_rows(cells: dict[str, dict[str, float]], baselines: list[str]) -> list[dict[str, Any]]:
    """Plot data for `dvc plots`: one row per cell x policy, throughput relative to the cell's best
    baseline (`dvc plots diff` puts experiments side by side)."""
    rows = []
    for cell, tp in cells.items():
        best = max(tp[b] for b in baselines)
        rows += [{"cell": cell, "policy": p, "label": f"{cell} {p}", "vs_best_baseline": round(v / best, 4)} for p, v in tp.items()]
    return rows


def plot(cells: dict[str, dict[str, float]], out: Path) -> None:
    """Per-machine bars: every policy's throughput relative to the cell's best baseline; the legend
    sits right of the panels (inside, it covered bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    machines = sorted({c.split("|")[0] for c in cells})
    policies = list(next(iter(cells.values())))
    n_workloads = max(sum(c.startswith(f"{m}|") for c in cells) for m in machines)
    plot_w, legend_w = max(6.0, 0.25 * len(policies) * n_workloads + 1.5), 1.9  # inches
    fig, axes = plt.subplots(len(machines), 1, figsize=(plot_w + legend_w, 0.6 + 2.4 * len(machines)), squeeze=False)
    for ax, m in zip(axes[:, 0], machines, strict=True):
        mc = {c.split("|")[1]: tp for c, tp in cells.items() if c.startswith(f"{m}|")}
        width = 0.8 / len(policies)
        for i, p in enumerate(policies):
            vals = [tp[p] / max(v for k, v in tp.items() if k in BASELINE_KINDS) for tp in mc.values()]
            ax.bar(np.arange(len(mc)) + i * width, vals, width, label=p, color=plt.cm.tab20(i % 20))  # tab10 repeats past 10 policies
        ax.axhline(1.0, color="k", lw=0.6)
        # The best schedule a one-core-per-slice policy (a model's action space) can match, per workload.
        one = [max((v for k, v in tp.items() if k in ONE_CORE_KINDS), default=np.nan) / max(v for k, v in tp.items() if k in BASELINE_KINDS) for tp in mc.values()]
        ax.hlines(one, np.arange(len(mc)) - width / 2, np.arange(len(mc)) + 0.8 - width / 2, colors="k", linestyles="dashed", lw=0.8,
                  label="best one-core baseline" if ax is axes[0, 0] else None)  # fmt: skip
        ax.set_xticks(np.arange(len(mc)) + 0.4 - width / 2, list(mc))
        ax.set_ylabel("vs best baseline")
        ax.set_title(f"{m} (source=sim)", fontsize=9)
    right = plot_w / (plot_w + legend_w)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="center left", bbox_to_anchor=(right, 0.5), fontsize=7, frameon=False)
    fig.suptitle("Throughput relative to the best baseline — simulated testbed (source=sim)", fontsize=10)
    fig.tight_layout(rect=(0, 0, right, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _tile(m: Any, sched: Schedule) -> np.ndarray:
    """[nodes, cores per node]: each core's mean key-range position of the slices whose group it is
    in (NaN: no slice), the picture of one schedule on its machine's core tile."""
    cols = max(len(w) for w in m.workers_by_node)
    grid, count = np.zeros((m.numa_nodes, cols)), np.zeros((m.numa_nodes, cols))
    # a schedule a critic kept running (os-default, ...): any worker executes every slice
    members = np.ones((sched.n_slices, m.n_workers), bool) if sched.kind in ANY_WORKER_KINDS else groups_of(m).member[sched.group_index(m)]
    for i, ws in enumerate(members):
        for w in np.flatnonzero(ws):
            r, c = m.tile_position[w]
            grid[r, c] += i / sched.n_slices
            count[r, c] += 1
    return np.where(count > 0, grid / np.maximum(count, 1), np.nan)


def heatmap(schedules: dict[str, dict[str, Schedule]], out: Path) -> None:
    """The learned/oracle schedules over their core tiles, one row per cell and one column per
    policy (a core's colour: the mean key-range position of its slices, blank when it has none);
    one tile row per NUMA node, nodes outlined; one colour bar for all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pmoss.sim import load_sim_machine

    cells = list(schedules)
    names = list(dict.fromkeys(n for per in schedules.values() for n in per))
    machines = {c: load_sim_machine(c.split("|")[0]) for c in cells}
    # inches, laid out by hand (the constraint solver took seconds on many panels)
    tile_h = 0.2 * max(m.numa_nodes for m in machines.values()) + 0.35
    left, right, top, bottom, pan_w, gap_w, gap_h = 1.4, 1.1, 0.75, 0.25, 1.9, 0.2, 0.35
    width = left + right + len(names) * pan_w + (len(names) - 1) * gap_w
    height = top + bottom + len(cells) * tile_h + (len(cells) - 1) * gap_h
    fig, axes = plt.subplots(len(cells), len(names), figsize=(width, height), squeeze=False,
                             gridspec_kw={"left": left / width, "right": 1 - right / width, "top": 1 - top / height, "bottom": bottom / height,
                                          "wspace": gap_w / pan_w, "hspace": gap_h / tile_h})  # fmt: skip
    im = None
    for r, cell in enumerate(cells):
        m = machines[cell]
        for c, name in enumerate(names):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(name, fontsize=8)
            if c == 0:
                ax.set_ylabel(cell.replace("|", "\n"), fontsize=7, rotation=0, ha="right", va="center")
            sched = schedules[cell].get(name)
            if sched is None:
                ax.axis("off")
                continue
            im = ax.imshow(_tile(m, sched), cmap="viridis", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
            for node in range(m.numa_nodes):
                ax.add_patch(plt.Rectangle((-0.5, node - 0.5), len(m.workers_by_node[node]), 1, fill=False, lw=1.0, ec="k"))
            if sched.kind in ANY_WORKER_KINDS:
                ax.set_xlabel(f"kept {sched.kind}", fontsize=6, labelpad=1)
    if im is not None:
        cax = fig.add_axes((1 - (right - 0.25) / width, bottom / height, 0.15 / width, 1 - (top + bottom) / height))
        fig.colorbar(im, cax=cax).set_label("slice key-range position", fontsize=7)
        cax.tick_params(labelsize=6)
    fig.suptitle("Schedules over the core tile (rows: NUMA nodes) — simulated testbed (source=sim)", fontsize=9, y=1 - 0.2 / height, va="top")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


RESERVED_POLICY_NAMES = (*BASELINE_KINDS, "oracle", MASK_CONTROL)  # the harness's own entries in cells.json (and mask-only-sK)


def policy_specs(model: list[str]) -> dict[str, Path]:
    """`--model NAME=PATH` options by name; a name may not repeat or be one of the harness's own
    (a baseline's, the oracle's, the mask control's): one would silently replace the other."""
    specs: dict[str, Path] = {}
    for spec in model:
        name, sep, path = spec.partition("=")
        if not sep:
            raise typer.BadParameter(f"--model '{spec}': expected NAME=PATH")
        if name in RESERVED_POLICY_NAMES or name.startswith(f"{MASK_CONTROL}-s"):
            raise ContractError(f"--model {spec}: '{name}' is the name of one of the harness's own schedules (reserved: "
                                f"{', '.join(RESERVED_POLICY_NAMES)}), which the policy would replace in cells.json; name it otherwise")
        if name in specs:
            raise ContractError(f"--model {spec}: the name '{name}' is given twice (also {specs[name]}); give each model its own name")
        specs[name] = Path(path)
    return specs


def evaluate_command(
    config: Annotated[Path, typer.Argument(help="Evaluation set YAML (machines, workloads, seeds).")],
    model: Annotated[list[str], typer.Option(help="NAME=PATH of a model bundle (repeatable).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for metrics.json, cells-detail.json, cells.json, speedup.json and the plots.")] = Path("eval"),
    n_slices: Annotated[Optional[int], typer.Option(help="Override the config's slice count.")] = None,
    slices_per_worker: Annotated[Optional[float], typer.Option(help="Scale N with each machine: this many slices per worker thread (overrides n_slices).")] = None,
    context: Annotated[Optional[int], typer.Option(min=2, help="Slices a rollout step attends to (default: each model's training episode length; a longer rollout reads the last this many). The slice count or more: the whole episode.")] = None,
    oracle: Annotated[Optional[bool], typer.Option("--oracle/--no-oracle", help="Also search an oracle schedule per cell: the best of the group search and the cell's baselines on the noise-free model (within 0.1 %, the measurement decides).")] = None,
    mask_control: Annotated[bool, typer.Option("--mask-control/--no-mask-control",
                                               help="Also run 'mask-only': the first model's network untrained, under the same inference masks.")] = True,
    mask_inits: Annotated[int, typer.Option(min=1, help="mask-only is the per-cell median over this many initialisations of the untrained network (seeds 0..N-1).")] = MASK_INITS,
    label: Annotated[Optional[str], typer.Option(help="Nest metrics.json under this key (e.g. unseen), so a second evaluation's columns in `dvc exp show` differ from the first's.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar (a line every PMOSS_PROGRESS_S seconds, default 30, instead).")] = False,
) -> None:
    """Run learned models, all baselines and (optionally) the oracle through one harness."""
    from pmoss.learn.bundle import load_bundle

    flags = {"n_slices": n_slices, "slices_per_worker": slices_per_worker, "context": context, "oracle": oracle}
    cfg = load_model_with_flags(EvalConfig, config, flags)
    specs = policy_specs(model)
    check_memory(cfg, len(specs) + (mask_inits if mask_control and specs else 0),
                 lambda f: f"--{f.replace('_', '-')} {flags[f]}" if flags.get(f) is not None else f"{config}: field '{f}'")
    bundles = {name: load_bundle(path) for name, path in specs.items()}
    controls = mask_inits_of(next(iter(bundles.values())), mask_inits) if mask_control and bundles else {}
    schedules: dict[str, dict[str, Schedule]] = {}
    cells = evaluate_cells(cfg, bundles | controls, progress=not quiet, keep=schedules)
    inits = fold_mask_inits(cells, schedules)
    headline, detail = summarise(cells, list(bundles) + ([MASK_CONTROL] if controls else []), cfg.baselines, schedules, inits)
    atomic_write_text(output / "metrics.json", json.dumps({label: headline} if label else headline, indent=1) + "\n")
    atomic_write_text(output / DETAIL_FILE, json.dumps(detail, indent=1) + "\n")
    atomic_write_text(output / "cells.json", json.dumps(cells, indent=1) + "\n")
    atomic_write_text(output / "speedup.json", json.dumps(speedup_rows(cells, cfg.baselines), indent=1) + "\n")
    learned = {c: {n: s.model_dump(mode="json") for n, s in per.items()} for c, per in schedules.items()}
    atomic_write_text(output / "schedules.json", json.dumps(learned) + "\n")
    plot(cells, output / "speedup.png")
    heatmap(schedules, output / "schedules.png")
    typer.echo(yaml.safe_dump(policy_figures(headline), sort_keys=False))
