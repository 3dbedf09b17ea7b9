"""`pmoss train --ray --workers K`: the same Lightning learner under Ray Train (DDP over K workers).

The driver owns the MLflow run and the bundle; each worker runs `train.fit` with Ray's DDP
strategy, cluster environment and report callback (checkpoint at the end of the run). Workers
write resumable Lightning checkpoints to `output/checkpoints/` as in a local run, so `output`
must be on storage every worker sees (one host, or a shared file system). Each worker reads
its own shard of every global batch (`StepBatchSampler`), so the effective batch is K x batch_size.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from pmoss.learn.bundle import Bundle
from pmoss.learn.tracking import default_tracking_uri

CHECKPOINT_NAME = "checkpoint.ckpt"  # what RayTrainReportCallback writes into each reported checkpoint


def _worker(config: dict[str, Any]) -> None:
    """Runs on every Ray Train worker: one DDP rank of `train.fit`."""
    import ray.train

    from pmoss.learn.train import TrainConfig, fit, mlflow_logger

    os.environ["MLFLOW_TRACKING_URI"] = config["tracking_uri"]  # workers may not inherit the driver's environment
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


def train_on_ray(data: Path, output: Path, cfg: Any, init: Path | None = None, algo: str = "dt", workers: int = 2, experiment: str = "pmoss",
                 shuffle_returns: int | None = None, cpus_per_worker: float | None = None) -> Bundle:  # fmt: skip
    """Train with `workers` Ray Train workers (joins RAY_ADDRESS's cluster or starts a local one); writes output/model.pt."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from pmoss.learn.train import mlflow_logger, prepare, resume_checkpoint, write_bundle

    if not ray.is_initialized():
        ray.init()
    output, data = output.resolve(), data.resolve()
    stats, model_cfg, _ = prepare(data, cfg, init, algo)  # fail fast on the driver
    resume_checkpoint(output)
    logger = mlflow_logger(experiment, f"{algo}-{output.name}-ray{workers}")
    resources = worker_resources(workers, cpus_per_worker)
    config = {"data": str(data), "output": str(output), "cfg": cfg.model_dump(), "init": str(init.resolve()) if init else None, "algo": algo,
              "experiment": experiment, "run_name": f"{algo}-{output.name}-ray{workers}", "run_id": logger.run_id,
              "tracking_uri": default_tracking_uri(), "threads": max(1, int(resources["CPU"])), "shuffle_returns": shuffle_returns}  # fmt: skip
    trainer = TorchTrainer(
        _worker, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=torch.cuda.is_available(), resources_per_worker=resources),
        run_config=RunConfig(name=f"{algo}-{output.name}", storage_path=str(output / "ray")),
    )  # fmt: skip
    result = trainer.fit()
    with result.checkpoint.as_directory() as d:
        ckpt = torch.load(Path(d) / CHECKPOINT_NAME, map_location="cpu", weights_only=False)  # our own checkpoint, written by the run above
    prefix = "algo.model."  # Learner.algo (the Algorithm) .model (the policy network)
    weights = {k.removeprefix(prefix): v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    metrics = {k: float(v) for k, v in result.metrics.items() if "/" in k}  # train/..., val/...
    return write_bundle(output, cfg, model_cfg, stats, weights, logger, algo, metrics, init, data, shuffle_returns, ray_workers=workers)
