"""Progress lines under `--quiet` / a pipe (progress.py): at most one per interval, with
step, loss, rate and time left; a real quiet training run prints them. The non-training stages
(collect, propose, evaluate, post-train) print done/total lines on the interval from a thread."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest
from test_learners import TINY, make_tokens

from pmoss.contracts.errors import PmossError
from pmoss.progress import PROGRESS_ENV, ProgressLine, Ticker, clock_text, every_s_from_env
from pmoss.learn.train import TrainConfig, train


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_one_line_per_interval_with_step_loss_rate_and_time_left():
    clock, out = Clock(), io.StringIO()
    p = ProgressLine("pretrain", total=1000, every_s=30, out=out, clock=clock)
    clock.t += 10
    assert p.update(100, 1.5) is None  # inside the interval: silent
    clock.t += 20
    assert p.update(300, 0.81234) == "pretrain: step 300/1000 (30%), loss 0.8123, 10.0 steps/s, 1:10 left"
    clock.t += 29
    assert p.update(590, 0.7) is None
    clock.t += 1
    assert p.update(600, None) == "pretrain: step 600/1000 (60%), 10.0 steps/s, 0:40 left"
    assert out.getvalue().count("\n") == 2


def test_resumed_run_counts_its_own_steps_and_zero_turns_lines_off():
    clock = Clock()
    p = ProgressLine("x", total=200, every_s=5, out=io.StringIO(), clock=clock, start_step=100)
    clock.t += 5
    assert "10.0 steps/s, 0:05 left" in p.update(150, 1.0)
    off = ProgressLine("x", total=200, every_s=0, out=io.StringIO(), clock=clock)
    clock.t += 1000
    assert off.update(150, 1.0) is None
    assert clock_text(3723) == "1:02:03"


def test_interval_from_the_environment(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert every_s_from_env() == 30
    monkeypatch.setenv(PROGRESS_ENV, "0")
    assert every_s_from_env() == 0
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(PROGRESS_ENV, bad)
        with pytest.raises(PmossError, match=PROGRESS_ENV):
            every_s_from_env()


def test_quiet_training_prints_progress_lines(tmp_path, monkeypatch, capsys):
    """What a DVC stage shows: no bar, but lines with the step and the time left."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(PROGRESS_ENV, "0.000001")  # every step
    data = make_tokens(tmp_path / "tok")
    train(data, tmp_path / "model", TrainConfig(**{**TINY, "max_steps": 4}), progress=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("train --algo dt")]
    assert len(lines) == 4 and lines[-1].startswith(f"train --algo dt {tmp_path / 'model'}: step 4/4 (100%), loss ")
    assert "steps/s, 0:00 left" in lines[-1]


# ---- the non-training stages: done/total every interval ------------------------------------
def test_ticker_line_has_done_total_rate_elapsed_and_time_left():
    clock = Clock()
    t = Ticker("evaluate", 8, "cell", every_s=30, clock=clock)
    assert t.line() == "evaluate: 0/8 cells (0%), 0:00 elapsed, time left unknown"
    clock.t += 60
    t.advance(3)
    assert t.line() == "evaluate: 3/8 cells (38%), 20 s/cell, 1:00 elapsed, 1:40 left"  # slower than one a second: seconds per unit
    t.advance(5)
    assert Ticker("collect t", 96, "search", 30, clock=clock).line(clock.t + 2).startswith("collect t: 0/96 searches (0%)")
    assert t.line(clock.t + 20) == "evaluate: 8/8 cells (100%), 10 s/cell, 1:20 elapsed, 0:00 left"


def test_ticker_prints_on_the_interval_while_a_long_unit_runs():
    """A line every interval even when no unit ended since the last one; none with the interval 0."""
    out = io.StringIO()
    with Ticker("collect t", 4, "episode", every_s=0.01, out=out) as t:
        time.sleep(0.15)  # one long unit: the lines keep coming
        t.advance(2)
        time.sleep(0.15)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4, lines
    assert lines[0].startswith("collect t: 0/4 episodes (0%), 0:00 elapsed, time left unknown")
    assert lines[-1].startswith("collect t: 2/4 episodes (50%), ")
    n = len(lines)
    time.sleep(0.05)
    assert len(out.getvalue().splitlines()) == n  # the thread ended with the block
    silent = io.StringIO()
    with Ticker("x", 4, "episode", every_s=0, out=silent):
        time.sleep(0.05)
    assert silent.getvalue() == ""


def test_a_quiet_collect_stage_prints_progress_lines_into_a_pipe(tmp_path):
    """What `dvc repro` shows of the collect stage: `--quiet`, stdout a pipe, no bar, but lines."""
    pool = tmp_path / "pool.yaml"
    pool.write_text("name: t\nmachines: [intel-skx-4s]\nworkloads: [ycsb-c]\nshared_kinds: [os-default]\nepisodes_per_cell: 6\nn_slices: 16\n"
                    "search_runs: 1\nsearch_budgets: [50]\n")  # fmt: skip
    env = {**os.environ, PROGRESS_ENV: "0.001"}
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "pmoss"), "collect", str(pool), "-q", "-o", str(tmp_path / "raw")],
                       env=env, capture_output=True, text=True, check=True)  # fmt: skip
    lines = r.stdout.splitlines()
    assert any(line.startswith("collect t: oracle searches: ") and "/1 search" in line for line in lines), r.stdout[-2000:]
    assert any(line.startswith("collect t: ") and " episodes (" in line and "elapsed" in line for line in lines), r.stdout[-2000:]
    assert "\r" not in r.stdout + r.stderr  # no redrawn bar in a log


def test_evaluate_without_a_terminal_prints_progress_lines(monkeypatch, capsys):
    from pmoss.evaluate import EvalConfig, evaluate_cells

    monkeypatch.setenv(PROGRESS_ENV, "0.001")
    cfg = EvalConfig(machines=["intel-skx-4s"], workloads=["ycsb-c", "scan"], n_slices=16, runs=1, n_records=100_000, window_s=1.0)
    cells = evaluate_cells(cfg, {})
    assert len(cells) == 2
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("evaluate: ")]
    assert lines and all(" cells (" in line for line in lines), lines
