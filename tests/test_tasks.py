"""The toy tasks (EchoTask in the twins, the others in workbook/tasks.py) keep the Task contract, and
their rewards mean what their docstrings say."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import grpo_fixed
from workbook.tasks import TASKS, LengthTask, ReverseTask, SparseMatchTask

ALL = pytest.mark.parametrize("name", sorted(TASKS))


class UniformPolicy(nn.Module):
    """Every token equally likely at every position (temperature 1): the 'random policy' of the docstrings."""

    def __init__(self, vocab_size):
        super().__init__()
        self.vocab_size, self.bos_id = vocab_size, vocab_size

    def forward(self, tokens):
        return torch.zeros(tokens.shape[0], tokens.shape[1], self.vocab_size)


def random_rollout(task, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = task.prompts(n, g)
    completions, mask, _, _ = grpo_fixed.generate(UniformPolicy(task.vocab_size), prompts, task, 1.0, g)
    return prompts, completions, mask, task.reward(prompts, completions, mask)


def answer(tokens, width, eos=0):
    """A completion of `width` positions: tokens, EOS, then EOS padding; mask up to the first EOS. -> (1, W)"""
    padded = (list(tokens) + [eos] * width)[:width]
    mask = [True] * min(width, len(tokens) + 1) + [False] * max(0, width - len(tokens) - 1)
    return torch.tensor([padded]), torch.tensor([mask])


@ALL
def test_contract(name):
    task = TASKS[name]()
    assert 0 <= task.eos_id < task.vocab_size and task.max_completion_length >= 1 and task.prompt_length >= 0
    prompts = task.prompts(5, torch.Generator().manual_seed(0))
    assert prompts.shape == (5, task.prompt_length) and prompts.dtype == torch.long
    assert ((prompts >= 0) & (prompts < task.vocab_size) & (prompts != task.eos_id)).all()
    _, completions, mask, reward = random_rollout(task, 64)
    assert completions.shape == mask.shape == (64, task.max_completion_length)
    assert reward.shape == (64,) and reward.dtype == torch.float32
    assert ((reward >= 0) & (reward <= 1)).all()


@ALL
def test_prompts_follow_the_generator(name):
    task = TASKS[name]()
    a = task.prompts(8, torch.Generator().manual_seed(1))
    assert torch.equal(a, task.prompts(8, torch.Generator().manual_seed(1)))


@ALL
def test_reward_ignores_positions_after_the_first_eos(name):
    task = TASKS[name]()
    prompts, completions, mask, reward = random_rollout(task, 200, seed=2)
    junk = torch.randint(0, task.vocab_size, completions.shape, generator=torch.Generator().manual_seed(3))
    assert torch.equal(task.reward(prompts, torch.where(mask, completions, junk), mask), reward)


def perfect(name, prompt):
    """The best completion for one prompt (a list of ints)."""
    return {"echo": prompt, "reverse": prompt[::-1], "sparse": [prompt[0] % 6 + 1] if prompt else [],
            "length": [1, 2, 3, 1]}[name]


@ALL
def test_perfect_answers_score_one(name):
    task = TASKS[name]()
    for prompt in task.prompts(10, torch.Generator().manual_seed(4)).tolist():
        completions, mask = answer(perfect(name, prompt), task.max_completion_length)
        assert task.reward(torch.tensor([prompt]).reshape(1, -1), completions, mask).item() == 1.0, prompt


@pytest.mark.parametrize("task, prompt, tokens, expected", [
    (ReverseTask(), [1, 2, 3], [3, 2, 1], 1.0),
    (ReverseTask(), [1, 2, 3], [1, 2, 3], 0.5),  # middle token and EOS right
    (ReverseTask(), [1, 2, 3], [3, 2, 1, 4], 0.75),  # no EOS where it belongs
    (ReverseTask(), [1, 2, 3], [3], 0.25),  # stopped early: only the first token
    (SparseMatchTask(), [6], [1], 1.0),  # 6 -> 1 (mod 6, 1-based)
    (SparseMatchTask(), [2], [3], 1.0),
    (SparseMatchTask(), [2], [3, 3], 0.0),  # right token, no EOS after it
    (SparseMatchTask(), [2], [4], 0.0),
    (SparseMatchTask(), [2], [], 0.0),
    (LengthTask(), [], [1, 2, 3, 1], 1.0),
    (LengthTask(), [], [1, 2, 3], 0.8),
    (LengthTask(), [], [1, 2, 3, 1, 2], 0.8),
    (LengthTask(), [], [], 0.2),
    (LengthTask(), [], [1] * 8, 0.0),  # never stopped
], ids=lambda v: type(v).__name__ if not isinstance(v, (list, float)) else None)
def test_partial_credit(task, prompt, tokens, expected):
    completions, mask = answer(tokens, task.max_completion_length)
    prompts = torch.tensor([prompt], dtype=torch.long).reshape(1, task.prompt_length)
    assert task.reward(prompts, completions, mask).item() == pytest.approx(expected)


def test_sparse_random_policy_succeeds_about_one_time_in_49():
    _, _, _, reward = random_rollout(SparseMatchTask(), 20000, seed=5)
    assert set(reward.unique().tolist()) <= {0.0, 1.0}
    p, n = 1 / 49, 20000  # right token (1/7), then EOS (1/7)
    assert abs(reward.mean().item() - p) <= 5 * (p * (1 - p) / n) ** 0.5


@pytest.mark.parametrize("name", ["echo", "reverse"])
def test_random_policy_scores_low(name):
    _, _, _, reward = random_rollout(TASKS[name](), 5000, seed=6)
    assert 0.05 < reward.mean().item() < 0.25
