# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 — Group baseline vs learned value: why GRPO can drop the critic, and where that fails
#
# **The interview question** (seed 000, follow-up 5): *"Why can group-relative advantages replace a learned
# value function, and where does that trade-off fail?"*
#
# After this notebook you can say, with numbers from a model you trained:
#
# 1. For an outcome reward, the group mean is a Monte-Carlo estimate of the prompt's value $V(x)$; its
#    error falls like $\sigma^2/G$, and because it contains $r_i$ itself it shrinks every advantage by
#    $(G-1)/G$ (leave-one-out removes that).
# 2. A learned critic (PPO style) has an error that no $G$ removes (approximation and *lag* behind a
#    moving policy), costs a second network, its optimizer state and extra passes, but gives per-token
#    advantages and works when an environment cannot be reset.
# 3. Where the group baseline fails, each with an experiment: zero-variance groups (bug B2 turns them into
#    NaN), small $G$, the per-prompt re-weighting of std normalisation, the length bias of per-sequence
#    normalisation (the Dr. GRPO critique), per-token credit on long horizons, non-resettable environments;
#    and what the wrong reshape axis (bug B9) does to the baseline.
#
# Everything uses the twins' own building blocks; `workbook/critic.py` adds only a different advantage.

# %%
import copy
import logging
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import grpo_fixed as gf
from workbook import catalog, plots
from workbook import critic as C
from workbook.tasks import SparseMatchTask
from workbook.widgets import live_figure, set_value, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids log health warnings; we print what we need
started = time.perf_counter()
task = gf.EchoTask()
B2, B9 = catalog.hybrid("B2"), catalog.hybrid("B9")
print(f"EchoTask: vocab {task.vocab_size}, prompt length {task.prompt_length}, "
      f"max completion {task.max_completion_length}")

# %% [markdown]
# ## 1. The group mean is a Monte-Carlo estimate of $V(x)$
#
# **Question.** What does the group mean estimate, and is the resulting advantage unbiased?
#
# With one outcome reward per completion, the value of a prompt is $V(x) = \mathbb{E}_{o\sim\pi(\cdot|x)}[r(x,o)]$
# and the advantage of a completion is $A^*_i = r_i - V(x)$. The policy gradient
# $\nabla J = \mathbb{E}[(r - b)\,\nabla\log\pi(o|x)]$ is unbiased for **any** baseline $b$ that does not depend
# on the completion $o$ it multiplies. GRPO takes $b = \bar r = \frac1G\sum_j r_j$: a Monte-Carlo estimate of
# $V(x)$ from the same $G$ samples. But $\bar r$ contains $r_i$, so
#
# $$r_i - \bar r = \tfrac{G-1}{G}\Big(r_i - \tfrac{1}{G-1}\textstyle\sum_{j\ne i} r_j\Big)
#   \quad\Rightarrow\quad \mathbb{E}[r_i - \bar r \mid r_i] = \tfrac{G-1}{G}\,(r_i - V(x)).$$
#
# The bracket is the **leave-one-out** (RLOO) advantage, whose baseline is independent of $o_i$, so its
# conditional mean is exactly $A^*_i$. Tiny input: binary rewards with success probability $p = 0.25$, the
# exact expectation over the other $G-1$ samples (a binomial), for the sample that succeeded ($A^* = 0.75$).

# %%
p = 0.25
print(" G   E[r_i - mean | r_i=1]   ratio to A*   (G-1)/G   E[RLOO | r_i=1]")
for G in (2, 4, 8, 16):
    k = torch.arange(G, dtype=torch.float64)  # successes among the other G-1 samples
    weight = torch.distributions.Binomial(G - 1, torch.tensor(p, dtype=torch.float64)).log_prob(k).exp()
    group = (weight * (1 - (1 + k) / G)).sum().item()
    rloo = (weight * (1 - k / (G - 1))).sum().item()
    print(f"{G:2d}   {group:21.4f}   {group / (1 - p):11.4f}   {(G - 1) / G:7.4f}   {rloo:15.4f}")

# %% [markdown]
# The same identity on one group of 4 rewards: the RLOO advantages are exactly $G/(G-1) = 4/3$ times the
# group-mean ones. After division by the group std the factor cancels: the twins' `group_advantage` is
# *already* the std-normalised RLOO advantage, so the shrinkage only matters when advantages are not
# std-normalised (and even then it is one constant per $G$, which Adam largely absorbs).

# %%
rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])  # one group, G = 4
group_adv = rewards - rewards.mean()  # (G,)
rloo_adv = rewards - C.leave_one_out_baseline(rewards, 4)  # (G,)
print("group mean adv:", [f"{a:+.4f}" for a in group_adv])
print("RLOO adv      :", [f"{a:+.4f}" for a in rloo_adv], f" ratio {rloo_adv[0] / group_adv[0]:.4f}")
print("group_advantage (twins):", [f"{a:+.4f}" for a in gf.group_advantage(rewards.tolist())])
print("RLOO / std(RLOO)       :", [f"{a:+.4f}" for a in rloo_adv / rloo_adv.std(unbiased=False)])

# %% [markdown]
# > **You should know.** The group baseline is unbiased for the *direction* of the policy gradient; the
# > plain mean scales it by $(G-1)/G$ (0.5 at $G=2$). RLOO ($b_i$ = mean of the others) removes the factor;
# > with std normalisation the two are identical. Its noise is the Monte-Carlo error of $\bar r$: variance
# > $\sigma^2(x)/G$ (section 3 measures it).
#
# <details><summary>Answer: why may a baseline not depend on the sample it multiplies?</summary>
#
# $\mathbb{E}_o[b\,\nabla\log\pi(o|x)] = b\,\nabla\sum_o\pi(o|x) = b\,\nabla 1 = 0$ only if $b$ can be pulled out of
# the expectation over $o$. If $b$ contains $r_i$ (the plain group mean), the $r_i/G$ part does not vanish:
# it is exactly the $-\frac1G A^*_i$ shrinkage above. A baseline built from *other* samples (RLOO, a critic,
# even other prompts' rewards) adds variance at worst, never bias.
# </details>

# %% [markdown]
# ## 2. The learned value baseline (a small PPO-style critic)
#
# **Question.** What exactly does a critic replace, and what does it cost?
#
# `workbook/critic.py` keeps everything of `grpo_fixed` (TinyPolicy, `rollout`/`generate`, cached old and
# reference log-probs, `grpo_loss`, KL, `optimizer_step`) and changes only the advantage:
#
# * `group`: $A_i = (r_i - \bar r)/(\text{std}(r)+\epsilon)$ within the prompt's group
#   (`grpo_fixed.batch_advantages`, one advantage per sequence);
# * `critic`: GAE with $\gamma=1$, one advantage per token:
#   $\delta_t = r\,[t\text{ is the last token}] + V_\phi(s_{t+1}) - V_\phi(s_t)$, $A_t = \delta_t + \lambda A_{t+1}$;
#   $\lambda=1$ gives $A_t = r - V_\phi(s_t)$ (Monte Carlo), $\lambda=0$ the one-step TD error;
# * `none`: $A_i = r_i$ (REINFORCE, no baseline).
#
# `critic` and `none` divide by the batch std of their advantages (PPO's normalisation, *without*
# centring, so the baseline is the critic's alone). The critic is a TinyPolicy whose head outputs one
# number; `grpo_fixed.completion_logits` already returns the output at the state $s_t$ where token $t$ is
# chosen, so $V_\phi(s_t)$ needs no new alignment code. It regresses on the $\lambda$-return
# $\hat R_t = A_t + V_{\phi_\text{old}}(s_t)$ (fixed at rollout time) with
# $\tfrac12\,\text{masked\_mean}\big((V_\phi(s_t) - \hat R_t)^2\big)$, its own Adam, on the same minibatches.
# Per-token advantages go through `grpo_loss` unchanged by treating each token as a length-1 sequence
# (same masked mean). Tiny input: one completion of 3 tokens, reward 1.

# %%
values = torch.tensor([[0.5, 0.6, 0.8, 0.0]])  # (1, T): V_phi(s_t); the 4th position is after EOS
mask = torch.tensor([[True, True, True, False]])  # (1, T)
for lam in (1.0, 0.5, 0.0):
    adv = C.gae_advantages(values, torch.tensor([1.0]), mask, lam)  # (1, T)
    print(f"lambda={lam:.1f}: A_t = {[f'{a:.3f}' for a in adv[0]]}")
logp = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))  # (N, T)
m2 = torch.tensor([[True, True, False], [True, True, True]])
per_token = C.token_grpo_loss(logp, logp - 0.1, torch.tensor([[0.7] * 3, [-1.2] * 3]), m2)
per_sequence = gf.grpo_loss(logp, logp - 0.1, torch.tensor([0.7, -1.2]), m2)
print(f"token_grpo_loss with constant rows {per_token:.6f} == grpo_loss {per_sequence:.6f}")

# %% [markdown]
# Check that the harness is the twin: with `baseline="group"` the loop reproduces `grpo_fixed.train`
# number for number (3 iterations). Then the three runs of this notebook, each computed once:
# EchoTask, `steps=40, prompts_per_batch=8`, $G=8$, seed 0. The critic run keeps a snapshot of its policy
# and critic at iteration 20 for section 3.

# %%
ours, _ = C.train_with_baseline(baseline="group", steps=3, prompts_per_batch=8)
theirs = gf.train(steps=3, prompts_per_batch=8)
same = all(a[k] == b[k] for a, b in zip(ours, theirs, strict=True) for k in ("reward", "loss", "kl"))
print("identical to grpo_fixed.train:", same)

RUN = dict(steps=40, prompts_per_batch=8)
SNAPSHOT = 20
runs, snapshots = {}, {}
for name in C.BASELINES:
    runs[name], snapshots[name] = C.train_with_baseline(baseline=name, snapshot_at=(SNAPSHOT,), **RUN)
final = {name: sum(s["reward"] for s in h[-10:]) / 10 for name, h in runs.items()}
print("mean reward over the last 10 iterations:", {k: f"{v:.3f}" for k, v in final.items()})

# %% [markdown]
# ## 3. Variance and bias of each baseline against $G$, measured against the exact $V(x)$
#
# **Question.** How good an estimate of $V(x)$ is each baseline, as a function of $G$?
#
# On EchoTask every quantity is computable exactly: 25 prompts, and every completion is one of
# $K = 1 + 5 + 25 + 125 + 625 = 781$ token strings, so
# $V(x) = \sum_k \pi(o_k|x)\,r(x,o_k)$ with the probabilities from `policy_logprobs`. We take the critic
# run's policy **and critic** at iteration 20 (mid-training: prompt values spread out), compute $V(x)$ exactly,
# then draw rollout batches of $B=16$ prompts $\times$ $G$ from the exact reward distribution. The error of the
# advantage is $\hat A_i - A^*_i = V(x) - b_i$, so we report $\mathbb{E}[(b_i - V(x))^2]$, split into the squared
# per-prompt bias and the variance.

# %%
policy20, critic20 = snapshots["critic"][SNAPSHOT]
prompts = C.all_prompts(task)  # (25, P)
probs, outcome_rewards = C.exact_outcomes(policy20, task, prompts, gf.Config.temperature)  # (25, K)
value = (probs * outcome_rewards).sum(1)  # (25,) exact V(x)
sigma2 = (probs * (outcome_rewards - value[:, None]) ** 2).sum(1)  # (25,) within-prompt reward variance
critic_value = C.critic_prompt_values(critic20, prompts, task)  # (25,) V_phi(s_0)
print(f"prompts {tuple(prompts.shape)}, completions K = {probs.shape[1]}, "
      f"sum_k p = {probs.sum(1).min():.6f}..{probs.sum(1).max():.6f}")
print(f"V(x): mean {value.mean():.3f}, min {value.min():.3f}, max {value.max():.3f}, "
      f"Var_x V = {value.var(unbiased=False):.4f};  E_x sigma^2(x) = {sigma2.mean():.4f}")
critic_error = critic_value - value  # (25,)
lag = critic_error.mean()
corr = torch.corrcoef(torch.stack([value, critic_value]))[0, 1]
print(f"critic V_phi(s_0): mean error {lag:+.4f} (lag), corr with V {corr:.3f}, MSE {critic_error.pow(2).mean():.4f}"
      f" = lag^2 {lag**2:.4f} + rest {critic_error.var(unbiased=False):.4f}")

# %%
Gs = list(range(2, 33))
errors = C.baseline_experiment(probs, outcome_rewards, critic_value, Gs, B=16, repeats=200)
names = ["no baseline", "group mean", "leave-one-out", "critic", "B9 wrong axis", "no reset"]
print("  G  " + "".join(f"{n:>15s}" for n in names) + "   sigma^2/G")
for G in (2, 4, 8, 16, 32):
    print(f"{G:3d}  " + "".join(f"{errors[G][n]['mse']:15.4f}" for n in names) + f"   {sigma2.mean() / G:9.4f}")

# %% [markdown]
# Reading the table (MSE of the baseline as an estimate of $V(x)$):
#
# * **group mean** follows $\mathbb{E}_x\sigma^2(x)/G$ (last column): pure variance, no bias.
#   **Leave-one-out** has variance $\sigma^2/(G-1)$, larger at small $G$, but no correlation with $r_i$.
# * **critic** is flat in $G$: its error is bias. The cell above splits it: most of it is *lag*, the critic
#   still predicts the values of an older, worse policy. From $G = 3$ on, the group mean is the better
#   baseline here.
# * **no baseline** is flat at $\mathbb{E}[V^2]$: the advantage carries the whole value of the prompt.
# * **B9** (reshape `(G, B)` instead of `(B, G)`) averages a row of $B=16$ consecutive rewards: whole groups
#   of other prompts. Its bias is exactly zero at $G = 16 = B$ (a row *is* one group); at the default
#   $B=16, G=8$ each row spans two prompts (bias$^2$ in the slider check below).
# * **no reset** is a group whose $G$ samples start from different states (section 6.6).
#
# The slider shows the B9 bias prompt by prompt: each point is one prompt, its mean baseline $\pm$ one std
# against the exact $V(x)$. On the diagonal the baseline estimates the prompt's own value.

# %%
def draw(G=8):
    s = errors[G]
    fig, (ax_b, ax_f) = plots.buggy_vs_fixed(f"baseline per prompt vs exact V(x); B = 16, G = {G}", figsize=(9, 3.6))
    C.draw_baseline_per_prompt(ax_b, value, s["B9 wrong axis"], plots.BUGGY, "B9: mean of a row of view(G, B)")
    C.draw_baseline_per_prompt(ax_f, value, s["group mean"], plots.FIXED, "group mean")
    ax_f.plot(value, critic_value, "x", color=plots.REFERENCE, ms=4, label="critic V_phi(s_0)")
    ax_b.set_ylabel("baseline b")
    for ax, name in ((ax_b, "B9 wrong axis"), (ax_f, "group mean")):
        ax.legend(fontsize="small", loc="upper left")
        ax.text(0.98, 0.03, f"MSE {s[name]['mse']:.4f}\nbias^2 {s[name]['bias2']:.4f}", ha="right",
                transform=ax.transAxes, fontsize="small")
    plt.show()
    return {n: (s[n]["mse"], s[n]["bias2"]) for n in ("B9 wrong axis", "group mean", "critic")}


# %%
# NBVAL_IGNORE_OUTPUT
w = live_figure(draw, height="400px", G=slider(8, 2, 32, 1, "G", integer=True))
display(w)

# %%
for G in (4, 16, 8):  # set_value runs draw for its numbers; the redrawn figure is not displayed
    result = set_value(w, "G", G)
    print(f"G={G:2d}: " + ", ".join(f"{n} MSE {m:.4f} (bias^2 {b:.4f})" for n, (m, b) in result.items()))

# %% [markdown]
# All baselines against $G$ (solid: MSE; dashed: the bias$^2$ part of critic, B9 and no-reset).

# %%
fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
C.plot_errors_vs_G(ax, errors, {"no baseline": "#8c564b", "group mean": plots.FIXED, "leave-one-out": "#17becf",
                                "critic": plots.REFERENCE, "B9 wrong axis": plots.BUGGY, "no reset": "#9467bd"})
ax.set_title("error of the baseline as an estimate of V(x)")
plt.show()

# %% [markdown]
# B9 on a tiny batch, with the twins' own `batch_advantages`: $B=4$ prompts $\times$ $G=2$, prompt-major.
# The buggy `view(G, B) = view(2, 4)` puts prompts 0-1 in row 0 and prompts 2-3 in row 1.

# %%
rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])  # (B*G,) prompt-major, B=4, G=2
print("true groups (B, G):", rewards.view(4, 2).tolist(), "  B9 rows (G, B):", rewards.view(2, 4).tolist())
print("baseline fixed:", [f"{b:.2f}" for b in C.group_mean_baseline(rewards, 2)])
print("baseline B9   :", [f"{b:.2f}" for b in C.wrong_axis_baseline(rewards, 2)])
print("adv fixed:", [f"{a:+.2f}" for a in gf.batch_advantages(rewards, 2)])
print("adv B9   :", [f"{a:+.2f}" for a in B9.batch_advantages(rewards, 2)])

# %% [markdown]
# Prompt 0 was solved by both samples: no signal in the fixed twin (advantages 0), but B9 gives both
# $+0.58$ because prompt 1, which shares its row, failed once. Prompt 2 failed twice: fixed 0, B9 $-0.58$ each,
# because prompt 3 shares its row and succeeded once. A sample's advantage now depends on which prompt
# happens to share its row.
#
# > **You should know.** The group mean trades bias for variance: an unbiased estimate of $V(x)$ with error
# > $\sigma^2/G$. A critic trades variance for bias: no sampling noise in $b$, but an approximation error and a
# > lag that no $G$ fixes. B9's baseline is a biased estimate of $V(x)$; because the other prompts' rewards
# > do not depend on sample $i$'s completion, that bias becomes gradient *noise*, not a wrong direction
# > (apart from $r_i$'s own 1/16 share of its row: the same kind of shrinkage as the group mean).
#
# <details><summary>Answer: at G = 2, B9 has a <em>lower</em> MSE than the correct group mean. Is it better?</summary>
#
# At $G=2$ the B9 row averages 16 rewards from 8 prompts: nearly a batch-mean baseline, whose error (0.0189)
# is close to $\text{Var}_x V = 0.0192$, below the two-sample mean's $\mathbb{E}\sigma^2/2$ (0.0243; measured 0.0234).
# So at tiny $G$ a batch-wide baseline can beat the per-prompt one (the small-$G$ failure, section 6.2).
# But B9 also normalises by the std of the wrong row and gives whole rows zero advantage when they happen to
# be constant, and it is only right by accident. The fix is the right axis, plus a larger $G$ or RLOO.
# </details>

# %% [markdown]
# ## 4. Learning curves: group baseline vs critic vs no baseline
#
# **Question.** Does the baseline matter for learning speed on the toy task?
#
# The three runs of section 2. One seed each: a gap between two curves is not evidence about the methods
# without more seeds. Right: the fraction of the group run's groups with zero reward variance, which rises
# as EchoTask gets solved (section 6.1).

# %%
fig, (ax_r, ax_z) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
colors = {"group": plots.FIXED, "critic": plots.REFERENCE, "none": "#8c564b"}
plots.curves(ax_r, runs, "reward", colors=colors)
plots.curves(ax_z, {"group": runs["group"]}, "zero_var_groups", colors=colors)
plt.show()
for name, h in runs.items():
    print(f"{name:6s}: reward at iteration 10 {h[10]['reward']:.3f}, 20 {h[20]['reward']:.3f}, "
          f"mean of the last 10 {final[name]:.3f}")
ev = [s["explained_variance"] for s in runs["critic"]]
print(f"critic explained variance: mean {sum(ev) / len(ev):.3f}, max {max(ev):.3f}")

# %% [markdown]
# Both baselines beat no baseline on this seed (mean of the last 10 iterations above). The critic's
# explained variance (1 = it predicts the returns, 0 = no better than their mean) hovers around 0: with
# within-prompt reward noise and a moving policy it explains little, which matches its lag in section 3.
#
# ## 5. Compute and memory per iteration
#
# **Question.** What does the critic cost, counted rather than timed?
#
# We wrap `TinyPolicy.forward` and run one iteration of each variant, counting calls and rows (sequences);
# a call with gradients enabled is followed by exactly one backward.

# %%
for name in ("group", "critic"):
    counts = C.count_passes(baseline=name, **RUN)
    print(f"{name}:")
    for (net, kind), (calls, rows) in counts.items():
        print(f"    {net:9s} {kind:16s} {calls:2d} calls, {rows:4d} rows")
policy_params = C.parameter_count(gf.TinyPolicy(task.vocab_size, 64))
critic_params = C.parameter_count(C.make_critic(task, 64))
# trained network: weights + grads + Adam's two moments = 4 copies; frozen reference: weights only
print(f"parameters: policy {policy_params}, critic {critic_params}, reference {policy_params}")
print(f"floats held for parameters: group {4 * policy_params + policy_params}, "
      f"critic {4 * policy_params + policy_params + 4 * critic_params} "
      f"({(5 * policy_params + 4 * critic_params) / (5 * policy_params):.2f}x)")

# %% [markdown]
# Per iteration ($B=8$ prompts, $G=8$, 64 sequences), both variants generate the same 64 completions
# (4 policy forwards over the growing prefix plus one to cache old log-probs, one reference forward) and
# run 4 minibatch forward+backward passes of the policy (2 inner epochs $\times$ 2 minibatches = 2 full-batch
# equivalents). The critic adds 1 forward over the batch (values for GAE) and 4 minibatch forward+backward
# passes, and almost doubles the floats held for parameters, gradients and Adam state.
# In an LLM the critic is usually as large as the policy: that is the memory GRPO saves. GRPO pays instead
# with $G$ samples per prompt (generation is the expensive part of LLM RL), and PPO could use $G=1$.
# Timing on this 2-core CPU machine (not compared by the tests):

# %%
# NBVAL_IGNORE_OUTPUT
for name, h in runs.items():
    print(f"{name:6s}: {1000 * sum(s['seconds'] for s in h) / len(h):.1f} ms per iteration")

# %% [markdown]
# ## 6. Where the group baseline fails
#
# ### 6.1 Zero-variance groups (and bug B2)
#
# **Question.** What fraction of groups carries no signal, as a function of task difficulty and $G$?
#
# If all $G$ rewards are equal, $r_i - \bar r = 0$ for every sample: the group contributes no policy gradient
# (only the KL term). For a binary reward with success probability $p$, the chance is
# $z(p, G) = p^G + (1-p)^G$. It is large for hard prompts ($p \to 0$, early training, sparse rewards) and for
# solved prompts ($p \to 1$, late training, the rising curve of section 4), and it only falls like
# $(1-p)^G \approx e^{-pG}$: a prompt with $p = 0.02$ needs $G \approx 50$ to give signal two times in three.
# Measured on `SparseMatchTask` with a fresh policy (exact per-prompt $p(x)$ by enumeration; 200 prompts per
# rollout):

# %%
sparse = SparseMatchTask()
torch.manual_seed(0)
fresh = gf.TinyPolicy(sparse.vocab_size, 64)
sp_probs, sp_rewards = C.exact_outcomes(fresh, sparse, C.all_prompts(sparse), gf.Config.temperature)
p_x = (sp_probs * sp_rewards).sum(1)  # (6,) exact success probability per prompt
print("p(x) =", [f"{v:.4f}" for v in p_x])
measured = {}
for G in (2, 4, 8, 16, 32):
    cfg = gf.make_config(prompts_per_batch=200, group_size=G)
    _, stats = gf.rollout(fresh, copy.deepcopy(fresh), sparse, cfg, torch.Generator().manual_seed(G))
    measured[G] = stats["zero_var_groups"]
    print(f"G={G:2d}: zero-variance groups measured {measured[G]:.3f}, "
          f"predicted E_x[p^G + (1-p)^G] = {(p_x**G + (1 - p_x) ** G).mean():.3f}")
print(f"p = 0.02, G = 50: P(the group has signal) = 1 - 0.98^50 - 0.02^50 = {1 - 0.98**50 - 0.02**50:.3f}")

# %%
fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
grid = torch.linspace(0, 1, 201, dtype=torch.float64)
for G, shade in zip((2, 4, 8, 16, 32), (0.85, 0.7, 0.55, 0.4, 0.2), strict=True):
    ax.plot(grid, grid**G + (1 - grid) ** G, color=str(shade * 0.8), label=f"G={G}")
    ax.plot([p_x.mean()], [measured[G]], "o", color=plots.BUGGY, ms=4)
ax.set_xlabel("success probability p of the prompt")
ax.set_ylabel("P(group has zero variance)")
ax.set_title("binary reward: p^G + (1-p)^G; dots: measured on SparseMatchTask at init")
ax.legend(fontsize="small", ncol=5)
plt.show()

# %% [markdown]
# With bug B2 (no $\epsilon$ in the std) a constant group is $0/0$: NaN advantages. One NaN makes the
# minibatch loss NaN, and both twins' `optimizer_step` then skip the step. On the sparse task almost every
# minibatch holds a constant group, so B2 never updates. Tiny input first, then 24 iterations each:

# %%
constant = [0.0, 0.0, 0.0, 0.0]
print("buggy group_advantage", B2.group_advantage(constant).tolist(), " fixed", gf.group_advantage(constant).tolist())
SPARSE_RUN = dict(steps=24, prompts_per_batch=8)
sparse_runs = {"buggy": B2.train(sparse, **SPARSE_RUN), "fixed": gf.train(sparse, **SPARSE_RUN)}
for name, h in sparse_runs.items():
    skipped = sum(s["nonfinite_steps"] for s in h)
    print(f"{name:5s}: skipped {skipped} of {4 * len(h)} inner steps; NaN advantages in "
          f"{sum(s['adv_nonfinite'] > 0 for s in h)} of {len(h)} batches; "
          f"mean reward last 10 {sum(s['reward'] for s in h[-10:]) / 10:.3f}")

# %%
fig, axes = plots.buggy_vs_fixed("SparseMatchTask: B2 turns zero-variance groups into skipped steps", figsize=(9, 3.2))
for ax, (name, h) in zip(axes, sparse_runs.items(), strict=True):
    ax.plot([s["reward"] for s in h], color=plots.BUGGY if name == "buggy" else plots.FIXED, label="reward")
    ax.plot([s["zero_var_groups"] for s in h], color=plots.REFERENCE, ls="--", label="zero-variance groups")
    ax.plot([s["nonfinite_steps"] / 4 for s in h], ":", color="k", label="skipped inner steps / 4")
    ax.set_xlabel("iteration")
    ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# A critic keeps signal where the group has none: if all 8 samples of a prompt succeed and the critic
# expected 0.9, every sample gets $A = +0.1$ ("better than expected"), while GRPO gives 0:

# %%
solved = torch.ones(8)
print("group:", gf.group_advantage(solved.tolist()).tolist(), " critic (V_phi = 0.9):",
      [f"{a:+.2f}" for a in (solved - 0.9).tolist()])

# %% [markdown]
# > **You should know.** Zero-variance groups waste the whole generation cost of the group. Remedies:
# > larger $G$ for hard prompts, curricula or filtering to keep $p$ away from 0 and 1 (DAPO's "dynamic
# > sampling" resamples until groups have variance), denser rewards. In code: never divide by a raw std
# > (B2), and log `zero_var_groups`.
#
# <details><summary>Answer: the fixed twin returns zeros for a constant group. Does it still move the policy?</summary>
#
# Only through the KL penalty $\beta\,\text{KL}(\pi\,\|\,\pi_\text{ref})$ on its tokens, which pulls toward the
# reference; the policy-gradient term is exactly zero. Its tokens still count in the masked-mean denominator,
# so they dilute the other groups' per-token weight (section 6.4).
# </details>

# %% [markdown]
# ### 6.2 Small $G$
#
# **Question.** What goes wrong with $G = 2$?
#
# Everything above, at once: the shrinkage $(G-1)/G$ is 0.5; the baseline's error $\sigma^2/G$ is largest;
# $z(p,2) = p^2 + (1-p)^2 \ge 0.5$ for every $p$; and with std normalisation a pair's advantages are always
# $\pm 1$, whatever the reward gap:

# %%
for pair in ([0.0, 1.0], [0.50, 0.51], [0.0, 0.01]):
    print(f"group_advantage({pair}) = {[round(a, 4) for a in gf.group_advantage(pair).tolist()]}")
print("  G  (G-1)/G  z(p=0.1)  z(p=0.5)  MSE group mean  MSE batch-mean-like (B9)")
for G in (2, 3, 4, 8, 16):
    print(f"{G:3d}  {(G - 1) / G:7.3f}  {0.1**G + 0.9**G:8.3f}  {2 * 0.5**G:8.3f}"
          f"  {errors[G]['group mean']['mse']:14.4f}  {errors[G]['B9 wrong axis']['mse']:24.4f}")

# %% [markdown]
# A reward difference of 0.01 (say, reward-model noise) gets the same advantage as a full success vs
# failure. At $G = 2$ on this snapshot even the accidental batch-wide mean of B9 estimates $V(x)$ better
# than the group (0.0189 vs 0.0234). The fixes: a larger $G$, or a baseline that pools across prompts on
# purpose (a critic).
#
# ### 6.3 Std normalisation re-weights prompts (Dr. GRPO)
#
# **Question.** What does dividing by the group std do to the weight of each prompt?
#
# For binary rewards with $k$ successes out of $G$, $\bar r = k/G$ and $\text{std} = \sqrt{\bar r(1-\bar r)}$.
# The expected gradient of prompt $x$ becomes $\nabla V(x)/\sigma(x)$: prompts with a small std (nearly always
# solved or nearly always failed) are **up-weighted**. Tiny inputs, $G = 8$, the twins' `group_advantage`:

# %%
print(" k   std     A(success)  A(fail)   sum|A| with std   sum|A| without   ratio")
for k in range(1, 8):
    r = [1.0] * k + [0.0] * (8 - k)
    with_std = gf.group_advantage(r)  # (G,)
    without = torch.tensor(r) - k / 8  # (G,)
    std = (k / 8 * (1 - k / 8)) ** 0.5
    print(f"{k:2d}  {std:.4f}  {with_std[0]:10.4f}  {with_std[-1]:8.4f}  {with_std.abs().sum():16.4f}"
          f"  {without.abs().sum():15.4f}  {with_std.abs().sum() / without.abs().sum():6.3f}")
for group in ([0.50, 0.51, 0.50, 0.51], [0.0, 1.0, 0.0, 1.0]):
    print(f"group {group} -> {[round(a, 4) for a in gf.group_advantage(group).tolist()]}")

# %% [markdown]
# The last column is $1/\text{std}$: the prompt with 1 success in 8 gets $1/0.3307 = 3.02$ times its
# unnormalised weight, the balanced prompt 2. Without std, the total weight $\sum|A| = 2G\,\bar r(1-\bar r)$ is
# largest for balanced prompts. And a group whose rewards differ by 0.01 gets the same $\pm 1$ as a group
# that differs by 1: std normalisation amplifies noise in near-constant groups. Dr. GRPO drops the division
# (keeps $r_i - \bar r$); the price is that the scale of the advantages now follows the reward scale.
#
# ### 6.4 Length normalisation: what the twins' `grpo_loss` actually does
#
# **Question.** Original GRPO averages each sequence's token terms over its own length $|o_i|$, then over
# the group. What per-token gradient weight does that give, and what do the twins do?
#
# At ratio 1 the surrogate's gradient on token $t$ of sequence $i$ is $-w_i A_i\,\nabla\log\pi(o_{i,t})$. Three
# normalisations of the same clipped terms:
#
# * **per-sequence** (original GRPO): $\frac1G\sum_i \frac1{|o_i|}\sum_t$, so $w_i = 1/(G|o_i|)$;
# * **the twins** (`grpo_loss` = masked mean over the minibatch): $w_i = 1/\sum_j |o_j|$, the same for every
#   token of the minibatch;
# * **Dr. GRPO**: a constant $1/(G\,T_\text{max})$.
#
# Derived with autograd on the twins' `grpo_loss` (per-sequence = mean of `grpo_loss` row by row; Dr. GRPO =
# `grpo_loss` times $\sum_j|o_j| / (N\,T_\text{max})$): a short correct answer (length 1, $A=+1$) and a long
# wrong one (length 3, $A=-1$).

# %%
def token_grads(loss_fn):
    logprobs = torch.zeros(2, 3, requires_grad=True)  # (N, T), ratio 1 everywhere
    loss_fn(logprobs).backward()
    return logprobs.grad


lp_old, adv = torch.zeros(2, 3), torch.tensor([1.0, -1.0])
m = torch.tensor([[True, False, False], [True, True, True]])  # lengths 1 and 3
losses = {
    "twins (token mean)": lambda lp: gf.grpo_loss(lp, lp_old, adv, m),
    "per-sequence": lambda lp: sum(gf.grpo_loss(lp[i : i + 1], lp_old[i : i + 1], adv[i : i + 1], m[i : i + 1])
                                   for i in range(2)) / 2,
    "Dr. GRPO (constant)": lambda lp: gf.grpo_loss(lp, lp_old, adv, m) * m.sum() / m.numel(),
}
for name, fn in losses.items():
    g = token_grads(fn)  # (N, T): -w_i A_i on generated tokens
    print(f"{name:20s} short correct {g[0, 0]:+.4f} | long wrong {[f'{x:+.4f}' for x in g[1]]}")

# %% [markdown]
# Per-sequence normalisation gives the short correct answer's token $-0.5$ and each token of the long wrong
# answer only $+0.1667$: long wrong answers are penalised less per token, short correct answers are rewarded
# more. The twins give all 4 tokens the same magnitude $0.25 = 1/4$: **no $1/|o_i|$ length bias within a
# minibatch**. What remains is that the normaliser $\sum_j|o_j|$ changes from minibatch to minibatch (a
# minibatch of long completions takes smaller per-token steps), which Dr. GRPO's constant removes.
#
# Does the per-token weight matter for the *length* the policy learns? An exact experiment: completion
# length follows a geometric law with continue-logit $\theta$ (one for right answers, one for wrong answers),
# the reward does not depend on length at all, so the true gradient on $\theta$ is 0. The expected gradient
# of each estimator is $\sum_L P(L)\,w(L)\,A\,\partial_\theta\log P(L)$, with $w = 1/L$ (per-sequence) or a constant
# (token mean, Dr. GRPO):

# %%
for weighting in ("sequence", "token"):
    g_right, mean_length = C.length_gradient(1.0, +1.0, weighting)
    g_wrong, _ = C.length_gradient(1.0, -1.0, weighting)
    g_right, g_wrong = round(g_right, 10) + 0.0, round(g_wrong, 10) + 0.0  # -5e-17 prints as +0.0000
    print(f"{weighting:8s}: E[L] = {mean_length:.3f}; d/dtheta right answers {g_right:+.4f}, "
          f"wrong answers {g_wrong:+.4f}")
drift = {w: C.length_drift(w, steps=40, lr=1.0) for w in ("sequence", "token")}
for w, tr in drift.items():
    print(f"{w:8s}: mean length of right answers {tr['right'][0]:.2f} -> {tr['right'][-1]:.2f}, "
          f"wrong answers {tr['wrong'][0]:.2f} -> {tr['wrong'][-1]:.2f} after 40 exact gradient steps")

# %%
fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
for w, ls in (("sequence", "-"), ("token", "--")):
    ax.plot(drift[w]["right"], ls, color=plots.FIXED, label=f"right answers, {w} weighting")
    ax.plot(drift[w]["wrong"], ls, color=plots.BUGGY, label=f"wrong answers, {w} weighting")
ax.set_xlabel("gradient step")
ax.set_ylabel("mean completion length")
ax.set_title("reward independent of length: per-sequence weighting still moves it")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# > **You should know.** "Per-sequence mean then group mean" (original GRPO) = REINFORCE with effective
# > advantage $A_i/|o_i|$: short right answers and long wrong answers are favoured, so wrong answers grow
# > long. A token-level mean over the batch (the twins, DAPO) has no per-sequence $1/|o_i|$ factor; a constant
# > normaliser (Dr. GRPO) also removes the batch-to-batch scale change. Std normalisation is a separate
# > (per-prompt) re-weighting.
#
# <details><summary>Answer: is the twins' token mean exactly unbiased?</summary>
#
# Up to a positive scalar per minibatch: the gradient is $\frac{1}{\sum_j|o_j|}\sum_i A_i\nabla\log\pi(o_i)$, the
# sequence-level REINFORCE estimator divided by the minibatch's token count. The direction within a minibatch
# is unbiased; because the divisor is random and correlated with the lengths in the minibatch, the expectation
# over minibatches is not exactly proportional to $\nabla J$. A fixed divisor (Dr. GRPO: $G\,T_\text{max}$) makes it so.
# </details>

# %% [markdown]
# ### 6.5 Per-token credit assignment on longer horizons
#
# **Question.** GRPO broadcasts one advantage to every token. What does that lose?
#
# Exact per-token advantages on EchoTask: for one sampled completion, $V(s_t) = \mathbb{E}[r \mid o_{<t}]$ by
# summing over the 781 enumerated completions that share the prefix; the true advantage of token $t$ is
# $V(s_{t+1}) - V(s_t)$. We take the most probable completion with a partial reward under the iteration-20
# policy.

# %%
completions, cmask = C.all_completions(task)  # (K, T)
partial = (outcome_rewards > 0) & (outcome_rewards < 1)  # (25, K)
x_id = int(torch.where(partial, probs, 0.0).max(1).values.argmax())
k_id = int(torch.where(partial[x_id], probs[x_id], 0.0).argmax())
v_exact = C.exact_prefix_values(probs[x_id], outcome_rewards[x_id], completions, cmask, k_id)  # (L+1,)
length = len(v_exact) - 1
v_critic = C.state_values(critic20, prompts[x_id : x_id + 1], completions[k_id : k_id + 1])[0, :length].detach()
print(f"prompt {prompts[x_id].tolist()}, completion {completions[k_id, :length].tolist()}, "
      f"p = {probs[x_id, k_id]:.4f}, reward {outcome_rewards[x_id, k_id]:.4f}, V(x) = {value[x_id]:.4f}")
print(" t  token  V(s_t) exact  true A_t   GRPO-style A (r - V(x))  V_phi(s_t)  critic A_t (lambda=1)")
for t in range(length):
    print(f"{t:2d}  {completions[k_id, t].item():5d}  {v_exact[t]:12.4f}  {v_exact[t + 1] - v_exact[t]:+8.4f}"
          f"   {v_exact[-1] - value[x_id]:+22.4f}  {v_critic[t]:10.4f}  {v_exact[-1] - v_critic[t]:+21.4f}")

# %% [markdown]
# The second token (4; the target is 3) is a mistake, and a habit: this very completion has probability
# 0.6659. Its exact advantage is $-0.0090$, yet the sequence scored above $V(x)$, so GRPO pushes it up with
# $+0.0441$ like the two good tokens. The iteration-20 critic does not get the sign either ($+0.0633$): its values lag.
# Every token gets the same sequence advantage under GRPO, whatever its own contribution. How much that
# costs grows with the horizon. An exact toy: $T$ independent binary choices, each right with probability
# 0.5, reward = fraction right (like EchoTask's partial credit), groups of $G=8$. True per-token advantage
# $A^*_t = (c_t - p)/T$. We compare the GRPO advantage (group-mean baseline, broadcast), a perfect critic with
# $\lambda = 1$ ($r - V(s_t)$: only the *future* tokens add noise) and with $\lambda=0$
# ($V(s_{t+1}) - V(s_t)$, exact).

# %%
credit = C.credit_assignment([1, 2, 4, 8, 16, 32, 64], G=8)
print("  T   corr(A, A*): group  critic l=1  critic l=0 | right tokens with A < 0: group  critic l=1")
for T, d in credit.items():
    print(f"{T:3d}  {d['group'][0]:18.3f}  {d['critic lambda=1'][0]:10.3f}  {d['critic lambda=0'][0]:10.3f}"
          f" | {d['group'][1]:30.3f}  {d['critic lambda=1'][1]:10.3f}")
fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
Ts = list(credit)
for name, color in (("group", plots.FIXED), ("critic lambda=1", plots.REFERENCE), ("critic lambda=0", "#2ca02c")):
    ax.plot(Ts, [credit[T][name][0] for T in Ts], "o-", color=color, ms=3, label=name)
ax.plot(Ts, [(7 / 8) ** 0.5 / T**0.5 for T in Ts], ":", color="k", label="sqrt((G-1)/G) / sqrt(T)")
ax.set_xscale("log", base=2)
ax.set_xlabel("horizon T (tokens)")
ax.set_ylabel("corr(estimated A, true per-token A)")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# The correlation of GRPO's broadcast advantage with the true per-token advantage falls like
# $\sqrt{(G-1)/G}/\sqrt{T}$: each token's signal is buried under the other $T-1$ tokens' luck, so the
# samples needed for the same gradient precision grow linearly in $T$. At $T=64$ more than 4 in 10 right
# tokens are pushed *down*. A critic helps only if it is accurate: with a learned $V_\phi$, $\lambda<1$
# trades this variance for the critic's bias (the EchoTask table above: $V_\phi(s_0) = 0.5959$ against the
# exact 0.6225).
#
# ### 6.6 Environments that cannot be reset to the same state
#
# **Question.** The group mean needs $G$ samples *from the same state*. What if the environment cannot be
# reset (a live user conversation, a game with hidden randomness, a robot, a stateful tool sandbox)?
#
# Then sample $j$ of a "group" starts from its own state $s_j$, and $\bar r$ estimates the average value over
# states, not $V(s_i)$. It is still a valid baseline if it excludes $r_i$, but the per-state value stays in
# every advantage as noise: the error floor is $\text{Var}_s V(s)$, whatever $G$. The "no reset" column of
# section 3 simulates exactly this (each of the $G$ samples from a different random prompt):

# %%
var_v = value.var(unbiased=False).item()
for G in (2, 8, 32):
    e = errors[G]
    print(f"G={G:2d}: same state {e['group mean']['mse']:.4f} | no reset {e['no reset']['mse']:.4f} "
          f"(floor Var_x V = {var_v:.4f}) | critic V_phi(s) {e['critic']['mse']:.4f}")

# %% [markdown]
# A critic conditions on the state it is given, so it needs no reset: this (and multi-turn, per-step
# rewards) is where PPO-style value functions remain necessary.
#
# > **You should know.** GRPO's baseline assumes you can draw $G$ i.i.d. completions of the *same* prompt;
# > in an LLM with a fixed prompt that is free. When the state is not replayable, the group degenerates
# > into a batch mean (the B9 failure by construction) and you need $V_\phi(s)$.
#
# <details><summary>Answer: could you group samples with <em>similar</em> states instead?</summary>
#
# Partly: grouping by a state feature makes the group mean a nonparametric value estimate (a nearest-neighbour
# critic). Its error is the spread of $V$ within a bucket plus $\sigma^2/G$, and buckets thin out as the state
# gets richer; at that point a learned $V_\phi$ generalises better.
# </details>

# %% [markdown]
# ## 7. GRPO vs PPO in one table
#
# Numbers from this notebook (EchoTask, $B=8$, $G=8$, iteration-20 snapshot for the errors):

# %%
rows = [
    ("baseline", "group mean of G samples", "learned V_phi(s_t)"),
    ("error of b vs V(x) at G=8", f"{errors[8]['group mean']['mse']:.4f} (variance)",
     f"{errors[8]['critic']['mse']:.4f} (bias, lag)"),
    ("error at G=2", f"{errors[2]['group mean']['mse']:.4f}", f"{errors[2]['critic']['mse']:.4f}"),
    ("advantage granularity", "one per sequence", "one per token (GAE)"),
    ("extra parameters", "0", f"{critic_params} (policy {policy_params})"),
    ("extra fwd+bwd per iteration", "0", "1 fwd + 4 minibatch fwd+bwd"),
    ("needs G samples of one state", "yes", "no (G = 1 works)"),
    ("signal from all-equal groups", "none", "r - V_phi(s) != 0"),
    ("reward last 10 iters (1 seed)", f"{final['group']:.3f}", f"{final['critic']:.3f}"),
]
for a, b, c in rows:
    print(f"{a:32s} | {b:28s} | {c}")

# %% [markdown]
# | | GRPO (group baseline) | PPO (learned critic) |
# |---|---|---|
# | value network | none: no extra memory, optimizer state or passes | a second network, its Adam state, more passes |
# | baseline error | unbiased, variance $\sigma^2/G$ | bias and lag, flat in $G$ |
# | own-sample coupling | $(G-1)/G$ shrinkage (RLOO removes it) | none |
# | credit assignment | one advantage for every token | per token (GAE; $\lambda$ trades variance for bias) |
# | samples | $G$ per prompt, all from the same state | $G = 1$ works; no reset needed |
# | all-equal groups | no signal: the generations are wasted | $r - V_\phi(s) \ne 0$ still teaches |
# | normalisation | group std re-weights prompts by $1/\sigma(x)$ | batch-level |
# | tuning | nothing to warm up | critic learning rate, $\lambda$, warm-up |
#
# The critic run finished higher on this one seed while its baseline was the less accurate one at
# iteration 20; the runs follow different trajectories, and one seed says nothing about which method learns
# faster in general.

# %% [markdown]
# ## Self-check
#
# 1. Why is $r_i - \bar r$ biased toward zero, by how much, and why does it not matter after std normalisation?
# 2. A colleague computes `rewards.view(G, B)`. With $B = G$ the run is perfect. Why, and what breaks when $B \ne G$?
# 3. Name two regimes where more than 80% of groups give no gradient, and one remedy for each.
# 4. Per-sequence length normalisation: which answers does it favour, and does the twins' loss have the same bias?
# 5. When do you still want a critic?
#
# <details><summary>Answer 1</summary>
#
# $\bar r$ contains $r_i$: $\mathbb{E}[r_i - \bar r\mid r_i] = \frac{G-1}{G}(r_i - V)$ (0.75 at $G=4$, section 1). The
# factor is the same for every sample, so dividing by the group std (scale-invariant) cancels it; RLOO removes
# it without std.
# </details>
#
# <details><summary>Answer 2</summary>
#
# With $B=G$ the buggy rows of `view(G, B)` are exactly the prompt groups (the layout is prompt-major with
# $G$ per prompt). Otherwise a row spans parts of several prompts: the baseline is a mixture of other prompts'
# values (section 3: zero bias at $G=16=B$, large at $G=4$), and constant rows zero out real signal.
# </details>
#
# <details><summary>Answer 3</summary>
#
# Hard prompts ($p \approx 0.02$ on SparseMatchTask: 0.84 of groups at $G=8$ in section 6.1) and solved prompts
# (late training, section 4). Remedies: larger $G$ or dynamic sampling for hard prompts, curriculum or
# filtering out solved prompts; denser rewards; a critic, which still gets $r - V_\phi \ne 0$.
# </details>
#
# <details><summary>Answer 4</summary>
#
# Dividing by $|o_i|$ gives weight $A_i/|o_i|$ per token: short right answers and long wrong answers are
# favoured (section 6.4: wrong answers grew long with reward independent of length). The twins divide by the
# minibatch's total token count, the same for every token: no per-sequence length bias, only a batch-dependent
# scale.
# </details>
#
# <details><summary>Answer 5</summary>
#
# Long horizons with intermediate rewards (per-token credit), multi-turn or stateful environments that cannot
# be reset, $G$ that must stay small (expensive generation), and when many groups are constant.
# </details>

# %%
# NBVAL_IGNORE_OUTPUT
print(f"notebook compute: {time.perf_counter() - started:.1f} s on this machine")
