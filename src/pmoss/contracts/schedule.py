"""Spatial schedule (docs/design.md §4.2, docs/contracts.md): for each slice, a NUMA node and the group of
worker cores that executes it.

Schema version 2 names a slice's execution group compactly as an anchor worker `core[i]` and a
`width[i]` (thread | core | l3 | node; contracts/groups.py): the one-core kinds are width thread,
sn-numa is width node (core -1 allowed), `sn-hot`, `search` and `learned` mix widths. The kinds
where any worker executes a slice (os-default, os-interleave, se-numa) have core -1 and no width.
`node[i] == -1` leaves placement to the OS. `validate_for(machine)` enforces the same rules as
the runtime and names the first bad slice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from pmoss.contracts.errors import ContractError
from pmoss.contracts.groups import WIDTH_CODE, WIDTHS, groups_of
from pmoss.contracts.io import dump_model, load_model
from pmoss.contracts.machine import Machine

SCHEDULE_SCHEMA_VERSION = 2  # 2: per-slice width (execution groups)

Kind = Literal[
    "os-default", "os-interleave", "se-numa", "sn-numa",
    "sn-grouped", "sn-spread", "sn-mixed", "sn-random", "sn-hot", "search", "learned", "sn-random-width",
]  # fmt: skip
SHARED_KINDS = ("os-default", "os-interleave", "se-numa", "sn-numa")  # a set of cores per slice, by kind
ANY_WORKER_KINDS = ("os-default", "os-interleave", "se-numa")  # no per-slice group: any worker
ONE_CORE_KINDS = ("sn-grouped", "sn-spread", "sn-mixed", "sn-random")  # width thread only (the paper's SN:T)
EXPLORE_KINDS = ("sn-random-width",)  # training data only: the paper's one-core mix widened at random (no baseline)
MIXED_WIDTH_KINDS = ("sn-hot", "search", "learned") + EXPLORE_KINDS  # any width per slice
GROUP_KINDS = ("sn-numa",) + ONE_CORE_KINDS + MIXED_WIDTH_KINDS  # a node and a group per slice
KIND_WIDTH = {**{k: "thread" for k in ONE_CORE_KINDS}, "sn-numa": "node"}  # the only width of a fixed-width kind
OS_PLACED_KINDS = ("os-default", "os-interleave")  # data placement left to the OS
SHORT_NAMES = {"os-default": "OS:D", "os-interleave": "OS:I", "se-numa": "SE:N", "sn-numa": "SN:N"}


# The inference load cap (beyond the paper's k-per-core cap): no worker above this many times its fair
# share of the measured queries; the rollout enforces it and the oracle draws starts under it. 1.0,
# not 1.25: the cap counts queries, and a query costs more on a wide group (contended dequeue,
# cross-domain transfers) or a busy SMT core, so any allowance above the fair share went to the
# costlier slices; chosen on validation seeds (docs/model.md, "The load cap at the fair share").
LOAD_CAP = 1.0
SLICES_PER_WORKER = 2.0  # the default scale of N with the machine (docs/contracts.md, "How many slices")


def slices_for(machine: Machine, per_worker: float = SLICES_PER_WORKER, multiple: int = 8) -> int:
    """N for a machine: `per_worker` slices per worker thread, rounded up to a multiple of `multiple`.
    Fewer slices than workers leave threads idle in every one-core schedule; about two per worker
    leave a scheduler room to balance skewed load (a hot slice widened, two cold ones on one thread)."""
    return int(np.ceil(per_worker * machine.n_workers / multiple) * multiple)


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
    width: str | list[str] | None = None  # one for every slice, or per slice; None: the kind's width
    provenance: dict[str, Any] = {}  # generator + seed, or model name + version

    @model_validator(mode="after")
    def _shape(self) -> Schedule:
        if self.schema_version > SCHEDULE_SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is newer than this pmoss ({SCHEDULE_SCHEMA_VERSION})")
        for name in ("node", "core"):
            if len(getattr(self, name)) != self.n_slices:
                raise ValueError(f"{name}: has {len(getattr(self, name))} entries, n_slices is {self.n_slices}")
        if isinstance(self.width, list) and len(self.width) != self.n_slices:
            raise ValueError(f"width: has {len(self.width)} entries, n_slices is {self.n_slices}")
        for i, w in enumerate(self.widths() if self.width is not None else []):
            if w not in WIDTHS:
                raise ValueError(f"width: slice {i} has '{w}', expected one of {', '.join(WIDTHS)}")
        if self.width is not None and self.kind in ANY_WORKER_KINDS:
            raise ValueError(f"width: kind {self.kind} executes on any worker and takes no width")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_width(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The contract writes no width for "the kind's own" (docs/contracts.md): the field is left
        out, never written as null, so every dump (save_schedule, eval/schedules.json, `pmoss
        schedule` on stdout) is a file the runtime's reader accepts."""
        data = handler(self)
        if data.get("width") is None:
            data.pop("width", None)
        return data

    def widths(self) -> list[str]:
        """The width of every slice (the kind's own where none is written; '' for any-worker kinds)."""
        if isinstance(self.width, list):
            return list(self.width)
        return [self.width or KIND_WIDTH.get(self.kind, "" if self.kind in ANY_WORKER_KINDS else "thread")] * self.n_slices

    def validate_for(self, machine: Machine) -> Schedule:
        """Check the schedule against a machine; raise ScheduleError naming the first bad slice."""
        if self.machine != machine.name:
            raise ScheduleError(f"machine: schedule is for '{self.machine}', not '{machine.name}'")
        workers = machine.worker_index
        fixed = KIND_WIDTH.get(self.kind)
        for i, (node, core, width) in enumerate(zip(self.node, self.core, self.widths(), strict=True)):
            where = f"slice {i}"
            if node < -1 or node >= machine.numa_nodes:
                raise ScheduleError(f"{where}: node {node} does not exist ({machine.numa_nodes} nodes)")
            if self.kind in OS_PLACED_KINDS and node != -1:
                raise ScheduleError(f"{where}: kind {self.kind} leaves placement to the OS, node must be -1")
            if self.kind not in OS_PLACED_KINDS and node == -1:
                raise ScheduleError(f"{where}: kind {self.kind} needs a node, got -1")
            if self.kind in ANY_WORKER_KINDS:
                if core != -1:
                    raise ScheduleError(f"{where}: kind {self.kind} executes on any worker, core must be -1")
                continue
            if fixed and width != fixed:
                raise ScheduleError(f"{where}: kind {self.kind} has width {fixed} only, got {width}")
            if core == -1 and width == "node":
                continue  # the node's workers: no anchor needed
            if core not in machine.cpu_by_id:
                raise ScheduleError(f"{where}: core {core} does not exist on {machine.name}")
            if core not in workers:
                raise ScheduleError(f"{where}: core {core} is reserved (router/sweeper), not a worker")
            if machine.cpu_by_id[core].node != node:
                raise ScheduleError(f"{where}: core {core} is on node {machine.cpu_by_id[core].node} but the schedule says node {node}")
        return self

    # ---- views -----------------------------------------------------------------------------------
    def group_index(self, machine: Machine) -> np.ndarray:
        """The candidate-group index of every slice [N] (contracts/groups.py); the schedule must be valid
        for `machine` and of a kind with groups."""
        if self.kind in ANY_WORKER_KINDS:
            raise ScheduleError(f"kind: {self.kind} executes on any worker, so it has no per-slice group")
        g = groups_of(machine)
        first = [machine.worker_index[ws[0]] for ws in machine.workers_by_node]
        anchors = [machine.worker_index[c] if c >= 0 else first[n] for c, n in zip(self.core, self.node, strict=True)]
        return g.of_worker[[WIDTH_CODE[w] for w in self.widths()], anchors]

    def actions(self, machine: Machine) -> list[int]:
        """Worker-core indices of a width-thread schedule (the paper's SN:T actions)."""
        if any(w != "thread" for w in self.widths()) or self.kind in ANY_WORKER_KINDS:
            raise ScheduleError(f"kind: {self.kind} is not one core per slice, so it has no worker actions")
        return [machine.worker_index[c] for c in self.core]

    @classmethod
    def of_snapshot(cls, row: dict[str, Any]) -> Schedule:
        """The schedule a raw snapshot row ran (its kind, node/core/width columns and provenance)."""
        width = row.get("width")
        width = None if width is None or all(w == "" for w in width) else list(width)
        return cls(machine=row["machine"], n_slices=row["n_slices"], kind=row["schedule_kind"], node=list(row["node"]), core=list(row["core"]),
                   width=width, provenance=json.loads(row.get("schedule_provenance") or "{}"))  # fmt: skip

    @classmethod
    def from_actions(cls, machine: Machine, actions: list[int], kind: Kind = "learned", **provenance: Any) -> Schedule:
        cores = [machine.worker_cpus[a] for a in actions]
        nodes = [machine.cpu_by_id[c].node for c in cores]
        width = None if kind in KIND_WIDTH else "thread"
        return cls(machine=machine.name, n_slices=len(actions), kind=kind, node=nodes, core=cores, width=width, provenance=provenance)

    @classmethod
    def from_groups(cls, machine: Machine, groups: Any, kind: Kind = "learned", **provenance: Any) -> Schedule:
        """A schedule from candidate-group indices [N]: the group's node, canonical anchor and width
        (written as one string when every slice has the same width)."""
        g = groups_of(machine)
        idx = np.asarray(groups, dtype=np.int64)
        widths = [WIDTHS[c] for c in g.width[idx]]
        cores = [machine.worker_cpus[a] for a in g.anchor[idx]]
        width: str | list[str] = widths[0] if len(set(widths)) == 1 else widths
        if kind in KIND_WIDTH:
            width = None if set(widths) == {KIND_WIDTH[kind]} else width
        return cls(machine=machine.name, n_slices=len(idx), kind=kind, node=[int(n) for n in g.node[idx]], core=cores, width=width,
                   provenance=provenance)  # fmt: skip


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
