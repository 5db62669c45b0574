"""More toy tasks written to the Task contract of grpo_fixed (see the AdditionTask docstring there).

Contract: attributes alphabet (the characters of prompts and answers), max_completion_length (tokens, EOS
included), checkpoint (the SFT folder the policy and the reference start from; None: a fresh seeded TinyLM);
prompts(n, generator) -> list of n strings; reward(prompts, completions) -> FloatTensor (n,) in [0, 1], where
completions are the decoded texts (special tokens skipped: PAD and BOS vanish, and the text ends where the EOS
was generated).

Every task here uses the addition alphabet "0123456789+=" (vocabulary 15: the 12 characters, PAD, BOS and
EOS), so each can also start from the addition SFT checkpoint. Echo and reverse do (the checkpoint already
reads digits and answers in digits, then EOS; EchoTask's and ReverseTask's docstrings give the fresh start's
figures); sparse, length and ramble start from a fresh TinyLM (checkpoint None): its logits are near zero, so
it samples almost uniformly over the 15 tokens, and a completion's length varies, which the length-based tasks
need. A fresh model also samples PAD and BOS (about 2/15 of its tokens); they decode to nothing, so the text is
what the character tokens spell. What the text shows about the EOS: a text of max_completion_length characters
never stopped (every token was a character); a shorter one either stopped or ran to the limit with a PAD or BOS
among its tokens, and the text cannot tell which. The SFT checkpoint's start policy practically never draws
PAD or BOS (1 in the 8,542 completion tokens of AdditionTask, EchoTask and ReverseTask at the start).

Measured start rewards (seed 0's initial policy, 1024 prompts, temperature 0.8) are in each docstring;
tests/test_tasks.py re-measures them and every other figure quoted here.
"""

from __future__ import annotations

import torch

from grpo_fixed import AdditionTask

ALPHABET = AdditionTask.alphabet
"""the characters of every task here: "0123456789+=" """


def _digits(n, count, generator):
    """n strings of `count` random digits each."""
    table = torch.randint(0, 10, (n, count), generator=generator).tolist()
    return ["".join(str(d) for d in row) for row in table]


def _stopped(text, limit):
    """The text is shorter than the limit. A text that fills every position never generated an EOS; a shorter
    one stopped, or drew a PAD or BOS (decoded to nothing) and may have run to the limit."""
    return len(text) < limit


class EchoTask:
    """Repeat the prompt's two digits, then EOS: "37=" -> "37".
    Reward: fraction of the 3 target positions right (first digit, second digit, EOS right after them):
    (text[0] == d0) + (text[1] == d1) + (len(text) == 2), over 3; multiples of 1/3 (dense).
    Starts from the addition SFT checkpoint (it reads digits and answers in digits, then EOS); start reward
    0.27. The default run (70 iterations) ends at a last-10 reward of 0.77 to 0.83 from it, seeds 0-2, and at
    0.44 to 0.55 from a fresh TinyLM."""

    alphabet = ALPHABET
    max_completion_length = 3
    checkpoint = AdditionTask.checkpoint

    def prompts(self, n, generator=None):
        return [f"{d}=" for d in _digits(n, 2, generator)]

    def reward(self, prompts, completions):
        return torch.tensor([_positions_right(p.rstrip("="), c) for p, c in zip(prompts, completions, strict=True)])


def _positions_right(target, text):
    """Fraction of the len(target) + 1 positions of `target` then EOS that `text` gets right."""
    right = sum(i < len(text) and text[i] == ch for i, ch in enumerate(target)) + (len(text) == len(target))
    return right / (len(target) + 1)


class ReverseTask:
    """Say the prompt's three digits backwards, then EOS: "123=" -> "321"; needs every prompt token.
    Reward: fraction of the 4 target positions right (3 digits, then the EOS right after them), dense.
    A prompt-blind policy scores at most (3 * 1/10 + 1) / 4 = 0.325 in expectation (each digit right one time
    in ten, the EOS always). Starts from the addition SFT checkpoint; start reward 0.04. From a fresh TinyLM
    the default run (70 iterations) ends around that bound: a last-10 reward of 0.29 to 0.38, seeds 0-2."""

    alphabet = ALPHABET
    max_completion_length = 5
    checkpoint = AdditionTask.checkpoint

    def prompts(self, n, generator=None):
        return [f"{d}=" for d in _digits(n, 3, generator)]

    def reward(self, prompts, completions):
        return torch.tensor([_positions_right(p.rstrip("=")[::-1], c)
                             for p, c in zip(prompts, completions, strict=True)])


class SparseMatchTask:
    """Binary reward: 1 only if the completion is exactly the next digit, then EOS: "4=" -> "5", "9=" -> "0".
    A policy uniform over the 13 tokens other than PAD and BOS (the 12 characters and EOS) succeeds 1 time in
    169 (right digit 1/13, then EOS 1/13), so (168/169)^8 = 95 % of its groups of G = 8 have zero reward
    variance. Fresh TinyLM (checkpoint None); start reward 0.007."""

    alphabet = ALPHABET
    max_completion_length = 3
    checkpoint = None

    def prompts(self, n, generator=None):
        return [f"{d}=" for d in _digits(n, 1, generator)]

    def answer(self, prompt):
        """The wanted text: the digit after the prompt's digit, mod 10."""
        return str((int(prompt[0]) + 1) % 10)

    def reward(self, prompts, completions):
        return torch.tensor([float(c == self.answer(p)) for p, c in zip(prompts, completions, strict=True)])


class LengthTask:
    """The prompt is just "=" (nothing to condition on): emit exactly 4 characters, then EOS.
    Reward, read off the decoded text: 1 - |len(text) + 1 - 5| / 5 (clamped at 0) if the text is shorter than
    max_completion_length = 8 characters, else 0. len(text) + 1 is the completion's token count with its EOS
    only if it drew no PAD or BOS: those decode to nothing, so a completion that used all 8 positions without
    an EOS but drew one of them reads as a shorter text and is scored as if it had stopped.
    Fresh TinyLM (checkpoint None); start reward 0.47. At the start (seed 0, temperature 0.8, 1024 prompts)
    59 % of the completions use all 8 positions without an EOS, and 71 % of those still score above 0."""

    alphabet = ALPHABET
    max_completion_length = 8
    checkpoint = None

    def prompts(self, n, generator=None):
        return ["="] * n

    def reward(self, prompts, completions):
        def score(text):
            return max(0.0, 1 - abs(len(text) + 1 - 5) / 5) if _stopped(text, self.max_completion_length) else 0.0

        return torch.tensor([score(c) for c in completions])


class RambleTask:
    """Answer first, then stop before the limit; what comes in between is free.

    Prompt "d=" with d a digit. The answer is the first character of the completion and must be d; any
    characters may follow, but the completion must end with EOS within max_completion_length = 8 tokens.
    Reward: 1 if the answer is right and the text is shorter than 8 characters, else 0 (binary). Length is not
    scored except at the limit: every completion whose text fills all 8 positions (no EOS) is wrong, so the
    longest completions are all wrong.

    A policy uniform over the 13 tokens other than PAD and BOS (the 12 characters and EOS; exact figures,
    ramble_uniform in tests/test_tasks.py): reward 1/13 * (1 - (12/13)^7) = 0.033; (12/13)^8 = 53 % of its
    completions reach the limit, all wrong, so its wrong completions are longer on average than its right ones
    (6.20 against 4.68 tokens, EOS included). The fresh TinyLM the task starts from (checkpoint None; seed 0,
    temperature 0.8, 1024 prompts): reward 0.06, 60 % of the completions use all 8 tokens without an EOS, mean
    length 6.45 tokens; there the right completions are even a little longer than the wrong ones (7.08 against
    6.41 tokens) because the fresh model also draws PAD and BOS (decoded to nothing), so some completions that
    ran to the limit read as shorter texts and count as stopped (the text cannot show the difference).
    Notebook 06 §1, §4 and §7 train on it (§1: what the per-sequence loss mean does to the lengths).
    """

    alphabet = ALPHABET
    max_completion_length = 8
    checkpoint = None

    def prompts(self, n, generator=None):
        return [f"{d}=" for d in _digits(n, 1, generator)]

    def answer(self, prompt):
        """The right first character: the prompt's digit."""
        return prompt[0]

    def reward(self, prompts, completions):
        return torch.tensor([float(c[:1] == self.answer(p) and _stopped(c, self.max_completion_length))
                             for p, c in zip(prompts, completions, strict=True)])


TASKS = {"addition": AdditionTask, "echo": EchoTask, "reverse": ReverseTask, "sparse": SparseMatchTask,
         "length": LengthTask, "ramble": RambleTask}
