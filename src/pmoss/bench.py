"""Benchmark records: one JSON file per figure under benchmarks/results/ (see docs/benchmarks.md).

A record always carries a baseline measured in the same run and the ratio to it, because this
machine is noisy and absolute numbers from different runs do not compare.
"""

from __future__ import annotations

import json
import platform
import shlex
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def machine_summary() -> str:
    import os

    return f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}"


def write_record(name: str, metric: str, value: float, unit: str, baseline: str, baseline_value: float, **extra: object) -> Path:
    """Write benchmarks/results/NAME.json; ratio = value / baseline_value."""
    record = {
        "name": name, "metric": metric, "value": value, "unit": unit,
        "baseline": baseline, "baseline_value": baseline_value,
        "ratio": value / baseline_value if baseline_value else None,
        "machine": machine_summary(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]), **extra,
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    return path


def best_time(fn: Callable[[], object], repeat: int = 5) -> float:
    """Best wall time of `repeat` calls (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
