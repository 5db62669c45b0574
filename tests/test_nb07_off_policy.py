"""workbook/nb07_off_policy.py: the lower-precision sampler, the update_policy with a replaceable policy-gradient
term, the stale-rollout runner, and the exact enumeration of AdditionTask's completions. Each helper is
checked against the twins' own functions (or a direct computation), never against numbers it produced."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import grpo_fixed
import grpo_support
from workbook import nb07_off_policy
from workbook.swap import fixed_with

TASK = grpo_fixed.AdditionTask()
TOKENIZER = grpo_fixed.CharTokenizer(TASK.alphabet)
PROMPTS = ["12+7=", "3+45="]  # two prompt lengths


def fresh_policy(seed=0, noise=0.0):
    """The SFT policy; with noise, its parameters perturbed by noise * N(0, 1) (seeded): a different policy."""
    cfg = grpo_fixed.make_config(**nb07_off_policy.SHORT)
    policy = grpo_fixed.setup_run(TASK, cfg, seed)[0]
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(noise * torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)))
    return policy


def one_batch(module, policy, seed=0, prompts_per_batch=4):
    cfg = module.make_config(prompts_per_batch=prompts_per_batch)
    return module.rollout(policy, policy, TOKENIZER, TASK, cfg, torch.Generator().manual_seed(seed))


def relative_error(g, g_true) -> float:
    """|g - g_true| / |g_true| (L2 over all parameters), as notebook 07 measures it."""
    return ((g - g_true).norm() / g_true.norm()).item()


# ---- the lower-precision sampler --------------------------------------------------------------


def test_round_to_is_the_identity_in_float32_and_bounded_in_bfloat16():
    x = 30 * torch.randn(1000, generator=torch.Generator().manual_seed(1))
    assert torch.equal(nb07_off_policy.round_to(x, torch.float32), x)
    rounded = nb07_off_policy.round_to(x, torch.bfloat16)
    assert rounded.dtype == torch.float32
    assert not torch.equal(rounded, x)
    assert ((rounded - x).abs() <= x.abs() * 2.0**-8).all()  # unit roundoff of an 8-bit significand


def test_float32_sampler_reproduces_the_twins_rollout_exactly():
    policy = fresh_policy()
    plain, _ = one_batch(grpo_fixed, policy)
    same, _ = one_batch(fixed_with("t_fp32", generate=nb07_off_policy.rounded_generate(torch.float32)), policy)
    for key in ("completions", "mask", "sampler_logprobs", "old_logprobs", "advantages"):
        assert torch.equal(plain[key], same[key]), key


def test_bfloat16_sampler_logprobs_are_the_rounded_distributions():
    policy = fresh_policy()
    batch, _ = one_batch(fixed_with("t_bf16", generate=nb07_off_policy.rounded_generate(torch.bfloat16)), policy)
    args = (batch["prompt_ids"], batch["prompt_mask"], batch["completions"], batch["mask"])
    with torch.no_grad():
        logits = nb07_off_policy.round_to(grpo_fixed.completion_logits(policy, *args),
                                          torch.bfloat16) / grpo_fixed.Config.temperature  # (N, T, V), as sampled
    expected = torch.log_softmax(logits, -1).gather(-1, batch["completions"][..., None]).squeeze(-1)
    mask = batch["mask"]
    assert torch.allclose(batch["sampler_logprobs"][mask], expected[mask], atol=1e-5)
    log_w = nb07_off_policy.log_weights(batch)
    assert log_w.shape == (int(mask.sum()),)
    assert log_w.abs().max() > 0  # the float32 trainer disagrees with the rounded sampler


def test_sampler_batch_uses_the_requested_precision():
    policy = fresh_policy()
    exact, _ = nb07_off_policy.sampler_batch(policy, "float32", prompts_per_batch=4)
    rounded, _ = nb07_off_policy.sampler_batch(policy, "float8_e4m3fn", prompts_per_batch=4)
    gap = grpo_support.STATS["logprob_gap"].hi  # float32: only the key-value cache's rounding (<= 6e-6 measured)
    assert nb07_off_policy.log_weights(exact).abs().max() <= gap
    assert nb07_off_policy.log_weights(rounded).abs().max() > 100 * gap


# ---- update_policy with a replaceable policy-gradient term ------------------------------------


def updated(update_policy, seed=0):
    """Parameters and records after one update_policy call on the same batch from the same state."""
    policy = fresh_policy(seed)
    cfg = grpo_fixed.make_config(**nb07_off_policy.SHORT)
    batch, _ = one_batch(grpo_fixed, policy, seed, prompts_per_batch=cfg.prompts_per_batch)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    records = update_policy(policy, optimizer, batch, cfg, torch.Generator().manual_seed(seed))
    return torch.cat([p.detach().flatten() for p in policy.parameters()]), records


def test_update_policy_with_plain_loss_is_the_twins_update_policy():
    plain = nb07_off_policy.update_policy_with(nb07_off_policy.plain_grpo_loss)
    m = fixed_with("t_plain", wrap={"update_policy": plain})
    params_twin, records_twin = updated(grpo_fixed.update_policy)
    params_ours, records_ours = updated(m.update_policy)
    assert torch.equal(params_twin, params_ours)
    assert [r["loss"] for r in records_twin] == [r["loss"] for r in records_ours]


def test_update_policy_with_passes_the_sampler_logprobs_to_the_loss():
    seen = []

    def spy(logprobs, old_logprobs, sampler_logprobs, advantages, mask, clip):
        seen.append((sampler_logprobs.shape, clip))
        return nb07_off_policy.plain_grpo_loss(logprobs, old_logprobs, sampler_logprobs, advantages, mask, clip)

    m = fixed_with("t_spy", wrap={"update_policy": nb07_off_policy.update_policy_with(spy)})
    params_ours, _ = updated(m.update_policy)
    cfg = grpo_fixed.make_config(**nb07_off_policy.SHORT)
    assert len(seen) == cfg.inner_epochs * cfg.minibatches
    assert all(shape[1] == TASK.max_completion_length and clip == cfg.clip for shape, clip in seen)
    assert torch.equal(params_ours, updated(grpo_fixed.update_policy)[0])


def test_a_different_loss_changes_the_update():
    def doubled(logprobs, old_logprobs, sampler_logprobs, advantages, mask, clip):
        return 2 * nb07_off_policy.plain_grpo_loss(logprobs, old_logprobs, sampler_logprobs, advantages, mask, clip)

    m = fixed_with("t_doubled", wrap={"update_policy": nb07_off_policy.update_policy_with(doubled)})
    assert not torch.equal(updated(m.update_policy)[0], updated(grpo_fixed.update_policy)[0])


# ---- runners ----------------------------------------------------------------------------------


def test_float32_mismatch_run_is_the_plain_twin():
    run = nb07_off_policy.run_mismatch("float32")
    plain = grpo_fixed.train(seed=0, **nb07_off_policy.SHORT)
    assert [s["reward"] for s in run["history"]] == [s["reward"] for s in plain]
    assert len(run["log_w"]) == nb07_off_policy.SHORT["steps"]
    # the float32 sampler differs from the trainer's full forward only by the key-value cache's rounding
    assert all(lw.abs().max() <= grpo_support.STATS["logprob_gap"].hi for lw in run["log_w"])


def test_on_policy_run_is_the_plain_twin_and_serves_both_sections():
    """run_on_policy (run_stale at k = 0) is the float32 run of notebook 07 §1 and the k = 0 run of §2."""
    run = nb07_off_policy.run_on_policy()
    plain = grpo_fixed.train(seed=0, **nb07_off_policy.SHORT)
    assert [s["reward"] for s in run["history"]] == [s["reward"] for s in plain]
    assert [s["health"] for s in run["history"]] == [s["health"] for s in plain]
    steps = nb07_off_policy.SHORT["steps"]
    assert len(run["log_w"]) == len(run["current_reward"]) == steps
    assert all(lw.abs().max() <= grpo_support.STATS["logprob_gap"].hi for lw in run["log_w"])  # = the float32 gap
    # the recorded policy is the trained one: the final policy of the float32 mismatch runner (same trajectory)
    trained = nb07_off_policy.run_mismatch("float32")["policy"]
    for p_run, p_mismatch in zip(run["policy"].parameters(), trained.parameters(), strict=True):
        assert torch.equal(p_run, p_mismatch)
    assert not torch.equal(next(run["policy"].parameters()), next(fresh_policy().parameters()))  # it moved


def test_stale_rollout_samples_from_the_policy_k_iterations_old():
    m = fixed_with("t_stale")
    cfg = m.make_config(prompts_per_batch=4)
    log_w = []
    policy = fresh_policy()
    old = copy.deepcopy(policy)
    for anchor in ("behaviour", "current"):
        rollout = nb07_off_policy.stale_rollout(1, anchor, m.rollout, m.policy_logprobs, m.rollout_stats, log_w)
        rollout(policy, policy, TOKENIZER, TASK, cfg, torch.Generator().manual_seed(0))  # snapshot of the first
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))  # "an update"
        batch, stats = rollout(policy, policy, TOKENIZER, TASK, cfg, torch.Generator().manual_seed(1))
        args = (batch["prompt_ids"], batch["prompt_mask"], batch["completions"], batch["mask"], cfg.temperature)
        mask = batch["mask"]
        with torch.no_grad():
            behaviour, current = m.policy_logprobs(old, *args), m.policy_logprobs(policy, *args)
        assert torch.allclose(batch["sampler_logprobs"][mask], behaviour[mask], atol=1e-5)  # sampled by the old one
        expected_old = behaviour if anchor == "behaviour" else current
        assert torch.allclose(batch["old_logprobs"][mask], expected_old[mask], atol=1e-5)
        assert torch.allclose(log_w[-1], (current - behaviour)[mask], atol=1e-5)
        assert (stats["logprob_gap"] > 1e-3) == (anchor == "current")
        # the current policy's own reward, from its own samples: what the comparison must report
        completions, cmask, _, _ = grpo_fixed.generate(
            policy, TOKENIZER, batch["prompt_ids"], batch["prompt_mask"], TASK.max_completion_length,
            cfg.temperature, torch.Generator().manual_seed(10_000 + len(log_w)))
        texts = grpo_fixed.decode_completions(TOKENIZER, completions, cmask)
        assert stats["current_reward"] == TASK.reward(batch["prompts"], texts).mean().item()
        policy.load_state_dict(old.state_dict())


def test_run_stale_rejects_an_unknown_anchor_and_a_missing_loss():
    with pytest.raises(ValueError, match="anchor"):
        nb07_off_policy.run_stale(1, "sideways")
    with pytest.raises(ValueError, match="tis"):
        nb07_off_policy.run_stale(1, "current + TIS")


# ---- exact enumeration of AdditionTask ---------------------------------------------------------


def test_completion_count_is_the_closed_form_and_the_tree_size():
    assert nb07_off_policy.completion_count(15, 5) == 1 + 14 + 14**2 + 14**3 + 14**4 + 14**5  # the full task
    for T in (1, 2, 3):
        tree = nb07_off_policy.completion_tree(TOKENIZER, T)
        assert tree["completions"].shape == (nb07_off_policy.completion_count(TOKENIZER.vocab_size, T), T)


def test_completion_tree_lists_every_completion_once_with_generates_mask():
    T = nb07_off_policy.EXACT_TOKENS
    tree = nb07_off_policy.completion_tree(TOKENIZER, T)
    completions, mask = tree["completions"], tree["mask"]
    eos, pad = TOKENIZER.eos_token_id, TOKENIZER.pad_token_id
    kept = []  # each row up to its first EOS: what the mask keeps of a generated completion
    for row, m in zip(completions.tolist(), mask.tolist(), strict=True):
        first = row.index(eos) if eos in row else T - 1
        assert m == [t <= first for t in range(T)]  # True through the first EOS, False after, as generate's
        assert all(tok == pad for tok in row[first + 1:])  # one filler for whatever generate sampled after it
        kept.append(tuple(row[: first + 1]))
    assert len(set(kept)) == completions.shape[0]  # distinct where it counts: up to the first EOS
    assert tree["texts"] == grpo_fixed.decode_completions(TOKENIZER, completions, mask)  # as rollout decodes
    assert tree["texts"] == [TOKENIZER.decode(list(k), skip_special_tokens=True) for k in kept]


def test_tree_logprobs_match_the_twins_and_sum_to_one():
    policy = fresh_policy(3, noise=0.02)
    tree = nb07_off_policy.completion_tree(TOKENIZER, nb07_off_policy.EXACT_TOKENS)
    temperature = grpo_fixed.Config.temperature
    with torch.no_grad():
        logp = nb07_off_policy.tree_logprobs(policy, TOKENIZER, PROMPTS, tree, temperature)  # (X, S, T)
    S = tree["completions"].shape[0]
    enc = TOKENIZER([PROMPTS[0], PROMPTS[1]], padding_side="left")  # different lengths: one row is padded
    with torch.no_grad():
        for x in range(len(PROMPTS)):
            twin = grpo_fixed.policy_logprobs(policy, enc["input_ids"][x].expand(S, -1),
                                              enc["attention_mask"][x].expand(S, -1), tree["completions"],
                                              tree["mask"], temperature)
            assert torch.allclose(logp[x][tree["mask"]], twin[tree["mask"]], atol=1e-5)
    assert torch.allclose(logp.sum(-1).exp().sum(-1), torch.ones(len(PROMPTS)), atol=1e-5)


def test_exact_gradients_true_matches_autograd_of_the_expected_reward():
    policy = fresh_policy(4, noise=0.02)
    ones = {"uncorrected": lambda logp, logq: torch.ones_like(logp)}
    temperature = grpo_fixed.Config.temperature
    grads = nb07_off_policy.exact_gradients(policy, TASK, TOKENIZER, PROMPTS, torch.float32, temperature, ones)
    # direct: J = mean_x sum_y pi(y|x) r(x, y), differentiated by autograd
    tree = nb07_off_policy.completion_tree(TOKENIZER, nb07_off_policy.EXACT_TOKENS)
    S = tree["completions"].shape[0]
    rewards = torch.stack([TASK.reward([p] * S, tree["texts"]) for p in PROMPTS])  # (X, S)
    assert (rewards.sum(1) >= 1).all()  # each answer is reachable in EXACT_TOKENS tokens
    logp = nb07_off_policy.tree_logprobs(policy, TOKENIZER, PROMPTS, tree, temperature)  # (X, S, T)
    J = (logp.sum(-1).exp() * rewards).sum(1).mean()
    direct = torch.cat([g.flatten() for g in torch.autograd.grad(J, list(policy.parameters()))]).double()
    assert torch.allclose(grads["true"], direct, rtol=1e-4, atol=1e-7)
    # a float32 "sampler" is the policy itself: the uncorrected update is then the policy gradient
    assert relative_error(grads["uncorrected"], grads["true"]) < 1e-4


def test_exact_gradients_see_the_rounding_bias_and_the_sequence_weight_removes_it():
    policy = fresh_policy(5)
    weightings = {
        "uncorrected": lambda logp, logq: torch.ones_like(logp),
        "sequence": lambda logp, logq: torch.exp((logp - logq).sum(-1, keepdim=True)).expand_as(logp),
    }
    grads = nb07_off_policy.exact_gradients(policy, TASK, TOKENIZER, PROMPTS, torch.float8_e4m3fn,
                                            grpo_fixed.Config.temperature, weightings)
    assert relative_error(grads["uncorrected"], grads["true"]) > 1e-3
    assert relative_error(grads["sequence"], grads["true"]) < 1e-5


# ---- the statistics rows ----------------------------------------------------------------------


def test_stats_rows_have_the_twins_shape_and_sane_ranges():
    for name, row in nb07_off_policy.STATS.items():
        assert isinstance(row, grpo_support.Stat), name
        assert row.lo <= row.hi and row.meaning and row.why
    assert nb07_off_policy.STATS["ess"].hi == 1 and 0 < nb07_off_policy.STATS["ess"].lo < 1
    assert nb07_off_policy.STATS["mismatch_kl"].lo == 0 and math.isfinite(nb07_off_policy.STATS["mismatch_kl"].hi)
