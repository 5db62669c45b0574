"""The fixed twin's early-warning system (follow-up 3 of SPEC.md): preflight probes and per-iteration
health checks stay quiet on grpo_fixed and name the bug on grpo_buggy and on every single-bug hybrid."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import torch

import grpo_buggy
import grpo_fixed
from tinylm import CharTokenizer
from workbook import catalog

# Which preflight probes name each bug that a tiny-input probe can see; the per-iteration checks must name the bugs
# that only show up in a rollout (B3, B9) and those that show up there too (B6, B10, B12-B17).
PREFLIGHT = {
    "B1": ["sampling frequencies match softmax(logits)"],
    "B2": ["constant reward group gives finite advantages"],
    "B4": ["loss gradient at ratio 1 is -A/n"],
    "B5": ["all-masked loss is finite"],
    "B6": ["sampler and trainer log-probs agree on an unpadded row"],
    "B7": ["token log-probs finite for large logits"],
    "B8": ["KL estimator is unbiased for KL(pi || ref)"],
    "B10": ["sampler and trainer log-probs agree on an unpadded row"],
    "B11": ["gradients clipped to max_grad_norm"],
    "B12": ["sampler and trainer log-probs agree on a left-padded row"],
    "B13": ["sampler and trainer log-probs agree on a left-padded row"],
    "B14": ["completion mask covers the first EOS and nothing after it"],
    "B15": ["prompts repeated group by group"],
    "B16": ["reference is a frozen copy of the starting policy"],
    "B17": ["reward text stops at the first EOS"],
}
IN_TRAINING = {
    "B3": "ratio moves after updates",
    "B6": "training log-probs match the sampler",
    "B9": "advantages centred per group",
    "B10": "training log-probs match the sampler",
    "B12": "training log-probs match the sampler",
    "B13": "training log-probs match the sampler",
    "B14": "masks end at the first EOS",
    "B15": "each group holds one prompt",
    "B16": "reference frozen, not the live policy",
    "B17": "reward text stops at EOS",
}


@pytest.fixture(autouse=True)
def quiet_hybrids():
    logger = logging.getLogger("grpo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def test_catalog_split_covers_every_bug():
    assert sorted({*PREFLIGHT, *IN_TRAINING}) == sorted(catalog.BUG_IDS)


@pytest.mark.parametrize("seed", range(10))
def test_preflight_quiet_on_fixed_and_names_every_probe_on_buggy(seed):
    """No false alarms (the probes are statistical: seeds matter) and no misses."""
    assert grpo_fixed.preflight(seed=seed) == []
    assert grpo_fixed.preflight(grpo_fixed, seed=seed) == []
    every = {p for probes in PREFLIGHT.values() for p in probes}
    # the buggy twin's unpadded row already disagrees (B6, B10), so the padded-row probe is not reached
    expected = every - {"sampler and trainer log-probs agree on a left-padded row"}
    assert sorted(grpo_fixed.preflight(grpo_buggy, seed=seed)) == sorted(expected)


@pytest.mark.parametrize("bug_id", catalog.BUG_IDS)
def test_preflight_on_each_hybrid_names_only_its_bug(bug_id):
    expected = PREFLIGHT.get(bug_id, [])
    assert grpo_fixed.preflight(catalog.hybrid(bug_id)) == expected


@pytest.mark.parametrize("bug_id", sorted(IN_TRAINING))
def test_health_checks_name_the_rollout_bugs(bug_id):
    """Two iterations of the default batch (B = 16 prompts, G = 8) on the hybrid are enough."""
    history = catalog.hybrid(bug_id).train(seed=0, steps=2)
    failed = {name for s in history for name in s["health"]}
    assert IN_TRAINING[bug_id] in failed, f"{bug_id}: health checks said {failed}"


def test_strict_mode_raises_on_the_first_failure():
    with pytest.raises(AssertionError, match="advantages centred per group"):
        catalog.hybrid("B9").train(seed=0, steps=2, strict=True)
    with pytest.raises(AssertionError, match="preflight"):
        catalog.hybrid("B1").train(seed=0, steps=1, strict=True)
    assert len(grpo_fixed.train(seed=0, steps=2, prompts_per_batch=4, strict=True)) == 2


@pytest.fixture(scope="module")
def healthy_stats():
    (stats,) = grpo_fixed.train(seed=0, steps=1)
    assert stats["health"] == []
    return stats


@pytest.mark.parametrize("stat, value, check", [
    ("adv_nonfinite", 3, "advantages finite"),
    ("adv_group_mean", 0.5, "advantages centred per group"),
    ("logprob_gap", 0.2, "training log-probs match the sampler"),
    ("mixed_groups", 0.5, "each group holds one prompt"),
    ("mask_eos_mismatch", 1, "masks end at the first EOS"),
    ("text_mismatch", 2, "reward text stops at EOS"),
    ("ratio_first_maxdev", 0.05, "ratio == 1 at the first inner step"),
    ("ratio_last_maxdev", 0.0, "ratio moves after updates"),
    ("kl", -0.1, "KL finite and >= 0"),
    ("kl", math.nan, "KL finite and >= 0"),
    ("loss", math.nan, "loss finite"),
    ("nonfinite_steps", 1, "loss finite"),
    ("grad_norm", math.inf, "grad norm finite"),
])
def test_each_check_fires_on_its_statistic(healthy_stats, stat, value, check):
    cfg = grpo_fixed.Config()
    assert grpo_fixed.check_health(healthy_stats, cfg) == []
    assert grpo_fixed.check_health({**healthy_stats, stat: value}, cfg) == [check]


def test_a_reference_equal_to_the_policy_fails_only_after_the_first_update(healthy_stats):
    cfg = grpo_fixed.Config()
    assert healthy_stats["iteration"] == 0 and healthy_stats["ref_gap"] == 0  # nothing has moved yet
    later = {**healthy_stats, "iteration": 1}
    assert grpo_fixed.check_health(later, cfg) == ["reference frozen, not the live policy"]
    assert grpo_fixed.check_health({**later, "ref_gap": 0.01}, cfg) == []
    assert grpo_fixed.check_health(later, grpo_fixed.make_config(lr=0.0)) == []
    assert grpo_fixed.check_health({**later, "zero_var_groups": 1.0}, cfg) == []  # no signal, no move


def test_entropy_collapse_only_matters_before_the_task_is_solved(healthy_stats):
    cfg = grpo_fixed.Config()
    collapsed = {**healthy_stats, "entropy": 0.001}
    assert grpo_fixed.check_health({**collapsed, "reward": 0.3}, cfg) == ["entropy not collapsed"]
    assert grpo_fixed.check_health({**collapsed, "reward": 0.99}, cfg) == []


def test_frozen_ratio_is_fine_when_nothing_can_move_it(healthy_stats):
    frozen = {**healthy_stats, "ratio_last_maxdev": 0.0}
    for cfg in (grpo_fixed.make_config(inner_epochs=1, minibatches=1), grpo_fixed.make_config(lr=0.0)):
        assert grpo_fixed.check_health(frozen, cfg) == []
    assert grpo_fixed.check_health({**frozen, "zero_var_groups": 1.0}, grpo_fixed.Config()) == []


def test_probe_tolerances_are_what_their_docstrings_say():
    """SAMPLING_TOL's and KL_TOL's docstrings: the noise scale each tolerance is measured in, and how far the bug
    each probe targets lands (the buggy twin's sampler on the preflight's draws; the reversed k3 exactly)."""
    source = Path(grpo_fixed.__file__).read_text()
    n = grpo_fixed.PROBE_DRAWS
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0])  # the sampling probe's logits
    draws = grpo_buggy.sample_from_logits(logits, n, generator=torch.Generator().manual_seed(0))
    off = (torch.bincount(draws, minlength=5) / n - torch.softmax(logits, -1)).abs().max().item()
    freq_std = math.sqrt(0.25 / n)  # the largest std of a frequency (p = 1/2)
    assert f"about {round(grpo_fixed.SAMPLING_TOL / freq_std)} std" in source and f"= {freq_std:.4f})" in source
    assert f"raw logits (B1) are off by about {off:.2f}" in source
    pi = torch.full((3,), -math.log(3.0), dtype=torch.float64)  # the KL probe: pi uniform, pi_ref = softmax(2, 0, -2)
    ref = torch.log_softmax(torch.tensor([2.0, 0.0, -2.0], dtype=torch.float64), -1)
    x = ref - pi
    k3 = x.exp() - x - 1  # (3,): one term per token, each with probability 1/3
    term_std = (k3 - k3.mean()).pow(2).mean().sqrt().item()
    in_std = grpo_fixed.KL_TOL / (term_std / math.sqrt(n))
    reversed_off = ((-x).exp() + x - 1).mean().item() - k3.mean().item()
    assert f"about {in_std:.1f} std" in source and f"std of one k3 term\nis {term_std:.2f} here" in source
    assert f"= {in_std:.1f}); the reversed estimator (B8) is off by {round(reversed_off)}" in source


def test_padding_probe_tolerance_is_what_its_docstring_says():
    """GAP_TOL's docstring: the fixed twin's rounding and the smallest gap each padding-sensitive bug leaves, on the
    probes' rows (B6 and B10 on the unpadded rows, B12 and B13 on the left-padded ones), seeds 0-19."""
    tokenizer = CharTokenizer("0123456789")
    fixed = max(max(grpo_fixed.padding_gaps(grpo_fixed, tokenizer, s)) for s in range(20))
    smallest = min(grpo_fixed.padding_gaps(catalog.hybrid(b), tokenizer, s)[row]
                   for b, row in (("B6", 1), ("B10", 1), ("B12", 0), ("B13", 0)) for s in range(20))
    assert fixed < 1e-6 < grpo_fixed.GAP_TOL < 0.07 <= smallest
    doc = Path(grpo_fixed.__file__).read_text()
    assert "below 1e-6 on\nseeds 0-19, against at least 0.07" in doc


def test_the_reference_probe_leaves_the_global_rng_as_it_was():
    """setup_run seeds torch's global RNG; the probe must not change what training draws after preflight (dropout)."""
    torch.manual_seed(123)
    state = torch.get_rng_state()
    assert grpo_fixed.reference_is_a_frozen_copy(grpo_fixed, seed=0)
    assert torch.equal(state, torch.get_rng_state())
    assert not grpo_fixed.reference_is_a_frozen_copy(catalog.hybrid("B16"), seed=0)
