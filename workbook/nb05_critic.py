"""Machinery of notebook 05: a learned value baseline (a small PPO-style critic) run beside GRPO's group
baseline, the exact per-prompt values both are measured against, and the notebook's figures.

Everything except the advantage is the twin's (grpo_fixed, or a hybrid passed as `module`): the same
TinyPolicy, setup_run, rollout/generate, cached old and reference log-probs, clipped surrogate (grpo_loss),
KL penalty, optimizer_step. Three baselines, chosen by `train_with_baseline(baseline=...)`:

  "group"   A_i   = (r_i - mean_j r_j) / (std_j r_j + eps) within the prompt's group of G
            (module.batch_advantages unchanged: with module=grpo_fixed this reproduces grpo_fixed.train's
            statistics exactly; only the preflight probes train() runs first are skipped)
  "critic"  A_i,t = GAE(gamma=1, lambda) from a learned V_phi(s_t), s_t = prompt + completion[:t];
            with lambda = 1 and an outcome reward, A_i,t = r_i - V_phi(s_t). Scaled by the batch std
            of the token advantages (no centring, so the baseline is the critic's alone)
  "none"    A_i   = r_i / (std of the batch's rewards + eps)   (REINFORCE, same scale, no baseline)

The critic is a TinyPolicy whose head outputs one number instead of V logits; it is trained with its value
loss on the same minibatches as the policy, with its own Adam. The code the notebook teaches is in its cells
and passed in: the critic's GAE, per-token loss, value loss and explained variance (`CriticFunctions`, to
train_with_baseline), and the baselines (group mean, leave-one-out, B9's wrong axis, to baseline_experiment).
Symbols: N = B*G sequences, T = max completion length, V = vocabulary size, K = all completions.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn as nn
from matplotlib.collections import LineCollection

import grpo_fixed
from workbook import plots

BASELINES = ("group", "critic", "none")


# ----------------------------------------------------------------------------------------------
# The critic


def make_critic(task, hidden: int = 64) -> grpo_fixed.TinyPolicy:
    """TinyPolicy body (embedding -> GRU) with a scalar head: tokens (N, L) -> values (N, L, 1)."""
    critic = grpo_fixed.TinyPolicy(task.vocab_size, hidden)
    critic.head = nn.Linear(hidden, 1)
    return critic


def state_values(critic, prompts, completions):
    """V_phi(s_t) for every completion position t, s_t = BOS + prompt + completion[:t]. -> (N, T)

    grpo_fixed.completion_logits already returns the output of the position *before* token t,
    which is exactly the state in which token t is chosen.
    """
    return grpo_fixed.completion_logits(critic, prompts, completions).squeeze(-1)  # (N, T)


def batch_scaled(adv, mask, eps: float = 1e-8):
    """adv / (std of adv over unmasked entries + eps): PPO's scale normalisation without centring."""
    picked = adv[mask.bool()]
    return adv / (picked.std(unbiased=False) + eps)


class CriticFunctions(NamedTuple):
    """The critic's code, which notebook 05 §2 teaches in its cells and passes to train_with_baseline
    (tests/test_nb05_critic.py passes its own equivalents). All tensors (N, T) unless stated."""

    gae_advantages: Callable
    """(values, rewards (N,), mask, lam) -> advantages, zero at masked positions: GAE with gamma = 1 and one
    outcome reward at the last generated token"""
    token_grpo_loss: Callable
    """(logprobs, old_logprobs, token_advantages, mask, clip) -> scalar: the twins' clipped surrogate with one
    advantage per token"""
    value_loss: Callable
    """(values, targets, mask) -> scalar: the critic's regression loss"""
    explained_variance: Callable
    """(values, targets, mask) -> float: 1 - Var(target - V) / Var(target) over unmasked tokens"""


# ----------------------------------------------------------------------------------------------
# Training: the twin's loop with a choice of baseline


def attach_advantages(batch, baseline, critic, cfg, lam, fns: CriticFunctions | None = None):
    """Replace the rollout's group advantages by the chosen baseline's; adds value stats for the critic (whose
    GAE and explained variance are fns')."""
    rewards, mask = batch["rewards"], batch["mask"]  # (N,), (N, T)
    if baseline == "group":
        return {}
    if baseline == "none":
        batch["advantages"] = rewards / (rewards.std(unbiased=False) + cfg.adv_eps)  # (N,)
        return {}
    with torch.no_grad():
        critic.eval()
        values = state_values(critic, batch["prompts"], batch["completions"])  # (N, T)
    adv = fns.gae_advantages(values, rewards, mask, lam)  # (N, T)
    batch["values"] = torch.where(mask, values, 0.0)  # (N, T): V_phi_old(s_t), fixed at rollout time
    batch["returns"] = torch.where(mask, adv + values, 0.0)  # (N, T): lambda-returns, the critic's target
    batch["token_advantages"] = batch_scaled(adv, mask, cfg.adv_eps)  # (N, T)
    return dict(value_error=(values[:, 0] - rewards).abs().mean().item(),
                explained_variance=fns.explained_variance(values, batch["returns"], mask))


def update_policy_and_critic(module, policy, optimizer, critic, critic_optimizer, batch, cfg, generator,
                             fns: CriticFunctions):
    """module.update_policy with per-token advantages (fns.token_grpo_loss), plus one critic step per minibatch
    (fns.value_loss)."""
    policy.train()
    critic.train()
    N = batch["rewards"].shape[0]
    records = []
    for _ in range(cfg.inner_epochs):
        order = torch.randperm(N, generator=generator)
        for idx in order.chunk(cfg.minibatches):
            prompts, completions, mask = batch["prompts"][idx], batch["completions"][idx], batch["mask"][idx]
            logprobs = module.policy_logprobs(policy, prompts, completions, cfg.temperature)  # (n, T)
            old_logprobs = batch["old_logprobs"][idx]  # (n, T)
            adv = batch["token_advantages"][idx]  # (n, T)
            kl = module.kl_to_reference(logprobs, batch["ref_logprobs"][idx], mask)
            loss = fns.token_grpo_loss(logprobs, old_logprobs, adv, mask, cfg.clip) + cfg.beta * kl
            grad_norm = module.optimizer_step(policy, optimizer, loss, cfg.max_grad_norm)
            v_loss = fns.value_loss(state_values(critic, prompts, completions), batch["returns"][idx], mask)
            module.optimizer_step(critic, critic_optimizer, v_loss, cfg.max_grad_norm)
            flat = lambda x: x.reshape(-1, 1)  # noqa: E731  tokens as length-1 rows for the record
            records.append(module.inner_step_record(flat(logprobs), flat(old_logprobs), adv.reshape(-1), flat(mask),
                                                    cfg.clip, kl, loss, grad_norm))
    return records


def train_with_baseline(task=None, *, baseline="group", critic_fns: CriticFunctions | None = None, seed=0,
                        lam=1.0, snapshot_at=(), module=grpo_fixed, on_setup=None, **overrides):
    """module.train's loop (default grpo_fixed; a catalog hybrid works too) with the advantage from `baseline`
    ("group", "critic", "none"), without the preflight probes train() runs first. baseline="critic" runs the
    critic's code it is given, critic_fns (notebook 05 §2).

    Returns (history, snapshots): one stats dict per iteration (the twin's keys, plus value_error and
    explained_variance for the critic), and {iteration: (policy, critic or None)} deep copies taken *before*
    that iteration's rollout. on_setup({"policy", "reference", "critic"}: module or None) is called once the
    networks exist (count_passes hooks them). baseline="group" gives exactly module.train's stats.
    """
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    if baseline == "critic" and critic_fns is None:
        raise ValueError("baseline='critic' needs critic_fns=CriticFunctions(...), the critic's code")
    cfg = module.make_config(**overrides)
    task = module.EchoTask() if task is None else task
    policy, ref_policy, optimizer, generator = module.setup_run(task, cfg, seed)
    critic = make_critic(task, cfg.hidden) if baseline == "critic" else None
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=cfg.lr) if critic is not None else None
    if on_setup is not None:
        on_setup({"policy": policy, "reference": ref_policy, "critic": critic})
    history, snapshots = [], {}
    for it in range(cfg.steps):
        if it in snapshot_at:
            snapshots[it] = (copy.deepcopy(policy).eval(), copy.deepcopy(critic).eval() if critic else None)
        start = time.perf_counter()
        batch, stats = module.rollout(policy, ref_policy, task, cfg, generator)
        stats.update(attach_advantages(batch, baseline, critic, cfg, lam, critic_fns))
        if baseline == "critic":
            records = update_policy_and_critic(module, policy, optimizer, critic, critic_optimizer, batch, cfg,
                                               generator, critic_fns)
        else:
            records = module.update_policy(policy, optimizer, batch, cfg, generator)
        stats.update(module.summarize_inner_steps(records))
        stats.update(iteration=it, seconds=time.perf_counter() - start)
        history.append(stats)
    return history, snapshots


# ----------------------------------------------------------------------------------------------
# Cost accounting


def parameter_count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def count_passes(task=None, *, baseline="group", critic_fns: CriticFunctions | None = None, **overrides):
    """Run one iteration and count network calls: {(network, 'forward' | 'forward+backward'): (calls, rows)}.

    A forward hook on each network instance (policy, frozen reference, critic) records every call; a call
    with grad enabled is followed by one backward, a call under torch.no_grad is forward only.
    """
    counts, handles = {}, []

    def counter(name):
        def hook(network, args, output):
            kind = "forward+backward" if torch.is_grad_enabled() else "forward"
            calls, rows = counts.get((name, kind), (0, 0))
            counts[(name, kind)] = (calls + 1, rows + args[0].shape[0])
        return hook

    def attach(networks):
        handles.extend(net.register_forward_hook(counter(name)) for name, net in networks.items() if net is not None)

    try:
        train_with_baseline(task, baseline=baseline, critic_fns=critic_fns, on_setup=attach,
                            **{**overrides, "steps": 1})
    finally:
        for handle in handles:
            handle.remove()
    return counts


# ----------------------------------------------------------------------------------------------
# Exact per-prompt values by enumerating every completion


def all_completions(task):
    """Every distinct completion, padded with EOS after the first EOS. -> completions (K, T), mask (K, T)

    K = sum_{l=1..T} (V-1)^(l-1)  [EOS at position l]  +  (V-1)^T  [no EOS, truncated].
    """
    T, eos = task.max_completion_length, task.eos_id
    words = [w for w in range(task.vocab_size) if w != eos]
    rows, masks = [], []
    for length in range(1, T + 1):
        for body in itertools.product(words, repeat=length - 1):
            rows.append(list(body) + [eos] * (T - length + 1))
            masks.append([True] * length + [False] * (T - length))
    for body in itertools.product(words, repeat=T):
        rows.append(list(body))
        masks.append([True] * T)
    return torch.tensor(rows), torch.tensor(masks)


def all_prompts(task):
    """Every prompt of a task whose prompt tokens are 1..V-1 (EchoTask, SparseMatchTask). -> (n, P)"""
    words = range(1, task.vocab_size)
    return torch.tensor(list(itertools.product(words, repeat=task.prompt_length)))


@torch.no_grad()
def exact_outcomes(policy, task, prompts, temperature):
    """Probability and reward of every completion of every prompt under the sampling policy.

    p(o | x) = exp(sum_t mask_t * log pi_T(o_t | x, o_<t)). prompts (n, P) -> probs (n, K), rewards (n, K);
    the value of prompt x is V(x) = sum_k probs[x, k] * rewards[x, k].
    """
    completions, mask = all_completions(task)  # (K, T)
    n, K = prompts.shape[0], completions.shape[0]
    x = prompts.repeat_interleave(K, 0)  # (n*K, P)
    o, m = completions.repeat(n, 1), mask.repeat(n, 1)  # (n*K, T)
    policy.eval()
    logp = grpo_fixed.policy_logprobs(policy, x, o, temperature)  # (n*K, T)
    seq_logp = torch.where(m, logp, 0.0).sum(1).view(n, K)  # (n, K)
    rewards = task.reward(x, o, m).float().view(n, K)  # (n, K)
    return seq_logp.exp(), rewards


@torch.no_grad()
def critic_prompt_values(critic, prompts, task):
    """V_phi(s_0): the critic's value of each prompt before any completion token. (n,)"""
    dummy = torch.full((prompts.shape[0], 1), task.eos_id)  # (n, 1): only the state before token 0 is used
    return state_values(critic, prompts, dummy)[:, 0]


# ----------------------------------------------------------------------------------------------
# Baselines as estimators of V(x), for rewards laid out prompt-major (B*G,) = [x0]*G, [x1]*G, ...
# (the baseline functions themselves are the notebook's: b(rewards (R, B*G), G, slots (R, B*G)) -> (R, B*G))


def reward_levels(probs, rewards):
    """Collapse the K completions to the distinct reward values. -> levels (U,), level_probs (n, U)"""
    levels, which = torch.unique(rewards, return_inverse=True)  # (U,), (n, K)
    level_probs = torch.zeros(probs.shape[0], levels.numel(), dtype=probs.dtype).scatter_add_(1, which, probs)
    return levels, level_probs


def sample_rewards(levels, level_probs, prompt_ids, G, generator):
    """Draw G rewards for each listed prompt from its exact reward distribution (inverse CDF).

    levels (U,), level_probs (n, U); prompt_ids (R, B) the prompt of each of B slots in each of R batches.
    -> rewards (R, B*G), prompt-major within each batch like grpo_fixed.rollout.
    """
    R, B = prompt_ids.shape
    cdf = level_probs.cumsum(1)[prompt_ids]  # (R, B, U)
    u = torch.rand(R, B, G, generator=generator, dtype=cdf.dtype)  # (R, B, G)
    index = (u[..., None] > cdf[:, :, None, :]).sum(-1).clamp(max=levels.numel() - 1)  # (R, B, G)
    return levels[index].reshape(R, B * G)


def error_stats(baseline, values, prompt_ids, n_prompts):
    """How well a baseline b estimates its prompt's value V(x); the advantage error is A_hat - A = V - b.

    baseline, values (R, N): b and V(x) per sampled slot; prompt_ids (R, N) the slot's prompt.
    -> mse = E[(b - V)^2], bias2 = E_x[(E[b | x] - V(x))^2] (slot-weighted), variance = mse - bias2,
    and per-prompt mean and std of b: mean_b (n_prompts,), std_b (n_prompts,).
    """
    err = (baseline - values).reshape(-1).double()  # (R*N,)
    ids = prompt_ids.reshape(-1)
    count = torch.bincount(ids, minlength=n_prompts).double().clamp(min=1)  # (n,)
    mean_err = torch.bincount(ids, err, minlength=n_prompts) / count  # (n,)
    b = baseline.reshape(-1).double()
    mean_b = torch.bincount(ids, b, minlength=n_prompts) / count
    std_b = (torch.bincount(ids, b * b, minlength=n_prompts) / count - mean_b**2).clamp(min=0).sqrt()
    mse = err.pow(2).mean().item()
    bias2 = mean_err[ids].pow(2).mean().item()
    return dict(mse=mse, bias2=bias2, variance=mse - bias2, mean_b=mean_b, std_b=std_b)


def baseline_experiment(probs, rewards, Gs, baselines, *, no_reset=None, B=16, repeats=400, seed=0):
    """Error of every baseline as an estimate of V(x), for each group size G (exact V, sampled rewards).

    probs, rewards (n, K) from exact_outcomes. Each repeat is one rollout batch of B uniformly drawn prompts
    x G samples, prompt-major like grpo_fixed.rollout; baselines {name: b(rewards (R, B*G), G, slots)}, slots
    (R, B*G) the prompt of every sample. no_reset {name: b}: the same baselines on batches where each of
    the G samples of a "group" starts from its *own* random prompt (a start state that cannot be replayed).
    -> {G: {name: error_stats}}
    """
    n = probs.shape[0]
    value = (probs * rewards).sum(1)  # (n,) exact V(x)
    levels, level_probs = reward_levels(probs, rewards)  # (U,), (n, U)
    out = {}
    for G in Gs:
        g = torch.Generator().manual_seed(seed + G)
        prompt_ids = torch.randint(0, n, (repeats, B), generator=g)  # (R, B)
        r = sample_rewards(levels, level_probs, prompt_ids, G, g)  # (R, B*G)
        slots = prompt_ids.repeat_interleave(G, 1)  # (R, B*G)
        free = torch.randint(0, n, (repeats, B * G), generator=g)  # (R, B*G): every sample its own state
        r_free = sample_rewards(levels, level_probs, free, 1, g)  # (R, B*G)
        out[G] = {name: error_stats(b(r, G, slots), value[slots], slots, n) for name, b in baselines.items()}
        out[G].update({name: error_stats(b(r_free, G, free), value[free], free, n)
                       for name, b in (no_reset or {}).items()})
    return out


# ----------------------------------------------------------------------------------------------
# Figures


class PerPromptFigure:
    """Two axes, B9's baseline (left) and the group mean (right): per prompt, the baseline's mean +- one std
    over the sampled batches against the exact V(x) (the diagonal is b = V(x)); the critic's V_phi(s_0) as
    crosses on the right. update(...) moves the points, bars and labels in place; they are animated artists, so
    live_plot redraws only them over the cached rest of the figure."""

    def __init__(self, value, critic_value, *, B, figsize=(8.0, 3.4)):
        self.value = value.double()  # (n,)
        self.fig, (ax_b, ax_f) = plots.buggy_vs_fixed(f"baseline per prompt vs exact V(x); B = {B}", figsize=figsize)
        ax_b.set_title("B9: mean of a row of view(G, B)", color=plots.BUGGY)
        ax_f.set_title("fixed: group mean", color=plots.FIXED)
        lo = max(0.0, float(value.min()) - 0.1)
        self.axes = {}
        for ax, color in ((ax_b, plots.BUGGY), (ax_f, plots.FIXED)):
            ax.plot([0, 1], [0, 1], color="#999999", lw=0.8, zorder=0)
            (points,) = ax.plot(value, value, "o", ms=3, color=color, label="mean of b +- std", animated=True)
            bars = ax.add_collection(LineCollection([], colors=color, linewidths=0.8, animated=True))
            label = ax.text(0.98, 0.03, "", ha="right", transform=ax.transAxes, fontsize="small", animated=True)
            ax.set_xlim(lo, 1)
            ax.set_ylim(lo, 1)
            ax.set_xlabel("exact value V(x) of the prompt")
            self.axes[ax] = (points, bars, label)
        ax_f.plot(value, critic_value, "x", color=plots.REFERENCE, ms=4, label="critic V_phi(s_0)")
        ax_b.set_ylabel("baseline b")
        for ax in self.axes:
            ax.legend(fontsize="small", loc="upper left")
        self.panels = dict(zip(("B9", "group mean"), self.axes.values(), strict=True))

    def update(self, G, stats_b9, stats_group):
        """Show the error_stats of B9's and the group mean's baselines at group size G."""
        for (points, bars, label), stats in zip(self.panels.values(), (stats_b9, stats_group), strict=True):
            mean, std = stats["mean_b"], stats["std_b"]  # (n,)
            points.set_ydata(mean)
            bars.set_segments([[(x, m - s), (x, m + s)] for x, m, s in zip(self.value.tolist(), mean.tolist(),
                                                                            std.tolist(), strict=True)])
            label.set_text(f"G = {G}: MSE {stats['mse']:.4f}, bias^2 {stats['bias2']:.4f}")


def plot_errors_vs_G(ax, errors, colors):
    """MSE of each baseline (as an estimate of V(x)) against G, log-log."""
    Gs = sorted(errors)
    for name, color in colors.items():
        ax.plot(Gs, [errors[G][name]["mse"] for G in Gs], color=color, label=name, lw=2.2 if name == "critic" else 1.4)
    ticks = [G for G in (2, 4, 8, 16, 32) if G in errors]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(G) for G in ticks])
    ax.set_yscale("log")
    ax.set_xlabel("group size G")
    ax.set_ylabel("E[(b - V(x))^2]")
    ax.legend(fontsize="small", ncol=2)
