"""Helpers for notebook 04 (stabilisers): clipped-surrogate curves by autograd, KL estimators on a
small vocabulary, short instrumented training runs (cached), and two toys (reward scale, Adam spike).
"""

from __future__ import annotations

import math

import ipywidgets as widgets
import torch

import grpo_fixed
from workbook.catalog import hybrid

# ----------------------------------------------------------------------------------------------
# 1. Clipping: the surrogate and its gradient as functions of the ratio


def surrogate_and_grad(loss_fn, ratio: float, adv: float, clip: float):
    """One sequence of one token with log pi_old = 0 and log pi = log(ratio):
    J(rho) = -loss_fn(...) = min(rho A, clip(rho) A), and dJ/dlog pi by autograd. -> (J, dJ)"""
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)  # (1, 1)
    old = torch.zeros(1, 1, dtype=torch.float64)  # (1, 1)
    mask = torch.ones(1, 1, dtype=torch.bool)  # (1, 1)
    loss = loss_fn(logp, old, torch.tensor([float(adv)], dtype=torch.float64), mask, clip)
    loss.backward()
    return -loss.item() + 0.0, -logp.grad.item() + 0.0  # + 0.0 turns -0.0 into 0.0 for printing


def surrogate_curves(loss_fn, ratios, adv: float, clip: float):
    """J(rho) and dJ/dlog pi over a grid of ratios -> (list, list)."""
    pairs = [surrogate_and_grad(loss_fn, r, adv, clip) for r in ratios]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def clip_only_loss(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):
    """The clipped term alone, without the min: L = -mean clip(rho, 1-c, 1+c) A (for 'why the min')."""
    ratio = torch.exp(logprobs - old_logprobs)  # (N, T)
    return -grpo_fixed.masked_mean(torch.clamp(ratio, 1 - clip, 1 + clip) * advantages[:, None], mask)


def zero_grad_interval(ratios, grads):
    """(first, last) ratio of the grid where dJ/dlog pi == 0, or None if it is never zero."""
    zeros = [r for r, g in zip(ratios, grads, strict=True) if g == 0.0]
    return (min(zeros), max(zeros)) if zeros else None


# ----------------------------------------------------------------------------------------------
# 2. KL estimators on a small vocabulary (x ~ pi, r = pi_ref(x) / pi(x))


def kl_exact(logp, logq):
    """KL(p || q) = sum_x p(x) (log p(x) - log q(x)) for log-prob vectors (V,)."""
    return (logp.exp() * (logp - logq)).sum().item()


def kl_estimator_samples(logp, logq, n: int, generator):
    """Per-sample estimates of KL(p || q) from x ~ p: with log r = log q(x) - log p(x),
    k1 = -log r,  k2 = (log r)^2 / 2,  k3 = r - 1 - log r,  and B8's k3 with the log-ratio reversed,
    1/r - 1 + log r (its mean is chi^2(p || q) - KL(p || q)). -> tokens (n,), dict name -> (n,)"""
    tokens = torch.multinomial(logp.exp(), n, replacement=True, generator=generator)  # (n,)
    log_r = logq[tokens] - logp[tokens]  # (n,)
    estimates = {"k1": -log_r, "k2": 0.5 * log_r**2, "k3": log_r.exp() - 1 - log_r,
                 "k3 reversed (B8)": (-log_r).exp() - 1 + log_r}
    return tokens, estimates


def chi2(logp, logq):
    """chi^2(p || q) = sum_x p(x)^2 / q(x) - 1."""
    return (torch.exp(2 * logp - logq).sum() - 1).item()


def pathwise_kl_grads(logits_p, logq):
    """Exact expected gradient wrt the logits of pi when each k is used as a loss on x ~ pi
    (samples do not carry gradient: weights pi(x) are detached), next to the true gradients
    of KL(pi || ref) and KL(ref || pi). -> dict name -> (V,)"""
    grads = {}

    def grad_of(fn):
        theta = logits_p.detach().clone().requires_grad_(True)
        fn(torch.log_softmax(theta, -1)).backward()
        return theta.grad

    weights = torch.softmax(logits_p, -1).detach()  # (V,) the sampling distribution, no gradient
    grads["E[grad k1]"] = grad_of(lambda lp: (weights * (lp - logq)).sum())
    grads["E[grad k2]"] = grad_of(lambda lp: (weights * 0.5 * (logq - lp) ** 2).sum())
    grads["E[grad k3]"] = grad_of(lambda lp: (weights * ((logq - lp).exp() - 1 - (logq - lp))).sum())
    grads["grad KL(pi||ref)"] = grad_of(lambda lp: (lp.exp() * (lp - logq)).sum())
    grads["grad KL(ref||pi)"] = grad_of(lambda lp: (logq.exp() * (logq - lp)).sum())
    return grads


# ----------------------------------------------------------------------------------------------
# 3. Short training runs, instrumented, cached (the sliders only select among them)


class NoisyEchoTask(grpo_fixed.EchoTask):
    """EchoTask whose reward is multiplied by `scale`, and with probability `glitch_prob` per sample
    gets `glitch_size` added (a reward-model outlier, unrelated to the completion). The clean echo
    reward of every batch (before scale and glitch) is kept in `self.clean`."""

    def __init__(self, scale=1.0, glitch_prob=0.0, glitch_size=0.0, seed=0):
        self.scale, self.glitch_prob, self.glitch_size = scale, glitch_prob, glitch_size
        self.generator = torch.Generator().manual_seed(seed)  # its own stream: sampling is untouched
        self.clean = []

    def reward(self, prompts, completions, mask):
        clean = super().reward(prompts, completions, mask)  # (n,) in [0, 1]
        self.clean.append(clean.mean().item())
        if self.glitch_prob == 0:
            return clean * self.scale
        glitch = torch.rand(clean.shape, generator=self.generator) < self.glitch_prob  # (n,)
        return clean * self.scale + glitch * self.glitch_size


def centred_advantage(rewards, eps: float = 1e-8):
    """No advantage normalisation: A_i = r_i - mean(r) (the group baseline only). (G,) float64"""
    r = torch.as_tensor(rewards, dtype=torch.float64)  # (G,)
    return r - r.mean()


def k3_from_ratio(ratio):
    """k3 estimate of KL(pi || pi_old) from ratios rho = pi / pi_old on tokens: mean(1/rho - 1 + log rho)."""
    if ratio.numel() == 0:
        return 0.0
    return (1 / ratio - 1 + ratio.log()).mean().item()


@torch.no_grad()
def exact_token_kl(module, policy, ref_policy, batch, temperature):
    """Exact KL(pi || pi_ref) of the next-token distributions, averaged over generated positions.
    Sums over the whole vocabulary, so it has no sampling noise (unlike the logged k3)."""
    args = (batch["prompts"], batch["completions"])
    logp = torch.log_softmax(module.completion_logits(policy, *args) / temperature, -1)  # (N, T, V)
    logq = torch.log_softmax(module.completion_logits(ref_policy, *args) / temperature, -1)  # (N, T, V)
    per_position = (logp.exp() * (logp - logq)).sum(-1)  # (N, T)
    return module.masked_mean(per_position, batch["mask"]).item()


_RUNS: dict = {}


def instrumented_run(*bugs, reward_scale=1.0, glitch_prob=0.0, glitch_size=0.0, normalise=True, seed=0,
                     **overrides):
    """train() of a hybrid (fixed + `bugs`) on NoisyEchoTask, recording per iteration: the inner steps
    (k3 to pi_ref as logged, k3 to pi_old from the ratio, pre-clip grad norm), the exact KL to pi_ref
    after the update, and the clean reward. normalise=False swaps in centred_advantage.
    Cached: the same arguments return the same dict. -> dict(history, inner, exact_kl, clean_reward)"""
    cfg = grpo_fixed.make_config(**overrides)  # hashable; equal configs share one run
    key = (bugs, reward_scale, glitch_prob, glitch_size, normalise, seed, cfg)
    if key in _RUNS:
        return _RUNS[key]
    m = hybrid(*bugs)
    if not normalise:
        m.group_advantage = centred_advantage
    out = dict(inner=[], exact_kl=[])
    rollout, update_policy, refs = m.rollout, m.update_policy, {}

    def rollout_spy(policy, ref_policy, task, cfg, generator):
        refs["ref"] = ref_policy
        return rollout(policy, ref_policy, task, cfg, generator)

    def update_spy(policy, optimizer, batch, cfg, generator):
        records = update_policy(policy, optimizer, batch, cfg, generator)
        out["inner"].append([dict(kl_ref=r["kl"], kl_old=k3_from_ratio(r["ratio"]), grad_norm=r["grad_norm"])
                             for r in records])
        out["exact_kl"].append(exact_token_kl(m, policy, refs["ref"], batch, cfg.temperature))
        return records

    m.rollout, m.update_policy = rollout_spy, update_spy
    task = NoisyEchoTask(reward_scale, glitch_prob, glitch_size, seed)
    out["history"] = m.train(task, seed=seed, **overrides)
    out["clean_reward"] = task.clean
    _RUNS[key] = out
    return out


def tail_mean(values, n: int = 10):
    """Mean of the last n values."""
    tail = list(values)[-n:]
    return sum(tail) / len(tail)


# ----------------------------------------------------------------------------------------------
# 4. Reward scale on one batch, and an Adam step after a gradient spike


def pg_grad_norm(advantage_fn, reward_scale: float, *, seed=0, prompts_per_batch=8):
    """Norm of the gradient of the clipped surrogate (no KL) on one rollout batch of a fresh policy
    whose rewards are multiplied by reward_scale; advantages from advantage_fn per group."""
    torch.manual_seed(seed)
    cfg = grpo_fixed.make_config(prompts_per_batch=prompts_per_batch)
    task = NoisyEchoTask(reward_scale)
    policy = grpo_fixed.TinyPolicy(task.vocab_size, cfg.hidden)
    generator = torch.Generator().manual_seed(seed)
    batch, _ = grpo_fixed.rollout(policy, policy, task, cfg, generator)
    groups = batch["rewards"].view(-1, cfg.group_size)  # (B, G)
    adv = torch.cat([advantage_fn(g.tolist()) for g in groups]).float()  # (B*G,)
    logp = grpo_fixed.policy_logprobs(policy, batch["prompts"], batch["completions"], cfg.temperature)
    grpo_fixed.grpo_loss(logp, batch["old_logprobs"], adv, batch["mask"], cfg.clip).backward()
    return torch.cat([p.grad.flatten() for p in policy.parameters()]).norm().item()


def adam_steps_after_spike(spike: float, max_grad_norm: float, *, steps=60, spike_at=10, lr=1e-2):
    """One parameter, gradient 1 every step except `spike` at step spike_at; Adam with the gradient
    clipped to max_grad_norm (inf = no clipping). -> list of |parameter change| per step."""
    w = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([w], lr=lr)
    moves = []
    for t in range(steps):
        before = w.detach().clone()
        w.grad = torch.full((1,), spike if t == spike_at else 1.0)
        torch.nn.utils.clip_grad_norm_([w], max_grad_norm)
        opt.step()
        moves.append((w.detach() - before).abs().item())
    return moves


def choice(options: dict, value, description: str):
    """A slider over a few precomputed settings {label: value}; fires on release only."""
    return widgets.SelectionSlider(options=list(options.items()), value=value, description=description,
                                   continuous_update=False, style={"description_width": "initial"})
