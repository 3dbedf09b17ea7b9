"""`pmoss evaluate` on machines given as descriptor files or directories, including one larger than
any in training (16 nodes x 64 workers), and N scaled with the machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from pmoss.contracts.errors import ContractError
from pmoss.contracts.schedule import slices_for
from pmoss.contracts.snapshot import SLICE_FEATURES
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.evaluate import EvalConfig, evaluate_cells
from pmoss.learn.bundle import Bundle, load_bundle, save_bundle
from pmoss.learn.model import DecisionTransformer, DTConfig
from pmoss.sim import load_sim_machine
from pmoss.sim.pool import descriptor_path

LARGE = Path(__file__).resolve().parents[1] / "datasets" / "machines" / "large-2s-16n.yaml"
POOL_MAX_WORKERS = max(load_sim_machine(m).n_workers for m in ("amd-milan-nps1", "amd-milan-nps4", "intel-skx-4s", "intel-snb-4s", "nvidia-grace"))


def _bundle(tmp: Path) -> Bundle:
    """A tiny model trained on nothing: what matters here is that it runs on any machine."""
    torch.manual_seed(0)
    f, m = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(n_layer=1, n_head=2, n_embd=32, dropout=0.0, n_slices=32, n_features=f, n_meta=m)
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1.0] * f, meta_mean=[0.0] * m, meta_std=[1.0] * m,
                  best_return={"intel-skx-4s|ycsb-c": 1e8}, n_slices=32)  # fmt: skip
    save_bundle(Bundle(cfg, stats, DecisionTransformer(cfg).state_dict(), {"algo": "dt"}), tmp / "m" / "model.pt")
    return load_bundle(tmp / "m")


@pytest.mark.slow
@pytest.mark.ci
def test_a_model_schedules_a_machine_larger_than_its_pool(tmp_path):
    big = load_sim_machine(str(LARGE))
    assert big.numa_nodes == 16 and min(len(w) for w in big.workers_by_node) == 64 and big.n_workers > 2 * POOL_MAX_WORKERS
    cfg = EvalConfig(machines=[str(LARGE)], workloads=["ycsb-c"], n_slices=96, runs=1, baselines=["sn-numa", "sn-hot"])
    keep: dict = {}
    cells = evaluate_cells(cfg, {"dt": _bundle(tmp_path)}, progress=False, keep=keep)
    assert set(cells) == {"large-2s-16n|ycsb-c"} and cells["large-2s-16n|ycsb-c"]["dt"] > 0
    sched = keep["large-2s-16n|ycsb-c"]["dt"].validate_for(big)
    assert sched.n_slices == 96 and max(sched.node) >= 8  # uses nodes no pool machine has


def test_a_directory_of_descriptors_and_slices_per_worker(tmp_path):
    d = tmp_path / "machines"
    d.mkdir()
    for name in ("intel-snb-4s", "nvidia-grace"):
        spec = yaml.safe_load(descriptor_path(name).read_text())
        spec["name"] = f"my-{name}"
        (d / f"my-{name}.yaml").write_text(yaml.safe_dump(spec))
    cfg = EvalConfig(machines=[str(d)], workloads=["scan"], slices_per_worker=0.5, runs=1, baselines=["sn-numa"])
    keep: dict = {}
    cells = evaluate_cells(cfg, {"dt": _bundle(tmp_path)}, progress=False, keep=keep)
    assert set(cells) == {"my-intel-snb-4s|scan", "my-nvidia-grace|scan"}
    for c, per in keep.items():
        m = load_sim_machine(c.split("|")[0])
        assert per["dt"].n_slices == slices_for(m, 0.5)


def test_the_evaluation_sets_the_rollouts_context(tmp_path):
    """`context` (evaluate --context) reaches every policy's rollout: at 4x the model's training
    length the whole episode and the default window agree on the first 32 slices; under 2 is refused."""
    from pydantic import ValidationError

    bundle = _bundle(tmp_path)
    keep: dict = {}
    for name, context in (("window", None), ("whole", 128)):
        cfg = EvalConfig(machines=["intel-skx-4s"], workloads=["ycsb-c"], n_slices=128, runs=1, baselines=["sn-numa"], context=context)
        evaluate_cells(cfg, {name: bundle}, progress=False, keep=keep)
    per = keep["intel-skx-4s|ycsb-c"]
    assert per["window"].core[:32] == per["whole"].core[:32] and per["window"].n_slices == 128
    assert per["whole"].provenance["context"] == 128 and "context" not in per["window"].provenance
    with pytest.raises(ValidationError, match="context"):
        EvalConfig(machines=["intel-skx-4s"], workloads=["ycsb-c"], context=1)


def test_bad_machine_refs_are_named_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="nope.yaml"):  # the config itself refuses it (pydantic's ValidationError)
        EvalConfig(machines=["amd-milan-nps4", str(tmp_path / "nope.yaml")], workloads=["scan"], n_slices=16, runs=1)
    cfg = EvalConfig(machines=["amd-milan-nps4"], workloads=["scan"], n_slices=16, runs=1)
    with pytest.raises(ContractError, match="nope.yaml"):  # and the harness, for a config built without validation
        evaluate_cells(cfg.model_copy(update={"machines": ["amd-milan-nps4", str(tmp_path / "nope.yaml")]}), {}, progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ContractError, match="no descriptor"):
        evaluate_cells(cfg.model_copy(update={"machines": [str(tmp_path / "empty")]}), {}, progress=False)
    clash = yaml.safe_load(descriptor_path("intel-snb-4s").read_text())
    clash["freq_ghz"] = 9.9
    (tmp_path / "clash.yaml").write_text(yaml.safe_dump(clash))
    with pytest.raises(ContractError, match="is a pool machine"):
        evaluate_cells(cfg.model_copy(update={"machines": [str(tmp_path / "clash.yaml")]}), {}, progress=False)


def test_the_oracle_reference_is_the_best_schedule_known_for_the_cell():
    """vs_oracle never reads above vs_best: where the search's schedule measured below a baseline
    (a kind outside its space, or noise), the baseline is the reference and the detail says so."""
    from pmoss.evaluate import summarise

    cells = {"m|a": {"os-default": 120.0, "sn-mixed": 100.0, "oracle": 110.0, "dt": 105.0},
             "m|b": {"os-default": 90.0, "sn-mixed": 100.0, "oracle": 130.0, "dt": 117.0}}
    head, detail = summarise(cells, ["dt"], ["os-default", "sn-mixed"])
    assert detail["cells"]["m|a"]["oracle_from"] == "os-default" and detail["cells"]["m|b"]["oracle_from"] == "search"
    assert detail["cells"]["m|a"]["dt_vs_oracle"] == 105.0 / 120.0 and detail["cells"]["m|b"]["dt_vs_oracle"] == 0.9
    assert all(detail["cells"][c]["dt_vs_oracle"] <= detail["cells"][c]["dt_vs_best_baseline"] for c in cells)


def test_the_oracle_is_never_below_a_baseline_of_its_cell():
    """The oracle's finalists are the search's schedule and the cell's own baselines: where an
    any-worker kind beats every group schedule (Milan NPS4 under 50 % inserts: the hottest slice
    carries more load than one node's cores serve) the oracle is that baseline, measured as it is;
    where schedules tie at the router bound (Grace) the measurement decides among the tied ones.
    Without the baselines among its finalists the first cell reads about 0.6x the best baseline."""
    from pmoss.contracts.schedule import ANY_WORKER_KINDS
    from pmoss.evaluate import cell_baselines, cell_snapshot, summarise
    from pmoss.sim import throughput

    cfg = EvalConfig(machines=["amd-milan-nps4", "nvidia-grace"], workloads=["rsi-20-30-50", "ycsb-c"], n_slices=32, runs=2, oracle=True)
    keep: dict = {}
    cells = evaluate_cells(cfg, {}, progress=False, keep=keep)
    head, detail = summarise(cells, [], list(cfg.baselines), keep)
    assert head["oracle_cells_ge_best"] == len(cells) == 4
    assert keep["amd-milan-nps4|rsi-20-30-50"]["oracle"].kind in ANY_WORKER_KINDS
    assert detail["cells"]["amd-milan-nps4|rsi-20-30-50"]["oracle_from"] in ANY_WORKER_KINDS
    for cell, per in keep.items():  # on the noise-free model too: at or above every baseline of the cell
        m, w = cell.split("|")
        machine = load_sim_machine(m)
        base = cell_baselines(machine, cell_snapshot(machine, w, cfg), cfg)
        x = throughput(machine, w, cfg.dataset, [per["oracle"], *base.values()], n_records=cfg.n_records, window_s=cfg.window_s)
        assert x[0] >= x[1:].max() * (1 - 1e-9), cell


def test_served_picks_are_counted_per_policy():
    """own_picks counts the cells where a policy served its own proposal; a critic's heuristic or
    the running schedule is not the policy's, and the detail names each cell's pick."""
    from conftest import small_machine

    from pmoss.contracts.policies import generate
    from pmoss.evaluate import pick_of, summarise

    m = small_machine()
    base = generate("sn-numa", m, 8)
    served = {"m|a": {"dt": base.model_copy(update={"provenance": {"pick": "sample3"}}), "plain": base},
              "m|b": {"dt": base.model_copy(update={"provenance": {"pick": "sn-hot"}}), "plain": base},
              "m|c": {"dt": base.model_copy(update={"provenance": {"pick": "running"}}), "plain": base}}  # fmt: skip
    assert [pick_of(served[c]["dt"]) for c in ("m|a", "m|b", "m|c")] == ["own", "heuristic", "running"]
    cells = {c: {"os-default": 100.0, "dt": 101.0, "plain": 99.0} for c in served}
    head, detail = summarise(cells, ["dt", "plain"], ["os-default"], served)
    assert head["dt"]["own_picks"] == 1 and head["plain"]["own_picks"] == 3
    assert detail["cells"]["m|b"]["dt_pick"] == "heuristic"


def test_mask_only_is_the_median_over_its_initialisations(tmp_path):
    """One untrained network is one draw: mask-only is each cell's median over MASK_INITS of them,
    and the headline keeps their range and seed 0's own figure (the single control of before)."""
    from pmoss.evaluate import MASK_CONTROL, MASK_INITS, fold_mask_inits, mask_inits_of, summarise

    controls = mask_inits_of(_bundle(tmp_path), MASK_INITS)
    assert list(controls) == [f"mask-only-s{s}" for s in range(MASK_INITS)]
    first = [v for v in controls.values()][:2]
    assert any(not torch.equal(first[0].state_dict[k], first[1].state_dict[k]) for k in first[0].state_dict)  # different draws
    cells = {"m|a": {"os-default": 100.0, "dt": 110.0, **{f"mask-only-s{s}": q for s, q in enumerate([90.0, 130.0, 70.0, 100.0, 120.0])}},
             "m|b": {"os-default": 100.0, "dt": 90.0, **{f"mask-only-s{s}": q for s, q in enumerate([80.0, 85.0, 95.0, 100.0, 105.0])}}}  # fmt: skip
    served = {c: {n: None for n in tp if n.startswith("mask-only") or n == "dt"} for c, tp in cells.items()}
    inits = fold_mask_inits(cells, served)
    assert cells["m|a"][MASK_CONTROL] == 100.0 and cells["m|b"][MASK_CONTROL] == 95.0
    assert not any(n.startswith("mask-only-s") for tp in cells.values() for n in tp)
    assert set(served["m|a"]) == {"dt"}  # the median is no one schedule
    head, detail = summarise(cells, ["dt", MASK_CONTROL], ["os-default"], None, inits)
    assert head[MASK_CONTROL]["vs_best"] == round((1.0 * 0.95) ** 0.5, 4) and head[MASK_CONTROL]["inits"] == MASK_INITS
    assert head[MASK_CONTROL]["vs_best_s0"] == round((0.9 * 0.8) ** 0.5, 4)
    assert head[MASK_CONTROL]["vs_best_min_init"] == round((0.7 * 0.95) ** 0.5, 4) and head[MASK_CONTROL]["vs_best_max_init"] == round((1.2 * 1.05) ** 0.5, 4)
    assert detail["cells"]["m|a"]["mask-only-s1_vs_best_baseline"] == 1.3 and "inits" not in head["dt"]
