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
  7. Log       the statistics of the iteration (grpo_support.STATS: what each means, its healthy range).

Run this file with python: [--steps 80] [--seed 0] [--json] [--<any Config field> VALUE]
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import torch
import torch.nn as nn

from grpo_support import (
    build_config,
    check_logits,
    check_loss_inputs,
    check_prompts,
    check_rewards,
    check_task_rewards,
    inner_step_record,
    rollout_stats,
    run_cli,
    summarize_inner_steps,
)


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


def make_config(**overrides) -> Config:
    """Config with overrides, each checked (grpo_support.CONFIG_RULES): TypeError or ValueError on a bad one."""
    return build_config(Config, **overrides)


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
    check_logits(logits, num_samples)
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
    r = check_rewards(rewards, eps)  # (G,) float64
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
    prompts = check_prompts(task.prompts(cfg.prompts_per_batch, generator), task, cfg)  # (B, P)
    prompts = prompts.repeat_interleave(cfg.group_size, 0)  # (N, P), N = B*G: G copies of each prompt
    completions, mask, sampler_logprobs, entropy = generate(policy, prompts, task, cfg.temperature, generator)
    rewards = check_task_rewards(task.reward(prompts, completions, mask), prompts.shape[0])  # (N,)
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
    mask = check_loss_inputs(logprobs, old_logprobs, advantages, mask, clip)
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


if __name__ == "__main__":
    run_cli(train, make_config, __doc__.splitlines()[0])
