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
