"""`pmoss post-train`: the post-training loop on one (simulated) target machine.

A round, for every workload of the target:
1. snapshot the running schedule with the simulator (round 1: `os-default`; later rounds: the
   schedule served in the round before — serving replaces what was running);
2. propose a schedule with the current model, best-of-K samples ranked by the simulator's
   noise-free throughput on the target (the paper's inference never runs candidates on the serving
   index; a cost model may rank them);
3. observe the chosen schedule: simulated episodes with fresh seeds, written as raw snapshots of
   kind `learned` to the learned directory (the files `collect --append` reads), named by content;
then, once per round:
4. rebuild the fine-tuning dataset (the fine-tuning pool's episodes on the target + every learned
   episode of the target so far — what the `collect-finetune` stage does) and fine-tune the current
   model on it into `OUTPUT/round-<r>/`, the next round's model;
5. report: throughput of each served schedule, measured by the evaluation harness with the same
   seeds as every baseline (the observation seeds above are never used for the comparison).

Every number comes from the simulated testbed (docs/design.md §6): the report and the plot say source=sim.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import typer
import yaml

from pmoss.collect.plan import Pool, derive_seed, load_pool
from pmoss.contracts.errors import ContractError
from pmoss.contracts.io import shipped
from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import Schedule

EXPERIMENT = "pmoss-post-train"  # MLflow experiment of the fine-tuning runs


class PostTrainError(ContractError):
    """Bad input to `pmoss post-train`; the message names the option."""


@dataclass(frozen=True)
class PostTrainConfig:
    machine: str  # simulated target machine (pmoss sim list)
    model: Path  # bundle the first round serves (e.g. models/assistant)
    output: Path  # round-<r>/ bundles and datasets, raw/, report.json, post-training.png
    rounds: int = 3
    pool: Path = shipped("datasets/pools/finetune-tiny.yaml")  # fine-tuning pool; its machines are replaced by `machine`
    workloads: tuple[str, ...] = ()  # empty: the pool's workloads
    learned: Path = Path("datasets/learned")
    train_config: Path = shipped("training/dt-tiny.yaml")
    steps: int = 100  # fine-tuning steps per round
    episodes_per_cell: int | None = None  # override the pool's (pool episodes per workload on the target)
    k: int = 8  # best-of-K samples per proposal
    scorer: Literal["likelihood", "testbed"] = "likelihood"  # what ranks the K samples (see serve())
    observe_runs: int = 2  # observed episodes per served schedule per round
    eval_runs: int = 2  # evaluation seeds per schedule for the report
    val: float = 0.1
    test: float = 0.1
    register: bool = False
    name: str = "pmoss-dt"  # registered model name (with register)
    extra: dict[str, Any] = field(default_factory=dict)  # TrainConfig overrides (tests: a smaller model)


# ---- checks ----------------------------------------------------------------------------------------
def check_inputs(cfg: PostTrainConfig) -> tuple[Machine, Any, Pool]:
    """Target machine, initial bundle and the pool restricted to the target; errors name the option."""
    from pmoss.learn.bundle import load_bundle
    from pmoss.sim import UnknownMachineError, list_machines, load_sim_machine

    if cfg.rounds < 1:
        raise PostTrainError(f"--rounds: must be at least 1, got {cfg.rounds}")
    for opt, v in (("--k", cfg.k), ("--steps", cfg.steps), ("--observe-runs", cfg.observe_runs), ("--eval-runs", cfg.eval_runs)):
        if v < 1:
            raise PostTrainError(f"{opt}: must be at least 1, got {v}")
    try:
        machine = load_sim_machine(cfg.machine)
    except UnknownMachineError:
        raise PostTrainError(f"--machine: unknown simulated machine '{cfg.machine}' (known: {', '.join(list_machines())}, gen-<seed> for a generated one)") from None
    if not (Path(cfg.model) / "model.pt").is_file() and not Path(cfg.model).is_file():
        raise PostTrainError(f"--model {cfg.model}: no model bundle (model.pt) there; train one first (`pmoss train ... -o {cfg.model}`)")
    bundle = load_bundle(cfg.model)
    return machine, bundle, target_pool(cfg, bundle.config.n_slices)


def target_pool(cfg: PostTrainConfig, n_slices: int) -> Pool:
    """The fine-tuning pool on the target alone, at the model's slice count (a model schedules exactly N slices)."""
    from pmoss.contracts.workload import WORKLOADS

    pool = load_pool(cfg.pool, episodes_per_cell=cfg.episodes_per_cell)
    bad = [w for w in cfg.workloads if w not in WORKLOADS]
    if bad:
        raise PostTrainError(f"--workloads: unknown workload '{bad[0]}' (known: {', '.join(WORKLOADS)})")
    hosts = {cfg.machine: pool.hosts[cfg.machine]} if cfg.machine in pool.hosts else {}
    return pool.model_copy(update={"machines": [cfg.machine], "workloads": list(cfg.workloads or pool.workloads), "n_slices": n_slices, "hosts": hosts})


# ---- one round: serve, observe, record ---------------------------------------------------------------
def snapshot(machine: Machine, pool: Pool, workload: str, running: Schedule, rnd: int) -> dict[str, Any]:
    """One simulated snapshot under the running schedule: the model's only input."""
    from pmoss.sim import simulate

    seed = derive_seed("post-train-snapshot", machine.name, workload, rnd)
    return simulate(machine, workload, pool.datasets[0], running, seed=seed, n_records=pool.n_records, window_s=pool.window_s)


def serve(bundle: Any, machine: Machine, pool: Pool, workload: str, row: dict[str, Any], rnd: int, k: int,
          scorer: str = "likelihood") -> tuple[Schedule, float]:
    """Best-of-k proposal and the seconds it took, scoring included. scorer `likelihood`: the
    model's own log-likelihood (what a real host can run); `testbed`: the simulated target's
    noise-free throughput, i.e. k trial runs on the target — a research setting, never the product."""
    import time

    from pmoss.learn.rollout import propose
    from pmoss.sim import throughput

    def score(s: Schedule) -> float:
        return float(throughput(machine, workload, pool.datasets[0], [s], n_records=pool.n_records)[0])

    settings = {"target_factor": 2.0, **bundle.info.get("inference", {})}  # a bundle may carry its own target / cap
    settings.update(mode="best-of-k", k=k, seed=rnd, score=score if scorer == "testbed" else None)
    t = time.perf_counter()
    served = propose(bundle, machine, row, **settings)
    return served, time.perf_counter() - t


def observe(machine: Machine, pool: Pool, workload: str, served: Schedule, rnd: int, runs: int) -> pa.Table:
    """Episodes under the served schedule with fresh seeds, as a raw snapshot table (kind `learned`)."""
    from pmoss.collect.driver import rows_to_table
    from pmoss.sim import simulate_batch

    seeds = [derive_seed("post-train-observe", machine.name, workload, rnd, i) for i in range(runs)]
    rows = simulate_batch(machine, workload, pool.datasets[0], [served] * runs, seeds=seeds, run_indices=list(range(runs)),
                          n_records=pool.n_records, window_s=pool.window_s)  # fmt: skip
    return rows_to_table(rows)


def record(learned: Path, table: pa.Table) -> int:
    """Add the episodes not yet under `learned` (atomic, content-named file); returns how many."""
    from pmoss.collect.driver import done_ids, write_chunk

    have = pa.array(sorted(done_ids(learned)), pa.string())
    new = table.filter(pc.invert(pc.is_in(table["episode_id"], have)))
    if new.num_rows:
        write_chunk(learned, new)
    return new.num_rows


# ---- fine-tuning -----------------------------------------------------------------------------------
def rebuild(cfg: PostTrainConfig, pool: Pool, out: Path) -> int:
    """Pool episodes + all learned episodes of the target -> a tokenised dataset at `out`; returns its size."""
    from pmoss.collect.driver import append_raw, collect
    from pmoss.data.dataset import build

    raw = cfg.output / "raw"
    collect(pool, raw, progress=False)  # resumable: only the first round runs the pool's episodes
    append_raw(cfg.learned, raw, [cfg.machine])  # skips episode ids already there
    build([raw], out, cfg.val, cfg.test)
    return sum(json.loads((out / "dataset.json").read_text())["episodes"].values())  # over all splits


def finetune(cfg: PostTrainConfig, data: Path, init: Path, out: Path) -> Path:
    """Fine-tune `init` on `data` into `out/model.pt`."""
    from pmoss.contracts.io import load_model
    from pmoss.learn.train import TrainConfig, train

    base = load_model(TrainConfig, cfg.train_config)
    # A few steps from an already trained model: a from-scratch warmup longer than the run would keep
    # the learning rate near zero throughout, so it is shortened to a tenth of the run.
    update = {"max_steps": cfg.steps, "warmup": min(base.warmup, max(1, cfg.steps // 10)), "val_every": min(base.val_every, cfg.steps), **cfg.extra}
    # train() resumes from out/checkpoints; a checkpoint left by an earlier run on other data is not
    # this round's, so each round starts from its init.
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    train(data, out, base.model_copy(update=update), init=init, experiment=EXPERIMENT, progress=False)
    return out


def register_round(cfg: PostTrainConfig, bundle_dir: Path, data: Path, eval_yaml: Path) -> dict[str, Any]:
    """Register the round's model as `candidate` and run the promotion gate on the target machine."""
    from pmoss.serve.gate import promote
    from pmoss.serve.registry import register

    version = register(bundle_dir, cfg.name, data, None)
    accepted, why = promote(cfg.name, eval_yaml)
    return {"version": version, "promoted": accepted, "reason": why}


# ---- measurement -----------------------------------------------------------------------------------
def eval_config(cfg: PostTrainConfig, pool: Pool) -> Any:
    """The evaluation harness restricted to the target machine (also the promotion gate's eval set)."""
    from pmoss.evaluate import EvalConfig

    return EvalConfig(machines=[cfg.machine], workloads=pool.workloads, dataset=pool.datasets[0], n_slices=pool.n_slices,
                      n_records=pool.n_records, window_s=pool.window_s, runs=cfg.eval_runs)  # fmt: skip


def baselines(machine: Machine, workload: str, ecfg: Any) -> dict[str, float]:
    from pmoss.contracts.policies import generate
    from pmoss.evaluate import measure

    from pmoss.contracts.workload import get_workload
    from pmoss.sim.profile import load_share

    load = load_share(get_workload(workload), ecfg.n_records, ecfg.n_slices, ecfg.dataset)  # sn-hot: the load it widens by
    return measure(machine, workload, {kind: generate(kind, machine, ecfg.n_slices, load=load if kind == "sn-hot" else None)
                                       for kind in ecfg.baselines}, ecfg)  # type: ignore[arg-type]


def report_row(rnd: int, workload: str, model: Path, observed: pa.Table, added: int, eval_qps: float, base: dict[str, float]) -> dict[str, Any]:
    best = max(base, key=base.__getitem__)
    return {"round": rnd, "workload": workload, "model": str(model),
            "observed_qps": float(np.mean(observed["throughput_qps"].to_numpy())), "learned_added": added,
            "eval_qps": eval_qps, "best_baseline": best, "best_baseline_qps": base[best], "vs_best_baseline": eval_qps / base[best]}  # fmt: skip


# ---- the loop --------------------------------------------------------------------------------------
@dataclass
class Target:
    """What stays fixed over the rounds on the target machine."""

    machine: Machine
    pool: Pool  # the fine-tuning pool restricted to the target
    ecfg: Any  # EvalConfig of the report and the promotion gate
    eval_yaml: Path  # the same, as a file for registry.promote
    base: dict[str, dict[str, float]]  # workload -> baseline -> throughput (evaluation seeds)


def prepare(cfg: PostTrainConfig) -> Target:
    """Check the inputs, write the target's eval set and measure the baselines once (they do not change)."""
    machine, _, pool = check_inputs(cfg)
    ecfg = eval_config(cfg, pool)
    eval_yaml = cfg.output / f"eval-{cfg.machine}.yaml"
    eval_yaml.parent.mkdir(parents=True, exist_ok=True)
    eval_yaml.write_text(yaml.safe_dump(ecfg.model_dump(mode="json"), sort_keys=False))
    return Target(machine, pool, ecfg, eval_yaml, {w: baselines(machine, w, ecfg) for w in pool.workloads})


def post_train(cfg: PostTrainConfig, progress: bool = True) -> dict[str, Any]:
    """Run `cfg.rounds` rounds; returns the report (also written to OUTPUT/report.json and a plot)."""
    from rich.progress import Progress

    from pmoss.contracts.policies import generate
    from pmoss.progress import Ticker, line_interval, show_bar

    tgt = prepare(cfg)
    workloads = tgt.pool.workloads
    running = {w: generate("os-default", tgt.machine, tgt.pool.n_slices) for w in workloads}
    report: dict[str, Any] = {"source": "sim", "machine": cfg.machine, "workloads": workloads, "model": str(cfg.model), "rows": [], "rounds": []}
    model = Path(cfg.model)
    # a step: one workload served and observed, or one round's fine-tuning (which prints its own lines)
    total, shown = cfg.rounds * (len(workloads) + 1), show_bar(progress)
    with Progress(disable=not shown, transient=True) as bar, Ticker("post-train", total, "step", line_interval(shown)) as ticker:
        task = bar.add_task("post-train", total=total)

        def step(description: str, done: int = 1) -> None:
            bar.update(task, advance=done, description=description)
            ticker.advance(done)

        for rnd in range(1, cfg.rounds + 1):
            model = run_round(cfg, tgt, running, model, rnd, report, step)
    write_report(report, cfg.output)
    return report


def run_round(cfg: PostTrainConfig, tgt: Target, running: dict[str, Schedule], model: Path, rnd: int, report: dict[str, Any], step: Any) -> Path:
    """Serve + observe every workload with `model`, then fine-tune it; returns the new model's directory."""
    from pmoss.evaluate import measure
    from pmoss.learn.bundle import load_bundle

    bundle = load_bundle(model)
    for w in tgt.pool.workloads:
        served, propose_s = serve(bundle, tgt.machine, tgt.pool, w, snapshot(tgt.machine, tgt.pool, w, running[w], rnd), rnd, cfg.k, cfg.scorer)
        running[w] = served  # serving replaces the running schedule: the next round's snapshot is taken under it
        observed = observe(tgt.machine, tgt.pool, w, served, rnd, cfg.observe_runs)
        added = record(cfg.learned, observed)
        eval_qps = measure(tgt.machine, w, {"learned": served}, tgt.ecfg)["learned"]  # the baselines' seeds
        report["rows"].append({**report_row(rnd, w, model, observed, added, eval_qps, tgt.base[w]), "scorer": cfg.scorer, "k": cfg.k})
        report.setdefault("timing", []).append({"round": rnd, "workload": w, "propose_s": propose_s})
        step(f"round {rnd}: served {w}")
    out = cfg.output / f"round-{rnd}"
    size = rebuild(cfg, tgt.pool, out / "dataset")
    step(f"round {rnd}: fine-tuning on {size} episodes", done=0)  # the step is done when the fine-tuning is
    finetune(cfg, out / "dataset", model, out)
    step(f"round {rnd}: fine-tuned")
    entry: dict[str, Any] = {"round": rnd, "init": str(model), "bundle": str(out), "dataset_episodes": size}
    if cfg.register:
        entry["registry"] = register_round(cfg, out, out / "dataset", tgt.eval_yaml)
    report["rounds"].append(entry)
    return out


# ---- output ----------------------------------------------------------------------------------------
TIMING_FILE = "timing.json"  # seconds each round's proposals took, per workload


def write_report(report: dict[str, Any], output: Path) -> None:
    from pmoss.contracts.io import atomic_write_text

    # the proposal's wall time apart: report.json is in a DVC output and must be the same for the
    # same inputs (a fresh `dvc repro` leaves dvc.lock clean); TIMING_FILE is left out of its hash (.dvcignore)
    timing = report.pop("timing", [])
    atomic_write_text(output / "report.json", json.dumps(report, indent=1) + "\n")
    atomic_write_text(output / TIMING_FILE, json.dumps(timing, indent=1) + "\n")
    plot(report, output / "post-training.png")


def table(report: dict[str, Any]) -> Any:
    """The report as a rich table: one row per round x workload."""
    from rich.table import Table

    t = Table(title=f"post-training on {report['machine']} (source=sim)")
    for col in ("round", "workload", "learned q/s", "best baseline", "baseline q/s", "vs best", "new episodes"):
        t.add_column(col, justify="left" if col in ("workload", "best baseline") else "right")
    for r in report["rows"]:
        t.add_row(str(r["round"]), r["workload"], f"{r['eval_qps']:.3e}", r["best_baseline"], f"{r['best_baseline_qps']:.3e}",
                  f"{r['vs_best_baseline']:.3f}x", str(r["learned_added"]))  # fmt: skip
    return t


def plot(report: dict[str, Any], out: Path) -> None:
    """Learned throughput relative to the cell's best baseline, per round, one line per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    for w in report["workloads"]:
        rows = [r for r in report["rows"] if r["workload"] == w]
        ax.plot([r["round"] for r in rows], [r["vs_best_baseline"] for r in rows], marker="o", label=w)
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_xlabel("round")
    ax.set_ylabel("learned / best baseline")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"post-training on {report['machine']} — simulated testbed (source=sim)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def default_steps(params: Path = Path("params.yaml")) -> int:
    """params.yaml `finetune.max_steps` when present (the finetune stage's budget), else 100."""
    if params.is_file():
        return int((yaml.safe_load(params.read_text()) or {}).get("finetune", {}).get("max_steps", 100))
    return 100


def post_train_command(
    machine: Annotated[str, typer.Option(help="Simulated target machine (pmoss sim list).")],
    rounds: Annotated[int, typer.Option(help="Post-training rounds (serve, observe, fine-tune).")] = 3,
    model: Annotated[Path, typer.Option(help="Model bundle the first round serves.")] = Path("models/assistant"),
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for round-<r>/ models, report.json and the plot.")] = Path("models/post-train"),
    pool: Annotated[Path, typer.Option(help="Fine-tuning pool YAML (workloads, episode mix; its machines give way to --machine).")] = shipped("datasets/pools/finetune-tiny.yaml"),
    workloads: Annotated[Optional[list[str]], typer.Option(help="Workloads to serve (repeatable; default: the pool's).")] = None,
    learned: Annotated[Path, typer.Option(help="Where observed episodes (kind 'learned') are written.")] = Path("datasets/learned"),
    config: Annotated[Path, typer.Option(help="Training config YAML (default: the repository's, from any directory).")] = shipped("training/dt-tiny.yaml"),
    steps: Annotated[Optional[int], typer.Option(help="Fine-tuning steps per round (default: params.yaml finetune.max_steps).")] = None,
    episodes_per_cell: Annotated[Optional[int], typer.Option(help="Override the pool's episodes per workload.")] = None,
    k: Annotated[int, typer.Option(help="Best-of-K samples per proposal.")] = 8,
    scorer: Annotated[str, typer.Option(help="What ranks the K samples: likelihood (the model's own, runs on a real host) | testbed (K trial runs on the simulated target; research only).")] = "likelihood",
    observe_runs: Annotated[int, typer.Option(help="Observed episodes per served schedule per round.")] = 2,
    eval_runs: Annotated[int, typer.Option(help="Evaluation seeds per schedule in the report.")] = 2,
    register: Annotated[bool, typer.Option("--register", help="Register each round's model as candidate and run the promotion gate.")] = False,
    name: Annotated[str, typer.Option(help="Registered model name (with --register).")] = "pmoss-dt",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar (a line every PMOSS_PROGRESS_S seconds, default 30, instead).")] = False,
) -> None:
    """Post-train on a simulated target: serve the model's schedules, record them, fine-tune, repeat."""
    from rich.console import Console

    if scorer not in ("likelihood", "testbed"):
        raise typer.BadParameter(f"'{scorer}' is not one of likelihood, testbed", param_hint="--scorer")

    cfg = PostTrainConfig(machine=machine, model=model, output=output, rounds=rounds, pool=pool, workloads=tuple(workloads or ()), learned=learned,
                          train_config=config, steps=default_steps() if steps is None else steps, episodes_per_cell=episodes_per_cell, k=k, scorer=scorer,
                          observe_runs=observe_runs, eval_runs=eval_runs, register=register, name=name)  # fmt: skip
    report = post_train(cfg, progress=not quiet)
    Console().print(table(report))
    typer.echo(f"wrote {output / 'report.json'}, {output / 'post-training.png'}; last model {report['rounds'][-1]['bundle']}")
