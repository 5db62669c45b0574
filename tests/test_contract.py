"""Config validation and the Task contract: bad settings and bad task output fail loudly, in both twins."""

from __future__ import annotations

import pytest
import torch

import grpo_buggy
import grpo_fixed

TWINS = pytest.mark.parametrize("module", [grpo_fixed, grpo_buggy], ids=["fixed", "buggy"])


@TWINS
def test_defaults(module):
    cfg = module.make_config()
    assert cfg == module.Config()
    assert (cfg.prompts_per_batch, cfg.group_size, cfg.clip, cfg.adv_eps, cfg.max_grad_norm) == (16, 8, 0.2, 1e-8, 1.0)


@TWINS
def test_unknown_option_is_a_type_error(module):
    with pytest.raises(TypeError, match="unknown config option"):
        module.train(steps=1, learning_rate=0.1)


@TWINS
@pytest.mark.parametrize("option, value", [
    ("group_size", 1), ("prompts_per_batch", 0), ("inner_epochs", 0), ("minibatches", 0), ("minibatches", 10**6),
    ("temperature", 0.0), ("temperature", float("inf")), ("lr", -1e-3), ("clip", -0.1), ("clip", float("nan")),
    ("adv_eps", 0.0), ("adv_eps", float("inf")), ("max_grad_norm", 0.0), ("dropout", 1.0), ("steps", -1),
])
def test_bad_values_are_value_errors(module, option, value):
    with pytest.raises(ValueError, match=option):
        module.make_config(**{option: value})


class BadRewardShape(grpo_fixed.EchoTask):
    def reward(self, prompts, completions, mask):
        return super().reward(prompts, completions, mask)[:-1]


class NaNReward(grpo_fixed.EchoTask):
    def reward(self, prompts, completions, mask):
        r = super().reward(prompts, completions, mask)
        r[0] = float("nan")
        return r


class BadPromptShape(grpo_fixed.EchoTask):
    def prompts(self, n, generator=None):
        return super().prompts(n + 1, generator)


class ListReward(grpo_fixed.EchoTask):
    def reward(self, prompts, completions, mask):
        return super().reward(prompts, completions, mask).tolist()


@TWINS
@pytest.mark.parametrize("task, pattern", [(BadRewardShape(), "shape"), (NaNReward(), "non-finite"),
                                           (BadPromptShape(), "task.prompts")], ids=["reward-shape", "nan-reward",
                                                                                     "prompt-shape"])
def test_bad_task_output_is_a_clear_error(module, task, pattern):
    with pytest.raises(ValueError, match=pattern):
        module.train(task, seed=0, steps=1, prompts_per_batch=2, group_size=2)


@TWINS
def test_reward_as_a_list_is_accepted(module):
    (stats,) = module.train(ListReward(), seed=0, steps=1, prompts_per_batch=2, group_size=2)
    assert 0.0 <= stats["reward"] <= 1.0


def test_echo_task_reward():
    task = grpo_fixed.EchoTask()
    prompts = torch.tensor([[1, 2], [3, 4], [5, 5]])
    completions = torch.tensor([[1, 2, 0, 0], [3, 1, 0, 0], [5, 5, 5, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert task.reward(prompts, completions, mask).tolist() == pytest.approx([1.0, 2 / 3, 2 / 3])
