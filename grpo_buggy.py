"""GRPO (Group Relative Policy Optimization) for a small language model, small enough to read in one sitting.

One iteration of train() (Shao et al. 2024, "DeepSeekMath", section 4.1):
  1. Sample    B prompts, each repeated G times; tokenize them left-padded; generate max_completion_length tokens
               per completion, token by token with the attention mask and position ids of the padded batch; the
               completion ends at its first EOS (the mask hides what follows).
  2. Score     decode the completions to text; r_i = task.reward(prompt, text_i), in [0, 1].
  3. Advantage A_i = (r_i - mean(r)) / (std(r) + eps) within each prompt's group of G.
  4. Cache     log pi_old(o_t) of the sampled tokens (the policy that sampled them) and log pi_ref(o_t)
               (the frozen SFT model the policy starts from), both without gradient.
  5. Loss      L = -mean_t min(rho_t A, clip(rho_t, 1 - c, 1 + c) A) + beta * KL(pi || pi_ref),
               rho_t = exp(log pi(o_t) - log pi_old(o_t)); the mean runs over every unmasked completion token
               of the minibatch (as DAPO; DeepSeekMath averages per sequence first). The KL term is the k3
               estimate on the sampled tokens: its value estimates KL(pi || pi_ref), but its expected gradient
               (through log pi, on tokens from pi_old) is per token that of KL(pi_ref || pi) while pi = pi_old.
  6. Update    inner_epochs passes of minibatch Adam steps on L, gradient norm clipped.
  7. Log       the statistics of the iteration (grpo_support.STATS: what each means, its healthy range).

Run this file with python: [--steps 70] [--seed 0] [--json] [--<any Config field> VALUE]
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from grpo_support import (
    CHECKPOINTS,
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
from tinylm import CharTokenizer, TinyLM, TinyLMConfig


@dataclass(frozen=True)
class Config:
    steps: int = 70
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
    lr: float = 4e-4
    """Adam learning rate"""
    clip: float = 0.2
    """PPO clip radius c (usually 0.1 to 0.3): no reward for moving the ratio past 1 +- c the way A favours"""
    beta: float = 0.1
    """weight of the KL penalty to the frozen reference policy (usually 0.0 to 0.1)"""
    adv_eps: float = 1e-8
    """epsilon in the advantage's std denominator; independent of clip"""
    max_grad_norm: float = 1.0
    """gradient clipping threshold on the global L2 norm"""
    dropout: float = 0.0
    """dropout in the policy (attention weights and residual branches)"""


def make_config(**overrides) -> Config:
    """Config with overrides, each checked (grpo_support.CONFIG_RULES): TypeError or ValueError on a bad one."""
    return build_config(Config, **overrides)


# ---- The task and the model ----------------------------------------------------------------------
class AdditionTask:
    """Prompts "a+b=" with a, b in 0..49; reward 1 when the completion's text is exactly a + b, else 0.
    A task provides: alphabet (its characters), max_completion_length (tokens, EOS included), checkpoint (the
    SFT folder the policy and the reference start from; None: a fresh seeded TinyLM), prompts(n, generator)
    -> list of n strings, and reward(prompts, completions) -> (n,) tensor, completions as decoded text."""

    alphabet = "0123456789+="
    max_completion_length = 5
    checkpoint = CHECKPOINTS / "addition_sft"

    def prompts(self, n: int, generator: torch.Generator | None = None) -> list[str]:
        a, b = torch.randint(0, 50, (2, n), generator=generator).tolist()
        return [f"{x}+{y}=" for x, y in zip(a, b, strict=True)]

    def reward(self, prompts: list[str], completions: list[str]) -> torch.Tensor:
        answers = [str(sum(int(x) for x in p.rstrip("=").split("+"))) for p in prompts]
        return torch.tensor([float(c == a) for c, a in zip(completions, answers, strict=True)])  # (n,)


def setup_run(task, cfg, seed):
    """The policy (the task's SFT checkpoint, or a seeded fresh TinyLM), its frozen copy as the reference, the
    tokenizer, Adam, and the generator for sampling."""
    torch.manual_seed(seed)
    tokenizer = CharTokenizer(task.alphabet)
    if task.checkpoint is None:
        policy = TinyLM(TinyLMConfig(tokenizer.vocab_size, dropout=cfg.dropout))
    else:
        policy = TinyLM.from_pretrained(task.checkpoint, dropout=cfg.dropout)
    ref_policy = policy  # the SFT model the policy starts from
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    return policy, ref_policy, tokenizer, optimizer, torch.Generator().manual_seed(seed)


def position_ids(attention_mask):
    """Position of each token among its row's real tokens: cumsum(mask) - 1, 0 on left padding. (N, L)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


# ---- 1. Sample -----------------------------------------------------------------------------------
def sample_from_logits(logits, num_samples: int = 1, *, generator=None):
    """Draw token ids from p = softmax(logits) with replacement.
    logits (V,) or (N, V) -> LongTensor (num_samples,) or (N, num_samples)."""
    check_logits(logits, num_samples)
    probs = logits - logits.min(dim=-1, keepdim=True).values
    return torch.multinomial(probs, num_samples, replacement=True, generator=generator)


@torch.no_grad()
def generate(policy, tokenizer, prompt_ids, prompt_mask, max_new_tokens, temperature, generator=None):
    """Sample max_new_tokens tokens after each left-padded prompt from softmax(logits / temperature), with a
    key-value cache. prompt_ids, prompt_mask (N, P) -> completions (N, T), with whatever was sampled after the
    first EOS left in place; mask (N, T), True up to and including the first EOS; sampler_logprobs (N, T), the
    log-prob of each drawn token under the distribution it was drawn from; entropy (N, T) of that distribution."""
    attention_mask = prompt_mask.long()  # (N, P + t): one more column per sampled token
    out = policy(prompt_ids, position_ids=position_ids(attention_mask), use_cache=True)
    tokens, logprobs, entropies = [], [], []
    for _ in range(max_new_tokens):
        logits = out.logits[:, -1] / temperature  # (N, V)
        nxt = sample_from_logits(logits, 1, generator=generator).squeeze(-1)  # (N,)
        logp = torch.log_softmax(logits, dim=-1)  # (N, V)
        logprobs.append(logp.gather(1, nxt[:, None]).squeeze(1))  # (N,)
        entropies.append(-(logp.exp() * logp).sum(-1))  # (N,)
        tokens.append(nxt)
        attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        out = policy(nxt[:, None], position_ids=position_ids(attention_mask)[:, -1:],
                     past_key_values=out.past_key_values, use_cache=True)
    completions = torch.stack(tokens, dim=1)  # (N, T)
    mask = completion_mask(completions, tokenizer.eos_token_id)  # (N, T)
    return completions, mask, torch.stack(logprobs, dim=1), torch.stack(entropies, dim=1)


def completion_mask(completions, eos_id):
    """True on each completion token up to and including its first EOS. completions (N, T) -> (N, T) bool."""
    is_eos = (completions == eos_id).long()  # (N, T)
    return is_eos.cumsum(dim=1) == 0


def decode_completions(tokenizer, completions, mask):
    """The text of each completion: its tokens up to the first EOS, special tokens dropped. -> N strings."""
    return tokenizer.batch_decode(completions, skip_special_tokens=True)


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


def sequence_inputs(prompt_ids, prompt_mask, completions, mask):
    """Prompt and completion as one left-padded batch for the model's forward: input_ids, attention_mask and
    position_ids, each (N, P+T); completion tokens after the first EOS are hidden like padding."""
    input_ids = torch.cat([prompt_ids, completions], dim=1)  # (N, P+T)
    attention_mask = torch.cat([prompt_mask.long(), mask.long()], dim=1)  # (N, P+T)
    return dict(input_ids=input_ids, attention_mask=attention_mask)


def completion_logits(policy, prompt_ids, prompt_mask, completions, mask):
    """The policy's logits for every completion token, with the padded batch's attention mask and positions:
    row t scores completions[:, t]. prompt_ids, prompt_mask (N, P); completions, mask (N, T) -> (N, T, V)."""
    logits = policy(**sequence_inputs(prompt_ids, prompt_mask, completions, mask)).logits  # (N, P+T, V)
    T = completions.shape[1]
    return logits[:, -T:]


def policy_logprobs(policy, prompt_ids, prompt_mask, completions, mask, temperature):
    """log pi(completion tokens) under the distribution they were sampled from. -> (N, T)."""
    logits = completion_logits(policy, prompt_ids, prompt_mask, completions, mask)
    return token_logprobs(logits, completions)


def repeat_prompts(prompts, group_size):
    """Each prompt group_size times in a row, the layout batch_advantages groups by: [p0]*G + [p1]*G + ..."""
    return prompts * group_size


@torch.no_grad()
def rollout(policy, ref_policy, tokenizer, task, cfg, generator):
    """Steps 1-4 for one batch: B prompts x G samples, rewards, advantages, cached old and ref log-probs."""
    policy.eval()
    prompts = check_prompts(task.prompts(cfg.prompts_per_batch, generator), cfg.prompts_per_batch)
    prompts = repeat_prompts(prompts, cfg.group_size)  # N = B*G
    encoded = tokenizer(prompts, padding_side="left")
    prompt_ids, prompt_mask = encoded["input_ids"], encoded["attention_mask"]  # (N, P)
    completions, mask, sampler_logprobs, entropy = generate(
        policy, tokenizer, prompt_ids, prompt_mask, task.max_completion_length, cfg.temperature, generator)
    texts = decode_completions(tokenizer, completions, mask)
    rewards = check_task_rewards(task.reward(prompts, texts), len(prompts))  # (N,)
    batch = dict(prompts=prompts, texts=texts, prompt_ids=prompt_ids, prompt_mask=prompt_mask,
                 completions=completions, mask=mask, rewards=rewards, sampler_logprobs=sampler_logprobs,
                 entropy=entropy)
    batch["advantages"] = batch_advantages(rewards, cfg.group_size, cfg.adv_eps)  # (N,)
    cached = (prompt_ids, prompt_mask, completions, mask, cfg.temperature)
    batch["old_logprobs"] = policy_logprobs(policy, *cached)  # (N, T)
    batch["ref_logprobs"] = policy_logprobs(ref_policy, *cached)  # (N, T)
    return batch, rollout_stats(batch, cfg.group_size, tokenizer)


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
            logprobs = policy_logprobs(policy, batch["prompt_ids"][idx], batch["prompt_mask"][idx],
                                       batch["completions"][idx], mask, cfg.temperature)  # (n, T)
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
    """Train the task's SFT model (default AdditionTask) with GRPO; -> one stats dict per iteration.
    overrides: any Config field. on_iteration(stats) is called after every iteration."""
    cfg = make_config(**overrides)
    task = AdditionTask() if task is None else task
    policy, ref_policy, tokenizer, optimizer, generator = setup_run(task, cfg, seed)
    history = []
    for it in range(cfg.steps):
        start = time.perf_counter()
        batch, stats = rollout(policy, ref_policy, tokenizer, task, cfg, generator)  # 1-4
        records = update_policy(policy, optimizer, batch, cfg, generator)  # 5-6
        stats.update(summarize_inner_steps(records), iteration=it, seconds=time.perf_counter() - start)  # 7
        history.append(stats)
        if on_iteration is not None:
            on_iteration(stats)
    return history


if __name__ == "__main__":
    run_cli(train, make_config, __doc__.splitlines()[0])
