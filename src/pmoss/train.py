"""Training with Lightning: the data module over tokenised Parquet, the learner, and `pmoss train`.

Teacher forcing with cross-entropy on actions; AdamW with warmup + cosine; gradient clipping;
bf16 on GPU; checkpoints with resume; seeded; logged to MLflow (sqlite store by default).
Pre-training starts from scratch ("base" model); fine-tuning passes `--init` ("assistant").
"""

from __future__ import annotations

import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import pyarrow.compute as pc
import torch
import typer
from pydantic import BaseModel, ConfigDict

from pmoss.bundle import BUNDLE_FILE, Bundle, load_bundle, save_bundle
from pmoss.dataset import load_tokens
from pmoss.io import load_model
from pmoss.model import DTConfig
from pmoss.state import eligibility, tile_cells
from pmoss.tokens import Stats
from pmoss.tracking import artifact_location, default_tracking_uri, ensure_experiment


class TrainConfig(BaseModel):
    """training/*.yaml: the model shape and the optimisation schedule."""

    model_config = ConfigDict(extra="forbid")
    model: dict[str, Any] = {}  # DTConfig fields; data-derived ones (tile, features, meta, slices) are filled in
    max_steps: int = 1000
    batch_size: int = 16
    lr: float = 6e-4
    weight_decay: float = 0.1
    warmup: int = 100
    grad_clip: float = 1.0
    val_every: int = 100  # steps between validation passes
    seed: int = 0
    num_workers: int = 0  # data loader processes


# ---- data ------------------------------------------------------------------------------------------
class EpisodeArrays(torch.utils.data.Dataset):
    """One split of a tokenised dataset as dense arrays; one item = one episode."""

    def __init__(self, path: Path, split: str, stats: Stats | None = None):
        table, data_stats, machines = load_tokens(path)
        self.stats = stats or data_stats
        s = self.stats
        t = table.filter(pc.equal(table["split"], split)) if split != "all" else table
        n, f = s.n_slices, len(s.feature_names)
        self.size = t.num_rows
        feats = np.stack(t["features"].to_numpy(zero_copy_only=False)).reshape(-1, n, f) if self.size else np.zeros((0, n, f))
        mask = np.stack(t["feature_mask"].to_numpy(zero_copy_only=False)) if self.size else np.zeros((0, f), bool)
        self.feats = ((feats - np.asarray(s.feature_mean)) / np.asarray(s.feature_std) * mask[:, None, :]).astype(np.float32)
        meta = np.stack(t["meta"].to_numpy(zero_copy_only=False)) if self.size else np.zeros((0, len(s.meta_names)))
        self.meta = ((meta - np.asarray(s.meta_mean)) / np.asarray(s.meta_std)).astype(np.float32)
        names, workloads = t["machine"].to_pylist(), t["workload"].to_pylist()
        cells = {m: np.asarray(tile_cells(machines[m], s.tile_cols)) for m in set(names)}
        elig = {m: eligibility(machines[m], s.tile_rows, s.tile_cols).numpy() for m in set(names)}
        actions = t["actions"].to_pylist()
        self.cells = np.stack([cells[m][np.asarray(a)] for m, a in zip(names, actions, strict=True)]) if self.size else np.zeros((0, n), int)
        self.eligible = np.stack([elig[m] for m in names]) if self.size else np.zeros((0, s.tile_rows * s.tile_cols), bool)
        rewards = np.stack(t["rewards"].to_numpy(zero_copy_only=False)) if self.size else np.zeros((0, n))
        best = np.asarray([s.best(m, w) for m, w in zip(names, workloads, strict=True)])
        # Return-to-go scaled to O(1) by the best return of the machine x workload (not raw 1e2-1e3).
        self.rtg = (np.flip(np.cumsum(np.flip(rewards, 1), 1), 1) / best[:, None]).astype(np.float32) if self.size else rewards
        self.returns = rewards.sum(1) / best if self.size else np.zeros(0)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {
            "meta": torch.from_numpy(self.meta[i]), "feats": torch.from_numpy(self.feats[i]),
            "cells": torch.from_numpy(self.cells[i]).long(), "eligible": torch.from_numpy(self.eligible[i]),
            "rtg": torch.from_numpy(self.rtg[i]),
        }  # fmt: skip


def _lightning():
    import lightning as L  # ~5 s import: only when training

    return L


def build_datamodule(path: Path, cfg: TrainConfig, stats: Stats | None = None):
    L = _lightning()

    class TokensDataModule(L.LightningDataModule):
        def setup(self, stage: str | None = None) -> None:
            self.train_set = EpisodeArrays(path, "train", stats)
            self.val_set = EpisodeArrays(path, "val", stats)

        def train_dataloader(self):
            g = torch.Generator().manual_seed(cfg.seed)
            return torch.utils.data.DataLoader(self.train_set, batch_size=cfg.batch_size, shuffle=True, drop_last=len(self.train_set) > cfg.batch_size,
                                               generator=g, num_workers=cfg.num_workers)  # fmt: skip

        def val_dataloader(self):
            return torch.utils.data.DataLoader(self.val_set, batch_size=cfg.batch_size, num_workers=cfg.num_workers)

    return TokensDataModule()


# ---- learner ---------------------------------------------------------------------------------------
def build_learner(model_cfg: DTConfig, cfg: TrainConfig, init: Bundle | None = None):
    L = _lightning()
    from pmoss.model import DecisionTransformer, cosine_lr
    from pmoss.state import build_tiles

    class DTLearner(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = DecisionTransformer(model_cfg)
            if init is not None:
                self.model.load_state_dict(init.state_dict)

        def _common_step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
            c = model_cfg
            tiles = build_tiles(batch["cells"], batch["feats"], batch["eligible"], c.tile_rows, c.tile_cols)
            logits = self.model(batch["meta"], batch["rtg"], tiles, batch["cells"], batch["eligible"])  # [B, N, A]
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch["cells"].flatten())
            acc = (logits.argmax(-1) == batch["cells"]).float().mean()
            self.log_dict({f"{stage}/loss": loss, f"{stage}/acc": acc}, prog_bar=stage == "train", batch_size=len(batch["cells"]))
            return loss

        def training_step(self, batch, batch_idx):
            return self._common_step(batch, "train")

        def validation_step(self, batch, batch_idx):
            self._common_step(batch, "val")

        def configure_optimizers(self):
            decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2 and "embed" not in n]
            no_decay = [p for n, p in self.model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
            opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_lr(s, cfg.warmup, cfg.max_steps, 1.0))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return DTLearner()


def model_config_for(stats: Stats, cfg: TrainConfig) -> DTConfig:
    return DTConfig(**{**cfg.model, "n_slices": stats.n_slices, "n_features": len(stats.feature_names),
                       "n_meta": len(stats.meta_names), "tile_rows": stats.tile_rows, "tile_cols": stats.tile_cols})  # fmt: skip


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def train(data: Path, output: Path, cfg: TrainConfig, init: Path | None = None, algo: str = "dt", experiment: str = "pmoss", progress: bool = True) -> Bundle:
    """Train (or fine-tune from `init`) and write `output/model.pt`; resumes from `output/checkpoints/last.ckpt`."""
    L = _lightning()
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import MLFlowLogger

    L.seed_everything(cfg.seed, workers=True)
    base = load_bundle(init) if init else None
    _, stats, _ = load_tokens(data)
    if base is not None:  # fine-tuning keeps the base model's normalisation and shapes
        stats = _merge_best(base.stats, stats)
    model_cfg = base.config if base is not None else model_config_for(stats, cfg)
    learner = build_learner(model_cfg, cfg, base)
    dm = build_datamodule(data, cfg, stats if base is None else stats)
    ckpt_dir = output / "checkpoints"
    ensure_experiment(experiment)
    logger = MLFlowLogger(experiment_name=experiment, tracking_uri=default_tracking_uri(), run_name=f"{algo}-{output.name}",
                          artifact_location=artifact_location())  # fmt: skip
    trainer = L.Trainer(
        max_steps=cfg.max_steps, gradient_clip_val=cfg.grad_clip, logger=logger,
        precision="bf16-mixed" if torch.cuda.is_available() else "32-true",
        callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_last=True, every_n_train_steps=max(1, cfg.val_every))],
        val_check_interval=None, check_val_every_n_epoch=None, log_every_n_steps=10, deterministic=True,
        enable_progress_bar=progress, enable_model_summary=False, num_sanity_val_steps=0,
        limit_val_batches=1.0, default_root_dir=output,
    )  # fmt: skip
    trainer.val_check_interval = cfg.val_every  # validate by steps, across epochs
    last = ckpt_dir / "last.ckpt"
    trainer.fit(learner, datamodule=dm, ckpt_path=str(last) if last.exists() else None)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    logger.log_hyperparams({"algo": algo, **{f"model.{k}": v for k, v in asdict(model_cfg).items()}, **cfg.model_dump(exclude={"model"})})
    bundle = Bundle(model_cfg, stats, {k: v.detach().cpu() for k, v in learner.model.state_dict().items()},
                    {"algo": algo, "train_metrics": metrics, "mlflow_run_id": logger.run_id, "git_commit": git_commit(),
                     "init": str(init) if init else None, "data": str(data)})  # fmt: skip
    save_bundle(bundle, output / BUNDLE_FILE)
    return bundle


def _merge_best(base: Stats, new: Stats) -> Stats:
    """Keep the base model's normalisation; extend best returns with the fine-tuning data's."""
    best = dict(base.best_return)
    for k, v in new.best_return.items():
        best[k] = max(best.get(k, 0.0), v)
    return Stats(**{**asdict(base), "best_return": best})


def train_command(
    data: Annotated[Path, typer.Argument(help="Tokenised dataset directory (pmoss dataset build).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Model directory: model.pt + checkpoints/.")],
    config: Annotated[Path, typer.Option(help="Training config YAML (training/*.yaml).")] = Path("training/dt-tiny.yaml"),
    init: Annotated[Optional[Path], typer.Option(help="Fine-tune from this model bundle (the base model).")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Override the config's max_steps.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Override the config's seed.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Pre-train a Decision Transformer (or fine-tune one with --init) and log it to MLflow."""
    cfg = load_model(TrainConfig, config)
    cfg = cfg.model_copy(update={k: v for k, v in {"max_steps": max_steps, "seed": seed}.items() if v is not None})
    bundle = train(data, output, cfg, init=init, progress=not quiet)
    typer.echo(f"{output / BUNDLE_FILE}: {bundle.info['train_metrics']}")
