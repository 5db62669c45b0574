"""Machinery for notebook 07 (off-policy in practice): a lower-precision sampler, stale-rollout and
sampler-mismatch runners (cached), exact expected gradients on AdditionTask by enumerating every completion of
at most EXACT_TOKENS tokens the sampler can return for a few prompts, and the figures.

The code the notebook teaches (the truncated-IS weight and loss, the effective sample size) stays in the
notebook and is passed in; nothing here decides how a weight is computed. Every runner is a
`swap.fixed_with` copy of grpo_fixed with `generate`, `rollout` and/or `update_policy` replaced, so
`train()` of the copy drives it. Runners record, per iteration, the per-token log importance weights
log w_t = log pi_trainer(y_t) - log pi_sampler(y_t) on the sampled tokens, from which the notebook
computes its statistics.
"""

from __future__ import annotations

import collections
import copy
import functools
import itertools
import math

import matplotlib.pyplot as plt
import torch

import grpo_fixed
import grpo_support
from workbook.progress import iterations
from workbook.swap import fixed_with

PRECISIONS = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float8_e4m3fn": torch.float8_e4m3fn,
}
"""sampler logit precisions: name -> torch dtype the logits are rounded to (float32 = no rounding)"""

ANCHORS = ("behaviour", "current", "current + TIS")
"""where the clip of a stale batch is anchored: the stale policy that sampled it (old = pi_behaviour);
the current policy recomputed before the update, no correction (old = pi_current); the current policy
plus truncated IS from the sampler to it (decoupled PPO)"""

STATS = {
    "mismatch_kl": grpo_support.Stat(
        "k3 estimate of KL(pi_sampler || pi_trainer) per sampled token, mean(w - 1 - log w)", 0, 1e-5,
        "0 when the sampler is the trainer; on the sharp SFT model of notebook 07 the bfloat16 sampler sits near "
        "the bound (about 1.5e-5), its float8 sampler (an exact gradient bias of about 10 percent) far above"),
    "ess": grpo_support.Stat(
        "effective sample size of the per-token weights pi_trainer / pi_sampler as a fraction of the tokens, "
        "(sum w)^2 / (n sum w^2)", 0.9, 1,
        "1 on-policy; about 1 / (1 + chi^2) of the two policies: falls as the data's policy drifts from the "
        "trainer's (stale rollouts); the weighted batch is worth about ESS * n samples"),
}
"""the statistics notebook 07 adds to each iteration's stats, in the shape of grpo_support.STATS rows"""

SHORT = dict(steps=20, prompts_per_batch=8)
"""every training run of notebook 07: 20 iterations of 8 prompts x 8 samples from the SFT checkpoint, other
settings default (a notebook of 11 such runs, about 2 s each, within its time budget)"""


# ----------------------------------------------------------------------------------------------
# A sampler whose logits are rounded to a lower precision (the trainer stays in float32)


def round_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x rounded to `dtype` (round to nearest) and returned as float32, like logits an inference engine
    computes in that dtype and then upcasts for sampling."""
    return x.to(dtype).float()


class RoundedLogits:
    """Wraps a policy for sampling only: the same call (input_ids, attention_mask, position_ids, key-value
    cache) -> the policy's CausalLMOutput with its logits (N, L, V) rounded to `dtype`."""

    def __init__(self, policy, dtype: torch.dtype):
        self.policy, self.dtype = policy, dtype

    def __call__(self, input_ids, **kwargs):
        out = self.policy(input_ids, **kwargs)
        return out._replace(logits=round_to(out.logits, self.dtype))  # logits (N, L, V), cache unchanged


def rounded_generate(dtype: torch.dtype):
    """A `generate` for swap.fixed_with: the twins' generate, sampling from logits rounded to `dtype`.
    Its sampler_logprobs are the rounded distribution's, as an inference engine would return them."""

    def generate(policy, tokenizer, prompt_ids, prompt_mask, max_new_tokens, temperature, generator=None):
        return grpo_fixed.generate(RoundedLogits(policy, dtype), tokenizer, prompt_ids, prompt_mask, max_new_tokens,
                                   temperature, generator)

    return generate


# ----------------------------------------------------------------------------------------------
# update_policy with the policy-gradient term made replaceable


def update_policy_with(pg_loss):
    """A factory for swap.fixed_with(wrap={"update_policy": update_policy_with(pg_loss)}): the copy's
    update_policy with one line changed, the policy-gradient term is
    pg_loss(logprobs, old_logprobs, sampler_logprobs, advantages, mask, clip) instead of
    grpo_loss(logprobs, old_logprobs, advantages, mask, clip). Everything else (minibatching, KL to the
    reference, optimizer step, records) is as in grpo_fixed.update_policy, with the copy's own functions;
    tests/test_nb07_off_policy.py checks that passing plain grpo_loss reproduces it exactly."""

    def factory(m):
        def update_policy(policy, optimizer, batch, cfg, generator):
            policy.train()
            records = []
            for _ in range(cfg.inner_epochs):
                for idx in torch.randperm(batch["rewards"].shape[0], generator=generator).chunk(cfg.minibatches):
                    mask = batch["mask"][idx]  # (n, T)
                    logprobs = m.policy_logprobs(policy, batch["prompt_ids"][idx], batch["prompt_mask"][idx],
                                                 batch["completions"][idx], mask, cfg.temperature)  # (n, T)
                    old_logprobs = batch["old_logprobs"][idx]  # (n, T)
                    adv = batch["advantages"][idx]  # (n,)
                    pg = pg_loss(logprobs, old_logprobs, batch["sampler_logprobs"][idx], adv, mask, cfg.clip)  # changed
                    kl = m.kl_to_reference(logprobs, batch["ref_logprobs"][idx], mask)
                    loss = pg + cfg.beta * kl
                    grad_norm = m.optimizer_step(policy, optimizer, loss, cfg.max_grad_norm)
                    records.append(m.inner_step_record(logprobs, old_logprobs, adv, mask, cfg.clip, kl, loss,
                                                       grad_norm))
            return records

        return update_policy

    return factory


def plain_grpo_loss(logprobs, old_logprobs, sampler_logprobs, advantages, mask, clip):
    """The twins' grpo_loss, ignoring the sampler log-probs (no correction)."""
    return grpo_fixed.grpo_loss(logprobs, old_logprobs, advantages, mask, clip)


def log_weights(batch) -> torch.Tensor:
    """log w_t = log pi_trainer(y_t) - log pi_sampler(y_t) over the sampled (unmasked) tokens. (n_tokens,)"""
    return (batch["old_logprobs"] - batch["sampler_logprobs"])[batch["mask"]]


# ----------------------------------------------------------------------------------------------
# Runners (cached: a slider position only selects among finished runs)


def _tis_term(tis, cap):
    """pg_loss for update_policy_with: the notebook's tis(..., cap) or the plain loss when tis is None."""
    if tis is None:
        return plain_grpo_loss

    def pg_loss(logprobs, old_logprobs, sampler_logprobs, advantages, mask, clip):
        return tis(logprobs, old_logprobs, sampler_logprobs, advantages, mask, clip, cap)

    return pg_loss


@functools.cache
def run_mismatch(precision: str, tis=None, cap: float = math.inf, seed: int = 0):
    """train() with the sampler's logits rounded to PRECISIONS[precision] (the trainer in float32),
    with the policy-gradient term tis(logprobs, old, sampler, A, mask, clip, cap) when tis is given.
    -> dict(history, log_w, policy): stats per iteration, per iteration the log weights (n_tokens,), and
    the trained policy (float32)."""
    out = dict(log_w=[])

    def recording(m):
        base = m.rollout  # the copy's own rollout, which the recording one calls

        def rollout(policy, ref_policy, tokenizer, task, cfg, generator):
            batch, stats = base(policy, ref_policy, tokenizer, task, cfg, generator)
            out["log_w"].append(log_weights(batch))
            out["policy"] = policy  # trained in place: after train() it is the final policy
            return batch, stats

        return rollout

    m = fixed_with(f"mismatch_{precision}", generate=rounded_generate(PRECISIONS[precision]),
                   wrap={"update_policy": update_policy_with(_tis_term(tis, cap)), "rollout": recording})
    out["history"] = m.train(seed=seed, on_iteration=iterations(f"the {precision} sampler", SHORT["steps"]), **SHORT)
    return out


def stale_rollout(k: int, anchor: str, fixed_rollout, fixed_policy_logprobs, fixed_rollout_stats, log_w: list):
    """A `rollout` whose samples come from the policy as it was k iterations ago (the behaviour policy).

    Snapshots of the policy are kept in a queue of length k + 1; early on, the oldest one available is
    used. anchor: "behaviour" keeps old_logprobs = log pi_behaviour (what the sampler returned);
    "current" and "current + TIS" recompute old_logprobs under the current policy before the update,
    and sampler_logprobs stay pi_behaviour's. log w_t (current vs behaviour) is appended to log_w, and
    stats["current_reward"] is the current policy's reward (current_reward), not the batch's."""
    snapshots = collections.deque(maxlen=k + 1)  # parameter copies (state dicts), cheaper than model copies
    behaviour = []  # one model, created once, into which the oldest snapshot is loaded

    @torch.no_grad()
    def rollout(policy, ref_policy, tokenizer, task, cfg, generator):
        snapshots.append({name: t.detach().clone() for name, t in policy.state_dict().items()})
        if not behaviour:
            behaviour.append(copy.deepcopy(policy))
        behaviour[0].load_state_dict(snapshots[0])  # (k updates old once the queue is full)
        behaviour[0].eval()
        batch, stats = fixed_rollout(behaviour[0], ref_policy, tokenizer, task, cfg, generator)
        policy.eval()
        current = fixed_policy_logprobs(policy, batch["prompt_ids"], batch["prompt_mask"], batch["completions"],
                                        batch["mask"], cfg.temperature)  # (N, T)
        log_w.append((current - batch["sampler_logprobs"])[batch["mask"]])
        stats["current_reward"] = current_reward(policy, tokenizer, task, batch, cfg, len(log_w))
        if anchor != "behaviour":
            batch["old_logprobs"] = current
            stats.update(fixed_rollout_stats(batch, cfg.group_size, tokenizer))
        return batch, stats

    return rollout


@torch.no_grad()
def current_reward(policy, tokenizer, task, batch, cfg, iteration: int) -> float:
    """Mean reward of the current policy on the batch's prompts (G samples each), sampled with a generator of
    its own (seeded by the iteration), so the training run's random stream is untouched."""
    generator = torch.Generator().manual_seed(10_000 + iteration)
    completions, mask, _, _ = grpo_fixed.generate(policy, tokenizer, batch["prompt_ids"], batch["prompt_mask"],
                                                  task.max_completion_length, cfg.temperature, generator)
    texts = grpo_fixed.decode_completions(tokenizer, completions, mask)  # up to the first EOS
    return task.reward(batch["prompts"], texts).mean().item()


@functools.cache
def run_stale(k: int, anchor: str, tis=None, cap: float = math.inf, seed: int = 0):
    """train() with rollouts sampled by the policy k iterations old, the clip anchored per `anchor`
    (ANCHORS); "current + TIS" needs the notebook's tis loss. -> dict(history, log_w, current_reward, policy).

    history[i]["reward"] is the reward of the batch, i.e. of the behaviour policy that sampled it (k updates
    old); current_reward[i] is the mean reward of the current policy (the one being trained) at iteration i,
    on a separate batch of the same prompts sampled by it with its own generator stream (the training
    stream is not touched)."""
    if anchor not in ANCHORS:
        raise ValueError(f"anchor must be one of {ANCHORS}, got {anchor!r}")
    if (anchor == "current + TIS") != (tis is not None):
        raise ValueError("pass tis exactly when anchor is 'current + TIS'")
    out = dict(log_w=[])

    def stale(m):
        inner = stale_rollout(k, anchor, m.rollout, m.policy_logprobs, m.rollout_stats, out["log_w"])

        def rollout(policy, ref_policy, tokenizer, task, cfg, generator):
            out["policy"] = policy  # trained in place: after train() it is the final policy
            return inner(policy, ref_policy, tokenizer, task, cfg, generator)

        return rollout

    m = fixed_with(f"stale_{k}", wrap={"update_policy": update_policy_with(_tis_term(tis, cap)), "rollout": stale})
    out["history"] = m.train(seed=seed, on_iteration=iterations(f"k = {k}, {anchor} anchor", SHORT["steps"]), **SHORT)
    out["current_reward"] = [s["current_reward"] for s in out["history"]]
    return out


def run_on_policy(seed: int = 0):
    """The plain twin (float32 sampler, no staleness) as one cached run that serves both sections of
    notebook 07: run_stale(0, "behaviour", seed=seed). At k = 0 the sampler is the trainer, so its history
    is grpo_fixed.train's and log_w is the float32 trainer-vs-sampler gap (tests/test_nb07_off_policy.py
    checks both). -> dict(history, log_w, current_reward, policy)."""
    return run_stale(0, "behaviour", seed=seed)


# ----------------------------------------------------------------------------------------------
# Exact expected gradients on AdditionTask: every completion enumerated, no sampling noise

EXACT_TOKENS = 3
"""completion length the exact gradients enumerate (EOS included): the longest answer, 98, needs 3 tokens.
All 5 tokens of the task would mean (V-1)^4 = 38,416 distinct 4-token prefixes to score per prompt; 3 tokens
need 1 + 14 + 196 = 211."""


def completion_count(vocab_size: int, max_completion_length: int) -> int:
    """Distinct completions generate can return, counted up to the first EOS (what the mask keeps; the tokens
    sampled after it are masked out and never scored): a first EOS after l = 0 .. T-1 other tokens (any of V - 1),
    or T tokens without EOS: sum_{l<T} (V-1)^l + (V-1)^T."""
    words = vocab_size - 1
    return sum(words**length for length in range(max_completion_length)) + words**max_completion_length


def completion_tree(tokenizer, max_completion_length: int):
    """Every distinct completion the twins' generate can return, up to its first EOS (a first EOS at position
    t, or no EOS at all), and the prefixes y_<t they condition on. generate samples from the whole vocabulary,
    so a non-final token is any of the V - 1 ids other than EOS (PAD and BOS included, however unlikely).
    generate leaves whatever it sampled after the first EOS in place, but the mask hides it from the loss and
    decode_completions from the reward, so one row stands for all of them: PAD fills it here.

    -> dict(completions (S, T), mask (S, T) as generate builds it, texts: the S decoded completions as
    rollout decodes them, prefixes: list over length l of (n_l, l) tensors of EOS-free prefixes, node (S, T):
    index of y_<t in the concatenated prefixes). S = sum_{l<T} (V-1)^l + (V-1)^T."""
    T, eos, pad = max_completion_length, tokenizer.eos_token_id, tokenizer.pad_token_id
    words = [w for w in range(tokenizer.vocab_size) if w != eos]
    rows = []
    for length in range(1, T + 1):  # the first EOS at position length - 1, PAD (masked filler) after it
        rows += [list(p) + [eos] + [pad] * (T - length) for p in itertools.product(words, repeat=length - 1)]
    rows += [list(p) for p in itertools.product(words, repeat=T)]  # never stopped
    completions = torch.tensor(rows)  # (S, T)
    is_eos = (completions == eos).long()
    mask = (torch.cumsum(is_eos, dim=1) - is_eos) == 0  # (S, T): up to and including the first EOS
    prefixes = [list(itertools.product(words, repeat=length)) for length in range(T)]
    index = {p: i for i, p in enumerate(itertools.chain(*prefixes))}
    node = torch.tensor([[index.get(tuple(row[:t]), 0) for t in range(T)] for row in rows])  # (S, T); 0 if masked
    prefixes = [torch.tensor(p, dtype=torch.long).view(len(p), length) for length, p in enumerate(prefixes)]
    texts = grpo_fixed.decode_completions(tokenizer, completions, mask)
    return dict(completions=completions, mask=mask, texts=texts, prefixes=prefixes, node=node)


def tree_logprobs(logits_fn, tokenizer, prompts: list[str], tree, temperature):
    """log pi(y_t | x, y_<t) for every prompt x and enumerated completion y, zero at masked positions.
    One forward per prompt and prefix length over the distinct prefixes only (one prompt per forward: no
    padding). logits_fn: a TinyLM or RoundedLogits. prompts: X strings -> (X, S, T)"""
    per_prompt = []
    for prompt in prompts:
        prompt_ids = tokenizer([prompt])["input_ids"]  # (1, P), BOS first
        node_logits = []
        for prefix in tree["prefixes"]:  # (n_l, l)
            tokens = torch.cat([prompt_ids.expand(prefix.shape[0], -1), prefix], dim=1)  # (n_l, P + l)
            node_logits.append(logits_fn(tokens).logits[:, -1])  # (n_l, V)
        per_prompt.append(torch.cat(node_logits))  # (n_nodes, V)
    logp_nodes = torch.log_softmax(torch.stack(per_prompt) / temperature, -1)  # (X, n_nodes, V)
    logp = logp_nodes[:, tree["node"], tree["completions"]]  # (X, S, T)
    return torch.where(tree["mask"], logp, 0.0)


def tree_rewards(task, prompts: list[str], tree) -> torch.Tensor:
    """task.reward of every (prompt, enumerated completion) pair, on the decoded text. -> (X, S)"""
    S = len(tree["texts"])
    return torch.stack([task.reward([prompt] * S, tree["texts"]) for prompt in prompts])  # (X, S)


def exact_gradients(policy, task, tokenizer, prompts: list[str], dtype, temperature, weightings: dict,
                    max_new_tokens: int = EXACT_TOKENS):
    """Expected policy gradients over every completion of each prompt in `prompts`, exactly (no sampling):

      true     grad J,  J = mean_x sum_y pi(y|x) r(x, y)
      <name>   mean_x sum_y q(y|x) (r - b_q(x)) sum_t W_t grad log pi(y_t | x, y_<t),
               W = weightings[name](logp, logq) (X, S, T), held constant (no gradient through W)

    q is the sampler with logits rounded to `dtype`; b_q(x) = E_q[r | x] is what a group mean of samples
    from q estimates. W = 1 is the uncorrected update; the notebook passes its truncated IS weights.
    Every estimator is linear in log pi, so each is one backward pass with coefficients
    c = q(y) (r - b_q) W_t; the true gradient uses the same identity with c = pi(y) (r - E_pi[r]).
    The completions are those of generate with max_new_tokens (default EXACT_TOKENS), every one of them.
    Returns dict name -> flat gradient over the policy's parameters (float64)."""
    tree = completion_tree(tokenizer, max_new_tokens)
    mask = tree["mask"]  # (S, T)
    X = len(prompts)
    rewards = tree_rewards(task, prompts, tree)  # (X, S)
    logp = tree_logprobs(policy, tokenizer, prompts, tree, temperature)  # (X, S, T), with grad
    with torch.no_grad():
        logq = tree_logprobs(RoundedLogits(policy, dtype), tokenizer, prompts, tree, temperature)  # (X, S, T)
        p_seq, q_seq = logp.sum(2).exp(), logq.sum(2).exp()  # (X, S)
        coefficients = {"true": (p_seq * (rewards - (p_seq * rewards).sum(1, keepdim=True)))[..., None]}
        adv_q = (q_seq * (rewards - (q_seq * rewards).sum(1, keepdim=True)))[..., None]  # (X, S, 1)
        for name, weighting in weightings.items():
            coefficients[name] = adv_q * weighting(logp.detach(), logq)  # (X, S, T)
    params = list(policy.parameters())
    grads = {}
    for name, c in coefficients.items():
        g = torch.autograd.grad(logp, params, grad_outputs=(c * mask).expand_as(logp) / X, retain_graph=True)
        grads[name] = torch.cat([x.flatten() for x in g]).double()
    return grads


def sampler_batch(policy, precision: str, seed: int = 0, prompts_per_batch: int = 64):
    """One rollout batch of the twins' rollout from `policy`, sampled with logits rounded to
    PRECISIONS[precision]; old_logprobs are the float32 trainer's. -> (batch, stats)"""
    m = fixed_with(f"sampler_{precision}", generate=rounded_generate(PRECISIONS[precision]))
    cfg = m.make_config(prompts_per_batch=prompts_per_batch)
    task = m.AdditionTask()
    tokenizer = grpo_fixed.CharTokenizer(task.alphabet)
    return m.rollout(policy, policy, tokenizer, task, cfg, torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------------
# Figures and controls


def new_figure(ncols: int = 2, figsize=(9.0, 3.2)):
    """A figure of ncols axes side by side (constrained layout)."""
    fig, axes = plt.subplots(1, ncols, figsize=figsize, layout="constrained")
    return fig, axes
