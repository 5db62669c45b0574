"""Helpers for notebook 01 (find the silent bugs with tiny inputs): a tensor describer, a tiny rollout,
a hand-checkable toy policy, the three slider figures, and the single-bug ablation."""

from __future__ import annotations

import copy
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn

import grpo_buggy
import grpo_fixed
from workbook.catalog import BUG_IDS, hybrid
from workbook.plots import BUGGY, FIXED, REFERENCE, buggy_vs_fixed

# ----------------------------------------------------------------------------------------------
# The debugger's first pass


def describe(name: str, tensor: torch.Tensor) -> str:
    """One log line: shape, dtype, min / max / mean over the finite entries, count of non-finite ones."""
    values = tensor.double()
    finite = values[values.isfinite()]
    stats = f"min {finite.min():+8.3f} max {finite.max():+8.3f} mean {finite.mean():+8.3f}" if finite.numel() else ""
    return (f"{name:17s} {str(tuple(tensor.shape)):8s} {str(tensor.dtype).removeprefix('torch.'):8s} "
            f"{stats:44s} nonfinite {int((~values.isfinite()).sum())}")


def tiny_rollout(module, *, seed: int = 0, **overrides):
    """One rollout batch of `module` on EchoTask with a fresh seeded TinyPolicy.
    -> (batch, stats, policy, cfg, generator); cfg overrides e.g. prompts_per_batch=2, group_size=4."""
    cfg = module.make_config(**overrides)
    task = module.EchoTask()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    policy = module.TinyPolicy(task.vocab_size, cfg.hidden, cfg.dropout)
    ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)
    batch, stats = module.rollout(policy, ref_policy, task, cfg, generator)
    return batch, stats, policy, cfg, generator


class NextTokenPolicy(nn.Module):
    """A hand-checkable 'policy': at every position it is sure the next token is (current + 1) mod V.

    logits[n, l] = confidence * one_hot((tokens[n, l] + 1) mod V)   (N, L) -> (N, L, V)
    The BOS id is V, so after BOS it predicts token 1 (= (V + 1) mod V).
    """

    def __init__(self, vocab_size: int = 6, confidence: float = 10.0):
        super().__init__()
        self.bos_id, self.vocab_size, self.confidence = vocab_size, vocab_size, confidence

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.confidence * nn.functional.one_hot((tokens + 1) % self.vocab_size, self.vocab_size).float()


# ----------------------------------------------------------------------------------------------
# Slider figures (each redraw: two small axes, no training)

TOY_LOGITS = torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0])
"""the 5 logits of the sampling probe"""


def sampling_frequencies(module, logits: torch.Tensor, n: int = 20000, seed: int = 0) -> torch.Tensor:
    """Empirical frequency of each token id in n draws of module.sample_from_logits. (V,)"""
    draws = module.sample_from_logits(logits, n, generator=torch.Generator().manual_seed(seed))  # (n,)
    return torch.bincount(draws, minlength=logits.shape[-1]).double() / n


def draw_sampling(temperature: float) -> dict:
    """Frequencies of 20000 draws from logits / T against softmax(logits / T), buggy vs fixed.
    Returns the total-variation distance 0.5 * sum |freq - p| of each twin."""
    logits = TOY_LOGITS / temperature  # (V,)
    probs = torch.softmax(logits.double(), -1)  # (V,)
    fig, axes = buggy_vs_fixed(f"sampling from logits [2, 1, 0, -1, -2] / T,  T = {temperature:.2f}", figsize=(8, 2.8))
    result = {}
    for ax, module, color in zip(axes, (grpo_buggy, grpo_fixed), (BUGGY, FIXED), strict=True):
        freq = sampling_frequencies(module, logits)
        ax.bar(range(5), freq, color=color, alpha=0.7, label="sampled frequency")
        ax.plot(range(5), probs, "o", color=REFERENCE, label="softmax(logits / T)")
        result[module.__name__] = 0.5 * (freq - probs).abs().sum().item()
        ax.set_xlabel(f"token id   (TV distance {result[module.__name__]:.3f})")
    axes[0].set_ylabel("probability")
    axes[0].legend(fontsize="small")
    axes[0].set_ylim(0, 1)
    plt.show()
    return result


def spread_group(spread: float) -> list[float]:
    """A group of 4 rewards around 0.5 whose max - min is `spread`."""
    return [0.5 - spread / 2, 0.5 - spread / 6, 0.5 + spread / 6, 0.5 + spread / 2]


def draw_group_spread(spread: float) -> dict:
    """Advantages of the group spread_group(spread), buggy vs fixed; NaN drawn as a red cross."""
    rewards = spread_group(spread)
    fig, axes = buggy_vs_fixed(f"advantages of rewards {[round(r, 3) for r in rewards]}", figsize=(8, 2.8))
    result = {}
    for ax, module, color in zip(axes, (grpo_buggy, grpo_fixed), (BUGGY, FIXED), strict=True):
        adv = module.group_advantage(rewards)  # (G,)
        finite = adv.isfinite()
        ax.bar(range(4), torch.where(finite, adv, 0.0), color=color, alpha=0.7)
        for i in torch.nonzero(~finite).flatten().tolist():
            ax.plot(i, 0, "x", color=BUGGY, ms=12, mew=3)
            ax.text(i, 0.2, "NaN", color=BUGGY, ha="center")
        ax.axhline(0, color=REFERENCE, lw=0.8)
        ax.set_xlabel("sample i in the group")
        result[module.__name__] = adv.tolist()
    axes[0].set_ylabel("advantage A_i")
    axes[0].set_ylim(-2, 2)
    plt.show()
    return result


PADDING = {"-inf (log of an underflowed softmax)": -math.inf, "0.0 (finite garbage)": 0.0}
"""what the masked positions of the slider's batch hold"""


def padded_batch(masked_fraction: float, padding: float, rows: int = 4, width: int = 8):
    """Per-token values (rows, width) = 1, 2, 3, ... along each row, the last round(f * width) tokens of
    every row masked and overwritten with `padding`. -> values (rows, width), mask (rows, width)."""
    n_real = round((1 - masked_fraction) * width)
    mask = (torch.arange(width) < n_real).expand(rows, width)  # (rows, width)
    values = torch.arange(1, width + 1, dtype=torch.float32).expand(rows, width)  # (rows, width)
    return torch.where(mask, values, torch.tensor(padding)), mask


def masked_estimates(masked_fraction: float, padding: float) -> dict:
    """Three estimates of the mean over real tokens, and the hand-calculated truth."""
    values, mask = padded_batch(masked_fraction, padding)
    real = values[mask]
    return {
        "truth": real.mean().item() if real.numel() else 0.0,
        "naive values.mean()": values.mean().item(),
        "B5 (values*mask).sum()/mask.sum()": grpo_buggy.masked_mean(values, mask).item(),
        "fixed masked_mean": grpo_fixed.masked_mean(values, mask).item(),
    }


def draw_masked_mean(masked_fraction: float, padding: str) -> dict:
    """Estimates against the fraction of masked tokens (all 9 fractions of an 8-token row), current one
    marked; non-finite estimates drawn as crosses on the top edge."""
    fractions = [k / 8 for k in range(9)]
    table = [masked_estimates(f, PADDING[padding]) for f in fractions]
    fig, axes = buggy_vs_fixed(f"mean of per-token values 1..8 (masked positions hold {padding.split()[0]})",
                               figsize=(8, 3.0))
    styles = {"naive values.mean()": ("orange", ":"), "B5 (values*mask).sum()/mask.sum()": (BUGGY, "-"),
              "fixed masked_mean": (FIXED, "-")}
    panels = (["naive values.mean()", "B5 (values*mask).sum()/mask.sum()"], ["fixed masked_mean"])
    for ax, keys in zip(axes, panels, strict=True):
        ax.plot(fractions, [row["truth"] for row in table], "--", color=REFERENCE, label="truth (hand)")
        for key in keys:
            color, ls = styles[key]
            ys = [row[key] for row in table]
            ax.plot(fractions, [y if math.isfinite(y) else math.nan for y in ys], ls, marker="o", ms=3, color=color,
                    label=key)
            bad = [f for f, y in zip(fractions, ys, strict=True) if not math.isfinite(y)]
            ax.plot(bad, [5.4] * len(bad), "x", color=color, ms=8, mew=2)
        ax.axvline(masked_fraction, color="k", lw=0.8)
        ax.text(0.0, 5.1, "x = NaN or -inf", fontsize="small")
        ax.set_xlabel("fraction of masked tokens")
        ax.set_ylim(-0.3, 5.7)
        ax.legend(fontsize="x-small", loc="lower left")
    plt.show()
    return masked_estimates(masked_fraction, PADDING[padding])


# ----------------------------------------------------------------------------------------------
# Ablation: the fixed trainer, the buggy one, and the fixed one with each single bug switched on

ABLATION_RUNS = ["fixed", "buggy", *BUG_IDS]


def trainer(label: str):
    """The module a run label stands for."""
    return {"fixed": grpo_fixed, "buggy": grpo_buggy}.get(label) or hybrid(label)


def final_reward(history) -> float:
    """Mean reward of the last 10 iterations (grpo_fixed.summarize_run's final_reward)."""
    return grpo_fixed.summarize_run(history, 0.0)["final_reward"]


def first_failures(history, cfg) -> dict:
    """grpo_fixed.HEALTH_CHECKS that fail at some iteration -> the first iteration each fails."""
    first = {}
    for stats in history:
        for name in grpo_fixed.check_health(stats, cfg):
            first.setdefault(name, stats["iteration"])
    return first


def ablation(seed: int = 0, **overrides) -> dict:
    """Train every run of ABLATION_RUNS with the same seed and overrides. -> label -> history"""
    return {label: trainer(label).train(seed=seed, **overrides) for label in ABLATION_RUNS}


def ablation_bars(ax, rewards: dict, random_reward: float):
    """Bar chart of final reward per run label, fixed and buggy coloured, a line at the fixed run."""
    labels = list(rewards)
    colors = [FIXED if k == "fixed" else BUGGY if k == "buggy" else "#999999" for k in labels]
    ax.bar(labels, [rewards[k] for k in labels], color=colors)
    ax.axhline(rewards["fixed"], color=FIXED, ls="--", lw=1, label="fixed")
    ax.axhline(random_reward, color=REFERENCE, ls=":", lw=1, label="first iteration (random policy)")
    ax.set_ylabel("final reward (mean of last 10 iterations)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize="small", loc="upper right")
    return ax
