"""`pmoss dataset build`: vectorised tokenisation, named hold-out groups, stable splits, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pmoss.collect.driver import collect
from pmoss.collect.plan import load_pool
from pmoss.contracts.checksum import stamp_table
from pmoss.contracts.errors import ContractError
from pmoss.contracts.schedule import Schedule
from pmoss.contracts.snapshot import read_raw
from pmoss.data.dataset import build, load_tokens, validate_raw
from pmoss.data.tokens import HOLDOUT, Holdout, encode_snapshot, split_of, tokenise_rows

BIN = Path(sys.executable).parent
POOL = """name: t
machines: [intel-skx-4s, amd-milan-nps4, nvidia-grace]
workloads: [ycsb-c, scan]
shared_kinds: [sn-numa]
episodes_per_cell: {epc}
n_slices: 16
"""


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """A small raw tree over three vendors (Intel: off-core counters; AMD, ARM: null counters)."""
    tmp = tmp_path_factory.mktemp("raw")
    (tmp / "pool.yaml").write_text(POOL.format(epc=12))
    collect(load_pool(tmp / "pool.yaml"), tmp / "raw", progress=False)
    return tmp / "raw"


def test_vectorised_tokens_equal_the_per_episode_encoder(raw, tmp_path):
    """tokenise_table must give what encode_snapshot (the inference path) gives, episode by episode."""
    build([raw], tmp_path / "ds", 0.1, 0.1)
    tokens, _, machines = load_tokens(tmp_path / "ds")
    by_id = {e: i for i, e in enumerate(tokens["episode_id"].to_pylist())}
    rows = read_raw(raw).to_pylist()  # sn-numa included: its slices have groups (width node)
    assert len(rows) == tokens.num_rows == 3 * 2 * 13
    for r in rows:
        t = tokens.slice(by_id[r["episode_id"]], 1).to_pylist()[0]
        feats, mask, meta = encode_snapshot(r, machines[r["machine"]])
        np.testing.assert_array_equal(np.asarray(t["features"], np.float32), feats.reshape(-1))
        np.testing.assert_array_equal(t["feature_mask"], mask)
        np.testing.assert_allclose(np.asarray(t["meta"], np.float32), meta, rtol=1e-6)
        assert t["actions"] == Schedule(machine=r["machine"], n_slices=r["n_slices"], kind=r["schedule_kind"], node=r["node"], core=r["core"],
                                        width=r["width"]).group_index(machines[r["machine"]]).tolist()  # fmt: skip
        assert t["return"] == pytest.approx(sum(r["queries"]) / r["window_s"])
        assert t["split"] == split_of(r["episode_id"])


def test_tokenise_rows_is_the_same_function(raw):
    from pmoss.sim import load_sim_machine

    rows = read_raw(raw).to_pylist()[:10]
    machines = {m: load_sim_machine(m) for m in {r["machine"] for r in rows}}
    t = tokenise_rows(rows, machines, 0.1, 0.1)
    assert t.num_rows == len(rows)


def test_holdout_groups_never_reach_train_val_test_or_stats(raw, tmp_path):
    build([raw], tmp_path / "all", 0.1, 0.1)
    build([raw], tmp_path / "loo", 0.1, 0.1, holdout=Holdout(machines=("nvidia-grace",), workloads=("scan",)))
    t, stats, _ = load_tokens(tmp_path / "loo")
    held = pc.or_(pc.equal(t["machine"], "nvidia-grace"), pc.equal(t["workload"], "scan"))
    assert set(t.filter(held)["split"].to_pylist()) == {HOLDOUT}
    assert HOLDOUT not in t.filter(pc.invert(held))["split"].to_pylist()
    assert all("nvidia-grace" not in k and "|scan" not in k for k in stats.best_return)
    # the rest keep exactly the split they have without a hold-out (hash of the id)
    full, full_stats, _ = load_tokens(tmp_path / "all")
    kept = dict(zip(full["episode_id"].to_pylist(), full["split"].to_pylist(), strict=True))
    assert all(kept[e] == s for e, s in zip(t["episode_id"].to_pylist(), t["split"].to_pylist(), strict=True) if s != HOLDOUT)
    assert stats.feature_mean != full_stats.feature_mean  # statistics were recomputed without the group
    manifest = json.loads((tmp_path / "loo" / "dataset.json").read_text())
    assert manifest["holdout"] == {"machines": ["nvidia-grace"], "workloads": ["scan"]}
    assert manifest["episodes"][HOLDOUT] == 13 * 2 + 13 * 2  # 12 one-core episodes + 1 sn-numa per cell


def test_holdout_of_an_absent_group_is_an_error(raw, tmp_path):
    with pytest.raises(ContractError, match="--holdout-machine 'ibm-power8': no episode of that machine"):
        build([raw], tmp_path / "ds", 0.1, 0.1, holdout=Holdout(machines=("ibm-power8",)))
    assert not (tmp_path / "ds").exists()


def test_splits_are_stable_when_the_data_grows(raw, tmp_path):
    grown = tmp_path / "raw"
    shutil.copytree(raw, grown)
    (tmp_path / "pool.yaml").write_text(POOL.format(epc=30))
    assert collect(load_pool(tmp_path / "pool.yaml"), grown, progress=False) == 3 * 2 * 18
    build([raw], tmp_path / "small", 0.1, 0.1, holdout=Holdout(workloads=("scan",)))
    build([grown], tmp_path / "big", 0.1, 0.1, holdout=Holdout(workloads=("scan",)))
    split = lambda p: dict(zip(*(load_tokens(p)[0][c].to_pylist() for c in ("episode_id", "split")), strict=True))  # noqa: E731
    small, big = split(tmp_path / "small"), split(tmp_path / "big")
    assert len(big) == 3 * 2 * 31 and all(big[e] == s for e, s in small.items())


def test_cli_build_with_holdout(raw, tmp_path):
    r = subprocess.run([str(BIN / "pmoss"), "dataset", "build", str(raw), "-o", str(tmp_path / "ds"), "--holdout-machine", "amd-milan-nps4"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    t = pq.read_table(tmp_path / "ds" / "tokens.parquet", columns=["machine", "split"])
    assert set(t.filter(pc.equal(t["machine"], "amd-milan-nps4"))["split"].to_pylist()) == {HOLDOUT}


def _rewrite(raw: Path, dst: Path, fn) -> Path:
    """Copy the raw tree, applying `fn` to the first file's table (re-stamped: a valid checksum of bad values)."""
    shutil.copytree(raw, dst)
    f = sorted(dst.rglob("part-*.parquet"))[0]
    t = pq.read_table(f)
    pq.write_table(stamp_table(fn(t)), f)
    return f


def test_bad_values_are_found_and_named(raw, tmp_path):
    def negate(t: pa.Table) -> pa.Table:
        col = t["instructions"].combine_chunks()
        bad = pa.ListArray.from_arrays(col.offsets, pc.negate(col.flatten()))
        return t.set_column(t.schema.get_field_index("instructions"), t.schema.field("instructions"), bad)

    f = _rewrite(raw, tmp_path / "bad", negate)
    n, problems = validate_raw(tmp_path / "bad")
    assert n == read_raw(raw).num_rows and problems
    assert problems[0].startswith(str(f)) and "field 'instructions' has a negative, NaN or null count" in problems[0]
    with pytest.raises(ContractError, match="field 'instructions' has a negative"):
        build([tmp_path / "bad"], tmp_path / "ds", 0.1, 0.1)
    assert not (tmp_path / "ds").exists() and not list(tmp_path.glob(".ds.*"))


def test_newer_schema_is_named_and_leaves_the_old_dataset_alone(raw, tmp_path):
    build([raw], tmp_path / "ds", 0.1, 0.1)
    before = (tmp_path / "ds" / "tokens.parquet").read_bytes()
    newer = lambda t: t.replace_schema_metadata({**t.schema.metadata, b"pmoss.schema_version": b"2"})  # noqa: E731
    f = _rewrite(raw, tmp_path / "new", newer)
    with pytest.raises(ContractError, match=f"{f.name}: field 'schema_version': 2 is newer"):
        build([tmp_path / "new"], tmp_path / "ds", 0.1, 0.1)
    assert (tmp_path / "ds" / "tokens.parquet").read_bytes() == before
    assert not list(tmp_path.glob(".ds.*"))


def test_duplicate_episode_across_files_is_an_error(raw, tmp_path):
    shutil.copytree(raw, tmp_path / "dup")
    f = sorted((tmp_path / "dup").rglob("part-*.parquet"))[0]
    shutil.copy(f, f.with_name("part-copy.parquet"))
    with pytest.raises(ContractError, match="duplicates one in"):
        build([tmp_path / "dup"], tmp_path / "ds", 0.1, 0.1)
