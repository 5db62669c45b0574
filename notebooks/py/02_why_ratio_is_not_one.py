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
# **The interview question** (follow-up 2 of SPEC.md). *"You print `ratio = exp(logp - old_logp)` inside
# the inner loop and it is not 1, although this is the first update on this batch. Is that a bug? Trace
# where the divergence comes from and what its sign is."*
#
# After this notebook you can say, with numbers to back it:
#
# 1. The ratio is **exactly** 1 at the first inner step when old log-probs are cached once with the same weights
#    and code path (no dropout) and the kernels round alike for both batch shapes, as here on this CPU (otherwise 1
#    up to rounding: check max|ρ − 1| against a tolerance, not 0), and only there: every later minibatch, even one
#    never trained on, sees a policy that already moved.
# 2. What the drift's sign guarantees: to first order, leaving out the KL term, the first step (from ratio 1)
#    raises the advantage-weighted log-ratio of the tokens it was computed on,
#    $\frac1n\sum_t A_t\,\Delta\log\pi(o_t) \approx \eta\,g^\top P g \ge 0$ (on the rollout's other minibatches the
#    change has no guaranteed sign). On this notebook's batch, at small
#    steps, that shows as A > 0 tokens drifting above ratio 1 and A < 0 tokens below on average, toward the side of
#    the clip window each one hits; after one step at lr 1e-2 the per-sign mean ratios had swapped while the
#    weighted log-ratio stayed positive. The per-sign sides are not guaranteed even for an infinitesimal step. One
#    reason: under a token-mean loss, unequal lengths can make $\sum_t A_t \ne 0$, and that part of the gradient
#    moves every sampled token the same way. Another, even when $\sum_t A_t = 0$: shared parameters (one logit
#    shared by an A > 0 and an A < 0 occurrence of the same token can move both the same way).
# 3. When clipping engages, and what it does and does not bound.
# 4. The illegitimate reasons for ratio ≠ 1 (or for a ratio that is 1 when it should not be): the
#    recomputed-old-log-probs trap (B3), dropout (and why "the same mode for both passes" is not enough),
#    a temperature mismatch (B10), a shifted log-prob (B6), a low-precision sampler; and why the *sign* of
#    an offset does not tell these apart.
# 5. What `ratio = logp - old_logp` (no `exp`) does to the surrogate, and which tokens still get gradient.
# 6. Why the old log-probs are computed under `no_grad` and cached once: what each omission costs.
#
# Everything below calls the twins' own functions (`rollout`, `update_policy`, `policy_logprobs`,
# `grpo_loss`). The formulas taught here are defined in the notebook's cells; `workbook/nb02_ratio.py` only
# snapshots a run, replays its next update in different ways and draws.

# %%
import logging

import matplotlib.pyplot as plt
import torch

import grpo_fixed
import workbook  # noqa: F401  (one torch thread)
from grpo_fixed import masked_mean
from workbook import nb02_ratio
from workbook.catalog import hybrid
from workbook.monitor import STATS, render_range
from workbook.plots import BUGGY, FIXED, REFERENCE, buggy_vs_fixed, curves
from workbook.progress import progress
from workbook.run_summary import final_reward
from workbook.swap import fixed_with
from workbook.widgets import live_plot, probe, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids log health warnings; we print what we need
B3, B6, B10 = hybrid("B3"), hybrid("B6"), hybrid("B10")

# %%
with progress("training 20 iterations to the replayed batch"):
    snap = nb02_ratio.warm_start(iterations=20, seed=0)  # the batch every section replays (next heading)
glance = {name: module.update_policy(*nb02_ratio.restore(snap), snap.batch, snap.cfg, torch.Generator().manual_seed(0))
          for name, module in [("buggy", B3), ("fixed", grpo_fixed)]}  # B3: grpo_buggy's update_policy
fig, axes = buggy_vs_fixed("the ratio each inner step's loss sees, one batch, 2 epochs x 2 minibatches "
                           "(dashed: clip window)", figsize=(9, 3.0))
axes[0].set_title("B3: grpo_buggy's update_policy", color=BUGGY)
for ax, (name, records) in zip(axes, glance.items(), strict=True):
    nb02_ratio.draw_loss_ratios(ax, records, snap.cfg.clip, BUGGY if name == "buggy" else FIXED)
axes[0].set_ylabel("ratio pi_theta / pi_old")
plt.show()
glance_dev = {name: [(rec["ratio"] - 1).abs().max().item() for rec in records] for name, records in glance.items()}
for name, devs in glance_dev.items():
    print(f"{name}: max |rho - 1| per inner step " + " ".join(f"{d:.2f}" for d in devs))
assert all(d == 0 for d in glance_dev["buggy"]) and glance_dev["fixed"][0] == 0
assert sum(rec["clipped_pos"] + rec["clipped_neg"] for rec in glance["buggy"]) == 0  # B3: the clip never engages
assert all(d > snap.cfg.clip for d in glance_dev["fixed"][1:])  # every later step reaches past the window

# %% [markdown]
# **At a glance.** The ratio you would print inside the inner loop, at each of the 4 inner steps of one update:
# with B3 (left) it is exactly 1 at every step, so the clip never engages; in the fixed twin (right) it is exactly
# 1 only at step 0 and spreads past the clip window from step 1 on. Why: notebook 02 §2; what B3 costs: notebook 02 §4.

# %% [markdown]
# ## 1. The batch we replay
#
# A run of the fixed twin on AdditionTask from its SFT checkpoint (B = 8 prompts × G = 8 samples, default config
# otherwise) for 20 iterations, then one more rollout batch. That moment (policy weights, Adam state, batch) is the
# `Snapshot` (`snap`, taken in the figure's cell); every experiment below restarts from it, so they all
# share the same starting point.
#
# The batch is what an LM trainer holds: text prompts, tokenized and **left-padded** (`prompt_ids`,
# `prompt_mask`), the sampled completion tokens with their mask (True up to and including EOS), the decoded
# texts the reward scored, and per-token log-probs. Each sequence has one advantage; every one of its
# completion tokens carries it. Over the unmasked tokens, in mask order:

# %%
def lm_inputs(batch):
    """What the LM needs to score a batch's completions: prompt_ids, prompt_mask (N, P), completions, mask (N, T)."""
    return batch["prompt_ids"], batch["prompt_mask"], batch["completions"], batch["mask"]


def token_advantages(batch):
    """A_t of each unmasked completion token = the advantage of its sequence. -> (n_tokens,)"""
    mask = batch["mask"]  # (N, T)
    return batch["advantages"][:, None].expand_as(mask)[mask]  # (N, 1) -> (N, T) -> (n_tokens,)


batch, cfg = snap.batch, snap.cfg
for name, value in batch.items():
    shape = f"list of {len(value)} str" if isinstance(value, list) else f"{tuple(value.shape)} {value.dtype}"
    print(f"{name:17s} {shape}")
for i in (0, 8):  # two sequences of two different prompts
    print(f"{batch['prompts'][i]!r:9s} ids {batch['prompt_ids'][i].tolist()} mask {batch['prompt_mask'][i].tolist()}"
          f" -> {batch['texts'][i]!r} (reward {batch['rewards'][i]:.0f}, A {batch['advantages'][i]:+.2f})")
token_adv = token_advantages(batch)  # (n_tokens,)
print(f"\nreward {snap.stats['reward']:.3f}  entropy {snap.stats['entropy']:.3f}  "
      f"zero-variance groups {snap.stats['zero_var_groups']:.3f}")
print(f"unmasked tokens {token_adv.numel()}: A>0 {int((token_adv > 0).sum())}, A<0 {int((token_adv < 0).sum())}, "
      f"A=0 {int((token_adv == 0).sum())}")
print(f"config: inner_epochs={cfg.inner_epochs} minibatches={cfg.minibatches} lr={cfg.lr} clip={cfg.clip} "
      f"beta={cfg.beta} temperature={cfg.temperature}")
assert token_adv.numel() == int(batch["mask"].sum())

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
# The ratio we measure outside the loss, in eval mode (dropout off, as at rollout) and without gradient,
# against the batch's cached old log-probs; at the snapshot's own weights it must be 1:

# %%
@torch.no_grad()
def true_ratio(policy, batch, temperature):
    """rho_t = exp(log pi_theta(o_t) - log pi_old(o_t)), eval mode, against the cached old log-probs. (n_tokens,)"""
    was_training = policy.training
    policy.eval()
    logprobs = grpo_fixed.policy_logprobs(policy, *lm_inputs(batch), temperature)  # (N, T)
    policy.train(was_training)
    return torch.exp(logprobs - batch["old_logprobs"])[batch["mask"]]


policy, optimizer = nb02_ratio.restore(snap)
rho0 = true_ratio(policy, batch, cfg.temperature)  # (n_tokens,)
print(f"at the snapshot's weights: max |rho - 1| = {(rho0 - 1).abs().max():.1e} over {rho0.numel()} tokens")
assert (rho0 == 1).all()

# %% [markdown]
# Inner step $k$ uses the weights after $k$ optimizer steps. The default config makes 2 epochs × 2
# minibatches = 4 inner steps per rollout batch. Below: the fixed twin's `update_policy` on the
# snapshot batch, one line per record it returns (the ratio the loss used).

# %%
records = grpo_fixed.update_policy(policy, optimizer, batch, cfg, torch.Generator().manual_seed(0))
print("step epoch minibatch  tokens  max|rho-1|  mean rho  clipped A>0   clipped A<0")
for k, rec in enumerate(records):
    epoch, minibatch = divmod(k, cfg.minibatches)
    ratio = rec["ratio"]  # (n_tokens,) of this minibatch
    print(f"{k:4d} {epoch:5d} {minibatch:9d} {ratio.numel():7d} {(ratio - 1).abs().max():11.4e} {ratio.mean():9.4f}  "
          f"{rec['clipped_pos']:3d}/{rec['n_pos']:3d}      {rec['clipped_neg']:3d}/{rec['n_neg']:3d}")
summary = grpo_fixed.summarize_inner_steps(records)
print(f"\nhealth stat ratio_first_maxdev = {summary['ratio_first_maxdev']:.1e}  "
      f"(healthy: {render_range('ratio_first_maxdev')})")
maxdev = [(rec["ratio"] - 1).abs().max().item() for rec in records]
n_clipped = [rec["clipped_pos"] + rec["clipped_neg"] for rec in records]
assert maxdev[0] == 0 and all(d > 0.1 for d in maxdev[1:])  # step 0 exact; every later step off by > 0.1
assert n_clipped[0] == 0 and n_clipped[1] < n_clipped[2] < n_clipped[3]  # more clipping at every step
assert [f"{d:.2f}" for d in maxdev[1:]] == ["0.22", "0.40", "0.56"] and n_clipped == [0, 1, 5, 16]  # as quoted

# %% [markdown]
# Read the table as a debugger would:
#
# - **Step 0** is the only on-policy step: `max|rho-1|` is 0 to the last bit here (same weights and
#   code path; the 64-row eval and 32-row train forwards round alike on this CPU; in general, where kernels
#   depend on the batch shape, 1 only up to rounding).
# - **Step 1** is minibatch 1 of epoch 0. Those 32 sequences were never trained on, yet the ratio is
#   already off by up to 0.22 (and the loss clips 1 token): the step on minibatch 0 moved the *shared*
#   weights, and every sequence's log-prob moved with them. "Not 1 on the first pass" is therefore
#   expected as soon as there is more than one minibatch.
# - **Steps 2-3** (epoch 1) see a policy two and three updates away: max |ρ − 1| 0.40 and 0.56, and
#   5 then 16 tokens clipped.
#
# This is why GRPO/PPO as implemented is *not strictly on-policy*: one rollout batch feeds several
# optimizer steps, and only the first of them evaluates the policy that generated the data. The per-token
# ratio is a token-level, first-order correction for the rest: it reweights each sampled token for the change
# of its own conditional probability, not by the full sequence importance weight (the product over the
# sequence's tokens), so the shift in which prefixes the current policy would reach is left uncorrected.

# %% [markdown]
# > **You should know.** "Why isn't the ratio 1 at step 1?" One line: *multi-step minibatch updates
# > within one rollout; after the first optimizer step $\pi_\theta \ne \pi_\text{old}$ for every
# > sequence, trained on or not.* The health check to print is `ratio_first_maxdev` (ratio at the very
# > first minibatch): exactly 0 in the fixed twin, and its healthy range (printed above from
# > `grpo_support.STATS`) leaves room only for float noise. If *that* one is off, something else is wrong
# > (notebook 02 §5).
#
# <details><summary>Answer: with inner_epochs=1 and minibatches=1, is the ratio ever different from 1?</summary>
#
# Not inside the loss, when the old log-probs come from the same forward as the loss's (as in the twins): there
# is a single optimizer step and its loss is evaluated before it, at $\theta_\text{old}$, so every ratio is 1
# and clipping never engages: the update is the plain policy-gradient step. The clip only matters from the
# second inner step on. With old log-probs from the sampler, a stale policy or a dropout pass the ratio is off
# at that one step already, and the clip can act there (notebook 02 §5).
# </details>

# %% [markdown]
# ## 3. The drift's sign: what the advantage guarantees, and what it does not
#
# **Question.** After an update, which way do the ratios move, and what exactly is guaranteed?
#
# **Key equation (first order).** At $\rho = 1$ the surrogate's gradient is
# $g = \frac1n\sum_s A_s \nabla_\theta \log\pi_\theta(o_s)$
# (the KL term adds little while $\pi$ stays near $\pi_\text{ref}$; $\beta = 0.1$ here).
# A step $\Delta\theta = \eta P g$ with a positive diagonal preconditioner $P$ ($I$ for SGD,
# $\text{diag}(1/\sqrt{\hat v})$ for Adam's adaptive scaling) changes each log-prob by
# $\Delta\log\pi(o_t) \approx \nabla\log\pi(o_t)^\top \Delta\theta$, so
#
# $$\frac1n\sum_t A_t \,\Delta\log\pi(o_t) \approx \eta\, g^\top P g \;\ge 0 .$$
#
# (Adam's momentum also mixes in gradients from earlier batches, so for the trainer's Adam this is a
# tendency, not a theorem: the table below checks it.) What is guaranteed, to first order and for one small
# step from $\rho = 1$, is this *advantage-weighted* mean log-ratio over the tokens whose gradient $g$ is, and
# nothing more. With minibatches, a step on one moves another's weighted log-ratio by $\eta\,g_1^\top P g_0$, a
# cross term with no guaranteed sign; and from the second step on, $g$ carries the ratios and the clip, so what a
# step raises, to first order, is the clipped surrogate, not this sum. It does not say that
# the A > 0 tokens' mean ratio goes above 1 and the A < 0 tokens' below: a positive weighted sum also comes
# out of both groups' log-probs falling, the A < 0 ones further, and a mean *ratio* can be carried by a few
# tokens that moved far. On this batch, at small steps, the per-sign means do land on those sides (the table
# below); after one step at lr 1e-2 they have swapped (the cell after it); and on another batch even an
# infinitesimal step need not put them there, through $\sum_t A_t \ne 0$ (the toy after that) or through
# shared parameters (the paragraph after the toy). Nor is it a statement about every token: parameters are
# shared, and the same token in the same context can sit in sequences of both signs (all G samples share
# the prompt).
#
# Below: 8 full-batch inner steps of the fixed twin (`inner_epochs=1, minibatches=1` per call, Adam
# state carried over) from the snapshot, at lr = 3e-3 (7.5 times the default 4e-4, so that the drift shows
# within 8 steps) and clip = 0.2; `true_ratio` before each.

# %%
trace = nb02_ratio.inner_trace(grpo_fixed, snap, steps=8, lr=3e-3, clip=0.2, ratio_fn=true_ratio)
nonzero = token_adv != 0
print("k   mean rho A>0  mean rho A<0   mean A*log(rho)   sign(log rho) == sign(A)")
drift = []  # (k, mean rho A>0, mean rho A<0, mean A log rho, sign agreement)
for k, ratio in enumerate(trace["ratio"]):
    pos, neg = nb02_ratio.sign_means(ratio, token_adv)
    weighted = (token_adv * ratio.log()).mean().item()
    agree = (torch.sign(ratio.log()) == torch.sign(token_adv))[nonzero].float().mean().item()
    drift.append((k, pos, neg, weighted, agree))
    print(f"{k}   {pos:11.4f}  {neg:12.4f}   {weighted:+15.4f}   {agree:24.2f}")
same = max((a.sort().values - b.sort().values).abs().max().item()  # the loss's tokens come in shuffled order
           for a, b in zip(trace["ratio"], trace["loss_ratio"], strict=True))
print(f"\n(the eval-mode ratio we measure equals the one the loss used, to {same:.1e}: no dropout here)")
assert same == 0
assert all(pos > 1 > neg and w > 0 for k, pos, neg, w, _ in drift[1:])  # at this lr: every step after 0
lopsided = [(1 - neg) / (pos - 1) for k, pos, neg, _, _ in drift[1:]]  # A<0 drift / A>0 drift, k = 1..7
print("(1 - mean rho A<0) / (mean rho A>0 - 1), k = 1..7:", " ".join(f"{x:.2f}" for x in lopsided))
rows = [f"{pos:.4f} {neg:.4f} {w:+.4f}" for k, pos, neg, w, _ in drift]
assert rows[1] == "1.0210 0.8845 +0.1186" and rows[7] == "1.0803 0.7890 +0.1855"  # the values the text quotes
assert all(0.11 < w < 0.19 for *_, w, _ in drift[2:]) and all(0.53 <= round(a, 2) <= 0.70 for *_, a in drift[1:])
assert all(x > 2 for x in lopsided)  # the A<0 tokens fall at least twice as far below 1 as the A>0 ones rise
assert f"{lopsided[0]:.2f} {min(lopsided):.2f} {lopsided[6]:.2f}" == "5.49 2.63 2.63"  # the values the text quotes

# %% [markdown]
# At this lr, on this batch, the per-sign means sit on the expected sides in every row after step 0: mean ratio
# above 1 for A > 0 (1.0210 after one step, 1.0803 at k = 7), below 1 for A < 0 (0.8845, then 0.7890), and mean
# $A\log\rho$ positive at every step
# (+0.1186 after one step, between +0.11 and +0.19 after that: not monotone). Token by token it holds for only
# 53-70% of the tokens (the `sign(log rho) == sign(A)` column; at k = 0 every log-ratio is exactly 0), for the
# sharing reasons above.
#
# Only the weighted one is guaranteed, and only for a small step. The same replay at lr = 1e-2 (25 times the
# default; the largest position of the slider in notebook 02 §4, which reuses this replay from the cache), with
# each sign's median ratio and mean log-ratio beside its mean ratio:

# %%
trace_large = nb02_ratio.inner_trace(grpo_fixed, snap, steps=8, lr=1e-2, clip=0.2, ratio_fn=true_ratio)
print("k   mean rho A>0  mean rho A<0   mean A*log(rho)   median rho A>0 / A<0   mean log rho A>0 / A<0")
large = []  # per step k: mean rho A>0, A<0, mean A log rho, median rho A>0, A<0, mean log rho A>0, A<0
for k, ratio in enumerate(trace_large["ratio"]):
    pos, neg = nb02_ratio.sign_means(ratio, token_adv)
    weighted = (token_adv * ratio.log()).mean().item()
    medians = [ratio[sel].median().item() for sel in (token_adv > 0, token_adv < 0)]
    logs = [ratio[sel].log().mean().item() for sel in (token_adv > 0, token_adv < 0)]
    large.append((pos, neg, weighted, *medians, *logs))
    print(f"{k}   {pos:11.4f}  {neg:12.4f}   {weighted:+15.4f}   {medians[0]:10.4f} / {medians[1]:.4f}   "
          f"{logs[0]:+11.4f} / {logs[1]:+.4f}")
step1 = trace_large["ratio"][1]  # (n_tokens,) after one step
far = step1[token_adv < 0] > 2  # A<0 tokens whose ratio more than doubled
print(f"\nafter one step: {int(far.sum())} of {int((token_adv < 0).sum())} A<0 tokens above ratio 2 (max "
      f"{step1[token_adv < 0].max():.2f}); mean ratio of the other A<0 tokens {step1[token_adv < 0][~far].mean():.4f}")
assert large[1][0] < 1 < large[1][1] and large[1][2] > 0  # per-sign means swapped, weighted log-ratio still > 0
assert f"{large[1][0]:.4f} {large[1][1]:.4f} {large[1][2]:+.4f}" == "0.7179 1.5881 +0.2349"  # as quoted
assert large[1][6] < large[1][5] < 0 and 1.8 < large[1][6] / large[1][5] < 2.1  # both fell, A<0 about twice as far
assert large[1][4] < large[1][3] < 1 and f"{large[1][3]:.4f} {large[1][4]:.4f}" == "0.9694 0.8838"  # as quoted
assert [f"{large[k][2]:+.4f}" for k in (4, 5)] == ["-0.0745", "-0.1316"]  # as quoted
assert int(far.sum()) == 4
assert f"{step1[token_adv < 0].max():.2f} {step1[token_adv < 0][~far].mean():.4f}" == "61.14 0.6159"  # as quoted

# %% [markdown]
# After one step at lr = 1e-2 the per-sign means have swapped: mean ratio 0.7179 for A > 0, 1.5881 for A < 0,
# while the mean $A\log\rho$ is still positive (+0.2349). Both groups' log-probs fell on average (mean log-ratio
# below 0 for both), the A < 0 ones about twice as far, so the weighted sum stays positive; the A < 0 mean ratio
# is carried above 1 by 4 tokens whose ratio more than doubled (up to 61.14), while the other 72 average 0.6159,
# and both medians are below 1 in the expected order (0.9694 for A > 0, 0.8838 for A < 0). At k = 4 and 5 even
# the weighted log-ratio is negative (−0.0745, −0.1316): several large steps in, the first-order argument says
# nothing. So quote the guaranteed quantity, and read the per-sign means as what small steps showed on this
# batch.
#
# Not even an infinitesimal step guarantees the per-sign sides. One reason is a nonzero $\sum_t A_t$. The
# gradient is
# $g = \frac1n\sum_t A_t \nabla\log\pi(o_t)$; along a parameter direction that moves every sampled token's
# log-prob by the same amount (in the toy below, the logit of a token nobody sampled) its component is
# $\frac1n\sum_t A_t$ times that common rate. Group-centred advantages sum to 0 over *sequences*, but the
# twins' token mean counts each sequence's A once per token, so $\sum_t A_t = \sum_i A_i |o_i|$, in general
# $\ne 0$ when the lengths differ, and that part of the step shifts every token's log-prob the same way, A > 0
# and A < 0 alike.
# The tiny input: one prompt, two completions, "a" (1 token, A = +1) and "bb" (2 tokens, A = −1); at every
# position the policy is softmax(0, 0, θ) over {a, b, c}, with θ = 0. One gradient step of size η on the twin's
# `grpo_loss`, in float64:

# %%
toy_tokens = torch.tensor([[0, 0], [1, 1]])  # (N, T) "a" (then padding), "bb"
toy_mask = torch.tensor([[True, False], [True, True]])  # (N, T)
toy_adv = torch.tensor([1.0, -1.0], dtype=torch.float64)  # (N,) one advantage per sequence


def toy_logprobs(theta):
    """log pi of the toy's tokens under softmax(0, 0, theta) at every position. theta (1,) -> (N, T)"""
    return torch.log_softmax(torch.cat([torch.zeros(2, dtype=torch.float64), theta]), -1)[toy_tokens]


toy_theta = torch.zeros(1, dtype=torch.float64, requires_grad=True)  # (1,)
toy_old = toy_logprobs(toy_theta).detach()  # (N, T) the ratio is exactly 1 here
grpo_fixed.grpo_loss(toy_logprobs(toy_theta), toy_old, toy_adv, toy_mask, 0.2).backward()
toy_grad = -toy_theta.grad.item()  # dJ/dtheta, J the surrogate
toy_sum_adv = toy_adv[:, None].expand_as(toy_mask)[toy_mask].sum().item()  # sum_t A_t over the 3 tokens
print(f"sum_t A_t = {toy_sum_adv:+.0f}, dJ/dtheta = {toy_grad:.6f} (1/9 = {1 / 9:.6f})")
toy_rows = {}
for eta in (1e-4, 1e-2, 1.0):
    log_rho = toy_logprobs(torch.tensor([eta * toy_grad], dtype=torch.float64)) - toy_old  # (N, T)
    weighted = masked_mean(toy_adv[:, None] * log_rho, toy_mask).item()
    toy_rows[eta] = (log_rho[0, 0].exp().item(), log_rho[1, 0].exp().item(), weighted)
    print(f"eta {eta:g}: ratio A>0 {toy_rows[eta][0]:.6f}  ratio A<0 {toy_rows[eta][1]:.6f}  "
          f"mean A*log(rho) {weighted:+.2e}")
print(f"this notebook's batch: (1/n) sum_t A_t = {token_adv.mean().item():+.4f} over {token_adv.numel()} tokens")
assert toy_sum_adv == -1 and abs(toy_grad - 1 / 9) < 1e-15  # the loss's gradient pushes theta up
assert all(pos < 1 and neg < 1 and w > 0 for pos, neg, w in toy_rows.values())  # A>0 below 1, weighted > 0
assert f"{toy_rows[1e-4][0]:.6f} {toy_rows[1e-4][1]:.6f} {toy_rows[1e-4][2]:+.2e}" == "0.999996 0.999996 +1.23e-06"
assert f"{token_adv.mean().item():+.4f}" == "+0.0082"  # as quoted

# %% [markdown]
# The surrogate's gradient raises θ (dJ/dθ = 1/9), the logit of the token nobody sampled, so both sampled
# tokens lose probability by the same amount: after a step of 1e-4 both ratios are 0.999996, the A > 0 token's
# below 1, while the weighted mean log-ratio is +1.23e-06 > 0, as the first-order argument promises. The same
# at every step size printed. On a real batch the common-mode part is one component among many (this batch's
# token mean of A is +0.0082, against advantages of magnitude near 1), so whether the per-sign means land on the
# expected sides depends on the batch; only the weighted sum is guaranteed.
#
# $\sum_t A_t \ne 0$ is one way the sides fail, not the only one: with $\sum_t A_t = 0$ (the paper's
# per-sequence mean over equal lengths, say) shared parameters can do it too. Let one logit $\theta$ be shared
# by an A = +1 and an A = −1 occurrence of the same token $a$, in two contexts where $a$ is not equally likely.
# The two occurrences pull on $\theta$ with $+(1 - \pi_1(a))$ and $-(1 - \pi_2(a))$, which do not cancel, so
# one step moves $\theta$, and with it both occurrences' log-probs, the same way: if $a$ is less likely in the
# A > 0 context, both rise, and the A < 0 token's ratio goes above 1 while the weighted log-ratio stays
# positive. The tiny input: two one-token completions of $a$, A = +1 in a context where the policy gives
# $a$ logit θ + logit(0.3) against 0 for the one other token, A = −1 in one where it gives θ + logit(0.6);
# θ = 0, one step of size η on the twin's `grpo_loss`, in float64:

# %%
shared_bias = torch.tensor([[0.3], [0.6]], dtype=torch.float64).logit()  # (N, T) a's logit offset per context
shared_mask = torch.ones(2, 1, dtype=torch.bool)  # (N, T) one token each
shared_adv = torch.tensor([1.0, -1.0], dtype=torch.float64)  # (N,) sum_t A_t = 0


def shared_logprobs(theta):
    """log pi(a) in the two contexts, logits (theta + bias, 0). theta (1,) -> (N, T)"""
    return torch.nn.functional.logsigmoid(theta + shared_bias)


shared_theta = torch.zeros(1, dtype=torch.float64, requires_grad=True)  # (1,)
shared_old = shared_logprobs(shared_theta).detach()  # (N, T)
grpo_fixed.grpo_loss(shared_logprobs(shared_theta), shared_old, shared_adv, shared_mask, 0.2).backward()
shared_grad = -shared_theta.grad.item()  # dJ/dtheta = ((1 - 0.3) - (1 - 0.6)) / 2
shared_log_rho = shared_logprobs(torch.tensor([1e-4 * shared_grad], dtype=torch.float64)) - shared_old  # (N, T)
shared_rho = shared_log_rho.exp()[:, 0].tolist()  # (N,) [A > 0, A < 0]
shared_weighted = masked_mean(shared_adv[:, None] * shared_log_rho, shared_mask).item()
print(f"dJ/dtheta = {shared_grad:.4f}; eta 1e-4: ratio A>0 {shared_rho[0]:.7f}  ratio A<0 {shared_rho[1]:.7f}  "
      f"mean A*log(rho) {shared_weighted:+.2e}")
assert abs(shared_grad - 0.15) < 1e-12 and shared_rho[0] > shared_rho[1] > 1 and shared_weighted > 0
assert f"{shared_rho[0]:.7f} {shared_rho[1]:.7f} {shared_weighted:+.2e}" == "1.0000105 1.0000060 +2.25e-06"

# %% [markdown]
# θ rises (dJ/dθ = 0.15), and both ratios rise with it: 1.0000105 for the A > 0 token and 1.0000060 for the
# A < 0 one, which is above 1, while the weighted log-ratio is +2.25e-06 > 0.
#
# Back at lr = 3e-3, note the asymmetry: the ratio of the two drifts, (1 − mean ρ of A < 0) / (mean ρ of
# A > 0 − 1), is 5.49 at k = 1 (−0.1155 against +0.0210) and never below 2.63 (at k = 7: −0.2110 against
# +0.0803): the A < 0 tokens fall far further below 1 than the A > 0 tokens rise above it. Three things on this batch
# push that way. To first order a token's log-prob moves in proportion to its $|A|$ and, through the softmax,
# to its squared room: with $\pi$ the full next-token distribution at that position (at temperature $T$), a step
# $\eta A\,\nabla_z \log\pi(a) = \eta A (e_a - \pi)/T$ on its position's logits alone moves $\log\pi(a)$ by
# $\eta A\,\lVert e_a - \pi\rVert^2/T^2$. The squared norm $\lVert e_a - \pi\rVert^2$ is this exact softmax
# self-effect; it lies between $(1 - \pi(a))^2$ and $2(1 - \pi(a))^2$, so $(1 - \pi(a))^2$, which needs only the
# sampled token's probability, is a proxy for it. Either is small for a token the policy already likes
# (saturation; shared parameters add cross-effects); and a token's ratio can never exceed $1/\pi_\text{old}(o_t)$
# (its probability is at most 1), while the A < 0 tokens have no floor but 0. Mid-run the A > 0 tokens are the
# likely ones:

# %%
old_prob = batch["old_logprobs"][batch["mask"]].exp()  # (n_tokens,)
ceiling_share, size, room, room_sq = {}, {}, {}, {}
for label, sel in [("A>0", token_adv > 0), ("A<0", token_adv < 0)]:
    ceiling = 1 / old_prob[sel]  # the largest ratio this token can ever reach
    ceiling_share[label] = (ceiling < 1.2).float().mean().item()
    size[label], room[label] = token_adv[sel].abs().mean().item(), (1 - old_prob[sel]).mean().item()
    room_sq[label] = ((1 - old_prob[sel]) ** 2).mean().item()  # the softmax self-effect's scale
    print(f"{label}: mean |A| {size[label]:.3f}, mean 1 - pi_old {room[label]:.3f}, mean pi_old(token) "
          f"{old_prob[sel].mean():.3f}, median ceiling 1/pi_old {ceiling.median():.3f}, "
          f"fraction with ceiling below 1.2: {ceiling_share[label]:.2f}")
print(f"A<0 / A>0: mean |A| x{size['A<0'] / size['A>0']:.2f}, mean 1 - pi_old x{room['A<0'] / room['A>0']:.2f}, "
      f"mean (1 - pi_old)^2 x{room_sq['A<0'] / room_sq['A>0']:.2f}")
assert ceiling_share["A>0"] > ceiling_share["A<0"] and size["A<0"] > size["A>0"] and room["A<0"] > 2 * room["A>0"]
assert [f"{old_prob[s].mean():.3f}" for s in (token_adv > 0, token_adv < 0)] == ["0.839", "0.624"]  # as quoted
assert [f"{ceiling_share[k]:.2f}" for k in ("A>0", "A<0")] == ["0.54", "0.39"]
assert [f"{size[k]:.3f} {room[k]:.3f}" for k in ("A>0", "A<0")] == ["0.867 0.161", "1.006 0.376"]  # as quoted
assert f"{room_sq['A<0'] / room_sq['A>0']:.2f}" == "5.97"  # as quoted

# %% [markdown]
# The last column is the proxy. The exact self-effect $\lVert e_a - \pi\rVert^2$ needs the whole distribution
# $\pi$ at each position under $\pi_\text{old}$: the snapshot policy's logits through the same path as
# `policy_logprobs` (`completion_logits`, divided by the temperature, `log_softmax`), whose entry at the sampled
# token must be the cached old log-prob exactly:

# %%
with torch.no_grad():
    policy_s, _ = nb02_ratio.restore(snap)
    policy_s.eval()  # as in rollout
    logits_old = grpo_fixed.completion_logits(policy_s, *lm_inputs(batch))[batch["mask"]]  # (n_tokens, V)
    logp_old = torch.log_softmax(logits_old / cfg.temperature, -1)  # (n_tokens, V) log pi at each position
sampled = batch["completions"][batch["mask"]]  # (n_tokens,) token ids a
assert torch.equal(logp_old.gather(-1, sampled[:, None]).squeeze(-1), batch["old_logprobs"][batch["mask"]])
dist_old = logp_old.exp()  # (n_tokens, V) pi
self_effect = (torch.nn.functional.one_hot(sampled, dist_old.shape[-1]) - dist_old).pow(2).sum(-1)  # (n_tokens,)
proxy = (1 - old_prob) ** 2  # (n_tokens,)
assert ((proxy <= self_effect + 1e-6) & (self_effect <= 2 * proxy + 1e-6)).all()  # the bounds, token by token
neg_sel, pos_sel = token_adv < 0, token_adv > 0
exact_x = (self_effect[neg_sel].mean() / self_effect[pos_sel].mean()).item()
moved = token_adv.abs() * self_effect  # (n_tokens,) |A| ||e_a - pi||^2: the first-order move, in units of eta / T^2
moved_x = (moved[neg_sel].mean() / moved[pos_sel].mean()).item()
proxy_x = (proxy[neg_sel].mean() / proxy[pos_sel].mean()).item()
print(f"mean ||e_a - pi||^2: A>0 {self_effect[pos_sel].mean():.4f}, A<0 {self_effect[neg_sel].mean():.4f}")
print(f"A<0 / A>0: exact ||e_a - pi||^2 x{exact_x:.2f}, with |A| (|A| ||e_a - pi||^2) x{moved_x:.2f}; "
      f"proxy (1 - pi)^2 x{proxy_x:.2f}")
assert f"{exact_x:.2f} {moved_x:.2f} {proxy_x:.2f}" == "6.40 6.61 5.97"  # as quoted

# %% [markdown]
# Which tokens does the clip act on? The clipped surrogate $\min(\rho A, \text{clip}(\rho, 1-\epsilon, 1+\epsilon)A)$
# takes the constant branch (zero gradient) only outside the window *on the side A pushes*: for A > 0 above
# $1+\epsilon$, for A < 0 below $1-\epsilon$. That is the definition the fixed twin logs as `clip_frac_pos` /
# `clip_frac_neg`:

# %%
def clipped(ratio, token_adv, clip):
    """Tokens on the clipped surrogate's constant branch (zero gradient): A > 0 and rho > 1 + clip, or
    A < 0 and rho < 1 - clip. ratio, token_adv (n_tokens,) -> (n_tokens,) bool"""
    return ((token_adv > 0) & (ratio > 1 + clip)) | ((token_adv < 0) & (ratio < 1 - clip))


tiny_ratio = torch.tensor([1.3, 0.7, 1.3, 0.7, 1.1])  # (5,)
tiny_adv = torch.tensor([1.0, 1.0, -1.0, -1.0, 1.0])  # (5,)
for r, a, c in zip(tiny_ratio.tolist(), tiny_adv.tolist(), clipped(tiny_ratio, tiny_adv, 0.2).tolist(), strict=True):
    print(f"rho {r:.1f}, A {a:+.0f}: clipped {c}")
assert clipped(tiny_ratio, tiny_adv, 0.2).tolist() == [True, False, False, True, False]
n_tokens = token_adv.numel()
by_definition = [int(clipped(r, token_adv, 0.2).sum()) for r in trace["ratio"]]  # per inner step k
print(f"tokens clipped per step k (of {n_tokens}):", " ".join(f"{c:3d}" for c in by_definition))
assert by_definition == [round(f * n_tokens) for f in trace["clipped"]]  # what the loss's own records count

# %%
fig = nb02_ratio.draw_histograms(trace, token_adv, steps=(1, 3, 7), clip=0.2, clipped_fn=clipped)
fig.suptitle("grpo_fixed: ratio pi_k / pi_old by sign of A (dashed: clip window 0.8, 1.2)")
plt.show()

# %% [markdown]
# The A > 0 tokens have mean $\pi_\text{old}$ 0.839 against 0.624 for A < 0, so their mean room to move,
# $1 - \pi_\text{old}$, is 0.161 against 0.376 (2.3 times more for A < 0). The softmax self-effect follows: its
# proxy $(1 - \pi_\text{old})^2$ averages 5.97 times more for A < 0, the exact $\lVert e_a - \pi\rVert^2$ 6.40
# times more, and 6.61 times more once each token's $|A|$ multiplies it (the first-order move itself), since
# the A < 0 tokens' mean $|A|$ is a little larger too (1.006 against 0.867). And 54% of the A > 0 tokens have
# $\pi_\text{old} > 1/1.2$ (39% of the A < 0 tokens): their ratio can *never* reach $1+\epsilon = 1.2$, so they
# can never be clipped. The A < 0 tokens have no floor but 0, which is where the long left tail of the
# histograms comes from. (The sizes are this batch's: the cells assert them as printed, and another batch gives
# other sizes.)

# %% [markdown]
# > **You should know.** The first update from ratio 1 raises the advantage-weighted log-ratio (to first order, for
# > a small step):
# > A > 0 tokens are pushed toward $1+\epsilon$ and A < 0 tokens toward $1-\epsilon$, precisely the sides where
# > the clipped surrogate flattens. The per-sign mean ratios showed it at small steps on this batch but are not
# > guaranteed: they swapped after one step at lr = 1e-2 above, and even an infinitesimal step can move both
# > signs the same way, for example when $\sum_t A_t \ne 0$ (a token mean over unequal lengths, the toy above)
# > or, with $\sum_t A_t = 0$, through shared parameters (one logit shared by an A > 0 and an A < 0 occurrence
# > of a token). That is why the
# > fixed twin logs `clip_frac_pos` as "A > 0 and ratio > 1+clip" and `clip_frac_neg` as "A < 0 and ratio <
# > 1-clip": a token on the *other* side (A > 0, ratio < 0.8) is not clipped at all, it keeps its full gradient.
#
# <details><summary>Answer: a token with A > 0 has ratio 0.7 at inner step 3. Does it get gradient?</summary>
#
# Yes. For A > 0, $\min(\rho A, \text{clip}(\rho)A) = \min(0.7A, 0.8A) = 0.7A$: the unclipped branch, with
# gradient $A\rho\,\nabla\log\pi$. The clip only removes the incentive to move *further* in the direction the
# advantage wants; a token that went the wrong way keeps its own gradient pulling it back (the shared weights
# may still carry it further off).
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
# still drifts (`true_ratio`, against the cached old log-probs).
#
# Since $\text{clip}(1, 1-\epsilon, 1+\epsilon) = 1$ for every $\epsilon \ge 0$, B3's update does not depend on
# the clip at all; the figure replays it once per lr (checked bit for bit below the figure).
#
# Left: B3; right: fixed; same snapshot, same batch. Bands: 5-95% of the true ratio (log scale),
# thin lines: min / max (the caption under the figure names every artist). Bars at the bottom: fraction
# of tokens the loss clipped (filled) and tokens outside the window on their pushing side that the loss
# did *not* clip (outlined). A vertical line marks the first step where clipping engages. The strip below
# each panel is the quantity notebook 02 §3 shows a small step raises, the mean of $A_t\log\rho_t$ over the
# tokens (not the per-sign mean ratios, which swapped after one step at lr = 1e-2 in §3). Each (lr, clip)
# position replays its full-batch inner steps on the 64 sequences once and caches them; all 4 × 3 positions
# are replayed up front to the default 8 steps, so a slider move only redraws (more steps extend the cached
# replays by one step each).

# %%
LRS = (3e-4, 1e-3, 3e-3, 1e-2)  # the lr slider's positions
CLIPS = (0.1, 0.2, 0.3)  # the clip slider's
B3_CLIP = 0.2  # any clip >= 0 gives B3 the same replay
drift_figure = nb02_ratio.DriftFigure(max_steps=16, clipped_fn=clipped)


def replays(steps, lr, clip):
    """(B3 trace, fixed trace) of `steps` full-batch inner steps from the snapshot; cached by nb02_ratio.inner_trace."""
    return (nb02_ratio.inner_trace(B3, snap, steps, lr, B3_CLIP, ratio_fn=true_ratio),
            nb02_ratio.inner_trace(grpo_fixed, snap, steps, lr, clip, ratio_fn=true_ratio))


def update_drift(steps, lr, clip):
    return drift_figure.update(*replays(steps, lr, clip), token_adv, lr, clip)


with progress("replaying every slider position", total=len(LRS) * len(CLIPS)) as step:
    for lr in LRS:  # every (lr, clip) position, replayed once now
        for clip in CLIPS:
            step(f"lr {lr:g}, clip {clip:g}")
            replays(8, lr, clip)
w_drift = live_plot(drift_figure.fig, update_drift, caption=nb02_ratio.DRIFT_CAPTION,
                    steps=slider(8, 1, 16, 1, "inner steps", integer=True),
                    lr=nb02_ratio.choice(LRS, 3e-3, "lr", ".0e"),
                    clip=nb02_ratio.choice(CLIPS, 0.2, "clip"))

# %% tags=["nbval-ignore-output"]
w_drift  # noqa: B018  (the cell's value: the widget is displayed)

# %%
def show(result):
    first = lambda k: "never" if k is None else f"k={k}"  # noqa: E731
    print(f"clipping engages: buggy {first(result['first_clip_buggy'])}, fixed {first(result['first_clip_fixed'])}")
    print(f"true ratio at the last step: buggy [{result['last_min_buggy']:.3f}, {result['last_max_buggy']:.3f}], "
          f"fixed [{result['last_min_fixed']:.3f}, {result['last_max_fixed']:.3f}]")
    print(f"outside the window at the last step: buggy {result['last_outside_buggy']:.3f}, "
          f"fixed {result['last_outside_fixed']:.3f}")
    print(f"mean A log rho at the last step (lower strip): buggy {result['last_weighted_buggy']:+.4f}, "
          f"fixed {result['last_weighted_fixed']:+.4f}")


default = w_drift.result  # 8 steps, lr 3e-3, clip 0.2
show(default)
assert default["first_clip_buggy"] is None and default["first_clip_fixed"] == 1
assert default["last_max_buggy"] > default["last_max_fixed"] and default["last_min_buggy"] < default["last_min_fixed"]
quoted = [f"{default[k]:.3f}" for k in ("last_min_buggy", "last_max_buggy", "last_min_fixed", "last_max_fixed",
                                        "last_outside_fixed", "last_outside_buggy")]
assert quoted == ["0.004", "1.563", "0.010", "1.385", "0.242", "0.268"]  # the values the text quotes
strips = [panel.weighted.get_ydata()[1:] for panel in (drift_figure.buggy, drift_figure.fixed)]  # k = 1..7
assert all(min(strip) > 0 for strip in strips)  # the lower strips: positive at every step after 0, both sides
assert f"{default['last_weighted_buggy']:+.4f} {default['last_weighted_fixed']:+.4f}" == "+0.2266 +0.1855"  # as quoted

# %%
small_lr = probe(w_drift, {"lr": 1e-3})  # a smaller step: clipping engages later
show(small_lr)
assert small_lr["first_clip_buggy"] is None and small_lr["last_outside_fixed"] < default["last_outside_fixed"]
small_quoted = [f"{small_lr[k]:.3f}" for k in ("last_min_buggy", "last_max_buggy", "last_min_fixed", "last_max_fixed")]
assert small_lr["first_clip_fixed"] == 1 and small_quoted == ["0.012", "7.344", "0.156", "1.416"]  # as quoted

# %%
smallest_lr = probe(w_drift, {"lr": 3e-4})  # the slider's smallest step
show(smallest_lr)
print("fixed twin at clip 0.2, per lr: first inner step that clips, fraction outside the window at the last step")
engages, outside = {}, {}
for lr in LRS:  # every position was replayed above: reading the cache only
    trace = nb02_ratio.inner_trace(grpo_fixed, snap, 8, lr, 0.2, ratio_fn=true_ratio)
    engages[lr] = next(k for k, c in enumerate(trace["clipped"]) if c > 0)
    outside[lr] = clipped(trace["ratio"][-1], token_adv, 0.2).float().mean().item()
    print(f"  lr {lr:.0e}: k = {engages[lr]}, outside {outside[lr]:.3f}")
assert smallest_lr["first_clip_fixed"] == engages[3e-4] == 2 and all(engages[lr] == 1 for lr in LRS[1:])
assert outside[1e-2] < outside[3e-3]  # not monotone in the lr

# %%
assert w_drift.values()["lr"] == 3e-3  # each probe returned the slider to its default
b3_other_clip = nb02_ratio.inner_trace(B3, snap, 3, 3e-3, 0.4, ratio_fn=true_ratio)  # B3 at another clip
b3_default = nb02_ratio.inner_trace(B3, snap, 3, 3e-3, B3_CLIP, ratio_fn=true_ratio)
print(f"B3's replay at clip 0.4 equals the one at clip {B3_CLIP}: "
      f"{all(torch.equal(a, b) for a, b in zip(b3_other_clip['ratio'], b3_default['ratio'], strict=True))}")
assert all(torch.equal(a, b) for a, b in zip(b3_other_clip["ratio"], b3_default["ratio"], strict=True))

# %% [markdown]
# What the numbers say:
#
# - **When clipping engages.** Never at k = 0 here (ratio exactly 1: the old log-probs come from a forward with the
#   same weights and code path, which rounds alike on this CPU; with sampler, stale or dropout log-probs the clip
#   can act at k = 0: notebook 02 §5). From lr = 1e-3 up the fixed twin already clips some tokens at k = 1; at lr =
#   3e-4 (the slider's smallest) it starts at k = 2 (all printed above, at clip 0.2). How many tokens end outside
#   the window at the last step is not monotone in the lr on this batch (0.242 at 3e-3, fewer at 1e-2: printed
#   above).
# - **B3: never.** The loss sees a ratio of 1 at every step (dotted line), while the true ratio at the
#   last step (k = 7, lr = 3e-3) spans [0.004, 1.563], against [0.010, 1.385] for the fixed twin (at
#   lr = 1e-3: [0.012, 7.344] against [0.156, 1.416]). Without a live clip, nothing stops tokens that
#   already moved from being pushed further.
# - **Clipping is not a hard constraint.** Even in the fixed twin a similar fraction of tokens ends up
#   outside the window at the last step (0.242 against 0.268 for B3 at lr = 3e-3). A clipped token
#   loses *its own* surrogate gradient, but the weights are shared, so the other tokens' gradients
#   still move it. What clipping removes is the incentive, which shows in the tails (min / max), not
#   in every token.
# - **The lower strips** show what an update is guaranteed to raise (for a small step): the mean of
#   $A_t\log\rho_t$. At the default position it is positive at every step after 0 on both sides (+0.2266 for
#   B3 and +0.1855 for the fixed twin at k = 7, the last row of the table in notebook 02 §3); at lr = 1e-2 the
#   fixed twin's dips below 0 at k = 4-5, as notebook 02 §3 prints.

# %% [markdown]
# > **You should know.** With old log-probs from the same forward as the loss's (same weights and code path,
# > no dropout), clipping engages only after the policy has moved: never at the first inner step, later for
# > smaller lr and fewer inner steps. With old log-probs from the sampler (an inference engine), a stale
# > policy or a dropout pass, the ratio is off at step 0 and the clip can act there (notebook 02 §5 shows such
# > sources). If the logged clip fraction is **exactly 0 for the whole run** while
# > `inner_epochs × minibatches > 1`, suspect B3 (old log-probs recomputed in the loop). A tiny lr also gives
# > 0 clipping; what tells them apart is `ratio_last_maxdev` (the fixed twin's health check "ratio moves after
# > updates"): exactly 0 under B3, small but not 0 under a tiny lr. It is
# > also exactly 0 whenever θ does not move at all (lr = 0, parameters missing from the optimizer, a loss
# > detached from them): compare the loss's ratio with the true one against the cached log-probs, which
# > drifts under B3 only. And a trainer that takes one optimizer step per rollout batch has nothing to clip:
# > TRL's `GRPOConfig` defaults to `num_iterations=1`, and then (with `steps_per_generation` at its default,
# > `gradient_accumulation_steps`, and no vLLM importance sampling) its `grpo_trainer.py` uses
# > `per_token_logps.detach()` as the old log-probs (TRL 1.16.0): a clip fraction of 0 there is expected.
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
    audit[name] = a = nb02_ratio.ratio_audit(module, snap, **overrides)
    print(f"{name:20s} {a['gap']:9.2e} {a['first_cached']:12.2e} {a['first_sampler']:13.2e} {a['last_cached']:7.3f}  "
          f"{a['health'] or '-'}")
gap_hi = STATS["logprob_gap"].hi  # float32 rounding: the KV-cache sampler vs one full forward
assert audit["fixed"]["health"] == [] and audit["fixed"]["first_sampler"] < gap_hi
assert audit["fixed, dropout=0.1"]["first_cached"] > 0.1 and audit["B3 recomputed old"]["last_cached"] == 0
for bug in ("B10 no temperature", "B6 shift"):  # consistent with itself, far from the sampler
    assert audit[bug]["first_cached"] == 0 and audit[bug]["first_sampler"] > 1 and audit[bug]["gap"] > 0.5
assert audit["B10 at T=1.0"]["gap"] < gap_hi and audit["fixed"]["gap"] < gap_hi
assert [f"{audit[k]['first_sampler']:.2f}" for k in ("B10 no temperature", "B6 shift")] == ["1.45", "8.22"]
assert [f"{audit[k]['gap']:.1f}" for k in ("B10 no temperature", "B6 shift")] == ["0.9", "14.2"]  # as quoted
assert audit["B6 shift"]["gap"] > audit["B10 no temperature"]["gap"]

# %% [markdown]
# Four different failure shapes:
#
# | variant | what goes wrong | what shows it |
# |---|---|---|
# | dropout | train-mode log-probs: a random sub-network, not the eval-mode one that sampled | `rho0 cached` ≠ 0 |
# | B3 | ratio forced to 1 everywhere | `last` = 0: the ratio never moves |
# | B10, B6 | old *and* new log-probs come from the same wrong function, so they agree | only `gap` |
#
# The B10 and B6 rows are the lesson: **a ratio of exactly 1 at step 0 proves consistency, not
# correctness.** In these twins the old log-probs are recomputed by the trainer, so both sides of the
# ratio carry the same mistake; in a pipeline whose old log-probs come from the sampler, the same bugs
# show up directly as `rho0 sampler` ≠ 0 (1.45 for B10, 8.22 for B6). B10 is harmless at T = 1
# (`B10 at T=1.0` row: its gap is float32 rounding, a few $10^{-6}$, like the fixed row's: the sampler's
# KV-cache forward and the trainer's full forward round differently, which is why the check's range is not 0).

# %% [markdown]
# ### 5.1 Dropout: ratio ≠ 1 without any learning, and "the same mode" is not the fix
#
# `rollout` caches old log-probs in eval mode (dropout off), `update_policy` runs in train mode (dropout
# on): with dropout the first inner step is off (the `fixed, dropout=0.1` row above). A tempting fix is
# "compute the old and the new log-probs in the same mode". Train mode for both does not work: each
# train-mode forward draws a *new* dropout mask, so two passes over the same weights and tokens score two
# different random sub-networks. Below, with no update at all (weights fixed), the ratio
# $\exp(\log\pi_\text{new} - \log\pi_\text{old})$ of two passes in the given modes, over the snapshot batch:

# %%
def logprobs_in_mode(policy, batch, temperature, *, train, mask_seed=None):
    """log pi(o_t) (N, T) of the batch's tokens, no gradient, dropout on (train=True) or off (eval);
    mask_seed: draw the dropout mask from this seed (the same seed gives the same mask)."""
    policy.train(train)
    with torch.no_grad(), torch.random.fork_rng(enabled=mask_seed is not None):
        if mask_seed is not None:
            torch.manual_seed(mask_seed)
        return grpo_fixed.policy_logprobs(policy, *lm_inputs(batch), temperature)


PAIRS = {  # name -> (dropout, old pass, new pass), each pass (train mode?, mask seed)
    "eval / train (as the twins)": (0.1, (False, None), (True, None)),
    "train / train (same mode)": (0.1, (True, None), (True, None)),
    "eval / eval": (0.1, (False, None), (False, None)),
    "train / train, same mask": (0.1, (True, 7), (True, 7)),
    "no dropout, train / train": (0.0, (True, None), (True, None)),
    "eval / train, dropout 0.3": (0.3, (False, None), (True, None)),
}
torch.manual_seed(0)  # the dropout masks come from the global generator
print(f"{'old pass / new pass':28s} {'rho range':>16s}  {'mean log rho':>12s}  clipped at 0.2")
dropout_rows = {}
for name, (p, (old_train, old_seed), (new_train, new_seed)) in PAIRS.items():
    policy_p, _ = nb02_ratio.restore(snap, dropout=p)
    old = logprobs_in_mode(policy_p, batch, cfg.temperature, train=old_train, mask_seed=old_seed)  # (N, T)
    new = logprobs_in_mode(policy_p, batch, cfg.temperature, train=new_train, mask_seed=new_seed)  # (N, T)
    log_rho = (new - old)[batch["mask"]]  # (n_tokens,)
    rho = log_rho.exp()
    dropout_rows[name] = row = dict(lo=rho.min().item(), hi=rho.max().item(), mean_log=log_rho.mean().item(),
                                    clipped=int(clipped(rho, token_adv, 0.2).sum()))
    print(f"{name:28s} [{row['lo']:.3f}, {row['hi']:.3f}]  {row['mean_log']:+12.4f}  "
          f"{row['clipped']:3d}/{rho.numel()}")
same_mode = dropout_rows["train / train (same mode)"]
twins = dropout_rows["eval / train (as the twins)"]
assert same_mode["lo"] < 0.8 and same_mode["hi"] > 1.2 and same_mode["clipped"] > 0
assert same_mode["hi"] / same_mode["lo"] > twins["hi"] / twins["lo"] and same_mode["clipped"] > twins["clipped"]
for name in ("eval / eval", "train / train, same mask", "no dropout, train / train"):
    assert dropout_rows[name]["lo"] == dropout_rows[name]["hi"] == 1
assert dropout_rows["eval / train, dropout 0.3"]["clipped"] > dropout_rows["eval / train (as the twins)"]["clipped"]
assert (f"{int(same_mode['hi'])} {same_mode['clipped']} {twins['hi']:.3f} {twins['clipped']} {twins['mean_log']:.2f} "
        f"{dropout_rows['eval / train, dropout 0.3']['clipped']}") == "1932 40 7.905 24 -0.46 38"  # as quoted
# int(): the decimals of that 1932 vary between machines (float rounding of a log-prob near the tail)

# %% [markdown]
# With the weights fixed, train mode for both passes spreads the ratio past 1932 at dropout 0.1 and the
# clip acts on 40 of 190 tokens: pure noise, and wider than the twins' own eval / train mismatch (up to
# 7.905, 24 tokens; 38 at dropout 0.3), since now both sides carry a random mask. The SFT model was trained
# without dropout, so switching it on at RL time changes its distribution a lot (mean log-ratio −0.46 at
# 0.1): one more reason RL fine-tuning of LMs turns dropout off.
# Three things do give exactly 1:
#
# - **eval mode for both passes** (dropout off while computing the log-probs of the loss),
# - **no dropout** (TRL's `GRPOConfig` has `disable_dropout`: "Whether to disable dropout in the model.
#   This is useful for training with a reference model, as it prevents the model from generating different
#   logprobs for the same input", default `False`; `trl/trainer/grpo_config.py`, TRL 1.16.0),
# - **the same dropout mask** for both passes (here: the same seed, same batch, same shapes; a real
#   trainer would have to store or replay each sequence's mask across minibatches, which is why the first
#   two are the practical fixes).

# %% [markdown]
# ### 5.2 Temperature mismatch (B10), on 5 logits
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
mean_ratio, mean_log_ratio = (p_T * p_1 / p_T).sum().item(), (p_T * (p_1 / p_T).log()).sum().item()
print(f"expected ratio under sampling, E_pT[p1/pT] = sum p1 = {mean_ratio:.3f}; "
      f"E_pT[log ratio] = {mean_log_ratio:+.4f}")
assert abs(mean_ratio - 1) < 1e-6 and mean_log_ratio < 0

# %% [markdown]
# With T < 1 the sampler is sharper than what B10 scores: the likely tokens (the ones usually drawn) get
# ratio < 1, the unlikely ones ratio > 1. The mean ratio under sampling is exactly 1 ($\mathbb{E}_q[p/q]$ sums
# $p$ over the tokens $q$ can draw, all of them here; a top-p or top-k sampler that cuts tokens $p$ still
# likes makes it less than 1), but the mean log-ratio is negative (−0.0183 here, it is
# $-\text{KL}(p_T \| p_1)$): a systematic bias, not noise. On the snapshot's batch the B10 row above
# shows a gap of 0.9 nats between trainer and sampler.

# %% [markdown]
# ### 5.3 Shift misalignment (B6): which logit scores which token
#
# The policy sees `[left-padded prompt block (P columns, BOS included), completion (T)]`; the logit at column l
# predicts the token at column l + 1. With P = 6 (BOS + "12+7=") and T = 5 (`max_completion_length`):

# %%
P, T = 6, 5
positions = list(range(P + T))  # 0..10 over [BOS, 1, 2, +, 7, =, c0, c1, c2, c3, c4]
fixed_rows = positions[-T - 1 : -1]  # grpo_fixed.completion_logits: logits[:, -T-1:-1]
buggy_rows = positions[-T:]  # grpo_buggy.completion_logits: logits[:, -T:]
for t in range(T):
    print(f"completion token c{t} (position {P + t}): fixed scores it with logits at position {fixed_rows[t]} "
          f"(predicts position {fixed_rows[t] + 1}), B6 with position {buggy_rows[t]} (predicts {buggy_rows[t] + 1})")
assert all(row + 1 == P + t for t, row in enumerate(fixed_rows))

# %% [markdown]
# B6 asks "how likely is the *next* token to equal this one?": a different quantity, consistent between
# old and new log-probs (ratio 1 at step 0 in the table) but far from what the sampler drew (the B6 row's
# gap, 14.2 nats, is the largest). Worse, the gradient then trains that wrong conditional.

# %% [markdown]
# ### 5.4 Signed or noise? Every mismatch is signed
#
# A tempting rule: "a signed offset at step 0 points to a distribution mismatch, pure noise to numerics".
# It does not hold. If the sampler draws $y \sim q$ and the trainer scores it under $p$, the mean log-ratio
# at step 0 is
#
# $$\mathbb{E}_{y\sim q}\Big[\log\frac{p(y)}{q(y)}\Big] = -\text{KL}(q\,\|\,p) \le 0$$
#
# for *any* $q \ne p$: a temperature mismatch, a low-precision sampler, anything. Dropout is signed too, by the
# same argument applied **per mask**. Fix one dropout mask $m$: the train-mode pass scores $y$ under the
# sub-network's distribution $p_m$, while the sampler drew $y$ from the eval-mode $q$, so for that mask
#
# $$\mathbb{E}_{y\sim q}\Big[\log\frac{p_m(y)}{q(y)}\Big] = -\text{KL}(q\,\|\,p_m) \le 0 ,$$
#
# with equality only when $p_m = q$. The mask is drawn independently of $y$, so averaging over masks keeps the
# sign: $\mathbb{E}_m\mathbb{E}_{y\sim q}[\log p_m(y)/q(y)] = -\mathbb{E}_m\,\text{KL}(q\,\|\,p_m) \le 0$. Nothing
# about the network is needed (no linearity, no Jensen over the logits: a transformer is not linear after its
# dropout layers, so "the train-mode logits average to the eval-mode ones" would not hold). What differs
# between causes is the *size*, and so how many tokens it takes before the sign stands out of the per-token
# noise (2 standard errors: $n = (2\,\text{std}/|\text{mean}|)^2$).
#
# Exactly, on the snapshot batch: at each of its token positions, the sampler's distribution $q$ and the
# trainer's $p$ over the 15 tokens of the vocabulary, the mean and std of $\log p(y)/q(y)$ for $y \sim q$
# (dropout: over 64
# masks too). The low-precision sampler here rounds the logits to bfloat16 before the softmax (a small
# stand-in for a bf16 inference engine; notebook 07 §1 treats it in depth).

# %%
def mismatch_stats(logq, logp):
    """Mean and std of log p(y) - log q(y) for y ~ q, pooled over positions. logq, logp (..., n, V) -> (mean, std)"""
    q, d = logq.exp(), logp - logq  # (..., n, V)
    mean = (q * d).sum(-1).mean()  # E_q[d] per position (= -KL(q || p)), averaged
    second = (q * d * d).sum(-1).mean()
    return mean.item(), (second - mean**2).sqrt().item()


policy_e, _ = nb02_ratio.restore(snap)
policy_e.eval()
with torch.no_grad():
    logits = grpo_fixed.completion_logits(policy_e, *lm_inputs(batch))[batch["mask"]]  # (n, V)
    sampler = torch.log_softmax(logits / cfg.temperature, -1)  # (n, V) what rollout samples from
    policy_d, _ = nb02_ratio.restore(snap, dropout=0.1)
    policy_d.train()
    torch.manual_seed(0)
    dropped = torch.stack([grpo_fixed.completion_logits(policy_d, *lm_inputs(batch))[batch["mask"]]
                           for _ in range(64)])  # (64, n, V): 64 dropout masks
mismatches = {
    "temperature (B10)": (sampler, torch.log_softmax(logits, -1)),
    "bfloat16 sampler": (torch.log_softmax(logits.bfloat16().float() / cfg.temperature, -1), sampler),
    "dropout 0.1 (train/eval)": (sampler.expand_as(dropped), torch.log_softmax(dropped / cfg.temperature, -1)),
}
print(f"{'mismatch (q -> p)':26s} {'mean log p/q':>13s} {'std':>9s}  tokens for the sign at 2 std errors")
signed = {}
for name, (logq, logp) in mismatches.items():
    mean, std = signed[name] = mismatch_stats(logq, logp)
    print(f"{name:26s} {mean:+13.2e} {std:9.2e}  {(2 * std / abs(mean)) ** 2:10.3g}")
assert all(mean < 0 for mean, _ in signed.values())  # every one is signed, and negative
log_pm = torch.log_softmax(dropped / cfg.temperature, -1)  # (64, n, V) one sub-network per mask
per_mask = (sampler.exp() * (log_pm - sampler)).sum(-1).mean(-1)  # (64,) E_q[log p_m / q], mean over positions
kl_per_mask = (sampler.exp() * (sampler - log_pm)).sum(-1).mean(-1)  # (64,) KL(q || p_m), mean over positions
print(f"dropout, mask by mask: E_q[log p_m/q] in [{per_mask.min():.4f}, {per_mask.max():.4f}] over {len(per_mask)} "
      f"masks; max |E_q[log p_m/q] + KL(q || p_m)| = {(per_mask + kl_per_mask).abs().max():.1e}")
assert (per_mask < 0).all() and torch.allclose(per_mask, -kl_per_mask, atol=1e-6)  # every mask: -KL <= 0
bf16_mean, bf16_std = signed["bfloat16 sampler"]
print(f"bf16: std / |mean| = {bf16_std / abs(bf16_mean):.0f}, std^2 / 2 = {bf16_std**2 / 2:.2e}; "
      f"temperature mean / bf16 mean = {signed['temperature (B10)'][0] / bf16_mean:.0f}")
assert bf16_std / abs(bf16_mean) > 300  # noise-like on one small batch
assert abs(bf16_mean + bf16_std**2 / 2) < 0.05 * abs(bf16_mean)  # small mismatch: mean = -KL ~ -std^2 / 2
assert (2 * bf16_std / abs(bf16_mean)) ** 2 > 1e5 > 1e3 > max((2 * sd / abs(m)) ** 2 for name, (m, sd) in signed.items()
                                                             if name != "bfloat16 sampler")
assert [f"{m:.2e}" for m, _ in signed.values()] == ["-1.50e-02", "-1.25e-05", "-4.92e-01"]  # as quoted
assert f"{bf16_std:.2e}" == "4.99e-03"

# %% [markdown]
# All three means are negative, and so is every single mask's (printed: each is exactly −KL(q ‖ p_m)). The
# temperature mismatch (−0.015) shows its sign within about 420 tokens, dropout (−0.49) within about 36; the
# bf16 sampler's mean (−1.25e-05) is about 400 times smaller than its per-token std (4.99e-03), so on this
# small batch it *looks* like pure noise, and its sign only stands out past about 640,000 tokens. The two
# numbers are tied: for a small mismatch KL ≈ std²/2 (second order in log p/q), so the mean is −std²/2
# (both printed) and the sign needs about 16/std² tokens. A batch of 512 prompts × 8 samples × 600 tokens
# (about 2.5 million) is larger than that, so at this per-token std the sign would already show within one
# such batch. A real bf16 engine differs from the trainer in more than the last rounding of the logits (a
# whole forward pass in bf16, other kernels); a larger std shows the sign sooner, but how large it is there is
# not measured here. The sign says "q ≠ p", never which cause. The size alone does not name it either (the sizes
# here are this toy's, and a real engine's numerics may give offsets as large as a settings mismatch); what the
# offset depends on does: whether it vanishes at T = 1 or in eval mode, whether it grows with the logit scale.
#
# > **You should know.** Print two things before trusting any ratio: `ratio_first_maxdev` (exactly 0 in the
# > fixed twin; catches dropout in train mode and any old-vs-new code-path difference) and `logprob_gap`
# > between the trainer's and the sampler's log-probs (healthy: near 0, range in `grpo_support.STATS`; catches
# > temperature and shift bugs, which a recomputed old log-prob would hide). A ratio that *never* moves
# > (`ratio_last_maxdev` = 0) is B3, or weights that never move (notebook 02 §4). A step-0 offset with a steady
# > sign says the two sides score different distributions, whatever the cause: every mismatch, numerics
# > included, has mean log-ratio −KL(q ‖ p).
#
# <details><summary>Answer: your trainer takes old log-probs from vLLM; at the first inner step the mean
# log-ratio is −0.02 on every batch, and max |ρ − 1| is 0.1. What do you check first?</summary>
#
# The two sides score different distributions: mean log-ratio = −KL(sampler ‖ trainer), so a steady
# negative sign comes with *any* mismatch and does not name the cause, and neither does the size alone. On
# this toy batch B10 gives −0.015 (notebook 02 §5.4; about 1,200 times what bf16 rounding of the logits gives
# there, −1.25e-05) and −0.018 on five logits, but those sizes are the toy's: a real inference engine's
# numerics (a whole bf16 forward, other kernels; not measured here) may give an offset as large. So check the
# causes one by one, telling them apart by what the offset depends on rather than by its size: the sampling
# settings applied by the engine but not by the trainer (temperature is B10; a top-p or top-k cut the trainer
# does not apply is the same kind of mismatch), then the log-prob shift (B6), then dropout / train mode in the
# trainer, then numerics (a bf16 engine against an fp32 trainer, growing with sharper logits, notebook 07 §1).
# Re-run one batch at T = 1 or with the trainer in eval mode to split the first from the third.
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
    r = torch.where(mask, logprobs - old_logprobs.detach(), 0.0)  # (N, T): 0 at the first step
    adv = advantages.detach().unsqueeze(1)  # (N, 1)
    return -masked_mean(torch.min(r * adv, torch.clamp(r, 1 - clip, 1 + clip) * adv), mask)


# %% [markdown]
# A tiny hand-made batch: 4 sequences × 2 tokens, one group, advantages +1.5, +0.5, −0.5, −1.5, at the first
# inner step (logp = old_logp). Gradient of each loss with respect to each token's logp, times n = 8 tokens:

# %%
old = torch.log(torch.tensor([[0.5, 0.9], [0.3, 0.6], [0.4, 0.7], [0.2, 0.8]]))  # (4, 2) old log-probs
adv = torch.tensor([1.5, 0.5, -0.5, -1.5])  # (4,)
mask = torch.ones(4, 2, dtype=torch.bool)
grads = {}
for name, loss_fn in [("exp (grpo_loss)", grpo_fixed.grpo_loss), ("no exp (hypothetical)", grpo_loss_no_exp)]:
    logp = old.clone().requires_grad_(True)  # first inner step: logp == old_logp
    loss = loss_fn(logp, old, adv, mask, 0.2)
    loss.backward()
    grads[name] = grad = logp.grad * mask.sum()  # (4, 2) per-token gradient, the masked mean's 1/n undone
    print(f"{name:22s} loss {loss.item():+.4f} | n*dL/dlogp by sequence: "
          + ", ".join(f"A={a:+.1f}: {g[0]:+.2f} {g[1]:+.2f}" for a, g in zip(adv.tolist(), grad.tolist(), strict=True)))
assert torch.allclose(grads["no exp (hypothetical)"][:2], grads["exp (grpo_loss)"][:2])  # same on A > 0
assert (grads["no exp (hypothetical)"][2:] == 0).all()  # silent on A < 0
assert abs(loss.item() - 0.4) < 1e-6  # the no-exp loss at the first step

# %% [markdown]
# Same gradient −A on the A > 0 tokens, **zero** on the A < 0 tokens, and the loss value is no longer 0
# at the first step: it is the constant
# $-\frac1n\sum_{A<0} 0.8A = -\frac18\,(2 \cdot 0.8 \cdot (-0.5) + 2 \cdot 0.8 \cdot (-1.5)) = 0.4$.
# Over a range of log-ratios, the region where a token gets surrogate gradient:

# %%
x = torch.linspace(-1.5, 1.5, 301)  # log-ratio logp - old_logp
fig, axes = plt.subplots(1, 2, figsize=(10, 3.0), sharey=True, layout="constrained")
for ax, a in zip(axes, (1.0, -1.0), strict=True):
    ax.plot(x, nb02_ratio.surrogate_grad(grpo_fixed.grpo_loss, x, a), color=FIXED, label="exp (grpo_loss)")
    ax.plot(x, nb02_ratio.surrogate_grad(grpo_loss_no_exp, x, a), color=BUGGY, ls="--", label="no exp (hypothetical)")
    ax.axvline(0, color=REFERENCE, lw=0.8)
    ax.set_title(f"A = {a:+.0f}", fontsize="medium")
    ax.set_xlabel("log-ratio  logp - old_logp  (0 = first inner step)")
axes[0].set_ylabel("n * dL / dlogp")
axes[0].legend(fontsize="small")
plt.show()
windows = {}
for a in (1.0, -1.0):
    for name, loss_fn in [("exp", grpo_fixed.grpo_loss), ("no exp", grpo_loss_no_exp)]:
        active = x[nb02_ratio.surrogate_grad(loss_fn, x, a) != 0]
        windows[a, name] = (active.min().item(), active.max().item())
        print(f"A={a:+.0f} {name:6s}: gradient for log-ratio in [{active.min():+.2f}, {active.max():+.2f}] "
              f"(ratio e^x in [{active.min().exp():.3f}, {active.max().exp():.3f}])")
assert windows[-1.0, "no exp"][0] > 0.79 and windows[1.0, "no exp"][1] > 1.19  # silent at 0; open up to 1.2

# %% [markdown]
# Read the printout against the derivation (grid step 0.01 in log-ratio): with `exp`, an A > 0 token
# keeps its gradient up to ρ ≈ 1.2 and an A < 0 token down to ρ ≈ 0.8, a window around the first step.
# Without `exp`, the A > 0 window runs to ρ = e^1.2 = 3.32, and the A < 0 token gets gradient only once
# ρ ≥ e^0.8 = 2.23: it is silent at the first step and for as long as it stays below that. Note also
# the `exp` curves' slope: the gradient is $A\rho$, the importance weight at work; the no-exp one is flat.
#
# Can it still train? A short run of each (40 iterations, 8 prompts per batch, seed 0), the no-exp run
# being the fixed twin with only `grpo_loss` swapped (`swap.fixed_with`):

# %%
with progress("two runs of 40 iterations", total=2) as step:
    step("exp")
    history_fixed = grpo_fixed.train(seed=0, steps=40, prompts_per_batch=8)
    step("no exp")
    history_no_exp = fixed_with("no_exp", grpo_loss=grpo_loss_no_exp).train(seed=0, steps=40, prompts_per_batch=8)
late = {}
for name, h in [("exp (fixed)", history_fixed), ("no exp", history_no_exp)]:
    early, late[name] = sum(s["reward"] for s in h[:5]) / 5, final_reward(h)  # final: the last 10 iterations
    print(f"{name:12s} reward first 5 iters {early:.3f}, last 10 iters {late[name]:.3f}")
early_no_exp = sum(s["reward"] for s in history_no_exp[:5]) / 5
assert late["exp (fixed)"] > late["no exp"] > early_no_exp  # it learns, less well
assert [f"{late[k]:.3f}" for k in ("no exp", "exp (fixed)")] == ["0.448", "0.530"]  # as quoted

# %%
fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
curves(ax, {"exp (fixed)": history_fixed, "no exp": history_no_exp}, "reward",
       colors={"exp (fixed)": FIXED, "no exp": BUGGY}, window=5)
ax.set_title("AdditionTask reward, seed 0 (5-iteration moving mean)", fontsize="medium")
plt.show()

# %% [markdown]
# It still learns here (reward 0.448 over the last 10 iterations, against 0.530 with `exp`, on this
# one seed, both from the SFT model's start near 0.3):
# the A > 0 tokens get exactly the policy-gradient push they get with `exp`, so
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
# ## 7. Old log-probs: under `no_grad`, cached once
#
# **Question.** The twins cache the old-policy log-probs once per rollout, computed under `no_grad`. What
# breaks without `no_grad`, and what breaks without the cache?
#
# **Key equation.** If the old log-probs keep their autograd graph, they depend on θ too. At the first
# inner step both sides are the same function of θ, so
#
# $$\nabla_\theta\, e^{\log\pi_\theta(o) - \log\pi_{\theta}^{\text{old}}(o)}
# = \rho\,\big(\nabla_\theta\log\pi_\theta(o) - \nabla_\theta\log\pi_\theta^{\text{old}}(o)\big) = 0 :$$
#
# the policy gradient vanishes. The ratio's gradient must treat π_old as a constant.
#
# **Tiny input.** The snapshot batch (64 sequences of at most 7 prompt + 5 completion tokens, TinyLM width
# 64). First, memory: the bytes
# autograd saves for backward while `policy_logprobs` runs over the batch (they live as long as the result's
# graph does, i.e. as long as the batch holds on to `old_logprobs`):

# %%
def saved_for_backward(fn, params):
    """Run fn(); -> (its result, bytes of the tensors autograd saved for backward, parameters excluded)."""
    storages = {}
    skip = {p.untyped_storage().data_ptr() for p in params}  # weights exist anyway

    def pack(t):
        if t.untyped_storage().data_ptr() not in skip:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn()
    return result, sum(storages.values())


policy_m, _ = nb02_ratio.restore(snap)
policy_m.eval()  # as in rollout
memory = {}
for name, grad in [("under no_grad (rollout)", False), ("without no_grad", True)]:
    with torch.set_grad_enabled(grad):
        old_lp, nbytes = saved_for_backward(
            lambda: grpo_fixed.policy_logprobs(policy_m, *lm_inputs(batch), cfg.temperature),
            policy_m.parameters())
    memory[name] = (nbytes, old_lp.grad_fn is not None)
    print(f"{name:24s} old_logprobs {tuple(old_lp.shape)} ({old_lp.numel() * old_lp.element_size()} bytes), "
          f"graph attached: {old_lp.grad_fn is not None}, activations kept for backward: {nbytes:,} bytes")
assert memory["under no_grad (rollout)"] == (0, False)
assert memory["without no_grad"][1] and memory["without no_grad"][0] > 5000 * old_lp.numel() * old_lp.element_size()
print(f"kept / tensor = {memory['without no_grad'][0] / (old_lp.numel() * old_lp.element_size()):.0f}, "
      f"per sequence {memory['without no_grad'][0] / len(batch['prompts']) / 1024:.0f} KB")

# %% [markdown]
# Without `no_grad`, the 1.3 KB of cached log-probs keeps about 7 MB of activations alive (about 5,500 times
# its size, 108 KB per sequence, both printed), the memory of a training forward pass, for as long as the batch lives.
# At LLM scale that is a full forward's activations per rollout batch. In the twins nothing else goes
# wrong, because `grpo_loss` detaches `old_logprobs` itself. Now the gradient: a hypothetical loss that does
# **not** detach them (not in either twin), against the fixed one, at the first inner step, with the old
# log-probs computed with their graph:

# %%
def grpo_loss_no_detach(logprobs, old_logprobs, advantages, mask, clip=0.2):
    """HYPOTHETICAL variant (not in the twins): grpo_fixed.grpo_loss without old_logprobs.detach()."""
    mask = mask.bool()
    ratio = torch.where(mask, logprobs - old_logprobs, 0.0).exp()  # (N, T): gradient flows into pi_old too
    adv = advantages.detach().unsqueeze(1)  # (N, 1)
    return -masked_mean(torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv), mask)


pg_grad = {}
for name, loss_fn in [("grpo_loss (detaches)", grpo_fixed.grpo_loss),
                      ("no detach (hypothetical)", grpo_loss_no_detach)]:
    policy_g, _ = nb02_ratio.restore(snap)
    policy_g.eval()
    old_lp = grpo_fixed.policy_logprobs(policy_g, *lm_inputs(batch), cfg.temperature)  # graph
    policy_g.train()
    new_lp = grpo_fixed.policy_logprobs(policy_g, *lm_inputs(batch), cfg.temperature)
    loss = loss_fn(new_lp, old_lp, batch["advantages"], batch["mask"], cfg.clip)
    loss.backward()
    pg_grad[name] = torch.cat([p.grad.flatten() for p in policy_g.parameters()]).norm().item()
    print(f"{name:26s} policy-gradient loss {loss.item():+.6f}, |gradient| {pg_grad[name]:.4f}")
relative = pg_grad["no detach (hypothetical)"] / pg_grad["grpo_loss (detaches)"]
print(f"no detach / detached: below 1e-6: {relative < 1e-6}")
assert relative < 1e-6 and f"{pg_grad['grpo_loss (detaches)']:.2f}" == "2.47"  # as quoted

# %% [markdown]
# Same loss value, and the gradient drops from 2.47 to float rounding of an exact 0: the update would
# follow the KL term alone. It does not stay silent for long. In the trainer's loop the second minibatch
# backpropagates through the same rollout graph again:

# %%
policy_c, optimizer_c = nb02_ratio.restore(snap)
policy_c.eval()
graph_batch = dict(batch, old_logprobs=grpo_fixed.policy_logprobs(policy_c, *lm_inputs(batch),
                                                                 cfg.temperature))  # cached with its graph
outcome = {}
for name, module in [("grpo_fixed", grpo_fixed), ("no detach", fixed_with("no_detach", grpo_loss=grpo_loss_no_detach))]:
    policy_c, optimizer_c = nb02_ratio.restore(snap)
    try:
        recs = module.update_policy(policy_c, optimizer_c, graph_batch, cfg, torch.Generator().manual_seed(0))
        outcome[name] = "4 inner steps, grad norms " + " ".join(f"{r['grad_norm']:.4f}" for r in recs)
    except RuntimeError as err:
        outcome[name] = f"RuntimeError: {str(err).split('(')[0].strip()}"
    print(f"{name:10s} {outcome[name]}")
reference = grpo_fixed.update_policy(*nb02_ratio.restore(snap), batch, cfg, torch.Generator().manual_seed(0))
assert outcome["grpo_fixed"].endswith(" ".join(f"{r['grad_norm']:.4f}" for r in reference))  # memory only
assert outcome["no detach"].startswith("RuntimeError: Trying to backward through the graph a second time")

# %% [markdown]
# With the graph attached, the fixed twin's update is unchanged (same grad norms as with the cached
# `no_grad` batch: its `grpo_loss` detaches), and the non-detaching loss crashes at the second inner step.
# Without the *cache* (B3: old log-probs recomputed from the current policy inside the loop) nothing
# crashes and no memory is wasted, but the ratio is 1 at every step (notebook 02 §4; the `B3` row of
# notebook 02 §5: `last` = 0).
#
# Catalog-style note, one entry per omission:
#
# - **No `no_grad` at rollout (the loss still detaches).** *Symptom:* memory only: the rollout forward's
#   activations stay alive with every batch (here 7 MB for a 1.3 KB tensor); training is unchanged.
#   *Statistic:* `batch["old_logprobs"].requires_grad` (or `.grad_fn`) is set; peak memory per rollout
#   grows with the batch kept. *Fix:* `@torch.no_grad()` on rollout (as in the twins), or `.detach()`
#   when caching.
# - **No `no_grad` and no detach.** *Symptom:* the policy-gradient term is ~0 at the first inner step (only
#   the KL term moves the policy), then "Trying to backward through the graph a second time" at the
#   second. *Statistic:* `grad_norm` collapses although the advantages are non-zero; then the crash.
#   *Fix:* both of the above: old log-probs are constants of the loss.
# - **No cache (B3).** *Symptom:* ratio 1 at every inner step, nothing ever clipped, no trust region.
#   *Statistic:* `ratio_last_maxdev` = 0, outside its healthy range (printed below from `grpo_support.STATS`),
#   and `clip_frac_pos` = `clip_frac_neg` = 0. *Fix:* use the old log-probs cached once at rollout.

# %%
print(f"ratio_last_maxdev healthy range: {render_range('ratio_last_maxdev')}; "
      f"under B3 (notebook 02 §5): {audit['B3 recomputed old']['last_cached']:.1e}")
assert not grpo_fixed.in_range({"ratio_last_maxdev": audit["B3 recomputed old"]["last_cached"]}, "ratio_last_maxdev")

# %% [markdown]
# > **You should know.** Old log-probs are *data*, not a function of θ: compute them once per rollout
# > batch (cache), without a graph (`no_grad`), and treat them as constants in the loss (`detach`). Forget
# > the first and the ratio is stuck at 1 (B3); forget the second and memory grows silently; forget both the
# > second and the third and the policy gradient is 0 at ρ = 1, then the loop crashes.
#
# <details><summary>Answer: why is the policy gradient exactly 0 (not just small) when π_old keeps its graph?</summary>
#
# At the first inner step $\log\pi_\theta$ and $\log\pi^\text{old}_\theta$ are the same function of the same θ,
# so $\nabla(\log\pi_\theta - \log\pi_\theta^\text{old}) = 0$ identically, and $\nabla\rho = \rho\cdot 0$. The
# loss value is right ($\rho = 1$), only its gradient is gone; here it comes out below 1e-6 of the detached
# one's 2.47, float rounding of the two cancelling backward paths.
# </details>

# %% [markdown]
# ## 8. Self-check
#
# 1. At minibatch 1 of epoch 0 you print max |ρ − 1| = 0.3 although that minibatch was never trained on. Bug?
# 2. Your run logs `clip_frac_pos = clip_frac_neg = 0.000` and `ratio_last_maxdev = 0` for all iterations,
#    with 2 epochs × 2 minibatches. What is it?
# 3. Which side of the clip window do A > 0 tokens reach first, and why? Why is the drift for A < 0 larger?
# 4. Dropout 0.1, lr 0: is the ratio 1? Does computing both passes in train mode fix it? Name the fixes.
# 5. Why did B10 and B6 leave `ratio_first_maxdev` at 0 here, and what catches them?
# 6. The step-0 mean log-ratio against the sampler is negative on every batch. Mismatch or numerics?
# 7. With `ratio = logp - old_logp` and clip 0.2, which tokens get gradient at the first inner step?
# 8. Old log-probs computed without `no_grad`: what does it cost with the twins' `grpo_loss`, and without its detach?
#
# <details><summary>Answers</summary>
#
# 1. No: the step on minibatch 0 already moved the shared weights; only the very first inner step is
#    on-policy (notebook 02 §2).
# 2. Old log-probs recomputed inside the inner loop (B3): the ratio is 1 at every step, so nothing is ever
#    clipped and the multi-epoch update has no trust region. Health check "ratio moves after updates"
#    (notebook 02 §4).
# 3. What is guaranteed, to first order, for the first small step from ratio 1 (leaving out the KL term), is only
#    $\sum_t A_t\Delta\log\pi_t \ge 0$ on that step's tokens; for later steps the guarantee is only that they raise,
#    to first order, the clipped surrogate minus β·KL on their own minibatch. Both hold for a step along a
#    positively preconditioned gradient (SGD); with Adam's momentum, which carries earlier minibatches' gradients,
#    both are a tendency (notebook 02 §3). On the notebook's batch, at small steps, A > 0 tokens rise toward
#    $1+\epsilon$ and A < 0 tokens fall toward $1-\epsilon$ on average; but after one step at lr = 1e-2 the per-sign
#    mean ratios had swapped (notebook 02 §3), and even an infinitesimal step can move both signs' log-probs the
#    same way: for example when $\sum_t A_t \ne 0$ (a token mean over unequal lengths: that part of the gradient
#    moves every sampled token the same way; the toy in notebook 02 §3), or, with $\sum_t A_t = 0$, through shared
#    parameters (one logit shared by an A > 0 and an A < 0 occurrence of the same token). Why A < 0 drifts further:
#    A > 0 tokens are already likely mid-run: their log-prob moves less per unit of gradient
#    ($\partial\log\pi(a)/\partial z_a = 1 - \pi(a)$) and their ratio is capped by $1/\pi_\text{old}$, while A < 0
#    tokens can fall toward 0; on the notebook's batch the A < 0 tokens also carry a slightly larger mean $|A|$
#    (notebook 02 §3).
# 4. No: train mode draws a new dropout mask each forward, while the cached old log-probs were eval-mode. Two
#    train-mode passes do not help either (two different masks). Fixes: eval mode for both passes, no dropout
#    (TRL's `disable_dropout`), or the same dropout mask for both (notebook 02 §5.1).
# 5. Old and new log-probs were both computed by the same buggy function, so they agree; the trainer-vs-sampler
#    `logprob_gap` catches them (notebook 02 §5).
# 6. The sign cannot say: the mean log-ratio is −KL(sampler ‖ trainer) ≤ 0 for every mismatch, bf16 numerics
#    included. Nor can its size alone; what it depends on (T = 1, eval mode, logit scale) tells the causes
#    apart (notebook 02 §5.4).
# 7. Only A > 0 tokens (unclipped branch, gradient A); A < 0 tokens sit on the constant $0.8A$ branch
#    (notebook 02 §6).
# 8. With the detach: only memory (the rollout forward's activations kept alive, about 5,500× the tensor here).
#    Without it: the policy gradient is 0 at ρ = 1, and the second minibatch's backward crashes (notebook 02 §7).
# </details>
#
# **Next: notebook 03**, *Catch it early: assertions and logging for a GRPO trainer*: the checks and logged statistics
# that flag each of these failures in the first iterations of a run.
