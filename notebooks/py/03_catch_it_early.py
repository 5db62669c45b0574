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
# **The interview question** (follow-up 3 of SPEC.md): *"Your GRPO trainer runs without an
# exception and learns poorly. What would you assert and log so that the next broken run fails loudly at
# iteration 0, not quietly after a day of compute?"*
#
# After this notebook you can say, for each of a dozen logged statistics, **which invariant it checks,
# which threshold you would use and why, and which bug it catches**; why some bugs can only be caught
# by probing a building block with a tiny input *before* training (a "preflight"), never by a training
# statistic; and why a range that sounds reasonable (a bounded ratio, a KL below $\log V$) can be wrong.
#
# Everything here goes through one small reusable object, `workbook.monitor.HealthMonitor`. It does not
# redefine a single check: it runs `grpo_fixed.HEALTH_CHECKS` (plus three monitor-only checks for
# `grpo_support.STATS` rows that `HEALTH_CHECKS` does not assert) and `grpo_fixed.preflight`, on any trainer
# that calls `on_iteration(stats)`: either twin, a hybrid, or your own. Every range and tolerance printed
# below is read from `grpo_fixed` (a `STATS` row: meaning, `lo`, `hi`, why; or a probe constant such as
# `KL_TOL`); none is written by hand.

# %%
import logging
import math

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

import grpo_buggy
import grpo_fixed
import workbook  # noqa: F401  (one torch thread)
from tinylm import CharTokenizer, TinyLM
from workbook import nb04_stabilisers
from workbook.catalog import BUGS, hybrid
from workbook.monitor import (
    CHECK_INFO,
    HEALTHY_STATS,
    PROBE_INFO,
    STATS,
    HealthCheckFailed,
    HealthMonitor,
    check_table,
    failure_map,
    markdown_table,
    plot_dashboard,
    render_range,
)
from workbook.plots import BUGGY, FIXED, REFERENCE, buggy_vs_fixed
from workbook.progress import progress
from workbook.run_summary import tail_mean
from workbook.tasks import SparseMatchTask
from workbook.widgets import live_plot, probe, slider

logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids log their own health warnings: the monitor reports

RUN = dict(steps=20, prompts_per_batch=6)  # the two twins: B = 6 prompts x G = 8 samples (why 6: notebook 03 §6)
SHORT = dict(steps=6, prompts_per_batch=6)  # each single-bug hybrid

# %%
mon_buggy, mon_fixed = HealthMonitor(), HealthMonitor()  # one monitor per twin: preflight, then every iteration
with progress("watching both twins", total=2) as step:
    step("grpo_buggy")
    hist_buggy = mon_buggy.watch(grpo_buggy, **RUN)
    step("grpo_fixed")
    hist_fixed = mon_fixed.watch(grpo_fixed, **RUN)
LAST = len(hist_buggy) - 1
fig, (ax_b, ax_f) = buggy_vs_fixed("failed health checks per iteration", figsize=(10.6, 3.8), sharey=False)
failure_map(ax_b, mon_buggy, color=BUGGY, animated=False)(LAST)  # static: the whole run at once
failure_map(ax_f, mon_fixed, color=FIXED, show_names=False, animated=False)(LAST)
plt.show()
for name, mon in (("grpo_buggy", mon_buggy), ("grpo_fixed", mon_fixed)):
    print(f"{name}: {len(mon.preflight_failures)} preflight probes fail; checks failing at iteration 0: "
          f"{len(mon.failures[0])}, at every iteration: {len(set.intersection(*map(set, mon.failures)))}")
assert len(mon_buggy.preflight_failures) == 12 and len(mon_buggy.failures[0]) == 8
assert len(set.intersection(*map(set, mon_buggy.failures))) == 7 and mon_fixed.quiet  # from iteration 0 on; never

# %% [markdown]
# **At a glance.** One monitor on each twin (rows: checks; columns: iterations; a coloured cell is a failure): the
# buggy twin fails 12 preflight probes, then 8 checks at iteration 0, 7 of them at every iteration; the fixed twin
# fails none. What each check asserts: notebook 03 §1; which bug each one catches: notebook 03 §6; the run
# iteration by iteration: the slider near the end.

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
# | the $G$ samples of a group share one prompt (the group mean is that prompt's baseline) | `mixed_groups` |
# | the mask is True up to and including the first EOS, False after it | `mask_eos_mismatch` |
# | the reward text is the decode of the masked tokens (nothing after the first EOS) | `text_mismatch` |
# | $\log\pi_{\text{ref}} \ne \log\pi_{\text{old}}$ after the first update (the reference stays frozen) | `ref_gap` |
#
# Some checks are not invariants but **ranges** (clip fraction, zero-variance groups, gradient norm): they
# flag a regime in which training cannot work, whatever the code. The per-iteration checks, each range and
# its reason (rendered by `workbook.monitor.check_table` from `CHECK_INFO`, keyed by the check names, and
# from the `grpo_support.STATS` rows each check reads):

# %%
display(Markdown(check_table("iteration")))

# %% [markdown]
# **Where the numbers of the ranges come from.** The invariant checks need no calibration (0, or float32
# rounding: `1e-4` is far above the fixed twin's `logprob_gap` of a few $10^{-6}$, the rounding between the
# KV-cache sampler and the full training forward). The range checks were calibrated on the fixed twin's
# default run (AdditionTask from its SFT checkpoint, 70 iterations of 16 prompts x 8 samples, one torch
# thread), seeds 0, 1 and 2: per seed the **median** and **max** of the clip fractions, the **95th
# percentile** of `kl`, the **max** of `grad_norm` and the **min/max** of `ratio_last_mean`; each `hi` sits a
# margin above the worst of the three seeds. The `why` column quotes those runs, and for the clip fractions
# and the KL also the values typically reported for GRPO on LMs (no source checked here); the toy's own
# numbers are larger, so its ranges are wider, and notebook 03 §7.1 re-measures part of seed 0's run here.

# %% [markdown]
# And the preflight probes: `grpo_fixed.preflight(module)` calls the module's own building blocks on
# inputs small enough to check by hand (tolerances from `grpo_fixed.SAMPLING_TOL`, `KL_TOL`, `GRAD_TOL`).

# %%
display(Markdown(check_table("preflight")))

# %% [markdown]
# ### 1.1 How many standard deviations is a probe tolerance?
#
# The two statistical probes draw `PROBE_DRAWS` samples. A sampled frequency has standard deviation
# $\sqrt{p(1-p)/n}$; the KL probe averages $n$ values of $k_3$ over tokens drawn from $\pi$, and with
# three tokens the variance of one term is exact (no sampling needed), so the standard deviation of the
# mean is $\sqrt{\mathrm{Var}_\pi[k_3]/n}$. A tolerance has to sit many of those above 0 (no false alarm)
# and far below the bug's error (no miss). The probe's inputs, reproduced:

# %%
n = grpo_fixed.PROBE_DRAWS
logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0])
p = torch.softmax(logits, -1)  # (5,)
freq_std = (p * (1 - p) / n).sqrt().max().item()
print("softmax         :", " ".join(f"{v:.4f}" for v in p))
print(f"max freq std    : {freq_std:.4f}   SAMPLING_TOL {grpo_fixed.SAMPLING_TOL:g} = "
      f"{grpo_fixed.SAMPLING_TOL / freq_std:.1f} std")

pi = torch.full((3,), -math.log(3))  # log pi, uniform (3,)
ref = torch.log_softmax(torch.tensor([2.0, 0.0, -2.0]), -1)  # log pi_ref (3,)
x = ref - pi  # (3,) log-ratio per token
k3 = x.exp() - x - 1  # (3,) one k3 term per token
k3_reversed = (-x).exp() + x - 1  # (3,) B8: the log-ratio with its sign flipped
probs = pi.exp()  # (3,) the tokens are drawn from pi
exact_kl = (probs * (pi - ref)).sum().item()
mean_k3, mean_rev = (probs * k3).sum().item(), (probs * k3_reversed).sum().item()
term_std = ((probs * k3**2).sum() - mean_k3**2).sqrt().item()  # std of one k3 term under pi
mean_std = term_std / math.sqrt(n)  # std of the probe's mean over n draws
kl_tol = grpo_fixed.KL_TOL
print(f"exact KL        : {exact_kl:.4f}   E[k3] = {mean_k3:.4f}   E[k3 reversed] = {mean_rev:.4f}")
print(f"std of one k3   : {term_std:.3f}   std of the mean over {n} draws: {mean_std:.4f}")
print(f"KL_TOL {kl_tol:g} = {kl_tol / mean_std:.1f} std;   B8 is off by {mean_rev - exact_kl:.2f} = "
      f"{(mean_rev - exact_kl) / kl_tol:.0f} x KL_TOL")
for label, tol in (("2 std", 2 * mean_std), ("KL_TOL", kl_tol)):  # normal approx. of P(|mean - KL| > tol)
    print(f"false alarms at {label:<6s} ({tol:.4f}): {math.erfc(tol / mean_std / math.sqrt(2)):.1e}")
assert abs(mean_k3 - exact_kl) < 1e-6  # k3 is unbiased: its expectation is the exact KL
assert grpo_fixed.SAMPLING_TOL / freq_std > 5 and kl_tol / mean_std > 8  # far from sampling noise ...
assert (mean_rev - exact_kl) / kl_tol > 50  # ... and far from B8's bias

# %% [markdown]
# Both tolerances sit far outside the sampling noise: `SAMPLING_TOL` at about 6 standard deviations,
# `KL_TOL` at about 9.5, so a correct sampler or estimator fails for no seed you will ever meet (a
# tolerance of 2 standard deviations would fail a correct estimator for about 5% of seeds). The bugs
# stay far outside the tolerance: the reversed estimator (B8) averages about 6.03 against an exact KL
# of 1.04, an error about 100 times `KL_TOL`.
#
# > **Catalog note (a probe tolerance too tight).** *Symptom*: the KL probe fails on a correct trainer for
# > some seeds only. *Statistic*: the probe's error in units of the standard deviation of the mean (the
# > printout above). *Fix*: put the tolerance at many standard deviations (here `KL_TOL`), which a real bug
# > such as B8 still exceeds by two orders of magnitude.
#
# One more check that the exact standard deviation above is what the probe really sees: 200 probes with
# fresh draws each, through the fixed twin's own `kl_to_reference`:

# %%
g = torch.Generator().manual_seed(0)
estimates = []
for _ in range(200):
    tokens = torch.multinomial(probs, n, replacement=True, generator=g)  # (n,) ~ pi, as in the probe
    mask = torch.ones(1, n, dtype=torch.bool)
    estimates.append(grpo_fixed.kl_to_reference(pi[tokens][None], ref[tokens][None], mask).item())
estimates = torch.tensor(estimates)  # (200,)
print(f"200 probes: mean {estimates.mean():.4f}   std {estimates.std():.4f} (exact {mean_std:.4f})   "
      f"max |error| {(estimates - exact_kl).abs().max():.4f} vs KL_TOL {kl_tol:g}")
assert abs(estimates.std().item() / mean_std - 1) < 0.2 and (estimates - exact_kl).abs().max() < kl_tol

# %% [markdown]
# ## 2. Each check on a stats dict you can read
#
# The smallest test of a check is a stats dict you can read. `HEALTHY_STATS` holds every `STATS` key at a
# value inside its range (`monitor.inside`: the middle of a finite range, one above a lone lower bound):

# %%
rows = [[name, f"`{render_range(name)}`", f"{HEALTHY_STATS[name]:.6g}", STATS[name].meaning] for name in STATS]
display(Markdown(markdown_table(["stat", "healthy range", "value in HEALTHY_STATS", "meaning"], rows)))


# %% [markdown]
# The monitor must stay quiet on it, stay quiet with a stat set **on** a bound of its range, and fail
# exactly the checks that read the stat once it is a hair outside. That proves the ranges in the tables
# above are the ones the code uses. "A hair" is relative (one part in a thousand) or one unit for a
# zero bound:

# %%
def beyond(bound, direction):
    """A value a hair past `bound` in `direction` (+1 above, -1 below): 0.1% of it, or 1 when it is 0."""
    return bound + direction * (abs(bound) * 1e-3 if bound else 1.0)


def outside(name):
    """Values just outside STATS[name]'s range: above a finite hi, below a finite nonzero lo (a stat whose
    lower bound is 0 is a count, fraction or |.|: it cannot go below), and NaN."""
    row = STATS[name]
    above = [beyond(row.hi, +1)] if math.isfinite(row.hi) else []
    below = [beyond(row.lo, -1)] if math.isfinite(row.lo) and row.lo != 0 else []
    return above + below + [math.nan]


print("healthy dict ->", HealthMonitor()(HEALTHY_STATS) or "quiet")
checked = list(dict.fromkeys(s for info in CHECK_INFO.values() for s in (*info.stats, *info.finite)))
for name in checked:
    readers = [check for check, info in CHECK_INFO.items() if name in (*info.stats, *info.finite)]
    bounds = [b for b in (STATS[name].lo, STATS[name].hi) if math.isfinite(b)]
    assert all(HealthMonitor()({**HEALTHY_STATS, name: b}) == [] for b in bounds), name  # on a bound: quiet
    for value in outside(name):
        failed = HealthMonitor()({**HEALTHY_STATS, name: value})
        print(f"{name:<18s} {render_range(name):<17s} = {value:<10.4g} -> {', '.join(failed)}")
        assert failed and set(failed) <= set(readers), (name, value, failed)  # only the checks that read it
        assert math.isnan(value) or failed == [c for c in readers if name in CHECK_INFO[c].stats]

# %% [markdown]
# A NaN `grad_norm` fails only `grad norm finite`: `grad norm bounded` waives a non-finite norm (the check
# that owns it already fired), so one NaN is not reported twice.
#
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
assert my_monitor.failures[0] == ["KL finite and >= 0", "loss finite"] and "loss finite" not in my_monitor.missing

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
         "FAIL" if name in pre_fixed.preflight_failures else "pass", info[2]]
        for name, info in PROBE_INFO.items()]
display(Markdown(markdown_table(["probe", "grpo_buggy", "grpo_fixed", "catches"], rows)))
padded_probe = "sampler and trainer log-probs agree on a left-padded row"  # tried only once the unpadded row agrees
assert pre_fixed.preflight_failures == [] and padded_probe not in pre_buggy.preflight_failures
assert sorted(pre_buggy.preflight_failures) == sorted(p for p in PROBE_INFO if p != padded_probe)

# %% [markdown]
# The buggy twin fails every probe but one: *agree on a left-padded row* is tried only once the unpadded row
# agrees, and the buggy twin's unpadded row is already off (B6, B10), so its B12 and B13 stay behind that
# failure (each alone fails the padded probe: notebook 03 §6).
#
# ## 5. The buggy twin under the monitor
#
# `watch` = preflight, then `train(on_iteration=monitor)`; `mon_buggy` watched the buggy twin in the cell at the
# top. `grpo_buggy.train` has no checks of its own: everything below comes from the monitor.

# %%
print(mon_buggy.report())
first_buggy = mon_buggy.first_iteration_failure()
assert first_buggy[0] == 0 and len(first_buggy[1]) == 8 and len(mon_buggy.preflight_failures) == 12

# %% [markdown]
# Eight per-iteration checks fire at iteration 0 (twelve probes failed before it). Several bugs hide behind
# each other here (NaN advantages make the loss NaN, which makes the gradient NaN), which is why the next
# section switches the bugs on one at a time.
#
# ## 6. One bug at a time
#
# `hybrid("Bn")` is the fixed twin with only bug Bn switched back on. Each runs for 6 iterations of
# 6 prompts x 8 samples under a fresh monitor:

# %%
hybrid_monitors = {}
with progress("watching each single-bug hybrid", total=len(BUGS)) as step:
    for bug in BUGS:
        step(bug.id)
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
no_stat = [b for b, mon in hybrid_monitors.items() if mon.first_iteration_failure() is None]
print(f"caught: {caught}/{len(table)}")
print(f"first flagged by preflight    : {' '.join(by_preflight)}")
print(f"first flagged at iteration 0+ : {' '.join(by_iteration)}")
print(f"no training statistic fires   : {' '.join(no_stat)}")
first_it = {b: (mon.first_iteration_failure() or (None,))[0] for b, mon in hybrid_monitors.items()}
print("first iteration a per-iteration check flags:", ", ".join(f"{b} {it}" for b, it in first_it.items()))
b1, b2 = hybrid_monitors["B1"].history[0], hybrid_monitors["B2"].history
print("B2 zero_var_groups per iteration:", " ".join(f"{s['zero_var_groups']:.3f}" for s in b2))
print(f"B1 at iteration 0: clip_frac_neg = {b1['clip_frac_neg']:.3f}, grad_norm = {b1['grad_norm']:.0f}, "
      f"logprob_gap = {b1['logprob_gap']:.1e}")
b8_grad = [s["grad_norm"] for s in hybrid_monitors["B8"].history]
print("B8 grad_norm per iteration:", " ".join(f"{g:.1f}" for g in b8_grad))
assert caught == len(table) and by_iteration == ["B3", "B9"]
assert all(row[-1] in ("preflight", "iteration 0") for row in table)  # every bug flagged by iteration 0
at_zero = ["B1", "B3", "B6", "B9", "B10", "B12", "B13", "B14", "B15", "B17"]
assert [b for b, it in first_it.items() if it == 0] == at_zero  # every wiring bug but B16 flagged at iteration 0
assert first_it["B16"] == 1  # its check is waived at iteration 0, where ref_gap is 0 in a correct run too
assert no_stat == ["B4", "B5", "B7", "B11"]
assert first_it["B2"] == 2 and [s["zero_var_groups"] > 0 for s in b2][:3] == [False, False, True]
assert hybrid_monitors["B1"].first_iteration_failure() == (0, ["clip fraction moderate", "grad norm bounded"])
assert b1["logprob_gap"] <= STATS["logprob_gap"].hi  # B1 is invisible to logprob_gap
assert first_it["B8"] == 3 and b8_grad[3] > STATS["grad_norm"].hi > max(b8_grad[:3])

# %% [markdown]
# Every bug is flagged before training or at iteration 0, by the preflight or a statistic (`caught`, and the
# `first flag` column).
# The failure map of the table, per bug, the first iteration a per-iteration check flags (printed above):
# B1, B3, B6, B9, B10, B12, B13, B14, B15 and B17 at iteration 0, B16 at iteration 1, B2 at iteration 2, B8 at
# iteration 3, B4, B5, B7 and B11 never within 6 iterations.
#
# * **Bugs in a building block with a closed-form answer** (sampler, advantage of a constant group,
#   loss gradient at $\rho = 1$, all-masked loss, log-prob of a large logit, KL estimator, gradient
#   clipping, the completion mask, the prompt layout, the reward's decode, the reference's set-up) are caught by
#   the preflight. B14,
#   B15 and B17 also trip a statistic that is exactly 0 in a correct trainer (`mask_eos_mismatch`,
#   `mixed_groups`, `text_mismatch`) at iteration 0. B4, B5, B7 and B11 trip no training statistic at all
#   within 6 iterations. B2 does only once a group is constant: the SFT model's groups all carry signal
#   at iterations 0 and 1, and the first constant group (`zero_var_groups` 1/6) comes at iteration 2.
#   B8 trips `grad norm bounded` at iteration 3: a symptom, late, and not of a policy far from the
#   reference (next cells). B1 trips `clip fraction moderate` and `grad norm bounded` at iteration 0: a
#   symptom, not a diagnosis. B1 is the instructive one: `generate` records
#   $\log\mathrm{softmax}(z)$ of the token it drew, not the probability the buggy sampler actually used, so
#   `logprob_gap` cannot see it (within its rounding range under B1, printed). A statistic only catches what
#   it measures.
# * **Bugs in how the pieces are wired** (old log-probs recomputed, groups reshaped along the wrong axis) pass
#   every probe: each piece is correct on its own. Only statistics of a real batch see them, and they do at
#   iteration 0 (B3, B9). The sampler-vs-trainer wiring (a shifted or untempered training log-prob, B6 and B10;
#   a training forward without position ids or a sampler without the attention mask, B12 and B13) has a probe
#   of its own: a random tiny model samples a few tokens after an unpadded and a left-padded prompt, and the
#   trainer must score them as the sampler did. They fail it, and `logprob_gap` at iteration 0.
# * **The live reference (B16)** is caught by the preflight: `setup_run` on a stand-in task with a fresh model
#   must return a reference that is not the policy, shares none of its parameter tensors and needs no gradient.
#   Its per-iteration check is waived at iteration 0, where `ref_gap` is 0 in a correct trainer too: it fires at
#   iteration 1, the first rollout after an update.
#
# **What B8's spike is, and what it is not.** B8 computes $k_3$ with the log-ratio reversed: with
# $x = \log\pi_\text{ref} - \log\pi$ it uses $e^{-x} + x - 1 = \pi/\pi_\text{ref} - 1 - \log(\pi/\pi_\text{ref})$
# per sampled token. Its mean is $\chi^2(\pi\,\|\,\pi_\text{ref}) - \mathrm{KL}$, and its expected gradient is
# $\tfrac12\nabla\chi^2(\pi\,\|\,\pi_\text{ref})$ (notebook 04 §2.2): still a pull *toward* the reference, but
# one whose per-token weight is $\beta\,(\pi/\pi_\text{ref} - 1)$ (the derivative of the term with respect
# to $\log\pi$), unbounded where the policy likes a token far more than the reference does, which are the
# tokens it samples most. The fixed $k_3$'s weight is $\beta\,(1 - \pi_\text{ref}/\pi)$: never above $\beta$
# (large and negative only on tokens $\pi$ rarely samples). So the spike should come with a sampled token of
# large $\pi/\pi_\text{ref}$, and the policy should *not* be far from the reference. The same 6-iteration
# runs, B8 and fixed, with the exact per-token $\mathrm{KL}(\pi\,\|\,\pi_\text{ref})$ after each update (a
# sum over the vocabulary, `workbook.nb04_stabilisers.instrumented_run`) and the largest
# $\pi_\text{old}/\pi_\text{ref}$ among the batch's sampled tokens:

# %%
b8_run, fixed_run = (nb04_stabilisers.instrumented_run(*bugs, **SHORT) for bugs in (("B8",), ()))
assert [s["grad_norm"] for s in b8_run["history"]] == b8_grad  # the run of the table above
spike = b8_grad.index(max(b8_grad))
for name, r in (("B8", b8_run), ("fixed", fixed_run)):
    print(f"{name:5s} logged kl  " + " ".join(f"{s['kl']:7.3f}" for s in r["history"]))
    print(f"{name:5s} exact KL   " + " ".join(f"{k:7.3f}" for k in r["exact_kl"]))
    print(f"{name:5s} grad_norm  " + " ".join(f"{s['grad_norm']:7.1f}" for s in r["history"]))
    print(f"{name:5s} max pi/ref " + " ".join(f"{w:7.1f}" for w in r["max_weight"]))
logp = torch.tensor([[0.0]], requires_grad=True)  # one token, log pi = 0; log pi_ref = -log w
w = b8_run["max_weight"][spike]
one = torch.ones(1, 1, dtype=torch.bool)
for name, module in (("B8", hybrid("B8")), ("fixed", grpo_fixed)):
    (grad,) = torch.autograd.grad(module.kl_to_reference(logp, torch.tensor([[-math.log(w)]]), one), logp)
    print(f"{name:5s} d kl / d log pi of a token with pi/pi_ref = {w:.1f}: {grad.item():+.3f}")
assert spike == 3 and b8_run["max_weight"][spike] > 100 > max(b8_run["max_weight"][:spike])
assert max(b8_run["exact_kl"]) < max(fixed_run["exact_kl"])  # B8's policy is no further from the reference
assert max(s["kl"] for s in b8_run["history"]) > 10 * max(b8_run["exact_kl"])  # ... than its logged kl says
assert fixed_run["max_weight"][4] > 100 and max(s["grad_norm"] for s in fixed_run["history"]) < STATS["grad_norm"].hi
quoted = [b8_run["history"][3]["kl"], b8_run["history"][4]["kl"], max(b8_run["exact_kl"]), max(fixed_run["exact_kl"]),
          fixed_run["history"][4]["grad_norm"]]
assert [f"{v:.3f}" for v in quoted[:4]] + [f"{quoted[4]:.1f}"] == ["0.408", "3.667", "0.108", "0.185", "5.4"]

# %% [markdown]
# B8's gradient norm jumps at iteration 3, the first batch that samples a token the policy likes hundreds of
# times more than the reference (printed); that token's KL gradient is the ratio minus 1, against less than 1
# for the fixed estimator (printed). Its logged `kl` (the last inner step's) reads 0.408 at iteration 3 and
# 3.667 at iteration 4, while the largest exact KL of B8's policy over the six iterations is 0.108, below the
# fixed run's 0.185: the reversed estimator over-reports the KL and over-corrects toward the reference, it
# does not let the policy run away. The fixed run samples such a token too (iteration 4), and its gradient
# norm there is 5.4, inside its range. The default 70-iteration run of B8 is in notebook 01 and the catalog's
# B8 entry.
#
# ### 6.1 Why B = 6 prompts, not 8: B9 hides when B divides G
#
# B9 reshapes the $B \cdot G$ rewards as `view(G, B)` instead of `view(B, G)` (the bug itself, on a tiny
# input, is notebook 01 §10). With $B = G$ the two views are identical. With $B$ dividing $G$ each wrong
# row of $B$ rewards lies inside one true group, so the advantages are computed on slices of a group and
# each true group is still centred: the bug changes the advantages but not `adv_group_mean`. Only when $B$
# does not divide $G$ do wrong rows straddle two prompts. A tiny input with $G = 4$: per-true-group mean of
# the advantages, B9 vs fixed.

# %%
G = 4
b9 = hybrid("B9")  # only B9 on: the rest of the advantage code is the fixed one
b9_group_means = {}
for B in (4, 2, 3):
    rewards = torch.arange(B * G, dtype=torch.float32) % 5 / 4  # (B*G,) a fixed, non-constant pattern
    buggy = b9.batch_advantages(rewards, G).view(B, G)  # (B, G) regrouped the true way
    fixed = grpo_fixed.batch_advantages(rewards, G).view(B, G)  # (B, G)
    b9_group_means[B] = buggy.mean(1).abs().max().item()
    print(f"B={B} G={G}  per-group mean of A  B9: " + " ".join(f"{m:+.3f}" for m in buggy.mean(1))
          + "   fixed: " + " ".join(f"{m:+.3f}" for m in fixed.mean(1))
          + f"   B9 == fixed: {torch.equal(buggy, fixed)}")
    assert fixed.mean(1).abs().max() <= STATS["adv_group_mean"].hi
    assert (b9_group_means[B] <= STATS["adv_group_mean"].hi) == (G % B == 0)  # hidden exactly when B divides G
    assert torch.equal(buggy, fixed) == (B == G)  # a no-op only when B = G

# %% [markdown]
# So a test run with `prompts_per_batch=8` (and the default `group_size=8`) would report B9 as healthy,
# because it *is* a no-op there; with 2 or 4 prompts it is not a no-op (each group is normalised in halves
# or quarters) but `advantages centred per group` still passes. This notebook uses $B = 6$, $G = 8$.
#
# ### 6.2 How early B2 shows in training depends on the task
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
print("fixed on SparseMatchTask, first flags:", sparse_fixed.first_flags())
print("zero_var_groups per iteration:", " ".join(f"{s['zero_var_groups']:.2f}" for s in sparse_fixed.history))
print("clip_frac_pos per iteration:  ", " ".join(f"{s['clip_frac_pos']:.2f}" for s in sparse_fixed.history))
print(f"groups carry signal: zero_var_groups {render_range('zero_var_groups')}")
assert sparse_b2.first_iteration_failure()[0] == 0 and "advantages finite" in sparse_b2.first_iteration_failure()[1]
assert sparse_fixed.first_flags() == [("clip fraction moderate", 0), ("groups carry signal", 2)]

# %% [markdown]
# The fixed twin trips `groups carry signal` on the same task at iteration 2: not a bug, but a run that is
# starved of signal (every member of a constant group gets $A = 0$). That is the kind of warning a range check
# is for. It also trips `clip fraction moderate` at iteration 0, and that is a range meeting a regime it was
# not calibrated on: the ranges come from the SFT model on AdditionTask (notebook 03 §1), while here a fresh
# TinyLM has only one or two groups with any signal, so the clip fraction is a fraction of a handful of tokens
# that a single large step moves. A range check is only as general as the runs it was calibrated on.
#
# ### 6.3 Checks that guard against things outside the catalog
#
# `ratio == 1 at the first inner step` catches none of the catalogued bugs B1..B17 alone (B3 makes the ratio
# *trivially* 1).
# It exists for the classic interview trace "print the ratio, it is not 1 at step 1, why?": for example
# dropout active in train mode while the old log-probs were cached in eval mode. `clip fraction moderate`
# flags steps too large for the trust region:

# %%
dropout_mon = HealthMonitor()
dropout_mon.watch(grpo_fixed, steps=2, prompts_per_batch=6, dropout=0.1, preflight=False)
print(f"fixed, dropout=0.1: {dropout_mon.first_iteration_failure()} "
      f"ratio_first_maxdev={dropout_mon.history[0]['ratio_first_maxdev']:.3f}")
lr_mon = HealthMonitor()
lr_mon.watch(grpo_fixed, steps=2, prompts_per_batch=6, lr=0.05, preflight=False)
lr_first = lr_mon.history[0]
print(f"fixed, lr=0.05:     {lr_mon.first_iteration_failure()} "
      f"clip fractions +{lr_first['clip_frac_pos']:.3f} -{lr_first['clip_frac_neg']:.3f}")
assert "ratio == 1 at the first inner step" in dropout_mon.first_iteration_failure()[1]
assert dropout_mon.first_iteration_failure()[0] == 0
assert lr_mon.first_iteration_failure()[0] == 0 and "clip fraction moderate" in lr_mon.first_iteration_failure()[1]

# %% [markdown]
# ### 6.4 Padding side: when right padding is safe for completion log-probs
#
# Not a check but a trap next to them. The twins left-pad the prompts, append the completions, and read the
# logits of every completion token from one slice, `logits[:, -T - 1 : -1]`, with position ids from the
# attention mask. A causal LM's output at a position depends only on the tokens at and before it, so padding
# is harmless wherever **every scored token and every logit that scores one comes before the padding**:
# right padding of *packed* rows (prompt + completion concatenated per row first, then padded at the end,
# each row's completion read at its own offsets) is safe. Right padding of the *prompts* before appending
# the completions is not: it puts pads between a short prompt and its completion, so the shared slice reads
# the first completion token's logit off a PAD position (and generation from right-padded prompts would
# sample after the pads). Two prompts of different lengths through the SFT model, log-probs of the
# completions "19" and "7" (then EOS) three ways:

# %%
pad_task = grpo_fixed.AdditionTask()
pad_model = TinyLM.from_pretrained(pad_task.checkpoint).eval()
pad_tok = CharTokenizer(pad_task.alphabet)
pad_prompts, pad_answers = ["12+7=", "3+4="], ["19", "7"]
answer_rows = [pad_tok.encode(a, add_bos=False) + [pad_tok.eos_token_id] for a in pad_answers]
T_pad = max(map(len, answer_rows))
completion = torch.full((2, T_pad), pad_tok.pad_token_id)  # (N, T): PAD after EOS is a masked filler here
# (generate leaves what it sampled after the first EOS in place; the mask hides it)
completion_mask = torch.zeros(2, T_pad, dtype=torch.bool)  # (N, T)
for i, row in enumerate(answer_rows):
    completion[i, : len(row)], completion_mask[i, : len(row)] = torch.tensor(row), True
with torch.no_grad():
    by_side = {}
    for side in ("left", "right"):  # the prompts padded on that side, then the twins' shared slice
        enc = pad_tok(pad_prompts, padding_side=side)
        by_side[side] = grpo_fixed.policy_logprobs(pad_model, enc["input_ids"], enc["attention_mask"], completion,
                                                   completion_mask, 1.0)  # (N, T)
    packed = pad_tok([p + a for p, a in zip(pad_prompts, pad_answers, strict=True)], padding_side="right")
    packed_logp = torch.log_softmax(pad_model(packed["input_ids"], attention_mask=packed["attention_mask"]).logits, -1)
    by_side["packed, right"] = torch.zeros(2, T_pad)  # (N, T): each row read at its own offsets
    for i, (prompt, row) in enumerate(zip(pad_prompts, answer_rows, strict=True)):
        start = len(pad_tok.encode(prompt))  # the first completion token's column in the packed row
        ids = torch.tensor(row)  # (n,) the completion, EOS included (packed rows end before it: score it here)
        scores = packed_logp[i, start - 1 : start - 1 + len(row)]  # (n, V): column l scores token l + 1
        by_side["packed, right"][i, : len(row)] = scores.gather(-1, ids[:, None]).squeeze(-1)
for name, logp in by_side.items():
    print(f"{name:14s} " + "   ".join(" ".join(f"{v:+.4f}" for v in logp[i, completion_mask[i]]) for i in range(2)))
pad_err = {k: (v - by_side["left"])[completion_mask].abs().max().item() for k, v in by_side.items()}
print("max |difference from left padding|:", ", ".join(f"{k} {v:.1e}" for k, v in pad_err.items()))
assert pad_err["packed, right"] < 1e-5 and pad_err["right"] > 0.01  # packed: same up to rounding; pads between: off
assert torch.equal(by_side["right"][0], by_side["left"][0])  # the longest prompt has no padding either way

# %% [markdown]
# Left padding and packed right padding agree up to float32 rounding (printed: the packed rows are other tensor
# shapes, which the kernels may sum in another order); right-padded prompts give the longer prompt the same numbers
# (it has no pad) and the shorter one a wrong log-prob for its first completion token (read off a pad). The
# later tokens come out right here only because the attention mask hides the pad and the position ids come
# from the mask; with default position ids they would be shifted too.
#
# ## 7. The fixed twin stays quiet
#
# Same run length and batch as the buggy twin (`mon_fixed`, watched in the cell at the top). `grpo_fixed.train`
# also runs `check_health` itself and stores the result in `stats["health"]`; the monitor agrees with it and adds
# its three range checks.

# %%
print(mon_fixed.report())
print("grpo_fixed's own check_health failures:", sum(len(s["health"]) for s in hist_fixed))
final_buggy, final_fixed = (tail_mean([s["reward"] for s in h], 5) for h in (hist_buggy, hist_fixed))
print(f"final reward (mean of last 5): buggy {final_buggy:.3f}   fixed {final_fixed:.3f}")
assert mon_fixed.quiet and not any(s["health"] for s in hist_fixed) and final_fixed > 4 * final_buggy

# %% [markdown]
# ### 7.1 Two ranges that sounded right and were wrong
#
# An earlier version of the statistics table gave `ratio_last_maxdev` an upper bound of 1 and `kl` an
# upper bound of $\log V$. The fixed twin's default run broke the first, so both bounds were removed from
# `STATS`. The current ranges, and the first 20 iterations of the default run (seed 0: the calibration run of
# notebook 03 §1, cut short to keep this notebook fast) under the monitor:

# %%
V = CharTokenizer(grpo_fixed.AdditionTask.alphabet).vocab_size
mon_default = HealthMonitor()
hist_default = mon_default.watch(grpo_fixed, steps=20)  # every other Config default
maxdev = [s["ratio_last_maxdev"] for s in hist_default]
kl_run = [s["kl"] for s in hist_default]
worst = max(range(len(maxdev)), key=maxdev.__getitem__)  # the iteration with the largest max |ratio - 1|
clip_pos, clip_neg = (torch.tensor([s[k] for s in hist_default]) for k in ("clip_frac_pos", "clip_frac_neg"))
clip_max = max(clip_pos.max(), clip_neg.max()).item()
above_log_v = sum(k > math.log(V) for k in kl_run)
mean_range = [f(s["ratio_last_mean"] for s in hist_default) for f in (min, max)]
print(f"ranges now: ratio_last_maxdev {render_range('ratio_last_maxdev')}, kl {render_range('kl')}")
print(f"default run: {len(hist_default)} iterations, {sum(map(len, mon_default.failures))} check failures, "
      f"{len(mon_default.preflight_failures)} probe failures")
print(f"ratio_last_maxdev: max {maxdev[worst]:.2f} (iteration {worst}), above 1 in {sum(d > 1 for d in maxdev)} "
      f"iterations;  ratio_last_mean in [{mean_range[0]:.3f}, {mean_range[1]:.3f}] ({render_range('ratio_last_mean')})")
print(f"clip fractions: median A>0 {clip_pos.median():.3f}, A<0 {clip_neg.median():.3f}, max {clip_max:.3f} "
      f"({render_range('clip_frac_pos')});  grad_norm max {max(s['grad_norm'] for s in hist_default):.1f} "
      f"({render_range('grad_norm')})")
print(f"kl: max {max(kl_run):.3f}, 95th percentile {torch.tensor(kl_run).quantile(0.95):.3f}; "
      f"above log V = {math.log(V):.3f} in {above_log_v} iterations")
assert mon_default.quiet and not any(mon_default.failures)  # zero failures over the run
assert sum(d > 1 for d in maxdev) >= 1 and maxdev[worst] > 1.1  # the old bound on the max would fire
assert f"{maxdev[worst]:.2f} {worst}" == "1.17 15"  # as quoted in the self-check
assert above_log_v == 0 and clip_max < STATS["clip_frac_pos"].hi  # ... the old KL bound would not, here

# %% [markdown]
# Zero failures over the run, while the old bound on `ratio_last_maxdev` would have fired (printed: the
# iterations above 1). The old KL bound happens not to fire on this run (the SFT start keeps the KL to its
# own copy small), but it is wrong all the same. Why each was wrong:
#
# * **Clipping does not bound the ratio.** The clipped surrogate only removes the gradient that would push
#   a token further past $1 \pm c$ the way its advantage favours (`Config.clip`); nothing pulls it back,
#   and the token's probability keeps moving with every other token's update, because the tokens share
#   the parameters (through the softmax alone, in the tiny case below) and Adam's momentum keeps stepping
#   after a gradient has gone to 0. `ratio_last_maxdev` is a **max** over all tokens of a minibatch, so
#   one such token sets it. The trust region shows in the clip fractions (how many tokens went past
#   $1 \pm c$ on the favoured side), not in the max. Even the mean ratio moves with it: in the iteration
#   with the largest max (printed), one token far out moves the minibatch's `ratio_last_mean` only a little
#   (its range over the run is printed), which is why no check reads the max and the mean is logged instead.
# * **$\mathrm{KL}(\pi \,\|\, \pi_{\text{ref}}) \le \log V$ holds only for a uniform reference**:
#   $\mathrm{KL}(\pi \,\|\, u) = \log V - H(\pi)$. In general
#   $\mathrm{KL}(\pi \,\|\, \pi_{\text{ref}}) \le -\log \min_v \pi_{\text{ref}}(v)$, which exceeds $\log V$
#   as soon as the reference gives some token less than $1/V$ (and is unbounded as that goes to 0). And the
#   logged `kl` is a $k_3$ mean over one minibatch: each term $e^x - x - 1$ is unbounded above, large for a
#   token that $\pi$ rarely samples but $\pi_{\text{ref}}$ likes.
#
# Both on tiny inputs. Left: two tokens of one context, logits trained by Adam on the twin's clipped loss
# (token 0: $p = 0.9$, $A = -1$; token 2: $p = 0.01$, $A = +1$). Right: the run's own reference policy
# (the SFT model, `setup_run`, seed 0) at the first completion position of the prompt "12+7=", and a policy
# that puts mass $m$ on the reference's least likely token; also the exact per-token KL to that reference of
# the policy that answers every prompt of AdditionTask correctly.

# %%
clip = grpo_fixed.Config.clip
p_old = torch.tensor([0.90, 0.09, 0.01])  # (3,) one context, three tokens
sampled = torch.tensor([[0], [2]])  # (2, 1) two sequences of one token: token 0 and token 2
old_logp = p_old.log()[sampled]  # (2, 1)
adv = torch.tensor([-1.0, 1.0])  # (2,) A of each sequence
one_token = torch.ones(2, 1, dtype=torch.bool)  # (2, 1)
z = p_old.log().clone().requires_grad_(True)  # (3,) the logits are the parameters
adam = torch.optim.Adam([z], lr=0.05)
ratios, own_grad_zero = [torch.ones(2)], []  # ratio of each token after 0, 1, 2, ... steps; own gradient 0?
for _ in range(40):
    logp = torch.log_softmax(z, -1)[sampled]  # (2, 1)
    loss = grpo_fixed.grpo_loss(logp, old_logp, adv, one_token, clip=clip)
    adam.zero_grad()
    loss.backward()
    adam.step()
    ratio = ratios[-1]  # (2,) the ratio this step's gradient saw
    own_grad_zero.append(((adv > 0) & (ratio > 1 + clip)) | ((adv < 0) & (ratio < 1 - clip)))  # (2,)
    ratios.append((torch.log_softmax(z, -1)[sampled] - old_logp).exp().flatten().detach())  # (2,) after it
ratios = torch.stack(ratios)  # (steps + 1, 2)
clipped_at = [next(i for i, zero in enumerate(own_grad_zero) if zero[t]) for t in range(2)]  # first such step
print(f"clip c = {clip}: token 2 (A > 0) gets no gradient of its own from step {clipped_at[1] + 1} on "
      f"(ratio {ratios[clipped_at[1], 1]:.2f}), token 0 (A < 0) from step {clipped_at[0] + 1} on")
print(f"after {len(ratios) - 1} steps: ratio token 2 = {ratios[-1, 1]:.2f}, token 0 = {ratios[-1, 0]:.2f};   "
      f"max |ratio - 1| = {(ratios[-1] - 1).abs().max():.2f}")
assert (ratios[-1] - 1).abs().max() > 1  # past the old bound, after a correct update
assert ratios[clipped_at[1], 1] < 1.5 < ratios[-1, 1]  # token 2 kept rising after its own gradient was 0

task = grpo_fixed.AdditionTask()
_, ref_policy, tokenizer, _, _ = grpo_fixed.setup_run(task, grpo_fixed.make_config(), seed=0)  # the reference
temperature = grpo_fixed.Config.temperature
all_prompts = [f"{a}+{b}=" for a in range(50) for b in range(50)]  # every prompt of the task
enc = tokenizer(all_prompts, padding_side="left")  # (2500, P) left-padded
answers = tokenizer([str(a + b) for a in range(50) for b in range(50)], padding_side="right", add_bos=False)
eos_at = answers["attention_mask"].sum(1)  # (2500,) where each answer's EOS goes
targets = torch.cat([answers["input_ids"], torch.zeros(len(all_prompts), 1, dtype=torch.long)], 1)  # (2500, T)
targets[torch.arange(len(all_prompts)), eos_at] = tokenizer.eos_token_id
target_mask = torch.arange(targets.shape[1]) <= eos_at[:, None]  # (2500, T) up to and including EOS
targets = torch.where(target_mask, targets, tokenizer.pad_token_id)
with torch.no_grad():
    ref_logp = grpo_fixed.policy_logprobs(ref_policy, enc["input_ids"], enc["attention_mask"], targets,
                                          target_mask, temperature)  # (2500, T)
    one = tokenizer(["12+7="])
    pos = grpo_fixed.position_ids(one["attention_mask"])
    ref_p = torch.softmax(ref_policy(one["input_ids"], attention_mask=one["attention_mask"],
                                     position_ids=pos).logits[0, -1] / temperature, -1)  # (V,)
masses = torch.linspace(1 / V, 0.99, 50)  # (M,) mass on the reference's least likely token
least = ref_p.argmin()
others = (1 - masses[:, None]) / (V - 1) * torch.ones(V)  # (M, V)
pi_m = torch.where(torch.arange(V) == least, masses[:, None], others)  # (M, V)
kl_to_ref = (pi_m * (pi_m.log() - ref_p.log())).sum(-1)  # (M,) exact KL(pi_m || ref)
kl_to_uniform = (pi_m * (pi_m.log() + math.log(V))).sum(-1)  # (M,) = log V - H(pi_m)
solved_kl = -ref_logp[target_mask].mean().item()  # exact per-token KL of the always-correct policy to the ref
print("reference at one position: " + " ".join(f"{v:.3f}" for v in ref_p) + f"   -log min = {-ref_p.min().log():.1f}")
print(f"log V = {math.log(V):.3f}; KL to ref at m = {masses[-1]:.2f}: {kl_to_ref[-1]:.3f}; "
      f"max KL to uniform: {kl_to_uniform.max():.3f}; always-correct policy: {solved_kl:.4f}")
assert kl_to_uniform.max() <= math.log(V) < kl_to_ref[-1]
assert solved_kl < math.log(V) < -ref_p.min().log()

# %%
fig, (ax_r, ax_k) = plt.subplots(1, 2, figsize=(10.0, 3.2), layout="constrained")
steps = range(len(ratios))
ax_r.axhspan(1 - clip, 1 + clip, color="#2ca02c", alpha=0.12, lw=0, label=f"1 +- c (c = {clip})")
ax_r.axhline(2, color=BUGGY, ls="--", lw=1, label="old bound: |ratio - 1| < 1")
ax_r.plot(steps, ratios[:, 1], color=FIXED, label="token 2 (p = 0.01, A > 0)")
ax_r.plot(steps, ratios[:, 0], color=REFERENCE, label="token 0 (p = 0.9, A < 0)")
for t, color in ((1, FIXED), (0, REFERENCE)):
    ax_r.axvline(clipped_at[t], color=color, lw=0.8, ls=":")
ax_r.set(xlabel="Adam steps (dotted: the token's own gradient is 0 after this)", ylabel="ratio",
         title="clipping does not bound the ratio")
ax_r.legend(fontsize=8)
ax_k.plot(masses, kl_to_ref, color=FIXED, label="KL(pi || run's reference)")
ax_k.plot(masses, kl_to_uniform, color=REFERENCE, label="KL(pi || uniform) = log V - H(pi)")
ax_k.axhline(math.log(V), color=BUGGY, ls="--", lw=1, label="old bound: log V")
ax_k.axhline(-ref_p.min().log(), color=FIXED, ls=":", lw=1, label="-log min ref(v): the bound in general")
ax_k.set(xlabel="mass m on the reference's least likely token", ylabel="exact KL (nats)",
         title="KL to a non-uniform reference exceeds log V")
ax_k.legend(fontsize=8)
plt.show()

# %% [markdown]
# On the left, token 2's ratio passes $1 + c$ within a few steps and its own gradient is 0 from then on,
# yet it keeps climbing to about 2.2: token 0's gradient (A < 0) lowers token 0's logit, which raises every
# other token's probability, and Adam's momentum carries both tokens on after their own gradients are 0.
# Nothing is wrong, and the old bound would fire. On the right, the KL to the uniform distribution never
# passes $\log V$, but the KL to the run's actual reference (the confident SFT model) does as soon as the
# policy puts most of its mass on a token the reference almost never emits. The policy that solves the task
# stays below $\log V$ here (printed above): the goal is close to the SFT model, so this run never meets the
# old bound, while a run that drifts onto tokens the reference rules out would.
#
# > **Catalog note (a wrong range, not a wrong trainer).** *Symptom*: a range check fires on a run whose
# > reward climbs and whose invariants all hold. *Statistic*: the range itself. Check it against the
# > fixed trainer's default run (zero failures expected) and against a tiny input where you can compute the
# > answer. *Fix*: bound what the mechanism controls: `ratio_last_mean` and the clip fractions for the trust
# > region, `ratio_last_maxdev` only from below (did the policy move at all?); `kl` only by its sign (each
# > $k_3$ term is $\ge 0$), and watch its trend rather than a ceiling.
#
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
    assert err.iteration == -1 and len(strict.history) == 0
strict = HealthMonitor(strict=True)
try:
    strict.watch(grpo_buggy, **RUN, preflight=False)
except HealthCheckFailed as err:
    print(f"without preflight: stopped at iteration {err.iteration} after {len(strict.history)} iteration(s)")
    assert err.iteration == 0 and len(strict.history) == 1

# %% [markdown]
# ## 9. Dashboard: the logged statistics of both twins
#
# One panel per statistic, buggy in red, fixed in blue; the green band is the `STATS` range the
# corresponding check accepts. Non-finite values cannot be drawn as a line: they are the `x` marks on the
# top edge of a panel. Panels with tiny healthy values use a symlog axis (linear below $10^{-8}$).

# %%
fig, nonfinite = plot_dashboard({"grpo_buggy": hist_buggy, "grpo_fixed": hist_fixed},
                                {"grpo_buggy": BUGGY, "grpo_fixed": FIXED})
plt.show()
for key in ("loss", "grad_norm", "kl"):
    print(f"non-finite {key:<9s}: buggy {nonfinite[key]['grpo_buggy']:2d}/{len(hist_buggy)}   "
          f"fixed {nonfinite[key]['grpo_fixed']:2d}/{len(hist_fixed)}")
gap_buggy, gap_fixed = min(s["logprob_gap"] for s in hist_buggy), max(s["logprob_gap"] for s in hist_fixed)
gap_hi = STATS["logprob_gap"].hi
print(f"logprob_gap over the run: buggy min {gap_buggy:.2e}   fixed max {gap_fixed:.2e}   "
      f"range {render_range('logprob_gap')}")
for key in ("reward", "kl", "ratio_last_maxdev"):
    print(f"last iteration {key:<17s}: buggy {hist_buggy[-1][key]:.2e}   fixed {hist_fixed[-1][key]:.2e}")
clip_max = max(max(s["clip_frac_pos"], s["clip_frac_neg"]) for s in hist_buggy)
print(f"max clip fraction, whole run: buggy {clip_max:.3f}   range {render_range('clip_frac_pos')}")
assert gap_fixed < gap_hi / 10 and gap_buggy > 1000 * gap_hi  # rounding below the threshold, the bug far above
assert clip_max == 0 and hist_buggy[-1]["ratio_last_maxdev"] == 0  # B3: the ratio the loss sees never moves
assert hist_buggy[-1]["kl"] == 0 and max(s["reward"] for s in hist_buggy) < 0.1  # no step taken; reward ~ 0
assert 0 < hist_fixed[-1]["kl"] < 0.5 and hist_fixed[-1]["reward"] > 0.4

# %% [markdown]
# What to read off it:
#
# * `logprob_gap` of the fixed twin stays at float32 rounding over the whole run (a few $10^{-6}$: the sampler
#   scores each token in the KV-cache forward, the training pass in one forward over the whole sequence, two
#   code paths that round differently); the buggy twin's stays near 10 (its minimum is printed; B6 and B10, with
#   B12 and B13 on the left-padded rows). The threshold (printed with it) sits more than an order of magnitude
#   above the rounding and three below the bug.
# * The buggy twin's loss is NaN at every iteration (B2, B5, B7 together), so every step is skipped: the
#   policy never leaves its starting point, its `kl` is 0 at the end (and under B16 the reference *is* the
#   policy), and its reward stays near 0 (B1 samples from the wrong distribution, B17 scores the text past
#   EOS). `ratio_last_maxdev` is 0 at the last iteration and the clip fractions are flat at 0: a zero clip
#   fraction over a whole run is itself suspicious (B3 makes the ratio the loss sees exactly 1).
# * The fixed twin's KL to the reference stays small while its reward climbs (both printed).
#
# ## 10. Which checks fire, iteration by iteration
#
# Drag the slider: the left map is the buggy twin, the right the fixed twin; rows are checks, columns
# iterations up to the slider, a coloured cell is a failure. The failures were recorded during the runs
# above, so a redraw only updates two images and a frame (one persistent figure, `live_plot`).

# %%
fig, (ax_b, ax_f) = buggy_vs_fixed("failed health checks per iteration", figsize=(10.6, 3.8), sharey=False)
draw_buggy = failure_map(ax_b, mon_buggy, color=BUGGY)
draw_fixed = failure_map(ax_f, mon_fixed, color=FIXED, show_names=False)


def update_failures(iteration):
    """Redraw both maps up to `iteration`; -> the checks failing there, per twin."""
    return {"iteration": iteration, "buggy": draw_buggy(iteration), "fixed": draw_fixed(iteration)}


w = live_plot(fig, update_failures, iteration=slider(LAST, 0, LAST, 1, "iteration", integer=True))

# %% tags=["nbval-ignore-output"]
display(w)

# %%
later = mon_buggy.first_failure["reference frozen, not the live policy"]  # one more failing check (B16)
for it in (later, 0):
    r = probe(w, {"iteration": it})
    print(f"iteration {r['iteration']}: buggy {len(r['buggy'])} [{'; '.join(r['buggy'])}]")
    print(f"             fixed {len(r['fixed'])} [{'; '.join(r['fixed'])}]")
    assert r["buggy"] == mon_buggy.failures[it] and r["fixed"] == []
assert later == 14 and len(mon_buggy.failures[later]) == 9  # waived while every group is constant (B1's run)
assert len(r["buggy"]) == 8 and w.values() == {"iteration": LAST}  # the slider is back at its default

# %% [markdown]
# > **You should know**
# >
# > * Assert invariants that are *exactly* true in a correct trainer, so a threshold has orders of
# >   magnitude of room: $\rho = 1$ at the first inner step, $\rho \ne 1$ at the last, $\sum_i A_i = 0$ per
# >   group, training log-prob = sampler log-prob before any update, $k_3 \ge 0$, everything finite.
# > * Log ranges for regimes that cannot learn: fraction of zero-variance groups, clip fraction, entropy,
# >   pre-clip gradient norm. Check every range against the correct trainer's default run: a bound the
# >   mechanism does not enforce (max ratio, KL below $\log V$) is a false alarm waiting to happen.
# > * Put a statistical probe's tolerance many standard deviations from the noise and far from the bug;
# >   compute both numbers, as in notebook 03 §1.
# > * Probe building blocks with tiny inputs before training (sampler vs softmax, constant group, gradient
# >   at $\rho = 1$, all-masked loss, large logits, KL estimator bias, clipping, completion mask, prompt
# >   repeat, decode up to EOS, a frozen reference): bugs with a closed-form answer are caught there and often
# >   by nothing else.
# > * Wiring bugs fail a statistic at iteration 0 (a live reference, B16, at iteration 1, once the policy has
# >   moved). B3 and B9 pass every probe; B6, B10, B12 and B13 are caught before training only by a probe that
# >   runs the real sampler and the real trainer forward on a tiny model (unpadded and left-padded rows).
# > * Choose test shapes that cannot hide a bug: with $B = G$ a transposed reshape is a no-op, and with $B$
# >   dividing $G$ it is invisible to the centring check.
# > * Make it strict in CI and in the first minutes of a run: crash at the first failure.

# %% [markdown]
# ## 11. Self-check
#
# 1. The buggy twin's clip fractions are 0 for the whole run. Which check would you add to catch that,
#    and which bug does it point to?
# 2. Why can `logprob_gap` not catch B1, although B1 changes which tokens are drawn?
# 3. With the reversed KL estimator (B8), why does `KL finite and >= 0` still pass?
# 4. A colleague's smoke test uses 8 prompts and 8 samples per prompt (or 4 and 8), and every check
#    passes. Which bug from the catalog could still be there?
# 5. Your run sets dropout to 0.1 and `ratio == 1 at the first inner step` fires. Is the trainer wrong?
#    What are two fixes?
# 6. A colleague proposes "`ratio_last_maxdev` must stay below 1, clipping guarantees it". What do you
#    answer?
# 7. A colleague pads with `padding_side="right"` to save a reshuffle. When is that safe for the completion
#    log-probs of a causal LM, and when not?
#
# <details><summary>Answer</summary>
#
# 1. "The ratio moves and the clip sometimes engages": `ratio moves after updates` (already a check) and,
#    over a window of iterations, a clip fraction above 0 at least once. Both point to B3: old log-probs
#    recomputed from the current policy inside the inner loop make $\rho \equiv 1$.
# 2. `generate` records the log-prob of the drawn token under $\log\mathrm{softmax}(z)$, which is also
#    what training recomputes; the gap compares two correct numbers. The buggy sampler's actual
#    probabilities (min-shifted logits) are never logged. Only a probe that counts sampled frequencies
#    (the preflight) compares against the true distribution.
# 3. $e^{x} - x - 1 \ge 0$ for every real $x$, including $-x$: reversing the log-ratio still gives a
#    non-negative number. What is wrong is its *expectation*, $\chi^2 - \mathrm{KL}$ (about 6.03 instead of
#    1.04 in the probe of notebook 03 §1), and its gradient, $\tfrac12\nabla\chi^2$: still toward the
#    reference, but with a per-token weight $\pi/\pi_\text{ref} - 1$ that explodes on tokens the reference
#    finds unlikely. An unbiasedness probe sees it before training; in training only the gradient-norm spike
#    does, late (iteration 3 in notebook 03 §6).
# 4. B9 (groups reshaped along the wrong axis): with $B = G$ `view(G, B)` and `view(B, G)` are the same
#    tensor, and with $B$ dividing $G$ every wrong row lies inside one group, so each group stays centred.
#    Use a batch where $B$ does not divide $G$ (here 6 and 8).
# 5. The trainer is inconsistent, not necessarily wrong: the old log-probs are computed in eval mode
#    (no dropout) and the training ones in train mode. Either turn dropout off for RL fine-tuning (usual
#    for LLMs), or compute the old log-probs with the same mode and dropout mask, so that $\rho = 1$
#    holds at the first step.
# 6. Clipping only removes the gradient that would push a token further past $1 \pm c$ the way its
#    advantage favours; the token still moves with the shared parameters and Adam's momentum, and the max
#    over a minibatch is set by one token. The first 20 iterations of the fixed twin's default run exceed 1
#    (1.17 at iteration 15) with every check passing (notebook 03 §7.1). Watch the clip fractions and the mean
#    ratio instead.
# 7. Safe only when the padding comes after every scored token: pack each row (prompt + completion) first,
#    then pad the packed rows on the right and read each row's completion log-probs at its own offsets; the
#    causal mask keeps the real tokens from seeing the pads. Not safe when the prompts are right-padded and
#    the completions appended after them: the pads sit between a short prompt and its completion, a shared
#    slice such as `logits[:, -T - 1 : -1]` reads the first completion token's logit off a pad, and with
#    default position ids every completion token is shifted; sampling from right-padded prompts appends after
#    the pads (notebook 03 §6.4).
#
# </details>
#
# **Next: notebook 04**, *The four stabilisers*: what clipping, the KL to a reference, reward normalisation and
# gradient clipping each protect against, and what each costs.
