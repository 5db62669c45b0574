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
# # 04 — The four stabilisers: clipping, KL to a reference, reward normalisation, gradient clipping
#
# **The interview question** (seed 000, follow-up 4). *"Explain the roles of clipping, a
# reference-policy KL penalty, reward normalisation and gradient clipping."*
#
# Anyone can recite "clipping keeps the update close". After this notebook you can defend each
# stabiliser with numbers you produced yourself:
#
# 1. **Clipping**: draw the clipped surrogate and its gradient against the ratio for A > 0 and A < 0,
#    say where the gradient is zero and why the `min` with the unclipped term is there; spot B4
#    (`clamp(ratio * A)`) from the picture.
# 2. **KL to a frozen reference**: the k1, k2, k3 estimators (bias, variance, sign) measured against
#    the exact KL; why k3; what β buys and costs; what a flipped sign does; why the anchor is the
#    frozen reference and not the old policy. B8 (log-ratio reversed) is a biased estimator.
# 3. **Reward normalisation**: how the reward's scale changes the step with and without dividing by
#    the group std, what Adam hides and what it does not; B2 (no eps) at tiny reward scales.
# 4. **Gradient clipping**: grad-norm traces with and without (B11), where it matters and where it
#    does not, and why it still matters under Adam.
#
# Everything below calls the twins' own functions (`grpo_loss`, `kl_to_reference`, `group_advantage`,
# `train`). `workbook/nb04.py` holds the small helpers: 1-token autograd probes, estimator samples,
# and `instrumented_run`, a cached `train()` that also records the inner steps and the exact KL.

# %%
import logging
import math
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import grpo_buggy
import grpo_fixed
import workbook  # noqa: F401  (one torch thread)
from workbook import nb04
from workbook.plots import BUGGY, FIXED, REFERENCE, buggy_vs_fixed
from workbook.widgets import live_figure, set_value, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids log health warnings; we print what we need
TWINS = {"buggy": grpo_buggy, "fixed": grpo_fixed}
SHORT = dict(steps=30, prompts_per_batch=8)  # every training run here: 30 iterations of 8 prompts x 8 samples
POS, NEG = "tab:green", "tab:purple"  # A > 0, A < 0
started = time.perf_counter()

# %% [markdown]
# ## 1. Clipping
#
# **Question.** What does the clipped surrogate look like as a function of the ratio, for a good token
# (A > 0) and a bad one (A < 0)? Where does its gradient vanish, and why is there a `min`?
#
# **Key equation** (one token, ρ = π(a)/π_old(a), clip radius ε):
#
# $$J(\rho) = \min\big(\rho A,\ \mathrm{clip}(\rho, 1-\varepsilon, 1+\varepsilon)\,A\big),\qquad
# \frac{\partial J}{\partial \log\pi} = \begin{cases}\rho A & \text{the unclipped term is the min}\\
# 0 & \text{the clipped (flat) term is the min}\end{cases}$$
#
# since ∂ρ/∂log π = ρ. The loss is −J averaged over tokens. For A > 0 the flat piece is ρ > 1+ε
# (no reward for pushing a good token further); for A < 0 it is ρ < 1−ε (no reward for pushing a bad
# token further down). B4 clamps the *product*: `clamp(ratio * A, 1-ε, 1+ε)`, a window on the value
# of ρA instead of on ρ.
#
# **Tiny input.** One sequence of one token with log π_old = 0 and log π = log ρ, so the loss *is*
# −J(ρ); autograd gives ∂J/∂log π. |A| = 1.5, ε = 0.2.

# %%
RHOS = [0.5, 0.9, 1.0, 1.1, 1.5, 3.0]
print(f"{'A':>5} {'rho':>5} | {'J buggy':>8} {'dJ buggy':>9} | {'J fixed':>8} {'dJ fixed':>9}")
for adv in (1.5, -1.5):
    for rho in RHOS:
        j_b, g_b = nb04.surrogate_and_grad(grpo_buggy.grpo_loss, rho, adv, clip=0.2)
        j_f, g_f = nb04.surrogate_and_grad(grpo_fixed.grpo_loss, rho, adv, clip=0.2)
        print(f"{adv:+5.1f} {rho:5.2f} | {j_b:+8.4f} {g_b:+9.4f} | {j_f:+8.4f} {g_f:+9.4f}")

# %% [markdown]
# Read the fixed columns first: for A = +1.5, ∂J/∂log π = ρA up to ρ = 1.1 and exactly 0 at ρ = 1.5
# and 3.0 (past 1+ε); for A = −1.5 it is 0 at ρ = 0.5 (below 1−ε) and ρA everywhere else, **including
# ρ = 3.0, where it is −4.5**: nothing bounds the gradient of a bad token whose probability went *up*.
#
# The buggy columns show the two faces of B4. For A = +1.5 the product ρA = 1.5 already exceeds
# 1+ε = 1.2 at ρ = 1, so J is flat at 1.2 and the gradient is 0 **at ρ = 1**: a token with a large
# advantage gets no gradient at all. For A = −1.5, `clamp(ρA, 0.8, 1.2)` is always 0.8, larger than
# ρA < 0, so the min always picks ρA: bad tokens are never clipped.
#
# **Why the min.** Drop it and use the clipped term alone; the next cell compares.

# %%
print(f"{'A':>5} {'rho':>5} | {'dJ with min':>11} {'dJ clip only':>12}")
for adv, rho in ((1.5, 0.5), (1.5, 1.5), (-1.5, 0.5), (-1.5, 1.5)):
    g_min = nb04.surrogate_and_grad(grpo_fixed.grpo_loss, rho, adv, clip=0.2)[1]
    g_clip = nb04.surrogate_and_grad(nb04.clip_only_loss, rho, adv, clip=0.2)[1]
    print(f"{adv:+5.1f} {rho:5.2f} | {g_min:+11.4f} {g_clip:+12.4f}")

# %% [markdown]
# Clip-only kills the gradient on *both* sides of the window. That is right when the ratio moved in
# the helpful direction (A > 0, ρ = 1.5; A < 0, ρ = 0.5: both 0 in both columns) but wrong when it
# moved the harmful way: a good token that became *less* likely (A = +1.5, ρ = 0.5) or a bad token
# that became *more* likely (A = −1.5, ρ = 1.5) must still be pulled back, and only the min does that
# (+0.75 and −2.25). The min makes J a pessimistic lower bound on the unclipped objective: clipping
# removes the incentive to overshoot, never the correction of a mistake.
#
# **Slider.** Clip radius ε and advantage size |A|; solid lines are J(ρ), dashed lines ∂J/∂log π, the
# grey band is [1−ε, 1+ε]. On the unclipped branch J and its gradient are the same number ρA (because
# ∂ρ/∂log π = ρ), so the dashed line lies on the solid one; they part where the flat piece takes over
# (J constant, gradient 0). Each redraw is 4 × 111 autograd calls on one token.

# %%
RATIO_GRID = [0.25 + 0.025 * i for i in range(111)]  # 0.25 .. 3.0


def draw_clipping(clip, adv_size):
    fig, axes = buggy_vs_fixed(f"J (solid) and dJ/dlog pi (dashed); clip {clip:.2f}, |A| {adv_size:.2f}",
                               figsize=(9.0, 3.4))
    zeros = {}
    for ax, (name, twin) in zip(axes, TWINS.items(), strict=True):
        ax.axvspan(1 - clip, 1 + clip, color="0.92")
        for adv, color in ((adv_size, POS), (-adv_size, NEG)):
            J, dJ = nb04.surrogate_curves(twin.grpo_loss, RATIO_GRID, adv, clip)
            ax.plot(RATIO_GRID, J, color=color, label=f"A = {adv:+.2f}")
            ax.plot(RATIO_GRID, dJ, color=color, ls="--")
            zeros[f"{name} A{'>' if adv > 0 else '<'}0"] = nb04.zero_grad_interval(RATIO_GRID, dJ)
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_xlabel("ratio rho")
        ax.legend(fontsize="small")
    plt.show()
    return zeros


def show_zeros(zeros):
    for key, interval in zeros.items():
        where = "never" if interval is None else f"rho in [{interval[0]:.4f}, {interval[1]:.4f}]"
        print(f"{key:9s} gradient zero for {where}")


# %%
# NBVAL_IGNORE_OUTPUT
w_clip = live_figure(draw_clipping, height="400px",
                     clip=slider(0.2, 0.05, 0.5, 0.05, "clip"), adv_size=slider(1.5, 0.25, 3.0, 0.25, "|A|"))
display(w_clip)

# %%
show_zeros(set_value(w_clip, "clip", 0.3))  # wider window
show_zeros(set_value(w_clip, "|A|", 0.5))  # small advantage: buggy A>0 now clips late
plt.close("all")

# %% [markdown]
# With ε = 0.3 the fixed twin's zero-gradient sets are ρ > 1.3 (A > 0) and ρ < 0.7 (A < 0),
# whatever |A| is. The buggy twin's window moves with |A|: the A > 0 flat region starts at
# ρ = (1+ε)/|A| (0.867 for |A| = 1.5, 2.6 for |A| = 0.5), and for A < 0 the gradient is never zero.
# (The printed bounds are the first points of the 0.025-step grid inside each set.)
#
# > **You should know.**
# > - Fixed clipping has zero gradient exactly where the ratio already moved *in the direction the
# >   advantage wants* beyond the window: ρ > 1+ε for A > 0, ρ < 1−ε for A < 0. Everywhere else the
# >   gradient is ρA.
# > - The min keeps the gradient when the ratio moved the wrong way: J is a pessimistic bound.
# > - The window does **not** bound ρ itself: it only removes this token's incentive to go further,
# >   while updates driven by other tokens (shared parameters) can still move it. And for A < 0 with
# >   ρ > 1+ε the gradient ρA grows without limit (−4.5 at ρ = 3 above). "Dual-clip" PPO caps that
# >   branch; here gradient clipping (section 4) is the backstop.
# > - B4 signature: with |A| > 1+ε, a good token's gradient is zero at ρ = 1 (no learning from the
# >   strongest signals); bad tokens are never clipped.
#
# <details><summary>Question: at the first inner step ρ = 1 for every token. Does clipping do anything
# there? (Answer)</summary>
#
# No: ρ = 1 is inside the window, so the fixed loss is the plain policy gradient ρA = A. Clipping only
# acts from the second inner step on, once the policy has moved (notebook 02). With B4 it does act at
# ρ = 1, wrongly: every token with A > 1+ε gets zero gradient.
# </details>

# %% [markdown]
# ## 2. The KL penalty to a frozen reference
#
# ### 2a. Three estimators of KL(π ‖ π_ref) from samples
#
# **Question.** The trainer cannot sum over the vocabulary for every position of every sequence, so it
# estimates KL(π ‖ π_ref) = E_{x∼π}[log π(x) − log π_ref(x)] from the sampled tokens. Which
# per-token estimator, and why?
#
# **Key equations** (Schulman 2020, "Approximating KL divergence"), with r = π_ref(x)/π(x), x ∼ π:
#
# | estimator | formula | E over x∼π | sign |
# |---|---|---|---|
# | k1 | −log r | KL (unbiased) | negative whenever π_ref(x) > π(x) |
# | k2 | ½ (log r)² | ≈ KL for π ≈ π_ref (biased) | ≥ 0 |
# | k3 | r − 1 − log r | KL (unbiased, because E[r] = 1) | ≥ 0 (since log r ≤ r − 1) |
# | B8: k3 reversed | 1/r − 1 + log r | χ²(π ‖ π_ref) − KL (biased) | ≥ 0 |
#
# **Tiny input.** A 5-token vocabulary, one reference and four policies you can read: a small
# perturbation ("near"), the uniform distribution, a policy that learned to put 0.9 on the
# reference's *rarest* token ("learned"), and one that collapsed onto the reference's top token. The
# exact KL is a 5-term sum; each estimator is averaged over 2000 samples from π.

# %%
REF = torch.tensor([0.40, 0.25, 0.20, 0.10, 0.05]).log()  # (V,) log pi_ref
PAIRS = {  # name -> (V,) log pi
    "near": torch.tensor([0.38, 0.26, 0.21, 0.10, 0.05]).log(),
    "uniform": torch.tensor([0.20, 0.20, 0.20, 0.20, 0.20]).log(),
    "learned": torch.tensor([0.02, 0.02, 0.03, 0.03, 0.90]).log(),
    "collapsed": torch.tensor([0.96, 0.01, 0.01, 0.01, 0.01]).log(),
}
N_SAMPLES = 2000
print(f"{'pair':9s} {'KL exact':>8} | {'estimator':16s} {'mean':>8} {'std':>8} {'bias':>8} {'P(<0)':>6}")
for name, logp in PAIRS.items():
    kl = nb04.kl_exact(logp, REF)
    _, estimates = nb04.kl_estimator_samples(logp, REF, N_SAMPLES, torch.Generator().manual_seed(0))
    for est_name, values in estimates.items():
        mean, std = values.mean().item(), values.std().item()
        frac_neg = (values < 0).double().mean().item()
        print(f"{name:9s} {kl:8.4f} | {est_name:16s} {mean:8.4f} {std:8.4f} {mean - kl:+8.4f} {frac_neg:6.3f}")

# %% [markdown]
# The standard error of each mean is std/√2000 = std/44.7, so a bias much larger than that is real.
# What the table says:
#
# - **k1** is unbiased up to that noise, but on the near pair its std is 0.0435 for a KL of 0.0010,
#   and it is negative on 38% (near) and 40% (uniform) of samples: a per-token penalty that *rewards*
#   a large share of the tokens for moving away.
# - **k2** is never negative and has a small spread, but it is biased once π is far from π_ref: 4.0220
#   for an exact 2.3979 (learned), 0.5131 for 0.7392 (collapsed).
# - **k3** is never negative and unbiased, with a std as small as k2's near the reference (0.0005 on
#   the near pair, about 90 times less than k1). Far from the reference it loses that edge: r = π_ref/π is
#   large on tokens π rarely emits, so the samples are heavy-tailed (std 2.4282 on the learned pair,
#   above k1's 1.4979).
# - **B8** (k3 reversed) estimates χ² − KL instead: 12.8863 for the learned policy whose KL is 2.3979,
#   precisely the case the penalty exists for; the error can go either way (0.5721 for 0.7392 on the
#   collapsed pair).
#
# The twins' `kl_to_reference` on the same samples should reproduce the k3 and B8 means exactly.

# %%
for name, logp in PAIRS.items():
    tokens, estimates = nb04.kl_estimator_samples(logp, REF, N_SAMPLES, torch.Generator().manual_seed(0))
    args = (logp[tokens][None], REF[tokens][None], torch.ones(1, N_SAMPLES, dtype=torch.bool))  # (1, S) each
    fixed, buggy = grpo_fixed.kl_to_reference(*args).item(), grpo_buggy.kl_to_reference(*args).item()
    print(f"{name:9s} fixed {fixed:8.4f} (k3 {estimates['k3'].mean().item():8.4f})   buggy {buggy:8.4f} "
          f"(reversed {estimates['k3 reversed (B8)'].mean().item():8.4f}; exact chi2 - KL "
          f"{nb04.chi2(logp, REF) - nb04.kl_exact(logp, REF):8.4f})")

# %% [markdown]
# Along a path from the reference to the "learned" policy (geometric interpolation
# π_t ∝ π_ref^(1−t) π_learned^t), each twin's estimate against the exact KL:

# %%
path = [i / 10 for i in range(11)]
exact, estimate = [], {"buggy": [], "fixed": []}
for t in path:
    logp = torch.log_softmax((1 - t) * REF + t * PAIRS["learned"], -1)  # (V,)
    tokens, _ = nb04.kl_estimator_samples(logp, REF, N_SAMPLES, torch.Generator().manual_seed(0))
    args = (logp[tokens][None], REF[tokens][None], torch.ones(1, N_SAMPLES, dtype=torch.bool))
    exact.append(nb04.kl_exact(logp, REF))
    for name, twin in TWINS.items():
        estimate[name].append(twin.kl_to_reference(*args).item())
fig, axes = buggy_vs_fixed("kl_to_reference on 2000 samples vs the exact KL(pi || pi_ref)")
for ax, (name, color) in zip(axes, (("buggy", BUGGY), ("fixed", FIXED)), strict=True):
    ax.plot(path, exact, color=REFERENCE, label="exact KL")
    ax.plot(path, estimate[name], "o-", color=color, label=f"{name} estimate")
    ax.set_xlabel("t (0 = reference, 1 = learned)")
    ax.legend(fontsize="small")
plt.show()
print(f"t = 1.0: exact {exact[-1]:.4f}  buggy {estimate['buggy'][-1]:.4f}  fixed {estimate['fixed'][-1]:.4f}")

# %% [markdown]
# ### 2b. Why k3, and one caveat about its gradient
#
# k3 wins on value: unbiased, never negative, and low variance where the trainer lives (π close to
# π_ref). But the trainer *differentiates* the estimate, with the sampled tokens held fixed. The
# expected gradient of such a "pathwise" loss is not automatically the gradient of KL(π ‖ π_ref).
# Exactly, on the 5-token vocabulary (weights π(x) detached, gradients with respect to π's logits):

# %%
print(f"{'pair':9s} {'|E grad k1|':>11} {'|E grad k2 - grad KL(pi||ref)|':>31} "
      f"{'|E grad k3 - grad KL(ref||pi)|':>31} {'|grad KL(pi||ref)|':>19} {'|difference|':>13}")
for name, logp in PAIRS.items():
    g = nb04.pathwise_kl_grads(logp, REF)
    print(f"{name:9s} {g['E[grad k1]'].norm():11.2e} {(g['E[grad k2]'] - g['grad KL(pi||ref)']).norm():31.2e} "
          f"{(g['E[grad k3]'] - g['grad KL(ref||pi)']).norm():31.2e} {g['grad KL(pi||ref)'].norm():19.4f} "
          f"{(g['grad KL(pi||ref)'] - g['grad KL(ref||pi)']).norm():13.4f}")

# %% [markdown]
# Used as a loss on samples, k1 has zero expected gradient (E_π[∇log π] = 0; values of 1e-9 to 1e-7 are
# float32 rounding), k2 gives exactly ∇KL(π ‖ π_ref), and k3 gives exactly ∇KL(π_ref ‖ π), the
# *other* direction. Near the reference the two gradients nearly coincide (difference 0.0002 against a
# norm of 0.0244 on the near pair), which is why k3 works as a penalty in practice; far away they
# differ by as much as the gradient itself (learned: difference 0.5098, norm 0.4961). So "k3 is
# unbiased" is a statement about the logged *value*; the penalty's gradient is that of KL(π_ref ‖ π).
#
# > **You should know.**
# > - k1 unbiased but noisy and often negative; k2 low variance but biased; k3 unbiased, ≥ 0, low
# >   variance near the reference (because E_π[r] = 1 makes the added r − 1 a zero-mean control variate).
# > - B8 reverses the log-ratio: it estimates χ² − KL, right near the reference and far too large
# >   once the policy has learned something the reference found unlikely.
# > - As a loss, k3's gradient is that of KL(π_ref ‖ π); it matches ∇KL(π ‖ π_ref) to first order.
#
# <details><summary>Question: a colleague logs the mean of k1 and sees a negative KL. Bug?
# (Answer)</summary>
#
# Not necessarily: k1 = log π − log π_ref is negative on every token the reference likes more than
# the policy, and its batch mean is a noisy estimate of a small positive number. A negative *k3* mean
# would be a bug (k3 ≥ 0 term by term).
# </details>

# %% [markdown]
# ### 2c. What β buys and what it costs
#
# **Question.** The loss is −J + β·KL. What happens to reward and KL as β grows?
#
# Four short runs of the fixed twin (β ∈ {0, 0.02, 0.1, 0.5}, 30 iterations of 8 prompts × 8 samples,
# seed 0) are computed once; the slider only selects. The KL plotted is the **exact** per-token
# KL(π ‖ π_ref) after each update (a sum over the vocabulary at every generated position), not the
# noisy k3 estimate the trainer logs.

# %%
BETAS = {"0": 0.0, "0.02": 0.02, "0.1": 0.1, "0.5": 0.5}
beta_runs = {label: nb04.instrumented_run(beta=beta, **SHORT) for label, beta in BETAS.items()}
print(f"{'beta':>5} | {'reward (last 10)':>16} {'exact KL (last 10)':>18} {'entropy (last)':>14}")
for label, run in beta_runs.items():
    print(f"{label:>5} | {nb04.tail_mean(run['clean_reward']):16.3f} {nb04.tail_mean(run['exact_kl']):18.3f} "
          f"{run['history'][-1]['entropy']:14.3f}")


# %%
def draw_beta(beta):
    fig, (ax_r, ax_k) = plt.subplots(1, 2, figsize=(9.0, 3.2), layout="constrained")
    for label, run in beta_runs.items():
        style = dict(color=FIXED, lw=2.2) if label == beta else dict(color="0.75", lw=1)
        ax_r.plot(run["clean_reward"], **style)
        ax_k.plot(run["exact_kl"], label=f"beta {label}", **style)
    ax_r.set(xlabel="iteration", ylabel="reward", title=f"reward, beta = {beta}")
    ax_k.set(xlabel="iteration", ylabel="exact KL(pi || pi_ref) per token", title="KL to the reference")
    ax_k.legend(fontsize="small")
    plt.show()
    run = beta_runs[beta]
    return nb04.tail_mean(run["clean_reward"]), nb04.tail_mean(run["exact_kl"])


# %%
# NBVAL_IGNORE_OUTPUT
w_beta = live_figure(draw_beta, beta=nb04.choice({k: k for k in BETAS}, "0.1", "beta"))
display(w_beta)

# %%
for label in ("0.5", "0"):
    reward, kl = set_value(w_beta, "beta", label)
    print(f"beta {label:>4}: reward {reward:.3f}  exact KL {kl:.3f}")
plt.close("all")

# %% [markdown]
# β = 0.5 holds the policy to an exact KL of 0.294 nats per token and pays for it: reward 0.368 against
# 0.610 to 0.679 for the small βs. β = 0.1 cuts the KL from 1.408 (β = 0) to 0.987 at a similar reward.
# Between 0 and 0.02 (reward 0.610 vs 0.679, KL 1.408 vs 1.263) this is one seed of 30 iterations: do
# not read much into it. On this easy task the penalty's job is to limit drift, not to help the reward.
#
# ### 2d. A flipped sign
#
# `loss = pg_loss - beta * kl` (or a k1 penalty written as log π_ref − log π) turns the
# anchor into a repeller: the policy is *rewarded* for moving away from the reference. The tiny local
# variant is `beta=-0.1` in the config; same seed and settings as above.

# %%
flip_runs = {"+0.1": beta_runs["0.1"], "0": beta_runs["0"], "-0.1": nb04.instrumented_run(beta=-0.1, **SHORT)}
print(f"{'beta':>5} | {'reward (last 10)':>16} {'exact KL at it 9':>16} {'exact KL (last 10)':>18} "
      f"{'entropy (last)':>14} {'health warnings':>15}")
for label, run in flip_runs.items():
    warnings = sum(bool(s["health"]) for s in run["history"])  # iterations with a failed health check
    print(f"{label:>5} | {nb04.tail_mean(run['clean_reward']):16.3f} {run['exact_kl'][9]:16.3f} "
          f"{nb04.tail_mean(run['exact_kl']):18.3f} {run['history'][-1]['entropy']:14.3f} {warnings:15d}")
fig, (ax_k, ax_e) = plt.subplots(1, 2, figsize=(9.0, 3.2), layout="constrained")
for (label, run), color in zip(flip_runs.items(), (FIXED, REFERENCE, BUGGY), strict=True):
    ax_k.plot(run["exact_kl"], color=color, label=f"beta {label}")
    ax_e.plot([s["entropy"] for s in run["history"]], color=color, label=f"beta {label}")
ax_k.set(xlabel="iteration", ylabel="exact KL(pi || pi_ref)", title="KL runs away with the sign flipped")
ax_e.set(xlabel="iteration", ylabel="sampling entropy (nats)", title="entropy collapses")
ax_k.legend(fontsize="small")
plt.show()

# %% [markdown]
# With the sign flipped the KL climbs faster than with no penalty at all (1.369 vs 0.910 nats at
# iteration 9), the sampling entropy collapses to 0.047 and the reward ends at 0.435 instead of 0.610:
# the policy becomes confidently different from the reference rather than good. The KL levels off
# near 1.7; it could not grow without bound anyway, since KL(π ‖ π_ref) ≤ max_x log(1/π_ref(x)) at each
# position, and the vocabulary has 6 tokens. No health
# check fires (the last column): the KL *is* positive, just growing for the wrong reason. The
# signature is KL rising faster than in a β = 0 run.
#
# ### 2e. Why the reference, and not the old policy
#
# **Question.** PPO already keeps π close to π_old through the ratio. Why not penalise KL(π ‖ π_old)?
#
# Because π_old is reset to the current policy at every rollout. The same β = 0.02 run, inner step by
# inner step (4 per iteration): the k3 estimate of KL(π ‖ π_old), from the logged ratios
# (mean of 1/ρ − 1 + log ρ), and the trainer's own k3 estimate of KL(π ‖ π_ref).

# %%
run = beta_runs["0.02"]
kl_old = [step["kl_old"] for it in run["inner"] for step in it]  # (iterations * inner steps,)
kl_ref = [step["kl_ref"] for it in run["inner"] for step in it]
first_step_old = [it[0]["kl_old"] for it in run["inner"]]
print(f"inner steps per iteration: {len(run['inner'][0])}, iterations: {len(run['inner'])}")
print(f"KL to pi_old at the first inner step, max over iterations: {max(first_step_old):.6f}")
print(f"KL to pi_old at the last inner step, mean over iterations: "
      f"{sum(it[-1]['kl_old'] for it in run['inner']) / len(run['inner']):.4f}")
print("KL to pi_ref at iterations 0, 10, 20, 29: "
      + "  ".join(f"{run['inner'][i][0]['kl_ref']:.4f}" for i in (0, 10, 20, 29)))
fig, ax = plt.subplots(figsize=(9.0, 3.0), layout="constrained")
ax.plot(kl_ref, color=FIXED, label="k3 to pi_ref (frozen at init)")
ax.plot(kl_old, color=BUGGY, label="k3 to pi_old (reset every rollout)")
ax.set(xlabel="inner step (4 per iteration)", ylabel="KL estimate per token")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# KL(π ‖ π_old) is exactly 0 at the first inner step of every iteration (π *is* π_old there) and
# averages 0.0353 at the last inner step before it is reset, while KL(π ‖ π_ref) accumulates the drift
# of all iterations: 0.0000 at the first step, 0.6815 by iteration 10, 0.8753 by iteration 29 (the
# trace is noisy: it is k3 on one minibatch). A penalty on KL to π_old would also have zero
# *gradient* at the first inner step (k3's gradient is 1 − r = 0 at r = 1), and it can never see the
# sum of many small, individually acceptable steps. That accumulated drift, away from the model you
# started from, is what the reference anchor limits.
#
# > **You should know.**
# > - β trades reward for staying close: here β = 0.5 capped exact KL at 0.294 nats/token and cost
# >   0.24 to 0.31 reward against β ≤ 0.02 in 30 iterations.
# > - A flipped sign does not crash anything: KL rises faster than with no penalty, entropy collapses,
# >   reward falls. Compare against a β = 0 run to see it.
# > - The ratio clip bounds one iteration's step against π_old; the KL anchor bounds the total drift
# >   against π_ref. π_old cannot do the second job: KL to it restarts from 0 every rollout.
#
# <details><summary>Question: your KL curve is flat at exactly 0.0000 for the whole run while the reward
# rises. What are the likely causes? (Answer)</summary>
#
# The "reference" is the policy itself: the same module (no `deepcopy`), or ref log-probs computed
# with `policy` instead of `ref_policy` inside the inner loop. A reference re-copied from the policy at
# every rollout would not give a flat 0 but the red sawtooth above: π_old in disguise.
# </details>

# %% [markdown]
# ## 3. Reward normalisation
#
# ### 3a. The step size follows the reward's units unless you divide by the std
#
# **Question.** Multiply every reward by s. What happens to the update?
#
# **Key equation.** Without normalisation A_i = r_i − mean(r) scales with s, and so does the policy
# gradient: ∇(−J) ∝ s. With A_i = (r_i − mean r)/(std r + ε) the factor s cancels (as long as
# s·std ≫ ε). Measured on one rollout batch (8 prompts × 8 samples, fresh policy): the norm of the
# gradient of the clipped surrogate.

# %%
print(f"{'scale s':>8} | {'grad norm, A = r - mean':>23} {'grad norm, normalised':>21}")
for scale in (0.01, 1.0, 100.0):
    raw = nb04.pg_grad_norm(nb04.centred_advantage, scale)
    normalised = nb04.pg_grad_norm(grpo_fixed.group_advantage, scale)
    print(f"{scale:8.2f} | {raw:23.4e} {normalised:21.4e}")

# %% [markdown]
# With plain SGD that would be the step: 100× the rewards, 100× the step. The twins use **Adam**, which
# divides each parameter's gradient by a running RMS, so a constant overall scale mostly cancels. What
# Adam does *not* cancel is the balance inside the loss: −J scales with s, β·KL does not, so without
# normalisation the effective penalty weight is β/s (in normalised-advantage units, β/(s·std r)).
#
# Six short runs (β = 0.02) with rewards scaled by s ∈ {0.01, 1, 100}, with and without normalisation,
# computed once; the slider picks s. The reward plotted is the clean echo reward (before scaling).

# %%
SCALES = {"0.01": 0.01, "1": 1.0, "100": 100.0}
scale_runs = {(label, norm): nb04.instrumented_run(reward_scale=s, normalise=norm, beta=0.02, **SHORT)
              for label, s in SCALES.items() for norm in (False, True)}
print(f"{'scale':>6} {'normalised':>10} | {'reward (last 10)':>16} {'exact KL (last 10)':>18} {'max grad norm':>13}")
for (label, norm), run in scale_runs.items():
    print(f"{label:>6} {norm!s:>10} | {nb04.tail_mean(run['clean_reward']):16.3f} "
          f"{nb04.tail_mean(run['exact_kl']):18.3f} {max(s['grad_norm'] for s in run['history']):13.3f}")


# %%
def draw_scale(scale):
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.2), sharey=True, layout="constrained")
    for ax, norm in zip(axes, (False, True), strict=True):
        ref_run, run = scale_runs[("1", norm)], scale_runs[(scale, norm)]
        ax.plot(ref_run["clean_reward"], color="0.75", label="reward, s = 1")
        ax.plot(run["clean_reward"], color=FIXED if norm else BUGGY, lw=2, label=f"reward, s = {scale}")
        ax.plot(run["exact_kl"], color=FIXED if norm else BUGGY, ls="--", label="exact KL")
        ax.set(xlabel="iteration", title="normalised A (fixed)" if norm else "A = r - mean (no std)")
        ax.legend(fontsize="small")
    axes[0].set_ylabel("reward / KL (nats)")
    plt.show()
    return {norm: nb04.tail_mean(scale_runs[(scale, norm)]["clean_reward"]) for norm in (False, True)}


# %%
# NBVAL_IGNORE_OUTPUT
w_scale = live_figure(draw_scale, scale=nb04.choice({k: k for k in SCALES}, "0.01", "reward scale"))
display(w_scale)

# %%
for label in ("100", "1"):
    rewards = set_value(w_scale, "reward scale", label)
    print(f"s = {label:>4}: reward without normalisation {rewards[False]:.3f}, with {rewards[True]:.3f}")
plt.close("all")

# %% [markdown]
# With normalisation the three runs end close together: s = 0.01 and s = 100 coincide to three decimals
# (0.686, exact KL 1.323) and s = 1 ends at 0.679 (exact KL 1.263). The normalised advantages are the
# same up to ε and float rounding (the normalised gradient norms above agree to five digits), but a
# last-digit difference can flip one sampled token, after which the runs are two different random draws:
# a seed-level spread, not an effect of the units. Without normalisation, s = 0.01 never leaves the
# starting reward (0.142, exact KL 0.002: the effective β is 0.02/0.01 = 2, a hundred times that of the s = 1
# run, and it pins the policy to the reference harder than β = 0.5 did), and s = 100 behaves like
# β ≈ 0 (exact KL 1.382, close to the β = 0 run's 1.408). Normalisation also bounds the advantages:
# in a group of G the largest possible |A_i| is √(G−1) (one success among G−1 failures), 2.6458 for
# G = 8:

# %%
print(f"max |A| for one success in a group of 8: {grpo_fixed.group_advantage([1.0] + [0.0] * 7).abs().max():.4f}")

# %% [markdown]
# ### 3b. B2 at tiny reward scales (the eps)
#
# **Question.** What does `group_advantage` do as the reward scale s → 0? The group is s·[0, 0, 1, 1];
# the ideal answer is A = [−1, −1, +1, +1] at any scale, and A = 0 for a constant group.

# %%
print(f"{'scale s':>9} | {'buggy A_4':>12} {'fixed A_4':>12}")
for scale in (1e2, 1.0, 1e-8, 1e-12, 1e-100, 1e-170, 1e200, 1e308):
    group = [0.0, 0.0, scale, scale]
    print(f"{scale:9.0e} | {grpo_buggy.group_advantage(group)[3].item():12.4e} "
          f"{grpo_fixed.group_advantage(group)[3].item():12.4e}")
print(f"constant group [1, 1, 1]: buggy {grpo_buggy.group_advantage([1.0, 1.0, 1.0]).tolist()}, "
      f"fixed {grpo_fixed.group_advantage([1.0, 1.0, 1.0]).tolist()}")
rounding = [0.3, 0.1 + 0.2, 0.3, 0.3]  # 0.1 + 0.2 = 0.30000000000000004
print("rewards [0.3, 0.1 + 0.2, 0.3, 0.3]: buggy " + " ".join(f"{a:+.4f}" for a in grpo_buggy.group_advantage(rounding))
      + " | fixed " + " ".join(f"{a:+.2e}" for a in grpo_fixed.group_advantage(rounding)))

# %% [markdown]
# Two lessons. First, the buggy `(r − mean)/std` is *too* scale-invariant: it turns any difference
# into a full-size advantage, even one of 5.6e-17 from floating-point rounding. In the last line three
# equal rewards get −1.1547 each and the odd one 0: the mean itself is rounded, so this "signal" is
# pure noise with the wrong shape. Then it breaks at both ends: ±inf once the squared deviations
# underflow (s = 1e-170), 0 once they overflow (s = 1e200: std = inf), NaN when the mean overflows
# (s = 1e308) and for a constant group (0/0). Second, the fixed twin's ε is a deliberate floor: reward
# differences well below ε = 1e-8 are treated as no signal (A_4 = 0.3333 at s = 1e-8, 5e-5 at
# s = 1e-12, 6.66e-09 for the rounding example) and nothing blows up.

# %%
exponents = list(range(-320, 309, 8))
fig, axes = buggy_vs_fixed("A_4 for the group s * [0, 0, 1, 1]  (x: non-finite or 0)", figsize=(9.0, 3.0))
for ax, (name, twin), color in zip(axes, TWINS.items(), (BUGGY, FIXED), strict=True):
    values = [twin.group_advantage([0.0, 0.0, 10.0**e, 10.0**e])[3].item() for e in exponents]
    finite = [(e, math.log10(v)) for e, v in zip(exponents, values, strict=True) if math.isfinite(v) and v > 0]
    broken = [e for e, v in zip(exponents, values, strict=True) if not (math.isfinite(v) and v > 0)]
    ax.plot(*zip(*finite, strict=True), "o-", ms=3, color=color)
    ax.plot(broken, [1.0] * len(broken), "x", color=color)
    ax.axvline(-8, color="0.6", ls=":")
    ax.set(xlabel="log10 s (dotted: eps = 1e-8)", ylabel="log10 A_4")
    print(f"{name}: A_4 finite and > 0 for {len(finite)} of {len(exponents)} scales; broken at log10 s = {broken}")
plt.show()

# %% [markdown]
# > **You should know.**
# > - Without normalisation the gradient is proportional to the reward scale (×100 for s = 100 above).
# >   Adam hides most of that, but not the balance with β·KL: without normalisation the effective β
# >   is β/s. Normalise, and the reward's units drop out (up to rounding: 0.686, 0.679, 0.686 above).
# > - Normalisation bounds |A| by √(G−1); an outlier reward cannot produce an outlier advantage.
# > - The ε is not just a NaN guard: it decides what difference counts as signal. Without it, rounding
# >   noise in a constant group becomes a ±1.15 advantage; with it, differences ≪ ε give A ≈ 0.
#
# <details><summary>Question: with normalisation, can a tiny reward scale still hurt? (Answer)</summary>
#
# Yes, once s·std(r) is comparable to ε: A = (r − mean)/(std + ε) shrinks towards 0 (0.333 at
# s = 1e-8 above) and learning slows. Keep rewards O(1) or scale ε with them.
# </details>

# %% [markdown]
# ## 4. Gradient clipping
#
# **Key equation.** Before the optimiser step, g ← g · min(1, c / ‖g‖) with ‖g‖ the global L2 norm
# over all parameters: the direction is kept, the length capped at c. B11 skips this.
#
# **Where it does not matter.** In the fixed trainer on EchoTask the advantages are normalised
# (bounded by 2.6458) and the ratio is clipped, so gradients are small. The pre-clip norms of the
# β = 0.02 run above:

# %%
norms = [step["grad_norm"] for it in beta_runs["0.02"]["inner"] for step in it]  # every inner step
print(f"inner steps {len(norms)}, median pre-clip norm {sorted(norms)[len(norms) // 2]:.3f}, "
      f"max {max(norms):.3f}, fraction above max_grad_norm = 1: {sum(n > 1 for n in norms) / len(norms):.3f}")

# %% [markdown]
# Clipping acts on 1.7% of the steps (2 of 120) and shrinks each of them by at most a factor 1.225:
# B11 (no clipping) can barely change this run. The bug needs gradient spikes to bite.
#
# **Where it does.** Take away the normalisation (A = r − mean) and let the reward model glitch: with
# probability 0.005 per sample it adds 1000 to the reward, whatever the completion. Every glitch is a
# gradient spike. Four runs (computed once): the B11 hybrid (no clipping) and the fixed twin with
# max_grad_norm ∈ {0.1, 1, 10}. The reward reported is the clean echo reward.

# %%
GLITCH = dict(glitch_prob=0.005, glitch_size=1000.0, normalise=False, **SHORT)
MAX_NORMS = {"0.1": 0.1, "1": 1.0, "10": 10.0}
clip_runs = {label: nb04.instrumented_run(max_grad_norm=c, **GLITCH) for label, c in MAX_NORMS.items()}
clip_runs["none (B11)"] = nb04.instrumented_run("B11", **GLITCH)
print(f"P(a batch of 64 samples has a glitch) = 1 - 0.995^64 = {1 - 0.995**64:.3f}")
print(f"{'max norm':>10} | {'reward (last 10)':>16} {'median pre-clip':>15} {'max pre-clip':>12} {'clipped steps':>13}")
for label, run in clip_runs.items():
    norms = [step["grad_norm"] for it in run["inner"] for step in it]
    limit = MAX_NORMS.get(label, math.inf)
    print(f"{label:>10} | {nb04.tail_mean(run['clean_reward']):16.3f} {sorted(norms)[len(norms) // 2]:15.3f} "
          f"{max(norms):12.1f} {sum(n > limit for n in norms) / len(norms):13.3f}")


# %%
def draw_grad_clip(max_norm):
    fig, (ax_b, ax_f) = buggy_vs_fixed(f"gradient norm per inner step (log scale); fixed max_grad_norm = {max_norm}",
                                       figsize=(9.0, 3.2))
    buggy = [s["grad_norm"] for it in clip_runs["none (B11)"]["inner"] for s in it]
    fixed = [s["grad_norm"] for it in clip_runs[max_norm]["inner"] for s in it]
    limit = MAX_NORMS[max_norm]
    ax_b.set_title("hybrid('B11'): no clipping", color=BUGGY)
    ax_b.plot(buggy, color=BUGGY, lw=1, label="pre-clip = applied")
    ax_f.plot(fixed, color="0.7", lw=1, label="pre-clip")
    ax_f.plot([min(n, limit) for n in fixed], color=FIXED, lw=1.5, label="applied")
    ax_f.axhline(limit, color=FIXED, ls=":")
    for ax in (ax_b, ax_f):
        ax.set(yscale="log", xlabel="inner step")
        ax.legend(fontsize="small")
    plt.show()
    return {name: nb04.tail_mean(clip_runs[key]["clean_reward"]) for name, key in
            (("buggy", "none (B11)"), ("fixed", max_norm))}


# %%
# NBVAL_IGNORE_OUTPUT
w_clipnorm = live_figure(draw_grad_clip, max_norm=nb04.choice({k: k for k in MAX_NORMS}, "0.1", "max norm"))
display(w_clipnorm)

# %%
for label in ("1", "10"):
    rewards = set_value(w_clipnorm, "max norm", label)
    print(f"max norm {label:>4}: reward buggy (no clipping) {rewards['buggy']:.3f}, fixed {rewards['fixed']:.3f}")
plt.close("all")

# %% [markdown]
# A glitch lands in 27% of the batches, and the gradient peaks between 100 and 170 against a median
# of about 0.1. Only the cap at 0.1, just below the typical norm, rescues the run: clean reward 0.488
# against 0.154 without clipping. Caps of 1 and 10 still let the glitch batches through at about 9
# and 75 times the typical size (reward 0.220 and 0.129: no real improvement on one seed). To be
# useful, a cap sits near the typical norm, not at a "safe" large value.
#
# **Why it matters even with Adam.** Adam already bounds the size of the step a spike causes; the
# damage is to its second-moment estimate v, which remembers g² with a half-life of about 693 steps
# (β₂ = 0.999). One parameter, gradient 1 at every step except 1000 at step 10, lr = 0.01:

# %%
moves = {label: nb04.adam_steps_after_spike(1000.0, c) for label, c in (("clip at 1", 1.0), ("no clip", math.inf))}
for label, m in moves.items():
    print(f"{label:9s}: step before {m[9]:.4f}, at spike {m[10]:.4f}, 10 after {m[20]:.4f}, 40 after {m[50]:.4f}, "
          f"total over the 49 steps after {sum(m[11:]):.4f}")

# %% [markdown]
# Unclipped, the spike step itself is even *smaller* than normal (0.0048: Adam's bias-corrected v
# jumps), but every step afterwards shrinks: 0.0018 per step ten steps later and 0.0002 forty steps
# later, instead of 0.0100. Over the 49 steps after the spike the parameter travels 0.0495 instead of
# 0.4900, a tenfold stall from one bad gradient.
# Clipped at 1, the spike is just another gradient of norm 1.
#
# > **You should know.**
# > - Gradient clipping caps the length of one update's gradient, keeping its direction.
# > - With normalised advantages and a clipped ratio it rarely acts; it is the backstop for spikes
# >   (reward outliers without normalisation, the unbounded A < 0 branch of the surrogate, numerics).
# > - Under Adam a spike's harm is a long stall (inflated second moment), not one giant step.
# > - Log the **pre-clip** norm (as `optimizer_step` returns): the post-clip norm is always ≤ c and
# >   hides the spikes.
#
# <details><summary>Question: why does max_grad_norm = 10 behave like no clipping in the glitch
# runs? (Answer)</summary>
#
# A cap only acts on steps whose norm exceeds it. The median norm is about 0.1, so at 10 only the
# glitch batches are touched, and they are cut from over 100 to 10: still about 75 times the typical
# gradient, so they keep dominating Adam's moment estimates. A useful cap sits near the typical norm.
# </details>

# %% [markdown]
# ## 5. Summary: what each stabiliser protects against, and what it costs
#
# <table>
# <tr><th>stabiliser</th><th>protects against</th><th>costs</th></tr>
# <tr>
# <td>ratio clip ε (§1)</td>
# <td>one rollout batch pushing a token's probability far from π_old over the inner steps</td>
# <td>tokens past the window get zero gradient (less learning per batch); ε to tune;
# no bound on the A &lt; 0, ρ &gt; 1+ε branch (−4.5 at ρ = 3)</td>
# </tr>
# <tr>
# <td>KL to frozen π_ref, β (§2)</td>
# <td>cumulative drift over many iterations, which KL to π_old cannot see (it restarts at 0 every rollout)</td>
# <td>reward (0.368 at β = 0.5 vs 0.679 at 0.02 in 30 iterations); a reference forward pass per batch;
# β to tune; k3's gradient is ∇KL(π_ref ‖ π)</td>
# </tr>
# <tr>
# <td>advantage normalisation (§3)</td>
# <td>reward units setting the step and the effective β (β/s without it); outlier rewards (|A| ≤ √(G−1))</td>
# <td>turns noise-level differences into ±1 advantages unless ε floors them; ε sets what counts as signal</td>
# </tr>
# <tr>
# <td>gradient clipping c (§4)</td>
# <td>gradient spikes, and under Adam the long stall after one (0.0495 vs 0.4900 travelled in the toy)</td>
# <td>also shortens legitimate large steps; useful only near the typical norm (0.1 helped, 10 did not)</td>
# </tr>
# </table>
#
# Each has its knob (ε, β, the ε of the std, c). All are cheap to compute except the KL term, which
# needs a forward pass of the reference model on every rollout batch.

# %% [markdown]
# ## 6. Self-check
#
# 1. For A = −2 and ε = 0.2, where is the fixed surrogate's gradient zero? Where is the buggy (B4)
#    one's?
# <details><summary>Answer</summary>
#
# Fixed: ρ < 0.8 (the bad token is already 20% less likely: stop pushing). B4: nowhere, since
# clamp(ρA, 0.8, 1.2) = 0.8 > ρA for every ρ > 0, so the min always takes ρA.
# </details>
#
# 2. Why is k3 unbiased when k3 = k1 + (r − 1)?
# <details><summary>Answer</summary>
#
# E_{x∼π}[r] = Σ_x π(x)·π_ref(x)/π(x) = Σ_x π_ref(x) = 1, so r − 1 has mean zero; it is a control
# variate that is negatively correlated with k1 and cancels most of its noise and all of its negative values.
# </details>
#
# 3. Your KL to the reference rises faster than in a β = 0 run while reward falls and entropy
#    collapses. First thing to check?
# <details><summary>Answer</summary>
#
# The sign of the penalty: `pg_loss - beta * kl`, a negative β from a config, or a k1 penalty written
# as log π_ref − log π. (Reversing the log-ratio inside k3, B8, does not flip the sign: it only biases
# the value, so it would not cause this on its own.)
# </details>
#
# 4. You multiply all rewards by 100 in a trainer without advantage normalisation, using Adam. Does the
#    step size change? What does change?
# <details><summary>Answer</summary>
#
# The raw gradient is 100× larger, but Adam divides by its running RMS, so the step size barely changes.
# What changes is the balance with the KL term: the effective β is 100× smaller (here the s = 100 run
# behaved like β ≈ 0). With normalisation the scale cancels: the three normalised runs differ only by
# seed-level noise (0.686, 0.679, 0.686).
# </details>
#
# 5. Why log the pre-clip gradient norm rather than the post-clip one?
# <details><summary>Answer</summary>
#
# The post-clip norm is min(‖g‖, c): it can never show a spike. The pre-clip norm is the diagnostic
# (healthy range in `DIAGNOSTICS`: finite, < 100); the glitch runs above peak well over 100.
# </details>

# %%
# NBVAL_IGNORE_OUTPUT
print(f"notebook wall time {time.perf_counter() - started:.1f} s, kernel CPU time {time.process_time():.1f} s")
