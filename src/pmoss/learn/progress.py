"""Progress of a long run as plain lines: what a log, a pipe or `dvc repro` can show.

Every DVC stage runs `--quiet` (no progress bar: a bar redrawn with carriage returns is noise in a
log), and stdout is then often no terminal at all. A training stage of several minutes would show
a frozen screen, so `ProgressLine` prints one line at most every `every_s` seconds (default 30,
`PMOSS_PROGRESS_S`; 0 turns the lines off): the step, the loss, the rate and the time left.

    pretrain models/base: step 400/2000 (20%), loss 0.8123, 13.2 steps/s, 2:01 left

Pure (a clock is injected), so the rule is tested without a trainer; train.py wires it into
Lightning as a callback on rank 0.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from pmoss.contracts.errors import PmossError

PROGRESS_ENV = "PMOSS_PROGRESS_S"
DEFAULT_EVERY_S = 30.0


def every_s_from_env() -> float:
    """Seconds between progress lines: $PMOSS_PROGRESS_S, else 30; 0 means none."""
    raw = os.environ.get(PROGRESS_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_EVERY_S
    except ValueError:
        raise PmossError(f"{PROGRESS_ENV}={raw!r}: not a number of seconds (0 turns progress lines off)") from None
    if value < 0:
        raise PmossError(f"{PROGRESS_ENV}={raw!r}: must be >= 0 seconds (0 turns progress lines off)")
    return value


def clock_text(seconds: float) -> str:
    """1:05 for 65 s, 1:02:03 past an hour."""
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class ProgressLine:
    """Decides when to print and formats the line; `update(step, loss)` after every step."""

    def __init__(self, label: str, total: int, every_s: float, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic, start_step: int = 0):
        self.label, self.total, self.every_s = label, total, every_s
        self.out, self.clock = out, clock
        self.t0 = self.last = clock()
        self.step0 = start_step  # a resumed run: the rate counts this process's steps only

    def line(self, step: int, loss: float | None, now: float) -> str:
        elapsed = max(now - self.t0, 1e-9)
        rate = (step - self.step0) / elapsed
        left = f"{clock_text((self.total - step) / rate)} left" if rate > 0 else "time left unknown"
        pct = f" ({100 * step / self.total:.0f}%)" if self.total else ""
        loss_text = f"loss {loss:.4f}, " if loss is not None else ""
        return f"{self.label}: step {step}/{self.total}{pct}, {loss_text}{rate:.1f} steps/s, {left}"

    def update(self, step: int, loss: float | None) -> str | None:
        """The line to print now (and print it), or None: at most one per `every_s` seconds."""
        now = self.clock()
        if self.every_s <= 0 or now - self.last < self.every_s:
            return None
        self.last = now
        text = self.line(step, loss, now)
        print(text, file=self.out or sys.stdout, flush=True)  # flushed: a pipe would otherwise hold it back
        return text
