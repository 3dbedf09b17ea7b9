"""The inference load cap against the policies it masks: each policy and mask-only at several caps,
on validation cells (research harness, source=sim; issue #41).

The load cap (`contracts.schedule.LOAD_CAP`, docs/model.md) keeps every worker under a multiple of
its fair share of the snapshot's queries. This sets that multiple in each bundle's inference
settings (`info["inference"]["load_cap"]`, which `propose` reads, as a registered version may carry
its own), builds mask-only the way `pmoss evaluate` does (the first model's network untrained,
`--inits` initialisations, the per-cell median), measures every policy greedily (or as it serves,
critic included) in every cell of each --val set with the evaluation's harness (no oracle), and
reports each policy's geo-mean over the cell's best baseline per cap and set.

The sets must be validation sets: nothing here reads an evaluation seed.

    python benchmarks/load_cap_sweep.py --model dt-base=models/base --model dt-improved=models/improved \
        --val datasets/pools/val-generated.yaml --val datasets/pools/val-tiny.yaml \
        --val datasets/pools/val-generated-2.yaml --caps 0.9,0.95,1.0,1.05,1.1,1.25,1.5 [--out F]

(after `make demo`, in the project root: the demo's models)
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path


from pmoss.bench import write_record
from pmoss.contracts.errors import ContractError
from pmoss.contracts.schedule import LOAD_CAP
from pmoss.evaluate import MASK_CONTROL, evaluate_cells, fold_mask_inits, mask_inits_of
from pmoss.learn.bundle import load_bundle
from _research import geo, validation_sets  # benchmarks/_research.py, beside this script


def with_cap(bundle, cap: float):
    return dataclasses.replace(bundle, info={**bundle.info, "inference": {**bundle.info.get("inference", {}), "load_cap": cap}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR of a model bundle (repeatable; the first also gives mask-only)")
    ap.add_argument("--val", type=Path, action="append", required=True, help="a validation set (repeatable)")
    ap.add_argument("--caps", default="0.9,0.95,1.0,1.05,1.1,1.25,1.5", help="load caps, comma-separated (fair shares)")
    ap.add_argument("--reference-cap", type=float, default=1.25, help="the record's baseline: the first model at this cap (default 1.25, the cap before 2026-11-28)")
    ap.add_argument("--inits", type=int, default=5, help="mask-only initialisations, as pmoss evaluate's --mask-inits (default 5)")
    ap.add_argument("--out", type=Path, help="write the result here instead of the record (a trial run)")
    a = ap.parse_args()
    try:
        caps = [float(c) for c in a.caps.split(",")]
    except ValueError:
        ap.error(f"--caps {a.caps!r}: comma-separated numbers")
    if not caps or min(caps) <= 0:
        ap.error(f"--caps {a.caps}: positive numbers")
    if a.reference_cap not in caps:
        ap.error(f"--reference-cap {a.reference_cap}: not among --caps {a.caps}")
    try:
        sets = validation_sets(a.val)
    except ContractError as e:
        ap.error(str(e))
    specs = dict(m.split("=", 1) for m in a.model)
    models = {name: load_bundle(Path(d)) for name, d in specs.items()}

    table: dict[str, dict[str, dict[str, float]]] = {}
    for cap in caps:
        bundles = {n: with_cap(b, cap) for n, b in models.items()}
        bundles |= mask_inits_of(next(iter(bundles.values())), a.inits)  # untrained_like keeps the cap
        for name, cfg in sets.items():
            cells = evaluate_cells(cfg, bundles, progress=False)
            fold_mask_inits(cells)
            ratios = {p: [c[p] / max(c[k] for k in cfg.baselines) for c in cells.values()] for p in [*models, MASK_CONTROL]}
            table.setdefault(str(cap), {})[name] = {p: round(geo(r), 4) for p, r in ratios.items()}
            print(f"load cap {cap}: {name}: " + ", ".join(f"{p} {v:.3f}" for p, v in table[str(cap)][name].items()), flush=True)

    first = next(iter(models))
    mean_over_sets = {c: geo([per[s][first] for s in sets]) for c, per in table.items()}
    best = max(mean_over_sets, key=mean_over_sets.get)
    record = dict(
        name="load_cap_sweep", metric=f"source=sim: geo-mean over the validation sets ({', '.join(sets)}) of {first}'s throughput over the "
        f"cell's best baseline at the cap that does best for it ({best}; landed LOAD_CAP {LOAD_CAP})",
        value=mean_over_sets[best], unit="x best baseline", baseline=f"{first} at load cap {a.reference_cap}",
        baseline_value=mean_over_sets[str(a.reference_cap)], models=specs, caps=caps, mask_inits=a.inits, geo_mean=table,
    )  # fmt: skip
    write_record(**record, out=a.out)


if __name__ == "__main__":
    main()
