"""tests/figure_check.py, the legibility checks nbval runs inside the notebook kernels: each can fail."""

from __future__ import annotations

import random

import matplotlib

matplotlib.use("Agg")
import figure_check  # noqa: E402  (tests/ is on sys.path)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def close_all():
    yield
    plt.close("all")


def clean_figure():
    fig, ax = plt.subplots(figsize=(6, 3), dpi=100, layout="constrained")
    xs = np.linspace(0, 1, 20)
    ax.plot(xs, xs, label="rising")
    ax.set_ylim(-0.2, 1.6)
    ax.legend(loc="upper left")
    ax.set_title("a line and its legend")
    ax.set_xlabel("x")
    return fig, ax


def test_a_clean_figure_has_no_problem():
    fig, _ = clean_figure()
    assert figure_check.problems(fig) == []


def test_fill_between_and_hlines_are_checked_by_their_paths():
    fig, ax = clean_figure()
    ax.fill_between([0.1, 0.9], [0.0, 0.0], [0.5, 0.5], alpha=0.2)
    ax.hlines([0.2], 0.1, 0.9)
    ax.scatter([0.5], [0.3])
    assert figure_check.problems(fig) == []  # no phantom point at the figure's corner
    ax.fill_between([0.1, 0.9], [0.0, 0.0], [3.0, 3.0], alpha=0.2)  # above the y limit 1.6
    assert any("data point(s) outside the axes" in p for p in figure_check.problems(fig))


def test_small_text_is_reported_with_its_size_in_pixels():
    fig, ax = clean_figure()
    ax.set_xlabel("x", fontsize=6)
    (problem,) = figure_check.problems(fig)
    assert "'x' is 8.3 px (floor 10)" in problem


def test_a_wide_figure_is_scaled_down_to_the_output_area():
    fig, ax = clean_figure()
    fig.set_size_inches(14, 3)  # 1400 px shown in 960: 10 pt = 13.9 px -> 9.5 px
    assert any("is 9.5 px" in p for p in figure_check.problems(fig))


def test_overlapping_texts_legend_over_data_data_outside_and_a_repr_title():
    fig, ax = clean_figure()
    ax.text(0.2, 0.2, "on the line")  # a label over the data
    ax.set_ylim(0.0, 0.5)  # the line leaves the axes
    ax.set_title(str({"steps": 20}))
    found = figure_check.problems(fig)
    assert any("reads like a Python repr" in p for p in found)
    assert any("data point(s) outside the axes" in p for p in found)
    assert any("text 'on the line' covers" in p for p in found)
    ax.set_ylim(0.0, 1.0)
    ax.legend(loc="center")  # the line y = x runs through the centre
    assert any("legend covers" in p for p in figure_check.problems(fig))
    ax2 = fig.add_axes((0.1, 0.1, 0.3, 0.3))
    ax2.set_title("a title")
    ax2.set_xlabel("a title")
    fig.text(0.1, 0.4, "over the title", fontsize=12)
    assert any("overlap" in p for p in figure_check.problems(fig))


def test_the_sweep_visits_every_position_and_restores_defaults_and_random_state():
    from workbook.widgets import choice, live_plot, slider

    fig, ax = plt.subplots(figsize=(4, 2))
    (line,) = ax.plot([0, 1], [0, 0.5])
    ax.set_ylim(0, 1.1)
    seen = []

    def update(x, kind):
        seen.append((x, kind))
        random.random()
        line.set_ydata([0, x])
        return x

    w = live_plot(fig, update, x=slider(0.5, 0.0, 1.0, 0.1, "x"), kind=choice(["a", "b"], "a", "kind"))
    state = random.getstate()
    assert figure_check.sweep(w) == []
    assert random.getstate() == state and w.values() == {"x": 0.5, "kind": "a"}
    assert {x for x, _ in seen} >= {0.0, 0.2, 0.5, 0.8, 1.0} and ("0.5", "b") != seen[-1] and (0.5, "b") in seen
