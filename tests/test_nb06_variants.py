"""workbook/nb06_variants.py, the machinery of notebook 06: variants are built on fresh grpo_fixed copies
(the twin itself is never touched), train() in the copy calls the replacement or the wrapper, runs are
recorded per iteration and cached by everything they depend on, and the small helpers do what their
docstrings say."""

from __future__ import annotations

import logging
import math

import pytest
import torch

import grpo_fixed
from tinylm import CharTokenizer
from workbook import nb06_variants
from workbook.swap import fixed_with
from workbook.tasks import EchoTask, RambleTask
from workbook.widgets import choice

TINY = dict(steps=2, prompts_per_batch=2, group_size=2, minibatches=1, inner_epochs=1)


@pytest.fixture(autouse=True)
def quiet_and_fresh_cache(monkeypatch):
    """Each test starts with an empty run cache; health-check warnings of odd variants are not the point."""
    monkeypatch.setattr(nb06_variants, "_RUNS", {})
    logging.getLogger("grpo").setLevel(logging.ERROR)


def counting_loss(counter):
    """A grpo_loss that counts its calls and otherwise behaves like the twin's (closure over the counter)."""
    def grpo_loss(logprobs, old_logprobs, advantages, mask, clip=0.2):
        counter.append(1)
        mask = mask.bool()
        ratio = torch.exp(torch.where(mask, logprobs - old_logprobs.detach(), 0.0))
        adv = advantages.detach()[:, None]
        J = torch.where(mask, torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv), 0.0)
        return -J.sum() / mask.sum().clamp(min=1)
    return grpo_loss


# ---- a variant is swap.fixed_with, with wrap= ----------------------------------------------------------


def test_a_variant_replaces_a_function_in_a_fresh_copy_and_train_calls_it():
    calls = []
    module = fixed_with("test_counting", grpo_loss=counting_loss(calls))
    assert module is not grpo_fixed and module.__name__ == "grpo_fixed_test_counting"
    assert grpo_fixed.grpo_loss.__code__ is not module.grpo_loss.__code__  # the twin keeps its own
    module.train(**TINY)
    assert len(calls) >= TINY["steps"]  # preflight probes it too; every inner step calls it


def test_a_variant_wraps_the_copys_own_function():
    seen = []

    def factory(module):
        base = module.batch_advantages  # the copy's own function, which the wrapper calls
        def batch_advantages(rewards, group_size, eps=1e-8):
            seen.append(rewards.shape[0])
            return base(rewards, group_size, eps)
        return batch_advantages

    module = fixed_with("test_wrap", wrap={"batch_advantages": factory})
    history = module.train(**TINY)
    assert seen == [TINY["prompts_per_batch"] * TINY["group_size"]] * TINY["steps"]
    assert len(history) == TINY["steps"]
    assert grpo_fixed.batch_advantages is not module.batch_advantages


def test_a_variant_rejects_unknown_sites():
    with pytest.raises(ValueError, match="no function"):
        fixed_with("test_bad", wrap={"no_such_function": lambda m: None})
    with pytest.raises(ValueError, match="no function"):
        fixed_with("test_bad2", no_such_function=lambda: None)


# ---- lengths and truncation -------------------------------------------------------------------------


def test_completion_lengths_and_truncation():
    tokenizer = CharTokenizer(RambleTask.alphabet)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    assert (eos, pad) == (2, 0)  # the ids the rows below are written with
    # generate() leaves what it sampled after the first EOS in place (here a digit, and a second EOS)
    completions = torch.tensor([[3, 4, eos, 9], [eos, 8, eos, 4], [5, 5, 5, eos], [6, 6, 6, 6], [7, pad, 7, 7]])
    assert nb06_variants.completion_lengths(completions, eos).tolist() == [3, 1, 4, 4, 4]
    # a PAD sampled mid-completion (a fresh TinyLM does) is not an EOS: the last row ran to the limit
    assert nb06_variants.truncated(completions, eos).tolist() == [False, False, False, True, True]


def test_lengths_agree_with_the_generator_mask():
    """completion_lengths from the tokens alone equals the mask length generate() returns, on a fresh TinyLM
    (RambleTask: some completions stop, some run to the limit, some hold a PAD or BOS)."""
    task = RambleTask()
    policy, _, tokenizer, _, g = grpo_fixed.setup_run(task, grpo_fixed.make_config(), seed=0)
    encoded = tokenizer(task.prompts(64, g), padding_side="left")
    completions, mask, _, _ = grpo_fixed.generate(policy, tokenizer, encoded["input_ids"], encoded["attention_mask"],
                                                  task.max_completion_length, 1.0, g)
    lengths = nb06_variants.completion_lengths(completions, tokenizer.eos_token_id)
    cut = nb06_variants.truncated(completions, tokenizer.eos_token_id)
    assert torch.equal(lengths, mask.sum(dim=1))
    assert cut.any() and not cut.all() and torch.equal(cut, lengths.eq(task.max_completion_length) & ~(
        completions[:, -1] == tokenizer.eos_token_id))


# ---- train_variant: recording and caching -------------------------------------------------------------


def test_run_records_one_sample_set_and_one_probe_per_iteration():
    probed = []

    def probe(module, policy, batch, cfg):
        probed.append(module.__name__)
        return {"n": batch["rewards"].shape[0]}

    run = nb06_variants.train_variant("test_record", RambleTask(), probe=probe, **TINY)
    n = TINY["prompts_per_batch"] * TINY["group_size"]
    assert len(run.history) == len(run.samples) == len(run.probes) == TINY["steps"]
    assert run.probe("n") == [n] * TINY["steps"] and set(probed) == {"grpo_fixed_test_record"}
    for stats, sample in zip(run.history, run.samples, strict=True):
        assert sample["reward"].shape == sample["length"].shape == sample["truncated"].shape == (n,)
        assert math.isclose(sample["reward"].mean().item(), stats["reward"], rel_tol=1e-6)
        assert math.isclose(sample["length"].float().mean().item(), stats["completion_length"], rel_tol=1e-6)


def test_sample_mean_filters_and_gives_nan_when_nothing_is_selected():
    run = nb06_variants.Run(history=[],
                            samples=[dict(reward=torch.tensor([0.0, 1.0, 0.0]), length=torch.tensor([5, 2, 7])),
                                     dict(reward=torch.tensor([1.0, 1.0]), length=torch.tensor([3, 4]))])
    assert run.sample_mean("length") == pytest.approx([14 / 3, 3.5])
    wrong = run.sample_mean("length", lambda s: s["reward"] == 0)
    assert wrong[0] == 6.0 and math.isnan(wrong[1])


def test_same_inputs_return_the_cached_run_without_training(monkeypatch):
    first = nb06_variants.train_variant("test_cache", **TINY)
    assert first.samples[0]["length"].max() <= EchoTask.max_completion_length  # the default task: EchoTask
    monkeypatch.setattr(nb06_variants, "fixed_with", lambda *a, **k: pytest.fail("a cached run was rebuilt"))
    assert nb06_variants.train_variant("test_cache", **TINY) is first
    assert nb06_variants.cached_runs() == 1


@pytest.mark.parametrize("change", [dict(seed=1), dict(label="test_cache_other"), dict(lr=1e-3),
                                    dict(task=RambleTask()), dict(task=grpo_fixed.AdditionTask())])
def test_any_input_change_is_a_different_run(change):
    base = dict(label="test_cache", task=None, seed=0) | TINY
    first = nb06_variants.train_variant(**base)
    second = nb06_variants.train_variant(**(base | change))
    assert second is not first and nb06_variants.cached_runs() == 2


def test_edited_function_under_the_same_label_is_not_served_from_cache():
    """Re-running an edited notebook cell makes a new code object: the cache must not return the old run."""
    a = nb06_variants.train_variant("test_edit", functions={"grpo_loss": counting_loss([])}, **TINY)
    b = nb06_variants.train_variant("test_edit", functions={"grpo_loss": counting_loss([])}, **TINY)
    assert b is a  # same code (a factory's inner function), same label: the same variant

    def grpo_loss(logprobs, old_logprobs, advantages, mask, clip=0.2):  # different code, same label
        return grpo_fixed.grpo_loss(logprobs, old_logprobs, advantages, mask, clip)

    c = nb06_variants.train_variant("test_edit", functions={"grpo_loss": grpo_loss}, **TINY)
    assert c is not a and nb06_variants.cached_runs() == 2


def test_replaced_twin_function_gives_the_twins_run():
    """A replacement that computes the same thing reproduces the twin's training run exactly."""
    twin = nb06_variants.train_variant("test_twin", **TINY)

    twin_loss = grpo_fixed.grpo_loss

    def grpo_loss(logprobs, old_logprobs, advantages, mask, clip=0.2):
        return twin_loss(logprobs, old_logprobs, advantages, mask, clip)

    same = nb06_variants.train_variant("test_same", functions={"grpo_loss": grpo_loss}, **TINY)
    assert [s["loss"] for s in same.history] == [s["loss"] for s in twin.history]


def test_log_ratio_spread_is_zero_without_an_update_and_positive_with_one():
    still = nb06_variants.train_variant("test_spread", RambleTask(), probe=nb06_variants.log_ratio_spread, lr=0.0,
                                        **TINY)
    assert all(p["token_std"] == 0 and p["seq_std"] == 0 and p["token_out"] == 0 for p in still.probes)
    moving = nb06_variants.train_variant("test_spread", RambleTask(), probe=nb06_variants.log_ratio_spread,
                                    **(TINY | dict(prompts_per_batch=4, group_size=4, lr=0.05)))
    assert any(p["token_std"] > 0 and p["seq_std"] > 0 for p in moving.probes)


# ---- small helpers --------------------------------------------------------------------------------------


def test_choice_is_a_release_only_selection_slider():
    w = choice([0.2, 0.28, 0.4], 0.28, "eps_high")
    assert list(w.options) == [0.2, 0.28, 0.4] and w.value == 0.28 and w.continuous_update is False
    assert w.description == "eps_high"


def test_upper_clip_record_counts_past_the_variants_own_cap_and_changes_nothing_else():
    record = grpo_fixed.inner_step_record
    logp = torch.log(torch.tensor([[1.25, 1.35, 0.70, 1.10]]))  # ratios against old log-probs of 0
    old, mask = torch.zeros(1, 4), torch.ones(1, 4, dtype=torch.bool)
    args = (torch.tensor([1.0]), mask, 0.2, torch.tensor(0.0), torch.tensor(0.0), 0.0)
    twin = record(logp, old, *args)
    module = fixed_with("test_upper_record")
    wrapped = nb06_variants.upper_clip_record(0.3)(module)(logp, old, *args)
    assert twin["clipped_pos"] == 2 and wrapped["clipped_pos"] == 1  # 1.25 is past 1.2 but inside 1.3
    assert {k: v for k, v in wrapped.items() if k not in ("clipped_pos", "ratio")} == \
        {k: v for k, v in twin.items() if k not in ("clipped_pos", "ratio")}
    assert torch.equal(wrapped["ratio"], twin["ratio"])


def test_upper_clip_record_leaves_the_run_unchanged():
    plain = nb06_variants.train_variant("test_upper_run", **TINY)
    same_cap = {"inner_step_record": nb06_variants.upper_clip_record(0.2)}
    recorded = nb06_variants.train_variant("test_upper_run", wrap=same_cap, **TINY)
    timeless = lambda run: [{k: v for k, v in s.items() if k != "seconds"} for s in run.history]  # noqa: E731
    assert recorded is not plain and timeless(recorded) == timeless(plain)  # cap = cfg.clip: the very same stats
