"""Fidelity table rows and checks; the full 5 x 5 table is slow."""

import pytest

from pmoss.policies import BASELINE_KINDS
from pmoss.sim import fidelity_checks, fidelity_table
from pmoss.sim.fidelity import MAX_SPREAD


def test_fidelity_rows_on_a_small_grid():
    rows = fidelity_table(["intel-snb-4s", "nvidia-grace"], ["ycsb-c"], n_slices=64, oracle_budget=48)
    assert len(rows) == 2
    for r in rows:
        assert r["source"] == "sim" and r["best_baseline"] in BASELINE_KINDS
        assert r["spread"] >= 1 and r["spread_with_oracle"] >= r["spread"]
    checks = fidelity_checks(rows)
    assert checks["runtime_within_25pct"].startswith("pending")


@pytest.mark.slow
def test_paper_grid_winners_differ_and_spread_is_paper_like():
    checks = fidelity_checks(fidelity_table(oracle_budget=200))
    assert checks["winners_differ"]
    assert checks["max_spread"] <= MAX_SPREAD
