"""`pmoss train --ray --workers K`: the same Lightning learner under Ray Train (DDP over K workers).

The driver owns the MLflow run and the bundle; each worker runs `train.fit` with Ray's DDP
strategy, cluster environment and report callback (checkpoint at the end of the run). Workers
write resumable Lightning checkpoints to `output/checkpoints/` as in a local run, so `output`
must be on storage every worker sees (one host, or a shared file system). Each worker reads
its own shard of every global batch (`StepBatchSampler`), so the effective batch is K x batch_size.

Quiet (`--quiet`): Ray's and Ray Train's INFO lines are off (the progress lines of rank 0 and
warnings still show). Two sources of noise on a loaded 2-core host were causes, not chatter:
- Train V2's placement-group cleaner asks the State API whether the controller is alive every
  second; without the dashboard (`ray[default]`) every query failed with a warning (324 lines in a
  20-step run). The dashboard is a dependency now, and a cluster is started with it.
- The controller registers its workers with Ray Data's AutoscalingCoordinator, a detached actor
  it creates on first use, and waits 5 s (a constant) for the answer; a fresh Python worker
  importing Ray Data takes longer than that on 2 busy cores, so each try logged a GetTimeoutError
  traceback until the actor was up. The driver now creates that actor and waits until it is
  ready (up to COORDINATOR_READY_S) before the trainer starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from pmoss.learn.bundle import Bundle
from pmoss.learn.tracking import default_tracking_uri

CHECKPOINT_NAME = "checkpoint.ckpt"
COORDINATOR_READY_S = 120.0  # a new actor process on a loaded host: seconds, not the 5 s Ray Train waits  # what RayTrainReportCallback writes into each reported checkpoint


def _worker(config: dict[str, Any]) -> None:
    """Runs on every Ray Train worker: one DDP rank of `train.fit`."""
    import ray.train

    from pmoss.learn.train import TrainConfig, fit, mlflow_logger

    os.environ["MLFLOW_TRACKING_URI"] = config["tracking_uri"]  # workers may not inherit the driver's environment
    if config.get("quiet"):
        import logging

        from ray.train.v2._internal.execution import context

        # Ray 2.60 names this module's logger by its file path, not "ray.train...", so the run's
        # LoggingConfig(log_level) misses its "Reporting training result" INFO line
        logging.getLogger(context.__file__).setLevel(logging.WARNING)
    torch.set_num_threads(config["threads"])
    rank = ray.train.get_context().get_world_rank()
    logger = mlflow_logger(config["experiment"], config["run_name"], run_id=config["run_id"]) if rank == 0 else False
    fit(Path(config["data"]), Path(config["output"]), TrainConfig(**config["cfg"]), Path(config["init"]) if config["init"] else None,
        config["algo"], logger, progress=False, ray=True, shuffle_returns=config["shuffle_returns"])  # fmt: skip


def worker_resources(workers: int, cpus_per_worker: float | None) -> dict[str, float]:
    """CPUs per worker: as asked, else 1, or less when the cluster has fewer CPUs than workers (2-core hosts)."""
    import ray

    if cpus_per_worker is None:
        cpus_per_worker = min(1.0, ray.cluster_resources().get("CPU", 1.0) / workers)
    return {"CPU": cpus_per_worker}


def start_ray(quiet: bool) -> None:
    """Join RAY_ADDRESS's cluster or start a local one (with its dashboard: the State API Train V2
    polls); quiet: Ray's own INFO lines off."""
    import logging

    import ray

    # Train V2's preemption watcher polls a cloud provider's spot-instance notices: none on a lab
    # testbed, and on 2 cores its actor is one more process competing with the workers.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    if not ray.is_initialized():
        ray.init(logging_level=logging.WARNING if quiet else logging.INFO)


def warm_autoscaling_coordinator(timeout_s: float = COORDINATOR_READY_S) -> None:
    """Create Ray Train's AutoscalingCoordinator (a named detached actor, shared by every run on the
    cluster) and wait until it answers, so the controller's 5 s requests to it do not time out."""
    import ray

    # Ray's internal module (ray 2.60): the controller calls the same function and gets this actor
    from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import get_or_create_autoscaling_coordinator

    ray.get(get_or_create_autoscaling_coordinator().__ray_ready__.remote(), timeout=timeout_s)


def train_on_ray(data: Path, output: Path, cfg: Any, init: Path | None = None, algo: str = "dt", workers: int = 2, experiment: str = "pmoss",
                 shuffle_returns: int | None = None, cpus_per_worker: float | None = None, quiet: bool = False) -> Bundle:  # fmt: skip
    """Train with `workers` Ray Train workers (joins RAY_ADDRESS's cluster or starts a local one); writes output/model.pt."""
    from ray.train import LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from pmoss.learn.train import mlflow_logger, prepare, resume_checkpoint, write_bundle

    start_ray(quiet)
    output, data = output.resolve(), data.resolve()
    stats, model_cfg, _ = prepare(data, cfg, init, algo)  # fail fast on the driver
    resume_checkpoint(output)
    logger = mlflow_logger(experiment, f"{algo}-{output.name}-ray{workers}")
    resources = worker_resources(workers, cpus_per_worker)
    config = {"data": str(data), "output": str(output), "cfg": cfg.model_dump(), "init": str(init.resolve()) if init else None, "algo": algo,
              "experiment": experiment, "run_name": f"{algo}-{output.name}-ray{workers}", "run_id": logger.run_id,
              "tracking_uri": default_tracking_uri(), "threads": max(1, int(resources["CPU"])), "shuffle_returns": shuffle_returns, "quiet": quiet}  # fmt: skip
    trainer = TorchTrainer(
        _worker, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=torch.cuda.is_available(), resources_per_worker=resources),
        run_config=RunConfig(name=f"{algo}-{output.name}", storage_path=str(output / "ray"),
                             logging_config=LoggingConfig(log_level="WARNING" if quiet else "INFO")),
    )  # fmt: skip
    warm_autoscaling_coordinator()
    result = trainer.fit()
    with result.checkpoint.as_directory() as d:
        ckpt = torch.load(Path(d) / CHECKPOINT_NAME, map_location="cpu", weights_only=False)  # our own checkpoint, written by the run above
    prefix = "algo.model."  # Learner.algo (the Algorithm) .model (the policy network)
    weights = {k.removeprefix(prefix): v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    metrics = {k: float(v) for k, v in result.metrics.items() if "/" in k}  # train/..., val/...
    return write_bundle(output, cfg, model_cfg, stats, weights, logger, algo, metrics, init, data, shuffle_returns, ray_workers=workers)
