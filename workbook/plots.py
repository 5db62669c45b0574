"""Plot helpers shared by the notebooks: one colour per twin, side-by-side axes, training curves, animated artists."""

from __future__ import annotations

import matplotlib.pyplot as plt

BUGGY = "#d62728"
"""colour of everything from grpo_buggy"""
FIXED = "#1f77b4"
"""colour of everything from grpo_fixed"""
REFERENCE = "#555555"
"""colour of the hand calculation / spec"""


def buggy_vs_fixed(title: str | None = None, *, figsize=(9.0, 3.2), sharey=True):
    """A figure with two axes titled 'buggy' and 'fixed'. -> fig, (ax_buggy, ax_fixed)"""
    fig, (ax_b, ax_f) = plt.subplots(1, 2, figsize=figsize, sharey=sharey, layout="constrained")
    ax_b.set_title("grpo_buggy", color=BUGGY)
    ax_f.set_title("grpo_fixed", color=FIXED)
    if title:
        fig.suptitle(title)
    return fig, (ax_b, ax_f)


def curves(ax, histories: dict, key: str, *, colors: dict | None = None, smooth: int = 1):
    """Plot stats[key] per iteration for each labelled history (a list of stats dicts)."""
    for label, history in histories.items():
        ys = [s[key] for s in history]
        if smooth > 1:
            ys = [sum(ys[max(0, i - smooth + 1) : i + 1]) / len(ys[max(0, i - smooth + 1) : i + 1])
                  for i in range(len(ys))]
        ax.plot(ys, label=label, color=(colors or {}).get(label))
    ax.set_xlabel("iteration")
    ax.set_ylabel(key)
    ax.legend(fontsize="small")
    return ax


def animated(*artists):
    """Mark artists animated=True (containers too: ax.bar's BarContainer, a list of lines) and return the
    first argument: `bars = animated(ax.bar(xs, hs))`. In a live_plot (workbook.widgets) these are redrawn
    alone over a cached background while the rest of the figure is unchanged: the fast path for axes of
    fixed limits. Set limits once (ax.set_ylim) rather than autoscaling per frame."""
    for artist in artists:
        if isinstance(artist, list | tuple):  # matplotlib's containers are tuples (of tuples: errorbar)
            animated(*artist)
        elif artist is not None:
            artist.set_animated(True)
    return artists[0] if artists else None


class figures_not_shown:  # noqa: N801  (used like a function: `with figures_not_shown(): ...`)
    """Context manager: inside the block, plt.show() closes the open figures instead of displaying them.

    For nbval check cells that move a slider from Python (workbook.widgets.set_value): nbval does not
    route Output-widget messages, so the redrawn figure would land in the check cell's own outputs
    (an extra '<Figure ...>' that the stored notebook does not have). The draw function still runs and
    returns its numbers; in a browser the widget keeps its previous figure until the next redraw.
    """

    def __enter__(self):
        self._show = plt.show
        plt.show = lambda *args, **kwargs: plt.close("all")
        return self

    def __exit__(self, *exc):
        plt.show = self._show
        return False
