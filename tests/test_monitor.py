"""workbook.monitor's tables and pictures: every number in them comes from grpo_fixed (STATS rows, probe
constants), and the failure map redrawn by a live_plot shows the slider's iteration.

The checks themselves (ranges at and beyond their bounds) are tested in test_handout.py and test_health.py."""

from __future__ import annotations

import dataclasses
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import grpo_fixed  # noqa: E402
import grpo_support  # noqa: E402
from workbook import monitor  # noqa: E402
from workbook.widgets import live_plot, set_value, slider  # noqa: E402


@pytest.fixture(autouse=True)
def no_figures_left():
    plt.close("all")
    yield
    plt.close("all")


def fake_monitor(failures, preflight=("a probe",)):
    """A HealthMonitor whose record says `failures[i]` failed at iteration i (no training run)."""
    mon = monitor.HealthMonitor()
    mon.preflight_failures = list(preflight)
    mon.failures = [list(f) for f in failures]
    mon.history = [{"iteration": i} for i in range(len(failures))]
    return mon


# ---- tables ----------------------------------------------------------------------------------------


def test_every_check_has_its_info_and_every_range_in_its_row_is_rendered_from_stats():
    assert list(monitor.CHECK_INFO) == list(monitor.CHECKS)
    table = monitor.check_table("iteration").splitlines()
    assert len(table) == 2 + len(monitor.CHECKS)
    for name, info in monitor.CHECK_INFO.items():
        row = next(line for line in table if line.startswith(f"| {name} |"))
        assert info.asserts and f"`{info.asserts}`" in row
        for stat in info.stats:
            assert f"{stat} {monitor.render_range(stat)}" in row
            for bound in (grpo_support.STATS[stat].lo, grpo_support.STATS[stat].hi):
                assert not math.isfinite(bound) or f"{bound:g}" in row


def test_the_rendered_condition_follows_a_changed_stats_row(monkeypatch):
    """Nothing in the table is a copy: change a STATS row and the rendered condition changes with it."""
    row = grpo_support.STATS["logprob_gap"]
    monkeypatch.setitem(monitor.STATS, "logprob_gap", dataclasses.replace(row, hi=0.125))
    assert "logprob_gap in [0, 0.125]" in monitor.CHECK_INFO["training log-probs match the sampler"].asserts
    assert monitor.inside("logprob_gap") == pytest.approx(0.0625)


def test_a_check_with_no_stats_range_still_says_what_it_asserts():
    assert monitor.CHECK_INFO["grad norm finite"].asserts == "grad_norm finite"
    assert monitor.CHECK_INFO["grad norm finite"].threshold == "any non-finite value"


def test_preflight_table_shows_the_probe_tolerances_of_grpo_fixed():
    table = monitor.check_table("preflight")
    for tol in (grpo_fixed.SAMPLING_TOL, grpo_fixed.KL_TOL, grpo_fixed.GRAD_TOL):
        assert f"{tol:g}" in table
    assert f"{grpo_fixed.PROBE_DRAWS}" in table
    assert len(table.splitlines()) == 2 + len(monitor.PROBE_INFO)


def test_check_table_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="iteration"):
        monitor.check_table("dashboard")


def test_healthy_stats_are_inside_every_range():
    assert set(monitor.HEALTHY_STATS) == set(grpo_support.STATS)
    for name in grpo_support.STATS:
        assert grpo_fixed.in_range(monitor.HEALTHY_STATS, name), name


@pytest.mark.parametrize(("lo", "hi", "expected"), [(0, 0, 0), (0.9, 1.1, 1.0), (0.01, math.inf, 1.01),
                                                    (-math.inf, 2.0, 1.0), (-math.inf, math.inf, 0.0)])
def test_inside_is_derived_from_the_bounds(monkeypatch, lo, hi, expected):
    monkeypatch.setitem(monitor.STATS, "entropy", grpo_support.Stat("m", lo, hi, "w"))
    assert monitor.inside("entropy") == pytest.approx(expected)


# ---- the monitor on hand-written stats ----------------------------------------------------------------


def test_monitor_records_failures_skips_missing_stats_and_raises_when_strict():
    mon = monitor.HealthMonitor()
    assert mon(monitor.HEALTHY_STATS) == [] and mon.quiet
    assert mon({**monitor.HEALTHY_STATS, "kl": -0.5}) == ["KL finite and >= 0"]
    assert mon.first_failure == {"KL finite and >= 0": 1}
    mon({"reward": 0.5})
    assert "advantages finite" in mon.missing
    strict = monitor.HealthMonitor(strict=True)
    with pytest.raises(monitor.HealthCheckFailed) as err:
        strict({**monitor.HEALTHY_STATS, "nonfinite_steps": 2})
    assert err.value.iteration == 0 and err.value.failures == ["loss finite"]


# ---- pictures --------------------------------------------------------------------------------------


def test_failure_matrix_marks_failures_up_to_the_iteration_and_nothing_after():
    mon = fake_monitor([["loss finite"], [], ["loss finite", "kl finite"]])
    names, matrix = monitor.failure_matrix(mon, upto=1)
    row = names.index("loss finite")
    assert matrix.shape == (len(names), 3)
    assert matrix[row, 0] == 1 and matrix[row, 1] == 0 and np.isnan(matrix[:, 2]).all()


def test_failure_map_update_redraws_the_same_artists_in_place():
    mon = fake_monitor([["loss finite"], [], ["loss finite", "grad norm finite"]])
    fig, ax = plt.subplots()
    update = monitor.failure_map(ax, mon, color="red")
    image, frame = ax.images[0], ax.patches[0]
    assert update(2) == ["loss finite", "grad norm finite"] and frame.get_x() == pytest.approx(1.5)
    assert not np.ma.getmaskarray(image.get_array()).any()  # NaN ("not yet") is masked: none at the end
    assert update(0) == ["loss finite"] and frame.get_x() == pytest.approx(-0.5)
    hidden = np.ma.getmaskarray(image.get_array())  # (checks, iterations)
    assert hidden[:, 1:].all() and not hidden[:, 0].any()
    assert "iteration 0: 1 checks fail" in [t.get_text() for t in ax.texts]
    assert list(ax.images) == [image] and image.get_animated() and frame.get_animated()  # no new artists
    assert monitor.failure_map(plt.subplots()[1], mon, color="red")(2) == ["loss finite", "grad norm finite"]


def test_failure_map_in_a_live_plot_shows_the_slider_position():
    """After moving the slider, the image equals a fresh figure drawn at that iteration (no stale frame)."""
    mon = fake_monitor([["loss finite"], ["kl finite"], [], ["loss finite", "grad norm finite"]])

    def widget(iteration):
        fig, ax = plt.subplots(figsize=(4, 2))
        update = monitor.failure_map(ax, mon, color="red")
        return live_plot(fig, lambda iteration: update(iteration),
                         iteration=slider(iteration, 0, 3, 1, "iteration", integer=True))

    moved = widget(3)
    for it in (0, 2, 1):
        assert set_value(moved, "iteration", it) == mon.failures[it]
        assert bytes(moved.image.value) == bytes(widget(it).image.value), it
    assert bytes(widget(3).image.value) != bytes(widget(1).image.value)  # the comparison can fail


def test_dashboard_counts_non_finite_values_per_history():
    good = [{**monitor.HEALTHY_STATS} for _ in range(3)]
    bad = [{**monitor.HEALTHY_STATS, "loss": math.nan} for _ in range(2)] + [dict(monitor.HEALTHY_STATS)]
    fig, nonfinite = monitor.plot_dashboard({"good": good, "bad": bad}, {"good": "blue", "bad": "red"})
    assert nonfinite["loss"] == {"good": 0, "bad": 2} and nonfinite["kl"] == {"good": 0, "bad": 0}
    assert len([ax for ax in fig.axes if ax.get_visible()]) == len(monitor.DASHBOARD)
