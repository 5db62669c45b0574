"""The toy tasks (AdditionTask in the twins, the others in workbook/tasks.py) keep the Task contract, and
their rewards mean what their docstrings say (the quoted figures are re-measured here; the default training runs
they quote are marked slow)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

import grpo_fixed
from tinylm import CausalLMOutput, CharTokenizer
from workbook.run_summary import final_reward
from workbook.tasks import TASKS, EchoTask, LengthTask, RambleTask, ReverseTask, SparseMatchTask

ALL = pytest.mark.parametrize("name", sorted(TASKS))
TOKENIZER = CharTokenizer(grpo_fixed.AdditionTask.alphabet)


class UniformPolicy(nn.Module):
    """Every non-special token and EOS equally likely (PAD and BOS never): the 'uniform policy' of the
    docstrings. Same call signature as TinyLM."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        logits = torch.zeros(*input_ids.shape, TOKENIZER.vocab_size)  # (N, L, V)
        logits[..., [TOKENIZER.pad_token_id, TOKENIZER.bos_token_id]] = -math.inf
        return CausalLMOutput(logits, None)


def rollout(task, policy, n, seed=0, temperature=1.0):
    """Sample n completions of n prompts. -> prompts, texts, completions (n, T), mask (n, T), rewards (n,)."""
    g = torch.Generator().manual_seed(seed)
    prompts = task.prompts(n, g)
    enc = TOKENIZER(prompts, padding_side="left")
    completions, mask, _, _ = grpo_fixed.generate(policy, TOKENIZER, enc["input_ids"], enc["attention_mask"],
                                                  task.max_completion_length, temperature, g)
    texts = grpo_fixed.decode_completions(TOKENIZER, completions, mask)  # up to the first EOS
    return prompts, texts, completions, mask, task.reward(prompts, texts)


def start_rollout(task, n=1024):
    """The task's start policy (seed 0 of setup_run) at the default temperature, as the docstrings measure."""
    cfg = grpo_fixed.make_config()
    policy = grpo_fixed.setup_run(task, cfg, 0)[0].eval()
    return rollout(task, policy, n, seed=0, temperature=cfg.temperature)


@ALL
def test_contract(name):
    task = TASKS[name]()
    assert task.alphabet == grpo_fixed.AdditionTask.alphabet and task.max_completion_length >= 1
    assert task.checkpoint is None or (task.checkpoint / "model.pt").exists()
    prompts = task.prompts(5, torch.Generator().manual_seed(0))
    assert isinstance(prompts, list) and len(prompts) == 5 and all(isinstance(p, str) and p for p in prompts)
    assert all(set(p) <= set(task.alphabet) for p in prompts)
    _, texts, completions, mask, reward = rollout(task, UniformPolicy(), 64)
    assert completions.shape == mask.shape == (64, task.max_completion_length)
    assert len(texts) == 64 and reward.shape == (64,) and reward.dtype == torch.float32
    assert ((reward >= 0) & (reward <= 1)).all()


@ALL
def test_prompts_follow_the_generator(name):
    task = TASKS[name]()
    a = task.prompts(8, torch.Generator().manual_seed(1))
    assert a == task.prompts(8, torch.Generator().manual_seed(1))


@ALL
def test_reward_ignores_tokens_after_the_first_eos(name):
    """generate leaves whatever it sampled after the first EOS in place and masks it out; the text the reward
    reads stops at the EOS, so neither those tokens nor any other junk there may change the text's reward."""
    task = TASKS[name]()
    prompts, texts, completions, mask, reward = rollout(task, UniformPolicy(), 200, seed=2)
    is_eos = completions == TOKENIZER.eos_token_id
    first = torch.where(is_eos.any(dim=1), is_eos.long().argmax(dim=1), completions.shape[1] - 1)  # (n,)
    assert torch.equal(mask, torch.arange(completions.shape[1]) <= first[:, None])  # True through the first EOS
    assert (completions[~mask] != TOKENIZER.pad_token_id).any()  # sampled tokens after the EOS, not PAD
    assert texts != TOKENIZER.batch_decode(completions, skip_special_tokens=True)  # and they would decode
    junk = torch.randint(3, TOKENIZER.vocab_size, completions.shape, generator=torch.Generator().manual_seed(3))
    cut = [TOKENIZER.decode(row[: int(m.sum())], skip_special_tokens=True)
           for row, m in zip(torch.where(mask, completions, junk), mask, strict=True)]
    assert cut == texts and torch.equal(task.reward(prompts, cut), reward)
    assert grpo_fixed.decode_completions(TOKENIZER, torch.where(mask, completions, junk), mask) == texts


def perfect(name, prompt):
    """The best completion text for one prompt."""
    body = prompt.rstrip("=")
    total = lambda: sum(int(x) for x in body.split("+"))  # noqa: E731
    return {"addition": lambda: str(total()), "echo": lambda: body, "reverse": lambda: body[::-1],
            "sparse": lambda: str((int(body) + 1) % 10), "length": lambda: "1234",
            "ramble": lambda: body}[name]()


@ALL
def test_perfect_answers_score_one(name):
    task = TASKS[name]()
    prompts = task.prompts(10, torch.Generator().manual_seed(4))
    assert task.reward(prompts, [perfect(name, p) for p in prompts]).tolist() == [1.0] * 10


@pytest.mark.parametrize("task, prompt, text, expected", [
    (EchoTask(), "37=", "37", 1.0),
    (EchoTask(), "37=", "3", 1 / 3),  # first digit only, stopped early
    (EchoTask(), "37=", "373", 2 / 3),  # both digits, no EOS after them
    (EchoTask(), "37=", "", 0.0),
    (ReverseTask(), "123=", "321", 1.0),
    (ReverseTask(), "123=", "123", 0.5),  # middle digit and EOS right
    (ReverseTask(), "123=", "3214", 0.75),  # no EOS where it belongs
    (ReverseTask(), "123=", "3", 0.25),  # stopped early: only the first digit
    (SparseMatchTask(), "9=", "0", 1.0),  # 9 -> 0 (mod 10)
    (SparseMatchTask(), "2=", "3", 1.0),
    (SparseMatchTask(), "2=", "33", 0.0),  # right digit, no EOS after it
    (SparseMatchTask(), "2=", "4", 0.0),
    (SparseMatchTask(), "2=", "", 0.0),
    (LengthTask(), "=", "1231", 1.0),
    (LengthTask(), "=", "123", 0.8),
    (LengthTask(), "=", "12312", 0.8),
    (LengthTask(), "=", "", 0.2),
    (LengthTask(), "=", "1" * 8, 0.0),  # never stopped
    (RambleTask(), "3=", "3", 1.0),  # the prompt's digit, then EOS
    (RambleTask(), "0=", "0", 1.0),
    (RambleTask(), "3=", "3+=9=1", 1.0),  # anything may follow the answer before the EOS
    (RambleTask(), "3=", "3123456", 1.0),  # EOS as the 8th token: still in time
    (RambleTask(), "3=", "3" * 8, 0.0),  # right answer, never stopped (truncated)
    (RambleTask(), "3=", "4", 0.0),  # wrong answer
    (RambleTask(), "3=", "", 0.0),  # EOS first: no answer
], ids=lambda v: type(v).__name__ if not isinstance(v, (str, float)) else None)
def test_partial_credit(task, prompt, text, expected):
    assert task.reward([prompt], [text]).item() == pytest.approx(expected)


def test_addition_reward_on_text():
    task = grpo_fixed.AdditionTask()
    assert task.reward(["12+30=", "0+0=", "49+49="], ["42", "0", "97"]).tolist() == [1.0, 1.0, 0.0]


def test_sparse_uniform_policy_succeeds_about_one_time_in_169():
    _, _, _, _, reward = rollout(SparseMatchTask(), UniformPolicy(), 20000, seed=5)
    assert set(reward.unique().tolist()) <= {0.0, 1.0}
    p, n = 1 / 169, 20000  # right digit (1/13), then EOS (1/13)
    assert abs(reward.mean().item() - p) <= 5 * (p * (1 - p) / n) ** 0.5
    assert f"{(1 - p) ** 8:.0%}" == "95%"  # the docstring's share of zero-variance groups of G = 8


def ramble_uniform():
    """Exact figures of RambleTask under the uniform policy over 13 tokens (12 characters and EOS), T = 8: the
    first token is EOS (length 1, wrong), the answer (1/13) or another character (11/13); after it each position
    is EOS with probability 1/13, until position 8. -> reward, truncated fraction, mean length right, wrong."""
    q, T = 12 / 13, RambleTask.max_completion_length
    ended = {length: q ** (length - 2) / 13 for length in range(2, T + 1)}  # EOS at `length`, after a character
    truncated = q ** (T - 1)  # no EOS in positions 2..T: length T, wrong
    right_mass = sum(ended.values()) / 13
    right_mean = sum(length * p for length, p in ended.items()) / sum(ended.values())
    any_length = sum(length * p for length, p in ended.items()) + T * truncated  # mean length after a character
    wrong_mass = 1 / 13 + 11 / 13 + truncated / 13
    wrong_mean = (1 / 13 + any_length * 11 / 13 + T * truncated / 13) / wrong_mass
    assert abs(right_mass + wrong_mass - 1) < 1e-12
    return right_mass, q * truncated, right_mean, wrong_mean


def test_ramble_uniform_figures_match_the_docstring():
    reward, truncated, right_mean, wrong_mean = ramble_uniform()
    assert (round(reward, 3), round(100 * truncated), round(right_mean, 2), round(wrong_mean, 2)) == \
        (0.033, 53, 4.68, 6.20)  # the numbers in the docstring
    _, _, completions, mask, rewards = rollout(RambleTask(), UniformPolicy(), 20000, seed=7)
    n = rewards.numel()
    assert abs(rewards.mean().item() - reward) <= 5 * (reward * (1 - reward) / n) ** 0.5
    length = mask.sum(dim=1).float()
    for sample, exact in ((length[rewards == 0], wrong_mean), (length[rewards == 1], right_mean)):
        assert abs(sample.mean().item() - exact) <= 5 * sample.std().item() / sample.numel() ** 0.5
    cut = ~(completions == TOKENIZER.eos_token_id).any(dim=1)  # reached the limit without an EOS
    assert abs(cut.float().mean().item() - truncated) <= 5 * (truncated * (1 - truncated) / n) ** 0.5
    assert (rewards[cut] == 0).all() and (length[cut] == RambleTask.max_completion_length).all()


def test_ramble_start_policy_figures_match_the_docstring():
    _, _, completions, mask, reward = start_rollout(RambleTask())
    length = mask.sum(dim=1).float()
    cut = ~(completions == TOKENIZER.eos_token_id).any(dim=1)
    got = (round(reward.mean().item(), 2), round(100 * cut.float().mean().item()), round(length.mean().item(), 2),
           round(length[reward == 1].mean().item(), 2), round(length[reward == 0].mean().item(), 2))
    assert got == (0.06, 60, 6.45, 7.08, 6.41)  # the numbers in the docstring
    special = (completions == TOKENIZER.pad_token_id) | (completions == TOKENIZER.bos_token_id)
    assert (reward[cut] == 1).any() and (special & mask)[cut & (reward == 1)].any(dim=1).all()  # the PAD/BOS caveat


@pytest.mark.parametrize("name, quoted", [("addition", None), ("echo", 0.27), ("reverse", 0.04),
                                          ("sparse", 0.007), ("length", 0.47), ("ramble", 0.06)])
def test_start_rewards_match_the_docstrings(name, quoted):
    task = TASKS[name]()
    reward = start_rollout(task)[-1].mean().item()
    if quoted is None:  # the SFT checkpoint: about 0.30 (grpo_fixed, README)
        assert 0.25 < reward < 0.35
    else:
        assert round(reward, 3 if quoted < 0.01 else 2) == quoted
        doc = " ".join(type(task).__doc__.split())
        assert f"start reward {quoted}" in doc or f"reward {quoted}," in doc


def test_length_start_policy_figures_match_the_docstring():
    """LengthTask scores the decoded text: len(text) + 1 is the token count with the EOS only without PAD/BOS,
    and a completion that ran to the limit but drew one of them reads as a shorter text and can score."""
    _, texts, completions, mask, reward = start_rollout(LengthTask())
    eos = (completions == TOKENIZER.eos_token_id).any(dim=1)
    special = ((completions == TOKENIZER.pad_token_id) | (completions == TOKENIZER.bos_token_id)) & mask
    drew_special = special.any(dim=1)
    cut = ~eos  # all 8 positions used, no EOS
    got = (round(reward.mean().item(), 2), round(100 * cut.float().mean().item()),
           round(100 * (reward[cut] > 0).float().mean().item()))
    assert got == (0.47, 59, 71)  # the numbers in the docstring
    assert drew_special[cut & (reward > 0)].all()  # every truncated completion that scores drew a PAD or BOS
    tokens = mask.sum(dim=1)
    clean = eos & ~drew_special  # stopped, no PAD or BOS: the text's length + 1 is the token count
    assert all(len(texts[i]) + 1 == tokens[i] for i in clean.nonzero().flatten().tolist())
    expected = (1 - (tokens - 5).abs() / 5).clamp(min=0)
    assert torch.allclose(reward[clean], expected[clean].float())


def test_sft_start_policy_rarely_draws_pad_or_bos():
    """The module docstring's count: PAD or BOS tokens among the completion tokens of the SFT checkpoint's start
    policy on AdditionTask, EchoTask and ReverseTask."""
    counts = []
    for name in ("addition", "echo", "reverse"):
        _, _, completions, mask, _ = start_rollout(TASKS[name]())
        special = ((completions == TOKENIZER.pad_token_id) | (completions == TOKENIZER.bos_token_id)) & mask
        counts.append((int(special.sum()), int(mask.sum())))
    assert tuple(map(sum, zip(*counts, strict=True))) == (1, 8542)  # the numbers in the docstring


class _FreshEchoTask(EchoTask):
    checkpoint = None


class _FreshReverseTask(ReverseTask):
    checkpoint = None


FRESH_VS_SFT = {  # seed -> last-10 reward of the default run: echo from the SFT checkpoint, echo fresh, reverse fresh
    0: ("0.83", "0.48", "0.29"),
    1: ("0.83", "0.55", "0.32"),
    2: ("0.77", "0.44", "0.38"),
}


def test_fresh_start_figures_are_the_docstrings_ranges():
    echo_sft, echo_fresh, reverse_fresh = (sorted(column) for column in zip(*FRESH_VS_SFT.values(), strict=True))
    echo, reverse = (" ".join(type(task).__doc__.split()) for task in (EchoTask(), ReverseTask()))
    assert f"last-10 reward of {echo_sft[0]} to {echo_sft[-1]} from it, seeds 0-2" in echo
    assert f"at {echo_fresh[0]} to {echo_fresh[-1]} from a fresh TinyLM" in echo
    assert f"a last-10 reward of {reverse_fresh[0]} to {reverse_fresh[-1]}, seeds 0-2" in reverse
    bound = 0.325  # the prompt-blind bound: the fresh reverse runs end around it, on both sides
    assert float(reverse_fresh[0]) < bound < float(reverse_fresh[-1])


@pytest.mark.slow
@pytest.mark.parametrize("seed", sorted(FRESH_VS_SFT))
def test_default_runs_from_a_fresh_tinylm(seed):
    """EchoTask and ReverseTask start from the SFT checkpoint; what the default run reaches from a fresh TinyLM."""
    got = tuple(f"{final_reward(grpo_fixed.train(task, seed=seed)):.2f}"
                for task in (EchoTask(), _FreshEchoTask(), _FreshReverseTask()))
    assert got == FRESH_VS_SFT[seed]
