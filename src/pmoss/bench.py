"""Benchmark records: one JSON file per figure under benchmarks/results/ (see docs/benchmarks.md),
and figures with their spread (`Spread`, `ratio_spread`, `verdict`, `interleaved`): the one helper
every comparison of schedules on a real host uses (serve's phase table, runtime collection
reports, runtime benchmarks).

A record always carries a baseline measured in the same run and the ratio to it, because this
machine is noisy and absolute numbers from different runs do not compare.
"""

from __future__ import annotations

import json
import math
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def machine_summary() -> str:
    import os

    return f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}"


def simd_code() -> str:
    """Which SIMD code NumPy and torch run in this process: pmoss's AVX2 pin (docs/contracts.md) or the
    CPU's own (PMOSS_NATIVE_SIMD=1); a speed measured under one is not the other's."""
    import os

    return "native" if os.environ.get("PMOSS_NATIVE_SIMD") == "1" else "avx2 (pmoss pin)"


def write_record(name: str, metric: str, value: float, unit: str, baseline: str, baseline_value: float, *, out: Path | None = None,
                 **extra: object) -> Path:  # fmt: skip
    """Write benchmarks/results/NAME.json (or `out`, a trial run that leaves the records alone); ratio = value / baseline_value."""
    record = {
        "name": name, "metric": metric, "value": value, "unit": unit,
        "baseline": baseline, "baseline_value": baseline_value,
        "ratio": value / baseline_value if baseline_value else None,
        "machine": machine_summary(), "simd": simd_code(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]), **extra,
    }  # fmt: skip
    path = out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
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


# ---- figures with their spread -------------------------------------------------------------------
# A comparison of schedules on a real (shared, noisy) host is measured as interleaved repeats
# (ABAB..., so drift in machine load hits both sides alike) and reported as median and min-max.
# A ratio whose range includes 1.0 is noise, not a win or a loss.
WITHIN_NOISE = "within noise"
T = TypeVar("T")


@dataclass(frozen=True)
class Spread:
    """Median and min-max of n repeats of one figure."""

    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        v = [float(x) for x in values]
        if not v:
            raise ValueError("Spread.of: no values (measure at least one repeat)")
        return cls(float(statistics.median(v)), min(v), max(v), len(v))

    def as_dict(self) -> dict[str, float | int]:
        return {"median": self.median, "min": self.lo, "max": self.hi, "n": self.n}

    def format(self, scale: float = 1.0, digits: int = 2) -> str:
        """'1.23 [1.10-1.31]' (values divided by scale)."""
        m, lo, hi = (x / scale for x in (self.median, self.lo, self.hi))
        return f"{m:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def ratio_spread(a: Sequence[float], b: Sequence[float]) -> Spread:
    """Spread of a / b. Equal counts are taken as interleaved rounds (a[i] and b[i] measured next to
    each other) and paired round by round; otherwise every a[i] / b[j] counts (unpaired, wider)."""
    if not a or not b or any(x <= 0 for x in b):
        raise ValueError("ratio_spread: need at least one value on each side and a positive denominator")
    if len(a) == len(b):
        return Spread.of([x / y for x, y in zip(a, b, strict=True)])
    return Spread.of([x / y for x in a for y in b])


def verdict(ratio: Spread, higher_is_better: bool = True) -> str:
    """'win' / 'loss' when the whole range of the ratio lies above / below 1.0, else 'within noise'.
    One repeat has no spread to judge by: 'within noise' too (a single run proves nothing here)."""
    if ratio.n < 2 or ratio.lo <= 1.0 <= ratio.hi:
        return WITHIN_NOISE
    above = ratio.lo > 1.0
    return "win" if above == higher_is_better else "loss"


def sign_test(a: Sequence[float], b: Sequence[float]) -> dict[str, float | int]:
    """Paired rounds a[i] vs b[i]: in how many a is higher, and the exact two-sided sign-test p
    (ties dropped): the chance of a split at least this uneven if neither side tends higher. For
    figures whose spread is too wide for the median alone to say anything (open-loop p50 near
    saturation on a shared host)."""
    if len(a) != len(b):
        raise ValueError(f"sign_test: paired rounds need equal counts, got {len(a)} and {len(b)}")
    higher = sum(x > y for x, y in zip(a, b))
    n = higher + sum(x < y for x, y in zip(a, b))
    tail = sum(math.comb(n, k) for k in range(min(higher, n - higher) + 1)) / 2**n if n else 1.0
    return {"a_higher": higher, "n": n, "p": min(1.0, 2 * tail)}


def interleaved(runs: dict[str, Callable[[int], T]], repeats: int) -> dict[str, list[T]]:
    """Measure every named run `repeats` times, round by round, in an order rotated each round (so
    no configuration always runs first or right after the same neighbour); run(r) gets the round."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    names = list(runs)
    out: dict[str, list[T]] = {name: [] for name in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(runs[name](r))
    return out
