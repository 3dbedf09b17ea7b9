"""Progress lines under `--quiet` / a pipe (learn/progress.py): at most one per interval, with
step, loss, rate and time left; a real quiet training run prints them."""

from __future__ import annotations

import io

import pytest
from test_learners import TINY, make_tokens

from pmoss.contracts.errors import PmossError
from pmoss.learn.progress import PROGRESS_ENV, ProgressLine, clock_text, every_s_from_env
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
    for bad in ("soon", "-1"):
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
