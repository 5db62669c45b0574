"""GRPO (Group Relative Policy Optimization) on a toy task, small enough to read in one sitting.

One iteration of train() (Shao et al. 2024, "DeepSeekMath", section 4.1):
  1. Sample    B prompts, each repeated G times; sample each completion token by token until EOS.
  2. Score     r_i = task.reward(prompt, completion_i), in [0, 1].
  3. Advantage A_i = (r_i - mean(r)) / (std(r) + eps) within each prompt's group of G.
  4. Cache     log pi_old(o_t) of the sampled tokens (the policy that sampled them) and log pi_ref(o_t)
               (a frozen copy of the initial policy), both without gradient.
  5. Loss      L = -mean_t min(rho_t A, clip(rho_t, 1 - c, 1 + c) A) + beta * KL(pi || pi_ref),
               rho_t = exp(log pi(o_t) - log pi_old(o_t)), mean over completion tokens (mask).
  6. Update    inner_epochs passes of minibatch Adam steps on L, gradient norm clipped.
  7. Log       the statistics of the iteration (appendix: what each means, its healthy range, its code).

Run this file with python: [--steps 80] [--seed 0] [--json] [--<any Config field> VALUE]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import numbers
import time
from dataclasses import dataclass, fields, replace

import torch
import torch.nn as nn


@dataclass(frozen=True)
class Config:
    steps: int = 80
    """rollout iterations (one rollout batch each)"""
    prompts_per_batch: int = 16
    """B: distinct prompts per rollout batch"""
    group_size: int = 8
    """G: completions sampled per prompt; the group baseline averages over them"""
    temperature: float = 0.8
    """sampling temperature"""
    inner_epochs: int = 2
    """passes over each rollout batch"""
    minibatches: int = 2
    """minibatches per inner epoch"""
    lr: float = 3e-3
    """Adam learning rate"""
    clip: float = 0.2
    """PPO clip radius c (usually 0.1 to 0.3): no reward for moving the ratio past 1 +- c the way A favours"""
    beta: float = 0.02
    """weight of the KL penalty to the frozen reference policy (usually 0.0 to 0.1)"""
    adv_eps: float = 1e-8
    """epsilon in the advantage's std denominator; independent of clip"""
    max_grad_norm: float = 1.0
    """gradient clipping threshold on the global L2 norm"""
    hidden: int = 64
    """width of the tiny GRU policy"""
    dropout: float = 0.0
    """dropout in the policy head"""


# ---- The toy task and the policy -----------------------------------------------------------------
class EchoTask:
    """Echo the prompt, then EOS. Reward = fraction of the P + 1 target positions that match (about 0.14 for a
    uniform random policy). Any task with these attributes and methods works with train()."""

    vocab_size = 6
    eos_id = 0
    prompt_length = 2
    max_completion_length = 4

    def prompts(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.randint(1, self.vocab_size, (n, self.prompt_length), generator=generator)  # (n, P)

    def reward(self, prompts, completions, mask) -> torch.Tensor:
        eos = torch.full_like(prompts[:, :1], self.eos_id)
        target = torch.cat([prompts, eos], dim=1)  # (n, P+1)
        width = target.shape[1]
        got = torch.where(mask[:, :width].bool(), completions[:, :width], -1)  # (n, P+1)
        return (got == target).float().mean(dim=1)  # (n,)


class TinyPolicy(nn.Module):
    """Embedding -> GRU -> linear head. tokens (N, L) -> logits (N, L, V); position l predicts token l+1.
    One extra token, BOS (id = task vocab_size), starts every sequence."""

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


def setup_run(task, cfg, seed):
    """A seeded fresh policy, its frozen copy as the reference, Adam, and the generator for sampling."""
    torch.manual_seed(seed)
    policy = TinyPolicy(task.vocab_size, cfg.hidden, cfg.dropout)
    ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    return policy, ref_policy, optimizer, torch.Generator().manual_seed(seed)


# ---- 1. Sample -----------------------------------------------------------------------------------
def sample_from_logits(logits, num_samples: int = 1, *, generator=None):
    """Draw token ids from p = softmax(logits) with replacement.
    logits (V,) or (N, V) -> LongTensor (num_samples,) or (N, num_samples)."""
    _check_logits(logits, num_samples)
    probs = logits - logits.min(dim=-1, keepdim=True).values
    return torch.multinomial(probs, num_samples, replacement=True, generator=generator)


@torch.no_grad()
def generate(policy, prompts, task, temperature, generator=None):
    """Sample completions token by token from softmax(logits / temperature) until EOS. -> completions (N, T),
    EOS after the first EOS; mask (N, T), True up to and including the first EOS; sampler_logprobs (N, T),
    log-prob of each drawn token under the distribution it was drawn from; entropy (N, T) of that distribution."""
    N, T = prompts.shape[0], task.max_completion_length
    tokens = torch.cat([torch.full((N, 1), policy.bos_id), prompts], dim=1)  # (N, 1+P)
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
    return completions, torch.stack(masks, 1), torch.stack(logprobs, 1), torch.stack(entropies, 1)


# ---- 3. Advantage (2. Score is the task's reward, called in rollout below) -----------------------
def group_advantage(rewards, eps: float = 1e-8):
    """Group-relative advantage of one prompt's G rewards (a list of numbers) -> (G,) float64.
    A_i = (r_i - mean(r)) / (std(r) + eps),  std = sqrt(mean((r - mean(r))^2))  (population std).
    A constant group returns zeros (it carries no learning signal)."""
    r = _check_rewards(rewards, eps)  # (G,) float64
    centered = r - r.mean()  # (G,)
    std = centered.pow(2).mean().sqrt()
    return centered / std


def batch_advantages(rewards, group_size: int, eps: float = 1e-8):
    """rewards (B*G,) laid out prompt by prompt ([p0]*G, [p1]*G, ...) -> advantages (B*G,) float32."""
    groups = rewards.view(group_size, -1)
    adv = torch.stack([group_advantage(g.tolist(), eps) for g in groups])
    return adv.reshape(-1).float()  # (B*G,)


# ---- 4. Log-probs --------------------------------------------------------------------------------
def token_logprobs(logits, tokens):
    """log pi(token_t) = log softmax(logits_t)[token_t]. logits (..., T, V), tokens (..., T) -> (..., T)."""
    probs = torch.softmax(logits, dim=-1)  # (..., T, V)
    return torch.log(probs).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def completion_logits(policy, prompts, completions):
    """The policy's logits for every completion token: row t scores completions[:, t]. -> (N, T, V)."""
    bos = torch.full((prompts.shape[0], 1), policy.bos_id)  # (N, 1)
    logits = policy(torch.cat([bos, prompts, completions], dim=1))  # (N, 1+P+T, V)
    T = completions.shape[1]
    return logits[:, -T:]


def policy_logprobs(policy, prompts, completions, temperature):
    """log pi(completion tokens) under the distribution they were sampled from. -> (N, T)."""
    logits = completion_logits(policy, prompts, completions)
    return token_logprobs(logits, completions)


@torch.no_grad()
def rollout(policy, ref_policy, task, cfg, generator):
    """Steps 1-4 for one batch: B prompts x G samples, rewards, advantages, cached old and ref log-probs."""
    policy.eval()
    prompts = _check_prompts(task.prompts(cfg.prompts_per_batch, generator), task, cfg)  # (B, P)
    prompts = prompts.repeat_interleave(cfg.group_size, 0)  # (N, P), N = B*G: G copies of each prompt
    completions, mask, sampler_logprobs, entropy = generate(policy, prompts, task, cfg.temperature, generator)
    rewards = _check_task_rewards(task.reward(prompts, completions, mask), prompts.shape[0])  # (N,)
    batch = dict(prompts=prompts, completions=completions, mask=mask, rewards=rewards,
                 sampler_logprobs=sampler_logprobs, entropy=entropy)
    batch["advantages"] = batch_advantages(rewards, cfg.group_size, cfg.adv_eps)  # (N,)
    batch["old_logprobs"] = policy_logprobs(policy, prompts, completions, cfg.temperature)  # (N, T)
    batch["ref_logprobs"] = policy_logprobs(ref_policy, prompts, completions, cfg.temperature)  # (N, T)
    return batch, rollout_stats(batch, cfg.group_size)


# ---- 5. Loss -------------------------------------------------------------------------------------
def _zero_masked(values, mask):
    """values where mask, else 0: whatever a masked position holds reaches neither the loss nor its gradient."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype))


def masked_mean(values, mask):
    """sum(values over unmasked positions) / (number of unmasked positions); 0 if every position is masked."""
    mask = mask.bool()
    total = (values * mask).sum()
    return total / mask.sum()


def grpo_loss(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):
    """Clipped GRPO surrogate, token level: rho_t = exp(logp_t - logp_old_t),
    L = -mean_t min(rho_t A, clip(rho_t, 1 - c, 1 + c) A) over unmasked tokens t.
    logprobs, old_logprobs, mask: (N, T); advantages: (N,), one per sequence."""
    mask = _check_loss_inputs(logprobs, old_logprobs, advantages, mask, clip)
    log_ratio = _zero_masked(logprobs - old_logprobs.detach(), mask)  # (N, T)
    ratio = torch.exp(log_ratio.clamp(max=math.log(torch.finfo(log_ratio.dtype).max) - 1))  # (N, T), no overflow
    adv = advantages.detach().unsqueeze(1)  # (N, 1): broadcast over tokens
    unclipped = ratio * adv  # (N, T)
    clipped = torch.clamp(ratio * adv, 1 - clip, 1 + clip)
    return -masked_mean(torch.min(unclipped, clipped), mask)


def kl_to_reference(logprobs, ref_logprobs, mask):
    """Masked mean of the k3 estimator of KL(pi || pi_ref) on tokens sampled from pi (Schulman 2020):
    k3 = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1  >= 0, and = 0 when pi = pi_ref."""
    mask = mask.bool()
    log_ratio = _zero_masked(logprobs - ref_logprobs.detach(), mask)  # (N, T)
    return masked_mean(log_ratio.exp() - log_ratio - 1, mask)


# ---- 6. Update -----------------------------------------------------------------------------------
def optimizer_step(policy, optimizer, loss, max_grad_norm):
    """Backprop, clip the global gradient norm to max_grad_norm, step; skip the step when the loss or the
    gradient is not finite. Returns the gradient norm before clipping."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), float("inf"))
    if torch.isfinite(loss) and torch.isfinite(grad_norm):
        optimizer.step()
    return grad_norm.item()


def update_policy(policy, optimizer, batch, cfg, generator):
    """Steps 5-6: cfg.inner_epochs passes of cfg.minibatches minibatches over one rollout batch; loss per
    minibatch = grpo_loss(logp, logp_old, A, mask, clip) + beta * KL(pi || pi_ref). -> one record per step."""
    policy.train()
    records = []
    for _ in range(cfg.inner_epochs):
        for idx in torch.randperm(batch["rewards"].shape[0], generator=generator).chunk(cfg.minibatches):
            mask = batch["mask"][idx]  # (n, T)
            logprobs = policy_logprobs(policy, batch["prompts"][idx], batch["completions"][idx], cfg.temperature)
            old_logprobs = logprobs.detach()
            adv = batch["advantages"][idx]  # (n,)
            pg_loss = grpo_loss(logprobs, old_logprobs, adv, mask, cfg.clip)
            kl = kl_to_reference(logprobs, batch["ref_logprobs"][idx], mask)
            loss = pg_loss + cfg.beta * kl
            grad_norm = optimizer_step(policy, optimizer, loss, cfg.max_grad_norm)
            records.append(inner_step_record(logprobs, old_logprobs, adv, mask, cfg.clip, kl, loss, grad_norm))
    return records


# ---- Training loop -------------------------------------------------------------------------------
def train(task=None, *, seed: int = 0, on_iteration=None, **overrides) -> list[dict]:
    """Train a fresh TinyPolicy on `task` (default EchoTask) with GRPO; -> one stats dict per iteration.
    overrides: any Config field. on_iteration(stats) is called after every iteration."""
    cfg = make_config(**overrides)
    task = EchoTask() if task is None else task
    policy, ref_policy, optimizer, generator = setup_run(task, cfg, seed)
    history = []
    for it in range(cfg.steps):
        start = time.perf_counter()
        batch, stats = rollout(policy, ref_policy, task, cfg, generator)  # 1-4
        records = update_policy(policy, optimizer, batch, cfg, generator)  # 5-6
        stats.update(summarize_inner_steps(records), iteration=it, seconds=time.perf_counter() - start)  # 7
        history.append(stats)
        if on_iteration is not None:
            on_iteration(stats)
    return history


# ==============================================================================================
# Appendix: what each logged statistic means, input validation, configuration, command line


@dataclass(frozen=True)
class Stat:
    """One logged statistic: healthy when finite and lo <= value <= hi."""

    meaning: str
    lo: float
    hi: float
    why: str


INF = math.inf
STATS = {
    "reward": Stat("mean reward of the iteration's samples", 0, 1, "the task's range; rises as the task is learned"),
    "reward_std": Stat("std of the rewards over the batch", 0, INF, "0 means no sample differs: nothing to learn"),
    "zero_var_groups": Stat("fraction of groups whose G rewards are all equal", 0, 0.9,
                            "such a group has zero advantages: no signal (near 1 only once solved)"),
    "adv_nonfinite": Stat("advantages that are NaN or inf", 0, 0, "one NaN advantage poisons the whole update"),
    "adv_group_mean": Stat("max |mean advantage| within one prompt's group", 0, 1e-4,
                           "the group mean is the baseline: advantages sum to 0 within each group"),
    "logprob_gap": Stat("max |training log-prob - sampler log-prob| over sampled tokens", 0, 1e-4,
                        "training must score the tokens under the distribution that sampled them"),
    "ratio_first_maxdev": Stat("max |ratio - 1| over tokens at the first inner step", 0, 1e-4,
                               "before any update on this batch, pi = pi_old"),
    "ratio_last_mean": Stat("mean ratio at the last inner step", 0.75, 1.5,
                            "near 1: the policy stayed near the one that sampled (one far-out token can pull "
                            "a minibatch's mean off by a few tenths)"),
    "ratio_last_maxdev": Stat("max |ratio - 1| over tokens at the last inner step", 1e-9, INF,
                              "the updates moved the policy away from pi_old"),
    "clip_frac_pos": Stat("fraction of A > 0 tokens with ratio > 1 + clip, all inner steps", 0, 0.3,
                          "a larger fraction means the steps are too big for the trust region"),
    "clip_frac_neg": Stat("fraction of A < 0 tokens with ratio < 1 - clip, all inner steps", 0, 0.3,
                          "a larger fraction means the steps are too big for the trust region"),
    "kl": Stat("k3 estimate of KL(pi || pi_ref) per token, last inner step", -1e-6, INF,
               "each k3 term is >= 0 (rounding aside); it should rise smoothly, not jump"),
    "entropy": Stat("mean per-token entropy of the sampling distribution (nats)", 0.01, INF,
                    "near 0 the policy samples one completion: exploration is over (fine once solved)"),
    "grad_norm": Stat("max pre-clip gradient norm over the inner steps", 0, 100, "a spike means a bad batch"),
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


@torch.no_grad()
def rollout_stats(batch, group_size):
    """Statistics of one rollout batch, grouped (B, G) prompt by prompt."""
    rewards = batch["rewards"].view(-1, group_size)  # (B, G)
    adv = batch["advantages"].view(-1, group_size)  # (B, G)
    mask = batch["mask"]  # (N, T)
    return dict(
        reward=rewards.mean().item(),
        reward_std=rewards.std(unbiased=False).item(),
        zero_var_groups=(rewards == rewards[:, :1]).all(dim=1).float().mean().item(),
        adv_nonfinite=int((~adv.isfinite()).sum()),
        adv_group_mean=torch.where(adv.isfinite(), adv, 0.0).mean(dim=1).abs().max().item(),
        logprob_gap=(batch["old_logprobs"] - batch["sampler_logprobs"])[mask].abs().max().item(),
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


def _check_logits(logits, num_samples):
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


def _check_rewards(rewards, eps) -> torch.Tensor:
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


def _check_loss_inputs(logprobs, old_logprobs, advantages, mask, clip) -> torch.Tensor:
    """Shapes (N, T), (N, T), (N,), (N, T) and a finite clip >= 0; -> mask as bool."""
    if not (0 <= clip < math.inf):
        raise ValueError(f"clip must be a finite number >= 0, got {clip!r}")
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape or logprobs.dim() != 2:
        raise ValueError(f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
                         f"mask {tuple(mask.shape)} must all be the same (N, T)")
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be (N,) = ({logprobs.shape[0]},), got {tuple(advantages.shape)}")
    return mask.bool()


def _check_prompts(prompts, task, cfg) -> torch.Tensor:
    if prompts.shape != (cfg.prompts_per_batch, task.prompt_length):
        raise ValueError(f"task.prompts must return ({cfg.prompts_per_batch}, {task.prompt_length}), "
                         f"got {tuple(prompts.shape)}")
    return prompts.long()


def _check_task_rewards(rewards, n) -> torch.Tensor:
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
    "group_size": ("an int >= 2 (a group of one has no baseline)", lambda v, cfg: isinstance(v, int) and v >= 2),
    "inner_epochs": ("an int >= 1", lambda v, cfg: isinstance(v, int) and v >= 1),
    "minibatches": ("an int in [1, prompts_per_batch * group_size]",
                    lambda v, cfg: isinstance(v, int) and 1 <= v <= cfg.prompts_per_batch * cfg.group_size),
    "temperature": ("> 0 and finite", lambda v, cfg: 0 < v < math.inf),
    "lr": (">= 0 and finite", lambda v, cfg: 0 <= v < math.inf),
    "clip": (">= 0 and finite", lambda v, cfg: 0 <= v < math.inf),
    "beta": ("finite", lambda v, cfg: math.isfinite(v)),
    "adv_eps": ("> 0 and finite", lambda v, cfg: 0 < v < math.inf),
    "max_grad_norm": ("> 0", lambda v, cfg: v > 0),
    "hidden": ("an int >= 1", lambda v, cfg: isinstance(v, int) and v >= 1),
    "dropout": ("in [0, 1)", lambda v, cfg: 0 <= v < 1),
}


def make_config(**overrides) -> Config:
    """Config with overrides; an unknown name raises TypeError, a bad value ValueError."""
    known = {f.name for f in fields(Config)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unknown config option(s) {unknown}; known: {sorted(known)}")
    cfg = replace(Config(), **overrides)
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


def _parse_value(text, default):
    """A command-line value parsed as the type of the Config field's default."""
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    try:
        return type(default)(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {type(default).__name__}, got {text!r}") from None


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON summary as the last line")
    for f in fields(Config):
        parser.add_argument(f"--{f.name}", type=lambda text, d=f.default: _parse_value(text, d),
                            default=argparse.SUPPRESS, help=f"default {f.default}")
    args = parser.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in fields(Config) if hasattr(args, f.name)}
    if overrides.get("steps", 1) < 1:
        parser.error("--steps must be at least 1")
    try:
        make_config(**overrides)
    except ValueError as err:
        parser.error(str(err))
    return args, overrides


def main(argv=None):
    args, overrides = parse_args(argv)
    torch.set_num_threads(1)  # tiny tensors: one thread is faster than two
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


if __name__ == "__main__":
    main()
