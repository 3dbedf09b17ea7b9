"""Fidelity table rows and checks; the full 5 x 5 table is slow."""

import json
from pathlib import Path

import pytest

from pmoss.contracts.policies import BASELINE_KINDS
from pmoss.sim import fidelity_checks, fidelity_table
from pmoss.sim.fidelity import MAX_SPREAD, PENDING, runtime_check


def test_fidelity_rows_on_a_small_grid():
    rows = fidelity_table(["intel-snb-4s", "nvidia-grace"], ["ycsb-c"], n_slices=64, oracle_budget=48)
    assert len(rows) == 2
    for r in rows:
        assert r["source"] == "sim" and r["best_baseline"] in BASELINE_KINDS
        assert r["spread"] >= 1 and r["spread_with_oracle"] >= r["spread"]
    checks = fidelity_checks(rows, results=Path("/nonexistent-results-dir"))
    assert checks["runtime_within_25pct"] == PENDING


def test_runtime_check_reports_the_latest_recorded_run(tmp_path):
    def record(name, run_id, ratio, within):
        (tmp_path / f"sim_vs_runtime_{name}.json").write_text(json.dumps({
            "name": f"sim_vs_runtime_{name}", "ratio": ratio, "within_25pct": within, "wall_within_25pct": False,
            "run_id": run_id, "date": run_id, "machine": "test host", "check": "cpu-normalised"}))

    assert runtime_check(tmp_path) == PENDING
    record("x_ycsb_c_16cpu", "2026-01-01T00:00:00+00:00", 1.0, True)
    assert runtime_check(tmp_path) == PENDING  # only another host's records (--tag)
    record("x_ycsb_a", "2026-01-01T00:00:00+00:00", 2.0, False)
    record("x_ycsb_c", "2026-01-02T00:00:00+00:00", 1.1, True)
    record("x_rsi_20_30_50", "2026-01-02T00:00:00+00:00", 1.5, False)
    record("x_ycsb_c_16cpu", "2026-01-03T00:00:00+00:00", 3.0, False)  # another host's (--tag), newer
    got = runtime_check(tmp_path)
    assert got["run"] == "2026-01-02T00:00:00+00:00" and got["within_25pct"] == "1/2" and got["wall_clock_within_25pct"] == "0/2"
    assert got["ratios"] == {"x_ycsb_c": 1.1, "x_rsi_20_30_50": 1.5} and got["measure"] == "cpu-normalised"
    assert got["other_hosts"] == {"16cpu": {"run": "2026-01-03T00:00:00+00:00", "host": "test host", "within_25pct": "0/1",
                                            "wall_clock_within_25pct": "0/1"}}


@pytest.mark.slow
@pytest.mark.ci  # ~5 s: it caught a model change (dense appends) that pushed the spread to 10x
def test_paper_grid_winners_differ_and_spread_is_paper_like():
    checks = fidelity_checks(fidelity_table(oracle_budget=200))
    assert checks["winners_differ"]
    assert checks["max_spread"] <= MAX_SPREAD
