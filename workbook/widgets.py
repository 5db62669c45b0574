"""Slider figures: one persistent matplotlib figure, artists updated in place, shown in an ipywidgets Image.

    fig, ax = plt.subplots(figsize=(6, 3))          # built once; live_plot takes it away from pyplot
    (line,) = ax.plot(xs, f(xs, 0.2))
    def update(clip):                                # mutate artists only; return the numbers a check prints
        line.set_ydata(f(xs, clip))
        return {"clip": clip, "peak": float(f(xs, clip).max())}
    w = live_plot(fig, update, clip=slider(0.2, 0.0, 0.5, 0.05, "clip"))
    w                                                # display (cell marked # NBVAL_IGNORE_OUTPUT)

and in a check cell: `r = set_value(w, "clip", 0.3); print(f"peak {r['peak']:.3f}")`.

Why an Image widget and not `interactive` + plt.show(): a slider move then costs update() plus one Agg
draw and a PNG encode (no new figure, no Output-widget round trip), and the image is widget *state*, so
setting a slider from Python (set_value, under nbval or Run All) updates the displayed figure too instead
of printing a new one into the calling cell. A status line under the image, `rendered clip=0.3`, is
written together with the image: it states which control values the image shows (the browser test
compares it with the sliders), or the error update() raised.

Speed: a redraw is update(), one Agg render of the figure and a PNG encode (a few ms). A full Agg draw is
mostly ticks and text (one axes about 15 ms, three axes about 45 ms on a quiet 2-core machine), so:
  - figures stay small and the dpi modest (DPI);
  - the layout engine (constrained / tight) runs once, at the first render, and is then frozen (a layout
    pass per frame doubled the draw of three axes): fix axis limits, or leave margin, if tick labels grow;
  - what update() changes is *blitted* (FigureRenderer): the data artists (lines, bars, bands) are drawn
    apart from a cached background of everything else (axes, ticks, labels), and static text or legends
    above them come from a cached overlay layer, so while only they change a redraw costs a few ms (about
    10x less than a full draw of three axes). Any other change (an axis rescaled, a title or label edited)
    makes that redraw a full one, after which the changed artist is blitted too; a static data artist goes
    back into the background at the next full draw. An update that rescales an axis on every move makes
    every redraw a full one: still correct, just slower, so set limits once (ax.set_ylim) when the data
    allow.
Expensive inputs of a slider position (training replays) belong in a cache keyed by their inputs
(functools.lru_cache on a notebook-level function), so moving back and forth costs only the render.
"""

from __future__ import annotations

import html
import io
import logging
import time
import traceback
import weakref

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection
from matplotlib.figure import FigureBase
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.spines import Spine
from matplotlib.text import Text
from matplotlib.transforms import Bbox
from PIL import Image

log = logging.getLogger(__name__)

DPI = 90
"""render resolution of live_plot figures (pixels per inch): 6 x 3 in -> 540 x 270 px, and matplotlib's
"small" text (8.3 pt) 10.4 px high, over the figure check's 10 px floor (tests/figure_check.py)"""
AUTO_ANIMATE = True
"""live_plot blits what its update changes after the first slider move (FigureRenderer); False: full draws"""


def slider(value, lo, hi, step, description, *, integer=False, log=False):
    """A slider that only fires on release (continuous_update=False), so redraws never queue up.
    With log=True, lo and hi are base-10 exponents (FloatLogSlider) and `value` is the value itself."""
    if log:
        return widgets.FloatLogSlider(value=value, min=lo, max=hi, step=step, description=description,
                                      continuous_update=False, readout_format=".2e")
    cls = widgets.IntSlider if integer else widgets.FloatSlider
    return cls(value=value, min=lo, max=hi, step=step, description=description,
               continuous_update=False, style={"description_width": "initial"})



def choice(options, value, description):
    """A slider over a few precomputed settings (labels, or (label, value) pairs) that fires on release only,
    so a move replays one cached result and never queues redraws."""
    return widgets.SelectionSlider(options=list(options), value=value, description=description,
                                   continuous_update=False, style={"description_width": "initial"})

# ---- live_plot ------------------------------------------------------------------------------------


def format_value(control) -> str:
    """A control's value as the status line writes it: a selection's label, an int, a float to 6 digits."""
    if isinstance(control, widgets.widget_selection._Selection):  # .label is '' until the index first changes
        return str(control._options_labels[control.index]) if control.index is not None else ""
    value = control.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:d}" if isinstance(value, int) else f"{value:.6g}"


def control_label(name: str, control) -> str:
    """What the status line calls a control: its description (what the reader sees), else its keyword."""
    return getattr(control, "description", "") or name


def encode_png(canvas: FigureCanvasAgg) -> bytes:
    """The canvas's current pixels as PNG (fast zlib level: the image is about 15 KB either way, and level 1
    saves a few ms per frame over print_png's default)."""
    width, height = canvas.get_width_height()
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buffer = io.BytesIO()
    image.save(buffer, format="png", compress_level=1)
    return buffer.getvalue()


def _animatable(artist, owner_patch) -> bool:
    """Can this direct child of an axes (or of the figure) be drawn on its own? Not the axis machinery
    (ticks are rebuilt inside Axis.draw), not images (Axes.draw keeps animated images in the background
    anyway), not the owner's background patch, nor what draws nothing (hidden, empty text)."""
    if isinstance(artist, Axis | Spine | AxesImage | Axes | FigureBase) or artist is owner_patch:
        return False
    return artist.get_visible() and not (isinstance(artist, Text) and not artist.get_text())


def drawing_order(fig) -> list:
    """The drawable direct children of the axes and of the figure, in the order a full draw paints them:
    axes by zorder, children by zorder within one, then the figure's own artists (texts, legends)."""
    order = []
    for owner in (*sorted(fig.axes, key=lambda ax: ax.get_zorder()), fig):
        order += sorted((a for a in owner.get_children() if _animatable(a, owner.patch)), key=lambda a: a.get_zorder())
    return order


def animate_changed(fig) -> list:
    """Mark animated=True what update() just changed among the drawable children of the axes and of the
    figure (matplotlib marks a changed artist stale until its next draw). -> the artists newly marked."""
    changed = [a for a in drawing_order(fig) if a.stale and not a.get_animated()]
    for artist in changed:
        artist.set_animated(True)
    return changed


def animate_data_artists(fig) -> list:
    """Mark animated=True the data artists of every axes (lines, patches such as bars, collections such as
    fill_between bands): a first guess at what an update will move, so that even the first slider move
    is blitted. -> the artists newly marked (FigureRenderer returns the ones that never move to the
    background at its next full draw)."""
    marked = [a for ax in fig.axes for a in ax.get_children()
              if isinstance(a, Line2D | Patch | Collection) and _animatable(a, ax.patch) and not a.get_animated()]
    for artist in marked:
        artist.set_animated(True)
    return marked


def animated_artists(fig) -> list:
    """Every artist marked animated=True (nested ones too), in drawing order."""
    ordered = []
    for ax in sorted(fig.axes, key=lambda ax: ax.get_zorder()):
        ordered += sorted(ax.findobj(lambda a: a.get_animated(), include_self=False), key=lambda a: a.get_zorder())
    own = [a for c in fig.get_children() if not isinstance(c, Axes | FigureBase)
           for a in c.findobj(lambda a: a.get_animated())]
    return ordered + sorted(own, key=lambda a: a.get_zorder())


def _extent(artist, renderer):
    """An artist's window extent; the whole figure when it cannot say (then it counts as overlapping)."""
    try:
        return artist.get_window_extent(renderer)
    except Exception:  # an artist type without a usable extent: be conservative
        return artist.get_figure(root=True).bbox


def _painted_box(artist, renderer):
    """The window box an artist can paint into (its extent, cut to its clip box when it clips)."""
    box = _extent(artist, renderer)
    clip = artist.get_clip_box() if artist.get_clip_on() else None
    return Bbox.intersection(box, clip) if clip is not None else box


def overlay_artists(fig, renderer) -> list:
    """Static artists that a full draw paints *after* an animated one and over the same pixels (a legend
    or a label above moving lines): they go into a cached layer composited on top of the animated ones,
    so the drawing order is kept without re-drawing them every frame. A static artist that is also painted
    *before* an animated one it overlaps (a band between moving bars and a moving line) cannot be a layer
    on top: it is marked animated=True, to be drawn in its place each frame."""
    while True:
        order = drawing_order(fig)
        moving = [i for i, a in enumerate(order) if a.get_animated()]
        boxes = {i: _painted_box(order[i], renderer) for i in moving}
        overlay, between = [], []
        for j, artist in enumerate(order):
            if artist.get_animated() or not moving or j < moving[0]:
                continue
            extent = _extent(artist, renderer)
            touches = [i for i in moving if boxes[i] is not None and extent.overlaps(boxes[i])]
            if any(i < j for i in touches):
                (between if any(i > j for i in touches) else overlay).append(artist)
        if not between:
            return overlay
        for artist in between:
            artist.set_animated(True)


class FigureRenderer:
    """One figure on its own Agg canvas -> PNG, re-drawing only the animated artists while nothing else
    in the figure changed (matplotlib's blitting recipe, plus a cached layer for what lies above them).

    A full draw happens at the first render and whenever fig.stale (matplotlib sets it on any change to a
    non-animated artist, axis limits, scales, labels, added or removed artists): the background (all but
    the animated artists and the overlay) is drawn and cached; the overlay (static artists drawn after and
    over an animated one: legends, labels) is drawn alone onto a cleared canvas and cached as an RGBA
    layer. Any other frame restores the background, draws the animated artists and composites the overlay:
    about 10x faster than a full draw for three axes of fixed limits (ticks and text are most of a draw).
    Every animated artist is drawn each frame from its current state and any other change forces a full
    draw, so the image is always the figure's current state (pixel differences only where an animated
    line crosses a spine, and from rounding in the composite).

    Which artists are animated: those the author created with animated=True, and, with auto_animate,
      - from the first render, every data artist (lines, bars, bands: animate_data_artists), a guess that
        makes even the first slider move a blit; guessed artists that have not changed by the next full
        draw go back into the background there;
      - at any full draw, what the last update changed among the other artists (animate_changed), so
        that the next moves blit it.
    """

    def __init__(self, fig, *, auto_animate: bool = True):
        self.figure, self.auto_animate = fig, auto_animate
        self.canvas = FigureCanvasAgg(fig)  # replaces pyplot's canvas; reused by every render
        self.background, self.overlay, self.animated, self.full_draws = None, None, [], 0
        self.guessed, self.moved = [], set()  # data artists animated on a guess; those seen changing

    def render(self) -> bytes:
        fig = self.figure
        if self.full_draws:  # an animated artist that changed is stale (it just does not tell its axes)
            self.moved.update(a for a in self.guessed if a.stale)
        if self.background is None or fig.stale:
            if self.auto_animate and not self.full_draws:
                self.guessed = animate_data_artists(fig)
            elif self.auto_animate:
                self._settle_guesses()
                animate_changed(fig)
            self._full_draw()
        else:
            self.canvas.restore_region(self.background)
            self._draw_animated()
        fig.stale = False  # drawing a legend re-stales its axes (children report to the axes): not a change
        return encode_png(self.canvas)

    def _settle_guesses(self) -> None:
        """Guessed data artists that never changed go back into the background (drawn once, not per frame)."""
        for artist in self.guessed:
            if artist not in self.moved:
                artist.set_animated(False)
        self.guessed, self.moved = [], set()

    def _full_draw(self) -> None:
        fig, canvas = self.figure, self.canvas
        self.full_draws += 1
        self.animated = animated_artists(fig)
        if not self.animated:
            canvas.draw()
            self.background = self.overlay = None
            return
        if self.full_draws == 1:
            canvas.draw()  # lay the figure out first: the overlay is chosen by where artists paint
        overlay = overlay_artists(fig, canvas.get_renderer())
        self.animated = animated_artists(fig)  # with any static artist caught between two animated ones
        for artist in overlay:
            artist.set_animated(True)  # out of the background (set_animated does not mark anything stale)
        canvas.draw()
        self.background = canvas.copy_from_bbox(fig.bbox)
        self.overlay = self._overlay_layer(overlay)
        for artist in overlay:
            artist.set_animated(False)  # static again: a change to it must still force a full draw
        canvas.restore_region(self.background)
        self._draw_animated()

    def _overlay_layer(self, overlay: list):
        """The overlay artists drawn alone on a cleared (transparent) canvas, cut to where they paint.
        -> (rows, cols, rgb (h, w, 3) float, alpha (h, w, 1) float) or None."""
        if not overlay:
            return None
        self.canvas.get_renderer().clear()
        for artist in overlay:
            self.figure.draw_artist(artist)
        rgba = np.array(self.canvas.buffer_rgba())  # (H, W, 4) uint8, not premultiplied
        rows, cols = np.nonzero(rgba[..., 3].any(axis=1))[0], np.nonzero(rgba[..., 3].any(axis=0))[0]
        if not len(rows):
            return None
        rows, cols = slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1)
        layer = rgba[rows, cols].astype(np.float32)
        return rows, cols, layer[..., :3], layer[..., 3:] / 255.0

    def _draw_animated(self) -> None:
        for artist in self.animated:
            self.figure.draw_artist(artist)
        if self.overlay is not None:
            rows, cols, rgb, alpha = self.overlay
            pixels = np.asarray(self.canvas.buffer_rgba())[rows, cols, :3]  # (h, w, 3) view into the canvas
            pixels[...] = (rgb * alpha + pixels * (1.0 - alpha) + 0.5).astype(np.uint8)


SHOWN: weakref.WeakSet = weakref.WeakSet()
"""every LivePlot built in this kernel and still alive (moved_from_default reads it)"""


def moved_from_default() -> list[str]:
    """The live plots whose controls are not at the values they were built with, as 'marker (default
    marker)': after Run All a notebook leaves every slider at its default (the browser test checks it)."""
    return sorted(f"{w.marker()} (built at {w.default_marker})" for w in list(SHOWN) if w.values() != w.defaults)


HIDE_STATIC_IMAGE = ("<style>.jp-OutputArea-child:has(~ .jp-OutputArea-child .live-plot) .jp-RenderedImage "
                     "{display: none}</style>")
"""CSS a live widget brings along: hide the plain image outputs before it in its cell (its static copy)"""


class LivePlot(widgets.VBox):
    """The widget live_plot returns: children = (*controls, image, status line[, caption]).

    .result  update's last return value (None after update raised)
    .error   the exception of the last redraw, or None
    .redraws how many times update ran; .last_redraw_s  seconds of the last update + render (kernel side),
    .last_update_s  of which update() alone
    .renderer the FigureRenderer (.full_draws: renders that drew everything, not only animated artists)
    """

    def __init__(self, fig, update, controls: dict, *, caption=None, dpi=DPI):
        if not controls:
            raise ValueError("live_plot needs at least one control, e.g. clip=slider(0.2, 0.0, 0.5, 0.05, 'clip')")
        self.update, self.controls, self.figure = update, dict(controls), fig
        self.result, self.error, self.redraws, self.last_redraw_s, self.last_update_s = None, None, 0, None, None
        plt.close(fig)  # out of pyplot: no inline display of it at the end of the cell, ever
        fig.set_dpi(dpi)
        if fig.patch.get_facecolor()[3] < 1:
            fig.patch.set_alpha(1.0)  # an opaque background: the image must read on a dark theme too
        self.renderer = FigureRenderer(fig, auto_animate=AUTO_ANIMATE)
        self.canvas = self.renderer.canvas
        self.image = widgets.Image(format="png")
        self.image.add_class("live-plot-image")
        self.status = widgets.HTML()
        self.status.add_class("live-plot-marker")
        extra = [widgets.HTML(f"<small>{html.escape(caption)}</small>")] if caption else []
        hide_static = widgets.HTML(HIDE_STATIC_IMAGE)
        super().__init__(children=[*self.controls.values(), self.image, self.status, *extra, hide_static])
        self.add_class("live-plot")
        self.redraw()
        if self.error is not None:
            raise self.error  # the first draw failed: fail the cell that builds the widget
        if fig.get_layout_engine() is not None:
            fig.set_layout_engine("none")  # keep the first render's layout: no layout pass per frame
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.defaults = self.values()
        SHOWN.add(self)

    def values(self) -> dict:
        """{keyword: value} of every control, as update receives them."""
        return {name: control.value for name, control in self.controls.items()}

    @property
    def default_marker(self) -> str:
        return "; ".join(f"{control_label(n, c)}={self.defaults[n]}" for n, c in self.controls.items())

    def marker(self) -> str:
        """`clip=0.3; |A|=1.5`: the control values as the status line states them (description=value)."""
        return "; ".join(f"{control_label(n, c)}={format_value(c)}" for n, c in self.controls.items())

    def _on_change(self, change) -> None:
        self.redraw()

    def redraw(self) -> None:
        """update(**values), then one draw into the image and the status line. An exception inside
        update is logged and shown in the status line (never swallowed); set_value re-raises it."""
        start = time.perf_counter()
        marker = self.marker()
        try:
            result = self.update(**self.values())
            self.last_update_s = time.perf_counter() - start
            png = self.renderer.render()
        except Exception as exc:
            self.result, self.error = None, exc
            log.exception("live_plot: update(%s) raised", marker)
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.status.value = (f"<pre style='color:#b00020;white-space:pre-wrap;margin:0'>"
                                 f"error at {html.escape(marker)}:\n{html.escape(text)}</pre>")
            self.status.layout.display = None  # an error is for the reader
            return
        self.result, self.error = result, None
        self.redraws += 1
        width, height = self.canvas.get_width_height()
        self.image.width, self.image.height = str(width), str(height)  # fixed size: no page jump on redraw
        self.image.value = png  # the image first: when the status line changes, the new image is in place
        self.status.value = f"<code>rendered {html.escape(marker)}</code>"
        self.status.layout.display = "none"  # for the browser test, not the reader: the controls say it
        self.last_redraw_s = time.perf_counter() - start

    def __repr__(self) -> str:  # short and deterministic (the default repr dumps the PNG bytes)
        return f"LivePlot({self.marker()})"

    def _ipython_display_(self) -> None:
        """The figure as it is now, as a plain image output (what a reader sees without a kernel, or on a code
        host), then the live widget; once the widget renders, HIDE_STATIC_IMAGE hides the plain copy."""
        from IPython.display import Image as ImageOutput
        from IPython.display import display

        display(ImageOutput(data=self.image.value, format="png", width=int(self.image.width)))
        display(self._repr_mimebundle_(), raw=True)


def live_plot(fig, update, *, caption=None, **controls) -> LivePlot:
    """Show `fig` in an Image widget and redraw it in place whenever a control moves.

    update(**{keyword: control value}) mutates the figure's artists (set_data / set_height / set_text) and
    returns the numbers a check cell prints (kept as w.result). It runs once now with the initial values,
    then on every change of any control; each run is followed by one Agg draw of `fig` into the image.
    fig is closed in pyplot (never displayed inline) and redrawn on its own Agg canvas at DPI; its layout
    is computed at the first render and then kept. The data artists, and whatever else update is seen to
    change, are redrawn alone over a cached background while the rest of the figure is unchanged
    (FigureRenderer): the fast path, for axes of fixed limits.
    Display the returned widget as the cell's last expression (mark the cell # NBVAL_IGNORE_OUTPUT).
    """
    return LivePlot(fig, update, controls, caption=caption)


def control_of(w: LivePlot, description):
    """The control of live_plot widget `w` labelled `description` (or passed as keyword `description`)."""
    control = next((c for n, c in w.controls.items() if control_label(n, c) == description), None)
    if control is None:
        control = w.controls.get(description)
    if control is None:
        labels = [control_label(n, c) for n, c in w.controls.items()]
        raise KeyError(f"no control labelled {description!r}; have {labels}")
    return control


def set_value(w: LivePlot, description, value):
    """Set the control of live_plot widget `w` labelled `description` (or passed as keyword `description`)
    and return the redraw's result. The image and status line update in place (widget state, not cell
    output), so nothing is printed into the calling cell; an exception in update is raised here."""
    control_of(w, description).value = value
    if w.error is not None:
        raise w.error
    return w.result


def probe(w: LivePlot, settings: dict):
    """update's result with the controls set as `settings` says ({description: value}), then every control
    (and so the figure) back where it was: a check cell reads other positions and leaves the reader the
    default view."""
    before = {description: control_of(w, description).value for description in settings}
    try:
        for description, value in settings.items():
            result = set_value(w, description, value)
        return result
    finally:
        for description, value in reversed(before.items()):
            set_value(w, description, value)
