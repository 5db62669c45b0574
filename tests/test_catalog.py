"""The bug catalog, proved: one or more tiny diagnostic tests per bug B1..B17.

Every `test_Bn_*` takes only `impl` (the module under test, see conftest.py) and must
  - pass on grpo_fixed (the default run),
  - fail on grpo_buggy,
  - fail on the single-bug hybrid workbook.catalog.hybrid("Bn") and pass on every other hybrid
    (so each bug is isolated in its one function).
A test whose name carries two ids (test_B6_B10_...) is a diagnostic that catches both bugs.
`test_catalog_is_proved` checks all of that in-process; `test_catalog_cli_option_buggy` (slow) runs
this file under `--impl=buggy` through pytest itself.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import re
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

import grpo_buggy
import grpo_fixed
import grpo_support
from grpo_support import PROGRESS
from tinylm import CausalLMOutput, CharTokenizer, TinyLM, TinyLMConfig
from workbook import catalog, nb01_bugs
from workbook.run_summary import final_reward
from workbook.tasks import TASKS

BUG_ID = re.compile(r"B\d+")
TOKENIZER = CharTokenizer("0123456789+=")


# ----------------------------------------------------------------------------------------------
# Tiny helpers


def draw_frequencies(impl, logits, num_samples, seed=0):
    """Empirical frequency of each token id among `num_samples` draws from impl.sample_from_logits. (V,)"""
    g = torch.Generator().manual_seed(seed)
    draws = impl.sample_from_logits(logits, num_samples, generator=g)  # (num_samples,)
    return torch.bincount(draws, minlength=logits.shape[-1]).double() / num_samples


class FakeLM(nn.Module):
    """A fake causal LM with the TinyLM call signature: input_ids (N, L) -> .logits (N, L, V) from `logits_at`."""

    def __init__(self, logits_at):
        super().__init__()
        self.logits_at = logits_at  # (N, L) input_ids -> (N, L, V)

    def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
        return CausalLMOutput(self.logits_at(input_ids))


def position_policy():
    """Logits at sequence index l all equal to l (V = 3): shows which index a row came from."""
    return FakeLM(lambda ids: torch.arange(ids.shape[1], dtype=torch.float32)[None, :, None]
                  .expand(ids.shape[0], -1, 3).clone())


def constant_policy(logits):
    """The same logits (V,) at every position, so the shift of B6 cannot matter."""
    return FakeLM(lambda ids: logits.expand(ids.shape[0], ids.shape[1], -1).clone())


def tiny_lm(seed=0):
    """A fresh seeded TinyLM over the addition alphabet, small enough for tiny inputs."""
    torch.manual_seed(seed)
    return TinyLM(TinyLMConfig(len(TOKENIZER.tokens), d_model=16, n_layers=1, n_heads=2)).eval()


def tiny_setup(impl, seed=0, **overrides):
    """AdditionTask from its SFT checkpoint: policy, frozen reference, tokenizer, Adam, a small config, a generator."""
    cfg = impl.make_config(**{"prompts_per_batch": 4, "group_size": 4, **overrides})
    task = impl.AdditionTask()
    policy, ref_policy, tokenizer, optimizer, generator = impl.setup_run(task, cfg, seed)
    return task, policy, ref_policy, tokenizer, optimizer, cfg, generator


# ----------------------------------------------------------------------------------------------
# B1 sampling from raw logits


def test_B1_sampling_frequencies_match_softmax(impl):
    logits = torch.tensor([1.0, 0.0, -1.0])  # softmax: 0.665 0.245 0.090; raw-logit bug: 2/3 1/3 0
    n = 4000
    freq = draw_frequencies(impl, logits, n)
    probs = torch.softmax(logits.double(), -1)
    tolerance = 5 * torch.sqrt(probs * (1 - probs) / n)  # 5 binomial standard deviations
    assert ((freq - probs).abs() <= tolerance).all(), f"frequencies {freq.tolist()} vs softmax {probs.tolist()}"


def test_B1_argmin_token_is_drawn(impl):
    logits = torch.tensor([0.0, 0.0, -0.5])  # the smallest logit still has probability 0.274
    freq = draw_frequencies(impl, logits, 200)  # P(never drawn) = 0.726**200 ~ 1e-28
    assert freq[2] > 0, "the argmin token was never drawn"


# ----------------------------------------------------------------------------------------------
# B2 no eps in the advantage std (and overflow in the naive mean)


def test_B2_constant_group_gives_exact_zeros(impl):
    for rewards in ([0.5, 0.5, 0.5, 0.5], [1.0], [0.0, 0.0]):
        adv = impl.group_advantage(rewards)
        assert adv.tolist() == [0.0] * len(rewards), f"{rewards} -> {adv.tolist()}"


def test_B2_rewards_near_float64_limit_do_not_overflow(impl):
    adv = impl.group_advantage([1.7e308, 1.7e308, -1e308])  # the naive sum is already inf
    scaled = np.array([1.7, 1.7, -1.0])  # the group divided by 1e308: eps / 1e308 is far below rounding
    expected = torch.from_numpy((scaled - scaled.mean()) / scaled.std())
    assert torch.isfinite(adv).all(), adv.tolist()
    assert torch.allclose(adv, expected, rtol=1e-12, atol=0), (adv.tolist(), expected.tolist())


# ----------------------------------------------------------------------------------------------
# B3 old log-probs recomputed inside the inner loop


def test_B3_ratio_moves_after_the_first_inner_step(impl):
    task, policy, ref_policy, tok, optimizer, cfg, g = tiny_setup(impl, inner_epochs=2, minibatches=2)
    batch, _ = impl.rollout(policy, ref_policy, tok, task, cfg, g)
    batch["advantages"] = torch.linspace(-1.5, 1.5, batch["rewards"].shape[0])  # a signal in every group
    records = impl.update_policy(policy, optimizer, batch, cfg, g)
    assert len(records) == 4
    first, last = records[0]["ratio"], records[-1]["ratio"]
    assert (first - 1).abs().max() < 1e-5, "ratio must be 1 at the first inner step (nothing updated yet)"
    assert (last - 1).abs().max() > 1e-4, "ratio is still exactly 1 after three updates: old log-probs recomputed?"


def test_B3_old_logprobs_stay_the_behaviour_policy(impl):
    """The loss at a later inner step sees the rollout's old log-probs, not freshly detached ones."""
    task, policy, ref_policy, tok, optimizer, cfg, g = tiny_setup(impl, inner_epochs=3, minibatches=1, clip=10.0)
    batch, _ = impl.rollout(policy, ref_policy, tok, task, cfg, g)
    batch["advantages"] = torch.linspace(-1.0, 1.0, batch["rewards"].shape[0])
    records = impl.update_policy(policy, optimizer, batch, cfg, g)
    ratio_mean = [r["ratio"].mean().item() for r in records]
    assert ratio_mean[0] == pytest.approx(1.0, abs=1e-6)
    assert any(abs(m - 1.0) > 1e-4 for m in ratio_mean[1:]), ratio_mean


def test_B3_ratio_is_1_first_then_moves_once_the_policy_left_its_reference(impl):
    """Old log-probs are the sampling policy's, cached at rollout: with a policy that has moved away from its
    reference, the first inner step's ratio is still exactly 1 (the reference's log-probs are not the old
    ones), and it leaves 1 after an update (they are not recomputed either)."""
    task, policy, _, tok, optimizer, cfg, g = tiny_setup(impl, inner_epochs=2, minibatches=2)
    ref_policy = copy.deepcopy(policy).requires_grad_(False)  # a frozen copy whatever setup_run returns (B16)
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=noise))
    batch, _ = impl.rollout(policy, ref_policy, tok, task, cfg, g)
    assert (batch["old_logprobs"] - batch["ref_logprobs"])[batch["mask"]].abs().max() > 1e-2, "policy == reference"
    batch["advantages"] = torch.linspace(-1.5, 1.5, batch["rewards"].shape[0])  # a signal in every group
    records = impl.update_policy(policy, optimizer, batch, cfg, g)
    first, last = records[0]["ratio"], records[-1]["ratio"]
    assert (first - 1).abs().max() < 1e-5, "ratio != 1 at the first inner step: old log-probs from another policy?"
    assert (last - 1).abs().max() > 1e-4, "ratio is still exactly 1 after three updates: old log-probs recomputed?"


# ----------------------------------------------------------------------------------------------
# B4 clamp(ratio * A) instead of clamp(ratio) * A


def per_token_loss(impl, ratio, adv, clip=0.2):
    """grpo_loss of one token per sequence: -min(ratio A, clip(ratio) A). -> loss, d loss / d logprob"""
    logprobs = torch.log(torch.tensor([[ratio]], dtype=torch.float64)).requires_grad_(True)  # (1, 1)
    loss = impl.grpo_loss(logprobs, torch.zeros(1, 1, dtype=torch.float64), torch.tensor([adv], dtype=torch.float64),
                          torch.ones(1, 1, dtype=torch.bool), clip)
    loss.backward()
    return loss.item(), logprobs.grad.item()


@pytest.mark.parametrize("ratio, adv, expected", [
    (0.5, -1.0, 0.8),  # A < 0, ratio below 1 - c: the clipped side (0.8 A) is the smaller surrogate
    (1.5, 2.0, -2.4),  # A > 0, ratio above 1 + c: 1.2 A, while clamp(ratio A) would give 1.2
])
def test_B4_clip_before_advantage(impl, ratio, adv, expected):
    loss, _ = per_token_loss(impl, ratio, adv)
    assert loss == pytest.approx(expected, rel=1e-9), f"ratio {ratio}, A {adv}: loss {loss}, expected {expected}"


def test_B4_no_gradient_through_clipped_negative_advantage(impl):
    _, grad = per_token_loss(impl, 0.5, -1.0)  # clipped: ratio < 1 - c with A < 0
    assert grad == 0.0, f"gradient {grad} through a clipped token"


# ----------------------------------------------------------------------------------------------
# B5 masked_mean multiplies by the mask


def test_B5_masked_mean_ignores_nan_and_inf_at_masked_positions(impl):
    values = torch.tensor([[1.0, 3.0, float("nan")], [5.0, -float("inf"), float("inf")]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert impl.masked_mean(values, mask).item() == pytest.approx(3.0)


def test_B5_all_masked_loss_is_finite_zero(impl):
    logprobs = torch.zeros(2, 3, requires_grad=True)
    loss = impl.grpo_loss(logprobs, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.zeros(2, 3, dtype=torch.bool))
    assert loss.item() == 0.0, f"all-masked loss {loss.item()}"


# ----------------------------------------------------------------------------------------------
# B6 log-prob shift misalignment


def test_B6_row_t_comes_from_the_position_before_token_t(impl):
    prompt_ids, prompt_mask = torch.tensor([[1, 4, 5]]), torch.ones(1, 3, dtype=torch.long)  # (1, P=3): BOS 1 2
    completions, mask = torch.tensor([[6, 2, 0]]), torch.tensor([[True, True, False]])  # (1, T=3): 3 EOS PAD
    logits = impl.completion_logits(position_policy(), prompt_ids, prompt_mask, completions, mask)  # (1, T, V)
    # input = [BOS, 1, 2, c0, c1, c2]: completion token t sits at index P + t, predicted by index P + t - 1
    assert logits[0, :, 0].tolist() == [2.0, 3.0, 4.0]


def test_B6_row_t_does_not_see_token_t(impl):
    """Causality on a left-padded batch: completion_logits row t predicts completions[:, t], so changing the last
    completion token changes no row."""
    policy = tiny_lm()
    enc = TOKENIZER(["12+7=", "3+4="], padding_side="left")  # row 1 has one PAD on the left
    prompt_ids, prompt_mask = enc["input_ids"], enc["attention_mask"]  # (2, P=6)
    completions = torch.tensor([[4, 12, 2], [10, 2, 0]])  # (2, T=3): "19" EOS, "7" EOS PAD
    mask = torch.tensor([[True, True, True], [True, True, False]])
    changed = completions.clone()
    changed[:, -1] = 5  # only the last completion token differs
    with torch.no_grad():
        a = impl.completion_logits(policy, prompt_ids, prompt_mask, completions, mask)
        b = impl.completion_logits(policy, prompt_ids, prompt_mask, changed, mask)
    assert a.shape == (2, 3, len(TOKENIZER.tokens))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg="a row changed when only the token it predicts changed")


# ----------------------------------------------------------------------------------------------
# B7 log(softmax)


def test_B7_token_logprobs_finite_for_large_logits(impl):
    logits = torch.tensor([[0.0, 200.0], [-150.0, 50.0]])  # (T=2, V=2): probabilities e^-200 and e^-200
    out = impl.token_logprobs(logits, torch.tensor([0, 0]))
    assert torch.isfinite(out).all(), out.tolist()
    assert torch.allclose(out, torch.tensor([-200.0, -200.0]))


# ----------------------------------------------------------------------------------------------
# B8 k3 with the log-ratio reversed


def test_B8_kl_estimator_is_unbiased_for_kl_pi_ref(impl):
    """pi uniform over 3 tokens: the plain mean of k3 over one copy of each token is exactly E_pi[k3]."""
    pi = torch.full((3,), -math.log(3.0), dtype=torch.float64)  # log pi (V,)
    ref = torch.log_softmax(torch.tensor([2.0, 0.0, -2.0], dtype=torch.float64), -1)  # log pi_ref (V,)
    exact = (pi.exp() * (pi - ref)).sum()  # KL(pi || pi_ref) = 1.0443
    estimate = impl.kl_to_reference(pi[None], ref[None], torch.ones(1, 3, dtype=torch.bool))
    assert estimate.item() == pytest.approx(exact.item(), rel=1e-9)


# ----------------------------------------------------------------------------------------------
# B9 rewards.view(G, B)


def test_B9_each_prompt_normalised_within_its_own_group(impl):
    rewards = torch.tensor([0.0, 1.0, 2.0, 5.0, 6.0, 8.0])  # prompt-major: B=2 prompts, G=3 samples each
    adv = impl.batch_advantages(rewards, 3)
    expected = torch.cat([impl.group_advantage([0.0, 1.0, 2.0]), impl.group_advantage([5.0, 6.0, 8.0])]).float()
    assert torch.allclose(adv, expected, atol=1e-6), adv.tolist()


class SpreadRewardTask(grpo_buggy.AdditionTask):
    """AdditionTask whose rewards differ within and across groups whatever is sampled: i^2 mod 7 for sample i."""

    def reward(self, prompts, completions):
        return (torch.arange(len(prompts)) ** 2 % 7).float()  # (n,)


def test_B9_rollout_advantages_use_the_true_groups(impl):
    _, policy, ref_policy, tok, _, cfg, g = tiny_setup(impl, seed=3, prompts_per_batch=3, group_size=5)
    batch, _ = impl.rollout(policy, ref_policy, tok, SpreadRewardTask(), cfg, g)
    rewards = batch["rewards"].view(3, 5)  # (B, G)
    expected = torch.stack([impl.group_advantage(row.tolist()) for row in rewards]).float()  # (B, G)
    assert rewards.std(dim=1).gt(0).any(), "diagnostic needs a group with reward variance"
    # expected uses impl's own group_advantage, so only the grouping is under test (equal_nan: B2 is not)
    assert torch.allclose(batch["advantages"].view(3, 5), expected, atol=1e-6, equal_nan=True)


# ----------------------------------------------------------------------------------------------
# B10 temperature in sampling but not in training log-probs


def test_B10_training_logprobs_use_the_sampling_temperature(impl):
    logits = torch.tensor([1.0, 0.0, -1.0, 0.5])  # (V,)
    prompt_ids, prompt_mask = torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1, 1]])  # (1, P=3), left-padded
    completions, mask = torch.tensor([[0, 3, 2]]), torch.ones(1, 3, dtype=torch.bool)  # (1, T=3)
    out = impl.policy_logprobs(constant_policy(logits), prompt_ids, prompt_mask, completions, mask, 0.5)  # (1, T)
    expected = torch.log_softmax(logits / 0.5, -1)[completions]
    assert torch.allclose(out, expected, atol=1e-6), (out.tolist(), expected.tolist())


def test_B6_B10_B12_B13_training_logprobs_match_the_sampler(impl):
    """The rollout's logprob_gap diagnostic: old log-probs recomputed by the training path equal the
    log-probs of the tokens under the distribution the sampler drew them from (temperature 0.8), on the rows
    whose prompt was left-padded (B12, B13 break only those) and on the others (B6, B10 break every row)."""
    task, policy, ref_policy, tok, _, cfg, g = tiny_setup(impl, temperature=0.8)
    batch, stats = impl.rollout(policy, ref_policy, tok, task, cfg, g)
    assert (~batch["mask"]).any() and batch["prompt_mask"].eq(0).any(), "diagnostic needs padded prompts and EOS"
    mask = batch["mask"]
    gap = (batch["old_logprobs"] - batch["sampler_logprobs"]).abs().masked_fill(~mask, 0).amax(dim=1)  # (N,)
    padded = batch["prompt_mask"].eq(0).any(dim=1)  # (N,)
    assert gap[padded].max() < 1e-4 and gap[~padded].max() < 1e-4, f"gaps {gap[padded].max():.3g} (padded rows), " \
        f"{gap[~padded].max():.3g} (unpadded rows)"
    assert stats["logprob_gap"] < 1e-4 and stats["logprob_gap_unpadded"] < 1e-4


# ----------------------------------------------------------------------------------------------
# B12 training forward without position ids; B13 sampling without the attention mask


def left_padded(tokenizer, text, pad):
    """One prompt as a (1, P) row with `pad` PAD tokens on its left, and its attention mask."""
    ids = tokenizer([text])["input_ids"]  # (1, P0)
    pads = torch.full((1, pad), tokenizer.pad_token_id)
    return torch.cat([pads, ids], dim=1), torch.cat([torch.zeros(1, pad, dtype=torch.long), torch.ones_like(ids)], 1)


def test_B12_left_padding_leaves_a_rows_training_logprobs_unchanged(impl):
    """The same prompt and completion scored alone and behind three PAD tokens: equal log-probs (a model library
    numbers positions 0..L-1 unless given position_ids, so the padded row's tokens would sit three places on)."""
    model = tiny_lm(seed=1)
    completions, mask = torch.tensor([[5, 6, TOKENIZER.eos_token_id]]), torch.ones(1, 3, dtype=torch.bool)
    scores = [impl.policy_logprobs(model, *left_padded(TOKENIZER, "12+3=", pad), completions, mask, 0.8)
              for pad in (0, 3)]  # (1, T) each
    assert torch.allclose(scores[0], scores[1], atol=1e-5), [s.tolist() for s in scores]


def test_B13_left_padding_leaves_the_samplers_distribution_unchanged(impl):
    """The same prompt sampled alone and behind three PAD tokens, from one seed: the same tokens, drawn with the
    same log-probs (the sampler must not attend to the padding)."""
    model = tiny_lm(seed=1)
    draws = [impl.generate(model, TOKENIZER, *left_padded(TOKENIZER, "12+3=", pad), 4, 0.8,
                           torch.Generator().manual_seed(0)) for pad in (0, 3)]
    (tokens0, _, logp0, _), (tokens3, _, logp3, _) = draws
    assert torch.allclose(logp0, logp3, atol=1e-5), (logp0.tolist(), logp3.tolist())


# ----------------------------------------------------------------------------------------------
# B14 completion mask without the EOS; B17 reward text past the EOS


def test_B14_completion_mask_covers_the_first_eos_and_nothing_after(impl):
    eos = TOKENIZER.eos_token_id
    completions = torch.tensor([[5, eos, 7, eos], [eos, 5, 6, 7], [5, 6, 7, 8]])  # (3, T=4)
    expected = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert impl.completion_mask(completions, eos).equal(expected), impl.completion_mask(completions, eos).tolist()


def test_B17_reward_text_stops_at_the_first_eos(impl):
    eos, pad, bos = TOKENIZER.eos_token_id, TOKENIZER.pad_token_id, TOKENIZER.bos_token_id
    one, nine, three = TOKENIZER.encode("193", False)
    sampled = torch.tensor([[one, pad, nine, bos, eos, three]])  # a PAD and a BOS sampled before the EOS
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]], dtype=torch.bool)
    assert impl.decode_completions(TOKENIZER, sampled, mask) == ["19"]
    rows = [[*TOKENIZER.encode("19", False), eos, *TOKENIZER.encode("3", False)], TOKENIZER.encode("4+4=", False)]
    completions = torch.tensor(rows)  # (2, T=4): an answer, EOS and a sampled '3'; four tokens without an EOS
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)  # through the first EOS
    assert impl.decode_completions(TOKENIZER, completions, mask) == ["19", "4+4="]


# ----------------------------------------------------------------------------------------------
# B15 prompts tiled instead of repeated; B16 the reference is the live policy


def test_B15_each_prompt_repeated_group_size_times_in_a_row(impl):
    assert impl.repeat_prompts(["1+2=", "3+4=", "5+6="], 2) == ["1+2=", "1+2=", "3+4=", "3+4=", "5+6=", "5+6="]


def test_B15_rollout_groups_hold_one_prompt_each(impl):
    task, policy, ref_policy, tok, _, cfg, g = tiny_setup(impl)
    batch, stats = impl.rollout(policy, ref_policy, tok, task, cfg, g)
    groups = [batch["prompts"][i : i + cfg.group_size] for i in range(0, len(batch["prompts"]), cfg.group_size)]
    assert all(len(set(group)) == 1 for group in groups), groups
    assert stats["mixed_groups"] == 0


@pytest.mark.parametrize("task_name", ["addition", "sparse"])
def test_B16_the_reference_stays_the_starting_policy(impl, task_name):
    """The reference scores exactly like the policy it starts from, in eval mode (dropout 0.5 in both, so a
    reference left in train mode is seen), and an update of the policy does not move it; for the SFT checkpoint
    (AdditionTask) and for a fresh seeded model (SparseMatchTask, no checkpoint)."""
    cfg = impl.make_config(prompts_per_batch=4, group_size=4, dropout=0.5)
    policy, ref_policy, tok, optimizer, _ = impl.setup_run(TASKS[task_name](), cfg, 0)
    assert ref_policy is not policy
    ids = tok(["12"])["input_ids"]
    before = ref_policy(ids).logits.detach().clone()
    assert torch.equal(ref_policy(ids).logits, before), "the reference is not deterministic: dropout left on?"
    assert torch.equal(policy.eval()(ids).logits, before), "the reference is not the policy it starts from"
    policy.train()(ids).logits.sum().backward()
    optimizer.step()
    assert not torch.equal(policy.eval()(ids).logits, before), "the policy moved"
    assert torch.equal(ref_policy(ids).logits, before), "the reference moved with it"


# ----------------------------------------------------------------------------------------------
# B11 no gradient clipping


def test_B11_optimizer_step_clips_the_gradient_norm(impl):
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    loss = 1e3 * net(torch.ones(1, 4)).sum()  # gradient norm ~ 2000
    pre_clip = impl.optimizer_step(net, torch.optim.SGD(net.parameters(), lr=0.0), loss, 1.0)
    post_clip = torch.cat([p.grad.flatten() for p in net.parameters()]).norm().item()
    assert pre_clip > 100, "the returned norm is the pre-clip norm"
    assert post_clip <= 1.0 + 1e-5, f"gradient norm {post_clip:.1f} after optimizer_step, max_grad_norm 1.0"


def test_B11_the_step_applies_the_gradient_clipped_to_its_l2_norm(impl):
    """Clipping must come before optimizer.step() and measure the L2 norm: one SGD step of lr 1 then moves the
    parameters by exactly max_grad_norm (clipping after the step moves them by ~2236, an L1 clip by 0.45)."""
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    before = torch.cat([p.detach().flatten() for p in net.parameters()])
    loss = 1e3 * net(torch.ones(1, 4)).sum()  # every gradient entry 1000: L2 norm 2236, L1 norm 5000
    impl.optimizer_step(net, torch.optim.SGD(net.parameters(), lr=1.0), loss, 1.0)
    moved = (torch.cat([p.detach().flatten() for p in net.parameters()]) - before).norm().item()
    assert moved == pytest.approx(1.0, rel=1e-4), f"the step moved the parameters by {moved:.4g}, not by 1.0"


# ----------------------------------------------------------------------------------------------
# The numbers the hints quote, measured: level 2 on its tiny input, level 1 on default runs (slow)


def test_probe_numbers_in_the_hints():
    """The numbers the level-2 probes quote, on the probes' own tiny inputs (buggy = the single-bug hybrid)."""
    logits = torch.tensor([1.0, 0.0, -1.0, 0.5])  # (V,): the B10 probe, as in test_B10_*
    prompt_ids, prompt_mask = torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1, 1]])
    completions, mask = torch.tensor([[0, 3, 2]]), torch.ones(1, 3, dtype=torch.bool)
    for impl, quoted in ((grpo_fixed, "[-0.42, -1.42, -4.42]"), (catalog.hybrid("B10"), "[-0.75, -1.25, -2.75]")):
        out = impl.policy_logprobs(constant_policy(logits), prompt_ids, prompt_mask, completions, mask, 0.5)
        assert "[" + ", ".join(f"{x:.2f}" for x in out[0].tolist()) + "]" == quoted
        assert quoted in catalog.bug("B10").probe
    pi = torch.full((3,), -math.log(3.0), dtype=torch.float64)  # the B8 probe
    ref = torch.log_softmax(torch.tensor([2.0, 0.0, -2.0], dtype=torch.float64), -1)
    every = torch.ones(1, 3, dtype=torch.bool)
    values = [m.kl_to_reference(pi[None], ref[None], every).item() for m in (grpo_fixed, catalog.hybrid("B8"))]
    assert f"= {values[0]:.3f} exactly (the buggy mean is {values[1]:.2f})" in catalog.bug("B8").probe
    eos = TOKENIZER.eos_token_id
    masks = [m.completion_mask(torch.tensor([[5, eos, 7, eos]]), eos)[0].int().tolist()
             for m in (grpo_fixed, catalog.hybrid("B14"))]  # the B14 probe
    assert f"should be {masks[0]}; here it is {masks[1]}" in catalog.bug("B14").probe
    ids = torch.tensor([[*TOKENIZER.encode("19", False), eos, *TOKENIZER.encode("3", False)]])  # the B17 probe
    texts = [m.decode_completions(TOKENIZER, ids, grpo_fixed.completion_mask(ids, eos))[0]
             for m in (grpo_fixed, catalog.hybrid("B17"))]
    assert f"should be '{texts[0]}'; here it is '{texts[1]}'" in catalog.bug("B17").probe
    tiled = catalog.hybrid("B15").repeat_prompts(["1+2=", "3+4="], 2)  # the B15 probe
    assert grpo_fixed.repeat_prompts(["1+2=", "3+4="], 2) != tiled
    assert f"should be {grpo_fixed.repeat_prompts(['1+2=', '3+4='], 2)}; here it is {tiled}" in catalog.bug("B15").probe
    freq = draw_frequencies(catalog.hybrid("B1"), torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0]), 20000)  # the B1 probe
    assert "[" + ", ".join(f"{x:.2f}".removeprefix("0") for x in freq.tolist()) + "]" == "[.39, .30, .20, .10, .00]"
    assert "the buggy ones are about [.39, .30, .20, .10, 0]" in catalog.bug("B1").probe


@functools.cache
def default_run(label: str, seed: int = 0) -> list[dict]:
    """A default run (70 iterations of 16 prompts x 8) of grpo_fixed or hybrid(label), logging the exact KL."""
    logger = logging.getLogger("grpo")
    level = logger.level
    logger.setLevel(logging.ERROR)  # hybrids log health warnings
    try:
        return nb01_bugs.trainer(label, exact_kl=True).train(seed=seed)
    finally:
        logger.setLevel(level)


def series(history, key):
    return [s[key] for s in history]


def excursions(history, key):
    """[(iteration, value rounded as the hints quote it)] of the iterations where `key` leaves its healthy range."""
    return [(s["iteration"], f"{s[key]:.0f}") for s in history if not grpo_fixed.in_range(s, key)]


def last10(history, key):
    return statistics.fmean(series(history, key)[-10:])


def quoted(bug_id: str, *texts: str) -> None:
    """Each text occurs in the bug's level-1 hint."""
    missing = [t for t in texts if t not in catalog.bug(bug_id).symptom]
    assert not missing, f"{bug_id}: {missing} not in {catalog.bug(bug_id).symptom!r}"


def all_in_range(history):
    """Every STATS range holds at every iteration (ref_gap from iteration 1: before any update it is 0 in a
    correct run too)."""
    return all(grpo_fixed.in_range(s, name) for s in history for name in grpo_support.STATS
               if not (name == "ref_gap" and s["iteration"] == 0))


@pytest.mark.slow
@pytest.mark.parametrize("bug_id", catalog.BUG_IDS)
def test_level1_hint_numbers_are_a_default_run(bug_id):
    """The numbers each level-1 hint quotes, measured on the default run (seed 0) of its single-bug hybrid against
    the fixed twin's (and seeds 1, 2 where the hint quotes them). Deterministic for a seed: exact roundings."""
    run, fixed = default_run(bug_id), default_run("fixed")
    healthy_final = f"{final_reward(fixed):.2f}"
    assert healthy_final == "0.68"
    if bug_id == "B1":
        assert max(series(run, "reward")) < 0.05 and f"{final_reward(run):.2f}" == "0.01"
        assert f"{statistics.fmean(series(run, 'zero_var_groups')):.3f}" == "0.925"
        means = [f"{statistics.fmean(series(h, 'completion_length')):.1f}" for h in (run, fixed)]
        assert means == ["3.8", "3.0"]
        assert f"{run[0]['entropy']:.1f}" == "0.7"  # stays near it, where the healthy run's falls below 0.3
        assert min(series(run, "entropy")) > 0.55 > 0.3 > min(series(fixed, "entropy"))
        quoted("B1", "about 0.01", "zero_var_groups 0.925", "3.8 tokens vs 3.0", "starting 0.7")
    elif bug_id == "B2":
        nan_iterations = sum(s["adv_nonfinite"] > 0 for s in run)
        skipped = sum(series(run, "nonfinite_steps"))
        assert nan_iterations == sum(s["nonfinite_steps"] > 0 for s in run) > len(run) / 2
        quoted("B2", f"{nan_iterations} of {len(run)}", f"({skipped} of {len(run) * 4})",
               f"ends at {final_reward(run):.2f} where a healthy run reaches {healthy_final}")
    elif bug_id == "B3":
        assert all(s["ratio_last_maxdev"] == 0 and s["clip_frac_pos"] == s["clip_frac_neg"] == 0 for s in run)
        quoted("B3", f"ends at {final_reward(run):.2f} where a healthy run reaches {healthy_final}")
    elif bug_id == "B4":
        assert all_in_range(run)
        assert statistics.fmean(series(run, "loss")[:5]) > statistics.fmean(series(fixed, "loss")[:5]) + 0.05
        quoted("B4", f"ends near {final_reward(run):.2f} where a healthy run reaches {healthy_final}")
    elif bug_id == "B5":
        same = lambda h: [{k: v for k, v in s.items() if k != "seconds"} for s in h]  # noqa: E731
        assert same(run) == same(fixed)
        quoted("B5", "identical to a healthy one at every iteration")
    elif bug_id == "B6":
        gaps = series(run, "logprob_gap")
        assert (round(min(gaps)), round(max(gaps))) == (13, 15)
        assert final_reward(run) < run[0]["reward"] and f"{run[0]['reward']:.2f}" == "0.27"
        assert 100 < max(series(run, "grad_norm")) < 1000
        quoted("B6", "by 13 to 15 nats", "drifts down from 0.27", "into the hundreds")
    elif bug_id == "B7":
        assert all_in_range(run)
        quoted("B7", f"final reward {final_reward(run):.2f} where a healthy run reaches {healthy_final}")
    elif bug_id == "B8":
        assert all(s["kl"] >= 0 for s in run)
        quoted("B8", f"reads {last10(run, 'kl'):.2f} on average over the last 10", f"logs {last10(fixed, 'kl'):.2f}",
               f"spikes to {round(max(series(run, 'kl')))}",
               f"({last10(run, 'exact_kl'):.2f} vs {last10(fixed, 'exact_kl'):.2f})",
               f"up to {round(max(series(run, 'grad_norm')))}, where a healthy run peaks at "
               f"{round(max(series(fixed, 'grad_norm')))}")
        assert last10(run, "exact_kl") <= last10(fixed, "exact_kl")
    elif bug_id == "B9":
        means = series(run, "adv_group_mean")
        assert f"{min(means):.2f} to {max(means):.0f}" == "0.26 to 1"
        assert not any(grpo_fixed.in_range(s, "adv_group_mean") for s in run)
        assert final_reward(run) > run[0]["reward"] + 0.3
        quoted("B9", "adv_group_mean 0.26 to 1")
    elif bug_id == "B10":
        gaps = series(run, "logprob_gap")
        assert all(s["ratio_first_maxdev"] == 0 for s in run)
        quoted("B10", f"by {min(gaps):.1f} to {max(gaps):.1f} nats")
    elif bug_id in ("B12", "B13"):
        gaps, unpadded = series(run, "logprob_gap"), series(run, "logprob_gap_unpadded")
        assert min(gaps) > 0.05 and max(unpadded) < 1e-4
        low, high = (f"{min(gaps):.1f}", f"{max(gaps):.1f}") if bug_id == "B12" else (f"{min(gaps):.2f}",
                                                                                        f"{max(gaps):.1f}")
        quoted(bug_id, f"by {low} to {high} nats", f"{final_reward(run):.2f} where a healthy ")
    elif bug_id == "B14":
        lengths = [f"{statistics.fmean(series(h, 'completion_length')):.2f}" for h in (run, fixed)]
        n = grpo_fixed.Config().prompts_per_batch * grpo_fixed.Config().group_size  # every completion stops
        assert all(s["mask_eos_mismatch"] == n for s in run)  # what the health check reads (not in the hint)
        quoted("B14", f"({lengths[0]} vs {lengths[1]} tokens",
               f"ends at {final_reward(run):.2f} where a healthy one reaches {healthy_final}",
               "other seeds it can end lower")
        assert final_reward(default_run("B14", 1)) < final_reward(default_run("fixed", 1)) - 0.03  # seed 1
        out = excursions(run, "grad_norm")
        quoted("B14", f"range once ({out[0][1]} at iteration {out[0][0]})")
        assert len(out) == 1
    elif bug_id == "B15":
        assert all(s["mixed_groups"] == 1 for s in run) and all(grpo_fixed.in_range(s, "adv_group_mean") for s in run)
        assert all(not grpo_fixed.in_range(s, "mixed_groups") for s in run) and "mixed_groups" not in PROGRESS
        printed = [s for s in run if s["iteration"] % 10 == 0 or s["iteration"] == len(run) - 1]  # the CLI's lines
        assert not [name for s in printed for name in PROGRESS if not grpo_fixed.in_range(s, name)]
        quoted("B15", f"ends at {final_reward(run):.2f} where a healthy one reaches {healthy_final}",
               "range at every iteration", "progress line a default run prints stays in its healthy ranges")
        out = excursions(run, "grad_norm")
        quoted("B15", f"range once ({out[0][1]} at iteration {out[0][0]}, between the printed lines)")
        assert len(out) == 1 and out[0][0] not in {s["iteration"] for s in printed}
        assert "mixed_groups" not in catalog.bug("B15").stats  # level 1 leaves finding it to the learner
        assert not grpo_fixed.in_range(fixed[0], "ref_gap") and not grpo_fixed.in_range(run[0], "ref_gap")
        quoted("B15", "ref_gap at iteration 0 is out in every run, healthy ones too")
    elif bug_id == "B16":
        assert all(s["ref_gap"] == 0 for s in run)  # what the health check reads (not in the hint)
        quoted("B16", f"({last10(run, 'kl'):.2f} on average over the last 10", f"logs {last10(fixed, 'kl'):.2f})",
               f"({final_reward(run):.2f} where a healthy run reaches {healthy_final})")
        assert abs(final_reward(run) - final_reward(fixed)) < 0.02  # "about where a healthy run's does"
    elif bug_id == "B17":
        assert min(series(run, "text_mismatch")) > 0  # what the health check reads (not in the hint)
        lengths = [f"{statistics.fmean(series(h, 'completion_length')):.2f}" for h in (run, fixed)]
        quoted("B17", f"({run[0]['reward']:.2f} at the first iteration, where a healthy run starts at "
               f"{fixed[0]['reward']:.2f})", f"({final_reward(run):.2f} where a healthy run reaches {healthy_final})",
               f"({lengths[0]} vs {lengths[1]} tokens")
    elif bug_id == "B11":
        finals = [final_reward(default_run(label, seed)) for label in ("B11", "fixed") for seed in range(3)]
        assert max(abs(a - b) for a, b in zip(finals[:3], finals[3:], strict=True)) <= 0.04
        peaks = {label: [max(series(default_run(label, seed), "grad_norm")) for seed in range(3)]
                 for label in ("B11", "fixed")}
        assert peaks["B11"][0] > peaks["fixed"][0] and peaks["B11"][1] < peaks["fixed"][1]  # "higher", "lower"
        out = [len(excursions(default_run("B11", seed), "grad_norm")) for seed in range(3)]
        assert out == [0, 0, 1]  # "on seed 2 it leaves its healthy range once"
        assert all(grpo_fixed.in_range(s, "grad_norm") for seed in range(3) for s in default_run("fixed", seed))
        assert not all(grpo_fixed.in_range(s, "ratio_last_mean") for s in run)  # seed 0
        quoted("B11", f"about {round(max(series(run, 'grad_norm')))} vs {round(max(series(fixed, 'grad_norm')))}",
               "within 0.04", "seeds 0, 1, 2: " + ", ".join(f"{f:.3f}" for f in finals[:3]) + " vs "
               + ", ".join(f"{f:.3f}" for f in finals[3:]))


# ----------------------------------------------------------------------------------------------
# The catalog proof


def catalog_tests():
    """{test name: (function, bug ids in its name, parameter sets)} for every test_Bn_* in this file."""
    found = {}
    for name, fn in sorted(globals().items()):
        if not (name.startswith("test_B") and callable(fn)):
            continue
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        if marks:
            argnames = [a.strip() for a in marks[0].args[0].split(",")]
            rows = [(v,) if len(argnames) == 1 else v for v in marks[0].args[1]]  # one name: bare values
            params = [dict(zip(argnames, values, strict=True)) for values in rows]
        else:
            params = [{}]
        found[name] = (fn, set(BUG_ID.findall(name)), params)
    return found


def passes(fn, module, params) -> bool:
    """True when the test body passes on `module` for every parameter set (any exception is a failure)."""
    for kwargs in params:
        try:
            fn(module, **kwargs)
        except Exception:  # an AssertionError, or the NaN/shape error a bug provokes: pytest fails it too
            return False
    return True


def test_every_bug_has_a_catalog_test():
    covered = set().union(*(ids for _, ids, _ in catalog_tests().values()))
    assert covered == set(catalog.BUG_IDS), f"missing: {set(catalog.BUG_IDS) - covered}"


@pytest.mark.parametrize("target", ["buggy", *catalog.BUG_IDS])
def test_catalog_is_proved(target):
    """On grpo_buggy every catalog test fails; on hybrid(Bn) exactly the tests naming Bn fail."""
    module = grpo_buggy if target == "buggy" else catalog.hybrid(target)
    outcome = {name: passes(fn, module, params) for name, (fn, _, params) in catalog_tests().items()}
    if target == "buggy":
        should_fail = set(outcome)
    else:
        should_fail = {name for name, (_, ids, _) in catalog_tests().items() if target in ids}
    wrong = {name: ("passes" if ok else "fails") for name, ok in outcome.items() if ok == (name in should_fail)}
    assert not wrong, f"on {target}: {wrong}"


@pytest.mark.slow
def test_catalog_cli_option_buggy(tmp_path):
    """`pytest tests/test_catalog.py --impl=buggy` reports every test_Bn_* as failed."""
    report = tmp_path / "report.xml"
    here = Path(__file__).resolve()
    subprocess.run(
        [sys.executable, "-m", "pytest", str(here), "--impl=buggy", "-k", "test_B", "-q", "-p", "no:xdist",
         f"--junitxml={report}"],
        cwd=here.parent.parent, capture_output=True, text=True, timeout=600,
    )
    cases = ET.parse(report).getroot().iter("testcase")
    outcome = {c.get("name"): c.find("failure") is None and c.find("error") is None for c in cases}
    assert len(outcome) >= len(catalog.BUG_IDS)
    passed = [name for name, ok in outcome.items() if ok]
    assert not passed, f"catalog tests passing on grpo_buggy: {passed}"
