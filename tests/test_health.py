"""The fixed twin's early-warning system (follow-up 3 of SPEC.md): preflight probes and per-iteration
health checks stay quiet on grpo_fixed and name the bug on grpo_buggy and on every single-bug hybrid."""

from __future__ import annotations

import logging
import math

import pytest

import grpo_buggy
import grpo_fixed
from workbook import catalog

# Which preflight probe names each bug that a tiny-input probe can see; the others (B3, B6, B9, B10)
# only show up in a rollout, so the per-iteration checks must name them.
PREFLIGHT = {
    "B1": "sampling frequencies match softmax(logits)",
    "B2": "constant reward group gives finite advantages",
    "B4": "loss gradient at ratio 1 is -A/n",
    "B5": "all-masked loss is finite",
    "B7": "token log-probs finite for large logits",
    "B8": "KL estimator is unbiased for KL(pi || ref)",
    "B11": "gradients clipped to max_grad_norm",
}
IN_TRAINING = {
    "B3": "ratio moves after updates",
    "B6": "training log-probs match the sampler",
    "B9": "advantages centred per group",
    "B10": "training log-probs match the sampler",
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
    assert sorted(grpo_fixed.preflight(grpo_buggy, seed=seed)) == sorted(PREFLIGHT.values())


@pytest.mark.parametrize("bug_id", catalog.BUG_IDS)
def test_preflight_on_each_hybrid_names_only_its_bug(bug_id):
    expected = [PREFLIGHT[bug_id]] if bug_id in PREFLIGHT else []
    assert grpo_fixed.preflight(catalog.hybrid(bug_id)) == expected


@pytest.mark.parametrize("bug_id", sorted(IN_TRAINING))
def test_health_checks_name_the_rollout_bugs(bug_id):
    """Two iterations of the default batch (B = 16 prompts, G = 8) on the hybrid are enough."""
    history = catalog.hybrid(bug_id).train(seed=0, steps=2)
    failed = {name for s in history for name in s["health"]}
    assert IN_TRAINING[bug_id] in failed, f"{bug_id}: health checks said {failed}"


def test_strict_mode_raises_on_the_first_failure():
    with pytest.raises(AssertionError, match="training log-probs match the sampler"):
        catalog.hybrid("B10").train(seed=0, steps=2, strict=True)
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
