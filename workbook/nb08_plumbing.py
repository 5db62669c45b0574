"""Machinery for notebook 08 (find the bugs, part 2: the LM plumbing, B12-B17): the tiny inputs the catalog's
level-2 probes use, built the same way; a sampler-then-trainer runner for one prompt; the drawing helpers of the
notebook's figures; a rollout wrapper that also logs the reward of the text up to the first EOS; and the short
training runs of its last section, each computed once. The code the notebook
teaches (position ids from the attention mask, the EOS-inclusive mask, the repeat, the frozen copy, decoding up to
the EOS) lives in the notebook's cells.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import matplotlib.patches as patches
import torch

import grpo_buggy
import grpo_fixed
from workbook import nb01_bugs
from workbook.catalog import bug
from workbook.plots import BUGGY, REFERENCE, buggy_vs_fixed
from workbook.progress import each, iterations
from workbook.swap import fixed_with

PROBE_PROMPT = "12+3="
"""the prompt of the B12 and B13 probes (workbook.catalog), scored alone and behind PROBE_PADS PAD tokens"""
PROBE_PADS = 3
"""PAD tokens put on the left of the probe prompt"""


def left_padded(tokenizer, text: str, pad: int):
    """One prompt (BOS, then its characters) as a (1, P) row with `pad` PAD tokens on its left, and its attention
    mask (0 on the PAD tokens, 1 on the real ones). -> ids (1, pad + len(text) + 1), mask (same shape), long"""
    ids = tokenizer([text])["input_ids"]  # (1, P0)
    pads = torch.full((1, pad), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.cat([torch.zeros(1, pad, dtype=torch.long), torch.ones_like(ids)], dim=1)
    return torch.cat([pads, ids], dim=1), mask


class Draw(NamedTuple):
    """One prompt sampled by a module's generate and scored by the same module's policy_logprobs."""

    completions: torch.Tensor
    """(1, T) sampled token ids"""
    mask: torch.Tensor
    """(1, T) bool, True through the first EOS"""
    sampler_logprobs: torch.Tensor
    """(1, T) log-prob of each drawn token under the distribution it was drawn from"""
    trainer_logprobs: torch.Tensor
    """(1, T) the same tokens scored by the training forward (what old_logprobs are made of)"""


@torch.no_grad()
def sample_and_score(module, policy, tokenizer, text: str, pad: int, *, max_new_tokens: int = 4,
                     temperature: float = 0.8, seed: int = 0) -> Draw:
    """module.generate on `text` behind `pad` PAD tokens (a generator seeded with `seed`), then
    module.policy_logprobs of the drawn tokens: the two log-probs the logprob_gap statistic compares."""
    ids, mask = left_padded(tokenizer, text, pad)
    completions, cmask, sampler_logprobs, _ = module.generate(policy, tokenizer, ids, mask, max_new_tokens,
                                                              temperature, torch.Generator().manual_seed(seed))
    trainer_logprobs = module.policy_logprobs(policy, ids, mask, completions, cmask, temperature)
    return Draw(completions, cmask, sampler_logprobs, trainer_logprobs)


# ----------------------------------------------------------------------------------------------
# Drawing


def hybrid_vs_fixed(bug_id: str, title: str, *, figsize=(8.0, 2.6)):
    """workbook.plots.buggy_vs_fixed with the left axes titled after the single-bug hybrid it shows
    (`hybrid("B12")`), not after grpo_buggy. -> fig, (ax_hybrid, ax_fixed)"""
    fig, axes = buggy_vs_fixed(title, figsize=figsize)
    axes[0].set_title(f'hybrid("{bug_id}")', color=BUGGY)
    return fig, axes


def paired_bars(ax, labels, series: dict, colors: dict, *, width: float = 0.38):
    """Bars of two (or more) series side by side at each label: series name -> one value per label, drawn in the
    order given, each in its colour (colors: name -> colour; light grey when absent). -> {name: BarContainer}"""
    n = len(series)
    bars = {}
    for j, (name, values) in enumerate(series.items()):
        xs = [i + (j - (n - 1) / 2) * width for i in range(len(labels))]
        bars[name] = ax.bar(xs, list(values), width=width, color=colors.get(name, "#bbbbbb"), label=name)
    ax.set_xticks(range(len(labels)), labels)
    ax.axhline(0, color=REFERENCE, lw=0.8)
    return bars


def token_grid(ax, tokens, shaded, *, values=None, fmt: str = "{:+.2f}", color: str = "#1f77b4"):
    """A grid of token cells, one row per sequence: each cell shows its token (and, with values, a number under
    it); cells where `shaded` is True are filled with `color`, the others left white. tokens: rows of strings;
    shaded: (N, T) bool; values: (N, T) numbers or None. -> the number of shaded cells"""
    shaded = torch.as_tensor(shaded, dtype=torch.bool)
    N, T = shaded.shape
    for i, row in enumerate(tokens):
        for t, token in enumerate(row):
            filled = bool(shaded[i, t])
            ax.add_patch(_cell(t, i, color if filled else "white", 0.35 if filled else 1.0))
            label = token if values is None else f"{token}\n{fmt.format(float(values[i][t]))}"
            ax.text(t, i, label, ha="center", va="center", fontsize="small")
    ax.set(xlim=(-0.5, T - 0.5), ylim=(N - 0.5, -0.5), xticks=range(T), yticks=range(N))
    ax.set_aspect("equal")
    return int(shaded.sum())


def _cell(x, y, facecolor, alpha):
    """A unit square centred on (x, y)."""
    return patches.Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor=facecolor, alpha=alpha, edgecolor=REFERENCE)


def layout_strip(ax, prompts, advantages, group_size: int, colors: dict):
    """The rollout batch as a row of cells, one per sample, coloured by its prompt (colors: prompt -> colour), its
    advantage written in it, and a bracket under each group of group_size consecutive samples (the groups
    batch_advantages forms). -> the number of groups whose samples share one prompt"""
    N = len(prompts)
    for i, (prompt, adv) in enumerate(zip(prompts, advantages, strict=True)):
        ax.add_patch(_cell(i, 0, colors[prompt], 0.55))
        ax.text(i, 0, f"{prompt}\nA = {float(adv):+.2f}", ha="center", va="center", fontsize="small")
    pure = 0
    for start in range(0, N, group_size):
        group = prompts[start : start + group_size]
        pure += len(set(group)) == 1
        ax.plot([start - 0.4, start + group_size - 0.6], [0.62, 0.62], color=REFERENCE, lw=2)
        ax.text(start + (group_size - 1) / 2, 0.8, f"group {start // group_size}", ha="center", fontsize="small")
    ax.set(xlim=(-0.6, N - 0.4), ylim=(1.0, -0.6), xticks=[], yticks=[])
    return pure


# ----------------------------------------------------------------------------------------------
# The reward of what the policy wrote


def with_true_reward(module):
    """A wrap factory for workbook.swap.fixed_with: module.rollout that also logs stats["true_reward"], the task's
    mean reward of the text up to the first EOS (grpo_fixed.decode_completions of the batch's completions and mask),
    whatever the module's own decode_completions feeds its reward. Under B17 the logged reward scores the text past
    the EOS and true_reward scores the answer; in a correct trainer the two are equal. It draws nothing: the run is
    unchanged."""
    rollout = module.rollout

    @torch.no_grad()
    def rollout_with_true_reward(policy, ref_policy, tokenizer, task, cfg, generator):
        batch, stats = rollout(policy, ref_policy, tokenizer, task, cfg, generator)
        texts = grpo_fixed.decode_completions(tokenizer, batch["completions"], batch["mask"])
        stats["true_reward"] = torch.as_tensor(task.reward(batch["prompts"], texts), dtype=torch.float32).mean().item()
        return batch, stats

    return rollout_with_true_reward


def trainer_with_true_reward(label: str):
    """A copy of grpo_fixed ('fixed') or of its single-bug hybrid (a bug id) whose rollout also logs
    stats["true_reward"] (with_true_reward)."""
    sites = {} if label == "fixed" else {bug(label).function: getattr(grpo_buggy, bug(label).function)}
    return fixed_with(f"{label}_true_reward", wrap={"rollout": with_true_reward}, **sites)


# ----------------------------------------------------------------------------------------------
# Short training runs


@functools.cache
def _run(label: str, seed: int, overrides: tuple, true_reward: bool = False) -> tuple:
    module = trainer_with_true_reward(label) if true_reward else nb01_bugs.trainer(label)
    steps = grpo_fixed.make_config(**dict(overrides)).steps
    return tuple(module.train(seed=seed, on_iteration=iterations(label, steps), **dict(overrides)))


def short_runs(labels, seed: int = 0, *, true_reward=(), step=None, **overrides) -> dict:
    """label ('fixed', 'buggy' or a bug id) -> the history of its train(seed=seed, **overrides), each run computed
    once per (label, seed, overrides, true_reward) in this process; the labels in true_reward ('fixed' or bug ids)
    run with trainer_with_true_reward, so their stats also hold "true_reward" (the rest of the run is unchanged).
    step(label), if given, is called as each run starts (a progress line). The histories are lists of stats
    dicts; do not mutate them."""
    key = tuple(sorted(overrides.items()))
    return each(labels, lambda label: list(_run(label, seed, key, label in true_reward)), step)
