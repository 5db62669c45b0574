"""workbook/run_summary.py: final_reward is the command line's summary of a history, tail_mean the NaN-aware mean
of the last values of a series (the notebooks' run tables read both)."""

from __future__ import annotations

import math

import grpo_support
from workbook.run_summary import TAIL, final_reward, tail_mean


def history(rewards):
    return [{"reward": r, "loss": 0.0} for r in rewards]


def test_final_reward_is_the_mean_of_the_last_ten_rewards_as_the_cli_reports_it():
    h = history([0.0] * 5 + [0.5] * 5 + [1.0] * 5)
    assert TAIL == 10
    assert final_reward(h) == 0.75
    assert final_reward(h) == grpo_support.summarize_run(h, 0.0)["final_reward"]
    assert final_reward(h[:3]) == 0.0


def test_tail_mean_of_plain_values():
    assert tail_mean([1, 2, 3, 4], n=2) == 3.5
    assert tail_mean([5], n=10) == 5
    assert tail_mean(range(20)) == 14.5  # the last TAIL = 10 by default


def test_tail_mean_skips_nans_and_is_nan_when_nothing_is_left():
    assert tail_mean([0.0, 10.0, 20.0, math.nan], n=3) == 15.0
    assert math.isnan(tail_mean([math.nan], n=3))
    assert math.isnan(tail_mean([]))
    assert tail_mean([1.0, math.inf], n=2) == math.inf  # a diverged value stays visible
