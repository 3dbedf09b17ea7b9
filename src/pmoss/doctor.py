"""`pmoss doctor`: is this host ready to be a testbed host of a batch collection?

Each check reports `ok`, `warn` (collection runs, but measures less than it could) or `fail`
(collection as planned cannot run), what it found, and for anything not ok the change that fixes
it. `--json` prints the same as one object, so a collection plan can check every host first:

    for h in skx-lab-1 milan-lab-1; do ssh $h 'cd pmoss && .venv/bin/pmoss doctor --json' > doctor-$h.json; done

Checks: NUMA nodes and distances; the hardware PMU (core events of the CPU model libpfm4 knows,
each opened with perf_event_open; uncore IMC/link events the sysfs PMUs describe), the kernel's
perf_event_paranoid, move_pages, huge pages, the Ray node (with --ray-address / RAY_ADDRESS) and
the tracking store. Nothing here needs root; nothing is changed on the host.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import platform
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

SYSFS = Path("/sys")
PROC = Path("/proc")
# PMU directories under /sys/bus/event_source/devices that count a CPU's own events
HARDWARE_PMUS = ("cpu", "cpu_core", "cpu_atom", "armv8_pmuv3", "armv8_cortex", "arm_cortex", "armv8_neoverse", "power_pmu")
SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "ppc64le": 319}
SYS_MOVE_PAGES = {"x86_64": 279, "aarch64": 239, "ppc64le": 301}
PERF_FLAGS = 1 | 1 << 5 | 1 << 6  # disabled, exclude_kernel, exclude_hv: user-level counting, as the probe does


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""
    data: dict[str, Any] | None = None


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default


# ---- NUMA ------------------------------------------------------------------------------------------
def check_numa(sysfs: Path = SYSFS) -> Check:
    nodes = sorted(int(p.name[4:]) for p in (sysfs / "devices/system/node").glob("node[0-9]*"))
    distances = {n: [int(x) for x in _read(sysfs / f"devices/system/node/node{n}/distance").split()] for n in nodes}
    cpus = {n: _read(sysfs / f"devices/system/node/node{n}/cpulist") for n in nodes}
    data = {"nodes": nodes, "distances": distances, "cpus": cpus}
    if not nodes:
        return Check("numa", "fail", "no /sys/devices/system/node: the kernel has no NUMA support",
                     "boot a kernel with CONFIG_NUMA (every distribution kernel has it)", data)  # fmt: skip
    text = "; ".join(f"node{n}: cpus {cpus[n]}, distances {distances[n]}" for n in nodes)
    if len(nodes) == 1:
        return Check("numa", "warn", f"one NUMA node ({text}): every placement is local, episodes here measure no NUMA effect",
                     "collect on a multi-socket (or NPS/SNC-partitioned) host; for tests, a guest with several `-numa node` (docs/runtime.md)", data)  # fmt: skip
    return Check("numa", "ok", f"{len(nodes)} NUMA nodes ({text})", "", data)


# ---- perf_event --------------------------------------------------------------------------------------
def paranoid(proc: Path = PROC) -> int | None:
    raw = _read(proc / "sys/kernel/perf_event_paranoid")
    return int(raw) if raw.lstrip("-").isdigit() else None


def check_paranoid(proc: Path = PROC) -> Check:
    level = paranoid(proc)
    if level is None:
        return Check("perf_event_paranoid", "fail", "no /proc/sys/kernel/perf_event_paranoid: the kernel has no perf events",
                     "boot a kernel with CONFIG_PERF_EVENTS", {"level": None})  # fmt: skip
    fix = ("uncore (IMC, link) counters count system-wide and need level <= 0 or CAP_PERFMON: "
           "`sudo sysctl -w kernel.perf_event_paranoid=0` (persist in /etc/sysctl.d/), or `sudo setcap cap_perfmon+ep $(readlink -f .venv/bin/python)`")  # fmt: skip
    if level > 0:
        return Check("perf_event_paranoid", "warn", f"level {level}: per-thread user-level core counters only", fix, {"level": level})
    return Check("perf_event_paranoid", "ok", f"level {level}: system-wide (uncore) counting allowed", "", {"level": level})


def _libc() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def open_event(attr: Any, cpu: int = -1, pid: int = 0) -> int:
    """perf_event_open(attr, pid, cpu) and close: 0 or -errno."""
    nr = SYS_PERF_EVENT_OPEN.get(platform.machine())
    if nr is None:
        return -errno.ENOSYS
    libc = _libc()
    attr.flags |= PERF_FLAGS
    fd = libc.syscall(nr, ctypes.byref(attr), pid, cpu, -1, 8)  # PERF_FLAG_FD_CLOEXEC
    if fd < 0:
        return -ctypes.get_errno()
    os.close(fd)
    return 0


def _errno_name(rc: int) -> str:
    return errno.errorcode.get(-rc, f"errno {-rc}")


def event_source_pmus(sysfs: Path = SYSFS) -> list[str]:
    return sorted(p.name for p in (sysfs / "bus/event_source/devices").glob("*"))


def hardware_pmu(pmus: list[str]) -> str | None:
    return next((p for p in pmus if p in HARDWARE_PMUS or any(p.startswith(h) for h in HARDWARE_PMUS[3:])), None)


def core_events(lib: Any, model: str | None, opener: Callable[[Any], int] = open_event) -> dict[str, str]:
    """Each hardware core feature of `model`'s event table -> 'open' or why not (ENOENT, 'no event', ...)."""
    from pmoss.collect.collector import event_table

    if model is None:
        return {}
    out = {}
    for row in event_table(lib, model):
        if row["type"] is None:
            out[row["feature"]] = "no event on this model"
            continue
        if row["source"] == "software":  # counted by the kernel on any host: says nothing about the PMU
            continue
        attr = lib.attr_t(type=row["type"], size=ctypes.sizeof(lib.attr_t), config=row["config"], config1=row["config1"] or 0, config2=row["config2"] or 0)
        rc = opener(attr)
        out[row["feature"]] = "open" if rc == 0 else _errno_name(rc)
    return out


def check_core_pmu(lib: Any, sysfs: Path = SYSFS, opener: Callable[[Any], int] = open_event, model: str | None | type = ...) -> Check:
    """Core counters: does the kernel expose a hardware PMU, does libpfm4 know the CPU, which of the
    model's events open. The reason is exact: "libpfm4 knows the model" is not "events open"."""
    from pmoss.collect.collector import detect_model

    if model is ...:
        model = detect_model(lib)
    from pmoss.contracts.errors import PmossError

    pmus = event_source_pmus(sysfs)
    hw = hardware_pmu(pmus)
    try:
        events = core_events(lib, model, opener)  # type: ignore[arg-type]
    except PmossError as e:  # libpfm4 cannot encode the model's table here
        return Check("core_pmu", "warn", f"{e}", "update libpfm4 (libpfm4 4.13 or later) or report the model's table (collector/src/events.c)",
                     {"model": model, "event_source_pmus": pmus, "hardware_pmu": hw, "events": {}, "counter_mode": "software"})  # fmt: skip
    opened = [f for f, s in events.items() if s == "open"]
    data = {"model": model, "event_source_pmus": pmus, "hardware_pmu": hw, "events": events, "counter_mode": "hardware" if opened else "software"}
    known = f"libpfm4 knows the CPU as '{model}'" if model else "libpfm4 does not know this CPU (no event table for it)"
    if hw is None:
        why = (f"no hardware PMU: /sys/bus/event_source/devices has {', '.join(pmus) or 'nothing'} and no `cpu` PMU, so every hardware "
               f"perf_event_open fails ({', '.join(sorted(set(events.values()) - {'open', 'no event on this model'})) or 'ENOENT'}); {known}, but that is only the event "
               "table. Counters are software (counter_mode=software: task-clock, page faults; no cache, DRAM or link counts)")  # fmt: skip
        fix = ("on a VM, expose the PMU to the guest (libvirt: <cpu mode='host-passthrough'/> with <pmu state='on'/>; QEMU: -cpu host,pmu=on; "
               "a cloud: a bare-metal instance type) and reboot the guest; on bare metal, load the PMU driver (dmesg | grep -i perf)")  # fmt: skip
        return Check("core_pmu", "warn", why, fix, data)
    if model is None:
        return Check("core_pmu", "warn", f"hardware PMU '{hw}' present, but {known}: no portable core features",
                     "collect on a supported model (pmoss-events --list) or add its table to collector/src/events.c", data)  # fmt: skip
    failed = {f: s for f, s in events.items() if s not in ("open", "no event on this model")}
    if not opened:
        return Check("core_pmu", "warn", f"hardware PMU '{hw}', model {model}, but no core event opens ({failed})",
                     "check perf_event_paranoid (<= 2 for user-level counting) and that no other tool holds every counter (perf, a PMU-based profiler)", data)  # fmt: skip
    status = "ok" if not failed else "warn"
    detail = f"hardware PMU '{hw}', model {model}: {len(opened)}/{len(events)} core features open" + (f"; not: {failed}" if failed else "")
    return Check("core_pmu", status, detail, "" if not failed else "free the counters other tools hold (`perf stat` or a profiler running), then re-run", data)


def check_uncore_pmu(lib: Any, sysfs: Path = SYSFS, opener: Callable[[Any, int], int] | None = None) -> Check:
    """Uncore IMC / link events the kernel's sysfs PMUs describe (collector's discovery), each opened on its CPU."""
    from pmoss.collect.collector import discover_uncore
    from pmoss.contracts.errors import PmossError

    try:
        found = discover_uncore(lib, sysfs if sysfs != SYSFS else None)
    except PmossError as e:
        return Check("uncore_pmu", "warn", str(e), "see docs/collector.md (uncore discovery)", {"events": []})
    events = found["events"]
    if not events:
        pmus = [p for p in event_source_pmus(sysfs) if p.startswith(("uncore", "amd_df", "amd_umc", "arm_cmn"))]
        return Check("uncore_pmu", "warn", f"no uncore memory-controller or link events ({'uncore PMUs: ' + ', '.join(pmus) if pmus else 'no uncore PMU in sysfs'}): "
                     "imc_* and link_* features will be estimated or unavailable",
                     "on a VM the uncore PMUs are never exposed: collect on bare metal; on bare metal, load the uncore driver (modprobe intel_uncore / amd_uncore)",
                     {"events": []})  # fmt: skip
    opener = opener or (lambda attr, cpu: open_event(attr, cpu=cpu, pid=-1))
    results = {}
    for e in events:
        attr = lib.attr_t(type=e["type"], size=ctypes.sizeof(lib.attr_t), config=e["config"], config1=e["config1"])
        results[f"{e['pmu']}:{e['feature']}"] = "open" if (rc := opener(attr, e["cpu"])) == 0 else _errno_name(rc)
    failed = {k: v for k, v in results.items() if v != "open"}
    data = {"events": results, "n_nodes": found["n_nodes"], "n_links": found["n_links"]}
    if failed:
        return Check("uncore_pmu", "warn", f"{len(results) - len(failed)}/{len(results)} uncore events open; not: {failed}",
                     "system-wide counting needs perf_event_paranoid <= 0 or CAP_PERFMON (see perf_event_paranoid)", data)  # fmt: skip
    return Check("uncore_pmu", "ok", f"{len(results)} uncore events open ({found['n_nodes']} nodes, {found['n_links']} links)", "", data)


# ---- memory --------------------------------------------------------------------------------------------
def check_move_pages() -> Check:
    """move_pages(2) on a page of our own: the call the runtime's migration uses (asks where it is, then moves it to its own node)."""
    nr = SYS_MOVE_PAGES.get(platform.machine())
    if nr is None:
        return Check("move_pages", "warn", f"unknown syscall number on {platform.machine()}", "check by hand: `migratepages` from numactl", {})
    libc = _libc()
    page = os.sysconf("SC_PAGE_SIZE")
    buf = ctypes.create_string_buffer(2 * page)
    addr = (ctypes.addressof(buf) + page - 1) // page * page
    ctypes.memset(addr, 1, 1)  # touched: the page exists
    pages, status = (ctypes.c_void_p * 1)(addr), (ctypes.c_int * 1)(-1)
    rc = libc.syscall(nr, 0, 1, pages, None, status, 0)
    if rc != 0:
        err = ctypes.get_errno()
        return Check("move_pages", "fail", f"move_pages (query) = {errno.errorcode.get(err, err)}",
                     "the kernel needs CONFIG_NUMA and CONFIG_MIGRATION; in a container, allow the move_pages syscall (seccomp profile) and CAP_SYS_NICE", {})  # fmt: skip
    node = status[0]
    nodes = (ctypes.c_int * 1)(node)
    rc = libc.syscall(nr, 0, 1, pages, nodes, status, 2)  # MPOL_MF_MOVE: our own page, to the node it is on
    if rc != 0:
        err = ctypes.get_errno()
        return Check("move_pages", "fail", f"move_pages (move) = {errno.errorcode.get(err, err)}",
                     "allow the move_pages syscall (a container's seccomp profile) and CAP_SYS_NICE for the runtime's process", {"node": node})  # fmt: skip
    return Check("move_pages", "ok", f"move_pages works (a page of this process is on node {node})", "", {"node": node})


def check_huge_pages(sysfs: Path = SYSFS, proc: Path = PROC) -> Check:
    thp = _read(sysfs / "kernel/mm/transparent_hugepage/enabled", "unknown")
    mode = thp[thp.find("[") + 1 : thp.find("]")] if "[" in thp else thp
    meminfo = dict(line.split(":", 1) for line in _read(proc / "meminfo").splitlines() if ":" in line)
    total = meminfo.get("HugePages_Total", "0").strip()
    data = {"transparent_hugepage": mode, "hugepages_total": int(total) if total.isdigit() else None, "hugepagesize": meminfo.get("Hugepagesize", "").strip()}
    detail = f"transparent huge pages: {mode}; reserved huge pages: {total} of {data['hugepagesize'] or '?'}"
    if mode == "always":
        return Check("huge_pages", "warn", detail + ": khugepaged may collapse and move index pages while an episode runs (noise in throughput and DRAM counts)",
                     "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled (the same setting on every testbed host)", data)  # fmt: skip
    if mode not in ("madvise", "never"):
        return Check("huge_pages", "warn", detail, "check /sys/kernel/mm/transparent_hugepage/enabled", data)
    return Check("huge_pages", "ok", detail + " (no page collapses behind an episode's back)", "", data)


# ---- Ray, tracking ------------------------------------------------------------------------------------
def check_ray(address: str | None, timeout_s: float = 5.0) -> Check:
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        return Check("ray_node", "warn", "no Ray cluster given (--ray-address or RAY_ADDRESS): not checked",
                     "join the testbed's cluster: `ray start --address HEAD:6379 --node-ip-address LAB_IP --resources '{\"host:NAME\": 1}'` "
                     "(pipelines/README.md), then `pmoss doctor --ray-address HEAD:6379`", {})  # fmt: skip
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port or 6379)), timeout=timeout_s).close()
    except (OSError, ValueError) as e:
        return Check("ray_node", "fail", f"Ray head {address} cannot be reached ({getattr(e, 'strerror', None) or e})",
                     "start the head (`ray start --head --node-ip-address LAB_IP --port 6379`) or fix --ray-address; "
                     "a firewall must let this host reach the head's GCS port and every node's ports (pipelines/README.md)", {})  # fmt: skip
    import ray
    from ray.exceptions import AuthenticationError

    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except AuthenticationError as e:
        return Check("ray_node", "fail", f"Ray head {address} refused this host's token ({str(e).splitlines()[0][:160]})",
                     "give this host the cluster's token: ~/.ray/auth_token (mode 600) or RAY_AUTH_TOKEN, with RAY_AUTH_MODE=token (pipelines/README.md)", {})  # fmt: skip
    except ConnectionError as e:
        return Check("ray_node", "fail", f"Ray head {address}: {e}", "check the head is up (`ray status --address HEAD:6379` on the head) and the lab ports are open", {})
    try:
        me = socket.gethostname()
        nodes = [{"ip": n["NodeManagerAddress"], "host": n.get("NodeManagerHostname"), "resources": n["Resources"]} for n in ray.nodes() if n["Alive"]]
    finally:
        ray.shutdown()
    mine = [n for n in nodes if n["host"] == me]
    data = {"nodes": nodes, "this_host": me}
    if not mine:
        return Check("ray_node", "fail", f"{address}: {len(nodes)} nodes alive, none on this host ({me})",
                     "on this host: `ray start --address HEAD:6379 --node-ip-address LAB_IP --resources '{\"host:NAME\": 1}'`", data)  # fmt: skip
    res = mine[0]["resources"]
    pins = sorted(k for k in res if k.startswith("host:"))
    if not pins:
        return Check("ray_node", "warn", f"this host's node offers {res} but no `host:NAME` resource: no chunk of a host-bound pool runs here",
                     "restart the node with --resources '{\"host:NAME\": 1}', NAME as in the pool's `hosts:`", data)  # fmt: skip
    return Check("ray_node", "ok", f"node {mine[0]['ip']}: {res.get('CPU', 0):g} CPUs, pinned as {', '.join(pins)}", "", data)


def check_tracking() -> Check:
    from pmoss.learn.tracking import TrackingUnreachable, check_reachable, default_tracking_uri, timeout_s

    uri = default_tracking_uri()
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        if not os.access(db if db.exists() else db.parent if db.parent.exists() else db.parent.parent, os.W_OK):
            return Check("tracking", "fail", f"{uri}: not writable here", f"fix the permissions of {db.parent}, or set MLFLOW_TRACKING_URI", {"uri": uri})
        return Check("tracking", "ok", f"{uri} (the local sqlite store; a testbed host writes raw Parquet, the head registers)", "", {"uri": uri})
    try:
        check_reachable(uri, timeout_s())
    except TrackingUnreachable as e:
        return Check("tracking", "fail", str(e), "start the tracking server or fix MLFLOW_TRACKING_URI (it must be reachable from every host)", {"uri": uri})
    return Check("tracking", "ok", f"{uri} answers", "", {"uri": uri})


def check_numpy_kernels(active: list[str] | None = None) -> Check:
    """NumPy's SIMD kernels in this process: simulated data is byte-identical across x86-64 hosts only
    on its AVX2 ones (`import pmoss` sets NPY_DISABLE_CPU_FEATURES; docs/contracts.md)."""
    if active is None:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

        active = [k for k in __cpu_dispatch__ if __cpu_features__.get(k)]
    wide = [k for k in active if k == "X86_V4" or k.startswith("AVX512")]
    data = {"dispatched": active, "NPY_DISABLE_CPU_FEATURES": os.environ.get("NPY_DISABLE_CPU_FEATURES")}
    if wide:
        why = "PMOSS_NATIVE_SIMD=1" if os.environ.get("PMOSS_NATIVE_SIMD") == "1" else "NumPy was imported before pmoss"
        return Check("numpy_kernels", "warn", f"NumPy runs its {', '.join(wide)} kernels ({why}): simulated data written by this "
                     "process can differ in its last bits from another host's, and from dvc.lock's",
                     "unset PMOSS_NATIVE_SIMD and import pmoss before numpy (the pmoss CLI does)", data)  # fmt: skip
    return Check("numpy_kernels", "ok", f"NumPy on its {active[-1] if active else 'baseline'} kernels: simulated data is the same bytes on any x86-64 host", "", data)


def check_torch_kernels(capability: str | None = None) -> Check:
    """torch's CPU kernels in this process: a model trained here is the same bytes as on another
    x86-64 host only on their AVX2 code (`import pmoss` pins ATen, oneDNN and MKL; docs/contracts.md)."""
    from pmoss import SIMD_PIN

    if capability is None:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    pins = {k: os.environ.get(k) for k in SIMD_PIN if k != "NPY_DISABLE_CPU_FEATURES"}
    data = {"capability": capability, **pins}
    unpinned = [k for k, v in pins.items() if v is None]
    if capability.startswith("AVX512") or unpinned:
        why = "PMOSS_NATIVE_SIMD=1" if os.environ.get("PMOSS_NATIVE_SIMD") == "1" else "torch ran a kernel before pmoss was imported"
        what = f"torch runs its {capability} kernels" if capability.startswith("AVX512") else f"{', '.join(unpinned)} not set"
        return Check("torch_kernels", "warn", f"{what} ({why}): a model trained by this process can differ in its last bits from "
                     "another host's, and from dvc.lock's", "unset PMOSS_NATIVE_SIMD and import pmoss first (the pmoss CLI does)", data)  # fmt: skip
    if capability != "AVX2":  # a CPU without AVX2, or not x86-64: the pin cannot make it compute as the others do
        return Check("torch_kernels", "warn", f"torch runs its {capability} kernels (this CPU has no AVX2 code to pin): a model trained here "
                     "can differ in its last bits from an x86-64 AVX2 host's, and from dvc.lock's", "train on an x86-64 host with AVX2", data)  # fmt: skip
    return Check("torch_kernels", "ok", "torch on its AVX2 kernels, oneDNN and MKL on AVX2: a model trained here is the same bytes on any x86-64 host with as many threads", "", data)


# ---- all ------------------------------------------------------------------------------------------------
def run_checks(ray_address: str | None = None) -> list[Check]:
    from pmoss.collect.collector import load_library
    from pmoss.contracts.errors import PmossError

    checks = [check_numa(), check_paranoid()]
    try:
        lib = load_library()
    except PmossError as e:
        missing = "collector library not built: PMU events not checked"
        checks += [Check(n, "fail", f"{missing} ({e})", "make native (or set PMOSS_LIB)", {}) for n in ("core_pmu", "uncore_pmu")]
    else:
        checks += [check_core_pmu(lib), check_uncore_pmu(lib)]
    return checks + [check_move_pages(), check_huge_pages(), check_numpy_kernels(), check_torch_kernels(), check_ray(ray_address), check_tracking()]


def report(checks: list[Check]) -> dict[str, Any]:
    pmu = next((c for c in checks if c.name == "core_pmu"), None)
    return {"host": socket.gethostname(), "ok": all(c.status != "fail" for c in checks),
            "counter_mode": (pmu.data or {}).get("counter_mode", "software") if pmu else "software", "checks": [asdict(c) for c in checks]}  # fmt: skip


def doctor_command(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object (host, ok, counter_mode, checks[]) for a collection plan.")] = False,
    ray_address: Annotated[Optional[str], typer.Option(help="The testbed's Ray head (HOST:6379); default $RAY_ADDRESS, else not checked.")] = None,
) -> None:
    """Check this host before a batch collection: NUMA, PMU events (core, uncore), perf_event_paranoid,
    move_pages, huge pages, the Ray node and the tracking store; each problem with its fix. Exit 1 if a check fails."""
    out = report(run_checks(ray_address))
    if as_json:
        typer.echo(json.dumps(out, indent=1))
    else:
        typer.echo(f"{out['host']}: counters {out['counter_mode']}")
        for c in out["checks"]:
            typer.echo(f"  {c['status']:<4} {c['name']:<20} {c['detail']}")
            if c["fix"]:
                typer.echo(f"       {'':<20} fix: {c['fix']}")
    raise typer.Exit(0 if out["ok"] else 1)
