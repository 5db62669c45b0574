# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 — Off-policy in practice: sampler numerics, stale rollouts, effective sample size
#
# **The interview question.** *"Your trainer recomputes the old log-probs, so the ratio is exactly 1 at
# the first inner step. Is the update on-policy? And if the rollouts come from an asynchronous worker
# whose weights are a few updates behind, which policy should the clip be anchored to?"*
#
# As notebook 02 §2 showed, the ratio is exactly 1 at the first inner step when the old log-probs are cached once by
# the same weights and code (up to rounding where the kernels round differently by batch shape). That 1 says the
# trainer agrees with *itself*; it says nothing about the policy that drew the samples. In production the two differ
# in two ways, and this notebook measures both on the twins:
#
# 1. **Sampler vs trainer numerics.** The inference engine computes logits in a lower precision than the
#    float32 trainer. We swap the twins' `generate` for one that samples from logits rounded to bfloat16
#    (or float16, float8), measure the mismatch per token and the bias it puts into the gradient
#    (exactly, by enumerating every completion), and correct it with truncated importance sampling.
# 2. **Stale rollouts.** The samples come from the policy as it was k updates ago. We anchor the clip to
#    that stale policy or to the current one, with and without the importance weight, and compare
#    rewards and clip fractions for k = 0, 2, 4.
# 3. **Effective sample size** of the importance weights, the one statistic that places both on one scale
#    (read as 1 − ESS), logged per iteration like the twins' own statistics.
#
# Each section gives the switch's name in TRL 1.16.0 and verl 0.9.1 (the versions of notebook 06, read from
# their PyPI wheels), quoted from the file it lives in, and ends with a catalog-style note: symptom, the
# statistic that shows it, the fix. The code being taught (the truncated weight, the corrected loss, the ESS) is
# in the cells below; `workbook/nb07_off_policy.py` only swaps functions of a fresh `grpo_fixed` copy
# (`swap.fixed_with`), runs and caches the training runs, enumerates completions and draws.

# %%
import logging
import math

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import grpo_fixed
import grpo_support
import workbook  # noqa: F401  (one torch thread)
from workbook import catalog, nb07_off_policy, plots
from workbook.plots import curves
from workbook.run_summary import final_reward, tail_mean
from workbook.widgets import choice, live_plot, probe, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # the mismatch runs fail a health check every iteration
task = grpo_fixed.AdditionTask()
tokenizer = grpo_fixed.CharTokenizer(task.alphabet)
CAP = 2.0  # truncation C of the weights: verl 0.9.1's default rollout_is_threshold (quoted in notebook 07 §1)
print(f"every training run: the SFT model on AdditionTask, {nb07_off_policy.SHORT['steps']} iterations of "
      f"{nb07_off_policy.SHORT['prompts_per_batch']} prompts x "
      f"{grpo_fixed.Config.group_size} samples; truncation C = {CAP}")

# %% [markdown]
# **At a glance.** Rollouts of the SFT model (the same prompts and seed), and for every sampled token how far the
# trainer's log-prob is from the sampler's: with bug B10 (training log-probs without the temperature, notebook 01 §11)
# up to 1.7 nats, in the fixed twin up to 1.8e-06 with a float32 sampler and 0.021 with a bfloat16 one, while the ratio
# at the first inner step is exactly 1 in all three; §1 explains the bfloat16 gap and measures the bias it puts into the
# gradient.

# %%
B10 = catalog.hybrid("B10")
sft = grpo_fixed.TinyLM.from_pretrained(task.checkpoint).eval()  # the SFT model every run starts from
glance = {"B10, float32 sampler": B10.rollout(sft, sft, tokenizer, task, B10.make_config(prompts_per_batch=16),
                                              torch.Generator().manual_seed(0))[0],
          **{f"{name} sampler": nb07_off_policy.sampler_batch(sft, name, prompts_per_batch=16)[0]
             for name in ("float32", "bfloat16")}}  # 16 prompts x 8 samples each
gaps = {label: nb07_off_policy.log_weights(batch).abs() for label, batch in glance.items()}  # (n_tokens,) |log w|
thresholds = torch.logspace(-8, 1, 181, dtype=torch.float64)  # (K,) nats
fig, axes = plots.buggy_vs_fixed("sampled tokens whose trainer and sampler log-probs differ by more than t",
                                 figsize=(9, 3.2))
axes[0].set_title("B10: grpo_buggy's policy_logprobs", color=plots.BUGGY)
axes[1].set_title("grpo_fixed's policy_logprobs", color=plots.FIXED)
colors = {"B10, float32 sampler": plots.BUGGY, "float32 sampler": plots.FIXED, "bfloat16 sampler": "tab:orange"}
for label, gap in gaps.items():
    share = (gap.double()[None, :] > thresholds[:, None]).double().mean(1)  # (K,) share of tokens above t
    axes[0 if label.startswith("B10") else 1].plot(thresholds, share, color=colors[label], label=label)
for ax in axes:
    ax.axvline(grpo_support.STATS["logprob_gap"].hi, color="0.5", ls="--", lw=1, label="logprob_gap bound")
    ax.set(xscale="log", xlabel="t: |log pi_trainer - log pi_sampler| (nats)", xlim=(1e-8, 10), ylim=(-0.03, 1.03))
axes[0].set_ylabel("share of sampled tokens")
handles = [h for ax in axes for h in ax.get_legend_handles_labels()[0]][:-1]  # the bound once
fig.legend(handles, [h.get_label() for h in handles], loc="outside lower center", ncol=4, fontsize="small")
plt.show()
first_step_gap = {}  # max |rho - 1| at the first inner step: the trainer re-scores its own cached old log-probs
for label, batch in glance.items():
    module = B10 if label.startswith("B10") else grpo_fixed
    logp = module.policy_logprobs(sft, batch["prompt_ids"], batch["prompt_mask"], batch["completions"], batch["mask"],
                                  grpo_fixed.Config.temperature)  # (N, T)
    first_step_gap[label] = (logp - batch["old_logprobs"])[batch["mask"]].exp().sub(1).abs().max().item()
    print(f"{label:21s}: largest gap {gaps[label].max().item():.2g} nats, median {gaps[label].median().item():.2g}; "
          f"max |rho - 1| at the first inner step {first_step_gap[label]:.1f}")
assert [f"{gaps[label].max().item():.2g}" for label in glance] == ["1.7", "1.8e-06", "0.021"]  # prose
assert all(value == 0 for value in first_step_gap.values())

# %% [markdown]
# ## 1. Sampler vs trainer numerics
#
# **Question.** The rollout engine returns tokens and their log-probs computed from bfloat16 logits; the
# trainer recomputes the log-probs in float32 and caches them as π_old. The first inner step sees
# ρ = π_θ/π_old = 1 exactly. Is the update on-policy?
#
# **Key equations.** With logits z and temperature T, the trainer's policy is p = softmax(z/T) and the
# sampler's is q = softmax(round(z)/T). (Our sampler rounds only the final logits; the weights and the
# rest of the forward pass stay float32. A real engine runs the whole forward pass in lower precision, with
# kernels of its own, so its mismatch has more sources than the one simulated here.) At ρ = 1 the clipped
# surrogate's gradient is the plain policy gradient, but averaged over the samples the batch actually holds:
#
# $$\underbrace{\mathbb{E}_{y\sim q}\big[A(y)\,\nabla\log p(y)\big]}_{\text{what the update estimates}}
# \;\neq\; \underbrace{\mathbb{E}_{y\sim p}\big[A(y)\,\nabla\log p(y)\big]}_{\text{the policy gradient}}
# \quad\text{unless } q = p .$$
#
# The mismatch per token is KL(q ‖ p) = E_q[log q − log p]; on the sampled tokens, with w = p(y_t)/q(y_t),
# the k3 estimator w − 1 − log w (notebook 04 §2) estimates it without bias because E_q[w] = 1. The fix
# reweights each token by the importance weight, truncated at C so that one token cannot dominate
# (truncated importance sampling, TIS):
#
# $$w_t = \min\!\Big(\frac{p(y_t)}{q(y_t)},\, C\Big),\qquad
# L = -\operatorname{mean}_t\, w_t \min\big(\rho_t A,\
# \operatorname{clip}(\rho_t, 1-\varepsilon, 1+\varepsilon) A\big).$$
#
# **The switches** (each quoted from the file of the version named; option names move between versions, so
# check yours):
#
# <table>
# <tr><th>framework, file read</th><th>switch</th><th>what it does, in its own words</th></tr>
# <tr><td>TRL 1.16.0, <code>trl/trainer/grpo_config.py</code></td>
# <td><code>vllm_importance_sampling_correction</code> (default <code>True</code>),
# <code>vllm_importance_sampling_mode</code> (default <code>"sequence_mask"</code>; also
# <code>"token_truncate"</code>, <code>"token_mask"</code>, <code>"sequence_truncate"</code>),
# <code>vllm_importance_sampling_clip_max</code> (default <code>3.0</code>) and
# <code>vllm_importance_sampling_clip_min</code> (default <code>None</code>); they replace
# <code>vllm_importance_sampling_cap</code>, deprecated since 1.6.0</td>
# <td>"Whether to apply Importance Sampling (IS) to correct for the mismatch between vLLM completion logprobs
# and recomputed training logprobs"; "For <code>*_truncate</code> modes, importance ratios are clipped from
# above at C_max. For <code>*_mask</code> modes, ratios larger than C_max are set to zero." and, under
# <code>clip_min</code>, "For <code>*_mask</code> modes, ratios below C_min are set to zero." The ratio is
# exp(old − sampling log-probs), per token or summed over the sequence (<code>grpo_trainer.py</code>). (The
# docstring still calls <code>"token_truncate"</code> the default; the field's default is
# <code>"sequence_mask"</code>.)</td></tr>
# <tr><td>verl 0.9.1, <code>verl/trainer/config/algorithm/rollout_correction.yaml</code>,
# <code>RolloutCorrectionConfig</code> in <code>verl/trainer/config/algorithm.py</code>,
# <code>verl/trainer/ppo/rollout_corr_helper.py</code></td>
# <td><code>algorithm.rollout_correction.rollout_is</code> (<code>token</code>, <code>sequence</code>, or
# <code>null</code>, the YAML's default: no weights; the dataclass <code>RolloutCorrectionConfig</code> built in Python
# defaults to <code>"sequence"</code>), <code>algorithm.rollout_correction.rollout_is_threshold</code>
# (default <code>2.0</code>); the rollout's log-probs come from
# <code>actor_rollout_ref.rollout.calculate_log_probs</code> (default <code>true</code>)</td>
# <td>"token": "Per-token IS weights (low variance, biased)"; "sequence": "Per-sequence IS weights (unbiased, high
# variance)"; the weight is exp(old_log_prob − rollout_log_prob), truncated by
# <code>.clamp(max=rollout_is_threshold_upper)</code>. (The older <code>actor.tis_imp_ratio_cap</code> no longer
# exists in 0.9.1.)</td></tr>
# </table>
#
# **Tiny input.** Five logits, scaled by s to make the policy sharper, rounded to each precision. The
# trainer's p, the sampler's q, the weight p/q per token and KL(q ‖ p), exactly:

# %%
LOGITS = torch.tensor([2.0, 1.4, 0.3, -1.1, -2.6])  # (V,) the tiny input
REWARDS = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])  # (V,) only the second token is rewarded


def exact_kl(logq, logp):
    """KL(q || p) = sum_y q(y) (log q(y) - log p(y)) for log-prob vectors (V,)."""
    return (logq.exp() * (logq - logp)).sum().item()


weights = {}  # (scale, precision) -> (V,) p/q
for scale in (1.0, 8.0):
    z = scale * LOGITS
    logp = torch.log_softmax(z, -1)
    print(f"s = {scale:g}: trainer p = " + " ".join(f"{v:.5f}" for v in logp.exp()))
    for name in ("bfloat16", "float8_e4m3fn"):
        logq = torch.log_softmax(nb07_off_policy.round_to(z, nb07_off_policy.PRECISIONS[name]), -1)
        weights[scale, name] = (logp - logq).exp()
        print(f"  {name:13s} q = " + " ".join(f"{v:.5f}" for v in logq.exp())
              + "   p/q = " + " ".join(f"{v:.4f}" for v in weights[scale, name])
              + f"   KL(q||p) = {exact_kl(logq, logp):.2e}")

# %% [markdown]
# Rounding to nearest with p significant bits moves a number by at most a fraction u = 2⁻ᵖ of itself
# (half the spacing 2^(e+1−p) of the binade [2^e, 2^(e+1)) it lies in): bfloat16 keeps p = 8 bits
# (u = 0.39%), float16 11, float8 e4m3 only 4 (u = 6.25%). The error of a logit therefore grows with the
# logit (for numbers in the format's normal range: |z| ≥ 2⁻⁶ for float8 e4m3, below that the relative
# error grows), and a sharper policy (larger logits) is sampled less faithfully: the weights p/q spread over
# 0.993 to 1.001 at s = 1 and over 0.95 to 1.01 at s = 8 with bfloat16, and float8 reaches 0.45 at
# s = 8. The bound, checked on 10,000 random logits:

# %%
x = 20 * torch.randn(10_000, generator=torch.Generator().manual_seed(0))  # logits of any size
for name, bits in (("bfloat16", 8), ("float16", 11), ("float8_e4m3fn", 4)):
    normal = x.abs() >= torch.finfo(nb07_off_policy.PRECISIONS[name]).tiny  # the bound holds for normal numbers
    worst = ((nb07_off_policy.round_to(x, nb07_off_policy.PRECISIONS[name]) - x).abs() / x.abs())[normal].max().item()
    print(f"{name:13s} p = {bits:2d}: largest relative rounding error {worst:.5f} <= u = 2^-{bits} = {2.0**-bits:.5f}"
          f"  ({int(normal.sum())} of {len(x)} logits in the normal range)")
    assert worst <= 2.0**-bits
w1, w8 = weights[1.0, "bfloat16"], weights[8.0, "bfloat16"]
assert 0.99 < w1.min() and w1.max() < 1.002 and 0.95 < w8.min() < 0.96 and 1.01 < w8.max() < 1.02
assert 0.44 < weights[8.0, "float8_e4m3fn"].min() < 0.46

# %% [markdown]
# The weights p/q are the correction. The code, and the exact expected update of the five logits (a sum
# over the vocabulary, no sampling) for a policy that is sampled from q and trained as p:

# %%
def tis_weight(logp_trainer, logp_sampler, cap):
    """w_t = min(pi_trainer(y_t) / pi_sampler(y_t), C), from log-probs; a constant (no gradient)."""
    return torch.exp(logp_trainer - logp_sampler).detach().clamp(max=cap)


def expected_update(logits, sampler_logits, rewards, weight):
    """E_{y~q}[W(y) (r(y) - b_q) grad_z log p(y)] over one categorical, exactly (a sum over V, no sampling).
    p = softmax(logits), q = softmax(sampler_logits), b_q = E_q[r] (what a group mean of q's samples
    estimates), W = weight(log p, log q). With q = p and W = 1 it is the exact policy gradient. -> (V,)"""
    z = logits.clone().requires_grad_(True)
    logp, logq = torch.log_softmax(z, -1), torch.log_softmax(sampler_logits, -1)  # (V,)
    coefficient = logq.exp() * weight(logp.detach(), logq) * (rewards - (logq.exp() * rewards).sum())  # (V,)
    (coefficient * logp).sum().backward()  # grad = sum_y coefficient_y * grad log p(y)
    return z.grad


def relative_error(g, g_true):
    return ((g - g_true).norm() / g_true.norm()).item()


def mean(values):
    values = list(values)
    return sum(values) / len(values)


NO_WEIGHT = lambda logp, logq: torch.ones_like(logp)  # noqa: E731  (the uncorrected update)
z = 8.0 * LOGITS
z_fp8 = nb07_off_policy.round_to(z, nb07_off_policy.PRECISIONS["float8_e4m3fn"])
g_true = expected_update(z, z, REWARDS, NO_WEIGHT)
g_naive = expected_update(z, z_fp8, REWARDS, NO_WEIGHT)
print("policy gradient       " + " ".join(f"{v:+.5f}" for v in g_true))
print("uncorrected, q = fp8  " + " ".join(f"{v:+.5f}" for v in g_naive)
      + f"   relative error {relative_error(g_naive, g_true):.4f}")
for cap in (1.0, CAP):
    g_tis = expected_update(z, z_fp8, REWARDS, lambda logp, logq, c=cap: tis_weight(logp, logq, c))
    print(f"TIS, C = {cap:<4g}         " + " ".join(f"{v:+.5f}" for v in g_tis)
          + f"   relative error {relative_error(g_tis, g_true):.4f}")

# %%
push = (g_naive[1] / g_true[1]).item()
g_cap1 = expected_update(z, z_fp8, REWARDS, lambda logp, logq: tis_weight(logp, logq, 1.0))
g_cap2 = expected_update(z, z_fp8, REWARDS, lambda logp, logq: tis_weight(logp, logq, CAP))
print(f"uncorrected push on the rewarded logit / the policy gradient's: {push:.3f}; "
      f"largest weight p/q {weights[8.0, 'float8_e4m3fn'].max():.4f}")
assert 0.80 < push < 0.84 and relative_error(g_cap2, g_true) < 1e-6
assert abs(relative_error(g_cap1, g_true) - relative_error(g_naive, g_true)) < 1e-3

# %% [markdown]
# The uncorrected update credits each token in proportion to how often the *sampler* draws it: the
# rewarded token, drawn with q = 0.00669 instead of p = 0.00816, gets 18% too little push (the relative
# error 0.18 above). On one token the untruncated weight p/q turns E_q back into E_p exactly, so TIS with C = 2,
# above every weight here (the largest is 1.22), removes the bias up to float rounding. C = 1 removes
# nothing: the weight that mattered is the rewarded token's 1.22, and capping it at 1 gives back the
# uncorrected update. Truncation is only harmless when C sits above the weights that carry the signal.
#
# **Slider.** The sharpness s of the policy, the sampler's precision, and C. Left: the weights p/q per
# token against C; right: the three expected updates of the five logits.

# %% tags=["nbval-ignore-output"]
SCALES = [0.5 * i for i in range(1, 17)]  # 0.5 .. 8
fig_bias, (ax_w, ax_g) = plt.subplots(1, 2, figsize=(9.0, 3.2), layout="constrained")
bars_w = ax_w.bar(range(5), [1.0] * 5, color="0.6")
cap_line = ax_w.axhline(CAP, color="tab:red", ls="--", label="C")
ax_w.axhline(1.0, color="0.3", lw=0.8)
ax_w.set(xlabel="token", ylabel="weight p/q", ylim=(0.4, 3.2), title="per-token weight")  # holds C up to 3
ax_w.legend(fontsize="small", loc="upper right")
grad_bars = {name: ax_g.bar([i + 0.27 * (j - 1) for i in range(5)], [0.0] * 5, width=0.27, label=name, color=color)
             for j, (name, color) in enumerate((("policy gradient", "0.3"), ("uncorrected", "tab:orange"),
                                                ("TIS", "tab:blue")))}
ax_g.axhline(0.0, color="0.3", lw=0.8)
ax_g.set(xlabel="token", ylabel="d/dz", title="expected update of each logit")
ax_g.legend(fontsize="small", loc="lower right")


def update_bias(scale, precision, cap):
    z = scale * LOGITS
    z_q = nb07_off_policy.round_to(z, nb07_off_policy.PRECISIONS[precision])
    logp, logq = torch.log_softmax(z, -1), torch.log_softmax(z_q, -1)
    for bar, w in zip(bars_w, (logp - logq).exp(), strict=True):
        bar.set_height(w.item())
    cap_line.set_ydata([cap, cap])
    grads = {"policy gradient": expected_update(z, z, REWARDS, NO_WEIGHT),
             "uncorrected": expected_update(z, z_q, REWARDS, NO_WEIGHT),
             "TIS": expected_update(z, z_q, REWARDS, lambda lp, lq: tis_weight(lp, lq, cap))}
    for name, g in grads.items():
        for bar, v in zip(grad_bars[name], g, strict=True):
            bar.set_height(v.item())
    top = max(g.abs().max().item() for g in grads.values())
    ax_g.set_ylim(-1.15 * top, 1.15 * top)
    return {"kl": exact_kl(logq, logp), "w_max": (logp - logq).exp().max().item(),
            "uncorrected": relative_error(grads["uncorrected"], grads["policy gradient"]),
            "tis": relative_error(grads["TIS"], grads["policy gradient"])}


w_bias = live_plot(fig_bias, update_bias, scale=choice(SCALES, 4.0, "sharpness s"),
                   precision=choice(list(nb07_off_policy.PRECISIONS), "bfloat16", "sampler"),
                   cap=slider(CAP, 1.0, 3.0, 0.1, "C"))
display(w_bias)

# %%
checks = {}
for scale, precision, cap in ((4.0, "bfloat16", CAP), (8.0, "bfloat16", CAP), (8.0, "float8_e4m3fn", CAP),
                              (8.0, "float8_e4m3fn", 1.0)):
    r = checks[scale, precision, cap] = probe(w_bias, {"sharpness s": scale, "sampler": precision, "C": cap})
    print(f"s = {scale:g}, {precision:13s}, C = {cap:g}: KL(q||p) {r['kl']:.2e}, max weight {r['w_max']:.4f}, "
          f"relative error: uncorrected {r['uncorrected']:.4f}, TIS {r['tis']:.2e}")
assert f"{checks[4.0, 'bfloat16', CAP]['uncorrected']:.3f}" == "0.005"
assert f"{checks[8.0, 'bfloat16', CAP]['uncorrected']:.3f}" == "0.012"
assert checks[8.0, "bfloat16", CAP]["kl"] < checks[4.0, "bfloat16", CAP]["kl"]  # KL not monotone in s
assert checks[8.0, "float8_e4m3fn", 1.0]["tis"] > 0.17 and checks[8.0, "float8_e4m3fn", CAP]["tis"] < 1e-6

# %% [markdown]
# With bfloat16 the uncorrected update is off by 0.5% at s = 4 and 1.2% at s = 8; with float8 at s = 8 by
# 18%, and C = 1 brings all of it back. The mismatch KL is not monotone in s: to second order it is
# ½ Var_p(δ) for the logit errors δ, and at s = 8 almost all of p's mass sits on one token, so δ barely
# varies under p while the rare tokens' weights are far from 1. Read the weights and the bias, not only the KL.

# %% [markdown]
# ### 1.1 On the twins: one rollout batch, and the exact gradient bias
#
# Now the twins' own policy (the SFT model) after the 20 iterations of the plain (float32) training run used below, and
# one rollout batch of 64 prompts × 8 samples per sampler precision through the twins' `rollout` with
# the swapped `generate`. The trainer's π_old and the sampler's log-probs are both in the batch; their
# difference is log w on every sampled token.

# %%
def mismatch_kl(log_w):
    """k3 estimate of KL(pi_sampler || pi_trainer) per token from log w = log pi_trainer - log pi_sampler
    on tokens the sampler drew: mean(w - 1 - log w), unbiased because E_sampler[w] = 1."""
    return (log_w.exp() - 1 - log_w).clamp(min=0).mean().item()  # each term >= 0; clamp float rounding


policy = nb07_off_policy.run_on_policy()["policy"]
batches = {name: nb07_off_policy.sampler_batch(policy, name) for name in nb07_off_policy.PRECISIONS}
batch = batches["float32"][0]
with torch.no_grad():
    largest = grpo_fixed.completion_logits(policy, batch["prompt_ids"], batch["prompt_mask"], batch["completions"],
                                           batch["mask"]).abs().max().item()
LOGPROB_CHECK = "training log-probs match the sampler"  # the twins' check on stats["logprob_gap"]
print(f"largest |logit| of the trained policy on this batch: {largest:.2f}; the check's healthy range for "
      f"logprob_gap: <= {grpo_support.STATS['logprob_gap'].hi:g}")
print(f"{'sampler':13s} | {'KL(q||p)/token':>14} {'max |log w|':>11} {'w range':>15} | logprob_gap  health check")
twin_mismatch = {}
for name, (batch, stats) in batches.items():
    log_w = nb07_off_policy.log_weights(batch)
    fires = not grpo_fixed.HEALTH_CHECKS[LOGPROB_CHECK](stats, None)
    twin_mismatch[name] = dict(kl=mismatch_kl(log_w), max_abs=log_w.abs().max().item(), fires=fires)
    print(f"{name:13s} | {mismatch_kl(log_w):14.2e} {log_w.abs().max():11.4f} "
          f"{log_w.exp().min():7.4f}-{log_w.exp().max():.4f} | {stats['logprob_gap']:.2e}    "
          f"{'fires' if fires else 'quiet'}")
m = twin_mismatch
assert 8 < largest < 9 and 1e-5 < m["bfloat16"]["kl"] < 2e-5 and 0.02 < m["bfloat16"]["max_abs"] < 0.03
assert f"{m['float32']['kl']:.2e}" == "5.13e-09"  # quoted in this section's catalog note
assert m["float8_e4m3fn"]["kl"] > 100 * m["bfloat16"]["kl"] and m["bfloat16"]["kl"] > 30 * m["float16"]["kl"]
assert [m[name]["fires"] for name in nb07_off_policy.PRECISIONS] == [False, True, True, True]

# %% [markdown]
# The bfloat16 sampler differs from the trainer by about 10⁻⁵ nats per token on average, with single
# tokens off by up to 2.5% in probability; float16 is more than 30 times closer, float8 more than 100 times
# further. The twins' own health check "training log-probs match the sampler" (its `logprob_gap` bound,
# written for bugs like B10) fires on every lower-precision sampler. That is the right alarm for a trainer
# that samples itself; a trainer with a separate inference engine replaces the bound by a budget for the
# mismatch it accepts, and logs the mismatch KL beside it (notebook 07 §3 adds it as a statistic).
#
# **The gradient bias, exactly.** The sampler draws each token from all 15 ids (the 12 characters of
# "0123456789+=" and PAD, BOS, EOS), so a completion (read up to its first EOS: what `generate` samples after
# it is masked out of the loss and the reward) is a first EOS after l = 0 … T−1 tokens from the 14 others, or
# T tokens without EOS. How many distinct completions that is, for the task's T = 5 and for
# T = 3 (enough for every answer: "98" and EOS):

# %%
full, short = (nb07_off_policy.completion_count(tokenizer.vocab_size, T)
               for T in (task.max_completion_length, nb07_off_policy.EXACT_TOKENS))
tree = nb07_off_policy.completion_tree(tokenizer, nb07_off_policy.EXACT_TOKENS)
print(f"distinct completions per prompt: T = {task.max_completion_length}: {full:,}; "
      f"T = {nb07_off_policy.EXACT_TOKENS}: {short:,} (enumerated: {tree['completions'].shape[0]:,})")
assert full == 579_195 and short == tree["completions"].shape[0] == 2_955

# %% [markdown]
# 579,195 completions per prompt (and 38,416 distinct 4-token prefixes to score) is too many for this
# notebook, so the exact computation caps generation at T = 3 tokens: 2,955 completions per prompt, every
# answer still reachable. `nb07_off_policy.exact_gradients` computes the expected update over every
# (prompt, completion) pair with its exact probability, for 4 prompts, for the policy gradient and for
# updates from the rounded sampler with each weighting below (no sampling noise at all). The
# sequence-level weight is the product of the token weights, Π_t p(y_t)/q(y_t) = p(y)/q(y).

# %%
WEIGHTINGS = {
    "uncorrected": NO_WEIGHT,
    f"token TIS C={CAP:g}": lambda logp, logq: tis_weight(logp, logq, CAP),
    "token IS (no cap)": lambda logp, logq: tis_weight(logp, logq, math.inf),
    "sequence IS (no cap)": lambda logp, logq: tis_weight(logp.sum(-1, keepdim=True), logq.sum(-1, keepdim=True),
                                                          math.inf).expand_as(logp),
}
EXACT_PROMPTS = task.prompts(4, torch.Generator().manual_seed(0))
print(f"relative error |g - g_true| / |g_true| of the expected update on {EXACT_PROMPTS}, "
      f"policy after {nb07_off_policy.SHORT['steps']} iterations")
print(f"{'sampler':13s} | " + " ".join(f"{name:>20s}" for name in WEIGHTINGS))
bias = {}
for name in ("bfloat16", "float16", "float8_e4m3fn"):
    grads = nb07_off_policy.exact_gradients(policy, task, tokenizer, EXACT_PROMPTS, nb07_off_policy.PRECISIONS[name],
                                            grpo_fixed.Config.temperature, WEIGHTINGS)
    bias[name] = {w: relative_error(grads[w], grads["true"]) for w in WEIGHTINGS}
    print(f"{name:13s} | " + " ".join(f"{bias[name][w]:20.2e}" for w in WEIGHTINGS))
token_share = {name: b[f"token TIS C={CAP:g}"] / b["uncorrected"] for name, b in bias.items()}
print("token-level bias left, as a fraction of the uncorrected: "
      + ", ".join(f"{name} {share:.2f}" for name, share in token_share.items()))
assert f"{bias['bfloat16']['uncorrected']:.1%}" == "0.6%" and f"{bias['float8_e4m3fn']['uncorrected']:.1%}" == "10.9%"
assert all(0.25 < share < 0.7 for share in token_share.values())
assert [f"{share:.2f}" for share in token_share.values()] == ["0.67", "0.27", "0.44"]  # prose
assert f"{max(b['sequence IS (no cap)'] for b in bias.values()):.2e}" == "2.01e-07"  # as quoted (self-check 4)
assert all(b[f"token TIS C={CAP:g}"] == b["token IS (no cap)"] and b["sequence IS (no cap)"] < 1e-6
           for b in bias.values())

# %% [markdown]
# On the trained policy the uncorrected update is off by 0.6% of its length with a bfloat16 sampler
# and by 10.9% with float8. Token-level weights leave 0.27 to 0.67 of it (they remove a third to nearly three
# quarters) for this trained policy on this machine: the shares are not stable (the float16 sampler's moved from
# 0.45 to 0.27 when the notebook was re-run on another CPU, its uncorrected bias being tiny), and no more:
# the sequence's advantage is credited to every token, but each token is reweighted only for its own
# draw, not for the draws of the prefix it continues or of the suffix that decides the reward. The
# sequence-level weight p(y)/q(y) removes the bias completely (it is the exact importance weight, and
# the table shows float rounding) at the price of a variance that grows with the length (notebook 07 §3).
# C = 2 never binds here: no token of any enumerated completion has a weight of 2, so the capped and
# uncapped token columns are equal.
# Both frameworks offer both levels (TRL's `token_*` / `sequence_*` modes, verl's `rollout_is: token |
# sequence`). Unlike the sampling noise of a batch, the bias sits in the expected update, so more samples or
# more steps do not average it away: it points the same way as long as the same tokens are rounded the same way.
#
# **Training comparison.** 20 iterations per sampler, seed 0, and TIS (C = 2) on the float8 sampler; the
# float32 run is the plain twin. Seed 1 of the float32 run gives the seed-to-seed spread (two seeds).

# %%
def tis_grpo_loss(logprobs, old_logprobs, sampler_logprobs, advantages, mask, clip, cap):
    """Clipped surrogate with truncated IS from the sampler to the trainer's pi_old (decoupled):
    L = -mean_t w_t min(rho_t A, clip(rho_t, 1-eps, 1+eps) A),  rho_t = pi_theta / pi_old,
    w_t = min(pi_old(y_t) / pi_sampler(y_t), C).  logprobs, old, sampler, mask (N, T); advantages (N,)."""
    w = tis_weight(old_logprobs, sampler_logprobs, cap)  # (N, T)
    ratio = torch.exp(logprobs - old_logprobs.detach())  # (N, T)
    adv = advantages.detach()[:, None]  # (N, 1)
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)  # (N, T)
    return -grpo_fixed.masked_mean(w * surrogate, mask)


# the same batch through both losses: equal when the sampler is the trainer (w = 1)
batch = batches["float32"][0]
args = (batch["old_logprobs"] + 0.1, batch["old_logprobs"], batch["sampler_logprobs"], batch["advantages"],
        batch["mask"], 0.2)
tis_value, plain_value = tis_grpo_loss(*args, CAP).item(), grpo_fixed.grpo_loss(*args[:2], *args[3:]).item()
print(f"float32 sampler: tis_grpo_loss {tis_value:.6f}, grpo_loss {plain_value:.6f}")
assert abs(tis_value - plain_value) < 1e-7

# %%
mismatch_runs = {"float32": nb07_off_policy.run_on_policy(),  # the plain twin, reused as k = 0 in notebook 07 §2
                 "bfloat16": nb07_off_policy.run_mismatch("bfloat16"),
                 "float8": nb07_off_policy.run_mismatch("float8_e4m3fn"),
                 "float8 + TIS": nb07_off_policy.run_mismatch("float8_e4m3fn", tis_grpo_loss, CAP)}
spread = [final_reward(mismatch_runs["float32"]["history"]),  # seed 0, and seed 1:
          final_reward(nb07_off_policy.run_mismatch("float32", seed=1)["history"])]
for label, run in mismatch_runs.items():
    kl = [mismatch_kl(lw) for lw in run["log_w"]]
    fails = sum(LOGPROB_CHECK in s["health"] for s in run["history"])
    print(f"{label:13s} final reward {final_reward(run['history']):.3f}   mismatch KL/token {sum(kl) / len(kl):.2e}   "
          f"ratio at first step max |rho - 1| {max(s['ratio_first_maxdev'] for s in run['history']):.1e}   "
          f"logprob check failed {fails}/{len(run['history'])}")
print("float32, seeds 0 1: final reward " + " ".join(f"{x:.3f}" for x in spread))
h = {label: run["history"] for label, run in mismatch_runs.items()}
assert all(s["ratio_first_maxdev"] == 0.0 for run in h.values() for s in run)
steps = nb07_off_policy.SHORT["steps"]
assert [sum(LOGPROB_CHECK in s["health"] for s in run) for run in h.values()] == [0, steps, steps, steps]
deviation = max(abs(final_reward(history) - final_reward(h["float32"])) for history in h.values())
print(f"largest |final reward - float32's|: {deviation:.3f}; float32 seed spread {max(spread) - min(spread):.3f}")
assert f"{deviation:.3f}" == "0.016" and f"{max(spread) - min(spread):.3f}" == "0.080"
assert deviation < (max(spread) - min(spread)) / 3
bf16_kl = [mismatch_kl(lw) for lw in mismatch_runs["bfloat16"]["log_w"]]
print(f"bfloat16 mismatch KL per token: iteration 0 {bf16_kl[0]:.1e}, mean of the last 10 {tail_mean(bf16_kl):.1e}")
assert f"{bf16_kl[0]:.1e}" == "1.6e-05" and f"{tail_mean(bf16_kl):.1e}" == "1.5e-05"

fig, (ax_r, ax_kl) = nb07_off_policy.new_figure()
curves(ax_r, h, "reward", window=3, ylabel="reward (3-iteration mean)")
for label, run in mismatch_runs.items():
    if label != "float32":
        ax_kl.plot([mismatch_kl(lw) for lw in run["log_w"]], label=label)
ax_kl.set(yscale="log", xlabel="iteration", ylabel="mismatch KL per token")
ax_kl.legend(fontsize="small")
plt.show()

# %% [markdown]
# The first inner step's ratio is exactly 1 in every run (max |ρ − 1| = 0), so the twins' check "ratio
# == 1 at the first inner step" cannot see any of this; the sampler check fails in all 20 iterations of
# every lower-precision run. On this toy the mismatch does not change the outcome: the final rewards
# differ from the float32 run's by at most 0.016, less than a third of the spread between two float32
# seeds (0.080), and TIS on the float8 sampler does not change that. The bias is a tenth of the update at
# most (the table above), and AdditionTask's completions of at most 5 tokens (answers of 1 or 2 digits)
# give it little room to compound. The mismatch does not grow here: the SFT model is already sharp, and
# bfloat16's KL per token is 1.6e-05 at the first iteration and 1.5e-05 over the last 10 (right figure).
# The collapses reported for this
# mismatch (verl 0.9.1's `RolloutCorrectionConfig` docstring cites Liu, Li et al. 2025, "When Speed Kills
# Stability: Demystifying RL Collapse from the Training-Inference Mismatch", whose summary points at
# low-probability tokens, where the mismatch is most severe) involve large models and long agentic completions,
# where rare tokens get weights far from 1; a toy with 15 tokens and
# completions of at most 5 cannot reach that regime, so here we measure the mismatch rather than show a
# collapse.
#
# > **You should know.**
# > - ρ = 1 at the first step only means the trainer agrees with itself. The samples came from the
# >   sampler's q; the update estimates E_q[A ∇log p], not the policy gradient.
# > - Measure the gap on the sampled tokens: log w = log p − log q, its k3 mean (KL per token), its
# >   extremes. bfloat16 here: about 10⁻⁵ nats per token and single tokens 2.5% off; the weights spread
# >   further as the logits grow (a sharper policy).
# > - TIS multiplies each token's loss by min(p/q, C). Token-level weights are biased for sequence
# >   rewards (they left 0.27 to 0.67 of the bias above); sequence-level weights are unbiased,
# >   with a variance that grows with the length. C trades the remaining bias against variance, and a
# >   C below the weights that carry the signal undoes the correction.
#
# **Catalog note.** *Symptom:* training drifts or collapses only with the fast inference engine, or after changing its
# precision, while the ratio at the first step is exactly 1. *Statistic:* KL(π_sampler ‖ π_trainer) per token (k3 of log
# w) and max |log w| on the sampled tokens (the twins' `logprob_gap`). *Fix:* correct with importance weights: the
# token-level truncated weights above are TRL 1.16.0's `vllm_importance_sampling_mode="token_truncate"` with
# `vllm_importance_sampling_clip_max` (TRL's default mode, `"sequence_mask"`, keeps the raw sequence weight and zeroes
# it above the bound, and below `vllm_importance_sampling_clip_min` when that is set; the correction runs only with
# `use_vllm=True`), and verl 0.9.1's
# `algorithm.rollout_correction.rollout_is` with `rollout_is_threshold`; and reduce the mismatch at the source, on both
# sides: TRL 1.16.0's `cast_lm_head_to_fp32` (same `grpo_config.py`: "Whether to cast the language modeling head of the
# policy and reference models to float32") casts the trainer's head only; the vLLM sampler's precision is set on the
# sampler's side. In this notebook's sampler, which rounds only the logits, that leaves only float32 rounding (the
# float32 sampler's row: 5.13e-09 nats per token).

# %% [markdown]
# ## 2. Stale rollouts
#
# **Question.** An asynchronous rollout worker generates with weights that are k updates behind the
# trainer. The batch carries the worker's log-probs. Which policy is π_old in the ratio: the stale one
# that sampled (the behaviour policy μ), or the current one?
#
# **Key equations.** Three choices, each one line of the loss:
#
# | anchor | ratio ρ_t | extra weight | |
# |---|---|---|---|
# | behaviour | π_θ / μ | none | the clip window is centred on a policy k updates old |
# | current | π_θ / π_cur | none | window centred where the trainer is; the data's distribution μ is ignored |
# | current + TIS | π_θ / π_cur | min(π_cur / μ, C) | decoupled PPO: window on π_cur, data reweighted from μ |
#
# Here π_cur is the current policy before this batch's update (recomputed by the trainer: ρ = 1 at the
# first inner step), and one "update" is one iteration of the twins (one `update_policy` call, 4 optimizer
# steps with the default 2 epochs × 2 minibatches). The runner keeps copies of the last k + 1 policies
# and samples from the oldest.
#
# **The switches.**
#
# <table>
# <tr><th>framework, file read</th><th>switch</th><th>what it does, in its own words</th></tr>
# <tr><td>verl 0.9.1, the fully async recipe:
# <code>verl/experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml</code></td>
# <td><code>async_training.staleness_threshold</code> (0.1 there),
# <code>async_training.trigger_parameter_sync_step</code> (4 there),
# <code>actor_rollout_ref.actor.use_rollout_log_probs: True</code>,
# <code>algorithm.rollout_correction.bypass_mode: True</code></td>
# <td>staleness_threshold: "Maximum samples staleness threshold": the rollouter produces up to
# required_samples × (staleness_threshold + 1) × trigger_parameter_sync_step samples per weight sync
# (<code>fully_async_rollouter.py</code>); use_rollout_log_probs: "Must use rollout log probs for training"; so
# the recipe's π_old is the sampler's: our behaviour anchor</td></tr>
# <tr><td>verl 0.9.1, <code>RolloutCorrectionConfig</code> in <code>verl/trainer/config/algorithm.py</code></td>
# <td><code>algorithm.rollout_correction.bypass_mode</code> (default <code>false</code> in
# <code>rollout_correction.yaml</code>)</td>
# <td>true: "Bypass mode - reuse rollout_log_prob as old_log_prob (2 policies)" (the behaviour anchor); false:
# "Decoupled mode - compute old_log_prob separately (3 policies) Uses standard PPO loss with IS weight
# correction" (current + TIS, when π_old is recomputed with the trainer's current weights; the fully async
# trainer recomputes it with the "first version model params", those of the last weight sync:
# <code>_compute_old_log_prob</code> in <code>fully_async_trainer.py</code>)</td></tr>
# <tr><td>TRL 1.16.0, <code>trl/trainer/grpo_config.py</code></td>
# <td><code>steps_per_generation</code>, <code>num_iterations</code></td>
# <td><code>num_iterations</code>: "Number of iterations per batch (denoted as μ in the algorithm)" (their μ
# is a count, not our behaviour policy);
# <code>steps_per_generation</code>: "Number of steps per generation": one generation batch feeds several
# optimizer steps, so the later ones train on samples from an older policy (π_old is then the trainer's
# log-probs of the generating policy, computed at generation time)</td></tr>
# <tr><td>TRL 1.16.0, <code>trl/experimental/async_grpo/async_grpo_config.py</code></td>
# <td><code>AsyncGRPOConfig.max_staleness</code> (default <code>4</code>)</td>
# <td>"Maximum number of weight update steps a rollout sample can lag behind the current model version before
# being discarded"; its loss takes the ratio against the generator's "sampled logprobs"
# (<code>old_log_probs</code>, <code>async_grpo_trainer.py</code>): the behaviour anchor</td></tr>
# </table>
#
# **Tiny input.** One token with A = +1 whose probability the current policy has already raised to 1.3 ×
# the behaviour policy's, and one with A = −1 lowered to 0.7 ×. The twins' `grpo_loss` (ε = 0.2) and its
# gradient at the first inner step, θ = current policy:

# %%
def first_step(old_logprob, logprob, adv, sampler_logprob=None):
    """Loss and d loss / d log pi_theta of one token at the first inner step (pi_theta = current policy).
    With sampler_logprob, the TIS loss of notebook 07 §1; otherwise the twins' grpo_loss."""
    logp = torch.tensor([[logprob]], requires_grad=True)  # (1, 1)
    old, mask, a = torch.tensor([[old_logprob]]), torch.ones(1, 1, dtype=torch.bool), torch.tensor([adv])
    if sampler_logprob is None:
        loss = grpo_fixed.grpo_loss(logp, old, a, mask, 0.2)
    else:
        loss = tis_grpo_loss(logp, old, torch.tensor([[sampler_logprob]]), a, mask, 0.2, CAP)
    loss.backward()
    return loss.item(), logp.grad.item()


for adv, factor in ((+1.0, 1.3), (-1.0, 0.7)):
    log_mu, log_cur = math.log(0.2), math.log(0.2 * factor)  # behaviour 0.2, current 0.2 * factor
    rows = {"behaviour": first_step(log_mu, log_cur, adv), "current": first_step(log_cur, log_cur, adv),
            "current + TIS": first_step(log_cur, log_cur, adv, sampler_logprob=log_mu)}
    print(f"A = {adv:+.0f}, pi_cur / mu = {factor}: " + "   ".join(
        f"{name}: rho {math.exp(log_cur - (log_mu if name == 'behaviour' else log_cur)):.2f}, "
        f"dL/dlogp {grad:+.3f}" for name, (_, grad) in rows.items()))
    grads = [grad for _, grad in rows.values()]
    assert grads[0] == 0.0 and abs(grads[1] + adv) < 1e-6 and abs(grads[2] + adv * factor) < 1e-6

# %% [markdown]
# Anchored at the behaviour policy, both tokens start *outside* the clip window (ρ = 1.3 > 1.2 for the
# good token, 0.7 < 0.8 for the bad one), so both get zero gradient before the first step is taken: the
# trust region was spent by the k updates the data missed, and the batch teaches nothing about these
# tokens. Anchored at the current policy, ρ = 1 and the gradient is −A; TIS scales it by the weight
# π_cur/μ (1.3 and 0.7): the data holds too few samples of a token the policy now likes more, too many
# of one it now likes less.
#
# **Training comparison.** k = 0, 2, 4 for each anchor. At k = 0 the three coincide (μ = π_cur and every
# weight is 1), so one run serves all three, and it is the float32 run of notebook 07 §1: the runner at
# k = 0 is the plain twin (`tests/test_nb07_off_policy.py` checks that its rewards are `grpo_fixed.train`'s).

# %%
K_VALUES = (0, 2, 4)


def stale_run(k, anchor):
    """The cached run for (k, anchor); at k = 0 all anchors are the on-policy twin (the float32 run of §1)."""
    if k == 0:
        return nb07_off_policy.run_on_policy()
    return nb07_off_policy.run_stale(k, anchor, tis_grpo_loss if anchor == "current + TIS" else None, CAP)


def current_final(run):
    """Final reward of the CURRENT policy (the one being trained): mean over the last 10 iterations of its own
    reward on the batch's prompts (run["current_reward"]). The batch reward (history) is the behaviour
    policy's, k updates old."""
    return tail_mean(run["current_reward"])


def clip_fraction(run):
    """Mean over iterations of (clip_frac_pos + clip_frac_neg) / 2: the unweighted average of the two logged
    per-sign fractions (A > 0 tokens with ratio > 1 + clip among the A > 0 tokens, A < 0 tokens with ratio
    < 1 - clip among the A < 0 tokens, each over all inner steps), not the clipped share of all tokens."""
    h = run["history"]
    return sum((s["clip_frac_pos"] + s["clip_frac_neg"]) / 2 for s in h) / len(h)


stale_runs = {(k, anchor): stale_run(k, anchor) for k in K_VALUES for anchor in nb07_off_policy.ANCHORS}
print(f"{'k':>2} | " + " | ".join(f"{a:^30s}" for a in nb07_off_policy.ANCHORS))
print(f"{'':>2} | " + " | ".join(f"{'reward':>8} {'clipped':>8} {'|rho-1| 1st':>12}" for _ in nb07_off_policy.ANCHORS))
print("   (reward: the current policy's own, mean of the last 10 iterations; clipped: the mean of the per-sign clip\n"
      "    fractions, (clip_frac_pos + clip_frac_neg) / 2, averaged over iterations)")
for k in K_VALUES:
    cells = []
    for anchor in nb07_off_policy.ANCHORS:
        run = stale_runs[k, anchor]
        first = sum(s["ratio_first_maxdev"] for s in run["history"]) / len(run["history"])
        cells.append(f"{current_final(run):8.3f} {clip_fraction(run):8.3f} {first:12.3f}")
    print(f"{k:2d} | " + " | ".join(cells))

# %% [markdown]
# **Slider.** Staleness k; the reward and the mean of the per-sign clip fractions of the three anchors at that k
# (all runs are computed above; moving the slider only redraws).

# %% tags=["nbval-ignore-output"]
ANCHOR_COLORS = {"behaviour": "tab:red", "current": "tab:blue", "current + TIS": "tab:green"}
fig_stale, (ax_sr, ax_sc) = plt.subplots(1, 2, figsize=(9.0, 3.2), layout="constrained")
stale_lines = {}
for anchor, color in ANCHOR_COLORS.items():
    (stale_lines["reward", anchor],) = ax_sr.plot([], [], color=color, label=anchor)
    (stale_lines["clip", anchor],) = ax_sc.plot([], [], color=color, label=anchor)
ax_sr.set(xlim=(0, nb07_off_policy.SHORT["steps"] - 1), ylim=(0.0, 1.0), xlabel="iteration",
          ylabel="reward of the current policy")
ax_sc.set(xlim=(0, nb07_off_policy.SHORT["steps"] - 1), ylim=(0.0, 0.6), xlabel="iteration",
          ylabel="mean of the per-sign clip fractions")
ax_sr.legend(fontsize="small", loc="upper left")
title_stale = fig_stale.suptitle("")


def update_stale(k):
    for anchor in nb07_off_policy.ANCHORS:
        h = stale_runs[k, anchor]["history"]
        stale_lines["reward", anchor].set_data(range(len(h)), stale_runs[k, anchor]["current_reward"])
        stale_lines["clip", anchor].set_data(range(len(h)), [(s["clip_frac_pos"] + s["clip_frac_neg"]) / 2
                                                              for s in h])
    title_stale.set_text(f"rollouts from the policy {k} iteration(s) old")
    return {anchor: (current_final(stale_runs[k, anchor]), clip_fraction(stale_runs[k, anchor]))
            for anchor in nb07_off_policy.ANCHORS}


w_stale = live_plot(fig_stale, update_stale, k=choice(K_VALUES, 2, "staleness k"))
display(w_stale)

# %%
for k in (2, 4):
    r = probe(w_stale, {"staleness k": k})
    print(f"k = {k}: " + "   ".join(f"{a}: reward {rw:.3f}, per-sign clip mean {cf:.3f}" for a, (rw, cf) in r.items()))

# %%
final = {(k, a): current_final(run) for (k, a), run in stale_runs.items()}
clipped = {(k, a): clip_fraction(run) for (k, a), run in stale_runs.items()}
first_dev = {k: mean(s["ratio_first_maxdev"] for s in stale_runs[k, "behaviour"]["history"]) for k in K_VALUES}
fmt = lambda values: [f"{v:.3f}" for v in values]  # noqa: E731
assert fmt(final[k, "behaviour"] for k in K_VALUES) == ["0.423", "0.441", "0.367"]
assert fmt(clipped[k, "behaviour"] for k in K_VALUES) == ["0.044", "0.116", "0.155"]
assert fmt(final[k, "current"] for k in K_VALUES[1:]) == ["0.447", "0.434"]
assert 1.43 < first_dev[2] < first_dev[4] < 2.36
assert all(abs(clipped[k, a] - clipped[0, a]) < 0.02 for k in K_VALUES[1:] for a in ("current", "current + TIS"))
assert all(abs(final[k, "current"] - final[0, "current"]) < 0.06 for k in K_VALUES[1:])
# k = 0 is the float32 run of notebook 07 §1, computed once (its rewards are the plain twin's: tested)
assert all(stale_runs[0, a] is mismatch_runs["float32"] for a in nb07_off_policy.ANCHORS)
tis_gap = max(abs(final[k, "current + TIS"] - final[k, "current"]) for k in K_VALUES[1:])
seed_spread = max(spread) - min(spread)
assert tis_gap < seed_spread
print(f"largest |current + TIS - current| over k = 2, 4: {tis_gap:.3f}; float32 seed spread (notebook 07 §1): "
      f"{seed_spread:.3f}")
assert f"{tis_gap:.3f}" == "0.017" and f"{seed_spread:.3f}" == "0.080"
drop_k4 = final[0, "behaviour"] - final[4, "behaviour"]
print(f"current policy's final reward, k = 0 minus k = 4 (behaviour anchor): {drop_k4:.3f}")
assert f"{drop_k4:.3f}" == "0.056" and drop_k4 < seed_spread  # the k = 4 drop is within seed noise

# %% [markdown]
# The reward column is the *current* policy's own (sampled from it on the batch's prompts, mean of the last 10
# iterations), not the batch's: a stale batch's reward is the behaviour policy's, k updates old. Read the behaviour
# column first. At the first inner step the ratio is already 1.44 (k = 2) to 2.35 (k = 4) away from 1 on its worst token
# (mean over iterations), and the mean of the per-sign clip fractions, (clip_frac_pos + clip_frac_neg) / 2, climbs from
# 0.044 (k = 0) to 0.116 and 0.155. Every token the two logged per-sign fractions count has zero gradient
# (notebook 04 §1), and with the window centred on a stale policy many tokens are clipped *because the current policy
# has already moved*, not because this batch pushed them. The current policy's final reward is 0.423, 0.441 and 0.367
# for k = 0, 2, 4: in 20 short iterations from the SFT model only k = 4 is lower, by 0.056, less than the spread between
# float32 seeds (0.080), so one seed shows the cost in the clip budget, not yet in the reward. Anchored at the current
# policy, the mean of the per-sign clip fractions stays at the on-policy level (within 0.02 of 0.044 for every k) and
# the final reward within 0.06 of the on-policy run's (0.447 and 0.434 against 0.423). The importance weight from μ to
# π_cur did not change the outcome measurably: the largest difference between "current" and "current + TIS" (0.017) is
# smaller than the float32 seed spread of notebook 07 §1 (0.080). How far from 1 those weights are is measured in
# notebook 07 §3.
#
# > **You should know.**
# > - A stale batch has three policies: the sampler μ (k updates old), the current π_cur (the trainer,
# >   before this batch), and π_θ (being updated). The clip belongs to π_cur: it limits how far *this
# >   update* moves. Anchoring it at μ (verl 0.9.1's bypass mode, which its fully async recipe turns on;
# >   TRL 1.16.0's experimental async GRPO; any trainer that trusts the sampler's log-probs as π_old) spends
# >   the trust region on the k updates the data missed.
# > - Recomputing π_old with the trainer makes ρ = 1 at the first step again; then the data's
# >   distribution is corrected separately by min(π_cur/μ, C) (decoupled PPO).
# > - Measure staleness by its effect, not its count: the first-step |ρ − 1| under the behaviour anchor,
# >   the clip fraction, and the effective sample size of π_cur/μ (notebook 07 §3).
#
# **Catalog note.** *Symptom:* turning on asynchronous rollouts (or more steps per generation) makes
# learning slower while the clip fraction rises. *Statistic:* the clip fraction against its on-policy
# value, max |ρ − 1| at the first inner step with π_old = the sampler's log-probs, the ESS of
# π_trainer/π_sampler. *Fix:* anchor the clip at the current policy (recompute π_old with the trainer: verl
# 0.9.1 `algorithm.rollout_correction.bypass_mode: false`, which its fully async recipe sets to true), correct
# with truncated IS from the sampler (verl `algorithm.rollout_correction.rollout_is`), and bound the staleness
# (verl `async_training.staleness_threshold`, TRL 1.16.0's experimental `AsyncGRPOConfig.max_staleness`).

# %% [markdown]
# ## 3. Effective sample size
#
# **Question.** One number that says how far a batch's data is from the policy being trained, for both
# sources above, and can be logged every iteration.
#
# **Key equation.** For importance weights w_1..w_n, the effective sample size as a fraction of n:
#
# $$\mathrm{ESS} = \frac{(\sum_i w_i)^2}{n \sum_i w_i^2} = \frac{1}{1 + \mathrm{CV}^2(w)} \in [1/n,\ 1],$$
#
# with CV = std/mean (population std), because (Σw/n)² = mean² and Σw²/n = mean² + var. ESS = 1 when
# all weights are equal (on-policy), 1/n when one weight carries everything; an estimate weighted by w is
# about as noisy as an unweighted one from ESS·n samples.
#
# **Tiny input.** Ten weights:

# %%
def ess(weights):
    """(sum w)^2 / (n sum w^2): the effective sample size of the weights as a fraction of n, in [1/n, 1]."""
    return min((weights.sum() ** 2 / (weights.numel() * (weights**2).sum())).item(), 1.0)  # <= 1 (Cauchy-Schwarz)


w_equal, w_one_big, w_one_only = torch.ones(10), torch.tensor([10.0] + [1.0] * 9), torch.tensor([1.0] + [0.0] * 9)
cv2 = (w_one_big.var(unbiased=False) / w_one_big.mean() ** 2).item()
print(f"equal: {ess(w_equal):.4f}   one weight 10 among nine 1s: {ess(w_one_big):.4f} (1 / (1 + CV^2) = "
      f"{1 / (1 + cv2):.4f})   one nonzero: {ess(w_one_only):.4f}")
assert ess(w_equal) == 1.0 and abs(ess(w_one_only) - 0.1) < 1e-7 and abs(ess(w_one_big) - 1 / (1 + cv2)) < 1e-6

# %% [markdown]
# **What it measures, in expectation.** With y ∼ q and w = p/q, E_q[w] = 1 and E_q[w²] = Σ p²/q =
# 1 + χ²(p ‖ q), so for many samples ESS → 1/(1 + χ²(p ‖ q)). For small mismatches χ² ≈ 2·KL, so
# 1 − ESS ≈ 2·KL: the ESS sees a 10⁻⁶ mismatch only in its sixth decimal. A log-normal model makes
# the tail visible: if log w ∼ N(−σ²/2, σ²) then E[w] = 1 and E[w²] = e^{σ²}, so ESS → e^{−σ²}; truncating
# at C raises it (less variance) and biases the weighted mean (below 1). A sequence weight is the product
# of its T token weights; with independent tokens its log is normal with variance Tσ², so its ESS tends to
# e^{−Tσ²}: the variance price of the unbiased sequence-level correction. On 100,000 samples:

# %%
def lognormal_weights(sigma, n=100_000, seed=0):
    """w = exp(x), x ~ N(-sigma^2 / 2, sigma^2): E[w] = 1, E[w^2] = exp(sigma^2). (n,)"""
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.exp(sigma * x - sigma**2 / 2)


print(f"{'sigma':>5} | {'ESS':>6} {'exp(-s^2)':>9} | {'ESS, C=2':>8} {'mean w, C=2':>11}")
for sigma in (0.1, 0.5, 1.0, 1.5):
    w = lognormal_weights(sigma)
    print(f"{sigma:5.1f} | {ess(w):6.4f} {math.exp(-sigma**2):9.4f} | {ess(w.clamp(max=CAP)):8.4f} "
          f"{w.clamp(max=CAP).mean():11.4f}")
    assert abs(ess(w) - math.exp(-sigma**2)) < 0.02 and ess(w.clamp(max=CAP)) >= ess(w)
    if sigma == 1.0:
        assert (f"{ess(w):.2f}", f"{ess(w.clamp(max=CAP)):.2f}") == ("0.37", "0.63")  # quoted in notebook 07 §3
tokens = torch.stack([lognormal_weights(0.5, seed=seed) for seed in range(4)])  # (4, n): 4 tokens per sequence
sequence_ess, token_ess = ess(tokens.prod(0)), ess(tokens.flatten())
print(f"sigma 0.5, 4 tokens: token-level ESS {token_ess:.4f} (exp(-0.25) = {math.exp(-0.25):.4f}), "
      f"sequence-level ESS {sequence_ess:.4f} (exp(-4 * 0.25) = {math.exp(-1):.4f})")
assert abs(sequence_ess - math.exp(-1)) < 0.02 and sequence_ess < 0.5 * token_ess

# %% [markdown]
# **Slider.** σ and C: the ESS of the raw weights follows e^{−σ²}; the truncated weights keep a larger
# ESS and pay for it with a mean below 1 (the bias of truncation).

# %% tags=["nbval-ignore-output"]
SIGMAS = [0.05 * i for i in range(1, 41)]  # 0.05 .. 2.0
GRID_WEIGHTS = {sigma: lognormal_weights(sigma, n=20_000) for sigma in SIGMAS}  # drawn once, reused by every redraw
RAW_ESS = [ess(w) for w in GRID_WEIGHTS.values()]
fig_ess, (ax_e, ax_m) = plt.subplots(1, 2, figsize=(9.0, 3.2), layout="constrained")
ax_e.plot(SIGMAS, [math.exp(-s**2) for s in SIGMAS], color="0.3", ls=":", label="exp(-sigma^2)")
ax_e.plot(SIGMAS, RAW_ESS, color="tab:orange", label="raw weights")
(ess_trunc_line,) = ax_e.plot(SIGMAS, RAW_ESS, color="tab:blue", label="truncated at C")
ess_marker = ax_e.axvline(1.0, color="0.5", lw=0.8)
ax_e.set(xlabel="sigma of log w", ylabel="ESS / n", ylim=(0.0, 1.02))
ax_e.legend(fontsize="small")
(mean_trunc_line,) = ax_m.plot(SIGMAS, [1.0] * len(SIGMAS), color="tab:blue")
ax_m.axhline(1.0, color="0.3", ls=":")
mean_marker = ax_m.axvline(1.0, color="0.5", lw=0.8)
ax_m.set(xlabel="sigma of log w", ylabel="mean of truncated w", ylim=(0.3, 1.05),
         title="E[w] = 1 before truncation")


def update_ess(sigma, cap):
    ess_trunc_line.set_ydata([ess(w.clamp(max=cap)) for w in GRID_WEIGHTS.values()])
    mean_trunc_line.set_ydata([w.clamp(max=cap).mean().item() for w in GRID_WEIGHTS.values()])
    ess_marker.set_xdata([sigma, sigma])
    mean_marker.set_xdata([sigma, sigma])
    w = lognormal_weights(sigma, n=20_000)
    return {"ess": ess(w), "ess_truncated": ess(w.clamp(max=cap)), "theory": math.exp(-sigma**2),
            "mean_truncated": w.clamp(max=cap).mean().item()}


w_ess = live_plot(fig_ess, update_ess, sigma=slider(1.0, 0.05, 2.0, 0.05, "sigma"),
                  cap=slider(CAP, 1.0, 5.0, 0.5, "C"))
display(w_ess)

# %%
for sigma, cap in ((1.0, CAP), (1.5, CAP), (1.5, 5.0)):
    r = probe(w_ess, {"sigma": sigma, "C": cap})
    print(f"sigma {sigma:.2f}, C {cap:g}: ESS {r['ess']:.4f} (exp(-sigma^2) {r['theory']:.4f}), truncated "
          f"{r['ess_truncated']:.4f}, mean of truncated w {r['mean_truncated']:.4f}")

# %% [markdown]
# **Logged like the others.** Every run above recorded the per-token log-weights log π_trainer − log
# π_sampler of each iteration. Two statistics per iteration join the twins' own stats dict, each
# described by one row (meaning, healthy range, why) in `nb07_off_policy.STATS`; the table, the check and the
# shaded band below all read that row.

# %%
for name, row in nb07_off_policy.STATS.items():
    print(f"{name:12s} healthy {row.lo:g} .. {row.hi:g}   {row.meaning}")


def log_off_policy_stats(run):
    """Add mismatch_kl and ess to every iteration's stats dict of a run, from its recorded log-weights."""
    for stats, log_w in zip(run["history"], run["log_w"], strict=True):
        stats["mismatch_kl"] = mismatch_kl(log_w)
        stats["ess"] = ess(log_w.exp())


def outside(run, name):
    """Iterations whose stats[name] leaves the healthy range of nb07_off_policy.STATS[name]."""
    row = nb07_off_policy.STATS[name]
    return sum(not (row.lo <= s[name] <= row.hi) for s in run["history"])


# the float32 sampler run is also k = 0 of notebook 07 §2 (one run), so it appears once
all_runs = {**{f"sampler {label}": run for label, run in mismatch_runs.items()},
            **{f"k={k}, {anchor}": stale_runs[k, anchor] for k in K_VALUES[1:] for anchor in nb07_off_policy.ANCHORS}}
print(f"\n{'run':28s} | {'mismatch_kl':>11} {'1 - ESS':>9} {'ESS':>6} {'ESS min':>7} | iterations outside: kl  ess")
summary = {}
for label, run in all_runs.items():
    log_off_policy_stats(run)
    h = run["history"]
    summary[label] = dict(kl=mean(s["mismatch_kl"] for s in h), ess=mean(s["ess"] for s in h),
                          ess_min=min(s["ess"] for s in h), out_kl=outside(run, "mismatch_kl"),
                          out_ess=outside(run, "ess"))
    r = summary[label]
    print(f"{label:28s} | {r['kl']:11.2e} {1 - r['ess']:9.2e} {r['ess']:6.3f} {r['ess_min']:7.3f} | "
          f"{r['out_kl']:>20d} {r['out_ess']:>4d}")
bf16 = summary["sampler bfloat16"]
assert [f"{x:.2e}" for x in (1 - bf16["ess"], bf16["kl"])] == ["2.95e-05", "1.48e-05"]  # as quoted

# %%
fig, (ax_a, ax_b) = nb07_off_policy.new_figure()
for label, run in {**{k: v for k, v in mismatch_runs.items() if k != "float32"},
                   **{f"k={k}": stale_runs[k, "current"] for k in K_VALUES[1:]}}.items():
    points = [(i, 1 - s["ess"]) for i, s in enumerate(run["history"]) if s["ess"] < 1]
    ax_a.plot(*zip(*points, strict=True), label=label)
ax_a.set(yscale="log", xlabel="iteration", ylabel="1 - ESS", title="1 - ESS: both sources, log scale")
ax_a.legend(fontsize="small", ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.22))  # below: the curves fill it
ax_b.axhspan(nb07_off_policy.STATS["ess"].lo, nb07_off_policy.STATS["ess"].hi, color="0.92",
             label="healthy (nb07_off_policy.STATS)")
ax_b.set_ylim(0.3, 1.02)
curves(ax_b, {f"k={k}": stale_runs[k, "current"]["history"] for k in K_VALUES}, "ess", ylabel="ESS / n")
ax_b.set_title("stale rollouts, clip at the current policy")
plt.show()

# %%
ratio_to_2kl = {label: (1 - r["ess"]) / (2 * r["kl"]) for label, r in summary.items() if r["kl"] > 0}
print("(1 - ESS) / (2 mismatch_kl): " + ", ".join(f"{label} {v:.2f}" for label, v in ratio_to_2kl.items()
                                                    if label in ("sampler bfloat16", "sampler float8",
                                                                 "k=2, current", "k=4, current")))
assert all(abs(ratio_to_2kl[label] - 1) < 0.05 for label in ("sampler bfloat16", "sampler float8"))
assert [f"{ratio_to_2kl[label]:.2f}" for label in ("sampler bfloat16", "sampler float8")] == ["0.99", "0.98"]  # quoted


def ess_kl_factors(run):
    """(1 - ESS) / (2 mismatch_kl), means over iterations, as a product of two factors: chi^2 / (2 KL), the shape of
    the weights, and (1 - ESS) / chi^2, per iteration exactly 1 / (1 + chi^2), with chi^2 = 1 / ESS - 1 = CV^2(w)
    each iteration's sample chi^2 (notebook 07 §3's identity). -> (chi^2 / (2 KL), (1 - ESS) / chi^2, mean chi^2)"""
    h = run["history"]
    chi2 = mean(1 / s["ess"] - 1 for s in h)
    return chi2 / (2 * mean(s["mismatch_kl"] for s in h)), mean(1 - s["ess"] for s in h) / chi2, chi2


def below_one_share(run):
    """Shares of sum (w - 1)^2 (the chi^2 terms) and of sum 2 (w - 1 - log w) (the 2 KL terms) held by tokens with
    w < 1, pooled over a run's iterations, and the smallest weight."""
    log_w = torch.cat(run["log_w"]).double()
    w = log_w.exp()
    chi, two_kl, low = (w - 1) ** 2, 2 * (w - 1 - log_w), w < 1
    return (chi[low].sum() / chi.sum()).item(), (two_kl[low].sum() / two_kl.sum()).item(), w.min().item()


factors = {label: ess_kl_factors(all_runs[label]) for label in ("sampler bfloat16", "sampler float8", "k=2, current",
                                                                  "k=4, current", "k=4, behaviour")}
print(f"{'run':18s} | (1 - ESS)/(2 KL) = chi^2/(2 KL) x (1 - ESS)/chi^2 | mean chi^2 | w < 1 share of: chi^2  2 KL"
      f"   min w")
shares = {}
for label, (shape, saturation, chi2) in factors.items():
    shares[label] = below_one_share(all_runs[label])
    print(f"{label:18s} | {ratio_to_2kl[label]:16.3f} = {shape:13.3f} x {saturation:13.3f} | {chi2:10.2e} | "
          f"{shares[label][0]:21.2f} {shares[label][1]:5.2f}   {shares[label][2]:.3f}")
    assert abs(shape * saturation - ratio_to_2kl[label]) < 1e-9  # the identity
    assert 1 / (1 + 2 * chi2) < saturation < 1  # each iteration's 1 / (1 + chi^2) < 1
fmt3 = {label: [f"{x:.3f}" for x in f[:2]] for label, f in factors.items()}
assert fmt3["k=4, current"] == ["0.965", "0.858"] and fmt3["k=2, current"] == ["0.955", "0.927"]  # prose
assert fmt3["k=4, behaviour"] == ["1.280", "0.731"]  # prose
assert [f"{x:.2f}" for x in shares["k=4, current"][:2]] == ["0.34", "0.68"]  # prose
assert f"{factors['k=4, current'][2]:.2f}" == "0.13" and f"{shares['k=4, current'][2]:.3f}" == "0.009"  # prose
assert ratio_to_2kl["k=2, current"] < 0.9 and ratio_to_2kl["k=4, current"] < 0.85
assert [f"{ratio_to_2kl[f'k={k}, current']:.2f}" for k in K_VALUES[1:]] == ["0.89", "0.83"]
assert all(summary[f"sampler {label}"]["ess_min"] >= 0.98 for label in mismatch_runs)
assert [summary[f"sampler {label}"]["out_kl"] for label in mismatch_runs] == [0, 16, 20, 20]
assert all(summary[f"k={k}, {a}"]["out_kl"] == nb07_off_policy.SHORT["steps"] - 1
           for k in K_VALUES[1:] for a in nb07_off_policy.ANCHORS)
out_ess = {k: [summary[f"k={k}, {a}"]["out_ess"] for a in nb07_off_policy.ANCHORS] for k in K_VALUES[1:]}
assert [(min(v), max(v)) for v in out_ess.values()] == [(1, 4), (8, 11)]

# %% [markdown]
# The two statistics divide the work. While the mismatch is small, 1 − ESS ≈ 2·mismatch_kl, the
# χ² ≈ 2·KL of nearby distributions: within 5% for bfloat16 (2.95e-05 against 2 × 1.48e-05) and float8.
# For stale rollouts the ratio falls to 0.885 at k = 2 and 0.828 at k = 4 (current anchor), and the table splits
# it exactly into two factors. The second, (1 − ESS)/χ², is 1/(1 + χ²) on each iteration, with χ² = 1/ESS − 1 =
# CV²(w) the batch's own (the identity of the key equation): 1 − ESS = χ²/(1 + χ²) saturates as χ² grows, and at
# k = 4 this accounts for most of the shortfall (0.858, with χ² averaging 0.13). The first, χ²/(2·KL), is the
# shape of the weights. Per token, 2(w − 1 − log w) exceeds (w − 1)² exactly when w < 1 (their difference has
# derivative −2(√w − 1/√w)² ≤ 0 and vanishes at w = 1), so χ² < 2·KL needs the weights below 1 to carry the
# divergence: at k = 4 the tokens the current policy now likes less than the sampler did (down to w = 0.009)
# hold 0.68 of 2·KL but only 0.34 of χ², and the large weights nearly balance them (0.965). With the behaviour
# anchor the large weights win (1.280), so its ratio (0.935) stays nearer 1 although its χ² is larger.
#
# On the ESS
# scale a numerics mismatch is small (every sampler run stays at 0.98 or above, inside the row's range)
# while staleness is not: iterations below ESS = 0.9 number none of 20 at k = 0 (the float32 row), 1 to 4
# at k = 2 and 8 to 11 at k = 4 (across the three anchors). The mismatch_kl bound flags float8 in every
# iteration, bfloat16 in 16 of 20 (its KL, about 1.5e-05, sits just above the bound 1e-05 on this sharp
# SFT model), and every stale run from its second iteration on (the first has no older policy yet). Read
# 1 − ESS on a log scale (left figure) and one number places both sources: each precision and each k sits
# at its own level.
#
# verl 0.9.1 logs a statistic of the same form, `rollout_corr/rollout_is_eff_sample_size` (`compute_is_metrics`
# in `verl/trainer/ppo/rollout_corr_helper.py`): 1/mean(w̃²) with w̃ = w/mean(w), which is our (Σw)²/(n Σw²), but
# of the weights it applies, clamped at `rollout_is_threshold` (its comment: "Compute Effective Sample Size (ESS)
# for truncated weights"), and only when `rollout_is` is set. Truncation raises the ESS (the log-normal table
# above: 0.37 raw, 0.63 truncated at C = 2, for σ = 1), so on a batch with heavy weights verl's number is not
# ours. Its raw-weight diagnostic is `rollout_corr/chi2_token` = mean(ρ²) − 1, which equals our 1/ESS − 1 when
# the raw weights average 1. Our row's bound (0.9) is a choice: here it separates k = 0 (no iteration below)
# from k = 2 (1 to 4) and k = 4 (8 or more).
# With the clip at the current policy none of these runs lost reward measurably (notebook 07 §2), so
# the bound flags drift, not damage.
#
# > **You should know.**
# > - ESS = (Σw)² / (n Σw²) = 1 / (1 + CV²(w)): the fraction of the batch the weighted estimate is worth.
# >   As the batch grows, 1 / (1 + χ²(π_trainer ‖ π_sampler)); for small mismatches 1 − ESS ≈ 2·KL. Exactly,
# >   1 − ESS = χ²/(1 + χ²) with the batch's χ² = CV²(w), so a large mismatch sits below 2·KL. Per token,
# >   2(w − 1 − log w) exceeds (w − 1)² exactly when w < 1: χ² falls below 2·KL only if weights below 1 carry
# >   enough of it.
# > - Truncating the weights at C raises the ESS and biases the weighted mean downwards; the ESS of the
# >   truncated weights flatters a batch, so log the ESS of the raw weights (verl 0.9.1's
# >   `rollout_is_eff_sample_size` is of the truncated weights, its `chi2_token` of the raw ones).
# > - Token-level ESS is what is logged here; a sequence-level weight (the product over tokens) has an
# >   ESS that falls with the length (e^{−Tσ²} in the log-normal model: 0.37 for four tokens at σ = 0.5,
# >   against 0.78 per token), the variance price of its unbiasedness (notebook 07 §1).
#
# **Catalog note.** *Symptom:* after a change to the rollout setup (inference engine, its precision,
# asynchronous workers, more steps per generation), learning changes and nothing in the loss explains
# it. *Statistic:* ESS of π_trainer/π_sampler on the sampled tokens, every iteration (as `ess` above;
# verl 0.9.1 `rollout_corr/chi2_token` for the raw weights), read as 1 − ESS on a log scale, with the mismatch
# KL beside it.
# *Fix:* trace the source: a flat, tiny 1 − ESS that moved with the engine's precision is notebook 07 §1
# (truncated IS, float32 logits); one that grows with the staleness is notebook 07 §2 (anchor the clip at the
# current policy, bound the staleness until the ESS stays above the row's bound).


# %% [markdown]
# ## 4. Self-check
#
# 1. Your trainer recomputes π_old, so ρ = 1 exactly at the first inner step, but the rollout engine samples from
#    bfloat16 logits. Is the update on-policy? What does it estimate, and which of the twins' checks can see it?
# 2. Why is a sharper policy (larger logits) sampled less faithfully in a low precision? Is the mismatch KL a
#    reliable measure of how wrong the update is?
# 3. Write the truncated importance sampling (TIS) loss. On the five-logit tiny input with a float8 sampler at
#    s = 8, what do C = 2 and C = 1 do to the bias of the update?
# 4. On the trained twin, exactly enumerated: how much of the bias do token-level weights remove, and
#    sequence-level ones? Why the difference, and what does the sequence level cost?
# 5. An asynchronous worker samples with weights k updates behind. Should the clip be anchored at the behaviour
#    policy μ that sampled or at the current policy? Use a token with A = +1 whose probability the current policy
#    has already raised to 1.3 × μ's.
# 6. Define the effective sample size of importance weights. What is it for ten weights, one of them 10 and nine
#    of them 1? How does it relate to χ² and to the KL, and where does 1 − ESS ≈ 2·KL break down?
# 7. Learning changes after you move to a new inference engine or to asynchronous rollouts. What do you log, how
#    do you tell sampler numerics from staleness, and can you read verl's `rollout_is_eff_sample_size` as the ESS
#    of the raw weights?
#
# <details><summary>Answers</summary>
#
# 1. No. ρ = 1 at the first step only says the trainer agrees with itself; the samples came from the sampler's q,
#    so the update estimates E_q[A∇log p], not the policy gradient E_p[A∇log p]. In every sampler run max |ρ − 1|
#    at the first step is 0.0e+00, so the check "ratio == 1 at the first inner step" cannot see it; the check
#    "training log-probs match the sampler" (`logprob_gap`) failed in 20/20 iterations of every lower-precision
#    run. On this toy the outcome did not change: the final rewards differ from the float32 run's by at most
#    0.016, less than the spread between two float32 seeds (0.080) (notebook 07 §1, notebook 07 §1.1).
# 2. Rounding to nearest moves a number by at most a fraction u = 2⁻ᵇ of itself for b significant bits (for
#    numbers in the format's normal range): u = 0.00391 for bfloat16 and 0.06250 for float8 e4m3. So the error of
#    a logit grows with the logit, and the weights p/q spread: with bfloat16 over 0.9934 to 1.0012 at s = 1 and
#    0.9511 to 1.0125 at s = 8, and float8 reaches 0.4487 at s = 8. The KL is not a reliable measure: with
#    bfloat16 it is 1.57e-06 at s = 4 and 5.70e-07 at s = 8, while the uncorrected update's relative error grows
#    from 0.0052 to 0.0122. To second order the KL is ½ Var_p(δ) of the logit errors δ, and at s = 8 almost all
#    of p's mass sits on one token, so δ barely varies under p while the rare tokens' weights are far from 1. Read
#    the weights and the bias, not only the KL (notebook 07 §1).
# 3. w_t = min(p(y_t)/q(y_t), C), a constant (no gradient), and L = −mean_t w_t min(ρ_t A, clip(ρ_t, 1 − ε, 1 + ε) A).
#    Uncorrected, the rewarded token, drawn with q = 0.00669 instead of p = 0.00816, gets too little push (0.821 of the
#    policy gradient's; relative error 0.1788). C = 2 sits above every weight (the largest is 1.2196) and removes the
#    bias (relative error 0.0000). C = 1 caps the weight that carries the signal, the rewarded token's 1.2196, and gives
#    back the uncorrected update (0.1789). Truncation is harmless only when C sits above the weights that carry the
#    signal. This is TRL 1.16.0's `vllm_importance_sampling_mode="token_truncate"` with
#    `vllm_importance_sampling_clip_max` (default 3.0); TRL's default mode is `"sequence_mask"`, the raw sequence weight
#    p(y)/q(y) set to 0 above that bound (and below `vllm_importance_sampling_clip_min` when it is set; its default is
#    `None`), and the correction (`vllm_importance_sampling_correction`, default `True`) runs only with
#    `use_vllm=True`; verl 0.9.1 `algorithm.rollout_correction.rollout_is` (YAML default null: no weights) with
#    `rollout_is_threshold` (default 2.0) (notebook 07 §1).
# 4. Uncorrected, the expected update is off by 5.79e-03 of its length with a bfloat16 sampler and 1.09e-01 with
#    float8. Token-level weights leave 0.67, 0.27 and 0.44 of it (bfloat16, float16, float8); the sequence-level
#    weight Π_t p(y_t)/q(y_t) = p(y)/q(y), the exact importance weight, removes it up to float rounding (at most
#    2.01e-07). The sequence's advantage is credited to every token, but a token weight corrects only that token's
#    own draw, not the prefix it continues or the suffix that decides the reward. The bias sits in the expected
#    update, so more samples do not average it away. The price of the sequence level is variance that grows with
#    the length: in the log-normal model (σ = 0.5, four tokens) the sequence-level ESS is 0.3561 against 0.7794
#    per token (notebook 07 §1.1, notebook 07 §3).
# 5. At the current policy. Anchored at μ, the A = +1 token starts at ρ = 1.30, outside the window (> 1.2), and
#    gets zero gradient before the first step (so does an A = −1 token lowered to 0.70 × μ's): the trust region was
#    spent by the k updates the data missed. Anchored at the current policy (π_old recomputed by the trainer),
#    ρ = 1 and dL/dlog p = −1.000; TIS from μ scales it to −1.300. In the runs the behaviour anchor's first-step
#    |ρ − 1| on the worst token (mean over iterations) was 1.440 at k = 2 and 2.350 at k = 4, and the mean of its
#    per-sign clip fractions climbed from 0.044 (k = 0) to 0.116 and 0.155, while with the current anchor it stayed
#    at 0.048 and 0.050. The behaviour anchor's reward (0.423, 0.441, 0.367 for k = 0, 2, 4) is lower only at
#    k = 4, by 0.056, less than the float32 seed spread (0.080): one seed shows the cost in the clip budget, not yet
#    in the reward; TIS on top of the current anchor changed the final reward by at most 0.017. verl 0.9.1
#    `algorithm.rollout_correction.bypass_mode: false` (its default) recomputes π_old; its fully async recipe sets
#    it to true, the behaviour anchor. TRL 1.16.0's experimental async GRPO anchors at the sampled log-probs and
#    bounds the lag with `AsyncGRPOConfig.max_staleness` (default 4) (notebook 07 §2).
# 6. ESS = (Σw)²/(n Σw²) = 1/(1 + CV²(w)) ∈ [1/n, 1]: the fraction of the batch the weighted estimate is worth. Ten
#    weights, one of them 10: 0.3312. With y ∼ q and w = p/q, in expectation ESS → 1/(1 + χ²(p ‖ q)), and for small
#    mismatches χ² ≈ 2·KL, so 1 − ESS ≈ 2·KL: (1 − ESS)/(2·mismatch_kl) is 0.99 for the bfloat16 sampler and 0.98 for
#    float8. Exactly, 1 − ESS = χ²/(1 + χ²) with the batch's χ² = CV²(w), which saturates as χ² grows: for stale
#    rollouts the ratio falls to 0.89 (k = 2) and 0.83 (k = 4, current anchor). Per token, 2(w − 1 − log w) exceeds (w −
#    1)² exactly when w < 1, so χ² below 2·KL needs weights below 1; in the stale runs they hold 0.65 and 0.68 of 2·KL
#    (notebook 07 §3).
# 7. Log the ESS of the raw weights π_trainer/π_sampler on the sampled tokens every iteration, read as 1 − ESS on
#    a log scale, with the mismatch KL beside it (KL(π_sampler ‖ π_trainer), the k3 mean of w − 1 − log w over tokens
#    drawn by the sampler). Numerics give a flat, tiny 1 − ESS that moves with
#    the precision: every sampler run's lowest ESS is 0.989 or more, and no iteration falls below the 0.9 bound.
#    Staleness grows with k: iterations below 0.9 number 0 at k = 0, 1 to 4 at k = 2 and 8 to 11 at k = 4 (across
#    the three anchors). The fixes follow the source: truncated IS and float32 logits (notebook 07 §1), or the clip
#    at the current policy and a bound on the staleness (notebook 07 §2). verl 0.9.1's
#    `rollout_corr/rollout_is_eff_sample_size` is the ESS of the weights it applies, truncated at
#    `rollout_is_threshold`, and only when `rollout_is` is set; truncation raises the ESS (σ = 1 in the log-normal
#    model: 0.3677 raw, 0.6317 truncated at C = 2) and biases the weighted mean below 1 (0.8102), so it flatters
#    a batch. Its raw-weight diagnostic is `rollout_corr/chi2_token` (notebook 07 §3).
# </details>
#
# **Next: the round itself.** Back to notebook 00: `make interview` (or a mock round from the panel), then the drill
# on the topics whose scores are lowest.
