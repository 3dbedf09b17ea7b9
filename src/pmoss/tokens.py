"""Tokenisation (DESIGN §4.4): raw snapshots -> the tokenised dataset the model trains on.

One row per episode of a one-core kind: normalised per-slice features [N x F] with an availability
mask [F], a meta vector [M], actions [N] (worker-core index), per-slice rewards [N] (the slice's
throughput, queries/s), the return, and a split. Normalisation statistics come from the training
split only and are saved next to the data (`stats.json`) and with every model trained on it, so
inference never needs the training data. `encode_snapshot` is the one path both the dataset build
and inference use to turn a raw snapshot into model inputs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmoss.errors import ContractError
from pmoss.machine import Machine
from pmoss.schedule import ONE_CORE_KINDS
from pmoss.snapshot import OFFCORE_LINK, OFFCORE_NODE, SLICE_FEATURES

TOKENS_SCHEMA_VERSION = 1
VENDORS = ("intel", "amd", "arm", "ibm", "other")
META_FACTS = ("log_workers", "nodes", "sockets", "log_l3_mib", "remote_ratio_mean", "remote_ratio_max", "freq_ghz", "log_bw_gbps") + tuple(
    f"vendor_{v}" for v in VENDORS
)
META_OFFCORE = ("imc_read_total", "imc_read_max_share", "imc_write_total", "imc_write_max_share", "link_total", "link_max_share", "offcore_available")
META_NAMES = META_FACTS + META_OFFCORE
SPLITS = ("train", "val", "test")

TOKENS_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("machine", pa.string(), nullable=False),
        pa.field("workload", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("schedule_kind", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("n_slices", pa.int32(), nullable=False),
        pa.field("meta", pa.list_(pa.float32()), nullable=False),  # [M], raw (normalised in the loader)
        pa.field("features", pa.list_(pa.float32()), nullable=False),  # [N*F] log per-query, raw
        pa.field("feature_mask", pa.list_(pa.bool_()), nullable=False),  # [F]
        pa.field("actions", pa.list_(pa.int16()), nullable=False),  # [N] worker index
        pa.field("rewards", pa.list_(pa.float32()), nullable=False),  # [N] queries/s per slice
        pa.field("return", pa.float64(), nullable=False),
    ],
    metadata={"pmoss.schema": "tokens", "pmoss.schema_version": str(TOKENS_SCHEMA_VERSION)},
)


def split_of(episode_id: str, val: float = 0.1, test: float = 0.1) -> str:
    """Stable under growth: depends only on the episode id."""
    u = int.from_bytes(hashlib.sha256(episode_id.encode()).digest()[:8], "little") / 2**64
    return "test" if u < test else "val" if u < test + val else "train"


def machine_facts(m: Machine) -> np.ndarray:
    d = np.asarray(m.distance_ns())
    local = np.diag(d)[:, None]
    ratio = d / local
    remote = ratio[~np.eye(len(d), dtype=bool)] if len(d) > 1 else np.ones(1)
    facts = [np.log(m.n_workers), m.numa_nodes, m.sockets, np.log(m.caches.l3_mib), remote.mean(), remote.max(), m.freq_ghz,
             np.log(np.mean(m.mem_bandwidth_gbps))]  # fmt: skip
    return np.asarray(facts + [float(m.vendor == v) for v in VENDORS], dtype=np.float32)


def _offcore(row: dict[str, Any]) -> np.ndarray:
    """Totals in GB/s (log) and how concentrated they are on one node / link; zeros when absent."""
    window = row["window_s"]
    out = []
    for names in (OFFCORE_NODE[:1], OFFCORE_NODE[1:], OFFCORE_LINK):
        vals = [np.asarray(row[n], dtype=np.float64) for n in names if row.get(n) is not None]
        v = np.sum(vals, axis=0) if vals else np.zeros(0)
        total = v.sum()
        out += [np.log1p(total / window / 1e9), v.max() / total if total > 0 else 0.0]
    available = float(row.get(OFFCORE_NODE[0]) is not None)
    return np.asarray(out + [available], dtype=np.float32)


def encode_snapshot(row: dict[str, Any], machine: Machine) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features [N, F] log1p(count per query), mask [F], meta [M]) of one raw episode row."""
    n = row["n_slices"]
    queries = np.maximum(np.asarray(row["queries"], dtype=np.float64), 1.0)
    feats = np.zeros((n, len(SLICE_FEATURES)), dtype=np.float32)
    mask = np.zeros(len(SLICE_FEATURES), dtype=bool)
    for j, name in enumerate(SLICE_FEATURES):
        if row.get(name) is not None:
            feats[:, j] = np.log1p(np.maximum(np.asarray(row[name], dtype=np.float64), 0.0) / queries)
            mask[j] = True
    meta = np.concatenate([machine_facts(machine), _offcore(row)])
    return feats, mask, meta


def tokenise_rows(rows: list[dict[str, Any]], machines: dict[str, Machine], val: float, test: float) -> pa.Table:
    out: dict[str, list[Any]] = {f.name: [] for f in TOKENS_SCHEMA}
    for row in rows:
        if row["schedule_kind"] not in ONE_CORE_KINDS:
            continue  # shared kinds have no per-slice action to learn
        m = machines[row["machine"]]
        feats, mask, meta = encode_snapshot(row, m)
        rewards = np.asarray(row["queries"], dtype=np.float64) / row["window_s"]
        for k in ("episode_id", "source", "machine", "workload", "dataset", "schedule_kind", "n_slices"):
            out[k].append(row[k])
        out["split"].append(split_of(row["episode_id"], val, test))
        out["meta"].append(meta)
        out["features"].append(feats.reshape(-1))
        out["feature_mask"].append(mask)
        out["actions"].append([m.worker_index[c] for c in row["core"]])
        out["rewards"].append(rewards.astype(np.float32))
        out["return"].append(float(rewards.sum()))
    return pa.Table.from_pydict(out, schema=TOKENS_SCHEMA)


@dataclass
class Stats:
    """Normalisation statistics, computed on the training split, shipped with data and models."""

    schema_version: int = TOKENS_SCHEMA_VERSION
    feature_names: list[str] = field(default_factory=lambda: list(SLICE_FEATURES))
    meta_names: list[str] = field(default_factory=lambda: list(META_NAMES))
    feature_mean: list[float] = field(default_factory=list)
    feature_std: list[float] = field(default_factory=list)
    meta_mean: list[float] = field(default_factory=list)
    meta_std: list[float] = field(default_factory=list)
    best_return: dict[str, float] = field(default_factory=dict)  # "machine|workload" -> best qps in train
    tile_rows: int = 1
    tile_cols: int = 1
    n_slices: int = 0

    def best(self, machine: str, workload: str) -> float:
        key = f"{machine}|{workload}"
        if key in self.best_return:
            return self.best_return[key]
        same_machine = [v for k, v in self.best_return.items() if k.startswith(f"{machine}|")]
        if same_machine:  # unseen workload on a known machine
            return float(np.median(same_machine))
        if not self.best_return:
            raise ContractError("stats: best_return is empty; the training split had no episode")
        return float(np.median(list(self.best_return.values())))  # unseen machine

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str, source: str = "stats") -> Stats:
        data = json.loads(text)
        if data.get("schema_version", 0) > TOKENS_SCHEMA_VERSION:
            raise ContractError(f"{source}: field 'schema_version' is newer than this pmoss")
        return cls(**data)


def compute_stats(table: pa.Table, tile: tuple[int, int]) -> Stats:
    train = table.filter(pc.equal(table["split"], "train"))
    if train.num_rows == 0:
        raise ContractError("tokens: the training split is empty; collect more episodes")
    n = int(train["n_slices"][0].as_py())
    f = len(SLICE_FEATURES)
    feats = np.stack([np.asarray(x, dtype=np.float32).reshape(n, f) for x in train["features"].to_pylist()])  # [E, N, F]
    mask = np.stack([np.asarray(x) for x in train["feature_mask"].to_pylist()])  # [E, F]
    mean, std = np.zeros(f), np.ones(f)
    for j in range(f):
        vals = feats[mask[:, j], :, j]
        if vals.size:
            mean[j], std[j] = float(vals.mean()), float(vals.std()) + 1e-6
    meta = np.stack([np.asarray(x) for x in train["meta"].to_pylist()])
    best: dict[str, float] = {}
    for mch, wl, ret in zip(train["machine"].to_pylist(), train["workload"].to_pylist(), train["return"].to_pylist(), strict=True):
        key = f"{mch}|{wl}"
        best[key] = max(best.get(key, 0.0), ret)
    return Stats(
        feature_mean=mean.tolist(), feature_std=std.tolist(),
        meta_mean=meta.mean(0).tolist(), meta_std=(meta.std(0) + 1e-6).tolist(),
        best_return=best,
        tile_rows=tile[0], tile_cols=tile[1], n_slices=n,
    )  # fmt: skip


def tile_shape(machines: list[Machine], min_rows: int = 0, min_cols: int = 0) -> tuple[int, int]:
    """Rows = NUMA nodes, columns = workers per node; padded so unseen machines can still fit."""
    rows = max([min_rows] + [m.numa_nodes for m in machines])
    cols = max([min_cols] + [len(w) for m in machines for w in m.workers_by_node])
    return rows, cols
