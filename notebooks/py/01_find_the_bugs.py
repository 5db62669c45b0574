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
# # 01 — Find the silent bugs with tiny inputs
#
# **The interview question** (seed 000, follow-up 1): *"This small GRPO trainer runs without an exception but
# learns poorly. Find the silent numerical and mathematical bugs using tiny diagnostic inputs."*
#
# After this notebook you can:
# - state a four-step debugging method and apply it to any RL trainer;
# - for each of the 11 catalogued bugs (B1..B11), give **the tiny input that exposes it**, the buggy and the
#   correct number, the symptom you would see in the training logs, and the logged statistic
#   (`grpo_fixed.DIAGNOSTICS`) or preflight probe (`grpo_fixed.preflight`) that catches it;
# - say which bugs cost reward on the toy task and which stay hidden there (and where they bite instead).
#
# | section | bug | tiny input |
# |---|---|---|
# | 1 | (the method) | one rollout of 2 prompts x 4 samples |
# | 2 | B1 sampling from raw logits | 5 logits, 20000 draws (slider: temperature) |
# | 3 | B2 no eps in the advantage std | a group of 4 rewards (slider: spread) |
# | 4 | B3 old log-probs recomputed in the inner loop | one update on 4 prompts x 8 samples |
# | 5 | B4 `clamp(ratio * A)` | one token, ratio 1, A = 2 |
# | 6 | B5 `(values * mask).sum() / mask.sum()` | a 4x8 batch with padding (slider: masked fraction) |
# | 7 | B6 log-prob shift | a hand-made policy that is sure of the next token |
# | 8 | B7 `log(softmax)` | two logits, 0 and d |
# | 9 | B8 reversed KL log-ratio | a 3-token distribution |
# | 10 | B9 `view(G, B)` | two prompts x 3 rewards |
# | 11 | B10 temperature missing in training | one rollout at several temperatures |
# | 12 | B11 no gradient clipping | a linear layer and a loss scaled by 1000 |
# | 13 | ablation | 13 short training runs |

# %%
import logging
import math
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import grpo_buggy
import grpo_fixed
from workbook import nb01
from workbook.catalog import BUG_IDS, BUGS, hybrid
from workbook.plots import BUGGY, FIXED, REFERENCE, buggy_vs_fixed, curves
from workbook.widgets import live_figure, set_value, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids log health warnings; we print what we need
torch.manual_seed(0)
HYBRID = {b: hybrid(b) for b in BUG_IDS}  # grpo_fixed with one bug switched back on
print("bugs:", ", ".join(f"{b.id} {b.function}" for b in BUGS))

# %% [markdown]
# ## 1. The method
#
# 1. **Log shapes**: every tensor, with its shape in its name (`rewards  # (B*G,)`). A wrong reshape that
#    still runs is only visible as a shape or a grouping you did not expect.
# 2. **Log stats**: min / max / mean / count of non-finite values, and the *invariants* that must hold
#    exactly (the sampler's log-prob of a token equals the training log-prob before any update; advantages
#    average to 0 within each group; the ratio is 1 at the first inner step).
# 3. **Tiny synthetic inputs**: a group of 4 rewards, 5 logits, a 2x3 mask, and their edge cases (constant
#    group, everything masked, huge magnitudes, a negative advantage, temperature != 1, B != G).
# 4. **Compare against a hand calculation**: a number you worked out on paper, printed next to the code's.
#
# ### 1.1 Log shapes and stats of one tiny rollout
# Two prompts x four samples (B = 2, G = 4), the same seed for both twins:

# %%
for module in (grpo_buggy, grpo_fixed):
    batch, stats, *_ = nb01.tiny_rollout(module, prompts_per_batch=2, group_size=4)
    print(f"--- {module.__name__}")
    for name, tensor in batch.items():
        print(nb01.describe(name, tensor))
    print(f"logprob_gap {stats['logprob_gap']:.4f}   adv_nonfinite {stats['adv_nonfinite']}")
    print("rewards (B, G):   ", [[f"{r:.2f}" for r in row] for row in batch["rewards"].view(2, 4).tolist()])
    print("advantages (B, G):", [[f"{a:+.2f}" for a in row] for row in batch["advantages"].view(2, 4).tolist()])

# %% [markdown]
# Three lines of that log should stop a careful reader:
# - **`advantages` has 6 non-finite values** in the buggy twin, 0 in the fixed one.
# - **`sampler_logprobs` and `old_logprobs` differ** in the buggy twin (`logprob_gap` 0.196): both are the
#   log-prob of the same token under the same weights before any update, so they must be equal (the fixed
#   twin's gap is 0.0000). Sections 7 (B6) and 11 (B10) explain it.
# - The buggy advantages table has NaN and +-1 in **pairs**, not per row of 4: the group of 4 was not the
#   unit that got normalised (B9, section 10), and a pair of equal rewards gives NaN (B2, section 3).
#
# ### 1.2 Hand calculation first, then the edges
# $A_i = (r_i - \bar r)/(\sigma + \epsilon)$. For $r = (0, 1, 0, 1)$: $\bar r = 0.5$, $\sigma = 0.5$, so
# $A = (-1, 1, -1, 1)$ on paper.

# %%
hand = [-1.0, 1.0, -1.0, 1.0]
for module in (grpo_buggy, grpo_fixed):
    adv = module.group_advantage([0.0, 1.0, 0.0, 1.0])
    print(f"{module.__name__:11s} {[f'{a:+.6f}' for a in adv.tolist()]}  max |code - hand| = "
          f"{max(abs(a - h) for a, h in zip(adv.tolist(), hand, strict=True)):.1e}")

# %% [markdown]
# Both twins agree with the hand calculation on the easy case (the fixed twin's $2\cdot10^{-8}$ is
# $\epsilon/\sigma$, the price of the epsilon): **silent bugs live at the edges**, so the tiny
# input must be an edge case. `grpo_fixed.preflight` is that list of edge cases, written as probes (tiny
# inputs with a known answer). It runs on either twin, and on each single-bug hybrid:

# %%
print("preflight(grpo_buggy) fails:")
for name in grpo_fixed.preflight(grpo_buggy):
    print("  -", name)
print("\nsingle-bug hybrids:")
for b in BUG_IDS:
    print(f"  {b:4s} {grpo_fixed.preflight(HYBRID[b]) or '(passes every probe)'}")

# %% [markdown]
# Seven bugs fail a preflight probe. **B3, B6, B9 and B10 pass every probe**: they live in the training loop
# (which tensors get compared, grouped or divided by the temperature), so they show up in the training
# statistics instead (section 13 lists which health check fires for each run).
#
# > **You should know.** Print shapes and stats of every tensor of one tiny batch; check invariants that
# > are *exactly* true (equal log-probs, zero-mean groups, ratio 1); hand-calculate one small case; then
# > attack the edges (constant, all-masked, huge, negative, T != 1, B != G).
#
# <details><summary>Why is "runs without an exception" such weak evidence for an RL trainer?</summary>
#
# Most of its math is reductions (means, logsumexp, reshapes) that accept wrong inputs of the right shape,
# and a NaN loss just skips a step or drifts the weights. The reward curve is the only end-to-end signal,
# and it is noisy and slow: a bug can cost half the reward and still look like "learns slowly".
# </details>

# %% [markdown]
# ## 2. B1 — sampling from raw logits
# **Question.** What does `torch.multinomial(logits - logits.min())` sample from?
#
# **Equation.** Correct: $p_v = e^{z_v} / \sum_u e^{z_u}$. Buggy: $q_v = (z_v - \min z)/\sum_u (z_u - \min z)$,
# which is linear in $z$, gives the arg-min token probability exactly 0, and is unchanged by any temperature
# $z \to z/T$ (the $1/T$ cancels between numerator and denominator).
#
# **Tiny input.** Logits $(2, 1, 0, -1, -2)$, 20000 draws. By hand, $q = (4, 3, 2, 1, 0)/10$.

# %%
logits = nb01.TOY_LOGITS  # (V,) = (5,)
print("softmax (hand):", [f"{p:.4f}" for p in torch.softmax(logits, -1).tolist()])
print("q (hand):      ", [f"{q:.4f}" for q in ((logits - logits.min()) / (logits - logits.min()).sum()).tolist()])
for module in (grpo_buggy, grpo_fixed):
    freq = nb01.sampling_frequencies(module, logits)  # (V,)
    print(f"{module.__name__:11s}    {[f'{f:.4f}' for f in freq.tolist()]}")

# %% [markdown]
# Move the temperature: the fixed sampler follows the softmax (grey dots), the buggy one does not move at all.

# %%
# NBVAL_IGNORE_OUTPUT
w_temperature = live_figure(nb01.draw_sampling, temperature=slider(1.0, 0.1, 3.0, 0.05, "temperature"))
display(w_temperature)

# %%
result = set_value(w_temperature, "temperature", 0.25)
print("T = 0.25  total-variation distance to softmax:", {k: f"{v:.4f}" for k, v in result.items()})

# %% [markdown]
# A static view of the same fact: the probability of the top token as the temperature changes.

# %%
temperatures = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0]
fig, (ax_b, ax_f) = buggy_vs_fixed("frequency of the top token (logits [2, 1, 0, -1, -2] / T)", figsize=(8, 2.6))
for ax, module, color in ((ax_b, grpo_buggy, BUGGY), (ax_f, grpo_fixed, FIXED)):
    top = [nb01.sampling_frequencies(module, logits / t, n=4000)[0].item() for t in temperatures]
    ax.plot(temperatures, [torch.softmax(logits / t, -1)[0].item() for t in temperatures], "--", color=REFERENCE,
            label="softmax")
    ax.plot(temperatures, top, "o-", color=color, label="sampled")
    ax.set_xlabel("temperature T")
ax_b.set_ylabel("P(token 0)")
ax_b.legend(fontsize="small")
plt.show()

# %% [markdown]
# **Log symptom.** Nothing in the per-iteration stats names it: `sampler_logprobs` are computed with
# `log_softmax`, so they describe a distribution the tokens were *not* drawn from, and every log-prob-based
# stat still looks healthy. Temperature sweeps "do nothing", and the reward plateaus (section 13).
# **Caught by** the preflight probe *sampling frequencies match softmax(logits)*.
#
# > **You should know.** `torch.multinomial` takes non-negative *weights*, so it happily accepts shifted logits
# > without complaint. Always test a sampler by its empirical frequencies against `softmax` on 5 logits.
#
# <details><summary>Which token can the buggy sampler never produce, and why does that matter for RL?</summary>
#
# The arg-min token has weight exactly 0. A token the policy currently dislikes can never be sampled, so it
# can never earn a reward and be reinforced: exploration is cut off exactly where it is needed.
# </details>

# %% [markdown]
# ## 3. B2 — no epsilon in the advantage's std
# **Question.** What does `group_advantage` return when every sample in the group got the same reward?
#
# **Equation.** $A_i = (r_i - \bar r)/(\sigma + \epsilon)$ with $\sigma$ the population std. With
# $\epsilon = 0$ a constant group gives $0/0 = \mathrm{NaN}$. The seed also asks for no overflow with huge
# rewards: the buggy `r.mean()` sums $1.7\cdot10^{308} + 1.7\cdot10^{308} = \infty$ first.

# %%
cases = {"constant": [0.5, 0.5, 0.5, 0.5], "huge": [1.7e308, 1.7e308, 1e308], "1e-12 apart": [1, 1, 1, 1 + 1e-12]}
for label, rewards in cases.items():
    for module in (grpo_buggy, grpo_fixed):
        adv = module.group_advantage(rewards)
        print(f"{label:12s} {module.__name__:11s} {[f'{a:+.4g}' for a in adv.tolist()]}")

# %% [markdown]
# The third case is the quiet cousin of the NaN: without $\epsilon$ a difference of $10^{-12}$ (float noise)
# becomes a full-size advantage of 1.73, exactly as large as a real success would get. The fixed twin
# shrinks it to $\approx 7.5\cdot 10^{-5}$ because $\sigma \ll \epsilon$.
#
# Slide the spread of the group to 0 and watch the buggy advantages become NaN:

# %%
# NBVAL_IGNORE_OUTPUT
w_spread = live_figure(nb01.draw_group_spread, spread=slider(0.0, 0.0, 1.0, 0.05, "spread"))
display(w_spread)

# %%
lines = []
for spread in (0.5, 0.0):
    result = set_value(w_spread, "spread", spread)
    lines.append(f"spread {spread:.2f}: " + "  ".join(f"{k} {[f'{a:+.3f}' for a in v]}" for k, v in result.items()))
print("\n".join(lines))

# %% [markdown]
# The slider cannot show the region between $10^{-15}$ and $10^{-6}$; this plot does (log axis), with the
# exact zero spread drawn at the left edge:

# %%
spreads = [10.0**k for k in range(-15, 1)]
fig, (ax_b, ax_f) = buggy_vs_fixed("largest |advantage| of the group as the spread shrinks", figsize=(8, 2.6))
for ax, module, color in ((ax_b, grpo_buggy, BUGGY), (ax_f, grpo_fixed, FIXED)):
    ax.semilogx(spreads, [module.group_advantage(nb01.spread_group(s)).abs().max().item() for s in spreads], "o-",
                color=color)
    at_zero = module.group_advantage(nb01.spread_group(0.0)).abs().max().item()
    ax.text(1e-15, 0.2, f"spread 0: {at_zero:.3g}", color=color)
    ax.axvline(1e-8, color=REFERENCE, ls=":", lw=1)
    ax.set_xlabel("spread (max - min reward); dotted: eps = 1e-8")
ax_b.set_ylabel("max |A_i|")
plt.show()

# %% [markdown]
# **Log symptom.** `adv_nonfinite > 0`, then a NaN loss; `optimizer_step` skips non-finite steps, so the
# `nonfinite_steps` stat counts minibatches silently thrown away. Constant groups become *more* common as the
# policy gets good (`zero_var_groups` -> 1), so the bug bites harder the better training goes (section 13
# counts the skipped steps of the B2 run). **Caught by** `adv_nonfinite`, health check *advantages finite*,
# preflight *constant reward group gives finite advantages*.
#
# > **You should know.** A constant group carries no signal: its advantages must be exactly 0, not NaN.
# > $\epsilon$ also caps how much float noise can be amplified. It is a different knob from the PPO clip.
#
# <details><summary>Why is one NaN group enough to ruin a whole minibatch?</summary>
#
# The loss is a mean over all tokens of the minibatch, so one NaN advantage makes the loss NaN, and its
# gradient NaN for every parameter. Either the step is skipped (the other groups' signal is lost) or, without
# a finiteness check, every weight becomes NaN.
# </details>

# %% [markdown]
# ## 4. B3 — old log-probs recomputed inside the inner loop
# **Question.** What is the ratio $\rho_t = \exp(\log\pi_\theta - \log\pi_{\text{old}})$ at the 2nd, 3rd and 4th
# inner step, if `old_logprobs = logprobs.detach()` is computed inside the loop?
#
# **Equation.** $\pi_{\text{old}}$ is the behaviour policy that sampled the batch: cached once at rollout.
# Recomputing it from the current weights makes $\rho \equiv 1$, so clipping never acts and every inner step
# is a plain policy-gradient step.
#
# **Tiny input.** One rollout of 4 prompts x 8 samples, one call to `update_policy` (2 epochs x 2
# minibatches = 4 inner steps), the same seed for both:

# %%
inner = {}
for label, module in (("B3", HYBRID["B3"]), ("fixed", grpo_fixed)):
    batch, _, policy, cfg, gen = nb01.tiny_rollout(module, prompts_per_batch=4, group_size=8)
    records = module.update_policy(policy, torch.optim.Adam(policy.parameters(), lr=cfg.lr), batch, cfg, gen)
    inner[label] = [(r["ratio"] - 1).abs().max().item() for r in records]
    print(f"{label:5s} max|ratio - 1| per inner step {[f'{d:.4f}' for d in inner[label]]}   "
          f"clipped tokens {[r['clipped_pos'] + r['clipped_neg'] for r in records]}")

# %%
fig, (ax_b, ax_f) = buggy_vs_fixed("max |ratio - 1| at each inner step of one update", figsize=(8, 2.4))
for ax, label, color in ((ax_b, "B3", BUGGY), (ax_f, "fixed", FIXED)):
    ax.bar(range(1, 5), inner[label], color=color)
    if max(inner[label]) == 0:
        ax.text(2.5, 0.1, "exactly 0 at every step", color=color, ha="center")
    ax.axhline(cfg.clip, color=REFERENCE, ls=":", lw=1)
    ax.set_xlabel("inner step (dotted: clip radius 0.2)")
ax_b.set_ylabel("max |ratio - 1|")
plt.show()

# %% [markdown]
# **Log symptom.** `ratio_last_maxdev` stays exactly 0 and `clip_frac_pos` / `clip_frac_neg` stay 0 for the
# whole run. **Caught by** the health check *ratio moves after updates* (no preflight probe can see it: the
# bug is in the loop, not in a building block). What it costs: the clipped trust region is gone, which matters
# when the policy moves far within one batch; section 13 shows its final reward here and notebook 02 shows the
# ratio's regime (more inner epochs, a larger learning rate).
#
# > **You should know.** The ratio is exactly 1 at the first inner step and must *move* afterwards. A ratio
# > that is always 1 means $\pi_{\text{old}}$ is not the behaviour policy.
#
# <details><summary>With inner_epochs=1 and minibatches=1, is B3 still a bug?</summary>
#
# No observable one: with a single inner step the ratio is 1 anyway (same weights), and the gradient of
# $\rho A$ at $\rho = 1$ equals the policy gradient. It becomes a bug as soon as one batch is reused.
# </details>

# %% [markdown]
# ## 5. B4 — clipping the product instead of the ratio
# **Question.** Where does the clip go in $L = \min(\rho A,\ \mathrm{clip}(\rho, 1-\varepsilon, 1+\varepsilon)A)$?
#
# **Equation.** Buggy: $\min(\rho A,\ \mathrm{clip}(\rho A, 1-\varepsilon, 1+\varepsilon))$, which compares an
# *advantage-scaled* number with the ratio bounds $[0.8, 1.2]$. For $A = 2$ at $\rho = 1$: $\rho A = 2$ is
# clipped to the constant 1.2, so the gradient is 0. Correct gradient of $-\frac1n\sum_t \rho_t A$ with
# respect to each $\log\pi_t$ at $\rho = 1$: $-A/n = -2/2 = -1$.
#
# **Tiny input.** Two tokens, $\log\pi = \log\pi_{\text{old}} = 0$ (so $\rho = 1$), $A = 2$:

# %%
for label, module in (("B4", HYBRID["B4"]), ("fixed", grpo_fixed)):
    logp = torch.zeros(1, 2, requires_grad=True)  # (N, T) = (1, 2)
    loss = module.grpo_loss(logp, torch.zeros(1, 2), torch.tensor([2.0]), torch.ones(1, 2, dtype=torch.bool))
    loss.backward()
    print(f"{label:5s} loss {loss.item():+.4f}   d loss / d logp {[f'{g:+.4f}' for g in logp.grad[0]]}")

# %%
ratios = torch.linspace(0.5, 1.5, 41)  # (R,)
fig, (ax_b, ax_f) = buggy_vs_fixed("surrogate objective min(...) of one token vs ratio", figsize=(8, 2.8))
for ax, module in ((ax_b, HYBRID["B4"]), (ax_f, grpo_fixed)):
    for adv, style in ((2.0, "-"), (1.0, "--"), (-1.0, "-.")):
        objective = [-module.grpo_loss(torch.log(r).view(1, 1), torch.zeros(1, 1), torch.tensor([adv]),
                                       torch.ones(1, 1, dtype=torch.bool)).item() for r in ratios]
        ax.plot(ratios, objective, style, label=f"A = {adv:+.0f}")
    ax.set_xlabel("ratio")
ax_b.set_ylabel("objective (= -loss)")
ax_b.legend(fontsize="small")
plt.show()

# %% [markdown]
# For $A = +1$ both curves agree (the product equals the ratio). For $A = 2$ the buggy objective is flat at
# 1.2 everywhere: no gradient at all. For $A = -1$ the buggy clamp of a negative number to $[0.8, 1.2]$ is
# always 0.8, so the min always picks $\rho A$: negative advantages are never clipped. **Log symptom.** None
# of the ratio stats see it (they are computed from the ratio, not from the loss); the reward lags (section
# 13). **Caught by** preflight *loss gradient at ratio 1 is -A/n*.
#
# > **You should know.** Clip the ratio, then multiply by $A$. For $A < 0$ the pessimistic min picks the
# > other side of the clip, which is why the order matters.
#
# <details><summary>Why does the buggy version look correct in a unit test with A = 1?</summary>
#
# With $A = 1$, $\mathrm{clip}(\rho A) = \mathrm{clip}(\rho)A$. Test with $|A| \ne 1$ and with $A < 0$.
# </details>

# %% [markdown]
# ## 6. B5 — masked positions reach the masked mean
# **Question.** When is `(values * mask).sum() / mask.sum()` wrong?
#
# **Equation.** $\mathrm{mean} = \sum_t m_t v_t / \sum_t m_t$. Multiplying by the mask is correct *only if*
# every masked value is finite: $0 \cdot (-\infty) = \mathrm{NaN}$ and $0 \cdot \mathrm{NaN} = \mathrm{NaN}$.
# And with every token masked it is $0/0$. The fix selects (`torch.where`) instead of multiplying and clamps
# the denominator to 1. A third, *different* common mistake is the naive `values.mean()`, which includes the
# padding in both the sum and the count.
#
# **Tiny input.** A 4x8 batch of per-token values $1, 2, \dots, 8$ along each row; the last tokens of every
# row are padding and hold garbage. With finite garbage (0.0), B5 is right and only the naive mean is biased;
# B5 breaks only when everything is masked:

# %%
# a static view: finite padding (the slider below starts from -inf padding)
estimates = nb01.draw_masked_mean(0.5, "0.0 (finite garbage)")
for f in (0.5, 1.0):
    row = nb01.masked_estimates(f, 0.0)
    print(f"masked {f:.2f}, padding 0.0: " + "  ".join(f"{k} {v:.4f}" for k, v in row.items()))

# %% [markdown]
# Now padding that holds $-\infty$ (a log-prob of a padding token computed as `log(softmax)` that underflowed,
# section 8, or any garbage a padded position happens to hold). Slide the masked fraction:

# %%
# NBVAL_IGNORE_OUTPUT
w_masked = live_figure(nb01.draw_masked_mean, masked_fraction=slider(0.5, 0.0, 1.0, 0.125, "masked fraction"),
                       padding=list(nb01.PADDING))
display(w_masked)

# %%
lines = []
for f in (0.0, 0.125, 0.5, 1.0):  # the slider drives f = 0.125; the other rows call the same function directly
    row = set_value(w_masked, "masked fraction", f) if f == 0.125 else nb01.masked_estimates(f, -math.inf)
    lines.append(f"masked {f:.3f}, padding -inf: " + "  ".join(f"{k} {v:.4f}" for k, v in row.items()))
print("\n".join(lines))

# %% [markdown]
# With $-\infty$ padding, **one** masked token is enough to turn B5's mean into NaN (masked fraction 0.125),
# and the naive mean is $-\infty$; at fraction 0 all three agree with the hand value 4.5. With finite padding,
# the naive mean is biased toward the padding value (at half masked: 1.25 instead of 2.5) and B5 is exact
# until everything is masked (0/0 = NaN). The all-masked case in the loss itself:

# %%
all_masked = torch.zeros(2, 3, dtype=torch.bool)  # (N, T): nothing generated
for label, module in (("B5", HYBRID["B5"]), ("fixed", grpo_fixed)):
    loss = module.grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2), all_masked)
    print(f"{label:5s} all-masked loss {loss.item() + 0.0:+.4f}")  # + 0.0 turns -0.0 into 0.0

# %% [markdown]
# **Honest scope.** Inside this trainer B5 never bites: `grpo_loss` and `kl_to_reference` zero the masked
# log-ratios *before* calling `masked_mean`, and the first completion token is always generated (so no row
# is fully masked). In section 13, B5's run ends at the fixed run's reward with no skipped step. **Log symptom** when it
# does bite: a NaN loss with finite log-probs on every real token. **Caught by** preflight *all-masked loss is
# finite*.
#
# > **You should know.** Masking by multiplication is only safe for finite values; select with `torch.where`
# > and guard the denominator. `values.mean()` over a padded batch is a loss bias that grows with padding.
#
# <details><summary>Why does the naive mean act like a per-sequence length weighting?</summary>
#
# With zero padding, `values.mean()` = (sum over real tokens) / (N*T): shorter batches get a smaller loss and
# a smaller gradient, so the effective learning rate depends on how much padding the batch holds.
# </details>

# %% [markdown]
# ## 7. B6 — log-prob shift misalignment
# **Question.** Which logit scores completion token $t$?
#
# **Equation.** The model reads `[BOS, prompt, completion]` and the logit at position $l$ predicts token
# $l + 1$. With $T$ completion tokens, the scoring logits are positions $-T-1, \dots, -2$ (`logits[:, -T-1:-1]`),
# not the last $T$ (`logits[:, -T:]`, which scores each token with the prediction made *after* seeing it).
#
# **Tiny input.** A hand-made policy that is sure (logit 10 vs 0) that the next token is the current one + 1,
# prompt `[1, 2]`, completion `[3, 4, 5]`. By hand the correct log-prob of each token is
# $-\log(1 + 5e^{-10}) \approx -0.0002$; scoring the wrong position gives $\approx -10.0002$.

# %%
policy = nb01.NextTokenPolicy(vocab_size=6, confidence=10.0)
prompt, completion = torch.tensor([[1, 2]]), torch.tensor([[3, 4, 5]])  # (N, P), (N, T)
print("hand:       ", f"{-math.log1p(5 * math.exp(-10)):+.4f}", f"{-10 - math.log1p(5 * math.exp(-10)):+.4f}")
for label, module in (("B6", HYBRID["B6"]), ("fixed", grpo_fixed)):
    logprobs = module.policy_logprobs(policy, prompt, completion, 1.0)  # (N, T)
    print(f"{label:5s} logp {[f'{x:+.4f}' for x in logprobs[0].tolist()]}")

# %% [markdown]
# The same bug in a real rollout shows up as a gap between the sampler's log-prob of each drawn token and the
# training log-prob of that token (they must be equal before any update):

# %%
fig, (ax_b, ax_f) = buggy_vs_fixed("sampler log-prob vs training log-prob of each generated token", figsize=(8, 2.8))
for ax, label, module, color in ((ax_b, "B6", HYBRID["B6"], BUGGY), (ax_f, "fixed", grpo_fixed, FIXED)):
    batch, stats, *_ = nb01.tiny_rollout(module, prompts_per_batch=4, group_size=8)
    mask = batch["mask"]  # (N, T)
    ax.plot(batch["sampler_logprobs"][mask], batch["old_logprobs"][mask], ".", color=color)
    ax.plot([-3, 0], [-3, 0], ":", color=REFERENCE)
    ax.set_xlabel(f"sampler log-prob  (logprob_gap {stats['logprob_gap']:.4f})")
    print(f"{label:5s} logprob_gap {stats['logprob_gap']:.4f}")
ax_b.set_ylabel("training log-prob")
plt.show()

# %% [markdown]
# On an untrained policy the gap is modest (its predictions are nearly uniform); on a trained, confident one
# it approaches the full logit gap, as the hand-made policy shows. **Log symptom** `logprob_gap` far above
# 1e-4 from iteration 0. **Caught by** the health check *training log-probs match the sampler* (no preflight
# probe: the building blocks are right, only their wiring is off by one). It costs a lot of reward
# (section 13): the model is trained to raise the probability of the wrong prediction.
#
# > **You should know.** Position $l$ predicts token $l+1$; shift logits and targets against each other
# > once, and check with a policy whose answer you know.
#
# <details><summary>Why is the ratio still exactly 1 at the first inner step under B6?</summary>
#
# Old and current log-probs are computed by the same (misaligned) function, so they agree with each other;
# only the comparison with the sampler exposes the shift. That is why `logprob_gap` exists.
# </details>

# %% [markdown]
# ## 8. B7 — `log(softmax)` instead of `logits - logsumexp`
# **Question.** What is $\log\pi(\text{token }0)$ for logits $(0, d)$ when $d$ is large?
#
# **Equation.** $\log\pi_0 = 0 - \mathrm{logsumexp}(0, d) = -d - \log(1 + e^{-d}) \approx -d$. Computing
# `softmax` first rounds $e^{-d}$ to 0 once it is below the smallest representable number, and $\log 0 = -\infty$.
#
# **Tiny input.** Logits $(0, 200)$, then the first gap $d$ where the buggy version returns $-\infty$ in each
# float type:

# %%
big = torch.tensor([[[0.0, 200.0]]])  # (N, T, V) = (1, 1, 2)
token0 = torch.tensor([[0]])  # (N, T)
for label, module in (("B7", HYBRID["B7"]), ("fixed", grpo_fixed)):
    print(f"{label:5s} logp(token 0 | logits [0, 200]) = {module.token_logprobs(big, token0).item():+.4f}   "
          f"[0, 100]: {module.token_logprobs(big / 2, token0).item():+.4f}")
gaps = torch.arange(0, 121, dtype=torch.float32)  # (D,)
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    pair = torch.stack([torch.zeros_like(gaps), gaps], -1).to(dtype)[:, None, :]  # (D, 1, 2)
    buggy = grpo_buggy.token_logprobs(pair, torch.zeros(len(gaps), 1, dtype=torch.long))[:, 0]  # (D,)
    fixed = grpo_fixed.token_logprobs(pair, torch.zeros(len(gaps), 1, dtype=torch.long))[:, 0]
    print(f"{str(dtype):15s} first gap with -inf: buggy {gaps[~buggy.isfinite()][0].item():.0f}, "
          f"fixed {'none' if fixed.isfinite().all() else 'some'} (up to {gaps[-1].item():.0f})")

# %%
pair = torch.stack([torch.zeros_like(gaps), gaps], -1)[:, None, :]  # (D, 1, 2) float32
fig, (ax_b, ax_f) = buggy_vs_fixed("log-prob of token 0 for logits (0, d), float32", figsize=(8, 2.6))
for ax, module, color in ((ax_b, grpo_buggy, BUGGY), (ax_f, grpo_fixed, FIXED)):
    logp = module.token_logprobs(pair, torch.zeros(len(gaps), 1, dtype=torch.long))[:, 0]  # (D,)
    ax.plot(gaps, torch.where(logp.isfinite(), logp, math.nan), color=color)
    ax.plot(gaps[~logp.isfinite()], torch.full((int((~logp.isfinite()).sum()),), -120.0), "x", color=BUGGY)
    ax.set_xlabel("logit gap d   (x: -inf)")
ax_b.set_ylabel("log pi(token 0)")
plt.show()

# %% [markdown]
# **Log symptom.** A `-inf` log-prob makes the ratio and the loss non-finite: `nonfinite_steps > 0`, a `kl`
# of inf. **Regime.** Our tiny policy never gets that confident in a short run: the B7 run in section 13 has
# no non-finite step and ends within noise of the fixed run (0.686 vs 0.679). It bites with large logits
# (long training, big vocabularies) and much sooner in half precision (float16 from a gap of 18). **Caught
# by** preflight *token log-probs finite for large logits*.
#
# > **You should know.** Never take `log` of a probability you computed; use `log_softmax` or
# > `logits - logsumexp`, which are exact for any logit magnitude.
#
# <details><summary>Before the -inf, is log(softmax) at least accurate?</summary>
#
# No: from about $d = 87.3$ ($e^{-d}$ below float32's smallest normal number, $1.18\cdot10^{-38}$) to
# $d \approx 104$ (where $e^{-d}$ drops below half the smallest subnormal, $1.4\cdot10^{-45}$, and rounds to 0) the
# probability is stored with fewer and fewer significant bits, so the log-prob drifts: at $d = 100$ the buggy
# version returned -99.9831 instead of -100 (printed above).
# </details>

# %% [markdown]
# ## 9. B8 — KL estimator with the log-ratio reversed
# **Question.** On tokens sampled from $\pi$, which log-ratio goes into the k3 estimator of
# $\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})$?
#
# **Equation.** With $x = \log\pi_{\text{ref}} - \log\pi$: $k_3 = e^x - x - 1$ and
# $\mathbb{E}_\pi[k_3] = \mathbb{E}_\pi[\pi_{\text{ref}}/\pi] - 1 + \mathrm{KL} = \mathrm{KL}$ because
# $\mathbb{E}_\pi[\pi_{\text{ref}}/\pi] = 1$. Reversed, $x = \log\pi - \log\pi_{\text{ref}}$:
# $\mathbb{E}_\pi[e^{x} - x - 1] = \mathbb{E}_\pi[\pi/\pi_{\text{ref}}] - 1 - \mathrm{KL}
# = \chi^2(\pi\|\pi_{\text{ref}}) - \mathrm{KL}$ (with $\chi^2 = \sum_v \pi_v^2/\pi_{\text{ref},v} - 1$), a different
# quantity that blows up where $\pi_{\text{ref}}$ is small.
#
# **Tiny input.** $\pi$ uniform over 3 tokens, $\pi_{\text{ref}} = \mathrm{softmax}(2, 0, -2)$. Because $\pi$ is
# uniform, the plain mean over the 3 tokens *is* the expectation under $\pi$ (no sampling noise):

# %%
logp_pi = torch.full((1, 3), -math.log(3))  # (N, T): one "sequence" holding each token once
logp_ref = torch.log_softmax(torch.tensor([[2.0, 0.0, -2.0]]), -1)  # (N, T)
every = torch.ones(1, 3, dtype=torch.bool)
kl = (logp_pi.exp() * (logp_pi - logp_ref)).sum().item()
chi2 = (logp_pi.exp() * (logp_pi - logp_ref).exp()).sum().item() - 1
print(f"hand: KL(pi||ref) {kl:.4f}   chi2(pi||ref) - KL {chi2 - kl:.4f}")
for label, module in (("B8", HYBRID["B8"]), ("fixed", grpo_fixed)):
    print(f"{label:5s} estimator {module.kl_to_reference(logp_pi, logp_ref, every).item():.4f}")

# %%
sharpness = torch.linspace(0.0, 2.5, 26)  # scale s of the reference logits (s, 0, -s)
fig, (ax_b, ax_f) = buggy_vs_fixed("expected KL estimate, pi uniform, ref = softmax(s, 0, -s)", figsize=(8, 2.6))
for ax, module, color in ((ax_b, HYBRID["B8"], BUGGY), (ax_f, grpo_fixed, FIXED)):
    ref = [torch.log_softmax(torch.tensor([[s, 0.0, -s]]), -1) for s in sharpness.tolist()]
    ax.plot(sharpness, [(logp_pi.exp() * (logp_pi - r)).sum().item() for r in ref], "--", color=REFERENCE,
            label="exact KL(pi||ref)")
    ax.plot(sharpness, [module.kl_to_reference(logp_pi, r, every).item() for r in ref], color=color,
            label="estimator")
    ax.set_xlabel("reference sharpness s")
ax_b.set_ylabel("KL")
ax_b.legend(fontsize="small")
plt.show()

# %% [markdown]
# **Log symptom.** The logged `kl` measures the wrong quantity (6.0296 instead of 1.0443 above) but stays
# $\ge 0$, so no sign check fires. **Regime.** With the default $\beta = 0.02$ the penalty is small and B8's
# run ends close to the fixed one (section 13); notebook 04 shows what the KL term does at larger $\beta$.
# **Caught by** preflight *KL estimator is unbiased for KL(pi || ref)*.
#
# > **You should know.** k3 $= r - \log r - 1$ with $r = \pi_{\text{ref}}/\pi$, on samples from $\pi$. It is
# > unbiased and always $\ge 0$; reversing $r$ keeps it $\ge 0$, which is why no sign check catches it.
#
# <details><summary>What single number check would catch B8?</summary>
#
# An exact expectation on a tiny distribution, as above: the estimator averaged over $\pi$ must equal
# $\sum_v \pi_v \log(\pi_v/\pi_{\text{ref},v})$ (1.0443 here).
# </details>

# %% [markdown]
# ## 10. B9 — groups reshaped along the wrong axis
# **Question.** Rewards are laid out prompt-major, `[p0 x G, p1 x G, ...]`. What does `view(G, B)` group?
#
# **Equation.** Row $i$ of `view(G, B)` holds elements $iB, \dots, iB + B - 1$: consecutive samples that
# straddle group boundaries whenever $B \ne G$. The baseline $\bar r$ then mixes prompts.
#
# **Tiny input.** An easy prompt and a hard one, $G = 3$ samples each. By hand, the hard prompt's best sample
# (0.4, above its own mean 0.133) must get a **positive** advantage:

# %%
rewards = torch.tensor([1.0, 0.6, 1.0, 0.4, 0.0, 0.0])  # (B*G,) = prompt 0 (easy) x 3, prompt 1 (hard) x 3
print("buggy rows (view(G, B)):", rewards.view(3, 2).tolist())
adv_b9 = HYBRID["B9"].batch_advantages(rewards, 3)  # (B*G,)
adv_fixed = grpo_fixed.batch_advantages(rewards, 3)
for label, adv in (("B9", adv_b9), ("fixed", adv_fixed)):
    print(f"{label:5s} advantages {[f'{a:+.3f}' for a in adv.tolist()]}   per-prompt mean "
          f"{[f'{m:+.3f}' for m in adv.view(2, 3).mean(1).tolist()]}")

# %%
fig, (ax_b, ax_f) = buggy_vs_fixed("advantages of [easy x 3, hard x 3]", figsize=(8, 2.6))
for ax, adv, color in ((ax_b, adv_b9, BUGGY), (ax_f, adv_fixed, FIXED)):
    ax.bar(range(6), adv, color=[color] * 3 + ["#999999"] * 3)
    ax.axhline(0, color=REFERENCE, lw=0.8)
    ax.set_xticks(range(6), [f"p{i // 3}: {r:.1f}" for i, r in enumerate(rewards.tolist())])
ax_b.set_ylabel("advantage (grey: hard prompt)")
plt.show()

# %% [markdown]
# Sample 3 (the hard prompt's 0.4) gets $-1$ under B9 and $+1.414$ when fixed: the wrong sign, so the update
# pushes *down* the best answer to the hard prompt. B9's advantages do not average to 0 per prompt (+0.333,
# -0.333). Now the trick that hides it: **when $B = G$, `view(G, B)` and `view(B, G)` produce the same rows.**

# %%
for B, G in ((8, 8), (16, 8)):
    prompt_of = torch.arange(B * G) // G  # (B*G,) which prompt each sample answers
    rows = [sorted(set(row)) for row in prompt_of.view(G, B).tolist()]
    print(f"B={B:2d} G={G}: prompts in each buggy row {rows[:3]} ...")

# %% [markdown]
# The ablation in section 13 uses $B = G = 8$, so its B9 run is *exactly* the fixed run; the default config
# ($B = 16$) mixes two prompts per row (printed above). **Log symptom.** `adv_group_mean` > 0 (advantages
# not centred per prompt). **Caught by** the health check *advantages centred per group* (whenever $B \ne G$).
#
# > **You should know.** Name the layout in the variable: `rewards.view(B, G)  # (B, G)`, and test reshapes
# > with $B \ne G$, or a transposition bug passes every test.
#
# <details><summary>Why does mixing prompts give the wrong sign rather than just noise?</summary>
#
# The mixed baseline sits between the easy prompt's mean and the hard prompt's mean, so every hard-prompt
# sample looks below average (negative advantage) and every easy-prompt sample above average, regardless of
# how good it is *for its prompt*. The update learns "easy prompts are good", which it cannot act on.
# </details>

# %% [markdown]
# ## 11. B10 — temperature used for sampling but not for training log-probs
# **Question.** The sampler draws from $\mathrm{softmax}(z/T)$. What distribution do the training log-probs
# describe?
#
# **Equation.** $\log\pi_T(v) = z_v/T - \mathrm{logsumexp}(z/T)$. Without the $/T$ in training, old, current and
# reference log-probs are those of $\mathrm{softmax}(z)$: the ratio is still 1 at the first step (all three
# share the mistake) but the importance weights refer to the wrong behaviour policy. At $T = 1$ it is no bug.
#
# **Tiny input.** One rollout (2 prompts x 4 samples) at several temperatures; `logprob_gap` =
# max |training log-prob - sampler log-prob|:

# %%
temps = [0.5, 0.8, 1.0, 1.5, 2.0]
gap = {"B10": [], "fixed": []}
for t in temps:
    for label, module in (("B10", HYBRID["B10"]), ("fixed", grpo_fixed)):
        _, stats, *_ = nb01.tiny_rollout(module, prompts_per_batch=2, group_size=4, temperature=t)
        gap[label].append(stats["logprob_gap"])
for label, values in gap.items():
    print(f"{label:5s} logprob_gap at T={temps}: {[f'{v:.4f}' for v in values]}")

# %%
fig, (ax_b, ax_f) = buggy_vs_fixed("logprob_gap of one rollout vs sampling temperature", figsize=(8, 2.4))
for ax, label, color in ((ax_b, "B10", BUGGY), (ax_f, "fixed", FIXED)):
    ax.plot(temps, gap[label], "o-", color=color)
    ax.axhline(1e-4, color=REFERENCE, ls=":", lw=1)
    ax.set_xlabel("temperature (dotted: health threshold 1e-4)")
ax_b.set_ylabel("logprob_gap")
plt.show()

# %% [markdown]
# **Log symptom.** `logprob_gap` > 1e-4 from iteration 0 whenever $T \ne 1$ (0 exactly at $T = 1$).
# **Caught by** the health check *training log-probs match the sampler*. At the default $T = 0.8$ the
# gap is 0.0685 on the tiny rollout and the reward cost is smaller than B6's (section 13); notebook 02 shows
# how it breaks the ratio.
#
# > **You should know.** Whatever transforms the logits before sampling (temperature, top-k, a mask) must
# > also be applied when the training log-probs are computed.
#
# <details><summary>Why does a temperature bug not show in ratio_first_maxdev?</summary>
#
# The ratio compares two log-probs computed by the same (wrong) function, so at the first step it is exactly
# 1. Only comparing with what the sampler actually used reveals it.
# </details>

# %% [markdown]
# ## 12. B11 — no gradient clipping
# **Question.** What bounds the size of one update when a batch produces a huge gradient?
#
# **Equation.** Clip the global norm: $g \leftarrow g \cdot \min(1, c/\|g\|)$ with $c$ = `max_grad_norm` = 1.
#
# **Tiny input.** A `Linear(4, 1)` with loss $1000 \cdot f(\mathbf 1)$. By hand: $\partial/\partial w_j = 1000$
# for the 4 weights and the bias, so $\|g\| = 1000\sqrt5 = 2236.07$.

# %%
for module in (grpo_buggy, grpo_fixed):
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    pre = module.optimizer_step(net, torch.optim.SGD(net.parameters(), lr=0.0), 1e3 * net(torch.ones(1, 4)).sum(), 1.0)
    applied = torch.cat([p.grad.flatten() for p in net.parameters()]).norm().item()
    print(f"{module.__name__:11s} pre-clip norm {pre:.2f}   applied gradient norm {applied:.2f}")

# %%
scales = [10.0**k for k in range(-2, 5)]
fig, (ax_b, ax_f) = buggy_vs_fixed("gradient norm the optimizer receives vs loss scale", figsize=(8, 2.4))
for ax, module, color in ((ax_b, grpo_buggy, BUGGY), (ax_f, grpo_fixed, FIXED)):
    applied = []
    for s in scales:
        net = torch.nn.Linear(4, 1)
        module.optimizer_step(net, torch.optim.SGD(net.parameters(), lr=0.0), s * net(torch.ones(1, 4)).sum(), 1.0)
        applied.append(torch.cat([p.grad.flatten() for p in net.parameters()]).norm().item())
    ax.loglog(scales, applied, "o-", color=color)
    ax.set_xlabel("loss scale")
ax_b.set_ylabel("applied grad norm")
plt.show()

# %% [markdown]
# **Log symptom.** `grad_norm` is logged *before* clipping in both twins, so it looks the same; the difference
# is in what the optimizer receives. With Adam (which divides each step by a running gradient scale) and a
# pre-clip norm above 1 in only a few iterations (section 13 counts them for the fixed run), B11's run ends
# level with the fixed one here (0.680 vs 0.679); notebook 04 shows the spikes where clipping matters.
# **Caught by** preflight *gradients clipped to max_grad_norm*.
#
# > **You should know.** Clipping caps the size of one update when a rare batch (huge advantages, a near-zero
# > old probability) produces a huge gradient; it is a guard, not a regulariser.
#
# <details><summary>Why log the pre-clip norm rather than the post-clip one?</summary>
#
# The post-clip norm is at most `max_grad_norm` by construction and tells you nothing; the pre-clip norm shows
# how often and by how much clipping acts, and spikes in it precede instabilities.
# </details>

# %% [markdown]
# ## 13. Ablation: which single bug costs reward here?
# Thirteen short runs on EchoTask with seed 0: the fixed trainer, the buggy one, and the fixed one with each
# single bug switched back on (`workbook.catalog.hybrid`). To fit the notebook's time budget they use
# `steps=30, prompts_per_batch=8` (the default is 80 steps x 16 prompts); the final reward is the mean of the
# last 10 iterations, as in `grpo_fixed.summarize_run`. The table also lists which of
# `grpo_fixed.HEALTH_CHECKS` fail during each run, and at which iteration they first fail.

# %%
ABLATION = dict(steps=30, prompts_per_batch=8)
started, started_cpu = time.perf_counter(), time.process_time()
runs = nb01.ablation(seed=0, **ABLATION)  # label -> history (list of stats dicts)
ablation_seconds, ablation_cpu = time.perf_counter() - started, time.process_time() - started_cpu
cfg_ablation = grpo_fixed.make_config(**ABLATION)
final = {label: nb01.final_reward(history) for label, history in runs.items()}

# %%
# NBVAL_IGNORE_OUTPUT
print(f"13 runs took {ablation_seconds:.1f} s wall, {ablation_cpu:.1f} s CPU on this 2-core CPU machine "
      "(wall time grows when the machine is shared)")

# %%
print(f"{'run':6s} {'final':>6s} {'skipped':>7s}  health checks that fire (first iteration)")
for label, history in runs.items():
    fired = nb01.first_failures(history, cfg_ablation)
    skipped = sum(s["nonfinite_steps"] for s in history)
    print(f"{label:6s} {final[label]:6.3f} {skipped:7d}  " + (", ".join(f"{k} ({i})" for k, i in fired.items()) or "-"))
print(f"\nfirst-iteration reward (random policy) {runs['fixed'][0]['reward']:.3f}")
clipped = sum(s["grad_norm"] > cfg_ablation.max_grad_norm for s in runs["fixed"])
print(f"fixed run: iterations whose max pre-clip grad norm exceeded max_grad_norm = {cfg_ablation.max_grad_norm}: "
      f"{clipped} of {cfg_ablation.steps}")
print(f"B9 run identical to fixed run: {[s['reward'] for s in runs['B9']] == [s['reward'] for s in runs['fixed']]}")

# %%
fig, (ax_bar, ax_curve) = plt.subplots(1, 2, figsize=(11, 3.2), layout="constrained", width_ratios=[3, 2])
nb01.ablation_bars(ax_bar, final, runs["fixed"][0]["reward"])
ax_bar.set_title(f"final reward, seed 0, {ABLATION}")
curves(ax_curve, {k: runs[k] for k in ("fixed", "buggy", "B1", "B6")}, "reward",
       colors={"fixed": FIXED, "buggy": BUGGY, "B1": "#9467bd", "B6": "#ff7f0e"}, smooth=5)
ax_curve.set_title("reward per iteration (5-iteration mean)")
plt.show()

# %% [markdown]
# What the table shows (one seed, one short run, so treat gaps of a few hundredths as noise):
# - **The fixed trainer clearly learns at this size**: from 0.135 at iteration 0 to a final 0.679, still rising
#   at iteration 30. The fully buggy trainer ends at 0.085, below where the fixed run started.
# - **Single bugs that cost reward here**: B1 (0.363), B4 (0.448), B6 (0.472), B2 (0.473, with 52 of its 120
#   inner steps skipped for a NaN loss) and B3 (0.539). B10 (0.599) and B8 (0.665) cost less; one seed cannot
#   say how much of those two gaps is noise.
# - **Bugs invisible in the reward here**: B5 and B9 end at 0.679 like the fixed run, B11 at 0.680 and B7 at
#   0.686 (a hair above the fixed run: noise). B9's run is *identical* to the fixed one because $B = G = 8$
#   (section 10). B5 and B7 never meet a non-finite value in this trainer (0 skipped steps). The fixed run's
#   pre-clip gradient norm exceeded 1 in only 2 of 30 iterations, so clipping (B11) rarely acts. Their
#   regimes: the tiny inputs of sections 6, 8 and 10 here, notebook 02 (the ratio: B3, B10) and notebook 04
#   (KL penalty B8, gradient clipping B11).
# - **How each bug is caught**: B3, B6 and B10 fail a health check from iteration 0 and no preflight probe;
#   B2 fails *advantages finite* from iteration 9 (its first constant group) and a probe; B1, B4, B5, B7, B8
#   and B11 fail no health check here, only their preflight probe (section 1.3). B9 at $B = G$ is caught by
#   nothing: only a test with $B \ne G$ exposes it.
#
# > **You should know.** A single-bug ablation answers "which fix buys reward on *this* task", not "which
# > bugs matter": several bugs here cost nothing on a 6-token echo task yet break with large logits, half
# > precision, $B \ne G$ or padded batches (sections 6, 8, 10). Catch them with tiny inputs and invariants,
# > not with the reward curve.

# %% [markdown]
# ## 14. Self-check
# 1. A colleague says "the sampler is fine, temperature sweeps just don't change anything on this task". What
#    do you test, with which input?
# 2. Your rewards are binary and the policy is getting good. Why might training *slow down* with B2 but not
#    with the fix?
# 3. `ratio_last_maxdev` is 0.0000 for the whole run. Name the bug and the one-line fix.
# 4. Why is B4 invisible in a unit test that only uses $A = 1$?
# 5. Your padded batch gives loss NaN but every real token's log-prob is finite. What do you look at?
# 6. Why does `logprob_gap` catch both B6 and B10, while `ratio_first_maxdev` catches neither?
# 7. Why can't a sign check ($\mathrm{KL} \ge 0$) catch B8?
# 8. Your reshape tests pass with B = G = 4. What should you change in the test?
#
# <details><summary>Answers</summary>
#
# 1. Sampling frequencies of 20000 draws from 5 logits against `softmax(logits / T)` at two temperatures
#    (section 2): raw-logit weights are invariant to $T$ and never draw the arg-min token.
# 2. Constant groups (all 0 or all 1) become common as the policy improves; without $\epsilon$ each gives NaN
#    advantages, the minibatch loss is NaN and its step is skipped (`nonfinite_steps`).
# 3. B3: old log-probs recomputed inside the inner loop. Use the log-probs cached at rollout,
#    `old_logprobs = batch["old_logprobs"][idx]`.
# 4. With $A = 1$, $\mathrm{clip}(\rho A) = \mathrm{clip}(\rho) A$; test $A = 2$ and $A = -1$ (section 5).
# 5. The masked positions: `values * mask` turns a masked $-\infty$ or NaN into NaN; select with `torch.where`
#    (section 6). And check for a fully masked row or minibatch (0/0).
# 6. Both make the training log-prob differ from the sampler's; the first-step ratio compares two training
#    log-probs computed by the same wrong function, so it stays 1.
# 7. Both the correct and the reversed k3 are of the form $e^x - x - 1 \ge 0$; only an exact expectation on a
#    tiny distribution tells them apart (section 9).
# 8. Use $B \ne G$ (e.g. B = 2, G = 3): with $B = G$, `view(G, B)` and `view(B, G)` give the same rows.
# </details>
