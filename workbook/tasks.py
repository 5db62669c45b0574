"""More toy tasks written to the Task contract of grpo_fixed (see EchoTask there).

Contract: attributes vocab_size, eos_id, prompt_length, max_completion_length;
prompts(n, generator) -> LongTensor (n, prompt_length);
reward(prompts, completions, mask) -> FloatTensor (n,) in [0, 1], where completions (n, T) are
padded after the first EOS and mask marks generated tokens up to and including that EOS.
"""

from __future__ import annotations

import torch

from grpo_fixed import EchoTask


def _answer(completions, mask, width):
    """The first `width` generated tokens, -1 where nothing was generated. (n, width)"""
    got = torch.where(mask.bool(), completions, -1)
    pad = max(0, width - got.shape[1])
    return torch.nn.functional.pad(got, (0, pad), value=-1)[:, :width]


class ReverseTask:
    """Say the prompt backwards, then EOS: needs conditioning on every prompt token.
    Reward: fraction of the P + 1 target positions matched (dense). Uniform random policy: about 0.13."""

    vocab_size = 6
    eos_id = 0
    prompt_length = 3
    max_completion_length = 5

    def prompts(self, n, generator=None):
        return torch.randint(1, self.vocab_size, (n, self.prompt_length), generator=generator)

    def reward(self, prompts, completions, mask):
        eos = torch.full_like(prompts[:, :1], self.eos_id)
        target = torch.cat([prompts.flip(1), eos], dim=1)  # (n, P+1)
        return (_answer(completions, mask, target.shape[1]) == target).float().mean(dim=1)


class SparseMatchTask:
    """Binary reward: 1 only if the completion is exactly [prompt token + 1 (mod), EOS].
    A random policy succeeds about 1 time in 50, so most early groups have zero reward variance."""

    vocab_size = 7
    eos_id = 0
    prompt_length = 1
    max_completion_length = 3

    def prompts(self, n, generator=None):
        return torch.randint(1, self.vocab_size, (n, 1), generator=generator)

    def reward(self, prompts, completions, mask):
        wanted = prompts[:, 0] % (self.vocab_size - 1) + 1  # 1..6 -> 2..6, 1
        target = torch.stack([wanted, torch.full_like(wanted, self.eos_id)], dim=1)  # (n, 2)
        exact = (_answer(completions, mask, 3) == torch.nn.functional.pad(target, (0, 1), value=-1)).all(dim=1)
        return exact.float()


class LengthTask:
    """No prompt at all (prompt_length 0): emit exactly 4 tokens, none of them EOS, then EOS.
    Reward: 1 - |length - 5| / 5 over lengths counted with the EOS. Tests EOS timing alone."""

    vocab_size = 4
    eos_id = 0
    prompt_length = 0
    max_completion_length = 8

    def prompts(self, n, generator=None):
        return torch.zeros(n, 0, dtype=torch.long)

    def reward(self, prompts, completions, mask):
        ended = ((completions == self.eos_id) & mask.bool()).any(dim=1)
        length = mask.float().sum(dim=1)  # (n,) includes the EOS when there is one
        score = (1 - (length - 5).abs() / 5).clamp(min=0)
        return torch.where(ended, score, torch.zeros_like(score))


class RambleTask:
    """Answer first, then stop before the limit; what comes in between is free.

    Prompt: two tokens a, b in 1..5. The answer is the first generated token and must be (a + b) mod 5 + 1;
    any tokens may follow, but the completion must end with EOS within max_completion_length = 12 tokens.
    Reward: 1 if the answer is right and the completion ended, else 0 (binary). Length is not scored
    except at the limit: every completion that reaches it without an EOS is wrong ((5/6)^12, about 11% of a
    uniform random policy's), so the longest completions are all wrong. On average a uniform random
    policy's right and wrong completions start at about the same length (5.29 and 5.33 tokens, EOS
    included); the per-sequence loss mean of notebook 06 §1 makes the wrong ones longer. A uniform random
    policy scores 1/6 * (1 - (5/6)^11), about 0.14. Notebook 06 §1, §4 and §7 train on it.
    """

    vocab_size = 6
    eos_id = 0
    prompt_length = 2
    max_completion_length = 12

    def prompts(self, n, generator=None):
        return torch.randint(1, self.vocab_size, (n, self.prompt_length), generator=generator)

    def answer(self, prompts):
        """The right first token for each prompt: (a + b) mod 5 + 1. (n,)"""
        return prompts.sum(dim=1) % (self.vocab_size - 1) + 1

    def reward(self, prompts, completions, mask):
        ended = ((completions == self.eos_id) & mask.bool()).any(dim=1)  # (n,) an EOS was generated
        right = _answer(completions, mask, 1)[:, 0] == self.answer(prompts)  # (n,)
        return (right & ended).float()


TASKS = {"echo": EchoTask, "reverse": ReverseTask, "sparse": SparseMatchTask, "length": LengthTask,
         "ramble": RambleTask}
