"""workbook/nb04_stabilisers.py, the machinery of notebook 04: the batched surrogate curves equal the 1-token probe
point
by point, the noisy task records what it did to the rewards, instrumented runs are cached and really use
the advantage function they are given, and the exact-KL and gradient probes measure what they claim."""

from __future__ import annotations

import math

import pytest
import torch

import grpo_buggy
import grpo_fixed
from workbook import nb04_stabilisers
from workbook.widgets import choice

SHORT = dict(steps=2, prompts_per_batch=2)
GRID = [0.25 + 0.025 * i for i in range(111)]


def surrogate_curves(loss_fn, ratios, adv, clip):
    """J(rho) and dJ/dlog pi over the grid for one advantage: one row of surrogate_grid. -> (list, list)"""
    J, dJ = nb04_stabilisers.surrogate_grid(loss_fn, ratios, [adv], clip)
    return J[0].tolist(), dJ[0].tolist()


@pytest.mark.parametrize("twin", [grpo_fixed, grpo_buggy], ids=["fixed", "buggy"])
@pytest.mark.parametrize("adv, clip", [(1.5, 0.2), (-1.5, 0.2), (0.25, 0.5), (-3.0, 0.05)])
def test_batched_curves_equal_the_one_token_probe(twin, adv, clip):
    J, dJ = surrogate_curves(twin.grpo_loss, GRID, adv, clip)
    probe = [nb04_stabilisers.surrogate_and_grad(twin.grpo_loss, r, adv, clip) for r in GRID]
    assert J == pytest.approx([p[0] for p in probe], abs=1e-12)
    assert dJ == pytest.approx([p[1] for p in probe], abs=1e-12)
    assert [g == 0.0 for g in dJ] == [p[1] == 0.0 for p in probe]  # exact zeros stay exact zeros


@pytest.mark.parametrize("twin", [grpo_fixed, grpo_buggy], ids=["fixed", "buggy"])
def test_grid_rows_are_the_single_advantage_curves(twin):
    advs = [0.25, -0.5, 1.5, -3.0]
    J, dJ = nb04_stabilisers.surrogate_grid(twin.grpo_loss, GRID, advs, 0.3)
    assert J.shape == dJ.shape == (len(advs), len(GRID))
    for k, adv in enumerate(advs):
        one_J, one_dJ = surrogate_curves(twin.grpo_loss, GRID, adv, 0.3)
        assert J[k].tolist() == pytest.approx(one_J, abs=1e-12) and dJ[k].tolist() == pytest.approx(one_dJ, abs=1e-12)
        assert [g == 0.0 for g in dJ[k].tolist()] == [g == 0.0 for g in one_dJ]


def test_zero_intervals_of_the_fixed_and_the_buggy_surrogate():
    _, fixed_pos = surrogate_curves(grpo_fixed.grpo_loss, GRID, 1.5, 0.2)
    _, buggy_neg = surrogate_curves(grpo_buggy.grpo_loss, GRID, -1.5, 0.2)
    first, last = nb04_stabilisers.zero_grad_interval(GRID, fixed_pos)
    assert 1.2 < first <= 1.225 and last == GRID[-1]
    assert nb04_stabilisers.zero_grad_interval(GRID, buggy_neg) is None  # B4 never clips A < 0


def test_exact_kl_and_chi2_on_a_small_vocabulary():
    p, q = torch.tensor([0.5, 0.5]).log(), torch.tensor([0.25, 0.75]).log()
    assert nb04_stabilisers.kl_exact(p, q) == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    assert nb04_stabilisers.kl_exact(p, p) == 0
    assert nb04_stabilisers.chi2(p, q) == pytest.approx(0.25 / 0.25 + 0.25 / 0.75 - 1)


def test_pathwise_k3_gradient_is_the_reverse_kl_gradient():
    ref = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    g = nb04_stabilisers.pathwise_kl_grads(torch.tensor([0.1, 0.2, 0.3, 0.4]).log(), ref)
    assert torch.allclose(g["E[grad k3]"], g["grad KL(ref||pi)"], atol=1e-6)
    assert torch.allclose(g["E[grad k2]"], g["grad KL(pi||ref)"], atol=1e-6)
    assert g["E[grad k1]"].abs().max() < 1e-6
    assert (g["grad KL(pi||ref)"] - g["grad KL(ref||pi)"]).norm() > 0.1  # far apart: the two differ


def test_pathwise_reversed_k3_gradient_is_half_the_chi2_gradient():
    """B8's estimator as a loss: its expected gradient is (1/2) grad chi^2(pi || ref), which points toward
    the reference like grad KL(pi || ref) (positive inner product) but is not it."""
    ref = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    g = nb04_stabilisers.pathwise_kl_grads(torch.tensor([0.1, 0.2, 0.3, 0.4]).log(), ref)
    assert torch.allclose(g["E[grad k3 reversed]"], g["grad chi2(pi||ref) / 2"], atol=1e-6)
    assert torch.dot(g["E[grad k3 reversed]"], g["grad KL(pi||ref)"]) > 0
    assert (g["E[grad k3 reversed]"] - g["grad KL(pi||ref)"]).norm() > 0.1
    flat = nb04_stabilisers.pathwise_kl_grads(ref, ref)  # at pi = ref every pull vanishes
    assert flat["E[grad k3 reversed]"].abs().max() < 1e-6


def test_noisy_task_scales_glitches_and_records():
    task = grpo_fixed.AdditionTask()
    prompts = ["3+4=", "12+30="] * 200
    completions = ["7", "41"] * 200  # the first right, the second wrong
    clean = task.reward(prompts, completions)  # (400,)
    assert clean.tolist()[:2] == [1.0, 0.0]
    noisy = nb04_stabilisers.NoisyAdditionTask(scale=3.0, glitch_prob=0.1, glitch_size=1000.0, seed=0)
    rewards = noisy.reward(prompts, completions)
    glitched = rewards > 500
    assert noisy.glitches == [int(glitched.sum())] and 10 < noisy.glitches[0] < 80
    assert torch.allclose(rewards[~glitched], 3.0 * clean[~glitched])
    assert noisy.clean == [pytest.approx(clean.mean().item())]
    plain = nb04_stabilisers.NoisyAdditionTask()
    assert torch.equal(plain.reward(prompts, completions), clean) and plain.glitches == [0]


def test_k3_from_ratio():
    assert nb04_stabilisers.k3_from_ratio(torch.ones(5)) == 0
    assert nb04_stabilisers.k3_from_ratio(torch.tensor([2.0])) == pytest.approx(0.5 - 1 + math.log(2))
    assert nb04_stabilisers.k3_from_ratio(torch.tensor([])) == 0.0


def test_instrumented_run_records_every_iteration_and_is_cached():
    run = nb04_stabilisers.instrumented_run(seed=3, **SHORT)
    cfg = grpo_fixed.make_config(**SHORT)
    assert nb04_stabilisers.instrumented_run(seed=3, **SHORT) is run
    assert len(run["history"]) == len(run["inner"]) == len(run["exact_kl"]) == len(run["clean_reward"]) == 2
    assert len(run["glitches"]) == 2 and set(run["glitches"]) == {0}
    assert all(len(it) == cfg.inner_epochs * cfg.minibatches for it in run["inner"])
    assert run["inner"][0][0]["kl_old"] == 0.0  # pi is pi_old at the first inner step
    assert all(kl > 0 for kl in run["exact_kl"])  # the policy moved away from the reference (the SFT model)
    assert len(nb04_stabilisers.step_norms(run)) == 2 * cfg.inner_epochs * cfg.minibatches
    assert run["history"][0]["reward"] == pytest.approx(run["clean_reward"][0])  # scale 1, no glitch
    assert len(run["max_weight"]) == 2 and run["max_weight"][0] == 1.0  # iteration 0: the policy is the reference
    ref = grpo_fixed.setup_run(grpo_fixed.AdditionTask(), cfg, 3)[1]  # the SFT checkpoint, frozen
    assert all(torch.equal(p, q) for p, q in zip(run["ref_policy"].parameters(), ref.parameters(), strict=True))
    assert not any(p.requires_grad for p in run["ref_policy"].parameters())
    moved = [not torch.equal(p, q) for p, q in zip(run["policy"].parameters(), ref.parameters(), strict=True)]
    assert any(moved)  # the policy kept is the trained one, not the reference


def test_instrumented_run_uses_the_advantage_function_it_is_given():
    def no_signal(rewards, eps=1e-8):
        return torch.zeros(len(rewards), dtype=torch.float64)

    run = nb04_stabilisers.instrumented_run(advantage_fn=no_signal, seed=3, **SHORT)
    assert run is not nb04_stabilisers.instrumented_run(seed=3, **SHORT)
    assert run["exact_kl"] == [0.0, 0.0]  # A = 0 and k3's gradient is 0 at pi = pi_ref: nothing moves


def test_instrumented_run_with_bugs_and_glitches():
    run = nb04_stabilisers.instrumented_run("B11", glitch_prob=0.5, glitch_size=10.0, seed=3, **SHORT)
    assert all(n > 0 for n in run["glitches"])
    fast = nb04_stabilisers.instrumented_run("B11", glitch_prob=0.5, glitch_size=10.0, seed=3, exact_kl=False, **SHORT)
    assert fast is not run and all(math.isnan(k) for k in fast["exact_kl"])  # skipped, and nothing else changes
    assert [s["reward"] for s in fast["history"]] == [s["reward"] for s in run["history"]]
    assert run["history"][0]["reward"] > 1  # the glitch reaches the trainer's rewards


def test_exact_token_kl_is_zero_against_itself():
    cfg = grpo_fixed.make_config(**SHORT)
    task = grpo_fixed.AdditionTask()
    policy, ref_policy, tokenizer, _, generator = grpo_fixed.setup_run(task, cfg, 0)
    batch, _ = grpo_fixed.rollout(policy, ref_policy, tokenizer, task, cfg, generator)
    assert nb04_stabilisers.exact_token_kl(grpo_fixed, policy, ref_policy, batch, cfg.temperature) == 0
    emb = next(policy.parameters())  # the token embeddings
    with torch.no_grad():  # a random perturbation: a constant shift of every entry would cancel in the LayerNorms
        emb.add_(0.5 * torch.randn(emb.shape, generator=torch.Generator().manual_seed(0)))
    assert nb04_stabilisers.exact_token_kl(grpo_fixed, policy, ref_policy, batch, cfg.temperature) > 1e-3


def test_pg_grad_norm_follows_the_reward_scale_only_without_the_std():
    def centred(rewards, eps=1e-8):
        r = torch.as_tensor(rewards, dtype=torch.float64)
        return r - r.mean()

    raw = [nb04_stabilisers.pg_grad_norm(centred, s, prompts_per_batch=2) for s in (1.0, 10.0)]
    normalised = [nb04_stabilisers.pg_grad_norm(grpo_fixed.group_advantage, s, prompts_per_batch=2)
                  for s in (1.0, 10.0)]
    assert raw[1] == pytest.approx(10 * raw[0], rel=1e-4) and raw[0] > 0
    assert normalised[1] == pytest.approx(normalised[0], rel=1e-4)


def test_quantile():
    values = list(range(101))
    assert nb04_stabilisers.quantile(values, 0.5) == 50 and nb04_stabilisers.quantile(values, 0.99) == 99
    assert nb04_stabilisers.quantile(values, 1) == 100


def test_choice_fires_on_release_only():
    w = choice(["a", "b"], "b", "pick")
    assert w.value == "b" and w.options == ("a", "b") and not w.continuous_update and w.description == "pick"
