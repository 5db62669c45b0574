"""Machinery for notebook 04 (stabilisers): 1-token autograd probes of the clipped surrogate, exact KL
quantities on a small vocabulary (and per position of the TinyLM), short instrumented training runs
(cached), and the slider helpers.
The code the notebook teaches (the k1/k2/k3 estimators, the clip-only loss, the centred advantage, the
Adam spike toy) lives in the notebook's own cells.
"""

from __future__ import annotations

import math

import torch
from torch.func import vmap

import grpo_fixed
from workbook.catalog import hybrid
from workbook.progress import iterations

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


def surrogate_grid(loss_fn, ratios, advs, clip: float):
    """J(rho) and dJ/dlog pi for every advantage in advs (K,) and ratio in ratios (R,): the numbers of
    surrogate_and_grad at each point, in two calls of loss_fn. J by vmap over K*R one-token losses; dJ from
    one loss over K*R one-token sequences (advantage per row), whose mean gives d loss / d logp_n = -dJ_n / (K R).
    -> J (K, R), dJ (K, R) float64"""
    K, R = len(advs), len(ratios)
    logp = torch.tensor(ratios, dtype=torch.float64).log().repeat(K)  # (K*R,) ratios fastest
    adv = torch.tensor(advs, dtype=torch.float64).repeat_interleave(R)  # (K*R,)
    old, mask = torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.bool)  # (1, 1)
    J = vmap(lambda lp, a: -loss_fn(lp.reshape(1, 1), old, a.reshape(1), mask, clip))(logp, adv)  # (K*R,)
    rows = logp[:, None].clone().requires_grad_(True)  # (K*R, 1): K*R sequences of one token
    loss_fn(rows, torch.zeros_like(rows), adv, torch.ones_like(rows, dtype=torch.bool), clip).backward()
    dJ = -rows.grad[:, 0] * (K * R)  # (K*R,)
    return (J + 0.0).view(K, R), (dJ + 0.0).view(K, R)  # + 0.0 turns -0.0 into 0.0


def zero_grad_interval(ratios, grads):
    """(first, last) ratio of the grid where dJ/dlog pi == 0, or None if it is never zero."""
    zeros = [r for r, g in zip(ratios, grads, strict=True) if g == 0.0]
    return (min(zeros), max(zeros)) if zeros else None


# ----------------------------------------------------------------------------------------------
# 2. Exact KL quantities on a small vocabulary


def kl_exact(logp, logq):
    """KL(p || q) = sum_x p(x) (log p(x) - log q(x)) for log-prob vectors (V,)."""
    return (logp.exp() * (logp - logq)).sum().item()


def chi2(logp, logq):
    """chi^2(p || q) = sum_x p(x)^2 / q(x) - 1."""
    return (torch.exp(2 * logp - logq).sum() - 1).item()


def pathwise_kl_grads(logits_p, logq):
    """Exact expected gradient wrt the logits of pi when each k is used as a loss on x ~ pi
    (samples do not carry gradient: weights pi(x) are detached), next to the true gradients
    of KL(pi || ref) and KL(ref || pi); also B8's k3 with the log-ratio reversed, next to half the gradient of
    chi^2(pi || ref) = sum_x pi(x)^2 / ref(x) - 1. -> dict name -> (V,)"""
    grads = {}

    def grad_of(fn):
        theta = logits_p.detach().clone().requires_grad_(True)
        fn(torch.log_softmax(theta, -1)).backward()
        return theta.grad

    weights = torch.softmax(logits_p, -1).detach()  # (V,) the sampling distribution, no gradient
    grads["E[grad k1]"] = grad_of(lambda lp: (weights * (lp - logq)).sum())
    grads["E[grad k2]"] = grad_of(lambda lp: (weights * 0.5 * (logq - lp) ** 2).sum())
    grads["E[grad k3]"] = grad_of(lambda lp: (weights * ((logq - lp).exp() - 1 - (logq - lp))).sum())
    grads["E[grad k3 reversed]"] = grad_of(lambda lp: (weights * ((lp - logq).exp() - 1 + (logq - lp))).sum())
    grads["grad chi2(pi||ref) / 2"] = grad_of(lambda lp: 0.5 * ((2 * lp - logq).exp().sum() - 1))
    grads["grad KL(pi||ref)"] = grad_of(lambda lp: (lp.exp() * (lp - logq)).sum())
    grads["grad KL(ref||pi)"] = grad_of(lambda lp: (logq.exp() * (logq - lp)).sum())
    return grads


# ----------------------------------------------------------------------------------------------
# 3. Short training runs, instrumented, cached (the sliders only select among them)


class NoisyAdditionTask(grpo_fixed.AdditionTask):
    """AdditionTask whose reward is multiplied by `scale`, and with probability `glitch_prob` per sample
    gets `glitch_size` added (a reward-model outlier, unrelated to the completion). Per batch it keeps
    the clean reward (before scale and glitch, the fraction of exact answers) in `self.clean` and the number
    of glitched samples in `self.glitches`."""

    def __init__(self, scale=1.0, glitch_prob=0.0, glitch_size=0.0, seed=0):
        self.scale, self.glitch_prob, self.glitch_size = scale, glitch_prob, glitch_size
        self.generator = torch.Generator().manual_seed(seed)  # its own stream: sampling is untouched
        self.clean, self.glitches = [], []

    def reward(self, prompts, completions):
        clean = super().reward(prompts, completions)  # (n,) in {0, 1}
        self.clean.append(clean.mean().item())
        if self.glitch_prob == 0:
            self.glitches.append(0)
            return clean * self.scale
        glitch = torch.rand(clean.shape, generator=self.generator) < self.glitch_prob  # (n,)
        self.glitches.append(int(glitch.sum()))
        return clean * self.scale + glitch * self.glitch_size


def k3_from_ratio(ratio):
    """k3 estimate of KL(pi || pi_old) from ratios rho = pi / pi_old on tokens: mean(1/rho - 1 + log rho)."""
    if ratio.numel() == 0:
        return 0.0
    return (1 / ratio - 1 + ratio.log()).mean().item()


@torch.no_grad()
def exact_token_kl(module, policy, ref_policy, batch, temperature):
    """Exact KL(pi || pi_ref) of the next-token distributions, averaged over generated positions.
    Sums over the whole vocabulary, so it has no sampling noise (unlike the logged k3)."""
    args = (batch["prompt_ids"], batch["prompt_mask"], batch["completions"], batch["mask"])
    logp = torch.log_softmax(module.completion_logits(policy, *args) / temperature, -1)  # (N, T, V)
    logq = torch.log_softmax(module.completion_logits(ref_policy, *args) / temperature, -1)  # (N, T, V)
    per_position = (logp.exp() * (logp - logq)).sum(-1)  # (N, T)
    return module.masked_mean(per_position, batch["mask"]).item()


_RUNS: dict = {}


def instrumented_run(*bugs, advantage_fn=None, reward_scale=1.0, glitch_prob=0.0, glitch_size=0.0, seed=0,
                     exact_kl=True, **overrides):
    """train() of a hybrid (fixed + `bugs`) on NoisyAdditionTask (from the SFT checkpoint), recording per
    iteration: the inner steps (k3 to pi_ref as logged, k3 to pi_old from the ratio, pre-clip grad norm),
    the exact KL to pi_ref after the update, the largest pi_old / pi_ref over the batch's sampled tokens
    (before the update), the clean reward and the number of glitched samples.
    advantage_fn, if given, replaces group_advantage (one group's rewards -> its advantages).
    exact_kl=False skips the exact KL (two extra forwards per iteration) and records NaN instead.
    Also kept: the policy at the end of the run and its frozen reference (modules; copy before changing them).
    Cached: the same arguments return the same dict.
    -> dict(history, inner, exact_kl, max_weight, clean_reward, glitches, policy, ref_policy)"""
    cfg = grpo_fixed.make_config(**overrides)  # hashable; equal configs share one run
    key = (bugs, advantage_fn, reward_scale, glitch_prob, glitch_size, seed, exact_kl, cfg)
    if key in _RUNS:
        return _RUNS[key]
    m = hybrid(*bugs)
    if advantage_fn is not None:
        m.group_advantage = advantage_fn  # batch_advantages looks it up in the copy's globals
    out = dict(inner=[], exact_kl=[], max_weight=[])
    rollout, update_policy, refs = m.rollout, m.update_policy, {}

    def rollout_spy(policy, ref_policy, tokenizer, task, cfg, generator):
        refs["policy"], refs["ref"] = policy, ref_policy
        return rollout(policy, ref_policy, tokenizer, task, cfg, generator)

    def update_spy(policy, optimizer, batch, cfg, generator):
        log_w = (batch["old_logprobs"] - batch["ref_logprobs"])[batch["mask"]]  # (n_tokens,) log pi_old / pi_ref
        out["max_weight"].append(log_w.exp().max().item())
        records = update_policy(policy, optimizer, batch, cfg, generator)
        out["inner"].append([dict(kl_ref=r["kl"], kl_old=k3_from_ratio(r["ratio"]), grad_norm=r["grad_norm"])
                             for r in records])
        out["exact_kl"].append(exact_token_kl(m, policy, refs["ref"], batch, cfg.temperature) if exact_kl else math.nan)
        return records

    m.rollout, m.update_policy = rollout_spy, update_spy
    task = NoisyAdditionTask(reward_scale, glitch_prob, glitch_size, seed)
    what = "+".join(bugs) or "the fixed twin"
    out["history"] = m.train(task, seed=seed, on_iteration=iterations(what, cfg.steps), **overrides)
    out["clean_reward"], out["glitches"] = task.clean, task.glitches
    out["policy"], out["ref_policy"] = refs["policy"], refs["ref"]
    _RUNS[key] = out
    return out


def step_norms(run) -> list[float]:
    """The pre-clip gradient norm of every inner step of an instrumented run, in order."""
    return [step["grad_norm"] for it in run["inner"] for step in it]


def quantile(values, q: float) -> float:
    """The q-quantile of values (nearest rank from below: sorted(values)[floor(q * (n - 1))])."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


# ----------------------------------------------------------------------------------------------
# 4. Reward scale on one batch


def pg_grad_norm(advantage_fn, reward_scale: float, *, seed=0, prompts_per_batch=8):
    """Norm of the gradient of the clipped surrogate (no KL) on one rollout batch of the SFT policy
    whose rewards are multiplied by reward_scale; advantages from advantage_fn per group."""
    cfg = grpo_fixed.make_config(prompts_per_batch=prompts_per_batch)
    task = NoisyAdditionTask(reward_scale)
    policy, ref_policy, tokenizer, _, generator = grpo_fixed.setup_run(task, cfg, seed)
    batch, _ = grpo_fixed.rollout(policy, ref_policy, tokenizer, task, cfg, generator)
    groups = batch["rewards"].view(-1, cfg.group_size)  # (B, G)
    adv = torch.cat([advantage_fn(g.tolist()) for g in groups]).float()  # (B*G,)
    logp = grpo_fixed.policy_logprobs(policy, batch["prompt_ids"], batch["prompt_mask"], batch["completions"],
                                      batch["mask"], cfg.temperature)  # (N, T)
    grpo_fixed.grpo_loss(logp, batch["old_logprobs"], adv, batch["mask"], cfg.clip).backward()
    return torch.cat([p.grad.flatten() for p in policy.parameters()]).norm().item()
