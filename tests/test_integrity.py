"""Content checksums: every single-byte change to a raw snapshot, a tokenised dataset or a model
bundle is caught with one line naming the file, or provably harmless (the content reads back equal)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pmoss.collect.driver import collect
from pmoss.collect.plan import load_pool
from pmoss.contracts.errors import ContractError
from pmoss.contracts.snapshot import SLICE_FEATURES, raw_files, read_raw_file
from pmoss.data.dataset import build, load_tokens
from pmoss.data.tokens import META_NAMES, Stats
from pmoss.learn.bundle import Bundle, load_bundle, save_bundle
from pmoss.learn.model import DecisionTransformer, DTConfig

BIN = Path(sys.executable).parent
POOL = "name: t\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nepisodes_per_cell: 2\nn_slices: 8\n"
# Offsets per file: `n` spread evenly, plus every byte of the last `tail` (Parquet footer, zip directory).


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("integrity")
    (tmp / "pool.yaml").write_text(POOL)
    collect(load_pool(tmp / "pool.yaml"), tmp / "raw", progress=False)
    build([tmp / "raw"], tmp / "ds", 0.0, 0.0)
    torch.manual_seed(0)
    f, m = len(SLICE_FEATURES), len(META_NAMES)
    cfg = DTConfig(n_layer=1, n_head=2, n_embd=16, group_hidden=8, dropout=0.0, n_slices=8, n_features=f, n_meta=m)
    stats = Stats(feature_mean=[0.0] * f, feature_std=[1.0] * f, meta_mean=[0.0] * m, meta_std=[1.0] * m,
                  best_return={"intel-skx-4s|ycsb-c": 1000.0}, n_slices=8)  # fmt: skip
    save_bundle(Bundle(cfg, stats, DecisionTransformer(cfg).state_dict(), {"algo": "dt"}), tmp / "model" / "model.pt")
    return tmp


def _offsets(size: int, n: int, tail: int) -> list[int]:
    step = max(1, size // n)
    return sorted(set(range(0, size, step)) | set(range(max(0, size - tail), size)))


def _flip_all(path: Path, load, same, n: int = 300, tail: int = 512) -> tuple[int, int]:
    """Flip one byte at a time (alternating one low bit and all eight bits); returns (caught, harmless)."""
    original = path.read_bytes()
    caught = harmless = 0
    try:
        for i, off in enumerate(_offsets(len(original), n, tail)):
            bad = bytearray(original)
            bad[off] ^= 0x01 if i % 2 else 0xFF
            path.write_bytes(bytes(bad))
            try:
                got = load()
            except ContractError as e:
                msg = str(e)
                assert "\n" not in msg and str(path.name) in msg and len(msg) < len(str(path)) + 200, msg
                caught += 1
                continue
            assert same(got), f"{path}: byte {off} changed the content and was not caught"
            harmless += 1
    finally:
        path.write_bytes(original)
    return caught, harmless


def test_raw_snapshot_byte_flips(artefacts):
    f = raw_files(artefacts / "raw")[0]
    want = read_raw_file(f)
    caught, harmless = _flip_all(f, lambda: read_raw_file(f), want.equals)
    assert caught > harmless  # most bytes are content; the rest (footer statistics, padding) read back equal


def test_dataset_byte_flips(artefacts):
    ds = artefacts / "ds"
    table, stats, machines = load_tokens(ds)

    def same(got) -> bool:
        return got[0].equals(table) and got[1] == stats and got[2] == machines

    for name in ("tokens.parquet", "stats.json", "dataset.json", "machines/intel-skx-4s.yaml"):
        caught, harmless = _flip_all(ds / name, lambda: load_tokens(ds), same, n=50, tail=64)
        assert caught > 0, name


def test_model_bundle_byte_flips(artefacts):
    path = artefacts / "model" / "model.pt"
    want = load_bundle(path)

    def same(b: Bundle) -> bool:
        return (b.config == want.config and b.stats == want.stats and b.info == want.info and b.state_dict.keys() == want.state_dict.keys()
                and all(torch.equal(b.state_dict[k], want.state_dict[k]) for k in want.state_dict))  # fmt: skip

    caught, harmless = _flip_all(path, lambda: load_bundle(path), same)
    assert caught > 0.5 * (caught + harmless)


def test_validate_names_the_corrupt_file(artefacts, tmp_path):
    """The issue's case: one byte set to 0x7f inside a raw file; `pmoss dataset validate` exits 1 in one line."""
    raw = tmp_path / "raw"
    shutil.copytree(artefacts / "raw", raw)
    f = raw_files(raw)[0]
    data = bytearray(f.read_bytes())
    data[len(data) // 4] = 0x7F if data[len(data) // 4] != 0x7F else 0x00
    f.write_bytes(bytes(data))
    r = subprocess.run([BIN / "pmoss", "dataset", "validate", str(raw)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and f.name in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_unstamped_files_are_refused(artefacts, tmp_path):
    """A file without a checksum (an older writer, or a flipped key name) is refused, never trusted."""
    import pyarrow.parquet as pq

    f = raw_files(artefacts / "raw")[0]
    t = pq.read_table(f)
    meta = {k: v for k, v in t.schema.metadata.items() if k != b"pmoss.content_sha256"}
    pq.write_table(t.replace_schema_metadata(meta), tmp_path / "old.parquet")
    with pytest.raises(ContractError, match="no content checksum"):
        read_raw_file(tmp_path / "old.parquet")
    raw = torch.load(artefacts / "model" / "model.pt", weights_only=True)
    del raw["sha256"]
    torch.save(raw, tmp_path / "model.pt")
    with pytest.raises(ContractError, match="no checksum"):
        load_bundle(tmp_path / "model.pt")


def test_unlisted_machine_descriptors_are_refused(artefacts, tmp_path):
    """Issue 42: a descriptor added to a dataset's machines/ after the build has no checksum to be
    checked against; it was loaded (and could replace no recorded machine, or slip in a new one)."""
    ds = tmp_path / "ds"
    shutil.copytree(artefacts / "ds", ds)
    shutil.copy(ds / "machines" / "intel-skx-4s.yaml", ds / "machines" / "extra.yaml")
    with pytest.raises(ContractError, match=r"machines/extra\.yaml: not part of the dataset \(no checksum in .*tokens\.parquet\); remove it"):
        load_tokens(ds)
    (ds / "machines" / "extra.yaml").unlink()
    assert set(load_tokens(ds)[2]) == {"intel-skx-4s"}


def test_schedule_refuses_a_corrupt_model(artefacts, tmp_path):
    """The issue's case: 256 inverted bytes in the middle of model.pt; `pmoss schedule` used it and exited 0."""
    model = tmp_path / "model.pt"
    data = bytearray((artefacts / "model" / "model.pt").read_bytes())
    mid = len(data) // 2
    data[mid : mid + 256] = bytes(b ^ 0xFF for b in data[mid : mid + 256])
    model.write_bytes(bytes(data))
    snap = raw_files(artefacts / "raw")[0]
    r = subprocess.run([BIN / "pmoss", "schedule", "--model", str(model), "--snapshot", str(snap), "-o", str(tmp_path / "s.json")],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 1 and not (tmp_path / "s.json").exists(), r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and "model.pt" in r.stderr, r.stderr
