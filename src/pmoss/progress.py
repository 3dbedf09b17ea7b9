"""Progress of a long run as plain lines: what a log, a pipe or `dvc repro` can show.

Every DVC stage runs `--quiet` (no progress bar: a bar redrawn with carriage returns is noise in a
log), and stdout is then often no terminal at all. A training stage of several minutes would show
a frozen screen, so `ProgressLine` prints one line at most every `every_s` seconds (default 30,
`PMOSS_PROGRESS_S`; 0 turns the lines off): the step, the loss, the rate and the time left.

    pretrain models/base: step 400/2000 (20%), loss 0.8123, 13.2 steps/s, 2:01 left

Pure (a clock is injected), so the rule is tested without a trainer; train.py wires it into
Lightning as a callback on rank 0.

The other long commands (`pmoss collect`, `propose`, `evaluate`, `post-train`, `sim fidelity`)
count units that each take seconds to minutes (episodes, oracle searches, cells, rounds), so a line
printed only when a unit ends could leave minutes of silence. `Ticker` prints the same kind of line
from a background thread every `every_s` seconds, whether or not a unit ended since the last one:

    collect tiny: 24/96 episodes (25%), 1.6 episodes/s, 0:15 elapsed, 0:45 left

Both follow one rule (`show_bar`): a terminal and no `--quiet` get the bar, anything else the lines.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Self, TextIO

from pmoss.contracts.io import seconds_from_env

PROGRESS_ENV = "PMOSS_PROGRESS_S"
DEFAULT_EVERY_S = 30.0


def every_s_from_env() -> float:
    """Seconds between progress lines: $PMOSS_PROGRESS_S, else 30; 0 means none."""
    return seconds_from_env(PROGRESS_ENV, DEFAULT_EVERY_S, zero="turns progress lines off")


def show_bar(progress: bool) -> bool:
    """A redrawn bar only for an interactive run: `progress` (no --quiet) and stdout a terminal."""
    return progress and sys.stdout.isatty()


def line_interval(bar: bool) -> float:
    """Seconds between progress lines for a run that shows the bar (none) or not ($PMOSS_PROGRESS_S)."""
    return 0.0 if bar else every_s_from_env()


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


def plural(unit: str) -> str:
    return unit + ("es" if unit.endswith(("s", "sh", "ch", "x")) else "s")


def rate_text(rate: float, unit: str) -> str:
    """`1.6 episodes/s`, or `40 s/cell` for units slower than one a second."""
    return f"{rate:.1f} {plural(unit)}/s" if rate >= 1 or rate <= 0 else f"{1 / rate:.0f} s/{unit}"


class Ticker:
    """`done` of `total` units of a long command, printed every `every_s` seconds from a background
    thread while the `with` block runs (none when `every_s` is 0); `advance(n)` as units finish.

    A line is printed on the interval even when no unit ended since the last one (the elapsed time
    moves), so a stage whose units take minutes still shows it is alive."""

    def __init__(self, label: str, total: int, unit: str, every_s: float, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.unit, self.every_s = label, total, unit, every_s
        self.out, self.clock = out, clock
        self.done = 0
        self.t0 = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def advance(self, n: int = 1) -> None:
        self.done += n

    def line(self, now: float | None = None) -> str:
        elapsed = max((self.clock() if now is None else now) - self.t0, 1e-9)
        rate = self.done / elapsed
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        speed = f"{rate_text(rate, self.unit)}, " if rate > 0 else ""  # none finished yet: no rate to show
        left = f"{clock_text((self.total - self.done) / rate)} left" if rate > 0 else "time left unknown"
        return f"{self.label}: {self.done}/{self.total} {plural(self.unit)}{pct}, {speed}{clock_text(elapsed)} elapsed, {left}"

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                print(self.line(), file=self.out or sys.stdout, flush=True)  # flushed: a pipe would otherwise hold it back
            except (OSError, ValueError):  # the reader went away (a closed pipe): the work goes on, silently
                return

    def __enter__(self) -> Self:
        self.t0 = self.clock()
        if self.every_s > 0 and self.total > 0:
            self._thread = threading.Thread(target=self._run, name=f"progress: {self.label}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
