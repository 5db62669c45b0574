"""Machinery for notebook 01 (find the silent bugs with tiny inputs): a seeded tiny rollout, the three slider
figures (built once, their artists updated in place by workbook.widgets.live_plot, numbers cached per slider
position), and the single-bug ablation runner. The code the notebook teaches (the tensor describer, the sampler
test, the masked-mean estimates, the hand-made policy, the probes) lives in the notebook's cells and is passed in.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

import grpo_buggy
import grpo_fixed
from workbook.catalog import BUG_IDS, PLUMBING_IDS, bug, hybrid
from workbook.plots import BUGGY, FIXED, REFERENCE, animated, buggy_vs_fixed
from workbook.progress import each, iterations
from workbook.swap import fixed_with

TWINS = (grpo_buggy, grpo_fixed)

# ----------------------------------------------------------------------------------------------
# One tiny rollout


class TinyRun(NamedTuple):
    """What tiny_rollout returns: the rollout batch and its stats, and the run it came from."""

    batch: dict
    stats: dict
    policy: torch.nn.Module
    tokenizer: object
    optimizer: torch.optim.Optimizer
    cfg: object
    generator: torch.Generator


def tiny_rollout(module, *, seed: int = 0, **overrides) -> TinyRun:
    """One rollout batch of `module` on AdditionTask (its SFT checkpoint as policy and reference) from
    module.setup_run(task, cfg, seed); cfg overrides e.g. prompts_per_batch=2, group_size=4."""
    cfg = module.make_config(**overrides)
    task = module.AdditionTask()
    policy, ref_policy, tokenizer, optimizer, generator = module.setup_run(task, cfg, seed)
    batch, stats = module.rollout(policy, ref_policy, tokenizer, task, cfg, generator)
    return TinyRun(batch, stats, policy, tokenizer, optimizer, cfg, generator)


# ----------------------------------------------------------------------------------------------
# Slider figures: build(...) -> (fig, update); update(**slider values) mutates artists, returns numbers

TOY_LOGITS = torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0])
"""the 5 logits of the sampling probe (grpo_fixed.preflight uses the same ones)"""


LEGEND_ZORDER = 0.5
"""legends sit below the artists a slider changes (zorder >= 1): live_plot keeps them in its cached background
instead of compositing them over every frame"""


def corner_text(ax, x=0.03, y=0.95, ha="left"):
    """A text artist at (x, y) in axes coordinates (default: the top-left corner), for numbers a slider changes:
    an artist that live_plot can blit, where changing an axis label or a title would force a full draw."""
    return animated(ax.text(x, y, " ", transform=ax.transAxes, va="top", ha=ha, fontsize="small"))


def sampling_figure(frequencies):
    """notebook 01 §2: sampled frequencies (bars) of logits TOY_LOGITS / T against softmax(logits / T) (dots),
    buggy | fixed. frequencies(module, logits (V,)) -> (V,). update(temperature) returns each twin's
    total-variation distance 0.5 * sum_v |freq_v - p_v|."""
    fig, axes = buggy_vs_fixed("sampling from logits [2, 1, 0, -1, -2] / T", figsize=(7.0, 2.6))
    V = len(TOY_LOGITS)
    bars, dots, texts = {}, {}, {}
    for ax, module, color in zip(axes, TWINS, (BUGGY, FIXED), strict=True):
        bars[module] = animated(ax.bar(range(V), [0.0] * V, color=color, alpha=0.7, label="sampled"))
        (dots[module],) = animated(ax.plot(range(V), [0.0] * V, "o", color=REFERENCE, label="softmax(logits / T)"))
        texts[module] = corner_text(ax)
        ax.set_xticks(range(V))
        ax.set_xlabel("token id")
    axes[0].set(ylim=(0, 1), ylabel="probability")
    axes[1].legend(fontsize="small", loc="upper right").set_zorder(LEGEND_ZORDER)

    @functools.cache
    def numbers(temperature):
        logits = TOY_LOGITS / temperature  # (V,)
        return torch.softmax(logits.double(), -1), {m: frequencies(m, logits) for m in TWINS}

    def update(temperature):
        probs, freqs = numbers(temperature)
        result = {}
        for module in TWINS:
            for bar, height in zip(bars[module], freqs[module].tolist(), strict=True):
                bar.set_height(height)
            dots[module].set_ydata(probs.tolist())
            result[module.__name__] = 0.5 * (freqs[module] - probs).abs().sum().item()
            texts[module].set_text(f"T = {temperature:.2f}\nTV distance {result[module.__name__]:.3f}")
        return result

    return fig, update


def spread_figure(group):
    """notebook 01 §3: advantages of the group group(spread) (a list of rewards), buggy | fixed; a NaN drawn
    as a cross at 0. update(spread) returns each twin's advantages as a list."""
    fig, axes = buggy_vs_fixed("advantages of a group of 4 rewards around 0.5", figsize=(7.0, 2.6))
    G = len(group(0.0))
    bars, crosses, texts = {}, {}, {}
    for ax, module, color in zip(axes, TWINS, (BUGGY, FIXED), strict=True):
        bars[module] = animated(ax.bar(range(G), [0.0] * G, color=color, alpha=0.7))
        (crosses[module],) = animated(ax.plot([], [], "x", color=BUGGY, ms=12, mew=3))
        texts[module] = corner_text(ax)
        ax.axhline(0, color=REFERENCE, lw=0.8)
        ax.set_xticks(range(G))
        ax.set_xlabel("sample i in the group (x: NaN)")
    axes[0].set(ylim=(-2, 2), ylabel="advantage A_i")

    def update(spread):
        rewards = group(spread)
        result = {}
        for module in TWINS:
            adv = module.group_advantage(rewards)  # (G,)
            finite = adv.isfinite()
            for bar, a in zip(bars[module], torch.where(finite, adv, 0.0).tolist(), strict=True):
                bar.set_height(a)
            nan_at = torch.nonzero(~finite).flatten().tolist()
            crosses[module].set_data(nan_at, [0.0] * len(nan_at))
            texts[module].set_text(f"spread {spread:.2f}, {len(nan_at)} NaN")
            result[module.__name__] = adv.tolist()
        return result

    return fig, update


def masked_mean_figure(estimates, paddings: dict, *, width: int = 8):
    """notebook 01 §6: estimates of a masked mean against the fraction of masked tokens (all width + 1 fractions
    of a width-token row), the current fraction marked; non-finite estimates drawn as crosses on the top edge.
    estimates(masked_fraction, padding value) -> {'truth': .., naive: .., B5: .., fixed: ..} in this order;
    paddings: label -> padding value. update(masked_fraction, padding label) returns the estimates there."""
    fractions = [k / width for k in range(width + 1)]
    table = functools.cache(lambda label: [estimates(f, paddings[label]) for f in fractions])
    truth, naive, b5, fixed = table(next(iter(paddings)))[0]
    styles = {naive: ("orange", ":"), b5: (BUGGY, "-"), fixed: (FIXED, "-")}
    fig, axes = buggy_vs_fixed(f"mean of per-token values 1..{width}, the last tokens masked", figsize=(7.0, 2.8))
    top = {naive: 4.95, b5: 5.4, fixed: 5.4}  # where a non-finite estimate is drawn
    lines, crosses, markers, texts = {}, {}, [], []
    for ax, panel in zip(axes, ((naive, b5), (fixed,)), strict=True):
        ax.plot(fractions, [row[truth] for row in table(next(iter(paddings)))], "--", color=REFERENCE,
                label="truth (hand)")  # the truth does not depend on the padding
        for key in panel:
            color, ls = styles[key]
            (lines[key],) = animated(ax.plot(fractions, [0.0] * len(fractions), ls, marker="o", ms=3, color=color,
                                             label=key.split(" ")[0] if key != naive else "naive mean"))
            (crosses[key],) = animated(ax.plot([], [], "x", color=color, ms=8, mew=2))
        markers.append(animated(ax.axvline(0.0, color="k", lw=0.8)))
        texts.append(corner_text(ax, 0.97, 0.62, "right"))
        ax.set(xlabel="fraction of masked tokens (x: NaN or -inf)", ylim=(-0.3, 5.7))
        ax.legend(fontsize="small", loc="lower left").set_zorder(LEGEND_ZORDER)

    def update(masked_fraction, padding):
        for key, line in lines.items():
            ys = [row[key] for row in table(padding)]
            line.set_ydata([y if math.isfinite(y) else math.nan for y in ys])
            bad = [f for f, y in zip(fractions, ys, strict=True) if not math.isfinite(y)]
            crosses[key].set_data(bad, [top[key]] * len(bad))
        for marker, text in zip(markers, texts, strict=True):
            marker.set_xdata([masked_fraction, masked_fraction])
            text.set_text(f"padding holds {padding}")
        return estimates(masked_fraction, paddings[padding])

    return fig, update


# ----------------------------------------------------------------------------------------------
# Ablation: the fixed trainer, the buggy one, and the fixed one with each single bug switched on

ABLATION_RUNS = ["fixed", "buggy", *(b for b in BUG_IDS if b not in PLUMBING_IDS)]
"""notebook 01's runs (notebook 08 runs the LM-plumbing bugs)"""


def with_exact_kl(module):
    """A wrap factory for workbook.swap.fixed_with: module.rollout that also logs stats["exact_kl"], the exact
    KL(pi || pi_ref) of the two sampling distributions softmax(logits / T) (summed over the vocabulary, so without
    sampling noise) averaged over the batch's generated positions, at the policy that sampled the batch. It is
    scored with grpo_fixed's functions whatever bug the module carries, and draws nothing: the run is unchanged."""
    rollout = module.rollout

    @torch.no_grad()
    def rollout_with_exact_kl(policy, ref_policy, tokenizer, task, cfg, generator):
        batch, stats = rollout(policy, ref_policy, tokenizer, task, cfg, generator)
        args = (batch["prompt_ids"], batch["prompt_mask"], batch["completions"], batch["mask"])
        logp = torch.log_softmax(grpo_fixed.completion_logits(policy, *args) / cfg.temperature, -1)  # (N, T, V)
        logq = torch.log_softmax(grpo_fixed.completion_logits(ref_policy, *args) / cfg.temperature, -1)  # (N, T, V)
        per_position = (logp.exp() * (logp - logq)).sum(-1)  # (N, T)
        stats["exact_kl"] = grpo_fixed.masked_mean(per_position, batch["mask"]).item()
        return batch, stats

    return rollout_with_exact_kl


def trainer(label: str, exact_kl: bool = False):
    """The module a run label stands for; with exact_kl, a copy of it whose rollout also logs stats["exact_kl"]
    (with_exact_kl; not for "buggy", which is not a copy of grpo_fixed)."""
    if not exact_kl:
        return {"fixed": grpo_fixed, "buggy": grpo_buggy}.get(label) or hybrid(label)
    if label == "buggy":
        raise ValueError("exact_kl needs a copy of grpo_fixed: 'fixed' or a bug id")
    sites = {} if label == "fixed" else {bug(label).function: getattr(grpo_buggy, bug(label).function)}
    return fixed_with(f"{label}_exact_kl", wrap={"rollout": with_exact_kl}, **sites)


def first_failures(history, cfg) -> dict:
    """grpo_fixed.HEALTH_CHECKS that fail at some iteration -> the first iteration each fails."""
    first = {}
    for stats in history:
        for name in grpo_fixed.check_health(stats, cfg):
            first.setdefault(name, stats["iteration"])
    return first


EXACT_KL = ("fixed", "B8")
"""the runs whose rollouts also log stats["exact_kl"] (notebook 01 §13 compares the two)"""


@functools.cache
def _train(label: str, seed: int, overrides: tuple, exact_kl: bool) -> tuple:
    steps = grpo_fixed.make_config(**dict(overrides)).steps
    return tuple(trainer(label, exact_kl).train(seed=seed, on_iteration=iterations(label, steps), **dict(overrides)))


def ablation(seed: int = 0, exact_kl: tuple[str, ...] = EXACT_KL, step=None, labels=ABLATION_RUNS,
             **overrides) -> dict:
    """Train every run of `labels` (default ABLATION_RUNS) with the same seed and overrides; the runs labelled in
    exact_kl also log stats["exact_kl"] (trainer(label, exact_kl=True)); step(label), if given, is called as each
    run starts (a progress line). Each run is computed once per (label, seed, overrides, exact_kl) in this process,
    so the notebook's first figure and its §13 share their runs. -> label -> history (lists of stats dicts; do
    not mutate them)"""
    key = tuple(sorted(overrides.items()))
    return each(labels, lambda label: list(_train(label, seed, key, label in exact_kl)), step)


def ablation_bars(ax, rewards: dict, random_reward: float):
    """Bar chart of final reward per run label, fixed and buggy coloured, a line at the fixed run."""
    labels = list(rewards)
    colors = [FIXED if k == "fixed" else BUGGY if k == "buggy" else "#999999" for k in labels]
    ax.bar(labels, [rewards[k] for k in labels], color=colors)
    ax.axhline(rewards["fixed"], color=FIXED, ls="--", lw=1, label="fixed")
    ax.axhline(random_reward, color=REFERENCE, ls=":", lw=1, label="first iteration (the SFT model)")
    ax.set_ylabel("final reward (mean of last 10 iterations)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize="small", loc="upper right")
    return ax
