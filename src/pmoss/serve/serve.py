"""`pmoss serve`: the online loop. The index keeps serving while the champion proposes schedules.

Every round (default 1 s) the backend runs the current phase's workload under the current
schedule and yields a snapshot. When the workload changes (a shift in the per-slice load or scan
profile between snapshots) or a timer fires, inference runs in a background thread on the latest
snapshot while queries keep flowing; its schedule is then enforced (validate -> migrate -> swap).
The champion is re-read from `models:/NAME@champion` and reloaded when the alias moves; a model
that fails to load or a schedule the runtime rejects leaves the current schedule in place, with
the reason in the timeline. When no version is champion (the gate found no model better than the
best heuristic), the heuristic schedule (`--heuristic`) keeps serving and the timeline's
`no_model` event says why (the gate's last refusal). Ctrl-C stops cleanly and the timeline is always written.

Backends: `runtime` (this host's native runtime, real queries) and `sim` (a simulated machine;
one round = `round_s` of simulated time).
"""

from __future__ import annotations

import json
import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import pyarrow as pa
import typer

from pmoss.bench import Spread, interleaved, ratio_spread, verdict
from pmoss.contracts.errors import ContractError, PmossError
from pmoss.contracts.machine import Machine
from pmoss.contracts.policies import generate
from pmoss.contracts.schedule import Schedule, ScheduleError
from pmoss.contracts.snapshot import write_parquet_atomic
from pmoss.contracts.workload import get_workload
from pmoss.learn.bundle import Bundle, load_bundle

TIMELINE_SCHEMA = pa.schema([
    ("t_s", pa.float64()), ("event", pa.string()), ("phase", pa.string()), ("workload", pa.string()),
    ("throughput_qps", pa.float64()), ("schedule", pa.string()), ("detail", pa.string()),
])  # fmt: skip
EVENTS = ("throughput", "snapshot", "inference_start", "inference_end", "migration_start", "migration_end",
          "rejected", "model_loaded", "model_error", "no_model", "phase")  # fmt: skip


@dataclass
class Phase:
    workload: str
    seconds: float


def parse_phases(text: str) -> list[Phase]:
    """'ycsb-c:20,scan:20,ycsb-a:20' -> phases; errors name the bad part."""
    phases = []
    for part in text.split(","):
        name, _, secs = part.strip().partition(":")
        get_workload(name, field=f"phases: '{part}'")
        try:
            seconds = float(secs)
        except ValueError:
            raise ContractError(f"phases: '{part}' needs WORKLOAD:SECONDS") from None
        if not seconds > 0:
            raise ContractError(f"phases: '{part}': seconds must be > 0")
        phases.append(Phase(name, seconds))
    return phases


@dataclass
class Timeline:
    """Events and per-round throughput, relative to the start of serving."""

    start: float = field(default_factory=time.monotonic)
    rows: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Any = None  # simulated time source for the sim backend; None = wall clock
    served: dict[str, Schedule] = field(default_factory=dict)  # phase label -> schedule in force at its end

    def now(self) -> float:
        return self.clock() if self.clock else time.monotonic() - self.start

    def add(self, event: str, phase: str = "", workload: str = "", throughput: float = math.nan, schedule: str = "", **detail: Any) -> None:
        assert event in EVENTS, event
        with self.lock:
            self.rows.append({"t_s": self.now(), "event": event, "phase": phase, "workload": workload, "throughput_qps": throughput,
                              "schedule": schedule, "detail": json.dumps(detail, default=str)})  # fmt: skip

    def write(self, path: Path) -> None:
        with self.lock:
            table = pa.Table.from_pylist(self.rows, schema=TIMELINE_SCHEMA)
        write_parquet_atomic(table, path)


# ---- backends ------------------------------------------------------------------------------------
class RuntimeBackend:
    """This host's native runtime: real queries, real migration."""

    def __init__(self, machine: Machine, n_keys: int, dataset: str, n_slices: int):
        from pmoss.collect.testbed import Testbed

        self.machine = machine
        self.bed = Testbed(machine, n_keys, dataset, n_slices, probe="auto")
        self.n_slices = self.bed.n_slices

    def enforce(self, schedule: Schedule) -> dict[str, Any]:
        """Validate -> migrate -> swap; reports pages moved and the latency of queries completed
        meanwhile (a latency read just before and just after brackets the migration)."""
        self.bed.rt.latency()
        rep = self.bed.enforce(schedule)
        during = self.bed.rt.latency()
        return {"slices_moved": rep.slices_moved, "pages_moved": rep.pages_moved, "pages_failed": rep.pages_failed, "move_pages_s": rep.seconds,
                "latency_p50_ns": during["p50_ns"], "latency_p99_ns": during["p99_ns"], "latency_count": during["count"]}  # fmt: skip

    def round(self, workload: str, seconds: float, seed: int) -> dict[str, Any]:
        return self.bed.run(workload, seconds, seed=seed, run_index=seed)

    def round_latency(self) -> dict[str, Any]:
        r = self.bed.last_result
        return {"latency_p50_ns": r.get("latency_p50_ns"), "latency_p99_ns": r.get("latency_p99_ns")}


class SimBackend:
    """A simulated machine: each round is `seconds` of simulated time under the current schedule.
    Inference runs to completion between rounds and its measured wall time is added to the
    simulated clock (queries would keep flowing under the old schedule meanwhile)."""

    def __init__(self, machine: Machine, n_keys: int, dataset: str, n_slices: int):
        self.machine, self.n_keys, self.dataset, self.n_slices = machine, n_keys, dataset, n_slices
        self.schedule: Schedule | None = None
        self.t = 0.0

    def enforce(self, schedule: Schedule) -> dict[str, Any]:
        schedule.validate_for(self.machine)
        moved = 0 if self.schedule is None else sum(a != b for a, b in zip(schedule.node, self.schedule.node, strict=True))
        self.schedule = schedule
        return {"slices_moved": moved}

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def round_latency(self) -> dict[str, Any]:
        return {}  # the machine model predicts throughput, not per-query latency

    def round(self, workload: str, seconds: float, seed: int) -> dict[str, Any]:
        from pmoss.sim import simulate

        assert self.schedule is not None, "enforce a schedule first"
        self.t += seconds
        return simulate(self.machine, get_workload(workload), self.dataset, self.schedule, seed=seed, run_index=seed,
                        n_records=self.n_keys, window_s=seconds)  # fmt: skip


# ---- workload-change detection -------------------------------------------------------------------
def profile(row: dict[str, Any]) -> np.ndarray:
    """What the workload looks like from a snapshot: per-slice load shares + keys scanned per query."""
    q = np.asarray(row["queries"], dtype=np.float64)
    share = q / max(q.sum(), 1.0)
    scanned = row.get("keys_scanned")
    per_query = float(np.sum(scanned) / max(q.sum(), 1.0)) if scanned is not None else 0.0
    return np.concatenate([share, [per_query]])


def shift(a: np.ndarray, b: np.ndarray) -> float:
    """Jensen-Shannon divergence of the slice-load shares plus the relative change of scan length."""
    p, q = a[:-1] + 1e-12, b[:-1] + 1e-12
    m = (p + q) / 2
    js = 0.5 * float(np.sum(p * np.log(p / m)) + np.sum(q * np.log(q / m)))
    scan = abs(a[-1] - b[-1]) / max(a[-1], b[-1], 1.0)
    return js + scan


# ---- the champion -------------------------------------------------------------------------------
DEFAULT_SLICES = 256  # without a model to take the slice count from


def check_heuristic(kind: str) -> str:
    from pmoss.contracts.policies import BASELINE_KINDS

    if kind not in BASELINE_KINDS:
        raise ContractError(f"--heuristic: '{kind}' is not a baseline kind ({', '.join(BASELINE_KINDS)})")
    return kind


class NoChampion(PmossError):
    """No version holds the alias: no model has passed the gate, so the heuristic keeps serving."""


class Champion:
    """The served model: a bundle path, or `models:/NAME@ALIAS` re-checked for alias moves."""

    def __init__(self, uri: str, timeline: Timeline):
        self.uri, self.timeline = uri, timeline
        self.bundle: Bundle | None = None
        self.version: str | None = None
        self.no_model: str | None = None  # why no model serves (no version holds the alias), said once

    def refresh(self) -> None:
        """Load when new; on any failure keep what we have and say why (retried next check)."""
        try:
            version, path = self._resolve()
            if version == self.version:
                return
            self.bundle, self.version, self.no_model = load_bundle(path), version, None
            self.timeline.add("model_loaded", uri=self.uri, version=version)
        except NoChampion as e:
            if str(e) != self.no_model:
                self.no_model = str(e)
                self.timeline.add("no_model", uri=self.uri, reason=str(e))
        except PmossError as e:
            self.timeline.add("model_error", uri=self.uri, reason=str(e))
        except Exception as e:  # noqa: BLE001 - an unreachable server raises many kinds; serving must go on
            self.timeline.add("model_error", uri=self.uri, reason=f"{type(e).__name__}: {e}")

    def _resolve(self) -> tuple[str, Path]:
        if not self.uri.startswith("models:/"):
            return str(Path(self.uri).resolve()), Path(self.uri)
        import mlflow

        from pmoss.learn.tracking import mlflow_client
        from pmoss.serve.registry import fetch

        name, _, alias = self.uri.removeprefix("models:/").partition("@")
        client = mlflow_client().MlflowClient()
        try:
            version = str(client.get_model_version_by_alias(name, alias).version)
        except mlflow.exceptions.MlflowException as e:
            if e.error_code == "RESOURCE_DOES_NOT_EXIST":  # nothing registered under the name yet: no champion either
                raise NoChampion(no_registered_model_reason(client, name)) from None
            if e.error_code != "INVALID_PARAMETER_VALUE":  # e.g. an unreachable server: an error
                raise
            raise NoChampion(no_champion_reason(client, name, alias)) from None
        if version == self.version:
            return version, Path()
        return version, fetch(f"models:/{name}/{version}")


def no_registered_model_reason(client: Any, name: str) -> str:
    """Why there is no model at all: nothing registered as `name` on this store (which names are)."""
    import mlflow

    try:
        names = sorted(m.name for m in client.search_registered_models())
    except mlflow.exceptions.MlflowException:
        names = []
    known = f"registered: {', '.join(names)}" if names else "nothing is registered"
    return (f"no model named {name} on {mlflow.get_tracking_uri()} ({known}; `dvc repro` registers one, "
            "`pmoss registry promote --eval ...` makes it champion)")  # fmt: skip


def no_champion_reason(client: Any, name: str, alias: str) -> str:
    """Why no version holds `alias`: the gate's last refusal, or that nothing was promoted yet."""
    import mlflow

    try:
        versions = client.search_model_versions(f"name='{name}'")
    except mlflow.exceptions.MlflowException:
        versions = []
    refused = [v for v in versions if v.tags.get("promotion_decision") == "refused"]
    if refused:
        last = max(refused, key=lambda v: int(v.version))
        return (f"no version of {name} is '{alias}': the gate refused every candidate (version {last.version}: "
                f"{last.tags.get('promotion_reason', '?')})")  # fmt: skip
    return f"no version of {name} is '{alias}' (none promoted yet: pmoss registry promote --eval ...)"


# ---- the loop ------------------------------------------------------------------------------------
@dataclass
class ServeConfig:
    phases: list[Phase]
    round_s: float = 1.0
    trigger: str = "shift"  # shift | timer
    shift_threshold: float = 0.05
    timer_s: float = 10.0
    check_model_every: int = 5  # rounds between alias checks
    initial_kind: str = "os-default"
    target_factor: float = 2.0
    seed: int = 0


def serve(backend: Any, champion: Champion, cfg: ServeConfig, timeline: Timeline) -> Timeline:
    """Run every phase; returns the timeline (also on Ctrl-C)."""
    current = generate(cfg.initial_kind, backend.machine, backend.n_slices)  # type: ignore[arg-type]
    backend.enforce(current)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pmoss-infer")
    pending: Future | None = None
    reference, last_trigger, rounds = None, 0.0, 0
    champion.refresh()
    try:
        for phase_i, phase in enumerate(cfg.phases):
            label = f"{phase_i}:{phase.workload}"
            timeline.add("phase", label, phase.workload)
            for _ in range(max(1, round(phase.seconds / cfg.round_s))):
                row = backend.round(phase.workload, cfg.round_s, seed=cfg.seed + rounds)
                rounds += 1
                timeline.add("throughput", label, phase.workload, row["throughput_qps"], current.kind, **backend.round_latency())
                timeline.add("snapshot", label, phase.workload, schedule=current.kind, episode_id=row["episode_id"])
                if rounds % cfg.check_model_every == 0:
                    champion.refresh()
                if pending is not None and pending.done():
                    current = _finish(pending, backend, timeline, label, current)
                    pending, reference = None, profile(row)
                if pending is None and _triggered(cfg, reference, row, timeline.now() - last_trigger):
                    if champion.bundle is not None:
                        reference, last_trigger = profile(row), timeline.now()
                        timeline.add("inference_start", label, phase.workload, version=champion.version)
                        pending = pool.submit(_infer_and_enforce, champion.bundle, backend, row, cfg, timeline, label)
                        if isinstance(backend, SimBackend):  # simulated time must not run ahead of inference
                            pending.exception()
            timeline.served[label] = current
    except KeyboardInterrupt:
        timeline.add("phase", "stopped", detail="interrupted (Ctrl-C)")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return timeline


def _triggered(cfg: ServeConfig, reference: np.ndarray | None, row: dict[str, Any], since: float) -> bool:
    if reference is None:
        return True  # no schedule from the model yet
    if cfg.trigger == "timer":
        return since >= cfg.timer_s
    return shift(reference, profile(row)) > cfg.shift_threshold


def _infer_and_enforce(bundle: Bundle, backend: Any, row: dict[str, Any], cfg: ServeConfig, timeline: Timeline, label: str) -> Schedule:
    """Background thread: inference on the snapshot, then validate -> migrate -> swap, while the
    main thread keeps running queries on the old schedule."""
    from pmoss.learn.rollout import propose

    t0 = time.perf_counter()
    schedule = propose(bundle, backend.machine, row, **{**bundle.info.get("inference", {}), "target_factor": cfg.target_factor})  # a version may carry its own (dt-critic)
    if isinstance(backend, SimBackend):
        backend.advance(time.perf_counter() - t0)
    # "learned", or the running kind where a critic kept it (rollout._critic_pick)
    timeline.add("inference_end", label, row["workload"], schedule=schedule.kind)
    timeline.add("migration_start", label, row["workload"], schedule=schedule.kind)
    report = backend.enforce(schedule)
    timeline.add("migration_end", label, row["workload"], schedule=schedule.kind, **report)
    return schedule


def _finish(done: Future, backend: Any, timeline: Timeline, label: str, current: Schedule) -> Schedule:
    try:
        return done.result()
    except (ScheduleError, ContractError, ValueError) as e:
        timeline.add("rejected", label, reason=str(e))  # the runtime keeps the old schedule
        return current


def overheads(timeline: Timeline) -> list[dict[str, Any]]:
    """Per enforced schedule: seconds from the snapshot to the enforced schedule (inference +
    migration) and query latency in the round before, during the migration, and the round after."""
    rows, out = timeline.rows, []
    for i, r in enumerate(rows):
        if r["event"] != "inference_start":
            continue
        end = next((j for j in range(i, len(rows)) if rows[j]["event"] in ("migration_end", "rejected")), None)
        if end is None or rows[end]["event"] == "rejected":
            continue
        inf_end = next(rows[j]["t_s"] for j in range(i, end + 1) if rows[j]["event"] == "inference_end")
        before = next((json.loads(rows[j]["detail"]) for j in range(i, -1, -1) if rows[j]["event"] == "throughput"), {})
        after = next((json.loads(rows[j]["detail"]) for j in range(end, len(rows)) if rows[j]["event"] == "throughput"), {})
        during = json.loads(rows[end]["detail"])
        out.append({"phase": r["phase"], "inference_s": inf_end - r["t_s"], "migration_s": rows[end]["t_s"] - inf_end,
                    "snapshot_to_enforced_s": rows[end]["t_s"] - r["t_s"], "slices_moved": during.get("slices_moved"),
                    **{f"{k}_{w}": d.get(f"latency_{k}_ns") for w, d in (("before", before), ("during", during), ("after", after)) for k in ("p50", "p99")}})  # fmt: skip
    return out


def compare_phases(backend: Any, timeline: Timeline, cfg: ServeConfig, kinds: tuple[str, ...], repeats: int = 3) -> dict[str, dict[str, Any]]:
    """Per phase: the schedule in force at the phase's end vs every static baseline, re-measured on
    the same backend for the phase's workload as interleaved repeats (one round each, the order
    rotated every round, the same seed for every schedule within a round). Per schedule the median
    throughput (flat, as before) and its min-max under `spread`; served / best baseline (best by
    median) as a round-paired ratio with its range and a verdict ("within noise" when the range
    includes 1.0). `served_while_serving`: the mean of the phase's steady rounds while serving."""
    out: dict[str, dict[str, Any]] = {}
    for i, phase in enumerate(cfg.phases):
        label = f"{i}:{phase.workload}"
        if label not in timeline.served:
            continue  # the phase never ran (Ctrl-C)
        load = _measured_load(backend, phase.workload, cfg.round_s) if "sn-hot" in kinds else None  # sn-hot widens what is measured hot
        schedules = {"served": timeline.served[label],
                     **{k: generate(k, backend.machine, backend.n_slices, load=load if k == "sn-hot" else None) for k in kinds}}  # type: ignore[arg-type]
        tp = interleaved({name: _round_under(backend, sched, phase.workload, cfg.round_s) for name, sched in schedules.items()}, repeats)
        spreads = {name: Spread.of(v) for name, v in tp.items()}
        best = max(kinds, key=lambda k: spreads[k].median)
        ratio = ratio_spread(tp["served"], tp[best])
        out[label] = {**{name: s.median for name, s in spreads.items()}, "spread": {name: s.as_dict() for name, s in spreads.items()},
                      "best_baseline": best, "served_vs_best": ratio.median, "served_vs_best_min": ratio.lo,
                      "served_vs_best_max": ratio.hi, "verdict": verdict(ratio), "repeats": repeats,
                      "served_while_serving": _steady(timeline, label)}  # fmt: skip
    return out


def _measured_load(backend: Any, workload: str, seconds: float) -> np.ndarray:
    """Per-slice queries of one round under os-default (any worker runs any slice): the load a
    person would measure before hand-widening hot slices."""
    backend.enforce(generate("os-default", backend.machine, backend.n_slices))
    return np.asarray(backend.round(workload, seconds, seed=9_999)["queries"], dtype=float)


def _round_under(backend: Any, schedule: Schedule, workload: str, seconds: float) -> Any:
    def one(r: int) -> float:
        backend.enforce(schedule)
        return float(backend.round(workload, seconds, seed=10_000 + r)["throughput_qps"])

    return one


def _steady(timeline: Timeline, label: str) -> float | None:
    """None for a phase with no throughput round in the timeline (JSON null, not NaN)."""
    rows = [r for r in timeline.rows if r["phase"] == label]
    settled = max([r["t_s"] for r in rows if r["event"] == "migration_end"], default=-math.inf)
    steady = [r["throughput_qps"] for r in rows if r["event"] == "throughput" and r["t_s"] > settled]
    rounds = steady or [r["throughput_qps"] for r in rows if r["event"] == "throughput"]
    return float(np.mean(rounds)) if rounds else None


def plot_timeline(timeline: Timeline, out: Path, source: str) -> None:
    """Throughput over time with inference and migration spans and phase boundaries (cf. the paper's Fig. 17)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = timeline.rows
    tp = [(r["t_s"], r["throughput_qps"]) for r in rows if r["event"] == "throughput"]
    fig, ax = plt.subplots(figsize=(9, 3.2))
    if tp:
        ax.plot([t for t, _ in tp], [v / 1e6 for _, v in tp], marker=".", lw=1.2, label="throughput")
    for start, end, colour, name in (("inference_start", "inference_end", "tab:orange", "inference"), ("migration_start", "migration_end", "tab:red", "migration")):
        starts = [r["t_s"] for r in rows if r["event"] == start]
        ends = [r["t_s"] for r in rows if r["event"] == end]
        for i, (a, b) in enumerate(zip(starts, ends, strict=False)):
            ax.axvspan(a, max(b, a + 0.02), color=colour, alpha=0.3, label=name if i == 0 else None)
    for r in rows:
        if r["event"] == "phase" and r["workload"]:
            ax.axvline(r["t_s"], color="k", lw=0.6, ls="--")
            ax.text(r["t_s"], ax.get_ylim()[1] * 0.95, f" {r['workload']}", fontsize=7, va="top")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput (Mq/s)")
    ax.set_title(f"pmoss serve timeline (source={source})", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def serve_command(
    model: Annotated[str, typer.Option(help="models:/NAME@ALIAS (reloaded when the alias moves) or a bundle path.")] = "models:/pmoss-dt@champion",
    backend: Annotated[str, typer.Option(help="runtime (this host's native runtime) or sim.")] = "runtime",
    machine: Annotated[Optional[str], typer.Option(help="sim: a simulated machine name; runtime: a descriptor file (default: this host's sysfs).")] = None,
    phases: Annotated[str, typer.Option(help="WORKLOAD:SECONDS,... run in order (the dynamic scenario).")] = "ycsb-c:10,scan:10,ycsb-a:10",
    keys: Annotated[Optional[int], typer.Option(help="Keys loaded into the index (default: runtime 1,000,000, what this host holds; "
                                                 "sim 10,000,000, the pools' n_records the models are trained on).")] = None,
    dataset: Annotated[str, typer.Option(help="Key distribution of the loaded keys.")] = "dense",
    n_slices: Annotated[Optional[int], typer.Option(help="Slices (default: the model's).")] = None,
    round_s: Annotated[float, typer.Option(help="Seconds per round (one snapshot each).")] = 1.0,
    trigger: Annotated[str, typer.Option(help="shift (workload change seen in snapshots) or timer.")] = "shift",
    timer_s: Annotated[float, typer.Option(help="With --trigger timer: seconds between inferences.")] = 10.0,
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for timeline.parquet, timeline.png and phases.json.")] = Path("serve"),
    compare: Annotated[bool, typer.Option(help="Afterwards, run every static baseline per phase and compare.")] = True,
    repeats: Annotated[int, typer.Option(min=1, help="With --compare: interleaved rounds per schedule and phase (median and min-max; >= 2 to tell a win from noise).")] = 3,
    heuristic: Annotated[str, typer.Option(help="Schedule kind served until the model's first schedule, and throughout when no version is champion.")] = "os-default",
) -> None:
    """Serve a workload while the champion model proposes and enforces schedules."""
    plan = parse_phases(phases)
    if trigger not in ("shift", "timer"):
        raise ContractError(f"--trigger: '{trigger}' is not shift or timer")
    check_heuristic(heuristic)
    timeline = Timeline()
    champion = Champion(model, timeline)
    champion.refresh()
    if champion.bundle is None and champion.no_model is None:
        raise ContractError(f"--model {model}: cannot load it ({json.loads(timeline.rows[-1]['detail'])['reason']})")
    if champion.bundle is None:  # do no harm: no model beat the heuristics, so the heuristic serves
        typer.echo(f"serving the heuristic {heuristic}: {champion.no_model}")
    n = n_slices or (champion.bundle.config.n_slices if champion.bundle else DEFAULT_SLICES)
    be = _backend(backend, machine, keys, dataset, n, timeline)
    cfg = ServeConfig(plan, round_s=round_s, trigger=trigger, timer_s=timer_s, initial_kind=heuristic)
    source = "sim" if backend == "sim" else "real"
    try:
        serve(be, champion, cfg, timeline)
    finally:
        timeline.write(output / "timeline.parquet")
        plot_timeline(timeline, output / "timeline.png", source)
    typer.echo(f"timeline: {output / 'timeline.parquet'}  plot: {output / 'timeline.png'}")
    if compare:
        from pmoss.contracts.io import atomic_write_text
        from pmoss.contracts.policies import BASELINE_KINDS

        phases_out = compare_phases(be, timeline, cfg, BASELINE_KINDS, repeats)
        atomic_write_text(output / "phases.json", json.dumps({"source": source, "phases": phases_out, "overheads": overheads(timeline)}, indent=1) + "\n")
        _print_phases(phases_out, source)


def _print_phases(phases: dict[str, dict[str, Any]], source: str) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    n = next(iter(phases.values()), {}).get("repeats", 0)
    table = Table(title=escape(f"served schedule vs static baselines per phase (Mq/s, median [min-max] of {n} interleaved rounds, source={source})"))
    for col in ("phase", "served", "best baseline", "served / best", "verdict"):
        table.add_column(col)
    for label, e in phases.items():
        served, best = Spread(**_spread_args(e["spread"]["served"])), Spread(**_spread_args(e["spread"][e["best_baseline"]]))
        ratio = Spread(e["served_vs_best"], e["served_vs_best_min"], e["served_vs_best_max"], e["repeats"])
        cells = (label, served.format(1e6), f"{e['best_baseline']} {best.format(1e6)}", ratio.format(digits=3), e["verdict"])
        table.add_row(*map(escape, cells))
    Console().print(table)


def _spread_args(d: dict[str, Any]) -> dict[str, Any]:
    return {"median": d["median"], "lo": d["min"], "hi": d["max"], "n": d["n"]}


SIM_KEYS, RUNTIME_KEYS = 10_000_000, 1_000_000  # --keys defaults per backend (see serve_command)


def _backend(kind: str, machine: str | None, keys: int | None, dataset: str, n: int, timeline: Timeline) -> Any:
    if keys is not None and keys <= 0:
        raise typer.BadParameter(f"{keys}: must be positive", param_hint="--keys")
    keys = keys or (SIM_KEYS if kind == "sim" else RUNTIME_KEYS)
    if kind == "sim":
        from pmoss.sim import load_sim_machine

        be = SimBackend(load_sim_machine(machine or "intel-skx-4s"), keys, dataset, n)
        timeline.clock = lambda: be.t
        return be
    if kind == "runtime":
        from pmoss.collect.topology import discover
        from pmoss.contracts.machine import load_machine

        return RuntimeBackend(load_machine(Path(machine)) if machine else discover(), keys, dataset, n)
    raise ContractError(f"--backend: '{kind}' is not runtime or sim")
