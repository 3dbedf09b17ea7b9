"""Workloads and datasets: the same names and parameters drive the C generator and the simulator.

A workload is an operation mix plus a key distribution (and scan lengths); a dataset is the
distribution of the loaded keys. Names are lowercase and shared with `runtime/` verbatim.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pmoss.contracts.errors import ContractError

KeyDistribution = Literal["uniform", "zipf", "latest", "hotspot"]
DATASETS = ("dense", "uniform", "clustered")


class OpMix(BaseModel):
    """Fractions of each operation; they sum to 1."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    read: float = Field(default=0.0, ge=0, le=1)
    update: float = Field(default=0.0, ge=0, le=1)
    insert: float = Field(default=0.0, ge=0, le=1)
    scan: float = Field(default=0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> OpMix:
        total = self.read + self.update + self.insert + self.scan
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"operation fractions sum to {total:g}, not 1")
        return self

    @property
    def write(self) -> float:
        return self.update + self.insert


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    mix: OpMix
    distribution: KeyDistribution = "zipf"
    zipf_theta: float = Field(default=0.99, ge=0, lt=1.5)
    hotspot_fraction: float = Field(default=0.2, gt=0, le=1)  # share of keys that are hot
    hotspot_share: float = Field(default=0.8, gt=0, le=1)  # share of accesses that hit them
    scan_min: int = Field(default=1, ge=1)
    scan_max: int = Field(default=100, ge=1)  # scan lengths uniform in [scan_min, scan_max]

    @property
    def mean_scan(self) -> float:
        return (self.scan_min + self.scan_max) / 2

    def params_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude={"name"}), sort_keys=True)


def _w(name: str, dist: KeyDistribution = "zipf", **mix: float) -> Workload:
    return Workload(name=name, mix=OpMix(**mix), distribution=dist)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        _w("ycsb-a", read=0.5, update=0.5),
        _w("ycsb-b", read=0.95, update=0.05),
        _w("ycsb-c", read=1.0),
        _w("ycsb-d", "latest", read=0.95, insert=0.05),
        _w("ycsb-e", scan=0.95, insert=0.05),
        _w("scan", scan=1.0),
        _w("rsi-20-30-50", read=0.2, scan=0.3, insert=0.5),
        _w("rsi-25-50-25", read=0.25, scan=0.5, insert=0.25),
    ]
}

# The paper's five workloads (docs/design.md §5), all Zipf 0.99.
PAPER_WORKLOADS = ("ycsb-a", "ycsb-c", "scan", "rsi-20-30-50", "rsi-25-50-25")


def get_workload(name: str, field: str = "workload") -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ContractError(f"{field}: unknown workload '{name}' (known: {', '.join(WORKLOADS)})") from None


def check_dataset(name: str, field: str = "dataset") -> str:
    if name not in DATASETS:
        raise ContractError(f"{field}: unknown dataset '{name}' (known: {', '.join(DATASETS)})")
    return name
