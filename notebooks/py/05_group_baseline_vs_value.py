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
# **The interview question** (follow-up 5 of SPEC.md): *"Why can group-relative advantages replace a learned
# value function, and where does that trade-off fail?"*
#
# After this notebook you can say, with numbers from a model you trained:
#
# 1. For an outcome reward, the group mean is a Monte-Carlo estimate of the prompt's value $V(x)$; its
#    error falls like $\sigma^2/G$, and because it contains $r_i$ itself it shrinks every advantage by
#    $(G-1)/G$ (leave-one-out removes that). Dividing by the group std gives the same numbers for both, and
#    makes neither unbiased: the std comes from the same samples.
# 2. A learned critic (PPO style) has an error that no $G$ removes (approximation and *lag* behind a
#    moving policy), costs a second network, its optimizer state and extra passes, but gives per-token
#    advantages and works when an environment cannot be reset.
# 3. Where the group baseline fails, each with an experiment: zero-variance groups (bug B2 turns them into
#    NaN), small $G$, the per-prompt re-weighting of std normalisation (exactly, at finite $G$), the length
#    bias of per-sequence normalisation (the Dr. GRPO critique), per-token credit on long horizons,
#    non-resettable environments; and what the wrong reshape axis (bug B9) does to the baseline.
#
# Everything uses the twins' own building blocks: the LM loop in miniature (AdditionTask, prompts "a+b=", a
# TinyLM from the SFT checkpoint, rewards on the decoded text). The formulas taught here are defined in the
# notebook's cells; `workbook/nb05_critic.py` holds the machinery: the critic's training loop (the twin's loop
# with another advantage), the exact values of AdditionTask's prompts, the sampling experiment and the figures.

# %%
import functools
import itertools
import math

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import grpo_fixed
import grpo_support
from workbook import catalog, nb05_critic, plots
from workbook.progress import progress
from workbook.run_summary import final_reward
from workbook.tasks import SparseMatchTask
from workbook.widgets import live_plot, probe, slider

task = grpo_fixed.AdditionTask()
tokenizer = grpo_fixed.CharTokenizer(task.alphabet)
B2, B9 = catalog.hybrid("B2"), catalog.hybrid("B9")
lengths = sorted({len(p) for p in nb05_critic.all_prompts(task)})
print(f"AdditionTask: vocab {tokenizer.vocab_size}, prompts 'a+b=' of {lengths[0]}-{lengths[-1]} characters, "
      f"max completion {task.max_completion_length} tokens (EOS included), checkpoint {task.checkpoint.name}")

# %% [markdown]
# **At a glance.** Four prompts × two graded rewards (the tick labels) through the twins' `batch_advantages`: the
# fixed twin normalises each prompt's pair against its own mean and std, while B9 normalises each row of
# `view(G, B)`, which spans two prompts, so samples 1, 2 and 7 (counting from 0) change sign and prompt 2's tied pair
# gets advantages; §3 explains why
# and measures B9's baseline against the exact $V(x)$.

# %%
glance_rewards = torch.tensor([1.0, 2 / 3, 1 / 3, 0.0, 1.0, 1.0, 1 / 3, 2 / 3])  # (B*G,) prompt-major, B = 4, G = 2
glance = {"buggy": B9.batch_advantages(glance_rewards, 2), "fixed": grpo_fixed.batch_advantages(glance_rewards, 2)}
fig, axes = plots.buggy_vs_fixed("the same rewards, advantages per sample", figsize=(9, 3.0))
edges = {"buggy": (3.5,), "fixed": (1.5, 3.5, 5.5)}  # B9's rows of view(G, B); the fixed twin's prompt groups
for ax, (name, adv) in zip(axes, glance.items(), strict=True):
    ax.bar(range(8), adv.tolist(), color=plots.BUGGY if name == "buggy" else plots.FIXED)
    for x in edges[name]:
        ax.axvline(x, color="0.6", ls=":", lw=1)
    ax.axhline(0.0, color="0.3", lw=0.8)
    ax.set_xticks(range(8), [f"{r:.2f}" for r in glance_rewards.tolist()])
    ax.set_xlabel("reward of each sample: B9's rows" if name == "buggy" else "reward of each sample: prompt groups")
axes[0].set_title("B9: grpo_buggy's batch_advantages", color=plots.BUGGY)
axes[1].set_title("grpo_fixed's batch_advantages", color=plots.FIXED)
axes[0].set_ylabel("advantage")
top = 1.15 * max(adv.abs().max().item() for adv in glance.values())
axes[0].set_ylim(-top, top)  # shared by both panels
plt.show()
flipped = ((glance["buggy"].sign() != glance["fixed"].sign()) & (glance["fixed"] != 0)).nonzero().flatten().tolist()
print(f"samples whose sign B9 flips: {flipped}; prompt 2's tied pair: fixed "
      f"{[f'{a:+.2f}' for a in glance['fixed'][4:6]]}, B9 {[f'{a:+.2f}' for a in glance['buggy'][4:6]]}")
assert flipped == [1, 2, 7] and (glance["fixed"][4:6] == 0).all() and (glance["buggy"][4:6] != 0).all()

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
    assert abs(group / (1 - p) - (G - 1) / G) < 1e-12 and abs(rloo - (1 - p)) < 1e-12

# %% [markdown]
# The two baselines as code, on rewards laid out prompt-major like a rollout batch (`[x0]*G, [x1]*G, ...`),
# and the same identity on one group of 4 rewards: the RLOO advantages are exactly $G/(G-1) = 4/3$ times the
# group-mean ones. Divide each by its own population std and the factor cancels: the twins' `group_advantage`
# gives, number for number, the std-normalised RLOO advantages.

# %%
def group_mean_baseline(rewards, G):
    """b_i = mean of i's own group of G (r_i included): GRPO's baseline. rewards (..., B*G) -> (..., B*G)"""
    groups = rewards.unflatten(-1, (-1, G))  # (..., B, G)
    return groups.mean(-1, keepdim=True).expand_as(groups).flatten(-2)


def leave_one_out_baseline(rewards, G):
    """b_i = mean of the other G-1 rewards of i's group (RLOO). rewards (..., B*G) -> (..., B*G)"""
    groups = rewards.unflatten(-1, (-1, G))  # (..., B, G)
    return ((groups.sum(-1, keepdim=True) - groups) / (G - 1)).flatten(-2)


def std_normalised(adv):
    """adv / (population std of adv + 1e-8), one group (G,): what group_advantage does after centring."""
    return adv / (adv.pow(2).mean().sqrt() + 1e-8)


rewards = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # one group, G = 4
group_adv = rewards - group_mean_baseline(rewards, 4)  # (G,)
rloo_adv = rewards - leave_one_out_baseline(rewards, 4)  # (G,)
twins = grpo_fixed.group_advantage(rewards.tolist())  # (G,)
print("group mean adv:", [f"{a:+.4f}" for a in group_adv])
print("RLOO adv      :", [f"{a:+.4f}" for a in rloo_adv], f" ratio {rloo_adv[0] / group_adv[0]:.4f}")
print("group_advantage (twins):", [f"{a:+.4f}" for a in twins])
print("RLOO / std(RLOO)       :", [f"{a:+.4f}" for a in std_normalised(rloo_adv)])
assert torch.allclose(rloo_adv, group_adv * 4 / 3, atol=1e-15)
assert torch.allclose(std_normalised(rloo_adv), twins, atol=1e-6)  # equal up to where eps enters

# %% [markdown]
# **Equal numbers are not an unbiased estimator.** The identity above is algebra on one group; it says nothing
# about expectations. Write $a(v) = \mathbb{E}[A_i \mid r_i = v]$ for whatever advantage $A_i$ is used. Because
# $A_i$ depends on $o_i$ only through $r_i$, the expected gradient of one prompt is
#
# $$\mathbb{E}\big[A_i\,\nabla\log\pi(o_i|x)\big] = \sum_o \nabla\pi(o|x)\,a(r(o)) = \sum_v a(v)\,\nabla P(r = v),
#   \qquad \nabla V(x) = \sum_v v\,\nabla P(r = v).$$
#
# It is $\kappa\,\nabla V(x)$ for every direction the policy can move in exactly when
# $a(v) = \kappa\,(v - V(x)) + c$ (a constant $c$ drops out, since $\sum_v \nabla P(r = v) = 0$): $a(v)$ must be a
# straight line in $v$. The plain group mean has $\kappa = (G-1)/G$, RLOO $\kappa = 1$.
# The std-normalised advantage divides by $\hat\sigma$, computed from the same samples, $r_i$ included: a sample
# far from the rest inflates the very std that divides it, so $a(v)$ bends. Tiny input: one prompt whose reward
# takes four graded levels $0, \frac13, \frac23, 1$ (a partial-credit reward; AdditionTask's is binary) with
# probabilities $0.5, 0.2, 0.2, 0.1$, $G = 4$; all
# $4^4 = 256$ groups enumerated exactly, the twins' `group_advantage` on each.

# %%
levels = torch.tensor([0.0, 1 / 3, 2 / 3, 1.0], dtype=torch.float64)  # (U,) reward levels
level_p = torch.tensor([0.5, 0.2, 0.2, 0.1], dtype=torch.float64)  # (U,) P(r = v)
G4 = 4
which = torch.tensor(list(itertools.product(range(4), repeat=G4)))  # (256, G): every group of level indices
weight = level_p[which].prod(1)  # (256,) probability of the group
r_all = levels[which]  # (256, G)
V = (level_p * levels).sum()
advantages = {
    "group mean": r_all - group_mean_baseline(r_all, G4),
    "RLOO": r_all - leave_one_out_baseline(r_all, G4),
    "std-normalised": torch.stack([grpo_fixed.group_advantage(g.tolist()) for g in r_all]),  # (256, G), the twins'
}
std_rloo = torch.stack([std_normalised(a) for a in advantages["RLOO"]])  # (256, G)
assert (std_rloo - advantages["std-normalised"]).abs().max() < 1e-6  # the identity, on every group


def conditional_mean(adv):
    """a(v) = E[A_1 | r_1 = v] for each level v, exact over the 256 groups. adv (256, G) -> (U,)"""
    return torch.stack([(weight * adv[:, 0])[which[:, 0] == u].sum() / level_p[u] for u in range(4)])


print(f"V(x) = {V:.4f}")
print(f"{'advantage':15s}" + "".join(f"   a({v:.2f})" for v in levels) + "   slope (a(v') - a(v)) / (v' - v)"
      "   cos(E g, grad V)")
slopes, cosines = {}, {}
for name, adv in advantages.items():
    a = conditional_mean(adv)  # (U,)
    slopes[name] = (a[1:] - a[:-1]) / (levels[1:] - levels[:-1])  # (U-1,): between neighbouring levels
    expected_grad, true_grad = level_p * a, level_p * (levels - V)  # d/d theta_v under softmax(theta) over levels
    cosines[name] = cos = torch.nn.functional.cosine_similarity(expected_grad, true_grad, 0).item()
    print(f"{name:15s}" + "".join(f"  {x:+8.4f}" for x in a) + "   " + " ".join(f"{s:6.3f}" for s in slopes[name])
          + f"           {cos:.4f}")
spread = {name: (s.max() - s.min()).item() for name, s in slopes.items()}
assert spread["group mean"] < 1e-12 and spread["RLOO"] < 1e-12  # a(v) = kappa (v - V): unbiased direction
assert abs(slopes["group mean"][0] - (G4 - 1) / G4) < 1e-12 and abs(slopes["RLOO"][0] - 1) < 1e-12
assert slopes["std-normalised"][0] > 2 * slopes["std-normalised"][-1]  # not a line: the expected direction is off
assert 0.99 < cosines["std-normalised"] < 1 - 1e-3  # a few degrees off grad V
assert [f"{x:.2f}" for x in slopes["std-normalised"]] == ["3.04", "2.04", "1.16"]  # prose
assert f"{cosines['std-normalised']:.4f}" == "0.9925"  # prose

# %% [markdown]
# A line in $v$ has the same slope between every pair of neighbouring levels. For the group mean and RLOO the
# slope is one number ($0.75 = (G-1)/G$ and $1$): the expected update is $\nabla V$ times a constant. For the
# std-normalised advantage it falls from 3.04 (from reward 0 to 1/3) to 1.16 (from 2/3 to 1): the step up to
# the best answer is pushed less than half as hard per unit of reward as the step up from the worst, because
# a sample far above the rest inflates the std that divides it. As a gradient (a softmax over the four levels,
# last column) the expected update still points within a few degrees of $\nabla V$ (cosine 0.9925), but not
# along it: a bias, and no constant removes it. With binary rewards $a(v)$ has only two points, so it is always
# a line and the direction within a prompt is right; the bias then sits in the *size* of each prompt's update,
# which notebook 05 §6.3 computes exactly.
#
# > **You should know.** The plain group mean is unbiased for the direction of the policy gradient and
# > scales it by $(G-1)/G$ (0.5 at $G=2$); RLOO ($b_i$ = mean of the others) removes the factor. After
# > division by the group std the two give identical numbers, but that is an identity of numbers, not of
# > expectations: $\hat\sigma$ is computed from the same samples, $r_i$ included, so the std-normalised
# > advantage (what GRPO uses) is biased in both forms. Its baseline's noise is the Monte-Carlo error of
# > $\bar r$: variance $\sigma^2(x)/G$ (notebook 05 §3 measures it).
# >
# > **In the catalog's terms.** *Symptom:* none in a reward curve: per prompt the expected update leans a few
# > degrees away from $\nabla V$, and prompts are re-weighted. *Statistic:* none of the twins' logged ones;
# > compute $a(v)$ exactly for a small reward distribution, as above. *Fix:* for an unbiased update, RLOO or
# > the plain mean without the std (Dr. GRPO); otherwise keep the std knowingly, for its stable scale.
#
# <details><summary>Answer: why may a baseline not depend on the sample it multiplies?</summary>
#
# $\mathbb{E}_o[b\,\nabla\log\pi(o|x)] = b\,\nabla\sum_o\pi(o|x) = b\,\nabla 1 = 0$ only if $b$ can be pulled out of
# the expectation over $o$. If $b$ contains $r_i$ (the plain group mean), the $r_i/G$ part does not vanish:
# it is exactly the $-\frac1G A^*_i$ shrinkage above. A baseline built from *other* samples (RLOO, a critic,
# even other prompts' rewards) adds variance at worst, never bias, as long as nothing else in the advantage
# depends on $o_i$; a divisor computed from the group, $r_i$ included (the std), is such a thing.
# </details>

# %% [markdown]
# ## 2. The learned value baseline (a small PPO-style critic)
#
# **Question.** What exactly does a critic replace, and what does it cost?
#
# The harness in `workbook/nb05_critic.py` keeps everything of `grpo_fixed` (the TinyLM policy from the SFT
# checkpoint, `setup_run`, `rollout`/`generate` with left-padded prompts, cached old and reference log-probs,
# `grpo_loss`, KL, `optimizer_step`) and changes only the advantage:
#
# * `group`: $A_i = (r_i - \bar r)/(\text{std}(r)+\epsilon)$ within the prompt's group
#   (`grpo_fixed.batch_advantages`, one advantage per sequence);
# * `critic`: GAE with $\gamma=1$, one advantage per token (written below);
# * `none`: $A_i = r_i$ (REINFORCE, no baseline).
#
# `critic` and `none` divide by the batch std of their advantages and do *not* subtract the batch mean. PPO
# implementations usually whiten, which does both: verl 0.9.1's `compute_gae_advantage_return` ends with
# `masked_whiten(advantages, response_mask)` (`verl/trainer/ppo/core_algos.py`), mean and variance over the batch's
# response tokens. We keep only the scale, so that the baseline stays the critic's alone (centring would add a
# batch-mean baseline on top) and `none` stays a run without any baseline. The critic (`ValueModel`) is a
# second TinyLM loaded from the same SFT checkpoint, with a zero-initialised scalar head on its last hidden state
# in place of the vocabulary projection: $V_\phi = 0$ everywhere at the start. Real PPO for LLMs does the same at
# full size: a second LM with a scalar head, initialised from the reward model or the SFT model, often of the policy's
# size (not always: InstructGPT's value model started from its 6B reward model, for a 175B policy).
# `grpo_fixed.completion_logits` already returns the output at the state $s_t$ (prompt plus the first $t$
# completion tokens, with the padded batch's attention mask and positions) where token $t$ is chosen, so
# $V_\phi(s_t)$ needs no new alignment code. The critic's code is the next three cells; the harness runs it as
# written.
#
# **GAE.** $\delta_t = r\,[t\text{ is the last token}] + V_\phi(s_{t+1}) - V_\phi(s_t)$,
# $A_t = \delta_t + \lambda A_{t+1}$; $\lambda=1$ gives $A_t = r - V_\phi(s_t)$ (Monte Carlo), $\lambda=0$ the
# one-step TD error. Tiny input: one completion of 3 tokens, reward 1.

# %%
def last_token(mask):
    """True at the last generated token of each row (the EOS, or position T-1 if truncated). (N, T)"""
    mask = mask.bool()
    after = torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], dim=1)  # (N, T): is t+1 generated?
    return mask & ~after


def gae_advantages(values, rewards, mask, lam: float = 1.0):
    """Generalised advantage estimation with gamma = 1 and one outcome reward at the last token.

    delta_t = r * [t last] + V(s_{t+1}) * [t+1 generated] - V(s_t);  A_t = delta_t + lam * A_{t+1}.
    values, mask (N, T); rewards (N,) -> advantages (N, T), zero at masked positions.
    """
    mask = mask.bool()
    values = torch.where(mask, values, 0.0)  # (N, T): V = 0 after the episode ended
    final = last_token(mask)  # (N, T)
    adv = torch.zeros_like(values)  # (N, T)
    next_value = torch.zeros_like(rewards)  # (N,)
    next_adv = torch.zeros_like(rewards)  # (N,)
    for t in reversed(range(values.shape[1])):
        delta = torch.where(final[:, t], rewards, 0.0) + next_value - values[:, t]  # (N,)
        adv[:, t] = torch.where(mask[:, t], delta + lam * next_adv, 0.0)
        next_value, next_adv = values[:, t], adv[:, t]
    return adv


values = torch.tensor([[0.5, 0.6, 0.8, 0.0]])  # (1, T): V_phi(s_t); the 4th position is after EOS
mask = torch.tensor([[True, True, True, False]])  # (1, T)
gae = {lam: gae_advantages(values, torch.tensor([1.0]), mask, lam) for lam in (1.0, 0.5, 0.0)}  # (1, T) each
for lam, adv in gae.items():
    print(f"lambda={lam:.1f}: A_t = {[f'{a:.3f}' for a in adv[0]]}")
assert torch.allclose(gae[1.0], torch.where(mask, 1.0 - values, 0.0))  # lambda = 1: r - V(s_t)
assert torch.allclose(gae[0.5], torch.tensor([[0.25, 0.3, 0.2, 0.0]]))  # delta = .1, .2, .2; A = delta + A' / 2

# %% [markdown]
# **Per-token advantages through the twins' loss.** Treat each token as a length-1 sequence: the clipped
# surrogate is per token and the masked mean runs over the same unmasked tokens, so with one advantage per
# row it is exactly `grpo_loss`.

# %%
def token_grpo_loss(logprobs, old_logprobs, token_advantages, mask, clip: float = 0.2):
    """grpo_fixed.grpo_loss with one advantage per token instead of per sequence. All (N, T) -> scalar."""
    flat = lambda x: x.reshape(-1, 1)  # noqa: E731  (N*T, 1)
    return grpo_fixed.grpo_loss(flat(logprobs), flat(old_logprobs), token_advantages.reshape(-1), flat(mask), clip)


logp = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))  # (N, T)
m2 = torch.tensor([[True, True, False], [True, True, True]])
per_token = token_grpo_loss(logp, logp - 0.1, torch.tensor([[0.7] * 3, [-1.2] * 3]), m2)
per_sequence = grpo_fixed.grpo_loss(logp, logp - 0.1, torch.tensor([0.7, -1.2]), m2)
print(f"token_grpo_loss with constant rows {per_token:.6f} == grpo_loss {per_sequence:.6f}")
assert torch.equal(per_token, per_sequence)

# %% [markdown]
# **The critic's loss and its diagnostic.** It regresses on the $\lambda$-return
# $\hat R_t = A_t + V_{\phi_\text{old}}(s_t)$ (fixed at rollout time) with
# $\tfrac12\,\text{masked\_mean}\big((V_\phi(s_t) - \hat R_t)^2\big)$, its own Adam, on the same minibatches.
# Explained variance $1 - \text{Var}(\hat R - V)/\text{Var}(\hat R)$ (cleanrl logs it) is 1 only for a critic
# that predicts every realised return up to a constant offset; with stochastic returns even the true $V(s_t)$
# scores less, about $\text{Var}(V)/\text{Var}(\hat R)$. Any constant prediction scores 0 (a negative score is
# worse than the best constant), and a constant offset does not change it: a critic that is off by the same
# amount everywhere scores like one that is not.

# %%
def value_loss(values, targets, mask):
    """0.5 * masked_mean((V_phi(s_t) - target_t)^2); values, targets, mask (N, T)."""
    return 0.5 * grpo_fixed.masked_mean((values - targets.detach()).pow(2), mask)


def explained_variance(values, targets, mask):
    """1 - Var(target - V) / Var(target) over unmasked tokens (1 is perfect)."""
    mask = mask.bool()
    y, v = targets[mask], values[mask]
    return (1 - (y - v).var(unbiased=False) / y.var(unbiased=False).clamp(min=1e-12)).item()


targets = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # (2, T): returns of a reward 1 and a 0
both = torch.tensor([[True, True, True, False], [True, True, False, False]])  # (2, T)
guess = torch.tensor([[0.5, 0.6, 0.8, 0.0], [0.5, 0.4, 0.0, 0.0]])  # (2, T)
print(f"value loss {value_loss(guess, targets, both):.4f}; explained variance: a perfect critic "
      f"{explained_variance(targets, targets, both):.1f}, the mean everywhere "
      f"{explained_variance(torch.full_like(targets, 0.6), targets, both):.1f}, zero everywhere "
      f"{explained_variance(torch.zeros_like(targets), targets, both):.1f}, this guess "
      f"{explained_variance(guess, targets, both):.3f}, this guess + 0.1 "
      f"{explained_variance(guess + 0.1, targets, both):.3f}")
assert torch.isclose(value_loss(guess, targets, both), torch.tensor(0.5 * (0.25 + 0.16 + 0.04 + 0.25 + 0.16) / 5))
assert explained_variance(targets, targets, both) == 1.0
assert abs(explained_variance(torch.full_like(targets, 0.6), targets, both)) < 1e-6
assert abs(explained_variance(torch.zeros_like(targets), targets, both)) < 1e-6  # any constant scores 0
assert abs(explained_variance(guess + 0.1, targets, both) - explained_variance(guess, targets, both)) < 1e-6

CRITIC_FNS = nb05_critic.CriticFunctions(gae_advantages, token_grpo_loss, value_loss, explained_variance)

# %% [markdown]
# The harness is the twin: with `baseline="group"` its loop gives `grpo_fixed.train`'s statistics number for
# number (`tests/test_nb05_critic.py` checks it; the harness only skips the preflight probes `train` runs first).
# The three runs of this notebook, each computed once: AdditionTask from the SFT checkpoint,
# `steps=30, prompts_per_batch=8`, $G=8$, seed 0 (the default run is 70 iterations of 16 prompts; these are
# shortened to keep the notebook fast). The critic run keeps a snapshot of its policy and critic at iteration 20
# for notebook 05 §3.

# %%
RUN = dict(steps=30, prompts_per_batch=8)
SNAPSHOT = 20
runs, snapshots = {}, {}
group_batches = []  # per iteration of the group run: (prompts, rewards) of its batch, for §6.7
with progress("training one run per baseline", total=len(nb05_critic.BASELINES)) as step:
    for name in nb05_critic.BASELINES:
        step(name)
        runs[name], snapshots[name] = nb05_critic.train_with_baseline(
            baseline=name, critic_fns=CRITIC_FNS, **RUN,
            snapshot_at=range(SNAPSHOT + 1) if name == "group" else (SNAPSHOT,),  # §6.7 follows the group run
            on_batch=None if name != "group" else
            lambda it, batch: group_batches.append((batch["prompts"], batch["rewards"].clone())))
final = {name: final_reward(h) for name, h in runs.items()}
print("mean reward over the last 10 iterations:", {k: f"{v:.3f}" for k, v in final.items()})

# %% [markdown]
# ## 3. Variance and bias of each baseline against $G$, measured against the exact $V(x)$
#
# **Question.** How good an estimate of $V(x)$ is each baseline, as a function of $G$?
#
# On AdditionTask every value is computable: the reward is 1 for one completion (the digits of $a+b$, then EOS)
# and 0 for every other, so the value of a prompt is one sequence probability,
# $V(x) = \prod_t \pi_T(o^*_t \mid x, o^*_{<t})$ under the sampling distribution $\text{softmax}(\text{logits}/T)$,
# and its reward is Bernoulli($V(x)$), with variance $\sigma^2(x) = V(1-V)$. One forward pass over the 2500
# prompts with their answers gives all of them (`answer_logprobs`, `exact_outcomes`). We take the critic run's
# policy **and critic** at iteration 20, compute $V(x)$ exactly, then draw rollout batches of $B=16$ prompts
# $\times$ $G$ from the exact reward distribution. To measure each baseline's bias *per prompt* we need many
# groups of every prompt, so the experiment draws from 50 of the 2500 prompts (a seeded random subset). The
# error of the advantage is $\hat A_i - A^*_i = V(x) - b_i$, so we report $\mathbb{E}[(b_i - V(x))^2]$, split
# into the squared per-prompt bias and the variance. (One caveat to "one completion", measured in the cell after
# next: the reward reads the decoded text, and decoding drops PAD and BOS.)

# %%
policy20, critic20 = snapshots["critic"][SNAPSHOT]
T_SAMPLE = grpo_fixed.Config.temperature
every = nb05_critic.all_prompts(task)  # 2500 strings
all_probs, _ = nb05_critic.exact_outcomes(policy20, tokenizer, every, T_SAMPLE)  # (2500, 2): [1 - V, V]
subset = torch.randperm(len(every), generator=torch.Generator().manual_seed(0))[:50].sort().values  # (50,)
prompts = [every[i] for i in subset.tolist()]
probs, outcome_rewards = nb05_critic.exact_outcomes(policy20, tokenizer, prompts, T_SAMPLE)  # (50, 2) each
value = (probs * outcome_rewards).sum(1)  # (50,) exact V(x)
sigma2 = (probs * (outcome_rewards - value[:, None]) ** 2).sum(1)  # (50,) within-prompt reward variance
critic_value = nb05_critic.critic_prompt_values(critic20, tokenizer, prompts).double()  # (50,) V_phi(s_0)
print(f"all 2500 prompts: mean V(x) {all_probs[:, 1].mean():.3f} (the snapshot's expected reward), "
      f"min {all_probs[:, 1].min():.4f}, max {all_probs[:, 1].max():.3f}")
print(f"the 50-prompt subset: V(x) mean {value.mean():.3f}, min {value.min():.3f}, max {value.max():.3f}, "
      f"Var_x V = {value.var(unbiased=False):.4f};  E_x sigma^2(x) = {sigma2.mean():.4f}")
critic_error = critic_value - value  # (50,)
lag = critic_error.mean()
corr = torch.corrcoef(torch.stack([value, critic_value]))[0, 1]
print(f"critic V_phi(s_0): mean error {lag:+.4f}, corr with V {corr:.3f}, MSE {critic_error.pow(2).mean():.4f}"
      f" = lag^2 {lag**2:.4f} + rest {critic_error.var(unbiased=False):.4f}")
assert torch.allclose(probs.sum(1), torch.ones(50, dtype=probs.dtype)) and torch.equal(probs, all_probs[subset])
assert torch.allclose(sigma2, value * (1 - value))  # Bernoulli
assert critic_error.var(unbiased=False) > 5 * lag**2  # most of the critic's error is per prompt, not lag

# %% [markdown]
# **PAD and BOS.** The policy samples from the whole vocabulary, PAD and BOS included, and `rollout` decodes with
# `decode_completions` (the tokens up to the first EOS, special tokens dropped), so the answer with a PAD or BOS
# inserted also scores 1, and $V(x)$ above leaves those completions out. How much: one completion of every prompt
# from the iteration-20 policy and from the SFT model (where every run starts, notebook 05 §6.1), the special
# tokens before each first EOS counted (after it the mask hides them), and an upper bound on the
# probability $V(x)$ leaves out (`special_token_bound`: the chance of drawing PAD or BOS while still on the
# answer's path, summed over its positions). Notebook 05 §4 and §6.5 reuse these completions.

# %%
enc = tokenizer(every, padding_side="left")
sft_model = grpo_fixed.TinyLM.from_pretrained(task.checkpoint).eval()  # the SFT checkpoint: iteration 0
samples, left_out = {}, {}
for name, model in (("iteration 20", policy20), ("SFT model", sft_model)):
    with torch.no_grad():
        samples[name] = grpo_fixed.generate(model, tokenizer, enc["input_ids"], enc["attention_mask"],
                                            task.max_completion_length, T_SAMPLE,
                                            torch.Generator().manual_seed(0))  # completions, mask, ... (2500, T)
    completions, mask = samples[name][:2]
    special = torch.isin(completions, torch.tensor([tokenizer.pad_token_id, tokenizer.bos_token_id])) & mask
    left_out[name] = nb05_critic.special_token_bound(model, tokenizer, every, T_SAMPLE)  # (2500,)
    print(f"{name:12s}: PAD or BOS sampled {int(special.sum())} times among {int(mask.sum())} completion tokens; "
          f"probability V(x) leaves out <= {left_out[name].max():.4f} on any prompt "
          f"({left_out[name].mean():.4f} on average)")
    assert special.sum() == 0 and left_out[name].max() < 0.01
assert [f"{left_out[name].max():.4f}" for name in samples] == ["0.0085", "0.0018"]  # prose
assert f"{left_out['iteration 20'].mean():.4f}" == "0.0008"  # prose

# %% [markdown]
# Neither model drew a PAD or BOS in its 2500 completions, and the probability $V(x)$ leaves out is at most 0.0085
# on any prompt at iteration 20 (0.0008 on average) and 0.0018 for the SFT model: "one completion" holds up to
# that, an error in $V(x)$ whose square (below $10^{-4}$) is far below the baselines' errors measured next.

# %% [markdown]
# The baselines compared: none, the group mean and leave-one-out (notebook 05 §1), the critic's $V_\phi(s_0)$,
# and B9's. Bug B9 reshapes the prompt-major rewards `view(G, B)` instead of `view(B, G)`, so each "group" is a
# row of $B$ consecutive rewards (notebook 01 §10). As code, and on a tiny batch of graded rewards
# (multiples of 1/3, a partial-credit reward: with AdditionTask's binary rewards no sign can flip, since a
# success is never below a mean of rewards nor a failure above one), $B = 4$ prompts $\times$ $G = 2$, next to
# the twins' own
# `batch_advantages`, fixed and B9:

# %%
def wrong_axis_baseline(rewards, G):
    """The mean that B9 subtracts: rewards (..., B*G) viewed as (..., G, B), each row of B consecutive
    rewards averaged, so a "group" spans parts of several prompts unless B divides G. -> (..., B*G)"""
    rows = rewards.unflatten(-1, (G, -1))  # (..., G, B): the buggy view
    return rows.mean(-1, keepdim=True).expand_as(rows).flatten(-2)


third = 1 / 3
rewards = torch.tensor([1.0, 2 * third, third, 0.0, 1.0, 1.0, third, 2 * third])  # (B*G,) prompt-major, B=4, G=2
adv_fixed, adv_b9 = grpo_fixed.batch_advantages(rewards, 2), B9.batch_advantages(rewards, 2)  # (B*G,)
print("true groups (B, G):", [[f"{r:.2f}" for r in row] for row in rewards.view(4, 2).tolist()])
print("B9 rows (G, B)    :", [[f"{r:.2f}" for r in row] for row in rewards.view(2, 4).tolist()])
print("baseline fixed:", [f"{b:.2f}" for b in group_mean_baseline(rewards, 2)])
print("baseline B9   :", [f"{b:.2f}" for b in wrong_axis_baseline(rewards, 2)])
print("adv fixed:", [f"{a:+.2f}" for a in adv_fixed])
print("adv B9   :", [f"{a:+.2f}" for a in adv_b9])
flips = ((adv_b9.sign() != adv_fixed.sign()) & (adv_fixed != 0)).nonzero().flatten().tolist()
prompt_mean = {name: adv.view(4, 2).mean(1).abs().max().item() for name, adv in (("fixed", adv_fixed), ("B9", adv_b9))}
print(f"sign flips at samples {flips};  adv_group_mean: fixed {prompt_mean['fixed']:.2f}, B9 {prompt_mean['B9']:.2f} "
      f"(healthy {grpo_support.STATS['adv_group_mean'].lo:g} .. {grpo_support.STATS['adv_group_mean'].hi:g})")
rows = (rewards - wrong_axis_baseline(rewards, 2)).double().view(2, 4)  # (G, B): centred on the wrong rows
assert torch.allclose(torch.cat([std_normalised(row) for row in rows]).float(), adv_b9, atol=1e-6)  # B9 exactly
assert flips == [1, 2, 7] and (adv_fixed[4:6] == 0).all() and (adv_b9[4:6] > 0).all()
assert grpo_fixed.in_range({"adv_group_mean": prompt_mean["fixed"]}, "adv_group_mean")
assert not grpo_fixed.in_range({"adv_group_mean": prompt_mean["B9"]}, "adv_group_mean")

# %% [markdown]
# Row 0 of the buggy view holds prompts 0 and 1, row 1 prompts 2 and 3. Prompt 0's worse answer (0.67, below
# its own mean 0.83) is above the row mean 0.50, and prompt 1's better answer (0.33) is below it: both signs
# flip. Prompt 2 was solved twice, no signal in the fixed twin, yet B9 pushes both answers up because prompt 3
# in its row did worse; and prompt 3's better answer (0.67) is pushed down. A sample's advantage now depends on
# which prompt happens to share its row, and per prompt the advantages no longer average to 0, which the
# logged `adv_group_mean` catches.
#
# That is B9 per sample. On average the update barely moves, as notebook 01 §10.2 measures (the mean update
# points the same way as the correct one, and one batch's noise is no larger at $B = 2G$): within one prompt the
# B9 advantage is the correct one rescaled plus an offset shared by the prompt's samples, and the offset
# multiplies $\sum_i \nabla\log\pi(o_i)$, whose mean is 0 (apart from $r_i$'s own share of its row); the rescale
# re-weights prompts against each other, a smaller bias.
# Whether the centring check can see it depends only on the shapes: a row of $B$ consecutive samples stays
# inside one prompt's group exactly when **$B$ divides $G$** (notebook 01 §10.1). Then every row is a slice of
# one group, each slice is centred, the check stays silent, and at $B = G$ the advantages are even exactly
# right. Now the experiment, with exact $V(x)$ and $B = 16$:

# %%
Gs = list(range(2, 33))
baselines = {
    "no baseline": lambda r, G, slots: torch.zeros_like(r),
    "group mean": lambda r, G, slots: group_mean_baseline(r, G),
    "leave-one-out": lambda r, G, slots: leave_one_out_baseline(r, G),
    "critic": lambda r, G, slots: critic_value[slots],
    "B9 wrong axis": lambda r, G, slots: wrong_axis_baseline(r, G),
}
errors = nb05_critic.baseline_experiment(probs, outcome_rewards, Gs, baselines, B=16, repeats=400,
                                         no_reset={"no reset": baselines["group mean"]})
names = ["no baseline", "group mean", "leave-one-out", "critic", "B9 wrong axis", "no reset"]
print("  G  " + "".join(f"{n:>15s}" for n in names) + "   sigma^2/G")
for G in (2, 4, 8, 16, 32):
    print(f"{G:3d}  " + "".join(f"{errors[G][n]['mse']:15.4f}" for n in names) + f"   {sigma2.mean() / G:9.4f}")
mse = {n: torch.tensor([errors[G][n]["mse"] for G in Gs]) for n in names}  # (len(Gs),) each
first_better = next(G for G in Gs if errors[G]["group mean"]["mse"] < errors[G]["critic"]["mse"])
print(f"the group mean beats the critic from G = {first_better} on;  B9 bias^2 at G = 16: "
      f"{errors[16]['B9 wrong axis']['bias2']:.5f}, at G = 32: {errors[32]['B9 wrong axis']['bias2']:.5f}")
B9_AT_2 = sigma2.mean() / 16 + 7 / 8 * value.var(unbiased=False)  # 16 rewards of 8 prompts, one of them x's own
print(f"B9 at G = 2: measured MSE {errors[2]['B9 wrong axis']['mse']:.4f}, predicted "
      f"E sigma^2 / 16 + 7/8 Var_x V = {B9_AT_2:.4f}")
later = [G for G in Gs if G > first_better]
assert first_better == 7 and all(errors[G]["group mean"]["mse"] < errors[G]["critic"]["mse"] for G in later)
assert all(errors[G]["leave-one-out"]["mse"] > errors[G]["group mean"]["mse"] for G in (2, 3, 4))
assert all(abs(errors[G]["no baseline"]["mse"] / value.pow(2).mean() - 1) < 0.05 for G in Gs)  # E[V^2]
var_v = value.var(unbiased=False).item()
assert abs(errors[2]["B9 wrong axis"]["mse"] / B9_AT_2 - 1) < 0.05  # G = 2: B9 is nearly a batch-mean baseline
assert all(abs(errors[G]["group mean"]["mse"] / (sigma2.mean() / G) - 1) < 0.15 for G in Gs)  # sigma^2 / G
assert mse["critic"].max() / mse["critic"].min() < 1.1  # flat in G
assert all(errors[G]["critic"]["bias2"] / errors[G]["critic"]["mse"] > 0.95 for G in Gs)  # all of it bias
assert all(errors[16]["B9 wrong axis"][k] == errors[16]["group mean"][k] for k in ("mse", "bias2"))  # B = G: same
floor = errors[16]["group mean"]["bias2"]  # the bias^2 estimate of an unbiased 16-sample mean: sampling noise
assert errors[32]["B9 wrong axis"]["bias2"] < 2 * floor  # B divides G: no bias
assert all(errors[G]["B9 wrong axis"]["bias2"] > 10 * errors[G]["group mean"]["bias2"] for G in (4, 8))
assert abs(errors[32]["B9 wrong axis"]["mse"] / (sigma2.mean() / 16) - 1) < 0.15  # half a group: 16 samples
quoted = {"B9 at G=2": (errors[2]["B9 wrong axis"]["mse"], 0.0480), "predicted": (B9_AT_2, 0.0472),
          "sigma^2/2": (sigma2.mean() / 2, 0.1049), "group mean at G=2": (errors[2]["group mean"]["mse"], 0.1028),
          "lag": (lag, -0.0244), "corr": (corr, 0.462)}
assert all(abs(x - q) < 6e-4 if name == "corr" else abs(x - q) < 6e-5 for name, (x, q) in quoted.items())  # prose

# %% [markdown]
# Reading the table (MSE of the baseline as an estimate of $V(x)$):
#
# * **group mean** follows $\mathbb{E}_x\sigma^2(x)/G$ (last column): pure variance, no bias.
#   **Leave-one-out** has variance $\sigma^2/(G-1)$, larger at small $G$, but no correlation with $r_i$.
# * **critic** is flat in $G$: its error is bias. The first cell of this section splits it: its mean error (where
#   a lag behind a policy that keeps improving would show) is small, $-0.0244$; most of it is per prompt:
#   $V_\phi(s_0)$ correlates only 0.462 with the exact $V(x)$, the critic has not learned which sums this policy
#   gets right. From $G = 7$ on, the group mean is the better baseline here.
# * **no baseline** is flat at $\mathbb{E}[V^2]$: the advantage carries the whole value of the prompt.
# * **B9** averages a row of $B=16$ consecutive rewards. Where $B$ divides $G$ a row lies inside one group
#   and the bias is zero: at $G = 16 = B$ a row *is* one group, at $G = 32$ it is half of one (no bias, the
#   variance of a 16-sample mean). Otherwise a row spans other prompts: at the default $G = 8$ it holds two
#   prompts' groups (bias$^2$ in the slider check below).
# * **no reset** is a group whose $G$ samples start from different states (notebook 05 §6.6).
#
# The slider shows the B9 bias prompt by prompt: each point is one prompt, its mean baseline $\pm$ one std
# against the exact $V(x)$. On the diagonal the baseline estimates the prompt's own value.

# %%
per_prompt = nb05_critic.PerPromptFigure(value, critic_value, B=16,
                                         fit=[errors[G][n] for G in Gs for n in ("B9 wrong axis", "group mean")])


def update_baselines(G):
    """Move both panels to group size G; -> (MSE, bias^2) of B9, the group mean and the critic."""
    s = errors[G]
    per_prompt.update(G, s["B9 wrong axis"], s["group mean"])
    return {n: (s[n]["mse"], s[n]["bias2"]) for n in ("B9 wrong axis", "group mean", "critic")}


w_baselines = live_plot(per_prompt.fig, update_baselines, G=slider(8, 2, 32, 1, "G", integer=True))

# %% tags=["nbval-ignore-output"]
display(w_baselines)

# %%
for G in (4, 16, 32, 8):
    result = probe(w_baselines, {"G": G})
    print(f"G={G:2d}: " + ", ".join(f"{n} MSE {m:.4f} (bias^2 {b:.4f})" for n, (m, b) in result.items()))
    assert result["B9 wrong axis"] == (errors[G]["B9 wrong axis"]["mse"], errors[G]["B9 wrong axis"]["bias2"])
assert w_baselines.values() == {"G": 8}  # the slider is back at its default

# %% [markdown]
# All baselines against $G$ (solid: MSE of each baseline as an estimate of $V(x)$).

# %%
fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
nb05_critic.plot_errors_vs_G(ax, errors, {"no baseline": "#8c564b", "group mean": plots.FIXED,
                                          "leave-one-out": "#17becf", "critic": plots.REFERENCE,
                                          "B9 wrong axis": plots.BUGGY, "no reset": "#9467bd"})
ax.set_title("error of the baseline as an estimate of V(x)")
plt.show()

# %% [markdown]
# > **You should know.** The group mean trades bias for variance: an unbiased estimate of $V(x)$ with error
# > $\sigma^2/G$. A critic trades variance for bias: no sampling noise in $b$, but an approximation error and a
# > lag that no $G$ fixes. B9's baseline is a biased estimate of $V(x)$ whenever $B$ does not divide $G$; in
# > the update that bias shows up per sample (flipped signs with graded rewards, signal in groups that have
# > none), while the average update barely moves (notebook 01 §10.2).
# >
# > **B9 in the catalog.** *Symptom:* the reward curve looks plausible, a little slower or noisier.
# > *Statistic:* `adv_group_mean` above its healthy range whenever $B$ does not divide $G$; invisible to it
# > when $B$ divides $G$ (exact at $B = G$). *Fix:* `rewards.view(B, G)  # (B, G)`, tested with a $B$ that does
# > not divide $G$.
#
# <details><summary>Answer: at G = 2, B9 has a <em>lower</em> MSE than the correct group mean. Is it better?</summary>
#
# At $G=2$ the B9 row averages 16 rewards from 8 prompts: nearly a batch-mean baseline, whose error (0.0480)
# is close to $\mathbb{E}\sigma^2/16 + \frac78\text{Var}_x V = 0.0472$ (the row's sampling noise, plus the other 7
# prompts' values), below the two-sample mean's $\mathbb{E}\sigma^2/2$ (0.1049; measured 0.1028).
# So at tiny $G$ a batch-wide baseline can beat the per-prompt one (the small-$G$ failure, notebook 05 §6.2).
# But B9 also normalises by the std of the wrong row and gives whole rows zero advantage when they happen to
# be constant, and it is only right by accident. The fix is the right axis, plus a larger $G$ or RLOO.
# </details>

# %% [markdown]
# ## 4. Learning curves: group baseline vs critic vs no baseline
#
# **Question.** Does the baseline matter for learning speed on the toy task?
#
# The three runs of notebook 05 §2. One seed each: a gap between two curves is not evidence about the methods
# without more seeds. Right: the fraction of the group run's groups with zero reward variance; it stays low
# (printed below), since the SFT model gets every prompt right about 3 times in 10 (notebook 05 §6.1), and would
# rise as prompts get solved.

# %%
fig, (ax_r, ax_z) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
colors = {"group": plots.FIXED, "critic": plots.REFERENCE, "none": "#8c564b"}
plots.curves(ax_r, runs, "reward", colors=colors)
plots.curves(ax_z, {"group": runs["group"]}, "zero_var_groups", colors=colors)
for ax in (ax_r, ax_z):
    ax.get_legend().remove()  # one legend for both panels, outside them: the curves fill the axes
fig.legend(*ax_r.get_legend_handles_labels(), loc="outside right upper", fontsize="small")
plt.show()
for name, h in runs.items():
    print(f"{name:6s}: reward at iteration 10 {h[10]['reward']:.3f}, 20 {h[20]['reward']:.3f}, "
          f"mean of the last 10 {final[name]:.3f}")
start = {name: sum(s["reward"] for s in h[:5]) / 5 for name, h in runs.items()}
spread = max(final.values()) - min(final.values())
print(f"mean of the first 5 iterations: {', '.join(f'{k} {v:.3f}' for k, v in start.items())}; "
      f"the last-10 means span {spread:.3f}")
zero = [s["zero_var_groups"] for s in runs["group"]]
print(f"group run, zero-variance groups: mean {sum(zero) / len(zero):.3f}, max {max(zero):.3f}")
ev = [s["explained_variance"] for s in runs["critic"]]
print(f"critic explained variance: mean {sum(ev) / len(ev):.3f}, max {max(ev):.3f}")
assert all(final[name] > start[name] + 0.05 for name in runs)  # all three learn
assert spread < 0.04  # within one seed's noise of each other
assert max(zero) < 0.3  # prose: stays low
assert abs(sum(ev) / len(ev)) < 0.1 and max(ev) < 0.1  # the critic explains about nothing

# %% [markdown]
# All three runs learn, and on this seed they end within 0.04 of each other (mean of the last 10
# iterations), no baseline included. The runs differ in more than the baseline, though: `group` divides each
# group by its own std (a per-prompt weight, $c(p, G)$ of notebook 05 §6.3), `critic` divides its per-token
# advantages by one batch std and `none` its rewards by another, so their expected updates differ too, by
# per-prompt weights and a batch-level scale. A baseline that depends only on the state changes the *variance*
# of the gradient, not its expectation (REINFORCE with rewards in $\{0, 1\}$ is unbiased up to that batch
# scale), and 30 short iterations of one seed resolve neither kind of difference.
#
# The critic's explained variance (1 = it predicts every realised return up to one constant offset, 0 = no
# better than the best constant, < 0 = worse than it) hovers around 0, never above 0.1. Is that all a value
# function can do on a coin-flip reward? The exact values answer it: `exact_state_values` gives $V(s_t)$ at every
# state of the completions sampled in notebook 05 §3 (the chance the rest comes out right while the prefix is the
# answer's, 0 after a wrong token). With $\lambda = 1$ every token's return is the reward $r$; explained variance
# of those returns by the exact values and by the iteration-20 critic, over all states, at the prompt state
# $s_0$ only, and at the later ones:

# %%
critic_steps = SNAPSHOT * grpo_fixed.make_config(**RUN).inner_epochs * grpo_fixed.make_config(**RUN).minibatches
scored = {}  # (model, values) -> explained variance over (all, s_0, later) states
for name, model in (("SFT model", sft_model), ("iteration 20", policy20)):
    completions, mask = samples[name][:2]  # (2500, T) each
    r = task.reward(every, grpo_fixed.decode_completions(tokenizer, completions, mask)).double()  # (2500,)
    returns = r[:, None].expand(mask.shape)  # (2500, T): lambda = 1, gamma = 1
    first = mask & (torch.arange(mask.shape[1]) == 0)  # (2500, T): s_0, the prompt state
    values = {"exact V(s_t)": nb05_critic.exact_state_values(model, tokenizer, every, completions, mask, T_SAMPLE)}
    if name == "iteration 20":
        with torch.no_grad():
            values["critic V_phi(s_t)"] = nb05_critic.state_values(critic20, enc["input_ids"], enc["attention_mask"],
                                                                   completions, mask).double()  # (2500, T)
        exact20, critic_v, mask20, returns20 = values["exact V(s_t)"], values["critic V_phi(s_t)"], mask, returns
    for kind, v in values.items():
        scored[name, kind] = [explained_variance(v, returns, m) for m in (mask, first, mask & ~first)]
print(f"{'explained variance of the return':45s}   all states   s_0   later states")
for (name, kind), (every_state, at_s0, later) in scored.items():
    print(f"{name + ', ' + kind:45s}   {every_state:10.3f}  {at_s0:5.3f}  {later:12.3f}")
wrong = mask20 & (exact20 == 0) & (returns20 == 0)  # (2500, T): states after a wrong token, value exactly 0
sq_error = (critic_v - exact20).pow(2)  # (2500, T)
wrong_share = (sq_error[wrong].sum() / sq_error[mask20].sum()).item()
print(f"iteration-20 critic after {critic_steps} optimizer steps: on the {int(wrong.sum())} states after a wrong "
      f"token (exact value 0) it predicts {critic_v[wrong].mean():.2f} on average, {wrong_share:.0%} of its squared "
      f"error against the exact values; std of its values {critic_v[mask20].std():.2f}, of the exact ones "
      f"{exact20[mask20].std():.2f}")
exact_sft, exact_20, critic_ev = scored["SFT model", "exact V(s_t)"], scored["iteration 20", "exact V(s_t)"], \
    scored["iteration 20", "critic V_phi(s_t)"]
assert [f"{x:.3f}" for x in exact_sft[:2]] == ["0.405", "0.017"] and [f"{x:.3f}" for x in exact_20[:2]] == [
    "0.555", "0.237"]  # prose
assert critic_ev[0] < 0.1 < exact_sft[0] / 3 and exact_sft[2] > exact_sft[0] > exact_sft[1]  # later states settle it
assert f"{critic_v[wrong].mean():.2f}" == "0.50" and f"{wrong_share:.0%}" == "44%" and critic_steps == 80  # prose
assert f"{critic_v[mask20].std():.2f}" == "0.10" and f"{exact20[mask20].std():.2f}" == "0.37"  # prose

# %% [markdown]
# The near-zero score is the critic's, not the task's. At the prompt state the outcome is mostly the coin flip: the
# exact $V(x)$ explains 0.017 of the return variance on the SFT model's samples (0.237 at iteration 20, where the
# prompts' values spread further). But each generated digit settles much of it (a wrong digit makes the value
# exactly 0), so over all states the exact values explain 0.405 and 0.555. The iteration-20 critic, after 80
# optimizer steps, scores near 0 on the same samples: on states after a wrong token, whose value is 0, it predicts
# 0.50 on average (44% of its squared error), and its values barely vary (std 0.10 against the exact values'
# 0.37). It has not learned what a mistake does. Explained variance is also blind to a constant offset, so a
# critic that lags behind the policy by a fixed amount does not show here; its mean error in notebook 05 §3 does.
#
# ## 5. Compute and memory per iteration
#
# **Question.** What does the critic cost, counted rather than timed?
#
# A forward hook on each network (policy, frozen reference, critic: `register_forward_hook` on the instance)
# counts calls and rows (sequences) during one iteration of each variant; a call with gradients enabled is
# followed by exactly one backward.

# %%
cfg = grpo_fixed.make_config(**RUN)
passes = {name: nb05_critic.count_passes(baseline=name, critic_fns=CRITIC_FNS, **RUN) for name in ("group", "critic")}
for name, counts in passes.items():
    print(f"{name}:")
    for (net, kind), (calls, rows) in counts.items():
        print(f"    {net:9s} {kind:16s} {calls:2d} calls, {rows:4d} rows")
policy_params = nb05_critic.parameter_count(grpo_fixed.TinyLM.from_pretrained(task.checkpoint))
critic_params = nb05_critic.parameter_count(nb05_critic.make_critic(task))  # + the scalar head
# trained network: weights + grads + Adam's two moments = 4 copies; frozen reference: weights only
print(f"parameters: policy {policy_params}, critic {critic_params}, reference {policy_params}")
print(f"floats held for parameters: group {4 * policy_params + policy_params}, "
      f"critic {4 * policy_params + policy_params + 4 * critic_params} "
      f"({(5 * policy_params + 4 * critic_params) / (5 * policy_params):.2f}x)")
N, steps = cfg.prompts_per_batch * cfg.group_size, cfg.inner_epochs * cfg.minibatches
extra = {key: value for key, value in passes["critic"].items() if key not in passes["group"]}
assert all(passes["critic"][key] == value for key, value in passes["group"].items())  # same policy passes
T = task.max_completion_length
assert passes["group"][("policy", "forward")] == (T + 2, (T + 2) * N)  # prompt, T cached steps, old log-probs
assert critic_params == policy_params + grpo_fixed.TinyLM.from_pretrained(task.checkpoint).config.d_model + 1
assert 1.5 < (5 * policy_params + 4 * critic_params) / (5 * policy_params) < 2  # almost doubles
assert extra == {("critic", "forward"): (1, N), ("critic", "forward+backward"): (steps, cfg.inner_epochs * N)}

# %% [markdown]
# Per iteration ($B=8$ prompts, $G=8$, 64 sequences), both variants generate the same 64 completions
# ($T + 2 = 7$ policy forwards: the left-padded prompts, then one per generated token with the KV cache, the
# last one's output unused, then one over prompt + completion to cache the old log-probs; one reference
# forward) and
# run 4 minibatch forward+backward passes of the policy (2 inner epochs $\times$ 2 minibatches = 2 full-batch
# equivalents). The critic adds 1 forward over the batch (values for GAE) and 4 minibatch forward+backward
# passes, and almost doubles the floats held for parameters, gradients and Adam state.
# In PPO for LLMs the critic is a second LM, often of the policy's size: that is the memory GRPO saves. GRPO pays
# instead with $G$ samples per prompt (autoregressive generation is often the largest share of an LLM RL step), and
# PPO could use $G=1$.
# Timing on this 2-core CPU machine (not compared by the tests):

# %% tags=["nbval-ignore-output"]
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
# solved prompts ($p \to 1$, late training; the short runs of notebook 05 §4 stay far from it), and it only falls like
# $(1-p)^G \approx e^{-pG}$: a prompt with $p = 0.02$ needs $G \approx 50$ to give signal two times in three.
# Measured on AdditionTask with the SFT model (the start of every run; exact per-prompt $p(x) = V(x)$ for all
# 2500 prompts as in notebook 05 §3; 200 prompts per rollout):

# %%
sft, sft_ref, _, _, _ = grpo_fixed.setup_run(task, grpo_fixed.make_config(), seed=0)
p_x = nb05_critic.exact_outcomes(sft, tokenizer, every, T_SAMPLE)[0][:, 1]  # (2500,) exact success probability
quartiles = torch.quantile(p_x, torch.tensor([0.1, 0.5, 0.9], dtype=p_x.dtype)).tolist()
print(f"p(x): mean {p_x.mean():.3f}, 10/50/90% quantiles {quartiles[0]:.3f} / {quartiles[1]:.3f} / "
      f"{quartiles[2]:.3f}, min {p_x.min():.3f}, max {p_x.max():.3f}")
measured, predicted = {}, {}
for G in (2, 4, 8, 16):
    _, stats = grpo_fixed.rollout(sft, sft_ref, tokenizer, task,
                                  grpo_fixed.make_config(prompts_per_batch=200, group_size=G),
                                  torch.Generator().manual_seed(G))
    measured[G], predicted[G] = stats["zero_var_groups"], (p_x**G + (1 - p_x) ** G).mean().item()
    print(f"G={G:2d}: zero-variance groups measured {measured[G]:.3f}, "
          f"predicted E_x[p^G + (1-p)^G] = {predicted[G]:.3f}")
print(f"p = 0.02, G = 50: P(the group has signal) = 1 - 0.98^50 - 0.02^50 = {1 - 0.98**50 - 0.02**50:.3f}")
assert all(abs(measured[G] - predicted[G]) < 0.05 for G in measured)  # 200 groups: within ~2.5 binomial std
assert abs(1 - 0.98**50 - 0.02**50 - 2 / 3) < 0.05  # two times in three
assert 0.2 < quartiles[0] and quartiles[2] < 0.4 and abs(p_x.mean() - 0.304) < 5e-4  # every prompt near 0.3

# %%
fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
grid = torch.linspace(0, 1, 201, dtype=torch.float64)
for G, shade in zip((2, 4, 8, 16, 32), (0.85, 0.7, 0.55, 0.4, 0.2), strict=True):
    ax.plot(grid, grid**G + (1 - grid) ** G, color=str(shade * 0.8), label=f"G={G}")
    if G in measured:
        ax.plot([p_x.mean()], [measured[G]], "o", color=plots.BUGGY, ms=4)
ax.set_xlabel("success probability p of the prompt")
ax.set_ylabel("P(group has zero variance)")
ax.set_title("binary reward: p^G + (1-p)^G; dots: measured on AdditionTask, SFT model")
ax.legend(fontsize="small", ncol=5)
plt.show()

# %% [markdown]
# With bug B2 (no $\epsilon$ in the std) a constant group is $0/0$: NaN advantages. One NaN makes the
# minibatch loss NaN, and both twins' `optimizer_step` then skip the step; the minibatches are random subsets of
# the batch's rows, so one constant group's NaNs reach every minibatch of the iteration. How much that costs
# depends on $z$: on AdditionTask from the SFT model a batch of 8 groups holds a constant one with probability
# $1 - (1 - z)^8$; on a hard task (`SparseMatchTask`: "4=" -> "5", from a fresh TinyLM, start reward 0.007)
# almost every group is constant. Tiny input first, then 24 iterations of each task and twin (the harness of
# notebook 05 §2 with `module=B2`, the hybrid with only B2 switched on; 8 prompts per batch on AdditionTask, 16
# on the sparse task):

# %%
constant = [0.0, 0.0, 0.0, 0.0]
print("buggy group_advantage", B2.group_advantage(constant).tolist(),
      " fixed", grpo_fixed.group_advantage(constant).tolist())
sparse = SparseMatchTask()
with progress("training B2 and the fixed twin on two tasks"):
    b2_runs = {(task_name, name): nb05_critic.train_with_baseline(t, module=m, steps=24, prompts_per_batch=b)[0]
               for task_name, t, b in (("addition", task, 8), ("sparse", sparse, 16))
               for name, m in (("buggy", B2), ("fixed", grpo_fixed))}
sparse_runs = {name: b2_runs["sparse", name] for name in ("buggy", "fixed")}
late, skipped, nan_batches = {}, {}, {}
for key, h in b2_runs.items():
    skipped[key], late[key] = sum(s["nonfinite_steps"] for s in h), final_reward(h)
    nan_batches[key] = sum(s["adv_nonfinite"] > 0 for s in h)
    zero = sum(s["zero_var_groups"] for s in h) / len(h)
    print(f"{key[0]:8s} {key[1]:5s}: skipped {skipped[key]:2d} of {4 * len(h)} inner steps; NaN advantages in "
          f"{nan_batches[key]:2d} of {len(h)} batches; zero-variance groups {zero:.3f}; "
          f"mean reward last 10 {late[key]:.3f}")
print("AdditionTask, G = 8: P(a batch of 8 groups holds a constant one) = 1 - (1 - z)^8 = "
      f"{1 - (1 - predicted[8]) ** 8:.3f}")
assert all(skipped[key] == 4 * nan_batches[key] for key in b2_runs)  # a NaN group skips all 4 inner steps
assert skipped["addition", "fixed"] == skipped["sparse", "fixed"] == 0
assert abs(nan_batches["addition", "buggy"] / 24 - (1 - (1 - predicted[8]) ** 8)) < 0.15
assert skipped["sparse", "buggy"] == 96 and late["sparse", "fixed"] > 3 * late["sparse", "buggy"]  # never updates
assert (skipped["addition", "buggy"], nan_batches["addition", "buggy"]) == (40, 10)  # prose
assert all(abs(late[k] - q) < 6e-4 for k, q in zip(b2_runs, (0.425, 0.408, 0.005, 0.037), strict=True))  # prose
sparse_zero = sum(s["zero_var_groups"] for s in b2_runs["sparse", "fixed"]) / 24
assert abs(sparse_zero - 0.852) < 6e-4  # prose (self-check answer 3)

# %%
fig, axes = plots.buggy_vs_fixed("SparseMatchTask: B2 turns zero-variance groups into skipped steps",
                                 figsize=(9, 3.2))
for ax, (name, h) in zip(axes, sparse_runs.items(), strict=True):
    ax.plot([s["reward"] for s in h], color=plots.BUGGY if name == "buggy" else plots.FIXED, label="reward")
    ax.plot([s["zero_var_groups"] for s in h], color=plots.REFERENCE, ls="--", label="zero-variance groups")
    ax.plot([s["nonfinite_steps"] / 4 for s in h], ":", color="k", label="skipped inner steps / 4")
    ax.set_xlabel("iteration")
    ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# On AdditionTask B2 skipped 40 of 96 inner steps (every step of 10 of the 24 iterations) and still ended at
# 0.425 against the fixed twin's 0.408: the steps it takes are the fixed twin's, it only takes fewer, and one
# seed of 24 iterations does not show the loss. On the sparse task it never updates at all (0.005 against 0.037),
# and nothing in the reward curve says why; the logged `nonfinite_steps` does.
#
# A critic keeps signal where the group has none: if all 8 samples of a prompt succeed and the critic
# expected 0.9, every sample gets $A = +0.1$ ("better than expected"), while GRPO gives 0:

# %%
solved = torch.ones(8)
print("group:", grpo_fixed.group_advantage(solved.tolist()).tolist(), " critic (V_phi = 0.9):",
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
# so they dilute the other groups' per-token weight (notebook 05 §6.4).
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
pairs = {tuple(pair): grpo_fixed.group_advantage(pair).tolist() for pair in ([0.0, 1.0], [0.50, 0.51], [0.0, 0.01])}
for pair, adv in pairs.items():
    print(f"group_advantage({list(pair)}) = {[round(a, 4) for a in adv]}")
print("  G  (G-1)/G  z(p=0.1)  z(p=0.5)  MSE group mean  MSE batch-mean-like (B9)")
for G in (2, 3, 4, 8, 16):
    print(f"{G:3d}  {(G - 1) / G:7.3f}  {0.1**G + 0.9**G:8.3f}  {2 * 0.5**G:8.3f}"
          f"  {errors[G]['group mean']['mse']:14.4f}  {errors[G]['B9 wrong axis']['mse']:24.4f}")
assert all(abs(abs(a) - 1) < 1e-5 for adv in pairs.values() for a in adv)  # always +-1 (up to eps)
assert errors[2]["B9 wrong axis"]["mse"] < errors[2]["group mean"]["mse"]

# %% [markdown]
# A reward difference of 0.01 (say, reward-model noise) gets the same advantage as a full success vs
# failure. At $G = 2$ on this snapshot even the accidental batch-wide mean of B9 estimates $V(x)$ better
# than the group (0.0480 vs 0.1028). The fixes: a larger $G$, or a baseline that pools across prompts on
# purpose (a critic).
#
# ### 6.3 Std normalisation re-weights prompts (Dr. GRPO)
#
# **Question.** What does dividing by the group std do to the weight of each prompt?
#
# For binary rewards with $k$ successes out of $G$, $\bar r = k/G$ and $\text{std} = \sqrt{\bar r(1-\bar r)}$.
# Within one realised group, dividing by that std multiplies every advantage by $1/\text{std}$: groups with a
# small std (nearly all solved or nearly all failed) are **up-weighted**. Tiny inputs, $G = 8$, the twins'
# `group_advantage`:

# %%
print(" k   std     A(success)  A(fail)   sum|A| with std   sum|A| without   ratio")
for k in range(1, 8):
    r = [1.0] * k + [0.0] * (8 - k)
    with_std = grpo_fixed.group_advantage(r)  # (G,)
    without = torch.tensor(r) - k / 8  # (G,)
    std = (k / 8 * (1 - k / 8)) ** 0.5
    ratio = (with_std.abs().sum() / without.abs().sum()).item()
    print(f"{k:2d}  {std:.4f}  {with_std[0]:10.4f}  {with_std[-1]:8.4f}  {with_std.abs().sum():16.4f}"
          f"  {without.abs().sum():15.4f}  {ratio:6.3f}")
    assert abs(ratio - 1 / std) < 1e-6
for group in ([0.50, 0.51, 0.50, 0.51], [0.0, 1.0, 0.0, 1.0]):
    print(f"group {group} -> {[round(a, 4) for a in grpo_fixed.group_advantage(group).tolist()]}")

# %% [markdown]
# The last column is $1/\text{std}$ of that group: the group with 1 success in 8 gets $1/0.3307 = 3.02$ times
# its unnormalised weight, the balanced group 2. Without std, the total weight $\sum|A| = 2G\,\bar r(1-\bar r)$
# is largest for balanced groups. And a group whose rewards differ by 0.01 gets the same $\pm 1$ as a group
# that differs by 1: std normalisation amplifies noise in near-constant groups.
#
# **The expected gradient of a prompt is not $\nabla V(x)/\sigma(x)$ at finite $G$.** That formula replaces the
# sample std by the true $\sigma(x) = \sqrt{p(1-p)}$, which holds only as $G$ grows. Exactly: with binary
# rewards $a(v) = \mathbb{E}[A_i \mid r_i = v]$ has two values, and by notebook 05 §1
#
# $$\mathbb{E}\Big[\tfrac1G\textstyle\sum_i A_i\nabla\log\pi(o_i)\Big] = \big(a(1) - a(0)\big)\,\nabla p
#   = c(p, G)\,\nabla V(x), \qquad c(p, G) = \frac{\mathbb{E}[A_i\,\mathbb{1}\{r_i = 1\}]}{p(1-p)}$$
#
# (the second form because $\mathbb{E}[A_i] = 0$: advantages sum to 0 in every group). $a(1)$ and $a(0)$ are
# binomial sums over the other $G-1$ rewards of the advantage the twins give a success or a failure in a
# group with $K$ successes (population std, $\epsilon$). As code, checked against all $2^8$ groups at $G = 8$:

# %%
@functools.cache
def binary_advantages(G, eps=1e-8):
    """The twins' advantage of a success and of a failure in a group with K successes, K = 0..G.
    -> success (G+1,), failure (G+1,) float64 (0 where no such sample exists)."""
    success = [grpo_fixed.group_advantage([1.0] * K + [0.0] * (G - K), eps)[0].item() if K > 0 else 0.0
               for K in range(G + 1)]
    failure = [grpo_fixed.group_advantage([1.0] * K + [0.0] * (G - K), eps)[-1].item() if K < G else 0.0
               for K in range(G + 1)]
    return torch.tensor(success, dtype=torch.float64), torch.tensor(failure, dtype=torch.float64)


def prompt_weight(p, G, eps=1e-8):
    """c(p, G) = a(1) - a(0): the expected update of a prompt with success probability p is c * grad p.
    a(1) = sum_k Bin(k; G-1, p) A_success(K = k+1), a(0) = sum_k Bin(k; G-1, p) A_failure(K = k). p (n,) -> (n,)"""
    success, failure = binary_advantages(G, eps)
    k = torch.arange(G, dtype=torch.float64)  # successes among the other G-1 samples
    others = torch.distributions.Binomial(G - 1, probs=p[:, None]).log_prob(k).exp()  # (n, G)
    return others @ success[1:] - others @ failure[:-1]


p_check = 0.25
groups = torch.tensor(list(itertools.product([0.0, 1.0], repeat=8)))  # (256, G): every binary group
chance = (p_check ** groups.sum(1)) * ((1 - p_check) ** (8 - groups.sum(1)))  # (256,)
adv_all = grpo_fixed.batch_advantages(groups.flatten(), 8).double().view(256, 8)  # (256, G), the twins
enumerated = (chance * adv_all[:, 0] * groups[:, 0]).sum() / (p_check * (1 - p_check))
binomial = prompt_weight(torch.tensor([p_check], dtype=torch.float64), 8)[0]
print(f"p = {p_check}, G = 8: c from all 256 groups {enumerated:.6f}, from the binomial sums {binomial:.6f}")
assert abs(enumerated - binomial) < 1e-6

# %%
ps = torch.tensor([0.02, 0.1, 0.25, 0.5], dtype=torch.float64)
table_G = (2, 8, 32, 128, 512)
weights = {G: prompt_weight(ps, G) for G in table_G}  # (len(ps),) each
inv_sigma = 1 / (ps * (1 - ps)).sqrt()
print("   p   1/sigma   " + "".join(f"  c(G={G:3d})" for G in table_G) + "   sqrt(G-1) at G = 8, 32")
for i, pv in enumerate(ps.tolist()):
    print(f"{pv:5.2f}  {inv_sigma[i]:7.4f}   " + "".join(f"  {weights[G][i]:9.4f}" for G in table_G)
          + f"   {math.sqrt(7):.4f}, {math.sqrt(31):.4f}")
gap = {G: (weights[G] - inv_sigma).abs() for G in table_G}  # (len(ps),)
assert all((gap[a] > gap[b]).all() for a, b in itertools.pairwise(table_G))  # approaches 1/sigma as G grows
assert ((weights[2] - 1).abs() < 1e-6).all() and (inv_sigma >= 2).all()  # G = 2: c = 1 for every p, not 1/sigma
assert ((gap[512] / inv_sigma) < 0.02).all()
assert weights[8][0] < 0.4 * inv_sigma[0]  # a hard prompt at G = 8: far below 1/sigma
p_grid = torch.linspace(0.005, 0.995, 199, dtype=torch.float64)
assert all((prompt_weight(p_grid, G) <= math.sqrt(G - 1) + 1e-9).all() for G in (2, 8, 32))  # capped

# %%
fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
ax.plot(p_grid, 1 / (p_grid * (1 - p_grid)).sqrt(), color="k", ls=":", label="1/sigma(x) (G -> infinity)")
for G, shade in zip((2, 8, 32, 128), (0.75, 0.55, 0.35, 0.15), strict=True):
    ax.plot(p_grid, prompt_weight(p_grid, G), color=str(shade), label=f"c(p, G={G})")
ax.set_yscale("log")
ax.set_xlabel("success probability p of the prompt")
ax.set_ylabel("expected update / grad V(x)")
ax.set_title("std-normalised group advantage: exact weight of a prompt, binary rewards")
ax.legend(fontsize="small", ncol=2)
plt.show()

# %% [markdown]
# At $G = 2$ the weight is exactly 1 for every prompt (a pair with one success always gets $\pm1$, whatever $p$):
# no re-weighting at all, where $1/\sigma$ would promise at least 2. At $G = 8$ a hard prompt ($p = 0.02$) gets
# 2.57, not 7.14: most of its groups are all-fail and give nothing. The weight approaches $1/\sigma(x)$ only as
# $G$ grows (within 2% at $G = 512$ for these $p$), and for a given $G$ it never exceeds $\sqrt{G-1}$, the
# advantage of the lone success in a group ($p \to 0$). So "std normalisation weights prompts by $1/\sigma$" is the
# large-$G$ picture; at the $G$ people use it up-weights hard and easy prompts by a factor bounded by $\sqrt{G-1}$.
# Dr. GRPO drops the division (keeps $r_i - \bar r$): the weight is then $(G-1)/G$ for every prompt, and the
# scale of the advantages follows the reward scale.
#
# > **You should know.** Std normalisation makes the expected update of prompt $x$ equal to $c(p, G)\,\nabla V(x)$,
# > with $c = 1$ at $G = 2$, bounded by $\sqrt{G-1}$, and $\to 1/\sigma(x)$ only as $G \to \infty$; with graded
# > rewards it also bends the direction within a prompt (notebook 05 §1).
# >
# > **In the catalog's terms.** *Symptom:* near-constant groups (tiny reward gaps, reward-model noise) get
# > $\pm1$-sized advantages and steer the update. *Statistic:* none of the twins' logged ones; log the group std
# > next to $|A|$, or compute $c(p, G)$ for your $G$ as above. *Fix:* drop the std (Dr. GRPO), or keep it knowingly.
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
    "twins (token mean)": lambda lp: grpo_fixed.grpo_loss(lp, lp_old, adv, m),
    "per-sequence": lambda lp: sum(grpo_fixed.grpo_loss(lp[i : i + 1], lp_old[i : i + 1], adv[i : i + 1], m[i : i + 1])
                                   for i in range(2)) / 2,
    "Dr. GRPO (constant)": lambda lp: grpo_fixed.grpo_loss(lp, lp_old, adv, m) * m.sum() / m.numel(),
}
grads = {name: token_grads(fn) for name, fn in losses.items()}  # (N, T) each: -w_i A_i on generated tokens
for name, g in grads.items():
    print(f"{name:20s} short correct {g[0, 0]:+.4f} | long wrong {[f'{x:+.4f}' for x in g[1]]}")
assert torch.allclose(grads["twins (token mean)"][m].abs(), torch.tensor(0.25))  # one weight for every token
assert torch.allclose(grads["per-sequence"][0, 0], torch.tensor(-0.5)) and torch.allclose(grads["per-sequence"][1],
                                                                                          torch.tensor(1 / 6))

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
def length_log_probs(continue_logit, max_length=32):
    """Geometric length with a forced stop: P(L) = q^(L-1) (1 - q) for L < Lmax, q^(Lmax-1) at Lmax, q = sigmoid(theta).
    -> lengths (Lmax,), log P(L) (Lmax,), differentiable in theta."""
    lengths = torch.arange(1, max_length + 1, dtype=torch.float64)
    log_q, log_stop = torch.nn.functional.logsigmoid(continue_logit), torch.nn.functional.logsigmoid(-continue_logit)
    return lengths, (lengths - 1) * log_q + log_stop * (lengths < max_length)  # the last length pays no stop token


def length_gradient(continue_logit, advantage, weighting):
    """E[grad] = sum_L P(L) w(L) A dlogP(L)/dtheta, every sequence with advantage A (so the true gradient is 0);
    w = 1/L ("sequence": each sequence divided by |o_i|) or 1/E[L] ("token": one constant for all tokens).
    -> (gradient, E[L])"""
    theta = torch.tensor(float(continue_logit), dtype=torch.float64, requires_grad=True)
    lengths, log_p = length_log_probs(theta)
    prob = log_p.exp().detach()
    weight = 1 / lengths if weighting == "sequence" else 1 / (prob * lengths).sum()
    (grad,) = torch.autograd.grad((prob * weight * advantage * log_p).sum(), theta)
    return grad.item(), (prob * lengths).sum().item()


def length_drift(weighting, *, steps=40, lr=1.0, start=1.0):
    """Exact gradient ascent on the continue logits of right (A = +1) and wrong (A = -1) answers.
    -> mean length per step: {"right": [...], "wrong": [...]}"""
    theta, trace = {"right": start, "wrong": start}, {"right": [], "wrong": []}
    for _ in range(steps):
        for branch, sign in (("right", 1.0), ("wrong", -1.0)):
            grad, mean_length = length_gradient(theta[branch], sign, weighting)
            trace[branch].append(mean_length)
            theta[branch] += lr * grad
    return trace


for weighting in ("sequence", "token"):
    g_right, mean_length = length_gradient(1.0, +1.0, weighting)
    g_wrong, _ = length_gradient(1.0, -1.0, weighting)
    g_right, g_wrong = round(g_right, 10) + 0.0, round(g_wrong, 10) + 0.0  # -5e-17 prints as +0.0000
    print(f"{weighting:8s}: E[L] = {mean_length:.3f}; d/dtheta right answers {g_right:+.4f}, "
          f"wrong answers {g_wrong:+.4f}")
drift = {w: length_drift(w) for w in ("sequence", "token")}
for w, tr in drift.items():
    print(f"{w:8s}: mean length of right answers {tr['right'][0]:.2f} -> {tr['right'][-1]:.2f}, "
          f"wrong answers {tr['wrong'][0]:.2f} -> {tr['wrong'][-1]:.2f} after 40 exact gradient steps")
assert drift["sequence"]["wrong"][-1] > 5 * drift["sequence"]["wrong"][0] > 5 * drift["sequence"]["right"][-1]
assert abs(drift["token"]["wrong"][-1] - drift["token"]["wrong"][0]) < 1e-6

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
# Exact per-token advantages on AdditionTask. The reward is 1 only if every token is the answer's, so for a
# sampled completion the exact value of the state after $t$ tokens is $V(s_t) = \prod_{u \ge t}
# \pi_T(o^*_u \mid x, o^*_{<u})$ (the chance the rest comes out right) while the prefix $o_{<t}$ is the answer's,
# and 0 once it is not (no way back); `answer_logprobs` gives the factors. The true advantage of token $t$ is
# $V(s_{t+1}) - V(s_t)$ (with $V(s_L) = r$). From the one completion of every prompt that notebook 05 §3 sampled
# from the iteration-20 policy we take a *near miss* (a wrong answer whose first digit is right) on the prompt
# the policy answers right most often.

# %%
def exact_prefix_values(answer_logprobs, answer_ids, completion, reward):
    """V(s_t) for t = 0..L-1 and V(s_L) = r of one completion (L tokens): prod_{u >= t} pi(o*_u | x, o*_<u) while
    completion[:t] == answer[:t], else 0. answer_logprobs, answer_ids: the answer's La tokens. -> (L + 1,)"""
    out = []
    for t in range(len(completion)):
        on_track = completion[:t] == answer_ids[:t]
        out.append(answer_logprobs[t:].sum().exp() if on_track else torch.zeros(()))
    return torch.stack([*out, torch.tensor(float(reward))])


sampled, smask, slogp, _ = samples["iteration 20"]  # (2500, T) each: one completion per prompt (notebook 05 §3)
texts = grpo_fixed.decode_completions(tokenizer, sampled, smask)  # up to the first EOS, as rollout decodes
answers = [nb05_critic.answer(x) for x in every]
ans_logp, ans_mask = nb05_critic.answer_logprobs(policy20, tokenizer, every, T_SAMPLE)  # (2500, Ta)
near_miss = [i for i, (o, a) in enumerate(zip(texts, answers, strict=True)) if o != a and o[:1] == a[0]]
i = max(near_miss, key=lambda j: all_probs[j, 1].item())  # the near miss on the prompt most often answered right
L = int(smask[i].sum())
completion, answer_ids = sampled[i, :L].tolist(), tokenizer.encode(answers[i], add_bos=False) + [tokenizer.eos_token_id]
reward = float(texts[i] == answers[i])
v_exact = exact_prefix_values(ans_logp[i][ans_mask[i]], answer_ids, completion, reward)  # (L+1,)
with torch.no_grad():
    v_critic = nb05_critic.state_values(critic20, enc["input_ids"][i : i + 1], enc["attention_mask"][i : i + 1],
                                        sampled[i : i + 1, :L], smask[i : i + 1, :L])  # (1, L)
true_adv = v_exact[1:] - v_exact[:-1]  # (L,)
grpo_adv = reward - all_probs[i, 1].item()  # one number for every token: r - V(x)
critic_adv = {lam: gae_advantages(v_critic, torch.tensor([reward]), smask[i : i + 1, :L], lam)[0] for lam in (1.0, 0.0)}
shown = [tokenizer.decode([tok]) if tok != tokenizer.eos_token_id else "EOS" for tok in completion]
print(f"prompt {every[i]!r}, answer {answers[i]!r}, sampled {texts[i]!r} (p = {slogp[i][smask[i]].sum().exp():.4f}), "
      f"reward {reward:.0f}, V(x) = {all_probs[i, 1]:.4f}; {len(near_miss)} near misses among 2500 samples")
print(" t  token  V(s_t) exact  true A_t   GRPO A (r - V(x))  V_phi(s_t)  critic A_t lambda=1  lambda=0")
for t in range(L):
    print(f"{t:2d}  {shown[t]:>5s}  {v_exact[t]:12.4f}  {true_adv[t]:+8.4f}   {grpo_adv:+17.4f}  {v_critic[0, t]:10.4f}"
          f"  {critic_adv[1.0][t]:+19.4f}  {critic_adv[0.0][t]:+8.4f}")
assert abs(v_exact[0] - all_probs[i, 1]) < 1e-5  # V(s_0) = V(x) of notebook 05 §3
assert torch.allclose(v_exact[:-1].double(), exact20[i, :L], atol=1e-6)  # the batched values of notebook 05 §4
assert true_adv[0] > 0 > grpo_adv and true_adv[1] < 0 and (true_adv[2:] == 0).all()  # right digit pushed down
assert critic_adv[1.0][0] < 0  # lambda = 1: r - V_phi(s_0), the same sign as GRPO's
assert (every[i], texts[i]) == ("24+10=", "33")  # prose
quoted = [(all_probs[i, 1], 0.8105), (true_adv[0], 0.0910), (true_adv[1], -0.9016), (v_critic[0, 0], 0.5372),
          *zip(critic_adv[0.0].tolist(), (0.0726, -0.0876, -0.5223), strict=True)]
assert all(abs(x - q) < 6e-5 for x, q in quoted)  # prose

# %% [markdown]
# The first token, 3, is right: it *raised* the chance of success from 0.8105 to 0.9016 (true advantage
# $+0.0910$). The second 3 is the mistake ($-0.9016$), and after it the EOS changes nothing (0). GRPO gives all
# three the same advantage, $r - \text{mean}(r)$, an estimate of $r - V(x) = -0.8105$: the right first digit is
# pushed down as hard as the mistake, and the
# harmless EOS too. The critic with $\lambda = 1$ ($r - V_\phi(s_t)$) has the same signs. With $\lambda = 0$
# ($V_\phi(s_{t+1}) - V_\phi(s_t)$) the iteration-20 critic gets the signs of the first two tokens right
# ($+0.0726$, $-0.0876$), but its sizes are far off and it blames the EOS with $-0.5223$: it still believes
# in the state after the mistake ($V_\phi = 0.52$ where the exact value is 0), so the per-token credit is only as
# good as the critic.
#
# Every token gets the same sequence advantage under GRPO, whatever its own contribution. How much that
# costs grows with the horizon. An exact toy: $T$ independent binary choices, each right with probability
# 0.5, reward = fraction right (a partial-credit reward), groups of $G=8$. True per-token advantage
# $A^*_t = (c_t - p)/T$. We compare the GRPO advantage (group-mean baseline, broadcast), a perfect critic with
# $\lambda = 1$ ($r - V(s_t)$: only the *future* tokens add noise) and with $\lambda=0$
# ($V(s_{t+1}) - V(s_t)$, exact).

# %%
def credit_assignment(horizons, *, G=8, p=0.5, groups=4000, seed=0):
    """T independent binary choices c_t (right w.p. p), reward r = mean_t c_t, true A*_t = (c_t - p) / T.
    Exact V(s_t) = (sum_{s<t} c_s + (T - t) p) / T. -> {T: {name: (corr(A, A*), share of right tokens with A < 0)}}"""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for T in horizons:
        c = (torch.rand(groups, G, T, generator=g, dtype=torch.float64) < p).double()  # (groups, G, T)
        r = c.mean(-1)  # (groups, G)
        true = (c - p) / T  # (groups, G, T)
        v = (torch.cumsum(c, -1) - c + (T - torch.arange(T)) * p) / T  # (groups, G, T): exact V(s_t)
        estimates = {
            "group": (r - r.mean(-1, keepdim=True))[..., None].expand_as(true),  # one number for all T tokens
            "critic lambda=1": r[..., None] - v,
            "critic lambda=0": true.clone(),  # V(s_{t+1}) - V(s_t) = (c_t - p) / T exactly
        }
        right = c.bool()
        out[T] = {name: (torch.corrcoef(torch.stack([a.flatten(), true.flatten()]))[0, 1].item(),
                         (a[right] < -1e-12).double().mean().item()) for name, a in estimates.items()}
    return out


credit = credit_assignment([1, 2, 4, 8, 16, 32, 64], G=8)
print("  T   corr(A, A*): group  critic l=1  critic l=0 | right tokens with A < 0: group  critic l=1")
for T, d in credit.items():
    print(f"{T:3d}  {d['group'][0]:18.3f}  {d['critic lambda=1'][0]:10.3f}  {d['critic lambda=0'][0]:10.3f}"
          f" | {d['group'][1]:30.3f}  {d['critic lambda=1'][1]:10.3f}")
assert all(abs(credit[T]["group"][0] * T**0.5 / (7 / 8) ** 0.5 - 1) < 0.1 for T in credit)  # sqrt((G-1)/G) / sqrt(T)
assert credit[64]["group"][1] > 0.4
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
# trades this variance for the critic's bias (the AdditionTask table above: $V_\phi(s_0) = 0.5372$ against the
# exact 0.8105).
#
# ### 6.6 Environments that cannot be reset to the same state
#
# **Question.** The group mean needs $G$ samples *from the same state*. What if the environment cannot be
# reset (a live user conversation, a game with hidden randomness, a robot, a stateful tool sandbox)?
#
# Then sample $j$ of a "group" starts from its own state $s_j$, and $\bar r$ estimates the average value over
# states, not $V(s_i)$. It is still a valid baseline if it excludes $r_i$, but the per-state value stays in
# every advantage as noise: the error floor is $\text{Var}_s V(s)$, whatever $G$. The "no reset" column of
# notebook 05 §3 simulates exactly this (each of the $G$ samples from a different random prompt):

# %%
for G in (2, 8, 32):
    e = errors[G]
    print(f"G={G:2d}: same state {e['group mean']['mse']:.4f} | no reset {e['no reset']['mse']:.4f} "
          f"(floor Var_x V = {var_v:.4f}) | critic V_phi(s) {e['critic']['mse']:.4f}")
    assert e["no reset"]["mse"] > var_v and e["no reset"]["mse"] > e["group mean"]["mse"]

# %% [markdown]
# A critic conditions on the state it is given, so it needs no reset: where per-step credit is needed and the
# intermediate states cannot be replayed (a mid-episode environment state, unlike a prompt), a learned value
# function earns its cost. (Multi-turn episodes whose first state is replayable can still be grouped as whole
# trajectories; what the group then cannot give is per-turn credit.)
#
# > **You should know.** GRPO's baseline assumes you can draw $G$ i.i.d. completions of the *same* prompt;
# > with a fixed prompt that costs only the $G$ generations (the state is the prompt, replayed at will). When the
# > state is not replayable, the group degenerates into a batch mean (what B9 does by accident when $B$ does not
# > divide $G$) and you need $V_\phi(s)$.
#
# <details><summary>Answer: could you group samples with <em>similar</em> states instead?</summary>
#
# Partly: grouping by a state feature makes the group mean a nonparametric value estimate (a nearest-neighbour
# critic). Its error is the spread of $V$ within a bucket plus $\sigma^2/G$, and buckets thin out as the state
# gets richer; at that point a learned $V_\phi$ generalises better.
# </details>

# %% [markdown]
# ### 6.7 Sharper, not broader: pass@1 against pass@k
#
# **Question.** The reward rose. Did the policy learn to solve more prompts, or the same ones more reliably?
#
# pass@k, the chance that at least one of k samples is right, averaged over prompts, is
# $\mathbb{E}_x[1 - (1 - p(x))^k]$; at $k = G$ it is also the share of a prompt's groups holding a success, so
# $1 - \text{pass@}G$ is the all-fail part of the zero-variance groups of notebook 05 §6.1. Exact, over all 2500
# prompts: the SFT model's $p(x)$ from there against the policy of notebook 05 §2's group-baseline (GRPO) run at
# iteration 20:

# %%
group20 = snapshots["group"][SNAPSHOT][0]  # the GRPO run's policy, taken before iteration 20's rollout
p_group20 = nb05_critic.exact_outcomes(group20, tokenizer, every, T_SAMPLE)[0][:, 1]  # (2500,) exact p(x)
KS = (1, 2, 4, 8, 16, 64)


def pass_at(p, k):
    """pass@k = E_x[1 - (1 - p(x))^k]: at least one of k independent samples right, averaged over prompts."""
    return (1 - (1 - p) ** k).mean().item()


passes = {name: [pass_at(p, k) for k in KS] for name, p in (("SFT model", p_x), ("GRPO, iteration 20", p_group20))}
print(f"{'':18s} " + " ".join(f"{'pass@' + str(k):>8s}" for k in KS))
for name, row in passes.items():
    print(f"{name:18s} " + " ".join(f"{v:8.3f}" for v in row))
sft_pass, rl_pass = (dict(zip(KS, row, strict=True)) for row in passes.values())
assert rl_pass[1] > sft_pass[1] and all(rl_pass[k] < sft_pass[k] for k in (8, 16, 64))  # up at k = 1, down at k >= 8
assert [f"{v:.3f}" for v in (sft_pass[1], rl_pass[1], sft_pass[8], rl_pass[8], sft_pass[64], rl_pass[64])] == [
    "0.304", "0.465", "0.930", "0.905", "1.000", "0.985"]  # as quoted

# %%
# per prompt: which prompts rose, which collapsed
change = p_group20 / p_x  # (2500,)
sft_hard, rl_hard, worst = p_x.argmin().item(), p_group20.argmin().item(), change.argmin().item()
for label, i in (("the SFT model's hardest prompt", sft_hard), ("the GRPO policy's hardest prompt", rl_hard)):
    print(f"{label} {every[i]!r}: p(x) {p_x[i]:.4f} -> {p_group20[i]:.4f}")
fell = {n: (change < 1 / n).sum().item() for n in (1, 10, 100)}  # p(x) fell more than n-fold
below = [(p < 0.01).sum().item() for p in (p_x, p_group20)]
print(f"largest relative drop: {every[worst]!r}; p(x) fell on {fell[1]} of {len(every)} prompts, more than 10x on "
      f"{fell[10]}, more than 100x on {fell[100]}; prompts below 0.01: {below[0]} before, {below[1]} after")
upper = p_x > p_x.median()  # (2500,) the prompts the SFT model solved most often
rose = [(p_group20[sel] > p_x[sel]).float().mean().item() for sel in (upper, ~upper)]
print(f"p(x) rose on {rose[0]:.0%} of the prompts above the SFT model's median p(x), on {rose[1]:.0%} of those below")
assert worst == rl_hard and p_group20[sft_hard] > p_x[sft_hard] / 2  # the collapse hit another prompt
assert (every[rl_hard], f"{p_x[rl_hard]:.4f}", f"{p_group20[rl_hard]:.4f}") == ("37+1=", "0.2158", "0.0002")
assert (every[sft_hard], f"{p_x[sft_hard]:.4f}", f"{p_group20[sft_hard]:.4f}") == ("5+7=", "0.0453", "0.0309")
assert (fell, below) == ({1: 554, 10: 66, 100: 5}, [0, 31]) and [f"{r:.0%}" for r in rose] == ["86%", "69%"]

# %%
# one collapsed prompt through the GRPO run: its exact p(x) before each iteration, and the batches that held it
fallen = every[rl_hard]  # "37+1="
p_fallen = [nb05_critic.exact_outcomes(snapshots["group"][it][0], tokenizer, [fallen], T_SAMPLE)[0][0, 1].item()
            for it in range(SNAPSHOT + 1)]  # (SNAPSHOT + 1,) before iterations 0..20
held = {it: rewards.reshape(-1)[torch.tensor([p == fallen for p in prompts])].tolist()  # its group's G rewards
        for it, (prompts, rewards) in enumerate(group_batches[:SNAPSHOT]) if fallen in prompts}
print(f"p({fallen!r}) before iteration: " + "  ".join(f"{it}: {p:.4f}" for it, p in enumerate(p_fallen)))
print(f"iterations whose batch held {fallen!r}, with its group's rewards: {held}")
peak, first_held = max(range(SNAPSHOT + 1), key=p_fallen.__getitem__), min(held)
print(f"peak {p_fallen[peak]:.4f} before iteration {peak}; {p_fallen[first_held]:.4f} before iteration {first_held}, "
      f"the first batch that held it")
assert peak < first_held and p_fallen[first_held] < p_fallen[peak] / 100  # fell 100-fold while in no batch
assert all(r == 0 for rewards in held.values() for r in rewards)  # its groups: all wrong, advantages 0
assert math.isclose(p_fallen[SNAPSHOT], p_group20[rl_hard].item(), rel_tol=1e-4)  # the policy of the table above
assert (f"{p_fallen[peak]:.4f}", peak, f"{p_fallen[first_held]:.4f}", sorted(held)) == ("0.2750", 7, "0.0015", [14])
assert [f"{p_fallen[it]:.4f}" for it in (3, 15, 17, 20)] == ["0.1934", "0.0014", "0.0029", "0.0002"]  # as quoted
assert min(p_fallen[:peak]) == p_fallen[3] and max(p_fallen[15:]) == p_fallen[17]  # the dip; the later rise

# %% [markdown]
# Twenty iterations of GRPO raised pass@1 from 0.304 to 0.465, and lowered pass@8 from 0.930 to 0.905 and pass@64
# from 1.000 to 0.985. $p(x)$ rose on most prompts, more often on those the SFT model solved most often (86% of those
# above its median, 69% below), while some prompts it used to solve now and then collapsed: `37+1=`, solved 22% of the
# time by the SFT model (0.2158), fell to 0.0002, 66 prompts fell more than tenfold and 5 more than a hundredfold, and
# 31 now sit below 0.01, where the SFT model had none. The SFT model's own hardest prompt, `5+7=`, only went from
# 0.0453 to 0.0309: the prompts that collapse need not be the ones that were hard. One seed and a tiny model: this
# shows the mechanism,
# not a law. On LLMs, Yue et al. (2025, *Does Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs
# Beyond the Base Model?*) report the same tendency across model families and benchmarks: RL-trained models ahead at
# pass@1, their base models ahead at large k. For the group baseline the trap is interference, not its own signal.
# With a binary reward a prompt's own mixed groups raise its $p(x)$ in expectation (to first order at ratio 1,
# leaving out the KL term, and with a loss normaliser that does not depend on the samples, 1/G per group rather
# than a token count; the group std is fine: $c(p, G) > 0$, notebook 05 §6.3), and `37+1=` moved without any: the
# updates on other prompts, through the shared weights, first raised it on net (0.2158 to 0.2750 over iterations
# 0-6, through a dip to 0.1934) and then pushed it down to 0.0015 before iteration 14, while no batch held
# it. Its only group in iterations 0-19, at iteration 14, was all wrong (rewards 0, advantages 0): near $p(x) = 0$ a
# prompt's groups hold no success and their policy-gradient signal falls silent (notebook 05 §6.1): of its own
# signal only the KL term, and only in an iteration whose batch holds it, pulls toward the reference; otherwise only
# other prompts' updates move it (here up from 0.0014 before iteration 15 to 0.0029 before 17, then down to 0.0002
# before 20).
#
# The pass@k above is exact, from $p(x)$. An evaluation has only $n \ge k$ samples per prompt, $c$ of them right.
# For $k \ge 2$, plugging $c/n$ into $1 - (1 - c/n)^k$ is biased low: $(1 - q)^k$ is strictly convex in $q$, so its
# mean over $c$ exceeds $(1 - p)^k$ (Jensen). The unbiased estimator is $1 - \binom{n-c}{k}/\binom{n}{k}$, the
# chance that $k$ of the $n$ samples drawn without replacement are not all wrong (Chen et al., 2021, the HumanEval
# paper). Both estimators' expectations over $c \sim \text{Binomial}(n, p(x))$, for the SFT model's pass@8:

# %%
def expected_pass_estimates(p, n, k):
    """E over c ~ Binomial(n, p(x)) of two pass@k estimators from n samples, averaged over prompts: the unbiased
    1 - C(n - c, k) / C(n, k) and the plug-in 1 - (1 - c/n)^k. p (X,) -> (unbiased, plug-in)"""
    c = torch.arange(n + 1, dtype=torch.float64)  # (n + 1,) possible numbers of right samples
    binom = torch.tensor([math.comb(n, j) for j in range(n + 1)], dtype=torch.float64)  # (n + 1,)
    p = p.double()[:, None]  # (X, 1)
    pmf = binom * p**c * (1 - p) ** (n - c)  # (X, n + 1)
    unbiased = torch.tensor([1 - math.comb(n - j, k) / math.comb(n, k) for j in range(n + 1)], dtype=torch.float64)
    plug_in = 1 - (1 - c / n) ** k  # (n + 1,)
    return (pmf @ unbiased).mean().item(), (pmf @ plug_in).mean().item()


estimates = {n: expected_pass_estimates(p_x, n, 8) for n in (8, 16, 64)}
print(f"exact pass@8 of the SFT model: {pass_at(p_x, 8):.3f}")
for n, (unbiased, plug_in) in estimates.items():
    print(f"n = {n:2d} samples per prompt: unbiased estimator {unbiased:.3f}, plug-in 1 - (1 - c/n)^8 {plug_in:.3f}")
assert all(abs(u - pass_at(p_x, 8)) < 1e-9 and pl < u for u, pl in estimates.values())  # unbiased; plug-in low
assert [f"{pl:.3f}" for _, pl in estimates.values()] == ["0.829", "0.883", "0.919"]  # as quoted: rising with n

# %% [markdown]
# The unbiased estimator's mean is the exact pass@8 (0.930) at every $n$; the plug-in's falls short, most at $n = k$
# (0.829 at $n = 8$, 0.883 at 16, 0.919 at 64). At $n = k$ the unbiased estimator is simply "any of the $n$ samples
# right", while the plug-in credits a prompt with one right sample of 8 only $1 - (7/8)^8 = 0.656$. For $k \ge 2$
# the plug-in stays biased at every finite $n$; use the unbiased estimator at any $n \ge k$, and take $n$ above $k$
# to lower its variance (Chen et al. use $n = 200$ for $k \le 100$).
#
# > **You should know.** A rising training reward says the policy got better at what it samples; report pass@k at
# > a few k beside pass@1 on a held-out set, and read samples, before calling it new ability.

# %% [markdown]
# ## 7. GRPO vs PPO in one table
#
# Numbers from this notebook (AdditionTask from the SFT checkpoint, $B=8$, $G=8$; iteration-20 snapshot and 50
# prompts for the errors):

# %%
rows = [
    ("baseline", "group mean of G samples", "learned V_phi(s_t)"),
    ("error of b vs V(x) at G=8", f"{errors[8]['group mean']['mse']:.4f} (variance)",
     f"{errors[8]['critic']['mse']:.4f} (bias)"),
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
assert final["critic"] > final["group"] and errors[8]["critic"]["mse"] > errors[8]["group mean"]["mse"]

# %% [markdown]
# | | GRPO (group baseline) | PPO (learned critic) |
# |---|---|---|
# | value network | none: no extra memory, optimizer state or passes | a second network, its Adam state, more passes |
# | baseline error | unbiased, variance $\sigma^2/G$ | bias and lag, flat in $G$ |
# | own-sample coupling | $(G-1)/G$ shrinkage (RLOO removes it); a std from the same samples biases it | none |
# | credit assignment | one advantage for every token | per token (GAE; $\lambda$ trades variance for bias) |
# | samples | $G$ per prompt, all from the same state | $G = 1$ works; no reset needed |
# | all-equal groups | no signal: the generations are wasted | $r - V_\phi(s) \ne 0$ still teaches |
# | normalisation | group std re-weights prompts by $c(p, G)$ ($\to 1/\sigma(x)$ only as $G$ grows) | batch-level |
# | tuning | nothing to warm up | critic learning rate, $\lambda$, warm-up |
#
# The critic run finished higher on this one seed while its baseline was the less accurate one at
# iteration 20; the runs follow different trajectories, scale their advantages differently (notebook 05 §4), and
# one seed says nothing about which method learns faster in general.

# %% [markdown]
# ## 8. Self-check
#
# 1. Why is $r_i - \bar r$ biased toward zero, by how much, and does dividing by the group std make it unbiased?
# 2. A colleague computes `rewards.view(G, B)`. With $B = G$ the run is perfect. Why, when does the centring
#    check stay silent, and what breaks when $B$ does not divide $G$?
# 3. Name two regimes where more than 80% of groups give no gradient, and one remedy for each.
# 4. Per-sequence length normalisation: which answers does it favour, and does the twins' loss have the same bias?
# 5. "Std normalisation weights each prompt by $1/\sigma(x)$." When is that right, and what is it at $G = 2$?
# 6. When do you still want a critic?
#
# <details><summary>Answer 1</summary>
#
# $\bar r$ contains $r_i$: $\mathbb{E}[r_i - \bar r\mid r_i] = \frac{G-1}{G}(r_i - V)$ (0.75 at $G=4$, notebook 05 §1),
# the same factor for every prompt, so the direction stays unbiased; RLOO removes the factor. Dividing by the
# group std gives RLOO and the group mean identical numbers, but makes neither unbiased: the std is computed
# from the same samples, so $\mathbb{E}[A_i \mid r_i]$ is no longer a straight line in $r_i$ (notebook 05 §1: its
# slope falls from 3.04 to 1.16 across the reward levels) and the expected update is not along $\nabla V$.
# </details>
#
# <details><summary>Answer 2</summary>
#
# With $B=G$ the buggy rows of `view(G, B)` are exactly the prompt groups (the layout is prompt-major with
# $G$ per prompt), so the advantages are exactly right. When $B$ divides $G$ each row is a slice of one group:
# every group stays centred and the `adv_group_mean` check is silent, though the advantages are wrong (each
# slice has its own mean and std; notebook 01 §10.1). When $B$ does not divide $G$ a row spans several
# prompts: the baseline mixes other prompts' values (notebook 05 §3: zero bias at $G = 16$ and 32 with
# $B = 16$, large at $G = 4$ and 8), signs flip per sample with graded rewards, constant rows zero out real
# signal, and the centring check fires. On average the update barely moves (notebook 01 §10.2).
# </details>
#
# <details><summary>Answer 3</summary>
#
# Hard prompts (SparseMatchTask from a fresh TinyLM: 0.852 of the fixed run's groups at $G=8$, notebook 05 §6.1)
# and solved prompts (late training, $p \to 1$). Remedies: larger $G$ or dynamic sampling for hard prompts, curriculum
# or filtering out solved prompts; denser rewards; a critic, which still gets $r - V_\phi \ne 0$.
# </details>
#
# <details><summary>Answer 4</summary>
#
# Dividing by $|o_i|$ gives weight $A_i/|o_i|$ per token: short right answers and long wrong answers are
# favoured (notebook 05 §6.4: wrong answers grew long with reward independent of length). The twins divide by
# the minibatch's total token count, the same for every token: no per-sequence length bias, only a
# batch-dependent scale.
# </details>
#
# <details><summary>Answer 5</summary>
#
# Only as $G \to \infty$, where the sample std becomes $\sigma(x)$. Exactly, with binary rewards the expected
# update is $c(p, G)\,\nabla V(x)$: $c = 1$ for every prompt at $G = 2$ (a pair is always $\pm1$), at most
# $\sqrt{G-1}$ for a given $G$, and within 2% of $1/\sigma$ only at $G = 512$ for the $p$ of the table in
# notebook 05 §6.3 (at $G = 8$ a prompt with $p = 0.02$ gets 2.57, not 7.14).
# </details>
#
# <details><summary>Answer 6</summary>
#
# Long horizons with intermediate rewards (per-token credit), multi-turn or stateful environments that cannot
# be reset, $G$ that must stay small (expensive generation), and when many groups are constant.
# </details>
#
# **Next: notebook 06**, *GRPO variants*: what each switch in TRL and verl changes (loss aggregation, advantage
# scaling, clip-higher, a sequence-level ratio, dynamic sampling, where the KL goes, truncated completions).
