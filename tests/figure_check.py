"""Figure legibility, checked inside the notebook kernels while nbval runs them (`make test`).

What a reader sees must read at a glance. For every figure a notebook renders (inline, and every slider
figure at every position a check cell or the sweep below draws), `problems(fig)` reports:
  - text smaller than FONT_FLOOR_PX pixels as JupyterLab shows it (the PNG at its dpi, scaled down to
    OUTPUT_WIDTH_PX when wider);
  - two texts that overlap (titles, labels, tick labels, legends, annotations);
  - a legend or a text inside the axes over a data point;
  - a data point outside its axes (the axes do not fit their data);
  - a title, label or caption that is a Python repr (braces, `dict(`, `tensor(`).
A slider figure is also swept: each control through its options, or a slider through SWEEP_POSITIONS
positions from end to end, the others at their defaults, with the random state saved and restored, so
the notebook's later cells see nothing of it.

How it runs: `python tests/figure_check.py --startup DIR` writes an IPython startup file into DIR
(profile_default/startup/), and make test runs nbval with IPYTHONDIR=DIR. The startup file installs
`install()`: a wrapper of FigureCanvasBase.print_figure (inline figures), of LivePlot.redraw (slider
figures) and a post_run_cell sweep of the slider figures a cell built. A problem is written to stderr,
which nbval compares with the stored (empty) stderr: the cell fails and its report shows the problem.
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import sys
from pathlib import Path

import numpy as np
from matplotlib.collections import Collection
from matplotlib.legend import Legend
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.transforms import IdentityTransform

FONT_FLOOR_PX = 10.0
"""smallest text height (the font size in pixels) a reader is asked to read"""
OUTPUT_WIDTH_PX = 960
"""width of a notebook's output area in JupyterLab at 1400 x 900 with the file browser open (968 px, measured
by the browser test, which fails if it is ever narrower than this); wider images are scaled down to it"""
SWEEP_POSITIONS = 5
"""positions per slider in the sweep: both ends and evenly spaced between"""
REPR = re.compile(r"[{}]|\b(dict|tensor|array|Config)\(")
"""what a Python repr leaves in a title"""
TOLERANCE_PX = 1.0


def _drawn_texts(fig) -> list[Text]:
    """Every text the last draw put on the figure: figure texts and legends, and per visible axes its titles,
    axis labels, offset texts, the tick labels of the ticks in view, its texts and its legend's."""
    texts = [*fig.texts, *(t for legend in fig.legends for t in _legend_texts(legend))]
    if getattr(fig, "_suptitle", None) is not None:
        texts.append(fig._suptitle)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax._left_title, ax._right_title, *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):
            if not axis.get_visible():
                continue
            texts += [axis.label, axis.get_offset_text()]
            for tick in axis._update_ticks():  # the ticks in view, as the draw saw them
                texts += [label for label in (tick.label1, tick.label2) if label.get_visible()]
        if ax.get_legend() is not None:
            texts += _legend_texts(ax.get_legend())
    seen, drawn = set(), []
    for t in texts:
        if id(t) not in seen and t.get_visible() and t.get_text().strip():
            seen.add(id(t))
            drawn.append(t)
    return drawn


def _legend_texts(legend) -> list[Text]:
    return [*legend.get_texts(), legend.get_title()] if legend.get_visible() else []


def _data_points(ax) -> np.ndarray:
    """Display coordinates (n, 2) of the axes' data: line vertices, collection offsets, bar corners."""
    points = []
    for line in ax.get_lines():
        if line.get_visible() and line.get_clip_on():
            xy = np.asarray(line.get_xydata(), dtype=float)
            if xy.size:
                points.append(line.get_transform().transform(xy))
    for coll in ax.collections:
        if not (coll.get_visible() and isinstance(coll, Collection) and coll.get_clip_on()):
            continue
        if isinstance(coll.get_offset_transform(), IdentityTransform):  # no offsets (fill_between, hlines):
            for path in coll.get_paths():                                # the data is in the paths
                if len(path.vertices):
                    points.append(coll.get_transform().transform(np.asarray(path.vertices, dtype=float)))
            continue
        offsets = np.asarray(coll.get_offsets(), dtype=float)  # scatter: one marker per offset
        if offsets.size:
            points.append(coll.get_offset_transform().transform(offsets))
    for patch in ax.patches:
        if (patch.get_visible() and isinstance(patch, Rectangle) and patch.get_clip_on()
                and patch.get_width() and patch.get_height()):  # an empty histogram bin draws nothing
            x, y, w, h = patch.get_x(), patch.get_y(), patch.get_width(), patch.get_height()
            corners = np.array([[x, y + h], [x + w, y + h]], dtype=float)
            points.append(patch.get_data_transform().transform(corners))
    if not points:
        return np.zeros((0, 2))
    xy = np.concatenate(points)
    return xy[np.isfinite(xy).all(axis=1)]


def _inside(points: np.ndarray, box, pad: float = 0.0) -> np.ndarray:
    return ((points[:, 0] >= box.x0 - pad) & (points[:, 0] <= box.x1 + pad)
            & (points[:, 1] >= box.y0 - pad) & (points[:, 1] <= box.y1 + pad))


def problems(fig, where: str = "figure") -> list[str]:
    """Why `fig`, as last drawn, does not read at a glance ([] when it does). Draws it first."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width_px = fig.get_figwidth() * fig.dpi
    scale = min(1.0, OUTPUT_WIDTH_PX / width_px)
    found = []
    texts = _drawn_texts(fig)
    boxes = {t: t.get_window_extent(renderer) for t in texts}
    for t in texts:
        px = t.get_fontsize() * fig.dpi / 72 * scale
        if px < FONT_FLOOR_PX - 1e-6:
            found.append(f"{where}: text {t.get_text()[:40]!r} is {px:.1f} px (floor {FONT_FLOOR_PX:g})")
        if "$" not in t.get_text() and REPR.search(t.get_text()):  # mathtext has braces of its own
            found.append(f"{where}: text {t.get_text()[:60]!r} reads like a Python repr")
    for a, b in itertools.combinations(texts, 2):
        if boxes[a].width and boxes[b].width and _overlap(boxes[a], boxes[b]):
            found.append(f"{where}: texts {a.get_text()[:30]!r} and {b.get_text()[:30]!r} overlap")
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        points = _data_points(ax)
        outside = ~_inside(points, ax.bbox, TOLERANCE_PX)
        if outside.any():
            found.append(f"{where}: axes {ax.get_title()[:40]!r}: {int(outside.sum())} data point(s) outside the axes")
        covers = [ax.get_legend()] if ax.get_legend() is not None and ax.get_legend().get_visible() else []
        covers += [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
        for cover in covers:
            box = cover.get_window_extent(renderer)
            hit = _inside(points, box, -TOLERANCE_PX)
            if hit.any():
                what = "legend" if isinstance(cover, Legend) else f"text {cover.get_text()[:30]!r}"
                found.append(f"{where}: axes {ax.get_title()[:40]!r}: {what} covers {int(hit.sum())} data point(s)")
    return found


def _overlap(a, b) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > TOLERANCE_PX) and (min(a.y1, b.y1) - max(a.y0, b.y0) > TOLERANCE_PX)


# ---- inside the kernel ---------------------------------------------------------------------------------------


_REPORTED: set[str] = set()


def report(found: list[str]) -> None:
    """Each problem once per kernel (a slider figure's problem at every position is one problem)."""
    for line in found:
        key = re.sub(r"^slider figure at [^:]*:", "slider figure:", line)
        if key not in _REPORTED:
            _REPORTED.add(key)
            print(f"FIGURE CHECK: {line}", file=sys.stderr)


def _positions(control) -> list:
    options = getattr(control, "options", None)
    if options is not None:
        return [o[1] if isinstance(o, tuple) else o for o in options]
    lo, hi, step = control.min, control.max, control.step
    count = int(round((hi - lo) / step)) + 1
    picks = sorted({round(i * (count - 1) / (SWEEP_POSITIONS - 1)) for i in range(SWEEP_POSITIONS)})
    return [type(control.value)(round(lo + k * step, 12)) for k in picks]


def sweep(plot) -> list[str]:
    """Every control of a LivePlot through its positions (the others at their defaults); back to the defaults."""
    import torch

    found = []
    state = (random.getstate(), np.random.get_state())  # noqa: NPY002 - the notebooks' global state
    with torch.random.fork_rng(devices=[]):
        try:
            for control in plot.controls.values():
                default = control.value
                for value in _positions(control):
                    control.value = value
                    if plot.error is not None:
                        found.append(f"slider figure at {plot.marker()}: update raised {plot.error!r}")
                control.value = default
        finally:
            random.setstate(state[0])
            np.random.set_state(state[1])  # noqa: NPY002
    return found


def install() -> None:
    """Check every inline figure as it is printed, every slider figure as it redraws, and sweep the slider
    figures each cell built."""
    from IPython import get_ipython
    from matplotlib.backend_bases import FigureCanvasBase

    from workbook import widgets

    print_figure = FigureCanvasBase.print_figure

    def checked_print_figure(self, *args, **kwargs):
        out = print_figure(self, *args, **kwargs)
        report(problems(self.figure, "inline figure " + repr(self.figure.get_suptitle()[:40] or "")))
        return out

    FigureCanvasBase.print_figure = checked_print_figure
    redraw = widgets.LivePlot.redraw

    def checked_redraw(self):
        redraw(self)
        if self.error is None:
            report(problems(self.figure, f"slider figure at {self.marker()}"))

    widgets.LivePlot.redraw = checked_redraw
    swept = set()

    def sweep_new(*_):
        for plot in list(widgets.SHOWN):
            if id(plot) not in swept:
                swept.add(id(plot))
                report(sweep(plot))

    get_ipython().events.register("post_run_cell", sweep_new)


STARTUP = """import sys
sys.path.insert(0, {tests!r})
import figure_check
figure_check.install()
"""


def write_startup(ipython_dir: Path) -> Path:
    """An IPython startup file in ipython_dir that installs the checks (IPYTHONDIR=ipython_dir)."""
    startup = Path(ipython_dir) / "profile_default" / "startup" / "00-figure-check.py"
    startup.parent.mkdir(parents=True, exist_ok=True)
    startup.write_text(STARTUP.format(tests=str(Path(__file__).resolve().parent)))
    return startup


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--startup", required=True, help="the IPYTHONDIR to write the startup file into")
    write_startup(Path(parser.parse_args().startup))
