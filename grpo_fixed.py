"""GRPO (Group Relative Policy Optimization) on a toy task, small enough to read in one sitting.

One iteration = one rollout batch:
  1. B prompts, each repeated G times; sample completions token by token until EOS.
  2. Score each completion with the task's reward; turn rewards into group-relative advantages
     A_i = (r_i - mean(r)) / (std(r) + eps) within each prompt's group of G.
  3. Cache old log-probs (behaviour policy) and reference log-probs, both under no_grad.
  4. Several inner updates on the clipped surrogate plus beta * KL(pi || pi_ref).

Run `python grpo_fixed.py --steps 80` (add `--json` for a machine-readable last line).
Paper: Shao et al. 2024, "DeepSeekMath", section 4.1 (GRPO).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import numbers
import sys
import time
from dataclasses import dataclass, fields, replace

import torch
import torch.nn as nn

log = logging.getLogger("grpo")


@dataclass(frozen=True)
class Config:
    steps: int = 80
    """rollout iterations (one rollout batch each)"""
    prompts_per_batch: int = 16
    """B: distinct prompts per rollout batch"""
    group_size: int = 8
    """G: completions sampled per prompt; the group baseline averages over them"""
    temperature: float = 0.8
    """sampling temperature; training log-probs must use the same one"""
    inner_epochs: int = 2
    """passes over each rollout batch (ratio drifts from 1 after the first inner step)"""
    minibatches: int = 2
    """minibatches per inner epoch"""
    lr: float = 3e-3
    """Adam learning rate"""
    clip: float = 0.2
    """PPO clip radius: ratio kept in [1 - clip, 1 + clip] (usually 0.1 to 0.3)"""
    beta: float = 0.02
    """weight of the KL penalty to the frozen reference policy (usually 0.0 to 0.1)"""
    adv_eps: float = 1e-8
    """epsilon in the advantage's std denominator; independent of clip"""
    max_grad_norm: float = 1.0
    """gradient clipping threshold on the global L2 norm"""
    hidden: int = 64
    """width of the tiny GRU policy"""
    dropout: float = 0.0
    """dropout in the policy head; nonzero makes ratio != 1 at the first inner step in train mode"""
    strict: bool = False
    """raise on a failed health check instead of logging a warning"""


# Every logged statistic: meaning, healthy range.
DIAGNOSTICS = {
    "reward": ("mean reward of this iteration's samples", "rises toward 1"),
    "reward_std": ("std of rewards over the batch", "> 0 while learning"),
    "zero_var_groups": ("fraction of groups whose rewards are all equal (no signal)", "< 0.9 early; -> 1 when solved"),
    "adv_nonfinite": ("advantages that are NaN or inf", "0"),
    "adv_group_mean": ("max |mean advantage| within a prompt's group", "~0 (< 1e-6)"),
    "logprob_gap": ("max |training log-prob - sampler log-prob| over sampled tokens", "~0 (< 1e-4)"),
    "ratio_first_maxdev": ("max |ratio - 1| over tokens at the first inner step", "0 (< 1e-5)"),
    "ratio_last_mean": ("mean ratio at the last inner step", "1 +- 0.1"),
    "ratio_last_maxdev": ("max |ratio - 1| at the last inner step", "> 0 after an update, < 1"),
    "clip_frac_pos": ("fraction of A>0 tokens clipped (ratio > 1+clip), all inner steps", "< 0.3"),
    "clip_frac_neg": ("fraction of A<0 tokens clipped (ratio < 1-clip), all inner steps", "< 0.3"),
    "kl": ("k3 estimate of KL(pi || pi_ref) per token", ">= 0, rising smoothly (<= log V here)"),
    "entropy": ("mean per-token entropy of the sampling distribution", "> 0.01 nats until solved"),
    "grad_norm": ("max pre-clip gradient norm over inner steps", "finite, < 100"),
    "loss": ("mean total loss over inner steps", "finite"),
    "nonfinite_steps": ("inner steps skipped for a non-finite loss or gradient", "0"),
    "completion_length": ("mean generated tokens per completion, EOS included", "task-dependent"),
}


# ----------------------------------------------------------------------------------------------
# Toy task (the Task contract: vocab_size, eos_id, prompt_length, max_completion_length,
# prompts(n, generator), reward(prompts, completions, mask) -> (n,) in [0, 1])


class EchoTask:
    """Echo the prompt, then stop: completion should be prompt tokens followed by EOS.

    Reward = fraction of the P + 1 target positions that match (EOS included), so it needs both
    conditioning on the prompt and EOS handling. A uniform random policy scores about 0.14.
    """

    vocab_size = 6
    eos_id = 0
    prompt_length = 2
    max_completion_length = 4

    def prompts(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.randint(1, self.vocab_size, (n, self.prompt_length), generator=generator)

    def reward(self, prompts, completions, mask) -> torch.Tensor:
        eos = torch.full_like(prompts[:, :1], self.eos_id)
        target = torch.cat([prompts, eos], dim=1)  # (n, P+1)
        width = target.shape[1]
        got = torch.where(mask[:, :width].bool(), completions[:, :width], -1)  # (n, P+1)
        return (got == target).float().mean(dim=1)  # (n,)


# ----------------------------------------------------------------------------------------------
# Tiny policy


class TinyPolicy(nn.Module):
    """Embedding -> GRU -> linear head. tokens (N, L) -> logits (N, L, V); position l predicts l+1.

    The vocabulary has one extra BOS token (id = task vocab_size) so an empty prompt still works.
    """

    def __init__(self, vocab_size: int, hidden: int = 64, dropout: float = 0.0):
        super().__init__()
        self.bos_id = vocab_size
        self.embed = nn.Embedding(vocab_size + 1, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embed(tokens))  # (N, L, H)
        return self.head(self.drop(h))  # (N, L, V)


# ----------------------------------------------------------------------------------------------
# The three public functions of the spec


def sample_from_logits(logits, num_samples: int = 1, *, generator=None):
    """Draw token ids from softmax(logits) with replacement.

    logits (V,) or (N, V) -> LongTensor (num_samples,) or (N, num_samples).
    p = softmax(logits) = exp(logits - logsumexp(logits)), stable for logits of any magnitude.
    """
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
    probs = torch.softmax(logits, dim=-1)  # FIX B1: multinomial needs probabilities, not raw logits
    return torch.multinomial(probs, num_samples, replacement=True, generator=generator)


def _rewards_tensor(rewards) -> torch.Tensor:
    """Validate one group of rewards: a nonempty list of finite reals -> (G,) float64."""
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


def group_advantage(rewards, eps: float = 1e-8):
    """Group-relative advantage of one prompt's G rewards.

    A_i = (r_i - mean(r)) / (std(r) + eps),  std = sqrt(mean((r - mean(r))^2))  (population std).
    Returns (G,) float64. A constant group returns exact zeros (it carries no learning signal).
    """
    r = _rewards_tensor(rewards)  # (G,)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (0 < eps < math.inf):
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")
    if bool((r == r[0]).all()):  # FIX B2: a constant group has std 0; return its exact zeros
        return torch.zeros_like(r)
    scale = r.abs().max()  # FIX B2: rescale to [-1, 1] so the mean and variance cannot overflow
    r = r / scale  # FIX B2: (same rescale)
    centered = r - r.mean()  # (G,)
    std = centered.pow(2).mean().sqrt()
    if math.isfinite(eps / scale):  # FIX B2: undo the rescale on eps, where it cannot overflow
        return centered / (std + eps / scale)  # FIX B2: eps > 0 keeps the division finite
    q = scale / eps  # FIX B2: tiny rewards, eps / scale = inf: divide through by eps / scale instead
    return (centered * q) / (std * q + 1)  # FIX B2: (same quantity, no overflow)


def _zero_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """values where mask else 0, so NaN/inf at masked positions reach neither loss nor gradient."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype))


def masked_mean(values, mask):
    """sum(values over unmasked) / number of unmasked; 0 (finite, differentiable) if all masked."""
    mask = mask.bool()
    total = _zero_masked(values, mask).sum()  # FIX B5: masked entries (even NaN/-inf) must not enter the sum
    return total / mask.sum().clamp(min=1)  # FIX B5: all-masked gives 0, not 0/0


def grpo_loss(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):
    """Clipped GRPO surrogate, token-level, masked mean.

    rho_t = exp(logp_t - logp_old_t);  L = -mean_t min(rho_t A, clip(rho_t, 1-c, 1+c) A)
    over unmasked tokens t. logprobs, old_logprobs, mask: (N, T); advantages: (N,) per sequence.
    """
    mask = mask.bool()
    if not (0 <= clip < math.inf):
        raise ValueError(f"clip must be a finite number >= 0, got {clip!r}")
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape or logprobs.dim() != 2:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
            f"mask {tuple(mask.shape)} must all be the same (N, T)"
        )
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be (N,) = ({logprobs.shape[0]},), got {tuple(advantages.shape)}")
    log_ratio = _zero_masked(logprobs - old_logprobs.detach(), mask)  # (N, T)
    # Clamped only where exp would overflow (e^88 in float32): a clipped token's zero gradient must not be 0 * inf.
    ratio = torch.exp(log_ratio.clamp(max=math.log(torch.finfo(log_ratio.dtype).max) - 1))  # (N, T)
    adv = advantages.detach().unsqueeze(1)  # (N, 1): one advantage per sequence, broadcast over tokens
    unclipped = ratio * adv  # (N, T)
    clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * adv  # FIX B4: clip ratio, then * A (A<0 flips sides)
    return -masked_mean(torch.min(unclipped, clipped), mask)


# ----------------------------------------------------------------------------------------------
# Log-probs, KL, advantages over a batch

LOGPROB_CHUNK = 1 << 19
"""logits elements per chunk (2 MB of float32, about an L2 cache): forward and backward go chunk by
chunk, so the only logits-sized tensor ever allocated is the gradient itself"""


def _chunks(logits, *aligned):
    """Aligned pieces of logits (..., T, V) and of tensors sharing its (..., T) dims, about LOGPROB_CHUNK
    elements each: whole rows (r, T, V) when a (T, V) slice fits, else (t, V) slices of one row."""
    lead = logits.dim() - 3  # leading dims before (T, V), flattened to one row dim R
    tensors = [t.flatten(0, lead) if lead >= 0 else t[None] for t in (logits, *aligned)]  # (R, T[, V]) each
    R, T, V = tensors[0].shape
    if T * V <= LOGPROB_CHUNK:
        return zip(*[t.split(max(1, LOGPROB_CHUNK // max(1, T * V))) for t in tensors], strict=True)
    step = max(1, LOGPROB_CHUNK // V)
    return zip(*[[piece for row in t.unbind(0) for piece in row.split(step)] for t in tensors], strict=True)


class _TokenLogprobs(torch.autograd.Function):
    """log pi(token) = log_softmax(logits)[token] (stable: log_softmax subtracts the row max);
    d/dlogits = g * (onehot(token) - softmax(logits)), written straight into one gradient tensor.
    Chunked log_softmax is about 2x faster than logsumexp on CPU (see bench/why_logsumexp.py)."""

    @staticmethod
    def forward(ctx, logits, tokens):
        out = logits.new_empty(tokens.shape)  # (..., T)
        for lg, tk, o in _chunks(logits, tokens, out):
            o.copy_(torch.log_softmax(lg, dim=-1).gather(-1, tk.unsqueeze(-1)).squeeze(-1))
        ctx.save_for_backward(logits, tokens)  # references: nothing logits-sized is stored
        return out

    @staticmethod
    def backward(ctx, grad_out):
        logits, tokens = ctx.saved_tensors
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)  # (..., T, V)
        for lg, tk, g, gl in _chunks(logits, tokens, grad_out, grad):
            torch.softmax(lg, dim=-1, out=gl).mul_(-g.unsqueeze(-1))  # -g * softmax, in place
            gl.scatter_add_(-1, tk.unsqueeze(-1), g.unsqueeze(-1))  # + g at the picked token
        return grad, None


def token_logprobs(logits, tokens):
    """log pi(token_t) = logits[t, token_t] - logsumexp_v logits[t, v] = log_softmax(logits)[t, token_t];
    logits (..., T, V) aligned to tokens (..., T) -> (..., T)."""
    return _TokenLogprobs.apply(logits, tokens)  # FIX B7: log(softmax) gives -inf


def completion_logits(policy, prompts, completions):
    """Logits aligned to completions: row t predicts completions[:, t]. -> (N, T, V)."""
    bos = torch.full((prompts.shape[0], 1), policy.bos_id, dtype=torch.long)  # (N, 1)
    tokens = torch.cat([bos, prompts, completions], dim=1)  # (N, 1+P+T)
    logits = policy(tokens)  # (N, 1+P+T, V)
    T = completions.shape[1]
    return logits[:, -T - 1 : -1]  # FIX B6: the logit at position l predicts token l+1, so shift by one


def policy_logprobs(policy, prompts, completions, temperature):
    """log pi_T(completion tokens) under the temperature-T distribution used for sampling. (N, T)"""
    logits = completion_logits(policy, prompts, completions) / temperature  # FIX B10: the sampled distribution
    return token_logprobs(logits, completions)


def kl_to_reference(logprobs, ref_logprobs, mask):
    """Masked mean of the k3 estimator of KL(pi || pi_ref) on tokens sampled from pi:
    k3 = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1  >= 0, = 0 when equal (Schulman 2020).
    """
    mask = mask.bool()
    log_ratio = _zero_masked(ref_logprobs.detach() - logprobs, mask)  # FIX B8: k3 needs log(pi_ref/pi)
    return masked_mean(log_ratio.exp() - log_ratio - 1, mask)


def batch_advantages(rewards, group_size: int, eps: float = 1e-8):
    """rewards (B*G,) laid out prompt-major ([p0]*G, [p1]*G, ...) -> advantages (B*G,) float32."""
    groups = rewards.view(-1, group_size)  # FIX B9: (B, G): each row is one prompt's group
    adv = torch.stack([group_advantage(g.tolist(), eps) for g in groups])  # (B, G)
    return adv.reshape(-1).float()  # (B*G,)


# ----------------------------------------------------------------------------------------------
# Rollout


@torch.no_grad()
def generate(policy, prompts, task, temperature, generator=None):
    """Sample completions token by token until EOS.

    -> completions (N, T) padded with EOS after the first EOS; mask (N, T) True up to and including
    the first EOS; sampler_logprobs (N, T), log-prob of each drawn token under the distribution it was
    drawn from; entropy (scalar) of that distribution, averaged over generated tokens.
    """
    N, T = prompts.shape[0], task.max_completion_length
    bos = torch.full((N, 1), policy.bos_id, dtype=torch.long)
    tokens = torch.cat([bos, prompts], dim=1)  # (N, 1+P)
    done = torch.zeros(N, dtype=torch.bool)
    masks, logprobs, entropies = [], [], []
    for _ in range(T):
        logits = policy(tokens)[:, -1] / temperature  # (N, V)
        nxt = sample_from_logits(logits, 1, generator=generator).squeeze(-1)  # (N,)
        nxt = torch.where(done, task.eos_id, nxt)
        masks.append(~done)
        logp = torch.log_softmax(logits, dim=-1)  # (N, V)
        logprobs.append(logp.gather(1, nxt[:, None]).squeeze(1))  # (N,)
        entropies.append(-(logp.exp() * logp).sum(-1))  # (N,)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        done = done | (nxt == task.eos_id)
    completions = tokens[:, 1 + prompts.shape[1] :]  # (N, T)
    mask = torch.stack(masks, dim=1)  # (N, T)
    entropy = masked_mean(torch.stack(entropies, dim=1), mask)
    return completions, mask, torch.stack(logprobs, dim=1), entropy


def checked_rewards(rewards, n):
    """The task's rewards as a float32 (n,) tensor; a clear error for a wrong shape or non-finite values."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.shape != (n,):
        raise ValueError(f"task.reward must return shape ({n},), got {tuple(rewards.shape)}")
    if not rewards.isfinite().all():
        raise ValueError(f"task.reward returned non-finite values: {rewards[~rewards.isfinite()][:5].tolist()}")
    return rewards


@torch.no_grad()
def rollout(policy, ref_policy, task, cfg, generator):
    """One rollout batch: B prompts x G samples, rewards, advantages, cached old and ref log-probs."""
    policy.eval()
    prompts = task.prompts(cfg.prompts_per_batch, generator)  # (B, P)
    if prompts.shape != (cfg.prompts_per_batch, task.prompt_length):
        raise ValueError(f"task.prompts must return ({cfg.prompts_per_batch}, {task.prompt_length}), "
                         f"got {tuple(prompts.shape)}")
    prompts = prompts.long().repeat_interleave(cfg.group_size, 0)  # (N, P), prompt-major: G copies each
    completions, mask, sampler_logprobs, entropy = generate(policy, prompts, task, cfg.temperature, generator)
    rewards = checked_rewards(task.reward(prompts, completions, mask), prompts.shape[0])  # (N,)
    batch = dict(prompts=prompts, completions=completions, mask=mask, rewards=rewards,
                 sampler_logprobs=sampler_logprobs)
    batch["advantages"] = batch_advantages(rewards, cfg.group_size, cfg.adv_eps)  # (N,)
    batch["old_logprobs"] = policy_logprobs(policy, prompts, completions, cfg.temperature)  # (N, T)
    batch["ref_logprobs"] = policy_logprobs(ref_policy, prompts, completions, cfg.temperature)  # (N, T)
    stats = rollout_stats(batch, cfg.group_size)
    stats["entropy"] = entropy.item()
    return batch, stats


def rollout_stats(batch, group_size):
    """Statistics of one rollout batch (see DIAGNOSTICS)."""
    rewards = batch["rewards"].view(-1, group_size)  # (B, G), the true grouping
    adv = batch["advantages"].view(-1, group_size)  # (B, G)
    finite_adv = torch.where(adv.isfinite(), adv, 0.0)
    return dict(
        reward=rewards.mean().item(),
        reward_std=rewards.std(unbiased=False).item(),
        zero_var_groups=(rewards == rewards[:, :1]).all(dim=1).float().mean().item(),
        adv_nonfinite=int((~adv.isfinite()).sum()),
        adv_group_mean=finite_adv.mean(dim=1).abs().max().item(),
        logprob_gap=(batch["old_logprobs"] - batch["sampler_logprobs"])[batch["mask"]].abs().max().item(),
        completion_length=batch["mask"].float().sum(dim=1).mean().item(),
    )


# ----------------------------------------------------------------------------------------------
# Update


def optimizer_step(policy, optimizer, loss, max_grad_norm):
    """Backprop, clip the global grad norm, step; skip the step if the loss or gradient is not
    finite. Returns the pre-clip grad norm."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)  # FIX B11: cap each update's size
    if torch.isfinite(loss) and torch.isfinite(grad_norm):
        optimizer.step()
    return grad_norm.item()


def update_policy(policy, optimizer, batch, cfg, generator):
    """cfg.inner_epochs passes of cfg.minibatches minibatches over one rollout batch.

    Loss per minibatch = grpo_loss(logp, logp_old, A, mask, clip) + beta * KL(pi || pi_ref).
    Returns per-inner-step records of ratio, clipping, KL, loss and grad norm.
    """
    policy.train()
    N = batch["rewards"].shape[0]
    records = []
    for _ in range(cfg.inner_epochs):
        order = torch.randperm(N, generator=generator)
        for idx in order.chunk(cfg.minibatches):
            mask = batch["mask"][idx]  # (n, T)
            logprobs = policy_logprobs(policy, batch["prompts"][idx], batch["completions"][idx], cfg.temperature)
            old_logprobs = batch["old_logprobs"][idx]  # FIX B3: cached once from the behaviour policy, never recomputed
            adv = batch["advantages"][idx]  # (n,)
            pg_loss = grpo_loss(logprobs, old_logprobs, adv, mask, cfg.clip)
            kl = kl_to_reference(logprobs, batch["ref_logprobs"][idx], mask)
            loss = pg_loss + cfg.beta * kl
            grad_norm = optimizer_step(policy, optimizer, loss, cfg.max_grad_norm)
            records.append(inner_step_record(logprobs, old_logprobs, adv, mask, cfg.clip, kl, loss, grad_norm))
    return records


@torch.no_grad()
def inner_step_record(logprobs, old_logprobs, adv, mask, clip, kl, loss, grad_norm):
    """What one inner step looked like: ratio over unmasked tokens, clipped fraction by sign of A."""
    mask = mask.bool()
    ratio = torch.exp(logprobs - old_logprobs)[mask]  # (n_tokens,)
    token_adv = adv[:, None].expand_as(mask)[mask]  # (n_tokens,)
    pos, neg = token_adv > 0, token_adv < 0
    return dict(
        ratio=ratio,
        clipped_pos=int((pos & (ratio > 1 + clip)).sum()),
        clipped_neg=int((neg & (ratio < 1 - clip)).sum()),
        n_pos=int(pos.sum()),
        n_neg=int(neg.sum()),
        kl=kl.item(),
        loss=loss.item(),
        grad_norm=grad_norm,
    )


def summarize_inner_steps(records):
    """Reduce per-inner-step records to the logged scalars (see DIAGNOSTICS)."""
    first, last = records[0]["ratio"], records[-1]["ratio"]
    dev = lambda r: (r - 1).abs().max().item() if r.numel() else 0.0  # noqa: E731
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


# ----------------------------------------------------------------------------------------------
# Health checks (seed 000, follow-up 3): predicates on one iteration's stats, True when healthy.


HEALTH_CHECKS = {
    "advantages finite": lambda s, cfg: s["adv_nonfinite"] == 0,
    "advantages centred per group": lambda s, cfg: s["adv_group_mean"] < 1e-4,
    "training log-probs match the sampler": lambda s, cfg: s["logprob_gap"] < 1e-4,
    "ratio == 1 at the first inner step": lambda s, cfg: s["ratio_first_maxdev"] < 1e-4,
    "ratio moves after updates": lambda s, cfg: s["ratio_last_maxdev"] > 0
    or cfg.inner_epochs * cfg.minibatches == 1
    or cfg.lr == 0
    or s["zero_var_groups"] == 1,
    "KL finite and >= 0": lambda s, cfg: math.isfinite(s["kl"]) and s["kl"] >= -1e-6,
    "entropy not collapsed": lambda s, cfg: s["entropy"] > 0.01 or s["reward"] > 0.95,
    "loss finite": lambda s, cfg: math.isfinite(s["loss"]) and s["nonfinite_steps"] == 0,
    "grad norm finite": lambda s, cfg: math.isfinite(s["grad_norm"]),
}


def check_health(stats, cfg):
    """Names of the health checks this iteration's stats fail (empty when healthy)."""
    return [name for name, ok in HEALTH_CHECKS.items() if not ok(stats, cfg)]


def preflight(module=None, seed=0):
    """Tiny-input probes of the building blocks of `module` (default: this one), run once before
    training; usable on either twin. Returns the names of the probes that fail."""
    m = module or sys.modules[__name__]
    failures = []
    g = torch.Generator().manual_seed(seed)
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0])  # (V,)
    freq = torch.bincount(m.sample_from_logits(logits, 20000, generator=g), minlength=5) / 20000
    if (freq - torch.softmax(logits, -1)).abs().max() > 0.02:
        failures.append("sampling frequencies match softmax(logits)")
    if not m.group_advantage([1.0, 1.0, 1.0]).isfinite().all():
        failures.append("constant reward group gives finite advantages")
    logp = torch.zeros(1, 2, requires_grad=True)  # ratio 1 on two tokens, A = 2
    m.grpo_loss(logp, torch.zeros(1, 2), torch.tensor([2.0]), torch.ones(1, 2, dtype=torch.bool)).backward()
    if not torch.allclose(logp.grad, torch.full((1, 2), -1.0)):  # d/dlogp = -A * ratio / n = -1
        failures.append("loss gradient at ratio 1 is -A/n")
    all_masked = torch.zeros(1, 3, dtype=torch.bool)
    if not torch.isfinite(m.grpo_loss(torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1), all_masked)):
        failures.append("all-masked loss is finite")
    big = torch.tensor([[[0.0, 200.0]]])  # (1, 1, V): token 0 has probability e^-200
    if not torch.isfinite(m.token_logprobs(big, torch.tensor([[0]]))).all():
        failures.append("token log-probs finite for large logits")
    pi, ref = torch.full((3,), -math.log(3)), torch.log_softmax(torch.tensor([2.0, 0.0, -2.0]), -1)  # (V,)
    tokens = torch.multinomial(pi.exp(), 20000, replacement=True, generator=g)  # (S,) ~ pi
    estimate = m.kl_to_reference(pi[tokens][None], ref[tokens][None], torch.ones(1, 20000, dtype=torch.bool))
    if abs(estimate.item() - (pi.exp() * (pi - ref)).sum().item()) > 0.05:  # ~10 std of the mean; B8 is off by 5
        failures.append("KL estimator is unbiased for KL(pi || ref)")
    net = nn.Linear(4, 1)
    m.optimizer_step(net, torch.optim.SGD(net.parameters(), lr=0.0), 1e3 * net(torch.ones(1, 4)).sum(), 1.0)
    if torch.cat([p.grad.flatten() for p in net.parameters()]).norm() > 1.0 + 1e-4:
        failures.append("gradients clipped to max_grad_norm")
    return failures


def report_health(failures, cfg, where):
    """Log (or, with cfg.strict, raise on) failed health checks."""
    if not failures:
        return
    message = f"health check failed at {where}: " + "; ".join(failures)
    if cfg.strict:
        raise AssertionError(message)
    log.warning(message)


# ----------------------------------------------------------------------------------------------
# Training loop


def make_config(**overrides) -> Config:
    """Config with overrides; unknown names raise TypeError, bad values ValueError (never silently used)."""
    known = {f.name for f in fields(Config)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unknown config option(s) {unknown}; known: {sorted(known)}")
    cfg = replace(Config(), **overrides)
    problems = [
        f"{name} must be {rule}, got {getattr(cfg, name)!r}"
        for name, rule, ok in [
            ("steps", "an int >= 0", lambda v: isinstance(v, int) and v >= 0),
            ("prompts_per_batch", "an int >= 1", lambda v: isinstance(v, int) and v >= 1),
            ("group_size", "an int >= 2 (a group of one has no baseline)", lambda v: isinstance(v, int) and v >= 2),
            ("inner_epochs", "an int >= 1", lambda v: isinstance(v, int) and v >= 1),
            ("minibatches", "an int in [1, prompts_per_batch * group_size]",
             lambda v: isinstance(v, int) and 1 <= v <= cfg.prompts_per_batch * cfg.group_size),
            ("temperature", "> 0 and finite", lambda v: 0 < v < math.inf),
            ("lr", ">= 0 and finite", lambda v: 0 <= v < math.inf),
            ("clip", ">= 0 and finite", lambda v: 0 <= v < math.inf),
            ("adv_eps", "> 0 and finite", lambda v: 0 < v < math.inf),
            ("max_grad_norm", "> 0", lambda v: v > 0),
            ("dropout", "in [0, 1)", lambda v: 0 <= v < 1),
        ]
        if not ok(getattr(cfg, name))
    ]
    if problems:
        raise ValueError("bad config: " + "; ".join(problems))
    return cfg


def train(task=None, *, seed: int = 0, on_iteration=None, **overrides) -> list[dict]:
    """Train a fresh TinyPolicy on `task` (default EchoTask) with GRPO; one stats dict per iteration.

    on_iteration(stats) is called after every iteration (live plots, monitors, progress bars).
    """
    cfg = make_config(**overrides)
    task = EchoTask() if task is None else task
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    policy = TinyPolicy(task.vocab_size, cfg.hidden, cfg.dropout)
    ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    report_health(preflight(seed=seed), cfg, "preflight")
    history = []
    for it in range(cfg.steps):
        start = time.perf_counter()
        batch, stats = rollout(policy, ref_policy, task, cfg, generator)
        stats.update(summarize_inner_steps(update_policy(policy, optimizer, batch, cfg, generator)))
        stats.update(iteration=it, seconds=time.perf_counter() - start)
        stats["health"] = check_health(stats, cfg)
        report_health(stats["health"], cfg, f"iteration {it}")
        history.append(stats)
        if on_iteration is not None:
            on_iteration(stats)
    return history


def summarize_run(history, seconds):
    """The CLI's JSON summary: final_reward is the mean reward over the last 10 iterations."""
    last = history[-10:]
    return dict(
        final_reward=sum(s["reward"] for s in last) / max(1, len(last)),
        steps=len(history),
        nan_losses=sum(not math.isfinite(s["loss"]) for s in history),
        seconds=round(seconds, 3),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=Config.steps, help="rollout iterations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON summary as the last line")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    torch.set_num_threads(1)  # tiny tensors: one thread is faster than two fighting over 2 cores

    def progress(s):
        if not args.json and (s["iteration"] % 10 == 0 or s["iteration"] == args.steps - 1):
            print(f"iter {s['iteration']:4d}  reward {s['reward']:.3f}  loss {s['loss']:+.4f}  "
                  f"kl {s['kl']:.4f}  ratio_last {s['ratio_last_mean']:.3f}  entropy {s['entropy']:.3f}", flush=True)

    start = time.perf_counter()
    history = train(seed=args.seed, on_iteration=progress, steps=args.steps)
    summary = summarize_run(history, time.perf_counter() - start)
    print(json.dumps(summary) if args.json else f"final reward {summary['final_reward']:.3f} "
          f"({summary['steps']} iterations, {summary['nan_losses']} non-finite losses, {summary['seconds']:.1f} s)")
    return summary


if __name__ == "__main__":
    main()
