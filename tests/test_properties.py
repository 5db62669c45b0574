"""Property-based versions of the spec (hypothesis; bounded, derandomized: see conftest.py)."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from reference import assert_matches_reference, reference_grpo_loss

# ----------------------------------------------------------------------------------------------
# Strategies

moderate = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
grid = st.integers(-6400, 6400).map(lambda k: k / 64)  # exact binary fractions: r + c is exact
positive_eps = st.floats(1e-300, 1e300)


@st.composite
def wide_rewards(draw):
    """m * 2**e over the whole float64 range (2**-1000 .. 2**1023): differences are never subnormal,
    and the plain sum overflows for the largest ones."""
    n = draw(st.integers(1, 8))
    return [math.ldexp(draw(st.integers(-(2**20), 2**20)), draw(st.integers(-1020, 1003))) for _ in range(n)]


@st.composite
def loss_inputs(draw, max_n=4, max_t=6, log_lo=-30.0):
    """logprobs, old_logprobs (N, T) in [log_lo, 0], advantages (N,), a mask, a clip radius: float64."""
    n, t = draw(st.integers(1, max_n)), draw(st.integers(1, max_t))
    logp = st.floats(log_lo, 0.0)
    lp = torch.tensor(draw(st.lists(logp, min_size=n * t, max_size=n * t)), dtype=torch.float64).reshape(n, t)
    old = torch.tensor(draw(st.lists(logp, min_size=n * t, max_size=n * t)), dtype=torch.float64).reshape(n, t)
    adv = torch.tensor(draw(st.lists(st.floats(-10, 10), min_size=n, max_size=n)), dtype=torch.float64)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n * t, max_size=n * t))).reshape(n, t)
    clip = draw(st.floats(0.0, 1.0))
    return lp, old, adv, mask, clip


def pop_std(xs):
    return float(np.std(np.asarray(xs, dtype=np.float64)))


# ----------------------------------------------------------------------------------------------
# group_advantage


@given(st.lists(moderate, min_size=2, max_size=16))
def test_advantages_have_mean_zero_and_unit_std(impl, rewards):
    std = pop_std(rewards)
    assume(std > 1e-6 * max(abs(r) for r in rewards))  # well-conditioned, clearly non-constant
    adv = impl.group_advantage(rewards).numpy()
    assert abs(adv.mean()) < 1e-9
    assert abs(adv.std() - std / (std + 1e-8)) < 1e-7  # the eps effect: std(A) = std / (std + eps)


@given(st.lists(grid, min_size=1, max_size=12), grid)
def test_invariant_to_adding_a_constant(impl, rewards, shift):
    adv = impl.group_advantage(rewards)
    shifted = impl.group_advantage([r + shift for r in rewards])  # exact: both on the 1/64 grid
    assert np.allclose(shifted.numpy(), adv.numpy(), rtol=1e-9, atol=1e-9)


@given(st.lists(moderate, min_size=1, max_size=12), st.floats(1e-3, 1e3), positive_eps)
def test_positive_scaling_is_eps_scaling(impl, rewards, k, eps):
    """A(k r, k eps) = A(r, eps): positive scaling changes nothing but the eps effect."""
    assume(math.isfinite(eps * k) and eps * k > 0)
    adv = impl.group_advantage(rewards, eps)
    scaled = impl.group_advantage([k * r for r in rewards], k * eps)
    assert np.allclose(scaled.numpy(), adv.numpy(), rtol=1e-6, atol=1e-9)


@settings(max_examples=80)
@given(wide_rewards(), st.sampled_from([1e-8, 1e-300, 1.0, 1e300]))
def test_matches_exact_reference_over_the_whole_float64_range(impl, rewards, eps):
    adv = impl.group_advantage(rewards, eps)
    assert adv.dtype == torch.float64 and adv.shape == (len(rewards),)
    assert torch.isfinite(adv).all()
    if len(set(rewards)) == 1:
        assert adv.tolist() == [0.0] * len(rewards)
    else:
        assert_matches_reference(adv, rewards, eps, rtol=1e-9)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=10))
def test_finite_and_bounded_for_any_finite_rewards(impl, rewards):
    """|A_i| <= sqrt(G - 1) (the population z-score bound), for any finite float64 rewards."""
    adv = impl.group_advantage(rewards)
    assert torch.isfinite(adv).all()
    assert adv.abs().max().item() <= math.sqrt(len(rewards) - 1) + 1e-9


@given(st.lists(st.floats(0, 1), min_size=1, max_size=6), st.integers(1, 5))
def test_batch_advantages_are_per_prompt_groups(impl, rewards_per_group, b):
    g = len(rewards_per_group)
    rewards = torch.tensor([[r * (i + 1) % 1.0 for r in rewards_per_group] for i in range(b)])  # (B, G)
    adv = impl.batch_advantages(rewards.reshape(-1), g)
    expected = torch.stack([impl.group_advantage(row.tolist()) for row in rewards]).float().reshape(-1)
    assert adv.dtype == torch.float32 and adv.shape == (b * g,)
    assert torch.allclose(adv, expected, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# grpo_loss


@given(loss_inputs())
def test_loss_matches_reference_and_is_finite(impl, inputs):
    lp, old, adv, mask, clip = inputs
    lp.requires_grad_(True)
    loss = impl.grpo_loss(lp, old, adv, mask, clip)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    expected = reference_grpo_loss(lp, old, adv, mask, clip)
    assert abs(loss.item() - expected) <= 1e-9 * max(1.0, abs(expected))


@given(loss_inputs(log_lo=-40.0))
def test_loss_finite_in_float32(impl, inputs):
    """log-ratios up to +-40 give ratios up to e^40 ~ 2e17: representable in float32, so is the loss."""
    lp, old, adv, mask, clip = inputs
    lp = lp.float().requires_grad_(True)
    loss = impl.grpo_loss(lp, old.float(), adv.float(), mask, clip)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()


@given(loss_inputs(), st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=48, max_size=48))
def test_masked_values_never_matter(impl, inputs, junk):
    lp, old, adv, mask, clip = inputs
    junk = torch.tensor(junk[: 2 * lp.numel()], dtype=torch.float64)
    dirty_lp = torch.where(mask, lp, junk[: lp.numel()].reshape(lp.shape)).requires_grad_(True)
    dirty_old = torch.where(mask, old, junk[lp.numel():].reshape(lp.shape))
    clean_lp = lp.clone().requires_grad_(True)
    clean = impl.grpo_loss(clean_lp, old, adv, mask, clip)
    dirty = impl.grpo_loss(dirty_lp, dirty_old, adv, mask, clip)
    clean.backward()
    dirty.backward()
    assert torch.isfinite(dirty) and torch.isfinite(dirty_lp.grad).all()
    assert dirty.item() == clean.item() or abs(dirty.item() - clean.item()) <= 1e-12 * abs(clean.item())
    assert torch.allclose(dirty_lp.grad, clean_lp.grad, rtol=1e-12, atol=0)
    assert (dirty_lp.grad[~mask] == 0).all()


@given(loss_inputs(log_lo=-1.5))
def test_gradient_is_zero_when_clipped_else_minus_a_ratio_over_n(impl, inputs):
    lp, old, adv, mask, clip = inputs
    ratio = (lp - old).exp()
    a = adv[:, None].expand_as(lp)
    assume(((ratio - (1 + clip)).abs() > 1e-6).all() and ((ratio - (1 - clip)).abs() > 1e-6).all())
    assume(mask.any())
    lp.requires_grad_(True)
    impl.grpo_loss(lp, old, adv, mask, clip).backward()
    clipped = ((a > 0) & (ratio > 1 + clip)) | ((a < 0) & (ratio < 1 - clip))
    expected = torch.where(clipped | ~mask, 0.0, -a * ratio / mask.sum())
    assert torch.allclose(lp.grad, expected, rtol=1e-9, atol=1e-15)


# ----------------------------------------------------------------------------------------------
# masked_mean, kl_to_reference, token_logprobs, sampling


@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.booleans()), min_size=1, max_size=20))
def test_masked_mean_is_mean_over_unmasked(impl, pairs):
    values = torch.tensor([v for v, _ in pairs], dtype=torch.float64)[None]
    mask = torch.tensor([m for _, m in pairs])[None]
    expected = values[mask].mean().item() if mask.any() else 0.0
    got = impl.masked_mean(values, mask).item()
    assert abs(got - expected) <= 1e-9 * max(1.0, values.abs().max().item())


@given(loss_inputs(log_lo=-50.0))
def test_k3_nonnegative_and_zero_only_when_equal(impl, inputs):
    lp, ref, _, mask, _ = inputs
    kl = impl.kl_to_reference(lp, ref, mask).item()
    assert math.isfinite(kl) and kl >= 0
    assert impl.kl_to_reference(lp, lp.clone(), mask).item() == 0.0


@given(st.integers(1, 4), st.integers(1, 5), st.integers(2, 9), st.floats(0.1, 1e4), st.integers(0, 2**31))
def test_token_logprobs_equals_log_softmax_at_any_scale(impl, n, t, v, scale, seed):
    g = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(n, t, v, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, v, (n, t), generator=g)
    out = impl.token_logprobs(logits, tokens)
    expected = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, expected, rtol=1e-9, atol=1e-9 * scale)


@given(st.lists(st.one_of(st.floats(-1e30, 1e30), st.just(-math.inf)), min_size=1, max_size=8), st.integers(1, 50),
       st.integers(0, 2**31))
def test_sampling_draws_valid_tokens_and_never_minus_inf(impl, logits, num_samples, seed):
    assume(any(x != -math.inf for x in logits))
    logits = torch.tensor(logits, dtype=torch.float64)
    draws = impl.sample_from_logits(logits, num_samples, generator=torch.Generator().manual_seed(seed))
    assert draws.shape == (num_samples,) and draws.dtype == torch.long
    assert ((draws >= 0) & (draws < len(logits))).all()
    assert torch.isfinite(logits[draws]).all()
