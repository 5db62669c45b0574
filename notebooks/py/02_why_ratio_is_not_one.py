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
# # 02 — Why the importance ratio differs from one
#
# **The interview question.** *"You print `ratio = exp(logp - old_logp)` inside the inner loop and it
# is not 1, although this is the first update on this batch. Is that a bug? Trace where the
# divergence comes from and what its sign is."*
#
# After this notebook you can say, with numbers to back it:
#
# 1. The ratio is **exactly** 1 at the first inner step when old log-probs are cached once, and only
#    there: every later minibatch, even one never trained on, sees a policy that already moved.
# 2. The drift has a sign: tokens with A > 0 drift to ratio > 1, tokens with A < 0 to ratio < 1,
#    which is exactly the side of the clip window that each one hits.
# 3. When clipping engages, and what it does and does not bound.
# 4. The illegitimate reasons for ratio ≠ 1 (or for a ratio that is 1 when it should not be): the
#    recomputed-old-log-probs trap (B3), dropout in train mode, a temperature mismatch (B10), a
#    shifted log-prob (B6).
# 5. What `ratio = logp - old_logp` (no `exp`) does to the surrogate, and which tokens still get gradient.
#
# Everything below calls the twins' own functions (`rollout`, `update_policy`, `policy_logprobs`,
# `grpo_loss`); `workbook/nb02.py` only snapshots a run and replays its next update in different ways.

# %%
import logging

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import grpo_fixed
import workbook  # noqa: F401  (one torch thread)
from workbook import nb02
from workbook.catalog import hybrid
from workbook.plots import BUGGY, FIXED, REFERENCE, curves
from workbook.widgets import live_figure, set_value, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids log health warnings; we print what we need
B3, B6, B10 = hybrid("B3"), hybrid("B6"), hybrid("B10")

# %% [markdown]
# ## 1. The batch we replay
#
# A run of the fixed twin on EchoTask (B = 8 prompts × G = 8 samples, default config otherwise) for 20
# iterations, then one more rollout batch. That moment (policy weights, Adam state, batch) is the
# `Snapshot`; every experiment below restarts from it, so they all share the same starting point.

# %%
snap = nb02.warm_start(iterations=20, seed=0)
batch, cfg = snap.batch, snap.cfg
for name, value in batch.items():
    print(f"{name:17s} {str(tuple(value.shape)):8s} {value.dtype}")
token_adv = nb02.token_advantages(batch)  # (n_tokens,) A of each unmasked token
print(f"\nreward {snap.stats['reward']:.3f}  entropy {snap.stats['entropy']:.3f}  "
      f"zero-variance groups {snap.stats['zero_var_groups']:.3f}")
print(f"unmasked tokens {token_adv.numel()}: A>0 {int((token_adv > 0).sum())}, A<0 {int((token_adv < 0).sum())}, "
      f"A=0 {int((token_adv == 0).sum())}")
print(f"config: inner_epochs={cfg.inner_epochs} minibatches={cfg.minibatches} lr={cfg.lr} clip={cfg.clip} "
      f"beta={cfg.beta} temperature={cfg.temperature}")

# %% [markdown]
# ## 2. Exactly one at the first inner step, and only there
#
# **Question.** Where is the ratio 1, and where does it stop being 1?
#
# **Key equation.** With old log-probs cached once at rollout time,
#
# $$\rho_t^{(k)} = \exp\big(\log\pi_{\theta_k}(o_t) - \log\pi_{\theta_\text{old}}(o_t)\big), \qquad
# \theta_0 = \theta_\text{old} \Rightarrow \rho^{(0)}_t = e^0 = 1 .$$
#
# Inner step $k$ uses the weights after $k$ optimizer steps. The default config makes 2 epochs × 2
# minibatches = 4 inner steps per rollout batch. Below: the fixed twin's `update_policy` on the
# snapshot batch, one line per record it returns.

# %%
policy, optimizer = nb02.restore(snap)
records = grpo_fixed.update_policy(policy, optimizer, batch, cfg, torch.Generator().manual_seed(0))
print("step epoch minibatch  tokens  max|rho-1|  mean rho  clipped A>0   clipped A<0")
for k, rec in enumerate(records):
    epoch, minibatch = divmod(k, cfg.minibatches)
    ratio = rec["ratio"]  # (n_tokens,) of this minibatch
    print(f"{k:4d} {epoch:5d} {minibatch:9d} {ratio.numel():7d} {(ratio - 1).abs().max():11.4e} {ratio.mean():9.4f}  "
          f"{rec['clipped_pos']:3d}/{rec['n_pos']:3d}      {rec['clipped_neg']:3d}/{rec['n_neg']:3d}")
summary = grpo_fixed.summarize_inner_steps(records)
print(f"\nhealth stat ratio_first_maxdev = {summary['ratio_first_maxdev']:.1e}  (healthy: 0)")

# %% [markdown]
# Read the table as a debugger would:
#
# - **Step 0** is the only on-policy step: `max|rho-1|` is 0 to the last bit (same weights, same
#   inputs, same code path, so the same floats).
# - **Step 1** is minibatch 1 of epoch 0. Those 32 sequences were never trained on, yet the ratio is
#   already off by up to 0.14 (no token clipped yet): the step on minibatch 0 moved the *shared*
#   weights, and every sequence's log-prob moved with them. "Not 1 on the first pass" is therefore
#   expected as soon as there is more than one minibatch.
# - **Steps 2-3** (epoch 1) see a policy two and three updates away: max |ρ − 1| 0.48 and 1.57, and
#   5 then 13 tokens clipped.
#
# This is why GRPO/PPO as implemented is *not strictly on-policy*: one rollout batch feeds several
# optimizer steps, and only the first of them evaluates the policy that generated the data. The ratio
# is exactly the importance weight that corrects for the rest.

# %% [markdown]
# > **You should know.** "Why isn't the ratio 1 at step 1?" One line: *multi-step minibatch updates
# > within one rollout; after the first optimizer step $\pi_\theta \ne \pi_\text{old}$ for every
# > sequence, trained on or not.* The health check to print is `ratio_first_maxdev` (ratio at the very
# > first minibatch): it must be 0. If *that* one is not 0, something else is wrong (section 5).
#
# <details><summary>Answer: with inner_epochs=1 and minibatches=1, is the ratio ever different from 1?</summary>
#
# Not inside the loss: there is a single optimizer step and its loss is evaluated before it, at
# $\theta_\text{old}$, so every ratio is 1 and clipping never engages: the update is the plain
# policy-gradient step. The clip only matters from the second inner step on.
# </details>

# %% [markdown]
# ## 3. The drift has a sign, set by the advantage
#
# **Question.** After an update, which way does each token's ratio move?
#
# **Key equation (first order).** At $\rho = 1$ the surrogate's gradient is
# $g = \frac1n\sum_s A_s \nabla_\theta \log\pi_\theta(o_s)$ (the KL term is small at $\beta = 0.02$).
# A step $\Delta\theta = \eta P g$ with a positive diagonal preconditioner $P$ ($I$ for SGD,
# $\text{diag}(1/\sqrt{\hat v})$ for Adam's adaptive scaling) changes each log-prob by
# $\Delta\log\pi(o_t) \approx \nabla\log\pi(o_t)^\top \Delta\theta$, so
#
# $$\frac1n\sum_t A_t \,\Delta\log\pi(o_t) \approx \eta\, g^\top P g \;\ge 0 .$$
#
# (Adam's momentum also mixes in gradients from earlier batches, so for the trainer's Adam this is a
# tendency, not a theorem: the table below checks it.) The *advantage-weighted* log-ratio is positive:
# A > 0 tokens go up (ratio > 1), A < 0 tokens go down
# (ratio < 1). This is a statement about the average, not every token: parameters are shared, and the
# same token in the same context can sit in sequences of both signs (all G samples share the prompt).
#
# Below: 8 full-batch inner steps of the fixed twin (`inner_epochs=1, minibatches=1` per call, Adam
# state carried over) from the snapshot, at the default lr = 3e-3 and clip = 0.2.

# %%
trace = nb02.inner_trace(grpo_fixed, snap, steps=8, lr=3e-3, clip=0.2)
nonzero = token_adv != 0
print("k   mean rho A>0  mean rho A<0   mean A*log(rho)   sign(log rho) == sign(A)   clipped")
for k, ratio in enumerate(trace["ratio"]):
    pos, neg = nb02.sign_means(ratio, token_adv)
    weighted = (token_adv * ratio.log()).mean().item()
    agree = (torch.sign(ratio.log()) == torch.sign(token_adv))[nonzero].float().mean().item()
    print(f"{k}   {pos:11.4f}  {neg:12.4f}   {weighted:+15.4f}   {agree:24.2f}   {trace['clipped'][k]:7.3f}")
same = max((a.sort().values - b.sort().values).abs().max().item()  # the loss's tokens come in shuffled order
           for a, b in zip(trace["ratio"], trace["loss_ratio"], strict=True))
print(f"\n(the eval-mode ratio we measure equals the one the loss used, to {same:.1e}: no dropout here)")

# %% [markdown]
# The sign shows in every row after step 0: mean ratio above 1 for A > 0 (1.0206 after one step,
# 1.1282 at k = 7), below 1 for A < 0 (0.9811, then 0.8336), and mean $A\log\rho$ positive and
# growing (+0.0160 to +0.1241). Token by token it holds for only 59-71% of the tokens (the
# `sign(log rho) == sign(A)` column; at k = 0 every log-ratio is exactly 0), for the sharing reasons above.
#
# Note the asymmetry that builds up: after one step the two means are about equally far from 1 (+0.0206
# against −0.0189), but from k = 2 on A < 0 tokens fall further below 1 than A > 0 tokens rise above it
# (at k = 7: −0.1664 against +0.1282). A token's
# ratio can never exceed $1/\pi_\text{old}(o_t)$ (its probability is at most 1), and mid-run the A > 0
# tokens are already likely:

# %%
old_prob = batch["old_logprobs"][batch["mask"]].exp()  # (n_tokens,)
for label, sel in [("A>0", token_adv > 0), ("A<0", token_adv < 0)]:
    ceiling = 1 / old_prob[sel]  # the largest ratio this token can ever reach
    print(f"{label}: mean pi_old(token) {old_prob[sel].mean():.3f}, median ceiling 1/pi_old {ceiling.median():.3f}, "
          f"fraction with ceiling below 1.2: {(ceiling < 1.2).float().mean():.2f}")

# %%
fig = nb02.draw_histograms(trace, steps=(1, 3, 7), clip=0.2)
fig.suptitle("grpo_fixed: ratio pi_k / pi_old by sign of A (dashed: clip window 0.8, 1.2)")
plt.show()

# %% [markdown]
# The A > 0 tokens have mean $\pi_\text{old}$ 0.702 against 0.516 for A < 0, and 43% of them have
# $\pi_\text{old} > 1/1.2$: their ratio can *never* reach $1+\epsilon = 1.2$, so they can never be clipped.
# The A < 0 tokens have no floor but 0, which is where the long left tail of the histograms comes from.

# %% [markdown]
# > **You should know.** The natural drift pushes A > 0 tokens toward $1+\epsilon$ and A < 0 tokens toward
# > $1-\epsilon$: precisely the sides where the clipped surrogate flattens. That is why the fixed twin
# > logs `clip_frac_pos` as "A > 0 and ratio > 1+clip" and `clip_frac_neg` as "A < 0 and ratio < 1-clip":
# > a token on the *other* side (A > 0, ratio < 0.8) is not clipped at all, it keeps its full gradient.
#
# <details><summary>Answer: a token with A > 0 has ratio 0.7 at inner step 3. Does it get gradient?</summary>
#
# Yes. For A > 0, $\min(\rho A, \text{clip}(\rho)A) = \min(0.7A, 0.8A) = 0.7A$: the unclipped branch, with
# gradient $A\rho\,\nabla\log\pi$. The clip only removes the incentive to move *further* in the direction the
# advantage wants; a token that went the wrong way is always pulled back.
# </details>

# %% [markdown]
# ## 4. When does clipping engage? The buggy twin's trap side by side
#
# **Question.** How many inner steps, at which learning rate, before clipping does anything, and what
# happens when old log-probs are recomputed inside the loop (bug B3)?
#
# The buggy twin's `update_policy` sets `old_logprobs = logprobs.detach()` inside the loop: the ratio the
# loss sees is $\exp(0) = 1$ at **every** inner step, so clipping never engages and each of the K steps
# is an unconstrained policy-gradient step. The *true* ratio to the policy that generated the data
# still drifts (we measure it in eval mode against the cached old log-probs).
#
# Left: B3; right: fixed; same snapshot, same batch. Bands: 5-95% of the true ratio (log scale),
# thin lines: min / max. Bars at the bottom: fraction of tokens the loss clipped (solid) and tokens
# outside the window on their pushing side that the loss did *not* clip (hatched). A vertical line
# marks the first step where clipping engages. Each redraw replays at most 2 × 16 full-batch inner
# steps on 64 sequences.

# %%
def draw(steps, lr, clip):
    fig, result = nb02.draw_drift(B3, snap, steps, lr, clip)
    plt.show()
    return result


# %%
# NBVAL_IGNORE_OUTPUT
w = live_figure(
    draw,
    height="430px",
    steps=slider(10, 1, 16, 1, "inner steps", integer=True),
    lr=slider(3e-3, -4, -1.5, 0.05, "lr", log=True),
    clip=slider(0.2, 0.05, 0.4, 0.05, "clip"),
)
display(w)

# %%
def show(result):
    first = lambda k: "never" if k is None else f"k={k}"  # noqa: E731
    print(f"clipping engages: buggy {first(result['first_clip_buggy'])}, fixed {first(result['first_clip_fixed'])}")
    print(f"true ratio at the last step: buggy [{result['last_min_buggy']:.3f}, {result['last_max_buggy']:.3f}], "
          f"fixed [{result['last_min_fixed']:.3f}, {result['last_max_fixed']:.3f}]")
    print(f"outside the window at the last step: buggy {result['last_outside_buggy']:.3f}, "
          f"fixed {result['last_outside_fixed']:.3f}")


show(w.result)  # the defaults: 10 steps, lr 3e-3, clip 0.2

# %%
show(set_value(w, "lr", 1e-3))  # a smaller step: clipping engages later (set_value redraws without displaying)

# %% [markdown]
# What the numbers say:
#
# - **When clipping engages.** Never at k = 0 (ratio exactly 1). At the default lr = 3e-3 the fixed
#   twin already clips some tokens at k = 1; at lr = 1e-3 it first clips at k = 2, so a loop of only
#   2 inner steps at that lr never clips at all. The more inner steps and the larger the lr, the
#   earlier and the more.
# - **B3: never.** The loss sees a ratio of 1 at every step (dotted line), while the true ratio at the
#   last default step spans [0.014, 20.989], against [0.258, 2.831] for the fixed twin (at lr = 1e-3:
#   [0.228, 6.431] against [0.450, 2.489]). Without a live clip, nothing stops tokens that already
#   moved from being pushed further.
# - **Clipping is not a hard constraint.** Even in the fixed twin a similar fraction of tokens ends up
#   outside the window at the last step (0.237 against 0.293 for B3 at the defaults). A clipped token
#   loses *its own* surrogate gradient, but the weights are shared, so the other tokens' gradients
#   still move it. What clipping removes is the incentive, which shows in the tails (min / max), not
#   in every token.

# %% [markdown]
# > **You should know.** Clipping engages only after the policy has moved: never at the first inner
# > step, later for smaller lr and fewer inner steps. If the logged clip fraction is **exactly 0 for the
# > whole run** while `inner_epochs × minibatches > 1`, suspect B3 (old log-probs recomputed in the
# > loop). A tiny lr also gives 0 clipping; what tells them apart is `ratio_last_maxdev`, exactly 0 only
# > under B3: the fixed twin's health check "ratio moves after updates".
#
# <details><summary>Answer: B3 never crashes and never gives NaN. Why can it learn at all?</summary>
#
# Because at ratio 1 the gradient of $\rho A$ is $A\nabla\log\pi_\theta$: each inner step applies the
# on-policy policy-gradient estimator to samples from an older policy, without the importance weight.
# With few inner steps and a small lr the policy has barely moved, so that is close to what the clipped
# objective does (the first inner step is identical). B3 removes the trust region:
# it bites when the inner loop is long or the lr large (the tails in the slider figure), much less
# with few inner steps and a small lr.
# </details>

# %% [markdown]
# ## 5. Illegitimate sources: when the ratio is wrong, or right for the wrong reason
#
# **Question.** Which bugs or settings make the ratio differ from 1 at the *first* inner step, and which
# ones hide behind a ratio that looks perfect?
#
# One rollout + one default update (2 × 2 inner steps) from the snapshot for each variant. Columns:
# `gap` = max |cached old log-prob − the sampler's log-prob| (health stat `logprob_gap`);
# `rho0 cached` = max |ρ − 1| at the first inner step with the twin's cached old log-probs;
# `rho0 sampler` = the same if old log-probs came from the sampler (as when an inference engine such as
# vLLM returns them); `last` = max |ρ − 1| at the last inner step; then the failed health checks.

# %%
variants = {
    "fixed": (grpo_fixed, {}),
    "fixed, dropout=0.1": (grpo_fixed, dict(dropout=0.1)),
    "B3 recomputed old": (B3, {}),
    "B10 no temperature": (B10, {}),
    "B10 at T=1.0": (B10, dict(temperature=1.0)),
    "B6 shift": (B6, {}),
}
print(f"{'variant':20s} {'gap':>9s} {'rho0 cached':>12s} {'rho0 sampler':>13s} {'last':>7s}  failed health checks")
audit = {}
for name, (module, overrides) in variants.items():
    audit[name] = a = nb02.ratio_audit(module, snap, **overrides)
    print(f"{name:20s} {a['gap']:9.2e} {a['first_cached']:12.2e} {a['first_sampler']:13.2e} {a['last_cached']:7.3f}  "
          f"{a['health'] or '-'}")

# %% [markdown]
# Four different failure shapes:
#
# | variant | what goes wrong | what shows it |
# |---|---|---|
# | dropout | train-mode log-probs: a random policy, not the eval-mode one that sampled | `rho0 cached` ≠ 0 |
# | B3 | ratio forced to 1 everywhere | `last` = 0: the ratio never moves |
# | B10, B6 | old *and* new log-probs come from the same wrong function, so they agree | only `gap` |
#
# The B10 and B6 rows are the lesson: **a ratio of exactly 1 at step 0 proves consistency, not
# correctness.** In these twins the old log-probs are recomputed by the trainer, so both sides of the
# ratio carry the same mistake; in a pipeline whose old log-probs come from the sampler, the same bugs
# show up directly as `rho0 sampler` ≠ 0 (1.27 for B10, 24.1 for B6). B10 is harmless at T = 1
# (last-but-one row: gap 0.00e+00, the same as the fixed row).

# %% [markdown]
# ### 5a. Dropout: ratio ≠ 1 without any learning
#
# `rollout` caches old log-probs in eval mode (dropout off), `update_policy` runs in train mode (dropout
# on). Set lr = 0 so the weights never change: every inner step should be on-policy, yet the ratio
# spreads, and with enough dropout the clip engages on pure noise.

# %%
for p in (0.0, 0.1, 0.3):
    batch_p, _ = nb02.rollout_with(grpo_fixed, snap, dropout=p)
    cfg_p = grpo_fixed.make_config(**nb02.SMALL, dropout=p, lr=0.0)
    policy_p, optimizer_p = nb02.restore(snap, lr=0.0, dropout=p)
    torch.manual_seed(0)
    recs = grpo_fixed.update_policy(policy_p, optimizer_p, batch_p, cfg_p, torch.Generator().manual_seed(0))
    ratio = torch.cat([r["ratio"] for r in recs])  # all 4 inner steps
    eval_ratio = nb02.true_ratio(grpo_fixed, policy_p, batch_p, cfg_p.temperature)
    n_clipped = sum(r["clipped_pos"] + r["clipped_neg"] for r in recs)
    print(f"dropout {p:.1f}, lr 0: train-mode rho in [{ratio.min():.3f}, {ratio.max():.3f}], "
          f"std(log rho) {ratio.log().std():.4f}, clipped {n_clipped:3d}/{ratio.numel()} | "
          f"eval-mode max|rho-1| {(eval_ratio - 1).abs().max():.1e}")

# %% [markdown]
# With lr = 0 the eval-mode ratio is exactly 1, the train-mode one is not: with dropout 0.1 it ranges
# over [0.535, 2.104] and the loss clips 22 of 440 tokens on pure noise (42 at dropout 0.3).
# Fixes: turn dropout off for RL fine-tuning (TRL's `GRPOConfig` has a `disable_dropout` option for
# this), or compute the old and the new log-probs in the same mode.

# %% [markdown]
# ### 5b. Temperature mismatch (B10), on 5 logits
#
# The sampler draws from $\text{softmax}(z/T)$; B10 scores the drawn token under $\text{softmax}(z)$. If old
# log-probs come from the sampler, the ratio at step 0 is $p_1(x)/p_T(x)$, not 1:

# %%
z = torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0])  # (V,) logits
p_T, p_1 = torch.softmax(z / 0.8, -1), torch.softmax(z, -1)
print("token      " + "  ".join(f"{i:6d}" for i in range(5)))
print("p_T (T=0.8)" + "  ".join(f"{v:6.3f}" for v in p_T))
print("p_1 (B10)  " + "  ".join(f"{v:6.3f}" for v in p_1))
print("ratio p1/pT" + "  ".join(f"{v:6.3f}" for v in p_1 / p_T))
print(f"expected ratio under sampling, E_pT[p1/pT] = sum p1 = {(p_T * p_1 / p_T).sum():.3f}; "
      f"E_pT[log ratio] = {(p_T * (p_1 / p_T).log()).sum():+.4f}")

# %% [markdown]
# With T < 1 the sampler is sharper than what B10 scores: the likely tokens (the ones usually drawn) get
# ratio < 1, the unlikely ones ratio > 1. The mean ratio under sampling is exactly 1 (an importance
# weight always averages to 1), but the mean log-ratio is negative (−0.0183 here, it is
# $-\text{KL}(p_T \| p_1)$): a systematic bias, not noise. On the snapshot's batch the B10 row above
# shows a gap of 0.96 nats between trainer and sampler.

# %% [markdown]
# ### 5c. Shift misalignment (B6): which logit scores which token
#
# The policy sees `[BOS, prompt (P=2), completion (T=4)]`; the logit at position l predicts token l+1.

# %%
P, T = 2, 4
positions = list(range(1 + P + T))  # 0..6 over [BOS, p0, p1, c0, c1, c2, c3]
fixed_rows = positions[-T - 1 : -1]  # grpo_fixed.completion_logits: logits[:, -T-1:-1]
buggy_rows = positions[-T:]  # grpo_buggy.completion_logits: logits[:, -T:]
for t in range(T):
    print(f"completion token c{t} (position {1 + P + t}): fixed scores it with logits at position {fixed_rows[t]} "
          f"(predicts position {fixed_rows[t] + 1}), B6 with position {buggy_rows[t]} (predicts {buggy_rows[t] + 1})")

# %% [markdown]
# B6 asks "how likely is the *next* token to equal this one?": a different quantity, consistent between
# old and new log-probs (ratio 1 at step 0 in the table) but far from what the sampler drew (the B6 row's
# gap, 3.22 nats, is the largest). Worse, the gradient then trains that wrong conditional.
#
# > **You should know.** Print two things before trusting any ratio: `ratio_first_maxdev` (must be 0:
# > catches dropout/train-mode and any old-vs-new code-path difference) and `logprob_gap` between the
# > trainer's and the sampler's log-probs (must be ~0: catches temperature and shift bugs, which a
# > recomputed old log-prob would hide). A ratio that *never* moves (`ratio_last_maxdev` = 0) is B3.
#
# <details><summary>Answer: your trainer takes old log-probs from vLLM; at the first inner step the mean
# log-ratio is −0.02 on every batch, and max |ρ − 1| is 0.1. What do you check first?</summary>
#
# A systematic (signed, every batch) offset at step 0 means the two sides score different
# distributions: temperature (and top-p/top-k) applied by the sampler but not by the trainer (B10),
# then the shift (B6), dropout / train mode, and numerics (bf16 sampler vs fp32 trainer). Pure noise
# with mean log-ratio ≈ 0 points to numerics or dropout; a signed offset points to a distribution mismatch.
# </details>

# %% [markdown]
# ## 6. What if `ratio = logp - old_logp` (no `exp`)?
#
# **Question.** Can the model still train? Which tokens get gradient?
#
# **Derivation.** Write $x_t = \log\pi_\theta(o_t) - \log\pi_\text{old}(o_t)$. The correct ratio is
# $\rho = e^{x}$ (= 1 at the first step); the hypothetical one is $\tilde r = x$ (= **0** at the first step).
#
# - *Unclipped term.* $\partial(\tilde r A)/\partial\log\pi = A$, and $\partial(\rho A)/\partial\log\pi = \rho A = A$ at
#   $\rho = 1$: the first-step gradient of the unclipped surrogate is the same. Without clipping the model
#   still trains (it is REINFORCE with the group baseline), but later inner steps lose the importance
#   weight: the gradient stays $A$ however far the policy drifts.
# - *Clipped surrogate.* The window $[1-\epsilon, 1+\epsilon]$ is centred on 1, but $\tilde r$ starts at 0,
#   where $\text{clip}(0, 0.8, 1.2) = 0.8$. For A > 0: $\min(0, 0.8A) = 0 = \tilde r A$, the unclipped
#   branch, gradient $A$. For A < 0: $\min(0, 0.8A) = 0.8A$, a **constant**: zero gradient. All
#   negative-advantage tokens are silenced until their log-prob has *risen* by 0.8 nats, and A > 0
#   tokens keep their gradient until $x > 1.2$, a true ratio of $e^{1.2} = 3.32$, not 1.2.
#
# The hypothetical variant, clearly **not** in either twin:

# %%
def grpo_loss_no_exp(logprobs, old_logprobs, advantages, mask, clip=0.2):
    """HYPOTHETICAL variant (not in the twins): grpo_fixed.grpo_loss with ratio = logp - old_logp, no exp."""
    mask = mask.bool()
    r = grpo_fixed._zero_masked(logprobs - old_logprobs.detach(), mask)  # (N, T): 0 at the first step
    adv = advantages.detach().unsqueeze(1)  # (N, 1)
    return -grpo_fixed.masked_mean(torch.min(r * adv, torch.clamp(r, 1 - clip, 1 + clip) * adv), mask)


# %% [markdown]
# A tiny hand-made batch: 4 sequences × 2 tokens, one group, advantages +1.5, +0.5, −0.5, −1.5, at the first
# inner step (logp = old_logp). Gradient of each loss with respect to each token's logp, times n = 8 tokens:

# %%
old = torch.log(torch.tensor([[0.5, 0.9], [0.3, 0.6], [0.4, 0.7], [0.2, 0.8]]))  # (4, 2) old log-probs
adv = torch.tensor([1.5, 0.5, -0.5, -1.5])  # (4,)
mask = torch.ones(4, 2, dtype=torch.bool)
for name, loss_fn in [("exp (grpo_loss)", grpo_fixed.grpo_loss), ("no exp (hypothetical)", grpo_loss_no_exp)]:
    logp = old.clone().requires_grad_(True)  # first inner step: logp == old_logp
    loss = loss_fn(logp, old, adv, mask, 0.2)
    loss.backward()
    grad = logp.grad * mask.sum()  # (4, 2) per-token gradient, the masked mean's 1/n undone
    print(f"{name:22s} loss {loss.item():+.4f} | n*dL/dlogp by sequence: "
          + ", ".join(f"A={a:+.1f}: {g[0]:+.2f} {g[1]:+.2f}" for a, g in zip(adv.tolist(), grad.tolist(), strict=True)))

# %% [markdown]
# Same gradient −A on the A > 0 tokens, **zero** on the A < 0 tokens, and the loss value is no longer 0
# at the first step: it is the constant
# $-\frac1n\sum_{A<0} 0.8A = -\frac18\,(2 \cdot 0.8 \cdot (-0.5) + 2 \cdot 0.8 \cdot (-1.5)) = 0.4$.
# Over a range of log-ratios, the region where a token gets surrogate gradient:

# %%
x = torch.linspace(-1.5, 1.5, 301)  # log-ratio logp - old_logp
fig, axes = plt.subplots(1, 2, figsize=(10, 3.0), sharey=True, layout="constrained")
for ax, a in zip(axes, (1.0, -1.0), strict=True):
    ax.plot(x, nb02.surrogate_grad(grpo_fixed.grpo_loss, x, a), color=FIXED, label="exp (grpo_loss)")
    ax.plot(x, nb02.surrogate_grad(grpo_loss_no_exp, x, a), color=BUGGY, ls="--", label="no exp (hypothetical)")
    ax.axvline(0, color=REFERENCE, lw=0.8)
    ax.set_title(f"A = {a:+.0f}", fontsize="medium")
    ax.set_xlabel("log-ratio  logp - old_logp  (0 = first inner step)")
axes[0].set_ylabel("n * dL / dlogp")
axes[0].legend(fontsize="small")
plt.show()
for a in (1.0, -1.0):
    for name, loss_fn in [("exp", grpo_fixed.grpo_loss), ("no exp", grpo_loss_no_exp)]:
        active = x[nb02.surrogate_grad(loss_fn, x, a) != 0]
        print(f"A={a:+.0f} {name:6s}: gradient for log-ratio in [{active.min():+.2f}, {active.max():+.2f}] "
              f"(ratio e^x in [{active.min().exp():.3f}, {active.max().exp():.3f}])")

# %% [markdown]
# Read the printout against the derivation (grid step 0.01 in log-ratio): with `exp`, an A > 0 token
# keeps its gradient up to ρ ≈ 1.2 and an A < 0 token down to ρ ≈ 0.8, a window around the first step.
# Without `exp`, the A > 0 window runs to ρ = e^1.2 = 3.32, and the A < 0 token gets gradient only once
# ρ ≥ e^0.8 = 2.23: it is silent at the first step and for as long as it stays below that. Note also
# the `exp` curves' slope: the gradient is $A\rho$, the importance weight at work; the no-exp one is flat.
#
# Can it still train? A short run of each (40 iterations, 8 prompts per batch, seed 0), the no-exp run
# being the fixed twin with only `grpo_loss` swapped:

# %%
history_fixed = grpo_fixed.train(seed=0, steps=40, prompts_per_batch=8)
history_no_exp = nb02.with_loss(grpo_loss_no_exp).train(seed=0, steps=40, prompts_per_batch=8)
for name, h in [("exp (fixed)", history_fixed), ("no exp", history_no_exp)]:
    print(f"{name:12s} reward first 5 iters {sum(s['reward'] for s in h[:5]) / 5:.3f}, "
          f"last 10 iters {sum(s['reward'] for s in h[-10:]) / 10:.3f}")

# %%
fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
curves(ax, {"exp (fixed)": history_fixed, "no exp": history_no_exp}, "reward",
       colors={"exp (fixed)": FIXED, "no exp": BUGGY}, smooth=5)
ax.set_title("EchoTask reward, seed 0 (5-iteration moving mean)", fontsize="medium")
plt.show()

# %% [markdown]
# It still learns here (reward 0.729 over the last 10 iterations, against 0.847 with `exp`, on this
# one seed): the A > 0 tokens get exactly the policy-gradient push they get with `exp`, so
# the model does "reinforce the above-average samples" and ignores the below-average ones. What is
# lost: the A < 0 signal, the importance weighting on later inner steps, and a trust region in the
# right place (A > 0 tokens are pushed until a ratio of 3.32).
#
# > **You should know.** "No exp" does not crash and the first-step gradient of $\tilde r A$ equals that of
# > $\rho A$ (without clipping, $\tilde r A = A\log\pi_\theta - \text{const}$ is the vanilla policy-gradient loss).
# > With clipping, the window $[0.8, 1.2]$ is applied to a quantity that starts at 0: negative-advantage
# > tokens get no gradient until ρ ≥ 2.23, positive ones are clipped only past ρ = 3.32.
#
# <details><summary>Answer: without clipping, is the no-exp surrogate equivalent to the exp one?</summary>
#
# Only at the first inner step, where $\rho = 1$ makes both gradients $A\nabla\log\pi$. Later the exp
# version's gradient is $A\rho\nabla\log\pi$ (importance-weighted toward the current policy), the no-exp
# one stays $A\nabla\log\pi$: an uncorrected off-policy update. It is still a valid *first-order*
# surrogate (same value and gradient at $\theta_\text{old}$ up to a constant), just a worse one away from it.
# </details>

# %% [markdown]
# ## 7. Self-check
#
# 1. At minibatch 1 of epoch 0 you print max |ρ − 1| = 0.3 although that minibatch was never trained on. Bug?
# 2. Your run logs `clip_frac_pos = clip_frac_neg = 0.000` and `ratio_last_maxdev = 0` for all iterations,
#    with 2 epochs × 2 minibatches. What is it?
# 3. Which side of the clip window do A > 0 tokens reach first, and why? Why is the drift for A < 0 larger?
# 4. Dropout 0.1, lr 0: is the ratio 1? Name two fixes.
# 5. Why did B10 and B6 leave `ratio_first_maxdev` at 0 here, and what catches them?
# 6. With `ratio = logp - old_logp` and clip 0.2, which tokens get gradient at the first inner step?
#
# <details><summary>Answers</summary>
#
# 1. No: the step on minibatch 0 already moved the shared weights; only the very first inner step is
#    on-policy (section 2).
# 2. Old log-probs recomputed inside the inner loop (B3): the ratio is 1 at every step, so nothing is ever
#    clipped and the multi-epoch update has no trust region. Health check "ratio moves after updates" (section 4).
# 3. A > 0 tokens rise toward $1+\epsilon$ (first order: $\sum_t A_t\Delta\log\pi_t \ge 0$); A < 0 tokens fall
#    toward $1-\epsilon$. A > 0 tokens are already likely mid-run, so their ratio is capped by $1/\pi_\text{old}$;
#    A < 0 tokens can fall toward 0 (section 3).
# 4. No: train mode draws a new dropout mask each forward, while the cached old log-probs were eval-mode.
#    Disable dropout (e.g. TRL's `disable_dropout`), or compute old and new log-probs in the same mode (section 5a).
# 5. Old and new log-probs were both computed by the same buggy function, so they agree; the trainer-vs-sampler
#    `logprob_gap` catches them (section 5).
# 6. Only A > 0 tokens (unclipped branch, gradient A); A < 0 tokens sit on the constant $0.8A$ branch (section 6).
# </details>
