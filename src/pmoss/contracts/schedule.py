"""Spatial schedule (DESIGN §4.2): for each slice, a NUMA node and the cores that may execute it.

`core[i]` is a CPU id for the one-core kinds (the learnable `SN:T` space) and -1 for the kinds
where a set of cores executes the slice (all workers, or the workers of the slice's node).
`node[i] == -1` leaves placement to the OS. `validate_for(machine)` enforces the same rules as
the runtime and names the first bad slice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pmoss.contracts.errors import ContractError
from pmoss.contracts.io import dump_model, load_model
from pmoss.contracts.machine import Machine

SCHEDULE_SCHEMA_VERSION = 1

Kind = Literal[
    "os-default", "os-interleave", "se-numa", "sn-numa",
    "sn-grouped", "sn-spread", "sn-mixed", "sn-random", "learned",
]  # fmt: skip
SHARED_KINDS = ("os-default", "os-interleave", "se-numa", "sn-numa")  # a set of cores per slice
ONE_CORE_KINDS = ("sn-grouped", "sn-spread", "sn-mixed", "sn-random", "learned")
OS_PLACED_KINDS = ("os-default", "os-interleave")  # data placement left to the OS
SHORT_NAMES = {"os-default": "OS:D", "os-interleave": "OS:I", "se-numa": "SE:N", "sn-numa": "SN:N"}


class ScheduleError(ContractError):
    """A schedule does not fit its machine; the message names the first bad slice."""


class Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEDULE_SCHEMA_VERSION
    machine: str
    n_slices: int = Field(gt=0)
    kind: Kind
    node: list[int]
    core: list[int]
    provenance: dict[str, Any] = {}  # generator + seed, or model name + version

    @model_validator(mode="after")
    def _shape(self) -> Schedule:
        if self.schema_version > SCHEDULE_SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is newer than this pmoss ({SCHEDULE_SCHEMA_VERSION})")
        for name in ("node", "core"):
            if len(getattr(self, name)) != self.n_slices:
                raise ValueError(f"{name}: has {len(getattr(self, name))} entries, n_slices is {self.n_slices}")
        return self

    def validate_for(self, machine: Machine) -> Schedule:
        """Check the schedule against a machine; raise ScheduleError naming the first bad slice."""
        if self.machine != machine.name:
            raise ScheduleError(f"machine: schedule is for '{self.machine}', not '{machine.name}'")
        workers = machine.worker_index
        one_core = self.kind in ONE_CORE_KINDS
        for i, (node, core) in enumerate(zip(self.node, self.core, strict=True)):
            where = f"slice {i}"
            if node < -1 or node >= machine.numa_nodes:
                raise ScheduleError(f"{where}: node {node} does not exist ({machine.numa_nodes} nodes)")
            if self.kind in OS_PLACED_KINDS and node != -1:
                raise ScheduleError(f"{where}: kind {self.kind} leaves placement to the OS, node must be -1")
            if self.kind in ("se-numa", "sn-numa") + ONE_CORE_KINDS and node == -1:
                raise ScheduleError(f"{where}: kind {self.kind} needs a node, got -1")
            if not one_core:
                if core != -1:
                    raise ScheduleError(f"{where}: kind {self.kind} executes on a set of cores, core must be -1")
                continue
            if core not in machine.cpu_by_id:
                raise ScheduleError(f"{where}: core {core} does not exist on {machine.name}")
            if core not in workers:
                raise ScheduleError(f"{where}: core {core} is reserved (router/sweeper), not a worker")
            if machine.cpu_by_id[core].node != node:
                raise ScheduleError(f"{where}: core {core} is on node {machine.cpu_by_id[core].node} but the schedule says node {node}")
        return self

    # ---- views -----------------------------------------------------------------------------------
    def actions(self, machine: Machine) -> list[int]:
        """Worker-core indices (the model's action per slice); only for one-core kinds."""
        if self.kind not in ONE_CORE_KINDS:
            raise ScheduleError(f"kind: {self.kind} has no per-slice core, so no actions")
        return [machine.worker_index[c] for c in self.core]

    @classmethod
    def from_actions(cls, machine: Machine, actions: list[int], kind: Kind = "learned", **provenance: Any) -> Schedule:
        cores = [machine.worker_cpus[a] for a in actions]
        nodes = [machine.cpu_by_id[c].node for c in cores]
        return cls(machine=machine.name, n_slices=len(actions), kind=kind, node=nodes, core=cores, provenance=provenance)


def load_schedule(path: Path, machine: Machine | None = None) -> Schedule:
    schedule = load_model(Schedule, Path(path))
    if machine is not None:
        try:
            schedule.validate_for(machine)
        except ScheduleError as e:
            raise ScheduleError(f"{path}: {e}") from None
    return schedule


def save_schedule(schedule: Schedule, path: Path) -> None:
    dump_model(schedule, Path(path))
