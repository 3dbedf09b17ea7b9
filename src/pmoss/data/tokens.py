"""Tokenisation (docs/design.md §4.4): raw snapshots -> the tokenised dataset the model trains on.

One row per episode of a kind with a node and an execution group per slice (every kind but the
OS-placed and se-numa ones): normalised per-slice features [N x F] with an availability mask [F], a
meta vector [M], actions [N] (the index of the slice's group among the machine's candidate groups,
contracts/groups.py), per-slice rewards [N] (the slice's
throughput, queries/s), the return, and a split. Normalisation statistics come from the training
split only and are saved next to the data (`stats.json`) and with every model trained on it, so
inference never needs the training data. `encode_snapshot` is the one path both the dataset build
and inference use to turn a raw snapshot into model inputs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmoss.contracts.errors import ContractError
from pmoss.contracts.groups import WIDTH_CODE, groups_of
from pmoss.contracts.machine import Machine
from pmoss.contracts.snapshot import OFFCORE_LINK, OFFCORE_NODE, SLICE_FEATURES

TOKENS_SCHEMA_VERSION = 2  # 2: actions are candidate-group indices (were worker indices)
VENDORS = ("intel", "amd", "arm", "ibm", "other")
META_FACTS = ("log_workers", "nodes", "sockets", "log_l3_mib", "remote_ratio_mean", "remote_ratio_max", "freq_ghz", "log_bw_gbps") + tuple(
    f"vendor_{v}" for v in VENDORS
)
META_OFFCORE = ("imc_read_total", "imc_read_max_share", "imc_write_total", "imc_write_max_share", "link_total", "link_max_share", "offcore_available")
META_NAMES = META_FACTS + META_OFFCORE
SPLITS = ("train", "val", "test")
NO_GROUP_KINDS = ("os-default", "os-interleave", "se-numa")  # queries go to any worker: no per-slice action
DEFAULT_WIDTH = {"sn-numa": "node"}  # raw rows written before the width column: the kind's only width
HOLDOUT = "holdout"  # split of a named hold-out group (leave-one-machine/workload-out)

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
        pa.field("actions", pa.list_(pa.int32()), nullable=False),  # [N] candidate-group index
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


def normalise_snapshot(row: dict[str, Any], machine: Machine, stats: Stats) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a model reads of a raw snapshot: (meta [M], feats [N, F]) normalised by `stats`, and each
    slice's share of the queries [N]; the one path of inference and of the critic's training inputs."""
    feats, mask, meta = encode_snapshot(row, machine)
    feats, meta = stats.features(feats) * mask, stats.meta(meta)
    q = np.asarray(row["queries"], dtype=np.float64)
    share = q / q.sum() if q.sum() > 0 else np.full(len(q), 1 / len(q))
    return meta.astype(np.float32), feats.astype(np.float32), share


def tokenise_rows(rows: list[dict[str, Any]], machines: dict[str, Machine], val: float, test: float,
                  holdout: Holdout | None = None) -> pa.Table:  # fmt: skip
    """Row-dict form of `tokenise_table` (same result); rows follow the raw snapshot schema."""
    if not rows:
        return TOKENS_SCHEMA.empty_table()
    table = pa.Table.from_pylist([{k: _plain(v) for k, v in r.items()} for r in rows])
    return tokenise_table(table, machines, val, test, holdout)


def _plain(v: Any) -> Any:
    return v.tolist() if isinstance(v, np.ndarray) else v


@dataclass(frozen=True)
class Holdout:
    """Named hold-out groups: their episodes get split `holdout` and never reach train/val/test."""

    machines: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()

    def splits(self, ids: list[str], machine: list[str], workload: list[str], val: float, test: float) -> list[str]:
        held = [m in self.machines or w in self.workloads for m, w in zip(machine, workload, strict=True)]
        return [HOLDOUT if h else split_of(i, val, test) for i, h in zip(ids, held, strict=True)]


def tokenise_table(raw: pa.Table, machines: dict[str, Machine], val: float, test: float, holdout: Holdout | None = None) -> pa.Table:
    """Raw snapshot table -> tokens table, vectorised over episodes (one numpy pass per column).

    Gives exactly what `encode_snapshot` gives row by row (inference uses that path)."""
    t = raw.filter(pc.invert(pc.is_in(raw["schedule_kind"], pa.array(NO_GROUP_KINDS))))  # those have no per-slice action
    if t.num_rows == 0:
        return TOKENS_SCHEMA.empty_table()
    n = _one_n_slices(t)
    queries = _dense(t["queries"], n, np.float64)  # [E, N]
    feats, mask = _features(t, n, np.maximum(queries, 1.0))
    names, window = t["machine"].to_pylist(), t["window_s"].to_numpy()
    facts = {m: machine_facts(machines[m]) for m in set(names)}
    meta = np.concatenate([np.stack([facts[m] for m in names]), _offcore_table(t)], axis=1)  # [E, M]
    rewards = queries / window[:, None]  # [E, N] queries/s per slice
    ids = t["episode_id"].to_pylist()
    cols = {k: t[k] for k in ("episode_id", "source", "machine", "workload", "dataset", "schedule_kind", "n_slices")}
    cols["split"] = pa.array((holdout or Holdout()).splits(ids, names, t["workload"].to_pylist(), val, test))
    cols["meta"] = _fixed_lists(meta.astype(np.float32), pa.float32())
    cols["features"] = _fixed_lists(feats.reshape(len(ids), -1), pa.float32())
    cols["feature_mask"] = _fixed_lists(mask, pa.bool_())
    cols["actions"] = _fixed_lists(_actions(t, n, machines, ids), pa.int32())
    cols["rewards"] = _fixed_lists(rewards.astype(np.float32), pa.float32())
    cols["return"] = pa.array(rewards.sum(1))
    return pa.Table.from_arrays([_chunk(cols[f.name]) for f in TOKENS_SCHEMA], schema=TOKENS_SCHEMA)


def _one_n_slices(t: pa.Table) -> int:
    sizes = sorted(set(t["n_slices"].to_pylist()))
    if len(sizes) != 1:
        raise ContractError(f"field 'n_slices': one dataset needs one slice count, found {sizes}; build them separately")
    return int(sizes[0])


def _chunk(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _dense(col: pa.ChunkedArray, n: int, dtype: type) -> np.ndarray:
    """A non-null list column of n-long lists -> [E, n]."""
    return _chunk(col).flatten().to_numpy(zero_copy_only=False).astype(dtype, copy=False).reshape(-1, n)


def _features(t: pa.Table, n: int, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log1p(count per query) [E, N, F] and availability [E, F]; a null counter stays 0 and unmasked."""
    E = t.num_rows
    feats = np.zeros((E, n, len(SLICE_FEATURES)), dtype=np.float32)
    mask = np.zeros((E, len(SLICE_FEATURES)), dtype=bool)
    for j, name in enumerate(SLICE_FEATURES):
        col = _chunk(t[name])
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        if valid.any():
            counts = _dense(col, n, np.float64)  # flatten() skips null lists: rows of `valid` only
            feats[valid, :, j] = np.log1p(np.maximum(counts, 0.0) / queries[valid])
            mask[valid, j] = True
    return feats, mask


def _offcore_table(t: pa.Table) -> np.ndarray:
    """`_offcore` for every row at once -> [E, len(META_OFFCORE)]."""
    E, window = t.num_rows, t["window_s"].to_numpy()
    out = []
    for names in ((OFFCORE_NODE[0],), (OFFCORE_NODE[1],), OFFCORE_LINK):
        total, peak = _summed_lists([_chunk(t[c]) for c in names], E)
        out += [np.log1p(total / window / 1e9), np.divide(peak, total, out=np.zeros(E), where=total > 0)]
    out.append(_chunk(t[OFFCORE_NODE[0]]).is_valid().to_numpy(zero_copy_only=False).astype(np.float64))
    return np.stack(out, axis=1).astype(np.float32)


def _summed_lists(cols: list[pa.Array], E: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: sum and max of the element-wise sum of the non-null lists among `cols` (0 if none).

    Rows are grouped by which columns are non-null; within a group the lists line up (same links)."""
    total, peak = np.zeros(E), np.zeros(E)
    valid = np.stack([c.is_valid().to_numpy(zero_copy_only=False) for c in cols])  # [C, E]
    for pattern in {tuple(v) for v in valid.T.tolist() if any(v)}:
        sel = (valid.T == np.asarray(pattern)).all(1)
        parts = [c.filter(pa.array(sel)) for c, on in zip(cols, pattern, strict=True) if on]
        values = sum(p.flatten().to_numpy(zero_copy_only=False).astype(np.float64) for p in parts)
        parents = pc.list_parent_indices(parts[0]).to_numpy()
        rows = np.flatnonzero(sel)
        total[rows] = np.bincount(parents, values, minlength=len(rows))
        top = np.full(len(rows), -np.inf)
        np.maximum.at(top, parents, values)
        peak[rows] = np.where(np.isfinite(top), top, 0.0)
    return total, peak


def _actions(t: pa.Table, n: int, machines: dict[str, Machine], ids: list[str]) -> np.ndarray:
    """Candidate-group index of every slice [E, N] from its anchor core and width; an anchor that is
    not a worker (or -1 with a width other than node) is a contract error."""
    cores = _dense(t["core"], n, np.int64)
    nodes = _dense(t["node"], n, np.int64)
    kinds = t["schedule_kind"].to_pylist()
    if "width" in t.column_names and t["width"].null_count < t.num_rows:
        col = _chunk(t["width"])
        given = col.is_valid().to_numpy(zero_copy_only=False)
        codes = np.array([WIDTH_CODE.get(w, -1) for w in col.flatten().to_pylist()], dtype=np.int64)
        widths = np.array([WIDTH_CODE[DEFAULT_WIDTH.get(k, "thread")] for k in kinds], dtype=np.int64)[:, None].repeat(n, 1)  # [E, N]
        widths[given] = codes.reshape(-1, n)
    else:
        widths = np.array([WIDTH_CODE[DEFAULT_WIDTH.get(k, "thread")] for k in kinds], dtype=np.int64)[:, None].repeat(n, 1)
    out = np.full(cores.shape, -1, dtype=np.int64)
    names = np.asarray(t["machine"].to_pylist())
    for name in set(names.tolist()):
        m, rows = machines[name], names == name
        g = groups_of(m)
        lut = np.full(max(m.cpu_by_id) + 2, -1, dtype=np.int64)  # last entry catches out-of-range cores
        for cpu, idx in m.worker_index.items():
            lut[cpu] = idx
        first = np.array([m.worker_index[ws[0]] for ws in m.workers_by_node])  # a node-wide group's anchor
        w = lut[np.clip(cores[rows], -1, len(lut) - 1)]
        nd = np.clip(nodes[rows], 0, len(first) - 1)
        w = np.where((w < 0) & (widths[rows] == WIDTH_CODE["node"]) & (cores[rows] == -1), first[nd], w)
        ok = (w >= 0) & (widths[rows] >= 0)
        out[rows] = np.where(ok, g.of_worker[np.clip(widths[rows], 0, None), np.clip(w, 0, None)], -1)
    bad = np.flatnonzero((out < 0).any(1))
    if len(bad):
        raise ContractError(f"episode {ids[bad[0]]}: fields 'core'/'width' name a group that is not one of {names[bad[0]]}'s workers")
    return out


def _fixed_lists(a: np.ndarray, typ: pa.DataType) -> pa.Array:
    """[E, K] -> list<typ> with K entries per row, zero-copy from one flat buffer."""
    E, K = a.shape
    offsets = pa.array(np.arange(E + 1, dtype=np.int32) * K)
    return pa.ListArray.from_arrays(offsets, pa.array(a.reshape(-1), type=typ))


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
    n_slices: int = 0

    def features(self, x: np.ndarray) -> np.ndarray:
        """Per-slice features [..., F] as a model reads them (`_scale`)."""
        return _scale(x, self.feature_mean, self.feature_std)

    def meta(self, x: np.ndarray) -> np.ndarray:
        """Machine meta [..., M] as a model reads them (`_scale`)."""
        return _scale(x, self.meta_mean, self.meta_std)

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
        if data.get("schema_version", 0) < TOKENS_SCHEMA_VERSION:
            raise ContractError(f"{source}: tokens schema version {data.get('schema_version')} (worker actions); rebuild the dataset "
                                "(`pmoss dataset build`) and retrain: actions are execution groups since version 2")
        return cls(**data)


STD_FLOOR = 1e-6  # added to every spread


def _scale(x: np.ndarray, mean: list[float], std: list[float]) -> np.ndarray:
    """(x - mean) / std. A column constant in the training split has spread STD_FLOOR, so a value
    that departs from it reads ~1e6: the training tokens' remote_dram_loads and link_* are 0 (group
    schedules keep memory local) and an os-default snapshot's are not, and the DT then reads every
    slice of it as that one column. Reading such columns as 0 instead (with inputs clipped to +-10)
    was measured and lost: paper grid dt-base 0.934 -> 0.749, dt-critic 1.031 -> 0.993 (docs/benchmarks-model.md).
    A critic may carry statistics of the raw snapshots it reads instead (critic.snapshot_stats)."""
    return (x - np.asarray(mean, dtype=np.float64)) / np.asarray(std, dtype=np.float64)


def compute_stats(table: pa.Table) -> Stats:
    """Normalisation statistics of the training split only (val/test/holdout never leak into them)."""
    train = table.filter(pc.equal(table["split"], "train"))
    if train.num_rows == 0:
        raise ContractError("tokens: the training split is empty; collect more episodes")
    n = int(train["n_slices"][0].as_py())
    f = len(SLICE_FEATURES)
    feats = _dense(train["features"], n * f, np.float32).reshape(-1, n, f)  # [E, N, F]
    mask = _dense(train["feature_mask"], f, bool)  # [E, F]
    meta = _dense(train["meta"], len(META_NAMES), np.float64)
    best: dict[str, float] = {}
    for mch, wl, ret in zip(train["machine"].to_pylist(), train["workload"].to_pylist(), train["return"].to_pylist(), strict=True):
        key = f"{mch}|{wl}"
        best[key] = max(best.get(key, 0.0), ret)
    return Stats(**spreads(feats, mask, meta), best_return=best, n_slices=n)


def spreads(feats: np.ndarray, mask: np.ndarray, meta: np.ndarray) -> dict[str, list[float]]:
    """Stats' mean and spread fields of features [E, N, F] (a column over the episodes that have it,
    `mask` [E, F]) and meta [E, M]: the tokens' (compute_stats) and a critic's (critic.snapshot_stats)."""
    f = feats.shape[2]
    mean, std = np.zeros(f), np.ones(f)
    for j in range(f):
        vals = feats[mask[:, j], :, j].astype(np.float64)
        if vals.size:
            mean[j], std[j] = float(vals.mean()), float(vals.std()) + STD_FLOOR
    meta = meta.astype(np.float64)
    return {"feature_mean": mean.tolist(), "feature_std": std.tolist(), "meta_mean": meta.mean(0).tolist(), "meta_std": (meta.std(0) + STD_FLOOR).tolist()}
