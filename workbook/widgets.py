"""Slider helpers: ipywidgets `interactive` around a draw function, tuned for quick redraws.

draw(**values) builds one small matplotlib figure, calls plt.show(), and returns a few numbers
(the notebook's check cell sets a slider from Python and prints `w.result`, which nbval compares).
"""

from __future__ import annotations

import ipywidgets as widgets

from workbook.plots import figures_not_shown


def slider(value, lo, hi, step, description, *, integer=False, log=False):
    """A slider that only fires on release (continuous_update=False), so redraws never queue up."""
    if log:
        cls = widgets.FloatLogSlider
        return cls(value=value, min=lo, max=hi, step=step, description=description,
                   continuous_update=False, readout_format=".2e")
    cls = widgets.IntSlider if integer else widgets.FloatSlider
    return cls(value=value, min=lo, max=hi, step=step, description=description,
               continuous_update=False, style={"description_width": "initial"})


def live_figure(draw, height="360px", **controls):
    """interactive(draw, **controls) with a fixed-height output area (no page jumping on redraw).

    Returns the `interactive` widget: display it as the cell's last expression; its
    children[:-1] are the controls, children[-1] the Output, and .result draw's return value.
    """
    w = widgets.interactive(draw, **controls)
    w.children[-1].layout.height = height
    return w


def set_value(w, description, value):
    """Set the control labelled `description` on an `interactive`; draw runs synchronously and its
    return value is returned. The redrawn figure is not displayed (see plots.figures_not_shown: under
    nbval it would otherwise land in the calling cell's outputs)."""
    for child in w.children[:-1]:
        if getattr(child, "description", None) == description:
            with figures_not_shown():
                child.value = value
            return w.result
    raise KeyError(f"no control labelled {description!r}; have {[c.description for c in w.children[:-1]]}")
