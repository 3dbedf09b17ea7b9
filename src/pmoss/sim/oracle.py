"""Oracle: the best one-core schedule the (noise-free) model can find, by batched local search.

Simulated annealing over worker-index vectors, started from the best one-core heuristic or random
schedule (a quarter of the budget goes to random starts). Each round
proposes a batch of neighbours (move a slice off the busiest thread, or swap two slices), scores
them in one vectorised model call and moves to the best one, accepting a worse one with the
Metropolis probability. docs/machine-model.md §13.
"""

from __future__ import annotations

import numpy as np

from pmoss.contracts.machine import Machine
from pmoss.contracts.policies import generate
from pmoss.contracts.schedule import Schedule
from pmoss.contracts.workload import Workload
from pmoss.sim.episode import Inputs, SimInputError, model_run, resolve
from pmoss.sim.hardware import HW, hw_for
from pmoss.sim.placement import from_actions

SEED_KINDS = ("sn-grouped", "sn-spread", "sn-mixed", "sn-random")
SEED_VARIANTS = 4  # generator seeds tried per heuristic kind
RANDOM_SHARE = 0.25  # share of the budget spent on extra sn-random starts (cheap, often lucky)
PROPOSALS = 32  # neighbours scored per round (one model call)
T_START, T_END = 0.02, 0.0005  # annealing temperature, as a fraction of the current throughput


def oracle(machine: Machine | str, workload: Workload | str, dataset: str, n_slices: int, *, seed: int,
           budget: int = 2000, n_records: int = 10_000_000) -> tuple[Schedule, float]:
    """(best schedule found, its noise-free throughput in queries/s) within `budget` model evaluations."""
    inp = resolve(machine, workload, dataset, n_records, 1.0)
    if budget < len(SEED_KINDS) * SEED_VARIANTS:
        raise SimInputError(f"budget: needs at least {len(SEED_KINDS) * SEED_VARIANTS} evaluations, got {budget}")
    hw = hw_for(inp.machine)
    rng = np.random.default_rng(seed)
    n_random = int(RANDOM_SHARE * budget)
    best, best_x, util = _best_start(inp, hw, n_slices, n_random, seed)
    cur, cur_x = best.copy(), best_x
    rounds = max(1, (budget - len(SEED_KINDS) * SEED_VARIANTS - n_random) // PROPOSALS)
    for r in range(rounds):
        cand = _neighbours(hw, cur, util, rng)  # [P, N]
        xs, utils = _score(inp, hw, cand)
        i = int(xs.argmax())
        temp = T_START * (T_END / T_START) ** (r / max(rounds - 1, 1)) * cur_x
        if xs[i] >= cur_x or rng.random() < np.exp((xs[i] - cur_x) / temp):
            cur, cur_x, util = cand[i], xs[i], utils[i]
        if cur_x > best_x:
            best, best_x = cur.copy(), cur_x
    prov = {"generator": "oracle", "seed": seed, "budget": budget, "workload": inp.workload.name, "dataset": inp.dataset}
    return Schedule.from_actions(inp.machine, [int(a) for a in best], kind="learned", **prov), float(best_x)


def _score(inp: Inputs, hw: HW, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, _, sol, _ = model_run(inp, from_actions(hw, actions), actions.shape[1])
    return sol.X, sol.thread_util


def _best_start(inp: Inputs, hw: HW, n_slices: int, n_random: int, seed: int) -> tuple[np.ndarray, float, np.ndarray]:
    """The best of the one-core baselines (a few generator seeds per kind) and n_random extra
    uniformly random schedules."""
    scheds = [generate(k, inp.machine, n_slices, s) for k in SEED_KINDS for s in range(SEED_VARIANTS)]
    actions = np.array([hw.cpu_to_worker[np.asarray(s.core)] for s in scheds])
    extra = np.random.default_rng([seed, 1]).integers(hw.n_workers, size=(n_random, n_slices))
    actions = np.concatenate([actions, extra])
    xs, utils = _score(inp, hw, actions)
    i = int(xs.argmax())
    return actions[i].copy(), float(xs[i]), utils[i]


def _neighbours(hw: HW, cur: np.ndarray, util: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """PROPOSALS variants of `cur` [N]: half move a slice off the busiest threads or their SMT
    siblings to a thread on one of the least used physical cores, half swap two random slices."""
    n = cur.size
    cand = np.repeat(cur[None], PROPOSALS, axis=0)
    busy = np.argsort(-util)[:4]  # the threads that bound throughput, and their SMT siblings
    busy = np.flatnonzero(np.isin(hw.worker_core, hw.worker_core[busy]))
    on_busy = np.flatnonzero(np.isin(cur, busy))
    core_load = np.bincount(hw.worker_core, util, hw.n_cores)[hw.worker_core] + util  # own + siblings
    light = np.argsort(core_load)[: max(4, hw.n_workers // 8)]
    for p in range(PROPOSALS):
        if p % 2 == 0 and on_busy.size:
            cand[p, rng.choice(on_busy)] = rng.choice(light)
        else:
            i, j = rng.choice(n, size=2, replace=False)
            cand[p, i], cand[p, j] = cur[j], cur[i]
    return cand
