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
# **The interview question** (follow-up 4 of SPEC.md). *"Explain the roles of clipping, a
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
#    the group std, what Adam hides and what it does not; B2 (no eps) at tiny reward scales; what an
#    outlier reward does to a normalised group; population vs sample std; whitening the rewards of the
#    batch vs normalising each group.
# 4. **Gradient clipping**: grad-norm traces with and without (B11), how to pick the cap from the
#    pre-clip norms and read the clip rate, and why it still matters under Adam.
#
# Everything below calls the twins' own functions (`grpo_loss`, `kl_to_reference`, `group_advantage`,
# `train`). The code being taught (the estimators, the clip-only loss, the advantage variants, the Adam
# toy) is in the cells; `workbook/nb04_stabilisers.py` is machinery only: 1-token autograd probes, exact KL sums, and
# `instrumented_run`, a cached `train()` that also records the inner steps and the exact KL.

# %%
import copy
import functools
import logging
import math
import warnings

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import grpo_buggy
import grpo_fixed
import grpo_support
import workbook  # noqa: F401  (one torch thread)
from workbook import nb04_stabilisers
from workbook.monitor import render_range
from workbook.plots import BUGGY, FIXED, REFERENCE, animated, buggy_vs_fixed
from workbook.progress import progress
from workbook.run_summary import tail_mean
from workbook.widgets import choice, live_plot, probe, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids log health warnings; we print what we need
TWINS = {"buggy": grpo_buggy, "fixed": grpo_fixed}
SHORT = dict(steps=20, prompts_per_batch=8)  # every training run here: 20 iterations of 8 prompts x 8 samples
G = grpo_fixed.make_config().group_size
POS, NEG = "tab:green", "tab:purple"  # A > 0, A < 0

# %%
rho_grid = [0.25 + 0.025 * i for i in range(111)]  # ratio 0.25 .. 3.0
fig, axes = buggy_vs_fixed("one token's gradient dJ/dlog pi against its ratio (clip 0.2, |A| = 1.5; grey: the window)",
                           figsize=(9.0, 3.0))
glance_zeros = {}
for ax, (name, twin) in zip(axes, TWINS.items(), strict=True):
    _, dJ = nb04_stabilisers.surrogate_grid(twin.grpo_loss, rho_grid, [1.5, -1.5], clip=0.2)  # (2, R)
    ax.axvspan(0.8, 1.2, color="0.92")
    ax.axhline(0, color="0.6", lw=0.8)
    for row, (label, color) in enumerate((("A > 0", POS), ("A < 0", NEG))):
        ax.plot(rho_grid, dJ[row].tolist(), color=color, label=label)
        glance_zeros[name, label] = nb04_stabilisers.zero_grad_interval(rho_grid, dJ[row].tolist())
    ax.set_xlabel("ratio rho")
axes[0].set_ylabel("dJ / dlog pi")
fig.legend(*axes[1].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize="small")
plt.show()
for (name, label), zeros in glance_zeros.items():
    where = "at no ratio" if zeros is None else f"for rho in [{zeros[0]:.3f}, {zeros[1]:.3f}]"
    print(f"{name} {label}: gradient zero {where} (grid step 0.025)")
assert 1.2 < glance_zeros["fixed", "A > 0"][0] < 1.25 and glance_zeros["fixed", "A < 0"][1] < 0.8  # beyond the window
assert glance_zeros["buggy", "A > 0"][0] < 1.0 < glance_zeros["buggy", "A > 0"][1]  # B4: zero at rho = 1 already
assert glance_zeros["buggy", "A < 0"] is None

# %% [markdown]
# **At a glance.** The gradient each twin's `grpo_loss` gives one token, against its ratio: in the fixed twin it is
# zero only beyond the clip window on the side the advantage pushes (A > 0 above 1.2, A < 0 below 0.8); B4 in the
# buggy twin clamps ρ·A instead of ρ, so its A > 0 edge sits at (1 + ε)/A: with A = 1.5 > 1 + ε that is 0.8, and the
# token gets no gradient already at ρ = 1, while the A < 0 token is never clipped. Why: notebook 04 §1.


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
# −J(ρ); autograd gives ∂J/∂log π (`nb04_stabilisers.surrogate_and_grad`). |A| = 1.5, ε = 0.2.

# %%
RHOS = [0.5, 0.9, 1.0, 1.1, 1.5, 3.0]
surrogate = {}  # (twin, A, rho) -> (J, dJ/dlog pi)
print(f"{'A':>5} {'rho':>5} | {'J buggy':>8} {'dJ buggy':>9} | {'J fixed':>8} {'dJ fixed':>9}")
for adv in (1.5, -1.5):
    for rho in RHOS:
        for name, twin in TWINS.items():
            surrogate[name, adv, rho] = nb04_stabilisers.surrogate_and_grad(twin.grpo_loss, rho, adv, clip=0.2)
        (j_b, g_b), (j_f, g_f) = surrogate["buggy", adv, rho], surrogate["fixed", adv, rho]
        print(f"{adv:+5.1f} {rho:5.2f} | {j_b:+8.4f} {g_b:+9.4f} | {j_f:+8.4f} {g_f:+9.4f}")
assert surrogate["fixed", 1.5, 1.5][1] == surrogate["fixed", 1.5, 3.0][1] == 0.0  # past 1 + eps: flat
assert surrogate["fixed", -1.5, 0.5][1] == 0.0 and math.isclose(surrogate["fixed", -1.5, 3.0][1], -4.5)  # unbounded
assert math.isclose(surrogate["buggy", 1.5, 1.0][0], 1.2) and surrogate["buggy", 1.5, 1.0][1] == 0.0  # B4 at rho = 1
assert all(math.isclose(surrogate["buggy", -1.5, rho][1], -1.5 * rho) for rho in RHOS)  # B4: A < 0 never clipped

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
# **Why the min.** Drop it and use the clipped term alone:

# %%
def clip_only_loss(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):
    """The clipped term alone, without the min: L = -mean_t clip(rho_t, 1 - c, 1 + c) A.
    logprobs, old_logprobs, mask: (N, T); advantages: (N,)."""
    ratio = torch.exp(logprobs - old_logprobs)  # (N, T)
    return -grpo_fixed.masked_mean(torch.clamp(ratio, 1 - clip, 1 + clip) * advantages[:, None], mask)


print(f"{'A':>5} {'rho':>5} | {'dJ with min':>11} {'dJ clip only':>12}")
with_min, clip_only = {}, {}
for adv, rho in ((1.5, 0.5), (1.5, 1.5), (-1.5, 0.5), (-1.5, 1.5)):
    with_min[adv, rho] = nb04_stabilisers.surrogate_and_grad(grpo_fixed.grpo_loss, rho, adv, clip=0.2)[1]
    clip_only[adv, rho] = nb04_stabilisers.surrogate_and_grad(clip_only_loss, rho, adv, clip=0.2)[1]
    print(f"{adv:+5.1f} {rho:5.2f} | {with_min[adv, rho]:+11.4f} {clip_only[adv, rho]:+12.4f}")
assert set(clip_only.values()) == {0.0}  # no gradient on either side of the window
assert math.isclose(with_min[1.5, 0.5], 0.75) and math.isclose(with_min[-1.5, 1.5], -2.25)  # the min pulls back

# %% [markdown]
# Clip-only kills the gradient on *both* sides of the window. That is right when the ratio moved in
# the helpful direction (A > 0, ρ = 1.5; A < 0, ρ = 0.5: both 0 in both columns) but wrong when it
# moved the harmful way: a good token that became *less* likely (A = +1.5, ρ = 0.5) or a bad token
# that became *more* likely (A = −1.5, ρ = 1.5) must still be pulled back, and only the min does that
# (+0.75 and −2.25). The min makes J a pessimistic lower bound on the unclipped objective: clipping
# removes the incentive to overshoot, never the correction of a mistake.
#
# **Slider.** Clip radius ε and advantage size |A|; solid lines are J(ρ), dashed lines ∂J/∂log π, both
# in units of |A|; the grey band is [1−ε, 1+ε]. On the unclipped branch J and its gradient are the same
# number ρA (because ∂ρ/∂log π = ρ), so the dashed line lies on the solid one; they part where the flat
# piece takes over (J constant, gradient 0). In these units the fixed twin's picture does not change
# when |A| moves; B4's does. Every slider position is computed up front (`nb04_stabilisers.surrogate_grid`: one
# batched call of each twin's `grpo_loss` per clip value, for all 111 ratios and 24 advantages), so a
# move only redraws.

# %%
RATIO_GRID = [0.25 + 0.025 * i for i in range(111)]  # 0.25 .. 3.0
ADV_SIZES = [0.25 * k for k in range(1, 13)]  # the |A| slider's positions, 0.25 .. 3.0
CLIPS = [round(0.05 * k, 2) for k in range(1, 11)]  # the clip slider's positions, 0.05 .. 0.5


@functools.cache
def clipping_curves(clip: float):
    """{twin: (J, dJ/dlog pi)} over RATIO_GRID for A = +a and -a, a in ADV_SIZES: one surrogate_grid call per
    twin. -> {twin: {(A, "J" | "dJ"): list}}"""
    advs = [a for size in ADV_SIZES for a in (size, -size)]
    curves = {}
    for name, twin in TWINS.items():
        J, dJ = nb04_stabilisers.surrogate_grid(twin.grpo_loss, RATIO_GRID, advs, clip)  # (K, R) each
        curves[name] = {(a, kind): values[k].tolist() for k, a in enumerate(advs) for kind, values in
                        (("J", J), ("dJ", dJ))}
    return curves


for c in CLIPS:  # every slider position now: a move only redraws
    clipping_curves(c)
print(f"per twin: {len(CLIPS)} clip values x {2 * len(ADV_SIZES)} advantages x {len(RATIO_GRID)} ratios, "
      f"in {len(CLIPS)} surrogate_grid calls")


fig_clip, axes_clip = buggy_vs_fixed(figsize=(9.0, 3.4))
title_clip = fig_clip.suptitle(" ")
clip_artists = {}  # twin -> (band, {(sign, "J" | "dJ"): line})
for ax, name in zip(axes_clip, TWINS, strict=True):
    band = ax.axvspan(0.8, 1.2, color="0.92")
    lines = {}
    for sign, color in ((+1, POS), (-1, NEG)):
        (lines[sign, "J"],) = ax.plot(RATIO_GRID, RATIO_GRID, color=color, label=f"A {'>' if sign > 0 else '<'} 0")
        (lines[sign, "dJ"],) = ax.plot(RATIO_GRID, RATIO_GRID, color=color, ls="--")
    zero_line = ax.axhline(0, color="0.6", lw=0.8)
    ax.set(xlabel="ratio rho", ylim=(-3.2, 3.2))  # |J| / |A| <= rho <= 3 for both twins: fixed limits
    animated(band, zero_line, list(lines.values()), ax.legend(fontsize="small", loc="lower left"))  # blitted
    clip_artists[name] = (band, lines)
axes_clip[0].set_ylabel("in units of |A|")
animated(title_clip)


def update_clipping(clip, adv_size):
    """Redraw J / |A| and (dJ/dlog pi) / |A| for A = +-adv_size; -> {'fixed A>0': (first, last) ratios of
    the grid where the gradient is zero, or None}."""
    zeros = {}
    for name, (band, lines) in clip_artists.items():
        band.set_x(1 - clip)
        band.set_width(2 * clip)
        curves = clipping_curves(round(clip, 2))[name]  # slider values can carry float noise (0.35000000000000003)
        for sign in (+1, -1):
            J, dJ = curves[sign * round(adv_size, 2), "J"], curves[sign * round(adv_size, 2), "dJ"]
            lines[sign, "J"].set_ydata([j / adv_size for j in J])
            lines[sign, "dJ"].set_ydata([g / adv_size for g in dJ])
            zeros[f"{name} A{'>' if sign > 0 else '<'}0"] = nb04_stabilisers.zero_grad_interval(RATIO_GRID, dJ)
    title_clip.set_text(f"J (solid) and dJ/dlog pi (dashed) in units of |A|; clip {clip:.2f}, |A| {adv_size:.2f}")
    return zeros


def show_zeros(zeros):
    for key, interval in zeros.items():
        where = "never" if interval is None else f"rho in [{interval[0]:.4f}, {interval[1]:.4f}]"
        print(f"{key:9s} gradient zero for {where}")


w_clip = live_plot(fig_clip, update_clipping, clip=slider(0.2, 0.05, 0.5, 0.05, "clip"),
                   adv_size=slider(1.5, 0.25, 3.0, 0.25, "|A|"))

# %% tags=["nbval-ignore-output"]
display(w_clip)

# %%
wide = probe(w_clip, {"clip": 0.3})  # wider window
show_zeros(wide)
small = probe(w_clip, {"clip": 0.3, "|A|": 0.5})  # and a small advantage: buggy A>0 now clips late
show_zeros(small)
print(f"buggy A>0 flat from (1 + clip) / |A|: {1.3 / 1.5:.3f} for |A| = 1.5, {1.3 / 0.5:.1f} for |A| = 0.5")
for zeros in (wide, small):
    assert 1.3 < zeros["fixed A>0"][0] <= 1.3 + 0.025 and 0.7 - 0.025 <= zeros["fixed A<0"][1] < 0.7  # whatever |A|
    assert zeros["buggy A<0"] is None
assert 1.3 / 1.5 <= wide["buggy A>0"][0] < 1.3 / 1.5 + 0.025 and 1.3 / 0.5 <= small["buggy A>0"][0] < 2.6 + 0.05

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
# >   branch; here only gradient clipping (notebook 04 §4), which caps the whole step's norm, would.
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
# ### 2.1 Three estimators of KL(π ‖ π_ref) from samples
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
# The four, per sample:

# %%
def kl_estimator_samples(logp, logq, n: int, generator):
    """Per-sample estimates of KL(p || q) from x ~ p, with log r = log q(x) - log p(x):
    k1 = -log r,  k2 = (log r)^2 / 2,  k3 = r - 1 - log r,  and B8's k3 with the log-ratio reversed,
    1/r - 1 + log r (its mean is chi^2(p || q) - KL(p || q)). logp, logq: (V,) -> tokens (n,), {name: (n,)}"""
    tokens = torch.multinomial(logp.exp(), n, replacement=True, generator=generator)  # (n,)
    log_r = logq[tokens] - logp[tokens]  # (n,)
    return tokens, {"k1": -log_r, "k2": 0.5 * log_r**2, "k3": log_r.exp() - 1 - log_r,
                    "k3 reversed (B8)": (-log_r).exp() - 1 + log_r}


# %% [markdown]
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
table = {}  # (pair, estimator) -> (mean, std, bias, fraction < 0)
print(f"{'pair':9s} {'KL exact':>8} | {'estimator':16s} {'mean':>8} {'std':>8} {'bias':>8} {'P(<0)':>6}")
for name, logp in PAIRS.items():
    kl = nb04_stabilisers.kl_exact(logp, REF)
    _, estimates = kl_estimator_samples(logp, REF, N_SAMPLES, torch.Generator().manual_seed(0))
    for est_name, values in estimates.items():
        mean, std = values.mean().item(), values.std().item()
        table[name, est_name] = (mean, std, mean - kl, (values < 0).double().mean().item())
        print(f"{name:9s} {kl:8.4f} | {est_name:16s} {mean:8.4f} {std:8.4f} {mean - kl:+8.4f} "
              f"{table[name, est_name][3]:6.3f}")
assert table["near", "k1"][3] > 0.35 and table["uniform", "k1"][3] > 0.35  # k1 < 0 on over a third
assert all(table[p, e][3] == 0 for p in PAIRS for e in ("k2", "k3", "k3 reversed (B8)"))
assert table["near", "k1"][1] > 80 * table["near", "k3"][1]  # k3 far less noisy near the reference
assert table["learned", "k3"][1] > table["learned", "k1"][1]  # ... but heavy-tailed far from it
assert table["learned", "k2"][2] > 1.5 and table["learned", "k3 reversed (B8)"][2] > 10  # biased

# %% [markdown]
# The standard error of each mean is std/√2000 = std/44.7, so a bias much larger than that is real.
# What the table says:
#
# - **k1** is unbiased up to that noise, but on the near pair its std is 0.0435 for a KL of 0.0010,
#   and it is negative on 38% (near) and 40% (uniform) of samples. Negative values are not the problem
#   (a sample's sign does not set its gradient: used as a loss, k1's expected gradient is 0 whatever the
#   signs, notebook 04 §2.2); the noise is: a penalty estimated from a few tokens is mostly noise.
# - **k2** is never negative and has a small spread, but it is biased once π is far from π_ref: 4.0220
#   for an exact 2.3979 (learned), 0.5131 for 0.7392 (collapsed).
# - **k3** is never negative here (≥ 0 term by term in exact arithmetic; what rounding does to that is the end
#   of notebook 04 §2.2) and unbiased, with a std as small as k2's near the reference (0.0005 on
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
    tokens, estimates = kl_estimator_samples(logp, REF, N_SAMPLES, torch.Generator().manual_seed(0))
    args = (logp[tokens][None], REF[tokens][None], torch.ones(1, N_SAMPLES, dtype=torch.bool))  # (1, S) each
    fixed, buggy = grpo_fixed.kl_to_reference(*args).item(), grpo_buggy.kl_to_reference(*args).item()
    print(f"{name:9s} fixed {fixed:8.4f} (k3 {estimates['k3'].mean().item():8.4f})   buggy {buggy:8.4f} "
          f"(reversed {estimates['k3 reversed (B8)'].mean().item():8.4f}; exact chi2 - KL "
          f"{nb04_stabilisers.chi2(logp, REF) - nb04_stabilisers.kl_exact(logp, REF):8.4f})")
    assert math.isclose(fixed, estimates["k3"].mean().item(), rel_tol=1e-5, abs_tol=1e-7)
    assert math.isclose(buggy, estimates["k3 reversed (B8)"].mean().item(), rel_tol=1e-5, abs_tol=1e-7)

# %% [markdown]
# Along a path from the reference to the "learned" policy (geometric interpolation
# π_t ∝ π_ref^(1−t) π_learned^t), each twin's estimate against the exact KL:

# %%
path = [i / 10 for i in range(11)]
exact, estimate = [], {"buggy": [], "fixed": []}
for t in path:
    logp = torch.log_softmax((1 - t) * REF + t * PAIRS["learned"], -1)  # (V,)
    tokens, _ = kl_estimator_samples(logp, REF, N_SAMPLES, torch.Generator().manual_seed(0))
    args = (logp[tokens][None], REF[tokens][None], torch.ones(1, N_SAMPLES, dtype=torch.bool))
    exact.append(nb04_stabilisers.kl_exact(logp, REF))
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
# ### 2.2 Why k3, and one caveat about its gradient
#
# k3 wins on value: unbiased, never negative, and low variance where the trainer lives (π close to
# π_ref). But the trainer *differentiates* the estimate, with the sampled tokens held fixed. The
# expected gradient of such a "pathwise" loss is not automatically the gradient of KL(π ‖ π_ref).
# Exactly, on the 5-token vocabulary (weights π(x) detached, gradients with respect to π's logits):

# %%
print(f"{'pair':9s} {'|E grad k1|':>11} {'|E grad k2 - grad KL(pi||ref)|':>31} "
      f"{'|E grad k3 - grad KL(ref||pi)|':>31} {'|grad KL(pi||ref)|':>19} {'|difference|':>13}")
gaps, grads = {}, {}
for name, logp in PAIRS.items():
    grads[name] = g = nb04_stabilisers.pathwise_kl_grads(logp, REF)
    gaps[name] = (g["grad KL(pi||ref)"] - g["grad KL(ref||pi)"]).norm().item(), g["grad KL(pi||ref)"].norm().item()
    print(f"{name:9s} {g['E[grad k1]'].norm():11.2e} {(g['E[grad k2]'] - g['grad KL(pi||ref)']).norm():31.2e} "
          f"{(g['E[grad k3]'] - g['grad KL(ref||pi)']).norm():31.2e} {gaps[name][1]:19.4f} {gaps[name][0]:13.4f}")
    assert max(g["E[grad k1]"].norm(), (g["E[grad k2]"] - g["grad KL(pi||ref)"]).norm(),
               (g["E[grad k3]"] - g["grad KL(ref||pi)"]).norm()) < 1e-6  # float32 rounding only
assert gaps["near"][0] < 0.01 * gaps["near"][1] and gaps["learned"][0] > gaps["learned"][1]

# %% [markdown]
# Used as a loss on samples, k1 has zero expected gradient (E_π[∇log π] = 0; values of 1e-9 to 1e-7 are
# float32 rounding), k2 gives exactly ∇KL(π ‖ π_ref), and k3 gives exactly ∇KL(π_ref ‖ π), the
# *other* direction. Near the reference the two gradients nearly coincide (difference 0.0002 against a
# norm of 0.0244 on the near pair), which is why k3 works as a penalty in practice; far away they
# differ by as much as the gradient itself (learned: difference 0.5098, norm 0.4961). So "k3 is
# unbiased" is a statement about the logged *value*; the penalty's gradient is that of KL(π_ref ‖ π).
#
# **B8's gradient.** With the log-ratio reversed the per-sample term is π/π_ref − 1 − log(π/π_ref), whose
# derivative with respect to log π is π/π_ref − 1; its expectation under π is Σ_x π(x)(π(x)/π_ref(x) − 1)
# ∇log π(x) = ½∇χ²(π ‖ π_ref), since ∇Σ_x π²/π_ref = 2Σ_x (π²/π_ref)∇log π and E_π[∇log π] = 0. χ² is
# minimised at π = π_ref, so B8 still pulls *toward* the reference, not away: the cosine with ∇KL(π ‖ π_ref)
# (the direction a correct penalty descends) is printed for each pair, with the two norms.

# %%
print(f"{'pair':9s} {'|E grad k3 rev - grad chi2/2|':>29} {'|E grad k3 rev|':>15} {'|grad KL(pi||ref)|':>19} "
      f"{'cosine':>7}")
cosines = {}
for name, g in grads.items():
    b8, kl_grad = g["E[grad k3 reversed]"], g["grad KL(pi||ref)"]
    cosines[name] = torch.nn.functional.cosine_similarity(b8, kl_grad, dim=0).item()
    print(f"{name:9s} {(b8 - g['grad chi2(pi||ref) / 2']).norm():29.2e} {b8.norm():15.4f} {kl_grad.norm():19.4f} "
          f"{cosines[name]:7.3f}")
    assert (b8 - g["grad chi2(pi||ref) / 2"]).norm() < 1e-5 * max(1.0, b8.norm().item())  # rounding only
assert all(c > 0 for c in cosines.values())  # toward the reference, every pair
b8_norm = {name: (g["E[grad k3 reversed]"].norm().item(), g["grad KL(pi||ref)"].norm().item())
           for name, g in grads.items()}  # (|E grad k3 reversed|, |grad KL(pi||ref)|)
assert b8_norm["learned"][0] > 3 * b8_norm["learned"][1] and b8_norm["collapsed"][0] < b8_norm["collapsed"][1]
assert [f"{v:.4f}" for v in (*b8_norm["learned"], *b8_norm["collapsed"])] == ["1.8018", "0.4961", "0.0989", "0.1468"]
print(f"learned pair: |E grad k3 reversed| / |grad KL(pi||ref)| = {b8_norm['learned'][0] / b8_norm['learned'][1]:.1f}")
assert f"{b8_norm['learned'][0] / b8_norm['learned'][1]:.1f}" == "3.6"  # as quoted

# %% [markdown]
# Every cosine is positive: B8 is an anchor, not a repeller. Near the reference it is the right one
# (χ² ≈ 2 KL to second order, so ½∇χ² ≈ ∇KL); on the learned pair its pull is 3.6 times ∇KL(π ‖ π_ref)'s
# (norm 1.8018 against 0.4961), because its per-token weight π/π_ref − 1 grows without bound on the tokens
# the policy now likes and the reference did not; on the collapsed pair it is weaker (0.0989 against 0.1468).
# In a training run that weight shows as gradient-norm spikes while the policy stays near the reference
# (notebook 03 §6).
#
# **k3's sign in floating point.** k3 = (r − 1) − log r ≥ 0 term by term holds in exact arithmetic. A computed
# term also carries the rounding of the dtype k3 is *evaluated* in: near r = 1, exp(log r) is rounded to that
# dtype's spacing around 1 before log r is subtracted. The tiny input: 1000 sampled tokens whose log π_ref and
# log π (a policy a few small steps from its reference) are rounded to bfloat16, as a bf16 forward pass returns
# them; the fixed twin's `kl_to_reference` evaluates k3 on them as they are (in bfloat16), upcast to float32
# first, and upcast to float64 (the exact value for these inputs, to the digits printed). Then the floor of each
# dtype: the most negative term over every finite bfloat16 log-ratio, and over 100,000 float32 ones.

# %%
def k3_terms(logprobs, ref_logprobs):
    """The twin's kl_to_reference on each token alone, evaluated in the inputs' dtype. (n,), (n,) -> (n,)"""
    one = torch.ones(1, 1, dtype=torch.bool)
    return torch.vmap(lambda lp, rf: grpo_fixed.kl_to_reference(lp.view(1, 1), rf.view(1, 1), one))(logprobs,
                                                                                                   ref_logprobs)


gen = torch.Generator().manual_seed(0)
ref_bf16 = (-torch.randn(1000, generator=gen).abs()).bfloat16()  # (n,) log pi_ref of the sampled tokens
pol_bf16 = (ref_bf16.float() + 0.002 * torch.randn(1000, generator=gen)).bfloat16()  # (n,) log pi, near pi_ref
k3_sign = {}  # dtype k3 is evaluated in -> (most negative term, number of negative terms, masked mean)
print(f"{'k3 evaluated in':16s} | {'most negative term':>18} {'terms < 0':>9} {'mean (kl_to_reference)':>22}")
for dtype in (torch.bfloat16, torch.float32, torch.float64):
    logp, ref = pol_bf16.to(dtype), ref_bf16.to(dtype)  # the same bf16 values, exactly
    terms = k3_terms(logp, ref)  # (n,)
    mean = grpo_fixed.kl_to_reference(logp[None], ref[None], torch.ones(1, len(logp), dtype=torch.bool)).item()
    k3_sign[dtype] = (terms.min().item(), int((terms < 0).sum()), mean)
    print(f"{str(dtype):16s} | {k3_sign[dtype][0]:+18.4e} {k3_sign[dtype][1]:9d} {mean:+22.3e}")
every_bf16 = torch.arange(2**16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)  # every bit pattern
every_bf16 = every_bf16[torch.isfinite(every_bf16)]  # (65280,) every finite bf16 log-ratio
floor_bf16 = k3_terms(torch.zeros_like(every_bf16), every_bf16).min().item()  # log pi = 0: log r = the value
some_fp32 = 0.01 * torch.randn(100_000, generator=gen)  # (100000,) float32 log-ratios
floor_fp32 = k3_terms(torch.zeros_like(some_fp32), some_fp32).min().item()
print(f"most negative term, k3 in bfloat16 over all {len(every_bf16)} finite bf16 log-ratios: {floor_bf16:+.4e} "
      f"(2^-8 = {2**-8:.4e})")
print(f"most negative term, k3 in float32 over {len(some_fp32)} float32 log-ratios ~ N(0, 0.01^2): {floor_fp32:+.4e} "
      f"(2^-24 = {2**-24:.4e})")
near_one = torch.tensor([-3.0e-8]).bfloat16().float()  # a bf16 log pi of a token with pi ~ 1, upcast
fp32_from_bf16 = k3_terms(near_one, torch.zeros(1)).item()  # log pi_ref = 0
print(f"k3 in float32 from bf16 inputs log pi = {near_one.item():.4e}, log pi_ref = 0: {fp32_from_bf16:+.4e}")
assert k3_sign[torch.bfloat16][0] < 0 and k3_sign[torch.bfloat16][2] < 0 < k3_sign[torch.float64][2]  # bf16: < 0
assert k3_sign[torch.float32][0] >= 0 and k3_sign[torch.float64][0] >= 0  # upcast first: these 1000 terms >= 0
assert floor_bf16 == -(2**-8) and floor_fp32 == -(2**-24)  # the rounding floor of each dtype
assert fp32_from_bf16 == -(2**-24) and f"{near_one.item():.4e}" == "-3.0035e-08"  # as quoted
assert [f"{k3_sign[d][0]:+.4e} {k3_sign[d][1]} {k3_sign[d][2]:+.3e}" for d in k3_sign] == [
    "-3.9062e-03 16 -6.247e-05", "+0.0000e+00 0 +1.827e-06", "+0.0000e+00 0 +1.827e-06"]  # as quoted

# %% [markdown]
# Evaluated in bfloat16, 16 of the 1000 terms are negative, down to −3.9062e-03 = −2⁻⁸, and the mean a
# trainer evaluating k3 in bfloat16 would log is −6.247e-05 for an exact +1.827e-06: a negative k3 mean with
# nothing wrong but the dtype. Upcast to float32 before k3, those 1000 bf16-rounded log-probs give every term
# ≥ 0 and the exact mean to the digits printed. No term of the twin's k3 evaluated in bfloat16 can go below −2⁻⁸
# (every finite bf16 log-ratio is checked). Float32 has a floor of its own, far smaller, and bf16 inputs reach it
# too: the most negative of the 100,000 random float32 terms is −2⁻²⁴ = −5.9605e-08, and so is the term of a
# token the policy is nearly sure of (bf16 log π = −3.0035e-08 against log π_ref = 0: exp rounds to 1, and
# 1 − 3.0035e-08 rounds to 1 − 2⁻²⁴, float32's spacing just below 1). So a negative k3 mean is a bug only when it
# is below the rounding of the dtype k3 is evaluated in.
#
# > **You should know.**
# > - k1 unbiased but noisy and often negative; k2 low variance but biased; k3 unbiased, ≥ 0, low
# >   variance near the reference (because E_π[r] = 1 makes the added r − 1 a zero-mean control variate).
# > - k3 ≥ 0 holds in exact arithmetic. Evaluated in bfloat16 a term can be −2⁻⁸ and the mean of
# >   near-reference tokens negative; upcast the log-probs to float32 before k3, where a term can still be
# >   −2⁻²⁴ (float32's own rounding; −5.9605e-08 above, from bf16 inputs too).
# > - B8 reverses the log-ratio: it estimates χ² − KL, right near the reference and far too large
# >   once the policy has learned something the reference found unlikely; its gradient is ½∇χ²(π ‖ π_ref),
# >   still toward the reference but with a per-token weight π/π_ref − 1 that is unbounded.
# > - As a loss, k3's gradient is that of KL(π_ref ‖ π); it matches ∇KL(π ‖ π_ref) to first order.
#
# <details><summary>Question: a colleague logs the mean of k1 and sees a negative KL. Bug?
# (Answer)</summary>
#
# Not necessarily: k1 = log π − log π_ref is negative on every token the reference likes more than
# the policy, and its batch mean is a noisy estimate of a small positive number. A negative *k3* mean is a
# bug only when it is below the rounding of the dtype k3 is evaluated in: k3 ≥ 0 term by term in exact
# arithmetic, but evaluated in bfloat16 a term can be −2⁻⁸ (−3.9062e-03) and the 1000 near-reference tokens
# above average −6.247e-05; evaluated in float32 from those 1000 bf16 log-probs every term is ≥ 0, and in
# general a float32 term can be −2⁻²⁴ = −5.9605e-08, float32's own rounding floor.
# </details>

# %% [markdown]
# ### 2.3 What β buys and what it costs
#
# **Question.** The loss is −J + β·KL. What happens to reward and KL as β grows?
#
# Three short runs of the fixed twin from the SFT checkpoint (β ∈ {0, 0.1, 0.5}; 0.1 is the default), 20
# iterations of 8 prompts × 8 samples, seed 0, are computed once; the slider only selects.
# The KL plotted is the **exact** per-token
# KL(π ‖ π_ref) after each update (a sum over the vocabulary at every generated position), not the
# noisy k3 estimate the trainer logs.

# %%
BETAS = {"0": 0.0, "0.1": 0.1, "0.5": 0.5}
with progress(f"training {len(BETAS)} runs, one per beta"):
    beta_runs = {label: nb04_stabilisers.instrumented_run(beta=beta, **SHORT) for label, beta in BETAS.items()}
beta_reward = {label: tail_mean(run["clean_reward"]) for label, run in beta_runs.items()}
beta_kl = {label: tail_mean(run["exact_kl"]) for label, run in beta_runs.items()}
print(f"{'beta':>5} | {'reward (last 10)':>16} {'exact KL (last 10)':>18} {'entropy (last)':>14}")
for label, run in beta_runs.items():
    print(f"{label:>5} | {beta_reward[label]:16.3f} {beta_kl[label]:18.3f} {run['history'][-1]['entropy']:14.3f}")
cost = [beta_reward[label] - beta_reward["0.5"] for label in ("0", "0.1")]
print(f"beta = 0.5 costs {min(cost):.3f} to {max(cost):.3f} reward against beta <= 0.1")
assert beta_kl["0.5"] < 0.7 * min(beta_kl["0"], beta_kl["0.1"])  # a large beta holds the policy closest
assert max(beta_reward.values()) - min(beta_reward.values()) < 0.1  # rewards within one short run's noise
assert [f"{beta_kl[b]:.3f} {beta_reward[b]:.3f}" for b in BETAS] == ["0.119 0.469", "0.212 0.419", "0.073 0.411"]

# %%
fig_beta, (ax_r, ax_k) = plt.subplots(1, 2, figsize=(9.0, 3.2), layout="constrained")
BETA_COLORS = dict(zip(BETAS, ("tab:orange", FIXED, "tab:purple"), strict=True))
beta_lines = {label: (ax_r.plot(run["clean_reward"], color=BETA_COLORS[label])[0],
                      ax_k.plot(run["exact_kl"], color=BETA_COLORS[label], label=f"beta {label}")[0])
              for label, run in beta_runs.items()}
ax_r.set(xlabel="iteration", ylabel="reward", ylim=(0, 1))
title_beta = ax_r.set_title(" ")
ax_k.set(xlabel="iteration", ylabel="exact KL(pi || pi_ref) per token", title="KL to the reference",
         ylim=(0, 1.1 * max(max(run["exact_kl"]) for run in beta_runs.values())))
animated(list(beta_lines.values()), title_beta, ax_k.legend(fontsize="small"))


def update_beta(beta):
    """Highlight the run of `beta` (a label of BETAS); -> its reward and exact KL over the last 10 iterations."""
    for label, lines in beta_lines.items():
        for line in lines:
            line.set(lw=2.4 if label == beta else 1.0, alpha=1.0 if label == beta else 0.35)
    title_beta.set_text(f"reward, beta = {beta}")
    return beta_reward[beta], beta_kl[beta]


w_beta = live_plot(fig_beta, update_beta, beta=choice(BETAS, "0.1", "beta"))

# %% tags=["nbval-ignore-output"]
display(w_beta)

# %%
for label in ("0.5", "0"):
    reward, kl = probe(w_beta, {"beta": label})
    print(f"beta {label:>4}: reward {reward:.3f}  exact KL {kl:.3f}")
    assert (reward, kl) == (beta_reward[label], beta_kl[label])

# %% [markdown]
# β = 0.5 holds the policy closest to the reference: an exact KL of 0.073 nats per token over the last 10
# iterations, against 0.119 (β = 0) and 0.212 (β = 0.1). That β = 0 drifted *less* than β = 0.1 is one seed
# of 20 short iterations: the drift depends on which completions happened to be sampled, and the two runs
# consume the same random stream in different ways. The rewards (0.469, 0.419, 0.411) are within that noise
# too, so this run cannot show β's cost in reward; it shows only the drift the large β prevents. (For GRPO
# on LMs that keep a KL term, per-token KLs of 1e-3 to 1e-1 nats are typically reported, with small β; TRL
# 1.16.0's `GRPOConfig.beta` defaults to 0.0, in which case "the reference model is not loaded". The toy's
# 0.073 to 0.212 is larger; it is not a model of an LLM's scale.)
#
# ### 2.4 A flipped sign
#
# `loss = pg_loss - beta * kl` (or a negative β from a config) turns the anchor into a repeller: the policy is
# *rewarded* for moving away from the reference. Not every sign slip does that. A k1 term in the loss has zero
# expected gradient on π's own samples whichever its sign (E_π[∇log π] = 0, notebook 04 §2.2), so at the first inner
# step flipping it changes nothing in expectation. On π_old's samples, from the second inner step, +β·(log π − log
# π_ref) has expected gradient −β∇KL(π_old ‖ π), a push away from π_old (E_{π_old}[∇log π] = −∇KL(π_old ‖ π)), and
# the flipped term +β∇KL(π_old ‖ π), a pull toward it: either way relative to π_old, never to π_ref. A flipped k1
# repels the reference only when it sits in the *reward*, where it acts through the score function. And B8 keeps
# both the value (χ² − KL ≥ 0) and the pull toward the reference (§2.2). The tiny local variant of the real flip is
# `beta=-0.1` in the config; same seed and settings as above.

# %%
flip_runs = {"+0.1": beta_runs["0.1"], "0": beta_runs["0"],
             "-0.1": nb04_stabilisers.instrumented_run(beta=-0.1, **SHORT)}
warnings_per_run = {label: sum(bool(s["health"]) for s in run["history"]) for label, run in flip_runs.items()}
first_kl = {label: sum(run["exact_kl"][:10]) / 10 for label, run in flip_runs.items()}  # iterations 0-9
last_kl = {label: tail_mean(run["exact_kl"]) for label, run in flip_runs.items()}  # iterations 10-19
peak_kl = {label: max(run["exact_kl"]) for label, run in flip_runs.items()}
print(f"{'beta':>5} | {'reward (last 10)':>16} {'exact KL (first 10)':>19} {'(last 10)':>9} {'(max)':>6} "
      f"{'entropy (last)':>14} {'health warnings':>15}")
for label, run in flip_runs.items():
    print(f"{label:>5} | {tail_mean(run['clean_reward']):16.3f} {first_kl[label]:19.3f} {last_kl[label]:9.3f} "
          f"{peak_kl[label]:6.3f} {run['history'][-1]['entropy']:14.3f} {warnings_per_run[label]:15d}")
fig, (ax_k, ax_e) = plt.subplots(1, 2, figsize=(9.0, 3.2), layout="constrained")
for (label, run), color in zip(flip_runs.items(), (FIXED, REFERENCE, BUGGY), strict=True):
    ax_k.plot(run["exact_kl"], color=color, label=f"beta {label}")
    ax_e.plot([s["entropy"] for s in run["history"]], color=color, label=f"beta {label}")
ax_k.axvline(9.5, color="0.6", lw=0.8, ls=":")  # first 10 | last 10 iterations
ax_k.set(xlabel="iteration", ylabel="exact KL(pi || pi_ref)", title="KL to the reference, three signs of beta")
ax_e.set(xlabel="iteration", ylabel="sampling entropy (nats)", title="sampling entropy")
ax_k.legend(fontsize="small")
plt.show()
flipped, free = flip_runs["-0.1"], flip_runs["0"]
assert first_kl["-0.1"] > 2 * max(first_kl["0"], first_kl["+0.1"])  # early: apart from both
assert last_kl["+0.1"] > last_kl["0"] and peak_kl["+0.1"] > last_kl["-0.1"]  # late: a correct run is as high
assert abs(flipped["history"][-1]["entropy"] - free["history"][-1]["entropy"]) < 0.1  # no collapse (yet)
assert tail_mean(flipped["clean_reward"]) < tail_mean(free["clean_reward"])
assert warnings_per_run["-0.1"] == 0  # no health check fires
assert [f"{first_kl[b]:.3f} {last_kl[b]:.3f} {peak_kl[b]:.3f}" for b in flip_runs] == [
    "0.073 0.212 0.491", "0.088 0.119 0.151", "0.214 0.241 0.525"]  # as quoted
assert [f"{v:.3f}" for v in (tail_mean(flipped["clean_reward"]), flipped["history"][-1]["entropy"],
                             free["history"][-1]["entropy"])] == ["0.403", "0.688", "0.649"]  # as quoted

# %% [markdown]
# With the sign flipped the KL climbs from the start: on this seed (0, like every run here) 0.214 nats per token
# over the first 10 iterations, against 0.088 with no penalty (β = 0) and 0.073 with the correct sign (β = +0.1).
# Over the last 10 that margin is gone: the flipped run's 0.241 sits beside the correctly signed run's 0.212, whose
# series is as spiky (up to 0.491 against the flipped run's 0.525), and in this seed even β = +0.1 ends above β = 0
# (0.212 against 0.119). So on seed 0 a flipped sign is separable early, against both a β = 0 and a +β run, and late
# it is within the noise of a correct run. That pattern is seed 0's, and nothing here makes it a rule: this notebook
# runs no other seed, and a short single-seed curve carries the sampling noise seen in §2.3 (β = 0 drifting less
# than β = 0.1 there), so comparing such curves is a hint, not a test; the test is the zero-advantage probe below.
# The reward ends lower (0.403 against 0.469 for β = 0, within this short run's noise): the penalty now pays the
# policy for being different from the reference, not for being right. In 20 iterations the sampling entropy has not
# collapsed (0.688 vs 0.649); what a longer run would do is not measured here. The KL cannot grow without bound in
# any case, since KL(π ‖ π_ref) ≤ max_x log(1/π_ref(x)) at each position. No health check fires (the last column):
# the KL *is* positive, just growing for the wrong reason.
#
# A curve comparison is statistics; the sign itself can be tested in one step. Set every advantage to 0, so
# that the loss is β·k3 alone, and take one small plain gradient step (SGD, lr 1e-2: the trainer's Adam would
# carry momentum from the earlier batches' policy-gradient steps) with the trainer's own `update_policy`. To
# first order that step changes the batch's own k3 estimate by −η β ‖∇k3‖², so that estimate must fall when
# β > 0 and rise when β < 0: the step descends (or, flipped, ascends) the batch's k3, and in expectation k3's
# gradient is that of the *forward* KL(π_ref ‖ π). The exact *reverse* KL(π ‖ π_ref), the one this notebook
# plots, need not move the same way: a step down the forward KL can raise the reverse one (an example follows
# the probe). So the cell prints both and the sign test is the k3 column. The probe tests a KL
# term *in the loss*; with the KL in the reward (verl 0.9.1's `use_kl_in_reward`, TRL 1.16.0's
# RLOOTrainer), zeroing the advantages removes the KL too and nothing moves. The probe, on a fresh batch
# sampled from each run's final policy, with that run's β:

# %%
def zero_advantage_probe(policy, ref_policy, beta, lr=1e-2, seed=0):
    """One SGD step of the fixed twin's update_policy (one full-batch step, the config's beta) on a fresh
    batch from `policy` whose advantages are all set to 0: the loss is beta * k3 alone.
    -> the batch's k3 (the loss's own KL term) and the exact KL(pi || pi_ref) per token on that batch,
    each as (before, after) the step"""
    policy = copy.deepcopy(policy)  # the run's own policy stays as it is
    cfg = grpo_fixed.make_config(beta=beta, inner_epochs=1, minibatches=1, **SHORT)
    task, generator = grpo_fixed.AdditionTask(), torch.Generator().manual_seed(seed)
    batch, _ = grpo_fixed.rollout(policy, ref_policy, grpo_fixed.CharTokenizer(task.alphabet), task, cfg, generator)
    batch["advantages"] = torch.zeros_like(batch["advantages"])  # (N,) no policy-gradient signal left
    cached = (batch["prompt_ids"], batch["prompt_mask"], batch["completions"], batch["mask"], cfg.temperature)

    def measure():  # -> (k3 of the batch as the loss computes it, exact KL)
        with torch.no_grad():
            logprobs = grpo_fixed.policy_logprobs(policy, *cached)  # (N, T)
            k3 = grpo_fixed.kl_to_reference(logprobs, batch["ref_logprobs"], batch["mask"]).item()
        return k3, nb04_stabilisers.exact_token_kl(grpo_fixed, policy, ref_policy, batch, cfg.temperature)

    before = measure()
    grpo_fixed.update_policy(policy, torch.optim.SGD(policy.parameters(), lr=lr), batch, cfg, generator)
    after = measure()
    return {"k3": (before[0], after[0]), "exact": (before[1], after[1])}


probe_kl = {label: zero_advantage_probe(run["policy"], run["ref_policy"], float(label))
            for label, run in flip_runs.items()}
change = {label: {kind: after - before for kind, (before, after) in p.items()} for label, p in probe_kl.items()}
print(f"{'beta':>5} | {'batch k3 before':>15} {'after':>7} {'change':>10} | {'exact KL before':>15} {'after':>7} "
      f"{'change':>10}")
for label, p in probe_kl.items():
    print(f"{label:>5} | {p['k3'][0]:15.4f} {p['k3'][1]:7.4f} {change[label]['k3']:+10.2e} | "
          f"{p['exact'][0]:15.4f} {p['exact'][1]:7.4f} {change[label]['exact']:+10.2e}")
assert change["+0.1"]["k3"] < 0 < change["-0.1"]["k3"]  # the sign test: the batch's k3 falls iff beta > 0
assert change["+0.1"]["exact"] < 0 < change["-0.1"]["exact"]  # the exact reverse KL followed it here
assert change["0"] == {"k3": 0.0, "exact": 0.0}  # beta = 0: no gradient at all, nothing moves
assert [f"{change[b]['k3']:+.2e} {change[b]['exact']:+.2e}" for b in probe_kl] == [
    "-9.87e-02 -3.57e-03", "+0.00e+00 +0.00e+00", "+3.22e-01 +6.87e-02"]  # as quoted

# %% [markdown]
# The correctly signed run's step lowers the batch's k3 (by 9.87e-02), the flipped run's raises it (by
# 3.22e-01), and β = 0 has nothing to test (no gradient, no change). The exact KL(π ‖ π_ref) followed the
# same signs here (−3.57e-03 and +6.87e-02), but only the k3 sign is guaranteed. Unlike the curves this
# needs no comparison run, only the checkpoint and the config; on a real trainer it is one extra step on a
# copy of the model, reading the KL term exactly as that trainer's loss computes it (a ratio-weighted k3 needs its
# own reading, below). What the first-order argument guarantees is the sign, for a step free of momentum and small
# enough; the flipped run's step moved k3 by 45 % (0.7202 → 1.0421) and the sign held.

# %% [markdown]
# Why the reverse KL need not follow: one softmax over five tokens, π far from π_ref (reverse KL 0.77
# nats), and one plain gradient step on the logits z down the forward KL(π_ref ‖ π), whose gradient in z is
# π − π_ref.

# %%
pi_far = torch.tensor([0.0242, 0.0053, 0.1536, 0.8084, 0.0084], dtype=torch.float64)  # (5,) policy
pi_ref_far = torch.tensor([0.0393, 0.4042, 0.0140, 0.4607, 0.0818], dtype=torch.float64)  # (5,) reference
pi_far, pi_ref_far = pi_far / pi_far.sum(), pi_ref_far / pi_ref_far.sum()


def forward_and_reverse_kl(logits):
    """-> (KL(pi_ref || pi), KL(pi || pi_ref)) for pi = softmax(logits), in nats"""
    pi = logits.softmax(-1)
    return (pi_ref_far * (pi_ref_far / pi).log()).sum().item(), (pi * (pi / pi_ref_far).log()).sum().item()


logits_far = pi_far.log()  # (5,)
logits_fwd = logits_far - 0.1 * (pi_far - pi_ref_far)  # (5,) one step down the forward KL, lr 0.1
kl_before, kl_after = forward_and_reverse_kl(logits_far), forward_and_reverse_kl(logits_fwd)
moved = logits_fwd.softmax(-1) - pi_far  # (5,) the probability each token gains
log_ratio_far = (pi_far / pi_ref_far).log()  # (5,)
print(f"forward KL(pi_ref || pi) {kl_before[0]:.4f} -> {kl_after[0]:.4f}; "
      f"reverse KL(pi || pi_ref) {kl_before[1]:.4f} -> {kl_after[1]:.4f}")
print("token             " + " ".join(f"{i:>8d}" for i in range(1, 6)))
for name, row in (("pi", pi_far), ("pi_ref", pi_ref_far), ("log(pi / pi_ref)", log_ratio_far), ("gain in pi", moved)):
    print(f"{name:17s} " + " ".join(f"{v:+8.4f}" for v in row.tolist()))
print(f"first order: sum_i log(pi_i / pi_ref_i) * gain_i = {(log_ratio_far * moved).sum().item():+.4f}")
assert kl_after[0] < kl_before[0] and kl_after[1] > kl_before[1]  # down the forward KL, up the reverse one
assert moved.argmax().item() == 2 and moved.argmin().item() == 3  # mass goes from token 4 mostly to token 3
assert [f"{v:.4f}" for v in (*kl_before, *kl_after)] == ["1.6644", "0.7688", "1.6340", "0.7698"]  # as quoted
assert [f"{v:+.4f}" for v in moved.tolist()] == ["+0.0008", "+0.0004", "+0.0025", "-0.0039", "+0.0003"]

# %% [markdown]
# The step lowers the forward KL (1.6644 → 1.6340) and raises the reverse one (0.7688 → 0.7698). In logits it
# lowers the fourth token most (π 0.81 against π_ref 0.46) and raises the second most (0.005 against 0.40), but
# in probability the 0.0039 taken from the fourth goes mostly to the third (+0.0025), which π already
# over-weights (0.15 against 0.014): the second is too rare to absorb much (+0.0004). To first order the reverse
# KL changes by Σ_i log(π_i/π_ref,i)·Δπ_i, and the third token's log-ratio, +2.40, is the largest: mass moved onto
# it raises the reverse KL more than the other moves lower it. So a probe that watches the exact reverse KL can
# read the wrong sign when π is far from π_ref; the loss's own KL term, to first order, cannot.
#
# That is also why the probe must read the KL term *as the loss computes it*. With β ≠ 0, TRL 1.16.0's
# `use_bias_correction_kl=True` (its default, notebook 06 §6) puts ρ·k3 in the loss, whose expected gradient, with
# token-level ratios (its default `importance_sampling_level="token"`), is that of each position's reverse KL, while
# the plain k3 of the same π_old samples moves, to first order, with the forward KL. One correctly signed step down
# the reverse KL on the same pair:

# %%
logits_rev = logits_far - 0.1 * pi_far * (log_ratio_far - kl_before[1])  # (5,) one step down KL(pi || pi_ref)
pi_rev = logits_rev.softmax(-1)  # (5,)


def k3_mean(pi, weights):
    """sum_x weights(x) * k3(x), k3 = pi_ref/pi - 1 - log(pi_ref/pi): the batch mean of k3 in expectation over
    samples drawn from `weights`"""
    r = pi_ref_far / pi  # (5,)
    return (weights * (r - 1 - r.log())).sum().item()


kl_rev = forward_and_reverse_kl(logits_rev)
plain_k3 = (k3_mean(pi_far, pi_far), k3_mean(pi_rev, pi_far))  # on pi_old's samples, unweighted
rho_k3 = (k3_mean(pi_far, pi_far), k3_mean(pi_rev, pi_rev))  # weighted by rho = pi / pi_old: the reverse KL
print(f"reverse KL {kl_before[1]:.4f} -> {kl_rev[1]:.4f}; forward KL {kl_before[0]:.4f} -> {kl_rev[0]:.4f}")
print(f"batch mean of rho * k3 {rho_k3[0]:.4f} -> {rho_k3[1]:.4f}; of plain k3 {plain_k3[0]:.4f} -> {plain_k3[1]:.4f}")
assert rho_k3[1] < rho_k3[0] and plain_k3[1] > plain_k3[0]  # the loss's term falls, plain k3 rises
assert [f"{v:.4f}" for v in (*kl_rev, *rho_k3, *plain_k3)] == [
    "1.6655", "0.7598", "0.7688", "0.7598", "0.7688", "0.7699"]  # as quoted

# %% [markdown]
# The correctly signed step lowers the reverse KL and the batch's ρ·k3 with it (0.7688 → 0.7598), while the
# plain k3 of the same π_old samples rises (0.7688 → 0.7699), as the forward KL does (1.6644 → 1.6655). A probe
# that watched plain k3 under that TRL default would call a correct sign flipped; the one to watch is ρ·k3, with
# π_old frozen at the weights before the step.
#
# ### 2.5 Why the reference, and not the old policy
#
# **Question.** PPO already keeps π close to π_old through the ratio. Why not penalise KL(π ‖ π_old)?
#
# Because π_old is reset to the current policy at every rollout. The β = 0.1 run, inner step by
# inner step (4 per iteration): the k3 estimate of KL(π ‖ π_old), from the logged ratios
# (mean of 1/ρ − 1 + log ρ), and the trainer's own k3 estimate of KL(π ‖ π_ref).

# %%
run = beta_runs["0.1"]
kl_old = [step["kl_old"] for it in run["inner"] for step in it]  # (iterations * inner steps,)
kl_ref = [step["kl_ref"] for it in run["inner"] for step in it]
first_step_old = [it[0]["kl_old"] for it in run["inner"]]
last_step_old = sum(it[-1]["kl_old"] for it in run["inner"]) / len(run["inner"])
print(f"inner steps per iteration: {len(run['inner'][0])}, iterations: {len(run['inner'])}")
print(f"KL to pi_old at the first inner step, max over iterations: {max(first_step_old):.6f}")
print(f"KL to pi_old at the last inner step, mean over iterations: {last_step_old:.4f}")
print("KL to pi_ref at iterations 0, 10, 19: "
      + "  ".join(f"{run['inner'][i][0]['kl_ref']:.4f}" for i in (0, 10, 19)))
fig, ax = plt.subplots(figsize=(9.0, 3.0), layout="constrained")
ax.plot(kl_ref, color=FIXED, label="k3 to pi_ref (frozen at init)")
ax.plot(kl_old, color=BUGGY, label="k3 to pi_old (reset every rollout)")
ax.set(xlabel="inner step (4 per iteration)", ylabel="KL estimate per token")
ax.legend(fontsize="small")
plt.show()
assert max(first_step_old) == 0.0 and last_step_old < 0.1 < run["inner"][19][0]["kl_ref"]

# %% [markdown]
# KL(π ‖ π_old) is exactly 0 at the first inner step of every iteration (π *is* π_old there) and
# averages 0.0282 at the last inner step before it is reset, while KL(π ‖ π_ref) accumulates the drift
# of all iterations: 0.0000 at the first step, 0.0479 by iteration 10, 0.3162 by iteration 19 (the
# trace is noisy: it is k3 on one minibatch). A penalty on KL to π_old would also have zero
# *gradient* at the first inner step (k3's gradient is 1 − r = 0 at r = 1), and it can never see the
# sum of many small, individually acceptable steps. That accumulated drift, away from the model you
# started from, is what the reference anchor limits.
#
# > **You should know.**
# > - β trades reward for staying close: here β = 0.5 held the exact KL over the last 10 iterations at
# >   0.073 nats/token against 0.119 to 0.212 for β = 0 and 0.1; 20 iterations of 64 samples are too few to
# >   measure its cost in reward.
# > - A flipped sign on the penalty does not crash anything. On seed 0 the KL climbs from the start (over the
# >   *first* 10 iterations 0.214, against 0.088 at β = 0 and 0.073 at β = +0.1), and over the last 10 it is within
# >   the noise of a correctly signed run (0.241 against 0.212). One seed's short curves are a hint, not a test. The
# >   test is one small SGD step with every advantage set to 0: the loss's own KL term on the batch must fall (k3
# >   here: −9.87e-02; flipped +3.22e-01; with TRL 1.16.0's use_bias_correction_kl it is ρ·k3, and plain k3 can rise
# >   after a correct step); the exact KL(π ‖ π_ref) followed here (−3.57e-03; +6.87e-02) but need not (§2.4's
# >   five-token example). It tests a KL in the loss: with the KL in the reward, zeroing the advantages removes it
# >   too. A flipped k1 *in the loss* does nothing in expectation on π's own samples (on π_old's it acts relative to
# >   π_old,
# >   not π_ref); in the reward it repels.
# > - The ratio clip bounds one iteration's step against π_old; the KL anchor bounds the total drift
# >   against π_ref. π_old cannot do the second job: KL to it restarts from 0 every rollout.
#
# <details><summary>Question: your KL curve is flat at exactly 0.0000 for the whole run while the reward
# rises. What are the likely causes? (Answer)</summary>
#
# The "reference" is the policy itself: the same module (no `deepcopy`), parameters shared with the policy
# (a shallow copy, tied modules), or ref log-probs computed with `policy` instead of `ref_policy` inside the
# inner loop. Or nothing is computed at all: β = 0 with a logger that writes a default 0, or a mask bug that
# leaves the KL's masked mean empty (a "safe" masked mean returns 0). A reference re-copied from the policy at
# every rollout would not give a flat 0 but the red sawtooth above: π_old in disguise.
# </details>

# %% [markdown]
# ## 3. Reward normalisation
#
# ### 3.1 The gradient follows the reward's units unless you divide by the std
#
# **Question.** Multiply every reward by s. What happens to the update?
#
# **Key equation.** Without normalisation A_i = r_i − mean(r) scales with s, and so does the policy
# gradient: ∇(−J) ∝ s. With A_i = (r_i − mean r)/(std r + ε) the factor s cancels (as long as
# s·std ≫ ε). The advantage without the std, as a drop-in for `group_advantage`:

# %%
def centred_advantage(rewards, eps: float = 1e-8):
    """No advantage normalisation: A_i = r_i - mean(r), the group baseline only (eps unused).
    rewards: one group's G numbers -> (G,) float64"""
    r = torch.as_tensor(rewards, dtype=torch.float64)  # (G,)
    return r - r.mean()


print("rewards [0, 1, 1, 0] x s: centred " + ", ".join(
    f"s = {s:g}: {centred_advantage([0.0, s, s, 0.0]).tolist()}" for s in (1.0, 100.0)))
print(f"                       normalised s = 100: {grpo_fixed.group_advantage([0.0, 100.0, 100.0, 0.0]).tolist()}")

# %% [markdown]
# Measured on one rollout batch (8 prompts × 8 samples, the SFT policy from `setup_run`): the norm of the
# gradient of the clipped surrogate.

# %%
print(f"{'scale s':>8} | {'grad norm, A = r - mean':>23} {'grad norm, normalised':>21}")
grad_norms = {}
for scale in (0.01, 1.0, 100.0):
    grad_norms[scale] = tuple(nb04_stabilisers.pg_grad_norm(fn, scale)
                              for fn in (centred_advantage, grpo_fixed.group_advantage))
    print(f"{scale:8.2f} | {grad_norms[scale][0]:23.4e} {grad_norms[scale][1]:21.4e}")
assert math.isclose(grad_norms[100.0][0], 1e4 * grad_norms[0.01][0], rel_tol=1e-4)  # proportional to s
assert math.isclose(grad_norms[100.0][1], grad_norms[0.01][1], rel_tol=1e-4)  # s cancels

# %% [markdown]
# With plain SGD that would be the step: 100× the rewards, 100× the step. The twins use **Adam**, which
# divides each parameter's gradient by a running RMS, so a constant overall scale cancels up to Adam's ε; and before
# Adam sees it the twin clips the gradient norm to `max_grad_norm` = 1.0, which also takes out the scale of a
# large gradient. Both rescale the policy term and the KL term together, so neither cancels the balance inside
# the loss: −J scales with s, β·KL does not, so without normalisation the effective penalty weight is β/s (in
# normalised-advantage units, β/(s·std r)).
#
# Six short runs (β = 0.1, the default) with rewards scaled by s ∈ {0.01, 1, 100}, with and without
# normalisation, computed once (the normalised s = 1 run is the β = 0.1 run of notebook 04 §2, reused); the
# slider picks s. The reward plotted is the clean reward (the fraction of exact sums, before scaling).

# %%
SCALES = {"0.01": 0.01, "1": 1.0, "100": 100.0}
NORMALISATION = {False: centred_advantage, True: None}  # None: the twin's own group_advantage
with progress("training one run per scale, with and without normalisation"):
    scale_runs = {(label, norm): nb04_stabilisers.instrumented_run(advantage_fn=NORMALISATION[norm],
                                                                    reward_scale=s, **SHORT)
                  for label, s in SCALES.items() for norm in (False, True)}
scale_reward = {key: tail_mean(run["clean_reward"]) for key, run in scale_runs.items()}
scale_kl = {key: tail_mean(run["exact_kl"]) for key, run in scale_runs.items()}
print(f"{'scale':>6} {'normalised':>10} | {'reward (last 10)':>16} {'exact KL (last 10)':>18} {'max grad norm':>13}")
for (label, norm), run in scale_runs.items():
    print(f"{label:>6} {norm!s:>10} | {scale_reward[label, norm]:16.3f} {scale_kl[label, norm]:18.3f} "
          f"{max(s['grad_norm'] for s in run['history']):13.3f}")
assert scale_runs["1", True] is beta_runs["0.1"]  # the same cached run
assert scale_kl["0.01", False] < 0.2 * scale_kl["1", False]  # beta / s = 10 pins it
assert scale_reward["0.01", False] == min(scale_reward.values())
# beta / s = 0.001 (s = 100) and 0.1 (s = 1) both log a KL within 0.05 of beta = 0: one seed cannot tell them apart
assert all(abs(scale_kl[label, False] - beta_kl["0"]) < 0.05 for label in ("100", "1"))
assert scale_runs["100", True]["clean_reward"] == scale_runs["1", True]["clean_reward"]  # to the last digit
small, unit = scale_runs["0.01", True], scale_runs["1", True]
first_apart = next((i for i, (a, b) in enumerate(zip(small["clean_reward"], unit["clean_reward"], strict=True))
                    if a != b), None)
kl_gaps = [abs(a - b) for a, b in zip(small["exact_kl"], unit["exact_kl"], strict=True)]  # per iteration
kl_gap = max(kl_gaps)
print(f"normalised s = 0.01 vs s = 1: rewards apart from iteration {first_apart} on (None: never); "
      f"exact-KL difference after the first update {kl_gaps[0]:.1e}, largest {kl_gap:.1e} "
      f"(iteration {kl_gaps.index(kl_gap)})")
FIRST_APART = None
assert first_apart is FIRST_APART  # the iteration the text quotes (None: never within the run)
assert 0 < kl_gaps[0] < 1e-6 and kl_gap < 1e-3  # the parameters differ, from their last digits on
assert (f"{kl_gaps[0]:.1e} {kl_gap:.1e}", kl_gaps.index(kl_gap)) == ("7.5e-09 6.1e-04", 19)  # as quoted

# %%
fig_scale, axes_scale = plt.subplots(1, 2, figsize=(9.0, 3.2), sharey=True, layout="constrained")
title_scale = fig_scale.suptitle(" ")
scale_lines = {}  # normalised -> (reward line, KL line) of the selected scale
for ax, norm in zip(axes_scale, (False, True), strict=True):
    color = FIXED if norm else BUGGY
    ax.plot(scale_runs["1", norm]["clean_reward"], color="0.75", label="reward, s = 1")
    (reward_line,) = ax.plot(scale_runs["1", norm]["clean_reward"], color=color, lw=2, label="reward, selected s")
    (kl_line,) = ax.plot(scale_runs["1", norm]["exact_kl"], color=color, ls="--", label="exact KL, selected s")
    animated(reward_line, kl_line, ax.legend(fontsize="small", loc="upper left"))
    scale_lines[norm] = (reward_line, kl_line)
    ax.set(xlabel="iteration", title="normalised A (fixed)" if norm else "A = r - mean (no std)", ylim=(0, 1.6))
axes_scale[0].set_ylabel("reward / KL (nats)")
animated(title_scale)


def update_scale(scale):
    """Show the runs with rewards x `scale` (a label of SCALES); -> {normalised: reward over the last 10}."""
    for norm, (reward_line, kl_line) in scale_lines.items():
        reward_line.set_ydata(scale_runs[scale, norm]["clean_reward"])
        kl_line.set_ydata(scale_runs[scale, norm]["exact_kl"])
    title_scale.set_text(f"rewards multiplied by s = {scale}")
    return {norm: scale_reward[scale, norm] for norm in (False, True)}


w_scale = live_plot(fig_scale, update_scale, scale=choice(SCALES, "0.01", "reward scale"))

# %% tags=["nbval-ignore-output"]
display(w_scale)

# %%
for label in ("100", "1"):
    rewards = probe(w_scale, {"reward scale": label})
    print(f"s = {label:>4}: reward without normalisation {rewards[False]:.3f}, with {rewards[True]:.3f}")
    assert rewards == {norm: scale_reward[label, norm] for norm in (False, True)}

# %% [markdown]
# With normalisation the three runs end together (reward 0.419 for s = 0.01, 1 and 100): the normalised
# advantages are the same for every s up to ε and float rounding, and the units drop out only while
# s·σ ≫ ε. s = 100 reproduces the s = 1 run to the last digit. At s = 0.01, ε/(s·σ) and float32 rounding
# move the advantages in their last digits, so after the first update the two runs' parameters differ in
# their last digits (the exact KL by 7.5e-09), and the gap grows with the updates (6.1e-04 at the last
# iteration). The two runs share one random stream, so
# they stay together until some sampling draw falls between their probabilities and a completion differs;
# in these 20 iterations that never happened (the cell above prints the iteration where the rewards
# depart, None here). A longer run would depart at some point and then stay correlated but not equal.
# Without normalisation, s = 0.01 stays at the lowest reward of the six (0.283, exact KL 0.010: the
# effective β is 0.1/0.01 = 10, a hundred times that of the s = 1 run, and it pins the policy to the
# reference harder than β = 0.5 did). The other end is not resolved by runs this short: s = 100 (effective
# β = 0.001) logs an exact KL of 0.136, but the s = 1 run (effective β = 0.1) logs 0.107 and the β = 0 run
# 0.119, all within one seed's noise of each other. Twenty iterations separate β/s = 10 from the rest, not
# 0.001 from 0.1.
#
# ### 3.2 B2 at tiny reward scales (the eps)
#
# **Question.** What does `group_advantage` do as the reward scale s → 0? The group is s·[0, 0, 1, 1];
# the ideal answer is A = [−1, −1, +1, +1] at any scale, and A = 0 for a constant group.

# %%
print(f"{'scale s':>9} | {'buggy A_4':>12} {'fixed A_4':>12}")
a4 = {}
for scale in (1e2, 1.0, 1e-8, 1e-12, 1e-100, 1e-170, 1e200, 1e308):
    group = [0.0, 0.0, scale, scale]
    a4[scale] = grpo_buggy.group_advantage(group)[3].item(), grpo_fixed.group_advantage(group)[3].item()
    print(f"{scale:9.0e} | {a4[scale][0]:12.4e} {a4[scale][1]:12.4e}")
print(f"constant group [1, 1, 1]: buggy {grpo_buggy.group_advantage([1.0, 1.0, 1.0]).tolist()}, "
      f"fixed {grpo_fixed.group_advantage([1.0, 1.0, 1.0]).tolist()}")
rounding = [0.3, 0.1 + 0.2, 0.3, 0.3]  # 0.1 + 0.2 = 0.30000000000000004
print("rewards [0.3, 0.1 + 0.2, 0.3, 0.3]: buggy " + " ".join(f"{a:+.4f}" for a in grpo_buggy.group_advantage(rounding))
      + " | fixed " + " ".join(f"{a:+.2e}" for a in grpo_fixed.group_advantage(rounding)))
print(f"the rounding difference: 0.1 + 0.2 - 0.3 = {0.1 + 0.2 - 0.3:.1e}")
assert f"{0.1 + 0.2 - 0.3:.1e}" == "5.6e-17"  # as quoted
assert a4[1e-170][0] == math.inf and a4[1e200][0] == 0 and math.isnan(a4[1e308][0])
assert all(math.isfinite(fixed) for _, fixed in a4.values()) and f"{a4[1e-8][1]:.4f}" == "0.3333"
assert grpo_buggy.group_advantage(rounding).abs().max() > 1 > 1e-8 > grpo_fixed.group_advantage(rounding).abs().max()

# %% [markdown]
# Two lessons. First, the buggy `(r − mean)/std` is *too* scale-invariant: it turns any difference
# into a full-size advantage, even one of 5.6e-17 from floating-point rounding. In the last line three
# equal rewards get −1.1547 each and the odd one 0: the mean itself is rounded, so this "signal" is
# pure noise with the wrong shape. Then it breaks at both ends: ±inf once the squared deviations
# underflow (s = 1e-170), 0 once they overflow (s = 1e200: std = inf), NaN when the mean overflows
# (s = 1e308) and for a constant group (0/0). Second, the fixed twin's ε is a deliberate floor: reward
# differences well below ε = 1e-8 are treated as no signal (A_4 = 0.3333 at s = 1e-8, 5e-5 at
# s = 1e-12, a few 1e-9 for the rounding example) and nothing blows up.

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
# ### 3.3 An outlier reward in a normalised group: bounded, not harmless
#
# **Question.** One sample's reward is an outlier (a reward-model glitch adds 1000). What advantage
# does it get, and what happens to the other samples of its group?
#
# **Key equation.** Write d_j = r_j − mean(r) and σ² = (1/G) Σ_j d_j² (population std). The deviations
# sum to zero, so the other G − 1 sum to −d_i, and by Cauchy–Schwarz Σ_{j≠i} d_j² ≥ d_i²/(G − 1). Then
#
# $$G\sigma^2 \ge d_i^2\Big(1 + \frac{1}{G-1}\Big) = d_i^2\,\frac{G}{G-1}
# \quad\Longrightarrow\quad |A_i| = \frac{|d_i|}{\sigma} \le \sqrt{G-1},$$
#
# with equality exactly when the other G − 1 deviations are equal: one sample differs, the rest share
# one reward. They then all get A_j = −d_i/((G − 1)σ) = −1/√(G − 1). So normalisation caps the
# *magnitude*: an outlier reward cannot produce an outlier advantage. It does not cap the *damage*: the
# glitched sample takes the group's largest advantage, and every other sample, correct or not, is pushed
# down by nearly the same amount.
#
# **Tiny input.** A group of G = 8 with three correct answers (reward 1) and five wrong (0); then the
# same group with the glitch added to wrong sample 2, normalised (the fixed twin) and only centred.

# %%
clean_group = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]  # (G,) 3 correct of 8
glitched = list(clean_group)
glitched[1] += 1000.0  # a glitch on a wrong sample
A_clean, A_glitch = grpo_fixed.group_advantage(clean_group), grpo_fixed.group_advantage(glitched)
A_centred = centred_advantage(glitched)
print(f"{'sample':>6} {'reward':>7} {'glitch':>7} | {'A clean':>8} {'A glitch':>9} {'A glitch, centred':>17}")
for i in range(G):
    print(f"{i + 1:6d} {clean_group[i]:7.0f} {glitched[i] - clean_group[i]:7.0f} | {A_clean[i]:+8.4f} "
          f"{A_glitch[i]:+9.4f} {A_centred[i]:+17.4f}")
correct = torch.tensor(clean_group) == 1  # (G,)
others = torch.arange(G) != 1  # (G,) every sample but the glitched one
gap_clean = (A_clean[correct].mean() - A_clean[~correct].mean()).item()
gap_glitch = (A_glitch[correct].mean() - A_glitch[~correct & others].mean()).item()
print(f"bound sqrt(G - 1) = {math.sqrt(G - 1):.4f}; -1/sqrt(G - 1) = {-1 / math.sqrt(G - 1):.4f}")
print(f"advantage gap, correct minus wrong: clean {gap_clean:.4f}, among the 7 unglitched samples {gap_glitch:.6f}")
assert A_clean.abs().max() <= math.sqrt(G - 1) and A_glitch.abs().max() <= math.sqrt(G - 1)  # the bound
assert A_glitch[1] > 0.999 * math.sqrt(G - 1) and A_glitch.argmax() == 1  # the glitch takes the top advantage
assert (A_glitch[others] < 0).all() and (A_glitch[correct] < 0).all()  # every correct answer is pushed down
assert ((A_glitch[others] + 1 / math.sqrt(G - 1)).abs() < 0.002).all() and gap_glitch < gap_clean / 500
assert A_centred[1] > 100 * math.sqrt(G - 1)  # without the std: no bound (the gradient spikes of notebook 04 §4)

# %% [markdown]
# The glitched wrong answer gets +2.6457, a hair under √7 = 2.6458, and the three correct answers drop
# from +1.2910 to −0.3762: the group's lesson is now "make this wrong answer more likely, everything else
# less". The correct-vs-wrong difference among the other seven survives only as a gap of 0.003 (it was
# 2.0656). Without the std (last column) the glitched sample's advantage is +875, which is the gradient
# spike notebook 04 §4 clips. With the std, the damage stays inside one group of the batch: the other
# prompts' advantages are untouched. It is still a wrong update on that prompt, and an interview answer
# that says "normalisation makes outliers harmless" has missed it.
#
# > **Catalog note: a reward outlier in a normalised group.**
# > - Symptom: nothing spikes; a prompt occasionally reinforces a completion the task scores as wrong,
# >   and its correct completions get A ≈ −1/√(G−1).
# > - Statistic: the raw per-sample reward against the task's range, *before* normalisation erases the
# >   outlier's size (a +5 and a +1000 glitch end at A = 2.5298 and 2.6457). The batch-mean `reward`
# >   check of `grpo_support.STATS` sees a +1000 glitch but not a +5 one, diluted over 64 samples (next
# >   cell). A glitch that stays inside the range (a wrong answer scored 1) is invisible to both: only
# >   an audit of the reward on known answers finds it.
# > - Fix: at the reward, not the advantage: validate or clip rewards to their known range before
# >   `group_advantage`, and log the max reward per batch.

# %%
batch_rewards = torch.tensor(clean_group * 8)  # (64,) a batch of 8 prompts like the one above
print(f"reward row of STATS: {grpo_support.STATS['reward'].meaning}, healthy {render_range('reward')}")
seen, a_top = {}, {}
for size in (1000.0, 5.0):
    rewards = batch_rewards.clone()
    rewards[1] += size  # one glitched sample, in the first group
    seen[size] = (grpo_fixed.in_range({"reward": rewards.mean().item()}, "reward"),
                  grpo_fixed.in_range({"reward": rewards.max().item()}, "reward"))
    a_top[size] = grpo_fixed.group_advantage(rewards[:G].tolist())[1].item()
    print(f"glitch +{size:<6g}: batch mean {rewards.mean():8.4f} in range {seen[size][0]!s:5}, max sample reward "
          f"{rewards.max():6.0f} in range {seen[size][1]!s:5}; glitched sample's A {a_top[size]:.4f}")
assert a_top[1000.0] / a_top[5.0] < 1.05  # 200 times the glitch, 5% more advantage
assert seen == {1000.0: (False, False), 5.0: (True, False)}  # the mean misses the small glitch, the max does not

# %% [markdown]
# ### 3.4 Population vs sample std
#
# **Question.** The spec (SPEC.md, sentence S4 `population-std`) asks for the *population* std, dividing the
# squared deviations by G. `Tensor.std()` divides by G − 1 by default (Bessel's correction, `correction=1`,
# formerly `unbiased=True`). Does it matter?
#
# **Key equation.** std_{G−1} = std_G · √(G/(G−1)), so the sample-std advantage is the population one
# times √((G−1)/G): 0.7071 for G = 2, 0.9354 for G = 8. The bound of notebook 04 §3.3 becomes
# (G−1)/√G, and the mean of A² over a non-constant group is (G−1)/G instead of 1.

# %%
def sample_std_advantage(rewards, eps: float = 1e-8):
    """A_i = (r_i - mean r) / (std_{G-1}(r) + eps) with Tensor.std()'s default, Bessel-corrected std.
    rewards: one group's G numbers -> (G,) float64"""
    r = torch.as_tensor(rewards, dtype=torch.float64)  # (G,)
    return (r - r.mean()) / (r.std() + eps)


pair = torch.tensor([0.0, 1.0])
print(f"torch.tensor([0., 1.]).std() = {pair.std():.4f}, .std(correction=0) = {pair.std(correction=0):.4f}")
print("G = 2, rewards [0, 1]: population A " + ", ".join(f"{a:+.4f}" for a in grpo_fixed.group_advantage([0.0, 1.0]))
      + "; sample A " + ", ".join(f"{a:+.4f}" for a in sample_std_advantage([0.0, 1.0])))
g4 = [0.0, 0.0, 0.0, 1.0]  # the self-check's group
g4_text = (" ".join(f"{a:+.4f}" for a in grpo_fixed.group_advantage(g4)), " ".join(f"{a:+.4f}" for a in
                                                                                    sample_std_advantage(g4)))
print(f"G = 4, rewards [0, 0, 0, 1]: population A {g4_text[0]}; sample A {g4_text[1]}")
assert g4_text == ("-0.5774 -0.5774 -0.5774 +1.7321", "-0.5000 -0.5000 -0.5000 +1.5000")  # as quoted in the self-check
print(f"{'G':>3} | {'max |A| pop':>11} {'max |A| sample':>14} {'ratio':>6} | "
      f"{'mean A^2 pop':>12} {'mean A^2 sample':>15}")
for g in (2, 4, 8, 16):
    one_success = [1.0] + [0.0] * (g - 1)
    pop, smp = grpo_fixed.group_advantage(one_success), sample_std_advantage(one_success)
    print(f"{g:3d} | {pop.abs().max():11.4f} {smp.abs().max():14.4f} {smp[0] / pop[0]:6.4f} | "
          f"{pop.pow(2).mean():12.6f} {smp.pow(2).mean():15.6f}")
    assert math.isclose(pop[0].item(), math.sqrt(g - 1), rel_tol=1e-7)
    assert math.isclose(smp[0].item(), (g - 1) / math.sqrt(g), rel_tol=1e-7)
    assert math.isclose(smp.pow(2).mean().item(), (g - 1) / g, rel_tol=1e-7)
assert f"{grpo_fixed.group_advantage([0.0, 1.0])[1]:.4f}" == "1.0000"
assert f"{sample_std_advantage([0.0, 1.0])[1]:.4f}" == "0.7071"
print(f"constant group [3, 3, 3, 3]: population {grpo_fixed.group_advantage([3.0] * 4).tolist()}, "
      f"sample {sample_std_advantage([3.0] * 4).tolist()}")
with warnings.catch_warnings():  # torch warns: std(): degrees of freedom is <= 0
    warnings.simplefilter("ignore")
    lonely = sample_std_advantage([3.0])
print(f"a group of one, [3]: population {grpo_fixed.group_advantage([3.0]).tolist()}, sample {lonely.tolist()}")
assert sample_std_advantage([3.0] * 4).abs().max() == 0 and math.isnan(lonely[0])

# %% [markdown]
# For G = 2 and rewards [0, 1] the spec's answer is ±1; `Tensor.std()` gives ±0.7071. The gap
# shrinks as G grows (0.9354 at G = 8, 0.9682 at G = 16) but never vanishes, and it depends on G, so
# changing the group size silently rescales every advantage. Under Adam a constant factor mostly cancels;
# what it moves is the balance with β·KL (notebook 04 §3.1: the effective β grows by √(G/(G−1))) and
# every number you compare against, like the √(G−1) bound. With ε both versions keep a constant group
# finite (exact zeros); a group of one is different: the sample std of one number is 0/0 = NaN, and the
# ε added *after* it cannot help. TRL and verl both use the Bessel-corrected std (quoted with versions
# in notebook 06 §2): the same ranking, a factor √(G/(G−1)) apart, so "their numbers differ from the
# spec's" is expected.
#
# > **Catalog note: sample instead of population std.**
# > - Symptom: a spec test with G = 2 expects A = ±1 and gets ±0.7071; a G = 1 configuration yields NaN
# >   advantages although ε > 0.
# > - Statistic: the mean of A² over non-constant groups: 1 with the population std (up to ε), (G−1)/G
# >   with the sample std (0.875 at G = 8).
# > - Fix: `std(correction=0)` (or `unbiased=False`), or compute √(mean(centred²)) as the twins do.

# %% [markdown]
# ### 3.5 Whitening the batch's rewards vs normalising each group
#
# **Question.** The "standard trick" of reward normalisation whitens rewards over the batch (or with a
# running mean and std over past batches); GRPO divides each group by its own std. What does each do to
# the step each prompt gets?
#
# **Key equations.** For prompt b with rewards r_{b,i}: whitening r' = (r − mean_batch)/σ_batch and then
# the group baseline gives A_{b,i} = (r_{b,i} − mean_i r_{b,i})/σ_batch: every prompt is divided by the
# same number, so the prompts keep their proportions (a change of learning rate for the whole batch; a
# running σ is the same with a σ from past batches). Group normalisation divides prompt b by its own
# σ_b: a per-prompt learning rate 1/σ_b, largest for prompts whose rewards barely differ.
#
# **Tiny input.** Two prompts, four samples each: P1 has a clear winner, [0, 1, 0, 1] (σ = 0.5); on P2
# the reward barely separates the samples, [0.45, 0.55, 0.45, 0.55] (σ = 0.05).

# %%
def whitened_advantages(rewards, std: float, eps: float = 1e-8):
    """Reward whitening, then the group baseline: A_{b,i} = (r_{b,i} - mean_i r_{b,i}) / (std + eps), one std
    for every group (the batch's, or a running one). rewards (B, G) -> (B, G) float64"""
    r = torch.as_tensor(rewards, dtype=torch.float64)  # (B, G)
    return (r - r.mean(dim=1, keepdim=True)) / (std + eps)


two_prompts = torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.45, 0.55, 0.45, 0.55]], dtype=torch.float64)  # (B, G)
batch_std = two_prompts.std(correction=0).item()  # whitening over the batch: population std of all 8 rewards
RUNNING_STD = 0.25  # a running std carried over from earlier batches (illustrative)
SCHEMES = {
    "centred only (no std)": torch.stack([centred_advantage(g) for g in two_prompts]),
    f"batch whitening (std {batch_std:.4f})": whitened_advantages(two_prompts, batch_std),
    f"running whitening (std {RUNNING_STD})": whitened_advantages(two_prompts, RUNNING_STD),
    "group std (GRPO, the twins)": torch.stack([grpo_fixed.group_advantage(g.tolist()) for g in two_prompts]),
}
print(f"{'scheme':33s} | {'|A| P1':>7} {'|A| P2':>7} | {'step factor P1, P2 vs centred':>29} | "
      f"{'P2 share of sum|A|':>18}")
share = {}
for scheme, adv in SCHEMES.items():  # adv (B, G)
    size = adv.abs().mean(dim=1)  # (B,) every sample of a prompt has the same |A| here
    factor = size / SCHEMES["centred only (no std)"].abs().mean(dim=1)  # (B,)
    share[scheme] = (size[1] / size.sum()).item()
    print(f"{scheme:33s} | {size[0]:7.4f} {size[1]:7.4f} | {factor[0]:14.3f} {factor[1]:14.3f} | {share[scheme]:18.4f}")
shares = list(share.values())
assert all(math.isclose(x, 1 / 11, rel_tol=1e-9) for x in shares[:3])  # whitening keeps the proportions (1 : 10)
assert abs(shares[3] - 0.5) < 1e-6  # group std: the barely-separated prompt weighs as much as the clear one

# %% [markdown]
# Whitening (by the batch std, 0.3553, or by any running std) multiplies every prompt's advantages by the
# same factor: P2 keeps its 9.1% of the update, as with no std at all, and only the overall step changes
# (×2.814 here; under Adam that mostly cancels, against β·KL it does not). Group normalisation gives P2
# a factor of 20 and P1 a factor of 2: P2, where the reward separates the samples by 0.1, now weighs as
# much as P1 with its clean 0-vs-1 signal (50% of Σ|A|). That is GRPO's choice (notebook 06 §2 measures the
# share it moves onto groups with one odd reward in a training run). If P2's 0.1 differences were reward-model
# noise, the same factor of 20 would blow that noise up to full-size advantages (a consequence of the
# formula; no noisy-reward run here). A running std adds one more thing: its value lags the current batch,
# so the overall step drifts as the reward distribution changes during training.
#
# > **Catalog note: which normaliser up-weights what.**
# > - Symptom: with the group std, prompts whose rewards are nearly tied (reward-model noise) get
# >   full-size advantages and the run chases noise; with batch or running whitening, one prompt with a
# >   huge spread shrinks every other prompt's update.
# > - Statistic: each group's reward std next to its share of Σ|A| (here σ_b = 0.05 holding 50%).
# > - Fix: choose on purpose: group std (GRPO), batch std (keeps the proportions), none (Dr. GRPO);
# >   the frameworks' switches are in notebook 06 §2. If you keep the group std, a floor on σ_b (a
# >   larger ε) stops near-ties from being blown up.
#
# > **You should know.**
# > - Without normalisation the gradient is proportional to the reward scale (×100 for s = 100 above).
# >   Adam hides most of that, but not the balance with β·KL: without normalisation the effective β
# >   is β/s. Normalise, and the reward's units drop out (0.419 for s = 0.01, 1 and 100 above: at
# >   s = 0.01 float rounding changes the advantages' last digits, and the runs stay together only
# >   until a sampling draw falls between their probabilities, which did not happen in 20 iterations).
# > - Normalisation bounds |A| by √(G−1) (population std), reached when one sample differs. An outlier
# >   reward cannot produce an outlier advantage, but it still takes the group's largest one and pushes
# >   every other sample of the group down.
# > - The ε is not just a NaN guard: it decides what difference counts as signal. Without it, rounding
# >   noise in a constant group becomes a ±1.15 advantage; with it, differences ≪ ε give A ≈ 0.
# > - Population vs sample std: ±1 vs ±0.7071 at G = 2; `Tensor.std()` is the sample std.
# > - Whitening the batch's rewards is a learning-rate change; dividing each group by its own std is a
# >   per-prompt weighting.
#
# <details><summary>Question: with normalisation, can a tiny reward scale still hurt? (Answer)</summary>
#
# Yes, once s·std(r) is comparable to ε: A = (r − mean)/(std + ε) shrinks towards 0 (0.333 at
# s = 1e-8 in notebook 04 §3.2) and learning slows. Keep rewards O(1) or scale ε with them.
# </details>

# %% [markdown]
# ## 4. Gradient clipping
#
# **Key equation.** Before the optimiser step, g ← g · min(1, c / ‖g‖) with ‖g‖ the global L2 norm
# over all parameters: the direction is kept, the length capped at c. B11 skips this. The logged
# `grad_norm` is the norm *before* clipping; its healthy range lives in `grpo_support.STATS`:

# %%
MAX_GRAD_NORM = grpo_fixed.make_config().max_grad_norm  # the twins' default cap c
print(f"default max_grad_norm {MAX_GRAD_NORM:g}; grad_norm: {grpo_support.STATS['grad_norm'].meaning}, "
      f"healthy {render_range('grad_norm')} ({grpo_support.STATS['grad_norm'].why})")

# %% [markdown]
# ### 4.1 The default cap on this toy LM
#
# In the fixed trainer the advantages are normalised (bounded by √(G−1), notebook 04 §3.3) and the ratio is
# clipped, which leaves few ways for a single batch to produce a spike. But the cap c = 1 is a number, and
# whether it acts depends on the model's gradient scale. The pre-clip norms of the β = 0.1 run above:

# %%
norms = nb04_stabilisers.step_norms(beta_runs["0.1"])  # every inner step
above = sum(n > MAX_GRAD_NORM for n in norms)
print(f"inner steps {len(norms)}, median pre-clip norm {nb04_stabilisers.quantile(norms, 0.5):.3f}, "
      f"max {max(norms):.3f}, "
      f"steps above max_grad_norm: {above} ({above / len(norms):.3f}), largest shrink factor "
      f"{max(norms) / MAX_GRAD_NORM:.3f}")
assert above / len(norms) > 0.8 and nb04_stabilisers.quantile(norms, 0.5) > 2 * MAX_GRAD_NORM
assert (above, len(norms), f"{nb04_stabilisers.quantile(norms, 0.5):.3f}", f"{max(norms):.3f}") == (
    72, 80, "2.042", "4.861")  # as quoted

# %% [markdown]
# On this toy LM the default cap sits *below* the typical norm: it clips 72 of the 80 steps (90%), median
# pre-clip norm 2.042, largest 4.861. By the criterion of the next section that is not a guard but a
# rescaling of almost every step, by a factor c/‖g_t‖ that differs from step to step. Adam is nearly
# invariant to a constant gradient scale (it divides by the RMS of the gradients it was given), so under Adam
# such a cap changes only how much each step weighs in the moment averages, and B11's run ends level with the
# fixed one (notebook 01 §12), but for a different reason than "gradients are small": the cap is simply not
# selective. (verl 0.9.1's actor has the same default cap, `actor_rollout_ref.actor.grad_clip: 1.0`. Whether
# a cap acts depends on the model's gradient scale, as it does here: read the clip rate, not the cap.)
#
# ### 4.2 Where it does, and how to pick the cap
#
# Take away the normalisation (A = r − mean) and let the reward model glitch: with probability 0.005
# per sample it adds 1000 to the reward, whatever the completion. Every glitch is a gradient spike.
#
# **How a practitioner picks c.** Not from a rule of thumb: from the pre-clip norms. Log them (as
# `optimizer_step` returns them) on a healthy stretch of training, put c just above the bulk (a high
# percentile, so ordinary steps pass untouched), then watch the **clip rate**, the fraction of steps
# whose pre-clip norm exceeds c. On healthy data it is what the percentile promises (about 1% for the
# 99th); a clip rate that rises means spikes (or a norm distribution that drifted: re-check it); a clip
# rate near 1 means the cap is no longer a guard but a different optimiser: every gradient is rescaled to
# norm c. Under SGD every step then has length lr·c along g_t/‖g_t‖: normalised gradient descent, whose
# effective learning rate lr·c/‖g_t‖ changes from step to step (not a fixed, rescaled learning rate). Under
# Adam, which divides each parameter's gradient by its own running RMS and so is nearly invariant to a
# constant gradient scale, only the part of the rescale that varies across steps matters: every batch's
# gradient enters the moment averages with the same norm c, so all steps weigh the same.
# Here the healthy stretch is the same unnormalised run without glitches
# (notebook 04 §3.1, s = 1):

# %%
healthy = nb04_stabilisers.step_norms(scale_runs["1", False])
pick = {q: nb04_stabilisers.quantile(healthy, q) for q in (0.5, 0.9, 0.99)}
unit = 10 ** math.floor(math.log10(pick[0.99]))
PICKED = math.ceil(pick[0.99] / unit) * unit  # the 99th percentile, rounded up to one digit
print("healthy run, pre-clip norms: " + ", ".join(f"p{round(100 * q)} {v:.3f}" for q, v in pick.items())
      + f", max {max(healthy):.3f}; c = {PICKED} would clip {sum(n > PICKED for n in healthy)} of {len(healthy)} steps")
assert pick[0.99] < PICKED < 2 * pick[0.99] and sum(n > PICKED for n in healthy) == 1

# %% [markdown]
# So c = 3 is the cap picked from the distribution: the 99th percentile (2.243) rounded up, above 79 of
# the 80 healthy steps. Five glitch runs (computed once): no clipping (the B11 hybrid) and the fixed twin
# with c ∈ {0.1, 1, 3}, plus the same glitches with the advantages normalised again (the fixed twin as it
# is, c = 1). The reward reported is the clean reward (the fraction of exact sums).

# %%
GLITCH = dict(glitch_prob=0.005, glitch_size=1000.0, exact_kl=False, **SHORT)  # no KL plotted: skip its forwards
CAPS = {"0.1": 0.1, "1": 1.0, f"{PICKED:g}": PICKED, "none (B11)": math.inf}
with progress(f"training {len(CAPS) + 1} runs with reward glitches"):
    clip_runs = {label: (nb04_stabilisers.instrumented_run("B11", advantage_fn=centred_advantage, **GLITCH)
                         if math.isinf(c) else
                         nb04_stabilisers.instrumented_run(advantage_fn=centred_advantage, max_grad_norm=c, **GLITCH))
                 for label, c in CAPS.items()}
    normalised_glitch = nb04_stabilisers.instrumented_run(**GLITCH)  # A normalised again; c = the default
glitched_steps = {label: [bool(n) for n in run["glitches"] for _ in run["inner"][0]]  # per inner step
                  for label, run in clip_runs.items()}


def clip_rate(norms, cap):
    """Fraction of steps whose pre-clip norm exceeds the cap."""
    return sum(n > cap for n in norms) / len(norms)


print(f"P(a batch of 64 samples has a glitch) = 1 - 0.995^64 = {1 - 0.995**64:.3f}")
print(f"{'cap c':>17} | {'clip rate':>9} {'steps in glitch batches':>23} | {'reward (last 10)':>16} "
      f"{'median pre-clip':>15} {'max pre-clip':>12}")
cap_table = {}
for label, run in {**clip_runs, "normalised A, c = 1": normalised_glitch}.items():
    norms, cap = nb04_stabilisers.step_norms(run), CAPS.get(label, MAX_GRAD_NORM)
    in_glitch = sum(bool(n) for n in run["glitches"]) / len(run["glitches"])
    cap_table[label] = (clip_rate(norms, cap), in_glitch, tail_mean(run["clean_reward"]), max(norms))
    print(f"{label:>17} | {cap_table[label][0]:9.3f} {in_glitch:23.3f} | {cap_table[label][2]:16.3f} "
          f"{nb04_stabilisers.quantile(norms, 0.5):15.3f} {max(norms):12.1f}")
rate, reward = {k: v[0] for k, v in cap_table.items()}, {k: v[2] for k, v in cap_table.items()}
PICKED_LABEL = f"{PICKED:g}"
clipped_steps = [n > PICKED for n in nb04_stabilisers.step_norms(clip_runs[PICKED_LABEL])]
missed = sum(g and not c for g, c in zip(glitched_steps[PICKED_LABEL], clipped_steps, strict=True))
extra = sum(c and not g for g, c in zip(glitched_steps[PICKED_LABEL], clipped_steps, strict=True))
print(f"c = {PICKED_LABEL}: glitch-batch steps not clipped {missed}, clipped steps outside glitch batches {extra}")
MISSED, EXTRA = 0, 2
assert missed == MISSED and extra == EXTRA  # the counts the text quotes
assert rate["0.1"] > 0.95 and rate["1"] > 0.5  # caps below the median clip (almost) every step
assert reward["none (B11)"] < min(reward[k] for k in CAPS if k != "none (B11)")
assert all(v[3] > grpo_support.STATS["grad_norm"].hi for k, v in cap_table.items() if k in CAPS)  # spikes
assert reward["normalised A, c = 1"] > max(reward[k] for k in CAPS)
cap_rewards = [reward[k] for k in CAPS if k != "none (B11)"]
assert [f"{rate[k]:.3f}" for k in ("0.1", "1", PICKED_LABEL, "normalised A, c = 1")] == [
    "1.000", "0.625", "0.375", "0.938"] and f"{cap_table[PICKED_LABEL][1]:.3f}" == "0.350"  # as quoted
assert [f"{v:.3f}" for v in (reward["none (B11)"], min(cap_rewards), max(cap_rewards), reward[PICKED_LABEL],
                             reward["normalised A, c = 1"])] == ["0.283", "0.353", "0.383", "0.372", "0.430"]

# %% [markdown]
# Read the clip rate first. The cap picked from the healthy distribution, c = 3, clips 37.5% of the
# steps: every step of the batches that contain a glitch (35% of the steps) and 2 others. That is far above
# the 1% its percentile promised, and the excess is the alarm. Without clipping (B11) the glitch steps reach
# norms of several hundred and the reward ends lowest (0.283); every cap does better (0.353 to 0.383), and
# the differences between the caps are within one short run's noise.
#
# The lower caps clip more: 62.5% at c = 1 and 100% at c = 0.1. Those are no longer guards: every clipped
# gradient is cut to the same norm c (at c = 0.1 every gradient), so a glitch batch's gradient is no larger
# than the others'. That is a property of this broken reward, not advice: on a healthy run such a cap throws
# away the information in the gradient's norm on most steps. The actual fix is upstream: with the advantages
# normalised again (last row) the same glitches give the best reward of the five, 0.430; its clip rate
# (93.8%) is the default cap's behaviour on this toy (the previous section), not the glitches
# (notebook 04 §3.3 explains why their damage stays small).
#
# **Slider.** The gradient norm per inner step, for the B11 hybrid (left) and the fixed twin with the
# chosen cap (right: grey pre-clip, blue applied, dotted c, dots the steps of glitch batches).

# %%
fig_gc, (ax_gb, ax_gf) = buggy_vs_fixed(figsize=(9.0, 3.4))
fig_gc.suptitle("gradient norm per inner step (log scale)")
unclipped = nb04_stabilisers.step_norms(clip_runs["none (B11)"])
ax_gb.set_title("hybrid('B11'): no clipping", color=BUGGY)
ax_gb.plot(unclipped, color=BUGGY, lw=1, label="B11: pre-clip = applied")
(pre_line,) = ax_gf.plot(unclipped, color="0.7", lw=1, label="pre-clip")
(applied_line,) = ax_gf.plot(unclipped, color=FIXED, lw=1.5, label="applied")
(glitch_marks,) = ax_gf.plot([], [], ".", color=BUGGY, ms=4, label="glitch batch")
cap_line = ax_gf.axhline(1.0, color=FIXED, ls=":", label="cap c")
title_gc = ax_gf.set_title(" ", color=FIXED)
all_norms = [n for run in clip_runs.values() for n in nb04_stabilisers.step_norms(run)]
lowest = min(all_norms + [c for c in CAPS.values() if math.isfinite(c)])  # an applied norm is at least min(n, c)
for ax in (ax_gb, ax_gf):
    ax.set(yscale="log", xlabel="inner step", ylim=(0.5 * lowest, 2 * max(all_norms)))
fig_gc.legend(handles=[*ax_gb.get_lines(), pre_line, applied_line, glitch_marks, cap_line], loc="outside lower center",
              ncols=5, fontsize="small")  # below the panels: clear of the data at every cap
animated(pre_line, applied_line, glitch_marks, cap_line, title_gc)


def update_grad_clip(cap):
    """Show the run clipped at `cap` (a label of CAPS but the last); -> rewards, clip rate."""
    norms, c = nb04_stabilisers.step_norms(clip_runs[cap]), CAPS[cap]
    pre_line.set_ydata(norms)
    applied_line.set_ydata([min(n, c) for n in norms])
    glitch_marks.set_data(*zip(*[(i, n) for i, n in enumerate(norms) if glitched_steps[cap][i]], strict=True))
    cap_line.set_ydata([c, c])
    title_gc.set_text(f"grpo_fixed, max_grad_norm = {cap}")
    return {"buggy": reward["none (B11)"], "fixed": reward[cap], "clip rate": rate[cap]}


w_clipnorm = live_plot(fig_gc, update_grad_clip, cap=choice(list(CAPS)[:-1], PICKED_LABEL, "max norm"))

# %% tags=["nbval-ignore-output"]
display(w_clipnorm)

# %%
for label in ("1", "0.1", PICKED_LABEL):
    r = probe(w_clipnorm, {"max norm": label})
    print(f"max norm {label:>4}: clip rate {r['clip rate']:.3f}, reward buggy (no clipping) {r['buggy']:.3f}, "
          f"fixed {r['fixed']:.3f}")
    assert r["fixed"] > r["buggy"]

# %% [markdown]
# ### 4.3 Why it matters even with Adam
#
# Adam bounds the step a spike causes: the spike dominates both moment estimates, so once the bias
# corrections are near 1 the step is about lr·(1 − β₁)/√(1 − β₂) ≈ 3.2·lr per coordinate, larger than a
# normal step (lr) but not a giant one. The lasting damage is to the second-moment estimate v, which
# remembers g² with a half-life of about 693 steps (β₂ = 0.999: ln 0.5 / ln 0.999; both printed below). The
# toy: one parameter, gradient 1 at every step except 1000 at step 10, lr = 0.01.

# %%
def adam_steps_after_spike(spike: float, max_grad_norm: float, *, steps=60, spike_at=10, lr=1e-2):
    """One parameter, gradient 1 at every step except `spike` at step spike_at; Adam after clipping the
    gradient to max_grad_norm (inf = no clipping). -> |parameter change| per step, (steps,)"""
    w = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([w], lr=lr)
    moves = []
    for t in range(steps):
        before = w.detach().clone()
        w.grad = torch.full((1,), spike if t == spike_at else 1.0)
        torch.nn.utils.clip_grad_norm_([w], max_grad_norm)
        opt.step()
        moves.append((w.detach() - before).abs().item())
    return moves


BETA1, BETA2 = torch.optim.Adam([torch.zeros(1)]).defaults["betas"]  # (0.9, 0.999)
moves = {label: adam_steps_after_spike(1000.0, c) for label, c in (("clip at 1", 1.0), ("no clip", math.inf))}
for label, m in moves.items():
    print(f"{label:9s}: step before {m[9]:.4f}, at spike {m[10]:.4f}, 10 after {m[20]:.4f}, 40 after {m[50]:.4f}, "
          f"total over the 49 steps after {sum(m[11:]):.4f}")
adam_consts = ((1 - BETA1) / math.sqrt(1 - BETA2), math.log(0.5) / math.log(BETA2), 1 / (1 - BETA2**11))
print("late spike step (1 - beta1) / sqrt(1 - beta2) = {:.1f} lr; half-life of v ln 0.5 / ln beta2 = {:.0f} steps; "
      "bias correction of v at step 11, 1 / (1 - beta2^11) = {:.1f}".format(*adam_consts))
assert moves["no clip"][10] < moves["no clip"][9]  # the spike step itself is small, this early
assert sum(moves["no clip"][11:]) < 0.15 * sum(moves["clip at 1"][11:])  # ... the stall after it is not
m_no, m_clip = moves["no clip"], moves["clip at 1"]
assert (f"{m_no[10]:.4f} {m_no[20]:.4f} {m_no[50]:.4f} {sum(m_no[11:]):.4f} {sum(m_clip[11:]):.4f} {m_clip[9]:.4f}",
        "{:.1f} {:.0f} {:.1f}".format(*adam_consts)) == ("0.0048 0.0018 0.0002 0.0495 0.4900 0.0100",
                                                         "3.2 693 91.4")  # as quoted

# %% [markdown]
# Unclipped, the spike step itself is even *smaller* than normal (0.0048), but only because the spike comes
# this early: at step 10 the bias correction 1/(1 − β₂¹¹) = 91.4 inflates the spike's share of v̂. Every step
# afterwards shrinks: 0.0018 per step ten steps later and 0.0002 forty steps later, instead of 0.0100. Over
# the 49 steps after the spike the parameter travels 0.0495 instead of 0.4900. Clipped at 1, the spike is
# just another gradient of norm 1.
#
# Late in training the bias corrections are near 1 and the picture changes. The same toy with the spike at
# step 3000, run to step 9000; to keep it fast, Adam's update written out on Python floats (the formula of
# `torch.optim.Adam`), checked against the run above first:

# %%
def adam_moves(grads, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8):
    """|parameter change| per step of Adam on one parameter fed the gradients `grads` (torch.optim.Adam's
    update: m, v running means of g and g^2, each divided by its bias correction)."""
    m = v = 0.0
    out = []
    for t, g in enumerate(grads, start=1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        out.append(lr * (m / (1 - beta1**t)) / (math.sqrt(v / (1 - beta2**t)) + eps))
    return out


early = adam_moves([1.0] * 10 + [1000.0] + [1.0] * 49)
assert max(abs(a - b) for a, b in zip(early, moves["no clip"], strict=True)) < 1e-6  # the same update
SPIKE_AT, STEPS = 3000, 9000
late = adam_moves([1.0] * SPIKE_AT + [1000.0] + [1.0] * (STEPS - SPIKE_AT - 1))  # unclipped; clipped: 0.01 a step
normal = late[SPIKE_AT - 1]
after = late[SPIKE_AT + 1 :]
above = next(i for i, x in enumerate(after) if x < normal)  # steps after the spike still larger than normal
slow = next(i for i, x in enumerate(after) if x < normal / 2)  # below half speed from here ...
back = next(i for i, x in enumerate(after) if i > slow and x > normal / 2)  # ... until here
print(f"spike at step {SPIKE_AT}: normal step {normal:.4f}, spike step {late[SPIKE_AT]:.4f} "
      f"({late[SPIKE_AT] / normal:.1f}x); the next {above} steps larger than normal")
print(f"below half speed from {slow + 1} to {back + 1} steps after the spike; slowest {min(after) / normal:.3f}x, "
      f"{after[999] / normal:.3f}x at 1000 steps after")
print(f"travel over the 49 steps after the spike {sum(after[:49]):.4f} (clipped: {49 * 0.01:.4f})")
assert 3 < late[SPIKE_AT] / normal < 3.3 and 5 <= above <= 20 and back > 3000 and max(after[slow:back]) < normal / 2
assert (f"{late[SPIKE_AT] / normal:.1f} {sum(after[:49]):.4f} {min(after) / normal:.3f} {after[999] / normal:.3f}",
        above, back + 1) == ("3.1 0.2922 0.033 0.052", 11, 5807)  # as quoted

# %% [markdown]
# Now the spike step is 3.1 times a normal one, and momentum carries the spike's direction on for the next
# 11 steps, each still larger than normal: that is where the damage of a *garbage* direction goes. Then v,
# inflated by g² = 10⁶, throttles the parameter: at 3.3% of its normal speed at the slowest, 5.2% a thousand
# steps later, and back to half speed only 5807 steps after the spike (printed). Over the 49 steps after it
# the parameter travels 0.2922 against 0.4900 clipped. Clipping before Adam removes both the momentum
# carry-over and the stall. (One parameter and a constant gradient: the mechanism, not a measurement of an
# LLM.)
#
# > **You should know.**
# > - Gradient clipping caps the length of one update's gradient, keeping its direction.
# > - With normalised advantages and a clipped ratio the fixed twin's runs here show no spike; clipping caps
# >   whatever does spike (here: reward outliers without normalisation; in principle also the unbounded
# >   A < 0 branch of the surrogate, or numerics, not shown here). A cap below the typical norm (c = 1 on
# >   this toy: 90% of steps) is a rescale, not a guard.
# > - Pick c from the pre-clip norm distribution of a healthy stretch (a high percentile) and log the
# >   clip rate: a rate far above what the percentile promises is an alarm; a rate near 1 means every step
# >   is rescaled. Under SGD every step then has length lr·c along g_t/‖g_t‖ (normalised gradient descent:
# >   the effective learning rate lr·c/‖g_t‖ changes every step); under Adam, nearly invariant to a constant
# >   scale, what remains is that every batch weighs the same. No longer a guard either way.
# > - Under Adam a spike's step is bounded (about 3·lr late in training, smaller early), then momentum carries
# >   its direction for about ten steps and the inflated second moment stalls that coordinate for thousands.
# > - Log the **pre-clip** norm (as `optimizer_step` returns): the post-clip norm is always ≤ c and
# >   hides the spikes.
#
# <details><summary>Question: in the glitch runs, c = 0.1 did as well as the cap picked from the healthy
# distribution (0.383 vs 0.372). Should you cap at a tenth of the median norm? (Answer)</summary>
#
# No. Its clip rate is 100%: every gradient is rescaled to norm c (under SGD every step then has length lr·c,
# normalised gradient descent; under Adam the constant part of the rescale cancels and what is left is that
# every batch weighs the same), and what it "fixed" is a reward that is broken on a third of the batches. The
# clip rate of the sensible cap (37.5%, the glitch batches and 2 more steps) is the signal to go and fix the
# reward or restore the normalisation (reward 0.430), not to lower c.
# </details>

# %% [markdown]
# ## 5. Summary: what each stabiliser protects against, and what it costs
#
# <table>
# <tr><th>stabiliser</th><th>protects against</th><th>costs</th></tr>
# <tr>
# <td>ratio clip ε (notebook 04 §1)</td>
# <td>one rollout batch pushing a token's probability far from π_old over the inner steps</td>
# <td>tokens past the window get zero gradient (less learning per batch); ε to tune;
# no bound on the A &lt; 0, ρ &gt; 1+ε branch (−4.5 at ρ = 3)</td>
# </tr>
# <tr>
# <td>KL to frozen π_ref, β (notebook 04 §2)</td>
# <td>cumulative drift over many iterations, which KL to π_old cannot see (it restarts at 0 every rollout)</td>
# <td>reward (too small to measure in 20 toy iterations: 0.411 at β = 0.5 vs 0.419 to 0.469 at β ≤ 0.1); a
# reference forward pass per batch;
# β to tune; k3's gradient is ∇KL(π_ref ‖ π)</td>
# </tr>
# <tr>
# <td>advantage normalisation (notebook 04 §3)</td>
# <td>reward units setting the step and the effective β (β/s without it); outlier rewards become
# bounded advantages (|A| ≤ √(G−1))</td>
# <td>an outlier still takes its group's top advantage; turns noise-level differences into ±1 advantages
# unless ε floors them; the group std up-weights prompts whose rewards barely differ; population vs
# sample std is a factor √(G/(G−1))</td>
# </tr>
# <tr>
# <td>gradient clipping c (notebook 04 §4)</td>
# <td>gradient spikes, and under Adam the momentum carry-over and long stall after one (late in the toy: back
# to half speed 5807 steps after the spike)</td>
# <td>also shortens legitimate large steps; c is read off the pre-clip norms and judged by its clip rate
# (at a rate near 1 every SGD step has length lr·c, normalised gradient descent; under Adam every batch then
# weighs the same)</td>
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
# 3. Your KL to the reference climbs from the first iterations, faster than in both a β = 0 and a correctly
#    signed run, while reward falls. First thing to check, and how do you confirm it?
# <details><summary>Answer</summary>
#
# The sign of the penalty: `pg_loss - beta * kl`, or a negative β from a config. Confirm it without a curve
# comparison (one seed's short curves only hint: on notebook 04 §2's seed 0 the flipped run is within a correct
# run's noise late): set every advantage to 0 and take one small SGD step; the loss's own KL term on the batch (k3
# here, ρ·k3 with TRL 1.16.0's use_bias_correction_kl, default True) must fall, and it rises if the sign is flipped
# (the exact KL(π ‖ π_ref) need not follow, §2.4). This works for a KL in the loss; with the KL in the reward,
# zeroing the advantages removes it too. A k1 term with its sign flipped would do it only in the *reward* (through
# the score function); in the loss k1's expected gradient is 0 either way on π's own samples (and relative to π_old,
# not π_ref, on π_old's). Reversing the log-ratio inside k3 (B8) would not do it either: it changes the value (χ² −
# KL) and the gradient (½∇χ²), but that gradient still points toward the reference (notebook 04 §2.2); its symptom
# is gradient-norm spikes, not a runaway KL (notebook 03 §6).
# </details>
#
# 4. You multiply all rewards by 100 in a trainer without advantage normalisation, using Adam. Does the
#    step size change? What does change?
# <details><summary>Answer</summary>
#
# The policy term's gradient is 100× larger, but Adam divides by its running RMS, which cancels a constant factor up
# to its ε (the twins also clip the norm to 1.0 before Adam, which engages wherever the gradient exceeds 1: the
# s = 100 run's peaks at 355.164). What changes is the balance with the KL term: the effective β is 100×
# smaller (20 iterations on one seed cannot tell s = 100 from s = 1 or β = 0: exact KL 0.136, 0.107, 0.119). With
# normalisation the scale cancels: the three normalised runs end at the same level (0.419 at s = 0.01, 1 and 100;
# s = 100 identical to s = 1, s = 0.01 equal up to float rounding).
# </details>
#
# 5. Why log the pre-clip gradient norm rather than the post-clip one?
# <details><summary>Answer</summary>
#
# The post-clip norm is min(‖g‖, c): it can never show a spike, and it cannot give the clip rate. The
# pre-clip norm is the diagnostic (its healthy range is the `grad_norm` row of `grpo_support.STATS`,
# printed in notebook 04 §4); the glitch runs there peak well above it.
# </details>
#
# 6. A group of G = 4 has rewards [0, 0, 0, 1]. What are the advantages with the population std, and
#    with `Tensor.std()`?
# <details><summary>Answer</summary>
#
# Population: +√3 = 1.7321 for the success and −1/√3 = −0.5774 for each failure (one sample differs,
# so the bound √(G−1) is reached). Sample std: both times √(3/4): +1.5 and −0.5.
# </details>
#
# **Next: notebook 05**, *Group baseline vs learned value*: why GRPO can drop the critic, and where the group baseline
# fails.
