"""Oracle: the best schedule the (noise-free) model can find, by batched local search.

Two search spaces over the machine's candidate execution groups (contracts/groups.py):
- `group` (the default, the upper reference in every evaluation): a slice may go to any group —
  one thread, one physical core, one L3 domain or a whole node. Moves: move a slice off the
  busiest threads, widen a slice's group, narrow it, move it to another node's group of the same
  width, swap two slices. Seeded from every baseline with per-slice groups (sn-numa, sn-hot from
  the workload's load, the one-core heuristics) and random schedules.
- `one-core` (the paper's SN:T space): threads only; moves and swaps.

Simulated annealing: each round proposes a batch of neighbours, scores them in one vectorised model
call, moves to the best one and accepts a worse one with the Metropolis probability. The budget
(model evaluations) scales with the machine: `budget_for` gives the default, so a 200-400-thread
machine is searched as thoroughly per slice decision as the demo's. `trajectory` records the best
schedule found at several budgets: the search-improved training data (kind `search`).
docs/machine-model.md §13.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import numpy as np

from pmoss.contracts.groups import groups_of
from pmoss.contracts.machine import Machine
from pmoss.contracts.policies import generate
from pmoss.contracts.schedule import LOAD_CAP, Kind, Schedule
from pmoss.contracts.workload import Workload
from pmoss.sim.episode import Inputs, SimInputError, model_run, resolve
from pmoss.sim.hardware import HW, Calibration, hw_for
from pmoss.sim.placement import from_groups
from pmoss.sim.profile import load_share

Space = Literal["group", "one-core"]
R = TypeVar("R")
ONE_CORE_SEEDS = ("sn-grouped", "sn-spread", "sn-mixed", "sn-random")
GROUP_SEEDS = ("sn-numa", "sn-hot") + ONE_CORE_SEEDS
SEED_VARIANTS = 4  # generator seeds tried per heuristic kind
RANDOM_SHARE = 0.25  # share of the budget spent on extra random starts (cheap, often lucky)
PROPOSALS = 32  # neighbours scored per round (one model call)
T_START, T_END = 0.02, 0.0005  # annealing temperature, as a fraction of the current throughput
CAPPED_STARTS = 32  # group space: random starts drawn under a load cap (see _capped)
SCORE_CELLS = 1 << 27  # schedule x slice x worker cells per model call (~120 MB at ~1 B a cell): bounds a search's memory on big machines
BUDGET_BASE, BUDGET_PER_WORKER = 2000, 10  # default evaluations: 2,000 on the demo machines, ~5,000 at 300 threads


def budget_for(machine: Machine) -> int:
    """Default search budget: grows with the worker count, since the neighbourhood does."""
    return max(BUDGET_BASE, BUDGET_PER_WORKER * machine.n_workers + 1000)


def oracle(machine: Machine | str, workload: Workload | str, dataset: str, n_slices: int, *, seed: int,
           budget: int | None = None, n_records: int = 10_000_000, space: Space = "group",
           calibration: Calibration | None = None) -> tuple[Schedule, float]:
    """(best schedule found, its noise-free throughput in queries/s) within `budget` model evaluations
    (None: `budget_for(machine)`)."""
    path = trajectory(machine, workload, dataset, n_slices, seed=seed, budgets=[budget] if budget else None, n_records=n_records, space=space,
                      calibration=calibration)
    return path[-1]


def trajectory(machine: Machine | str, workload: Workload | str, dataset: str, n_slices: int, *, seed: int,
               budgets: list[int] | None = None, n_records: int = 10_000_000, space: Space = "group",
               kind: Kind = "learned", calibration: Calibration | None = None) -> list[tuple[Schedule, float]]:  # fmt: skip
    """The best schedule found after each of `budgets` evaluations (ascending; one search, read at
    several points), each with its noise-free throughput. Provenance names the generator and budget."""
    inp = resolve(machine, workload, dataset, n_records, 1.0, calibration)
    budgets = sorted(budgets or [budget_for(inp.machine)])
    hw = hw_for(inp.machine)
    rng = np.random.default_rng(seed)
    load = load_share(inp.workload, inp.n_records, n_slices, inp.dataset)  # [N], sums to 1
    starts = _starts(inp, n_slices, space, load)
    if budgets[0] < len(starts):
        raise SimInputError(f"budget: needs at least {len(starts)} evaluations (the seed schedules), got {budgets[0]}")
    n_random = min(int(RANDOM_SHARE * budgets[-1]), max(0, budgets[0] - len(starts)))
    rng0 = np.random.default_rng([seed, 1])
    n_capped = min(CAPPED_STARTS, n_random // 2) if space == "group" else 0
    cand = np.concatenate([starts, _random(hw, n_slices, n_random - n_capped, space, rng0), _capped(hw, load, n_capped, rng0)])
    xs, utils = _score(inp, cand)
    i = int(xs.argmax())
    best, best_x, used = cand[i].copy(), float(xs[i]), len(cand)
    cur, cur_x, util = best.copy(), best_x, utils[i]
    rounds = max(1, (budgets[-1] - used) // PROPOSALS)
    out: list[tuple[Schedule, float]] = []
    pending = list(budgets)
    for r in range(rounds + 1):
        while pending and (used >= pending[0] or r == rounds):
            out.append((_schedule(inp, best, kind, seed, pending.pop(0), space), best_x))
        if r == rounds:
            break
        cand = _neighbours(hw, cur, util, rng, space)  # [P, N]
        xs, utils = _score(inp, cand)
        used += len(cand)
        i = int(xs.argmax())
        temp = T_START * (T_END / T_START) ** (r / max(rounds - 1, 1)) * cur_x
        if xs[i] >= cur_x or rng.random() < np.exp((xs[i] - cur_x) / temp):
            cur, cur_x, util = cand[i], float(xs[i]), utils[i]
        if cur_x > best_x:
            best, best_x = cur.copy(), cur_x
    return out


def on_cores(fn: Callable[..., R], calls: Sequence[tuple[Any, ...]], workers: int | None = None, progress: str | None = None,
             unit: str = "task", quiet: bool = False) -> list[R]:  # fmt: skip
    """[fn(*args) for args in calls], a worker process per core (default `os.cpu_count()`; joblib,
    each worker's BLAS on one thread). With a title `progress`: a bar on a terminal, else (or
    `quiet`) a line of done/total `unit`s every PMOSS_PROGRESS_S seconds (progress.py). For
    independent searches: each is seeded, so the results are the ones one process gets, in order."""
    from rich.progress import track

    from pmoss.progress import Ticker, line_interval, show_bar

    n = min(len(calls), workers or os.cpu_count() or 1)
    if n <= 1:
        results = (fn(*args) for args in calls)
    else:
        from joblib import Parallel, delayed

        results = Parallel(n_jobs=n, return_as="generator")(delayed(fn)(*args) for args in calls)
    bar = progress is not None and show_bar(not quiet)
    out = []
    with Ticker(progress or "", len(calls), unit, line_interval(bar) if progress is not None else 0.0) as ticker:
        for r in track(results, total=len(calls), description=progress or "", disable=not bar):
            out.append(r)
            ticker.advance()
    return out


def _schedule(inp: Inputs, groups: np.ndarray, kind: Kind, seed: int, budget: int, space: Space) -> Schedule:
    prov = {"generator": "search" if kind == "search" else "oracle", "space": space, "seed": seed, "budget": budget,
            "workload": inp.workload.name, "dataset": inp.dataset}  # fmt: skip
    return Schedule.from_groups(inp.machine, groups, kind=kind, **prov).validate_for(inp.machine)


def _score(inp: Inputs, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Noise-free throughput [B] and per-thread utilisation [B, W] of candidate schedules [B, N],
    in chunks of at most SCORE_CELLS (schedule x slice x worker) cells. The model's per-call memory
    grew with the cells: ~16 B a cell once, when the first batch (the starts and ~a quarter of the
    budget as random schedules) of a 2,048-slice search on 1,024 workers was ~46 GB in one call;
    ~1 B a cell since the memory weights are kept per memory node (6.5 B before that). Rows are
    independent, so the chunking changes no score."""
    W = inp.machine.n_workers
    hw = hw_for(inp.machine, inp.calibration)
    step = max(1, SCORE_CELLS // (groups.shape[1] * W))
    xs, utils = [], []
    for lo in range(0, len(groups), step):
        _, _, sol, _ = model_run(inp, from_groups(hw, groups[lo:lo + step]), groups.shape[1])
        xs.append(sol.X)
        utils.append(sol.thread_util)
    return np.concatenate(xs), np.concatenate(utils)


def _starts(inp: Inputs, n_slices: int, space: Space, load: np.ndarray) -> np.ndarray:
    """The baselines of the space (a few generator seeds per kind) as group indices [S, N]."""
    kinds = GROUP_SEEDS if space == "group" else ONE_CORE_SEEDS
    scheds = [generate(k, inp.machine, n_slices, s, load=load if k == "sn-hot" else None) for k in kinds for s in range(SEED_VARIANTS)]
    return np.stack([s.group_index(inp.machine) for s in scheds])


def _random(hw: HW, n_slices: int, n: int, space: Space, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random schedules: a random worker per slice, and in the group space a random width."""
    g = groups_of(hw.machine)
    w = rng.integers(hw.n_workers, size=(n, n_slices))
    width = rng.integers(g.of_worker.shape[0], size=(n, n_slices)) if space == "group" else np.zeros_like(w)
    return g.of_worker[width, w]


def _capped(hw: HW, share: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Random group schedules under a load cap (as the model's rollout is): each slice in turn to a
    random group whose busiest member stays under LOAD_CAP x its fair share of the workload's load,
    else to one of the groups that end least loaded. Good starts the random ones rarely are."""
    n_slices = share.size
    if n == 0:
        return np.zeros((0, n_slices), dtype=np.int64)
    g = groups_of(hw.machine)
    load = share * hw.n_workers  # [N] in fair shares
    per = g.member / g.size[:, None]  # [G, W] a slice's share on each member
    inv = 1.0 / g.size  # [G] the share on each member of g
    # busiest member per group by a segment max over the memberships (group-major), not a [G, W]
    # mask per slice: every member gets the same 1/|g|, so max(wload) + that is the busiest after, bit for bit
    of_group, members = np.nonzero(g.member)
    segment = np.flatnonzero(np.r_[True, of_group[1:] != of_group[:-1]])
    wload = np.zeros((n, hw.n_workers))
    out = np.zeros((n, n_slices), dtype=np.int64)
    for t in range(n_slices):
        after = np.maximum.reduceat(wload[:, members], segment, axis=1) + load[t] * inv  # [n, G]
        ok = after <= LOAD_CAP + 1e-9
        ok = np.where(ok.any(1, keepdims=True), ok, after <= after.min(1, keepdims=True) * (1 + 1e-9))
        pick = np.array([rng.choice(np.flatnonzero(r)) for r in ok], dtype=np.int64)
        out[:, t] = pick
        wload += load[t] * per[pick]
    return out


def _neighbours(hw: HW, cur: np.ndarray, util: np.ndarray, rng: np.random.Generator, space: Space) -> np.ndarray:
    """PROPOSALS variants of `cur` [N] (group indices): moves of a slice off the busiest threads to
    a thread of the least used physical cores, swaps of two slices and, in the group space, a
    slice's group widened, narrowed, or moved to another node at the same width."""
    g = groups_of(hw.machine)
    n = cur.size
    cand = np.repeat(cur[None], PROPOSALS, axis=0)
    busy = np.argsort(-util)[:4]  # the threads that bound throughput, and their SMT siblings
    busy = np.isin(hw.worker_core, hw.worker_core[busy])
    on_busy = np.flatnonzero((g.member[cur] & busy).any(1))
    core_load = np.bincount(hw.worker_core, util, hw.n_cores)[hw.worker_core] + util  # own + siblings
    light = np.argsort(core_load)[: max(4, hw.n_workers // 8)]
    moves = ("move", "swap", "widen", "narrow", "node") if space == "group" else ("move", "swap")
    for p in range(PROPOSALS):
        move = moves[p % len(moves)]
        if move == "move" and on_busy.size:
            i = rng.choice(on_busy)
            width = g.width[cur[i]] if space == "group" else 0
            cand[p, i] = g.of_worker[width, rng.choice(light)]
        elif move == "widen" or move == "narrow":
            i = rng.choice(on_busy) if on_busy.size and rng.random() < 0.5 else rng.integers(n)
            members = np.flatnonzero(g.member[cur[i]])
            width = int(np.clip(g.width[cur[i]] + (1 if move == "widen" else -1), 0, g.of_worker.shape[0] - 1))
            cand[p, i] = g.of_worker[width, rng.choice(members)]
        elif move == "node":
            i = rng.integers(n)
            cand[p, i] = g.of_worker[g.width[cur[i]], rng.integers(hw.n_workers)]
        else:
            i, j = rng.choice(n, size=2, replace=False)
            cand[p, i], cand[p, j] = cur[j], cur[i]
    return cand
