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


class BadRewardShape(grpo_fixed.AdditionTask):
    def reward(self, prompts, completions):
        return super().reward(prompts, completions)[:-1]


class NaNReward(grpo_fixed.AdditionTask):
    def reward(self, prompts, completions):
        r = super().reward(prompts, completions)
        r[0] = float("nan")
        return r


class BadPromptShape(grpo_fixed.AdditionTask):
    def prompts(self, n, generator=None):
        return super().prompts(n + 1, generator)


class PromptIds(grpo_fixed.AdditionTask):
    """Token ids instead of text: the task contract says prompts are strings."""

    def prompts(self, n, generator=None):
        return [[1, 4, 13, 5, 14] for _ in range(n)]


class ListReward(grpo_fixed.AdditionTask):
    def reward(self, prompts, completions):
        return super().reward(prompts, completions).tolist()


@TWINS
@pytest.mark.parametrize("task, pattern", [(BadRewardShape(), "shape"), (NaNReward(), "non-finite"),
                                           (BadPromptShape(), "task.prompts"), (PromptIds(), "strings")],
                         ids=["reward-shape", "nan-reward", "prompt-shape", "prompt-ids"])
def test_bad_task_output_is_a_clear_error(module, task, pattern):
    with pytest.raises(ValueError, match=pattern):
        module.train(task, seed=0, steps=1, prompts_per_batch=2, group_size=2)


@TWINS
def test_reward_as_a_list_is_accepted(module):
    (stats,) = module.train(ListReward(), seed=0, steps=1, prompts_per_batch=2, group_size=2)
    assert 0.0 <= stats["reward"] <= 1.0


def test_addition_task_reward_is_on_decoded_text():
    task = grpo_fixed.AdditionTask()
    prompts = ["12+7=", "12+7=", "12+7=", "0+0=", "49+49="]
    completions = ["19", "190", "", "0", "98"]
    assert task.reward(prompts, completions).tolist() == [1.0, 0.0, 0.0, 1.0, 1.0]


def test_addition_task_prompts_are_seeded_strings_of_varying_length():
    task = grpo_fixed.AdditionTask()
    prompts = task.prompts(64, torch.Generator().manual_seed(0))
    assert prompts == task.prompts(64, torch.Generator().manual_seed(0))
    assert all(isinstance(p, str) and set(p) <= set(task.alphabet) and p.endswith("=") for p in prompts)
    assert all(0 <= int(x) < 50 for p in prompts for x in p.rstrip("=").split("+"))
    assert {len(p) for p in prompts} == {4, 5, 6}, "prompts of different lengths: the batch must be padded"


@TWINS
def test_task_contract_fields(module):
    task = module.AdditionTask()
    assert task.alphabet == "0123456789+=" and task.max_completion_length == 5
    assert task.checkpoint == module.CHECKPOINTS / "addition_sft" and (task.checkpoint / "model.pt").exists()
