"""Several runs of a measurement (``mq.lab.spread``), their plot, and the lag plot."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
from matplotlib.collections import PathCollection

from mq.lab import compare, plot_spread, spread
from mq.lab.plots import plot_lag


def test_spread_summarises_runs() -> None:
    s = spread([3.0, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.n) == (2.0, 1.0, 3.0, 3)
    assert s.row("x", unit="ms") == {"": "x", "median (ms)": 2.0, "lowest (ms)": 1.0, "highest (ms)": 3.0,
                                     "runs": 3}
    with pytest.raises(ValueError):
        spread([])


def test_compare_calls_overlapping_runs_noise_and_separate_runs_a_ratio() -> None:
    fast, slow = spread([100, 110, 120]), spread([10, 11, 12])
    assert compare("fast", fast, "slow", slow) == (
        "fast is 10× faster than slow (medians of 3 and 3 runs; the runs do not overlap)")
    assert compare("slow", slow, "fast", fast).startswith("fast is 10× faster than slow")
    a, b = spread([100, 150, 200]), spread([90, 120, 180])
    assert compare("a", a, "b", b).startswith("a and b are within noise of each other")


def test_plot_spread_draws_a_bar_per_measurement_and_a_dot_per_run() -> None:
    fig, ax = plt.subplots()
    plot_spread({"one": [1.0, 2.0, 3.0], "two": spread([5.0, 6.0]), "model": [4.0]}, ax=ax, modelled=["model"])
    bars = ax.patches
    assert [round(b.get_height(), 3) for b in bars] == [2.0, 5.5, 4.0]
    assert bars[2].get_hatch() == "//" and not bars[0].get_hatch()
    dots = sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))
    assert dots == 6
    plt.close(fig)


def test_plot_lag_draws_a_line_per_partition_coloured_by_owner() -> None:
    rows = [{"t_s": t, "partition": p, "member_id": "id-a" if p < 2 else "id-b", "lag": t * p,
             "lag_seconds": t} for t in (0.0, 0.2, 0.4) for p in range(3)]
    fig, ax = plt.subplots()
    plot_lag(rows, ax=ax, names={"id-a": "m1", "id-b": "m2"}, span=(0.1, 0.3))
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["partition 0 (m1)", "partition 1 (m1)", "partition 2 (m2)"]
    colors = [line.get_color() for line in ax.get_lines()]
    assert colors[0] == colors[1] != colors[2]
    assert list(ax.get_lines()[2].get_ydata()) == [0.0, 0.4, 0.8]
    plt.close(fig)
