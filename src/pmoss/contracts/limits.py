"""Size limits, checked before work starts (docs/contracts.md, "Limits").

Two kinds: hard bounds that keep a size inside what the system is built for (the runtime's slice
cap, Linux's CPU and node ids, integer arithmetic on record counts), and the memory a piece of work
will need, estimated from its sizes and compared with what this machine has available. A config
past either is refused with one line naming the file, the field and the limit, instead of a run
that grows until the kernel kills it.
"""

from __future__ import annotations

import os
from typing import Any

import pydantic

from pmoss.contracts.errors import ContractError

MAX_SLICES = 1 << 20  # the runtime's cap (runtime/src/schedule.c MAX_SLICES)
MAX_RECORDS = 1 << 40  # 16 TiB of 8-byte keys and values alone: more than any machine holds
MAX_CPUS = 8192  # CPU, core and L3-domain ids below this (Linux's largest NR_CPUS)
MAX_NODES = 1 << 10  # NUMA nodes and sockets (Linux's MAX_NUMNODES, NODES_SHIFT = 10)

# Memory, measured with tracemalloc on the pool machines at 256 to 16384 slices (simulate_batch:
# ~170 KiB per slice for a workload's slice profile, then at most 1.6 KiB per episode-slice and, per
# episode, 2-4 B per pair of workers, whatever the slice count: 0.06 MB on the 168-worker intel-skx-4s,
# 2.3-3.7 MB on the 1,024-worker large-2s-16n; collect's plan: 5 KiB + 14 B per slice per episode)
# with headroom; tests/test_limits.py checks the estimate stays above a measured peak, so a heavier
# simulator fails there rather than in a user's run.
SIM_BYTES_PER_SLICE = 256 << 10  # a simulator call's per-slice tables, whatever its batch
SIM_BYTES_PER_EPISODE_SLICE = 4096  # one episode's slice inside one vectorised simulator call ...
SIM_BYTES_PER_EPISODE_WORKER = 1024  # ... and the episode's per-worker and per-group state (~300 B a worker measured on 1,024 workers)
PLAN_BYTES_PER_EPISODE = 8192  # a planned episode (its spec and schedule) held until it runs ...
PLAN_BYTES_PER_SLICE = 32  # ... plus this per slice of its schedule


class LimitError(ContractError):
    """A size is past a hard bound or the work needs more memory than this machine has."""


def at_most(limit: int, why: str) -> pydantic.AfterValidator:
    """A field's validator: the value is at most `limit`; the message says the limit and why."""

    def check(v: Any) -> Any:
        if v > limit:
            raise ValueError(f"{v} is above the limit {limit} ({why})")
        return v

    return pydantic.AfterValidator(check)


def available_memory() -> int:
    """Bytes this machine can still give a process without swapping: MemAvailable of /proc/meminfo,
    else the free physical pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def require_memory(need: float, where: str, what: str, fix: str) -> None:
    """Refuse work that needs more memory than is available: `where` names the file and field
    (`pool.yaml: field 'episodes_per_cell'`), `what` the work, `fix` what to change."""
    have = available_memory()
    if need > have:
        raise LimitError(f"{where}: {what} would need about {human(need)} of memory, this machine has {human(have)} available; {fix}")


def sim_bytes(episodes: int, n_slices: int, n_workers: int) -> int:
    """Peak memory of one simulator call on `episodes` schedules of `n_slices` slices on a machine of `n_workers` workers."""
    return n_slices * SIM_BYTES_PER_SLICE + episodes * (n_slices * SIM_BYTES_PER_EPISODE_SLICE + SIM_BYTES_PER_EPISODE_WORKER * n_workers)
