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
# # 03 — Catch it early: assertions and logging for a GRPO trainer
#
# **The interview question** (follow-up 3 of the debugging round): *"Your GRPO trainer runs without an
# exception and learns poorly. What would you assert and log so that the next broken run fails loudly at
# iteration 0, not quietly after a day of compute?"*
#
# After this notebook you can say, for each of a dozen logged statistics, **which invariant it checks,
# which threshold you would use and why, and which bug it catches**; and why some bugs can only be caught
# by probing a building block with a tiny input *before* training (a "preflight"), never by a training
# statistic.
#
# Everything here goes through one small reusable object, `workbook.monitor.HealthMonitor`. It does not
# redefine a single check: it runs `grpo_fixed.HEALTH_CHECKS` (plus three monitor-only checks for ranges
# that `grpo_fixed.DIAGNOSTICS` documents but does not assert) and `grpo_fixed.preflight`, on any trainer
# that calls `on_iteration(stats)`: either twin, a hybrid, or your own.

# %%
import logging
import math
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

import grpo_buggy
import grpo_fixed
import workbook  # noqa: F401  (one torch thread)
from workbook.catalog import BUGS, hybrid
from workbook.monitor import (
    CHECK_INFO,
    HEALTHY_STATS,
    PROBE_INFO,
    HealthCheckFailed,
    HealthMonitor,
    check_table,
    markdown_table,
    plot_dashboard,
    plot_failures,
)
from workbook.plots import BUGGY, FIXED, buggy_vs_fixed
from workbook.tasks import SparseMatchTask
from workbook.widgets import live_figure, set_value, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids log their own health warnings: the monitor reports
started, started_cpu = time.perf_counter(), time.process_time()

RUN = dict(steps=30, prompts_per_batch=6)  # the two twins: B = 6 prompts x G = 8 samples (why 6: section 6)
SHORT = dict(steps=6, prompts_per_batch=6)  # each single-bug hybrid

# %% [markdown]
# ## 1. The invariants behind the checks
#
# A good health check asserts something that is **exactly true** in a correct trainer, so the threshold
# can sit in a gap of several orders of magnitude between "float32 rounding" and "broken". The key
# equations:
#
# | invariant (why it holds) | logged as |
# |---|---|
# | $p = \mathrm{softmax}(z)$: $\sum_v p_v = 1$, every $p_v > 0$ (the sampler draws from a distribution) | preflight |
# | $\sum_{i=1}^{G} A_i = 0$ per prompt ($A_i = (r_i - \bar r)/(\sigma + \epsilon)$ is centred) | `adv_group_mean` |
# | $\log\pi_\theta(o_t) = \log\pi_{\text{sampler}}(o_t)$ before any update (same weights and tokens) | `logprob_gap` |
# | $\rho_t = e^{\log\pi_\theta - \log\pi_{\text{old}}} = 1$ at inner step 1 (no update yet) | `ratio_first_maxdev` |
# | $\rho_t \ne 1$ at the last inner step (the optimizer has moved $\theta$) | `ratio_last_maxdev` |
# | $k_3 = e^{x} - x - 1 \ge 0$ for $x = \log\pi_{\text{ref}} - \log\pi$ (since $e^x \ge 1 + x$) | `kl` |
# | $H(\pi) > 0$ until solved (a deterministic policy makes every group constant) | `entropy` |
#
# Some checks are not invariants but **ranges** (clip fraction, zero-variance groups, gradient norm): they
# flag a regime in which training cannot work, whatever the code. The per-iteration checks, each
# threshold and its reason (this table is rendered from `workbook.monitor.CHECK_INFO`, keyed by the names
# in `grpo_fixed.HEALTH_CHECKS`):

# %%
display(Markdown(check_table("iteration")))

# %% [markdown]
# And the preflight probes: `grpo_fixed.preflight(module)` calls the module's own building blocks on
# inputs small enough to check by hand.

# %%
display(Markdown(check_table("preflight")))

# %% [markdown]
# Two thresholds deserve a number rather than a word. The sampler probe draws 20000 tokens, so a frequency
# has standard deviation at most $\sqrt{p(1-p)/n}$; the KL probe averages 20000 values of $k_3$, whose
# spread is computed here exactly (three tokens, so no sampling needed):

# %%
logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0])
p = torch.softmax(logits, -1)  # (5,)
print("softmax       :", " ".join(f"{v:.4f}" for v in p))
print(f"max freq std  : {(p * (1 - p) / 20000).sqrt().max():.4f}   threshold 0.02")
pi = torch.full((3,), -math.log(3))  # log pi, uniform (3,)
ref = torch.log_softmax(torch.tensor([2.0, 0.0, -2.0]), -1)  # log pi_ref (3,)
x = ref - pi  # (3,) log-ratio per token
k3 = x.exp() - x - 1
k3_reversed = (-x).exp() + x - 1  # B8: the log-ratio with its sign flipped
exact_kl = (pi.exp() * (pi - ref)).sum()
std_of_mean = (k3.pow(2).mean() - k3.mean() ** 2).sqrt() / math.sqrt(20000)
print(f"exact KL      : {exact_kl:.4f}   E[k3] = {k3.mean():.4f}   E[k3 reversed] = {k3_reversed.mean():.4f}")
print(f"std of mean k3: {std_of_mean:.4f}   threshold 0.01 = {0.01 / std_of_mean:.1f} std")
for threshold in (0.01, 0.05):  # normal approximation of P(|mean - KL| > threshold) for a correct estimator
    print(f"false alarms at {threshold}: {math.erfc(threshold / std_of_mean / math.sqrt(2)):.1e}")

# %% [markdown]
# The sampler threshold sits at more than 5 standard deviations. The KL threshold does **not**: it is
# about 2 standard deviations, so a correct estimator fails the probe for about 6% of seeds (the probe is
# seeded, so each run is deterministic, and seed 0 passes). The gap to the bug is huge (the reversed
# estimator averages about 6.03 against 1.04), so a threshold of 0.05 (about 9 standard deviations)
# would make false alarms negligible and still catch B8 by a factor of 100.

# %% [markdown]
# ## 2. Each check on a hand-written stats dict
#
# The smallest test of a check is a stats dict you can read: `HEALTHY_STATS` has every `DIAGNOSTICS` key
# at a value typical of a healthy run. The monitor must stay quiet on it; changing one stat at a time
# (the `trips` of each check's `CheckInfo`) must fail exactly that check. This also proves that the
# thresholds in the table above are the ones in the code.

# %%
print("healthy dict  ->", HealthMonitor()(HEALTHY_STATS) or "quiet")
for name, info in CHECK_INFO.items():
    change = ", ".join(f"{k}={v}" for k, v in info.trips.items())
    failed = HealthMonitor()({**HEALTHY_STATS, **info.trips})
    verdict = "ok " if failed == [name] else "BAD"
    print(f"{verdict} {change:<24s} -> {', '.join(failed)}")

# %% [markdown]
# ## 3. Your own trainer: any dict with these keys
#
# The monitor is a plain callable, so it plugs into any loop that produces a dict per iteration. Tensors
# are fine (0-d tensors become numbers), and a missing stat skips only the checks that need it, with a
# clear `SKIP` line instead of a `KeyError`:

# %%
my_monitor = HealthMonitor()
my_stats = {"reward": torch.tensor(0.4), "kl": torch.tensor(-0.3), "loss": float("nan"), "entropy": 1.1}
print("failed:", my_monitor(my_stats))
print(my_monitor.report())

# %% [markdown]
# Note that `loss finite` still failed without `nonfinite_steps`: the check short-circuits on the NaN
# loss before it reads the missing key. A check is only skipped when it actually needs the stat.

# %% [markdown]
# ## 4. Preflight: probing the building blocks before iteration 0
#
# `monitor.preflight(module)` runs `grpo_fixed.preflight` on that module and records the failures at
# iteration $-1$. On both twins:

# %%
pre_buggy, pre_fixed = HealthMonitor(), HealthMonitor()
pre_buggy.preflight(grpo_buggy)
pre_fixed.preflight(grpo_fixed)
rows = [[name, "FAIL" if name in pre_buggy.preflight_failures else "pass",
         "FAIL" if name in pre_fixed.preflight_failures else "pass", info.catches]
        for name, info in PROBE_INFO.items()]
display(Markdown(markdown_table(["probe", "grpo_buggy", "grpo_fixed", "catches"], rows)))

# %% [markdown]
# ## 5. The buggy twin under the monitor
#
# `watch` = preflight, then `train(on_iteration=monitor)`. `grpo_buggy.train` has no checks of its own:
# everything below comes from the monitor.

# %%
mon_buggy = HealthMonitor()
hist_buggy = mon_buggy.watch(grpo_buggy, **RUN)
print(mon_buggy.report())

# %% [markdown]
# Six per-iteration checks fire at iteration 0 (seven probes fired before it). Several bugs hide behind
# each other here (NaN advantages make the loss NaN, which makes the gradient NaN), which is why the next
# section switches the bugs on one at a time.
#
# ## 6. One bug at a time
#
# `hybrid("Bn")` is the fixed twin with only bug Bn switched back on. Each runs for 6 iterations of
# 6 prompts x 8 samples under a fresh monitor:

# %%
hybrid_monitors = {}
for bug in BUGS:
    hybrid_monitors[bug.id] = HealthMonitor()
    hybrid_monitors[bug.id].watch(hybrid(bug.id), **SHORT)


def flag_row(bug, mon):
    """bug | preflight probes that fail | first per-iteration flag | first flag overall"""
    first = mon.first_iteration_failure()
    during = f"{', '.join(first[1])} (iteration {first[0]})" if first else f"none in {SHORT['steps']} iterations"
    overall = "preflight" if mon.preflight_failures else (f"iteration {first[0]}" if first else "never")
    return [bug.id, bug.title, ", ".join(mon.preflight_failures) or "—", during, overall]


table = [flag_row(bug, hybrid_monitors[bug.id]) for bug in BUGS]
display(Markdown(markdown_table(["bug", "what", "preflight probe", "per-iteration check", "first flag"], table)))

# %%
caught = sum(row[-1] != "never" for row in table)
by_preflight = [row[0] for row in table if row[-1] == "preflight"]
by_iteration = [row[0] for row in table if row[-1].startswith("iteration")]
print(f"caught: {caught}/{len(table)}")
print(f"first flagged by preflight    : {' '.join(by_preflight)}")
print(f"first flagged at iteration 0+ : {' '.join(by_iteration)}")
b1, b2 = hybrid_monitors["B1"].history[0], hybrid_monitors["B2"].history[0]
print(f"B2 at iteration 0: zero_var_groups = {b2['zero_var_groups']:.3f}, adv_nonfinite = {b2['adv_nonfinite']}")
print(f"B1 at iteration 0: clip_frac_pos = {b1['clip_frac_pos']:.3f}, clip_frac_neg = {b1['clip_frac_neg']:.3f}")

# %% [markdown]
# Every bug is flagged before or at iteration 0, and the two halves split cleanly:
#
# * **Bugs in a building block with a closed-form answer** (sampler, advantage of a constant group,
#   loss gradient at $\rho = 1$, all-masked loss, log-prob of a large logit, KL estimator, gradient
#   clipping) are caught by the preflight. B4, B5, B7, B8 and B11 trip no training statistic at all
#   within 6 iterations. B2 does, but only because one of the six groups happened to be constant at
#   iteration 0 (`zero_var_groups` = 1/6). B1 trips `clip fraction moderate`: a symptom, not a diagnosis.
#   B1 is the instructive one: `generate` records $\log\mathrm{softmax}(z)$ of the token it drew, not
#   the probability the buggy sampler actually used, so `logprob_gap` cannot see it. A statistic only
#   catches what it measures.
# * **Bugs in how the pieces are wired** (old log-probs recomputed, a shifted or untempered training
#   log-prob, groups reshaped along the wrong axis) pass every probe: each piece is correct on its own.
#   Only statistics of a real batch see them, and they do at iteration 0.
#
# ### 6a. Why B = 6 prompts, not 8: B9 hides when B divides G
#
# B9 reshapes the $B \cdot G$ rewards as `view(G, B)` instead of `view(B, G)`. With $B = G$ the two views
# are identical; with $B$ dividing $G$ each wrong "group" is a slice of one true group, so each true group
# is still centred. Only when $B$ does not divide $G$ do wrong groups straddle two prompts. A tiny input
# with $G = 4$ makes this visible: per-true-group mean of the advantages, buggy vs fixed.

# %%
G = 4
for B in (4, 2, 3):
    rewards = torch.arange(B * G, dtype=torch.float32) % 5 / 4  # (B*G,) a fixed, non-constant pattern
    buggy = grpo_buggy.batch_advantages(rewards, G).view(B, G)  # (B, G) regrouped the true way
    fixed = grpo_fixed.batch_advantages(rewards, G).view(B, G)  # (B, G)
    print(f"B={B} G={G}  per-group mean of A  buggy: "
          + " ".join(f"{m:+.3f}" for m in buggy.mean(1)) + "   fixed: " + " ".join(f"{m:+.3f}" for m in fixed.mean(1)))

# %% [markdown]
# So a test run with `prompts_per_batch=8` (and the default `group_size=8`) would report B9 as healthy,
# because it *is* a no-op there. This notebook uses $B = 6$, $G = 8$.
#
# ### 6b. How early B2 shows in training depends on the task
#
# B2 (no $\epsilon$) produces a NaN only in a group whose rewards are all equal, so `advantages finite`
# fires exactly as often as constant groups occur. On `SparseMatchTask` (a binary reward that a random
# policy rarely earns) most groups are constant from the start. Same monitor, three iterations:

# %%
sparse_b2 = HealthMonitor()
sparse_b2.watch(hybrid("B2"), SparseMatchTask(), steps=3, prompts_per_batch=6, preflight=False)
print("B2 on SparseMatchTask:", sparse_b2.first_iteration_failure())
sparse_fixed = HealthMonitor()
sparse_fixed.watch(grpo_fixed, SparseMatchTask(), steps=3, prompts_per_batch=6, preflight=False)
print("fixed on SparseMatchTask:", sparse_fixed.first_iteration_failure())
print("zero_var_groups per iteration:", " ".join(f"{s['zero_var_groups']:.2f}" for s in sparse_fixed.history))

# %% [markdown]
# The fixed twin trips `groups carry signal` on the same task: not a bug, but a run that is starved of
# signal (every member of a constant group gets $A = 0$). That is the kind of warning a range check is for.
#
# ### 6c. Checks that guard against things outside the catalog
#
# `ratio == 1 at the first inner step` catches none of B1..B11 alone (B3 makes the ratio *trivially* 1).
# It exists for the classic interview trace "print the ratio, it is not 1 at step 1, why?": for example
# dropout active in train mode while the old log-probs were cached in eval mode. `clip fraction moderate`
# flags steps too large for the trust region:

# %%
dropout_mon = HealthMonitor()
dropout_mon.watch(grpo_fixed, steps=2, prompts_per_batch=6, dropout=0.1, preflight=False)
print("fixed, dropout=0.1:", dropout_mon.first_iteration_failure(),
      f"ratio_first_maxdev={dropout_mon.history[0]['ratio_first_maxdev']:.3f}")
lr_mon = HealthMonitor()
lr_mon.watch(grpo_fixed, steps=2, prompts_per_batch=6, lr=0.05, preflight=False)
lr_first = lr_mon.history[0]
print("fixed, lr=0.05:    ", lr_mon.first_iteration_failure(),
      f"clip fractions +{lr_first['clip_frac_pos']:.3f} -{lr_first['clip_frac_neg']:.3f}")

# %% [markdown]
# ## 7. The fixed twin stays quiet
#
# Same run length and batch as the buggy twin. `grpo_fixed.train` also runs `check_health` itself and
# stores the result in `stats["health"]`; the monitor agrees with it and adds its three range checks.

# %%
mon_fixed = HealthMonitor()
hist_fixed = mon_fixed.watch(grpo_fixed, **RUN)
print(mon_fixed.report())
print("grpo_fixed's own check_health failures:", sum(len(s["health"]) for s in hist_fixed))
print(f"final reward (mean of last 5): buggy {sum(s['reward'] for s in hist_buggy[-5:]) / 5:.3f}   "
      f"fixed {sum(s['reward'] for s in hist_fixed[-5:]) / 5:.3f}")

# %% [markdown]
# ## 8. `strict=True`: stop at the first failure
#
# In a real run you want the crash, not the log line. A strict monitor raises `HealthCheckFailed` (an
# `AssertionError`) from inside `on_iteration`, which stops `train` there:

# %%
strict = HealthMonitor(strict=True)
try:
    strict.watch(grpo_buggy, **RUN)
except HealthCheckFailed as err:
    print(f"stopped at iteration {err.iteration}: {len(err.failures)} probes failed")
    print(str(err)[:100] + "...")
strict = HealthMonitor(strict=True)
try:
    strict.watch(grpo_buggy, **RUN, preflight=False)
except HealthCheckFailed as err:
    print(f"without preflight: stopped at iteration {err.iteration} after {len(strict.history)} iteration(s)")

# %% [markdown]
# ## 9. Dashboard: the logged statistics of both twins
#
# One panel per statistic, buggy in red, fixed in blue; the green band is the range the corresponding
# check accepts. Non-finite values cannot be drawn as a line: they are the `x` marks on the top edge of a
# panel. Panels with tiny healthy values use a symlog axis (linear below $10^{-8}$).

# %%
fig, nonfinite = plot_dashboard({"grpo_buggy": hist_buggy, "grpo_fixed": hist_fixed},
                                {"grpo_buggy": BUGGY, "grpo_fixed": FIXED})
plt.show()
for key in ("loss", "grad_norm", "kl"):
    print(f"non-finite {key:<9s}: buggy {nonfinite[key]['grpo_buggy']:2d}/{len(hist_buggy)}   "
          f"fixed {nonfinite[key]['grpo_fixed']:2d}/{len(hist_fixed)}")
print(f"logprob_gap over the run: buggy min {min(s['logprob_gap'] for s in hist_buggy):.2e}   "
      f"fixed max {max(s['logprob_gap'] for s in hist_fixed):.2e}")
for key in ("reward", "kl", "ratio_last_maxdev"):
    print(f"last iteration {key:<17s}: buggy {hist_buggy[-1][key]:.2e}   fixed {hist_fixed[-1][key]:.2e}")
print(f"max clip fraction, whole run: buggy {max(max(s['clip_frac_pos'], s['clip_frac_neg']) for s in hist_buggy):.3f}")

# %% [markdown]
# What to read off it:
#
# * `logprob_gap` of the fixed twin is exactly 0 over the whole run (printed `0.00e+00`: the sampler and
#   the training pass agree to the last bit here; two different code paths may differ by float32 rounding,
#   of order $10^{-7}$); the buggy twin's never drops below 0.17. The $10^{-4}$ threshold sits more than
#   three orders of magnitude below the buggy twin's gap and far above rounding.
# * `ratio_last_maxdev` is exactly 0 for the buggy twin (B3): the ratio never moves, the clip never
#   engages, and `clip_frac_pos`/`clip_frac_neg` are flat at 0, which looks "healthy" to a check that
#   only asks for *less than* 0.3. A zero clip fraction over a whole run is itself suspicious.
# * The buggy twin's `kl` climbs to about 6 while its reward stays near 0.1; the fixed twin ends near
#   1 with reward near 0.6. A KL that runs away while the reward does not move is a warning on its own
#   (here B8 and B10 both distort it).
#
# ## 10. Which checks fire, iteration by iteration
#
# Drag the slider: the left map is the buggy twin, the right the fixed twin; rows are checks, columns
# iterations up to the slider, a coloured cell is a failure. The failures were recorded during the runs
# above, so a redraw only draws.

# %%
LAST = len(hist_buggy) - 1


def draw_failures(iteration=LAST):
    fig, (ax_b, ax_f) = buggy_vs_fixed("failed health checks per iteration", figsize=(11.0, 3.8), sharey=False)
    failed_buggy = plot_failures(ax_b, mon_buggy, iteration, color=BUGGY)
    failed_fixed = plot_failures(ax_f, mon_fixed, iteration, color=FIXED, show_names=False)
    plt.show()
    return failed_buggy, failed_fixed


# %%
# NBVAL_IGNORE_OUTPUT
w = live_figure(draw_failures, height="420px", iteration=slider(LAST, 0, LAST, 1, "iteration", integer=True))
display(w)

# %%
no_nan = next(i for i, failed in enumerate(mon_buggy.failures) if "advantages finite" not in failed)
for it in (0, no_nan):
    failed_buggy, failed_fixed = set_value(w, "iteration", it)  # redraws without displaying (nbval)
    print(f"iteration {it}: buggy {len(failed_buggy)} [{'; '.join(failed_buggy)}]")
    print(f"             fixed {len(failed_fixed)} [{'; '.join(failed_fixed)}]")

# %% [markdown]
# > **You should know**
# >
# > * Assert invariants that are *exactly* true in a correct trainer, so a threshold has orders of
# >   magnitude of room: $\rho = 1$ at the first inner step, $\rho \ne 1$ at the last, $\sum_i A_i = 0$ per
# >   group, training log-prob = sampler log-prob before any update, $k_3 \ge 0$, everything finite.
# > * Log ranges for regimes that cannot learn: fraction of zero-variance groups, clip fraction, entropy,
# >   pre-clip gradient norm.
# > * Probe building blocks with tiny inputs before training (sampler vs softmax, constant group, gradient
# >   at $\rho = 1$, all-masked loss, large logits, KL estimator bias, clipping): bugs with a closed-form
# >   answer are caught there and often by nothing else.
# > * Wiring bugs (B3, B6, B9, B10) pass every probe and fail a statistic at iteration 0.
# > * Choose test shapes that cannot hide a bug: with $B = G$ a transposed reshape is a no-op.
# > * Make it strict in CI and in the first minutes of a run: crash at the first failure.

# %% [markdown]
# ## Self-check questions
#
# 1. The buggy twin's clip fractions are 0 for the whole run. Which check would you add to catch that,
#    and which bug does it point to?
# 2. Why can `logprob_gap` not catch B1, although B1 changes which tokens are drawn?
# 3. With the reversed KL estimator (B8), why does `KL finite and >= 0` still pass?
# 4. A colleague's smoke test uses 8 prompts and 8 samples per prompt, and every check passes. Which bug
#    from the catalog could still be there?
# 5. Your run sets dropout to 0.1 and `ratio == 1 at the first inner step` fires. Is the trainer wrong?
#    What are two fixes?
#
# <details><summary>Answer</summary>
#
# 1. "The ratio moves and the clip sometimes engages": `ratio_last_maxdev > 0` (already a check) and,
#    over a window of iterations, clip fraction > 0 at least once. Both point to B3: old log-probs
#    recomputed from the current policy inside the inner loop make $\rho \equiv 1$.
# 2. `generate` records the log-prob of the drawn token under $\log\mathrm{softmax}(z)$, which is also
#    what training recomputes; the gap compares two correct numbers. The buggy sampler's actual
#    probabilities (min-shifted logits) are never logged. Only a probe that counts sampled frequencies
#    (the preflight) compares against the true distribution.
# 3. $e^{x} - x - 1 \ge 0$ for every real $x$, including $-x$: reversing the log-ratio still gives a
#    non-negative number. It is the wrong *expectation* (about 6.0 instead of 1.04 in the probe above),
#    which only an unbiasedness test sees.
# 4. B9 (groups reshaped along the wrong axis): with $B = G$ `view(G, B)` and `view(B, G)` are the same
#    tensor. Use a batch where $B$ does not divide $G$ (here 6 and 8).
# 5. The trainer is inconsistent, not necessarily wrong: the old log-probs are computed in eval mode
#    (no dropout) and the training ones in train mode. Either turn dropout off for RL fine-tuning (usual
#    for LLMs), or compute the old log-probs with the same mode and dropout mask, so that $\rho = 1$
#    holds at the first step.
#
# </details>

# %%
# NBVAL_IGNORE_OUTPUT
print(f"notebook compute: {time.perf_counter() - started:.1f} s wall, "
      f"{time.process_time() - started_cpu:.1f} s CPU (this kernel) on this machine")
