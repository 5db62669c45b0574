"""What a training run comes to: `final_reward` (the twins' own summary of a history) and `tail_mean`, the
NaN-aware mean of the last values of any per-iteration series that the notebooks read the same way."""

from __future__ import annotations

import math

import grpo_support

TAIL = 10
"""iterations averaged at the end of a run: summarize_run's final_reward is the mean reward over the last 10"""


def final_reward(history) -> float:
    """Mean reward of the last TAIL iterations of a history (a list of stats dicts), as the command line reports
    it: grpo_support.summarize_run(history, 0.0)["final_reward"]."""
    return grpo_support.summarize_run(history, 0.0)["final_reward"]


def tail_mean(values, n: int = TAIL) -> float:
    """Mean of the last n values with NaNs skipped; NaN when all of them are NaN (or there are none).

    Skipping rather than propagating: a series such as "mean length of the right answers" is NaN at an
    iteration that has none, and one such iteration should not erase the other n - 1. Infinities are kept
    (a diverged value stays visible). For a history's rewards (never NaN) this is final_reward."""
    tail = [v for v in list(values)[-n:] if not math.isnan(v)]
    return sum(tail) / len(tail) if tail else math.nan
