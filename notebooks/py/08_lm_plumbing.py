# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 — Find the bugs, part 2: the LM plumbing (B12-B17)
#
# **The interview question** (follow-up 1 of SPEC.md, continued from notebook 01): *"This small GRPO trainer runs
# without an exception but learns poorly. Find the silent bugs using tiny diagnostic inputs."* Notebook 01 covers
# the bugs in the RL arithmetic (B1-B11). This one covers the six that live in the plumbing between the language
# model and that arithmetic: left padding and positions, the attention mask, the EOS, the layout of the groups, the
# reference model and the decoded text. Each is a mistake reported in public LM RL code (each section cites the
# report), and none of them raises an exception.
#
# After this notebook you can, for each of B12-B17:
# - say what the training logs show (the catalog's level-1 symptom) and which logged statistic
#   (`grpo_support.STATS`) or preflight probe (`grpo_fixed.preflight`) catches it;
# - build **the tiny input that exposes it** (one prompt alone and behind three PAD tokens; a 4-token completion
#   with an EOS and a token after it; 2 prompts x 2 samples), and give the buggy and the correct output;
# - write the few lines that fix it, and say how a real library (Hugging Face `transformers`, TRL, verl) handles
#   the same step.
#
# > **STOP: practise before you read on.** Everything below this box names the bugs and their fixes. Find
# > them yourself first, in a mock round: `make mock` draws 3 bugs from the whole catalog (`BUGS=k` or
# > `BUGS=all` for more), `make grade` says which are fixed, `make hint` gives a hint per remaining bug
# > (`LEVEL=1` the symptom, `LEVEL=2` the function and a tiny input, `LEVEL=3` the fix). Notebook 01 §1
# > describes the method; its stop sign says more about each command.

# %% [markdown]
# ---
# **Past the stop sign.** Each section: what the logs show, the key fact, a tiny input through `grpo_fixed` and through
# `catalog.hybrid("Bn")` (the fixed twin with that one bug switched back on), a figure, the code that fixes it, and what
# to say in the interview (§1 shows its tiny input and figure before the key fact). The tiny inputs are the catalog's
# level-2 probes (`make hint LEVEL=2`), so the hints and this notebook agree.
#
# | ## | bug | tiny input |
# |---|---|---|
# | 1 | B12 training forward without position ids | '12+3=' then '23' and EOS, scored alone and behind 3 PAD |
# | 2 | B13 sampling without the attention mask | '12+3=' sampled alone and behind 3 PAD, one seed |
# | 3 | B14 completion mask stops before the EOS | completion [5, EOS, 7, EOS] and two edge rows |
# | 4 | B15 prompts tiled instead of repeated | prompts ['1+2=', '3+4='], G = 2 |
# | 5 | B16 the reference is the live policy | one optimizer step, the reference scored before and after |
# | 6 | B17 reward text runs past the EOS | tokens '1', '9', EOS, '3' |
# | 7 | which check flags each one first, and what the reward shows | 7 short training runs |
# | 8 | self-check | |

# %%
import copy
import logging

import matplotlib.pyplot as plt
import torch

import grpo_fixed
import grpo_support
import workbook  # noqa: F401  (one torch thread)
from tinylm import CharTokenizer, TinyLM, attention_allowed
from workbook import nb08_plumbing
from workbook.catalog import PLUMBING_IDS, bug, hybrid
from workbook.monitor import render_range
from workbook.nb01_bugs import first_failures
from workbook.nb08_plumbing import PROBE_PADS, PROBE_PROMPT, hybrid_vs_fixed, left_padded, paired_bars, token_grid
from workbook.plots import BUGGY, FIXED, REFERENCE, curves, smooth
from workbook.progress import progress
from workbook.run_summary import final_reward, tail_mean

logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids log health warnings; we print what we need
torch.manual_seed(0)
HYBRID = {b: hybrid(b) for b in PLUMBING_IDS}  # grpo_fixed with one bug switched back on
TASK = grpo_fixed.AdditionTask()
tokenizer = CharTokenizer(TASK.alphabet)
sft = TinyLM.from_pretrained(TASK.checkpoint).eval()  # the SFT model both twins start from
EOS, PAD = tokenizer.eos_token_id, tokenizer.pad_token_id
print("bugs:", ", ".join(f"{b} {bug(b).function}" for b in PLUMBING_IDS))
print(f"tokens: PAD {PAD}, BOS {tokenizer.bos_token_id}, EOS {EOS}, then {TASK.alphabet!r} from id 3")

# %% [markdown]
# ## 1. B12 — training forward without position ids
# **What the logs show.** The training log-probs differ from the sampler's on the very same tokens from the first
# iteration on, far outside the healthy range of `logprob_gap`, but only on rows whose prompt was left-padded: the
# same gap over the other rows (`logprob_gap_unpadded`) stays at float rounding. The reward climbs, more slowly than
# a healthy run's.
#
# **Tiny input** (the catalog's B12 probe). Prompt `'12+3='`, completion `'2'`, `'3'`, EOS, scored by the training
# forward (`policy_logprobs` at temperature 0.8) once as a row alone and once behind three PAD tokens. The SFT model
# is the policy. The row's tokens and mask are the same; only the padding differs, so the log-probs must be equal
# (the key fact below the figure says why the B12 hybrid's are not).

# %%
completion = torch.tensor([[*tokenizer.encode("23", add_bos=False), EOS]])  # (1, T=3)
completion_mask = torch.ones_like(completion, dtype=torch.bool)
scored = {}
with torch.no_grad():
    for label, module in (("B12", HYBRID["B12"]), ("fixed", grpo_fixed)):
        for pad in (0, PROBE_PADS):
            scored[label, pad] = module.policy_logprobs(sft, *left_padded(tokenizer, PROBE_PROMPT, pad), completion,
                                                        completion_mask, 0.8)[0]  # (T,)
            print(f"{label:5s} {pad} PAD   log-probs of '2', '3', EOS: {[f'{x:+.4f}' for x in scored[label, pad]]}")
b12_shift = (scored["B12", PROBE_PADS] - scored["B12", 0]).abs().max().item()
print(f"B12: largest change from the padding {b12_shift:.2f} nats")
assert (scored["fixed", PROBE_PADS] - scored["fixed", 0]).abs().max() < 1e-5  # float rounding only
assert torch.equal(scored["B12", 0], scored["fixed", 0])  # an unpadded row: 0..L-1 is the right numbering
assert f"{b12_shift:.2f}" == "12.06"  # as quoted
assert (scored["B12", PROBE_PADS] - scored["B12", 0]).abs().argmax() == 1  # on the token '3'

# %%
# left: the buggy hybrid (grpo_fixed with B12 switched on); right: the fixed twin
fig, axes = hybrid_vs_fixed("B12", "training log-prob of each completion token, alone and behind 3 PAD")
for ax, label, color in zip(axes, ("B12", "fixed"), (BUGGY, FIXED), strict=True):
    paired_bars(ax, ["'2'", "'3'", "EOS"], {"alone": scored[label, 0].tolist(),
                                           "behind 3 PAD": scored[label, PROBE_PADS].tolist()},
                {"alone": REFERENCE, "behind 3 PAD": color})
    ax.set_xlabel("completion token")
axes[0].set_ylabel("log-prob")
for ax in axes:  # each panel's own colours
    ax.legend(fontsize="small", loc="lower left")
plt.show()

# %% [markdown]
# **Key fact.** TinyLM, like GPT-2, has *learned absolute* position embeddings: the input of the first layer is
# $x_l = E[\text{token}_l] + P[\text{pos}_l]$. TinyLM's forward, like GPT-2's in Hugging Face `transformers` (checked
# in version 4.57.1, below), numbers the positions $0 \dots L-1$ in every row unless it is given `position_ids`,
# whatever the attention mask says. Prompts are
# left-padded, so a row behind $p$ PAD tokens has its real tokens at positions $p, p+1, \dots$ instead of $0, 1, \dots$:
# the attention mask hides the PAD keys, but nothing undoes the shift. The positions must count the real tokens only:
# $\text{pos}_l = \sum_{j \le l} m_j - 1$.

# %%
def positions_from_mask(attention_mask):
    """Position of each token among its row's real tokens: cumsum(mask) - 1, clamped to 0 on the left padding.
    (N, L) -> (N, L)"""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


ids, mask = left_padded(tokenizer, PROBE_PROMPT, PROBE_PADS)  # (1, 9): three PAD, BOS, '1', '2', '+', '3', '='
default = torch.arange(ids.shape[1])[None]  # (1, 9): what the model uses when given no position_ids
print("attention mask      ", mask[0].tolist())
print("positions from mask ", positions_from_mask(mask)[0].tolist())
print("default 0..L-1      ", default[0].tolist())
assert positions_from_mask(mask)[0].tolist() == [0, 0, 0, 0, 1, 2, 3, 4, 5]
assert torch.equal(positions_from_mask(mask), grpo_fixed.position_ids(mask))  # the twins' helper
assert (default - positions_from_mask(mask))[mask.bool()].unique().tolist() == [PROBE_PADS]  # every real token

# %% [markdown]
# The fixed twin scores the padded row exactly as the row alone (to float rounding). B12 scores the unpadded row
# right (0..L-1 *is* its numbering) and the padded one wrong: the log-prob of `'3'` moves by 12.06 nats. The sampler
# passes position ids in both twins, so B12's trainer disagrees with its sampler on padded rows only, which is the
# log symptom: `logprob_gap` out of range, `logprob_gap_unpadded` at rounding. The first-step ratio cannot see it
# (old and current log-probs come from the same wrong forward, so they agree). What it costs: on padded rows the
# update raises and lowers the probabilities of a model fed shifted positions, a distribution the sampler never
# draws from.
#
# **Real models.** In Hugging Face `transformers` (checked in the source of version 4.57.1), GPT-2's forward
# (`GPT2Model.forward`, `modeling_gpt2.py`) sets `position_ids = cache_position.unsqueeze(0)` when `position_ids` is
# None, and `cache_position` defaults to `torch.arange(past_seen_tokens, past_seen_tokens + L)`: the same numbering for
# every row, whatever the attention mask says. `generate()` builds the ids from the attention mask instead, in
# `GenerationMixin.prepare_inputs_for_generation` (`generation/utils.py`: `attention_mask.long().cumsum(-1) - 1`, then
# 1 on the padding), unless the caller passes them. So sampling with `generate` and scoring with a
# hand-written forward that passes only the mask disagree on left-padded rows; `transformers` issue 18388 is that
# mismatch, and TRL issue 6800 reports it in TRL's Online DPO, XPO and Nash-MD log-prob forwards (its PPO trainer builds
# the ids, `attention_mask.cumsum(1) - attention_mask.long()`). How much it matters depends on the position encoding.
# Rotary embeddings (RoPE, used by most current open LLMs) rotate queries and keys by their positions, so an attention
# score depends only on the *difference* of two positions; a constant offset of every real token in a row cancels, and
# with the PAD keys masked the logits change only by float rounding. Learned absolute embeddings (GPT-2, this TinyLM)
# add $P[\text{pos}]$ to the input itself, so the same offset changes every input vector. A tiny check of both, with one
# query at position 5 and one key at position 2, shifted by 3:

# %%
def rope(x, pos, base=10000.0):
    """x (d,) rotated by RoPE at position pos: each pair (x_2k, x_2k+1) by the angle pos * base^(-2k/d)."""
    d = x.shape[0]
    angle = pos * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    cos, sin = torch.cos(angle), torch.sin(angle)
    pairs = x.view(-1, 2)  # (d/2, 2)
    return torch.stack([pairs[:, 0] * cos - pairs[:, 1] * sin, pairs[:, 0] * sin + pairs[:, 1] * cos], -1).flatten()


g = torch.Generator().manual_seed(0)
q, k = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
P = torch.randn(16, 8, generator=g, dtype=torch.float64)  # a learned absolute position table, 16 positions
score = {"RoPE": lambda m, n: rope(q, m) @ rope(k, n), "absolute": lambda m, n: (q + P[m]) @ (k + P[n])}
for name, s in score.items():
    print(f"{name:8s} score(query 5, key 2) {s(5, 2):+.6f}   shifted by 3: score(8, 5) {s(8, 5):+.6f}")
assert abs(score["RoPE"](5, 2) - score["RoPE"](8, 5)) < 1e-12  # the offset cancels (float64 rounding)
assert abs(score["absolute"](5, 2) - score["absolute"](8, 5)) > 0.1

# %% [markdown]
# That is why TRL issue 6800 calls the missing ids harmless for RoPE models and wrong for absolute-position ones.
# Harmless up to rounding only: in float32 or bf16 the rotation angles of the shifted positions round differently,
# and a model that also sees absolute positions in another way would notice the shift. Passing the ids costs one
# line and removes the question.
#
# > **You should know.** Sampler and trainer must see each row at the same positions. `transformers`' `generate()`
# > derives positions from the attention mask; a hand-written training forward must pass `position_ids =
# > cumsum(attention_mask) - 1`, with the padding set to a valid index (clamped at 0 here; `generate()` puts 1).
# > Test it by scoring one row alone and behind a few PAD tokens: the log-probs must be equal to rounding. RoPE
# > hides a missing offset (relative positions are unchanged); absolute position embeddings
# > (GPT-2) do not.
#
# <details><summary>Why is a row without padding scored correctly under B12, and what does that do to the
# logs?</summary>
#
# Without padding, the real tokens are at $0 \dots L-1$, which is exactly the default numbering, so the unpadded
# rows' log-probs are bit-identical to the fixed twin's (asserted above). Only left-padded rows are off, so the
# gap shows in `logprob_gap` and not in `logprob_gap_unpadded`: a gap confined to padded rows points at padding
# (position ids or the attention mask), not at the shift (B6) or the temperature (B10), which break every row.
# </details>

# %% [markdown]
# ## 2. B13 — sampling without the attention mask
# **What the logs show.** The same signature as B12, smaller: training log-probs differ from the sampler's on
# left-padded rows only (`logprob_gap` out of range, `logprob_gap_unpadded` at rounding), from the first iteration
# on. The reward is not visibly hurt: the gap, not the reward, is the signal.
#
# **Key fact.** Attention is a softmax over keys: $a_{ij} = \mathrm{softmax}_j(q_i \cdot k_j / \sqrt{d} + b_{ij})$
# with $b_{ij} = -\infty$ for a key the mask hides. Without the mask every PAD key gets a weight, and its value
# vector enters the mix. Under B13 the *sampler* is the one that is wrong; the trainer masks the PAD keys, so the
# two disagree on padded rows. What the mask does to the last query of the padded probe row
# (`tinylm.attention_allowed`, True where the query may attend):

# %%
allowed = {"with the mask": attention_allowed(mask.bool(), 1)[0, 0, -1],  # (L,): the last query's keys
           "no mask (all ones)": attention_allowed(torch.ones_like(mask, dtype=torch.bool), 1)[0, 0, -1]}
for name, row in allowed.items():
    print(f"{name:19s} keys the last query attends to: {row.int().tolist()}")
assert allowed["with the mask"].tolist() == mask[0].bool().tolist() and allowed["no mask (all ones)"].all()

# %% [markdown]
# **Tiny input** (the catalog's B13 probe). Sample 4 tokens after `'12+3='` at temperature 0.8 from the SFT model,
# alone and behind three PAD tokens, each from a generator seeded with 0, and score the drawn tokens with the
# training forward (`nb08_plumbing.sample_and_score`). The sampler's log-probs of its draws must not depend on the
# padding, and must equal the trainer's.

# %%
draws = {(label, pad): nb08_plumbing.sample_and_score(module, sft, tokenizer, PROBE_PROMPT, pad)
         for label, module in (("B13", HYBRID["B13"]), ("B12", HYBRID["B12"]), ("fixed", grpo_fixed))
         for pad in (0, PROBE_PADS)}
for (label, pad), d in draws.items():
    if label != "B12":
        print(f"{label:5s} {pad} PAD  drew {tokenizer.decode(d.completions[0])!r:24s} sampler log-probs "
              f"{[f'{x:+.4f}' for x in d.sampler_logprobs[0]]}")
b13 = {pad: draws["B13", pad] for pad in (0, PROBE_PADS)}
assert torch.equal(b13[0].completions, b13[PROBE_PADS].completions)  # same seed, nearby distributions: same draws
assert torch.equal(draws["fixed", 0].sampler_logprobs, b13[0].sampler_logprobs)  # no padding: the same sampler
assert (draws["fixed", PROBE_PADS].sampler_logprobs - draws["fixed", 0].sampler_logprobs).abs().max() < 1e-5
assert (b13[PROBE_PADS].sampler_logprobs - b13[0].sampler_logprobs).abs()[b13[0].mask].max() > 0.05

# %% [markdown]
# Both runs drew the same tokens (the same seed, and distributions close enough to give the same draws here), but B13's
# sampler gave them different log-probs behind the padding: it sampled from a distribution conditioned on the PAD
# tokens. The logs see this through the trainer. Here is the gap
# |sampler − trainer| over the masked tokens of each row, for B12 (trainer wrong), B13 (sampler wrong) and the
# fixed twin: the miniature of `logprob_gap` (padded row) against `logprob_gap_unpadded` (the row alone).

# %%
gap = {key: (d.sampler_logprobs - d.trainer_logprobs).abs()[d.mask].max().item() for key, d in draws.items()}
for label in ("B12", "B13", "fixed"):
    print(f"{label:5s} max |sampler - trainer|: row alone {gap[label, 0]:.1e}   "
          f"behind 3 PAD {gap[label, PROBE_PADS]:.4f}"
          f"   (healthy logprob_gap {render_range('logprob_gap')})")
assert all(gap[label, 0] <= grpo_support.STATS["logprob_gap"].hi for label in ("B12", "B13", "fixed"))
assert gap["fixed", PROBE_PADS] <= grpo_support.STATS["logprob_gap"].hi
assert min(gap["B12", PROBE_PADS], gap["B13", PROBE_PADS]) > 0.05


def padding_effect(label, side):
    """Largest change of one side's log-probs ('sampler_logprobs' or 'trainer_logprobs') made by the padding, over
    the tokens through the first EOS (the same draws alone and padded, so one mask; the rest is not the answer)."""
    padded, alone = draws[label, PROBE_PADS], draws[label, 0]
    return (getattr(padded, side) - getattr(alone, side)).abs().masked_fill(~alone.mask, 0).max().item()


trainer_moved = {label: padding_effect(label, "trainer_logprobs") for label in ("B12", "B13")}
sampler_moved = {label: padding_effect(label, "sampler_logprobs") for label in ("B12", "B13")}
print("moved by the padding:  trainer", {k: f"{v:.4f}" for k, v in trainer_moved.items()},
      "  sampler", {k: f"{v:.4f}" for k, v in sampler_moved.items()})
assert trainer_moved["B13"] < 1e-5 and sampler_moved["B12"] < 1e-5  # each bug moves one side only
assert trainer_moved["B12"] > 0.05 and sampler_moved["B13"] > 0.05
assert f"{trainer_moved['B12']:.4f} {sampler_moved['B13']:.4f}" == "6.7885 0.0712"  # each as large as its gap
assert f"{gap['B13', PROBE_PADS]:.4f} {gap['B12', PROBE_PADS]:.4f}" == "0.0712 6.7885"  # as quoted

# %%
fig, axes = hybrid_vs_fixed("B13", "sampler log-prob of each drawn token through the first EOS, alone and behind "
                           "3 PAD (seed 0)")
answer = draws["fixed", 0].mask[0]  # (T,) the drawn tokens through the first EOS (the same draws in every run)
labels = [tokenizer.decode([t]).replace("<eos>", "EOS") for t in draws["fixed", 0].completions[0][answer].tolist()]
for ax, label, color in zip(axes, ("B13", "fixed"), (BUGGY, FIXED), strict=True):
    paired_bars(ax, labels, {"alone": draws[label, 0].sampler_logprobs[0][answer].tolist(),
                             "behind 3 PAD": draws[label, PROBE_PADS].sampler_logprobs[0][answer].tolist()},
                {"alone": REFERENCE, "behind 3 PAD": color})
    ax.set_xlabel("drawn token")
axes[0].set_ylabel("sampler log-prob")
axes[0].legend(fontsize="small", loc="lower left")
plt.show()

# %% [markdown]
# Both bugs give a gap on the padded row only, and the two are told apart by which side moves with the padding:
# B12 moves the trainer's log-probs and leaves the sampler's alone, B13 the other way round, each by as much as its
# gap (printed above, over the tokens through the first EOS). The
# fix passes the mask to the model at the prompt *and* at every cached step, one column longer each step (the
# sampled token is a real token):
#
# ```python
# out = policy(prompt_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask), use_cache=True)
# ...
# attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)  # (N, P + t + 1)
# out = policy(nxt[:, None], attention_mask=attention_mask, position_ids=position_ids(attention_mask)[:, -1:],
#              past_key_values=out.past_key_values, use_cache=True)
# ```
#
# In RL terms B13 makes the padded rows off-policy with no correction: they are drawn from a distribution $\mu$
# conditioned on the PAD tokens, while the importance ratio treats them as drawn from $\pi_{\text{old}}$. For this
# SFT model the two are close (a gap of 0.0712 nats on the padded probe row, against 6.7885 for B12's trainer,
# printed above), which fits a reward that barely notices. It need not be small: DeepSpeedExamples pull request 464
# reports the bug in DeepSpeed-Chat, where generation got no prompt attention mask, the padding was attended and
# generation broke (fixed in pull request 468).
#
# > **You should know.** Left padding needs two things from the model: the attention mask (so PAD keys get no
# > weight) and position ids (so real tokens are numbered from 0). Pass both to the sampler and to the training
# > forward. A gap that shows only on padded rows is one of the two; whether the sampler's or the trainer's
# > log-probs move with the padding tells which.
#
# <details><summary>Would B13 show in <code>ratio_first_maxdev</code>?</summary>
#
# No. The ratio compares the trainer's current log-probs with the trainer's old log-probs, both computed with the
# mask; the sampler's log-probs enter no ratio. Only a statistic that compares the sampler with the trainer
# (`logprob_gap`) sees it. The same holds for B12, for the opposite reason: both trainer terms share its mistake.
# </details>

# %% [markdown]
# ## 3. B14 — completion mask stops before the EOS
# **What the logs show.** The logged completion length is about one token shorter than a healthy run's, while the
# decoded texts are as long; `mask_eos_mismatch` counts every completion, in every iteration. The reward is not
# visibly hurt.
#
# **Key fact.** The EOS is an action like any other: the policy chooses $\pi(\text{EOS} \mid x, o_{<t})$, and
# stopping at the right place is half of a right answer. The mask must cover every token up to **and including**
# the first EOS, and nothing after it: $m_t = 1$ iff no EOS occurs strictly before $t$. The inclusive count
# $\sum_{j \le t} [o_j = \text{EOS}] = 0$ is true up to, but not at, the first EOS; subtracting the token's own EOS
# makes it the strict count:

# %%
def eos_inclusive_mask(completions, eos_id):
    """True on each token up to and including the first EOS. (N, T) -> (N, T) bool"""
    is_eos = (completions == eos_id).long()  # (N, T)
    return (is_eos.cumsum(dim=1) - is_eos) == 0  # EOS strictly before t: none


rows = torch.tensor([[5, EOS, 7, EOS], [EOS, 5, 6, 7], [5, 6, 7, 8]])  # (3, T=4): the probe, EOS first, no EOS
print(eos_inclusive_mask(rows, EOS).int().tolist())
assert torch.equal(eos_inclusive_mask(rows, EOS), grpo_fixed.completion_mask(rows, EOS))

# %% [markdown]
# **Tiny input.** The catalog's B14 probe is the first row, `[5, EOS, 7, EOS]` (token 5 is `'2'`, token 7 is `'4'`):
# an answer, its EOS, then whatever the sampler drew after it (it writes $T$ tokens per row, notebook 08 §6). Two
# edge rows: an EOS first (the empty answer), and no EOS at all (a completion cut at the length limit).

# %%
masks = {label: module.completion_mask(rows, EOS) for label, module in (("B14", HYBRID["B14"]), ("fixed", grpo_fixed))}
for label, m in masks.items():
    ends = grpo_support.mask_ends_at_eos(rows, m, EOS)  # what mask_eos_mismatch counts, per row
    print(f"{label:5s} masks {m.int().tolist()}   tokens per row {m.sum(1).tolist()}   ends at the first EOS "
          f"{ends.tolist()}")
assert masks["fixed"][0].int().tolist() == [1, 1, 0, 0] and masks["B14"][0].int().tolist() == [1, 0, 0, 0]
assert not masks["B14"][1].any() and masks["fixed"][1].int().tolist() == [1, 0, 0, 0]  # the EOS-first row
assert masks["B14"][2].all() and masks["fixed"][2].all()  # no EOS: both cover the whole row
assert grpo_support.mask_ends_at_eos(rows, masks["B14"], EOS).tolist() == [False, False, True]

# %% [markdown]
# The buggy mask drops the first EOS of each row (so every completion that stops is one token shorter, and
# `mask_eos_mismatch` counts every completion that stops), and the row that stops at once has no token left. Only
# a row without an EOS is unaffected. What that does to learning: the loss is a masked mean of
# $\min(\rho_t A, \mathrm{clip}(\rho_t) A)$, so a masked token gets no gradient. At ratio 1, the push on each
# token's log-prob, $-\partial L / \partial \log\pi_t$, for the probe row and the EOS-first row with advantages
# $+1$ and $-1$:

# %%
adv = torch.tensor([1.0, -1.0])  # (N,)
push = {}
for label, m in masks.items():
    logp = torch.zeros(2, 4, requires_grad=True)  # (N, T): ratio 1 everywhere
    grpo_fixed.grpo_loss(logp, torch.zeros(2, 4), adv, m[:2]).backward()
    push[label] = -logp.grad + 0.0  # (N, T); + 0.0 turns -0.0 into 0.0
    print(f"{label:5s} push {[[f'{x:+.3f}' for x in row] for row in push[label].tolist()]}")
assert push["B14"][0, 1] == 0 and push["B14"][1].abs().sum() == 0  # the EOS's own log-prob never pushed; the empty
# answer (EOS first) not at all
assert push["fixed"][0, 1] > 0 and push["fixed"][1, 0] < 0  # the rewarded EOS raised, the premature EOS lowered

# %%
text_rows = [[tokenizer.decode([t]).replace("<eos>", "EOS") for t in row] for row in rows[:2].tolist()]
fig, axes = hybrid_vs_fixed("B14", "mask (shaded) and push on each token's log-prob, A = +1 (row 0) and -1 (row 1)",
                           figsize=(8, 2.2))
for ax, label, color in zip(axes, ("B14", "fixed"), (BUGGY, FIXED), strict=True):
    token_grid(ax, text_rows, masks[label][:2], values=push[label], fmt="{:+.2f}", color=color)
    ax.set_xlabel("token t")
plt.show()

# %% [markdown]
# With the EOS in the mask, a rewarded completion raises the probability of stopping where it stopped, and a
# penalised one lowers the probability of stopping there (row 1: stopping at once); without it, the EOS token's own
# log-prob gets no push in any row. The buggy mask also changes the normaliser: row 0 counts 1 token instead of 2, so
# the `'2'` gets a larger share of the loss. Stopping is still trained, but only indirectly: a digit written after a
# right answer, instead of its EOS, is a masked-in token of a wrong answer and is pushed down, and lowering its
# log-prob moves softmax mass to the other tokens at that position, part of it to EOS. The empty answer is the
# extreme case: a completion whose first token is EOS is masked out entirely, so it is never penalised directly,
# however often it is sampled (its probability moves only through the other rows' first tokens). That fits the
# catalog's level-1 hint, a reward not visibly hurt in a default run. The reports: rasbt/reasoning-from-scratch
# pull request 185 (GRPO's sampled responses dropped the EOS token, so it got
# no gradient), and TRL issue 1623 (the same in an SFT loss, where the EOS is then never a target: the model never
# learns to stop).
#
# > **You should know.** The completion mask covers the first EOS and nothing after it; test it on
# > `[x, EOS, y, EOS]`, on a row that starts with EOS and on a row without one. The logged length is `mask.sum`, so
# > a length equal to the decoded answer's token count, one short of the answer plus its EOS, is this bug's
# > fingerprint.
#
# <details><summary>The buggy mask is False on every token of a completion that starts with EOS. What happens in
# the loss, and in <code>masked_mean</code>?</summary>
#
# The row contributes nothing (no token, no gradient), so the empty answer is never discouraged however often it is
# sampled. If a whole minibatch consisted of such rows the masked mean would be 0/0; the fixed `masked_mean`
# divides by max(1, count) and returns 0 (B5, notebook 01 §6).
# </details>

# %% [markdown]
# **Two more ways to lose the EOS.** A tokenizer without a PAD token is often given `pad_token = eos_token` (TRL
# 1.16.0's `GRPOTrainer` does so itself when `pad_token` is None, `grpo_trainer.py`), and `generate()` writes
# `pad_token_id` into a finished row (notebook 08 §6). A mask built as `ids != pad_id` then drops the real EOS as well.
# And text that was decoded and re-tokenised is not the sampled ids: decoding with `skip_special_tokens=True` (as the
# twins' `decode_completions` and TRL 1.16.0's reward path do; transformers' `decode` defaults to False, the
# `tokenizers` library's and vLLM's `SamplingParams` to True) drops the
# EOS. Both on the probe row's answer, `'2'` then EOS, with the EOS id standing in for PAD:

# %%
hf_row = torch.tensor([[5, EOS, EOS, EOS]])  # (1, 4): '2', EOS, then generate()'s padding with pad_token_id == EOS
by_pad_id = hf_row != EOS  # the mask `ids != pad_id`
b14_mask = HYBRID["B14"].completion_mask(hf_row, EOS)
print(f"ids != pad_id {by_pad_id.int().tolist()}   through the first EOS "
      f"{eos_inclusive_mask(hf_row, EOS).int().tolist()}   B14's mask {b14_mask.int().tolist()}")
assert torch.equal(by_pad_id, b14_mask)  # exactly B14's mask
probe_row = rows[:1]  # (1, 4): [5, EOS, 7, EOS], the sampled ids
answer_text = grpo_fixed.decode_completions(tokenizer, probe_row, grpo_fixed.completion_mask(probe_row, EOS))[0]
retokenised = tokenizer.encode(answer_text, add_bos=False)
print(f"sampled through the first EOS {probe_row[0, :2].tolist()} -> text {answer_text!r} "
      f"-> re-tokenised {retokenised}")
assert retokenised == probe_row[0, :1].tolist()  # one token short: the EOS is gone, B14 again

# %% [markdown]
# Either way the stop token is never a target: B14's effect without B14's code. TRL 1.16.0 avoids both: it never masks
# by the pad id (it cuts each sampled row after its first EOS, `sequence_indices <= eos_idx`, and masks the padding by
# each completion's length) and it trains on the sampled ids, decoding only for the reward. With a subword tokenizer
# (not run here: this tokenizer has one token per character), re-tokenising can change ordinary text's ids as well:
# the sampler may have written a word in pieces the tokenizer would merge, and encoding the decoded text returns the
# tokenizer's own split, so the loss would score tokens nobody sampled. Train on the sampled ids, mask them through the
# first EOS, and decode only for the reward.

# %% [markdown]
# ## 4. B15 — prompts tiled instead of repeated
# **What the logs show.** `mixed_groups` is 1 in every iteration: no group's $G$ samples share one prompt.
# `adv_group_mean` stays at rounding level, and the reward is not visibly hurt.
#
# **Key fact.** `batch_advantages` groups $G$ *consecutive* samples, `rewards.view(B, G)`, so the batch must be laid
# out prompt by prompt, $[p_0]\!\times\!G, [p_1]\!\times\!G, \dots$. Python's `prompts * G` tiles the list instead,
# $p_0, p_1, \dots, p_0, p_1, \dots$, and then every "group" holds samples of different prompts. The repeat:

# %%
def repeat_each(prompts, group_size):
    """Each prompt group_size times in a row: [p0]*G + [p1]*G + ..."""
    return [p for p in prompts for _ in range(group_size)]


prompts, G = ["1+2=", "3+4="], 2
layouts = {"B15": HYBRID["B15"].repeat_prompts(prompts, G), "fixed": grpo_fixed.repeat_prompts(prompts, G)}
print("repeat_each", repeat_each(prompts, G))
for label, layout in layouts.items():
    print(f"{label:5s}       {layout}")
assert repeat_each(prompts, G) == layouts["fixed"] == ["1+2=", "1+2=", "3+4=", "3+4="]
assert layouts["B15"] == prompts * G == ["1+2=", "3+4=", "1+2=", "3+4="]

# %% [markdown]
# **Tiny input** (the catalog's B15 probe, 2 prompts x $G$ = 2). Say the policy answers `'1+2='` right (`'3'`) and
# `'3+4='` wrong (`'6'`) every time. Within each prompt nothing differs, so both groups are constant and every
# advantage must be 0. The task scores each text against its own prompt; then `batch_advantages` groups the rewards:

# %%
answers = {"1+2=": "3", "3+4=": "6"}  # always right, always wrong
grouped = {}
for label, layout in layouts.items():
    rewards = TASK.reward(layout, [answers[p] for p in layout])  # (N,)
    advantages = grpo_fixed.batch_advantages(rewards, G)  # (N,)
    groups = [layout[i : i + G] for i in range(0, len(layout), G)]
    mixed = sum(len(set(group)) > 1 for group in groups) / len(groups)  # the mixed_groups statistic
    centring = advantages.view(-1, G).mean(1).abs().max().item()  # the adv_group_mean statistic
    grouped[label] = (advantages, mixed, centring)
    print(f"{label:5s} rewards {rewards.tolist()}   advantages {[f'{a:+.2f}' for a in advantages.tolist()]}   "
          f"mixed_groups {mixed:.0f}   adv_group_mean {centring:.0e}")
assert grouped["fixed"][0].tolist() == [0.0] * 4 and grouped["fixed"][1] == 0
assert [round(a, 6) for a in grouped["B15"][0].tolist()] == [1.0, -1.0, 1.0, -1.0] and grouped["B15"][1] == 1
assert grouped["B15"][2] <= grpo_support.STATS["adv_group_mean"].hi  # centred: the centring check cannot see it

# %%
fig, axes = hybrid_vs_fixed("B15", "the rollout batch: samples coloured by prompt, groups bracketed", figsize=(8, 1.9))
colors = {"1+2=": "#9ecae1", "3+4=": "#fdae6b"}
pure = {}
for ax, label in zip(axes, ("B15", "fixed"), strict=True):
    pure[label] = nb08_plumbing.layout_strip(ax, layouts[label], grouped[label][0].tolist(), G, colors)
plt.show()
assert pure == {"B15": 0, "fixed": 2}

# %% [markdown]
# Under B15 the easy prompt's samples get $A = +1$ and the hard prompt's $A = -1$, for being that prompt: the
# baseline compares a sample with samples of *another* prompt, so the advantage measures how easy the prompt is, not
# how good the answer was. The advantages are still centred within each (mixed) group, so `adv_group_mean` passes;
# only a statistic that looks at the prompts of a group (`mixed_groups`) catches it. It is the failure of B9
# (notebook 01 §10) reached from the other side: there the layout is right and the reshape wrong, here the reshape
# is right and the layout wrong. The run still learns: the part of a sample's baseline that comes from other prompts
# does not depend on that sample's answer, and $\mathbb{E}[\nabla\log\pi] = 0$, so on average the answer's own
# reward still pushes the right way; what the mixing adds is noise, since the baseline no longer tracks the prompt's
# difficulty (notebook 01 §10.2 works this out for B9).
#
# **Real trainers.** PrimeIntellect-ai/prime-rl pull request 600 fixed exactly this (prompts duplicated as
# `[p1, p2] * n` instead of `[p1, p1, p2, p2]`). verl repeats with `DataProto.repeat(repeat_times=n,
# interleave=True)` (`verl/protocol.py`: `repeat_interleave`, each row $n$ times in place; `interleave=False` would
# stack copies of the whole batch, the tiled layout), and its GRPO advantage (`compute_grpo_outcome_advantage` in
# `verl/trainer/ppo/core_algos.py`) groups the scores by each sample's prompt id (`index`), not by position, which
# makes the layout irrelevant to the baseline.
#
# > **You should know.** A group is the $G$ samples of *one* prompt. Either lay the batch out prompt by prompt and
# > reshape `(B, G)`, or group by an explicit prompt id. Assert `len(set(prompts_in_group)) == 1`: a centring check
# > passes on mixed groups.
#
# <details><summary>With B = 1 (a single prompt per batch), is B15 still a bug?</summary>
#
# No: with one prompt, `[p] * G` and `[p for _ in range(G)]` are the same list, and `mixed_groups` is 0. Like B9 at
# $B = G$, a test with one prompt hides it; test with two prompts and $G \ge 2$.
# </details>

# %% [markdown]
# ## 5. B16 — the reference is the live policy
# **What the logs show.** The logged KL to the reference stays near 0, and `ref_gap` (the largest |reference
# log-prob − old log-prob| over the sampled tokens) is exactly 0 in every iteration. The reward is as high as a
# healthy run's, or higher.
#
# **Key fact.** The loss adds $\beta\,\mathrm{KL}(\pi_\theta \,\|\, \pi_{\text{ref}})$ to hold the policy near the SFT
# model it started from; that works only if $\pi_{\text{ref}}$ stays fixed. `ref_policy = policy` is a second name for
# the same parameters. Then at every rollout the cached reference log-probs equal the old log-probs, the k3 estimate is
# 0 (up to float rounding) at the first inner step, and at the later inner steps it measures the drift from
# $\pi_{\text{old}}$ within one rollout batch, not from the SFT model: the anchor moves with the policy. The fix is a
# frozen copy, made once at set-up:

# %%
def frozen_copy(policy):
    """The reference: an independent copy of the starting policy, in eval mode, with no gradient."""
    return copy.deepcopy(policy).eval().requires_grad_(False)


reference = frozen_copy(sft)
shared = {p.data_ptr() for p in sft.parameters()} & {p.data_ptr() for p in reference.parameters()}
print(f"reference is policy: {reference is sft};  parameter tensors shared: {len(shared)};  any requires_grad: "
      f"{any(p.requires_grad for p in reference.parameters())}")
assert reference is not sft and not shared and not any(p.requires_grad for p in reference.parameters())

# %% [markdown]
# **Tiny input** (the catalog's B16 probe). Each twin's `setup_run`; one Adam step on the policy (raising the
# log-prob of `'1'` after `'12+3='`), and the reference's logits on `'12+3='` before and after the step. Then one
# rollout (2 prompts x 4) with the moved policy, and its `ref_gap`.

# %%
cfg_tiny = grpo_fixed.make_config(prompts_per_batch=2, group_size=4)
prompt_ids = tokenizer([PROBE_PROMPT])["input_ids"]  # (1, P)
moved, rollout_gap = {}, {}
for label, module in (("B16", HYBRID["B16"]), ("fixed", grpo_fixed)):
    policy, ref_policy, tok, optimizer, generator = module.setup_run(TASK, cfg_tiny, seed=0)
    with torch.no_grad():
        policy_before, ref_before = policy(prompt_ids).logits.clone(), ref_policy(prompt_ids).logits.clone()
    loss = -torch.log_softmax(policy(prompt_ids).logits[0, -1], -1)[tok.token_to_id["1"]]  # raise P('1' | '12+3=')
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        moved[label] = {"policy": (policy(prompt_ids).logits - policy_before).abs().max().item(),
                        "reference": (ref_policy(prompt_ids).logits - ref_before).abs().max().item()}
    _, stats = module.rollout(policy, ref_policy, tok, TASK, cfg_tiny, generator)
    rollout_gap[label] = stats["ref_gap"]
    print(f"{label:5s} ref_policy is policy: {ref_policy is policy!s:5s}  max |change of logits| after one step: "
          f"policy {moved[label]['policy']:.4f}, reference {moved[label]['reference']:.4f};  ref_gap of the next "
          f"rollout {stats['ref_gap']:.4f} (healthy {render_range('ref_gap')})")
assert moved["fixed"]["reference"] == 0.0 and moved["fixed"]["policy"] > 0.01
assert moved["B16"]["reference"] == moved["B16"]["policy"] > 0.01  # the same object: it moved as much
assert rollout_gap["B16"] == 0.0 and grpo_fixed.in_range({"ref_gap": rollout_gap["fixed"]}, "ref_gap")

# %%
fig, axes = hybrid_vs_fixed("B16", "max |change of the logits on '12+3='| after one optimizer step", figsize=(7, 2.3))
for ax, label, color in zip(axes, ("B16", "fixed"), (BUGGY, FIXED), strict=True):
    ax.bar(["policy", "reference"], [moved[label]["policy"], moved[label]["reference"]], color=[color, REFERENCE])
    if moved[label]["reference"] == 0:
        ax.text(1, 0.01, "exactly 0", ha="center", va="bottom", color=REFERENCE)
axes[0].set_ylabel("max |delta logit|")
plt.show()

# %% [markdown]
# In the fixed twin the step moves the policy and leaves the reference exactly where it was, so the next rollout's
# reference log-probs differ from the old ones (`ref_gap` in its healthy range); under B16 the "reference" moves by
# exactly as much as the policy, and `ref_gap` is exactly 0. The health check *reference frozen, not the live
# policy* fires from iteration 1 on (in a healthy run the two are equal too while the policy has not moved: at
# iteration 0, and while every group so far was constant, so every advantage and every update was 0; the check
# waives iteration 0 and every iteration whose groups are all constant); before training, the preflight's
# reference probe runs `setup_run` on a stand-in task and fails on it. The KL term does not vanish altogether:
# within one rollout batch it becomes a penalty toward $\pi_{\text{old}}$ (on the sampled tokens, with the k3
# estimator), a limit on each batch's step. What is lost is the anchor to the SFT model: nothing in the loss refers
# to it any more, and the logged KL no longer measures the distance to it (in a default run it logs a few hundredths,
# the catalog's level-1 hint, about a tenth of a healthy run's), and nothing in the loss bounds the distance to the
# SFT model any more (this notebook does not measure that distance). The reward need not suffer (in
# notebook 08 §7's short run B16 ends above the fixed run).
# The report: TRL issue 2046 (one model object passed as both `policy` and `ref_policy` to PPO and RLOO; the issue
# asks for a same-object check).
#
# > **You should know.** The reference is a frozen copy of the starting policy (`deepcopy`, `eval()`, no grad),
# > never another name for the model being trained. Check `ref is not policy` and that they share no parameter
# > tensor; in the logs, `ref_gap` (or the KL) exactly 0 after the first update means the reference moves.
#
# <details><summary>The reference and the old policy are both "earlier policies". What is the difference?</summary>
#
# $\pi_{\text{old}}$ is the policy that sampled the current batch: it changes every iteration, and the ratio
# $\pi_\theta / \pi_{\text{old}}$ (clipped) limits each batch's step. $\pi_{\text{ref}}$ is the SFT model, fixed for
# the whole run: the KL to it limits the total drift. B16 turns the second into a noisy copy of the first.
# </details>

# %% [markdown]
# ## 6. B17 — reward text runs past the EOS
# **What the logs show.** The logged reward starts well below the SFT model's and ends far lower than a healthy
# run's; `text_mismatch` (completions whose reward text differs from the decode of their masked tokens) counts many
# completions in every iteration. The policy is better than its logged reward: that reward scores text the policy
# never wrote, so B17 corrupts the metric as well as the learning signal (§7 logs the reward of the text up to the
# EOS beside it).
#
# **Key fact.** The twins' sampler is a fixed-length loop: it draws $T$ tokens for every row, and whatever it drew
# after the first EOS stays in the tensor (the mask marks it). Those tokens are not part of the answer: the policy
# stopped. Hugging Face `generate()` writes `pad_token_id` into a finished row instead (checked in `transformers`
# 4.57.1: `GenerationMixin._sample`, `generation/utils.py`, "finished sentences should have their next token be a
# padding token", whenever an EOS stopping criterion is set), so when PAD is a special token and the model's stop
# token is in `eos_token_id`, `batch_decode(..., skip_special_tokens=True)` drops the EOS and the padding (with a stop
# string or a stop token that is not special, the tail survives); a hand-written fixed-length sampler must blank the
# tail before decoding:

# %%
def decode_to_eos(tokenizer, completions, mask):
    """The text of each completion up to its first EOS: the tokens after it replaced by PAD (as generate() writes
    them), then decoded with the special tokens dropped. -> N strings"""
    return tokenizer.batch_decode(completions.masked_fill(~mask, tokenizer.pad_token_id), skip_special_tokens=True)


ids19 = torch.tensor([[*tokenizer.encode("19", add_bos=False), EOS, *tokenizer.encode("3", add_bos=False)]])  # (1, 4)
mask19 = grpo_fixed.completion_mask(ids19, EOS)  # (1, 4): through the EOS
print("tokens", ids19[0].tolist(), " mask", mask19[0].int().tolist(), " ->", decode_to_eos(tokenizer, ids19, mask19))
assert decode_to_eos(tokenizer, ids19, mask19) == grpo_fixed.decode_completions(tokenizer, ids19, mask19) == ["19"]

# %% [markdown]
# **Tiny input** (the catalog's B17 probe): tokens `'1'`, `'9'`, EOS, `'3'` with the mask through the EOS, as the
# answer to `'10+9='`. The text should be `'19'` and earn reward 1.

# %%
texts, paid = {}, {}
for label, module in (("B17", HYBRID["B17"]), ("fixed", grpo_fixed)):
    texts[label] = module.decode_completions(tokenizer, ids19, mask19)
    paid[label] = TASK.reward(["10+9="], texts[label]).item()
    print(f"{label:5s} text {texts[label]}   reward {paid[label]:.0f}")
assert texts == {"B17": ["193"], "fixed": ["19"]} and paid == {"B17": 0.0, "fixed": 1.0}

# %%
fig, axes = hybrid_vs_fixed("B17", "tokens the reward reads (shaded), for the answer to '10+9='", figsize=(7, 1.6))
shown = {"B17": torch.ones_like(mask19), "fixed": mask19}  # B17 decodes every token (EOS dropped as special)
row = [[tokenizer.decode([t]).replace("<eos>", "EOS") for t in ids19[0].tolist()]]
for ax, label, color in zip(axes, ("B17", "fixed"), (BUGGY, FIXED), strict=True):
    token_grid(ax, row, shown[label], color=color)
    ax.set_xlabel(f"text {texts[label][0]!r}, reward {paid[label]:.0f}")
plt.show()

# %% [markdown]
# The right answer scores 0 because the sampler kept drawing after the policy stopped. The loss still covers only the
# tokens through the EOS (the mask is right), so the reward now depends on tokens that are never trained: a right answer
# followed by a digit is punished, the same answer followed by PAD, BOS or another EOS (which decode to nothing) is not,
# by chance. That is why the logged reward starts below the SFT model's at the very first iteration, before any
# update. It is two faults in one: the advantages reward and punish answers partly at random (the learning signal is
# noisier), and the logged reward, the number you watch, no longer measures the answers. The
# report: ZHZisZZ/dllm issue 118 (GRPO text rewards decoded from the full fixed-length completion, so tokens after the
# first EOS changed the reward).
#
# > **You should know.** The reward must score exactly what the policy wrote: its tokens through the first EOS.
# > `transformers`' `generate()` pads finished rows for you; a fixed-length sampler does not, so blank the tail with
# > the mask before decoding, and log how many reward texts differ from the decode of the masked tokens
# > (`text_mismatch`).
#
# <details><summary>The catalog's level-1 hint says the reward starts well below the SFT model's. Why is that a
# hint at B17 rather than at a training bug?</summary>
#
# The first iteration's reward is measured before any update: it is the SFT model's samples scored by the task. A
# training bug (B12, B14, B16) cannot change it; only a bug in what is sampled (B13, B15 change the draws) or in how
# the samples are scored (B17) can. One iteration's reward is a mean over 64 or 128 samples, with a sampling noise
# large enough that B15's short run in notebook 08 §7 starts more than a tenth low by noise alone, so only a first
# reward far below the SFT model's, well beyond that noise, hints at the rollout, and the check that names B17 is
# `text_mismatch`.
# </details>

# %% [markdown]
# ## 7. Which check flags each bug first, and what the reward shows
# Seven short runs on AdditionTask from its SFT checkpoint, seed 0: the fixed twin and each of B12-B17 switched
# on alone, 20 iterations of 8 prompts x 8 samples (as in notebook 01 §13 and notebook 06; the default run is 70 x
# 16). For each: the preflight probes it fails (`grpo_fixed.preflight`, before training), the health checks it
# fails and the first iteration each fails, and the logged reward at the first iteration and over the last 10. The
# fixed and B17 runs also log `true_reward`, the task's reward of the text up to the first EOS
# (`nb08_plumbing.with_true_reward`, a rollout wrapper that draws nothing, so the runs are unchanged).

# %%
SHORT = dict(steps=20, prompts_per_batch=8)
cfg_short = grpo_fixed.make_config(**SHORT)
with progress("training the short runs", total=1 + len(PLUMBING_IDS)) as step:
    runs = nb08_plumbing.short_runs(["fixed", *PLUMBING_IDS], seed=0, true_reward=("fixed", "B17"), step=step, **SHORT)
probes = {label: grpo_fixed.preflight(grpo_fixed if label == "fixed" else HYBRID[label]) for label in runs}
fired = {label: first_failures(history, cfg_short) for label, history in runs.items()}
final = {label: final_reward(history) for label, history in runs.items()}
print("logged reward: first iteration, mean of the last 10 (final)")
print(f"{'run':5s} {'first':>5s} {'final':>5s}  preflight probes that fail | health checks that fail (first iteration)")
for label, history in runs.items():
    print(f"{label:5s} {history[0]['reward']:5.3f} {final[label]:5.3f}  {'; '.join(probes[label]) or '-'} | "
          + ("; ".join(f"{name} ({it})" for name, it in fired[label].items()) or "-"))
true_final = {label: tail_mean([s["true_reward"] for s in runs[label]]) for label in ("fixed", "B17")}
print(f"B17 true reward (text up to the first EOS): first {runs['B17'][0]['true_reward']:.3f}, final "
      f"{true_final['B17']:.3f};  logged: first {runs['B17'][0]['reward']:.3f}, final {final['B17']:.3f};  fixed run "
      f"(true = logged): first {runs['fixed'][0]['reward']:.3f}, final {final['fixed']:.3f}")

# %%
print("the statistic behind each check (the fixed run's in brackets):")
mean = lambda label, key: sum(s[key] for s in runs[label]) / len(runs[label])  # noqa: E731
top = lambda label, key: max(s[key] for s in runs[label])  # noqa: E731
for label in ("B12", "B13"):
    print(f"  {label}: logprob_gap max {top(label, 'logprob_gap'):.2f} ({top('fixed', 'logprob_gap'):.1e}), "
          f"logprob_gap_unpadded max {top(label, 'logprob_gap_unpadded'):.1e}")
print(f"  B14: completion_length mean {mean('B14', 'completion_length'):.2f} "
      f"({mean('fixed', 'completion_length'):.2f}), "
      f"mask_eos_mismatch {min(s['mask_eos_mismatch'] for s in runs['B14'])} to "
      f"{max(s['mask_eos_mismatch'] for s in runs['B14'])} of {cfg_short.prompts_per_batch * cfg_short.group_size}")
print(f"  B15: mixed_groups mean {mean('B15', 'mixed_groups'):.2f} ({mean('fixed', 'mixed_groups'):.2f}), "
      f"adv_group_mean max {top('B15', 'adv_group_mean'):.1e}")
print(f"  B16: ref_gap max {top('B16', 'ref_gap'):.1e} ({mean('fixed', 'ref_gap'):.2f} on average), kl over the last "
      f"10 {sum(s['kl'] for s in runs['B16'][-10:]) / 10:.3f} ({sum(s['kl'] for s in runs['fixed'][-10:]) / 10:.3f})")
print(f"  B17: text_mismatch {min(s['text_mismatch'] for s in runs['B17'])} to "
      f"{max(s['text_mismatch'] for s in runs['B17'])} per iteration ({top('fixed', 'text_mismatch')})")

# %%
fig, (ax_bar, ax_curve) = plt.subplots(1, 2, figsize=(11, 3.0), layout="constrained", width_ratios=[2, 3])
ax_bar.bar(list(final), list(final.values()), color=[FIXED if k == "fixed" else BUGGY for k in final])
ax_bar.bar(["B17"], [true_final["B17"]], fill=False, edgecolor=BUGGY, ls="--", label="B17, true reward (to EOS)")
ax_bar.axhline(runs["fixed"][0]["reward"], color=REFERENCE, ls=":", lw=1, label="fixed, first iteration")
ax_bar.set(ylabel="logged reward, mean of the last 10", ylim=(0, 1))
ax_bar.legend(fontsize="small")
curves(ax_curve, {k: runs[k] for k in ("fixed", "B12", "B16", "B17")}, "reward",
       colors={"fixed": FIXED, "B12": "#ff7f0e", "B16": "#9467bd", "B17": BUGGY}, window=5, ylabel="logged reward")
ax_curve.plot(smooth([s["true_reward"] for s in runs["B17"]], 5), color=BUGGY, ls="--", label="B17, true reward")
ax_curve.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: the curves fill them
ax_curve.set_title("reward per iteration (5-iteration mean)", fontsize="small")
plt.show()

# %%
assert probes["fixed"] == [] and fired["fixed"] == {}
assert probes["B12"] == probes["B13"] == ["sampler and trainer log-probs agree on a left-padded row"]
assert probes["B14"] == ["completion mask covers the first EOS and nothing after it"]
assert probes["B15"] == ["prompts repeated group by group"]
assert probes["B16"] == ["reference is a frozen copy of the starting policy"]
assert probes["B17"] == ["reward text stops at the first EOS"]
expected = {"B12": "training log-probs match the sampler", "B13": "training log-probs match the sampler",
            "B14": "masks end at the first EOS", "B15": "each group holds one prompt",
            "B16": "reference frozen, not the live policy", "B17": "reward text stops at EOS"}
assert all(fired[b] == {expected[b]: 0 if b != "B16" else 1} for b in expected)  # one check each, at once
assert all(top(b, "logprob_gap_unpadded") <= grpo_support.STATS["logprob_gap_unpadded"].hi for b in ("B12", "B13"))
assert top("B12", "logprob_gap") > top("B13", "logprob_gap") > 1
assert all(s["mask_eos_mismatch"] > 0 for s in runs["B14"]) and mean("fixed", "mask_eos_mismatch") == 0
assert 0.9 < mean("fixed", "completion_length") - mean("B14", "completion_length") < 1.1  # one token short
assert all(s["mixed_groups"] == 1 for s in runs["B15"])
assert all(s["ref_gap"] == 0 for s in runs["B16"])
assert all(s["text_mismatch"] > 0 for s in runs["B17"])
for label in ("B12", "B14", "B16"):  # training bugs: the first rollout is the fixed run's, draw for draw
    assert runs[label][0]["reward"] == runs["fixed"][0]["reward"]
assert all(runs[b][0]["reward"] != runs["fixed"][0]["reward"] for b in ("B13", "B15"))  # other draws
assert runs["B17"][0]["reward"] < runs["fixed"][0]["reward"] - 0.1 and final["B17"] < final["fixed"] - 0.1
quoted = " ".join(f"{final[k]:.3f}" for k in ("fixed", *PLUMBING_IDS))
assert quoted == "0.419 0.377 0.447 0.455 0.463 0.447 0.198"  # the values the text quotes
assert f"{runs['fixed'][0]['reward']:.3f} {runs['B17'][0]['reward']:.3f}" == "0.359 0.203"
assert [f"{runs[b][0]['reward']:.3f}" for b in ("B13", "B15")] == ["0.375", "0.250"]  # other draws
assert runs["fixed"][0]["reward"] - runs["B15"][0]["reward"] > 0.1  # the same prompts laid out anew: noise alone
assert all(s["true_reward"] == s["reward"] for s in runs["fixed"])  # a correct trainer logs the true reward
assert runs["B17"][0]["true_reward"] == runs["fixed"][0]["reward"]  # the fixed run's first draws, scored right
assert f"{true_final['B17']:.3f}" == "0.412" and abs(true_final["B17"] - final["fixed"]) < 0.05 < \
    true_final["B17"] - final["B17"]  # the policy learned about as well; its logged reward says otherwise

# %% [markdown]
# What the runs show (one seed, 20 short iterations: treat gaps of a few hundredths as noise):
# - **Each bug fails exactly one health check, and five of the six fail it at iteration 0.** B16 fails *reference
#   frozen, not the live policy* from iteration 1, the first iteration after an update. The statistics behind the
#   checks are unambiguous: B12's and B13's `logprob_gap` is far out of range while `logprob_gap_unpadded` stays at
#   rounding; B14's `mask_eos_mismatch` is positive in every iteration and its logged length about one token short;
#   B15's `mixed_groups` is 1 throughout while `adv_group_mean` passes; B16's `ref_gap` is exactly 0 throughout;
#   B17's `text_mismatch` is positive in every iteration (all printed above).
# - **All six fail a preflight probe before training starts**: B12 and B13 the left-padded sampler-vs-trainer
#   probe, B14 the mask probe, B15 the repeat probe, B16 the reference probe (`setup_run` on a stand-in task must
#   return a reference that is not the policy and shares none of its tensors), B17 the decode probe.
# - **The logged reward flags only B17 clearly, and there it is the metric that is broken.** Final logged rewards: fixed
#   0.419, B12 0.377, B13 0.447, B14 0.455, B15 0.463, B16 0.447, B17 0.198. B17's logged reward starts at 0.203 against
#   the fixed run's 0.359 and stays low. The training bugs B12, B14 and B16 share the fixed run's first rollout exactly
#   (they change nothing before the first update); B13 and B15 draw other samples and start at 0.375 and 0.250. One
#   iteration of 64 samples is noisy: B15 draws the very same prompts, only laid out differently, and starts more
#   than a tenth lower by sampling noise alone. So the first reward says little on its own;
#   B17's logged reward stays low all run, and `text_mismatch` names it. B17 corrupts both the logged reward and the
#   learning signal: its true reward (the text up to the first EOS) starts at the fixed run's 0.359 (the same draws,
#   scored right) and ends at 0.412 against the fixed run's 0.419 here (the dashed bar and curve), far above its
#   logged 0.198; in the default 70-iteration runs it ends clearly below the fixed run's (README). B12 ends a
#   little below the fixed
#   run; B13-B16 end level with it or above, within one short seed's noise. The catalog's level-1 hints quote the
#   default 70 x 16 runs, where B12 also ends clearly lower.
#
# > **You should know.** For the plumbing bugs the reward curve is a poor detector: four of six look healthy in a
# > short run, and the one it flags clearly, B17, corrupts the reward itself (its logged reward reads far below
# > what the policy writes, and its partly random signal slows learning). What catches them is an invariant that
# > is exactly true in a correct trainer: sampler and trainer
# > agree on padded rows; the mask ends at the first EOS; a group holds one prompt; the reference differs from the
# > policy after an update; the reward text is the decode of the masked tokens. Log each one, and probe each
# > building block with a tiny input before training.


# %% [markdown]
# ## 8. Self-check
# 1. `logprob_gap` is 9 nats and `logprob_gap_unpadded` is 3e-6. Which bugs are candidates, and which one tiny
#    experiment tells them apart?
# 2. Why does a missing `position_ids` cost GPT-2 a lot and a RoPE model (almost) nothing?
# 3. Your logged mean completion length is 1.9 tokens but the decoded answers are about 2 characters plus an EOS.
#    What is wrong, and what happens to the learning of when to stop?
# 4. `adv_group_mean` is 1e-8 in every iteration. Does that prove the groups are right?
# 5. The KL to the reference is 0.02 and the reward is slightly higher than last week's run. Good news?
# 6. Why does the first-iteration reward of a run say something about B17 but nothing about B12?
# 7. Your sampler writes `max_new_tokens` tokens per row. Name two places where the tokens after the first EOS must
#    be kept out.
#
# <details><summary>Answers</summary>
#
# 1. B12 (the trainer ignores the padding in its positions) or B13 (the sampler ignores the padding in its
#    attention), or any other padding mismatch. Sample one prompt alone and behind 3 PAD tokens with one seed,
#    and score the draws with the trainer: whichever of the two log-probs changes with the padding is the wrong
#    side (notebook 08 §2).
# 2. RoPE scores depend only on position differences, and a constant offset of a row's real tokens leaves them
#    unchanged (the PAD keys are masked); GPT-2 adds a learned embedding of the absolute position to every input
#    (notebook 08 §1).
# 3. The completion mask stops before the EOS (B14): the logged length is `mask.sum`. The EOS token's own log-prob
#    gets no gradient, so *when* to stop is trained only indirectly (pushing down a token that a wrong answer wrote
#    instead of its EOS moves some softmax mass to EOS), and an empty answer (EOS first) is masked out entirely, so
#    it is never penalised directly (notebook 08 §3).
# 4. No. Advantages are centred within whatever group they were normalised in, mixed or not; check that each
#    group's samples share one prompt (`mixed_groups`), and that the layout is `[p0]*G + [p1]*G` (notebook 08 §4).
# 5. Check `ref_gap`: if it is exactly 0 once the policy has moved, the reference is the live policy (B16), the KL
#    only measures the drift within one batch, and nothing anchors the policy to the SFT model (notebook 08 §5).
#    It is 0 in a healthy run too while every update so far was zero: at iteration 0, and as long as every group so
#    far was constant (every advantage 0).
# 6. The first iteration's reward is measured before any update, on the SFT model's samples: a scoring bug (B17) changes
#    it, a training bug (B12) cannot. One iteration's mean is noisy (B15 starts a tenth low by chance), so only a
#    large drop says anything; and under B17 the logged reward stays wrong all run, while the reward of the text up
#    to the EOS
#    climbs far above it (notebook 08 §6, notebook 08 §7).
# 7. The reward text (decode only through the first EOS, B17) and the loss (the mask ends at the first EOS and
#    covers it, B14); also the training forward's attention mask, which hides them like padding.
# </details>
#
# **Next: notebook 02**, *Why the importance ratio differs from one*: which sources of a ratio away from 1 are
# legitimate, and which are bugs.
