"""workbook/nb02_ratio.py, the machinery of notebook 02: snapshots restore exactly, cached replays equal fresh
ones, the drift figure shows what the traces hold (its lower strip: the mean A log ratio), and the audit runner
tells the fixed twin from B3."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import grpo_fixed  # noqa: E402
import grpo_support  # noqa: E402
from workbook import nb02_ratio  # noqa: E402
from workbook.catalog import hybrid  # noqa: E402


@torch.no_grad()
def true_ratio(policy, batch, temperature):
    """The notebook's measurement: eval-mode ratio against the cached old log-probs. (n_tokens,)"""
    policy.eval()
    logprobs = grpo_fixed.policy_logprobs(policy, batch["prompt_ids"], batch["prompt_mask"], batch["completions"],
                                          batch["mask"], temperature)  # (N, T)
    policy.train()
    return torch.exp(logprobs - batch["old_logprobs"])[batch["mask"]]


def clipped(ratio, token_adv, clip):
    return ((token_adv > 0) & (ratio > 1 + clip)) | ((token_adv < 0) & (ratio < 1 - clip))


@pytest.fixture(scope="module")
def snap():
    return nb02_ratio.warm_start(iterations=2, seed=0)


@pytest.fixture(scope="module")
def token_adv(snap):
    mask = snap.batch["mask"]
    return snap.batch["advantages"][:, None].expand_as(mask)[mask]


def test_restore_gives_the_snapshot_policy(snap):
    policy, optimizer = nb02_ratio.restore(snap, lr=1e-3)
    assert (true_ratio(policy, snap.batch, snap.cfg.temperature) == 1).all()
    assert optimizer.param_groups[0]["lr"] == 1e-3
    policy2, _ = nb02_ratio.restore(snap)
    assert all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), policy2.state_dict().values(),
                                                 strict=True))


def test_extended_replay_equals_a_fresh_one_and_cached_positions_replay_nothing(snap):
    nb02_ratio._trace_run.cache_clear()
    short = nb02_ratio.inner_trace(grpo_fixed, snap, 2, 3e-3, 0.2, ratio_fn=true_ratio)
    before = nb02_ratio.replays_run()
    longer = nb02_ratio.inner_trace(grpo_fixed, snap, 4, 3e-3, 0.2, ratio_fn=true_ratio)
    assert nb02_ratio.replays_run() == before + 2  # only the two missing steps
    nb02_ratio.inner_trace(grpo_fixed, snap, 3, 3e-3, 0.2, ratio_fn=true_ratio)
    assert nb02_ratio.replays_run() == before + 2  # a shorter trace of a cached position: nothing new
    assert all(torch.equal(a, b) for a, b in zip(short["ratio"], longer["ratio"][:2], strict=True))
    nb02_ratio._trace_run.cache_clear()
    fresh = nb02_ratio.inner_trace(grpo_fixed, snap, 4, 3e-3, 0.2, ratio_fn=true_ratio)
    assert all(torch.equal(a, b) for a, b in zip(fresh["ratio"], longer["ratio"], strict=True))
    assert (fresh["ratio"][0] == 1).all() and not (fresh["ratio"][3] == 1).all()


def test_b3_replay_ignores_the_clip_and_its_loss_sees_ratio_one(snap):
    b3 = hybrid("B3")
    a = nb02_ratio.inner_trace(b3, snap, 3, 3e-3, 0.1, ratio_fn=true_ratio)
    b = nb02_ratio.inner_trace(b3, snap, 3, 3e-3, 0.4, ratio_fn=true_ratio)
    assert all(torch.equal(x, y) for x, y in zip(a["ratio"], b["ratio"], strict=True))
    assert all((r == 1).all() for r in a["loss_ratio"]) and a["clipped"] == [0.0, 0.0, 0.0]
    assert not (a["ratio"][2] == 1).all()  # the true ratio moves all the same


def test_drift_figure_shows_the_traces(snap, token_adv):
    b3 = hybrid("B3")
    fig = nb02_ratio.DriftFigure(max_steps=6, clipped_fn=clipped)
    try:
        buggy = nb02_ratio.inner_trace(b3, snap, 4, 1e-2, 0.2, ratio_fn=true_ratio)
        fixed = nb02_ratio.inner_trace(grpo_fixed, snap, 4, 1e-2, 0.2, ratio_fn=true_ratio)
        result = fig.update(buggy, fixed, token_adv, 1e-2, 0.2)
        panel = fig.fixed
        assert list(panel.hi.get_xdata()) == [0, 1, 2, 3]
        assert panel.hi.get_ydata()[-1] == pytest.approx(fixed["ratio"][-1].max().item())
        assert result["last_max_fixed"] == pytest.approx(fixed["ratio"][-1].max().item())
        assert result["last_outside_fixed"] == pytest.approx(clipped(fixed["ratio"][-1], token_adv, 0.2).float().mean())
        heights = list(panel.clipped.get_data().values)
        assert heights[4:] == [0.0, 0.0]  # steps beyond the trace: no bar
        assert heights[:4] == pytest.approx([nb02_ratio.BAR_SCALE * c for c in fixed["clipped"]])
        outlined = panel.missed.get_data()
        outside = [clipped(r, token_adv, 0.2).float().mean().item() for r in fixed["ratio"]]
        assert list(outlined.values[:4]) == pytest.approx([nb02_ratio.BAR_SCALE * max(o, c)
                                                           for o, c in zip(outside, fixed["clipped"], strict=True)])
        assert list(outlined.baseline) == pytest.approx(heights)  # the outline starts on the filled bar's top
        assert result["first_clip_buggy"] is None and fig.buggy.note.get_text() == "clipping never engages"
        first = next((k for k, c in enumerate(fixed["clipped"]) if c > 0), None)
        assert result["first_clip_fixed"] == first
        assert panel.first.get_visible() == (first is not None)
        assert [line.get_ydata()[0] for line in panel.window] == pytest.approx([0.8, 1.2])
        weighted = [(token_adv * r.log()).mean().item() for r in fixed["ratio"]]  # the lower strip: mean A log rho
        assert list(panel.weighted.get_ydata()) == pytest.approx(weighted) and weighted[0] == 0
        assert result["last_weighted_fixed"] == pytest.approx(weighted[-1])
        lo, hi = nb02_ratio.WEIGHTED_LIMITS
        assert panel.weighted.axes.get_ylim() == (lo, hi) and all(lo < w < hi for w in weighted)
    finally:
        plt.close(fig.fig)


def test_ratio_audit_tells_fixed_from_b3_and_dropout(snap):
    fixed = nb02_ratio.ratio_audit(grpo_fixed, snap)
    assert fixed["first_cached"] == 0 and fixed["health"] == []
    assert 0 <= fixed["gap"] <= grpo_support.STATS["logprob_gap"].hi  # KV-cache sampler vs full forward: rounding
    b3 = nb02_ratio.ratio_audit(hybrid("B3"), snap)
    assert b3["last_cached"] == 0 and "ratio moves after updates" in b3["health"]
    dropout = nb02_ratio.ratio_audit(grpo_fixed, snap, dropout=0.1)
    assert dropout["first_cached"] > 0 and "ratio == 1 at the first inner step" in dropout["health"]


def test_surrogate_grad_is_minus_a_rho_inside_the_window():
    x = torch.tensor([-0.1, 0.0, 0.1, 0.5])  # log-ratios; 0.5 is past 1 + 0.2 for A > 0
    grad = nb02_ratio.surrogate_grad(grpo_fixed.grpo_loss, x, 2.0)
    assert grad[:3] == pytest.approx((-2.0 * x[:3].exp()).tolist())
    assert grad[3] == 0
