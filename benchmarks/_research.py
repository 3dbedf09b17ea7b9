"""What the research harnesses in benchmarks/ share (seed_spread.py, load_cap_sweep.py): the
validation sets they may read (choices are made on validation seeds, never on the evaluation's) and
the geo-mean they report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path


def validation_sets(paths: Sequence[Path]) -> dict:
    """{file name: EvalConfig} of validation sets for a research harness (no oracle); a set with the
    evaluation's seed base is refused (ContractError naming it): choices never read evaluation seeds."""
    from pmoss.contracts.errors import ContractError
    from pmoss.contracts.io import load_model_with_flags
    from pmoss.evaluate import EVAL_SEED_BASE, EvalConfig

    sets = {}
    for path in paths:
        sets[path.name] = load_model_with_flags(EvalConfig, path, {"oracle": False})
        if sets[path.name].seed_base == EVAL_SEED_BASE:
            raise ContractError(f"{path}: seed_base is the evaluation's ({EVAL_SEED_BASE}); pass a validation set")
    return sets


def geo(xs: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))
