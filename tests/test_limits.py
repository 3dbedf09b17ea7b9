"""Issue 42, items 2, 5, 7, 8: sizes past a hard bound or past this machine's memory, nonsense in a
descriptor and policy names that shadow the harness's own are refused before any work, with one
line naming the file, the field and the limit; the memory estimate stays above what is used."""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

import pytest
import yaml
from test_failure_modes import one_line_error, pmoss

from pmoss.collect.driver import CHUNK, pending
from pmoss.collect.plan import Pool
from pmoss.contracts.errors import ContractError
from pmoss.contracts.machine import load_machine
from pmoss.contracts.policies import generate
from pmoss.sim import load_sim_machine, simulate_batch
from pmoss.sim.pool import MACHINE_DIR

POOL = "name: t\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\nn_slices: 8\n"
EVAL = "machines: [intel-skx-4s]\nworkloads: [ycsb-c]\nn_records: 100000\nruns: 1\nbaselines: [os-default]\n"


def _with(text: str, key: str, value: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith(f"{key}:")) + f"{key}: {value}\n"


# ---- item 7: descriptors -------------------------------------------------------------------------
def _descriptor(tmp_path: Path, change) -> Path:
    data = yaml.safe_load((MACHINE_DIR / "intel-skx-4s.yaml").read_text())
    change(data)
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data))
    return tmp_path / "m.yaml"


@pytest.mark.parametrize(("field", "change"), [
    ("local_latency_ns", lambda d: d.update(local_latency_ns=True)),
    ("caches.l1d_kib", lambda d: d["caches"].update(l1d_kib=True)),
    ("caches.l2_kib", lambda d: d["caches"].update(l2_kib=1e9)),
    ("caches.l3_mib", lambda d: d["caches"].update(l3_mib=float("inf"))),
    ("freq_ghz", lambda d: d.update(freq_ghz="2.1")),
    ("sockets", lambda d: d.update(sockets=True)),
    ("cpus.0.node", lambda d: d["cpus"][0].update(node=0.0)),
    ("cpus.0.cpu", lambda d: d["cpus"][0].update(cpu=1_000_000_000)),
    ("mem_bandwidth_gbps.0", lambda d: d["mem_bandwidth_gbps"].__setitem__(0, True)),
    ("distance.0.1", lambda d: d["distance"][0].__setitem__(1, 1e12)),
])  # fmt: skip
def test_descriptor_numbers_are_typed_and_bounded(tmp_path, field, change):
    """No bool for a number (YAML `true` read as 1.0 before), no string, no size past physics
    (`l2_kib: 1e9` overflowed numpy; `cpu: 1000000000` sized a 7.45 GiB array): the field is named."""
    with pytest.raises(ContractError, match=rf"m\.yaml: field '{field}'"):
        load_machine(_descriptor(tmp_path, change))


def test_descriptor_cpu_id_bound_is_linux_largest(tmp_path):
    from pmoss.contracts.limits import MAX_CPUS

    last = len(load_sim_machine("intel-skx-4s").cpus) - 1
    load_machine(_descriptor(tmp_path, lambda d: d["cpus"][-1].update(cpu=MAX_CPUS - 1)))  # the largest id still loads
    with pytest.raises(ContractError, match=rf"field 'cpus.{last}.cpu': Input should be less than {MAX_CPUS}"):
        load_machine(_descriptor(tmp_path, lambda d: d["cpus"][-1].update(cpu=MAX_CPUS)))


# ---- #40 item 5: pool and evaluation-set numbers are strict as a descriptor's ----------------------
@pytest.mark.parametrize(("key", "value", "field"), [
    ("runs_per_shared_kind", "true", "runs_per_shared_kind"),  # read as 1 before
    ("episodes_per_cell", "true", "episodes_per_cell"),
    ("search_runs", "yes", "search_runs"),  # YAML 1.1: yes is true
    ("search_budgets", "[250, true]", "search_budgets.1"),
    ("n_slices", "'8'", "n_slices"),  # a string is no number either
    ("n_records", "100000.0", "n_records"),  # nor is a float a count
    ("window_s", "true", "window_s"),
    ("window_s", ".inf", "window_s"),
    ("seed", "false", "seed"),
    ("mix", "{sn-grouped: true}", "mix.sn-grouped"),
])  # fmt: skip
def test_pool_numbers_are_strict(tmp_path, key, value, field):
    from pmoss.collect.plan import load_pool

    (tmp_path / "pool.yaml").write_text(_with(POOL, key, value))
    with pytest.raises(ContractError, match=rf"pool\.yaml: field '{re.escape(field)}': Input should be a (valid|finite) (integer|number)"):
        load_pool(tmp_path / "pool.yaml")


@pytest.mark.parametrize(("key", "value", "field", "kind"), [
    ("runs", "true", "runs", "valid integer"),  # read as 1 before
    ("n_slices", "true", "n_slices", "valid integer"),
    ("n_records", "'100000'", "n_records", "valid integer"),
    ("window_s", "true", "window_s", "valid number"),
    ("slices_per_worker", "true", "slices_per_worker", "valid number"),
    ("target_factor", ".nan", "target_factor", "finite number"),
    ("seed_base", "true", "seed_base", "valid integer"),
    ("oracle", "1", "oracle", "valid boolean"),  # and a 1 is no flag
])  # fmt: skip
def test_eval_numbers_are_strict(tmp_path, key, value, field, kind):
    from pmoss.contracts.io import load_model_with_flags
    from pmoss.evaluate import EvalConfig

    (tmp_path / "eval.yaml").write_text(_with(EVAL, key, value))
    with pytest.raises(ContractError, match=rf"eval\.yaml: field '{field}': Input should be a {kind}"):
        load_model_with_flags(EvalConfig, tmp_path / "eval.yaml", {})


def test_strict_numbers_still_take_ints_for_floats_and_command_line_values(tmp_path):
    from pmoss.collect.plan import load_pool
    from pmoss.contracts.io import load_model_with_flags
    from pmoss.evaluate import EvalConfig

    (tmp_path / "pool.yaml").write_text(_with(_with(POOL, "window_s", "5"), "mix", "{sn-grouped: 1, sn-spread: 0}"))
    assert load_pool(tmp_path / "pool.yaml", episodes_per_cell=3).window_s == 5.0
    (tmp_path / "eval.yaml").write_text(_with(EVAL, "window_s", "2"))
    cfg = load_model_with_flags(EvalConfig, tmp_path / "eval.yaml", {"n_slices": 16, "slices_per_worker": 2.0, "oracle": True})
    assert (cfg.window_s, cfg.n_slices, cfg.oracle) == (2.0, 16, True)


def test_a_true_count_is_one_line_from_the_command(tmp_path):
    (tmp_path / "pool.yaml").write_text(_with(POOL, "runs_per_shared_kind", "true"))
    one_line_error(pmoss("collect", str(tmp_path / "pool.yaml"), "-o", str(tmp_path / "raw")),
                   "pool.yaml: field 'runs_per_shared_kind': Input should be a valid integer")  # fmt: skip
    assert not (tmp_path / "raw").exists()


# ---- items 2 and 5: sizes -------------------------------------------------------------------------
@pytest.mark.parametrize(("key", "value", "needles"), [
    ("n_records", str(10**21), ["field 'n_records'", "above the limit 1099511627776"]),  # was an OverflowError traceback
    ("n_slices", "1000000000", ["field 'n_slices'", "above the limit 1048576", "slice cap"]),
    ("episodes_per_cell", "1000000000", ["field 'episodes_per_cell'", "1000000000 planned episodes", "of memory, this machine has", "available"]),
])  # fmt: skip
def test_pool_sizes_refused_before_work(tmp_path, key, value, needles):
    (tmp_path / "pool.yaml").write_text(_with(POOL, key, value))
    one_line_error(pmoss("collect", str(tmp_path / "pool.yaml"), "-o", str(tmp_path / "raw")), "pool.yaml", *needles)
    assert not (tmp_path / "raw").exists()


def test_pool_memory_blames_the_flag(tmp_path):
    (tmp_path / "pool.yaml").write_text(POOL)
    line = one_line_error(pmoss("collect", str(tmp_path / "pool.yaml"), "--n-slices", "200000", "-o", str(tmp_path / "raw")),
                          "--n-slices 200000", "slices simulated together would need about", "lower n_slices")  # fmt: skip
    assert "pool.yaml" not in line and not (tmp_path / "raw").exists()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    from test_serve import _bundle

    return _bundle(tmp_path_factory.mktemp("model"))


@pytest.mark.parametrize(("key", "value", "needles"), [
    ("n_slices", "1000000000", ["field 'n_slices'", "above the limit 1048576"]),
    ("runs", "1000000000", ["field 'runs'", "1000000000 runs", "of memory, this machine has", "lower runs"]),  # hung before
    ("n_records", str(10**21), ["field 'n_records'", "above the limit"]),
])  # fmt: skip
def test_eval_sizes_refused_before_work(tmp_path, bundle, key, value, needles):
    (tmp_path / "eval.yaml").write_text(_with(EVAL, key, value))
    r = pmoss("evaluate", str(tmp_path / "eval.yaml"), "--model", f"dt={bundle}", "-o", str(tmp_path / "out"))
    one_line_error(r, "eval.yaml", *needles)
    assert not (tmp_path / "out").exists()


def test_memory_check_is_against_this_machine(monkeypatch):
    """The same pool fits or not by what this machine has available: the bound is the machine's."""
    from pmoss.collect.plan import check_memory
    from pmoss.contracts.limits import PLAN_BYTES_PER_EPISODE, PLAN_BYTES_PER_SLICE, LimitError, available_memory, sim_bytes

    pool = Pool(name="t", machines=["intel-skx-4s"], workloads=["ycsb-c"], episodes_per_cell=100_000, n_slices=256)
    need = 100_000 * (PLAN_BYTES_PER_EPISODE + 256 * PLAN_BYTES_PER_SLICE) + sim_bytes(CHUNK, 256, load_sim_machine("intel-skx-4s").n_workers)  # the plan, and one chunk running
    monkeypatch.setattr("pmoss.contracts.limits.available_memory", lambda: need)
    check_memory(pool, lambda f: f, CHUNK)
    monkeypatch.setattr("pmoss.contracts.limits.available_memory", lambda: need - 1)
    with pytest.raises(LimitError, match=r"episodes_per_cell: .* would need about .* this machine has"):
        check_memory(pool, lambda f: f, CHUNK)
    assert available_memory.__module__ == "pmoss.contracts.limits"


def test_memory_estimates_stay_above_measured_peaks():
    """The per-slice and per-episode constants of contracts/limits.py against tracemalloc's peak:
    a simulator or plan that grows heavier must raise the constants, or the check lets through
    work that does not fit. Unusual sizes, so no cache of an earlier test serves the call."""
    from pmoss.contracts.limits import PLAN_BYTES_PER_EPISODE, PLAN_BYTES_PER_SLICE, sim_bytes

    m = load_sim_machine("ibm-power8")  # the heaviest per slice (its L4): 5x the peak of the 384-thread amd-genoa-nps4
    schedules = [generate("sn-random", m, 200, seed=i) for i in range(8)]
    tracemalloc.start()
    simulate_batch(m, "ycsb-e", "dense", schedules, seeds=list(range(8)), n_records=123_457)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < sim_bytes(8, 200, m.n_workers), (peak, sim_bytes(8, 200, m.n_workers))
    pool = Pool(name="t", machines=["ibm-power8"], workloads=["ycsb-e"], episodes_per_cell=300, n_slices=200, n_records=123_459)
    tracemalloc.start()
    todo = pending(pool, Path("/nonexistent"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(todo) == 300 and peak < 300 * (PLAN_BYTES_PER_EPISODE + 200 * PLAN_BYTES_PER_SLICE), peak



def test_memory_estimate_grows_with_the_machine():
    """Per episode the simulator's state grows with the machine: [B, W] per-thread and [B, G]
    per-group arrays (linear in the machine since issue #39's oracle work; it was the square, 2-4 MB
    an episode on the 1,024-worker large-2s-16n). The estimate's growth from 4 to 36 episodes must
    cover the measured growth on that machine, and its per-worker term the measured difference to
    a 168-worker one at the same slices (each machine's first call, its tables, excluded)."""
    from pmoss.contracts.limits import sim_bytes

    grown, priced = {}, {}
    for ref in ("intel-skx-4s", str(Path(__file__).resolve().parent.parent / "datasets/machines/large-2s-16n.yaml")):
        m = load_sim_machine(ref)
        simulate_batch(m, "ycsb-e", "dense", [generate("sn-random", m, 64, seed=0)], seeds=[0], n_records=123_461)
        peaks = {}
        for eps in (4, 36):
            schedules = [generate("sn-random", m, 64, seed=i) for i in range(eps)]
            tracemalloc.start()
            simulate_batch(m, "ycsb-e", "dense", schedules, seeds=list(range(eps)), n_records=123_461 + eps)
            peaks[eps] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        grown[m.n_workers], priced[m.n_workers] = peaks[36] - peaks[4], sim_bytes(36, 64, m.n_workers) - sim_bytes(4, 64, m.n_workers)
        assert grown[m.n_workers] < priced[m.n_workers], (m.name, grown, priced)
    assert grown[1024] - grown[168] > 0, "the state no longer grows with the machine: drop the per-worker term"
    assert grown[1024] - grown[168] < priced[1024] - priced[168], (grown, priced)


# ---- item 8: policy names -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["os-default", "sn-hot", "oracle", "mask-only", "mask-only-s2"])
def test_policy_names_must_not_shadow_the_harness(tmp_path, bundle, name):
    """`--model os-default=DIR` ran, and one of the two entries of that name survived in cells.json."""
    (tmp_path / "eval.yaml").write_text(EVAL)
    r = pmoss("evaluate", str(tmp_path / "eval.yaml"), "--model", f"{name}={bundle}", "-o", str(tmp_path / "out"))
    one_line_error(r, f"--model {name}=", f"'{name}' is the name of one of the harness's own schedules")
    assert not (tmp_path / "out").exists()


def test_policy_names_must_be_unique(tmp_path, bundle):
    (tmp_path / "eval.yaml").write_text(EVAL)
    r = pmoss("evaluate", str(tmp_path / "eval.yaml"), "--model", f"dt={bundle}", "--model", f"dt={bundle}/", "-o", str(tmp_path / "out"))
    one_line_error(r, f"--model dt={bundle}/", "given twice")
    assert not (tmp_path / "out").exists()
