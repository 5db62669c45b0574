"""The LM plumbing of the hand-out: left-padded prompts with their attention mask and position ids, KV-cache
generation with its mask through the first EOS, rewards on the text up to that EOS, the rollout batch, and the
SFT policy with its frozen reference.

Each test compares against an independent computation (a full forward pass, a row alone, hand-written ids), so
a mistake in the plumbing makes it fail."""

from __future__ import annotations

import pytest
import torch

import grpo_buggy
import grpo_fixed
from tinylm import CharTokenizer, TinyLM, TinyLMConfig

TWINS = pytest.mark.parametrize("module", [grpo_fixed, grpo_buggy], ids=["fixed", "buggy"])
PROMPTS = ["12+7=", "3+4=", "49+49=", "0+5="]  # 4, 5 and 6 characters: the batch is left-padded


@pytest.fixture(scope="module")
def sft():
    """The SFT policy (eval mode) and the tokenizer of AdditionTask."""
    task = grpo_fixed.AdditionTask()
    return TinyLM.from_pretrained(task.checkpoint).eval(), CharTokenizer(task.alphabet)


def encode(tokenizer, prompts):
    enc = tokenizer(prompts, padding_side="left")
    return enc["input_ids"], enc["attention_mask"]  # (N, P) each


def sample(policy, tokenizer, prompts, seed=0, temperature=0.8, max_new_tokens=5):
    ids, mask = encode(tokenizer, prompts)
    g = torch.Generator().manual_seed(seed)
    return (ids, mask, *grpo_fixed.generate(policy, tokenizer, ids, mask, max_new_tokens, temperature, g))


# ---- position ids and the tokenizer ----------------------------------------------------------------
@TWINS
def test_position_ids_count_real_tokens_from_zero(module):
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 0]])  # (N, L); last row: PAD after EOS
    assert module.position_ids(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 1, 2, 2]]
    assert module.position_ids(mask.bool()).tolist() == module.position_ids(mask).tolist()


def test_tokenizer_pads_left_and_decode_skips_specials():
    tok = CharTokenizer(grpo_fixed.AdditionTask.alphabet)
    ids, mask = encode(tok, ["12+7=", "3+4="])
    assert ids.tolist() == [[1, 4, 5, 13, 10, 14], [0, 1, 6, 13, 7, 14]]  # PAD 0, BOS 1, '0' is id 3
    assert mask.tolist() == [[1] * 6, [0, 1, 1, 1, 1, 1]]
    completions = torch.tensor([[4, 12, 2, 0, 0], [10, 2, 0, 0, 0], [4, 12, 3, 3, 3]])  # "19" EOS, "7" EOS, "19000"
    assert tok.batch_decode(completions, skip_special_tokens=True) == ["19", "7", "19000"]
    assert tok.decode(completions[1]) == "7<eos><pad><pad><pad>"


# ---- generation -----------------------------------------------------------------------------------
def test_generate_masks_through_the_first_eos_and_keeps_the_samples_after_it(sft):
    """generate samples all T tokens of every row and leaves what follows the first EOS in place; the mask is True
    through the first EOS and False after it, and decode_completions reads the text only up to that EOS."""
    policy, tok = sft
    ids, mask, completions, cmask, logprobs, entropy = sample(policy, tok, PROMPTS * 8)
    N, T = completions.shape
    assert (N, T) == (32, 5) and cmask.dtype == torch.bool
    assert logprobs.shape == entropy.shape == (N, T)
    is_eos = completions == tok.eos_token_id  # (N, T)
    assert is_eos.any(dim=1).any(), "diagnostic needs rows that reach EOS"
    expected = []
    for row, m, e in zip(completions, cmask, is_eos, strict=True):
        first = int(e.nonzero()[0]) if e.any() else T - 1
        assert m[: first + 1].all() and not m[first + 1 :].any(), (row.tolist(), m.tolist())
        assert not (row[: first + 1] == tok.pad_token_id).any(), row.tolist()
        expected.append(tok.decode(row[: first + 1], skip_special_tokens=True))
    assert (cmask.sum(dim=1) < T).any(), "diagnostic needs a completion shorter than T"
    assert (completions[~cmask] != tok.pad_token_id).any(), "after the first EOS: sampled tokens, not PAD"
    assert grpo_fixed.decode_completions(tok, completions, cmask) == expected
    assert expected != tok.batch_decode(completions, skip_special_tokens=True), "diagnostic: tokens after EOS"


def test_sampler_logprobs_equal_the_training_logprobs_on_padded_and_unpadded_rows(sft):
    policy, tok = sft
    ids, mask, completions, cmask, logprobs, _ = sample(policy, tok, PROMPTS * 4, seed=1)
    padded = (mask == 0).any(dim=1)  # (N,)
    assert padded.any() and (~padded).any()
    training = grpo_fixed.policy_logprobs(policy, ids, mask, completions, cmask, 0.8)  # (N, T)
    gap = (training - logprobs).abs()[cmask]
    assert gap.max() <= 1e-4, f"max gap {gap.max():.3g}"
    for rows in (padded, ~padded):
        assert (training - logprobs)[rows][cmask[rows]].abs().max() <= 1e-4


def test_the_kv_cache_path_equals_a_full_forward(sft):
    """generate's entropies (from the cached, token-by-token logits) equal those of one full forward pass over the
    prompt and the completion (completion_logits of the fixed twin), wherever the completion is unmasked."""
    policy, tok = sft
    ids, mask, completions, cmask, _, entropy = sample(policy, tok, PROMPTS * 2, seed=2)
    with torch.no_grad():
        logits = grpo_fixed.completion_logits(policy, ids, mask, completions, cmask) / 0.8  # (N, T, V)
    logp = torch.log_softmax(logits, -1)
    full = -(logp.exp() * logp).sum(-1)  # (N, T)
    torch.testing.assert_close(entropy[cmask], full[cmask], rtol=0, atol=1e-5)


def test_a_rows_logprobs_do_not_depend_on_its_left_padding(sft):
    """The same prompt and completion scored alone (no padding) and next to a longer prompt (two PADs)."""
    policy, tok = sft
    completion, cmask = torch.tensor([[6, 4, 2, 0, 0]]), torch.tensor([[True, True, True, False, False]])  # "31" EOS
    alone_ids, alone_mask = encode(tok, ["3+4="])
    both_ids, both_mask = encode(tok, ["49+49=", "3+4="])
    assert both_mask[1].tolist()[:2] == [0, 0]
    with torch.no_grad():
        alone = grpo_fixed.policy_logprobs(policy, alone_ids, alone_mask, completion, cmask, 0.8)[0]
        padded = grpo_fixed.policy_logprobs(policy, both_ids, both_mask, completion.expand(2, -1),
                                            cmask.expand(2, -1), 0.8)[1]
    torch.testing.assert_close(padded[:3], alone[:3], rtol=0, atol=1e-5)


# ---- reward, rollout, set-up -------------------------------------------------------------------------
def test_reward_is_on_decoded_text():
    task = grpo_fixed.AdditionTask()
    assert task.reward(["12+7="] * 4, ["19", "190", "91", ""]).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert task.reward(["0+0=", "49+49="], ["0", "98"]).tolist() == [1.0, 1.0]


@TWINS
def test_rollout_batch_keys_and_shapes(module):
    """The batch's interface, which both twins keep (what the bugs change is in the next test)."""
    cfg = module.make_config(prompts_per_batch=3, group_size=4)
    task = module.AdditionTask()
    policy, ref, tok, _, g = module.setup_run(task, cfg, seed=0)
    batch, stats = module.rollout(policy, ref, tok, task, cfg, g)
    N, T = 12, task.max_completion_length
    assert set(batch) == {"prompts", "texts", "prompt_ids", "prompt_mask", "completions", "mask", "rewards",
                          "sampler_logprobs", "entropy", "advantages", "old_logprobs", "ref_logprobs"}
    assert len(batch["prompts"]) == len(batch["texts"]) == N
    P = batch["prompt_ids"].shape[1]
    assert P == 1 + max(len(p) for p in batch["prompts"]) and batch["prompt_mask"].shape == (N, P)
    for key in ("completions", "mask", "sampler_logprobs", "entropy", "old_logprobs", "ref_logprobs"):
        assert batch[key].shape == (N, T), key
    assert batch["rewards"].shape == batch["advantages"].shape == (N,)
    torch.testing.assert_close(batch["rewards"], task.reward(batch["prompts"], batch["texts"]))
    assert 0 <= stats["reward"] <= 1


def test_rollout_groups_each_prompt_and_scores_the_text_up_to_the_first_eos():
    """Fixed twin only: B15 (repeat_prompts tiles), B14 (mask drops the EOS) and B17 (text runs past the EOS)
    break these on purpose."""
    cfg = grpo_fixed.make_config(prompts_per_batch=3, group_size=4)
    task = grpo_fixed.AdditionTask()
    policy, ref, tok, _, g = grpo_fixed.setup_run(task, cfg, seed=0)
    batch, stats = grpo_fixed.rollout(policy, ref, tok, task, cfg, g)
    N, T = 12, task.max_completion_length
    groups = [batch["prompts"][i : i + 4] for i in range(0, N, 4)]
    assert all(len(set(group)) == 1 for group in groups), "each prompt repeated G times consecutively"
    assert len({group[0] for group in groups}) == 3, "diagnostic needs three different prompts"
    texts = []
    for row, m in zip(batch["completions"], batch["mask"], strict=True):
        is_eos = row == tok.eos_token_id
        first = int(is_eos.nonzero()[0]) if is_eos.any() else T - 1
        assert m.tolist() == [t <= first for t in range(T)], (row.tolist(), m.tolist())
        texts.append(tok.decode(row[: first + 1], skip_special_tokens=True))
    assert batch["texts"] == texts
    assert stats["mixed_groups"] == 0 and stats["mask_eos_mismatch"] == 0 and stats["text_mismatch"] == 0


def test_first_inner_step_ratio_is_exactly_one():
    cfg = grpo_fixed.make_config(prompts_per_batch=4, group_size=4)
    task = grpo_fixed.AdditionTask()
    policy, ref, tok, optimizer, g = grpo_fixed.setup_run(task, cfg, seed=0)
    batch, _ = grpo_fixed.rollout(policy, ref, tok, task, cfg, g)
    batch["advantages"] = torch.linspace(-1.0, 1.0, 16)  # a signal in every group
    records = grpo_fixed.update_policy(policy, optimizer, batch, cfg, g)
    assert torch.equal(records[0]["ratio"], torch.ones_like(records[0]["ratio"]))
    assert not torch.equal(records[-1]["ratio"], torch.ones_like(records[-1]["ratio"]))


@TWINS
def test_setup_run_loads_the_checkpoint_into_a_trainable_policy(module):
    """Both twins; the reference's freezing is the next test's (B16 breaks it on purpose)."""
    task = module.AdditionTask()
    policy, _, tok, optimizer, _ = module.setup_run(task, module.make_config(dropout=0.1), seed=0)
    saved = TinyLM.from_pretrained(task.checkpoint)
    assert policy.config.dropout == 0.1 and tok.alphabet == task.alphabet
    for (name, p), (_, s) in zip(policy.named_parameters(), saved.named_parameters(), strict=True):
        assert torch.equal(p, s) and p.requires_grad, name
    assert optimizer.param_groups[0]["params"][0] is next(policy.parameters())


def test_setup_run_loads_the_checkpoint_and_freezes_an_equal_reference():
    """Fixed twin only: in the buggy twin the reference is the live policy (B16)."""
    module = grpo_fixed
    task = module.AdditionTask()
    policy, ref, tok, optimizer, g = module.setup_run(task, module.make_config(dropout=0.1), seed=0)
    saved = TinyLM.from_pretrained(task.checkpoint)
    assert policy.config.dropout == 0.1 and tok.alphabet == task.alphabet
    for (name, p), (_, r), (_, s) in zip(policy.named_parameters(), ref.named_parameters(), saved.named_parameters(),
                                         strict=True):
        assert torch.equal(p, s) and torch.equal(r, s), name
        assert p.requires_grad and not r.requires_grad, name
        assert p.data_ptr() != r.data_ptr(), "the reference must be a copy, not the policy itself"
    assert not ref.training
    assert optimizer.param_groups[0]["params"][0] is next(policy.parameters())


class FreshAdditionTask(grpo_fixed.AdditionTask):
    checkpoint = None


@TWINS
def test_a_task_without_checkpoint_trains_a_fresh_seeded_tinylm(module):
    cfg = module.make_config(prompts_per_batch=2, group_size=2)
    policy, ref, _, _, _ = module.setup_run(FreshAdditionTask(), cfg, seed=0)
    again, _, _, _, _ = module.setup_run(FreshAdditionTask(), cfg, seed=0)
    other, _, _, _, _ = module.setup_run(FreshAdditionTask(), cfg, seed=1)
    saved = TinyLM.from_pretrained(grpo_fixed.AdditionTask.checkpoint)
    first = lambda m: next(m.parameters())  # noqa: E731
    assert torch.equal(first(policy), first(again)) and not torch.equal(first(policy), first(other))
    assert not torch.equal(first(policy), first(saved)), "checkpoint None must not load the SFT model"
    assert isinstance(policy, TinyLM) and policy.config == TinyLMConfig(len(grpo_fixed.AdditionTask.alphabet) + 3)
    history = module.train(FreshAdditionTask(), seed=0, steps=2, prompts_per_batch=2, group_size=2)
    assert len(history) == 2 and all(0 <= s["reward"] <= 1 for s in history)
