"""Pools and plans: which episodes to collect (machines x workloads x datasets x schedule kinds).

A pool file (`datasets/pools/*.yaml`) names the cells and the schedule-kind mix; `expand()`
turns it into a deterministic list of episode specs. The same pool always expands to the same
specs, so episode ids are stable and collection is resumable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pmoss.contracts.io import load_model_with_flags, one_of
from pmoss.contracts.limits import (
    MAX_RECORDS,
    MAX_SLICES,
    PLAN_BYTES_PER_EPISODE,
    PLAN_BYTES_PER_SLICE,
    at_most,
    require_memory,
    sim_bytes,
)
from pmoss.contracts.policies import PAPER_MIX
from pmoss.contracts.schedule import EXPLORE_KINDS, ONE_CORE_KINDS, SHARED_KINDS
from pmoss.contracts.workload import DATASETS, WORKLOADS

Backend = Literal["sim", "runtime"]

# A pool's numbers are strict, as a machine descriptor's (contracts/machine.py): a YAML `true` is no
# number, though pydantic would read it as 1 (nor is "3" or 3.0 a count); an int is a float.
Count = Annotated[int, Field(strict=True, gt=0)]
Fraction = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class Pool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    backend: Backend = "sim"
    machines: list[str] = Field(min_length=1)
    workloads: Annotated[list[str], one_of(WORKLOADS, "workload")] = Field(min_length=1)
    datasets: Annotated[list[str], one_of(DATASETS, "dataset")] = ["dense"]
    # generated kind -> fraction of a cell's episodes: the paper's one-core kinds and the exploration kind
    mix: dict[str, Fraction] = dict(PAPER_MIX)
    shared_kinds: list[str] = []  # OS/SE/SN:N modes: runs_per_shared_kind episodes each per cell
    runs_per_shared_kind: int = Field(default=1, ge=0, strict=True)
    # Search-improved episodes (kind `search`, generator=search): `search_runs` oracle searches per
    # cell over execution groups, each read at every one of `search_budgets` model evaluations.
    search_runs: int = Field(default=0, ge=0, strict=True)
    search_budgets: list[Count] = [250, 1000, 4000]
    episodes_per_cell: Count
    n_slices: Annotated[Count, at_most(MAX_SLICES, "the runtime's slice cap")] = 256
    n_records: Annotated[Count, at_most(MAX_RECORDS, "2**40 records, 16 TiB of keys and values: more than any machine holds")] = 10_000_000
    window_s: float = Field(10.0, gt=0, strict=True, allow_inf_nan=False)
    seed: int = Field(0, strict=True)
    # machine -> testbed host: those episodes run only on that host (Ray resource `host:<name>`)
    hosts: dict[str, str] = {}
    # machine -> descriptor file for real hosts; absent = `pmoss topology` of the host the episode runs on
    descriptors: dict[str, str] = {}

    @field_validator("machines")
    @classmethod
    def _generated(cls, refs: list[str]) -> list[str]:
        """A generated range `gen:A-B` becomes its machines gen-A ... gen-B (both ends included)."""
        from pmoss.contracts.errors import ContractError
        from pmoss.sim.pool import expand_generated

        try:
            return expand_generated(refs)
        except ContractError as e:
            raise ValueError(str(e).removeprefix("machine: ")) from None

    @model_validator(mode="after")
    def _mix(self) -> Pool:
        bad = [k for k in self.mix if k not in ONE_CORE_KINDS + EXPLORE_KINDS]
        if bad:
            raise ValueError(f"mix: '{bad[0]}' is not a generated mix kind ({', '.join(ONE_CORE_KINDS + EXPLORE_KINDS)})")
        if any(v < 0 for v in self.mix.values()) or abs(sum(self.mix.values()) - 1) > 0.005:
            raise ValueError(f"mix: fractions must be >= 0 and sum to 1, they sum to {sum(self.mix.values()):g}")
        bad = [k for k in self.shared_kinds if k not in SHARED_KINDS]
        if bad:
            raise ValueError(f"shared_kinds: '{bad[0]}' is not one of {', '.join(SHARED_KINDS)}")
        if self.search_runs and self.backend != "sim":
            raise ValueError("search_runs: search-improved episodes come from the simulator's oracle; use backend sim")
        return self._hosts()

    def _hosts(self) -> Pool:
        stray = [m for m in self.hosts if m not in self.machines]
        if stray:
            raise ValueError(f"hosts: machine '{stray[0]}' is not in machines ({', '.join(self.machines)})")
        unbound = [m for m in self.machines if m not in self.hosts]
        if self.backend == "runtime" and unbound:
            raise ValueError(f"hosts: backend 'runtime' runs on real testbed hosts; machine '{unbound[0]}' has no host")
        return self


    def episodes_per_cell_total(self) -> int:
        """Every episode a cell plans: the mix, the shared kinds' runs and the search episodes."""
        return self.episodes_per_cell + len(self.shared_kinds) * self.runs_per_shared_kind + self.search_runs * len(self.search_budgets)

    def n_cells(self) -> int:
        return len(self.machines) * len(self.workloads) * len(self.datasets)


def check_memory(pool: Pool, where: Callable[[str], str], chunk: int) -> None:
    """Refuse a pool whose plan (every episode's spec and schedule, held until it runs) and one
    chunk of `chunk` episodes in the simulator need more memory than this machine has; the error
    names the field to lower, the larger part's (`where(field)` says where it was given)."""
    per_cell = pool.episodes_per_cell_total()
    episodes = per_cell * pool.n_cells()
    plan = episodes * (PLAN_BYTES_PER_EPISODE + PLAN_BYTES_PER_SLICE * pool.n_slices)
    batch = 0
    if pool.backend == "sim":
        from pmoss.contracts.errors import ContractError
        from pmoss.sim import load_sim_machine

        workers = []
        for name in pool.machines:
            try:
                workers.append(load_sim_machine(name).n_workers)
            except ContractError:  # an unknown machine: the machine check after this one names it with its field
                pass
        batch = sim_bytes(min(chunk, per_cell), pool.n_slices, max(workers, default=0))
    if plan >= batch:
        require_memory(plan + batch, where("episodes_per_cell"), f"{episodes} planned episodes ({per_cell} per cell x {pool.n_cells()} cells, {pool.n_slices} slices each)",
                       "lower episodes_per_cell (or the other counts per cell), or split the pool into several")
    else:
        require_memory(plan + batch, where("n_slices"), f"{min(chunk, per_cell)} episodes of {pool.n_slices} slices simulated together", "lower n_slices")


class EpisodeSpec(BaseModel):
    """One episode to run: a schedule (kind + seed) on a machine under a workload."""

    model_config = ConfigDict(frozen=True)
    machine: str
    workload: str
    dataset: str
    kind: str
    schedule_seed: int
    seed: int  # workload / noise seed
    run_index: int
    n_slices: int
    n_records: int
    window_s: float
    backend: Backend
    budget: int | None = None  # kind search: the schedule the search found after this many evaluations
    budgets: tuple[int, ...] = ()  # kind search: every budget its search is read at (one search serves all)
    host: str | None = None  # testbed host the episode must run on; None = anywhere
    descriptor: str | None = None  # a real host's descriptor file (runtime backend)

    @property
    def cell(self) -> tuple[str, str, str, int, int, float, str, str | None]:
        """Episodes with the same cell can share one backend call (and one output file)."""
        return (self.machine, self.workload, self.dataset, self.n_slices, self.n_records, self.window_s, self.backend, self.host)


def load_pool(path: Path, **overrides: object) -> Pool:
    return load_model_with_flags(Pool, Path(path), overrides)


def kind_counts(mix: dict[str, float], n: int) -> dict[str, int]:
    """Split n episodes over kinds by largest remainder, so counts sum to n exactly."""
    total = sum(mix.values())  # the paper's rounded mix sums to 1.002
    raw = {k: v / total * n for k, v in mix.items()}
    counts = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: raw[k] - counts[k], reverse=True)[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def derive_seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little")


def expand(pool: Pool) -> list[EpisodeSpec]:
    specs = []
    for machine in pool.machines:
        for workload in pool.workloads:
            for dataset in pool.datasets:
                kinds = [(k, i) for k, c in kind_counts(pool.mix, pool.episodes_per_cell).items() for i in range(c)]
                kinds += [(k, i) for k in pool.shared_kinds for i in range(pool.runs_per_shared_kind)]
                for kind, i in kinds:
                    s = derive_seed(pool.seed, machine, workload, dataset, kind, i)
                    specs.append(EpisodeSpec(
                        machine=machine, workload=workload, dataset=dataset, kind=kind,
                        schedule_seed=0 if kind in SHARED_KINDS else s, seed=s, run_index=i,
                        n_slices=pool.n_slices, n_records=pool.n_records, window_s=pool.window_s, backend=pool.backend,
                        host=pool.hosts.get(machine), descriptor=pool.descriptors.get(machine),
                    ))  # fmt: skip
                specs += _search_specs(pool, machine, workload, dataset)
    return specs


def _search_specs(pool: Pool, machine: str, workload: str, dataset: str) -> list[EpisodeSpec]:
    """One episode per (search, budget): the best schedule a search found after that many evaluations."""
    budgets = tuple(sorted(set(pool.search_budgets)))
    out = []
    for r in range(pool.search_runs):
        s = derive_seed(pool.seed, machine, workload, dataset, "search", r)
        for j, b in enumerate(budgets):
            out.append(EpisodeSpec(
                machine=machine, workload=workload, dataset=dataset, kind="search", schedule_seed=s, seed=derive_seed(s, b),
                run_index=r * len(budgets) + j, n_slices=pool.n_slices, n_records=pool.n_records, window_s=pool.window_s,
                backend=pool.backend, budget=b, budgets=budgets, host=pool.hosts.get(machine),
            ))  # fmt: skip
    return out
