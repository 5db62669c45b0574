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
# # 06 — GRPO variants: what each switch in TRL and verl changes
#
# **The interview question.** *"You fixed the trainer. Now the config has `loss_type`, `scale_rewards`,
# `epsilon_high`, `importance_sampling_level`, `beta`, `mask_truncated_completions`. What does each one
# change in the gradient, and which would you turn on?"*
#
# Every variant below is one twin function swapped for another (the catalog's hybrid mechanism,
# `swap.fixed_with`), so the twins stay hand-out sized. Each section has the equation, the switch's name
# in TRL and in verl (quoted from the file and version we read), a tiny input that shows the difference
# exactly, a short training comparison, a slider where a knob exists, and a catalog-style note: symptom,
# the statistic that shows it, the fix.
#
# 1. Loss aggregation: token mean, per-sequence mean (the paper), a constant (Dr. GRPO).
# 2. Advantage scaling: group std, batch std, none.
# 3. Clip-higher and entropy collapse.
# 4. Sequence-level ratio (GSPO).
# 5. Dynamic sampling: dropping groups whose rewards are all equal.
# 6. Where the KL goes: in the reward (k1) or in the loss (k3).
# 7. Truncated completions: masking them or a soft length penalty.
#
# **Sources.** TRL 1.16.0 and verl 0.9.1, read from their PyPI wheels (`pip download --no-deps`); the
# option names were cross-checked against older commits of the same files in a public code index. TRL:
# `trl/trainer/grpo_config.py` (docstring of `GRPOConfig`), `trl/trainer/grpo_trainer.py` (`_compute_loss`,
# and the advantages in `_generate_and_score_completions`),
# `trl/trainer/rloo_trainer.py`, `trl/rewards/other_rewards.py`. verl: `verl/trainer/config/actor/actor.yaml`,
# `verl/trainer/config/ppo_trainer.yaml`, `verl/trainer/config/algorithm.py`,
# `verl/trainer/ppo/core_algos.py`, `verl/trainer/ppo/ray_trainer.py`, `verl/workers/utils/losses.py`,
# `verl/utils/torch_functional.py`. In verl the actor options sit
# under `actor_rollout_ref.actor.` and the algorithm options under `algorithm.`.
#
# The code each section teaches is in its cells, and runs as written inside a swapped copy of `grpo_fixed`
# (helpers it calls come along); `workbook/nb06_variants.py` only trains, records and caches the short runs
# (so a slider move replays nothing).

# %%
import math

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import grpo_fixed
import workbook  # noqa: F401  (one torch thread)
from workbook import catalog, nb06_variants, plots
from workbook.plots import curves, smooth
from workbook.run_summary import tail_mean
from workbook.tasks import EchoTask, RambleTask, ReverseTask
from workbook.widgets import choice, live_plot, probe, slider

SHORT = dict(steps=20, prompts_per_batch=8)  # every training run: 20 iterations of 8 prompts x 8 samples
TAIL = 10  # statistics of a run: mean over its last 10 iterations
COLORS = {"token mean": "tab:blue", "sequence mean": "tab:red", "constant": "tab:green"}
print(f"every training run: {SHORT['steps']} iterations of {SHORT['prompts_per_batch']} prompts x "
      f"{grpo_fixed.Config.group_size} samples, seed 0; (tail) = mean over the last {TAIL} iterations")

# %% [markdown]
# **At a glance.** How hard the twins' `grpo_loss` pushes one token at ratio ρ = π/π_old, for three advantages:
# the fixed twin stops pushing at ρ = 1 + ε = 1.2 when A > 0 and at 1 − ε = 0.8 when A < 0, whatever the size of A,
# while bug B4 (clamping ρ·A instead of ρ, notebook 01 §5) moves the edge to 1.2/A, so a token with A = +2 gets no
# push even at ρ = 1, the first inner step, and A < 0 is never clipped; where the upper edge sits is the switch of
# §3 (clip-higher), and §4 clips one ratio per completion instead.

# %%
B4 = catalog.hybrid("B4")
RHO = torch.linspace(0.4, 1.6, 121, dtype=torch.float64)  # (N,) one token per ratio, step 0.01
CLIP_ADVANTAGES = (2.0, 1.0, -1.0)


def token_push(module, advantage):
    """-d loss / d log pi of each token of RHO under module.grpo_loss (clip 0.2), all with the same advantage:
    how hard the surrogate pushes that token up (< 0: down). The loss averages N tokens, hence the factor N."""
    logp = RHO.log().reshape(-1, 1).requires_grad_(True)  # (N, 1)
    advantages, mask = torch.full((len(RHO),), advantage, dtype=torch.float64), torch.ones_like(logp, dtype=torch.bool)
    module.grpo_loss(logp, torch.zeros_like(logp), advantages, mask).backward()
    return -logp.grad.squeeze(1) * len(RHO)  # (N,)


push = {(name, a): token_push(module, a) for name, module in (("buggy", B4), ("fixed", grpo_fixed))
        for a in CLIP_ADVANTAGES}
fig, axes = plots.buggy_vs_fixed("the push on one token, by its ratio rho = pi / pi_old (clip 0.2)", figsize=(9, 3.2))
axes[0].set_title("B4: grpo_buggy's grpo_loss", color=plots.BUGGY)
axes[1].set_title("grpo_fixed's grpo_loss", color=plots.FIXED)
for ax, name in zip(axes, ("buggy", "fixed"), strict=True):
    for a, color in zip(CLIP_ADVANTAGES, ("tab:purple", "tab:blue", "tab:orange"), strict=True):
        ax.plot(RHO, push[name, a], color=color, label=f"A = {a:+g}")
    for edge in (0.8, 1.2):
        ax.axvline(edge, color="0.6", ls=":", lw=1)
    ax.axhline(0.0, color="0.3", lw=0.8)
    ax.set(xlabel="ratio rho of the token", xlim=(RHO[0].item(), RHO[-1].item()))
axes[0].set(ylabel="push: -d loss / d log pi", ylim=(-1.8, 2.7))
fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize="small")
plt.show()
at_one = RHO.sub(1).abs().argmin()  # rho = 1: the first inner step
first_off = {a: RHO[push["buggy", a] == 0].min().item() for a in (2.0, 1.0)}  # where B4 stops pushing A > 0
print(f"at rho = 1, A = +2: buggy push {push['buggy', 2.0][at_one] + 0.0:.2f}, fixed {push['fixed', 2.0][at_one]:.2f}; "
      f"B4 stops pushing A = +2 at rho = {first_off[2.0]:.1f}, A = +1 at {first_off[1.0]:.1f}; tokens of A = -1 "
      f"without a push: buggy {int((push['buggy', -1.0] == 0).sum())}, fixed {int((push['fixed', -1.0] == 0).sum())} "
      f"(rho below {RHO[push['fixed', -1.0] != 0].min().item():.1f})")
assert push["buggy", 2.0][at_one] == 0 and abs(push["fixed", 2.0][at_one] - 2) < 1e-9
assert abs(first_off[2.0] - 0.6) < 0.011 and abs(first_off[1.0] - 1.2) < 0.011  # 1.2 / A
assert (push["buggy", -1.0] != 0).all() and (push["fixed", -1.0][RHO < 0.8 - 1e-9] == 0).all()
assert all(torch.equal(push["fixed", a][RHO > 1.2 + 1e-9], torch.zeros_like(RHO[RHO > 1.2 + 1e-9]))
           for a in (2.0, 1.0))  # the fixed edge does not move with A

# %% [markdown]
# ## 1. Loss aggregation
#
# **Question.** The clipped objective is per token, J_{i,t} = min(ρ_{i,t} A_i, clip(ρ_{i,t}) A_i). How
# are the tokens of N completions of different lengths |o_i| averaged into one loss, and why does it
# matter?
#
# **Key equations** (T_max = max_completion_length):
#
# <table>
# <tr><th>aggregation</th><th>loss</th><th>weight of one token</th><th>weight of one completion</th></tr>
# <tr><td>token mean over the batch (the twins, DAPO)</td><td>$-\frac{1}{\sum_i \lvert o_i\rvert}\sum_{i,t}
# J_{i,t}$</td><td>$1/\sum_j \lvert o_j\rvert$</td><td>$\lvert o_i\rvert/\sum_j \lvert o_j\rvert$</td></tr>
# <tr><td>per-sequence mean, then mean (the GRPO paper)</td><td>$-\frac{1}{N}\sum_i \frac{1}{\lvert o_i\rvert}\sum_t
# J_{i,t}$</td><td>$1/(N\lvert o_i\rvert)$</td><td>$1/N$</td></tr>
# <tr><td>constant normaliser (Dr. GRPO)</td><td>$-\frac{1}{N\,T_{max}}\sum_{i,t} J_{i,t}$</td><td>$1/(N
# T_{max})$</td><td>$\lvert o_i\rvert/(N T_{max})$</td></tr>
# </table>
#
# The per-sequence mean gives every completion the same total weight, so a long completion's tokens
# each get less: a long *wrong* answer is penalised less per token than a short one. Under the other two
# every token counts the same.
#
# **The switch.**
#
# <table>
# <tr><th></th><th>name and values</th><th>default</th><th>source</th></tr>
# <tr><td>TRL 1.16.0</td><td><code>GRPOConfig.loss_type</code>: <code>"grpo"</code> ("normalizing over sequence
# length"), <code>"bnpo"</code> (active tokens of the local batch), <code>"dapo"</code> (active tokens of the global
# accumulated batch), <code>"dr_grpo"</code> ("a global constant ... corresponds to
# <code>max_completion_length</code>")</td><td><code>"dapo"</code></td><td><code>trl/trainer/grpo_config.py</code>;
# the four formulas in <code>GRPOTrainer._compute_loss</code>, <code>grpo_trainer.py</code></td></tr>
# <tr><td>verl 0.9.1</td><td><code>actor_rollout_ref.actor.loss_agg_mode</code>: <code>token-mean</code>,
# <code>seq-mean-token-mean</code>, <code>seq-mean-token-sum</code>, <code>seq-mean-token-sum-norm</code> (divided
# by <code>loss_scale_factor</code>, "If null, uses response_length"),
# <code>token-sum</code></td><td><code>token-mean</code></td><td><code>verl/trainer/config/actor/actor.yaml</code>;
# <code>agg_loss</code> in <code>verl/trainer/ppo/core_algos.py</code></td></tr>
# </table>
#
# The per-token objective and the three reductions (the twins' `grpo_loss` is the first one):

# %%
def per_token_objective(logprobs, old_logprobs, advantages, mask, clip_low, clip_high):
    """J_t = min(rho_t A, clip(rho_t, 1 - clip_low, 1 + clip_high) A), 0 where masked.
    logprobs, old_logprobs, mask (N, T); advantages (N,) -> (N, T)"""
    ratio = torch.exp(torch.where(mask, logprobs - old_logprobs.detach(), 0.0))  # (N, T)
    adv = advantages.detach()[:, None]  # (N, 1): one advantage per completion
    J = torch.min(ratio * adv, ratio.clamp(1 - clip_low, 1 + clip_high) * adv)  # (N, T)
    return torch.where(mask, J, 0.0)


def token_mean(J, mask):
    """sum_{i,t} J / sum_i |o_i|: the twins, TRL "dapo" / "bnpo", verl token-mean."""
    return J.sum() / mask.sum().clamp(min=1)


def sequence_mean(J, mask):
    """(1/N) sum_i (1/|o_i|) sum_t J: the GRPO paper, TRL "grpo", verl seq-mean-token-mean."""
    return (J.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()


def constant(J, mask):
    """sum_{i,t} J / (N T_max): Dr. GRPO, TRL "dr_grpo". The twins pad completions to
    max_completion_length, so mask.numel() = N * T_max."""
    return J.sum() / mask.numel()


def aggregated_loss(aggregate, clip_high=None):
    """A grpo_loss with the twins' signature: -aggregate(J, mask). clip_high (notebook 06 §3) is the upper
    clip radius, by default the same as clip."""

    def grpo_loss(logprobs, old_logprobs, advantages, mask, clip=0.2):
        mask = mask.bool()
        high = clip if clip_high is None else clip_high
        J = per_token_objective(logprobs, old_logprobs, advantages, mask, clip, high)
        return -aggregate(J, mask)

    return grpo_loss


AGGREGATIONS = {"token mean": token_mean, "sequence mean": sequence_mean, "constant": constant}

# %% [markdown]
# First a check that the token mean *is* the twins' loss, value and gradient, on a random input with
# ratios away from 1 and some masked tokens:

# %%
g = torch.Generator().manual_seed(0)
logp = (-torch.rand(5, 7, generator=g, dtype=torch.float64)).requires_grad_(True)  # (N, T)
old = logp.detach() + 0.3 * torch.randn(5, 7, generator=g, dtype=torch.float64)  # ratios spread around 1
adv, mask = torch.randn(5, generator=g, dtype=torch.float64), torch.rand(5, 7, generator=g) < 0.7
ours = aggregated_loss(token_mean)(logp, old, adv, mask)
(grad_ours,) = torch.autograd.grad(ours, logp)
twin = grpo_fixed.grpo_loss(logp, old, adv, mask)
(grad_twin,) = torch.autograd.grad(twin, logp)
print(f"loss: ours {ours.item():+.6f}, twin {twin.item():+.6f}; max |gradient difference| "
      f"{(grad_ours - grad_twin).abs().max().item():.1e}")
assert torch.allclose(ours, twin) and torch.allclose(grad_ours, grad_twin)

# %% [markdown]
# **Tiny input.** Four completions of lengths 1, 2, 4 and 8 (T_max = 8) at ρ = 1, advantages +1, −1,
# +1, −1. The gradient of the loss with respect to a token's log-prob is −A times that token's weight,
# so autograd reads the weights off directly.

# %%
LENGTHS, ADVANTAGES = [1, 2, 4, 8], [1.0, -1.0, 1.0, -1.0]


def token_weights(aggregate, lengths, advantages, t_max):
    """Per-completion weight of one token: -dLoss/dlogp_t / A_i at ratio 1 (the same for every token of
    a completion). -> (N,)"""
    mask = torch.arange(t_max)[None, :] < torch.tensor(lengths)[:, None]  # (N, T_max)
    logp = torch.zeros(len(lengths), t_max, dtype=torch.float64, requires_grad=True)
    adv = torch.tensor(advantages, dtype=torch.float64)
    aggregated_loss(aggregate)(logp, logp.detach(), adv, mask).backward()
    return -logp.grad[:, 0] / adv


weights = {name: token_weights(agg, LENGTHS, ADVANTAGES, 8) for name, agg in AGGREGATIONS.items()}
print(f"{'length':>6} {'A':>5} | " + " | ".join(f"{name:>24}" for name in weights))
print(f"{'':>6} {'':>5} | " + " | ".join(f"{'per token':>11} {'completion':>12}" for _ in weights))
for i, (length, a) in enumerate(zip(LENGTHS, ADVANTAGES, strict=True)):
    print(f"{length:6d} {a:+5.1f} | " + " | ".join(f"{w[i].item():11.5f} {length * w[i].item():12.5f}"
                                                 for w in weights.values()))
assert torch.allclose(weights["token mean"], torch.full((4,), 1 / 15, dtype=torch.float64))
assert torch.allclose(weights["sequence mean"], 1 / (4 * torch.tensor(LENGTHS, dtype=torch.float64)))
assert torch.allclose(weights["constant"], torch.full((4,), 1 / 32, dtype=torch.float64))
# the length bias in one line: the length-8 wrong answer against the length-2 wrong answer, per token
per_token_8_vs_2 = {name: (w[3] / w[1]).item() for name, w in weights.items()}
print("per-token weight, length-8 wrong answer / length-2 wrong answer: "
      + ", ".join(f"{name} {value:.2f}" for name, value in per_token_8_vs_2.items()))
assert per_token_8_vs_2 == {"token mean": 1.0, "sequence mean": 0.25, "constant": 1.0}

# %% [markdown]
# Under the per-sequence mean the length-8 wrong answer's tokens each weigh 0.03125, a quarter (0.25) of the
# length-2 wrong answer's 0.125: the same mistake, spread over more tokens, is penalised less per
# token. Its completion total (0.25) is the same as every other completion's. Under the token mean and
# the constant every token weighs the same (1/15 and 1/32), so a completion's total grows with its length.
# The token mean and the constant differ only by a factor that is the same for every token of a batch
# (Σ|o_i| against N·T_max); across batches the token mean's factor moves with the lengths, the constant's
# does not.
#
# **Slider.** The weight of one token of a completion of length L, in a batch of four whose other three
# completions have length 4, as L goes from 1 to T_max = 8 (RambleTask's limit, the task below).

# %% tags=["nbval-ignore-output"]
# the slider figure: built here, shown (and redrawn in place) by live_plot
T_MAX = RambleTask.max_completion_length
ls = list(range(1, T_MAX + 1))
weight_curves = {name: [token_weights(agg, [L, 4, 4, 4], [1.0] * 4, T_MAX)[0].item() for L in ls]
          for name, agg in AGGREGATIONS.items()}  # weight of one token of the length-L completion
fig1, ax1 = plt.subplots(figsize=(6, 3), layout="constrained")
dots = {}
for name, ys in weight_curves.items():
    ax1.plot(ls, ys, color=COLORS[name], label=name)
    (dots[name],) = ax1.plot([ls[0]], [ys[0]], "o", color=COLORS[name])
ax1.set(xlabel="completion length L", ylabel="weight of one of its tokens", yscale="log")
ax1.legend(fontsize="small")


def update_weights(L):
    for name, dot in dots.items():
        dot.set_data([L], [weight_curves[name][L - 1]])
    return {name: weight_curves[name][L - 1] for name in weight_curves}


w_weights = live_plot(fig1, update_weights, L=slider(2, 1, T_MAX, 1, "L", integer=True))
display(w_weights)

# %%
at = {}
for L in (1, T_MAX):
    at[L] = probe(w_weights, {"L": L})
    print(f"L = {L:2d}: " + ", ".join(f"{name} {value:.4f}" for name, value in at[L].items()))
assert at[1]["sequence mean"] > at[1]["token mean"] > at[1]["constant"]
assert math.isclose(at[T_MAX]["sequence mean"], at[T_MAX]["constant"])
assert at[T_MAX]["constant"] < at[T_MAX]["token mean"]

# %% [markdown]
# **Training.** `RambleTask` (workbook/tasks.py): prompt "d=" with d a digit; the first character of the
# completion must be d, anything may follow, and the completion must end with EOS within T_max = 8 tokens
# (binary reward). A completion that reaches the limit is wrong, so the longest completions are all wrong;
# otherwise the reward does not depend on the length. The policy is a fresh TinyLM (the task has no
# checkpoint): it samples almost uniformly over the 15 tokens, so at the start most of its completions run
# to the limit (0.734 of the first batch). It also samples PAD and BOS, which decode to nothing: a
# completion that ran to the limit with one of them in it reads as a shorter text and can be scored right
# (the text cannot show the difference; the lengths and truncation flags below are read off the tokens).
# Three runs, one per aggregation, same seed; per iteration we split the sampled completions by reward and
# average their lengths (tokens, EOS included).

# %%
ramble = RambleTask()
RAMBLE = dict(SHORT, probe=nb06_variants.log_ratio_spread)  # the probe lets notebook 06 §4 reuse these runs


def ramble_run(label, **variant):
    """A variant on RambleTask (notebook 06 §1, §4 and §7 share the twin's run through the cache)."""
    return nb06_variants.train_variant(label, ramble, **RAMBLE, **variant)


agg_runs = {name: ramble_run("fixed") if name == "token mean" else
            ramble_run(name.replace(" ", "_"), functions={"grpo_loss": aggregated_loss(AGGREGATIONS[name])})
            for name in AGGREGATIONS}
wrong_length = {name: run.sample_mean("length", lambda s: s["reward"] == 0) for name, run in agg_runs.items()}
right_length = {name: run.sample_mean("length", lambda s: s["reward"] == 1) for name, run in agg_runs.items()}
print(f"{'aggregation':>14} | {'reward':>6} | {'length, wrong':>13} {'length, right':>13} {'truncated':>9}"
      "   (tail means)")
for name, run in agg_runs.items():
    print(f"{name:>14} | {tail_mean(run.stat('reward'), TAIL):6.3f} | "
          f"{tail_mean(wrong_length[name], TAIL):13.2f} {tail_mean(right_length[name], TAIL):13.2f} "
          f"{tail_mean(run.sample_mean('truncated'), TAIL):9.3f}")
tail_wrong = {name: tail_mean(values, TAIL) for name, values in wrong_length.items()}
tail_right = {name: tail_mean(values, TAIL) for name, values in right_length.items()}
tail_reward = [tail_mean(run.stat("reward"), TAIL) for run in agg_runs.values()]
tail_cut = [tail_mean(run.sample_mean("truncated"), TAIL) for run in agg_runs.values()]
longer = {name: tail_wrong["sequence mean"] - tail_wrong[name] for name in ("token mean", "constant")}
print("wrong completions, sequence mean minus: " + ", ".join(f"{name} {v:+.2f}" for name, v in longer.items())
      + f" tokens; truncated (tail) {min(tail_cut):.3f} to {max(tail_cut):.3f}")
first_cut = agg_runs["token mean"].sample_mean("truncated")[0]
print(f"first batch (the same in the three runs): truncated {first_cut:.3f}")
right_cut = {name: tail_mean(run.sample_mean("truncated", lambda s: s["reward"] == 1), TAIL)
             for name, run in agg_runs.items()}  # right answers that never emitted EOS: saved by a PAD or BOS
print("right completions that ran to the limit (tail): "
      + ", ".join(f"{name} {value:.3f}" for name, value in right_cut.items()))
assert first_cut > 0.5
assert all(0 < v < 0.5 for v in longer.values())  # the longest wrong completions, by less than half a token
assert max(tail_reward) < 0.15 and min(tail_cut) > 0.5  # 20 iterations: still mostly rambling to the limit
assert all(abs(tail_right[name] - tail_wrong[name]) < 0.35 for name in agg_runs)  # right ones as long (PAD, BOS)
assert all(0.45 < v < 0.55 for v in right_cut.values())  # about half the right ones ran to the limit

# %%
fig, axes = plt.subplots(1, 3, figsize=(10, 3), layout="constrained")
curves(axes[0], agg_runs, lambda run: run.stat("reward"), window=5, colors=COLORS, ylabel="reward")
curves(axes[1], agg_runs, lambda run: run.sample_mean("length", lambda s: s["reward"] == 0),
       window=5, colors=COLORS, ylabel="mean length, wrong answers")
curves(axes[2], agg_runs, lambda run: run.sample_mean("length", lambda s: s["reward"] == 1),
       window=5, colors=COLORS, ylabel="mean length, right answers")
for ax in axes:
    ax.get_legend().remove()  # one legend for the three panels, outside them: the curves fill the axes
fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize="small")
fig.suptitle("RambleTask, one seed (lines: mean over 5 iterations)")
plt.show()

# %% [markdown]
# What the short runs show: no length bias worth the name yet. Under the per-sequence mean the wrong
# completions are the longest (6.77 tokens over the last 10 iterations, against 6.53 for the token mean and
# 6.46 for the constant), but by 0.25 and 0.31 tokens, on one seed: too small to call. In 20 iterations from
# a fresh TinyLM the policy has barely learned the task (reward 0.117, 0.094, 0.094), more than half of the
# completions still run to the limit (0.539 to 0.566), and the right completions are as long as the wrong
# ones (6.56 to 6.58 tokens): about half of them (0.479 to 0.529 over the last 10 iterations) ran to the
# limit too, with no EOS, and were scored right because a PAD or BOS in them decoded to nothing (the caveat
# above). The bias itself is the tiny input's: the only length signal in this task is
# the zero reward of a completion that hits the limit, and the per-sequence mean spreads that penalty over
# its 8 tokens, each weighted 1/(N·8), a quarter of what a length-2 wrong answer's tokens get, where the
# token mean gives every token the same 1/Σ|o|. That weighting is what Dr. GRPO blames for the growth of
# wrong answers under the per-sequence mean; in these 20 iterations it did not show.
#
# > **You should know.**
# > - Symptom: completions grow longer over training, mostly the wrong ones, while the reward stalls.
# > - Statistic: the mean length of wrong (low-reward) completions per iteration. TRL logs
# >   `completions/mean_length` and `completions/mean_terminated_length`, verl `response_length/mean`;
# >   splitting by correctness is up to you, and it is the split that shows it.
# > - Fix: a token-level reduction (TRL `loss_type="dapo"`, its default; verl `loss_agg_mode=token-mean`,
# >   its default) or a constant normaliser (`"dr_grpo"`; verl `seq-mean-token-sum-norm` with a fixed
# >   `loss_scale_factor`). `loss_type="grpo"` / `seq-mean-token-mean` reproduce the paper and its bias.
#
# <details><summary>Question: the token mean and the constant give every token the same weight within a
# batch. Why would anyone prefer the constant? (Answer)</summary>
#
# Across batches the token mean's normaliser Σ|o_i| moves with the lengths: a batch of long completions
# gets a smaller per-token step than a batch of short ones. Under gradient accumulation, a token count
# taken per micro-batch also makes the result depend on how the batch was split (TRL 1.16.0's `"bnpo"`
# note: "results may slightly vary depending on the local batch size"; its default `"dapo"` counts the
# tokens of the global accumulated batch to avoid that). The constant N·T_max is the same for every batch,
# so each token's gradient is independent of what else was sampled.
# </details>

# %% [markdown]
# ## 2. Advantage scaling
#
# **Question.** After subtracting the group mean, divide by what? The group's std (the twins), the std
# of the whole batch, or nothing?
#
# **Key equations.** For prompt b with rewards r_{b,1..G}: A_{b,i} = (r_{b,i} − mean_i r_{b,i}) / s with
# s = std_i r_{b,i} + ε (group), s = std_{b,i} r_{b,i} + ε (batch) or s = 1 (none). For a binary reward
# and a group with k successes out of G, p̂ = k/G, the centred rewards are 1 − p̂ and −p̂ with std
# √(p̂(1−p̂)), so the group's total |A| is 2Gp̂(1−p̂) unscaled and 2G√(p̂(1−p̂)) with the group std: the group
# std multiplies that group's advantages by 1/√(p̂(1−p̂)), largest (√(G−1) for one success or one failure)
# in groups that are almost all wrong or almost all right. The batch std divides every group by the same
# number, so it keeps the unscaled weights' proportions. That is per sampled group. Per prompt, in
# expectation over its groups, the group std turns the prompt's expected update ((G−1)/G)·∇V(x) unscaled
# into c(p, G)·∇V(x), with p the prompt's success probability: c = 1 at G = 2, at most √(G−1), and close
# to 1/√(p(1−p)) only for large G, because a hard prompt's groups are mostly all-wrong and give nothing
# (notebook 05 §6.3: 2.57 rather than 7.14 at p = 0.02, G = 8).
#
# **The switch.**
#
# <table>
# <tr><th></th><th>name and values</th><th>default</th><th>source</th></tr>
# <tr><td>TRL 1.16.0</td><td><code>GRPOConfig.scale_rewards</code>: <code>"group"</code> / <code>True</code>
# ("scaled by the standard deviation within each group"), <code>"batch"</code> ("across the entire batch"),
# <code>"none"</code> / <code>False</code> ("The Dr. GRPO paper recommends not scaling rewards ... question-level
# difficulty bias")</td><td><code>"group"</code></td><td><code>trl/trainer/grpo_config.py</code>; the code divides
# by <code>std + 1e-4</code>, with <code>nanstd</code> (Bessel-corrected), in <code>grpo_trainer.py</code></td></tr>
# <tr><td>verl 0.9.1</td><td><code>algorithm.norm_adv_by_std_in_grpo</code>: <code>True</code> (divide by the
# group's <code>torch.std</code>, + <code>epsilon=1e-6</code>) or <code>False</code> ("as in Dr.GRPO"), for
# <code>algorithm.adv_estimator=grpo</code>, which has no batch-std value. The nearest to a batch std is another
# estimator, <code>adv_estimator=reinforce_plus_plus_baseline</code>: subtract the group mean, then whiten over
# the batch (<code>verl_F.masked_whiten</code> over every response token: the token-weighted mean is subtracted
# again and the result divided by the Bessel std of the centred scores, not of the raw
# rewards)</td><td><code>True</code></td><td><code>verl/trainer/config/ppo_trainer.yaml</code>;
# <code>compute_grpo_outcome_advantage</code> and
# <code>compute_reinforce_plus_plus_baseline_outcome_advantage</code> in <code>core_algos.py</code>,
# <code>masked_whiten</code> in <code>verl/utils/torch_functional.py</code></td></tr>
# </table>
#
# Both frameworks use the Bessel-corrected std (divide by G − 1), the twins the population std (divide by
# G, SPEC.md sentence S4 `population-std`): the same ranking, a factor √(G/(G−1)) apart.
#
# The group version is the twins' `batch_advantages`; the other two:

# %%
def batch_std_advantages(rewards, group_size, eps=1e-8):
    """A = (r - group mean) / (std over the whole batch + eps). rewards (B*G,) prompt-major -> (B*G,)"""
    groups = rewards.view(-1, group_size)  # (B, G)
    centred = groups - groups.mean(dim=1, keepdim=True)
    return (centred / (rewards.std(unbiased=False) + eps)).reshape(-1).float()


def unscaled_advantages(rewards, group_size, eps=1e-8):
    """A = r - group mean (Dr. GRPO). rewards (B*G,) prompt-major -> (B*G,)"""
    groups = rewards.view(-1, group_size)  # (B, G)
    return (groups - groups.mean(dim=1, keepdim=True)).reshape(-1).float()


SCALINGS = {"group std": grpo_fixed.batch_advantages, "batch std": batch_std_advantages, "none": unscaled_advantages}

# %% [markdown]
# **Tiny input.** Three prompts, eight binary rewards each: 1, 4 and 7 successes (a hard, a medium and
# an easy prompt). For each scaling, the advantage of one success, of one failure, and the group's total
# |A| (how much that prompt weighs in the update).

# %%
SUCCESSES = [1, 4, 7]
rewards = torch.tensor([[1.0] * k + [0.0] * (8 - k) for k in SUCCESSES]).reshape(-1)  # (3*8,) prompt-major
print(f"{'scaling':>9} | " + " | ".join(f"{f'{k}/8 right: A+, A-, sum|A|':>28}" for k in SUCCESSES))
group_weight = {}
for name, fn in SCALINGS.items():
    adv = fn(rewards, 8).view(3, 8)  # (B, G)
    group_weight[name] = adv.abs().sum(dim=1)  # (B,)
    print(f"{name:>9} | " + " | ".join(f"{adv[b, 0].item():+8.4f} {adv[b, -1].item():+8.4f} "
                                       f"{group_weight[name][b].item():9.4f}" for b in range(3)))
p = torch.tensor(SUCCESSES, dtype=torch.float64) / 8
assert torch.allclose(group_weight["none"].double(), 16 * p * (1 - p), atol=1e-6)
assert torch.allclose(group_weight["group std"].double(), 16 * (p * (1 - p)).sqrt(), atol=1e-5)
relative = {name: (w[0] / w[1]).item() for name, w in group_weight.items()}  # hard prompt vs medium prompt
print("weight of the 1/8 prompt relative to the 4/8 prompt: "
      + ", ".join(f"{name} {value:.4f}" for name, value in relative.items()))
assert relative["group std"] > relative["batch std"] == relative["none"]
assert math.isclose(grpo_fixed.batch_advantages(rewards, 8)[0].item(), math.sqrt(7), rel_tol=1e-6)  # sqrt(G - 1)

# %% [markdown]
# With the group std, a success on the hard prompt gets A = +2.6458 (√(G−1), the largest possible
# |A|) and the easy prompt's single failure −2.6458; unscaled they are +0.875 and −0.875. Relative to the
# medium prompt, the hard one weighs 0.6614 with the group std and 0.4375 without (or with the batch std,
# which divides all three groups by the same 0.5). Scaling by the group std is a choice of which prompts
# matter, not only of units.
#
# **Slider.** A group's total |A| against its number of successes k out of G, for the group std and for
# no scaling (the batch std is the unscaled curve divided by one number per batch). The slider is G.

# %% tags=["nbval-ignore-output"]
# the slider figure: built here, shown (and redrawn in place) by live_plot
fig2, ax2 = plt.subplots(figsize=(6, 3), layout="constrained")
(line_group,) = ax2.plot([], [], "o-", color="tab:blue", label="group std")
(line_none,) = ax2.plot([], [], "o-", color="tab:orange", label="none")
ax2.set(xlabel="successes k in the group", ylabel="group's total |A|")
ax2.legend(fontsize="small")


def update_scaling(G):
    ks = list(range(G + 1))
    totals = {name: [SCALINGS[name](torch.tensor([1.0] * k + [0.0] * (G - k)), G).abs().sum().item() for k in ks]
              for name in ("group std", "none")}
    line_group.set_data(ks, totals["group std"])
    line_none.set_data(ks, totals["none"])
    ax2.set(xlim=(-0.5, G + 0.5), ylim=(0, 1.05 * max(totals["group std"])))  # the group std's curve is the higher
    one = totals["group std"][1] / totals["none"][1]  # one success: how much the group std up-weights it
    half = totals["group std"][G // 2] / totals["none"][G // 2]
    return {"one success": one, "half": half}


w_scaling = live_plot(fig2, update_scaling, G=slider(8, 2, 16, 1, "G", integer=True))
display(w_scaling)

# %%
for G in (4, 16):
    r = probe(w_scaling, {"G": G})
    print(f"G = {G:2d}: group std / none for one success {r['one success']:.4f}, for k = G/2 {r['half']:.4f}")
    assert r["one success"] > r["half"] == 2.0  # 1/sqrt(p(1-p)) is 2 at p = 1/2 and larger elsewhere

# %% [markdown]
# **Training.** `AdditionTask` from its SFT checkpoint (binary reward; the SFT model's first batch is right
# 0.359 of the time, and prompts differ in difficulty): one run per scaling, same seed. Per iteration we also
# record which prompts carry the update: the share of the batch's total |A| that sits on groups with at most
# one success or at most one failure.

# %%
def extreme_share(module, policy, batch, cfg):
    """Share of sum |A| on groups with <= 1 success or <= 1 failure (binary rewards)."""
    rewards = batch["rewards"].view(-1, cfg.group_size)  # (B, G)
    weight = batch["advantages"].abs().view(-1, cfg.group_size).sum(dim=1)  # (B,)
    k = rewards.sum(dim=1)
    extreme = (k <= 1) | (k >= cfg.group_size - 1)
    return {"extreme_share": (weight[extreme].sum() / weight.sum()).item() if weight.sum() > 0 else math.nan}


addition = grpo_fixed.AdditionTask()
scale_runs = {name: nb06_variants.train_variant("fixed" if name == "group std" else name.replace(" ", "_"), addition,
                                           functions={} if name == "group std" else {"batch_advantages": fn},
                                           probe=extreme_share, **SHORT)
              for name, fn in SCALINGS.items()}
print(f"{'scaling':>9} | {'reward (tail)':>15} | {'share of |A| on extreme groups, mean over iterations':>53}")
shares = {}
for name, run in scale_runs.items():
    shares[name] = tail_mean(run.probe("extreme_share"), SHORT["steps"])
    print(f"{name:>9} | {tail_mean(run.stat('reward'), TAIL):15.3f} | {shares[name]:53.3f}")
start_reward = scale_runs["group std"].history[0]["reward"]
print(f"reward at the first iteration {start_reward:.3f}")
assert 0.2 < start_reward < 0.4
assert shares["group std"] > 1.4 * max(shares["batch std"], shares["none"])
scale_reward = {name: tail_mean(run.stat("reward"), TAIL) for name, run in scale_runs.items()}
assert max(scale_reward.values()) - min(scale_reward.values()) < 0.03

# %%
SCALE_COLORS = {"group std": "tab:blue", "batch std": "tab:purple", "none": "tab:orange"}
fig, axes = plt.subplots(1, 2, figsize=(9, 3), layout="constrained")
curves(axes[0], scale_runs, lambda run: run.stat("reward"), window=5, colors=SCALE_COLORS, ylabel="reward")
curves(axes[1], scale_runs, lambda run: run.probe("extreme_share"), window=5, colors=SCALE_COLORS,
       ylabel="share of |A| on extreme groups")
fig.suptitle("AdditionTask, one seed (lines: mean over 5 iterations)")
plt.show()

# %% [markdown]
# The group std puts the largest share of the update on extreme groups (0.116 of Σ|A| on average,
# against 0.073 for the batch std and 0.074 unscaled), as the tiny input predicts; the batch std and no
# scaling keep the same proportions, as they should. The share is small here because at a mean success
# rate of 0.36 to 0.44 (first batch; last 10 iterations) few groups have exactly one success or one
# failure. In the reward the three runs do not
# separate (0.419, 0.434, 0.438 over the last 10 iterations): on one seed and 20 iterations the weighting
# changes which prompts carry the update, not yet how far the policy gets.
#
# > **You should know.**
# > - The group std multiplies a sampled group's advantages by 1/√(p̂(1−p̂)) (p̂ = k/G, at most √(G−1)), so
# >   groups with one odd reward weigh most. Per prompt, in expectation, that is a weight c(p, G) on its
# >   ∇V(x): 1 at G = 2, at most √(G−1), near 1/√(p(1−p)) only for large G (notebook 05 §6.3); Dr. GRPO's
# >   "difficulty bias" argument. No scaling gives every prompt its plain ((G−1)/G)·∇V(x): the |A| mass
# >   2Gp̂(1−p̂) is largest at p̂ = ½, but that is the size of the signal, not an extra weight. The batch
# >   std divides all groups by one number per batch.
# > - Symptom of the group std's side: updates dominated by lucky successes on hard prompts and rare
# >   failures on easy ones. Of no scaling: the reward's units set the policy term's weight against β·KL
# >   (notebook 04 §3.1). They do not set the step: Adam divides each parameter's gradient by its running
# >   RMS, so a constant rescale of A changes the step only through Adam's ε (and the KL balance); a
# >   reward spread that changes during training still changes the step for a while, as Adam's second
# >   moment averages over hundreds of steps.
# > - Statistic: the share of Σ|A| on groups with ≤ 1 success or ≤ 1 failure, as above.
# > - Fix: TRL `scale_rewards="batch"` or `"none"`; verl `norm_adv_by_std_in_grpo=False`.
#
# <details><summary>Question: with the group std, does a group with rewards [1, 1, 1, 1, 1, 1, 1, 0.99] weigh
# less than one with [1, 0, 0, 0, 0, 0, 0, 0]? (Answer)</summary>
#
# No, the same: dividing by the group's own std gives any group with one odd reward the same advantages up
# to sign, so a 0.01 difference (noise, for all the trainer knows) carries as much weight as a real
# success; only ε stops differences far below it (notebook 04 §3). Unscaled, its total |A| is a hundredth of
# the other group's. The cell below computes both.
# </details>

# %%
odd = torch.tensor([1.0] * 7 + [0.99] + [1.0] + [0.0] * 7)  # (2*8,): the two groups of the question
for name in ("group std", "none"):
    totals = SCALINGS[name](odd, 8).view(2, 8).abs().sum(dim=1)
    print(f"{name:>9}: total |A| {totals[0].item():.4f} (1 x 7, 0.99) and {totals[1].item():.4f} (1, 0 x 7)")
    assert math.isclose(totals[0].item(), totals[1].item() * (1 if name == "group std" else 0.01), rel_tol=1e-4)

# %% [markdown]
# ## 3. Clip-higher and entropy collapse
#
# **Question.** Why can a token with a positive advantage and a small probability barely grow, and what
# does DAPO's separate upper clip change?
#
# **Key equation.** J = min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A). For A > 0 the token's own gradient is
# zero once ρ > 1 + ε_high, so within one rollout (all inner steps, which share π_old) its *own* gradient
# pushes its probability up to about (1 + ε_high)·π_old(a) and no further: an absolute gain of
# ε_high·π_old(a). At π_old = 0.01 that is 0.002 per rollout; at π_old = 0.7 it is 0.14. The clip caps the
# incentive, not the probability: other updates can carry the token past its cap (the second tiny input
# below). Rare tokens with good outcomes (exploration) get a small push, frequent ones a large one, so the
# distribution sharpens and entropy falls (DAPO's argument). A larger ε_high lets the rare ones climb
# faster; DAPO keeps ε_low at 0.2, arguing that a larger one lets tokens with A < 0 be pushed towards
# probability 0, which shrinks what the policy samples.
#
# **The switch.**
#
# <table>
# <tr><th></th><th>name and values</th><th>default</th><th>source</th></tr>
# <tr><td>TRL 1.16.0</td><td><code>GRPOConfig.epsilon</code> (lower) and <code>epsilon_high</code> ("If not
# specified, it defaults to the same value as the lower-bound ... DAPO recommends
# <code>0.28</code>")</td><td><code>epsilon=0.2</code>,
# <code>epsilon_high=None</code></td><td><code>trl/trainer/grpo_config.py</code>; <code>coef_2 = torch.clamp(coef_1,
# 1 - self.epsilon_low, 1 + self.epsilon_high)</code> in <code>grpo_trainer.py</code></td></tr>
# <tr><td>verl 0.9.1</td><td><code>actor_rollout_ref.actor.clip_ratio_low</code>, <code>clip_ratio_high</code> (and
# <code>clip_ratio_c</code> = 3.0, the dual-clip bound for A &lt; 0)</td><td>0.2,
# 0.2</td><td><code>verl/trainer/config/actor/actor.yaml</code>; <code>compute_policy_loss_vanilla</code> in
# <code>core_algos.py</code></td></tr>
# </table>
#
# `aggregated_loss(token_mean, clip_high=...)` from notebook 06 §1 is the clip-higher loss.
#
# **Tiny input.** One position, four tokens with π_old = [0.70, 0.20, 0.09, 0.01]. One sampled token with
# A = +1, and small gradient steps on the logits against the same π_old (as the inner steps of one
# rollout do) until the gradient is exactly zero: how far does that token's probability get?

# %%
P_OLD = torch.tensor([0.70, 0.20, 0.09, 0.01], dtype=torch.float64)


def push_one_token(loss_fn, token, max_steps=2000, lr=0.01):
    """SGD on the logits of one categorical, loss_fn on the single sampled `token` with A = +1 and
    pi_old fixed, until the gradient is exactly zero. -> (pi(token) at the end, steps taken)"""
    logits = P_OLD.log().clone().requires_grad_(True)
    old = P_OLD.log()[token].reshape(1, 1)  # (1, 1)
    steps = 0
    while steps < max_steps:
        logp = torch.log_softmax(logits, -1)[token].reshape(1, 1)  # (1, 1)
        loss = loss_fn(logp, old, torch.ones(1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.bool))
        (grad,) = torch.autograd.grad(loss, logits)
        if not grad.any():
            break
        logits, steps = (logits - lr * grad).detach().requires_grad_(True), steps + 1
    return torch.softmax(logits, -1)[token].item(), steps


print(f"{'token':>5} {'pi_old':>7} | {'eps_high':>8} {'steps':>5} {'pi after':>9} {'ratio':>7} {'gain':>7}")
pushed = {}
for token in (0, 3):
    for eps_high in (0.2, 0.28):
        pi, steps = push_one_token(aggregated_loss(token_mean, clip_high=eps_high), token)
        pushed[(token, eps_high)] = pi
        print(f"{token:5d} {P_OLD[token].item():7.2f} | {eps_high:8.2f} {steps:5d} {pi:9.4f} "
              f"{pi / P_OLD[token].item():7.4f} {pi - P_OLD[token].item():+7.4f}")
        assert 1 + eps_high < pi / P_OLD[token].item() < (1 + eps_high) * 1.02  # stops one small step past the clip
gains = {eps: (pushed[(0, eps)] - P_OLD[0].item()) / (pushed[(3, eps)] - P_OLD[3].item()) for eps in (0.2, 0.28)}
print("absolute gain, likely token / rare token: " + ", ".join(f"eps_high {e}: {g:.0f}x" for e, g in gains.items()))
assert all(g > 60 for g in gains.values())

# %% [markdown]
# The upper clip stops the token's own gradient at ρ = 1 + ε_high (ratios 1.2004 and 1.2188 for
# ε_high = 0.2; the rare token overshoots by one step). The likely token gains 0.1403 in probability, the
# rare one 0.0022: the same relative cap is a 64 times smaller absolute gain. With ε_high = 0.28 the gains
# are 0.1960 and 0.0029.
#
# **Tiny input: a cap on the incentive, not on the probability.** Above, each token has its own logits, so
# once its gradient stops nothing moves it. In a network the parameters are shared. Two contexts whose
# logits share a bias b (logits_c = W_c + b): both sampled token 3 with A = +1, rare in context 0
# (π_old = 0.01) and likely in context 1 (π_old = 0.90). The same SGD as above (lr 0.01, here 1000 steps)
# on W and b, with the loss over both tokens.

# %%
P_OLD_2 = torch.tensor([[0.70, 0.20, 0.09, 0.01], [0.05, 0.03, 0.02, 0.90]], dtype=torch.float64)  # (2, V)


def push_shared(steps=1000, lr=0.01, eps_high=0.2):
    """SGD on W (2, V) and a shared bias b (V,), logits_c = W_c + b, on the clip-higher token-mean loss of token
    3 in both contexts (A = +1, pi_old fixed). -> (ratios (2,), the step where context 0 first passed its cap,
    context 0's lowest ratio from then on, the largest |gradient| of context 0's own term at the end)"""
    W = P_OLD_2.log().clone().requires_grad_(True)
    b = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    old = P_OLD_2.log()[:, 3:]  # (2, 1)
    loss_fn = aggregated_loss(token_mean, clip_high=eps_high)
    logp = lambda: torch.log_softmax(W + b, -1)[:, 3:]  # noqa: E731  (2, 1)
    ones, mask = torch.ones(2, dtype=torch.float64), torch.ones(2, 1, dtype=torch.bool)
    passed, lowest = None, math.inf
    for step in range(steps):
        grads = torch.autograd.grad(loss_fn(logp(), old, ones, mask), (W, b))
        with torch.no_grad():
            for param, grad in zip((W, b), grads, strict=True):
                param -= lr * grad
        ratio0 = (logp()[0] - old[0]).exp().item()
        passed = step if passed is None and ratio0 > 1 + eps_high else passed
        lowest = min(lowest, ratio0) if passed is not None else lowest
    own = torch.autograd.grad(loss_fn(logp()[:1], old[:1], ones[:1], mask[:1]), (W, b))  # context 0's term only
    return (logp() - old).exp().squeeze(1), passed, lowest, max(g.abs().max().item() for g in own)


shared_ratio, passed, lowest, own_grad = push_shared()
print(f"context 0 (pi_old 0.01): past 1.2 from step {passed} (lowest ratio since {lowest:.4f}), ratio after 1000 "
      f"steps {shared_ratio[0].item():.4f}, its own gradient {own_grad:.1e}")
print(f"context 1 (pi_old 0.90): ratio {shared_ratio[1].item():.4f} (inside the window: never clipped)")
assert own_grad == 0 and lowest > 1.2 and shared_ratio[0] > 1.5 and shared_ratio[1] < 1.2
assert pushed[(3, 0.2)] / P_OLD[3].item() < 1.2 * 1.02  # alone, the same token stopped just past 1.2

# %% [markdown]
# Context 0's token passed 1.2 at step 10 and never came back below it, so its own gradient has been
# exactly 0 since; yet its ratio ended at 1.86. Context 1's token, likely already and far from its own cap
# (its ratio can never reach 1.2 from 0.90), kept raising the shared b_3, and with it token 3 in every
# context. In an LM every token's gradient moves shared weights, so a clipped token moves with the others.
#
# **Slider.** Across rollouts π_old moves up, so the cap on a token's own push compounds: moved by its own
# gradient alone (as in the first tiny input), a token that keeps a positive advantage reaches at most
# π_0(1 + ε_high)^k after k rollouts. How many rollouts from π_0 = 0.01 to 0.5? The figure shows that cap
# per rollout; the slider is ε_high.

# %% tags=["nbval-ignore-output"]
# the slider figure: built here, shown (and redrawn in place) by live_plot
def rollouts_needed(p0, target, eps_high):
    """Smallest k with p0 * (1 + eps_high)^k >= target."""
    return math.ceil(math.log(target / p0) / math.log(1 + eps_high))


fig3, ax3 = plt.subplots(figsize=(6, 3), layout="constrained")
ks = list(range(41))
(cap_line,) = ax3.plot(ks, [0.01] * len(ks), color="tab:blue", label="cap with eps_high")
ax3.plot(ks, [min(1.0, 0.01 * 1.2**k) for k in ks], color="0.6", ls="--", label="eps_high = 0.2")
ax3.axhline(0.5, color="0.8", lw=0.8)
ax3.set(xlabel="rollouts k", ylabel="max probability", yscale="log", ylim=(0.008, 1.2))
ax3.legend(fontsize="small", loc="lower right")


def update_cap(eps_high):
    cap_line.set_ydata([min(1.0, 0.01 * (1 + eps_high) ** k) for k in ks])
    return {"rollouts": rollouts_needed(0.01, 0.5, eps_high)}


w_cap = live_plot(fig3, update_cap, eps_high=slider(0.28, 0.1, 1.0, 0.02, "eps_high"))
display(w_cap)

# %%
needed = {eps: probe(w_cap, {"eps_high": eps})["rollouts"] for eps in (0.2, 0.28, 0.5)}
print("rollouts from 0.01 to 0.5: " + ", ".join(f"eps_high {eps:.2f}: {k}" for eps, k in needed.items()))
assert needed[0.2] > needed[0.28] > needed[0.5]

# %% [markdown]
# **Training.** `ReverseTask` with β = 0 (no KL anchor) and 2 inner epochs of 4 minibatches per rollout
# (8 inner steps), so that clipping binds; the upper clip ε_high ∈ {0.2, 0.28, 0.4}, the lower clip 0.2.
# Entropy is the trainer's own `entropy` statistic (mean per-token entropy of the sampling distribution).
# The upper clip fraction is the trainer's `clip_frac_pos`: the share of A > 0 tokens, over all inner steps,
# whose ratio is past the run's own 1 + ε_high (the twin's record knows only `cfg.clip` = 0.2, so the wider
# runs record through `nb06_variants.upper_clip_record`, which changes nothing but that count).
# After each update a probe measures how far the A > 0 tokens actually rose: the median ratio π/π_old
# of those that were rare (π_old < 0.2) and of those that were likely (π_old > 0.5).

# %%
CLIPPY = dict(SHORT, beta=0.0, inner_epochs=2, minibatches=4)  # 8 inner steps per rollout, no KL anchor
EPS_HIGH = [0.2, 0.28, 0.4]
reverse = ReverseTask()


def rare_token_ratios(module, policy, batch, cfg):
    """After the update: the median ratio pi / pi_old of the A > 0 tokens that were rare (pi_old < 0.2)
    and of those that were likely (pi_old > 0.5)."""
    logp = module.policy_logprobs(policy, batch["prompt_ids"], batch["prompt_mask"], batch["completions"],
                                  batch["mask"], cfg.temperature)  # (N, T)
    old = batch["old_logprobs"]
    good = batch["mask"] & (batch["advantages"][:, None] > 0)  # (N, T)
    ratio = (logp - old).exp()
    median = lambda sel: ratio[sel].median().item() if sel.any() else math.nan  # noqa: E731
    return {"rare": median(good & (old.exp() < 0.2)), "likely": median(good & (old.exp() > 0.5))}


def clip_run(eps_high):
    """The clip-higher variant on ReverseTask (cached by nb06_variants.train_variant); its clip_frac_pos counts
    the A > 0 tokens past its own 1 + eps_high."""
    if eps_high == 0.2:  # the twin
        functions, wrap = {}, None
    else:
        functions = {"grpo_loss": aggregated_loss(token_mean, clip_high=eps_high)}
        wrap = {"inner_step_record": nb06_variants.upper_clip_record(eps_high)}
    return nb06_variants.train_variant(f"clip_high_{eps_high}", reverse, **CLIPPY, probe=rare_token_ratios,
                                       functions=functions, wrap=wrap)


def clip_summary(run):
    entropy = run.stat("entropy")
    return {"reward": tail_mean(run.stat("reward"), TAIL), "entropy": tail_mean(entropy, TAIL),
            "entropy, mean": sum(entropy) / len(entropy),
            "clip_frac_pos": sum(run.stat("clip_frac_pos")) / len(entropy),
            "rare": tail_mean(run.probe("rare"), SHORT["steps"]),
            "likely": tail_mean(run.probe("likely"), SHORT["steps"])}


clip_table = {eps: clip_summary(clip_run(eps)) for eps in EPS_HIGH}
print(f"{'eps_high':>8} | {'reward':>6} {'entropy':>7} {'entropy, mean':>13} {'clip_frac_pos':>13} | "  # tails
      f"{'median ratio after the update, A > 0: rare':>42} {'likely':>6}")
for eps, row in clip_table.items():
    print(f"{eps:8.2f} | {row['reward']:6.3f} {row['entropy']:7.3f} {row['entropy, mean']:13.3f} "
          f"{row['clip_frac_pos']:13.3f} | {row['rare']:42.3f} {row['likely']:6.3f}")
low, mid, high = (clip_table[eps] for eps in EPS_HIGH)
assert low["clip_frac_pos"] > mid["clip_frac_pos"] > high["clip_frac_pos"]  # a wider window clips fewer A > 0
assert low["reward"] < mid["reward"] < high["reward"] and low["entropy"] > mid["entropy"] > high["entropy"]
assert all(row["rare"] > 1 + eps > row["likely"] > 1 for eps, row in clip_table.items())  # past its own cap
printed = {key: [f"{row[key]:.3f}" for row in clip_table.values()]
           for key in ("clip_frac_pos", "reward", "entropy", "rare")}  # the table's columns, eps_high 0.2, 0.28, 0.4
assert printed == {"clip_frac_pos": ["0.135", "0.101", "0.073"], "reward": ["0.238", "0.277", "0.306"],
                   "entropy": ["0.927", "0.803", "0.724"], "rare": ["1.402", "1.286", "1.489"]}  # as quoted
likely = [row["likely"] for row in clip_table.values()]
assert (f"{min(likely):.3f}", f"{max(likely):.3f}") == ("1.001", "1.009")  # as quoted
start_entropy = clip_run(0.2).history[0]["entropy"]  # the same initial policy in all three runs
print(f"entropy at the first iteration {start_entropy:.3f}")
assert all(row["entropy"] > 0.7 * start_entropy for row in clip_table.values())  # no collapse in 20 iterations
assert f"{start_entropy:.3f}" == "0.937"  # as quoted

# %% tags=["nbval-ignore-output"]
# the slider figure: built here, shown (and redrawn in place) by live_plot
fig4, axes4 = plt.subplots(1, 2, figsize=(9, 3), layout="constrained")
base = clip_run(0.2)
for ax, key in zip(axes4, ("reward", "entropy"), strict=True):
    ax.plot(smooth(base.stat(key)), color="0.5", label="eps_high 0.2")
    every = [v for eps in EPS_HIGH for v in smooth(clip_run(eps).stat(key))]  # limits fit every slider position
    pad = 0.05 * (max(every) - min(every))
    ax.set(xlabel="iteration", ylabel=key, xlim=(0, SHORT["steps"] - 1), ylim=(min(every) - pad, max(every) + pad))
(reward_line,) = axes4[0].plot(smooth(base.stat("reward")), color="tab:red", label="eps_high (slider)")
(entropy_line,) = axes4[1].plot(smooth(base.stat("entropy")), color="tab:red", label="eps_high (slider)")
axes4[0].legend(fontsize="small")
fig4.suptitle("ReverseTask, beta = 0, 8 inner steps, one seed (lines: mean over 5 iterations)")


def update_clip(eps_high):
    run = clip_run(eps_high)
    reward_line.set_ydata(smooth(run.stat("reward")))
    entropy_line.set_ydata(smooth(run.stat("entropy")))
    return clip_summary(run)


w_clip = live_plot(fig4, update_clip, eps_high=choice(EPS_HIGH, 0.28, "eps_high"))
display(w_clip)

# %%
cached = nb06_variants.cached_runs()
for eps in (0.2, 0.4, 0.28):
    r = probe(w_clip, {"eps_high": eps})
    print(f"eps_high {eps}: reward {r['reward']:.3f}, entropy {r['entropy']:.3f}")
    assert r == clip_table[eps]
assert nb06_variants.cached_runs() == cached  # a slider move replays a cached run, it trains nothing

# %% [markdown]
# No entropy collapse to prevent here: the policy starts from the addition SFT checkpoint (entropy 0.937 at the first
# iteration) and the twin (ε_high = 0.2) ends its 20 iterations at 0.927 (last 10). Raising ε_high does what the tiny
# input says to the clipping: the share of A > 0 tokens past their run's upper cap falls (0.135, 0.101, 0.073 for ε_high
# = 0.2, 0.28, 0.4), and on this seed the reward rises (0.238, 0.277, 0.306) while the entropy falls (0.803 and 0.724
# against 0.927). Only the clip fraction's order follows from the mechanism; the reward's and the entropy's are this one
# seed's, and a claim about them needs several seeds. DAPO's entropy argument concerns rare tokens, whose probability a
# tight upper clip keeps from growing. After the update the rare A > 0 tokens' median ratio is 1.402, 1.286 and 1.489,
# past each run's own 1 + ε_high, while the likely ones barely move (1.001 to 1.009). The clip stops only a token's own
# gradient; three things can carry it further, and these runs do not tell them apart: other tokens' gradients through
# the shared parameters (the second tiny input above), the step that crosses the cap (an Adam step moves every parameter
# by about lr whatever the gradient's size, so it can overshoot), and Adam's momentum, which keeps moving the parameters
# for a few steps after the token's gradient stops. One seed: read the directions, not the sizes. These clip fractions
# (0.073 to 0.135) are shares of the A > 0 tokens: TRL's `clip_ratio/high_mean` divides the same count by all completion
# tokens, so on these runs it would read lower.
#
# > **You should know.**
# > - Symptom: entropy falls towards 0 while the reward stalls below its ceiling: the policy has stopped
# >   exploring before it found the answers.
# > - Statistic: the trainer's `entropy` (TRL logs `entropy`, verl `actor/entropy`), next to the upper
# >   clip fraction: `clip_frac_pos` here (A > 0 tokens past 1 + ε_high, as a share of the A > 0 tokens);
# >   TRL 1.16.0 `clip_ratio/high_mean` (the same tokens, as a share of all completion tokens;
# >   `clip_ratio/low_mean` is the A < 0 side). verl 0.9.1 logs no upper-only fraction: `actor/pg_clipfrac`
# >   counts the tokens clipped on *either* side (`torch.gt(pg_losses2, pg_losses1)` in
# >   `compute_policy_loss_vanilla`: A > 0 past 1 + `clip_ratio_high` or A < 0 below 1 − `clip_ratio_low`),
# >   and `actor/pg_clipfrac_lower` counts the dual-clip bound (A < 0 with ratio > `clip_ratio_c`).
# > - Fix: raise the upper clip only (TRL `epsilon_high=0.28`, verl `clip_ratio_high=0.28`), keep the
# >   lower one. A KL anchor (β > 0) and an entropy bonus are the other usual brakes on entropy (not run
# >   here).
#
# <details><summary>Question: DAPO raises only the upper clip. What would raising the lower one (a smaller
# 1 − ε_low) do? (Answer)</summary>
#
# It lets a token with A < 0 lose more than ε_low of its probability to its own gradient in one rollout.
# DAPO keeps ε_low at 0.2 for that reason: tokens pushed towards probability 0 are no longer sampled, so
# their advantage can never be corrected, and the space the policy samples from shrinks. It is not simply
# the mirror image of clip-higher for entropy: lowering token a's logit changes the entropy H at the rate
# π(a)(log π(a) + H), so pushing down a token rarer than e^{−H} lowers H and pushing down a likelier one
# raises it. Not run here.
# </details>

# %% [markdown]
# **The window in log space.** The clip acts on ρ, but a gradient step moves log π, and there the window is not
# symmetric: log(1 − ε) + log(1 + ε) = log(1 − ε²) < 0 for every 0 < ε < 1, so [1 − ε, 1 + ε] reaches further below
# ratio 1 than above it in log-ratio. An A < 0 token's own gradient stays on until its log-prob has fallen by
# −log(1 − ε), an A > 0 token's only until it has risen by log(1 + ε); in probability both sides stop at a change of
# ε·π_old.

# %%
def log_window(eps_low, eps_high):
    """The clip window [1 - eps_low, 1 + eps_high] in log-ratio: (log(1 - eps_low), log(1 + eps_high))."""
    return math.log(1 - eps_low), math.log(1 + eps_high)


sym_low, sym_high = log_window(0.2, 0.2)
dapo_low, dapo_high = log_window(0.2, 0.28)
print(f"eps 0.2: log-ratio window [{sym_low:+.3f}, {sym_high:+.3f}], sum log(1 - eps^2) = {sym_low + sym_high:+.3f}, "
      f"room below / room above {-sym_low / sym_high:.3f}")
print(f"symmetric in log space: eps_low = 1 - 1/1.2 = {1 - 1 / 1.2:.3f} for eps_high 0.2, "
      f"eps_high = 1/0.8 - 1 = {1 / 0.8 - 1:.3f} for eps_low 0.2")
print(f"DAPO (eps_low 0.2, eps_high 0.28): log-ratio window [{dapo_low:+.3f}, {dapo_high:+.3f}]")
assert all(sum(log_window(e, e)) < 0 for e in (0.01, 0.1, 0.2, 0.5, 0.9))  # log(1 - eps^2) < 0
assert abs(sum(log_window(0.2, 1 / 0.8 - 1))) < 1e-12 and abs(sum(log_window(1 - 1 / 1.2, 0.2))) < 1e-12
assert [f"{x:+.3f}" for x in (sym_low, sym_high, sym_low + sym_high, dapo_high)] == [
    "-0.223", "+0.182", "-0.041", "+0.247"] and f"{-sym_low / sym_high:.3f}" == "1.224"  # as quoted
assert (f"{1 - 1 / 1.2:.3f}", f"{1 / 0.8 - 1:.3f}") == ("0.167", "0.250")  # as quoted

# %% [markdown]
# At ε = 0.2 an A < 0 token has 1.224 times the log-prob room of an A > 0 token (0.223 against 0.182 nats) before its
# own gradient stops. That is an asymmetry in log units; notebook 02 §3's drift asymmetry is in ratio units, where
# [0.8, 1.2] is symmetric, so the log window does not add to it (the asymmetry there comes from the softmax: likely
# A > 0 tokens barely move through it). A window symmetric in log space is [1/(1 + ε), 1 + ε]: ε_low = 0.167 for
# ε_high = 0.2, or ε_high = 0.25
# for ε_low = 0.2. DAPO's ε_high = 0.28 goes a little past that, to [−0.223, +0.247]; DAPO's own argument for it is
# the rare tokens' small absolute gain (the first tiny input), not the log symmetry.
#
# **How an update moves the entropy.** Per position, with logits z and π = softmax(z), ∂H/∂z_a = −π(a)(log π(a) + H),
# and Σ_a π(a)(log π(a) + H) = 0, so to first order a logit change Δz moves the entropy by
#
# $$\Delta H \approx -\sum_a \pi(a)\big(\log\pi(a) + H\big)\,\Delta z_a = -\mathrm{Cov}_{a\sim\pi}\big(\log\pi(a),\,
# \Delta z_a\big).$$
#
# The step z_a += η A(a) gives ΔH ≈ −η Cov_π(log π, A). The plain policy-gradient step on E_π[A] moves z_a by
# η π(a)(A(a) − E_π A) (∂E_π[A]/∂z_a, also the expected gradient of one sampled token's A ∇log π), so
# ΔH ≈ −η Cov_π(log π, π (A − E_π A)): the same covariance, each token weighted once more by its probability. Tiny
# input: π_old from above, advantage +1 or −1 on one token and 0 on the others, each slope against a finite difference.

# %%
def entropy(z):
    """H(softmax(z)) over the last axis."""
    logp = torch.log_softmax(z, -1)
    return -(logp.exp() * logp).sum(-1)


def entropy_slopes(z, advantage, h=1e-6):
    """dH/deta at eta = 0 for the steps z += eta * A and z += eta * pi * (A - E_pi A) (the policy gradient):
    -Cov_pi(log pi, step) and a central finite difference. -> {step: (covariance formula, finite difference)}"""
    pi, logp = torch.softmax(z, -1), torch.log_softmax(z, -1)
    cov = lambda x, y: (pi * (x - (pi * x).sum()) * (y - (pi * y).sum())).sum()  # noqa: E731
    steps = {"z += eta A": advantage, "policy gradient": pi * (advantage - (pi * advantage).sum())}
    return {name: (-cov(logp, dz).item(), ((entropy(z + h * dz) - entropy(z - h * dz)) / (2 * h)).item())
            for name, dz in steps.items()}


z_old = P_OLD.log()
h_old = entropy(z_old).item()
print(f"pi_old {P_OLD.tolist()}: H = {h_old:.4f}, e^-H = {math.exp(-h_old):.3f}")
slopes, slopes_neg = {}, {}  # A = +1 and A = -1 on one token
for token in (0, 3):
    for sign, table in ((1, slopes), (-1, slopes_neg)):
        table[token] = entropy_slopes(z_old, sign * torch.eye(4, dtype=torch.float64)[token])
        print(f"A = {sign:+d} on token {token} (pi_old {P_OLD[token].item():.2f}): " + ", ".join(
            f"{name} dH/deta {f:+.4f} (finite difference {d:+.4f})" for name, (f, d) in table[token].items()))
centred = P_OLD * (P_OLD.log() + h_old)  # pi(b)(log pi(b) + H): the policy-gradient step's threshold, below
threshold = (P_OLD * centred).sum().item()
print(f"policy gradient on token a lowers H iff pi(a)(log pi(a) + H) > sum_b pi(b)^2 (log pi(b) + H) = "
      f"{threshold:+.4f}")
g = torch.Generator().manual_seed(0)
for _ in range(5):  # any logits and advantages, not just this tiny input
    z, a = torch.randn(6, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    assert all(abs(f - d) < 1e-7 for f, d in entropy_slopes(z, a).values())
    logits = z.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad((torch.softmax(logits, -1) * a).sum(), logits)  # d E_pi[A] / dz
    assert torch.allclose(grad, torch.softmax(z, -1) * (a - (torch.softmax(z, -1) * a).sum()))
assert all(abs(f - d) < 1e-7 for s in slopes.values() for f, d in s.values())
assert all(f < 0 for f, _ in slopes[0].values()) and all(f > 0 for f, _ in slopes[3].values())  # likely: down
assert all(f > 0 for f, _ in slopes_neg[0].values()) and all(f < 0 for f, _ in slopes_neg[3].values())  # A < 0: up
assert all(abs(slopes_neg[t][s][0] + slopes[t][s][0]) < 1e-15 for t in (0, 3) for s in slopes[t])  # linear in A
for token in range(4):  # the policy-gradient step's sign flips at its own threshold, not at e^-H
    pg_slope = entropy_slopes(z_old, torch.eye(4, dtype=torch.float64)[token])["policy gradient"][0]
    assert (pg_slope < 0) == (centred[token].item() > threshold)
assert P_OLD[0] > math.exp(-h_old) > P_OLD[3] and f"{math.exp(-h_old):.3f}" == "0.434"  # the sign flips at e^-H
assert [f"{slopes[t][s][0]:+.4f}" for t in (0, 3) for s in ("z += eta A", "policy gradient")] == [
    "-0.3344", "-0.1011", "+0.0377", "+0.0023"] and f"{h_old:.4f}" == "0.8343"  # as quoted

# %% [markdown]
# For the step z += ηA, raising a token likelier than e^{−H} (0.434 here) lowers the entropy (−0.3344 per unit η for
# the token at 0.70), raising a rarer one raises it (+0.0377 for the token at 0.01). The policy-gradient step, which
# weights each token by its probability once more, shrinks the rare token's push on the entropy to +0.0023, and its
# threshold is not e^{−H}: raising token a lowers H iff π(a)(log π(a) + H) > Σ_b π(b)²(log π(b) + H) (the line under
# the slopes). ΔH is linear in A, so A = −1 flips every sign (+0.3344 for the likely token, −0.0377 for the rare
# one): raising likely tokens (A > 0) or lowering rare ones (A < 0) makes the covariance positive and lowers the
# entropy; rare tokens with A > 0 and likely tokens with A < 0 raise it. A failed completion can be mostly likely
# tokens (all but one wrong digit may be the policy's favourites), and the lower clip bounds their fall once their
# ratio drops below 1 − ε; the rare A > 0 tokens are the ones the upper clip binds on (a likely token can hardly
# reach 1 + ε), and clip-higher loosens that bound: the mechanism behind DAPO's clip-higher. Cui et al. (2025, *The
# Entropy Mechanism of Reinforcement Learning for Reasoning Language Models*) derive this covariance for LLM RL,
# report it mostly positive during training, and clip or KL-penalise the tokens with the largest covariance
# (Clip-Cov, KL-Cov; in verl 0.9.1 the policy losses `clip_cov` and `kl_cov` of
# `actor_rollout_ref.actor.policy_loss.loss_mode`, `core_algos.py`). The formula is per position and first order in
# the logit change; in a network, Δz is whatever the parameter step induces at every position.

# %% [markdown]
# ## 4. Sequence-level ratio (GSPO)
#
# **Question.** The reward is per sequence, the ratio per token. What if the ratio is per sequence too?
#
# **Key equations.** GSPO replaces the per-token ratios ρ_{i,t} by one length-normalised sequence ratio
#
# $$s_i = \Big(\frac{\pi_\theta(o_i)}{\pi_{old}(o_i)}\Big)^{1/\lvert o_i\rvert}
# = \exp\Big(\frac{1}{\lvert o_i\rvert}\sum_t \log\rho_{i,t}\Big),\qquad
# L = -\frac{1}{N}\sum_i \min\big(s_i A_i,\ \mathrm{clip}(s_i, 1-\varepsilon, 1+\varepsilon) A_i\big),$$
#
# the geometric mean of the token ratios. Its gradient is s_i A_i · (1/|o_i|) Σ_t ∇log π_θ(o_{i,t}):
# every token of a completion gets the same weight, and clipping switches a whole completion off or on.
#
# **The switch.**
#
# <table>
# <tr><th></th><th>name and values</th><th>default</th><th>source</th></tr>
# <tr><td>TRL 1.16.0</td><td><code>GRPOConfig.importance_sampling_level</code>: <code>"token"</code> or
# <code>"sequence"</code> ("averages the log-probability ratios across valid tokens to produce a single ratio per
# sequence"). The paper's per-sequence mean also needs <code>loss_type="grpo"</code>: with the default
# <code>"dapo"</code> (or <code>"bnpo"</code>, <code>"dr_grpo"</code>) TRL warns that the loss "effectively weights
# each sequence by its completion length"</td><td><code>"token"</code></td><td><code>trl/trainer/grpo_config.py</code>;
# <code>log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)</code> and the warning
# in <code>grpo_trainer.py</code></td></tr>
# <tr><td>verl 0.9.1</td><td><code>actor_rollout_ref.actor.policy_loss.loss_mode: gspo</code> (with
# <code>clip_ratio_low</code> / <code>clip_ratio_high</code>), and set
# <code>actor_rollout_ref.actor.loss_agg_mode: seq-mean-token-mean</code> by hand: the loss receives the actor's
# <code>loss_agg_mode</code>, whose default is <code>token-mean</code> (verl's own comment in
# <code>compute_policy_loss_gspo</code>: "default is token-mean"; the
# <code>"seq-mean-token-mean"</code> in its signature is never used)</td><td><code>vanilla</code>;
# <code>loss_agg_mode: token-mean</code></td><td><code>compute_policy_loss_gspo</code> in
# <code>core_algos.py</code>; <code>verl/workers/utils/losses.py</code> (<code>loss_agg_mode =
# config.loss_agg_mode</code>); <code>actor.yaml</code></td></tr>
# </table>
#
# In both frameworks the loss aggregation sets the weighting. TRL broadcasts s_i over the completion's
# tokens; verl writes it per token as sg[s_i]·π_θ(o_{i,t})/sg[π_θ(o_{i,t})] (value s_i, gradient
# s_i∇log π_θ(o_{i,t})). Under a token mean each token's gradient is then s_i A_i ∇log π_θ(o_{i,t})/Σ_j|o_j|,
# so a completion counts in proportion to its length; under the per-sequence mean it is the paper's
# s_i A_i ∇log π_θ(o_{i,t})/(N|o_i|). The loss below is the paper's.

# %%
def sequence_log_ratio(logprobs, old_logprobs, mask):
    """log s_i = mean over the completion's tokens of log(pi / pi_old). -> (N,)"""
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), 0.0)  # (N, T)
    return log_ratio.sum(dim=1) / mask.sum(dim=1).clamp(min=1)


def gspo_loss_with(clip_seq=None):
    """A grpo_loss with the twins' signature and GSPO's sequence ratio; clip_seq overrides the clip
    radius (GSPO uses a far smaller one than the token-level 0.2)."""

    def grpo_loss(logprobs, old_logprobs, advantages, mask, clip=0.2):
        eps = clip if clip_seq is None else clip_seq
        s = torch.exp(sequence_log_ratio(logprobs, old_logprobs, mask.bool()))  # (N,)
        adv = advantages.detach()  # (N,)
        return -torch.min(s * adv, s.clamp(1 - eps, 1 + eps) * adv).mean()

    return grpo_loss


# %% [markdown]
# **Tiny input.** Two completions of four tokens, both with A = +1, ε = 0.2. The first has token ratios
# e^{0.4}, e^{−0.3}, e^{0}, e^{0.1} (one token past 1 + ε, one below 1 − ε); the second e^{0.3}, e^{0.3},
# e^{0.3}, e^{0} (three past 1 + ε). Gradients with respect to each token's log-prob:

# %%
LOG_RATIOS = torch.tensor([[0.4, -0.3, 0.0, 0.1], [0.3, 0.3, 0.3, 0.0]], dtype=torch.float64)  # (N, T)


def ratio_gradients(loss_fn, log_ratios, clip=0.2):
    """-dLoss/dlogp per token at pi_old = 1 (log_old = 0), A = +1 for every completion. -> (N, T)"""
    logp = log_ratios.clone().requires_grad_(True)
    mask = torch.ones_like(log_ratios, dtype=torch.bool)
    loss_fn(logp, torch.zeros_like(logp), torch.ones(len(log_ratios), dtype=torch.float64), mask, clip).backward()
    return -logp.grad


token_grad = ratio_gradients(grpo_fixed.grpo_loss, LOG_RATIOS)
seq_grad = ratio_gradients(gspo_loss_with(), LOG_RATIOS)
s = torch.exp(LOG_RATIOS.mean(dim=1))
for i in range(2):
    print(f"completion {i}: token ratios " + " ".join(f"{r:.3f}" for r in LOG_RATIOS[i].exp().tolist())
          + f" -> s = {s[i].item():.4f}")
    print("   token-level gradient    " + " ".join(f"{v + 0.0:+.4f}" for v in token_grad[i].tolist()))
    print("   sequence-level gradient " + " ".join(f"{v + 0.0:+.4f}" for v in seq_grad[i].tolist()))
assert token_grad[0, 0] == 0 and (token_grad[0, 1:] > 0).all()  # only the token past 1 + eps is clipped
assert torch.allclose(seq_grad[0], s[0] / 4 / 2 * torch.ones(4, dtype=torch.float64))  # s A / |o| / N each
assert (seq_grad[1] == 0).all() and token_grad[1, 3] > 0  # s = e^0.225 > 1.2: the whole completion is off

# %% [markdown]
# In completion 0 the token-level loss switches off the one token past 1 + ε (ratio 1.492) and keeps
# the others, each weighted by its own ratio (0.0926 for ratio 0.741, 0.1381 for 1.105); the sequence
# ratio s = 1.0513 is inside the window, so all four tokens get the same s·A/(|o|·N) = 0.1314. In
# completion 1 three tokens sit at 1.350 and the fourth at 1: token-level clipping keeps the fourth,
# sequence-level clipping drops the whole completion (s = 1.2523).
#
# **Slider.** The clip radius ε: which tokens of the two completions keep a gradient under each ratio
# (filled: nonzero gradient; hollow: clipped).

# %% tags=["nbval-ignore-output"]
# the slider figure: built here, shown (and redrawn in place) by live_plot
fig5, ax5 = plt.subplots(figsize=(6, 2.6), layout="constrained")
xs = [0, 1, 2, 3, 5, 6, 7, 8]  # two completions side by side
token_dots = ax5.scatter(xs, [1] * 8, s=80, color="tab:blue", label="per-token ratio")
seq_dots = ax5.scatter(xs, [0] * 8, s=80, color="tab:green", label="sequence ratio (GSPO)")
ax5.set(yticks=[0, 1], yticklabels=["GSPO", "token"], xticks=xs, ylim=(-0.6, 1.6), xlabel="token (two completions)")
ax5.set_xticklabels([f"{r:.2f}" for r in LOG_RATIOS.reshape(-1).exp().tolist()], fontsize="small")


def update_gspo(clip):
    counts = {}
    for dots, fn, name in ((token_dots, grpo_fixed.grpo_loss, "token"), (seq_dots, gspo_loss_with(), "sequence")):
        live = (ratio_gradients(fn, LOG_RATIOS, clip) != 0).reshape(-1)  # (8,)
        dots.set_facecolors([dots.get_edgecolors()[0] if on else "white" for on in live.tolist()])
        counts[name] = int(live.sum())
    ax5.set_title(f"clip {clip:.2f}: tokens with a gradient, token ratio {counts['token']} of 8, "
                  f"GSPO {counts['sequence']} of 8", fontsize="small")
    return counts


w_gspo = live_plot(fig5, update_gspo, clip=slider(0.2, 0.05, 0.5, 0.05, "clip"))
display(w_gspo)

# %%
for clip in (0.05, 0.2, 0.35):
    r = probe(w_gspo, {"clip": clip})
    print(f"clip {clip:.2f}: tokens with a gradient: token ratio {r['token']} of 8, "
          f"sequence ratio {r['sequence']} of 8")
assert probe(w_gspo, {"clip": 0.05})["sequence"] == 0  # s = 1.0513 > 1.05: completion 0 is off too
assert probe(w_gspo, {"clip": 0.2}) == {"token": 4, "sequence": 4}  # the same count, different tokens

# %% [markdown]
# **Training.** `RambleTask` (completions up to 8 tokens), the token-level twin against GSPO with the
# same ε = 0.2. After each update we measure the spread of the log-ratios the next inner step would see:
# the std of the per-token log ρ and of the per-completion log s.

# %%
gspo_runs = {"token ratio": agg_runs["token mean"],  # notebook 06 §1's twin run (cached, probed)
             "sequence ratio": ramble_run("gspo", functions={"grpo_loss": gspo_loss_with()})}
print(f"{'run':>14} | {'reward (tail)':>15} | {'std log rho':>11} {'std log s':>9} | "
      f"{'tokens outside':>14} {'completions outside':>19}   (spreads: means over iterations)")
spread = {}
for name, run in gspo_runs.items():
    spread[name] = {k: tail_mean(run.probe(k), SHORT["steps"])
                    for k in ("token_std", "seq_std", "token_out", "seq_out")}
    print(f"{name:>14} | {tail_mean(run.stat('reward'), TAIL):15.3f} | {spread[name]['token_std']:11.4f} "
          f"{spread[name]['seq_std']:9.4f} | {spread[name]['token_out']:14.4f} {spread[name]['seq_out']:19.4f}")
assert all(v["seq_std"] < v["token_std"] and v["seq_out"] < v["token_out"] for v in spread.values())
assert spread["sequence ratio"]["seq_std"] > spread["token ratio"]["seq_std"]
assert spread["sequence ratio"]["token_std"] > spread["token ratio"]["token_std"]
assert spread["sequence ratio"]["seq_out"] < spread["sequence ratio"]["token_out"] / 2

# %%
fig, axes = plt.subplots(1, 2, figsize=(9, 3), layout="constrained")
GSPO_COLORS = {"token ratio": "tab:blue", "sequence ratio": "tab:green"}
curves(axes[0], gspo_runs, lambda run: run.stat("reward"), window=5, colors=GSPO_COLORS, ylabel="reward")
for name, run in gspo_runs.items():
    axes[1].plot(smooth(run.probe("token_std")), color=GSPO_COLORS[name], label=f"{name}: std log rho")
    axes[1].plot(smooth(run.probe("seq_std")), color=GSPO_COLORS[name], ls="--", label=f"{name}: std log s")
axes[1].set(xlabel="iteration", ylabel="std after the update")
axes[1].legend(fontsize="small")
fig.suptitle("RambleTask, one seed (lines: mean over 5 iterations)")
plt.show()

# %% [markdown]
# Within each run the completion means vary less than the tokens: std of log s 0.0778 against 0.1557
# for log ρ in the token-level run, 0.0839 against 0.1681 in the GSPO run; 18.69% of the tokens end an
# update outside [0.8, 1.2] but only 2.42% of the completions (token-level run). With the same ε = 0.2
# the GSPO run clips less and so moves a little further per rollout (both spreads are larger than the
# twin's); the rewards are close (0.117 and 0.102, both runs still early in learning the task). So many tokens
# outside the window is far more than real GRPO runs clip (0.1 to 5 % of tokens): a tiny fresh model, lr
# 4e-4 and 4 inner steps per rollout move it far.
#
# > **You should know.**
# > - s_i is a geometric mean: a few tokens that moved a lot barely move it, and a completion is clipped
# >   as a whole. Set the clip radius for s, not by copying the token-level one: s spreads less than the
# >   token ratios, so the same ε = 0.2 leaves more of the update unclipped (above, 4.22% of the GSPO
# >   run's completions ended an update outside the window, against 21.65% of its tokens).
# > - Symptom that motivates it (the GSPO paper's argument, not shown here): per-token ratios with a wide
# >   spread (long completions, mixture-of-experts routing that changes between rollout and training)
# >   make token-level clipping noisy.
# > - Statistic: the spread (std) of log ρ per token against that of log s per completion, and the clip
# >   fraction at each level.
# > - Switch: TRL `importance_sampling_level="sequence"` with `loss_type="grpo"`; verl
# >   `policy_loss.loss_mode=gspo` with `loss_agg_mode=seq-mean-token-mean`. Either framework's default
# >   aggregation (TRL `"dapo"`, verl `token-mean`) weights each completion by its length instead.
#
# <details><summary>Question: a completion of 100 tokens in which one token's ratio went from 1 to 3 and the
# others stayed at 1, with A > 0 and ε = 0.2. What does each level clip? (Answer)</summary>
#
# Token level: that one token (ρ = 3 > 1.2 loses its gradient); the other 99 keep theirs. Sequence level:
# nothing, since s = 3^{1/100} is barely above 1; all 100 tokens get the same weight s·A/|o|. The geometric
# mean hides a single token's jump, which is why GSPO's window must be far narrower than the token one.
# </details>

# %% [markdown]
# ## 5. Dynamic sampling
#
# **Question.** A group whose G rewards are all equal has all-zero advantages. What does it cost, and
# what does dropping it buy?
#
# **Key equations.** For a binary reward with success probability p, a group of G is uninformative
# with probability p^G + (1 − p)^G. Its completions were generated, scored, and go through the update
# at zero policy-gradient weight (they still enter the KL term, and the token mean's denominator). DAPO's
# dynamic sampling keeps only groups with std(r) > 0 and samples more prompts until the batch is full.
#
# **The switch.**
#
# <table>
# <tr><th></th><th>name and values</th><th>default</th><th>source</th></tr>
# <tr><td>TRL 1.16.0</td><td>no <code>GRPOConfig</code> switch; <code>GRPOTrainer</code> logs
# <code>frac_reward_zero_std</code></td><td>—</td><td><code>trl/trainer/grpo_trainer.py</code></td></tr>
# <tr><td>verl 0.9.1</td><td><code>algorithm.filter_groups.enable</code>, <code>.metric</code>
# (<code>"reward"</code>), <code>.max_num_gen_batches</code> ("non-positive values mean no upper limit"), "used by
# DAPO"</td><td><code>enable: False</code></td><td><code>verl/trainer/config/ppo_trainer.yaml</code>,
# <code>FilterGroupsConfig</code> in <code>verl/trainer/config/algorithm.py</code></td></tr>
# </table>

# %%
def informative(rewards, group_size):
    """True for groups whose rewards are not all equal. rewards (B*G,) prompt-major -> (B,) bool"""
    groups = rewards.view(-1, group_size)  # (B, G)
    return (groups != groups[:, :1]).any(dim=1)


def select_rows(batch, keep):
    """The rows of a rollout batch where keep (N,) bool holds: tensors indexed, lists (prompts, texts)
    filtered."""
    rows = keep.nonzero().squeeze(1).tolist()
    return {k: v[keep] if torch.is_tensor(v) else [v[i] for i in rows] for k, v in batch.items()}


def left_pad(ids, width, value):
    """Left-pad (N, P) to (N, width) with `value`: prompts stay right-aligned, as the tokenizer pads them."""
    return torch.nn.functional.pad(ids, (width - ids.shape[1], 0), value=value)


def concat_batches(batches):
    """Concatenate rollout batches row-wise. Prompts of different draws were left-padded to different widths
    P, so prompt_ids / prompt_mask are first left-padded to the widest (PAD, mask 0: position ids and
    log-probs of a row do not change)."""
    width = max(b["prompt_ids"].shape[1] for b in batches)
    pads = {"prompt_ids": 0, "prompt_mask": 0}  # PAD = 0 in the tokenizer; 0 = not attended
    out = {}
    for k in batches[0]:
        if k in pads:
            out[k] = torch.cat([left_pad(b[k], width, pads[k]) for b in batches])
        elif torch.is_tensor(batches[0][k]):
            out[k] = torch.cat([b[k] for b in batches])
        else:
            out[k] = [x for b in batches for x in b[k]]
    return out


def dynamic_sampling(max_batches=4):
    """A rollout wrapper: draw rollout batches until prompts_per_batch informative groups are kept (at
    most max_batches draws, verl's max_num_gen_batches). stats['groups_generated'] counts the cost."""

    def factory(module):
        base = module.rollout

        def rollout(policy, ref_policy, tokenizer, task, cfg, generator):
            kept, first_stats, generated = [], None, 0
            n = cfg.prompts_per_batch * cfg.group_size
            for _ in range(max_batches):
                batch, stats = base(policy, ref_policy, tokenizer, task, cfg, generator)
                first_stats = first_stats or stats  # the logged reward etc. stay those of a plain batch
                generated += cfg.prompts_per_batch
                keep = informative(batch["rewards"], cfg.group_size).repeat_interleave(cfg.group_size)  # (N,)
                kept.append(select_rows(batch, keep))
                if sum(len(b["rewards"]) for b in kept) >= n:
                    break
            both = concat_batches(kept)
            batch = select_rows(both, torch.arange(len(both["rewards"])) < n)  # whole groups: n is a multiple of G
            first_stats.update(groups_generated=generated, groups_kept=len(batch["rewards"]) // cfg.group_size)
            return batch, first_stats

        return rollout

    return factory


# %% [markdown]
# **Tiny input.** Two groups of four: [1, 0, 0, 1] and [1, 1, 1, 1]. Only the first survives, and the
# second's advantages were zero anyway; with p = 0.1 and G = 8, 1 − 0.9^8 − 0.1^8 of the groups survive.

# %%
tiny = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
print("informative:", informative(tiny, 4).tolist(), " advantages:", grpo_fixed.batch_advantages(tiny, 4).tolist())
print(f"p = 0.1, G = 8: P(informative) = {1 - 0.9**8 - 0.1**8:.4f}")
assert informative(tiny, 4).tolist() == [True, False]

# %% [markdown]
# **Slider.** The fraction of groups wasted, p^G + (1 − p)^G, against the success rate p; the slider is G.

# %% tags=["nbval-ignore-output"]
# the slider figure: built here, shown (and redrawn in place) by live_plot
fig6, ax6 = plt.subplots(figsize=(6, 3), layout="constrained")
ps = [i / 100 for i in range(101)]
(waste_line,) = ax6.plot(ps, [1.0] * len(ps), color="tab:blue")
ax6.set(xlabel="success rate p", ylabel="P(group uninformative)", ylim=(0, 1.02))


def update_waste(G):
    waste_line.set_ydata([p**G + (1 - p) ** G for p in ps])
    return {"p=0.1": 0.1**G + 0.9**G, "p=0.5": 2 * 0.5**G}


w_waste = live_plot(fig6, update_waste, G=slider(8, 2, 32, 1, "G", integer=True))
display(w_waste)

# %%
for G in (4, 16):
    r = probe(w_waste, {"G": G})
    print(f"G = {G:2d}: wasted at p = 0.1 {r['p=0.1']:.4f}, at p = 0.5 {r['p=0.5']:.4f}")

# %% [markdown]
# **Training.** `AdditionTask` from its SFT checkpoint (notebook 06 §2's task): the twin against
# dynamic sampling (at most 4 draws per iteration). The wasted fraction is the trainer's own
# `zero_var_groups` statistic (of the first draw); the effective batch is the number of informative
# groups the update sees.

# %%
ds_runs = {"static": scale_runs["group std"],  # the same run as notebook 06 §2's group-std run (cached)
           "dynamic": nb06_variants.train_variant("dynamic", addition, wrap={"rollout": dynamic_sampling(4)}, **SHORT)}
static, dynamic = ds_runs["static"], ds_runs["dynamic"]
static_effective = [SHORT["prompts_per_batch"] * (1 - z) for z in static.stat("zero_var_groups")]
generated = dynamic.stat("groups_generated")
print(f"static : groups generated {SHORT['steps'] * SHORT['prompts_per_batch']:4d}, wasted "
      f"{sum(static.stat('zero_var_groups')) / SHORT['steps']:.3f} of them, mean effective batch "
      f"{sum(static_effective) / SHORT['steps']:.2f} of {SHORT['prompts_per_batch']}, "
      f"reward (tail) {tail_mean(static.stat('reward'), TAIL):.3f}")
print(f"dynamic: groups generated {sum(generated):4d}, mean effective batch "
      f"{sum(dynamic.stat('groups_kept')) / SHORT['steps']:.2f} of {SHORT['prompts_per_batch']}, "
      f"reward (tail) {tail_mean(dynamic.stat('reward'), TAIL):.3f}")
cap = 4 * SHORT["prompts_per_batch"]  # dynamic_sampling(4): at most 4 draws of B groups
at_cap = [i for i, n in enumerate(generated) if n == cap]
cum_dynamic = [sum(generated[: i + 1]) for i in range(SHORT["steps"])]
same_cost = next(i for i, n in enumerate(cum_dynamic) if n >= SHORT["steps"] * SHORT["prompts_per_batch"])
dynamic_at_same_cost = smooth(dynamic.stat("reward"))[same_cost]
static_at_end = smooth(static.stat("reward"))[-1]
print(f"dynamic hit the cap of {cap} groups in {len(at_cap)} of {SHORT['steps']} iterations; "
      f"at most {max(generated)} groups ({max(generated) // SHORT['prompts_per_batch']} draws) in one iteration")
print(f"reward (mean over 5 iterations) after {SHORT['steps'] * SHORT['prompts_per_batch']} generated groups: "
      f"static {static_at_end:.3f}, dynamic {dynamic_at_same_cost:.3f} ({cum_dynamic[same_cost]} groups, "
      f"iteration {same_cost})")
static_generated = SHORT["steps"] * SHORT["prompts_per_batch"]
assert sum(static.stat("zero_var_groups")) / SHORT["steps"] < 0.15  # few groups wasted at a 30-40 % success rate
assert dynamic.stat("groups_kept") == [SHORT["prompts_per_batch"]] * SHORT["steps"] and not at_cap
assert max(generated) == 2 * SHORT["prompts_per_batch"]
assert static_generated < sum(generated) < 1.5 * static_generated
assert abs(tail_mean(dynamic.stat("reward"), TAIL) - tail_mean(static.stat("reward"), TAIL)) < 0.05
assert abs(dynamic_at_same_cost - static_at_end) < 0.05

# %%
fig, axes = plt.subplots(1, 3, figsize=(10, 3), layout="constrained")
axes[0].plot(static.stat("zero_var_groups"), color="tab:blue", label="static: wasted fraction")
axes[0].set(xlabel="iteration", ylabel="zero_var_groups")
axes[1].plot(static_effective, color="tab:blue", label="static")
axes[1].plot(dynamic.stat("groups_kept"), color="tab:green", label="dynamic")
axes[1].plot(generated, color="tab:green", ls=":", label="dynamic: generated")
axes[1].set(xlabel="iteration", ylabel="groups")
axes[1].legend(fontsize="small")
cum_static = [SHORT["prompts_per_batch"] * (i + 1) for i in range(SHORT["steps"])]
axes[2].plot(cum_static, smooth(static.stat("reward")), color="tab:blue", label="static")
axes[2].plot(cum_dynamic, smooth(dynamic.stat("reward")), color="tab:green", label="dynamic")
axes[2].set(xlabel="groups generated so far", ylabel="reward")
axes[2].legend(fontsize="small")
fig.suptitle("AdditionTask, one seed")
plt.show()

# %% [markdown]
# From the SFT checkpoint few groups are uninformative: without dynamic sampling 9.4% of the generated
# groups carried no signal, so the update saw 7.25 of its 8 groups on average. Dynamic sampling filled all
# 8 in every iteration at the price of 216 generated groups instead of 160 (it never needed more than two
# draws; the cap of 32 groups was never reached), and it bought nothing visible: its reward ends at 0.391
# against 0.419, and after the same generation budget (160 groups) the two runs stand at 0.403 and 0.422,
# differences within one seed's noise. Dynamic sampling pays where most groups are uninformative: hard
# prompts early (all wrong), solved prompts late (all right); the slider above gives the waste for a given
# success rate.
#
# > **You should know.**
# > - Symptom: the reward is flat and the gradient small while most groups are all-wrong (early, hard
# >   prompts) or all-right (late, solved prompts); the update sees far fewer prompts than the batch
# >   size says.
# > - Statistic: `zero_var_groups` here, `frac_reward_zero_std` in TRL; the effective batch is
# >   B·(1 − that).
# > - Fix: dynamic sampling (verl `algorithm.filter_groups.enable=True`), at the price of more generation
# >   per update (here more than per unit of reward); or a larger G for hard prompts (P(waste) =
# >   p^G + (1 − p)^G falls with G).
#
# <details><summary>Question: in the twins (token mean over the minibatch), does dropping the zero-variance
# groups change the gradient of the groups that remain? (Answer)</summary>
#
# Yes. Their tokens contribute J = 0 but count in the denominator Σ|o_i|, so dropping them scales every
# remaining token's gradient up by (all tokens)/(remaining tokens); they also contribute to the KL term.
# Dynamic sampling changes the step size as well as the batch's composition.
# </details>

# %% [markdown]
# ## 6. Where the KL goes
#
# **Question.** The penalty β·KL(π ‖ π_ref) can be added to the reward (PPO-RLHF) or to the loss
# (GRPO). Does it matter, and which estimator goes where?
#
# **Key equations.** Per token, with x ∼ π and log r = log π_ref(x) − log π(x):
#
# - **In the reward (k1):** r_i ← r_i − β Σ_t (log π_old − log π_ref)(o_{i,t}), computed at rollout with no
#   gradient; it reaches the policy through the advantage, as a score-function (REINFORCE) term. In
#   expectation its gradient is β E_x[k1(x) ∇log π(x)] = β ∇KL(π ‖ π_ref).
# - **In the loss (k3):** L ← L + β · mean_t k3, differentiated directly (pathwise). On π's own samples
#   β E_x[∇k3(x)] = β ∇KL(π_ref ‖ π): the *other* direction (notebook 04 §2). Weighted by ρ = π/π_old (TRL's
#   `use_bias_correction_kl`, below, with token-level ρ), E_{x∼π_old}[∇(ρ k3)] = ∇Σ_x π(x) k3(x) = ∇KL(π ‖ π_ref) at
#   every inner step, per position at the sampled prefix (the whole completion's KL has one more term, below).
# - **k1 in the loss** has E_x[∇k1(x)] = E_x[∇log π(x)] = 0 on π's own samples: no pull at all, in expectation (on
#   π_old's samples, from the second inner step, −∇KL(π_old ‖ π): relative to π_old, never to π_ref).
# - **β = 0**: no anchor.
#
# **The switch.**
#
# <table>
# <tr><th></th><th>name and values</th><th>default</th><th>source</th></tr>
# <tr><td>TRL 1.16.0</td><td><code>GRPOConfig.beta</code> (k3 in the loss, "If <code>0.0</code> (default), the
# reference model is not loaded"); <code>use_bias_correction_kl</code> multiplies the per-token k3 by the ratio ρ
# (per token; under <code>importance_sampling_level="sequence"</code> by the sequence weight).
# <code>RLOOTrainer</code> puts k1, summed over the tokens, into the reward: <code>rewards = rewards - self.beta *
# kl</code></td><td><code>beta=0.0</code>,
# <code>use_bias_correction_kl=True</code></td><td><code>trl/trainer/grpo_config.py</code>,
# <code>grpo_trainer.py</code>, <code>rloo_trainer.py</code></td></tr>
# <tr><td>verl 0.9.1</td><td>in the loss: <code>actor_rollout_ref.actor.use_kl_loss</code>,
# <code>kl_loss_coef</code>, <code>kl_loss_type</code> (<code>"kl"</code> (k1), <code>"abs"</code>,
# <code>"mse"</code> (k2), <code>"low_var_kl"</code> (k3), <code>"full"</code>); in the reward:
# <code>algorithm.use_kl_in_reward</code>, <code>algorithm.kl_penalty</code> (same names),
# <code>algorithm.kl_ctrl.kl_coef</code></td><td><code>use_kl_loss: false</code>, <code>kl_loss_coef: 0.001</code>,
# <code>kl_loss_type: low_var_kl</code>; <code>use_kl_in_reward: False</code>, <code>kl_penalty:
# kl</code></td><td><code>verl/trainer/config/actor/actor.yaml</code>, <code>ppo_trainer.yaml</code>;
# <code>apply_kl_penalty</code> in <code>verl/trainer/ppo/ray_trainer.py</code> (<code>token_level_rewards =
# token_level_scores - beta * kld</code>), <code>kl_penalty</code> in <code>core_algos.py</code></td></tr>
# </table>
#
# **Tiny input.** One position, three tokens, π = softmax([1, 0, −1]), π_ref uniform. Each placement's
# expected gradient with respect to π's logits, exactly (a sum over the three tokens weighted by π, the
# weights held fixed as sampling does), against ∇KL(π ‖ π_ref) and ∇KL(π_ref ‖ π):

# %%
THETA = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)
LOG_REF = torch.full((3,), -math.log(3), dtype=torch.float64)


def expected_grad(per_token):
    """d/dtheta of sum_x pi(x) f(x) with the weights pi(x) detached (samples carry no gradient), where
    per_token(logp, logp_detached) -> (V,) is the per-sample term. -> (V,)"""
    theta = THETA.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1)
    weights = logp.exp().detach()
    (weights * per_token(logp, logp.detach())).sum().backward()
    return theta.grad


def exact_grad(kl):
    theta = THETA.clone().requires_grad_(True)
    kl(torch.log_softmax(theta, -1)).backward()
    return theta.grad


placements = {
    "k1 in the reward": expected_grad(lambda lp, lp0: (lp0 - LOG_REF) * lp),  # score function: k1 * log pi
    "k3 in the loss": expected_grad(lambda lp, lp0: (LOG_REF - lp).exp() - (LOG_REF - lp) - 1),
    "k1 in the loss": expected_grad(lambda lp, lp0: lp - LOG_REF),
    "rho * k3 in the loss (TRL)": expected_grad(
        lambda lp, lp0: (lp - lp0).exp() * ((LOG_REF - lp).exp() - (LOG_REF - lp) - 1)),
}
targets = {"grad KL(pi || ref)": exact_grad(lambda lp: (lp.exp() * (lp - LOG_REF)).sum()),
           "grad KL(ref || pi)": exact_grad(lambda lp: (LOG_REF.exp() * (LOG_REF - lp)).sum())}
for name, grad in (placements | targets).items():
    print(f"{name:>28}: " + " ".join(f"{v:+.5f}" for v in grad.tolist()))
assert torch.allclose(placements["k1 in the reward"], targets["grad KL(pi || ref)"])
assert torch.allclose(placements["k3 in the loss"], targets["grad KL(ref || pi)"])
assert torch.allclose(placements["k1 in the loss"], torch.zeros(3, dtype=torch.float64), atol=1e-12)
assert torch.allclose(placements["rho * k3 in the loss (TRL)"], targets["grad KL(pi || ref)"])

# %% [markdown]
# Exactly as the equations say: k1 in the reward gives ∇KL(π ‖ π_ref), k3 in the loss gives
# ∇KL(π_ref ‖ π) (a different vector: +0.33191 against +0.28259 on the first logit), k1 in the loss
# gives zero, and TRL's ρ·k3 recovers ∇KL(π ‖ π_ref): the derivative of ρ, which is 1 in value, adds
# k3·∇log π, and k3·∇log π + ∇k3 = k1·∇log π.
#
# The twins' `kl_to_reference` is "k3 in the loss". The KL-in-reward variant wraps the copy's `rollout`:

# %%
def kl_in_reward(beta_reward):
    """A rollout wrapper: advantages from r_i - beta_reward * sum_t (log pi_old - log pi_ref), k1 at rollout
    time (verl use_kl_in_reward with kl_penalty=kl; TRL RLOOTrainer). Train it with beta=0 (no KL in
    the loss); the logged kl statistic is still the k3 estimate."""

    def factory(module):
        base = module.rollout

        def rollout(policy, ref_policy, tokenizer, task, cfg, generator):
            batch, stats = base(policy, ref_policy, tokenizer, task, cfg, generator)
            k1 = torch.where(batch["mask"], batch["old_logprobs"] - batch["ref_logprobs"], 0.0).sum(dim=1)  # (N,)
            penalised = batch["rewards"] - beta_reward * k1
            batch["advantages"] = module.batch_advantages(penalised, cfg.group_size, cfg.adv_eps)
            return batch, stats

        return rollout

    return factory


# %% [markdown]
# **Training.** `EchoTask` (workbook/tasks.py: repeat the prompt's two digits; it starts from the addition
# SFT checkpoint, which is also the reference), 20 iterations: KL in the loss (the twin), KL in the reward,
# and β = 0, for β ∈ {0.1, 0.3} (the slider). The `kl` statistic is the twins' k3 estimate of KL(π ‖ π_ref) at the last
# inner step.

# %% tags=["nbval-ignore-output"]
# the slider figure: built here, shown (and redrawn in place) by live_plot
echo = EchoTask()
BETAS = [0.1, 0.3]


def kl_runs(beta):
    return {"KL in the loss (k3)": nb06_variants.train_variant("fixed", echo, **SHORT, beta=beta),
            "KL in the reward (k1)": nb06_variants.train_variant(f"kl_reward_{beta}", echo, **SHORT, beta=0.0,
                                                            wrap={"rollout": kl_in_reward(beta)}),
            "beta = 0": nb06_variants.train_variant("fixed", echo, **SHORT, beta=0.0)}


KL_COLORS = {"KL in the loss (k3)": "tab:blue", "KL in the reward (k1)": "tab:orange", "beta = 0": "0.5"}
fig7, axes7 = plt.subplots(1, 2, figsize=(9, 3), layout="constrained")
kl_lines = {}
for name, color in KL_COLORS.items():
    kl_lines[(name, "reward")] = axes7[0].plot([], [], color=color, label=name)[0]
    kl_lines[(name, "kl")] = axes7[1].plot([], [], color=color, label=name)[0]

def kl_limits(key):
    """(low, high) around every smoothed curve of every slider position: the axes fit all of them."""
    every = [v for beta in BETAS for run in kl_runs(beta).values() for v in smooth(run.stat(key))]
    pad = 0.05 * (max(every) - min(every))
    return (min(every) - pad, max(every) + pad) if key == "reward" else (0.8 * min(every), 1.25 * max(every))


axes7[0].set(xlabel="iteration", ylabel="reward", xlim=(0, SHORT["steps"] - 1), ylim=kl_limits("reward"))
axes7[1].set(xlabel="iteration", ylabel="kl (k3 estimate)", xlim=(0, SHORT["steps"] - 1), ylim=kl_limits("kl"),
             yscale="log")  # log: the beta = 0 run's spikes would flatten the other curves
axes7[0].legend(fontsize="small")


def update_kl(beta):
    out = {}
    for name, run in kl_runs(beta).items():
        for key in ("reward", "kl"):
            ys = smooth(run.stat(key))
            kl_lines[(name, key)].set_data(range(len(ys)), ys)
        out[name] = (tail_mean(run.stat("reward"), TAIL), tail_mean(run.stat("kl"), TAIL))
    return out


w_kl = live_plot(fig7, update_kl, beta=choice(BETAS, 0.1, "beta"))
display(w_kl)

# %%
kl_table = {}
for beta in BETAS:
    kl_table[beta] = probe(w_kl, {"beta": beta})
    for name, (reward, kl) in kl_table[beta].items():
        print(f"beta {beta}: {name:>22}  reward (tail) {reward:.3f}  kl (tail) {kl:.4f}")
free = kl_table[0.1]["beta = 0"]
loss_01, reward_01 = kl_table[0.1]["KL in the loss (k3)"], kl_table[0.1]["KL in the reward (k1)"]
loss_03, reward_03 = kl_table[0.3]["KL in the loss (k3)"], kl_table[0.3]["KL in the reward (k1)"]
assert reward_01[1] < loss_01[1] / 2 < free[1] / 2 and reward_01[0] < loss_01[0] < free[0]
assert reward_03[1] < loss_03[1] / 2.5 and loss_03[1] < loss_01[1] and reward_03[0] < loss_03[0]
assert min(kl for row in kl_table.values() for _, kl in row.values()) > 0.05
spikes = [(i, v) for i, v in enumerate(kl_runs(0.1)["beta = 0"].stat("kl")) if v > 5]
print("beta = 0, iterations with kl > 5: " + ", ".join(f"{i} ({v:.2f})" for i, v in spikes))
assert len(spikes) == 2 and all(v > 5 * free[1] for _, v in spikes)

# %% [markdown]
# The β = 0 run's k3 estimate spikes twice (17.43 at iteration 2, 20.58 at iteration 8): k3 = e^x − x − 1
# with x = log π_ref − log π is heavy-tailed, and a few tokens that π made far less likely than π_ref
# dominate the mean (hence the log scale above, and tail means below). At β = 0.1 the KL in the loss
# barely anchors over the last 10 iterations (k3 estimate 0.5455, against 0.6250 with β = 0), the KL in
# the reward far more (0.2174), at a lower reward (0.417, against 0.489 and 0.507). At
# β = 0.3 both anchor harder and keep their order: the KL in the loss reaches KL 0.2853 at a reward of 0.432,
# the KL in the reward KL 0.0917 at a reward of 0.352. These KL values (per token, 0.09 to 0.63) sit at or
# above the top of what real GRPO runs show (1e-3 to 1e-1): a tiny model at lr 4e-4 moves far from its
# reference in a few iterations. The same β is not the same strength in the two places: in the
# reward, β·Σ_t k1 competes with the task reward's spread inside the group normalisation; in the loss,
# β·k3 competes with the normalised advantage term.
#
# > **You should know.**
# > - In the reward, the KL is part of the return: it is baselined with the task reward and, wherever the advantages
# >   are normalised (here by the group std; not TRL 1.16.0's RLOOTrainer by default, `normalize_advantages=False`),
# >   scaled with it, so its weight then depends on the reward's spread; its gradient is the score-function
# >   gradient of KL(π ‖ π_ref), unbiased but noisy. In the loss it is a separate, directly differentiated term
# >   whose weight is β alone.
# > - k3 in the loss pulls towards the reference along ∇KL(π_ref ‖ π), not ∇KL(π ‖ π_ref); k1 in the loss (verl
# >   `kl_loss_type: kl`) pulls nowhere in expectation on π's own samples (on π_old's it acts relative to π_old,
# >   never toward π_ref). TRL 1.16.0's `use_bias_correction_kl=True` multiplies k3 by the token-level ρ, whose
# >   gradient restores each position's ∇KL(π ‖ π_ref) (last row above; with `importance_sampling_level="sequence"`
# >   a sequence weight multiplies the per-token KL instead, and TRL 1.16.0's docstring claims the reverse-KL
# >   property for "token" only).
# > - Symptom of a misplaced or mis-chosen KL: the `kl` statistic grows as if β were 0.
# > - Statistic: `kl` per iteration against a β = 0 run.
#
# <details><summary>Question: KL in the reward, group-normalised advantages. A prompt whose G completions all
# get the same task reward: what do their advantages say? (Answer)</summary>
#
# Only the KL: r_i − β Σ_t k1 minus its group mean is −β(k_i − mean k), and dividing by the group std
# removes β altogether (while β·std(k) ≫ ε), so those completions get unit-scale advantages pushing
# towards the reference, however small β is. In groups without task signal the penalty gets full weight.
# </details>

# %% [markdown]
# **The optimum the KL term aims at.** For one prompt, maximise E_π[r] − β KL(π ‖ π_ref) over all distributions π
# of its completions. With π*(y) = π_ref(y) e^{r(y)/β} / Z and Z = Σ_y π_ref(y) e^{r(y)/β}, the objective rewrites as
#
# $$\mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\,\|\,\pi_\text{ref})
# = \beta \log Z - \beta\,\mathrm{KL}(\pi\,\|\,\pi^*),$$
#
# so π* is the unique maximiser, with value β log Z. k3 in the loss follows the gradient of another objective,
# E_π[r] − β KL(π_ref ‖ π) (the tiny input above), whose maximiser satisfies r(y) + β π_ref(y)/π(y) = λ:
# π(y) = β π_ref(y)/(λ − r(y)), with λ > max r set so that π sums to 1. Tiny input: a bandit of five completions, the
# identity checked on random policies, π* for β from 0.01 to 100, the reward read back from each optimum, and in the
# last column the optimum k3 in the loss drives to:

# %%
REF_5 = torch.tensor([0.40, 0.30, 0.15, 0.10, 0.05], dtype=torch.float64)  # pi_ref of five completions
R_5 = torch.tensor([0.0, 0.5, 1.0, 0.2, 0.9], dtype=torch.float64)  # their rewards


def kl_div(p, q):
    """KL(p || q) over the last axis."""
    return (p * (p / q).log()).sum(-1)


def regularised(pi, beta):
    """E_pi[r] - beta KL(pi || pi_ref) of each row of pi."""
    return (pi * R_5).sum(-1) - beta * kl_div(pi, REF_5)


def kl_optimum(beta):
    """pi*(y) = pi_ref(y) exp(r(y) / beta) / Z and beta log Z (in log space: beta = 0.01 puts e^100 in Z)."""
    logits = REF_5.log() + R_5 / beta
    return torch.softmax(logits, -1), beta * torch.logsumexp(logits, -1).item()


def k3_optimum(beta):
    """The maximiser of E_pi[r] - beta KL(pi_ref || pi): pi(y) = beta pi_ref(y) / (lam - r(y)), lam by bisection on
    (max r, max r + beta + 1], where the sum falls from infinity to below 1."""
    low, high = R_5.max().item(), R_5.max().item() + beta + 1
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if (beta * REF_5 / (mid - R_5)).sum() > 1 else (low, mid)
    return beta * REF_5 / (high - R_5)


g = torch.Generator().manual_seed(0)
others = torch.softmax(3 * torch.randn(1000, 5, generator=g, dtype=torch.float64), -1)  # (1000, 5) random policies
optima, k3_optima, read_back = {}, {}, 0.0
print(f"{'beta':>6} | {'pi*':>34} | {'E[r]':>5} {'KL':>6} {'beta log Z':>10} | {'k3 in the loss: optimum':>34}")
for beta in (0.01, 0.1, 0.5, 2.0, 100.0):
    pi_star, value = kl_optimum(beta)
    optima[beta] = pi_star
    assert torch.allclose(regularised(others, beta), value - beta * kl_div(others, pi_star))  # the identity
    assert (regularised(others, beta) <= value + 1e-12).all() and abs(regularised(pi_star, beta) - value) < 1e-12
    read_back = max(read_back, (R_5 - beta * (pi_star / REF_5).log() - value).abs().max().item())
    k3_optima[beta] = pi_k3 = k3_optimum(beta)
    forward = lambda pi, beta=beta: (pi * R_5).sum(-1) - beta * kl_div(REF_5, pi)  # noqa: E731  E[r] - beta KL(ref || pi)
    assert abs(pi_k3.sum() - 1) < 1e-12 and (forward(others) <= forward(pi_k3) + 1e-12).all()  # its maximiser
    print(f"{beta:6g} | {' '.join(f'{p:.3f}' for p in pi_star.tolist()):>34} | {(pi_star * R_5).sum():5.3f} "
          f"{kl_div(pi_star, REF_5):6.3f} {value:10.3f} | {' '.join(f'{p:.3f}' for p in pi_k3.tolist()):>34}")
print("read back: r(y) = beta log(pi*(y) / pi_ref(y)) + beta log Z for all five completions at every beta, "
      f"to {'within 1e-9' if read_back < 1e-9 else 'NOT within 1e-9'}")
assert read_back < 1e-9
assert optima[0.01][2] > 0.999 and abs(kl_div(optima[0.01], REF_5) + math.log(0.15)) < 1e-3  # greedy: -log pi_ref
assert (optima[100.0] - REF_5).abs().max() < 2e-3  # the reference
assert [f"{optima[b][2]:.3f}" for b in (0.1, 0.5)] == ["0.880", "0.399"] and f"{-math.log(0.15):.3f}" == "1.897"
assert all((p > 0.001).all() for p in k3_optima.values())  # k3's optimum keeps mass on every completion
assert [f"{k3_optima[b][2]:.3f}" for b in (0.01, 0.1, 0.5)] == ["0.984", "0.848", "0.456"]  # as quoted

# %% [markdown]
# For this objective β is a temperature in reward units: at β = 0.01 the optimum puts all its mass on the best
# completion (reward 1), at a
# KL of 1.897 = −log π_ref(best); at β = 100 it is π_ref; β = 0.1 puts 0.880 on the best completion, β = 0.5 only
# 0.399. It never leaves π_ref's support: where π_ref(y) = 0, π*(y) = 0 for every finite β. Read backwards,
# r(y) = β log(π*(y)/π_ref(y)) + β log Z for every completion (the line under the table): the basis of DPO, where in a
# Bradley-Terry model of preferences between two completions of one prompt β log Z cancels, so the policy's own
# log-ratio to the reference plays the reward model, and training needs neither a reward model nor sampling.
#
# π* is the target only when the gradient is that of E[r] − β KL(π ‖ π_ref) over whole completions: the KL in the
# reward, k1 summed over the tokens into the return (Ziegler et al., verl's `use_kl_in_reward`, TRL's `RLOOTrainer`).
# k3 in the loss (GRPO; verl 0.9.1's default `kl_loss_type: low_var_kl`) pulls along ∇KL(π_ref ‖ π), and its optimum
# (last column) keeps mass on every completion and is never greedy: 0.848 on the best completion at β = 0.1 against
# π*'s 0.880, 0.456 at β = 0.5 against 0.399, 0.984 at β = 0.01 against 1.000. On sequences a per-token KL term in the
# loss, even TRL's ρ·k3 or the exact KL at each position, is differentiated with the sampled prefix held fixed: it
# misses the gradient through which prefixes get visited, so it is not the gradient of the whole-completion KL either.
# And under GRPO's advantage (r − mean)/σ_x, with σ_x taken as fixed, maximising E[A] − β KL is maximising
# E[r] − β σ_x KL: the temperature is β·σ_x, per prompt, not β. It is not fixed at the edge: a group whose rewards
# are all equal has every A = 0, and there the KL term acts alone, at full strength.

# %% [markdown]
# ## 7. Truncated completions
#
# **Question.** A completion that hits max_completion_length without EOS is scored as it stands (here
# 0). Is that a fair signal?
#
# **Key equations.** Truncated: no EOS in the first T_max tokens. Two fixes:
#
# - **Mask it:** its tokens leave the loss (mask ← 0 for the whole completion); its reward still enters
#   the group's mean and std.
# - **Soft overlong penalty** (DAPO, Eq. 13): with a buffer of C tokens before the limit, add
#   R_len(L) = 0 for L ≤ T_max − C, (T_max − C − L)/C for T_max − C < L ≤ T_max, and −1 beyond.
#
# **The switch.**
#
# <table>
# <tr><th></th><th>name and values</th><th>default</th><th>source</th></tr>
# <tr><td>TRL 1.16.0</td><td><code>GRPOConfig.mask_truncated_completions</code> ("truncated completions are excluded
# from the loss calculation"); the penalty is a reward function,
# <code>trl.rewards.get_soft_overlong_punishment(max_completion_len,
# soft_punish_cache)</code></td><td><code>False</code></td><td><code>trl/trainer/grpo_config.py</code>,
# <code>trl/rewards/other_rewards.py</code></td></tr>
# <tr><td>verl 0.9.1</td><td>no masking switch found; the penalty is the DAPO reward manager's
# <code>overlong_buffer_cfg</code> (<code>enable</code>, <code>len</code>, <code>penalty_factor</code>) under
# <code>reward.reward_kwargs</code></td><td>—</td>
# <td><code>verl/experimental/reward_loop/reward_manager/dapo.py</code></td></tr>
# </table>

# %%
def soft_overlong_penalty(lengths, t_max, cache):
    """DAPO's R_len(L): 0 up to t_max - cache, then linear down to -1 at t_max, -1 beyond. (N,)"""
    lengths = lengths.float()
    ramp = (t_max - cache - lengths) / cache
    return torch.where(lengths <= t_max - cache, 0.0, torch.where(lengths <= t_max, ramp, -1.0))


def mask_truncated(module):
    """A rollout wrapper: truncated completions keep their reward (and their place in the group's
    mean and std) but leave the loss."""
    base = module.rollout

    def rollout(policy, ref_policy, tokenizer, task, cfg, generator):
        batch, stats = base(policy, ref_policy, tokenizer, task, cfg, generator)
        cut = nb06_variants.truncated(batch["completions"], tokenizer.eos_token_id)  # (N,)
        batch["mask"] = batch["mask"] & ~cut[:, None]
        return batch, stats

    return rollout


def overlong_penalty(cache):
    """A rollout wrapper: advantages from reward + soft_overlong_penalty(length). The logged reward stays
    the task's own."""

    def factory(module):
        base = module.rollout

        def rollout(policy, ref_policy, tokenizer, task, cfg, generator):
            batch, stats = base(policy, ref_policy, tokenizer, task, cfg, generator)
            lengths = nb06_variants.completion_lengths(batch["completions"], tokenizer.eos_token_id)  # (N,)
            shaped = batch["rewards"] + soft_overlong_penalty(lengths, task.max_completion_length, cache)
            batch["advantages"] = module.batch_advantages(shaped, cfg.group_size, cfg.adv_eps)
            return batch, stats

        return rollout

    return factory


# %% [markdown]
# **Tiny input.** T_max = 6, three completions as token ids (the tokenizer's EOS = 2; `generate` leaves what it
# sampled after the first EOS in place, and the mask hides it): [6, 4, EOS, 9, EOS, 3] (length 3: the first EOS
# ends it), [5, 5, 5, 5, 5, EOS] (length 6, ends exactly at the limit) and
# [7, 7, 7, 7, 7, 7] (truncated).

# %%
EOS = 2  # tinylm.CharTokenizer's eos_token_id
completions = torch.tensor([[6, 4, EOS, 9, EOS, 3], [5, 5, 5, 5, 5, EOS], [7, 7, 7, 7, 7, 7]])
lengths = nb06_variants.completion_lengths(completions, EOS)
cut = nb06_variants.truncated(completions, EOS)
print("lengths", lengths.tolist(), " truncated", cut.tolist())
for cache in (2, 4):
    print(f"soft penalty, buffer C = {cache}: " + " ".join(f"{v:+.2f}" for v in
                                                          soft_overlong_penalty(lengths, 6, cache).tolist()))
assert lengths.tolist() == [3, 6, 6] and cut.tolist() == [False, False, True]
assert soft_overlong_penalty(lengths, 6, 4).tolist() == [-0.25, -1.0, -1.0]

# %% [markdown]
# A completion that ends with its EOS exactly at the limit (length 6) gets the full −1 like the
# truncated one: the penalty looks at the length only. With C = 4 the ramp starts after length 2, so even
# the length-3 completion pays 0.25.
#
# **Slider.** The penalty R_len(L) for T_max = 8 (RambleTask); the slider is the buffer C.

# %% tags=["nbval-ignore-output"]
# the slider figure: built here, shown (and redrawn in place) by live_plot
fig8, ax8 = plt.subplots(figsize=(6, 3), layout="constrained")
Ls = torch.arange(1, T_MAX + 1)
(pen_line,) = ax8.plot(Ls.tolist(), [0.0] * T_MAX, "o-", color="tab:red")
ax8.set(xlabel="completion length L", ylabel="R_len(L)", ylim=(-1.1, 0.1))


def update_penalty(cache):
    values = soft_overlong_penalty(Ls, T_MAX, cache)
    pen_line.set_ydata(values.tolist())
    return {"first penalised length": int(Ls[values < 0][0]), "penalty at 7": values[6].item()}


w_pen = live_plot(fig8, update_penalty, cache=slider(4, 1, T_MAX - 1, 1, "C", integer=True))
display(w_pen)

# %%
for cache in (2, 6):
    r = probe(w_pen, {"C": cache})
    print(f"C = {cache}: first penalised length {r['first penalised length']}, R_len(7) = {r['penalty at 7']:+.3f}")
    assert r["first penalised length"] == T_MAX - cache + 1

# %% [markdown]
# **Training.** RambleTask: the twin (a truncated completion gets reward 0, unless a PAD or BOS in it
# shortened its text, notebook 06 §1), masking truncated completions (truncated read off the tokens: no EOS),
# and the soft penalty with C = 4 on the token length.

# %%
trunc_runs = {"twin": agg_runs["token mean"],  # notebook 06 §1's token-mean run (the twin, cached)
              "mask truncated": ramble_run("mask_truncated", wrap={"rollout": mask_truncated}),
              "soft penalty C=4": ramble_run("overlong_4", wrap={"rollout": overlong_penalty(4)})}
print(f"{'run':>16} | {'reward (tail)':>15} {'truncated, mean':>15} {'truncated (tail)':>18} {'length (tail)':>15}")
trunc_stats = {}
for name, run in trunc_runs.items():
    cut_frac = run.sample_mean("truncated")
    trunc_stats[name] = (tail_mean(run.stat("reward"), TAIL), sum(cut_frac) / len(cut_frac),
                         tail_mean(cut_frac, TAIL), tail_mean(run.sample_mean("length"), TAIL))
    print(f"{name:>16} | " + " ".join(f"{v:{w}.3f}" for v, w in zip(trunc_stats[name], (15, 15, 18, 15), strict=True)))
twin_t, masked_t, soft_t = trunc_stats["twin"], trunc_stats["mask truncated"], trunc_stats["soft penalty C=4"]
assert masked_t[2] > twin_t[2] and masked_t[3] > twin_t[3] and masked_t[0] < twin_t[0]
assert soft_t[2] < 0.01 and soft_t[3] < twin_t[3] - 4 and soft_t[0] < masked_t[0] < twin_t[0]

# %%
TRUNC_COLORS = {"twin": "tab:blue", "mask truncated": "tab:red", "soft penalty C=4": "tab:green"}
fig, axes = plt.subplots(1, 3, figsize=(10, 3), layout="constrained")
curves(axes[0], trunc_runs, lambda run: run.stat("reward"), window=5, colors=TRUNC_COLORS, ylabel="reward")
curves(axes[1], trunc_runs, lambda run: run.sample_mean("truncated"), window=5, colors=TRUNC_COLORS,
       ylabel="fraction truncated")
curves(axes[2], trunc_runs, lambda run: run.sample_mean("length"), window=5, colors=TRUNC_COLORS,
       ylabel="mean length")
fig.suptitle("RambleTask, one seed (lines: mean over 5 iterations)")
plt.show()

# %% [markdown]
# Masking truncated completions removed the push to stop that a truncated completion's tokens got: on this seed the
# truncated fraction ended higher, 0.606 over the last 10 iterations against the twin's 0.562, completions ended longer
# (6.686 tokens against 6.492), and the reward ended lower (0.070 against 0.117). One seed: the direction of each gap
# is this run's, not a law. The soft penalty did the opposite and
# overshot: with C = 4 on T_max = 8 its ramp starts after length 4, and the runs' completions fell to 2.006 tokens on
# average with almost none truncated (0.003), but the reward fell too (0.041). The penalty (−0.25 to −1 for every
# completion longer than 4) is a far denser signal than the rare task reward, and the policy learned to stop before it
# learned to answer.
#
# > **You should know.**
# > - A truncated completion's reward says "did not finish", not "wrong": with a right answer that ran
# >   over, its negative advantage pushes down the right answer's tokens along with the rambling.
# > - Masking removes that noise and the direct push-down on truncated completions' tokens. Their low rewards
# >   still enter the group mean, so a finished completion that scores above it gets a positive advantage, its
# >   EOS included: an indirect pull toward finishing remains (with a token-mean loss the normaliser shrinks
# >   too, so the surviving tokens weigh more). Watch the truncated fraction.
# > - Symptom: a rising share of completions at the limit; statistic: the truncated fraction per iteration
# >   (TRL `completions/clipped_ratio`, verl `response_length/clip_ratio`); fix: TRL
# >   `mask_truncated_completions=True` together with a soft
# >   penalty (`get_soft_overlong_punishment`), verl's `overlong_buffer_cfg`.
#
# <details><summary>Question: with truncated completions masked, do they still influence the update? (Answer)
# </summary>
#
# Yes, through their group: their reward still enters the group's mean and std, so they shift the other
# completions' advantages (in TRL too: the mask is zeroed, the rewards are scored as usual). Only their own
# tokens get no gradient.
# </details>

# %% [markdown]
# ## 8. Summary
#
# <table>
# <tr><th>§</th><th>switch (TRL 1.16.0 / verl 0.9.1)</th><th>what it changes</th><th>the statistic that shows
# it</th></tr>
# <tr><td>1</td><td><code>loss_type</code> / <code>loss_agg_mode</code></td><td>per-token weight 1/Σ|o|, 1/(N|o_i|)
# or 1/(N T_max)</td><td>length of wrong completions</td></tr>
# <tr><td>2</td><td><code>scale_rewards</code> / <code>norm_adv_by_std_in_grpo</code></td><td>which prompts weigh
# most</td><td>share of Σ|A| on extreme groups</td></tr>
# <tr><td>3</td><td><code>epsilon_high</code> / <code>clip_ratio_high</code></td><td>how fast rare good tokens can
# rise</td><td>entropy, upper clip fraction</td></tr>
# <tr><td>4</td><td><code>importance_sampling_level</code> / <code>policy_loss.loss_mode</code> (with
# <code>loss_type="grpo"</code> / <code>loss_agg_mode=seq-mean-token-mean</code> for the paper's
# weighting)</td><td>one ratio per completion</td><td>std of log ρ vs log s</td></tr>
# <tr><td>5</td><td>— / <code>algorithm.filter_groups</code></td><td>drops groups with equal
# rewards</td><td><code>zero_var_groups</code>, effective batch</td></tr>
# <tr><td>6</td><td><code>beta</code> (+ RLOO) / <code>use_kl_loss</code>,
# <code>use_kl_in_reward</code></td><td>which KL gradient the anchor applies</td><td><code>kl</code> against a β = 0
# run</td></tr>
# <tr><td>7</td><td><code>mask_truncated_completions</code> / <code>overlong_buffer_cfg</code></td><td>what a
# truncated completion teaches</td><td>truncated fraction</td></tr>
# </table>


# %% [markdown]
# ## 9. Self-check
#
# 1. Four completions of lengths 1, 2, 4 and 8 (T_max = 8) with advantages +1, −1, +1, −1. What does one token of
#    the length-8 wrong answer weigh against one of the length-2 wrong answer under the GRPO paper's per-sequence
#    mean, the token mean and Dr. GRPO's constant? Did the short RambleTask runs show the length bias?
# 2. Binary rewards, G = 8: a hard prompt with 1 success and a medium one with 4. How much does the hard prompt
#    weigh relative to the medium one with the group std, the batch std and no scaling, and which switch picks
#    the scaling in TRL and in verl?
# 3. Why can a rare token with A > 0 barely grow within one rollout, what does `epsilon_high` change, and does the
#    upper clip cap the token's probability?
# 4. Under GSPO, a completion with token ratios 1.350, 1.350, 1.350, 1.000, A > 0 and ε = 0.2: which of its tokens
#    keep a gradient at token level and at sequence level? What else must you set in TRL or verl to get the GSPO
#    paper's loss?
# 5. For a binary reward with success rate p, what share of groups of G carries no signal, what do those groups
#    still cost, and what did dynamic sampling buy on AdditionTask from its SFT checkpoint?
# 6. β·KL in the reward (k1) or in the loss (k3): which gradient does each give in expectation, what does k1 in the
#    loss give, and is the same β the same strength in both places?
# 7. You set TRL's `mask_truncated_completions=True` and nothing else. What can go wrong, what do you watch, and
#    why did the soft overlong penalty with C = 4 not rescue RambleTask either?
#
# <details><summary>Answers</summary>
#
# 1. Per-sequence mean: each token weighs 1/(N·|o_i|), so 0.03125 against 0.12500, a quarter (0.25): every
#    completion totals 0.25, and the same mistake spread over more tokens is penalised less per token. Token mean
#    and constant: every token weighs the same (0.06667 and 0.03125), so a completion's total grows with its
#    length. The runs did not show the bias: under the per-sequence mean the wrong completions were the longest
#    (6.77 tokens over the last 10 iterations, against 6.53 and 6.46), but by only 0.25 and 0.31 tokens, on one
#    seed: too small to call (notebook 06 §1).
# 2. The group std divides each sampled group by its own std, which multiplies its advantages (against no scaling) by
#    1/√(p̂(1−p̂)), p̂ = k/G, so std scaling up-weights the groups with one odd reward the most relative to no scaling
#    (though they still weigh less than a medium group): the hard prompt's success gets A = +2.6458 = √(G−1) with the
#    twins' population std (TRL and verl divide by G − 1: (G−1)/√G = 2.4749, the same relative weights), and the prompt
#    weighs 0.6614 of the medium one; with the batch std or no scaling 0.4375 (the batch std divides every group by the
#    same number, so it keeps the unscaled proportions). The scaling is a choice of which prompts matter, not only of
#    units. On AdditionTask (one seed, 20 iterations) it moved the share of Σ|A| on extreme groups (0.116 against 0.073
#    and 0.074), not the reward (0.419, 0.434, 0.438). TRL 1.16.0 `scale_rewards` (`"group"`, the default, `"batch"`,
#    `"none"`); verl 0.9.1 `algorithm.norm_adv_by_std_in_grpo` (`True` by default; `False` as in Dr. GRPO)
#    (notebook 06 §2).
# 3. For A > 0 the token's own gradient is zero once ρ > 1 + ε_high, so within one rollout it pushes its probability to
#    about (1 + ε_high)·π_old and no further: an absolute gain of ε_high·π_old. At ε_high = 0.2 the token with π_old =
#    0.70 gains 0.1403, the one with π_old = 0.01 only 0.0022, 64 times less. A larger ε_high (TRL `epsilon_high`, verl
#    `clip_ratio_high`, DAPO's 0.28; keep the lower clip at 0.2) lets rare tokens climb faster. The clip caps the
#    incentive, not the probability: with a bias shared by two contexts, the rare token passed 1.2 at step 10 and its
#    own gradient was exactly 0 from then on, yet its ratio ended at 1.8586, carried by the other context's gradient. On
#    ReverseTask a wider upper clip clipped fewer A > 0 tokens (0.135, 0.101, 0.073 for ε_high = 0.2, 0.28, 0.4) and on
#    this seed the reward rose (0.238, 0.277, 0.306) while the entropy fell (0.927, 0.803, 0.724). Only the clip
#    fraction's order follows from the mechanism; the reward's and the entropy's are one seed's (notebook 06 §3).
# 4. GSPO's s_i is the geometric mean of the token ratios, exp(mean_t log ρ_{i,t}); here s = 1.2523 > 1.2, so sequence-
#    level clipping drops the whole completion (all four gradients 0), while token-level clipping keeps the fourth token
#    (gradient 0.1250). s spreads less than the token ratios (std of log s 0.0778 against 0.1557 for log ρ in the token-
#    level run), so set its clip radius for s instead of copying 0.2 (the GSPO paper uses 3e-4 below and 4e-4 above).
#    TRL 1.16.0 `importance_sampling_level="sequence"` with `loss_type="grpo"`; verl 0.9.1 `policy_loss.loss_mode=gspo`
#    with `loss_agg_mode=seq-mean-token-mean`. The default aggregations (TRL `"dapo"`, verl `token-mean`) weight each
#    completion by its length instead (notebook 06 §4).
# 5. p^G + (1 − p)^G; at p = 0.1, G = 8 only 0.5695 of the groups are informative. The others were generated and
#    scored, have all-zero advantages, and still enter the KL term and the token mean's denominator. From the SFT
#    checkpoint few groups were wasted (0.094, an effective batch of 7.25 of 8); dynamic sampling filled all 8 at
#    the price of 216 generated groups instead of 160 and bought nothing visible: reward 0.391 against 0.419, and
#    0.403 against 0.422 after about the same generation budget (168 and 160 groups), within one seed's noise. It
#    pays where most groups are all-wrong or all-right. verl 0.9.1 `algorithm.filter_groups.enable`; TRL 1.16.0
#    has no switch and logs `frac_reward_zero_std` (notebook 06 §5).
# 6. k1 in the reward reaches the policy through the advantage as a score-function term, with expected gradient
#    β∇KL(π ‖ π_ref). k3 in the loss is differentiated directly, with expected gradient β∇KL(π_ref ‖ π), the other
#    direction (+0.33191 against +0.28259 on the first logit of the tiny input). k1 in the loss pulls nowhere in
#    expectation (gradient 0, on π's own samples); TRL 1.16.0's `use_bias_correction_kl=True` (its default; `beta`
#    itself defaults to 0.0) multiplies k3 by the token-level ρ, which restores each position's ∇KL(π ‖ π_ref) (not
#    under `importance_sampling_level="sequence"`). Not the same strength: in the reward the penalty is baselined
#    with the task reward and, where advantages are normalised (the group std here), scaled with it, so its weight
#    then depends on the reward's spread; in the loss its weight is β
#    alone. At β = 0.1 on EchoTask the KL in the loss barely anchored (k3 estimate 0.5455 over the last 10
#    iterations, against 0.6250 with β = 0), the KL in the reward far more (0.2174), at a lower reward (0.417,
#    against 0.489 and 0.507) (notebook 06 §6).
# 7. Masking keeps the truncated completions' rewards in the group's mean and std but takes their tokens out of the
#    loss. That removes the noise (a right answer that ran over no longer gets its tokens pushed down) and also the push
#    to stop that those tokens got: on RambleTask, on one seed, the truncated fraction ended higher (0.606 over the last
#    10 iterations against the twin's 0.562), completions longer (6.686 tokens against 6.492) and the reward lower
#    (0.070 against 0.117). Watch the truncated fraction per iteration (TRL `completions/clipped_ratio`, verl
#    `response_length/clip_ratio`) and pair the mask with a soft penalty. With C = 4 on T_max = 8 the penalty starts
#    after length 4 and is a far denser signal than the rare task reward: the completions fell to 2.006 tokens, almost
#    none truncated (0.003), and the reward fell too (0.041) (notebook 06 §7).
# </details>
#
# **Next: notebook 07**, *Off-policy in practice*: samplers in bfloat16, float16 and float8 against a float32 trainer,
# stale rollouts, and the effective sample size of importance weights.
