"""Helpers for notebook 02 (why the importance ratio differs from one). Everything runs the twins' own
functions (rollout, update_policy, policy_logprobs); these helpers only snapshot, replay and measure.

Notation: ratio rho_t = exp(log pi_theta(o_t) - log pi_old(o_t)) over unmasked completion tokens t;
A_t is the advantage of the token's sequence. A token is "clipped" when the clip is active on the side
the update pushes it: A > 0 and rho > 1 + eps, or A < 0 and rho < 1 - eps (its surrogate gradient is 0).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass

import torch

import grpo_fixed
from workbook.plots import BUGGY, FIXED

TASK = grpo_fixed.EchoTask()
SMALL = dict(prompts_per_batch=8, group_size=8)
"""B = 8 prompts x G = 8 samples = 64 sequences per rollout batch"""


@dataclass(eq=False)  # hashed by identity: a cache key for the traces replayed from it
class Snapshot:
    """One moment of a run: the policy and Adam state just before an update, and the rollout batch."""

    cfg: grpo_fixed.Config
    policy_state: dict
    optimizer_state: dict
    ref_policy: torch.nn.Module
    batch: dict
    stats: dict


def warm_start(iterations: int = 20, seed: int = 0) -> Snapshot:
    """Run the fixed twin's own loop (rollout + update_policy, as in train()) for `iterations`, then
    take one more rollout batch: a mid-run policy, whose next update the notebook replays many ways."""
    cfg = grpo_fixed.make_config(**SMALL)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    policy = grpo_fixed.TinyPolicy(TASK.vocab_size, cfg.hidden)
    ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    for _ in range(iterations):
        batch, _ = grpo_fixed.rollout(policy, ref_policy, TASK, cfg, generator)
        grpo_fixed.update_policy(policy, optimizer, batch, cfg, generator)
    batch, stats = grpo_fixed.rollout(policy, ref_policy, TASK, cfg, generator)
    return Snapshot(cfg, copy.deepcopy(policy.state_dict()), copy.deepcopy(optimizer.state_dict()),
                    ref_policy, batch, stats)


def restore(snap: Snapshot, *, lr: float | None = None, dropout: float = 0.0):
    """A fresh (policy, Adam) pair in the snapshot's state; optionally a new lr or dropout rate."""
    policy = grpo_fixed.TinyPolicy(TASK.vocab_size, snap.cfg.hidden, dropout)
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
    return module.rollout(policy, snap.ref_policy, TASK, cfg, torch.Generator().manual_seed(seed))


def token_advantages(batch) -> torch.Tensor:
    """A of each unmasked completion token (its sequence's advantage), in mask order. (n_tokens,)"""
    return batch["advantages"][:, None].expand_as(batch["mask"])[batch["mask"]]


@torch.no_grad()
def true_ratio(module, policy, batch, temperature) -> torch.Tensor:
    """exp(log pi_theta - log pi_old) in eval mode against the *cached* old log-probs. (n_tokens,)"""
    was_training = policy.training
    policy.eval()
    logprobs = module.policy_logprobs(policy, batch["prompts"], batch["completions"], temperature)  # (N, T)
    policy.train(was_training)
    return torch.exp(logprobs - batch["old_logprobs"])[batch["mask"]]


def clipped(ratio, token_adv, clip) -> torch.Tensor:
    """Tokens whose clip is active: A > 0 and ratio > 1 + clip, or A < 0 and ratio < 1 - clip. (n_tokens,) bool"""
    return ((token_adv > 0) & (ratio > 1 + clip)) | ((token_adv < 0) & (ratio < 1 - clip))


class _TraceRun:
    """A replay of full-batch inner steps from the snapshot that can be extended: step k's numbers never
    depend on how many steps follow, so a longer trace starts with the shorter one."""

    def __init__(self, module, snap: Snapshot, lr: float, clip: float):
        self.module, self.batch, self.clip = module, snap.batch, clip
        self.cfg = module.make_config(**SMALL, inner_epochs=1, minibatches=1, lr=lr, clip=clip)
        self.policy, self.optimizer = restore(snap, lr=lr)
        self.generator = torch.Generator().manual_seed(0)
        self.token_adv = token_advantages(snap.batch)  # (n_tokens,)
        self.ratios, self.loss_ratios, self.clipped_by_loss, self.outside = [], [], [], []

    def extend(self, steps: int) -> dict:
        """Run the missing inner steps, then -> the first `steps` of them (fresh lists, shared tensors)."""
        while len(self.ratios) < steps:
            ratio = true_ratio(self.module, self.policy, self.batch, self.cfg.temperature)  # (n_tokens,)
            record = self.module.update_policy(self.policy, self.optimizer, self.batch, self.cfg, self.generator)[0]
            self.ratios.append(ratio)
            self.loss_ratios.append(record["ratio"])
            self.clipped_by_loss.append((record["clipped_pos"] + record["clipped_neg"]) / ratio.numel())
            self.outside.append(clipped(ratio, self.token_adv, self.clip).float().mean().item())
        return dict(ratio=self.ratios[:steps], loss_ratio=self.loss_ratios[:steps],
                    clipped=self.clipped_by_loss[:steps], outside=self.outside[:steps], token_adv=self.token_adv)


@functools.lru_cache(maxsize=32)
def _trace_run(module, snap: Snapshot, lr: float, clip: float) -> _TraceRun:
    """One extendable replay per (module, snapshot, lr, clip): slider moves on 'inner steps' reuse it."""
    return _TraceRun(module, snap, lr, clip)


def inner_trace(module, snap: Snapshot, steps: int, lr: float, clip: float) -> dict:
    """`steps` full-batch inner steps of module.update_policy (inner_epochs=1, minibatches=1 per call,
    Adam state carried over, so it equals one call with inner_epochs=steps) from the snapshot.

    Per step k (before its update): the true ratio pi_k / pi_old, the ratio the loss used, and the
    fraction of tokens clipped by the loss vs outside the window on the pushing side. Cached: the same
    (module, snapshot, lr, clip) replays once, and a longer trace extends the shorter one.
    """
    return _trace_run(module, snap, float(lr), float(clip)).extend(steps)


def sign_means(ratio, token_adv) -> tuple[float, float]:
    """(mean ratio over A > 0 tokens, mean ratio over A < 0 tokens)"""
    return ratio[token_adv > 0].mean().item(), ratio[token_adv < 0].mean().item()


def draw_trace(ax, trace: dict, clip: float, color: str) -> int | None:
    """Per inner step k, on a log axis: min-max (thin) and 5-95% (band) of the true ratio pi_k / pi_old,
    its A>0 / A<0 means, the clip window (dashed grey); at the bottom, bars of the token fraction the loss
    clipped, and hatched bars for tokens outside the window that the loss did *not* clip.
    Marks the first step where clipping engages. -> that step, or None."""
    ks = list(range(len(trace["ratio"])))
    band = torch.stack([torch.quantile(r, torch.tensor([0.0, 0.05, 0.95, 1.0])) for r in trace["ratio"]])  # (K, 4)
    pos, neg = zip(*(sign_means(r, trace["token_adv"]) for r in trace["ratio"]), strict=True)
    ax.set_yscale("log")
    ax.fill_between(ks, band[:, 1], band[:, 2], color=color, alpha=0.18, label="true ratio, 5-95%")
    ax.plot(ks, band[:, 0], color=color, lw=0.7, label="true ratio, min / max")
    ax.plot(ks, band[:, 3], color=color, lw=0.7)
    ax.plot(ks, pos, "-o", color=color, ms=3, label="mean, A>0")
    ax.plot(ks, neg, "--s", color=color, ms=3, label="mean, A<0")
    ax.plot(ks, [r.mean().item() for r in trace["loss_ratio"]], ":", color="k", label="mean ratio the loss sees")
    for edge in (1 - clip, 1 + clip):
        ax.axhline(edge, color="grey", ls="--", lw=0.8)
    ax.set_ylim(0.005, 40)
    ax.set_yticks([0.01, 0.1, 0.5, 1, 2, 10], ["0.01", "0.1", "0.5", "1", "2", "10"])
    ax.minorticks_off()  # fewer ticks to lay out: the redraw stays fast
    ax.set_xlabel("inner step k (full batch)")
    bars = ax.twinx()
    bars.bar(ks, trace["clipped"], width=0.6, color=color, alpha=0.45, label="clipped by the loss")
    missed = [max(0.0, o - c) for o, c in zip(trace["outside"], trace["clipped"], strict=True)]
    bars.bar(ks, missed, bottom=trace["clipped"], width=0.6, fill=False, hatch="//", edgecolor=color,
             label="outside window, not clipped")
    bars.set_ylim(0, 3.0)  # bars in the bottom tenth, below the ratio lines
    bars.set_yticks([0, 0.25, 0.5])
    first = next((k for k, c in enumerate(trace["clipped"]) if c > 0), None)
    if first is not None:
        ax.axvline(first, color=color, lw=1.5)
        ax.text(first + 0.1, 30, f"clipping engages at k={first}", color=color, fontsize="small", va="top")
    else:
        ax.text(0.1, 30, "clipping never engages", color=color, fontsize="small", va="top")
    return first, bars


def draw_drift(b3_module, snap: Snapshot, steps: int, lr: float, clip: float):
    """The slider figure: B3 (left) vs fixed (right) over `steps` inner steps. -> (fig, summary dict)"""
    from workbook.plots import buggy_vs_fixed

    buggy = inner_trace(b3_module, snap, steps, lr, clip)
    fixed = inner_trace(grpo_fixed, snap, steps, lr, clip)
    fig, (ax_b, ax_f) = buggy_vs_fixed(f"ratio over inner steps: lr={lr:.1e}, clip={clip:.2f}", figsize=(10, 3.6))
    ax_b.set_title("grpo_buggy (B3): old log-probs recomputed each step", color=BUGGY, fontsize="medium")
    ax_f.set_title("grpo_fixed: old log-probs cached once", color=FIXED, fontsize="medium")
    first_b, bars_b = draw_trace(ax_b, buggy, clip, BUGGY)
    first_f, bars_f = draw_trace(ax_f, fixed, clip, FIXED)
    ax_b.set_ylabel("ratio pi_k / pi_old (log scale)")
    bars_f.set_ylabel("token fraction (bars)", fontsize="small")
    handles = [h for a in (ax_b, bars_b) for h in a.get_legend_handles_labels()[0]]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize="x-small")
    summary = dict(
        first_clip_buggy=first_b, first_clip_fixed=first_f,
        last_max_buggy=buggy["ratio"][-1].max().item(), last_max_fixed=fixed["ratio"][-1].max().item(),
        last_min_buggy=buggy["ratio"][-1].min().item(), last_min_fixed=fixed["ratio"][-1].min().item(),
        last_outside_buggy=buggy["outside"][-1], last_outside_fixed=fixed["outside"][-1],
    )
    return fig, summary


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


def draw_histograms(trace: dict, steps, clip: float):
    """Histograms of the true ratio at the given inner steps, A>0 and A<0 tokens apart, clip window dashed."""
    import matplotlib.pyplot as plt

    from workbook.plots import REFERENCE

    fig, axes = plt.subplots(1, len(steps), figsize=(10, 2.8), sharey=True, layout="constrained")
    bins = torch.logspace(-0.7, 0.7, 43).tolist()  # ratio 0.2 .. 5, log-spaced; outliers go to the end bins
    for ax, k in zip(axes, steps, strict=True):
        ratio, adv = trace["ratio"][k].clamp(0.2, 5), trace["token_adv"]
        ax.hist(ratio[adv > 0].tolist(), bins=bins, color=FIXED, alpha=0.6, label="A>0")
        ax.hist(ratio[adv < 0].tolist(), bins=bins, color=REFERENCE, alpha=0.5, label="A<0")
        for edge in (1 - clip, 1 + clip):
            ax.axvline(edge, color="k", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks([0.2, 0.5, 1, 2, 5], ["0.2", "0.5", "1", "2", "5"])
        ax.minorticks_off()  # no overlapping minor-tick labels on the log axis
        frac = clipped(trace["ratio"][k], adv, clip).float().mean().item()
        ax.set_title(f"inner step k={k}: {frac:.0%} clipped", fontsize="medium")
        ax.set_xlabel("ratio pi_k / pi_old")
    axes[0].set_ylabel("tokens")
    axes[0].legend(fontsize="small")
    return fig


def surrogate_grad(loss_fn, log_ratio, adv: float, clip: float = 0.2) -> torch.Tensor:
    """n * d loss / d logp_t for single-token sequences at the given log-ratios (all with advantage adv):
    the per-token gradient of a masked-mean loss, undoing the 1/n. (n,)"""
    n = log_ratio.numel()
    logprobs = log_ratio.clone().reshape(n, 1).requires_grad_(True)  # (n, 1): old log-probs are 0
    loss = loss_fn(logprobs, torch.zeros(n, 1), torch.full((n,), float(adv)), torch.ones(n, 1, dtype=torch.bool), clip)
    loss.backward()
    return logprobs.grad.reshape(n) * n


def with_loss(loss_fn):
    """A fresh copy of grpo_fixed whose update_policy uses `loss_fn` in place of grpo_loss."""
    from workbook.catalog import hybrid

    module = hybrid()
    module.grpo_loss = loss_fn
    return module
