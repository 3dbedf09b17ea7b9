"""Training with Lightning: the data module over tokenised Parquet, the learner, the trainer and the bundle it writes.

One Lightning learner runs any offline algorithm (dt.py, bc.py, cql.py; `--algo`): the algorithm
says how a batch becomes named losses, the learner adds AdamW with warmup + cosine, gradient
clipping, bf16 on GPU, checkpoints with exact resume, seeding and MLflow logging (sqlite store by
default). Pre-training starts from scratch ("base" model); fine-tuning passes `--init`
("assistant"). `--ray --workers K` runs the same learner under Ray Train (ray_train.py).

Exact resume: batches come from `StepBatchSampler`, a pure function of (seed, global step, rank),
and the torch RNG (dropout) travels in the checkpoint, so a run stopped at step n and resumed from
`checkpoints/last.ckpt` continues exactly as if it had not stopped.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch

from pmoss.contracts.errors import PmossError, brief
from pmoss.contracts.io import atomic_write_text, write_failure
from pmoss.data.dataset import load_tokens
from pmoss.data.state import as_tensors, machine_arrays, pad_of
from pmoss.data.tokens import Stats
from pmoss.learn.algorithms import build_algorithm
from pmoss.learn.bundle import BUNDLE_FILE, Bundle, load_bundle, save_bundle
from pmoss.learn.config import ALGOS, TrainConfig
from pmoss.learn.model import DTConfig
from pmoss.progress import every_s_from_env
from pmoss.learn.tracking import (
    artifact_location,
    default_tracking_uri,
    ensure_experiment,
)


class TrainError(PmossError):
    pass


# ---- data ------------------------------------------------------------------------------------------
def top_quantile_mask(returns: np.ndarray, groups: list[str], q: float) -> np.ndarray:
    """Episodes whose return is in the top fraction `q` of their group (machine|workload); at least one per group."""
    keep = np.zeros(len(returns), dtype=bool)
    for g in set(groups):
        idx = np.flatnonzero(np.asarray(groups) == g)
        n_keep = max(1, int(round(q * len(idx))))
        keep[idx[np.argsort(-returns[idx], kind="stable")[:n_keep]]] = True
    return keep


class EpisodeArrays(torch.utils.data.Dataset):
    """One split of a tokenised dataset as dense arrays; one item = one episode.

    `top_quantile` keeps only the best episodes of each machine x workload (behaviour cloning);
    `shuffle_returns` permutes return-to-go sequences across episodes (a control that must not help);
    `contexts` K (the critic) makes K items per episode: its schedule and return read with K raw
    snapshots of the same cell from `snapshots` (critic.py, `snapshot_contexts`); with `group` M > 1
    an item also holds M - 1 other episodes of the cell read with the same snapshot (tensors [M, ...]),
    drawn as a pure function of (seed, item): the candidates of one decision, for a ranking loss.
    """

    def __init__(self, path: Path, split: str, stats: Stats | None = None, top_quantile: float | None = None, shuffle_returns: int | None = None,
                 contexts: int | None = None, snapshots: str | None = None, seed: int = 0, group: int = 1):  # fmt: skip
        table, data_stats, machines = load_tokens(path)
        self.stats = stats or data_stats
        s = self.stats
        t = table.filter(pc.equal(table["split"], split)) if split != "all" else table
        if top_quantile is not None and t.num_rows:
            ret = np.asarray(t["return"].to_pylist()) / np.asarray([s.best(m, w) for m, w in zip(t["machine"].to_pylist(), t["workload"].to_pylist(), strict=True)])
            t = t.filter(top_quantile_mask(ret, [f"{m}|{w}" for m, w in zip(t["machine"].to_pylist(), t["workload"].to_pylist(), strict=True)], top_quantile))
        n, f = s.n_slices, len(s.feature_names)
        self.size = t.num_rows
        feats = np.stack(t["features"].to_numpy(zero_copy_only=False)).reshape(-1, n, f) if self.size else np.zeros((0, n, f))
        mask = np.stack(t["feature_mask"].to_numpy(zero_copy_only=False)) if self.size else np.zeros((0, f), bool)
        self.feats = (s.features(feats) * mask[:, None, :]).astype(np.float32)
        meta = np.stack(t["meta"].to_numpy(zero_copy_only=False)) if self.size else np.zeros((0, len(s.meta_names)))
        self.meta = s.meta(meta).astype(np.float32)
        names, workloads = t["machine"].to_pylist(), t["workload"].to_pylist()
        self.actions = np.stack(t["actions"].to_numpy(zero_copy_only=False)).astype(np.int64) if self.size else np.zeros((0, n), np.int64)
        # Each episode's machine as padded index arrays (data/state.py), so machines of any size batch together.
        used = sorted(set(names))
        pad = pad_of([machines[m] for m in used]) if used else (1, 1, 1)
        self.machine_tensors = {m: as_tensors(machine_arrays(machines[m], pad)) for m in used}
        self.machine_of = names
        rewards = np.stack(t["rewards"].to_numpy(zero_copy_only=False)) if self.size else np.zeros((0, n))
        # The slice's share of queries: set by the workload's key distribution (visible at its own step, state.py).
        self.share = (rewards / np.maximum(rewards.sum(1, keepdims=True), 1e-12)).astype(np.float32)
        best = np.asarray([s.best(m, w) for m, w in zip(names, workloads, strict=True)])
        # Return-to-go scaled to O(1) by the best return of the machine x workload (not raw 1e2-1e3).
        self.rtg = (np.flip(np.cumsum(np.flip(rewards, 1), 1), 1) / best[:, None]).astype(np.float32) if self.size else rewards.astype(np.float32)
        self.returns = rewards.sum(1) / best if self.size else np.zeros(0)
        if shuffle_returns is not None and self.size:
            perm = np.random.default_rng(shuffle_returns).permutation(self.size)
            self.rtg, self.returns = self.rtg[perm], self.returns[perm]
        # the snapshot each item is read with: its own episode's, or (critic) other raw snapshots of its cell
        self.snap_meta, self.snap_feats, self.snap_share = self.meta, self.feats, self.share
        self.context = np.arange(self.size)[None]
        self.group, self.seed, self.cell_of, self.members = group, seed, [], {}
        if contexts and self.size:
            from pmoss.learn.critic import snapshot_contexts

            self.cell_of = [f"{m}|{w}|{d}" for m, w, d in zip(names, workloads, t["dataset"].to_pylist(), strict=True)]
            for i, cell in enumerate(self.cell_of):
                self.members.setdefault(cell, []).append(i)
            self.members = {c: np.asarray(m) for c, m in self.members.items()}
            (self.snap_meta, self.snap_feats, self.snap_share), self.context = snapshot_contexts(
                Path(snapshots or ""), t["episode_id"].to_pylist(), self.cell_of, split, s, machines, contexts, seed, path)

    def __len__(self) -> int:
        return self.size * len(self.context)

    def __getitem__(self, j: int) -> dict[str, torch.Tensor]:
        k, i = divmod(j, self.size)
        c = self.context[k, i]  # the snapshot: episode i's own unless contexts were asked for
        if self.group == 1 or not self.cell_of:
            return self._item(c, i)
        cell = self.members[self.cell_of[i]]
        pool = cell[cell != i] if len(cell) > 1 else cell
        rng = np.random.default_rng((self.seed, j))
        others = rng.choice(pool, self.group - 1, replace=len(pool) < self.group - 1)
        items = [self._item(c, e) for e in (i, *others)]
        return {key: torch.stack([it[key] for it in items]) for key in items[0]}

    def _item(self, c: int, i: int) -> dict[str, torch.Tensor]:
        return {
            "meta": torch.from_numpy(self.snap_meta[c]), "feats": torch.from_numpy(self.snap_feats[c]),
            "actions": torch.from_numpy(self.actions[i]), "share": torch.from_numpy(self.snap_share[c]),
            "rtg": torch.from_numpy(self.rtg[i]), "ret": torch.tensor(self.returns[i], dtype=torch.float32),
            **self.machine_tensors[self.machine_of[i]],
        }  # fmt: skip


class StepBatchSampler(torch.utils.data.Sampler[list[int]]):
    """An endless stream of batches where batch j is a pure function of (seed, j): resumable at any step.

    Epoch e is a permutation seeded by (seed, e); global batch j = slot j of that stream. Under DDP,
    rank r at step s takes global batch s * world + r, so ranks never share a batch. No __len__:
    Lightning treats the loader as infinite and stops at max_steps.
    """

    def __init__(self, n: int, batch_size: int, seed: int, start_step: int = 0, rank: int = 0, world: int = 1):
        assert n > 0, "StepBatchSampler: empty dataset"
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.start_step, self.rank, self.world = start_step, rank, world
        self.per_epoch = max(1, n // batch_size)  # drop the last partial batch (every batch the same size)

    def batch(self, j: int) -> list[int]:
        epoch, slot = divmod(j, self.per_epoch)
        perm = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + epoch))
        b = min(self.batch_size, self.n)
        return perm[slot * b : (slot + 1) * b].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        step = self.start_step
        while True:
            yield self.batch(step * self.world + self.rank)
            step += 1


def _lightning():
    import lightning as L  # ~5 s import: only when training

    _hush_lightning()
    return L


def _not_a_tip(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("💡 Tip")  # Lightning's ads for its cloud loggers


def _hush_lightning(quiet: bool = False) -> None:
    """Drop library noise that says nothing about this run: Lightning's "try litlogger/litmodels"
    tips and its own use of torch's deprecated `LeafSpec`; with `quiet`, also its info lines
    (seed, accelerators). Warnings and errors still show."""
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if _not_a_tip not in rank_zero.filters:
        rank_zero.addFilter(_not_a_tip)
    if quiet:
        for name in ("lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).setLevel(logging.WARNING)


def build_datamodule(path: Path, cfg: TrainConfig, stats: Stats | None = None, algo: str = "dt", shuffle_returns: int | None = None):
    L = _lightning()
    top = cfg.bc.top_quantile if algo == "bc" else None
    ctx = cfg.critic.contexts if algo == "critic" else None
    if ctx and not cfg.critic.snapshots:
        raise TrainError("--algo critic: pass --snapshots RAW_DIR (the raw snapshots the dataset was built from)")

    class TokensDataModule(L.LightningDataModule):
        def setup(self, stage: str | None = None) -> None:
            group = cfg.critic.group if algo == "critic" else 1
            self.train_set = EpisodeArrays(path, "train", stats, top_quantile=top, shuffle_returns=shuffle_returns, contexts=ctx, snapshots=cfg.critic.snapshots,
                                           seed=cfg.seed, group=group)  # fmt: skip
            self.val_set = EpisodeArrays(path, "val", stats, top_quantile=top, shuffle_returns=shuffle_returns, contexts=ctx, snapshots=cfg.critic.snapshots,
                                         seed=cfg.seed + 1, group=group)  # fmt: skip
            if len(self.train_set) == 0:
                raise TrainError(f"{path}: the training split has no episode; collect more")

        def train_dataloader(self):
            # Read after the checkpoint is restored: a resumed run continues the batch stream where it stopped.
            tr = self.trainer
            sampler = StepBatchSampler(len(self.train_set), cfg.batch_size, cfg.seed, tr.global_step, tr.global_rank, tr.world_size)
            # Own generator: the loader must not draw from the global RNG (dropout), or resume would diverge.
            return torch.utils.data.DataLoader(self.train_set, batch_sampler=sampler, num_workers=cfg.num_workers, generator=torch.Generator())

        def val_dataloader(self):
            val: torch.utils.data.Dataset = self.val_set
            if cfg.val_items is not None and len(self.val_set) > cfg.val_items:
                val = torch.utils.data.Subset(self.val_set, np.linspace(0, len(self.val_set) - 1, cfg.val_items).round().astype(int).tolist())
            return torch.utils.data.DataLoader(val, batch_size=cfg.batch_size, num_workers=cfg.num_workers, generator=torch.Generator())

    return TokensDataModule()


# ---- learner ---------------------------------------------------------------------------------------
def build_learner(algorithm):
    """The Lightning side of an `Algorithm` (learner.py): logging, optimiser, RNG in checkpoints."""
    L = _lightning()
    from pmoss.learn.learner import make_optimizer

    class Learner(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.algo = algorithm

        def _common_step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
            parts = self.algo.losses(batch)
            self.log_dict({f"{stage}/{k}": v.detach() if k != "loss" else v for k, v in parts.items()}, prog_bar=stage == "train",
                          batch_size=len(batch["actions"]), sync_dist=stage != "train")  # fmt: skip
            return parts["loss"]

        def training_step(self, batch, batch_idx):
            return self._common_step(batch, "train")

        def validation_step(self, batch, batch_idx):
            self._common_step(batch, "val")

        def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
            super().optimizer_step(*args, **kwargs)
            # Here, not in on_train_batch_end: checkpoint callbacks run before that hook, and a
            # checkpoint must hold the target network after this step's update.
            self.algo.after_update()

        def configure_optimizers(self):
            opt, sched = make_optimizer(self.algo, self.algo.train_cfg)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["torch_rng"] = torch.get_rng_state()  # dropout masks continue exactly on resume

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            if "torch_rng" in checkpoint:
                torch.set_rng_state(checkpoint["torch_rng"])

    return Learner()


def _check_context(cfg: TrainConfig, algo: str) -> None:
    if cfg.context and algo not in ("dt", "bc"):
        raise TrainError(f"context: training windows are for the policies (dt, bc); --algo {algo} reads whole episodes")


def model_config_for(stats: Stats, cfg: TrainConfig, algo: str = "dt") -> DTConfig:
    _check_context(cfg, algo)
    n_slices = min(cfg.context or stats.n_slices, stats.n_slices)
    try:
        return DTConfig(**{**cfg.model, "n_slices": n_slices, "n_features": len(stats.feature_names), "n_meta": len(stats.meta_names),
                           "use_return": algo == "dt", "value_head": algo == "critic"})  # fmt: skip
    except (TypeError, ValueError) as e:  # a bad key or value under the config's `model`
        raise TrainError(f"model: {e} (--algo {algo})") from None


def prepare(data: Path, cfg: TrainConfig, init: Path | None, algo: str) -> tuple[Stats, DTConfig, Bundle | None]:
    """Normalisation stats, model shape and the base model (fine-tuning) for a run."""
    if algo not in ALGOS:
        raise TrainError(f"--algo {algo}: expected one of {', '.join(ALGOS)}")
    _check_context(cfg, algo)  # before any data is read
    base = load_bundle(init) if init else None
    table, stats, machines = load_tokens(data)
    if base is None:
        if algo == "critic" and cfg.critic.stats == "snapshots":
            from pmoss.learn.critic import snapshot_stats

            if not cfg.critic.snapshots:
                raise TrainError("--algo critic with critic.stats 'snapshots': pass --snapshots RAW_DIR (the raw snapshots the dataset was built from)")
            stats = snapshot_stats(Path(cfg.critic.snapshots), Path(data), table, stats, machines)
        return stats, model_config_for(stats, cfg, algo), None
    if base.info.get("algo", "dt") != algo:
        raise TrainError(f"--init {init}: a '{base.info.get('algo', 'dt')}' model cannot be fine-tuned as --algo {algo}; pass the matching --algo")
    if cfg.context and cfg.context != base.config.n_slices:
        raise TrainError(f"context {cfg.context}: --init {init} attends to {base.config.n_slices} slices; fine-tune on windows of that many")
    return _merge_best(base.stats, stats), base.config, base  # fine-tuning keeps the base model's normalisation and shapes


LOSS_CURVES = {"train": "train-loss.csv", "val": "val-loss.csv"}  # next to the bundle: data of the `dvc plots` training curves


def loss_curve_callback(output: Path, every: int):
    """Records train loss every `every` steps and val loss at each validation into
    `output/{train,val}-loss.csv` (columns step,<stage>_loss), so `dvc plots diff` can compare the
    curves of experiments. A resumed run keeps its earlier steps, also after a crash (no
    on_train_end): the rows travel in every checkpoint (the callback's state) and the files are
    rewritten at every checkpoint and validation (a checkpoint is saved before the validation of
    its step, whose row only the file then holds)."""
    L = _lightning()

    class LossCurve(L.Callback):
        def __init__(self) -> None:
            self.rows: dict[str, list[tuple[int, float]]] = {stage: [] for stage in LOSS_CURVES}

        def state_dict(self) -> dict[str, Any]:
            return {"rows": {stage: [list(r) for r in rows] for stage, rows in self.rows.items()}}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.rows = {stage: [(int(a), float(b)) for a, b in state_dict["rows"].get(stage, [])] for stage in LOSS_CURVES}

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            for stage, name in LOSS_CURVES.items():  # resuming: each curve up to the restored step, from checkpoint and file
                rows = dict(self.rows[stage])
                if (output / name).exists():
                    pairs = (line.split(",") for line in (output / name).read_text().splitlines()[1:])
                    rows = {int(a): float(b) for a, b in pairs} | rows
                self.rows[stage] = sorted((a, b) for a, b in rows.items() if a <= trainer.global_step)

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            loss = trainer.callback_metrics.get("train/loss")
            if loss is not None and trainer.global_step % every == 0:
                self.rows["train"].append((trainer.global_step, float(loss)))

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            loss = trainer.callback_metrics.get("val/loss")
            if loss is not None and not trainer.sanity_checking:
                self.rows["val"].append((trainer.global_step, float(loss)))
                self._write(trainer)

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
            self._write(trainer)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self._write(trainer)

        def _write(self, trainer: Any) -> None:
            if trainer.is_global_zero:
                for stage, name in LOSS_CURVES.items():
                    body = "".join(f"{step},{loss:.6g}\n" for step, loss in self.rows[stage])
                    atomic_write_text(output / name, f"step,{stage}_loss\n" + body)

    return LossCurve()


CKPT_PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


def portable_checkpoint(dirpath: Path, every: int):
    """Lightning's ModelCheckpoint, saving its own state with file names relative to its directory:
    its stock state holds absolute paths, so the same training in another clone (or directory)
    wrote other checkpoint bytes, and DVC saw the model directory change. On resume the names are
    joined to the directory again, where they are."""
    L = _lightning()  # noqa: F841 (imports Lightning with its noise filters)
    from lightning.pytorch.callbacks import ModelCheckpoint

    class PortableCheckpoint(ModelCheckpoint):
        def state_dict(self) -> dict[str, Any]:
            root = str(self.dirpath)

            def rel(v: Any) -> Any:
                return os.path.relpath(v, root) if isinstance(v, str) and v.startswith(root + os.sep) else v

            state = super().state_dict()
            state.update({k: rel(state[k]) for k in CKPT_PATH_KEYS if k in state}, dirpath=".")
            state["best_k_models"] = {rel(k): v for k, v in state.get("best_k_models", {}).items()}
            return state

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            root = str(self.dirpath)

            def full(v: Any) -> Any:
                return os.path.join(root, v) if isinstance(v, str) and v and not os.path.isabs(v) else v

            state = {**state_dict, **{k: full(state_dict[k]) for k in CKPT_PATH_KEYS if k in state_dict}, "dirpath": root}
            state["best_k_models"] = {full(k): v for k, v in state_dict.get("best_k_models", {}).items()}
            super().load_state_dict(state)

        def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
            try:
                super()._save_checkpoint(trainer, filepath)
            except (OSError, RuntimeError) as e:  # torch.save writing a file raises RuntimeError on a full disk
                error = write_failure(e, filepath)  # before any cleanup: a full disk is judged while it is full
                if error is None:
                    raise
                _drop_if_damaged(Path(filepath))
                raise error from e

    return PortableCheckpoint(dirpath=dirpath, save_last=True, every_n_train_steps=every)


def progress_callback(label: str, total: int, every_s: float):
    """One line per `every_s` seconds on rank 0 (progress.py): step, loss, rate, time left."""
    L = _lightning()
    from pmoss.progress import ProgressLine

    class Progress(L.Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.line = ProgressLine(label, total, every_s, start_step=trainer.global_step)

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.is_global_zero:
                loss = trainer.callback_metrics.get("train/loss")
                self.line.update(trainer.global_step, float(loss) if loss is not None else None)

    return Progress()


def make_trainer(cfg: TrainConfig, output: Path, logger: Any, progress: bool, *, ray: bool = False, stop_after: int | None = None, label: str = "train"):
    """The Lightning Trainer of `pmoss train`; `ray=True` swaps in Ray's DDP strategy and environment.

    `progress`: Lightning's bar on a terminal; quiet (`--quiet`, every DVC stage) or with stdout no
    terminal, a plain line every PMOSS_PROGRESS_S seconds instead (progress.py).

    `stop_after` ends the run early at that step while the LR schedule still spans cfg.max_steps
    (a run cut short, e.g. by a time budget; resuming later continues the same schedule).
    """
    L = _lightning()
    callbacks: list[Any] = [portable_checkpoint(output / "checkpoints", max(1, cfg.val_every)), loss_curve_callback(output, every=10)]
    bar = progress and sys.stdout.isatty()
    if not bar and (every_s := every_s_from_env()) > 0:
        callbacks.append(progress_callback(label, min(stop_after or cfg.max_steps, cfg.max_steps), every_s))
    dist: dict[str, Any] = {}
    if ray:
        from ray.train.lightning import (
            RayDDPStrategy,
            RayLightningEnvironment,
            RayTrainReportCallback,
        )

        callbacks.append(RayTrainReportCallback())
        dist = {"strategy": RayDDPStrategy(), "plugins": [RayLightningEnvironment()], "devices": "auto", "accelerator": "auto"}
    trainer = L.Trainer(
        max_steps=min(stop_after or cfg.max_steps, cfg.max_steps), gradient_clip_val=cfg.grad_clip, logger=logger,
        precision="bf16-mixed" if torch.cuda.is_available() else "32-true", callbacks=callbacks,
        val_check_interval=cfg.val_every, check_val_every_n_epoch=None, log_every_n_steps=10, deterministic=True,
        enable_progress_bar=bar, enable_model_summary=False, num_sanity_val_steps=0,
        use_distributed_sampler=False,  # StepBatchSampler shards by rank itself
        default_root_dir=output, **dist,
    )  # fmt: skip
    if ray:
        from ray.train.lightning import prepare_trainer

        trainer = prepare_trainer(trainer)
    return trainer


def fit(data: Path, output: Path, cfg: TrainConfig, init: Path | None, algo: str, logger: Any, progress: bool = True, *,
        ray: bool = False, shuffle_returns: int | None = None, stop_after: int | None = None):  # fmt: skip
    """Seed, build, and fit (resuming from output/checkpoints/last.ckpt); returns (learner, trainer, stats, model config)."""
    L = _lightning()
    _hush_lightning(quiet=not progress)
    L.seed_everything(cfg.seed, workers=True)
    stats, model_cfg, base = prepare(data, cfg, init, algo)
    learner = build_learner(build_algorithm(algo, model_cfg, cfg, base.state_dict if base else None))
    dm = build_datamodule(data, cfg, stats, algo, shuffle_returns)
    trainer = make_trainer(cfg, output, logger, progress, ray=ray, stop_after=stop_after, label=f"train --algo {algo} {output}")
    last = resume_checkpoint(output)
    trainer.fit(learner, datamodule=dm, ckpt_path=str(last) if last else None)
    return learner, trainer, stats, model_cfg


def _damaged(ckpt: Path) -> str | None:
    """Why `ckpt` cannot be resumed from (None: a whole archive). Torch writes checkpoints as zip
    archives with a CRC per member, so reading the archive whole finds a truncated or changed one."""
    try:
        with zipfile.ZipFile(ckpt) as archive:
            bad = archive.testzip()
        return f"member {bad} fails its CRC" if bad else None
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        return brief(e)


def _drop_if_damaged(ckpt: Path) -> None:
    """After a failed write: remove what it left of `ckpt` (a whole older one stays, to resume from)."""
    if ckpt.exists() and _damaged(ckpt):
        ckpt.unlink(missing_ok=True)


def resume_checkpoint(output: Path) -> Path | None:
    """`output/checkpoints/last.ckpt` when a run left one to resume from. A damaged one (truncated
    by a kill or a full disk while it was written) is named with the command that clears it,
    instead of failing deep inside Lightning: torch writes checkpoints as zip archives with a
    CRC per member, so reading the archive whole finds a truncated or changed one."""
    last = output / "checkpoints" / "last.ckpt"
    if not last.exists():
        return None
    if problem := _damaged(last):
        raise TrainError(f"{last}: damaged checkpoint, cannot resume ({problem}); `rm {last}` to train from step 0, or restore it")
    return last


def mlflow_logger(experiment: str, run_name: str, run_id: str | None = None):
    from lightning.pytorch.loggers import MLFlowLogger

    ensure_experiment(experiment)
    return MLFlowLogger(experiment_name=experiment, tracking_uri=default_tracking_uri(), run_name=run_name, run_id=run_id,
                        artifact_location=artifact_location())  # fmt: skip


def train(data: Path, output: Path, cfg: TrainConfig, init: Path | None = None, algo: str = "dt", experiment: str = "pmoss", progress: bool = True,
          shuffle_returns: int | None = None, stop_after: int | None = None) -> Bundle:  # fmt: skip
    """Train (or fine-tune from `init`) and write `output/model.pt`; resumes from `output/checkpoints/last.ckpt`."""
    prepare(data, cfg, init, algo)  # data, --init and --algo checked (checksums included) before MLflow is set up
    resume_checkpoint(output)  # and the checkpoint a rerun resumes from
    logger = mlflow_logger(experiment, f"{algo}-{output.name}")
    learner, trainer, stats, model_cfg = fit(data, output, cfg, init, algo, logger, progress, shuffle_returns=shuffle_returns, stop_after=stop_after)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    weights = {k: v.detach().cpu() for k, v in learner.algo.model.state_dict().items()}
    return write_bundle(output, cfg, model_cfg, stats, weights, logger, algo, metrics, init, data, shuffle_returns)


def write_bundle(output: Path, cfg: TrainConfig, model_cfg: DTConfig, stats: Stats, weights: dict[str, torch.Tensor], logger: Any, algo: str,
                 metrics: dict[str, float], init: Path | None, data: Path, shuffle_returns: int | None = None, **info: Any) -> Bundle:  # fmt: skip
    logger.log_hyperparams({"algo": algo, **{f"model.{k}": v for k, v in asdict(model_cfg).items()}, **cfg.model_dump(exclude={"model"})})
    # Only what the inputs determine goes into the bundle (a DVC output): the run id and the git
    # commit go to the MLflow run and to output/mlflow-run.json (learn/logged_model.py).
    bundle = Bundle(model_cfg, stats, weights,
                    {"algo": algo, "seed": cfg.seed, "train_metrics": metrics,
                     "init": str(init) if init else None, "data": str(data), "shuffled_returns": shuffle_returns, **info})  # fmt: skip
    save_bundle(bundle, output / BUNDLE_FILE)
    from pmoss.learn.logged_model import git_commit, log_trained_model

    log_trained_model(logger.run_id, output, data, git_commit())
    return bundle


def _merge_best(base: Stats, new: Stats) -> Stats:
    """Keep the base model's normalisation; extend best returns with the fine-tuning data's."""
    best = dict(base.best_return)
    for k, v in new.best_return.items():
        best[k] = max(best.get(k, 0.0), v)
    return Stats(**{**asdict(base), "best_return": best})
