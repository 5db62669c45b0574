"""workbook.widgets.live_plot: one persistent figure redrawn in place into an Image widget, and the
status-line check the browser test relies on (the pure functions of tests/browser/lab_driver.py).

The slow test runs a live_plot notebook through a real kernel (nbclient) and nbval: a check cell that
moves the slider prints only its own line, and no `<Figure ...>` output appears anywhere.
"""

from __future__ import annotations

import base64
import io
import logging
import subprocess
import sys
from pathlib import Path

import ipywidgets as widgets
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from workbook import widgets as widgets_module  # noqa: E402
from workbook.widgets import DPI, LivePlot, live_plot, set_value, slider  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests" / "browser"))  # the browser driver lives beside the browser test
import lab_driver  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
XS = np.linspace(0.0, 1.0, 50)  # (50,)


@pytest.fixture(autouse=True)
def no_figures_left():
    plt.close("all")
    yield
    plt.close("all")


def line_plot(layout=None):
    """A one-line figure and an update that records its calls: -> fig, update, calls, line."""
    fig, ax = plt.subplots(figsize=(4, 2), layout=layout)
    (line,) = ax.plot(XS, 0.2 * XS)
    calls = []

    def update(clip):
        calls.append(clip)
        line.set_ydata(clip * XS)
        return {"clip": clip, "peak": float((clip * XS).max())}

    return fig, update, calls, line


def test_first_render_runs_update_once_and_shows_a_png_of_the_figure():
    fig, update, calls, _ = line_plot()
    w = live_plot(fig, update, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))
    assert calls == [0.2]
    assert w.result == {"clip": 0.2, "peak": pytest.approx(0.2)}
    assert bytes(w.image.value).startswith(PNG_SIGNATURE)
    assert (int(w.image.width), int(w.image.height)) == (4 * DPI, 2 * DPI)
    assert "rendered clip=0.2" in w.status.value
    assert w.children[0] is w.controls["clip"] and w.children[1] is w.image  # controls first
    assert repr(w) == "LivePlot(clip=0.2)"


def test_probe_reads_another_position_and_leaves_the_default_view():
    from workbook.widgets import moved_from_default, probe, set_value

    fig, update, calls, _ = line_plot()
    w = live_plot(fig, update, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))
    first_png = bytes(w.image.value)
    assert probe(w, {"clip": 0.4})["peak"] == pytest.approx(0.4)
    assert calls == [0.2, 0.4, 0.2] and w.values() == {"clip": 0.2} and bytes(w.image.value) == first_png
    assert "rendered clip=0.2" in w.status.value and w.status.layout.display == "none"  # the marker is hidden
    assert not any(m.startswith("clip=") for m in moved_from_default())
    set_value(w, "clip", 0.3)
    assert "clip=0.3 (built at clip=0.2)" in moved_from_default()
    with pytest.raises(KeyError, match="no control labelled"):
        probe(w, {"nope": 1})
    assert w.values() == {"clip": 0.3}


def test_a_control_change_updates_the_same_figure_in_place():
    fig, update, calls, line = line_plot()
    w = live_plot(fig, update, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))
    first_png, canvas = bytes(w.image.value), w.canvas
    w.controls["clip"].value = 0.4
    assert calls == [0.2, 0.4]
    assert w.result["peak"] == pytest.approx(0.4)
    assert w.image.value != first_png and bytes(w.image.value).startswith(PNG_SIGNATURE)
    assert "rendered clip=0.4" in w.status.value
    assert list(fig.axes[0].lines) == [line] and w.canvas is canvas and fig.canvas is canvas  # no new figure or canvas
    assert plt.get_fignums() == []  # nothing handed to pyplot (nothing for the inline backend to display)


def test_the_image_shows_the_data_not_a_cached_frame():
    """Two positions give different images; going back gives the first image again (deterministic draw)."""
    fig, update, _, _ = line_plot()
    w = live_plot(fig, update, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))
    at_02 = bytes(w.image.value)
    set_value(w, "clip", 0.5)
    at_05 = bytes(w.image.value)
    set_value(w, "clip", 0.2)
    assert at_05 != at_02 and bytes(w.image.value) == at_02


def test_live_plot_takes_the_figure_away_from_pyplot():
    fig, update, _, _ = line_plot()
    assert plt.fignum_exists(fig.number)
    live_plot(fig, update, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))
    assert plt.get_fignums() == []


def test_set_value_by_description_or_keyword_returns_the_result():
    fig, ax = plt.subplots(figsize=(4, 2))
    (line,) = ax.plot(XS, XS)

    def update(clip, adv_size):
        line.set_ydata(np.minimum(XS, 1 + clip) * adv_size)
        return (clip, adv_size)

    w = live_plot(fig, update, clip=slider(0.2, 0.05, 0.5, 0.05, "clip"), adv_size=slider(1.5, 0.25, 3.0, 0.25, "|A|"))
    assert set_value(w, "clip", 0.3) == (0.3, 1.5)
    assert set_value(w, "|A|", 0.5) == (0.3, 0.5)
    assert set_value(w, "adv_size", 1.0) == (0.3, 1.0)  # the keyword works too
    assert "rendered clip=0.3; |A|=1" in w.status.value
    with pytest.raises(KeyError, match=r"have \['clip', '\|A\|'\]"):
        set_value(w, "beta", 0.1)


def test_setting_the_same_value_does_not_redraw():
    fig, update, calls, _ = line_plot()
    w = live_plot(fig, update, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))
    assert set_value(w, "clip", 0.2)["clip"] == 0.2
    assert calls == [0.2] and w.redraws == 1


def test_status_line_formats_each_kind_of_control():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    choice = widgets.SelectionSlider(options=[("low", 0.01), ("high", 1.0)], value=0.01, description="beta")
    w = live_plot(fig, lambda G, lr, beta: None, G=slider(8, 2, 32, 1, "G", integer=True),
                  lr=slider(3e-3, -4, -1.5, 0.05, "lr", log=True), beta=choice)
    assert w.marker() == "G=8; lr=0.003; beta=low"
    set_value(w, "beta", 1.0)
    assert "rendered G=8; lr=0.003; beta=high" in w.status.value


def test_layout_is_computed_once_then_frozen():
    """A constrained layout runs at the first render only: later frames keep the axes where they were,
    even when the tick labels change (a layout pass per frame doubled the draw time of 3 axes)."""
    fig, ax = plt.subplots(figsize=(4, 2), layout="constrained")
    (line,) = ax.plot(XS, XS)
    before_render = ax.get_position().bounds

    def update(scale):
        line.set_ydata(scale * XS)
        ax.set_ylim(0, scale)
        return scale

    w = live_plot(fig, update, scale=slider(1.0, 1.0, 1e5, 1.0, "scale"))
    after_first = ax.get_position().bounds
    set_value(w, "scale", 12345.0)
    assert after_first != before_render  # the constrained layout did run once
    assert ax.get_position().bounds == after_first
    assert fig.get_layout_engine() is None or not fig.get_layout_engine().__class__.__name__.startswith("Constrained")


def pixels(w) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(bytes(w.image.value))).convert("RGB")).astype(int)  # (H, W, 3)


def bars_and_line(animated: bool):
    """Two axes of fixed limits: a line and four bars that update() moves; a title it never touches."""
    fig, (ax_line, ax_bars) = plt.subplots(1, 2, figsize=(6, 2.5), layout="constrained")
    (line,) = ax_line.plot(XS, XS, animated=animated)
    bars = ax_bars.bar(range(4), [1.0] * 4, animated=animated)
    ax_line.set_ylim(-1.1, 1.1)
    ax_bars.set_ylim(-1.1, 1.1)
    ax_line.set_title("fixed title")

    def update(phase):
        line.set_ydata(np.sin(2 * np.pi * (XS + phase)))
        for k, bar in enumerate(bars):
            bar.set_height(np.cos(k + 2 * np.pi * phase))
        return phase

    return fig, update, ax_line


def changed_pixels(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of pixels that differ between two images by more than rounding (the overlay composite
    is within 3 of a direct draw, summed over R, G, B)."""
    return float(np.mean(np.abs(a - b).sum(-1) > 24))


@pytest.fixture
def full_draws_only(monkeypatch):
    """live_plot without automatic blitting: every redraw draws the whole figure (the reference image)."""
    monkeypatch.setattr(widgets_module, "AUTO_ANIMATE", False)


def sweep(w, values) -> list[np.ndarray]:
    frames = []
    for value in values:
        set_value(w, "phase", value)
        frames.append(pixels(w))
    return frames


def test_animated_artists_are_redrawn_alone_and_give_the_full_draws_image(full_draws_only):
    """animated=True artists are blitted over the cached background (no full draw per frame), and the image
    is the one a full draw of the same figure gives (up to the few pixels where a line now crosses a spine)."""
    blit = live_plot(*bars_and_line(True)[:2], phase=slider(0.0, 0.0, 1.0, 0.05, "phase"))
    full = live_plot(*bars_and_line(False)[:2], phase=slider(0.0, 0.0, 1.0, 0.05, "phase"))
    first = pixels(blit)
    for a, b in zip(sweep(blit, (0.25, 0.4)), sweep(full, (0.25, 0.4)), strict=True):
        assert changed_pixels(a, b) < 0.005
    assert blit.renderer.full_draws == 1 and full.renderer.full_draws == 3
    assert changed_pixels(first, pixels(blit)) > 0.01  # and the image did move with the slider


def test_what_update_changes_is_blitted_automatically_from_the_first_move(full_draws_only):
    fig, update, _ = bars_and_line(False)
    reference = live_plot(*bars_and_line(False)[:2], phase=slider(0.0, 0.0, 1.0, 0.05, "phase"))
    widgets_module.AUTO_ANIMATE = True  # (restored by the fixture)
    auto = live_plot(fig, update, phase=slider(0.0, 0.0, 1.0, 0.05, "phase"))
    values = (0.25, 0.4, 0.25, 0.6)
    for a, b in zip(sweep(auto, values), sweep(reference, values), strict=True):
        assert changed_pixels(a, b) < 0.005
    assert auto.renderer.full_draws == 1  # the first render only: the data artists were animated from the start
    animated = [type(a).__name__ for a in auto.renderer.animated]  # what moves; not the title, ticks or spines
    assert sorted(animated) == ["Line2D"] + ["Rectangle"] * 4


def test_automatic_blitting_keeps_a_static_label_above_moving_bars(full_draws_only):
    """A text drawn over the bars (higher zorder) stays above them: it is composited from a cached overlay
    layer on top of the bars each frame, not drawn again."""
    def labelled_bars():
        fig, ax = plt.subplots(figsize=(4, 2.5))
        bars = ax.bar(range(3), [1.0, 1.0, 1.0], color="black")
        ax.set_ylim(0, 2)
        ax.text(1, 0.5, "LABEL", color="white", fontsize=28, ha="center", va="center")

        def update(phase):
            for k, bar in enumerate(bars):
                bar.set_height(1.0 + 0.5 * np.sin(k + 2 * np.pi * phase))
            return phase

        return fig, update

    reference = live_plot(*labelled_bars(), phase=slider(0.0, 0.0, 1.0, 0.05, "phase"))
    widgets_module.AUTO_ANIMATE = True
    auto = live_plot(*labelled_bars(), phase=slider(0.0, 0.0, 1.0, 0.05, "phase"))
    for a, b in zip(sweep(auto, (0.25, 0.4, 0.6)), sweep(reference, (0.25, 0.4, 0.6)), strict=True):
        assert changed_pixels(a, b) < 0.002
    assert auto.renderer.full_draws == 1 and [type(a).__name__ for a in auto.renderer.animated] == ["Rectangle"] * 3


def test_a_change_outside_the_animated_artists_forces_a_full_draw():
    fig, update, ax_line = bars_and_line(True)

    def update_and_rescale(phase, top):
        ax_line.set_ylim(-1.1, top)  # not an animated artist: the figure goes stale
        return update(phase)

    w = live_plot(fig, update_and_rescale, phase=slider(0.0, 0.0, 1.0, 0.05, "phase"),
                  top=slider(1.1, 1.1, 3.0, 0.1, "top"))
    set_value(w, "top", 2.0)
    assert w.renderer.full_draws == 2
    assert ax_line.get_ylim() == (-1.1, 2.0)


def titled_line():
    """A moving line, a static reference line, a title that names the run. -> fig, update, moving, reference, title"""
    fig, ax = plt.subplots(figsize=(4, 2.5))
    (moving,) = ax.plot(XS, XS)
    reference = ax.axhline(0.5, color="gray")
    ax.set_ylim(-1.1, 1.1)
    title = ax.set_title("run 0")

    def update(phase, run):
        moving.set_ydata(np.sin(2 * np.pi * (XS + phase)))
        title.set_text(f"run {run}")
        return phase, run

    return fig, update, moving, reference, title


def run_and_phase(fig, update):
    return live_plot(fig, update, phase=slider(0.0, 0.0, 1.0, 0.05, "phase"),
                     run=slider(0, 0, 3, 1, "run", integer=True))


def test_guessed_artists_that_never_move_return_to_the_background_and_other_changes_get_blitted(monkeypatch):
    """A static reference line starts animated (a guess), and goes back into the background at the next full
    draw (here: the first title change); the title, changed by an update, is blitted from then on."""
    monkeypatch.setattr(widgets_module, "AUTO_ANIMATE", False)
    full = run_and_phase(*titled_line()[:2])
    monkeypatch.setattr(widgets_module, "AUTO_ANIMATE", True)
    fig, update, moving, reference, title = titled_line()
    w = run_and_phase(fig, update)
    set_value(w, "phase", 0.25)
    assert w.renderer.full_draws == 1 and reference.get_animated()  # a blit; the guess still stands
    set_value(w, "run", 1)  # the title is not animated: a full draw, which settles the guesses
    assert w.renderer.full_draws == 2 and not reference.get_animated() and moving.get_animated()
    assert title.get_animated()
    for widget in (w, full):
        set_value(widget, "run", 2)
        set_value(widget, "phase", 0.5)
    assert w.renderer.full_draws == 2 and "rendered phase=0.5; run=2" in w.status.value
    assert changed_pixels(pixels(w), pixels(full)) < 0.005


def test_an_error_in_update_is_shown_logged_and_raised_by_set_value(caplog):
    fig, update, _, _ = line_plot()

    def fragile(clip):
        if clip > 0.45:
            raise ValueError(f"clip {clip:.2f} too wide")
        return update(clip)

    w = live_plot(fig, fragile, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))
    good_png = bytes(w.image.value)
    with caplog.at_level(logging.ERROR, logger="workbook.widgets"), pytest.raises(ValueError, match="too wide"):
        set_value(w, "clip", 0.5)
    assert "error at clip=0.5" in w.status.value and "ValueError: clip 0.50 too wide" in w.status.value
    assert w.result is None and bytes(w.image.value) == good_png  # no stale numbers; the image is not replaced
    assert any("update(clip=0.5) raised" in r.getMessage() for r in caplog.records)
    w.controls["clip"].value = 0.3  # recovers on the next good value
    assert w.error is None and w.result["clip"] == 0.3 and "rendered clip=0.3" in w.status.value


def test_an_error_at_the_first_render_fails_the_cell():
    fig, _, _, _ = line_plot()

    def broken(clip):
        raise RuntimeError("no data yet")

    with pytest.raises(RuntimeError, match="no data yet"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(logging.getLogger("workbook.widgets"), "disabled", True)  # keep the test output quiet
        live_plot(fig, broken, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))


def test_live_plot_needs_a_control():
    fig, update, _, _ = line_plot()
    with pytest.raises(ValueError, match="at least one control"):
        LivePlot(fig, update, {})


# ---- the status-line check of the browser test -----------------------------------------------------


def test_parse_marker():
    assert lab_driver.parse_marker("rendered clip=0.3; |A|=1.5") == {"clip": "0.3", "|A|": "1.5"}
    assert lab_driver.parse_marker("  rendered   inner steps=10 ") == {"inner steps": "10"}
    assert lab_driver.parse_marker("error at clip=0.5:\nValueError: x") is None


@pytest.mark.parametrize("value, readout, same", [
    ("0.3", "0.30", True),
    ("0.35", "0.30", False),           # the next slider step
    ("0.125", "0.13", True),           # the browser rounds ties up, Python to even: either is the same value
    ("0.125", "0.12", True),
    ("0.15", "0.13", False),
    ("8", "8", True),
    ("9", "8", False),
    ("0.003", "3.00e-3", True),        # FloatLogSlider readout (d3 format, exponent without padding)
    ("0.0031", "3.00e-3", False),
    ("-0.5", "\u22120.50", True),      # d3 writes a Unicode minus
    ("-inf", "-inf", True),
    ("-inf", "0.00", False),
    ("low", "low", True),
    ("low", "high", False),
])
def test_same_value(value, readout, same):
    assert lab_driver.same_value(value, readout) is same


def test_marker_mismatches_reports_each_problem():
    assert lab_driver.marker_mismatches("rendered clip=0.3; |A|=1.5", {"clip": "0.30", "|A|": "1.50"}) == []
    assert lab_driver.marker_mismatches("rendered clip=0.3", {"clip": "0.40"}) == [
        "clip: figure rendered at 0.3, control shows 0.40"]
    assert lab_driver.marker_mismatches("rendered clip=0.3", {"clip": "0.30", "|A|": "1.50"}) == [
        "control '|A|' missing from the status line 'rendered clip=0.3'"]
    assert lab_driver.marker_mismatches("rendered clip=0.3", {}) == ["no readable control in the widget"]
    assert lab_driver.marker_mismatches("error at clip=0.5: boom", {"clip": "0.50"})[0].startswith(
        "status line is not a render marker")


def test_marker_of_a_live_plot_matches_its_own_readouts():
    """What LivePlot writes parses back to its control values (the readouts a browser would show)."""
    fig, update, _, _ = line_plot()
    w = live_plot(fig, update, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))
    set_value(w, "clip", 0.2 + 0.05 + 0.05)  # 0.30000000000000004, as a browser's steps produce
    assert lab_driver.marker_mismatches(f"rendered {w.marker()}", {"clip": "0.30"}) == []


# ---- through a real kernel and nbval --------------------------------------------------------------


@pytest.mark.slow
def test_a_check_cell_prints_only_its_own_line_under_nbval(tmp_path):
    """The harness notebook executed by nbclient: the widget cell displays the figure's static image, then one
    widget (no `<Figure ...>`), the check cell's only output is its print, and nbval re-runs the stored
    notebook without a diff."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.from_dict(lab_driver.HARNESS_LIVE_PLOT)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    widget_cell, check_cell = nb.cells
    assert [o.output_type for o in widget_cell.outputs] == ["display_data", "display_data"]
    static, bundle = widget_cell.outputs[0].data, widget_cell.outputs[1].data
    assert base64.b64decode(static["image/png"]).startswith(b"\x89PNG")
    assert "application/vnd.jupyter.widget-view+json" in bundle and bundle["text/plain"] == "LivePlot(x=0.5)"
    assert [(o.output_type, o.get("text")) for o in check_cell.outputs] == [("stream", "x 0.30\n")]
    path = tmp_path / "harness.ipynb"
    nbformat.write(nb, path)
    nbval = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
                            "--nbval-current-env", "--nbval-sanitize-with", str(ROOT / "notebooks/nbval_sanitize.cfg"),
                            str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert nbval.returncode == 0, nbval.stdout[-3000:]


def test_animated_marks_artists_inside_containers():
    from workbook.plots import animated

    fig, ax = plt.subplots()
    bars = animated(ax.bar([0, 1], [1, 2]))
    lines = animated(ax.plot([0, 1], [0, 1], [0, 1], [1, 0]))
    bar_container = animated(ax.errorbar([0, 1], [1, 2], yerr=[0.1, 0.2]))
    title = animated(ax.set_title("x"))
    assert all(p.get_animated() for p in bars) and all(line.get_animated() for line in lines)
    assert bar_container.lines[0].get_animated() and all(c.get_animated() for c in bar_container.lines[2])
    assert title.get_animated() and not ax.patch.get_animated()


def test_a_transparent_figure_background_is_made_opaque():
    fig, ax = plt.subplots(figsize=(3, 2), facecolor=(1, 1, 1, 0))
    ax.plot([0, 1], [0, 1])
    w = live_plot(fig, lambda x: x, x=slider(0.5, 0.0, 1.0, 0.1, "x"))
    from PIL import Image

    alpha = np.asarray(Image.open(io.BytesIO(bytes(w.image.value))))[..., 3]  # (H, W)
    assert alpha.min() == 255


def test_a_static_band_between_moving_bars_and_a_moving_line_keeps_its_place(monkeypatch):
    """Drawing order bars (zorder 1) < band (1.5) < line (2): once the band is known to be static (after the
    first full draw it goes back to the background), it cannot be composited on top (it would cover the
    line), so it is drawn in its place each frame."""
    def banded():
        fig, ax = plt.subplots(figsize=(4, 2.5))
        bars = ax.bar(np.arange(4) / 4 + 0.125, np.ones(4), width=0.2, color="black", zorder=1)
        ax.fill_between([0, 1], [0.2, 0.2], [0.8, 0.8], color="yellow", alpha=0.9, zorder=1.5)
        (line,) = ax.plot(XS, XS, color="blue", linewidth=6, zorder=2)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.2)
        title = ax.set_title("run 0")

        def update(phase, run):
            line.set_ydata(0.5 + 0.4 * np.sin(2 * np.pi * (XS + phase)))
            for k, bar in enumerate(bars):
                bar.set_height(0.6 + 0.4 * np.cos(k + 2 * np.pi * phase))
            title.set_text(f"run {run}")
            return phase

        return fig, update

    monkeypatch.setattr(widgets_module, "AUTO_ANIMATE", False)
    full = run_and_phase(*banded())
    monkeypatch.setattr(widgets_module, "AUTO_ANIMATE", True)
    auto = run_and_phase(*banded())
    for widget in (auto, full):
        set_value(widget, "run", 1)  # a full draw: the band has not moved, so it leaves the guessed set
        set_value(widget, "phase", 0.3)
    assert auto.renderer.full_draws == 2
    assert changed_pixels(pixels(auto), pixels(full)) < 0.005
