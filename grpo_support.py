"""What both twins import beside torch, as a hand-out imports its libraries: nothing here is the algorithm.

- STATS: one row per logged statistic (meaning, healthy range as numbers, why); the checks, the monitor and
  the notebooks read every range from it.
- The statistics code: one record per inner step, the rollout batch's statistics, an iteration's summary.
- Input validation of the public functions and of a task's output (clear ValueErrors on bad input).
- Config building (`build_config`: overrides checked against CONFIG_RULES) and the command line
  (`run_cli`: every Config field is a flag; `--json` prints one summary line).
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch


@dataclass(frozen=True)
class Stat:
    """One logged statistic: healthy when finite and lo <= value <= hi."""

    meaning: str
    lo: float
    hi: float
    why: str


CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
"""where the SFT checkpoints live (`make sft` rebuilds them), wherever a copy of a twin is run from"""

INF = math.inf
STATS = {
    "reward": Stat("mean reward of the iteration's samples", 0, 1, "the task's range; rises as the task is learned"),
    "reward_std": Stat("std of the rewards over the batch", 0, INF, "0 means no sample differs: nothing to learn"),
    "zero_var_groups": Stat("fraction of groups whose G rewards are all equal", 0, 0.9,
                            "such a group has zero advantages: no signal (near 1 when prompts are solved or too hard)"),
    "adv_nonfinite": Stat("advantages that are NaN or inf", 0, 0, "one NaN advantage poisons the whole update"),
    "adv_group_mean": Stat("max |mean advantage| within one prompt's group", 0, 1e-4,
                           "the group mean is the baseline: advantages sum to 0 within each group"),
    "logprob_gap": Stat("max |training log-prob - sampler log-prob| over sampled tokens", 0, 1e-4,
                        "training must score the tokens under the distribution that sampled them"),
    "logprob_gap_unpadded": Stat("logprob_gap over the rows whose prompt has no left padding", 0, 1e-4,
                                 "if only logprob_gap is off, padding is handled differently by sampler and "
                                 "trainer (attention mask, position ids)"),
    "ref_gap": Stat("max |ref log-prob - old log-prob| over sampled tokens", 1e-9, INF,
                    "exactly 0 only while the policy has not moved (iteration 0; every update zero or skipped so "
                    "far): once it has, the frozen reference stays behind"),
    "mixed_groups": Stat("fraction of groups whose G samples do not all share one prompt", 0, 0,
                         "a group's mean is a baseline only for samples of the same prompt"),
    "mask_eos_mismatch": Stat("completions whose mask does not end at their first EOS (or at T without one)", 0, 0,
                              "the mask must cover the EOS (it is a trained action) and nothing after it"),
    "text_mismatch": Stat("completions whose reward text differs from the decode of their masked tokens", 0, 0,
                          "the reward must score what the policy wrote up to its EOS, nothing after it"),
    "ratio_first_maxdev": Stat("max |ratio - 1| over tokens at the first inner step", 0, 1e-4,
                               "before any update on this batch, pi = pi_old"),
    "ratio_last_mean": Stat("mean ratio at the last inner step", 0.9, 1.1,
                            "near 1: the policy stayed near the one that sampled (healthy default runs, seeds "
                            "0-2: 0.96 to 1.02)"),
    "ratio_last_maxdev": Stat("max |ratio - 1| over tokens at the last inner step", 1e-9, INF,
                              "the updates moved the policy away from pi_old"),
    "clip_frac_pos": Stat("fraction of A > 0 tokens with ratio > 1 + clip, all inner steps", 0, 0.25,
                          "more means steps too big for the trust region (healthy default runs, seeds 0-2: median "
                          "1.3-1.4 %, max 12 %; typically reported for GRPO on LMs: a few % or less, and exactly 0 "
                          "with one optimizer step per rollout batch)"),
    "clip_frac_neg": Stat("fraction of A < 0 tokens with ratio < 1 - clip, all inner steps", 0, 0.25,
                          "more means steps too big for the trust region (healthy default runs, seeds 0-2: median "
                          "7.4-7.8 %, max 16 %, above A > 0's: these tokens have no ratio ceiling; typically reported "
                          "for GRPO on LMs: a few % or less)"),
    "kl": Stat("k3 estimate of KL(pi || pi_ref) per token, last inner step", -1e-6, INF,
               "each k3 term is >= 0 (rounding aside); a one-minibatch estimate, so noisy: watch the trend "
               "(healthy default runs, seeds 0-2: 95th percentile 0.33-0.41 nats; typically reported for GRPO on "
               "LMs with a KL term: 1e-3 to 1e-1)"),
    "entropy": Stat("mean per-token entropy of the sampling distribution (nats)", 0.01, INF,
                    "near 0 the policy samples one completion: exploration is over (fine once solved)"),
    "grad_norm": Stat("max pre-clip gradient norm over the inner steps", 0, 50,
                      "a spike means a bad batch (healthy default runs, seeds 0-2: median 2.6-2.9, at most 11)"),
    "loss": Stat("mean total loss over the inner steps", -INF, INF, "a non-finite loss skips the step"),
    "nonfinite_steps": Stat("inner steps skipped for a non-finite loss or gradient", 0, 0, "each is a lost update"),
    "completion_length": Stat("mean generated tokens per completion, EOS included", 1, INF, "task-dependent"),
}


@torch.no_grad()
def inner_step_record(logprobs, old_logprobs, adv, mask, clip, kl, loss, grad_norm):
    """One inner step: its ratios over unmasked tokens, and how many tokens of each sign of A were clipped."""
    mask = mask.bool()
    ratio = torch.exp(logprobs - old_logprobs)[mask]  # (n_tokens,)
    token_adv = adv[:, None].expand_as(mask)[mask]  # (n_tokens,)
    pos, neg = token_adv > 0, token_adv < 0
    return dict(ratio=ratio, clipped_pos=int((pos & (ratio > 1 + clip)).sum()), n_pos=int(pos.sum()),
                clipped_neg=int((neg & (ratio < 1 - clip)).sum()), n_neg=int(neg.sum()),
                kl=kl.item(), loss=loss.item(), grad_norm=grad_norm)


def mask_ends_at_eos(completions, mask, eos_id):
    """Per row: the mask is True from t = 0 without a gap and ends on the row's only masked EOS, or covers all T
    tokens and no EOS.
    completions, mask (N, T) -> (N,) bool."""
    N, T = mask.shape
    length = mask.sum(dim=1)  # (N,)
    unbroken = (mask == (torch.arange(T) < length[:, None])).all(dim=1)  # (N,)
    last = completions.gather(1, (length - 1).clamp(min=0)[:, None]).squeeze(1)  # (N,) last masked token
    eos_in_mask = ((completions == eos_id) & mask).sum(dim=1)  # (N,)
    ends_on_eos = (length > 0) & (last == eos_id) & (eos_in_mask == 1)
    runs_full = (length == T) & (eos_in_mask == 0)
    return unbroken & (ends_on_eos | runs_full)


@torch.no_grad()
def rollout_stats(batch, group_size, tokenizer):
    """Statistics of one rollout batch, grouped (B, G) prompt by prompt."""
    rewards = batch["rewards"].view(-1, group_size)  # (B, G)
    adv = batch["advantages"].view(-1, group_size)  # (B, G)
    mask = batch["mask"]  # (N, T)
    gap = (batch["old_logprobs"] - batch["sampler_logprobs"]).abs().masked_fill(~mask, 0)  # (N, T)
    unpadded = batch["prompt_mask"].bool().all(dim=1)  # (N,) rows without left padding
    groups = [batch["prompts"][i : i + group_size] for i in range(0, len(batch["prompts"]), group_size)]
    masked_texts = tokenizer.batch_decode(batch["completions"].masked_fill(~mask, tokenizer.pad_token_id),
                                          skip_special_tokens=True)
    return dict(
        reward=rewards.mean().item(),
        reward_std=rewards.std(unbiased=False).item(),
        zero_var_groups=(rewards == rewards[:, :1]).all(dim=1).float().mean().item(),
        adv_nonfinite=int((~adv.isfinite()).sum()),
        adv_group_mean=torch.where(adv.isfinite(), adv, 0.0).mean(dim=1).abs().max().item(),
        logprob_gap=gap.max().item(),
        logprob_gap_unpadded=gap[unpadded].max().item() if unpadded.any() else 0.0,
        ref_gap=(batch["ref_logprobs"] - batch["old_logprobs"]).abs().masked_fill(~mask, 0).max().item(),
        mixed_groups=sum(len(set(g)) > 1 for g in groups) / len(groups),
        mask_eos_mismatch=int((~mask_ends_at_eos(batch["completions"], mask, tokenizer.eos_token_id)).sum()),
        text_mismatch=sum(a != b for a, b in zip(batch["texts"], masked_texts, strict=True)),
        entropy=batch["entropy"][mask].mean().item(),
        completion_length=mask.float().sum(dim=1).mean().item(),
    )


def summarize_inner_steps(records):
    """The logged scalars of one iteration's inner steps."""
    first, last = records[0]["ratio"], records[-1]["ratio"]
    dev = lambda r: (r - 1).abs().max().item() if r.numel() else 0.0
    return dict(
        ratio_first_maxdev=dev(first),
        ratio_last_mean=last.mean().item() if last.numel() else 1.0,
        ratio_last_maxdev=dev(last),
        clip_frac_pos=sum(r["clipped_pos"] for r in records) / max(1, sum(r["n_pos"] for r in records)),
        clip_frac_neg=sum(r["clipped_neg"] for r in records) / max(1, sum(r["n_neg"] for r in records)),
        kl=records[-1]["kl"],
        grad_norm=max(r["grad_norm"] for r in records),
        loss=sum(r["loss"] for r in records) / len(records),
        nonfinite_steps=sum(not (math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"])) for r in records),
    )


def check_logits(logits, num_samples):
    if logits.dim() not in (1, 2) or logits.shape[-1] == 0:
        raise ValueError(f"logits must be (V,) or (N, V) with V >= 1, got shape {tuple(logits.shape)}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) or num_samples < 1:
        raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
    if not torch.is_floating_point(logits):
        raise ValueError(f"logits must be a floating-point tensor, got {logits.dtype}")
    if torch.isnan(logits).any() or (logits == math.inf).any():
        raise ValueError("logits contain NaN or +inf")
    if (logits == -math.inf).all(dim=-1).any():
        raise ValueError("a row of logits is all -inf: no token can be sampled")


def check_rewards(rewards, eps) -> torch.Tensor:
    """One group of rewards, a nonempty list of finite reals, -> (G,) float64; eps positive and finite."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (0 < eps < math.inf):
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")
    if isinstance(rewards, torch.Tensor):
        rewards = rewards.tolist()
    if not isinstance(rewards, (list, tuple)) or len(rewards) == 0:
        raise ValueError(f"rewards must be a nonempty list of numbers, got {rewards!r}")
    values = []
    for i, r in enumerate(rewards):
        if isinstance(r, bool) or not isinstance(r, numbers.Real):
            raise ValueError(f"rewards[{i}] must be a real number, got {type(r).__name__} {r!r}")
        try:
            value = float(r)
        except OverflowError:
            raise ValueError(f"rewards[{i}] = {r} is not representable in float64") from None
        if not math.isfinite(value):
            raise ValueError(f"rewards[{i}] must be finite, got {r!r}")
        if value == 0 and r != 0:
            raise ValueError(f"rewards[{i}] = {r} underflows to 0 in float64 (not representable)")
        values.append(value)
    return torch.tensor(values, dtype=torch.float64)


def check_loss_inputs(logprobs, old_logprobs, advantages, mask, clip) -> torch.Tensor:
    """Shapes (N, T), (N, T), (N,), (N, T) and a finite clip >= 0; -> mask as bool."""
    if not (0 <= clip < math.inf):
        raise ValueError(f"clip must be a finite number >= 0, got {clip!r}")
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape or logprobs.dim() != 2:
        raise ValueError(f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
                         f"mask {tuple(mask.shape)} must all be the same (N, T)")
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be (N,) = ({logprobs.shape[0]},), got {tuple(advantages.shape)}")
    return mask.bool()


def check_prompts(prompts, n) -> list[str]:
    """The task's prompts: a list of n strings (a clear error otherwise)."""
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or len(prompts) != n:
        raise ValueError(f"task.prompts must return a list of {n} strings, got {type(prompts).__name__} "
                         f"of length {len(prompts) if hasattr(prompts, '__len__') else '?'}")
    bad = [p for p in prompts if not isinstance(p, str)]
    if bad:
        raise ValueError(f"task.prompts must return strings, got {bad[:3]!r}")
    return list(prompts)


def check_task_rewards(rewards, n) -> torch.Tensor:
    """The task's rewards as a float32 (n,) tensor; a clear error for a wrong shape or non-finite values."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.shape != (n,):
        raise ValueError(f"task.reward must return shape ({n},), got {tuple(rewards.shape)}")
    if not rewards.isfinite().all():
        raise ValueError(f"task.reward returned non-finite values: {rewards[~rewards.isfinite()][:5].tolist()}")
    return rewards


CONFIG_RULES = {
    "steps": ("an int >= 0", lambda v, cfg: isinstance(v, int) and v >= 0),
    "prompts_per_batch": ("an int >= 1", lambda v, cfg: isinstance(v, int) and v >= 1),
    "group_size": ("an int >= 2 (a group of one is its own baseline: its advantage is always 0)",
                   lambda v, cfg: isinstance(v, int) and v >= 2),
    "inner_epochs": ("an int >= 1", lambda v, cfg: isinstance(v, int) and v >= 1),
    "minibatches": ("an int in [1, prompts_per_batch * group_size]",
                    lambda v, cfg: isinstance(v, int) and 1 <= v <= cfg.prompts_per_batch * cfg.group_size),
    "temperature": ("> 0 and finite", lambda v, cfg: 0 < v < math.inf),
    "lr": (">= 0 and finite", lambda v, cfg: 0 <= v < math.inf),
    "clip": (">= 0 and finite", lambda v, cfg: 0 <= v < math.inf),
    "beta": ("finite", lambda v, cfg: math.isfinite(v)),
    "adv_eps": ("> 0 and finite", lambda v, cfg: 0 < v < math.inf),
    "max_grad_norm": ("> 0", lambda v, cfg: v > 0),
    "dropout": ("in [0, 1)", lambda v, cfg: 0 <= v < 1),
}


def build_config(config_cls, **overrides):
    """config_cls() with overrides; an unknown name raises TypeError, a value CONFIG_RULES rejects ValueError."""
    known = {f.name for f in fields(config_cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unknown config option(s) {unknown}; known: {sorted(known)}")
    cfg = replace(config_cls(), **overrides)
    problems = [f"{name} must be {rule}, got {getattr(cfg, name)!r}"
                for name, (rule, ok) in CONFIG_RULES.items() if not ok(getattr(cfg, name), cfg)]
    if problems:
        raise ValueError("bad config: " + "; ".join(problems))
    return cfg


def summarize_run(history, seconds):
    """The command line's summary: final_reward is the mean reward over the last 10 iterations."""
    last = history[-10:]
    return dict(
        final_reward=sum(s["reward"] for s in last) / max(1, len(last)),
        steps=len(history),
        nan_losses=sum(not math.isfinite(s["loss"]) for s in history),
        seconds=round(seconds, 3),
    )


PROGRESS = ("reward", "loss", "kl", "entropy", "logprob_gap", "adv_nonfinite", "ratio_first_maxdev",
            "ratio_last_maxdev", "clip_frac_pos", "clip_frac_neg", "grad_norm")
"""the statistics of the progress line: the ones that tell a healthy run from a broken one"""


def progress_line(stats) -> str:
    return f"iter {stats['iteration']:4d}  " + "  ".join(f"{k} {stats[k]:.4g}" for k in PROGRESS)


def parse_value(text, default):
    """A command-line value parsed as the type of the Config field's default."""
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    try:
        return type(default)(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {type(default).__name__}, got {text!r}") from None


def parse_args(argv, make_config, description):
    """The twin's flags: --seed, --json and one --<field> per Config field, parsed as the field's type."""
    config_cls = type(make_config())
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON summary as the last line")
    for f in fields(config_cls):
        parser.add_argument(f"--{f.name}", type=lambda text, d=f.default: parse_value(text, d),
                            default=argparse.SUPPRESS, help=f"default {f.default}")
    args = parser.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in fields(config_cls) if hasattr(args, f.name)}
    if overrides.get("steps", 1) < 1:
        parser.error("--steps must be at least 1")
    try:
        make_config(**overrides)
    except ValueError as err:
        parser.error(str(err))
    return args, overrides


def run_cli(train, make_config, description, argv=None):
    """`python grpo_<twin>.py [--steps 70] [--seed 0] [--json] [--<any Config field> VALUE]`: train with a
    progress line every 10 iterations (and the last), then the summary (one JSON line with --json)."""
    args, overrides = parse_args(argv, make_config, description)
    torch.set_num_threads(1)  # tiny tensors: one thread is faster than two, and runs match the notebooks'
    steps = make_config(**overrides).steps

    def progress(stats):
        if not args.json and (stats["iteration"] % 10 == 0 or stats["iteration"] == steps - 1):
            print(progress_line(stats), flush=True)

    start = time.perf_counter()
    history = train(seed=args.seed, on_iteration=progress, **overrides)
    summary = summarize_run(history, time.perf_counter() - start)
    print(json.dumps(summary) if args.json else f"final reward {summary['final_reward']:.3f} "
          f"({summary['steps']} iterations, {summary['nan_losses']} non-finite losses, {summary['seconds']:.1f} s)")
    return summary
