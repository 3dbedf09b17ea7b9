"""Python binding of the native runtime (libpmoss.so) through cffi in ABI mode.

Python only configures, starts and reads the runtime; every query runs in C. Snapshots come
through the Arrow C Data Interface: the runtime exports whole record batches (per-slice table and
off-core readings) into cffi-allocated ArrowArray/ArrowSchema structs that pyarrow imports.
The library is found through ``PMOSS_LIB`` or ``<repo>/build/runtime/libpmoss.so``.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from cffi import FFI

from pmoss.contracts.errors import PmossError

_CDEF = """
typedef struct pm_migration_report {
    uint64_t slices_moved; uint64_t pages_moved; uint64_t pages_failed;
    uint64_t pages_absent; double seconds;
} pm_migration_report;
typedef enum pm_schedule_kind {
    PM_KIND_OS_DEFAULT = 0, PM_KIND_OS_INTERLEAVE, PM_KIND_SE_NUMA, PM_KIND_SN_NUMA,
    PM_KIND_SN_GROUPED, PM_KIND_SN_SPREAD, PM_KIND_SN_MIXED, PM_KIND_SN_RANDOM,
    PM_KIND_LEARNED, PM_KIND_SN_HOT, PM_KIND_SEARCH, PM_KIND_COUNT
} pm_schedule_kind;
typedef struct pm_schedule pm_schedule;
int pm_schedule_kind_parse(const char *name, pm_schedule_kind *kind);
int pm_schedule_create(pm_schedule_kind kind, unsigned n_slices, const int *node,
                       const int *core, const char *machine, pm_schedule **out);
int pm_schedule_create_groups(pm_schedule_kind kind, unsigned n_slices, const int *node,
                              const int *core, const uint8_t *width, const char *machine,
                              pm_schedule **out);
int pm_schedule_parse_json(const char *text, size_t len, pm_schedule **out,
                           char *err, size_t err_len);
void pm_schedule_destroy(pm_schedule *s);
typedef struct pm_workload_spec {
    const char *mix; const char *distribution; double zipf_theta; double hotspot_data;
    double hotspot_ops; uint32_t scan_min; uint32_t scan_max; uint64_t seed;
    double offered_qps;
} pm_workload_spec;
typedef struct pm_probe_ops {
    void *open; void *read; void *close; int n_values; const char *const *names;
} pm_probe_ops;
typedef struct pm_probe_config { int mode; const char *model; int disable_rdpmc; int hardware_only; } pm_probe_config;
extern pm_probe_ops pm_collector_probe_ops;  /* const in C; cffi ABI mode reads consts as values */
typedef struct pm_uncore_ops {
    void *open; void *read; void *close; int n_values; const char *const *names;
} pm_uncore_ops;
typedef struct pm_uncore_config { const char *sysfs_root; } pm_uncore_config;
extern pm_uncore_ops pm_collector_uncore_ops;
typedef enum pm_boundaries { PM_BOUNDARIES_EQUAL_COUNT = 0, PM_BOUNDARIES_EQUAL_WIDTH = 1 } pm_boundaries;
typedef struct pm_runtime_config {
    uint64_t n_keys; const char *dataset; uint64_t seed; unsigned n_slices;
    pm_boundaries boundaries; unsigned leaf_capacity; unsigned batch_queries;
    unsigned batch_max_wait_us; unsigned probe_period_us; unsigned queue_capacity; unsigned routers_per_node; unsigned max_workers;
    int share_cpus; const pm_probe_ops *probe; void *probe_ctx;
    const pm_uncore_ops *uncore; void *uncore_ctx; const char *machine; const char *sysfs_root;
} pm_runtime_config;
typedef struct pm_runtime pm_runtime;
void pm_runtime_config_init(pm_runtime_config *cfg);
int pm_runtime_create(const pm_runtime_config *cfg, pm_runtime **out, char *err, size_t err_len);
void pm_runtime_destroy(pm_runtime *rt);
unsigned pm_runtime_n_slices(const pm_runtime *rt);
int pm_runtime_n_nodes(const pm_runtime *rt);
unsigned pm_runtime_worker_cpus(const pm_runtime *rt, int *cpus, unsigned cap);
int pm_runtime_cpu_node(const pm_runtime *rt, int cpu);
void pm_runtime_slice_bounds(const pm_runtime *rt, uint64_t *lower);
int pm_runtime_set_schedule(pm_runtime *rt, const pm_schedule *s,
                            pm_migration_report *report, char *err, size_t err_len);
typedef struct pm_latency_summary {
    uint64_t count; uint64_t p50_ns; uint64_t p90_ns; uint64_t p99_ns; uint64_t p999_ns;
    uint64_t max_ns; double mean_ns;
} pm_latency_summary;
typedef struct pm_run_result {
    uint64_t dispatched; uint64_t completed; double seconds; double throughput;
    pm_latency_summary latency; uint64_t batches; uint64_t full_batches; uint64_t probe_reads;
} pm_run_result;
int pm_runtime_latency(pm_runtime *rt, pm_latency_summary *out);
int pm_runtime_set_profiling(pm_runtime *rt, int on);
int pm_runtime_set_probe_period(pm_runtime *rt, unsigned period_us);
int pm_runtime_run(pm_runtime *rt, const pm_workload_spec *spec, double seconds,
                   pm_run_result *result, uint64_t *slice_queries, char *err, size_t err_len);
struct ArrowSchema {
    const char *format; const char *name; const char *metadata; int64_t flags; int64_t n_children;
    struct ArrowSchema **children; struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *); void *private_data;
};
struct ArrowArray {
    int64_t length; int64_t null_count; int64_t offset; int64_t n_buffers; int64_t n_children;
    const void **buffers; struct ArrowArray **children; struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *); void *private_data;
};
int pm_runtime_export_arrow(pm_runtime *rt, struct ArrowArray *slices, struct ArrowSchema *slices_schema,
                            struct ArrowArray *offcore, struct ArrowSchema *offcore_schema,
                            char *msg, size_t msg_len);
int pm_runtime_lookup(pm_runtime *rt, uint64_t key, uint64_t *value);
typedef struct pm_host_pmu {
    const char *model; int hardware_events; int hardware_errno; int software_events; int software_errno;
    char reason[256];
} pm_host_pmu;
int pm_host_pmu_facts(pm_host_pmu *out);
uint64_t pm_runtime_n_keys(pm_runtime *rt);
"""

_ERR_LEN = 512
# pm_counter_mode (collector.h); "hardware-only" = hardware with pm_probe_config.hardware_only
_PROBE_MODES = {"auto": 0, "hardware": 1, "software": 2, "hardware-only": 1}
_ffi = FFI()
_ffi.cdef(_CDEF)
_lib: Any = None


class NativeRuntimeError(PmossError):
    """The native runtime refused a call (bad config, workload, or missing library)."""


WIDTH_CODES = {"thread": 0, "core": 1, "l3": 2, "node": 3}  # pm_width


class ScheduleError(PmossError):
    """A schedule was rejected; the message is the runtime's, naming the first bad slice."""


def library_path() -> Path:
    """Where libpmoss.so is expected: $PMOSS_LIB, else <repo>/build/runtime/libpmoss.so."""
    env = os.environ.get("PMOSS_LIB")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "build" / "runtime" / "libpmoss.so"


def load_library() -> Any:
    """dlopen libpmoss.so once; raises NativeRuntimeError with the path if it is not built."""
    global _lib
    if _lib is None:
        path = library_path()
        if not path.exists():
            raise NativeRuntimeError(f"{path} not found: build it with `cmake -S . -B build && cmake --build build`, or set PMOSS_LIB")
        _lib = _ffi.dlopen(str(path))
    return _lib


def host_pmu_facts() -> dict[str, Any]:
    """What the collector can count here (pm_host_pmu_facts, collector.h): `model` libpfm4 knows
    (None: none), `hardware_events` (a cycles event opens), `software_events`, and `reason`, one
    line saying why. Raises NativeRuntimeError if libpmoss was built without the collector."""
    lib = load_library()
    out = _ffi.new("pm_host_pmu *")
    try:
        lib.pm_host_pmu_facts(out)
    except AttributeError as exc:
        raise NativeRuntimeError(f"{library_path()} has no collector (pm_host_pmu_facts): rebuild with libpfm4") from exc
    model = _ffi.string(out.model).decode() if out.model != _ffi.NULL else None
    return {"model": model, "hardware_events": bool(out.hardware_events), "software_events": bool(out.software_events),
            "reason": _message(out.reason)}


BATCH_MAX_WAIT_US_DEFAULT = 1_000  # = PM_BATCH_MAX_WAIT_US_DEFAULT (runtime.h): a partial batch's deadline with a probe when none is given
PROBE_PERIOD_AUTO = 2**32 - 1  # = PM_PROBE_PERIOD_AUTO (runtime.h): the default period


def _probe_period(us: int) -> int:
    if not 0 <= us < PROBE_PERIOD_AUTO:
        raise NativeRuntimeError(f"probe_period_us must be in [0, 2^32 - 2] microseconds, got {us}")
    return us


def _between_runs(rc: int, what: str) -> None:
    """The result of a setter that applies to the following runs (set_profiling, set_probe_period)."""
    if rc == -errno.EINVAL:
        raise NativeRuntimeError(f"{what} needs a runtime created with a probe")
    if rc == -errno.EBUSY:
        raise NativeRuntimeError(f"{what}: a workload is running; it applies between runs")
    if rc:
        raise NativeRuntimeError(f"{what} failed: {os.strerror(-rc)}")


def _message(err: Any) -> str:
    return _ffi.string(err).decode("utf-8", "replace")


def _latency_dict(lat: Any) -> dict[str, Any]:
    return {"count": int(lat.count), "p50_ns": int(lat.p50_ns), "p90_ns": int(lat.p90_ns),
            "p99_ns": int(lat.p99_ns), "p999_ns": int(lat.p999_ns), "max_ns": int(lat.max_ns),
            "mean_ns": float(lat.mean_ns)}


def _address(ptr: Any) -> int:
    return int(_ffi.cast("uintptr_t", ptr))


@dataclass(frozen=True)
class Snapshot:
    """One swept snapshot: the stitched per-slice table and the off-core readings of one round.

    ``slices``: slice, core, node (the schedule in force; -1 where its kind has none), queries
    (int64), then one nullable float64 column per stat (nodes_visited, keys_scanned, the probe's
    counters), cumulative since the runtime was created; null = the host cannot measure it, never 0.
    ``offcore``: one row per NUMA node then per socket link: scope ("node" | "link"), index,
    imc_read_bytes, imc_write_bytes, link_in_bytes, link_out_bytes, imc_total_bytes, bytes of the
    run in progress (between runs: of the last run); null = not measured, no rows = no readings.
    ``offcore_error``: why there are no off-core readings although asked for (e.g. refused by
    perf_event_paranoid), else ""."""

    slices: pa.RecordBatch
    offcore: pa.RecordBatch
    offcore_error: str

    def column(self, name: str) -> list[Any]:
        """One per-slice column as a list (None = null)."""
        return self.slices.column(name).to_pylist()

    def slices_since(self, earlier: Snapshot) -> pa.RecordBatch:
        """Per-slice counts accumulated between `earlier` and this snapshot (null stays null)."""
        keep = ("slice", "core", "node")
        cols = [self.slices.column(n) if n in keep else pc.subtract(self.slices.column(n), earlier.slices.column(n))
                for n in self.slices.schema.names]  # fmt: skip
        return pa.RecordBatch.from_arrays(cols, schema=self.slices.schema)


@dataclass
class MigrationReport:
    slices_moved: int
    pages_moved: int
    pages_failed: int
    pages_absent: int
    seconds: float


class Runtime:
    """A loaded, sliced index with its thread-per-core runtime (see runtime.h).

    Threads: ``run`` may block one thread while another calls ``set_schedule``,
    ``latency`` or ``snapshot`` (cffi drops the GIL during C calls; the C side
    serialises schedule changes with start/stop and never makes a latency read
    wait for them). Only destruction must not race with other calls.
    """

    def __init__(self, n_keys: int, dataset: str = "dense", seed: int = 1, n_slices: int = 256, *,
                 equal_width: bool = False, leaf_capacity: int = 255, batch_queries: int = 100,
                 batch_max_wait_us: int | None = None, probe_period_us: int | None = None, queue_capacity: int = 1024,
                 routers_per_node: int = 1,
                 max_workers: int = 0, share_cpus: bool | None = None, probe: str | None = None,
                 offcore: str | None = None, machine: str | None = None) -> None:
        """probe: None (own counts only) or a collector counter mode: auto | software | hardware |
        hardware-only (no software events: task_clock_ns from the counters' enabled time,
        page_faults / context_switches null; readings without a system call where the kernel
        allows rdpmc and user time).
        offcore: None (no off-core readings) or the sysfs root whose uncore PMUs (memory
        controllers, socket links) the off-core sweeper opens at every run start: "/sys" here.

        batch_queries: queries per slice batch (one probe window each); batch_max_wait_us: run a
        partial batch once its oldest query waited this long while the queue keeps delivering (0: never
        wait; None: the runtime's default, PM_BATCH_MAX_WAIT_US_DEFAULT when every batch is profiled,
        else 0); a worker whose queue is empty runs every partial batch at once.
        probe_period_us: sampled attribution, a slice's first batch and then at most one per period
        runs between probe readings (exact windows; totals are estimated from the `profiled_queries`
        stat, collector.episode_columns); 0: every batch; None: the runtime's default (100 ms).
        machine: this host's descriptor name; a schedule made for another machine is then refused
        (None: accepted unchecked, which the runtime says once on stderr)."""
        self._lib = load_library()
        cfg = _ffi.new("pm_runtime_config *")
        self._lib.pm_runtime_config_init(cfg)
        self._dataset = _ffi.new("char[]", dataset.encode())
        cfg.n_keys, cfg.dataset, cfg.seed, cfg.n_slices = n_keys, self._dataset, seed, n_slices
        cfg.boundaries = 1 if equal_width else 0
        cfg.leaf_capacity, cfg.batch_queries, cfg.queue_capacity = leaf_capacity, batch_queries, queue_capacity
        if batch_max_wait_us is not None:
            if not 0 <= batch_max_wait_us < 2**32 - 1:
                raise NativeRuntimeError(f"batch_max_wait_us must be in [0, 2^32 - 2] microseconds, got {batch_max_wait_us}")
            cfg.batch_max_wait_us = batch_max_wait_us
        if probe_period_us is not None:
            cfg.probe_period_us = _probe_period(probe_period_us)
        if machine:
            self._machine = _ffi.new("char[]", machine.encode())
            cfg.machine = self._machine
        cfg.routers_per_node, cfg.max_workers = routers_per_node, max_workers
        cfg.share_cpus = -1 if share_cpus is None else int(share_cpus)
        if probe is not None:
            if probe not in _PROBE_MODES:
                raise NativeRuntimeError(f"probe must be one of {sorted(_PROBE_MODES)}, got {probe!r}")
            try:
                cfg.probe = _ffi.addressof(self._lib, "pm_collector_probe_ops")
            except AttributeError as exc:
                raise NativeRuntimeError(f"{library_path()} was built without the collector: no probe") from exc
            self._probe_cfg = _ffi.new("pm_probe_config *", {"mode": _PROBE_MODES[probe], "hardware_only": int(probe == "hardware-only")})
            cfg.probe_ctx = self._probe_cfg
        if offcore is not None:
            try:
                cfg.uncore = _ffi.addressof(self._lib, "pm_collector_uncore_ops")
            except AttributeError as exc:
                raise NativeRuntimeError(f"{library_path()} was built without the collector: no off-core sweeper") from exc
            self._sysfs_root = _ffi.new("char[]", offcore.encode())
            self._uncore_cfg = _ffi.new("pm_uncore_config *", {"sysfs_root": self._sysfs_root})
            cfg.uncore_ctx = self._uncore_cfg
        out = _ffi.new("pm_runtime **")
        err = _ffi.new("char[]", _ERR_LEN)
        if self._lib.pm_runtime_create(cfg, out, err, _ERR_LEN) != 0:
            raise NativeRuntimeError(f"runtime create failed: {_message(err)}")
        self._rt = _ffi.gc(out[0], self._lib.pm_runtime_destroy)
        self.n_slices = int(self._lib.pm_runtime_n_slices(self._rt))

    # ---- topology ----
    @property
    def n_nodes(self) -> int:
        return int(self._lib.pm_runtime_n_nodes(self._rt))

    def worker_cpus(self) -> list[int]:
        cpus = _ffi.new("int[]", 4096)
        n = self._lib.pm_runtime_worker_cpus(self._rt, cpus, 4096)
        return [int(cpus[i]) for i in range(min(n, 4096))]

    def cpu_node(self, cpu: int) -> int:
        return int(self._lib.pm_runtime_cpu_node(self._rt, cpu))

    def slice_bounds(self) -> list[int]:
        lower = _ffi.new("uint64_t[]", self.n_slices)
        self._lib.pm_runtime_slice_bounds(self._rt, lower)
        return [int(x) for x in lower]

    # ---- schedules ----
    def set_schedule(self, node: Sequence[int], core: Sequence[int], kind: str, machine: str = "",
                     width: Sequence[str] | None = None) -> MigrationReport:  # fmt: skip
        """Validate, migrate and enforce; raises ScheduleError (old schedule kept) on rejection.
        width: per-slice execution-group widths (thread | core | l3 | node), None for the kind's own."""
        kind_c = _ffi.new("pm_schedule_kind *")
        if self._lib.pm_schedule_kind_parse(kind.encode(), kind_c) != 0:
            raise ScheduleError(f"unknown schedule kind {kind!r}")
        if len(node) != len(core):
            raise ScheduleError(f"node has {len(node)} entries but core has {len(core)}")
        out = _ffi.new("pm_schedule **")
        codes = _ffi.NULL
        if width is not None:
            bad = [w for w in width if w not in WIDTH_CODES]
            if bad or len(width) != len(node):
                raise ScheduleError(f"width: needs {len(node)} of {', '.join(WIDTH_CODES)}, got {len(width)} entries" + (f" with '{bad[0]}'" if bad else ""))
            codes = _ffi.new("uint8_t[]", [WIDTH_CODES[w] for w in width])
        if self._lib.pm_schedule_create_groups(kind_c[0], len(node), _ffi.new("int[]", list(node)),
                                               _ffi.new("int[]", list(core)), codes, machine.encode(), out) != 0:
            raise ScheduleError(f"schedule of {len(node)} slices could not be built")
        sched = _ffi.gc(out[0], self._lib.pm_schedule_destroy)
        return self._enforce(sched)

    def set_schedule_json(self, text: str) -> MigrationReport:
        """Enforce a schedule given as docs/design.md §4.2 JSON text."""
        raw = text.encode()
        out = _ffi.new("pm_schedule **")
        err = _ffi.new("char[]", _ERR_LEN)
        if self._lib.pm_schedule_parse_json(raw, len(raw), out, err, _ERR_LEN) != 0:
            raise ScheduleError(_message(err))
        return self._enforce(_ffi.gc(out[0], self._lib.pm_schedule_destroy))

    def _enforce(self, sched: Any) -> MigrationReport:
        rep = _ffi.new("pm_migration_report *")
        err = _ffi.new("char[]", _ERR_LEN)
        if self._lib.pm_runtime_set_schedule(self._rt, sched, rep, err, _ERR_LEN) != 0:
            raise ScheduleError(_message(err))
        return MigrationReport(int(rep.slices_moved), int(rep.pages_moved), int(rep.pages_failed),
                               int(rep.pages_absent), float(rep.seconds))

    # ---- running ----
    def run(self, workload: str, seconds: float, seed: int = 1, *, distribution: str | None = None,
            zipf_theta: float = 0.0, scan_min: int = 0, scan_max: int = 0,
            offered_qps: float = 0.0) -> dict[str, Any]:
        """Run a workload for `seconds`; per-slice counts are this run's, stats cumulative.

        ``offered_qps`` 0 (default) is closed loop: routers keep every worker queue full; > 0
        paces the routers to that many queries/s in all (open loop; the achieved rate is
        ``throughput``), so two configurations can be compared at the same throughput.

        ``latency_p50_ns`` / ``latency_p99_ns`` / ``latency_max_ns`` (and ``latency`` with the
        full summary) cover every query of this run, whatever ``latency()`` calls another
        thread made meanwhile; see ``latency`` for what is measured."""
        spec = _ffi.new("pm_workload_spec *")
        keep = [_ffi.new("char[]", workload.encode())]
        spec.mix = keep[0]
        if distribution is not None:
            keep.append(_ffi.new("char[]", distribution.encode()))
            spec.distribution = keep[1]
        spec.zipf_theta, spec.scan_min, spec.scan_max, spec.seed = zipf_theta, scan_min, scan_max, seed
        if not offered_qps >= 0:
            raise NativeRuntimeError(f"offered_qps must be >= 0 queries/s, got {offered_qps}")
        spec.offered_qps = offered_qps
        res = _ffi.new("pm_run_result *")
        per_slice = _ffi.new("uint64_t[]", self.n_slices)
        err = _ffi.new("char[]", _ERR_LEN)
        if self._lib.pm_runtime_run(self._rt, spec, seconds, res, per_slice, err, _ERR_LEN) != 0:
            raise NativeRuntimeError(f"run of {workload!r} failed: {_message(err)}")
        return {
            "workload": workload,
            "seconds": float(res.seconds),
            "dispatched": int(res.dispatched),
            "completed": int(res.completed),
            "throughput": float(res.throughput),
            "latency_p50_ns": int(res.latency.p50_ns),
            "latency_p99_ns": int(res.latency.p99_ns),
            "latency_max_ns": int(res.latency.max_ns),
            "latency": _latency_dict(res.latency),
            "batches": int(res.batches),
            "full_batches": int(res.full_batches),
            "probe_reads": int(res.probe_reads),
            "slice_queries": [int(per_slice[i]) for i in range(self.n_slices)],
            "stats": self.snapshot(),
        }

    def set_profiling(self, on: bool) -> None:
        """Profile the following runs (the default with a probe) or not: off, workers neither
        open nor read the probe, as on a runtime created without one but on this same tree, so
        profiling's cost is measured without a second tree's memory in the comparison."""
        _between_runs(self._lib.pm_runtime_set_profiling(self._rt, int(on)), f"set_profiling({on})")

    def set_probe_period(self, period_us: int | None) -> None:
        """The probe period of the following runs (None: the default), on this same tree, so
        periods are compared without a second tree's memory in the comparison."""
        us = PROBE_PERIOD_AUTO if period_us is None else _probe_period(period_us)
        _between_runs(self._lib.pm_runtime_set_probe_period(self._rt, us), "set_probe_period")

    def latency(self) -> dict[str, Any]:
        """Latency of the queries completed since the previous call (reset-on-read; the first
        call covers everything since creation): {count, p50_ns, p90_ns, p99_ns, p999_ns,
        max_ns, mean_ns}, all 0 when count is 0.

        Latency is enqueue-to-completion in nanoseconds (CLOCK_MONOTONIC); percentiles are at
        most 6.25% above the true value (histogram bucket bound), max is exact. Safe to call
        from another thread while ``run`` is in progress; consecutive calls partition the
        completed queries."""
        out = _ffi.new("pm_latency_summary *")
        self._lib.pm_runtime_latency(self._rt, out)
        return _latency_dict(out)

    def snapshot(self) -> Snapshot:
        """The latest swept snapshot (while a run is on: from a sweep round after this call),
        exported by the runtime as two Arrow record batches and imported zero-copy by pyarrow,
        which calls the C release callbacks when the batches are freed."""
        arrays = [_ffi.new("struct ArrowArray *") for _ in range(2)]
        schemas = [_ffi.new("struct ArrowSchema *") for _ in range(2)]
        msg = _ffi.new("char[]", _ERR_LEN)
        rc = self._lib.pm_runtime_export_arrow(self._rt, arrays[0], schemas[0], arrays[1], schemas[1], msg, _ERR_LEN)
        if rc != 0:
            raise NativeRuntimeError(f"snapshot export failed: {os.strerror(-rc)}")
        slices, offcore = (pa.RecordBatch._import_from_c(_address(a), _address(sc)) for a, sc in zip(arrays, schemas, strict=True))
        return Snapshot(slices, offcore, _message(msg))

    # ---- direct access (checks, not a query path) ----
    def lookup(self, key: int) -> int | None:
        val = _ffi.new("uint64_t *")
        return int(val[0]) if self._lib.pm_runtime_lookup(self._rt, key, val) == 0 else None

    def n_keys(self) -> int:
        return int(self._lib.pm_runtime_n_keys(self._rt))
