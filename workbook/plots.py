"""Plot helpers shared by the notebooks: one colour per twin, side-by-side axes, the one smoother and curve plotter,
animated artists."""

from __future__ import annotations

import math

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


def smooth(values, n: int = 5) -> list[float]:
    """Trailing mean over up to n values: out[i] = mean(values[i - n + 1 : i + 1]), NaNs skipped, NaN where the
    window holds only NaNs (an iteration with nothing to measure does not blank its neighbours). n = 1 returns
    the values as they are."""
    out = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - n + 1) : i + 1] if not math.isnan(v)]
        out.append(sum(window) / len(window) if window else math.nan)
    return out


def curves(ax, runs: dict, values="reward", *, colors: dict | None = None, window: int = 1,
           ylabel: str | None = None):
    """One line per labelled run of its values per iteration, smoothed by a trailing mean over `window`
    iterations (see smooth). values: a stats key, read from runs that are histories (lists of stats dicts), or
    values(run) -> one number per iteration, for runs of any shape. ylabel defaults to the key. -> ax"""
    for label, run in runs.items():
        ys = [s[values] for s in run] if isinstance(values, str) else values(run)
        ax.plot(smooth(ys, window), label=label, color=(colors or {}).get(label))
    ax.set_xlabel("iteration")
    ax.set_ylabel(ylabel if ylabel is not None else values if isinstance(values, str) else "")
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
