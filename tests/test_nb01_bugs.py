"""workbook/nb01_bugs.py, the machinery of notebook 01: the tiny rollout is the twin's own set-up, the slider figures
show what their update returns (bars, crosses, markers), compute each slider position once, and redraw by
blitting after the first frame; the ablation helpers read the health checks right."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import ipywidgets as widgets  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import grpo_buggy  # noqa: E402
import grpo_fixed  # noqa: E402
import grpo_support  # noqa: E402
from workbook import nb01_bugs  # noqa: E402
from workbook.widgets import live_plot, set_value, slider  # noqa: E402


def test_tiny_rollout_is_setup_run_then_rollout():
    run = nb01_bugs.tiny_rollout(grpo_fixed, seed=3, prompts_per_batch=2, group_size=4)
    cfg = grpo_fixed.make_config(prompts_per_batch=2, group_size=4)
    task = grpo_fixed.AdditionTask()
    policy, ref_policy, tokenizer, optimizer, generator = grpo_fixed.setup_run(task, cfg, seed=3)
    batch, stats = grpo_fixed.rollout(policy, ref_policy, tokenizer, task, cfg, generator)
    assert run.cfg == cfg and run.stats == stats
    assert run.batch["prompts"] == batch["prompts"] and run.batch["texts"] == batch["texts"]
    assert all(torch.equal(run.batch[k], batch[k]) for k in batch if isinstance(batch[k], torch.Tensor))
    assert run.tokenizer.alphabet == task.alphabet
    assert isinstance(run.optimizer, torch.optim.Adam) and run.optimizer.param_groups[0]["lr"] == cfg.lr
    assert {id(p) for p in run.optimizer.param_groups[0]["params"]} == {id(p) for p in run.policy.parameters()}
    assert torch.equal(run.generator.get_state(), generator.get_state())  # the same draws were consumed


def counting(fn):
    """fn, and a list that records each call's arguments."""
    calls = []

    def wrapped(*args):
        calls.append(args)
        return fn(*args)

    return wrapped, calls


def test_sampling_figure_draws_the_frequencies_and_computes_each_temperature_once():
    known = torch.tensor([0.5, 0.2, 0.2, 0.1, 0.0], dtype=torch.float64)
    frequencies, calls = counting(lambda module, logits: known)
    fig, update = nb01_bugs.sampling_figure(frequencies)
    w = live_plot(fig, update, temperature=slider(1.0, 0.1, 3.0, 0.05, "temperature"))
    result = set_value(w, "temperature", 0.5)
    probs = torch.softmax(nb01_bugs.TOY_LOGITS.double() / 0.5, -1)
    assert result["grpo_fixed"] == pytest.approx(0.5 * (known - probs).abs().sum().item())
    for ax in fig.axes:
        assert [bar.get_height() for bar in ax.patches[:5]] == known.tolist()
    set_value(w, "temperature", 1.0)
    set_value(w, "temperature", 0.5)
    assert len(calls) == 2 * 2  # two temperatures x two twins, however often the slider moves


def test_spread_figure_crosses_mark_exactly_the_nans():
    fig, update = nb01_bugs.spread_figure(lambda s: [0.5 - s / 2, 0.5, 0.5, 0.5 + s / 2])
    result = update(0.0)
    crosses = {ax.get_title(): ax.lines[0].get_xdata() for ax in fig.axes}
    assert all(math.isnan(a) for a in result["grpo_buggy"]) and list(crosses["grpo_buggy"]) == [0, 1, 2, 3]
    assert result["grpo_fixed"] == [0.0] * 4 and len(crosses["grpo_fixed"]) == 0
    update(0.5)
    assert all(len(ax.lines[0].get_xdata()) == 0 for ax in fig.axes)


def estimates(fraction, padding):
    """A stand-in for the notebook's masked_estimates: buggy estimates non-finite past half, given padding."""
    bad = padding if fraction > 0.5 else 1.0
    return {"truth": 1.0 - fraction, "naive": bad, "B5": bad * 2, "fixed": 1.0 - fraction}


def test_masked_mean_figure_marks_non_finite_estimates_and_the_current_fraction():
    counted, calls = counting(estimates)
    fig, update = nb01_bugs.masked_mean_figure(counted, {"-inf": -math.inf, "0.0": 0.0}, width=4)
    result = update(0.75, "-inf")
    assert result == estimates(0.75, -math.inf)
    ax_buggy = fig.axes[0]
    crosses = [line for line in ax_buggy.lines if line.get_marker() == "x"]
    assert [list(c.get_xdata()) for c in crosses] == [[0.75, 1.0], [0.75, 1.0]]  # naive and B5: -inf past half
    marker = [line for line in ax_buggy.lines if list(line.get_xdata()) == [0.75, 0.75]]
    assert len(marker) == 1
    update(0.25, "0.0")
    assert all(len(c.get_xdata()) == 0 for c in crosses)
    n = len(calls)
    update(0.5, "-inf")
    update(1.0, "0.0")
    assert len(calls) == n + 2  # the tables of both paddings are cached: one call for each returned position


@pytest.mark.parametrize("build", ["sampling", "spread", "masked"])
def test_slider_figures_redraw_without_a_full_draw(build):
    """Every artist a move changes is animated up front and no legend or label changes, so moves are blitted."""
    if build == "sampling":
        fig, update = nb01_bugs.sampling_figure(lambda module, logits: torch.softmax(logits.double(), -1))
        w = live_plot(fig, update, temperature=slider(1.0, 0.1, 3.0, 0.05, "x"))
        values = [0.5, 2.0, 0.25]
    elif build == "spread":
        fig, update = nb01_bugs.spread_figure(lambda s: [0.5 - s / 2, 0.5, 0.5, 0.5 + s / 2])
        w = live_plot(fig, update, spread=slider(0.0, 0.0, 1.0, 0.05, "x"))
        values = [0.5, 0.0, 1.0]
    else:
        fig, update = nb01_bugs.masked_mean_figure(estimates, {"-inf": -math.inf, "0.0": 0.0}, width=4)
        w = live_plot(fig, update, masked_fraction=slider(0.5, 0.0, 1.0, 0.25, "x"),
                      padding=widgets.ToggleButtons(options=["-inf", "0.0"], value="-inf", description="padding"))
        values = [0.75, 0.0, 1.0]
    full = w.renderer.full_draws
    for value in values:
        set_value(w, "x", value)
    assert w.renderer.full_draws == full


def test_first_failures_gives_the_first_failing_iteration_of_each_check():
    cfg = grpo_fixed.make_config()
    healthy = {name: (row.lo if math.isfinite(row.lo) else 0.0) for name, row in grpo_support.STATS.items()}
    healthy.update(reward=0.5, ratio_last_maxdev=0.1, zero_var_groups=0.0, grad_norm=0.5)
    history = [dict(healthy, iteration=0), dict(healthy, iteration=1, adv_nonfinite=2),
               dict(healthy, iteration=2, adv_nonfinite=1, kl=math.nan)]
    assert grpo_fixed.check_health(history[0], cfg) == []
    assert nb01_bugs.first_failures(history, cfg) == {"advantages finite": 1, "KL finite and >= 0": 2}


def test_trainer_labels():
    assert nb01_bugs.trainer("fixed") is grpo_fixed and nb01_bugs.trainer("buggy") is grpo_buggy
    b9 = nb01_bugs.trainer("B9")
    assert b9.batch_advantages.__code__.co_code == grpo_buggy.batch_advantages.__code__.co_code
    assert nb01_bugs.ABLATION_RUNS == ["fixed", "buggy", *[f"B{i}" for i in range(1, 12)]]


def test_exact_kl_runs_are_the_plain_runs_plus_an_exact_kl():
    """trainer(label, exact_kl=True) runs the same trainer: every logged stat equal, plus exact_kl, which is 0 at
    iteration 0 (the policy is its reference) and the per-position sum over the vocabulary after that."""
    for label in ("fixed", "B8"):
        plain = nb01_bugs.trainer(label).train(seed=0, steps=3, prompts_per_batch=4)
        logged = nb01_bugs.trainer(label, exact_kl=True).train(seed=0, steps=3, prompts_per_batch=4)
        strip = lambda h: [{k: v for k, v in s.items() if k not in ("seconds", "exact_kl")} for s in h]  # noqa: E731
        assert strip(plain) == strip(logged), label
        assert logged[0]["exact_kl"] == 0.0 and all(s["exact_kl"] > 0 for s in logged[1:]), label
    with pytest.raises(ValueError):
        nb01_bugs.trainer("buggy", exact_kl=True)


def test_with_exact_kl_is_the_kl_of_the_tempered_distributions():
    """On one rollout of a perturbed policy: the mean over generated positions of sum_v p log(p / q), p and q the
    policy's and the reference's softmax(logits / T), computed here by hand from TinyLM's full forward."""
    cfg = grpo_fixed.make_config(prompts_per_batch=2, group_size=3, temperature=0.7)
    task = grpo_fixed.AdditionTask()
    policy, ref_policy, tokenizer, _, generator = grpo_fixed.setup_run(task, cfg, 0)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    module = nb01_bugs.trainer("fixed", exact_kl=True)
    batch, stats = module.rollout(policy, ref_policy, tokenizer, task, cfg, generator)
    ids = torch.cat([batch["prompt_ids"], batch["completions"]], 1)
    attention = torch.cat([batch["prompt_mask"].long(), batch["mask"].long()], 1)
    positions = grpo_fixed.position_ids(attention)
    T = batch["completions"].shape[1]
    kls = []
    for n in range(ids.shape[0]):
        for t in range(T):
            if batch["mask"][n, t]:
                at = ids.shape[1] - T - 1 + t  # the position that predicts completion token t
                with torch.no_grad():
                    lp, lq = (torch.log_softmax(m(ids, attention_mask=attention, position_ids=positions).logits[n, at]
                                                / cfg.temperature, -1) for m in (policy, ref_policy))
                kls.append((lp.exp() * (lp - lq)).sum().item())
    assert stats["exact_kl"] == pytest.approx(sum(kls) / len(kls), rel=1e-4) and stats["exact_kl"] > 0
