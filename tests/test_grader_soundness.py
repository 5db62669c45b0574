"""The grader cannot be fooled: for every catalogued bug, plausible wrong fixes that must not count as fixed
and correct fixes written another way than the fixed twin's that must.

Each fix is a source edit of a 1-bug round of that bug (generated with interview.rounds in a tmp dir): the
buggy function is replaced, as a candidate would rewrite it. Every file of one bug is graded in one run of
the grader's command line (`python -m interview grade --json`). Every wrong fix here fails at least one
test, not only the short training run: the two that passed every test got one in tests/test_catalog.py
(the reference's log-probs as the old ones: test_B3_ratio_is_1_first_then_moves_once_the_policy_left_its_reference;
clipping after optimizer.step() and an L1 clip: test_B11_the_step_applies_the_gradient_clipped_to_its_l2_norm),
never a special case in the grader. The correct fixes pass every test but those marked beyond_spec (the
fixed twin's exact centring and tiny-reward precision, which SPEC.md does not ask for).
Four more wrong fixes passed every test until tests/test_catalog.py caught them: a reference of random weights,
a second fresh model, a reference left in train mode (test_B16_the_reference_stays_the_starting_policy, with
dropout 0.5 and a fresh-model task), and a reward text that keeps a PAD or BOS sampled before the EOS
(test_B17_reward_text_stops_at_the_first_eos).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from interview import rounds, splice, verdicts
from workbook import catalog

pytestmark = pytest.mark.slow

ROOT = rounds.ROOT
WHEN = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.UTC)


def one_bug_round(bug_id: str) -> tuple[int, str]:
    """(round number, source) of the first 1-bug round that draws `bug_id`."""
    number = next(n for n in range(1000) if rounds.draw(n, 1) == [bug_id])
    return number, rounds.round_source(number, 1, WHEN)


def body(header: str, *lines: str) -> str:
    return "\n".join([header, *lines]) + "\n"


SAMPLE = "def sample_from_logits(logits, num_samples: int = 1, *, generator=None):"
ADV = "def group_advantage(rewards, eps: float = 1e-8):"
UPDATE = "def update_policy(policy, optimizer, batch, cfg, generator):"
LOSS = "def grpo_loss(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):"
MEAN = "def masked_mean(values, mask):"
SHIFT = "def completion_logits(policy, prompt_ids, prompt_mask, completions, mask):"
LOGP = "def token_logprobs(logits, tokens):"
KL = "def kl_to_reference(logprobs, ref_logprobs, mask):"
GROUPS = "def batch_advantages(rewards, group_size: int, eps: float = 1e-8):"
TEMP = "def policy_logprobs(policy, prompt_ids, prompt_mask, completions, mask, temperature):"
LOGITS = "    logits = completion_logits(policy, prompt_ids, prompt_mask, completions, mask)"
STEP = "def optimizer_step(policy, optimizer, loss, max_grad_norm):"


def update(old: str) -> str:
    """update_policy with the line that sets old_logprobs (inside the minibatch loop) replaced by `old`;
    `old` may start with 'EPOCH:' to set `old_all` once per epoch instead."""
    per_epoch = old.startswith("EPOCH:")
    lines = [UPDATE, "    policy.train()", "    records = []", "    for _ in range(cfg.inner_epochs):"]
    if per_epoch:
        lines += ["        with torch.no_grad():",
                  '            old_all = policy_logprobs(policy, batch["prompt_ids"], batch["prompt_mask"], '
                  'batch["completions"], batch["mask"], cfg.temperature)']
    lines += ['        for idx in torch.randperm(batch["rewards"].shape[0], generator=generator)'
              '.chunk(cfg.minibatches):',
              '            mask = batch["mask"][idx]',
              '            logprobs = policy_logprobs(policy, batch["prompt_ids"][idx], batch["prompt_mask"][idx], '
              'batch["completions"][idx], mask, cfg.temperature)',
              f"            old_logprobs = {old.removeprefix('EPOCH:')}",
              '            adv = batch["advantages"][idx]',
              "            pg_loss = grpo_loss(logprobs, old_logprobs, adv, mask, cfg.clip)",
              '            kl = kl_to_reference(logprobs, batch["ref_logprobs"][idx], mask)',
              "            loss = pg_loss + cfg.beta * kl",
              "            grad_norm = optimizer_step(policy, optimizer, loss, cfg.max_grad_norm)",
              "            records.append(inner_step_record(logprobs, old_logprobs, adv, mask, cfg.clip, kl, loss, "
              "grad_norm))",
              "    return records"]
    return body(*lines)


def loss(clipped: str, pick: str = "torch.min") -> str:
    return body(LOSS, "    mask = check_loss_inputs(logprobs, old_logprobs, advantages, mask, clip)",
                "    log_ratio = _zero_masked(logprobs - old_logprobs.detach(), mask)",
                "    ratio = torch.exp(log_ratio.clamp(max=math.log(torch.finfo(log_ratio.dtype).max) - 1))",
                "    adv = advantages.detach().unsqueeze(1)",
                "    unclipped = ratio * adv",
                f"    clipped = {clipped}",
                f"    return -masked_mean({pick}(unclipped, clipped), mask)")


def shift(rows: str) -> str:
    return body(SHIFT, "    input_ids = torch.cat([prompt_ids, completions], dim=1)",
                "    attention_mask = torch.cat([prompt_mask.long(), mask.long()], dim=1)",
                "    logits = policy(input_ids, attention_mask=attention_mask, "
                "position_ids=position_ids(attention_mask)).logits",
                "    T = completions.shape[1]", f"    return {rows}")


def kl(*lines: str) -> str:
    return body(KL, "    mask = mask.bool()", *lines)


def step(clip_line: str, after: bool = False) -> str:
    lines = [STEP, "    optimizer.zero_grad(set_to_none=True)", "    loss.backward()"]
    stepping = ["    if torch.isfinite(loss) and torch.isfinite(grad_norm):", "        optimizer.step()"]
    if after:
        lines += ["    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in policy.parameters() "
                  "if p.grad is not None])", *stepping, f"    {clip_line}"]
    else:
        lines += [f"    {clip_line}", *stepping]
    return body(*lines, "    return grad_norm.item()")


SEQ = "def sequence_inputs(prompt_ids, prompt_mask, completions, mask):"
GEN = "def generate(policy, tokenizer, prompt_ids, prompt_mask, max_new_tokens, temperature, generator=None):"
CMASK = "def completion_mask(completions, eos_id):"
DECODE = "def decode_completions(tokenizer, completions, mask):"
REPEAT = "def repeat_prompts(prompts, group_size):"
SETUP = "def setup_run(task, cfg, seed):"
NO_GRAD = "@torch.no_grad()"


def inputs(*lines: str) -> str:
    """sequence_inputs: input_ids and attention_mask as the hand-out builds them, then `lines`."""
    return body(SEQ, "    input_ids = torch.cat([prompt_ids, completions], dim=1)",
                "    attention_mask = torch.cat([prompt_mask.long(), mask.long()], dim=1)", *lines)


def generate(first: str, step: str, decorated: bool = True) -> str:
    """generate as handed out, with `first` and `step` (e.g. 'attention_mask=attention_mask, ') added to the
    keyword arguments of the prompt's forward and of every cached step's, after position_ids (so the code is
    not the fixed twin's); without `decorated`, a `with torch.no_grad():` block replaces the decorator."""
    core = ["attention_mask = prompt_mask.long()",
            f"out = policy(prompt_ids, position_ids=position_ids(attention_mask), {first}use_cache=True)",
            "tokens, logprobs, entropies = [], [], []",
            "for _ in range(max_new_tokens):",
            "    logits = out.logits[:, -1] / temperature",
            "    nxt = sample_from_logits(logits, 1, generator=generator).squeeze(-1)",
            "    logp = torch.log_softmax(logits, dim=-1)",
            "    logprobs.append(logp.gather(1, nxt[:, None]).squeeze(1))",
            "    entropies.append(-(logp.exp() * logp).sum(-1))",
            "    tokens.append(nxt)",
            "    attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)",
            f"    out = policy(nxt[:, None], position_ids=position_ids(attention_mask)[:, -1:], {step}"
            "past_key_values=out.past_key_values, use_cache=True)",
            "completions = torch.stack(tokens, dim=1)",
            "mask = completion_mask(completions, tokenizer.eos_token_id)",
            "return completions, mask, torch.stack(logprobs, dim=1), torch.stack(entropies, dim=1)"]
    if decorated:
        return body(NO_GRAD, GEN, *("    " + line for line in core))
    return body(GEN, "    with torch.no_grad():", *("        " + line for line in core))


GENERATE_FULL_MASK = body(  # the mask of all P + T columns built once, sliced per step; positions from row lengths
    NO_GRAD, GEN,
    "    N, P = prompt_ids.shape",
    "    full = torch.cat([prompt_mask.long(), torch.ones(N, max_new_tokens, dtype=torch.long)], dim=1)",
    "    lengths = prompt_mask.long().sum(dim=1, keepdim=True)",
    "    out = policy(prompt_ids, attention_mask=full[:, :P], position_ids=position_ids(full[:, :P]), use_cache=True)",
    "    tokens, logprobs, entropies = [], [], []",
    "    for t in range(max_new_tokens):",
    "        logits = out.logits[:, -1] / temperature",
    "        nxt = sample_from_logits(logits, 1, generator=generator).squeeze(-1)",
    "        logp = torch.log_softmax(logits, dim=-1)",
    "        logprobs.append(logp.gather(1, nxt[:, None]).squeeze(1))",
    "        entropies.append(-(logp.exp() * logp).sum(-1))",
    "        tokens.append(nxt)",
    "        out = policy(nxt[:, None], attention_mask=full[:, : P + t + 1], position_ids=lengths + t,",
    "                     past_key_values=out.past_key_values, use_cache=True)",
    "    completions = torch.stack(tokens, dim=1)",
    "    mask = completion_mask(completions, tokenizer.eos_token_id)",
    "    return completions, mask, torch.stack(logprobs, dim=1), torch.stack(entropies, dim=1)")


def eos_mask(*lines: str) -> str:
    return body(CMASK, "    is_eos = (completions == eos_id).long()", *lines)


def setup(*lines: str, after_optimizer: bool = False) -> str:
    """setup_run as handed out with `lines` in place of `ref_policy = policy` (after the optimizer is built
    with `after_optimizer`)."""
    head = [SETUP, "    import copy", "", "    torch.manual_seed(seed)", "    tokenizer = CharTokenizer(task.alphabet)",
            "    if task.checkpoint is None:",
            "        policy = TinyLM(TinyLMConfig(tokenizer.vocab_size, dropout=cfg.dropout))",
            "    else:", "        policy = TinyLM.from_pretrained(task.checkpoint, dropout=cfg.dropout)"]
    adam = ["    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)"]
    ref = [f"    {line}" for line in lines]
    return body(*head, *(adam + ref if after_optimizer else ref + adam),
                "    return policy, ref_policy, tokenizer, optimizer, torch.Generator().manual_seed(seed)")


def setup_branches(fresh: str, loaded: str, *after: str) -> str:
    """setup_run whose reference is made in each branch of the checkpoint test: `fresh` (no checkpoint),
    `loaded` (the SFT checkpoint), then `after` for both."""
    return body(SETUP, "    import copy", "", "    torch.manual_seed(seed)",
                "    tokenizer = CharTokenizer(task.alphabet)", "    if task.checkpoint is None:",
                "        policy = TinyLM(TinyLMConfig(tokenizer.vocab_size, dropout=cfg.dropout))",
                f"        {fresh}",
                "    else:", "        policy = TinyLM.from_pretrained(task.checkpoint, dropout=cfg.dropout)",
                f"        {loaded}", *(f"    {line}" for line in after),
                "    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)",
                "    return policy, ref_policy, tokenizer, optimizer, torch.Generator().manual_seed(seed)")


FIXES = {  # bug id -> (wrong fixes, correct fixes): name -> the buggy function's new source
    "B1": (
        {"softmax over dim 0": body(SAMPLE, "    check_logits(logits, num_samples)",
                                    "    probs = torch.softmax(logits, dim=0)",
                                    "    return torch.multinomial(probs, num_samples, replacement=True, "
                                    "generator=generator)"),
         "generator not passed": body(SAMPLE, "    check_logits(logits, num_samples)",
                                      "    return torch.multinomial(torch.softmax(logits, -1), num_samples, "
                                      "replacement=True)"),
         "exp without a shift": body(SAMPLE, "    check_logits(logits, num_samples)",
                                     "    return torch.multinomial(logits.exp(), num_samples, replacement=True, "
                                     "generator=generator)")},
        {"torch.softmax": body(SAMPLE, "    check_logits(logits, num_samples)",
                               "    probs = torch.softmax(logits, -1)",
                               "    return torch.multinomial(probs, num_samples, replacement=True, "
                               "generator=generator)"),
         "Tensor.softmax": body(SAMPLE, "    check_logits(logits, num_samples)",
                                "    return torch.multinomial(logits.softmax(-1), num_samples, replacement=True, "
                                "generator=generator)"),
         "F.softmax": body(SAMPLE, "    import torch.nn.functional as F", "",
                           "    check_logits(logits, num_samples)",
                           "    probs = F.softmax(logits, dim=-1)",
                           "    return torch.multinomial(probs, num_samples, replacement=True, generator=generator)")},
    ),
    "B2": (
        {"eps inside the sqrt": body(ADV, "    r = check_rewards(rewards, eps)", "    centered = r - r.mean()",
                                     "    return centered / (centered.pow(2).mean() + eps).sqrt()"),
         "max(std, eps)": body(ADV, "    r = check_rewards(rewards, eps)", "    centered = r - r.mean()",
                               "    return centered / centered.pow(2).mean().sqrt().clamp(min=eps)"),
         "no eps, nan_to_num": body(ADV, "    r = check_rewards(rewards, eps)", "    centered = r - r.mean()",
                                    "    return torch.nan_to_num(centered / centered.pow(2).mean().sqrt())"),
         "sample std": body(ADV, "    r = check_rewards(rewards, eps)",
                            "    if bool((r == r[0]).all()):", "        return torch.zeros_like(r)",
                            "    return (r - r.mean()) / (r.std() + eps)")},
        {"std(correction=0) + eps, rescaled": body(
            ADV, "    r = check_rewards(rewards, eps)",
            "    if bool((r == r[0]).all()):", "        return torch.zeros_like(r)",
            "    scale = max(1.0, float(r.abs().max()))  # overflow guard: huge rewards are rescaled first",
            "    r = r / scale",
            "    return (r - r.mean()) / (r.std(correction=0) + eps / scale)"),
         "std_mean, guarded": body(
            ADV, "    r = check_rewards(rewards, eps)",
            "    if bool((r == r[0]).all()):", "        return torch.zeros_like(r)",
            "    big = r.abs().max()",
            "    if big > 1e150:", "        r, eps = r / big, eps / float(big)",
            "    std, mean = torch.std_mean(r, correction=0)",
            "    return (r - mean) / (std + eps)")},
    ),
    "B3": (
        {"reference log-probs as old": update('batch["ref_logprobs"][idx]'),
         "old log-probs once per epoch": update("EPOCH:old_all[idx]")},
        {"cached old log-probs": update('batch["old_logprobs"][idx]'),
         "index_select, detached": update('batch["old_logprobs"].index_select(0, idx).detach()')},
    ),
    "B4": (
        {"clamp of the product by A-scaled bounds": loss("torch.clamp(ratio * adv, (1 - clip) * adv, "
                                                         "(1 + clip) * adv)"),
         "max of the two terms": loss("torch.clamp(ratio, 1 - clip, 1 + clip) * adv", "torch.max"),
         "clip the ratio, no A": loss("torch.clamp(ratio, 1 - clip, 1 + clip)")},
        {"torch.clamp(ratio) * A": loss("torch.clamp(ratio, 1 - clip, 1 + clip) * adv"),
         "ratio.clip * A": loss("adv * ratio.clip(1 - clip, 1 + clip)")},
    ),
    "B5": (
        {"detached tensor(0.) when all masked": body(
            MEAN, "    mask = mask.bool()", "    if not mask.any():", "        return torch.tensor(0.0)",
            "    return torch.where(mask, values, torch.zeros_like(values)).sum() / mask.sum()"),
         "clamped count, values * mask": body(MEAN, "    mask = mask.bool()",
                                              "    return (values * mask).sum() / mask.sum().clamp(min=1)"),
         "mean of the selection": body(MEAN, "    return values[mask.bool()].mean()")},
        {"torch.where": body(MEAN, "    mask = mask.bool()",
                             "    kept = torch.where(mask, values, torch.zeros_like(values))",
                             "    return kept.sum() / mask.sum().clamp(min=1)"),
         "selection sum / max(1, count)": body(MEAN, "    mask = mask.bool()",
                                               "    return values[mask].sum() / max(1, int(mask.sum()))")},
    ),
    "B6": (
        {"shifted by two": shift("logits[:, -T - 2 : -2]"),
         "the first T rows": shift("logits[:, :T]")},
        {"rows -T-1 .. -2": shift("logits[:, -T - 1 : -1]"),
         "rows P-1 .. P+T-2": shift("logits[:, prompt_ids.shape[1] - 1 : prompt_ids.shape[1] + T - 1]")},
    ),
    "B7": (
        {"float64 log(softmax)": body(LOGP, "    probs = torch.softmax(logits.double(), dim=-1)",
                                      "    logp = torch.log(probs).to(logits.dtype)",
                                      "    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)"),
         "log(softmax + tiny)": body(LOGP, "    probs = torch.softmax(logits, dim=-1)",
                                     "    logp = torch.log(probs + 1e-30)",
                                     "    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)")},
        {"log_softmax": body(LOGP, "    logp = torch.log_softmax(logits, dim=-1)",
                             "    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)"),
         "x - logsumexp": body(LOGP, "    logp = logits - logits.logsumexp(-1, keepdim=True)",
                               "    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)")},
    ),
    "B8": (
        {"k1 estimator": kl("    log_ratio = _zero_masked(ref_logprobs.detach() - logprobs, mask)",
                            "    return masked_mean(-log_ratio, mask)"),
         "policy side detached": kl("    log_ratio = _zero_masked(ref_logprobs.detach() - logprobs.detach(), mask)",
                                    "    return masked_mean(log_ratio.exp() - log_ratio - 1, mask)"),
         "k2 estimator": kl("    log_ratio = _zero_masked(ref_logprobs.detach() - logprobs, mask)",
                            "    return masked_mean(0.5 * log_ratio**2, mask)")},
        {"k3 on log(pi_ref / pi)": kl("    log_ratio = _zero_masked(ref_logprobs.detach() - logprobs, mask)",
                                      "    return masked_mean(log_ratio.exp() - log_ratio - 1, mask)"),
         "expm1 form": kl("    x = torch.where(mask, ref_logprobs.detach() - logprobs, torch.zeros_like(logprobs))",
                          "    return masked_mean(torch.expm1(x) - x, mask)")},
    ),
    "B9": (
        {"view(G, B) transposed": body(GROUPS, "    groups = rewards.view(group_size, -1).T",
                                       "    adv = torch.stack([group_advantage(g.tolist(), eps) for g in groups])",
                                       "    return adv.reshape(-1).float()"),
         "right groups, transposed back": body(GROUPS, "    groups = rewards.view(-1, group_size)",
                                               "    adv = torch.stack([group_advantage(g.tolist(), eps) "
                                               "for g in groups])",
                                               "    return adv.T.reshape(-1).float()")},
        {"view(-1, G)": body(GROUPS, "    groups = rewards.view(-1, group_size)",
                             "    adv = torch.stack([group_advantage(g.tolist(), eps) for g in groups])",
                             "    return adv.reshape(-1).float()"),
         "unflatten": body(GROUPS, "    groups = rewards.unflatten(0, (-1, group_size))",
                           "    return torch.cat([group_advantage(g.tolist(), eps) for g in groups]).float()")},
    ),
    "B10": (
        {"logits times T": body(TEMP, LOGITS + " * temperature",
                                "    return token_logprobs(logits, completions)"),
         "log-probs divided by T": body(TEMP, LOGITS,
                                        "    return token_logprobs(logits, completions) / temperature")},
        {"logits / T": body(TEMP, LOGITS + " / temperature",
                            "    return token_logprobs(logits, completions)"),
         "scaled in the call": body(TEMP, LOGITS,
                                    "    return token_logprobs(logits / temperature, completions)")},
    ),
    "B11": (
        {"clip after optimizer.step()": step(
            "torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)", after=True),
         "L1-norm clip": step("grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm, "
                              "norm_type=1)")},
        {"positional max_grad_norm": step("grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), "
                                          "max_grad_norm)"),
         "max_norm=": step("grad_norm = torch.nn.utils.clip_grad_norm_(list(policy.parameters()), "
                           "max_norm=max_grad_norm, norm_type=2.0)")},
    ),
    "B12": (
        {"positions 0..L-1 (the model's default)": inputs(
            "    positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)",
            "    return dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions)"),
         "cumsum without the - 1 (positions from 1)": inputs(
            "    return dict(input_ids=input_ids, attention_mask=attention_mask, "
            "position_ids=attention_mask.cumsum(-1))"),
         "completion positions restart at 0": inputs(
            "    positions = torch.cat([position_ids(prompt_mask), position_ids(mask)], dim=1)",
            "    return dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions)"),
         "positions, but the attention mask dropped": inputs(
            "    return dict(input_ids=input_ids, position_ids=position_ids(attention_mask))")},
        {"cumsum - 1 inline, clamped": inputs(
            "    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)",
            "    return dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions)"),
         "cumsum - 1, padding filled with 0": inputs(
            "    positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)",
            "    return {'input_ids': input_ids, 'attention_mask': attention_mask, 'position_ids': positions}"),
         "the prompt's positions, then counting on": inputs(
            "    start = prompt_mask.long().sum(dim=1, keepdim=True)  # (N, 1): the first completion position",
            "    positions = torch.cat([position_ids(prompt_mask), start + torch.arange(completions.shape[1])], dim=1)",
            "    return dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions)")},
    ),
    "B13": (
        {"mask at the prompt's forward only": generate("attention_mask=attention_mask, ", ""),
         "mask at the cached steps only": generate("", "attention_mask=attention_mask, "),
         "a mask of all ones": generate("attention_mask=torch.ones_like(attention_mask), ",
                                        "attention_mask=torch.ones_like(attention_mask), "),
         "the prompt's mask at every step (not extended)": generate("attention_mask=prompt_mask, ",
                                                                    "attention_mask=prompt_mask, ")},
        {"mask at the prompt and at every step": generate("attention_mask=attention_mask, ",
                                                          "attention_mask=attention_mask, "),
         "no decorator, torch.no_grad() inside": generate("attention_mask=attention_mask, ",
                                                          "attention_mask=attention_mask, ", decorated=False),
         "the full mask built once, sliced per step": GENERATE_FULL_MASK},
    ),
    "B14": (
        {"every token but EOS": body(CMASK, "    return completions != eos_id"),
         "every token but PAD (id 0)": body(CMASK, "    return completions != 0"),
         "through the second EOS": eos_mask("    return is_eos.cumsum(dim=1) <= 1"),
         "argmax of the first EOS, rows without one not handled": eos_mask(
            "    first = is_eos.argmax(dim=1, keepdim=True)  # (N, 1)",
            "    return torch.arange(completions.shape[1])[None] <= first")},
        {"EOS counted strictly before t, one line": eos_mask("    return (is_eos.cumsum(1) - is_eos) == 0"),
         "cumsum shifted right with torch.cat": eos_mask(
            "    before = torch.cat([torch.zeros_like(is_eos[:, :1]), is_eos.cumsum(1)[:, :-1]], dim=1)",
            "    return before == 0"),
         "cumsum shifted right with F.pad": eos_mask("    import torch.nn.functional as F", "",
                                                     "    return F.pad(is_eos.cumsum(1)[:, :-1], (1, 0)) == 0"),
         "argmax of the first EOS, T - 1 without one": eos_mask(
            "    T = completions.shape[1]",
            "    first = torch.where(is_eos.any(dim=1), is_eos.argmax(dim=1), T - 1)  # (N,)",
            "    return torch.arange(T)[None] <= first[:, None]")},
    ),
    "B15": (
        {"the two loops the other way round": body(REPEAT,
                                                   "    return [p for _ in range(group_size) for p in prompts]"),
         "np.tile": body(REPEAT, "    import numpy as np", "", "    return np.tile(prompts, group_size).tolist()"),
         "each prompt repeated B times": body(REPEAT, "    return [p for p in prompts for _ in range(len(prompts))]")},
        {"sum of per-prompt lists": body(REPEAT, "    return sum(([p] * group_size for p in prompts), [])"),
         "itertools": body(REPEAT, "    import itertools", "",
                           "    return list(itertools.chain.from_iterable(itertools.repeat(p, group_size) "
                           "for p in prompts))"),
         "np.repeat": body(REPEAT, "    import numpy as np", "", "    return np.repeat(prompts, group_size).tolist()"),
         "zip of G copies": body(REPEAT, "    return [p for same in zip(*[prompts] * group_size) for p in same]")},
    ),
    "B16": (
        {"shallow copy (shares the parameters)": setup("ref_policy = copy.copy(policy).eval()"),
         "shallow copy, frozen (freezes the policy too)": setup(
            "ref_policy = copy.copy(policy).eval().requires_grad_(False)"),
         "policy.eval() (the same object)": setup("ref_policy = policy.eval()"),
         "a new TinyLM of random weights (nothing loaded)": setup(
            "ref_policy = TinyLM(policy.config).eval().requires_grad_(False)"),
         "a second fresh TinyLM for a task without a checkpoint": setup_branches(
            "ref_policy = TinyLM(TinyLMConfig(tokenizer.vocab_size, dropout=cfg.dropout))",
            "ref_policy = TinyLM.from_pretrained(task.checkpoint, dropout=cfg.dropout)",
            "ref_policy.eval().requires_grad_(False)"),
         "deepcopy left in train mode (dropout on in the reference when cfg.dropout > 0)": setup(
            "ref_policy = copy.deepcopy(policy)")},
        {"deepcopy and eval, parameters left trainable (used only under no_grad)": setup(
            "ref_policy = copy.deepcopy(policy).eval()"),
         "deepcopy, then eval and no grad one by one": setup(
            "ref_policy = copy.deepcopy(policy)", "ref_policy.eval()",
            "for p in ref_policy.parameters():", "    p.requires_grad_(False)"),
         "deepcopy after the optimizer is built": setup(
            "ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)", after_optimizer=True),
         "the checkpoint loaded a second time (a fresh policy deep-copied)": setup_branches(
            "ref_policy = copy.deepcopy(policy)",
            "ref_policy = TinyLM.from_pretrained(task.checkpoint, dropout=cfg.dropout)",
            "ref_policy.eval().requires_grad_(False)"),
         "a new TinyLM given the policy's state_dict": setup(
            "ref_policy = TinyLM(policy.config)", "ref_policy.load_state_dict(policy.state_dict())",
            "ref_policy.eval().requires_grad_(False)")},
    ),
    "B17": (
        {"masked, special tokens spelled out": body(
            DECODE, "    kept = completions.masked_fill(~mask, tokenizer.pad_token_id)",
            "    return tokenizer.batch_decode(kept)"),
         "split at the EOS text after skip_special_tokens": body(
            DECODE, "    eos = tokenizer.tokens[tokenizer.eos_token_id]",
            "    return [t.split(eos)[0] for t in tokenizer.batch_decode(completions, skip_special_tokens=True)]"),
         "each row cut at its count of non-PAD tokens": body(
            DECODE, "    lengths = (completions != tokenizer.pad_token_id).sum(dim=1)",
            "    return [tokenizer.decode(row[:n], skip_special_tokens=True)",
            "            for row, n in zip(completions, lengths)]"),
         "decoded, cut at the EOS text, PAD and BOS kept": body(
            DECODE, "    eos = tokenizer.tokens[tokenizer.eos_token_id]",
            "    return [t.split(eos)[0] for t in tokenizer.batch_decode(completions)]")},
        {"torch.where with PAD": body(
            DECODE, "    kept = torch.where(mask, completions, tokenizer.pad_token_id)",
            "    return tokenizer.batch_decode(kept, skip_special_tokens=True)"),
         "each row cut at its mask's length": body(
            DECODE, "    lengths = mask.sum(dim=1).tolist()",
            "    return [tokenizer.decode(row[:n], skip_special_tokens=True)",
            "            for row, n in zip(completions, lengths)]"),
         "each row's masked tokens selected": body(
            DECODE, "    return [tokenizer.decode(row[m], skip_special_tokens=True)",
            "            for row, m in zip(completions, mask)]"),
         "decoded, cut at the EOS text, PAD and BOS dropped": body(
            DECODE, "    pad, bos, eos = (tokenizer.tokens[i]",
            "                     for i in (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id))",
            "    texts = tokenizer.batch_decode(completions)",
            "    return [t.split(eos)[0].replace(pad, '').replace(bos, '') for t in texts]")},
    ),
}


def grade(paths: list[Path]) -> tuple[list[dict], int]:
    proc = subprocess.run([sys.executable, "-m", "interview", "grade", "--json", *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(paths), proc.stdout + proc.stderr
    return results, proc.returncode


def test_every_bug_has_two_wrong_and_two_correct_fixes():
    assert set(FIXES) == set(catalog.BUG_IDS)
    for b, (wrong, right) in FIXES.items():
        assert len(wrong) >= 2 and len(right) >= 2, b


def check(tmp_path: Path, bug_id: str, wrong: dict[str, str], right: dict[str, str]) -> None:
    """Grade a 1-bug round of `bug_id` with each fix spliced in: the wrong ones not fixed, the right ones fixed."""
    number, text = one_bug_round(bug_id)
    site = catalog.bug(bug_id).function
    cases = [(name, False, src) for name, src in wrong.items()] + [(name, True, src) for name, src in right.items()]
    paths = []
    for i, (_, _, src) in enumerate(cases):
        path = tmp_path / f"round_{number}_{i}.py"
        path.write_text(splice.replace_functions(text, {site: src}))
        paths.append(path)
    results, _ = grade(paths)
    for (name, good, _), result in zip(cases, results, strict=True):
        assert result["code"] != 2, (bug_id, name, result["lines"])
        if good:
            assert result["status"] == {bug_id: True} and result["regressions"] == [], (bug_id, name, result["lines"])
            assert result["code"] == 0 and result["lines"][0].startswith(f"fixed: {bug_id} "), (name, result["lines"])
        else:
            assert result["status"] == {bug_id: False}, (bug_id, name, "counted as fixed", result["lines"])
            assert result["code"] == 1, (bug_id, name, result["lines"])


@pytest.mark.parametrize("bug_id", catalog.BUG_IDS)
def test_wrong_fixes_do_not_count_and_correct_ones_do(tmp_path, bug_id):
    check(tmp_path, bug_id, *FIXES[bug_id])


def test_putting_b6_back_while_fixing_the_drawn_bug_is_a_named_regression(tmp_path):
    number, text = one_bug_round("B4")
    good = splice.splice(text, splice.FIXED.read_text(), ["grpo_loss"])
    broken = splice.splice(good, splice.HANDOUT.read_text(), ["completion_logits"])
    path = tmp_path / f"round_{number}.py"
    path.write_text(broken)
    (result,), code = grade([path])
    assert code == 1 and result["status"] == {"B4": True}, result["lines"]
    assert len(result["regressions"]) == 1, result["lines"]
    line = result["regressions"][0]
    assert line.startswith("completion_logits: your edit fails "), line  # what failed, not B6's symptom
    assert catalog.bug("B6").symptom.split(";")[0] not in line, line
    assert "B6" not in "\n".join(result["lines"]), result["lines"]
    assert f"regressions: 1 ({verdicts.REGRESSION_NOTE})" in result["lines"], result["lines"]
    assert "completion_logits" not in "\n".join(result["lines"]), "without REVEAL a regression is only counted"
    revealed, code = verdicts.report(["B4"], None, result, reveal=True)
    assert code == 1 and "regressions: 1" in revealed and f"  {line}" in revealed, revealed
