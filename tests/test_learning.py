"""Does it learn? A short run in the fast suite; full default runs over seeds and the extra toy tasks
of workbook/tasks.py are marked slow.

Thresholds (measured on this 2-core CPU machine, default config, 80 iterations; final_reward is the
mean reward of the last 10 iterations, as the CLI reports it):
  EchoTask     fixed .989 .988 .986   buggy .105 .146 .131  -> fixed >= 0.9, buggy <= fixed - 0.3
  ReverseTask  fixed .760 .597 .689                          -> >= 0.5 (a prompt-blind policy scores <= 0.4)
  SparseMatch  fixed .978 .977 .982                          -> >= 0.9; early zero-variance groups >= 0.6
  LengthTask   fixed .995 .991 .996                          -> >= 0.9
  25 iterations, seed 0: first five .175, last five .837      -> last five >= 0.6 and >= first five + 0.4
Training is deterministic for a seed (one torch thread, seeded generator), so the margins guard against
torch/platform drift, not against noise.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch

import grpo_buggy
import grpo_fixed
import grpo_support
from workbook.run_summary import final_reward
from workbook.tasks import LengthTask, ReverseTask, SparseMatchTask

SEEDS = [0, 1, 2]


def mean_reward(history):
    return sum(s["reward"] for s in history) / len(history)


def assert_healthy(history, caplog):
    """No non-finite loss, no failed health check at any iteration, nothing logged on the grpo logger."""
    assert all(math.isfinite(s["loss"]) and s["nonfinite_steps"] == 0 for s in history)
    assert grpo_support.summarize_run(history, 0.0)["nan_losses"] == 0
    unhealthy = {s["iteration"]: s["health"] for s in history if s["health"]}
    assert not unhealthy, f"health checks failed on a fixed run: {unhealthy}"
    warnings = [r.getMessage() for r in caplog.records if r.name == "grpo" and r.levelno >= logging.WARNING]
    assert not warnings, warnings


@pytest.fixture
def grpo_log(caplog):
    caplog.set_level(logging.WARNING, logger="grpo")  # hybrids elsewhere in this worker may have raised it
    return caplog


# ----------------------------------------------------------------------------------------------
# Fast


def test_fixed_improves_clearly_in_25_iterations(grpo_log):
    history = grpo_fixed.train(seed=0, steps=25)
    first, last = mean_reward(history[:5]), mean_reward(history[-5:])
    assert last >= 0.6 and last >= first + 0.4, f"reward {first:.3f} -> {last:.3f}"
    assert_healthy(history, grpo_log)


@pytest.mark.parametrize("module", [grpo_fixed, grpo_buggy], ids=["fixed", "buggy"])
def test_training_is_deterministic_per_seed(module):
    run = lambda seed: [(s["reward"], s["loss"]) for s in module.train(seed=seed, steps=2, prompts_per_batch=4)]
    assert run(0) == run(0)
    assert run(0) != run(1)


@pytest.mark.parametrize("module", [grpo_fixed, grpo_buggy], ids=["fixed", "buggy"])
def test_on_iteration_sees_every_stats_dict(module):
    seen = []
    history = module.train(seed=0, steps=3, prompts_per_batch=4, on_iteration=seen.append)
    assert seen == history and [s["iteration"] for s in history] == [0, 1, 2]


@pytest.mark.parametrize("module", [grpo_fixed, grpo_buggy], ids=["fixed", "buggy"])
def test_every_logged_stat_is_documented(module):
    (stats,) = module.train(seed=0, steps=1, prompts_per_batch=4)
    undocumented = set(stats) - set(grpo_support.STATS) - {"iteration", "seconds", "health"}
    assert not undocumented, f"stats without a STATS row: {undocumented}"
    assert set(grpo_support.STATS) <= set(stats), "STATS documents a stat that is never logged"
    for name, row in grpo_support.STATS.items():
        assert row.meaning and row.why and row.lo <= row.hi, name


@pytest.mark.parametrize("task", [ReverseTask(), SparseMatchTask(), LengthTask()], ids=lambda t: type(t).__name__)
def test_tasks_run_two_iterations(task, grpo_log):
    """Every toy task satisfies the Task contract well enough for two iterations (LengthTask: empty prompts)."""
    history = grpo_fixed.train(task, seed=0, steps=2, prompts_per_batch=4)
    assert len(history) == 2 and all(0.0 <= s["reward"] <= 1.0 for s in history)
    assert_healthy(history, grpo_log)


# ----------------------------------------------------------------------------------------------
# Slow: default settings, several seeds, extra tasks


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_default_task_fixed_learns_buggy_does_not(seed, grpo_log):
    fixed = grpo_fixed.train(seed=seed)
    assert len(fixed) == grpo_fixed.Config.steps
    assert final_reward(fixed) >= 0.9, f"fixed final reward {final_reward(fixed):.3f} (seed {seed})"
    assert_healthy(fixed, grpo_log)
    buggy = grpo_buggy.train(seed=seed)
    assert final_reward(buggy) <= final_reward(fixed) - 0.3, (
        f"buggy {final_reward(buggy):.3f} vs fixed {final_reward(fixed):.3f} (seed {seed})")


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_reverse_task_learned_by_conditioning_on_the_prompt(seed, grpo_log):
    """A policy that ignores the prompt matches each reversed token with probability 1/5 at best, so it
    scores at most (1 + 3 / 5) / 4 = 0.4; scoring >= 0.5 needs the prompt."""
    history = grpo_fixed.train(ReverseTask(), seed=seed)
    assert mean_reward(history[:5]) < 0.35
    assert final_reward(history) >= 0.5, f"final reward {final_reward(history):.3f} (seed {seed})"
    assert_healthy(history, grpo_log)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_sparse_task_learned_despite_zero_variance_groups(seed, grpo_log):
    history = grpo_fixed.train(SparseMatchTask(), seed=seed)
    early = sum(s["zero_var_groups"] for s in history[:3]) / 3
    assert early >= 0.6, f"only {early:.2f} of early groups had zero reward variance"
    assert final_reward(history) >= 0.9, f"final reward {final_reward(history):.3f} (seed {seed})"
    assert_healthy(history, grpo_log)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_length_task_learned_without_a_prompt(seed, grpo_log):
    task = LengthTask()
    assert task.prompt_length == 0
    history = grpo_fixed.train(task, seed=seed)
    assert final_reward(history) >= 0.9, f"final reward {final_reward(history):.3f} (seed {seed})"
    assert_healthy(history, grpo_log)


def test_prompt_blind_bound_of_reverse_task():
    """The 0.4 bound used above, checked: the best prompt-independent answer scores 0.4 on average."""
    task = ReverseTask()
    g = torch.Generator().manual_seed(0)
    prompts = task.prompts(20000, g)
    completions = torch.tensor([[1, 1, 1, 0, 0]]).expand(20000, -1)  # any fixed 3 tokens then EOS
    mask = torch.tensor([[True, True, True, True, False]]).expand(20000, -1)
    assert task.reward(prompts, completions, mask).mean().item() == pytest.approx(0.4, abs=0.01)
