"""workbook/plots.py: the one smoother (a NaN-aware trailing mean) and the one curve plotter."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from workbook.plots import curves, smooth  # noqa: E402


def test_smooth_is_a_trailing_mean_that_skips_nans():
    assert smooth([1.0, 3.0, 5.0, 7.0], n=2) == [1.0, 2.0, 4.0, 6.0]
    smoothed = smooth([math.nan, 2.0, math.nan], n=2)
    assert math.isnan(smoothed[0]) and smoothed[1:] == [2.0, 2.0]
    assert smooth([4.0, 8.0], n=1) == [4.0, 8.0]


def test_curves_reads_a_key_of_histories_or_a_function_of_any_run():
    fig, (ax_key, ax_fn) = plt.subplots(1, 2)
    histories = {"a": [{"reward": r} for r in (0.0, 1.0, 2.0)], "b": [{"reward": 5.0}] * 3}
    curves(ax_key, histories, "reward", colors={"a": "#ff0000"}, window=2)
    a, b = ax_key.get_lines()
    assert list(a.get_ydata()) == [0.0, 0.5, 1.5] and a.get_color() == "#ff0000" and a.get_label() == "a"
    assert list(b.get_ydata()) == [5.0, 5.0, 5.0]
    assert ax_key.get_ylabel() == "reward" and ax_key.get_xlabel() == "iteration"
    curves(ax_fn, {"run": {"history": [1.0, 3.0]}}, lambda run: run["history"], ylabel="custom")
    (line,) = ax_fn.get_lines()
    assert list(line.get_ydata()) == [1.0, 3.0] and ax_fn.get_ylabel() == "custom"
    plt.close(fig)
