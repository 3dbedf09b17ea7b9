"""The cell's measured history: what each kind of candidate (greedy, sample, each heuristic)
measured in a machine x workload's proposals, which dt-critic adds, weighted, to its critics'
predictions (`pmoss attach-critic --history`, rollout.critic_choice)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pmoss.contracts.errors import ContractError
from pmoss.contracts.snapshot import read_raw
from pmoss.learn.rollout import candidate_kind


def kind_history(dirs: list[Path]) -> dict[str, dict[str, float]]:
    """What the testbed measured of each candidate kind in each cell ("machine|workload"), from raw
    proposals (`pmoss propose`'s output): per snapshot, a kind's mean throughput over the snapshot's
    best candidate; then the mean over the cell's snapshots. It catches the critic's rare but costly
    mistakes of kind (a heuristic served over samples measured 1.3x better)."""
    by_snapshot: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for d in dirs:
        table = read_raw(d).select(["machine", "workload", "schedule_provenance", "throughput_qps"])
        for r in table.to_pylist():
            p = json.loads(r["schedule_provenance"] or "{}")
            if p.get("generator") != "pmoss propose":
                continue
            by_snapshot.setdefault((f"{r['machine']}|{r['workload']}", p["snapshot"]), []).append((candidate_kind(p["candidate"]), r["throughput_qps"]))
    if not by_snapshot:
        raise ContractError(f"--history {', '.join(map(str, dirs))}: no proposals (episodes of `pmoss propose`) found")
    shares: dict[str, dict[str, list[float]]] = {}
    for (cell, _), measured in by_snapshot.items():
        best = max(q for _, q in measured)
        kinds: dict[str, list[float]] = {}
        for kind, q in measured:
            kinds.setdefault(kind, []).append(q / best)
        for kind, v in kinds.items():
            shares.setdefault(cell, {}).setdefault(kind, []).append(float(np.mean(v)))
    return {cell: {kind: float(np.mean(v)) for kind, v in sorted(kinds.items())} for cell, kinds in sorted(shares.items())}
