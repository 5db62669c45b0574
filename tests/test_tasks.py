"""The toy tasks (EchoTask in the twins, the others in workbook/tasks.py) keep the Task contract, and
their rewards mean what their docstrings say."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import grpo_fixed
from workbook.tasks import TASKS, LengthTask, RambleTask, ReverseTask, SparseMatchTask

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
            "length": [1, 2, 3, 1], "ramble": [sum(prompt) % 5 + 1]}[name]


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
    (RambleTask(), [1, 2], [4], 1.0),  # (1 + 2) mod 5 + 1 = 4, then EOS
    (RambleTask(), [5, 4], [5], 1.0),  # (5 + 4) mod 5 + 1 = 5
    (RambleTask(), [1, 2], [4, 1, 3, 3, 2, 5, 1], 1.0),  # anything may follow the answer before the EOS
    (RambleTask(), [1, 2], [4, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5], 1.0),  # EOS as the 12th token: still in time
    (RambleTask(), [1, 2], [4] * 12, 0.0),  # right answer, never stopped (truncated)
    (RambleTask(), [1, 2], [3], 0.0),  # wrong answer
    (RambleTask(), [1, 2], [], 0.0),  # EOS first: no answer
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


def test_ramble_random_policy_scores_its_documented_rate():
    _, _, mask, reward = random_rollout(RambleTask(), 20000, seed=7)
    p, n = (1 / 6) * (1 - (5 / 6) ** 11), 20000  # right answer (1/6), then an EOS within the next 11 tokens
    assert abs(reward.mean().item() - p) <= 5 * (p * (1 - p) / n) ** 0.5


def ramble_random_lengths():
    """Exact mean lengths (EOS included) of right and of wrong RambleTask completions under a uniform
    random policy over V = 6 tokens, T = 12: the first token is EOS (length 1, wrong), the answer (1/6),
    or another token (4/6); after it each position is EOS with probability 1/6, until position 12."""
    q = 5 / 6
    ended = {length: q ** (length - 2) / 6 for length in range(2, 13)}  # EOS at `length`, after a non-EOS first
    truncated = q**11  # no EOS in positions 2..12: length 12, wrong
    right_mass = sum(ended.values()) / 6
    right_mean = sum(length * p for length, p in ended.items()) / sum(ended.values())
    any_length = sum(length * p for length, p in ended.items()) + 12 * truncated  # mean length after a non-EOS
    wrong_mass = 1 / 6 + 4 / 6 + truncated / 6
    wrong_mean = (1 * 1 / 6 + any_length * 4 / 6 + 12 * truncated / 6) / wrong_mass
    assert abs(right_mass + wrong_mass - 1) < 1e-12
    return right_mean, wrong_mean


def test_ramble_lengths_of_a_random_policy_match_the_docstring():
    right_mean, wrong_mean = ramble_random_lengths()
    assert (round(right_mean, 2), round(wrong_mean, 2)) == (5.29, 5.33)  # the numbers in the docstring
    _, completions, mask, reward = random_rollout(RambleTask(), 20000, seed=8)
    length = mask.sum(dim=1).float()
    for sample, exact in ((length[reward == 0], wrong_mean), (length[reward == 1], right_mean)):
        assert abs(sample.mean().item() - exact) <= 5 * sample.std().item() / sample.numel() ** 0.5
    truncated = ~(completions == RambleTask.eos_id).any(dim=1)  # reached the limit without an EOS
    p = (5 / 6) ** 12
    assert abs(truncated.float().mean().item() - p) <= 5 * (p * (1 - p) / 20000) ** 0.5
    assert (reward[truncated] == 0).all() and (length[truncated] == RambleTask.max_completion_length).all()
