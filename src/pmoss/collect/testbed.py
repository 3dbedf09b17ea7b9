"""A real testbed host: episodes on the native runtime + collector, turned into raw snapshot rows.

Each snapshot comes out of the runtime as Arrow record batches (Arrow C Data Interface): the
stitched per-slice table, cumulative since the runtime was created, and the off-core readings of
the run (memory-controller and socket-link bytes per node / link). An episode's slice counts are
the difference between the snapshots after and before its run; its off-core readings are those of
the run itself. Counters the host cannot measure (no hardware PMU here: only software events; no
uncore PMU either) come back null and are listed in `unavailable`; they are never zero. When
uncore PMUs exist but may not be opened, one warning says why (perf_event_paranoid / CAP_PERFMON).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from pmoss import __version__
from pmoss.collect.collector import episode_columns
from pmoss.contracts.machine import Machine
from pmoss.contracts.schedule import ANY_WORKER_KINDS, Schedule
from pmoss.contracts.snapshot import CORE_FEATURES, episode_id, now_utc
from pmoss.contracts.workload import get_workload

UINT64_MAX = 2**64 - 1
log = logging.getLogger(__name__)
_warned: set[str] = set()  # off-core messages already shown in this process: one each, not one per run


class Testbed:
    """One loaded index on this host. Not thread-safe except as the runtime itself allows
    (`enforce` may run while another thread is inside `run`)."""

    def __init__(self, machine: Machine, n_keys: int, dataset: str = "dense", n_slices: int = 256, seed: int = 1,
                 probe: str | None = "auto", offcore: str | None = "/sys", batch_queries: int = 100,
                 batch_max_wait_us: int | None = None, probe_period_us: int | None = None, routers_per_node: int = 1):  # fmt: skip
        """offcore: sysfs root of the uncore PMUs to sweep ("/sys"), None for no off-core readings.
        batch_queries / batch_max_wait_us / probe_period_us: probe granularity, its latency bound
        and how often a slice's batch is read (see Runtime). routers_per_node: the descriptor's
        reserved CPUs must leave the workers the runtime then keeps (topology.default_reserved)."""
        from pmoss.collect.runtime import Runtime, host_pmu_facts

        self.machine, self.dataset, self.n_keys = machine, dataset, n_keys
        self.rt = Runtime(n_keys, dataset=dataset, seed=seed, n_slices=n_slices, probe=probe, offcore=offcore,
                          batch_queries=batch_queries, batch_max_wait_us=batch_max_wait_us, probe_period_us=probe_period_us,
                          routers_per_node=routers_per_node, machine=machine.name)
        self.probe = probe
        self.pmu = host_pmu_facts()  # why counters are hardware or software here: the rows' counter_mode_reason
        self.n_slices = self.rt.n_slices
        lower = self.rt.slice_bounds()
        self.slice_lo, self.slice_hi = lower, [x - 1 for x in lower[1:]] + [UINT64_MAX]
        self.schedule: Schedule | None = None
        self.last_result: dict[str, Any] = {}  # the runtime's own result of the latest run (latency etc.)
        self._last = self.rt.snapshot()

    def enforce(self, schedule: Schedule) -> Any:
        """Validate against the descriptor, then validate -> migrate -> swap in the runtime."""
        schedule.validate_for(self.machine)
        widths = schedule.widths() if schedule.kind not in ANY_WORKER_KINDS else None
        report = self.rt.set_schedule(schedule.node, schedule.core, schedule.kind, machine=schedule.machine, width=widths)
        self.schedule = schedule
        return report

    def run(self, workload: str, seconds: float, seed: int, run_index: int = 0) -> dict[str, Any]:
        """Run the workload for `seconds` and return the episode as a raw snapshot row (source=real)."""
        assert self.schedule is not None, "enforce a schedule before running"
        result = self.rt.run(workload, seconds, seed=seed)
        self.last_result = result
        now = result["stats"]
        cols = episode_columns(now.slices_since(self._last), now.offcore)
        self._last = now
        if now.offcore_error and now.offcore_error not in _warned:
            _warned.add(now.offcore_error)
            log.warning("%s", now.offcore_error)
        return self._row(workload, seed, run_index, result, cols)

    def _row(self, workload: str, seed: int, run_index: int, result: dict[str, Any], cols: dict[str, Any]) -> dict[str, Any]:
        s = self.schedule
        hardware = any(cols[k] is not None for k in CORE_FEATURES if k != "task_clock_ns")
        return {
            "episode_id": episode_id(self.machine.name, workload, self.dataset, s.node, s.core, s.kind, seed, run_index, s.width),
            "source": "real", "machine": self.machine.name, "host": os.uname().nodename, "workload": workload,
            "workload_params": get_workload(workload).params_json(), "dataset": self.dataset, "n_records": self.n_keys,
            "schedule_kind": s.kind, "schedule_provenance": json.dumps(s.provenance, sort_keys=True), "seed": seed,
            "run_index": run_index, "n_slices": self.n_slices, "window_s": result["seconds"],
            "throughput_qps": result["throughput"], "counter_mode": "hardware" if hardware else "software",
            "counter_mode_reason": counter_mode_reason(self.probe, hardware, self.pmu),
            "collector": f"pmoss-collector {__version__}", "timestamp": now_utc(), "slice_lo": self.slice_lo,
            "slice_hi": self.slice_hi, "width": s.widths() if s.width is not None else None, **cols,
        }  # fmt: skip


def counter_mode_reason(probe: str | None, hardware: bool, pmu: dict[str, Any]) -> str:
    """One line on why an episode's counters are hardware or software (`pmu`: host_pmu_facts), e.g.
    "libpfm4 model zen3; kernel has no hardware PMU: perf_event_open(cycles) = ENOENT"."""
    if probe is None:
        return "no probe: the runtime counted its own per-slice counts only"
    if probe == "software":
        return "software mode requested (probe=software)"
    usable = pmu["model"] is not None and pmu["hardware_events"]
    if not hardware and usable:
        return f"{pmu['reason']}; but no hardware event of the model counted"
    return pmu["reason"]
