"""Machinery for notebook 06 (GRPO variants): run a variant through its own train(), record and cache the
run.

A variant is `swap.fixed_with(label, wrap=..., **functions)`: a fresh copy of grpo_fixed with one or two
functions replaced, optionally with a wrapper around one of the copy's own functions (a rollout that adds a
KL penalty to the rewards, masks truncated completions, or resamples groups). The code each variant teaches
(the equation) lives in the notebook; this module only runs, records and caches.

    run = train_variant("dr_grpo", task, functions={"grpo_loss": dr_grpo_loss}, steps=20)  # cached by its inputs
    run = train_variant("kl_reward", task, wrap={"rollout": kl_in_reward(0.1)})  # wrap: factory(module) -> fn

Every run records, per iteration, the trainer's own stats dict (`run.history`) and the sampled
completions' rewards, lengths and truncation flags (`run.samples`), plus whatever a `probe(module,
policy, batch, cfg) -> dict` returns after each update (`run.probes`). Lengths and truncation are read off
the completion tokens (EOS = the tokenizer's eos_token_id), not off the decoded text: a fresh TinyLM also
samples PAD and BOS, which decode to nothing, so a text can look shorter than the completion that made it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

import grpo_fixed
from workbook.progress import iterations
from workbook.swap import fixed_with
from workbook.tasks import EchoTask


def completion_lengths(completions, eos_id: int):
    """Generated tokens per completion, EOS included; max_completion_length when there is no EOS. (N,)"""
    is_eos = completions == eos_id  # (N, T)
    first = torch.where(is_eos.any(dim=1), is_eos.float().argmax(dim=1), completions.shape[1] - 1)  # (N,)
    return first + 1


def truncated(completions, eos_id: int):
    """True where a completion hit the length limit without an EOS. (N,) bool"""
    return ~(completions == eos_id).any(dim=1)


@dataclass
class Run:
    """One training run of a variant: the trainer's stats per iteration, the sampled completions'
    rewards / lengths / truncation flags per iteration, and the probe's dict per iteration."""

    history: list
    samples: list = field(default_factory=list)
    probes: list = field(default_factory=list)

    def stat(self, key):
        """history[i][key] for every iteration."""
        return [s[key] for s in self.history]

    def probe(self, key):
        """probes[i][key] for every iteration."""
        return [p[key] for p in self.probes]

    def sample_mean(self, key, where=None):
        """Per iteration, the mean of samples[key] over completions where `where(sample) -> (N,) bool`
        holds (nan when none does)."""
        out = []
        for s in self.samples:
            values = s[key].float()
            keep = torch.ones_like(values, dtype=torch.bool) if where is None else where(s)
            out.append(values[keep].mean().item() if keep.any() else math.nan)
        return out


def _recording(module, run: Run, probe):
    """Wrap module.rollout and module.update_policy (whatever they are by now) so that each
    iteration appends to run.samples and, with a probe, to run.probes."""
    rollout, update_policy = module.rollout, module.update_policy

    def rollout_spy(policy, ref_policy, tokenizer, task, cfg, generator):
        batch, stats = rollout(policy, ref_policy, tokenizer, task, cfg, generator)
        completions = batch["completions"]  # (N, T)
        run.samples.append(dict(reward=batch["rewards"].clone(),
                                length=completion_lengths(completions, tokenizer.eos_token_id),
                                truncated=truncated(completions, tokenizer.eos_token_id)))
        return batch, stats

    def update_spy(policy, optimizer, batch, cfg, generator):
        records = update_policy(policy, optimizer, batch, cfg, generator)
        if probe is not None:
            with torch.no_grad():
                run.probes.append(probe(module, policy, batch, cfg))
        return records

    module.rollout, module.update_policy = rollout_spy, update_spy


_RUNS: dict = {}


def _key_of(label, functions, wrap, task, seed, cfg, probe):
    """What a cached run depends on: the label (which names the variant and its parameters), the code
    of every replacement and wrapper (so an edited cell never returns a stale run), the task's class
    and attributes, the seed, the full config and the probe's code."""
    code = tuple((site, fn.__code__) for site, fn in sorted(functions.items()))
    wrapped = tuple((site, factory.__code__) for site, factory in sorted((wrap or {}).items()))
    task_key = (type(task).__qualname__, tuple(sorted((k, repr(v)) for k, v in vars(task).items())))
    return (label, code, wrapped, task_key, seed, cfg, None if probe is None else probe.__code__)


def train_variant(label: str, task=None, *, seed: int = 0, wrap: dict | None = None, probe=None,
                  functions: dict | None = None, **overrides) -> Run:
    """Build the variant (swap.fixed_with(label, wrap=wrap, **functions)), train it on `task` (default
    workbook.tasks.EchoTask) with `overrides`, and record it (see Run). Cached: the same inputs return the same
    Run object without training.

    `functions` maps twin function names to replacements (a dict, so that config overrides and
    function names cannot collide)."""
    functions = functions or {}
    task = EchoTask() if task is None else task
    cfg = grpo_fixed.make_config(**overrides)  # validates; a frozen dataclass, hashable
    key = _key_of(label, functions, wrap, task, seed, cfg, probe)
    if key in _RUNS:
        return _RUNS[key]
    module = fixed_with(label, wrap=wrap, **functions)
    run = Run(history=[])
    _recording(module, run, probe)
    run.history = module.train(task, seed=seed, on_iteration=iterations(f"{label} on {type(task).__name__}", cfg.steps),
                               **overrides)
    _RUNS[key] = run
    return run


def cached_runs() -> int:
    """How many distinct runs the cache holds (a notebook check that a slider replays nothing)."""
    return len(_RUNS)


# ----------------------------------------------------------------------------------------------
# A probe shared by several runs (so one cached run serves several sections)


def log_ratio_spread(module, policy, batch, cfg):
    """After an update, the log-ratios the next rollout's first step would replace: log(pi / pi_old) per
    token and its mean per completion (log s, GSPO's sequence ratio). -> their stds, and the fraction of
    tokens / completions whose ratio is outside [1 - clip, 1 + clip]."""
    logp = module.policy_logprobs(policy, batch["prompt_ids"], batch["prompt_mask"], batch["completions"],
                                  batch["mask"], cfg.temperature)  # (N, T)
    mask = batch["mask"]
    log_ratio = torch.where(mask, logp - batch["old_logprobs"], 0.0)  # (N, T)
    token_log = log_ratio[mask]  # (n_tokens,)
    seq_log = log_ratio.sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # (N,)
    outside = lambda x: ((x.exp() - 1).abs() > cfg.clip).float().mean().item()  # noqa: E731
    return {"token_std": token_log.std().item(), "seq_std": seq_log.std().item(),
            "token_out": outside(token_log), "seq_out": outside(seq_log)}


# ----------------------------------------------------------------------------------------------
# A recording wrapper for a variant whose upper clip differs from cfg.clip (notebook 06 §3)


def upper_clip_record(clip_high: float):
    """A wrap factory for `inner_step_record`: the logged clip_frac_pos counts the A > 0 tokens past the
    variant's own 1 + clip_high, not past 1 + cfg.clip (the twin's record knows only cfg.clip). The lower side
    (clip_frac_neg) and everything else stay the twin's. Recording only: the run itself does not change.

        run = train_variant("clip_high_0.28", task, functions={"grpo_loss": loss_with_clip_high_028},
                            wrap={"inner_step_record": upper_clip_record(0.28)})"""

    def factory(module):
        base = module.inner_step_record

        def inner_step_record(logprobs, old_logprobs, adv, mask, clip, kl, loss, grad_norm):
            record = base(logprobs, old_logprobs, adv, mask, clip, kl, loss, grad_norm)
            upper = base(logprobs, old_logprobs, adv, mask, clip_high, kl, loss, grad_norm)
            record["clipped_pos"] = upper["clipped_pos"]
            return record

        return inner_step_record

    return factory
