"""workbook.swap.fixed_with: a replacement calls the copy's helpers, decorated functions included."""

from __future__ import annotations

import torch

import grpo_buggy
from workbook.swap import fixed_with


def test_a_decorated_replacement_calls_the_copys_helpers_and_keeps_its_decorator():
    """grpo_buggy.generate is wrapped by @torch.no_grad(): the function inside the wrapper is rebound too, so
    it calls the copy's completion_mask (the fixed one, whose mask keeps the first EOS), and it still runs
    without gradient."""
    module = fixed_with("decorated", generate=grpo_buggy.generate)
    assert module.generate.__wrapped__.__globals__ is module.__dict__
    assert grpo_buggy.generate.__wrapped__.__globals__ is grpo_buggy.__dict__  # the original is untouched
    calls = []

    def recording_mask(completions, eos_id):
        calls.append(torch.is_grad_enabled())
        return module_mask(completions, eos_id)

    module_mask, module.completion_mask = module.completion_mask, recording_mask
    policy = torch.nn.Module()
    policy.forward = lambda ids, **_: type("Out", (), {"logits": torch.zeros(ids.shape[0], ids.shape[1], 5,
                                                                              requires_grad=True),
                                                      "past_key_values": None})()
    tokenizer = type("Tok", (), {"eos_token_id": 2, "pad_token_id": 0})()
    completions, mask, logprobs, _ = module.generate(policy, tokenizer, torch.ones(2, 3, dtype=torch.long),
                                                     torch.ones(2, 3, dtype=torch.long), 4, 1.0,
                                                     torch.Generator().manual_seed(0))
    assert calls == [False], "the copy's completion_mask was not called, or was called with gradient on"
    assert not logprobs.requires_grad
