"""Python side of the C collector: event tables, uncore discovery, Arrow batches -> snapshot columns.

The collector is C (collector/, compiled into libpmoss and into libpmoss_collector.so on its
own); this module loads it with ctypes (ABI level, no compiler needed at import) and never sits
on a per-query path: it reads tables and whole record batches.
"""

from __future__ import annotations

import ctypes
import math
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from pmoss.contracts.errors import PmossError
from pmoss.contracts.snapshot import (
    CORE_FEATURES,
    OFFCORE_LINK,
    OFFCORE_NODE,
    SLICE_FEATURES,
)

REPO = Path(__file__).resolve().parents[3]
PM_N_CORE_FEATURES = 15
PM_N_OFFCORE = 5
PM_VALUE_UNAVAILABLE = 2**64 - 1
OFFCORE_NAMES = ("imc_read_bytes", "imc_write_bytes", "link_in_bytes", "link_out_bytes", "imc_total_bytes")
_SOURCES = ("unavailable", "libpfm", "raw", "software")


class _EventDesc(ctypes.Structure):
    _fields_ = [("feature", ctypes.c_char_p), ("source", ctypes.c_int), ("event", ctypes.c_char_p), ("raw_config", ctypes.c_uint64), ("note", ctypes.c_char_p)]


def _struct_types(attr_size: int) -> tuple[type[ctypes.Structure], type[ctypes.Structure]]:
    """ctypes mirrors of struct perf_event_attr (leading fields, padded to the C size) and pm_uncore_event."""
    lead = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64), ("sample", ctypes.c_uint64), ("sample_type", ctypes.c_uint64), ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("wakeup", ctypes.c_uint32), ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64)]
    pad = attr_size - 72  # bytes of the leading fields above
    assert pad >= 0 and attr_size % 8 == 0, f"unexpected sizeof(struct perf_event_attr) = {attr_size}"
    attr = type("_PerfAttr", (ctypes.Structure,), {"_fields_": [*lead, ("_pad", ctypes.c_uint8 * pad)]})
    event = type("_UncoreEvent", (ctypes.Structure,), {"_fields_": [("pmu", ctypes.c_char * 64), ("feature", ctypes.c_int), ("scope_index", ctypes.c_int), ("cpu", ctypes.c_int), ("attr", attr), ("bytes_per_count", ctypes.c_double), ("spec", ctypes.c_char * 256)]})
    return attr, event


def library_candidates() -> list[Path]:
    env = [os.environ.get(k) for k in ("PMOSS_COLLECTOR_LIB", "PMOSS_LIB")]
    return [Path(p) for p in env if p] + [REPO / "build" / "collector" / "libpmoss_collector.so", REPO / "build" / "runtime" / "libpmoss.so"]


def load_library(path: Path | None = None) -> ctypes.CDLL:
    """Load the collector from `path`, $PMOSS_COLLECTOR_LIB, $PMOSS_LIB or the repo's build tree."""
    for p in [Path(path)] if path else library_candidates():
        if p.is_file():
            lib = ctypes.CDLL(str(p))
            if hasattr(lib, "pm_event_describe") and hasattr(lib, "pm_perf_attr_size"):
                return _declare(lib)
    raise PmossError(f"collector library not found (tried {', '.join(map(str, [path] if path else library_candidates()))}); build it with `make native`")


def build_library(build_dir: Path) -> Path:
    """Configure and build collector/ alone (cmake); returns libpmoss_collector.so. For tests and tools."""
    build_dir = Path(build_dir)
    subprocess.run(["cmake", "-S", str(REPO / "collector"), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build_dir), "-j2", "--target", "pmoss_collector_shared"], check=True, capture_output=True)
    return build_dir / "libpmoss_collector.so"


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    P, I, U = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
    _PerfAttr, _UncoreEvent = _struct_types(ctypes.c_size_t.in_dll(lib, "pm_perf_attr_size").value)
    want = ctypes.c_size_t.in_dll(lib, "pm_uncore_event_size").value
    if ctypes.sizeof(_UncoreEvent) != want:
        raise PmossError(f"collector library layout mismatch: pm_uncore_event is {want} bytes, Python expects {ctypes.sizeof(_UncoreEvent)}; rebuild with `make native`")
    lib.attr_t, lib.uncore_event_t = _PerfAttr, _UncoreEvent
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "pm_event_describe": (I, [ctypes.c_char_p, I, ctypes.POINTER(_EventDesc)]),
        "pm_event_encode": (I, [ctypes.c_char_p, I, ctypes.POINTER(_PerfAttr), ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]),
        "pm_model_pfm_pmu": (ctypes.c_char_p, [ctypes.c_char_p]),
        "pm_model_detect": (I, [ctypes.POINTER(ctypes.c_char_p)]),
        "pm_uncore_discover": (I, [ctypes.c_char_p, ctypes.POINTER(P), ctypes.c_char_p, ctypes.c_size_t]),
        "pm_uncore_destroy": (None, [P]),
        "pm_uncore_n_events": (U, [P]),
        "pm_uncore_event_at": (ctypes.POINTER(_UncoreEvent), [P, U]),
        "pm_uncore_n_nodes": (U, [P]),
        "pm_uncore_n_links": (U, [P]),
        "pm_ctab_create": (I, [U, U, P, ctypes.POINTER(P)]),
        "pm_ctab_destroy": (None, [P]),
        "pm_ctab_add_window": (I, [P, U, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint64]),
        "pm_ctab_export_arrow": (I, [P, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32), P, P]),
        "pm_offcore_export_arrow": (I, [ctypes.POINTER(ctypes.c_double), U, U, U, P, P]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def models(lib: ctypes.CDLL) -> list[str]:
    """Model keys of the built-in tables (the NULL-terminated C array pm_models)."""
    base = ctypes.addressof(ctypes.c_char_p.in_dll(lib, "pm_models"))
    out: list[str] = []
    while (name := ctypes.c_char_p.from_address(base + len(out) * ctypes.sizeof(ctypes.c_char_p)).value) is not None:
        out.append(name.decode())
    return out


def detect_model(lib: ctypes.CDLL) -> str | None:
    """The host's model key, or None without a supported hardware PMU (software counter mode)."""
    out = ctypes.c_char_p()
    return out.value.decode() if lib.pm_model_detect(ctypes.byref(out)) == 0 and out.value else None


def event_table(lib: ctypes.CDLL, model: str) -> list[dict[str, Any]]:
    """Mapping of every portable core feature on `model`; unavailable features have event/type None.

    Encoding another model than the host's needs LIBPFM_FORCE_PMU or LIBPFM_ENCODE_INACTIVE=1 in
    the environment before the library's first encode (libpfm reads it once).
    """
    rows = []
    for f in range(PM_N_CORE_FEATURES):
        d = _EventDesc()
        if lib.pm_event_describe(model.encode(), f, ctypes.byref(d)) != 0:
            raise PmossError(f"unknown CPU model {model!r}; known: {', '.join(models(lib))}")
        attr, pfm, msg = lib.attr_t(), ctypes.create_string_buffer(256), ctypes.create_string_buffer(256)
        rc = lib.pm_event_encode(model.encode(), f, ctypes.byref(attr), pfm, 256, msg, 256)
        row = {"feature": d.feature.decode(), "source": _SOURCES[d.source], "event": None, "type": None, "config": None, "config1": None, "config2": None, "note": d.note.decode() if d.note else None}
        if rc == 0:
            row.update(event=pfm.value.decode(), type=attr.type, config=attr.config, config1=attr.config1, config2=attr.config2)
        elif d.source != 0:
            raise PmossError(f"{model} {row['feature']}: {msg.value.decode()}")
        rows.append(row)
    return rows


def discover_uncore(lib: ctypes.CDLL, sysfs_root: Path | str | None = None) -> dict[str, Any]:
    """Uncore events under a sysfs root: {'n_nodes', 'n_links', 'events': [...]}; errors name the file."""
    handle, msg = ctypes.c_void_p(), ctypes.create_string_buffer(512)
    root = str(sysfs_root).encode() if sysfs_root is not None else None
    rc = lib.pm_uncore_discover(root, ctypes.byref(handle), msg, 512)
    if rc != 0:
        raise PmossError(f"uncore discovery failed: {msg.value.decode() or os.strerror(-rc)}")
    try:
        events = []
        for i in range(lib.pm_uncore_n_events(handle)):
            e = lib.pm_uncore_event_at(handle, i).contents
            events.append({"pmu": e.pmu.decode(), "feature": OFFCORE_NAMES[e.feature], "scope_index": e.scope_index, "cpu": e.cpu, "type": e.attr.type, "config": e.attr.config, "config1": e.attr.config1, "bytes_per_count": e.bytes_per_count, "spec": e.spec.decode()})
        return {"n_nodes": lib.pm_uncore_n_nodes(handle), "n_links": lib.pm_uncore_n_links(handle), "events": events}
    finally:
        lib.pm_uncore_destroy(handle)


def import_batch(export: Callable[[int, int], int]) -> pa.RecordBatch:
    """Call a C exporter `export(array_ptr, schema_ptr) -> rc` and import its record batch.

    pyarrow takes ownership and calls the C release callbacks when the batch is freed.
    """
    from pyarrow.cffi import ffi

    c_array, c_schema = ffi.new("struct ArrowArray*"), ffi.new("struct ArrowSchema*")
    pa_ptr, ps_ptr = int(ffi.cast("uintptr_t", c_array)), int(ffi.cast("uintptr_t", c_schema))
    rc = export(pa_ptr, ps_ptr)
    if rc != 0:
        raise PmossError(f"Arrow export failed: {os.strerror(-rc)}")
    return pa.RecordBatch._import_from_c(pa_ptr, ps_ptr)


def slice_batch_from_counts(lib: ctypes.CDLL, names: list[str], before: list[list[float | None]], after: list[list[float | None]], queries: list[int], core: list[int] | None = None, node: list[int] | None = None) -> pa.RecordBatch:
    """Stitch one window per slice through the C counter table and export it (None = unmeasured)."""
    n_slices, n_values = len(after), len(names)
    c_names = (ctypes.c_char_p * (n_values + 1))(*[n.encode() for n in names], None)
    tab = ctypes.c_void_p()
    if lib.pm_ctab_create(n_slices, n_values, ctypes.cast(c_names, ctypes.c_void_p), ctypes.byref(tab)) != 0:
        raise PmossError("pm_ctab_create failed")
    try:
        u64 = ctypes.c_uint64 * n_values
        for s in range(n_slices):
            b = u64(*[PM_VALUE_UNAVAILABLE if v is None else int(v) for v in before[s]])
            a = u64(*[PM_VALUE_UNAVAILABLE if v is None else int(v) for v in after[s]])
            lib.pm_ctab_add_window(tab, s, b, a, queries[s])
        i32 = ctypes.c_int32 * n_slices
        c_core, c_node = (i32(*core) if core else None), (i32(*node) if node else None)
        return import_batch(lambda pa_ptr, ps_ptr: lib.pm_ctab_export_arrow(tab, c_core, c_node, pa_ptr, ps_ptr))
    finally:
        lib.pm_ctab_destroy(tab)


def offcore_batch(lib: ctypes.CDLL, values: dict[str, list[float | None]], n_nodes: int, n_links: int) -> pa.RecordBatch:
    """Export off-core readings ({feature: per node/link list, None = null}) through the C exporter."""
    cap = max(n_nodes, n_links, 1)
    flat = (ctypes.c_double * (PM_N_OFFCORE * cap))(*([math.nan] * (PM_N_OFFCORE * cap)))
    for f, name in enumerate(OFFCORE_NAMES):
        for i, v in enumerate(values.get(name) or []):
            flat[f * cap + i] = math.nan if v is None else float(v)
    return import_batch(lambda pa_ptr, ps_ptr: lib.pm_offcore_export_arrow(flat, cap, n_nodes, n_links, pa_ptr, ps_ptr))


EXACT_STATS = ("slice", "core", "node", "queries", "nodes_visited", "keys_scanned", "profiled_queries")  # the runtime's own counts


def _estimated_totals(cols: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Sampled attribution (runtime probe_period_us): a probe counter covers only the queries in
    its slice's probe windows (`profiled_queries`), each window exact. A slice's total is
    estimated as counter x queries / profiled_queries (its exact per-query rate over the windows,
    times its queries). A slice with queries but no window stays null (nothing measured it)."""
    if "profiled_queries" not in cols:
        return cols
    q, pq = cols["queries"], cols["profiled_queries"]
    out = dict(cols)
    for name, values in cols.items():
        if name in EXACT_STATS:
            continue
        out[name] = [None if v is None or (n and not p) else v * n / p if p else 0.0
                     for v, n, p in zip(values, q, pq, strict=True)]  # fmt: skip
    return out


def episode_columns(slices: pa.RecordBatch, offcore: pa.RecordBatch | None = None) -> dict[str, Any]:
    """Collector batches -> the slice-level and off-core columns of a raw snapshot row (docs/design.md §4.3).

    A slice feature the batch lacks or that is null for any slice is unavailable: a null list,
    named in `unavailable` (a probe that cannot measure a counter cannot measure it on any slice;
    a slice that ran nothing shows 0 there, which is not a measurement). An off-core feature with
    no measured node / link is a null list and named in `unavailable`; single unmeasured entries
    stay null inside the list. `imc_total_bytes` (AMD DF, Arm CMN: reads and writes together) has
    no snapshot column, so on such hosts imc_read_bytes / imc_write_bytes are unavailable.
    """
    cols = _estimated_totals(slices.to_pydict())
    order = sorted(range(slices.num_rows), key=lambda i: cols["slice"][i])
    out: dict[str, Any] = {"core": [cols["core"][i] for i in order], "node": [cols["node"][i] for i in order], "queries": [cols["queries"][i] for i in order]}
    unavailable = []
    for name in SLICE_FEATURES:
        values = [cols[name][i] for i in order] if name in cols else None
        if values is None or any(v is None for v in values):
            out[name] = None
            unavailable.append(name)
        else:
            out[name] = values
    oc = offcore.to_pydict() if offcore is not None else {"scope": [], "index": []}
    for name, scope in [(n, "node") for n in OFFCORE_NODE] + [(n, "link") for n in OFFCORE_LINK]:
        rows = sorted((oc["index"][i], oc[name][i]) for i in range(len(oc["scope"])) if oc["scope"][i] == scope)
        vals = [v for _, v in rows]
        out[name] = vals if any(v is not None for v in vals) else None
        if out[name] is None:
            unavailable.append(name)
    out["unavailable"] = unavailable
    assert set(CORE_FEATURES) <= set(SLICE_FEATURES), "core features are slice features"
    return out
