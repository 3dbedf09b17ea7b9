"""The demo's fixed costs, each measured against its baseline in the same run (interleaved rounds).

Parts:
  gc        one training stage as its own process (`pmoss train DATA --algo bc --max-steps S`, as
            dvc runs it): the CLI as shipped (collector every 20k allocations, frozen at exit) vs
            the same process with Python's defaults (threshold 700, a full collection at exit)
  searches  the oracle searches the demo's `collect` reads (tiny pool, 4 search runs): a worker
            process per core vs one after another in one process; the schedules are checked equal

`gc` trains on the demo's datasets/offline when `make demo` made it, else on a small dataset it
collects and builds first (tiny pool, 8 episodes a cell). Inputs are simulated (source=sim); only
wall time is measured.

    .venv/bin/python benchmarks/bench_demo.py [--parts gc,searches] [--rounds 5] [--steps 30]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pmoss.bench import Spread, interleaved, ratio_spread, sign_test, verdict, write_record

ROOT = Path(__file__).resolve().parents[1]
# Python's defaults inside the same process: the CLI's two collector calls made no-ops
DEFAULT_GC = "import gc, sys; gc.set_threshold = lambda *a: None; gc.freeze = lambda: None; from pmoss.cli import main; sys.argv[0] = 'pmoss'; main()"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env)
    return time.perf_counter() - t0


def gc_part(data: Path | None, steps: int, rounds: int) -> None:
    pmoss = str(Path(sys.executable).with_name("pmoss"))
    launchers = {"shipped": [pmoss], "python-default": [sys.executable, "-c", DEFAULT_GC]}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}  # the runs go to a scratch store
        label = str(data) if data else "built here: tiny pool, 8 episodes a cell, no searches"
        if data is None:
            data = Path(tmp) / "tokens"
            subprocess.run([pmoss, "collect", "datasets/pools/tiny.yaml", "-o", f"{tmp}/raw", "--episodes-per-cell", "8", "--search-runs", "0", "--quiet"],
                           check=True, cwd=ROOT, env=env)  # fmt: skip
            subprocess.run([pmoss, "dataset", "build", f"{tmp}/raw", "-o", str(data)], check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)

        def train(name: str):
            def run(r: int) -> float:
                out = Path(tmp) / f"{name}-{r}"  # a fresh output: nothing to resume from
                return timed([*launchers[name], "train", str(data), "--output", str(out), "--algo", "bc", "--config", "training/bc-tiny.yaml",
                              "--max-steps", str(steps), "--quiet"], env)  # fmt: skip
            return run

        timed([*launchers["shipped"], "train", str(data), "--output", f"{tmp}/warm", "--algo", "bc", "--config", "training/bc-tiny.yaml", "--max-steps", "1",
               "--quiet"], env)  # creates the store
        times = interleaved({name: train(name) for name in launchers}, rounds)
    shipped, default = Spread.of(times["shipped"]), Spread.of(times["python-default"])
    ratio = ratio_spread(times["shipped"], times["python-default"])
    print(f"gc: shipped {shipped.format()} s vs default {default.format()} s; ratio {ratio.format(digits=3)} ({verdict(ratio, higher_is_better=False)})")
    write_record("demo_gc_train_stage", "wall_s", shipped.median, "s", "python default gc", default.median, ratio_spread=ratio.as_dict(),
                 rounds=times, sign_test=sign_test(times["shipped"], times["python-default"]), steps=steps, data=label, source="sim")  # fmt: skip


def searches_part(rounds: int) -> None:
    from pmoss.collect.driver import searches
    from pmoss.collect.plan import expand, load_pool

    pool = load_pool(ROOT / "datasets/pools/tiny.yaml").model_copy(update={"search_runs": 4, "search_budgets": [250, 1000, 2000]})
    specs = list(expand(pool))
    got: dict[str, dict] = {}

    def run(workers: int | None):
        def once(r: int) -> float:
            t0 = time.perf_counter()
            got[str(workers)] = searches(specs, workers=workers)
            return time.perf_counter() - t0
        return once

    times = interleaved({"per-core": run(None), "one-process": run(1)}, rounds)
    same = all({b: s.model_dump() for b, s in got["None"][k].items()} == {b: s.model_dump() for b, s in v.items()} for k, v in got["1"].items())
    if not same:
        sys.exit("searches: the worker processes' schedules differ from one process's")
    ratio = ratio_spread(times["per-core"], times["one-process"])
    print(f"searches ({len(got['1'])}): per core {Spread.of(times['per-core']).format()} s vs one process "
          f"{Spread.of(times['one-process']).format()} s; ratio {ratio.format(digits=3)}; schedules equal")  # fmt: skip
    write_record("demo_collect_searches", "wall_s", Spread.of(times["per-core"]).median, "s", "one process", Spread.of(times["one-process"]).median,
                 ratio_spread=ratio.as_dict(), rounds=times, searches=len(got["1"]), cpus=os.cpu_count(), schedules_equal=same, source="sim")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="gc,searches", help="comma-separated: gc, searches")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per part")
    ap.add_argument("--steps", type=int, default=30, help="gc: training steps of the stage")
    ap.add_argument("--data", type=Path, help="gc: a tokenised dataset (default: the demo's datasets/offline if it exists, else one built here)")
    args = ap.parse_args()
    parts = args.parts.split(",")
    if unknown := set(parts) - {"gc", "searches"}:
        ap.error(f"--parts: unknown {', '.join(sorted(unknown))} (known: gc, searches)")
    if "gc" in parts:
        demo = ROOT / "datasets/offline"
        gc_part(args.data.resolve() if args.data else demo if (demo / "tokens.parquet").is_file() else None, args.steps, args.rounds)
    if "searches" in parts:
        searches_part(args.rounds)


if __name__ == "__main__":
    main()
