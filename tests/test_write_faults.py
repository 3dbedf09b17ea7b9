"""Issue 42, items 3 and 5: a full disk or a read-only output is one line naming the path and the
reason (ENOSPC, EROFS), exit 1, nothing partial left, earlier data untouched.

The real file-system cases mount a small or a read-only tmpfs, which needs root; without it only
the in-process cases run (the same code path, the failure injected where pyarrow raises it)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from test_failure_modes import one_line_error, pmoss

from pmoss.collect.driver import collect
from pmoss.collect.plan import load_pool
from pmoss.contracts.errors import PmossError
from pmoss.contracts.io import atomic_write_text
from pmoss.contracts.snapshot import episodes_to_table, write_parquet_atomic

POOL = "name: t\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c, scan]\nepisodes_per_cell: 12\nn_slices: 8\n"


def _leftovers(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.name.startswith("."))


def test_disk_full_in_parquet_writer_is_one_error_naming_the_file(tmp_path, monkeypatch):
    """pyarrow removes the file it failed to write and raises OSError(28, ...) without a file name;
    the writer's own cleanup then raised FileNotFoundError over it (the traceback users saw)."""
    import pyarrow.parquet as pq

    def full(table, where, **kw):
        Path(where).write_bytes(b"PAR1")
        os.unlink(where)
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    target = tmp_path / "raw" / "part-x.parquet"
    with pytest.raises(PmossError, match=r"raw/part-x\.parquet: cannot write, disk full \(ENOSPC\)"):
        write_parquet_atomic(episodes_to_table([]), target)
    assert list((tmp_path / "raw").iterdir()) == []


def test_refused_text_write_names_the_file_and_leaves_the_old_one(tmp_path, monkeypatch):
    atomic_write_text(tmp_path / "m.json", "old\n")
    real = os.replace

    def readonly(src, dst):
        raise OSError(errno.EROFS, "Read-only file system", str(dst))

    monkeypatch.setattr(os, "replace", readonly)
    with pytest.raises(PmossError, match=r"m\.json: cannot write, read-only file system \(EROFS\)"):
        atomic_write_text(tmp_path / "m.json", "new\n")
    monkeypatch.setattr(os, "replace", real)
    assert (tmp_path / "m.json").read_text() == "old\n" and _leftovers(tmp_path) == []


# ---- on real file systems (root) -------------------------------------------------------------------
@pytest.fixture
def mount(tmp_path):
    """mount(name, options) -> a fresh tmpfs at tmp_path/name, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []

    def make(name: str, options: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(path)
        return path

    yield make
    for path in mounted:
        subprocess.run(["umount", str(path)], check=False)


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wf")
    (tmp / "pool.yaml").write_text(POOL)
    collect(load_pool(tmp / "pool.yaml"), tmp / "raw", progress=False)
    return tmp


def _fill(path: Path, leave: int) -> None:
    """Fill the file system at `path` up to `leave` bytes free."""
    st = os.statvfs(path)
    (path / "filler").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))


def test_collect_on_a_full_disk(raw, mount):
    """The issue's reproduction: `pmoss collect` onto a tmpfs too small for the pool."""
    small = mount("small", "size=64k")
    _fill(small, 24 << 10)
    r = pmoss("collect", str(raw / "pool.yaml"), "-o", str(small / "raw"), "-q")
    one_line_error(r, f"{small}/raw/source=sim/", ".parquet: cannot write, disk full (ENOSPC)")
    assert _leftovers(small) == []  # no temp file; every part that is there is complete (resume reads them)


def test_dataset_build_on_a_full_disk_keeps_the_old_dataset(raw, mount):
    small = mount("small", "size=1m")
    r = pmoss("dataset", "build", str(raw / "raw"), "-o", str(small / "ds"), "--val", "0", "--test", "0")
    assert r.returncode == 0, r.stderr
    before = {p.name: p.read_bytes() for p in (small / "ds").iterdir() if p.is_file()}
    _fill(small, 8 << 10)
    r = pmoss("dataset", "build", str(raw / "raw"), "-o", str(small / "ds"), "--val", "0", "--test", "0")
    one_line_error(r, f"{small}/ds: cannot write, disk full (ENOSPC)")
    assert {p.name: p.read_bytes() for p in (small / "ds").iterdir() if p.is_file()} == before
    assert _leftovers(small) == []


@pytest.mark.parametrize("command", ["collect", "dataset build", "topology -o"])
def test_read_only_output(raw, mount, command):
    ro = mount("ro", "ro,size=64k")
    args = {"collect": ["collect", str(raw / "pool.yaml"), "-o", str(ro / "raw"), "-q"],
            "dataset build": ["dataset", "build", str(raw / "raw"), "-o", str(ro / "ds")],
            "topology -o": ["topology", "-o", str(ro / "m.yaml")]}[command]  # fmt: skip
    one_line_error(pmoss(*args), str(ro), "cannot write, read-only file system (EROFS)")


# ---- #40 item 3: torch.save raises RuntimeError, not OSError, when the disk fills -------------------
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"  # torch 2.x on a full tmpfs


def _bundle():
    from conftest import small_machine
    from test_model import _bundle as make

    return make(small_machine(nodes=2, cpus_per_node=2))


def test_checkpoint_on_a_full_disk_is_one_error_naming_it(tmp_path, monkeypatch):
    """torch.save raising RuntimeError while Lightning writes a checkpoint: the one-line error names
    the checkpoint file (was: a traceback from deep inside Lightning)."""
    import torch
    from test_learners import TINY, make_tokens

    from pmoss.learn.train import TrainConfig, train

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    data = make_tokens(tmp_path / "tok")

    def full(obj, f, *args, **kw):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(PmossError, match=r"model/checkpoints/[^ ]+\.ckpt: cannot write, disk full \(ENOSPC\); free some space there") as e:
        train(data, tmp_path / "model", TrainConfig(**{**TINY, "max_steps": 2, "val_every": 1}), progress=False)
    assert "\n" not in str(e.value)
    assert not list((tmp_path / "model" / "checkpoints").glob("*.ckpt"))


def test_bundle_on_a_full_disk_names_model_pt_and_keeps_the_old_one(tmp_path, monkeypatch):
    """torch.save's own error text ('unexpected pos'), with the file system full when it failed:
    disk full, naming model.pt; the temp file goes, the previous bundle stays. The same error with
    room on the disk is no disk problem and keeps its traceback."""
    import shutil
    from collections import namedtuple

    import torch

    from pmoss.learn.bundle import save_bundle

    save_bundle(_bundle(), tmp_path / "model.pt")
    old = (tmp_path / "model.pt").read_bytes()
    Usage = namedtuple("Usage", "total used free")

    def full(obj, f, *args, **kw):
        Path(f).write_bytes(b"PK\3\4partial")
        raise RuntimeError(TORCH_FULL)

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(1 << 20, 1 << 20, 0))
    with pytest.raises(PmossError, match=r"model\.pt: cannot write, disk full \(ENOSPC\)"):
        save_bundle(_bundle(), tmp_path / "model.pt")
    assert (tmp_path / "model.pt").read_bytes() == old and sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(1 << 40, 0, 1 << 40))
    with pytest.raises(RuntimeError, match="unexpected pos"):
        save_bundle(_bundle(), tmp_path / "model.pt")


def test_bundle_on_a_full_tmpfs(mount):
    """The real thing: torch's zip writer fills a tmpfs and raises RuntimeError."""
    from pmoss.learn.bundle import save_bundle

    small = mount("small", "size=64k")
    with pytest.raises(PmossError, match=r"small/m/model\.pt: cannot write, disk full \(ENOSPC\)"):
        save_bundle(_bundle(), small / "m" / "model.pt")
    assert [p.name for p in (small / "m").iterdir()] == []


def test_train_on_a_full_disk(tmp_path, mount):
    """The issue's reproduction: `pmoss train` onto a tmpfs too small for its first checkpoint."""
    import yaml
    from test_learners import TINY, make_tokens

    small = mount("small", "size=64k")
    data = make_tokens(tmp_path / "tok")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({**TINY, "max_steps": 2, "val_every": 1}))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    r = pmoss("train", str(data), "-o", str(small / "model"), "--config", str(tmp_path / "cfg.yaml"), "--quiet", env=env)
    one_line_error(r, f"{small}/model/checkpoints/", ".ckpt: cannot write, disk full (ENOSPC)")
    assert not list((small / "model" / "checkpoints").glob("*.ckpt"))
