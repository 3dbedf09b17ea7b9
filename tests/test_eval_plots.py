"""eval/speedup.png and eval/schedules.png: the legend beside the bars (not over them); the
schedules as one readable grid with a colour bar and the title above the panels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from pmoss.contracts.policies import BASELINE_KINDS, generate
from pmoss.evaluate import heatmap, plot
from pmoss.sim import load_sim_machine

POLICIES = ["dt-base", "dt-assistant", "bc", "cql", "dt-critic", "mask-only", "oracle"]
KINDS = ["sn-grouped", "sn-spread", "sn-mixed", "sn-random", "os-default", "sn-grouped", "sn-spread"]
CELLS = [f"{m}|{w}" for m in ("amd-milan-nps4", "intel-skx-4s") for w in ("ycsb-c", "scan")]  # the demo's 4 cells x 7 panels


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions close, kept for inspection."""
    kept = []
    monkeypatch.setattr(plt, "close", lambda fig: kept.append(fig))
    return kept


def test_speedup_legend_does_not_cover_the_bars(tmp_path, figures):
    rng = np.random.default_rng(0)
    cells = {c: {**{b: float(rng.uniform(50, 100)) for b in BASELINE_KINDS}, **{p: float(rng.uniform(60, 110)) for p in POLICIES}} for c in CELLS}
    plot(cells, tmp_path / "speedup.png")
    fig = figures[0]
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_window_extent()), "the legend covers a panel"
    assert len(fig.legends[0].get_texts()) == len(BASELINE_KINDS) + len(POLICIES) + 1  # + the dashed one-core line


def test_schedules_grid_has_a_colour_bar_and_the_title_above(tmp_path, figures):
    schedules = {c: {p: generate(k, load_sim_machine(c.split("|")[0]), 128) for p, k in zip(POLICIES, KINDS, strict=True)} for c in CELLS}
    heatmap(schedules, tmp_path / "schedules.png")
    width, height = Image.open(tmp_path / "schedules.png").size
    assert width <= 2200 and height <= 1400, f"{width}x{height} px"  # was 880x7004 with one panel per row
    fig = figures[0]
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == len(CELLS) * len(POLICIES)
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "slice key-range position"]
    assert len(bars) == 1, "one colour bar"
    title_bottom = fig._suptitle.get_window_extent().y0
    assert all(title_bottom >= ax.get_window_extent().y1 for ax in panels), "the title overlaps a panel"
    assert {ax.get_title() for ax in panels if ax.get_title()} == set(POLICIES)  # column headers
