"""Machinery of notebook 05: a learned value baseline (a small PPO-style critic) run beside GRPO's group
baseline, the exact per-prompt values both are measured against, and the notebook's figures.

Everything except the advantage is the twin's (grpo_fixed, or a hybrid passed as `module`): the same
TinyLM policy from the SFT checkpoint, setup_run, rollout/generate, cached old and reference log-probs,
clipped surrogate (grpo_loss), KL penalty, optimizer_step.
Three baselines, chosen by `train_with_baseline(baseline=...)`:

  "group"   A_i   = (r_i - mean_j r_j) / (std_j r_j + eps) within the prompt's group of G
            (module.batch_advantages unchanged: with module=grpo_fixed this reproduces grpo_fixed.train's
            statistics exactly; only the preflight probes train() runs first are skipped)
  "critic"  A_i,t = GAE(gamma=1, lambda) from a learned V_phi(s_t), s_t = prompt + completion[:t];
            with lambda = 1 and an outcome reward, A_i,t = r_i - V_phi(s_t). Scaled by the batch std
            of the token advantages (no centring, so the baseline is the critic's alone)
  "none"    A_i   = r_i / (std of the batch's rewards + eps)   (REINFORCE, same scale, no baseline)

The critic is a second TinyLM initialised from the same SFT checkpoint, its tied vocabulary projection
replaced by a scalar value head on the last hidden state (real PPO for LLMs does the same at full size: a
value model as large as the policy, initialised from the reward model or the SFT model). It is trained with
its value loss on the same minibatches as the policy, with its own Adam. The code the notebook teaches is in its cells
and passed in: the critic's GAE, per-token loss, value loss and explained variance (`CriticFunctions`, to
train_with_baseline), and the baselines (group mean, leave-one-out, B9's wrong axis, to baseline_experiment).
Symbols: N = B*G sequences, T = max completion length, V = vocabulary size, K = outcomes per prompt
(for AdditionTask: right or wrong).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
import torch.nn as nn
from matplotlib.lines import Line2D

import grpo_fixed
from tinylm import CausalLMOutput, CharTokenizer, TinyLM, TinyLMConfig
from workbook import plots
from workbook.progress import status

BASELINES = ("group", "critic", "none")


# ----------------------------------------------------------------------------------------------
# The critic


class ValueModel(nn.Module):
    """A TinyLM body with a scalar head on its last hidden state (the output of the final LayerNorm):
    input_ids (N, L) + attention mask and positions -> values (N, L, 1), returned in the `logits` field so
    grpo_fixed.completion_logits aligns them like logits."""

    def __init__(self, body: TinyLM):
        super().__init__()
        self.body = body
        self.head = nn.Linear(body.config.d_model, 1)
        nn.init.zeros_(self.head.weight)  # V = 0 everywhere at the start
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
        hidden = {}
        handle = self.body.ln_f.register_forward_hook(lambda mod, args, out: hidden.update(h=out))
        try:
            self.body(input_ids, attention_mask=attention_mask, position_ids=position_ids)
        finally:
            handle.remove()
        return CausalLMOutput(self.head(hidden["h"]), None)  # (N, L, 1)


def make_critic(task) -> ValueModel:
    """The value model: the task's SFT TinyLM (a fresh one without a checkpoint) with a zero-initialised
    scalar head. tokens (N, L) -> values (N, L, 1)."""
    if task.checkpoint is None:
        body = TinyLM(TinyLMConfig(CharTokenizer(task.alphabet).vocab_size))
    else:
        body = TinyLM.from_pretrained(task.checkpoint)
    return ValueModel(body)


def state_values(critic, prompt_ids, prompt_mask, completions, mask):
    """V_phi(s_t) for every completion position t, s_t = BOS + prompt + completion[:t]. -> (N, T)

    grpo_fixed.completion_logits already returns the output of the position *before* token t (with the
    padded batch's attention mask and positions), which is exactly the state in which token t is chosen.
    """
    return grpo_fixed.completion_logits(critic, prompt_ids, prompt_mask, completions, mask).squeeze(-1)  # (N, T)


def batch_scaled(adv, mask, eps: float = 1e-8):
    """adv / (std of adv over unmasked entries + eps): the scale half of PPO's advantage whitening, without its
    centring (subtracting the batch mean would add a batch-mean baseline to the critic's)."""
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
        values = state_values(critic, batch["prompt_ids"], batch["prompt_mask"], batch["completions"], mask)
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
            inputs = [batch[k][idx] for k in ("prompt_ids", "prompt_mask", "completions", "mask")]
            mask = inputs[-1]  # (n, T)
            logprobs = module.policy_logprobs(policy, *inputs, cfg.temperature)  # (n, T)
            old_logprobs = batch["old_logprobs"][idx]  # (n, T)
            adv = batch["token_advantages"][idx]  # (n, T)
            kl = module.kl_to_reference(logprobs, batch["ref_logprobs"][idx], mask)
            loss = fns.token_grpo_loss(logprobs, old_logprobs, adv, mask, cfg.clip) + cfg.beta * kl
            grad_norm = module.optimizer_step(policy, optimizer, loss, cfg.max_grad_norm)
            v_loss = fns.value_loss(state_values(critic, *inputs), batch["returns"][idx], mask)
            module.optimizer_step(critic, critic_optimizer, v_loss, cfg.max_grad_norm)
            flat = lambda x: x.reshape(-1, 1)  # noqa: E731  tokens as length-1 rows for the record
            records.append(module.inner_step_record(flat(logprobs), flat(old_logprobs), adv.reshape(-1), flat(mask),
                                                    cfg.clip, kl, loss, grad_norm))
    return records


def train_with_baseline(task=None, *, baseline="group", critic_fns: CriticFunctions | None = None, seed=0,
                        lam=1.0, snapshot_at=(), module=grpo_fixed, on_setup=None, on_batch=None, **overrides):
    """module.train's loop (default grpo_fixed; a catalog hybrid works too) with the advantage from `baseline`
    ("group", "critic", "none"), without the preflight probes train() runs first. baseline="critic" runs the
    critic's code it is given, critic_fns (notebook 05 §2).

    Returns (history, snapshots): one stats dict per iteration (the twin's keys, plus value_error and
    explained_variance for the critic), and {iteration: (policy, critic or None)} deep copies taken *before*
    that iteration's rollout. on_setup({"policy", "reference", "critic"}: module or None) is called once the
    networks exist (count_passes hooks them). on_batch(iteration, batch) is called after each rollout, before
    the update (notebook 05 §6.7 records which prompts were sampled). baseline="group" gives exactly module.train's
    stats.
    """
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    if baseline == "critic" and critic_fns is None:
        raise ValueError("baseline='critic' needs critic_fns=CriticFunctions(...), the critic's code")
    cfg = module.make_config(**overrides)
    task = module.AdditionTask() if task is None else task
    policy, ref_policy, tokenizer, optimizer, generator = module.setup_run(task, cfg, seed)
    critic = make_critic(task) if baseline == "critic" else None
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=cfg.lr) if critic is not None else None
    if on_setup is not None:
        on_setup({"policy": policy, "reference": ref_policy, "critic": critic})
    history, snapshots = [], {}
    for it in range(cfg.steps):
        status(f"training with the {baseline} baseline: iteration {it + 1} of {cfg.steps}")
        if it in snapshot_at:
            snapshots[it] = (copy.deepcopy(policy).eval(), copy.deepcopy(critic).eval() if critic else None)
        start = time.perf_counter()
        batch, stats = module.rollout(policy, ref_policy, tokenizer, task, cfg, generator)
        stats.update(attach_advantages(batch, baseline, critic, cfg, lam, critic_fns))
        if on_batch is not None:
            on_batch(it, batch)
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
        def hook(network, args, kwargs, output):
            kind = "forward+backward" if torch.is_grad_enabled() else "forward"
            calls, rows = counts.get((name, kind), (0, 0))
            input_ids = args[0] if args else kwargs["input_ids"]  # the trainer calls policy(**sequence_inputs(...))
            counts[(name, kind)] = (calls + 1, rows + input_ids.shape[0])
        return hook

    def attach(networks):
        handles.extend(net.register_forward_hook(counter(name), with_kwargs=True)
                       for name, net in networks.items() if net is not None)

    try:
        train_with_baseline(task, baseline=baseline, critic_fns=critic_fns, on_setup=attach,
                            **{**overrides, "steps": 1})
    finally:
        for handle in handles:
            handle.remove()
    return counts


# ----------------------------------------------------------------------------------------------
# Exact per-prompt values: one correct completion per prompt


def all_prompts(task=None):
    """Every prompt "a+b=" of AdditionTask (a, b in 0..49), a-major. -> list of 2500 strings"""
    return [f"{a}+{b}=" for a in range(50) for b in range(50)]


def answer(prompt: str) -> str:
    """The one completion text AdditionTask scores 1: the decimal sum."""
    return str(sum(int(x) for x in prompt.rstrip("=").split("+")))


@torch.no_grad()
def answer_logprobs(policy, tokenizer, prompts, temperature):
    """log pi_T(o_t | x, o_<t) of each token of the correct completion (its digits, then EOS) under the sampling
    distribution softmax(logits / T). -> logprobs (n, T), mask (n, T) with T = the longest answer + 1."""
    answers = [tokenizer.encode(answer(p), add_bos=False) + [tokenizer.eos_token_id] for p in prompts]
    T = max(len(a) for a in answers)
    completions = torch.tensor([a + [tokenizer.pad_token_id] * (T - len(a)) for a in answers])  # (n, T)
    mask = torch.tensor([[t < len(a) for t in range(T)] for a in answers])  # (n, T)
    enc = tokenizer(list(prompts), padding_side="left")
    policy.eval()
    logp = grpo_fixed.policy_logprobs(policy, enc["input_ids"], enc["attention_mask"], completions, mask,
                                      temperature)  # (n, T)
    return torch.where(mask, logp, 0.0), mask


@torch.no_grad()
def exact_outcomes(policy, tokenizer, prompts, temperature):
    """AdditionTask's reward is 1 for one completion (the sum's digits, then EOS) and 0 for every other, up to
    PAD and BOS: decoding drops them, so the answer with a PAD or BOS inserted also scores 1 (special_token_bound
    bounds the probability of those). Without them the value of a prompt is one sequence probability,
    V(x) = prod_t pi_T(o*_t | x, o*_<t), and its reward distribution is Bernoulli(V(x)).
    -> probs (n, 2) = [1 - V, V], rewards (n, 2) = [0, 1]
    (the layout baseline_experiment reads: V(x) = sum_k probs[x, k] * rewards[x, k])."""
    logp, _ = answer_logprobs(policy, tokenizer, prompts, temperature)  # (n, T)
    value = logp.sum(1).exp().double()  # (n,)
    probs = torch.stack([1 - value, value], dim=1)  # (n, 2)
    return probs, torch.tensor([[0.0, 1.0]], dtype=torch.float64).expand_as(probs)


@torch.no_grad()
def special_token_bound(policy, tokenizer, prompts, temperature):
    """An upper bound, per prompt, on the probability exact_outcomes leaves out: completions that hold a PAD or BOS
    (decoding drops both) and still decode to the answer. Such a completion agrees with the answer's tokens up to
    its first special token, so its probability is at most
    sum_t P(o_<t = answer_<t) * P(o_t in {PAD, BOS} | x, answer_<t) over the answer's positions t. -> (n,)"""
    answers = [tokenizer.encode(answer(p), add_bos=False) + [tokenizer.eos_token_id] for p in prompts]
    T = max(len(a) for a in answers)
    completions = torch.tensor([a + [tokenizer.pad_token_id] * (T - len(a)) for a in answers])  # (n, T)
    mask = torch.tensor([[t < len(a) for t in range(T)] for a in answers])  # (n, T)
    enc = tokenizer(list(prompts), padding_side="left")
    policy.eval()
    logits = grpo_fixed.completion_logits(policy, enc["input_ids"], enc["attention_mask"], completions, mask)
    logp = torch.log_softmax(logits.double() / temperature, -1)  # (n, T, V)
    special = logp[..., [tokenizer.pad_token_id, tokenizer.bos_token_id]].exp().sum(-1)  # (n, T)
    answer_logp = torch.where(mask, logp.gather(-1, completions[..., None]).squeeze(-1), 0.0)  # (n, T)
    prefix = (answer_logp.cumsum(1) - answer_logp).exp()  # (n, T): P(o_<t = answer_<t)
    return (prefix * special * mask).sum(1)


@torch.no_grad()
def exact_state_values(policy, tokenizer, prompts, completions, mask, temperature):
    """Exact V(s_t) of AdditionTask at every state of sampled completions (s_t = prompt + completions[:, :t]): the
    chance that the rest comes out as the answer, prod_{u >= t} pi_T(o*_u | x, o*_<u), while completions[:, :t] is
    the answer's prefix, and 0 once it is not (a wrong token cannot be undone). PAD and BOS are treated as wrong
    tokens (special_token_bound bounds what that leaves out). completions, mask (n, T) -> (n, T) float64, 0 where
    masked."""
    answer_logp, answer_mask = answer_logprobs(policy, tokenizer, prompts, temperature)  # (n, Ta)
    n, Ta = answer_logp.shape
    T = completions.shape[1]
    answer_ids = torch.full((n, max(T, Ta)), -1)  # (n, max(T, Ta)): -1 matches no token
    for i, p in enumerate(prompts):
        ids = tokenizer.encode(answer(p), add_bos=False) + [tokenizer.eos_token_id]
        answer_ids[i, : len(ids)] = torch.tensor(ids)
    suffix = torch.zeros(n, max(T, Ta), dtype=torch.float64)  # (n, .): sum_{u >= t} log pi(o*_u), 0 past the answer
    suffix[:, :Ta] = answer_logp.double().flip(1).cumsum(1).flip(1)
    agrees = (completions == answer_ids[:, :T]).long()  # (n, T)
    on_track = torch.ones(n, T, dtype=torch.bool)  # (n, T): completions[:, :t] is the answer's prefix
    on_track[:, 1:] = torch.cumprod(agrees[:, :-1], 1).bool()
    reachable = on_track & (answer_ids[:, :T] >= 0)  # (n, T): a state inside the answer
    return torch.where(reachable & mask.bool(), suffix[:, :T].exp(), 0.0)


@torch.no_grad()
def critic_prompt_values(critic, tokenizer, prompts):
    """V_phi(s_0): the critic's value of each prompt before any completion token. (n,)"""
    enc = tokenizer(list(prompts), padding_side="left")
    n = len(prompts)
    dummy = torch.full((n, 1), tokenizer.eos_token_id)  # (n, 1): only the state before token 0 is used
    critic.eval()
    ones = torch.ones(n, 1, dtype=torch.bool)  # (n, 1)
    return state_values(critic, enc["input_ids"], enc["attention_mask"], dummy, ones)[:, 0]


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


class Bars(Line2D):
    """Vertical bars drawn as one line broken by NaNs, set and read like a LineCollection's segments
    (set_segments, get_segments): the bar ends are the line's vertices, data points the axes must hold."""

    def __init__(self, **kwargs):
        super().__init__([], [], **kwargs)
        self._segments = []

    def set_segments(self, segments):
        self._segments = [np.asarray(segment, dtype=float) for segment in segments]  # each (2, 2): bottom, top
        gap = np.full((1, 2), np.nan)
        xy = np.concatenate([np.vstack([segment, gap]) for segment in self._segments]) if self._segments else gap
        self.set_data(xy[:, 0], xy[:, 1])

    def get_segments(self):
        return self._segments


class PerPromptFigure:
    """Two axes, B9's baseline (left) and the group mean (right): per prompt, the baseline's mean +- one std
    over the sampled batches against the exact V(x) (the diagonal is b = V(x)); the critic's V_phi(s_0) as
    crosses on the right. update(...) moves the points, bars and labels in place; they are animated artists, so
    live_plot redraws only them over the cached rest of the figure. fit: the error_stats every update may show
    (the y axis holds each one's mean +- std)."""

    def __init__(self, value, critic_value, *, B, fit=(), figsize=(8.0, 3.4)):
        self.value = value.double()  # (n,)
        self.fig, (ax_b, ax_f) = plots.buggy_vs_fixed(f"baseline per prompt vs exact V(x); B = {B}", figsize=figsize)
        ax_b.set_title("B9: mean of a row of view(G, B)", color=plots.BUGGY)
        ax_f.set_title("fixed: group mean", color=plots.FIXED)
        lo = max(0.0, float(value.min()) - 0.1)
        ends = [float(critic_value.min()), float(critic_value.max())]
        for stats in fit:
            ends += [float((stats["mean_b"] - stats["std_b"]).min()), float((stats["mean_b"] + stats["std_b"]).max())]
        pad = 0.02 * (1 - lo)
        y_lim = (min([lo, *ends]) - pad, max([1.0, *ends]) + pad)
        self.axes = {}
        for ax, color in ((ax_b, plots.BUGGY), (ax_f, plots.FIXED)):
            ax.plot([lo, 1], [lo, 1], color="#999999", lw=0.8, zorder=0)
            (points,) = ax.plot(value, value, "o", ms=3, color=color, label="mean of b +- std", animated=True)
            bars = ax.add_line(Bars(color=color, lw=0.8, animated=True))
            label = ax.text(0.98, 0.03, "", ha="right", transform=ax.transAxes, fontsize="small", animated=True)
            ax.set_xlim(lo, 1)
            ax.set_ylim(*y_lim)
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
