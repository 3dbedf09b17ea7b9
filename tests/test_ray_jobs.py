"""Job submission as pipelines/README.md documents it, on a local cluster bound to 127.0.0.1:
the job spec's runtime_env ships the repository to the job, the job runs `pmoss`, and the
dashboard's job API refuses a request without Ray's authentication token."""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")
pytest.importorskip("ray.dashboard")  # ray[default]: the dashboard serves the job API

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~30-60 s on 2 cores: ray.init with its dashboard, then a job driver process
@pytest.mark.ci
def test_submit_a_job_with_the_spec_runtime_env_to_a_local_cluster(monkeypatch):
    from ray.job_submission import JobStatus, JobSubmissionClient

    # ray.init's default since Ray 2.52: token authentication (set before `import ray`, RAY_AUTH_MODE
    # would not reach the already loaded core config; a value the environment set is dropped here)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    spec = yaml.safe_load((REPO / "pipelines/collect-testbed.yaml").read_text())
    ctx = ray.init(num_cpus=1, object_store_memory=128 * 2**20, resources={"head": 1}, include_dashboard=True,
                   dashboard_host="127.0.0.1", dashboard_port=0, logging_level="WARNING")  # fmt: skip
    try:
        address = f"http://{ctx.dashboard_url}"
        assert ctx.dashboard_url.startswith("127.0.0.1:"), ctx.dashboard_url  # bound to loopback, not 0.0.0.0
        with pytest.raises(urllib.error.HTTPError) as refused:  # no token: the job API says no
            urllib.request.urlopen(f"{address}/api/jobs/", timeout=30)
        assert refused.value.code in (401, 403)

        client = JobSubmissionClient(address)  # reads the token as `ray job submit` does
        env = {**spec["runtime_env"], "working_dir": str(REPO)}
        job = client.submit_job(entrypoint=f"{sys.executable} -m pmoss sim list", runtime_env=env,
                                entrypoint_num_cpus=spec["entrypoint_num_cpus"], entrypoint_resources=spec["entrypoint_resources"])  # fmt: skip
        deadline = time.monotonic() + 240
        while (status := client.get_job_status(job)) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
            assert time.monotonic() < deadline, f"job {job} still {status} after 240 s"
            time.sleep(1)
        logs = client.get_job_logs(job)
        assert status == JobStatus.SUCCEEDED, logs
        assert "intel-skx-4s" in logs  # `pmoss sim list` ran from the shipped working_dir
    finally:
        ray.shutdown()
