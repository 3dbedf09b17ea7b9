"""Render benchmarks/results/*.json into the results table of docs/benchmarks.md (between markers).

`make bench` runs every benchmark and then this, so the table always shows the latest records
with the exact command that produced each one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "–" if v is None else str(v)


def ratio(r: dict) -> str:
    """The ratio, and where the record has repeats its paired range and verdict (pmoss.bench)."""
    sp = r.get("ratio_spread")
    if not sp:
        return fmt(r.get("ratio"))
    text = f"{sp['median']:.4g} [{sp['min']:.3g}–{sp['max']:.3g}] {r.get('verdict', '')}".rstrip()
    if st := r.get("p50_sign_test"):  # open-loop p50: the median alone says little there
        text += f"; higher in {st['a_higher']} of {st['n']} rounds (sign test p {st['p']:.2g})"
    return text


def table() -> str:
    lines = ["| name | metric | value | baseline (same run) | ratio | target met | date | command |", "|---|---|---|---|---|---|---|---|"]
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        r = json.loads(path.read_text())
        if "name" not in r:
            continue  # a table, not a one-figure record (e.g. groups_grid_*.json: docs/benchmarks-groups.md)
        met = {True: "yes", False: "**no**"}.get(r.get("meets_target"), "–")
        if r.get("saturated"):  # the baseline itself fell short of the offered rate: no verdict at this load
            met = "– (saturated)"
        lines.append(f"| {r['name']} | {r['metric']} | {fmt(r['value'])} {r['unit']} | {r['baseline']}: {fmt(r['baseline_value'])} | {ratio(r)} | {met} | {r['date'][:10]} | `{r['command']}` |")
    return "\n".join(lines)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options: --help only
    text = DOC.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{BEGIN}\n{table()}\n{END}{tail}")
    print(f"updated {DOC}")


if __name__ == "__main__":
    main()
