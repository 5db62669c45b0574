"""The bug catalog, and hybrids: the fixed trainer with chosen bugs switched back on.

Each bug lives in exactly one function of grpo_buggy.py. A hybrid is `swap.fixed_with` given those
functions' buggy versions: each still calls the *fixed* helpers around it (one bug on at a time).
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from pathlib import Path

import grpo_buggy
import grpo_fixed
from workbook.swap import fixed_with

ROOT = Path(grpo_fixed.__file__).resolve().parent


@dataclass(frozen=True)
class Bug:
    """One catalogued bug, with the three levels of hint `make hint` gives while it remains.

    symptom (level 1): what the training logs show, never naming the function; stats: the logged
    statistics the symptom reads (printed under it with their meaning and healthy range from the twins' own table);
    probe (level 2): the tiny input that exposes it (the function is `function`); fix (level 3): the fix
    and why (the exact lines are the fixed twin's `# FIX <id>` lines). "A default run" in a symptom is the twins'
    default config on seed 0 with one torch intra-op thread, as `make hint`, the CLI, the notebooks and the tests
    run it (the twins' command line and `workbook` set it), with that bug alone (SYMPTOM_NUMBERS); a bare
    interpreter's two threads round differently and give other numbers."""

    id: str
    function: str
    title: str
    symptom: str = ""
    stats: tuple[str, ...] = ()
    probe: str = ""
    fix: str = ""
    source: str = ""
    """where the mistake was found or reported in public LM RL code (the LM-loop bugs B12 and up)"""
    cards: tuple[str, ...] = ()
    """ids of the drill cards (interview/questions.toml) an interviewer asks after this bug is fixed;
    `make interview` asks them first"""


SYMPTOM_NUMBERS = "(the numbers are a default run's with this bug alone; other remaining bugs change them)"
"""printed under every level-1 hint: a mock round holds several bugs, which move each other's numbers"""

BUGS = [
    Bug("B1", "sample_from_logits", "sampling from raw logits (no softmax)",
        symptom="the reward is about 0.01 from the first iteration on (the SFT model it starts from scores about "
                "0.3) and never recovers; nearly every group's rewards are all 0 (zero_var_groups 0.925 on average), "
                "completions run longer than a healthy run's (3.8 tokens vs 3.0 on average) and the logged entropy "
                "stays near its starting 0.7",
        stats=("reward", "zero_var_groups", "completion_length", "entropy"),
        cards=("sampler-test", "triage-log-shape", "debug-method"),
        probe="logits [2, 1, 0, -1, -2], 20 000 draws: the frequencies should be softmax [.64, .23, .09, .03, .01]; "
              "the buggy ones are about [.39, .30, .20, .10, 0]",
        fix="raw logits (shifted to be non-negative) go to torch.multinomial, which draws in proportion to the "
            "non-negative weights it is given: pass softmax(logits), stable for logits of any size"),
    Bug("B2", "group_advantage", "no epsilon in the advantage's std (constant group gives NaN)",
        symptom="some advantages are NaN (adv_nonfinite > 0) in most iterations (52 of 70 in a default run); the "
                "loss is NaN there and those updates are skipped (207 of 280), and the reward climbs more slowly "
                "than a healthy run's (it ends at 0.53 where a healthy run reaches 0.68)",
        stats=("adv_nonfinite", "nonfinite_steps", "zero_var_groups"),
        cards=("eps-role", "zero-variance", "tiny-reward-scale"),
        probe="a group whose rewards are all equal (all wrong or all right), rewards [1, 1, 1, 1]: the advantages "
              "should be exact zeros (the buggy ones are NaN); "
              "[1.7e308, -1.7e308] should give [1, -1] (the variance overflows to inf)",
        fix="(r - mean) / std divides 0 by 0 for a constant group: return zeros for it, add eps > 0 to the std, "
            "and rescale huge rewards before the mean and variance so neither overflows"),
    Bug("B3", "update_policy", "old log-probs recomputed inside the inner loop (ratio is always 1)",
        symptom="the importance ratio never leaves 1, even at the last of several inner steps, and nothing is "
                "ever clipped (both clip fractions are 0 in every iteration); the reward climbs more slowly than a "
                "healthy run's (it ends at 0.60 where a healthy run reaches 0.68)",
        stats=("ratio_last_maxdev", "clip_frac_pos", "clip_frac_neg"),
        cards=("old-logprobs-no-grad", "clip-frac-zero", "single-inner-step"),
        probe="two inner steps on one rollout batch: the second step's ratio should differ from 1; the buggy "
              "one is exactly 1",
        fix="the old log-probs are recomputed from the current policy inside the inner loop: use the batch's "
            "old_logprobs, cached once at rollout from the policy that sampled"),
    Bug("B4", "grpo_loss", "clipping the product ratio * A instead of the ratio",
        symptom="learning is slower than it should be (in a default run the reward ends near 0.56 where a healthy "
                "run reaches 0.68) and the early loss sits well above a healthy run's, yet every statistic stays "
                "in its healthy range",
        stats=("reward", "loss"),
        cards=("clamp-product", "b4-silenced-samples", "why-min"),
        probe="one token, ratio 1, A = 2: d loss / d logprob should be -2 (the buggy one is 0)",
        fix="clamp(ratio * A, 1 - c, 1 + c) clips the product: clip the ratio, then multiply, "
            "clamp(ratio, 1 - c, 1 + c) * A (with A < 0 that flips which side is the pessimistic one)"),
    Bug("B5", "masked_mean", "masked tokens reach the loss sum; all-masked batch divides 0 by 0",
        symptom="no training statistic shows it: a default run is identical to a healthy one at every iteration "
                "(no NaN loss, no skipped step); probe a tiny input instead",
        stats=("loss", "nonfinite_steps"),
        cards=("masked-mean-all-masked", "kl-same-mask", "loss-aggregation"),
        probe="the loss would turn NaN for a minibatch whose every completion token is masked, or once a padded "
              "position holds -inf or NaN (-inf * 0 = NaN): an all-False mask should give 0.0 (the buggy one is "
              "NaN); values [1, 3, nan] with mask [1, 1, 0] should give 2.0",
        fix="(values * mask).sum() / mask.sum() lets NaN and inf through the mask and divides 0 by 0: select "
            "the unmasked values (torch.where), and divide by max(1, count)"),
    Bug("B6", "completion_logits", "log-prob shift misalignment (logit t scored against token t)",
        symptom="training log-probs differ from the sampler's on the very same tokens (by 13 to 15 nats), the "
                "reward does not rise (it drifts down from 0.27) and the gradient norm spikes into the hundreds",
        stats=("logprob_gap", "reward", "grad_norm"),
        cards=("logprob-shift-gather", "consistency-not-correctness", "invariants"),
        probe="a fake LM whose logits at position l all equal l, a prompt of P = 3 tokens (BOS included), 3 "
              "completion tokens: completion token t sits at position P + t, so its row should come from position "
              "P + t - 1, i.e. [2, 3, 4] (the buggy rows are [3, 4, 5])",
        fix="in a causal LM the logit at position l predicts token l + 1, so the completion's T tokens are scored "
            "by the T positions before the last one, logits[:, -T - 1 : -1], not logits[:, -T:]"),
    Bug("B7", "token_logprobs", "log(softmax) instead of log_softmax",
        symptom="no training statistic shows it in a default run (no NaN loss, no skipped step, every statistic "
                "in its healthy range, final reward 0.67 where a healthy run reaches 0.68); a longer run whose "
                "policy grows far more confident could show non-finite losses and skipped steps (nonfinite_steps > 0)",
        stats=("loss", "nonfinite_steps"),
        cards=("log-softmax", "ratio-exp-overflow", "fp32-logprobs"),
        probe="-inf log-probs appear once some sampled or padded token's probability underflows float32 (a logit "
              "gap above about 104): logits [0, 200], token 0: the log-prob should be -200; the buggy one is -inf "
              "(softmax underflows to 0 first)",
        fix="log(softmax(x)) underflows to log(0) = -inf: compute log_softmax (x - logsumexp(x)) directly"),
    Bug("B8", "kl_to_reference", "KL estimator with the log-ratio reversed",
        symptom="the logged kl stays >= 0 (so no sign check fires) but reads 0.95 on average over the last 10 "
                "iterations of a default run, where a healthy run logs 0.23, with spikes to 7; yet the policy's "
                "exact KL to the reference (summed over the vocabulary; not logged, so compute it from the two models' "
                "logits, as notebook 01 §13 does on a shorter run) averages no more than a healthy run's over the "
                "same 10 iterations (0.22 vs 0.22); the gradient norm spikes, once into the thousands "
                "(up to 4303, where a healthy run peaks at 8), and the loss jumps with that spike",
        stats=("kl", "grad_norm", "loss"),
        cards=("flipped-kl-sign", "k-estimators", "negative-k1"),
        probe="pi uniform on 3 tokens, pi_ref = softmax([2, 0, -2]), one copy of each token: the mean of k3 "
              "should equal KL(pi || pi_ref) = 1.044 exactly (the buggy mean is 6.03)",
        fix="k3 = exp(x) - x - 1 needs x = log pi_ref - log pi on tokens sampled from pi; with the log-ratio "
            "reversed its value estimates chi-square(pi || pi_ref) minus KL, and its gradient is half the gradient "
            "of chi-square: still a pull toward the reference, but one that explodes on tokens where pi >> pi_ref"),
    Bug("B9", "batch_advantages", "groups reshaped along the wrong axis (baseline mixes prompts)",
        symptom="advantages are no longer centred within each prompt's group (adv_group_mean 0.26 to 1 in a "
                "default run, where a healthy run's is float rounding), while the reward still rises as a healthy "
                "run's does",
        stats=("adv_group_mean",),
        cards=("b-equals-g", "baseline-independence", "advantage-scaling"),
        probe="rewards [0, 1, 2, 5, 6, 8] for 2 prompts x 3 samples: each prompt should be normalised within "
              "its own 3 rewards (the centring statistic misses it when B divides G, and at B == G the wrong "
              "reshape happens to be right)",
        fix="the batch is laid out prompt by prompt, so the groups are rewards.view(B, G) = view(-1, G); "
            "view(G, B) puts samples of different prompts in one group"),
    Bug("B10", "policy_logprobs", "temperature used for sampling but not for training log-probs",
        symptom="training log-probs differ from the sampler's on the very same tokens (by 0.6 to 2.2 nats in a "
                "default run, where a healthy run's gap is float rounding) while the ratio is exactly 1 at the "
                "first inner step",
        stats=("logprob_gap", "ratio_first_maxdev"),
        cards=("rollout-temperature", "vllm-logprobs-mode", "consistency-not-correctness"),
        probe="a fake LM whose logits are [1, 0, -1, 0.5] at every position, temperature 0.5, completion tokens "
              "[0, 3, 2]: the training log-probs should be log_softmax(logits / 0.5) of those tokens, [-0.42, "
              "-1.42, -4.42] (the buggy ones, log_softmax(logits), are [-0.75, -1.25, -2.75])",
        fix="sampling draws from softmax(logits / T), so training must score under the same distribution: "
            "divide the logits by the temperature"),
    Bug("B11", "optimizer_step", "no gradient clipping",
        symptom="the final reward is within 0.04 of a healthy run's on the same seed (seeds 0, 1, 2: 0.646, 0.659, "
                "0.678 vs 0.681, 0.655, 0.681), and the logged (pre-clip) gradient norm is no reliable sign: on seed 0 "
                "it peaks higher than a healthy run's (about 19 vs 8), on seed 1 lower, on seed 2 it leaves its "
                "healthy range once; on seed 0 the mean ratio at the last inner step also leaves its healthy range",
        stats=("grad_norm", "ratio_last_mean"),
        cards=("grad-clip-adam", "pre-clip-norm", "grad-clip-where"),
        probe="nothing in the logs shows whether those norms went into the update unclipped: nn.Linear(4, 1), "
              "loss 1000 * net(ones(1, 4)).sum(), max_grad_norm 1: the gradient norm the step applies (after "
              "clipping) should be 1.00 (the buggy one is 2236)",
        fix="the norm is measured with max_norm = inf, so nothing is clipped: pass max_grad_norm to "
            "clip_grad_norm_ (it still returns the pre-clip norm for the logs)"),
    Bug("B12", "sequence_inputs", "training forward without position ids (left-padded rows sit at shifted positions)",
        symptom="training log-probs differ from the sampler's from the first iteration on, by 3.5 to 11.7 nats "
                "(logprob_gap), but only on rows whose prompt was left-padded: on the others (logprob_gap_unpadded) "
                "the gap stays at rounding level; the reward climbs more slowly than a healthy run's (it ends at 0.54 "
                "where a healthy run reaches 0.68)",
        stats=("logprob_gap", "logprob_gap_unpadded", "reward"),
        source="huggingface/trl issue 6800 (Online DPO, XPO and Nash-MD log-prob forwards pass no position_ids on "
               "left-padded prompts: harmless under RoPE, wrong for absolute-position models such as GPT-2 and this "
               "TinyLM); huggingface/transformers issue 18388 (generate and forward logits differ when the position "
               "ids ignore the left padding)",
        cards=("position-ids-padding", "consistency-not-correctness", "invariants"),
        probe="score one prompt and completion ('12+3=' then '23' and EOS) as a row alone and behind three PAD "
              "tokens: the trainer's log-probs should be equal; here the padded row's differ",
        fix="a model called without position_ids numbers every row 0..L-1, so a left-padded row's real tokens "
            "sit at shifted positions: pass position_ids = cumsum(attention_mask) - 1 (clamped at 0 on the padding), "
            "as the sampler does"),
    Bug("B13", "generate", "sampling without the attention mask (pad tokens attended)",
        symptom="training log-probs differ from the sampler's from the first iteration on, by 0.09 to 4.4 nats "
                "(logprob_gap), only on rows whose prompt was left-padded (logprob_gap_unpadded stays at rounding "
                "level); the reward is not visibly hurt (a default run ends at 0.67 where a healthy one reaches 0.68): "
                "the gap, not the reward, is the signal",
        stats=("logprob_gap", "logprob_gap_unpadded"),
        source="deepspeedai/DeepSpeedExamples pull request 464 (DeepSpeed-Chat's generation got no prompt attention "
               "mask, so the padding tokens were attended and generation broke; fixed in pull request 468)",
        cards=("consistency-not-correctness", "invariants", "debug-method"),
        probe="sample one prompt ('12+3=') alone and behind three PAD tokens, from one seed: the sampler's "
              "log-probs of its draws should be equal; here the padded row's differ",
        fix="without the attention mask the sampler's queries attend to the left padding, so the sampled "
            "distribution is not the one the trainer scores: pass the mask at the prompt and at every cached step"),
    Bug("B14", "completion_mask", "completion mask stops before EOS (the EOS token gets no gradient)",
        symptom="the logged completion length is about one token shorter than a healthy run's (1.92 vs 2.95 "
                "tokens on average); on seed 0 the reward ends close to a healthy run's (a default "
                "run ends at 0.66 where a healthy one reaches 0.68), on other seeds it can end lower; in the full "
                "history the gradient norm leaves its healthy range once (70 at iteration 46)",
        stats=("completion_length", "grad_norm"),
        source="rasbt/reasoning-from-scratch pull request 185 (GRPO sampled responses dropped the EOS token, so "
               "stopping got no gradient); huggingface/trl issue 1623 (EOS masked out of an SFT loss: the model never "
               "learns to stop)",
        cards=("completion-mask-test", "truncated-completions", "invariants"),
        probe="completion [5, EOS, 7, EOS]: the mask should be [1, 1, 0, 0]; here it is [1, 0, 0, 0]",
        fix="counting the EOS tokens up to and including t drops the first EOS itself: count those strictly "
            "before t, so the mask ends on the first EOS"),
    Bug("B15", "repeat_prompts", "prompts tiled instead of repeated (a group holds G different prompts)",
        symptom="the progress line a default run prints stays in its healthy ranges, the advantages are centred "
                "(adv_group_mean at rounding level) and the run ends at 0.68 where a healthy one reaches 0.68; of "
                "the full statistics logged for each iteration (the run's history), one is out of its healthy "
                "range at every iteration (find it; ref_gap at iteration 0 is out in every run, healthy ones too), and "
                "the gradient norm leaves its range once (167 at iteration 8, between the printed lines)",
        stats=("adv_group_mean", "grad_norm"),
        source="PrimeIntellect-ai/prime-rl pull request 600 (prompts duplicated as [p1, p2] * n instead of [p1, p1, "
               "p2, p2], so each GRPO group mixed different prompts)",
        cards=("baseline-independence", "b-equals-g", "why-no-critic"),
        probe="prompts ['1+2=', '3+4='], G = 2: the batch should be ['1+2=', '1+2=', '3+4=', '3+4=']; here it "
              "is ['1+2=', '3+4=', '1+2=', '3+4=']",
        fix="prompts * G lays the batch out p0, p1, ..., p0, p1, ...; batch_advantages groups consecutive "
            "samples, so each prompt must be repeated G times in a row"),
    Bug("B16", "setup_run", "the reference is the live policy (the KL anchor moves with it)",
        symptom="the logged KL to the reference stays near 0 (0.02 on average over the last 10 iterations, where "
                "a healthy run logs 0.23) while the reward ends, on seed 0, about where a healthy run's does "
                "(0.69 where a healthy run reaches 0.68)",
        stats=("kl", "reward"),
        source="huggingface/trl issue 2046 (one model object passed as both policy and ref_policy to PPO and RLOO, so "
               "the KL anchor moved with the policy; the issue asks for a same-object check)",
        cards=("ref-is-policy", "weight-sync-reference", "ref-not-old"),
        probe="take one optimizer step on the policy and score a prompt with the reference before and after: "
              "the reference's logits should not change; here they move with the policy's",
        fix="the reference must be a frozen copy of the starting policy (deepcopy, eval, no grad), not another "
            "name for the model being trained"),
    Bug("B17", "decode_completions", "reward text runs past EOS",
        symptom="the logged reward starts well below the SFT model's (0.17 at the first iteration, where a "
                "healthy run starts at 0.27) and ends far lower (0.38 where a healthy run reaches 0.68), though the "
                "completions are as long as a healthy run's (2.96 vs 2.95 tokens on average)",
        stats=("reward", "completion_length"),
        source="ZHZisZZ/dllm issue 118 (GRPO text rewards decoded from the full fixed-length completion, so tokens "
               "after the first EOS change the reward)",
        cards=("reward-text-eos", "truncated-completions", "invariants"),
        probe="tokens '1', '9', EOS, '3' with the mask through EOS: the text should be '19'; here it is '193'",
        fix="the sampler writes T tokens per row; what follows the first EOS is not part of the answer: blank it "
            "with the mask before decoding"),
]
BUG_IDS = [b.id for b in BUGS]
PLUMBING_IDS = BUG_IDS[11:]
"""the bugs of the LM plumbing (padding, positions, masks, EOS, groups, the reference): notebook 08; notebook 01
has the others"""
_BY_ID = {b.id: b for b in BUGS}


def bug(bug_id: str) -> Bug:
    """The catalog entry for `bug_id` ('B1'..'B17'); ValueError for an unknown id."""
    try:
        return _BY_ID[bug_id]
    except KeyError:
        raise ValueError(f"unknown bug id {bug_id!r}; known: {BUG_IDS}") from None


def hybrid(*bug_ids: str) -> types.ModuleType:
    """A fresh copy of grpo_fixed with the functions of `bug_ids` taken from grpo_buggy."""
    sites = [bug(b).function for b in bug_ids]  # validates ids first
    return fixed_with("with_" + ("_".join(bug_ids) or "none"), **{site: getattr(grpo_buggy, site) for site in sites})
