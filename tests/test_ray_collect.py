"""`pmoss collect --ray`: chunks as Ray tasks on a local 2-worker cluster, host pinning, no hangs.

The cluster offers the custom resource `host:lab-a` (as `ray start --resources` would on a testbed
host), so a pool binding a machine to `lab-a` runs, and one binding it to an absent host fails fast.
One cluster for the module: `ray.init` is most of the ~12 s this file takes (not marked slow).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pmoss.collect.driver import (
    CollectError,
    collect,
    pending,
    plan_chunks,
    task_options,
)
from pmoss.collect.plan import load_pool
from pmoss.contracts.snapshot import raw_files, read_raw

ray = pytest.importorskip("ray")

POOL = """name: r
machines: [intel-skx-4s, amd-milan-nps4]
workloads: [ycsb-c]
episodes_per_cell: 20
n_slices: 16
{hosts}
"""


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, object_store_memory=256 * 2**20, resources={"host:lab-a": 1}, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def pool_file(tmp: Path, hosts: str) -> Path:
    p = tmp / "pool.yaml"
    p.write_text(POOL.format(hosts=hosts))
    return p


def rows(root: Path):
    return read_raw(root).drop_columns(["timestamp"]).sort_by("episode_id")


def test_ray_collect_equals_local_pins_hosts_and_fails_fast(cluster, tmp_path):
    pool = load_pool(pool_file(tmp_path, "hosts: {intel-skx-4s: lab-a}"))
    chunks = plan_chunks(pending(pool, tmp_path / "ray"), size=8)  # several tasks per cell
    pinned = {task_options(c[0][0])["resources"].get("host:lab-a") for c in chunks if c[0][0].machine == "intel-skx-4s"}
    assert pinned == {0.01} and all(task_options(c[0][0])["resources"] == {} for c in chunks if c[0][0].machine != "intel-skx-4s")
    assert collect(pool, tmp_path / "ray", progress=False, use_ray=True) == 40
    assert collect(pool, tmp_path / "local", progress=False) == 40
    assert rows(tmp_path / "ray").equals(rows(tmp_path / "local"))  # same episodes, same rows, no duplicates
    assert collect(pool, tmp_path / "ray", progress=False, use_ray=True) == 0  # resumable

    absent = load_pool(pool_file(tmp_path, "hosts: {amd-milan-nps4: lab-z}"))
    with pytest.raises(CollectError, match="'amd-milan-nps4' is bound to host 'lab-z' but no Ray node offers resource 'host:lab-z'"):
        collect(absent, tmp_path / "absent", progress=False, use_ray=True)
    assert not (tmp_path / "absent").exists() or raw_files(tmp_path / "absent") == []

    with pytest.raises(CollectError, match=r"no chunk finished in 0.001 s; \d+ chunk\(s\) still wait for host\(s\) any node, lab-a"):
        collect(pool, tmp_path / "slow", progress=False, use_ray=True, wait_s=0.001)


def test_job_spec_is_submittable_and_names_a_valid_host_bound_pool():
    """pipelines/collect-testbed.yaml holds exactly submit_job's arguments and a pool that loads."""
    import inspect
    import shlex

    import yaml
    from ray.job_submission import JobSubmissionClient

    repo = Path(__file__).resolve().parents[1]
    spec = yaml.safe_load((repo / "pipelines/collect-testbed.yaml").read_text())
    assert set(spec) <= set(inspect.signature(JobSubmissionClient.submit_job).parameters)
    argv = shlex.split(spec["entrypoint"])
    assert argv[:4] == ["python", "-m", "pmoss", "collect"] and "--ray-address" in argv
    pool = load_pool(repo / argv[4])
    assert pool.hosts and set(pool.hosts) == set(pool.machines)
    chunks = plan_chunks(pending(pool.model_copy(update={"episodes_per_cell": 1, "shared_kinds": []}), Path("/nonexistent")))
    assert {tuple(task_options(c[0][0])["resources"]) for c in chunks} == {(f"host:{h}",) for h in pool.hosts.values()}
