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
# **The interview question** (follow-up 1 of SPEC.md): *"This small GRPO trainer runs without an exception but
# learns poorly. Find the silent numerical and mathematical bugs using tiny diagnostic inputs."*
#
# After this notebook you can:
# - state a four-step debugging method and apply it to any RL trainer;
# - for each of the catalog's first eleven bugs of `grpo_buggy.py` (B1-B11; notebook 08 takes the six in the LM
#   plumbing, B12-B17), give **the tiny input that exposes it**, the buggy and the
#   correct number, the symptom you would see in the training logs, and the logged statistic
#   (`grpo_support.STATS`) or preflight probe (`grpo_fixed.preflight`) that catches it;
# - say which bugs cost reward on the toy task and which stay hidden there (and where they bite instead);
# - do the same for two more silent bugs that other reports of this round describe.

# %%
import inspect
import logging
import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from IPython.display import display

import grpo_buggy
import grpo_fixed
import grpo_support
from tinylm import CausalLMOutput
from workbook import nb01_bugs
from workbook.catalog import BUG_IDS, BUGS, PLUMBING_IDS, hybrid
from workbook.monitor import render_range
from workbook.plots import BUGGY, FIXED, REFERENCE, buggy_vs_fixed, curves
from workbook.progress import progress
from workbook.run_summary import final_reward
from workbook.swap import fixed_with
from workbook.widgets import live_plot, probe, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # the hand-out and the hybrids log health warnings
torch.manual_seed(0)

# %%
SHORT = dict(steps=20, prompts_per_batch=8)  # the short runs of §13 (the default run is 70 iterations x 16 prompts)
glance = nb01_bugs.ablation(seed=0, labels=("buggy", "fixed"), **SHORT)  # label -> history; §13 reuses both runs
fig, axes = buggy_vs_fixed("reward per iteration of a short run, seed 0", figsize=(8, 2.4))
for ax, history, color in zip(axes, glance.values(), (BUGGY, FIXED), strict=True):
    ax.plot([s["reward"] for s in history], "o-", ms=3, color=color)
    ax.set_xlabel("iteration")
axes[0].set(ylabel="reward", ylim=(-0.05, 1.05))
plt.show()
ends = {label: f"{final_reward(history):.3f}" for label, history in glance.items()}  # mean of the last 10
fixed_rewards = [s["reward"] for s in glance["fixed"]]
print(f"final reward (mean of the last 10 iterations): grpo_buggy {ends['buggy']}; grpo_fixed {ends['fixed']}, "
      f"{fixed_rewards[0]:.3f} at the first iteration, single iterations {min(fixed_rewards):.3f} to "
      f"{max(fixed_rewards):.3f}; grpo_buggy's first iteration {glance['buggy'][0]['reward']:.3f}")
assert ends == {"buggy": "0.002", "fixed": "0.419"} and f"{fixed_rewards[0]:.3f}" == "0.359"  # as quoted
assert min(fixed_rewards) < fixed_rewards[0] < float(ends["fixed"]) < max(fixed_rewards)  # no clear rise: noise
assert glance["buggy"][0]["reward"] < 0.05  # broken before any update

# %% [markdown]
# **At a glance.** With the same seed and 20 short iterations, the hand-out `grpo_buggy.py` (left) logs a reward near
# 0 from the first iteration on, before any update, and ends at 0.002; its fixed twin (right) stays near its SFT
# start (0.359 at the first iteration, 0.419 over the last 10, inside the range its single iterations scatter over:
# 20 short iterations show no clear rise). §13 shows which bugs cost that reward, and §2-§12 find each one with a
# tiny input.

# %% [markdown]
# ## 1. The method
#
# 1. **Log shapes**: every tensor, with its shape in its name (`rewards  # (B*G,)`). A wrong reshape that
#    still runs is only visible as a shape or a grouping you did not expect.
# 2. **Log stats**: min / max / mean / count of non-finite values, and the *invariants* that must hold
#    exactly (the sampler's log-prob of a token equals the training log-prob before any update; advantages
#    average to 0 within each group; the ratio is 1 at the first inner step).
# 3. **Tiny synthetic inputs**: a group of 4 rewards, 5 logits, a 2x3 mask, and their edge cases (constant
#    group, everything masked, huge magnitudes, a negative advantage, temperature != 1, unusual batch shapes).
# 4. **Compare against a hand calculation**: a number you worked out on paper, printed next to the code's.
#
# > **STOP: practise before you read on.** Everything below this box names the bugs and their fixes. Find
# > them yourself first, with the method above, in a mock round (from the repository root;
# > `interview/rounds.py` explains the draw, `interview/grading.py` the grader):
# > 1. `make mock` writes `practice/round_N.py`: the hand-out with **3 bugs** drawn from the catalog left in
# >    (the file does not say which; `BUGS=k` or `BUGS=all` for more, `HARD=1` for terse docstrings).
# > 2. Edit that file: log shapes and stats of a tiny batch, attack the edges, fix what you find.
# > 3. `make grade` says **which bugs are fixed, which remain**, and whether a fix broke something else.
# > 4. `make hint` gives a hint for each bug still remaining, in levels: `LEVEL=1` the symptom and the
# >    statistic to watch, `LEVEL=2` the function and a tiny input, `LEVEL=3` the fix.
# >
# > The other parts of the round: `make scratch` (write the three public functions of SPEC.md from scratch,
# > graded sentence by sentence) and `make drill` (the discussion questions, one at a time, against the clock).
# > Come back here when `make grade` says everything is fixed, or when a hint at level 2 did not help.

# %% [markdown]
# ---
# **Past the stop sign.** Each section: a question, the key equation, a tiny input, buggy vs fixed, a plot, and
# the log symptom and the check that catches it.
#
# | ## | bug | tiny input |
# |---|---|---|
# | 1 | (the method, applied) | one rollout of 2 prompts x 4 samples; the preflight probes |
# | 2 | B1 sampling from raw logits | 5 logits, 20000 draws (slider: temperature) |
# | 3 | B2 no eps in the advantage std | a group of 4 rewards (slider: spread) |
# | 4 | B3 old log-probs recomputed in the inner loop | one update on 4 prompts x 8 samples |
# | 5 | B4 `clamp(ratio * A)` | one token, ratio 1, A = 2 |
# | 6 | B5 `(values * mask).sum() / mask.sum()` | a 4x8 batch with padding (sliders: masked fraction, padding) |
# | 7 | B6 log-prob shift | a hand-made policy that is sure of the next token |
# | 8 | B7 `log(softmax)` | two logits, 0 and d |
# | 9 | B8 reversed KL log-ratio | a 3-token distribution |
# | 10 | B9 `view(G, B)` | two prompts x 3 rewards; a table of (B, G) |
# | 11 | B10 temperature missing in training | one rollout at several temperatures |
# | 12 | B11 no gradient clipping | a linear layer and a loss scaled by 1000 |
# | 13 | ablation | 13 short training runs |
# | 14 | advantage broadcast along the wrong axis (another report of this round) | 4 sequences x 4 tokens |
# | 15 | a reward that leaks gradient (another report of this round) | a 3-token policy, 4 sequences |
# | 16 | self-check | |

# %%
NB01_IDS = [b for b in BUG_IDS if b not in PLUMBING_IDS]  # B1-B11; notebook 08 takes the LM plumbing, B12-B17
HYBRID = {b: hybrid(b) for b in NB01_IDS}  # grpo_fixed with one bug switched back on
print("bugs here:", ", ".join(f"{b.id} {b.function}" for b in BUGS if b.id in NB01_IDS))
print("in notebook 08:", ", ".join(f"{b.id} {b.function}" for b in BUGS if b.id in PLUMBING_IDS))

# %% [markdown]
# ### 1.1 Log shapes and stats of one tiny rollout
# The first tool: one log line per tensor, with its shape, dtype, range over the finite entries, and the count of
# non-finite entries.

# %%
def describe(name: str, tensor: torch.Tensor) -> str:
    """One log line: shape, dtype, min / max / mean over the finite entries, count of non-finite ones."""
    values = tensor.double()
    finite = values[values.isfinite()]
    stats = f"min {finite.min():+8.3f} max {finite.max():+8.3f} mean {finite.mean():+8.3f}" if finite.numel() else ""
    return (f"{name:17s} {str(tuple(tensor.shape)):8s} {str(tensor.dtype).removeprefix('torch.'):8s} "
            f"{stats:44s} nonfinite {int((~values.isfinite()).sum())}")


print(describe("rewards", torch.tensor([0.0, 1.0, math.nan])))

# %% [markdown]
# Two prompts x four samples (B = 2, G = 4), the same seed for both twins (`nb01_bugs.tiny_rollout` calls the twin's
# `setup_run` and one `rollout`):

# %%
tiny = {}
for module in (grpo_buggy, grpo_fixed):
    batch, stats, *_ = tiny[module.__name__] = nb01_bugs.tiny_rollout(module, prompts_per_batch=2, group_size=4)
    print(f"--- {module.__name__}")
    for name, value in batch.items():  # prompts and texts are lists of strings: the LM's input and output text
        print(describe(name, value) if isinstance(value, torch.Tensor) else f"{name:17s} {value[:3]} ...")
    print(f"logprob_gap {stats['logprob_gap']:.4f} (healthy {render_range('logprob_gap')})   "
          f"adv_nonfinite {stats['adv_nonfinite']} (healthy {render_range('adv_nonfinite')})")
    print("rewards (B, G):   ", [[f"{r:.2f}" for r in row] for row in batch["rewards"].view(2, 4).tolist()])
    print("advantages (B, G):", [[f"{a:+.2f}" for a in row] for row in batch["advantages"].view(2, 4).tolist()])
buggy_stats, fixed_stats = tiny["grpo_buggy"].stats, tiny["grpo_fixed"].stats
assert buggy_stats["adv_nonfinite"] == 8 and fixed_stats["adv_nonfinite"] == 0
assert f"{buggy_stats['logprob_gap']:.4f}" == "9.8637"  # as quoted
assert not grpo_fixed.in_range(buggy_stats, "logprob_gap") and grpo_fixed.in_range(fixed_stats, "logprob_gap")
buggy_batch = tiny["grpo_buggy"].batch
assert (buggy_batch["rewards"] == 0).all() and buggy_batch["advantages"].isnan().all()  # constant groups, 0/0

# %% [markdown]
# (Each range covers every entry, the masked ones included: after a row's first EOS, `generate` leaves what it
# sampled in place and the mask hides it from the loss and the reward.) Four lines of that log should stop a
# careful reader:
# - **`advantages` has 8 non-finite values** in the buggy twin (all of them), 0 in the fixed one.
# - **`sampler_logprobs` and `old_logprobs` differ** in the buggy twin (`logprob_gap` 9.8637, outside its healthy
#   range): both are the log-prob of the same token under the same weights before any update, so they must be
#   equal (the fixed twin's gap is float32 rounding, inside the range). notebook 01 §7 (B6) and notebook 01 §11
#   (B10) explain it.
# - The buggy **texts** are not sums ('636=4' for "44+33="), and every buggy reward is 0: the sampler draws
#   from the wrong distribution (B1, notebook 01 §2), so every group is constant, and without $\epsilon$ a
#   constant group gives 0/0 (B2, notebook 01 §3). The fixed twin's texts are near misses and one hit ('77').
#   That all-NaN table also hides the grouping bug (B9, notebook 01 §10).
# - The buggy **prompts** alternate ('44+33=', '39+10=', '44+33=', ...) where the fixed twin repeats each prompt
#   $G$ times in a row, so a buggy "group" of four samples holds two prompts: B15, one of the six LM-plumbing bugs
#   of notebook 08 (the buggy twin carries all 17; this notebook takes B1-B11).
#
# ### 1.2 Hand calculation first
# $A_i = (r_i - \bar r)/(\sigma + \epsilon)$. For $r = (0, 1, 0, 1)$: $\bar r = 0.5$, $\sigma = 0.5$, so
# $A = (-1, 1, -1, 1)$ on paper.

# %%
hand = torch.tensor([-1.0, 1.0, -1.0, 1.0], dtype=torch.float64)
off = {}
for module in (grpo_buggy, grpo_fixed):
    adv = module.group_advantage([0.0, 1.0, 0.0, 1.0])
    off[module.__name__] = (adv - hand).abs().max().item()
    print(f"{module.__name__:11s} {[f'{a:+.6f}' for a in adv.tolist()]}  max |code - hand| = "
          f"{off[module.__name__]:.1e}")
EPS = inspect.signature(grpo_fixed.group_advantage).parameters["eps"].default  # the advantage's epsilon
sigma = 0.5
assert off["grpo_buggy"] == 0.0 and math.isclose(off["grpo_fixed"], EPS / sigma, rel_tol=1e-6)

# %% [markdown]
# Both twins agree with the hand calculation on the easy case (the fixed twin's $2\cdot10^{-8}$ is
# $\epsilon/\sigma$, the price of the epsilon): **silent bugs live at the edges**, so the tiny input must be an
# edge case.
#
# ### 1.3 The edges, written as probes
# `grpo_fixed.preflight` is that list of edge cases, written as probes (tiny inputs with a known answer). It runs
# on either twin, and on each single-bug hybrid:

# %%
print("preflight(grpo_buggy) fails:")
buggy_probes = grpo_fixed.preflight(grpo_buggy)
for name in buggy_probes:
    print("  -", name)
print("\nsingle-bug hybrids:")
probe_failures = {b: grpo_fixed.preflight(HYBRID[b]) for b in NB01_IDS}
for b, failed in probe_failures.items():
    print(f"  {b:4s} {failed or '(passes every probe)'}")
assert [b for b, failed in probe_failures.items() if not failed] == ["B3", "B9"]
unpadded_probe = "sampler and trainer log-probs agree on an unpadded row"
assert probe_failures["B6"] == probe_failures["B10"] == [unpadded_probe]
plumbing_probes = {"completion mask covers the first EOS and nothing after it", "prompts repeated group by group",
                   "reference is a frozen copy of the starting policy", "reward text stops at the first EOS"}
assert plumbing_probes <= set(buggy_probes)  # B14, B15, B16, B17 (notebook 08)

# %% [markdown]
# Nine of the eleven bugs fail a preflight probe. **B3 and B9 pass every probe**: they live in the training loop
# (which tensors get compared, how rewards are grouped), so they show up in the training statistics instead
# (notebook 01 §13 lists which health check fires for each run), and B9 only for some batch shapes
# (notebook 01 §10). B6 and B10 are wiring bugs too (which logit scores a token, whether the training log-prob is
# divided by the temperature), and only one probe sees them: *sampler and trainer log-probs agree on an unpadded
# row*, in which a random tiny model samples a few tokens at temperature 0.7 and the trainer's code scores them
# again. (The buggy twin also fails the probes of B14, B15, B16 and B17: notebook 08.)
#
# > **You should know.** Print shapes and stats of every tensor of one tiny batch; check invariants that are
# > *exactly* true (equal log-probs, zero-mean groups, ratio 1); hand-calculate one small case; then attack the
# > edges (constant, all-masked, huge, negative, T != 1, a group size that the number of prompts does not
# > divide).
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
# **Tiny input.** Logits $(2, 1, 0, -1, -2)$, 20000 draws. By hand, $q = (4, 3, 2, 1, 0)/10$. The test of a
# sampler is its empirical frequencies:

# %%
def sampling_frequencies(module, logits: torch.Tensor, n: int = grpo_fixed.PROBE_DRAWS, seed: int = 0):
    """Empirical frequency of each token id in n draws of module.sample_from_logits(logits). (V,)"""
    draws = module.sample_from_logits(logits, n, generator=torch.Generator().manual_seed(seed))  # (n,)
    return torch.bincount(draws, minlength=logits.shape[-1]).double() / n


logits = nb01_bugs.TOY_LOGITS  # (V,) = (5,)
p = torch.softmax(logits.double(), -1)  # (V,)
q = (logits - logits.min()).double() / (logits - logits.min()).sum()  # (V,)
print("softmax (hand):", [f"{x:.4f}" for x in p.tolist()])
print("q (hand):      ", [f"{x:.4f}" for x in q.tolist()])
freq = {}
for module in (grpo_buggy, grpo_fixed):
    freq[module.__name__] = sampling_frequencies(module, logits)  # (V,)
    print(f"{module.__name__:11s}    {[f'{f:.4f}' for f in freq[module.__name__].tolist()]}")
assert (freq["grpo_buggy"] - q).abs().max() < grpo_fixed.SAMPLING_TOL and freq["grpo_buggy"][-1] == 0
assert (freq["grpo_fixed"] - p).abs().max() < grpo_fixed.SAMPLING_TOL

# %% [markdown]
# Move the temperature: the fixed sampler follows the softmax (grey dots), the buggy one does not move at all.

# %%
fig_sampling, update_sampling = nb01_bugs.sampling_figure(sampling_frequencies)
w_temperature = live_plot(fig_sampling, update_sampling, temperature=slider(1.0, 0.1, 3.0, 0.05, "temperature"))

# %% tags=["nbval-ignore-output"]
display(w_temperature)

# %%
tv = {}
for t in (1.0, 0.25):
    tv[t] = probe(w_temperature, {"temperature": t})
    print(f"T = {t:.2f}  total-variation distance to softmax(logits / T): "
          + ", ".join(f"{k} {v:.4f}" for k, v in tv[t].items()))
assert tv[0.25]["grpo_buggy"] > 0.5 and tv[0.25]["grpo_fixed"] < grpo_fixed.SAMPLING_TOL
assert torch.equal(sampling_frequencies(grpo_buggy, logits / 0.25), freq["grpo_buggy"])  # T changes nothing

# %% [markdown]
# A static view of the same fact: the probability of the top token as the temperature changes.

# %%
temperatures = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0]
fig, (ax_b, ax_f) = buggy_vs_fixed("frequency of the top token (logits [2, 1, 0, -1, -2] / T)", figsize=(8, 2.6))
for ax, module, color in ((ax_b, grpo_buggy, BUGGY), (ax_f, grpo_fixed, FIXED)):
    top = [sampling_frequencies(module, logits / t, n=4000)[0].item() for t in temperatures]
    ax.plot(temperatures, [torch.softmax(logits / t, -1)[0].item() for t in temperatures], "--", color=REFERENCE,
            label="softmax")
    ax.plot(temperatures, top, "o-", color=color, label="sampled")
    ax.set_xlabel("temperature T")
ax_b.set_ylabel("P(token 0)")
ax_b.legend(fontsize="small")
plt.show()

# %% [markdown]
# What the training logs see: the first rollout of a default run (16 prompts x 8 samples, seed 0, before any
# update), B1 against the fixed twin on the same prompts:

# %%
first_rollout = {}
for label, module in (("B1", HYBRID["B1"]), ("fixed", grpo_fixed)):
    row = first_rollout[label] = nb01_bugs.tiny_rollout(module).stats  # default config: iteration 0 of train()
    print(f"{label:5s} reward {row['reward']:.4f}   zero_var_groups {row['zero_var_groups']:.4f}   "
          f"completion_length {row['completion_length']:.2f}   logprob_gap {row['logprob_gap']:.1e}")
assert f"{first_rollout['B1']['reward']:.4f} {first_rollout['fixed']['reward']:.4f}" == "0.0078 0.2734"  # as quoted
assert f"{first_rollout['B1']['zero_var_groups']:.4f}" == "0.9375"
assert all(grpo_fixed.in_range(row, "logprob_gap") for row in first_rollout.values())

# %% [markdown]
# **Log symptom.** The reward collapses at once: 0.0078 at iteration 0 where the SFT model, sampled correctly,
# scores 0.2734 on the same prompts, and 15 of 16 groups are all wrong (`zero_var_groups` 0.9375), so they carry
# no learning signal. It never recovers (notebook 01 §13: the B1 run stays near 0). Some statistics leave their
# healthy range at some iterations (a clip fraction, in notebook 01 §13's run) or exceed what healthy runs show
# (the gradient norm), but those are symptoms, not a diagnosis: they say the update is unusual, not that the
# sampler is wrong. The statistic that would point at the sampler stays healthy: `sampler_logprobs` are computed
# with `log_softmax`, so they describe a distribution the tokens were *not* drawn from, and `logprob_gap`
# compares them with training log-probs of that same distribution (printed above). Temperature sweeps "do
# nothing". **Caught by** the preflight probe *sampling frequencies match softmax(logits)*.
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
edge = {}
for label, rewards in cases.items():
    for module in (grpo_buggy, grpo_fixed):
        adv = edge[label, module.__name__] = module.group_advantage(rewards)
        print(f"{label:12s} {module.__name__:11s} {[f'{a:+.4g}' for a in adv.tolist()]}")
assert edge["constant", "grpo_buggy"].isnan().all() and (edge["constant", "grpo_fixed"] == 0).all()
assert edge["huge", "grpo_buggy"].isnan().all() and edge["huge", "grpo_fixed"].isfinite().all()
assert math.isclose(edge["1e-12 apart", "grpo_buggy"].max().item(), math.sqrt(3), rel_tol=1e-3)
assert math.isclose(edge["1e-12 apart", "grpo_fixed"].max().item(), 7.5e-5, rel_tol=1e-3)

# %% [markdown]
# The third case is the quiet cousin of the NaN: without $\epsilon$ a difference of $10^{-12}$ (float noise)
# becomes a full-size advantage of 1.73, exactly as large as a real success would get. The fixed twin
# shrinks it to $\approx 7.5\cdot 10^{-5}$ because $\sigma \ll \epsilon$.
#
# Slide the spread of the group to 0 and watch the buggy advantages become NaN:

# %%
def spread_group(spread: float) -> list[float]:
    """A group of 4 rewards around 0.5 whose max - min is `spread`."""
    return [0.5 - spread / 2, 0.5 - spread / 6, 0.5 + spread / 6, 0.5 + spread / 2]


fig_spread, update_spread = nb01_bugs.spread_figure(spread_group)
w_spread = live_plot(fig_spread, update_spread, spread=slider(0.0, 0.0, 1.0, 0.05, "spread"))

# %% tags=["nbval-ignore-output"]
display(w_spread)

# %%
at_spread = {}
for spread in (0.5, 0.0):
    at_spread[spread] = probe(w_spread, {"spread": spread})
    print(f"spread {spread:.2f}: " + "  ".join(f"{k} {[f'{a:+.3f}' for a in v]}" for k, v in at_spread[spread].items()))
assert all(math.isnan(a) for a in at_spread[0.0]["grpo_buggy"]) and at_spread[0.0]["grpo_fixed"] == [0.0] * 4
assert max(abs(a - b) for a, b in zip(*at_spread[0.5].values(), strict=True)) < 1e-6  # eps is invisible here

# %% [markdown]
# The slider cannot show the region between $10^{-15}$ and $10^{-6}$; this plot does (log axis), with the
# exact zero spread drawn at the left edge:

# %%
spreads = [10.0**k for k in range(-15, 1)]
fig, (ax_b, ax_f) = buggy_vs_fixed("largest |advantage| of the group as the spread shrinks", figsize=(8, 2.6))
for ax, module, color in ((ax_b, grpo_buggy, BUGGY), (ax_f, grpo_fixed, FIXED)):
    ax.semilogx(spreads, [module.group_advantage(spread_group(s)).abs().max().item() for s in spreads], "o-",
                color=color)
    at_zero = module.group_advantage(spread_group(0.0)).abs().max().item()
    ax.text(1e-15, 0.2, f"spread 0: {at_zero:.3g}", color=color)
    ax.axvline(1e-8, color=REFERENCE, ls=":", lw=1)
    ax.set_xlabel("spread (max - min reward); dotted: eps = 1e-8")
ax_b.set_ylabel("max |A_i|")
plt.show()

# %% [markdown]
# **Log symptom.** `adv_nonfinite > 0`, then a NaN loss; `optimizer_step` skips non-finite steps, so the
# `nonfinite_steps` stat counts minibatches silently thrown away. Constant groups become *more* common as the
# policy gets good (`zero_var_groups` -> 1), so the bug bites harder the better training goes (notebook 01 §13
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
# **Equation.** $\pi_{\text{old}}$ is the behaviour policy that sampled the batch: cached once at rollout. The
# surrogate's gradient is $\mathbb{E}_{o \sim \pi_{\text{old}}}[\rho_t A \nabla\log\pi_\theta(o_t)]$, and the
# importance weight $\rho_t = \pi_\theta/\pi_{\text{old}}$ is what corrects for the samples coming from
# $\pi_{\text{old}}$. Recomputing $\pi_{\text{old}}$ from the current weights (`logprobs.detach()`) makes
# $\rho \equiv 1$ in value while its gradient is still $\nabla\log\pi_\theta$: every inner step is a
# policy-gradient step $A\nabla\log\pi_\theta$ *without the importance weight*, and clipping never acts. At the
# first optimizer step of a rollout batch $\pi_\theta = \pi_{\text{old}}$, so nothing is lost; from the second
# step on the weights have moved, the samples are off-policy, and the gradient is biased. The default config
# takes `inner_epochs` x `minibatches` = 2 x 2 = 4 optimizer steps per rollout batch; even with one epoch and two
# minibatches the second minibatch is already off-policy.
#
# **Tiny input.** One rollout of 4 prompts x 8 samples, one call to `update_policy` (2 epochs x 2
# minibatches = 4 inner steps), the same seed for both:

# %%
inner = {}
for label, module in (("B3", HYBRID["B3"]), ("fixed", grpo_fixed)):
    run = nb01_bugs.tiny_rollout(module, prompts_per_batch=4, group_size=8)
    records = module.update_policy(run.policy, run.optimizer, run.batch, run.cfg, run.generator)
    inner[label] = [(r["ratio"] - 1).abs().max().item() for r in records]
    print(f"{label:5s} max|ratio - 1| per inner step {[f'{d:.4f}' for d in inner[label]]}   "
          f"clipped tokens {[r['clipped_pos'] + r['clipped_neg'] for r in records]}")
cfg = run.cfg
print(f"healthy ratio_last_maxdev {render_range('ratio_last_maxdev')}   default config: inner_epochs "
      f"{cfg.inner_epochs} x minibatches {cfg.minibatches} = {cfg.inner_epochs * cfg.minibatches} optimizer steps")
assert cfg == grpo_fixed.make_config(prompts_per_batch=4) and (cfg.inner_epochs, cfg.minibatches) == (2, 2)
assert inner["B3"] == [0.0] * 4 and not grpo_fixed.in_range({"ratio_last_maxdev": inner["B3"][-1]}, "ratio_last_maxdev")
assert inner["fixed"][0] == 0.0 and min(inner["fixed"][1:]) > cfg.clip

# %%
fig, (ax_b, ax_f) = buggy_vs_fixed("max |ratio - 1| at each inner step of one update", figsize=(8, 2.4))
for ax, label, color in ((ax_b, "B3", BUGGY), (ax_f, "fixed", FIXED)):
    ax.bar(range(1, 5), inner[label], color=color)
    if max(inner[label]) == 0:
        ax.text(2.5, 0.1, "exactly 0 at every step", color=color, ha="center")
    ax.axhline(cfg.clip, color=REFERENCE, ls=":", lw=1)
    ax.set_xlabel(f"inner step (dotted: clip radius {cfg.clip})")
ax_b.set_ylabel("max |ratio - 1|")
plt.show()

# %% [markdown]
# The fixed twin's ratio is exactly 1 at the first inner step and moves past the clip radius from the second
# step on; B3's stays exactly 1 throughout. **Log symptom.** `ratio_last_maxdev` stays exactly 0 (below its
# healthy range, printed above) and `clip_frac_pos` / `clip_frac_neg` stay 0 for the whole run. **Caught by**
# the health check *ratio moves after updates* (no preflight probe can see it: the bug is in the loop, not in a
# building block). What it costs: the importance weight and the clipped trust region are gone, which matters
# more the further the policy moves within one batch; notebook 01 §13 shows its final reward here and notebook 02
# shows the ratio's regime (more inner epochs, a larger learning rate).
#
# > **You should know.** The ratio is exactly 1 at the first inner step and must *move* afterwards. A ratio
# > that is always 1 means $\pi_{\text{old}}$ is not the behaviour policy.
#
# <details><summary>With inner_epochs=1 and minibatches=1, is B3 still a bug?</summary>
#
# No observable one: with a single optimizer step per rollout batch the ratio is 1 anyway (same weights), and the
# gradient of $\rho A$ at $\rho = 1$ equals the policy gradient. It becomes a bug as soon as a rollout batch
# feeds more than one optimizer step: a second epoch over it, or just a second minibatch (`inner_epochs=1,
# minibatches=2`), whose samples came from the weights before the first step.
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
grad_at_1 = {}
for label, module in (("B4", HYBRID["B4"]), ("fixed", grpo_fixed)):
    logp = torch.zeros(1, 2, requires_grad=True)  # (N, T) = (1, 2)
    loss = module.grpo_loss(logp, torch.zeros(1, 2), torch.tensor([2.0]), torch.ones(1, 2, dtype=torch.bool))
    loss.backward()
    grad_at_1[label] = logp.grad[0].tolist()
    print(f"{label:5s} loss {loss.item():+.4f}   d loss / d logp {[f'{g:+.4f}' for g in logp.grad[0]]}")
assert grad_at_1 == {"B4": [0.0, 0.0], "fixed": [-1.0, -1.0]}

# %%
ratios = torch.linspace(0.5, 1.5, 41)  # (R,)
objective = {}
fig, (ax_b, ax_f) = buggy_vs_fixed("surrogate objective min(...) of one token vs ratio", figsize=(8, 2.8))
for ax, label, module in ((ax_b, "B4", HYBRID["B4"]), (ax_f, "fixed", grpo_fixed)):
    for adv, style in ((2.0, "-"), (1.0, "--"), (-1.0, "-.")):
        objective[label, adv] = torch.tensor([
            -module.grpo_loss(torch.log(r).view(1, 1), torch.zeros(1, 1), torch.tensor([adv]),
                              torch.ones(1, 1, dtype=torch.bool)).item() for r in ratios])  # (R,)
        ax.plot(ratios, objective[label, adv], style, label=f"A = {adv:+.0f}")
    ax.set_xlabel("ratio")
ax_b.set_ylabel("objective (= -loss)")
ax_b.legend(fontsize="small")
plt.show()
assert torch.allclose(objective["B4", 1.0], objective["fixed", 1.0])  # A = 1: the two forms coincide
flat = ratios >= 0.6  # where rho * A = 2 rho reaches 1.2
assert torch.allclose(objective["B4", 2.0][flat], torch.tensor(1.2))  # A = 2: flat, no gradient, ratio 1 included
assert objective["B4", 2.0][~flat].max() < 1.2
assert torch.allclose(objective["B4", -1.0], -ratios)  # A = -1: always the unclipped rho * A
assert not torch.allclose(objective["fixed", -1.0], -ratios)  # the fixed one clips it below 1 - c

# %% [markdown]
# For $A = +1$ both curves agree (the product equals the ratio). For $A = 2$ the buggy objective is flat at
# 1.2 for every ratio from 0.6 up (where $\rho A = 2\rho$ reaches 1.2), ratio 1 included: no gradient there.
# For $A = -1$ the buggy clamp of a negative number to $[0.8, 1.2]$ is always 0.8, so the min always picks
# $\rho A$: negative advantages are never clipped. **Log symptom.** None of the ratio stats see it (they are
# computed from the ratio, not from the loss); the reward lags (notebook 01 §13). **Caught by** preflight
# *loss gradient at ratio 1 is -A/n*.
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
# row are padding and hold garbage. Three estimates of the mean over the real tokens, beside the truth:

# %%
PADDING = {"-inf": -math.inf, "0.0": 0.0}
"""what the masked positions hold: -inf (the log of an underflowed softmax) or finite garbage"""


def padded_batch(masked_fraction: float, padding: float, rows: int = 4, width: int = 8):
    """Per-token values 1, 2, ..., width along each row; the last round(f * width) tokens of every row masked
    and overwritten with `padding`. -> values (rows, width), mask (rows, width)."""
    n_real = round((1 - masked_fraction) * width)
    mask = (torch.arange(width) < n_real).expand(rows, width)  # (rows, width)
    values = torch.arange(1, width + 1, dtype=torch.float32).expand(rows, width)  # (rows, width)
    return torch.where(mask, values, torch.tensor(padding)), mask


def masked_estimates(masked_fraction: float, padding: float) -> dict:
    """The hand-calculated truth and three estimates of the mean over real tokens (in this order)."""
    values, mask = padded_batch(masked_fraction, padding)
    real = values[mask]
    return {
        "truth": real.mean().item() if real.numel() else 0.0,
        "naive values.mean()": values.mean().item(),
        "B5 (values*mask).sum()/mask.sum()": grpo_buggy.masked_mean(values, mask).item(),
        "fixed masked_mean": grpo_fixed.masked_mean(values, mask).item(),
    }


finite_rows = {f: masked_estimates(f, PADDING["0.0"]) for f in (0.5, 1.0)}
for f, row in finite_rows.items():
    print(f"masked {f:.2f}, padding 0.0: " + "  ".join(f"{k} {v:.4f}" for k, v in row.items()))
assert finite_rows[0.5]["naive values.mean()"] == 1.25 and finite_rows[0.5]["truth"] == 2.5
assert finite_rows[0.5]["B5 (values*mask).sum()/mask.sum()"] == 2.5
assert math.isnan(finite_rows[1.0]["B5 (values*mask).sum()/mask.sum()"]) and finite_rows[1.0]["fixed masked_mean"] == 0

# %% [markdown]
# With finite garbage (0.0) the naive mean is biased toward the padding value (at half masked: 1.25 instead of
# 2.5) and B5 is exact until everything is masked (0/0 = NaN). Now padding that holds $-\infty$ (a log-prob of a
# padding token computed as `log(softmax)` that underflowed, notebook 01 §8, or any garbage a padded position
# happens to hold). Slide the masked fraction, and switch the padding:

# %%
fig_masked, update_masked = nb01_bugs.masked_mean_figure(masked_estimates, PADDING)
w_masked = live_plot(fig_masked, update_masked,
                     masked_fraction=slider(0.5, 0.0, 1.0, 0.125, "masked fraction"),
                     padding=widgets.ToggleButtons(options=list(PADDING), value="-inf", description="padding"))

# %% tags=["nbval-ignore-output"]
display(w_masked)

# %%
inf_rows = {f: probe(w_masked, {"masked fraction": f}) for f in (0.0, 1.0, 0.5, 0.125)}
for f in sorted(inf_rows):
    print(f"masked {f:.3f}, padding -inf: " + "  ".join(f"{k} {v:.4f}" for k, v in inf_rows[f].items()))
assert len(set(inf_rows[0.0].values())) == 1 and inf_rows[0.0]["truth"] == 4.5  # nothing masked: all agree
assert math.isnan(inf_rows[0.125]["B5 (values*mask).sum()/mask.sum()"])  # one masked token per row is enough
assert all(row["naive values.mean()"] == -math.inf for f, row in inf_rows.items() if f > 0)
assert all(row["fixed masked_mean"] == row["truth"] for row in inf_rows.values())

# %% [markdown]
# With $-\infty$ padding, **one** masked token per row is enough to turn B5's mean into NaN (masked fraction
# 0.125), and the naive mean is $-\infty$; at fraction 0 all three agree with the hand value 4.5. The fixed
# `masked_mean` equals the truth everywhere. The all-masked case in the loss itself:

# %%
all_masked = torch.zeros(2, 3, dtype=torch.bool)  # (N, T): nothing generated
all_masked_loss = {}
for label, module in (("B5", HYBRID["B5"]), ("fixed", grpo_fixed)):
    all_masked_loss[label] = module.grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2), all_masked).item()
    print(f"{label:5s} all-masked loss {all_masked_loss[label] + 0.0:+.4f}")  # + 0.0 turns -0.0 into 0.0
assert math.isnan(all_masked_loss["B5"]) and all_masked_loss["fixed"] == 0.0

# %% [markdown]
# **Honest scope.** Inside this trainer B5 never bites: `grpo_loss` and `kl_to_reference` zero the masked
# log-ratios *before* calling `masked_mean`, and the first completion token is always generated (so no row
# is fully masked). In notebook 01 §13, B5's run has the fixed run's reward at every iteration. **Log
# symptom** when it does bite: a NaN loss with finite log-probs on every real token. **Caught by** preflight
# *all-masked loss is finite*.
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
# **Tiny input.** A hand-made policy that is sure (logit 10 vs 0) that the next token is the current one + 1:

# %%
class NextTokenPolicy(torch.nn.Module):
    """A hand-checkable 'policy' with the model interface of tinylm.TinyLM (input_ids, attention_mask,
    position_ids -> an output with .logits): at every position it is sure the next token is (current + 1) mod V.
    logits[n, l] = confidence * one_hot((input_ids[n, l] + 1) mod V)   (N, L) -> (N, L, V); it ignores the
    mask and the positions. The BOS id is V, so after BOS it predicts token 1 (= (V + 1) mod V)."""

    def __init__(self, vocab_size: int = 6, confidence: float = 10.0):
        super().__init__()
        self.bos_id, self.vocab_size, self.confidence = vocab_size, vocab_size, confidence

    def forward(self, input_ids, attention_mask=None, position_ids=None) -> CausalLMOutput:
        one_hot = torch.nn.functional.one_hot((input_ids + 1) % self.vocab_size, self.vocab_size)  # (N, L, V)
        return CausalLMOutput(self.confidence * one_hot.float())


policy = NextTokenPolicy(vocab_size=6, confidence=10.0)
print("predicted next token after [BOS, 1, 2]:", policy(torch.tensor([[6, 1, 2]])).logits.argmax(-1).tolist())

# %% [markdown]
# Prompt `[BOS, 1, 2]` (one row, no padding: attention mask all ones), completion `[3, 4, 5]`.
# By hand the correct log-prob of each token is
# $-\log(1 + 5e^{-10}) \approx -0.0002$; scoring the wrong position gives $\approx -10.0002$.

# %%
prompt, completion = torch.tensor([[6, 1, 2]]), torch.tensor([[3, 4, 5]])  # (N, P) BOS included, (N, T)
prompt_mask, completion_mask = torch.ones_like(prompt), torch.ones_like(completion, dtype=torch.bool)
right, wrong = -math.log1p(5 * math.exp(-10)), -10 - math.log1p(5 * math.exp(-10))
print("hand:       ", f"{right:+.4f}", f"{wrong:+.4f}")
shifted = {}
for label, module in (("B6", HYBRID["B6"]), ("fixed", grpo_fixed)):
    shifted[label] = module.policy_logprobs(policy, prompt, prompt_mask, completion, completion_mask, 1.0)  # (N, T)
    print(f"{label:5s} logp {[f'{x:+.4f}' for x in shifted[label][0].tolist()]}")
assert torch.allclose(shifted["B6"], torch.tensor(wrong), atol=1e-5)  # float32: about 1e-6 absolute at |logit| 10
assert torch.allclose(shifted["fixed"], torch.tensor(right), atol=1e-5)

# %% [markdown]
# The same bug in a real rollout shows up as a gap between the sampler's log-prob of each drawn token and the
# training log-prob of that token (they must be equal before any update):

# %%
gap_b6 = {}
fig, (ax_b, ax_f) = buggy_vs_fixed("sampler log-prob vs training log-prob of each generated token", figsize=(8, 2.8))
for ax, label, module, color in ((ax_b, "B6", HYBRID["B6"], BUGGY), (ax_f, "fixed", grpo_fixed, FIXED)):
    batch, stats, *_ = nb01_bugs.tiny_rollout(module, prompts_per_batch=4, group_size=8)
    mask = batch["mask"]  # (N, T)
    ax.plot(batch["sampler_logprobs"][mask], batch["old_logprobs"][mask], ".", color=color)
    ax.plot([-3, 0], [-3, 0], ":", color=REFERENCE)
    ax.set_xlabel(f"sampler log-prob  (logprob_gap {stats['logprob_gap']:.4f})")
    gap_b6[label] = stats
    print(f"{label:5s} logprob_gap {stats['logprob_gap']:.4f}")
ax_b.set_ylabel("training log-prob")
plt.show()
assert not grpo_fixed.in_range(gap_b6["B6"], "logprob_gap") and grpo_fixed.in_range(gap_b6["fixed"], "logprob_gap")
assert f"{gap_b6['B6']['logprob_gap']:.1f}" == "13.4"  # as quoted

# %% [markdown]
# The policy here is the SFT model, confident about most digits, so the gap is large (13.4 nats, printed): a
# confident model puts the shifted logit far from the right one, as the hand-made policy shows (on a fresh,
# nearly uniform model the gap would be modest). The fixed twin's gap is float32 rounding (the KV-cache
# sampler against one full forward), inside its healthy range. **Log symptom.** `logprob_gap` far outside its
# healthy range from iteration 0. **Caught by** the health check *training log-probs match the sampler*, and
# by the one preflight probe that wires sampler and trainer together, *sampler and trainer log-probs agree on an
# unpadded row* (the building blocks are right, only their wiring is off by one). It costs a lot of reward
# (notebook 01 §13): the model is trained to raise the probability of the wrong prediction.
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
# ## 8. B7 — `log(softmax)` instead of `log_softmax`
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
at_big = {}
for label, module in (("B7", HYBRID["B7"]), ("fixed", grpo_fixed)):
    at_big[label] = module.token_logprobs(big, token0).item(), module.token_logprobs(big / 2, token0).item()
    print(f"{label:5s} logp(token 0 | logits [0, 200]) = {at_big[label][0]:+.4f}   [0, 100]: {at_big[label][1]:+.4f}")
assert at_big["B7"][0] == -math.inf and at_big["fixed"] == (-200.0, -100.0) and at_big["B7"][1] > -100.0
gaps = torch.arange(0, 121, dtype=torch.float32)  # (D,)
first_inf = {}
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    pair = torch.stack([torch.zeros_like(gaps), gaps], -1).to(dtype)[:, None, :]  # (D, 1, 2)
    buggy = grpo_buggy.token_logprobs(pair, torch.zeros(len(gaps), 1, dtype=torch.long))[:, 0]  # (D,)
    fixed = grpo_fixed.token_logprobs(pair, torch.zeros(len(gaps), 1, dtype=torch.long))[:, 0]
    first_inf[dtype] = gaps[~buggy.isfinite()][0].item()
    print(f"{str(dtype):15s} first gap with -inf: buggy {first_inf[dtype]:.0f}, "
          f"fixed {'none' if fixed.isfinite().all() else 'some'} (up to {gaps[-1].item():.0f})")
assert first_inf == {torch.float16: 18, torch.bfloat16: 93, torch.float32: 104}

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
# Where those two thresholds come from: float32's smallest normal and smallest subnormal numbers, and what
# rounding does to $e^{-d}$ below them:

# %%
tiny_normal, tiny_subnormal = torch.finfo(torch.float32).smallest_normal, 2.0**-149
below = {x: torch.tensor(x, dtype=torch.float64).float().item() for x in (2.0**-150, 2.0**-150 * 1.001)}
print(f"smallest normal {tiny_normal:.3g} = e^-{-math.log(tiny_normal):.2f}   smallest subnormal 2^-149 = "
      f"{torch.tensor(tiny_subnormal).item():.3g}")
print("rounded to float32: " + ", ".join(f"{x:.4g} -> {y:.3g}" for x, y in below.items())
      + f"   (2^-150 = e^-{150 * math.log(2):.2f})")
assert below == {2.0**-150: 0.0, 2.0**-150 * 1.001: tiny_subnormal}  # exactly half rounds to even (0), above up
assert math.floor(150 * math.log(2)) + 1 == first_inf[torch.float32]  # 103.97: the first integer gap is 104

# %% [markdown]
# **Log symptom.** A `-inf` log-prob makes the ratio and the loss non-finite: `nonfinite_steps > 0`, a `kl`
# of inf. **Regime.** Our tiny policy never gets that confident in a short run: the B7 run in notebook 01 §13
# has no non-finite step and the fixed run's reward at every iteration. It bites with large logits (long training,
# big vocabularies) and much sooner in half precision (float16 from a gap of 18). **Caught by** preflight
# *token log-probs finite for large logits*.
#
# > **You should know.** Never take `log` of a probability you computed; use `log_softmax` or
# > `logits - logsumexp`, which are exact for any logit magnitude.
#
# <details><summary>Before the -inf, is log(softmax) at least accurate?</summary>
#
# No: from $d = 87.34$ ($e^{-d}$ below float32's smallest normal number, $1.18\cdot10^{-38}$) to
# $d = 150\ln 2 = 103.97$ the probability is a subnormal number, stored with fewer and fewer significant bits, so
# the log-prob drifts: at $d = 100$ the buggy version returned -99.9831 instead of -100 (printed above). Past
# 103.97, $e^{-d}$ is below $2^{-150} \approx 7.0\cdot10^{-46}$, half the smallest subnormal $2^{-149} \approx
# 1.4\cdot10^{-45}$, and rounds to 0 (exactly $2^{-150}$ rounds to even, 0; just above it rounds up to
# $1.4\cdot10^{-45}$; printed above): $\log 0 = -\infty$.
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
# **Gradient.** The trainer differentiates the estimator through $\log\pi$ on the sampled tokens. Correct k3:
# $\partial k_3/\partial\log\pi = 1 - \pi_{\text{ref}}/\pi$, so $\mathbb{E}_\pi[\nabla k_3] = \sum_v (\pi_v -
# \pi_{\text{ref},v})\nabla\log\pi_v = \nabla\mathrm{KL}(\pi_{\text{ref}}\|\pi)$: the value estimates
# $\mathrm{KL}(\pi\|\pi_{\text{ref}})$, the gradient is the other direction's (the two agree to first order near
# the reference). Reversed: the weight is $\pi/\pi_{\text{ref}} - 1$, and $\mathbb{E}_\pi[\nabla k_3^{\text{rev}}] =
# \sum_v (\pi_v^2/\pi_{\text{ref},v})\nabla\log\pi_v = \tfrac12\nabla\chi^2(\pi\|\pi_{\text{ref}})$ (notebook 04 §2.2
# derives both). $\chi^2$ is smallest, 0, at $\pi = \pi_{\text{ref}}$, so B8 still pulls the policy *toward* the
# reference: it is not a repeller. But its weight is unbounded on tokens the policy likes far more than the
# reference does, where the correct weight never exceeds 1.
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
estimate = {}
for label, module in (("B8", HYBRID["B8"]), ("fixed", grpo_fixed)):
    estimate[label] = module.kl_to_reference(logp_pi, logp_ref, every).item()
    print(f"{label:5s} estimator {estimate[label]:.4f}")
assert math.isclose(estimate["fixed"], kl, rel_tol=1e-5) and math.isclose(estimate["B8"], chi2 - kl, rel_tol=1e-5)

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
# The gradients on the same tiny input, $\pi = \mathrm{softmax}(\theta)$ at $\theta = 0$: each estimator on the 3
# tokens (their plain mean is the expectation under $\pi$) differentiated with respect to $\theta$ through
# $\log\pi$, beside the gradients of three divergences:

# %%
theta = torch.zeros(1, 3, requires_grad=True)  # (N, V): pi = softmax(theta), uniform as above
kl_grad = {}
for label, module in (("B8", HYBRID["B8"]), ("fixed", grpo_fixed)):
    (kl_grad[label],) = torch.autograd.grad(module.kl_to_reference(torch.log_softmax(theta, -1), logp_ref, every),
                                            theta)
divergences = {
    "chi2(pi||ref) / 2": lambda lp: 0.5 * ((2 * lp).exp() / logp_ref.exp()).sum(),
    "KL(ref||pi)": lambda lp: (logp_ref.exp() * (logp_ref - lp)).sum(),
    "KL(pi||ref)": lambda lp: (lp.exp() * (lp - logp_ref)).sum(),
}
for name, f in divergences.items():
    (kl_grad[name],) = torch.autograd.grad(f(torch.log_softmax(theta, -1)), theta)
for name, g in kl_grad.items():
    print(f"grad {name:18s} {[f'{x:+.4f}' for x in g[0].tolist()]}")
step = {label: divergences["KL(pi||ref)"](torch.log_softmax(theta - 0.1 * kl_grad[label], -1)).item()
        for label in ("B8", "fixed")}
print(f"KL(pi||ref) {kl:.4f}; after a step of 0.1 against the gradient of B8: {step['B8']:.4f}, "
      f"of fixed: {step['fixed']:.4f}")
assert torch.allclose(kl_grad["B8"], kl_grad["chi2(pi||ref) / 2"], atol=1e-6)
assert torch.allclose(kl_grad["fixed"], kl_grad["KL(ref||pi)"], atol=1e-6)
assert not torch.allclose(kl_grad["fixed"], kl_grad["KL(pi||ref)"], atol=1e-2)  # the value's KL, not the gradient's
assert step["B8"] < kl and step["fixed"] < kl  # both pull toward the reference

# %% [markdown]
# B8's gradient is $\frac12\nabla\chi^2$ and the fixed one's is $\nabla\mathrm{KL}(\pi_{\text{ref}}\|\pi)$, not
# $\nabla\mathrm{KL}(\pi\|\pi_{\text{ref}})$ (printed); a step against either lowers
# $\mathrm{KL}(\pi\|\pi_{\text{ref}})$.
#
# **Log symptom.** The logged `kl` measures the wrong quantity (6.0296 instead of 1.0443 above) but stays
# $\ge 0$, so no sign check fires. In a run, the logged `kl` spikes far above the policy's exact KL to the
# reference and the gradient norm spikes into the thousands, while the exact KL stays no higher than the fixed
# run's (notebook 01 §13 prints both; the catalog's level-1 hint gives a default run's numbers): an anchor that
# jerks, not a repeller. Its final reward stays level with the fixed run's there; notebook 04 shows what the KL
# term does at other $\beta$.
# **Caught by** preflight *KL estimator is unbiased for KL(pi || ref)*.
#
# > **You should know.** k3 $= r - \log r - 1$ with $r = \pi_{\text{ref}}/\pi$, on samples from $\pi$. It is
# > unbiased and always $\ge 0$; reversing $r$ keeps it $\ge 0$, which is why no sign check catches it, and
# > turns its gradient into $\frac12\nabla\chi^2(\pi\|\pi_{\text{ref}})$: still an anchor, but one that jerks.
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
# **Equation.** Sample $k$ answers prompt $\lfloor k/G \rfloor$. Row $i$ of `view(G, B)` holds samples
# $iB, \dots, iB + B - 1$: $B$ consecutive samples, which stay inside one prompt's group exactly when no multiple
# of $G$ falls strictly inside the row, for every row, that is when **$B$ divides $G$**. Otherwise the rows
# straddle group boundaries and the baseline $\bar r$ mixes prompts.
#
# **Tiny input.** An easy prompt and a hard one, $G = 3$ samples each ($B = 2$ does not divide 3). By hand, the
# hard prompt's best sample (0.4, above its own mean 0.133) must get a **positive** advantage:

# %%
rewards = torch.tensor([1.0, 0.6, 1.0, 0.4, 0.0, 0.0])  # (B*G,) = prompt 0 (easy) x 3, prompt 1 (hard) x 3
print("buggy rows (view(G, B)):", [[f"{r:.1f}" for r in row] for row in rewards.view(3, 2).tolist()])
adv_b9 = HYBRID["B9"].batch_advantages(rewards, 3)  # (B*G,)
adv_fixed = grpo_fixed.batch_advantages(rewards, 3)
for label, adv in (("B9", adv_b9), ("fixed", adv_fixed)):
    print(f"{label:5s} advantages {[f'{a:+.3f}' for a in adv.tolist()]}   per-prompt mean "
          f"{[f'{m:+.3f}' for m in adv.view(2, 3).mean(1).tolist()]}")
assert adv_b9[3] < 0 < adv_fixed[3]  # the hard prompt's best answer: pushed down by B9

# %%
fig, (ax_b, ax_f) = buggy_vs_fixed("advantages of [easy x 3, hard x 3]", figsize=(8, 2.6))
for ax, adv, color in ((ax_b, adv_b9, BUGGY), (ax_f, adv_fixed, FIXED)):
    ax.bar(range(6), adv, color=[color] * 3 + ["#999999"] * 3)
    ax.axhline(0, color=REFERENCE, lw=0.8)
    ax.set_xticks(range(6), [f"p{i // 3}: {r:.1f}" for i, r in enumerate(rewards.tolist())])
ax_b.set_ylabel("advantage (grey: hard prompt)")
plt.show()

# %% [markdown]
# Sample 3 (the hard prompt's 0.4) gets $-1$ under B9 and $+1.414$ when fixed: the wrong sign, so this sample's
# update pushes *down* the best answer to the hard prompt. B9's advantages do not average to 0 per prompt
# (+0.333, -0.333), which is what the logged `adv_group_mean` measures.
#
# ### 10.1 When is B9 invisible?
# The health check *advantages centred per group* reads `adv_group_mean` (max |mean advantage| over each
# prompt's group, computed by the trainer's `rollout_stats`). For each $(B, G)$: 5 random batches of synthetic
# rewards (multiples of 1/3), B9's advantages, in how many batches the check fires, and how far B9's advantages
# are from the correct ones:

# %%
TOKENIZER = grpo_fixed.CharTokenizer(grpo_fixed.AdditionTask.alphabet)


def logged_stats(rewards, advantages, group_size):
    """rollout_stats of a batch that holds only rewards and advantages (B*G,): one prompt per group, one EOS
    token per sample, empty texts, all log-probs 0."""
    n = rewards.shape[0]
    zeros = torch.zeros(n, 1)  # (N, 1)
    batch = dict(prompts=[f"{i // group_size}=" for i in range(n)], texts=[""] * n,
                 prompt_mask=torch.ones(n, 1), completions=torch.full((n, 1), TOKENIZER.eos_token_id),
                 mask=torch.ones(n, 1, dtype=torch.bool), rewards=rewards, advantages=advantages,
                 old_logprobs=zeros, sampler_logprobs=zeros, ref_logprobs=zeros, entropy=zeros)
    return grpo_fixed.rollout_stats(batch, group_size, TOKENIZER)


DRAWS = 5
generator = torch.Generator().manual_seed(0)
shapes = [(1, 4), (2, 4), (4, 4), (3, 4), (8, 4), (1, 8), (2, 8), (4, 8), (8, 8), (16, 8), (3, 8)]
invisible = {}
for B, G in shapes:
    fired, max_diff, all_zero, identical = 0, 0.0, True, True
    for _ in range(DRAWS):
        r = torch.randint(0, 4, (B * G,), generator=generator).float() / 3  # (B*G,)
        a_b9, a_fixed = HYBRID["B9"].batch_advantages(r, G), grpo_fixed.batch_advantages(r, G)
        fired += not grpo_fixed.in_range(logged_stats(r, a_b9, G), "adv_group_mean")
        max_diff = max(max_diff, (a_b9 - a_fixed).abs().max().item())
        all_zero &= bool((a_b9 == 0).all())
        identical &= torch.equal(a_b9, a_fixed)
    invisible[B, G] = dict(divides=G % B == 0, fired=fired, max_diff=max_diff, all_zero=all_zero, identical=identical)
print(f"adv_group_mean healthy {render_range('adv_group_mean')}")
print(f"{'B':>3s} {'G':>2s}  B divides G  check fires  max|A_B9 - A|  B9 advantages")
for (B, G), row in invisible.items():
    what = "all exactly 0" if row["all_zero"] else "identical to fixed" if row["identical"] else "differ"
    print(f"{B:3d} {G:2d}  {str(row['divides']):11s}  {row['fired']:d} of {DRAWS}       "
          f"{row['max_diff']:10.3f}   {what}")
assert all(row["fired"] == (0 if row["divides"] else DRAWS) for row in invisible.values())  # invisible iff B | G
assert all(row["identical"] == (B == G) for (B, G), row in invisible.items())  # correct exactly when B == G
assert all(row["all_zero"] == (B == 1) for (B, G), row in invisible.items())
assert all(row["max_diff"] > 0.5 for (B, G), row in invisible.items() if B != G)  # wrong whenever B != G

# %% [markdown]
# What the table shows, case by case:
# - **$B = G$**: `view(G, B)` and `view(B, G)` are the same (G, G) tensor, so B9 computes *exactly* the correct
#   advantages: at $B = G$ it is not a bug at all, and nothing can or needs to catch it.
# - **$B$ divides $G$, $B < G$** (e.g. $B = 2$, $G = 8$): each wrong row is a slice of $B$ samples of one prompt,
#   normalised on its own. Every slice is centred, so every group is centred and the check never fires, yet the
#   advantages are wrong (each slice has its own baseline and its own std).
# - **$B = 1$**: each wrong row holds one sample, a constant "group": every advantage is exactly 0 (with the
#   fixed `group_advantage`; with B2 as well, NaN) and the policy gradient vanishes. The centring check passes
#   (0 is centred); the one that fires is *ratio moves after updates*, because nothing moves the policy (below).
# - **$B$ does not divide $G$**: rows straddle prompts and the check fires (in every batch here).

# %%
run = nb01_bugs.tiny_rollout(HYBRID["B9"], prompts_per_batch=1)  # B = 1, G = 8
records = HYBRID["B9"].update_policy(run.policy, run.optimizer, run.batch, run.cfg, run.generator)
stats_b1 = {**run.stats, **grpo_fixed.summarize_inner_steps(records), "iteration": 0}  # a first rollout, as in train
print(f"B = 1: rewards {[f'{r:.2f}' for r in run.batch['rewards'].tolist()]}")
print(f"       advantages {run.batch['advantages'].tolist()}   ratio_last_maxdev {stats_b1['ratio_last_maxdev']:.1e}")
print("       health checks that fail:", grpo_fixed.check_health(stats_b1, run.cfg))
assert (run.batch["advantages"] == 0).all() and run.batch["rewards"].unique().numel() > 1
assert grpo_fixed.check_health(stats_b1, run.cfg) == ["ratio moves after updates"]

# %% [markdown]
# ### 10.2 What does mixing do to the update?
# At the default $B = 16$, $G = 8$ every wrong row holds two prompts' groups. To see what that does *on average*,
# we need many batches and a gradient we can compute exactly: each prompt is a 4-armed bandit (policy
# $\pi_b = \mathrm{softmax}(\theta_b)$, arm rewards a permutation of $0, \frac13, \frac23, 1$), and one batch's
# policy-gradient estimate for prompt $b$ is $\hat g_b = \frac1G \sum_i A_i \nabla_{\theta_b}\log\pi_b(a_i)$ with
# $\nabla_{\theta_b}\log\pi_b(a) = e_a - \pi_b$. 2000 batches, advantages by the correct and by the mixed
# grouping (vectorised here; checked against the trainer's `batch_advantages` on one batch), and the same batches
# with binary rewards (arm 0 is right):

# %%
def group_normalise(rewards, rows):
    """(M, B*G) -> (M, B*G): A = (r - mean) / (std + eps) within each of `rows` consecutive rows of every batch."""
    x = rewards.reshape(rewards.shape[0], rows, -1).double()  # (M, rows, B*G/rows)
    centred = x - x.mean(-1, keepdim=True)
    return (centred / (centred.pow(2).mean(-1, keepdim=True).sqrt() + EPS)).reshape(rewards.shape).float()


def mixing_effect(reward_table, arms, pi):
    """Sign flips, per-prompt mean advantage and the gradient estimate's mean and noise, correct vs B9 grouping.
    reward_table (B, K), arms (M, B, G) sampled from pi (B, K)."""
    M, B, G = arms.shape
    rewards = torch.gather(reward_table.expand(M, -1, -1), 2, arms).reshape(M, B * G)  # (M, B*G)
    adv = {"fixed": group_normalise(rewards, B), "B9": group_normalise(rewards, G)}  # view(B, G) vs view(G, B)
    assert torch.allclose(adv["fixed"][0], grpo_fixed.batch_advantages(rewards[0], G), atol=1e-6)
    assert torch.allclose(adv["B9"][0], HYBRID["B9"].batch_advantages(rewards[0], G), atol=1e-6)
    score = torch.nn.functional.one_hot(arms, pi.shape[1]).float() - pi[None, :, None, :]  # (M, B, G, K)
    signal = adv["fixed"] != 0
    out = {}
    for label, a in adv.items():
        g = (a.view(M, B, G, 1) * score).mean(2)  # (M, B, K): one batch's estimate
        mean = g.mean(0)  # (B, K)
        out[label] = dict(flips=((a.sign() != adv["fixed"].sign()) & signal).sum().item() / signal.sum().item(),
                          prompt_mean=a.view(M, B, G).mean(-1).abs().mean().item(), mean=mean,
                          noise=((g - mean).pow(2).sum((1, 2)).mean() / mean.pow(2).sum()).item())
    cos = torch.nn.functional.cosine_similarity(out["B9"]["mean"].flatten(), out["fixed"]["mean"].flatten(), 0)
    return out, cos.item()


B, G, K, M = 16, 8, 4, 2000
generator = torch.Generator().manual_seed(0)
pi = torch.softmax(2.0 * torch.randn(B, K, generator=generator), -1)  # (B, K): prompts of different difficulty
graded = torch.stack([torch.randperm(K, generator=generator) for _ in range(B)]).float() / (K - 1)  # (B, K)
binary = (torch.arange(K) == 0).float().expand(B, K)  # (B, K)
arms = torch.multinomial(pi.repeat_interleave(G, 0), M, replacement=True, generator=generator)  # (B*G, M)
arms = arms.T.reshape(M, B, G)  # (M, B, G): batch m, prompt b, sample i
mixing = {"graded": mixing_effect(graded, arms, pi), "binary": mixing_effect(binary, arms, pi)}
print(f"{'rewards':8s} {'grouping':8s} {'sign flips':>10s} {'|prompt mean A|':>15s} {'noise / |E g|^2':>15s}"
      "   cos(E g_B9, E g_fixed)")
for name, (out, cos) in mixing.items():
    for label, row in out.items():
        print(f"{name:8s} {label:8s} {row['flips']:10.3f} {row['prompt_mean']:15.3f} {row['noise']:15.3f}"
              + (f"   {cos:.3f}" if label == "B9" else ""))
(graded_out, graded_cos), (binary_out, binary_cos) = mixing["graded"], mixing["binary"]
assert graded_out["B9"]["flips"] > 0.05 and binary_out["B9"]["flips"] == 0  # sign flips need graded rewards
healthy_mean = grpo_support.STATS["adv_group_mean"].hi
assert all(out["fixed"]["prompt_mean"] <= healthy_mean < out["B9"]["prompt_mean"] for out, _ in mixing.values())
assert min(graded_cos, binary_cos) > 0.95  # on average the update points the same way
assert all(out["B9"]["noise"] <= out["fixed"]["noise"] for out, _ in mixing.values())  # no noisier here

# %% [markdown]
# What the numbers show at $B = 2G$:
# - **Per sample, signs flip** with graded rewards (a sample that beat its own prompt's mean but not the pair's,
#   like sample 3 above). With binary rewards **no sign can flip**: a reward of 1 is above any mixed mean below
#   1 and a reward of 0 below any above 0; only the sizes change.
# - **Per prompt, the advantages no longer average to 0** (column `|prompt mean A|`): an easy prompt's samples get
#   an extra push up, a hard prompt's an extra push down.
# - **On average the update barely changes**: the mean update points the same way as the correct one (cosine
#   above 0.95, column on the right), and one batch's noise relative to its mean (`noise / |E g|^2`) is no
#   larger than the correct grouping's here.
#
# Why, exactly: within one prompt, $A^{\text{B9}}_i = \frac{\sigma_b}{\sigma_{\text{mix}}} A_i +
# \frac{\bar r_b - \bar r_{\text{mix}}}{\sigma_{\text{mix}}}$, the correct advantage rescaled plus an offset
# shared by the prompt's samples. The rescale reweights prompts against each other (one reason the cosine is not
# exactly 1). The offset multiplies $\sum_i \nabla\log\pi(a_i)$, whose expectation would be 0 if the offset did
# not depend on the samples; it does, through each sample's own reward. Without the std divisions the offset is
# $\bar r_b - \bar r_{\text{mix}}$, and in $\mathbb{E}[(\bar r_b - \bar r_{\text{mix}})\nabla\log\pi(a_i)]$ every
# reward but $r_i$ is independent of $a_i$ and drops out, leaving $r_i$'s share of the two means:
# $(\frac1G - \frac1{2G})\,\mathbb{E}[r_i\nabla\log\pi(a_i)] = \frac1{2G}\nabla V_b$ per sample (a mixed row holds
# $2G$ samples), against $\frac{G-1}{G}\nabla V_b$ for the correct advantage. So the offset is mostly noise, plus
# a term along the true gradient of relative size $\frac{1}{2(G-1)}$, 0.071 at $G = 8$. On the same batches,
# mean-only advantages:

# %%
grad_v, offset_check = {}, {}
for name, table in (("graded", graded), ("binary", binary)):
    mix_rewards = torch.gather(table.expand(M, -1, -1), 2, arms).double()  # (M, B, G)
    score = torch.nn.functional.one_hot(arms, K).double() - pi.double()[None, :, None, :]  # (M, B, G, K)
    own_mean = mix_rewards.mean(-1, keepdim=True)  # (M, B, 1): r_b
    mixed_mean = mix_rewards.view(M, B // 2, 2 * G).mean(-1).repeat_interleave(2, 1)[..., None]  # (M, B, 1): view(G, B)
    offset_term = ((own_mean - mixed_mean)[..., None] * score).mean(2)  # (M, B, K): (1/G) sum_i c grad log pi
    correct_term = ((mix_rewards - own_mean)[..., None] * score).mean(2)  # (M, B, K)
    grad_v[name] = (pi * (table - (pi * table).sum(-1, keepdim=True))).double()  # (B, K): exact grad V_b
    mean_offset = offset_term.mean(0)
    offset_check[name] = dict(
        cos=torch.nn.functional.cosine_similarity(mean_offset.flatten(), grad_v[name].flatten(), 0).item(),
        vs_theory=(mean_offset.norm() / (grad_v[name] / (2 * G)).norm()).item(),
        vs_correct=(mean_offset.norm() / correct_term.mean(0).norm()).item(),
        noise=((offset_term - mean_offset).pow(2).sum((1, 2)).mean() / mean_offset.pow(2).sum()).item())
    print(f"{name:7s} cos(E offset term, grad V) {offset_check[name]['cos']:.3f}   |E offset term| / |grad V / 2G| "
          f"{offset_check[name]['vs_theory']:.3f}   / |E correct term| {offset_check[name]['vs_correct']:.3f}   "
          f"one batch's noise / |E offset term|^2 {offset_check[name]['noise']:.1f}")
assert all(c["cos"] > 0.99 and abs(c["vs_theory"] - 1) < 0.05 for c in offset_check.values())  # grad V / (2G)
assert all(abs(c["vs_correct"] - 1 / (2 * (G - 1))) < 0.01 for c in offset_check.values())  # 1 / (2(G - 1))
assert all(c["noise"] > 10 for c in offset_check.values())  # per batch, mostly noise

# %% [markdown]
# The offset's mean points along $\nabla V_b$ with the size the derivation gives, about $\frac1{14}$ of the correct
# term's, and one batch's offset term is mostly noise around it (printed). So at $B = 2G$, B9 is a wrong baseline
# more than a biased update: it scrambles single samples (signs with graded rewards, sizes always) while the
# average update barely moves. That is how it hides in a reward curve; the centring check is what catches it.
#
# **Log symptom.** `adv_group_mean` above its healthy range whenever $B$ does not divide $G$; at $B = 1$,
# `ratio_last_maxdev` stuck at 0. **Caught by** the health check *advantages centred per group* when $B$ does not
# divide $G$, *ratio moves after updates* at $B = 1$, and by nothing when $B$ divides $G$ with $1 < B < G$
# (there only a hand-calculated test of the values catches it). No preflight probe sees it.
#
# > **You should know.** Name the layout in the variable: `rewards.view(B, G)  # (B, G)`, and test reshapes
# > with a $B$ that does not divide $G$ (e.g. $B = 2$, $G = 3$), or a transposition bug passes every
# > centring test.
#
# <details><summary>Why does mixing prompts flip the sign of some samples, and why does that not bias the
# update on average?</summary>
#
# The mixed baseline sits between the easy prompt's mean and the hard prompt's mean, so a hard-prompt sample that
# beat its own group can still be below the mixed mean (negative advantage), and an easy-prompt sample that lost
# to its group can be above it. Per prompt, the mixed advantage is the correct one rescaled plus an offset $c$
# shared by the prompt's samples; the offset adds $c\sum_i\nabla\log\pi(a_i)$ to the gradient, and
# $\mathbb{E}[\nabla\log\pi(a)] = 0$. Only $c$'s dependence on each sample's own reward survives the expectation:
# a small term along the true gradient, $\frac1{2G}\nabla V_b$ per sample without the std divisions. The offset is
# mostly noise in each batch plus that $O(1/G)$ push.
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
        gap[label].append(nb01_bugs.tiny_rollout(module, prompts_per_batch=2, group_size=4, temperature=t).stats)
for label, values in gap.items():
    print(f"{label:5s} logprob_gap at T={temps}: " + str([f"{s['logprob_gap']:.4f}" for s in values]))
print(f"healthy logprob_gap {render_range('logprob_gap')}")
assert [grpo_fixed.in_range(s, "logprob_gap") for s in gap["B10"]] == [t == 1.0 for t in temps]
assert all(grpo_fixed.in_range(s, "logprob_gap") for s in gap["fixed"])  # rounding only, at every temperature
assert f"{gap['B10'][temps.index(0.8)]['logprob_gap']:.4f}" == "0.3149"  # as quoted

# %%
fig, (ax_b, ax_f) = buggy_vs_fixed("logprob_gap of one rollout vs sampling temperature", figsize=(8, 2.4))
for ax, label, color in ((ax_b, "B10", BUGGY), (ax_f, "fixed", FIXED)):
    ax.plot(temps, [s["logprob_gap"] for s in gap[label]], "o-", color=color)
    ax.axhline(grpo_support.STATS["logprob_gap"].hi, color=REFERENCE, ls=":", lw=1)
    ax.set_xlabel("temperature (dotted: top of the healthy range)")
ax_b.set_ylabel("logprob_gap")
plt.show()

# %% [markdown]
# **Log symptom.** `logprob_gap` outside its healthy range from iteration 0 whenever $T \ne 1$ (float32
# rounding at $T = 1$). **Caught by** the health check *training log-probs match the sampler*, and by the
# preflight probe *sampler and trainer log-probs agree on an unpadded row* (it samples at $T = 0.7$).
# At the default $T = 0.8$ the
# gap is 0.3149 on the tiny rollout and the reward cost is smaller than B6's (notebook 01 §13); notebook 02 shows
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
applied_norm = {}
for module in (grpo_buggy, grpo_fixed):
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    pre = module.optimizer_step(net, torch.optim.SGD(net.parameters(), lr=0.0), 1e3 * net(torch.ones(1, 4)).sum(), 1.0)
    applied_norm[module.__name__] = torch.cat([p.grad.flatten() for p in net.parameters()]).norm().item()
    print(f"{module.__name__:11s} pre-clip norm {pre:.2f}   applied gradient norm {applied_norm[module.__name__]:.2f}")
assert math.isclose(pre, 1000 * math.sqrt(5), rel_tol=1e-6)
assert math.isclose(applied_norm["grpo_buggy"], pre, rel_tol=1e-6) and math.isclose(applied_norm["grpo_fixed"], 1.0)

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
# pre-clip norm above 1 in every iteration of the fixed run (notebook 01 §13 counts them), B11's run ends
# level with the fixed one here (0.441 vs 0.419, within one seed's noise); notebook 04 shows the spikes where
# clipping matters.
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
# Thirteen short runs on AdditionTask (from its SFT checkpoint) with seed 0: the fixed trainer, the buggy one,
# and the fixed one with each single bug switched back on (`workbook.catalog.hybrid`). To fit the notebook's time
# budget they use `steps=20, prompts_per_batch=8` (the default is 70 steps x 16 prompts), so $B = G = 8$; the
# final reward is the mean of the last 10 iterations, as in `grpo_support.summarize_run`. The table also lists which of
# `grpo_fixed.HEALTH_CHECKS` fail during each run, and at which iteration they first fail. The fixed and B8 runs
# also log the exact KL of the sampling policy to the reference at each rollout (`nb01_bugs.with_exact_kl`: a sum
# over the vocabulary, no sampling noise; it draws nothing, so the runs are unchanged).

# %%
ABLATION = dict(steps=20, prompts_per_batch=8)
with progress("training the ablation's runs", total=len(nb01_bugs.ABLATION_RUNS)) as step:
    runs = nb01_bugs.ablation(seed=0, exact_kl=("fixed", "B8"), step=step, **ABLATION)  # label -> history
cfg_ablation = grpo_fixed.make_config(**ABLATION)
final = {label: final_reward(history) for label, history in runs.items()}
fired = {label: nb01_bugs.first_failures(history, cfg_ablation) for label, history in runs.items()}
skipped = {label: sum(s["nonfinite_steps"] for s in history) for label, history in runs.items()}

# %%
print(f"{'run':6s} {'final':>6s} {'skipped':>7s}  health checks that fire (first iteration)")
for label in runs:
    print(f"{label:6s} {final[label]:6.3f} {skipped[label]:7d}  "
          + (", ".join(f"{k} ({i})" for k, i in fired[label].items()) or "-"))
print(f"\nfirst-iteration reward (the SFT model) {runs['fixed'][0]['reward']:.3f}")
clipped = sum(s["grad_norm"] > cfg_ablation.max_grad_norm for s in runs["fixed"])
print(f"fixed run: iterations whose max pre-clip grad norm exceeded max_grad_norm = {cfg_ablation.max_grad_norm}: "
      f"{clipped} of {cfg_ablation.steps}")
same_as_fixed = [b for b in NB01_IDS if [s["reward"] for s in runs[b]] == [s["reward"] for s in runs["fixed"]]]
print("runs whose reward is identical to the fixed run's at every iteration:", same_as_fixed)
steps_per_iteration = cfg_ablation.inner_epochs * cfg_ablation.minibatches
print(f"B2 at iteration 0: {runs['B2'][0]['nonfinite_steps']} of its {steps_per_iteration} inner steps skipped")

# %%
fig, (ax_bar, ax_curve) = plt.subplots(1, 2, figsize=(11, 3.2), layout="constrained", width_ratios=[3, 2])
nb01_bugs.ablation_bars(ax_bar, final, runs["fixed"][0]["reward"])
ax_bar.set_title(f"final reward, seed 0, {ABLATION['steps']} iterations of {ABLATION['prompts_per_batch']} prompts")
curves(ax_curve, {k: runs[k] for k in ("fixed", "buggy", "B1", "B6")}, "reward",
       colors={"fixed": FIXED, "buggy": BUGGY, "B1": "#9467bd", "B6": "#ff7f0e"}, window=5)
ax_curve.set_title("reward per iteration (5-iteration mean)")
plt.show()

# %%
costly, noise = ["B1", "B6"], ["B2", "B3", "B4", "B8", "B10", "B11"]
assert final["fixed"] > runs["fixed"][0]["reward"] and final["buggy"] < 0.05
assert all(final[b] < final["fixed"] - 0.1 for b in costly)
assert all(abs(final[b] - final["fixed"]) < 0.1 for b in noise)
assert same_as_fixed == ["B5", "B7", "B9"] and skipped["B5"] == skipped["B7"] == 0 and skipped["B2"] > 0
assert all(0 in fired[b].values() for b in ("B3", "B6", "B10"))
assert fired["B2"]["advantages finite"] == next(s["iteration"] for s in runs["B2"] if s["zero_var_groups"] > 0) == 0
assert all(not fired[b] for b in ("B1", "B4", "B5", "B7", "B8", "B9", "B11"))
assert fired["B2"]["reference frozen, not the live policy"] == 1  # iteration 0 skipped every step: nothing moved
assert runs["B2"][0]["nonfinite_steps"] == steps_per_iteration
assert clipped == cfg_ablation.steps  # the fixed run clips its gradient in every iteration
quoted = " ".join(f"{final[k]:.3f}" for k in ("fixed", "buggy", "B1", "B6", "B4", "B3", "B2", "B8", "B10", "B11"))
assert quoted == "0.419 0.002 0.017 0.280 0.345 0.378 0.414 0.445 0.452 0.441"  # the values the text quotes
assert f"{runs['fixed'][0]['reward']:.3f} {skipped['B2']}" == "0.359 36"

# %% [markdown]
# What the table shows (one seed, one short run, so treat gaps of a few hundredths as noise):
# - **The fixed trainer learns, slowly at this size**: from 0.359 at iteration 0 (the SFT model) to a final
#   0.419 after 20 iterations of 8 prompts (the default run, 70 x 16, goes further). The fully buggy
#   trainer (all 17 bugs, the six of notebook 08 included) ends at 0.002.
# - **Single bugs that cost reward here**: B1 (0.017: the sampler draws from the wrong distribution, so the
#   SFT model's answers are lost from the first rollout on, notebook 01 §2) and B6 (0.280: the model is trained on
#   a shifted conditional). B4 (0.345) and B3 (0.378) end lower too, B2 (0.414, with 36 of its 80 inner steps
#   skipped for a NaN loss), B8 (0.445), B10 (0.452) and B11 (0.441) level with the fixed run; one seed of 20
#   iterations cannot tell those gaps from noise.
# - **Bugs invisible in the reward here**: the rewards of the B5, B7 and B9 runs equal the fixed run's at
#   *every* iteration: B5 because the trainer never hands `masked_mean` a non-finite masked value (notebook 01
#   §6), B7 because `log(softmax)` only differs from `log_softmax` by float rounding at these logit sizes (0
#   skipped steps), B9 because $B = G = 8$ here, where `view(G, B)` is `view(B, G)` (notebook 01 §10).
#   The fixed run's pre-clip gradient norm exceeded 1 in every one of its 20 iterations, so clipping acts all
#   the time, yet B11's Adam steps are scale-free enough that its run stays level here.
#   Their regimes: the tiny inputs of notebook 01 §6, notebook 01 §8 and notebook 01 §10, notebook 02 (the
#   ratio: B3, B10) and notebook 04 (KL penalty B8, gradient clipping B11).
# - **How each bug is caught**: B3 fails a health check from iteration 0 and no preflight probe; B6 and B10
#   fail a health check from iteration 0 and a probe (notebook 01 §1.3); B2 fails *advantages finite* from
#   iteration 0 (its first constant group) and a probe, and at iteration 1 *reference frozen, not the live
#   policy* too: its NaN loss skipped all 4 inner steps of iteration 0, so the policy was still the reference (a
#   symptom of B2, not a live reference; the check is waived only at iteration 0). B1, B4, B5, B7, B8
#   and B11 fail no health check here, only their preflight probe (notebook 01 §1.3). B9 at $B = G$ is caught by
#   nothing, and needs nothing: it computes the correct advantages there. It fails *advantages centred per
#   group* whenever $B$ does not divide $G$ (notebook 01 §10).
#
# > **You should know.** A single-bug ablation answers "which fix buys reward on *this* task", not "which
# > bugs matter": several bugs here cost nothing on a 20-iteration addition run yet break with large logits, half
# > precision, a $B$ that does not divide $G$, or padded batches (notebook 01 §6, notebook 01 §8,
# > notebook 01 §10). Catch them with tiny inputs and invariants, not with the reward curve.

# %% [markdown]
# Two runs up close: what B1's collapse and B8's spikes look like in the logged statistics.

# %%
b1_run, b8_run, fixed_run = runs["B1"], runs["B8"], runs["fixed"]
top = lambda history, key: max(s[key] for s in history)  # noqa: E731
clip_out = [s["iteration"] for s in b1_run if not grpo_fixed.in_range(s, "clip_frac_neg")]
b1_zero_var = sum(s["zero_var_groups"] for s in b1_run) / len(b1_run)
print(f"B1: reward at most {top(b1_run, 'reward'):.3f}; zero_var_groups {b1_zero_var:.2f} on average; "
      f"clip_frac_neg (healthy {render_range('clip_frac_neg')}) out of range at iterations {clip_out} "
      f"(max {top(b1_run, 'clip_frac_neg'):.3f}); max grad_norm {top(b1_run, 'grad_norm'):.1f} "
      f"(healthy {render_range('grad_norm')}; fixed run {top(fixed_run, 'grad_norm'):.1f})")
for label, history in (("B8", b8_run), ("fixed", fixed_run)):
    exact = [s["exact_kl"] for s in history]
    print(f"{label:5s} logged kl max {top(history, 'kl'):.3f}   exact KL mean {sum(exact) / len(exact):.3f}, max "
          f"{max(exact):.3f}   grad_norm max {top(history, 'grad_norm'):.1f}")
peak = max(b8_run, key=lambda s: s["kl"])
print(f"B8 at iteration {peak['iteration']}: logged kl {peak['kl']:.3f}, exact KL {peak['exact_kl']:.3f}; "
      f"iterations with grad_norm above {grpo_support.STATS['grad_norm'].hi:g}: "
      f"{[s['iteration'] for s in b8_run if s['grad_norm'] > grpo_support.STATS['grad_norm'].hi]}")
assert f"{top(b1_run, 'reward'):.3f} {b1_zero_var:.2f}" == "0.047 0.90"  # as quoted
assert clip_out == [0, 4, 9] and all(grpo_fixed.in_range(s, "clip_frac_pos") for s in b1_run)
assert grpo_fixed.in_range({"grad_norm": top(b1_run, "grad_norm")}, "grad_norm")  # high, yet inside its range
assert f"{top(b1_run, 'grad_norm'):.1f} {top(fixed_run, 'grad_norm'):.1f}" == "36.7 4.9"  # as quoted
mean_exact = {label: sum(s["exact_kl"] for s in h) / len(h) for label, h in (("B8", b8_run), ("fixed", fixed_run))}
assert mean_exact["B8"] < mean_exact["fixed"] and top(b8_run, "exact_kl") < top(fixed_run, "exact_kl")
assert peak["kl"] > 5 * peak["exact_kl"] and top(b8_run, "grad_norm") > 100 * top(fixed_run, "grad_norm")
assert f"{peak['kl']:.3f} {peak['exact_kl']:.3f} {top(b8_run, 'grad_norm'):.0f}" == "3.532 0.471 1877"  # as quoted
assert f"{mean_exact['B8']:.3f} {mean_exact['fixed']:.3f}" == "0.110 0.158"  # as quoted
assert [s["iteration"] for s in b8_run if s["grad_norm"] > grpo_support.STATS["grad_norm"].hi] == [5, 11, 16]

# %% [markdown]
# - **B1** never gets above 0.047 and nine groups in ten are all wrong (`zero_var_groups` 0.90 on average). Its
#   clip fraction for $A < 0$ leaves its healthy range at iterations 0, 4 and 9, and its gradient norm reaches 36.7
#   where the fixed run's stays at most 4.9 (still inside the range). No health check watches those two, and they
#   would only say that the updates are unusual: the preflight probe of notebook 01 §2 says why.
# - **B8**'s logged `kl` spikes to 3.532 at iteration 11, where its policy's exact KL to the reference is 0.471,
#   and its gradient norm spikes three times past the top of its healthy range (to 1877 at most). Yet its exact KL
#   stays below the fixed run's (0.110 vs 0.158 on average, and a lower maximum): the reversed estimator jerks the
#   policy toward the reference (notebook 01 §9), it does not let it run away. Its final reward is level with the
#   fixed run's here (0.445 vs 0.419, one seed).

# %% [markdown]
# ## 14. The per-sequence advantage broadcast along the wrong axis
# (A bug from another report of this round.)
#
# **Question.** The advantage is one number per sequence, `advantages  # (N,)`; the ratio is one per token,
# `ratio  # (N, T)`. What does `ratio * advantages` compute?
#
# **Equation.** The loss needs $A_i$ on every token of sequence $i$: `advantages[:, None]`, shape (N, 1),
# broadcast along $T$. PyTorch aligns shapes from the right, so a bare (N,) is read as (1, N) and broadcast
# along the *rows*: token $t$ of every sequence gets $A_t$, the advantage of sequence $t$. With $N \ne T$ that
# raises a shape error; with $N = T$ it runs, silently.
#
# **Tiny input.** One group of 4 sequences of 4 tokens ($N = T = 4$), rewards $(1, 0, 0, 0)$, ratio 1. The
# buggy loss is the fixed one with `.unsqueeze(1)` dropped:

# %%
from grpo_fixed import masked_mean  # noqa: E402  (inside a swapped copy of grpo_fixed, the copy's own)


def grpo_loss_misbroadcast(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):
    """grpo_fixed.grpo_loss with the per-sequence advantage (N,) left unsqueezed: it broadcasts along T."""
    ratio = torch.exp(logprobs - old_logprobs.detach())  # (N, T)
    adv = advantages.detach()  # (N,), read as (1, N): token t gets A_t  (the fix: advantages.detach().unsqueeze(1))
    return -masked_mean(torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv), mask)


N = T = 4
adv = grpo_fixed.group_advantage([1.0, 0.0, 0.0, 0.0]).float()  # (N,)
full = torch.ones(N, T, dtype=torch.bool)  # (N, T)
push, loss_value = {}, {}
for label, loss_fn in (("fixed", grpo_fixed.grpo_loss), ("mis-broadcast", grpo_loss_misbroadcast)):
    logp = torch.zeros(N, T, requires_grad=True)  # (N, T), ratio 1
    loss = loss_fn(logp, torch.zeros(N, T), adv, full)
    loss.backward()
    push[label], loss_value[label] = -logp.grad, loss.item()  # push: how hard each token's log-prob is raised
    print(f"{label:13s} loss {loss.item() + 0.0:+.4f}   push per sequence {[f'{x:+.4f}' for x in push[label].sum(1)]}")
print("advantages   ", [f"{a:+.4f}" for a in adv.tolist()])
assert loss_value["fixed"] == loss_value["mis-broadcast"] == 0.0  # the loss value cannot tell them apart
assert torch.allclose(push["fixed"], adv[:, None].expand(N, T) / (N * T))  # row i: A_i / n
assert torch.allclose(push["mis-broadcast"], adv[None, :].expand(N, T) / (N * T))  # column t: A_t / n
assert torch.allclose(push["mis-broadcast"].sum(1), torch.zeros(N), atol=1e-7)  # no sequence is preferred
try:
    grpo_loss_misbroadcast(torch.zeros(3, T), torch.zeros(3, T), adv[:3], torch.ones(3, T, dtype=torch.bool))
except RuntimeError as error:
    print("N = 3, T = 4:", str(error).splitlines()[0])

# %%
fig, axes = plt.subplots(1, 2, figsize=(7, 2.8), layout="constrained", sharey=True)
for ax, (label, grad), color in zip(axes, push.items(), (FIXED, BUGGY), strict=True):
    ax.imshow(grad, cmap="coolwarm", vmin=-0.12, vmax=0.12)
    for i, row in enumerate(grad.tolist()):
        for t, value in enumerate(row):
            ax.text(t, i, f"{value:+.2f}", ha="center", va="center", fontsize="small")
    ax.set_title(label, color=color)
    ax.set_xlabel("token t")
axes[0].set_yticks(range(N), [f"seq {i}: r={r:.0f}" for i, r in enumerate([1.0, 0.0, 0.0, 0.0])])
fig.suptitle("push on each token's log-prob, -d loss / d logp (red: raised)")
plt.show()

# %% [markdown]
# The loss value is the same (0 for both: a centred group at ratio 1), so a loss curve cannot see it. The
# gradient can: the fixed loss raises every token of the rewarded sequence 0 and lowers the others; the
# mis-broadcast one raises token 0 of *every* sequence and lowers tokens 1 to 3, whatever each sequence earned.
# Summed over a full-length sequence the push is exactly 0 ($\sum_t A_t = 0$ for a centred group): the reward no
# longer says which sequence was good.
#
# Does any health check notice? Three iterations of the trainer with the loss swapped in, at a size where every
# minibatch holds $N = 5$ sequences of $T = 5$ tokens (5 prompts x 2 samples, 2 minibatches; $T$ is
# `max_completion_length`):

# %%
MISBROADCAST = fixed_with("misbroadcast", grpo_loss=grpo_loss_misbroadcast)
history_mb = MISBROADCAST.train(seed=0, steps=3, prompts_per_batch=5, group_size=2)
print("health checks that fail per iteration:", [s["health"] for s in history_mb])
assert all(s["health"] == [] for s in history_mb) and not grpo_fixed.preflight(MISBROADCAST)


# %%
def broadcast_probe(loss_fn, n: int = 4) -> bool:
    """N == T == n, only sequence 0 has a non-zero advantage: only row 0 of the gradient may be non-zero."""
    logp = torch.zeros(n, n, requires_grad=True)  # (N, T)
    loss_fn(logp, torch.zeros(n, n), torch.eye(n)[0], torch.ones(n, n, dtype=torch.bool)).backward()
    return bool((logp.grad[1:] == 0).all() and (logp.grad[0] != 0).all())


probe = {label: broadcast_probe(fn) for label, fn in (("fixed", grpo_fixed.grpo_loss),
                                                         ("mis-broadcast", grpo_loss_misbroadcast))}
print("broadcast probe passes:", probe)
assert probe == {"fixed": True, "mis-broadcast": False}

# %% [markdown]
# **Symptom.** A shape error whenever $N \ne T$; when $N = T$ (a minibatch whose size equals the completion
# length, easy to hit in a small test or with padding to a fixed length), nothing: same loss value, no health
# check, no preflight probe fires, the policy still moves, but the reward no longer steers it (the gradient
# above). **The statistic that catches it:** none of `grpo_support.STATS` (the clip fractions are computed with
# the correct broadcast in `inner_step_record`); a probe does: with $N = T$ and one non-zero advantage, only
# that sequence's row of the gradient may be non-zero (`broadcast_probe` above). **Fix:**
# `advantages.unsqueeze(1)  # (N, 1)`, and the shape in the name.
#
# > **You should know.** Per-sequence quantities broadcast over tokens with an explicit trailing axis,
# > `A[:, None]`. Test every broadcast with $N \ne T$ (a shape error is a gift) *and* with $N = T$ and an input
# > whose rows differ.
#
# <details><summary>Why is the loss value identical although the gradient is wrong?</summary>
#
# At ratio 1 both losses are $-\frac1n\sum_{i,t} w_{it}$, a sum over the same $N \times T$ grid of the same
# multiset of numbers: the fixed one puts $A_i$ on row $i$, the buggy one puts $A_t$ on column $t$, the
# transpose. A sum cannot see a transposition; its gradient with respect to each entry can.
# </details>

# %% [markdown]
# ## 15. A reward that leaks gradient
# (A bug from another report of this round.)
#
# **Question.** The reward is computed by a differentiable function of the policy's outputs (a reward model fed the
# policy's probabilities, a confidence bonus) and the advantages are not detached. What is the gradient of the loss?
#
# **Equation.** At ratio 1, with $n$ unmasked tokens and $T_i$ tokens in sequence $i$,
# $$\nabla_\theta L = \underbrace{-\frac1n\sum_i A_i \sum_t \nabla_\theta\log\pi_\theta(o_{it})}_{\text{policy
# gradient}} \;\underbrace{-\;\frac1n\sum_i T_i\,\nabla_\theta A_i}_{\text{leak}}.$$
# The leak is not a policy gradient: it moves $\theta$ to raise the advantages themselves through the reward
# function. With group-normalised advantages $\sum_i A_i = 0$ for every $\theta$, so $\sum_i\nabla A_i = 0$:
# **with equal lengths the leak cancels exactly at ratio 1**, and a test with equal lengths misses it. With
# unequal lengths, or at ratio $\ne 1$ (after the first inner step), it does not cancel.
#
# **Tiny input.** A one-state policy over 3 tokens, $\pi = \mathrm{softmax}(\theta)$, $\theta = (0.5, 0, -0.5)$;
# 4 sequences of up to 3 tokens; the reward of a sequence is the mean probability of its own tokens (it depends on
# $\theta$). Three cases: equal lengths at ratio 1, unequal lengths (3, 3, 2, 1) at ratio 1, equal lengths with
# $\pi_{\text{old}}$ a step away (ratio $\ne 1$):

# %%
tokens = torch.tensor([[0, 1, 2], [1, 1, 0], [2, 0, 0], [0, 2, 1]])  # (N, T)
theta_0 = torch.tensor([0.5, 0.0, -0.5])  # (V,)


def leaky_batch(theta, lengths):
    """Token log-probs (N, T), mask (N, T), and advantages (N,) of a reward that depends on theta."""
    mask = torch.arange(tokens.shape[1]) < torch.tensor(lengths)[:, None]  # (N, T)
    logprobs = torch.log_softmax(theta, -1)[tokens]  # (N, T)
    reward = torch.where(mask, logprobs.exp(), 0.0).sum(1) / mask.sum(1)  # (N,): differentiable in theta
    centred = reward - reward.mean()
    return logprobs, mask, centred / (centred.pow(2).mean().sqrt() + EPS)  # (N,), NOT detached


def grpo_loss_leaky(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):
    """grpo_fixed.grpo_loss without its .detach() calls: the advantages' gradient reaches the loss."""
    ratio = torch.exp(logprobs - old_logprobs)  # (N, T)
    adv = advantages.unsqueeze(1)  # (N, 1), NOT detached  (the fix: advantages.detach().unsqueeze(1))
    return -masked_mean(torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv), mask)


def gradients(lengths, old_shift=0.0):
    """d loss / d theta with the advantages detached (grpo_fixed.grpo_loss) and leaking (grpo_loss_leaky), their
    difference (the leak), and at ratio 1 the leak by hand. old_shift moves pi_old's log-prob of token 0."""
    out = {}
    for label, loss_fn in (("detached", grpo_fixed.grpo_loss), ("leaky", grpo_loss_leaky)):
        theta = theta_0.clone().requires_grad_(True)
        logprobs, mask, adv = leaky_batch(theta, lengths)
        loss_fn(logprobs, (logprobs + old_shift * (tokens == 0)).detach(), adv, mask).backward()
        out[label] = theta.grad
    out["leak"] = out["leaky"] - out["detached"]
    if old_shift == 0:
        theta = theta_0.clone().requires_grad_(True)
        _, mask, adv = leaky_batch(theta, lengths)
        (-(mask.sum(1) * adv).sum() / mask.sum()).backward()  # -(1/n) sum_i T_i A_i: its gradient is the leak
        out["leak by hand"] = theta.grad
    return out


print(f"advantages require grad: {leaky_batch(theta_0.clone().requires_grad_(True), [3] * 4)[2].requires_grad}")
cases = {"equal lengths, ratio 1": gradients([3, 3, 3, 3]), "lengths 3,3,2,1, ratio 1": gradients([3, 3, 2, 1]),
         "equal lengths, ratio != 1": gradients([3, 3, 3, 3], old_shift=0.3)}
for case, g in cases.items():
    print(f"{case}:  |leak| / |policy gradient| = {g['leak'].norm() / g['detached'].norm():.3f}")
    for key in ("detached", "leaky", "leak", "leak by hand"):
        if key in g:
            print(f"    {key:12s} {[f'{x:+.4f}' for x in g[key].tolist()]}")
equal, unequal, moved = cases.values()
assert equal["leak"].abs().max() < 1e-6 and equal["leak by hand"].abs().max() < 1e-6  # cancels exactly (rounding)
assert torch.allclose(unequal["leak"], unequal["leak by hand"], atol=1e-5)  # the equation's leak term
assert unequal["leak"].norm() > unequal["detached"].norm()  # as large as the policy gradient
assert moved["leak"].norm() > 0.1 * moved["detached"].norm()  # after a step, equal lengths do not cancel it

# %%
fig, axes = plt.subplots(1, 3, figsize=(10, 2.6), layout="constrained", sharey=True)
for ax, (case, g) in zip(axes, cases.items(), strict=True):
    for j, (label, color) in enumerate((("detached", FIXED), ("leaky", BUGGY))):
        ax.bar([v + 0.38 * j for v in range(3)], g[label], width=0.38, color=color, label=label)
    ax.axhline(0, color=REFERENCE, lw=0.8)
    ax.set_xticks([v + 0.19 for v in range(3)], [f"theta_{v}" for v in range(3)])
    ax.set_title(case, fontsize="small")
axes[0].set_ylabel("d loss / d theta")
axes[0].legend(fontsize="small")
plt.show()

# %% [markdown]
# With equal lengths at ratio 1 the two gradients agree to float rounding, exactly as the equation says; with
# unequal lengths the leak is as large as the policy gradient itself (the ratio printed above) and turns it; after
# one step (ratio $\ne 1$) it is there even with equal lengths.
#
# **Symptom.** The policy optimises the reward function through its gradient (raising the reward model's score
# directly, weighted by sequence length) on top of the policy gradient; nothing in the training statistics measures
# it. **The statistic that catches it:** `advantages.requires_grad` (it must be `False` where the loss is computed;
# printed above), or the gradient at ratio 1 compared with the score-function gradient
# $-\frac1n\sum_i A_i\sum_t\nabla\log\pi(o_{it})$ on a tiny input *with unequal lengths*. **Fix:** compute rewards and
# advantages without gradient. The twins do both: `rollout` runs under `@torch.no_grad()`, and `grpo_loss`
# detaches `advantages` and `old_logprobs` once more.
#
# > **You should know.** In a policy-gradient loss only $\log\pi_\theta$ carries gradient; rewards, advantages and
# > $\log\pi_{\text{old}}$ are data. Detach them where they are made, assert it where they are used.
#
# <details><summary>If the reward model is differentiable, why not use its gradient? It seems like more
# information.</summary>
#
# When a reward really depends on $\theta$ (an entropy bonus, say), the gradient of $\mathbb{E}_\pi[r(o,\theta)]$ is
# $\mathbb{E}[r\,\nabla\log\pi(o)] + \mathbb{E}[\nabla_\theta r(o,\theta)]$, and the second term belongs there, as the
# gradient of the mean reward. The leak is something else: the gradient of $\frac1n\sum_i T_i A_i$, through the
# group normalisation (which makes it vanish for equal lengths and divides it by the group's std) and weighted by
# length. If a pathwise term is wanted, add it as its own, explicit loss term. A reward model is a judge, not part
# of the objective: differentiating through it trains the policy to move the judge's score, not to write better
# samples.
# </details>

# %% [markdown]
# ## 16. Self-check
# 1. A colleague says "the sampler is fine, temperature sweeps just don't change anything on this task". What
#    do you test, with which input?
# 2. Your rewards are binary and the policy is getting good. Why might training *slow down* with B2 but not
#    with the fix?
# 3. `ratio_last_maxdev` is 0.0000 for the whole run. Name the bug and the one-line fix.
# 4. Why is B4 invisible in a unit test that only uses $A = 1$?
# 5. Your padded batch gives loss NaN but every real token's log-prob is finite. What do you look at?
# 6. Why does `logprob_gap` catch both B6 and B10, while `ratio_first_maxdev` catches neither?
# 7. Why can't a sign check ($\mathrm{KL} \ge 0$) catch B8?
# 8. Your reshape tests pass with B = 2, G = 4 and with B = G = 4, and the centring check never fires. Is the
#    grouping right?
# 9. Your loss runs with a minibatch of 4 sequences of 4 tokens but raises a shape error with 3. What is wrong,
#    and why is the run with 4 not fine?
# 10. Your advantages carry a `grad_fn`, yet a unit test comparing the gradient with the policy-gradient formula
#     passes. What was the test's input missing?
#
# <details><summary>Answers</summary>
#
# 1. Sampling frequencies of 20000 draws from 5 logits against `softmax(logits / T)` at two temperatures
#    (notebook 01 §2): raw-logit weights are invariant to $T$ and never draw the arg-min token.
# 2. Constant groups (all 0 or all 1) become common as the policy improves; without $\epsilon$ each gives NaN
#    advantages, the minibatch loss is NaN and its step is skipped (`nonfinite_steps`).
# 3. B3: old log-probs recomputed inside the inner loop. Use the log-probs cached at rollout,
#    `old_logprobs = batch["old_logprobs"][idx]`.
# 4. With $A = 1$, $\mathrm{clip}(\rho A) = \mathrm{clip}(\rho) A$; test $A = 2$ and $A = -1$ (notebook 01 §5).
# 5. The masked positions: `values * mask` turns a masked $-\infty$ or NaN into NaN; select with `torch.where`
#    (notebook 01 §6). And check for a fully masked row or minibatch (0/0).
# 6. Both make the training log-prob differ from the sampler's; the first-step ratio compares two training
#    log-probs computed by the same wrong function, so it stays 1.
# 7. Both the correct and the reversed k3 are of the form $e^x - x - 1 \ge 0$; only an exact expectation on a
#    tiny distribution tells them apart (notebook 01 §9).
# 8. Not necessarily: with $B$ dividing $G$ a `view(G, B)` groups slices of one prompt, so every group stays
#    centred (and at $B = G$ it is even correct). Test with a $B$ that does not divide $G$ (e.g. B = 2, G = 3),
#    or compare the values with a hand calculation (notebook 01 §10).
# 9. A per-sequence tensor (N,) broadcast against (N, T) without `[:, None]`: with $N = T$ it runs and gives
#    token $t$ of every sequence the advantage of sequence $t$ (notebook 01 §14).
# 10. Unequal sequence lengths (or a ratio away from 1): with equal lengths and centred advantages the leaked
#     term $-\frac1n\sum_i T_i\nabla A_i$ is exactly 0 (notebook 01 §15).
# </details>
#
# **Next: notebook 08**, *Find the bugs, part 2: the LM plumbing (B12-B17)*. The buggy twin carries six more bugs,
# in the LM plumbing around these functions (text to tensors and back, and where the reference comes from): the
# training forward without position ids (B12), the sampler without the attention mask (B13), a completion mask
# that stops before EOS (B14), prompts tiled instead of repeated (B15), the live policy as the reference (B16),
# and reward text read past EOS (B17). Same method, with tiny inputs of its own.
