"""Machinery for notebook 02 (why the importance ratio differs from one): snapshot a run, replay its next
update in different ways, draw. Everything runs the twins' own functions (rollout, update_policy,
policy_logprobs); the formulas the notebook teaches (the eval-mode ratio, which tokens are clipped, the
token advantages) are defined in the notebook and passed in.

Notation: ratio rho_t = exp(log pi_theta(o_t) - log pi_old(o_t)) over unmasked completion tokens t;
A_t is the advantage of the token's sequence.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from matplotlib.transforms import blended_transform_factory

import grpo_fixed
from tinylm import TinyLM
from workbook.plots import BUGGY, FIXED, REFERENCE
from workbook.progress import status
from workbook.widgets import choice as widgets_choice

TASK = grpo_fixed.AdditionTask()
SMALL = dict(prompts_per_batch=8, group_size=8)
"""B = 8 prompts x G = 8 samples = 64 sequences per rollout batch"""


@dataclass(eq=False)  # hashed by identity: a cache key for the traces replayed from it
class Snapshot:
    """One moment of a run: the policy and Adam state just before an update, and the rollout batch."""

    cfg: grpo_fixed.Config
    model_config: object
    tokenizer: object
    policy_state: dict
    optimizer_state: dict
    ref_policy: torch.nn.Module
    batch: dict
    stats: dict


def warm_start(iterations: int = 20, seed: int = 0) -> Snapshot:
    """Run the fixed twin's own loop (rollout + update_policy, as in train()) for `iterations`, then
    take one more rollout batch: a mid-run policy, whose next update the notebook replays many ways."""
    cfg = grpo_fixed.make_config(**SMALL)
    policy, ref_policy, tokenizer, optimizer, generator = grpo_fixed.setup_run(TASK, cfg, seed)
    for it in range(iterations):
        status(f"training the fixed twin: iteration {it + 1} of {iterations}")
        batch, _ = grpo_fixed.rollout(policy, ref_policy, tokenizer, TASK, cfg, generator)
        grpo_fixed.update_policy(policy, optimizer, batch, cfg, generator)
    batch, stats = grpo_fixed.rollout(policy, ref_policy, tokenizer, TASK, cfg, generator)
    return Snapshot(cfg, policy.config, tokenizer, copy.deepcopy(policy.state_dict()),
                    copy.deepcopy(optimizer.state_dict()), ref_policy, batch, stats)


def restore(snap: Snapshot, *, lr: float | None = None, dropout: float = 0.0):
    """A fresh (policy, Adam) pair in the snapshot's state; optionally a new lr or dropout rate."""
    policy = TinyLM(dataclasses.replace(snap.model_config, dropout=dropout))  # the SFT model's sizes
    policy.load_state_dict(snap.policy_state)
    optimizer = torch.optim.Adam(policy.parameters(), lr=snap.cfg.lr)
    optimizer.load_state_dict(copy.deepcopy(snap.optimizer_state))  # load_state_dict aliases the tensors
    for group in optimizer.param_groups:
        group["lr"] = snap.cfg.lr if lr is None else lr
    return policy, optimizer


def rollout_with(module, snap: Snapshot, *, seed: int = 1, **overrides):
    """One rollout batch from the snapshot's policy, by `module` (a twin or a hybrid). -> batch, stats"""
    cfg = module.make_config(**{**SMALL, **overrides})
    policy, _ = restore(snap, dropout=cfg.dropout)
    return module.rollout(policy, snap.ref_policy, snap.tokenizer, TASK, cfg, torch.Generator().manual_seed(seed))


def sign_means(ratio, token_adv) -> tuple[float, float]:
    """(mean ratio over A > 0 tokens, mean ratio over A < 0 tokens)"""
    return ratio[token_adv > 0].mean().item(), ratio[token_adv < 0].mean().item()


# ---- replays of full-batch inner steps, cached ----------------------------------------------------


class _TraceRun:
    """A replay of full-batch inner steps from the snapshot that can be extended: step k's numbers never
    depend on how many steps follow, so a longer trace starts with the shorter one."""

    steps_run = 0
    """inner steps replayed by every instance together"""

    def __init__(self, module, snap: Snapshot, lr: float, clip: float, ratio_fn):
        self.module, self.batch, self.ratio_fn = module, snap.batch, ratio_fn
        self.cfg = module.make_config(**SMALL, inner_epochs=1, minibatches=1, lr=lr, clip=clip)
        self.policy, self.optimizer = restore(snap, lr=lr)
        self.generator = torch.Generator().manual_seed(0)
        self.ratios, self.loss_ratios, self.clipped_by_loss = [], [], []

    def extend(self, steps: int) -> dict:
        """Run the missing inner steps, then -> the first `steps` of them (fresh lists, shared tensors)."""
        while len(self.ratios) < steps:
            ratio = self.ratio_fn(self.policy, self.batch, self.cfg.temperature)  # (n_tokens,) before the step
            record = self.module.update_policy(self.policy, self.optimizer, self.batch, self.cfg, self.generator)[0]
            self.ratios.append(ratio)
            self.loss_ratios.append(record["ratio"])
            self.clipped_by_loss.append((record["clipped_pos"] + record["clipped_neg"]) / ratio.numel())
            _TraceRun.steps_run += 1
        return dict(ratio=self.ratios[:steps], loss_ratio=self.loss_ratios[:steps],
                    clipped=self.clipped_by_loss[:steps])


@functools.lru_cache(maxsize=64)
def _trace_run(module, snap: Snapshot, lr: float, clip: float, ratio_fn) -> _TraceRun:
    """One extendable replay per (module, snapshot, lr, clip, ratio_fn): moves of 'inner steps' reuse it."""
    return _TraceRun(module, snap, lr, clip, ratio_fn)


def replays_run() -> int:
    """How many inner steps the replays have run so far (all inputs): a cached slider position adds none."""
    return _TraceRun.steps_run


def inner_trace(module, snap: Snapshot, steps: int, lr: float, clip: float, ratio_fn) -> dict:
    """`steps` full-batch inner steps of module.update_policy (inner_epochs=1, minibatches=1 per call,
    Adam state carried over, so it equals one call with inner_epochs=steps) from the snapshot.

    Per step k, before its update: ratio_fn(policy, batch, temperature) (the true ratio pi_k / pi_old,
    (n_tokens,)), the ratio the loss used, and the fraction of tokens the loss clipped. Cached: the same
    inputs replay once, and a longer trace extends the shorter one.
    """
    return _trace_run(module, snap, float(lr), float(clip), ratio_fn).extend(steps)


# ---- figures --------------------------------------------------------------------------------------

BAR_SCALE = 0.6
"""drift figure: a bar reaching this fraction of the panel's height stands for all tokens"""
RATIO_LIMITS = (1e-4, 1e3)
"""drift figure's ratio axis: the notebook's slider positions span about 2e-4 to 76 (lr = 1e-2); the top decade
holds the note 'clipping engages at k=...' clear of the data"""
WEIGHTED_LIMITS = (-0.25, 0.5)
"""drift figure's lower strip (mean A log ratio): the notebook's slider positions span about -0.14 (fixed twin,
lr = 1e-2, k = 5) to +0.37 (B3, lr = 3e-3, k = 13)"""
DRIFT_CAPTION = ("Top: band: 5-95% of the true ratio pi_k / pi_old, thin lines: its min and max; dotted black: mean "
                 "ratio the loss sees; dashed grey: the clip window. Bars: token fraction the loss clipped (filled) "
                 "and outside the window on the side A pushes but not clipped by the loss (outlined); a bar "
                 f"{BAR_SCALE:.0%} of the panel high = all tokens. Vertical line: first step where clipping engages. "
                 "Bottom: mean of A log(pi_k / pi_old) over the tokens, the quantity a small step from pi_old raises "
                 "(to first order, without momentum); later and larger steps can lower it. Not guaranteed: the mean "
                 "ratio of the A>0 tokens above 1 and of the A<0 tokens below it; at a large step the two can swap "
                 "(§3 prints both at lr 1e-2).")
"""what the drift figure's artists are (a caption under the image: cheaper than a legend in every redraw)"""


def choice(values, value, description: str, fmt: str = "g"):
    """A slider over a few values (each a replay to cache), labelled with format(v, fmt); fires on release."""
    return widgets_choice([(format(v, fmt), v) for v in values], value, description)


class _DriftPanel:
    """One side of the drift figure. Top (ax), per inner step k on a log axis: min-max (thin) and 5-95% (band)
    of the true ratio, the mean ratio the loss saw (dotted black), the clip window (dashed grey); bars at the
    bottom: token fraction the loss clipped (filled), and outside the window on the side A pushes but not
    clipped by the loss (outlined); a vertical line at the first step where clipping engages. Below it (ax_w,
    linear): the mean over tokens of A_t log rho_t, the quantity a first-order step raises."""

    def __init__(self, ax, ax_w, color: str, max_steps: int):
        self.ax, self.color = ax, color
        ks = list(range(max_steps))
        ones = [1.0] * max_steps
        ax.set_yscale("log")
        ax.set_ylim(*RATIO_LIMITS)  # fixed, and wide enough for every slider position's min and max
        ax.set_yticks([0.001, 0.01, 0.1, 1, 10, 100], ["0.001", "0.01", "0.1", "1", "10", "100"])
        ax.minorticks_off()
        ax.set_xlim(-0.5, max_steps - 0.5)  # fixed: the trace grows to the right as steps are added
        ax.set_xticks(range(0, max_steps, 3))  # few fixed ticks: tick layout is most of a redraw's cost
        (self.band,) = ax.fill(ks + ks[::-1], ones + ones, color=color, alpha=0.18, lw=0,
                               label="true ratio, 5-95%")  # one polygon: 5% quantiles out, 95% back
        (self.lo,) = ax.plot(ks, ones, color=color, lw=0.7, label="true ratio, min / max")
        (self.hi,) = ax.plot(ks, ones, color=color, lw=0.7)
        (self.seen,) = ax.plot(ks, ones, ":", color="k", label="mean ratio the loss sees")
        self.window = [ax.axhline(1.0, color="grey", ls="--", lw=0.8) for _ in range(2)]
        on_axes = blended_transform_factory(ax.transData, ax.transAxes)  # x in steps, y in panel height
        self.edges = [k - 0.5 for k in range(max_steps + 1)]  # one bar per step, side by side
        zeros = [0.0] * max_steps
        self.clipped = ax.stairs(zeros, self.edges, baseline=0.0, fill=True, color=color, alpha=0.45,
                                 transform=on_axes)  # one patch for all steps: cheaper than a bar each
        self.missed = ax.stairs(zeros, self.edges, baseline=0.0, color=color, lw=0.8, transform=on_axes)
        self.first = ax.axvline(0, color=color, lw=1.5)
        on_top = blended_transform_factory(ax.transData, ax.transAxes)  # x in steps, y in panel height
        self.note = ax.text(0.3, 0.97, "", color=color, fontsize="small", va="top", transform=on_top)  # above the data
        ax_w.set_ylim(*WEIGHTED_LIMITS)  # fixed: every slider position fits (see WEIGHTED_LIMITS)
        ax_w.set_yticks([-0.2, 0.0, 0.2, 0.4])
        ax_w.axhline(0.0, color="grey", lw=0.8)
        ax_w.set_xlabel("inner step k")
        (self.weighted,) = ax_w.plot(ks, [0.0] * max_steps, "-o", color=color, ms=3)  # mean A log rho per step

    def update(self, trace: dict, token_adv, clip: float, clipped_fn) -> dict:
        ratios = trace["ratio"]
        steps = len(ratios)
        ks = list(range(steps))
        band = torch.stack([torch.quantile(r, torch.tensor([0.0, 0.05, 0.95, 1.0])) for r in ratios])  # (K, 4)
        self.band.set_xy(list(zip(ks + ks[::-1], band[:, 1].tolist() + band[:, 2].flip(0).tolist(), strict=True)))
        self.lo.set_data(ks, band[:, 0])
        self.hi.set_data(ks, band[:, 3])
        weighted = [(token_adv * r.log()).mean().item() for r in ratios]  # mean A_t log rho_t, per step
        self.weighted.set_data(ks, weighted)
        self.seen.set_data(ks, [r.mean().item() for r in trace["loss_ratio"]])
        for line, edge in zip(self.window, (1 - clip, 1 + clip), strict=True):
            line.set_ydata([edge, edge])
        outside = [clipped_fn(r, token_adv, clip).float().mean().item() for r in ratios]
        pad = [0.0] * (len(self.edges) - 1 - steps)  # steps not replayed: no bar
        by_loss = [BAR_SCALE * c for c in trace["clipped"]] + pad
        top = [BAR_SCALE * max(o, c) for o, c in zip(outside, trace["clipped"], strict=True)] + pad
        self.clipped.set_data(by_loss, self.edges, baseline=0.0)
        self.missed.set_data(top, self.edges, baseline=by_loss)  # outline from the filled bar's top up
        first = next((k for k, c in enumerate(trace["clipped"]) if c > 0), None)
        self.first.set_visible(first is not None)
        if first is not None:
            self.first.set_xdata([first, first])
        self.note.set_x(0.3 if first is None else first + 0.3)
        self.note.set_text("clipping never engages" if first is None else f"clipping engages at k={first}")
        last = ratios[-1]
        return dict(first_clip=first, last_min=last.min().item(), last_max=last.max().item(), last_outside=outside[-1],
                    last_weighted=weighted[-1])


class DriftFigure:
    """The slider figure of the B3 section: B3 (left) vs fixed (right) over the inner steps, one persistent
    figure whose artists update() mutates in place (for workbook.widgets.live_plot)."""

    def __init__(self, max_steps: int, clipped_fn):
        self.clipped_fn = clipped_fn
        self.fig, ((ax_b, ax_f), (w_b, w_f)) = plt.subplots(2, 2, figsize=(9, 4.6), sharex=True, sharey="row",
                                                            height_ratios=(3, 1.2), layout="constrained")
        ax_b.set_title("B3: old log-probs recomputed each step", color=BUGGY, fontsize="medium")
        ax_f.set_title("grpo_fixed: old log-probs cached once", color=FIXED, fontsize="medium")
        ax_b.set_ylabel("ratio pi_k / pi_old (log scale)")
        w_b.set_ylabel("mean A log ratio")
        self.buggy, self.fixed = _DriftPanel(ax_b, w_b, BUGGY, max_steps), _DriftPanel(ax_f, w_f, FIXED, max_steps)
        self.title = self.fig.suptitle(" ", fontsize="medium")

    def update(self, buggy: dict, fixed: dict, token_adv, lr: float, clip: float) -> dict:
        """Redraw from two traces (nb02_ratio.inner_trace) -> the numbers a check cell prints, per side."""
        self.title.set_text(f"lr={lr:.0e}, clip={clip:.2f}")
        b = self.buggy.update(buggy, token_adv, clip, self.clipped_fn)
        f = self.fixed.update(fixed, token_adv, clip, self.clipped_fn)
        return {f"{key}_{side}": value for side, part in (("buggy", b), ("fixed", f)) for key, value in part.items()}


def draw_loss_ratios(ax, records: list[dict], clip: float, color: str) -> None:
    """The ratio each inner step's loss used (update_policy's records), one column per step: a dot per token,
    spread sideways in token order so that the dots do not pile up; the clip window dashed."""
    for k, record in enumerate(records):
        ratio = record["ratio"]  # (n_tokens,) of this step's minibatch
        spread = torch.linspace(-0.3, 0.3, ratio.numel())  # deterministic: no jitter from a random stream
        ax.plot((k + spread).tolist(), ratio.tolist(), ".", color=color, ms=3, alpha=0.5)
    for edge in (1 - clip, 1 + clip):
        ax.axhline(edge, color="grey", ls="--", lw=0.8)
    ax.set_xticks(range(len(records)))
    ax.set_xlabel("inner step k")


def draw_histograms(trace: dict, token_adv, steps, clip: float, clipped_fn):
    """Histograms of the true ratio at the given inner steps, A>0 and A<0 tokens apart, clip window dashed."""
    fig, axes = plt.subplots(1, len(steps), figsize=(10, 2.8), sharey=True, layout="constrained")
    bins = torch.logspace(-0.7, 0.7, 43).tolist()  # ratio 0.2 .. 5, log-spaced; outliers go to the end bins
    for ax, k in zip(axes, steps, strict=True):
        ratio = trace["ratio"][k].clamp(0.2, 5)
        ax.hist(ratio[token_adv > 0].tolist(), bins=bins, color=FIXED, alpha=0.6, label="A>0")
        ax.hist(ratio[token_adv < 0].tolist(), bins=bins, color=REFERENCE, alpha=0.5, label="A<0")
        for edge in (1 - clip, 1 + clip):
            ax.axvline(edge, color="k", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks([0.2, 0.5, 1, 2, 5], ["0.2", "0.5", "1", "2", "5"])
        ax.minorticks_off()  # no overlapping minor-tick labels on the log axis
        frac = clipped_fn(trace["ratio"][k], token_adv, clip).float().mean().item()
        ax.set_title(f"inner step k={k}: {frac:.0%} clipped", fontsize="medium")
        ax.set_xlabel("ratio pi_k / pi_old")
    axes[0].set_ylabel("tokens")
    axes[0].legend(fontsize="small")
    return fig


# ---- runners --------------------------------------------------------------------------------------


def ratio_audit(module, snap: Snapshot, *, seed: int = 1, **overrides) -> dict:
    """One rollout and one default update (cfg.inner_epochs x cfg.minibatches steps) by `module` from the
    snapshot, once against the cached old log-probs and once against the sampler's own log-probs (what a
    pipeline gets when old log-probs come from the inference engine).

    -> logprob_gap (max |cached old - sampler| log-prob), max |rho - 1| at the first inner step for both
    choices of old log-probs, at the last step, and the fixed twin's failed health checks.
    """
    batch, stats = rollout_with(module, snap, seed=seed, **overrides)
    cfg = module.make_config(**SMALL, **overrides)
    records = {}
    for source, old in [("cached", batch["old_logprobs"]), ("sampler", batch["sampler_logprobs"])]:
        policy, optimizer = restore(snap, dropout=cfg.dropout)
        torch.manual_seed(seed)  # dropout masks come from the global generator
        generator = torch.Generator().manual_seed(seed)
        records[source] = module.update_policy(policy, optimizer, dict(batch, old_logprobs=old), cfg, generator)
    dev = lambda record: (record["ratio"] - 1).abs().max().item()  # noqa: E731
    health = grpo_fixed.check_health({**stats, **grpo_fixed.summarize_inner_steps(records["cached"])}, cfg)
    return dict(gap=stats["logprob_gap"], first_cached=dev(records["cached"][0]),
                first_sampler=dev(records["sampler"][0]), last_cached=dev(records["cached"][-1]), health=health)


def surrogate_grad(loss_fn, log_ratio, adv: float, clip: float = 0.2) -> torch.Tensor:
    """n * d loss / d logp_t for single-token sequences at the given log-ratios (all with advantage adv):
    the per-token gradient of a masked-mean loss, undoing the 1/n. (n,)"""
    n = log_ratio.numel()
    logprobs = log_ratio.clone().reshape(n, 1).requires_grad_(True)  # (n, 1): old log-probs are 0
    loss = loss_fn(logprobs, torch.zeros(n, 1), torch.full((n,), float(adv)), torch.ones(n, 1, dtype=torch.bool), clip)
    loss.backward()
    return logprobs.grad.reshape(n) * n
