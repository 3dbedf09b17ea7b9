"""The schedule contract (docs/contracts.md) tested both ways, Python's writer against the C reader:

- every schedule Python can write (each kind; one width for all slices, mixed widths, no width;
  for every simulated pool machine and this host) is read by the runtime's JSON reader with the
  same nodes, anchors and widths, and on this host enforced by a running runtime (validate ->
  migrate -> swap) and by `pmoss-runtime --schedule`;
- every valid schedule file the C side is tested with (runtime/tests/schedules/, the fuzzer's seed
  corpus) and the contract's own example load in Python with the same fields.

The runtime writes no schedule files, so its fixtures are the reverse direction. Needs
libpmoss.so (PMOSS_LIB or build/runtime/); skipped without it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any, get_args

import cffi
import numpy as np
import pytest

from pmoss.collect import runtime as rtmod
from pmoss.collect.topology import discover
from pmoss.contracts.groups import WIDTHS, groups_of
from pmoss.contracts.machine import Machine
from pmoss.contracts.policies import generate
from pmoss.contracts.schedule import Kind, Schedule, load_schedule, save_schedule
from pmoss.sim.pool import list_machines, load_sim_machine

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "runtime/tests/schedules"

pytestmark = pytest.mark.skipif(
    not rtmod.library_path().exists(),
    reason=f"{rtmod.library_path()} is not built (cmake -S . -B build && cmake --build build)",
)

# The reader's accessors (runtime/include/pmoss/runtime.h); the binding declares only what it uses.
_ffi = cffi.FFI()
_ffi.cdef("""
typedef struct pm_schedule pm_schedule;
int pm_schedule_parse_json(const char *text, size_t len, pm_schedule **out, char *err, size_t err_len);
void pm_schedule_destroy(pm_schedule *s);
int pm_schedule_kind_of(const pm_schedule *s);
const char *pm_schedule_kind_name(int kind);
unsigned pm_schedule_n_slices(const pm_schedule *s);
const int *pm_schedule_nodes(const pm_schedule *s);
const int *pm_schedule_cores(const pm_schedule *s);
const uint8_t *pm_schedule_widths(const pm_schedule *s);
const char *pm_schedule_machine(const pm_schedule *s);
const char *pm_width_name(int width);
""")
C_NO_WIDTH = "none"  # the C reader's width of a slice that any worker runs (Python: "")


def c_read(text: str) -> dict[str, Any]:
    """Parse schedule JSON with the runtime's reader; the fields it holds afterwards, or ValueError
    with the reader's message."""
    lib = _ffi.dlopen(str(rtmod.library_path()))
    raw = text.encode()
    out = _ffi.new("pm_schedule **")
    err = _ffi.new("char[]", 512)
    if lib.pm_schedule_parse_json(raw, len(raw), out, err, 512) != 0:
        raise ValueError(_ffi.string(err).decode())
    s = out[0]
    try:
        n = lib.pm_schedule_n_slices(s)
        return {
            "kind": _ffi.string(lib.pm_schedule_kind_name(lib.pm_schedule_kind_of(s))).decode(),
            "machine": _ffi.string(lib.pm_schedule_machine(s)).decode(),
            "node": list(lib.pm_schedule_nodes(s)[0:n]),
            "core": list(lib.pm_schedule_cores(s)[0:n]),
            "width": [_ffi.string(lib.pm_width_name(w)).decode() for w in lib.pm_schedule_widths(s)[0:n]],
        }
    finally:
        lib.pm_schedule_destroy(s)


def python_fields(s: Schedule) -> dict[str, Any]:
    return {"kind": s.kind, "machine": s.machine, "node": s.node, "core": s.core,
            "width": [w or C_NO_WIDTH for w in s.widths()]}  # fmt: skip


def writable(machine: Machine, n: int = 32) -> dict[str, Schedule]:
    """One schedule of every shape Python writes for `machine`: each generator kind, sn-hot with
    skewed load (mixed widths), the model's and the oracle's kinds with one width and with mixed
    widths, and one-core schedules from worker actions."""
    out: dict[str, Schedule] = {}
    for kind in get_args(Kind):
        if kind not in ("learned", "search"):
            out[kind] = generate(kind, machine, n, seed=1)
    load = np.geomspace(1, 200, n)
    out["sn-hot/skewed"] = generate("sn-hot", machine, n, seed=1, load=load / load.sum())
    g = groups_of(machine)
    rng = np.random.default_rng(0)
    for kind in ("learned", "search"):
        out[f"{kind}/actions"] = Schedule.from_actions(machine, list(rng.integers(0, machine.n_workers, n)), kind=kind)
        out[f"{kind}/mixed"] = Schedule.from_groups(machine, rng.integers(0, len(g.width), n), kind=kind)
        for code in sorted(set(g.width.tolist())):  # one width for every slice
            pick = np.flatnonzero(g.width == code)
            out[f"{kind}/{WIDTHS[code]}"] = Schedule.from_groups(machine, rng.choice(pick, n), kind=kind)
    node_groups = np.flatnonzero(g.width == WIDTHS.index("node"))
    if len(node_groups):  # sn-numa from groups: its only width, so none written
        out["sn-numa/groups"] = Schedule.from_groups(machine, rng.choice(node_groups, n), kind="sn-numa")
    for name, s in out.items():
        s.validate_for(machine)
    return out


MACHINES = list_machines()


def test_shapes_cover_every_kind_and_width() -> None:
    """The test's own premise: what `writable` makes spans every kind and every width Python knows,
    and both the written-width and the no-width forms."""
    shapes = [s for m in MACHINES for s in writable(load_sim_machine(m)).values()]  # not every machine has SMT
    assert {s.kind for s in shapes} == set(get_args(Kind))
    assert {w for s in shapes for w in s.widths()} == set(WIDTHS) | {""}
    assert any(s.width is None for s in shapes) and any(isinstance(s.width, str) for s in shapes)
    assert any(isinstance(s.width, list) for s in shapes)


@pytest.mark.parametrize("machine_name", MACHINES)
def test_every_schedule_python_writes_is_read_by_the_runtime(machine_name: str, tmp_path: Path) -> None:
    machine = load_sim_machine(machine_name)
    for name, s in writable(machine).items():
        path = tmp_path / f"{name.replace('/', '-')}.json"
        save_schedule(s, path)
        text = path.read_text()
        assert json.loads(text).get("width", "left out") is not None, f"{name}: width written as null"
        try:
            got = c_read(text)
        except ValueError as e:
            pytest.fail(f"{machine_name} {name}: the runtime refuses what save_schedule wrote: {e}\n{text[:300]}")
        assert got == python_fields(s), f"{machine_name} {name}: the runtime read other fields than Python wrote"
        # the other dumps (eval/schedules.json, `pmoss schedule` on stdout) are model_dump too
        assert c_read(json.dumps(s.model_dump(mode="json"))) == got


def test_no_width_is_left_out_not_written_as_null(tmp_path: Path) -> None:
    """Issue 40.1: `"width": null` was written and the runtime refused it; the writer leaves it out."""
    s = generate("sn-grouped", load_sim_machine("intel-skx-4s"), 16)
    assert s.width is None
    save_schedule(s, tmp_path / "s.json")
    assert "width" not in json.loads((tmp_path / "s.json").read_text())
    assert load_schedule(tmp_path / "s.json") == s


@pytest.fixture(scope="module")
def host() -> Machine:
    return discover()


def test_every_schedule_for_this_host_is_enforced(host: Machine, tmp_path: Path) -> None:
    """Beyond the reader: a running runtime told its machine's name validates (against this host's
    topology), migrates and swaps in every shape Python writes for the host."""
    rt = rtmod.Runtime(20_000, n_slices=32, queue_capacity=64, machine=host.name)
    for name, s in writable(host, rt.n_slices).items():
        save_schedule(s, tmp_path / "s.json")
        try:
            rt.set_schedule_json((tmp_path / "s.json").read_text())
        except rtmod.ScheduleError as e:
            pytest.fail(f"{name}: the runtime refused a schedule Python made for this host: {e}")


def test_pmoss_runtime_binary_runs_a_python_schedule(host: Machine, tmp_path: Path) -> None:
    """The README's example path: a schedule from save_schedule, then `pmoss-runtime --schedule`."""
    binary = rtmod.library_path().parent / "pmoss-runtime"
    if not binary.exists():
        pytest.skip(f"{binary} is not built")
    for kind in ("sn-grouped", "sn-numa", "os-default"):
        save_schedule(generate(kind, host, 16), tmp_path / f"{kind}.json")
        out = subprocess.run([str(binary), "--keys", "20000", "--slices", "16", "--workload", "ycsb-c", "--seconds", "0.2",
                              "--schedule", str(tmp_path / f"{kind}.json")], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, f"{kind}: pmoss-runtime exit {out.returncode}: {out.stderr[-500:]}"
        assert "rejected" not in out.stderr


FIXTURE_FILES = sorted(FIXTURES.glob("*.json"))


def test_fixtures_exist() -> None:
    assert len(FIXTURE_FILES) >= 5, f"{FIXTURES}: the C side's valid schedules are missing"


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_runtime_fixtures_load_in_python(path: Path) -> None:
    """The reverse: each valid schedule the C reader is tested with reads in Python, field for field."""
    got = c_read(path.read_text())
    s = load_schedule(path)
    assert python_fields(s) == got


def test_the_contract_example_reads_on_both_sides(tmp_path: Path) -> None:
    text = (REPO / "docs/contracts.md").read_text()
    example = re.search(r"```json\n(.*?)```", text, re.S)
    assert example, "docs/contracts.md lost its schedule example"
    (tmp_path / "example.json").write_text(example.group(1))
    s = load_schedule(tmp_path / "example.json", load_sim_machine("intel-skx-4s"))
    assert python_fields(s) == c_read(example.group(1))


def test_width_null_from_older_pmoss_reads_on_both_sides() -> None:
    got = c_read((FIXTURES / "width_null.json").read_text())
    assert got["width"] == [C_NO_WIDTH, C_NO_WIDTH]
    one_core = '{"schema_version":2,"machine":"m","n_slices":1,"kind":"sn-grouped","node":[0],"core":[1],"width":null}'
    assert c_read(one_core)["width"] == ["thread"]


def test_both_readers_refuse_the_same_bad_width(tmp_path: Path) -> None:
    bad = '{"schema_version":2,"machine":"m","n_slices":1,"kind":"sn-grouped","node":[0],"core":[1],"width":"core"}'
    (tmp_path / "bad.json").write_text(bad)
    with pytest.raises(ValueError, match="core is not allowed for kind sn-grouped"):
        c_read(bad)
    machine_free = load_schedule(tmp_path / "bad.json")  # Python checks widths per kind against a machine
    with pytest.raises(Exception, match="width"):
        machine_free.validate_for(load_sim_machine("intel-skx-4s").model_copy(update={"name": "m"}))
