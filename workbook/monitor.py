"""A reusable health monitor for GRPO training: the fixed twin's checks, watching any trainer.

    monitor = HealthMonitor()
    monitor.preflight(grpo_buggy)                      # tiny-input probes, "iteration -1"
    history = grpo_buggy.train(on_iteration=monitor)   # per-iteration checks on each stats dict
    monitor.first_flags()                              # [(check, first failing iteration), ...]

or in one call: `HealthMonitor().watch(grpo_buggy, steps=6)`.

The checks themselves are not redefined here: the per-iteration ones are grpo_fixed.HEALTH_CHECKS
(plus three monitor-only ones for the STATS ranges HEALTH_CHECKS leaves out: zero-variance
groups, clip fraction, grad-norm size), the probes are grpo_fixed.preflight. grpo_fixed keeps only
the check code and grpo_support the ranges (STATS), so the human-readable side (what it catches) lives in
CHECK_INFO and PROBE_INFO below, keyed by the same names, with every number rendered from those two.

A stats dict can come from either twin, a hybrid, or your own trainer: any dict with the keys of
grpo_support.STATS. A check whose stat is missing is skipped and reported, never a crash.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import grpo_fixed
import grpo_support

PREFLIGHT = -1
"""the 'iteration' at which preflight failures are recorded (before iteration 0)"""


# ----------------------------------------------------------------------------------------------
# The checks: grpo_fixed's, plus three for STATS ranges that grpo_fixed does not assert.
# Every range and tolerance comes from the twins (grpo_support.STATS rows, grpo_fixed's probe constants): none is
# written here.

STATS = grpo_support.STATS
in_range = grpo_fixed.in_range


def render_range(name: str) -> str:
    """The healthy range of STATS[name] as text, e.g. '<= 0.0001', '= 0', 'in [0.9, 1.1]', 'finite'."""
    return render_bounds(STATS[name].lo, STATS[name].hi)


def render_bounds(lo: float, hi: float) -> str:
    """A healthy range [lo, hi] (finite values only) as text: '= 0', '>= 0.01', '<= 0.0001', 'in [a, b]', 'finite'."""
    if lo == hi:
        return f"= {lo:g}"
    if math.isinf(lo) and math.isinf(hi):
        return "finite"
    if math.isinf(hi):
        return f">= {lo:g}"
    if math.isinf(lo):
        return f"<= {hi:g}"
    return f"in [{lo:g}, {hi:g}]"


EXTRA_CHECKS = {
    "groups carry signal": lambda s, cfg: in_range(s, "zero_var_groups") or s["reward"] > grpo_fixed.SOLVED_REWARD,
    "clip fraction moderate": lambda s, cfg: in_range(s, "clip_frac_pos") and in_range(s, "clip_frac_neg"),
    "grad norm bounded": lambda s, cfg: not math.isfinite(s["grad_norm"]) or in_range(s, "grad_norm"),
}
"""monitor-only checks, written like grpo_fixed.HEALTH_CHECKS: (stats, cfg) -> True when healthy; a
non-finite grad norm is the job of grpo_fixed's 'grad norm finite'"""

CHECKS = {**grpo_fixed.HEALTH_CHECKS, **EXTRA_CHECKS}
"""every per-iteration check the monitor runs, grpo_fixed's first"""


@dataclass(frozen=True)
class CheckInfo:
    """The human-readable side of one check; its condition is rendered from the STATS rows it reads."""

    stats: tuple
    """the STATS rows whose healthy ranges the check asserts"""
    why: str
    """what is broken when it fails"""
    catches: str
    """catalog bugs (B1..B17) or regimes it flags"""
    unless: str = ""
    """when the check is waived"""
    finite: tuple = ()
    """stats the check only requires to be finite (no STATS range of theirs is asserted)"""

    @property
    def asserts(self) -> str:
        parts = [f"{name} {render_range(name)}" for name in self.stats] + [f"{name} finite" for name in self.finite]
        return " and ".join(parts) + (f" (unless {self.unless})" if self.unless else "")

    @property
    def threshold(self) -> str:
        whys = dict.fromkeys(STATS[name].why for name in self.stats)  # once each, in order
        return "; ".join(whys) or "any non-finite value"


SOLVED = f"reward > {grpo_fixed.SOLVED_REWARD:g}"
CHECK_INFO = {
    "advantages finite": CheckInfo(
        ("adv_nonfinite",), "a NaN advantage makes the minibatch loss and its gradient NaN; the step is lost",
        "B2 (constant group, 0/0)"),
    "advantages centred per group": CheckInfo(
        ("adv_group_mean",), "sum_i A_i = 0 within each prompt's group; a nonzero group mean means the baseline "
        "came from other prompts' rewards (float32 rounding gives ~1e-8)", "B9 (only when B does not divide G)"),
    "training log-probs match the sampler": CheckInfo(
        ("logprob_gap",), "the loss is computed on a different distribution from the one that drew the tokens",
        "B6 (shift), B10 (temperature), B12 (positions), B13 (sampler without the attention mask)"),
    "each group holds one prompt": CheckInfo(
        ("mixed_groups",), "a group that mixes prompts is centred on other prompts' rewards: its baseline is a "
        "batch mean, not the prompt's own", "B15"),
    "masks end at the first EOS": CheckInfo(
        ("mask_eos_mismatch",), "the EOS is left out of the loss (its own log-prob gets no gradient; stopping is "
        "trained only indirectly), or tokens after it are trained", "B14"),
    "reward text stops at EOS": CheckInfo(
        ("text_mismatch",), "the reward scores characters the policy sampled after it stopped", "B17"),
    "reference frozen, not the live policy": CheckInfo(
        ("ref_gap",), "the reference moves with the policy, so the KL term anchors to the policy that sampled, "
        "not to the SFT model (or the policy has not moved yet: every update so far was skipped)", "B16",
        "iteration 0, lr = 0 or every group constant"),
    "ratio == 1 at the first inner step": CheckInfo(
        ("ratio_first_maxdev",), "old log-probs and training log-probs come from different computations "
        "(dropout in train mode, a different forward path)", "dropout > 0; no catalogued bug alone"),
    "ratio moves after updates": CheckInfo(
        ("ratio_last_maxdev",), "old log-probs are recomputed from the current policy: clipping is dead, no "
        "trust region", "B3", "one inner step, lr = 0 or every group constant"),
    "KL finite and >= 0": CheckInfo(
        ("kl",), "a NaN/-inf log-prob reached the KL term, or its formula is wrong", "any NaN/-inf source"),
    "entropy not collapsed": CheckInfo(
        ("entropy",), "a collapsed policy samples identical groups, so A = 0 and learning stops before the task "
        "is solved", "collapse over many updates; a too-high lr fires the clip-fraction and "
        "grad-norm checks first (notebook 03 §6.3)", SOLVED),
    "loss finite": CheckInfo(
        ("loss", "nonfinite_steps"), "a skipped step is silently lost data; a NaN step that is not skipped "
        "destroys the weights", "any NaN/-inf source (B2 here)"),
    "grad norm finite": CheckInfo(
        (), "NaN/inf reached the parameters' gradients", "any NaN/-inf source (B2 here)", finite=("grad_norm",)),
    "groups carry signal": CheckInfo(
        ("zero_var_groups",), "a group with equal rewards has A = 0 for every member: no gradient; the run is "
        "starved", "sparse rewards, G too small, temperature too low", SOLVED),
    "clip fraction moderate": CheckInfo(
        ("clip_frac_pos", "clip_frac_neg"), "steps too large for the trust region: most tokens get no gradient "
        "through the clip", "lr or inner epochs too high"),
    "grad norm bounded": CheckInfo(
        ("grad_norm",), "exploding gradients: clipping hides them from the update but not from this log",
        "divergence; the size B11 would let through", "grad_norm is not finite (the check above)"),
}

_f = grpo_fixed
PROBE_INFO = {
    "sampling frequencies match softmax(logits)": (
        f"max |freq - softmax([2, 1, 0, -1, -2])| <= {_f.SAMPLING_TOL:g} over {_f.PROBE_DRAWS} draws",
        "the sampler must draw from p = softmax(logits): sums to 1, every token reachable", "B1"),
    "constant reward group gives finite advantages": (
        "isfinite(group_advantage([1, 1, 1]))", "std = 0 without eps: 0/0", "B2"),
    "loss gradient at ratio 1 is -A/n": (
        f"d loss / d logp = -1 (+- {_f.GRAD_TOL:g}) for A = 2 on n = 2 tokens at rho = 1",
        "at rho = 1 the clipped surrogate must give the plain policy gradient -A rho / n", "B4"),
    "all-masked loss is finite": (
        "isfinite(grpo_loss(..., mask all False))", "0 tokens: the mean divides 0 by 0", "B5"),
    "token log-probs finite for large logits": (
        "isfinite(log pi(token 0)) for logits [0, 200]",
        "log(softmax) underflows to log(0) = -inf; log_softmax does not", "B7"),
    "KL estimator is unbiased for KL(pi || ref)": (
        f"|mean k3 - exact KL| <= {_f.KL_TOL:g} over {_f.PROBE_DRAWS} tokens drawn from pi",
        "the reversed log-ratio is still >= 0 (so the per-iteration KL check passes) but estimates another "
        "quantity", "B8"),
    "completion mask covers the first EOS and nothing after it": (
        "completion_mask([5, EOS, 7, EOS]) == [1, 1, 0, 0]",
        "the EOS is an action the policy takes: it is trained, and nothing after it is", "B14"),
    "prompts repeated group by group": (
        "repeat_prompts(['1+2=', '3+4='], 2) == ['1+2=', '1+2=', '3+4=', '3+4=']",
        "advantages are normalised over consecutive samples, so each run of G must be one prompt's", "B15"),
    "reward text stops at the first EOS": (
        "decode_completions of '1', '9', EOS, '3' == '19'",
        "what the sampler drew after the EOS is not part of the answer", "B17"),
    "sampler and trainer log-probs agree on an unpadded row": (
        f"max |sampler - trainer log-prob| <= {_f.GAP_TOL:g} on an unpadded prompt's completion (random tiny "
        "TinyLM, temperature 0.7)", "the trainer scores another distribution than the sampler's", "B6, B10"),
    "sampler and trainer log-probs agree on a left-padded row": (
        "the same on a prompt left-padded by four tokens, while the unpadded row agrees",
        "sampler and trainer treat left padding differently (position ids, attention mask)", "B12, B13"),
    "reference is a frozen copy of the starting policy": (
        "setup_run's ref_policy is not the policy and shares none of its parameter tensors",
        "a reference that is the live policy moves with every update: the KL anchors to the last rollout's "
        "policy, not to the starting one", "B16"),
    "gradients clipped to max_grad_norm": (
        f"global grad norm after optimizer_step <= max_grad_norm + {_f.GRAD_TOL:g} (max_grad_norm = 1)",
        "one outlier batch can make an arbitrarily large update", "B11"),
}
"""probe name -> (what it asserts, what is broken when it fails, catalog bug); tolerances from grpo_fixed"""


def inside(name: str) -> float:
    """A value inside STATS[name]'s healthy range: the middle of a finite range, lo + 1 above a lone lower
    bound, hi - 1 below a lone upper bound, 0 when both are infinite."""
    lo, hi = STATS[name].lo, STATS[name].hi
    if math.isfinite(lo) and math.isfinite(hi):
        return (lo + hi) / 2
    if math.isfinite(lo):
        return lo + 1.0
    return hi - 1.0 if math.isfinite(hi) else 0.0


HEALTHY_STATS = {name: inside(name) for name in STATS}
"""a healthy stats dict with every STATS key, each value derived from its row's range (see inside)"""


def check_table(kind: str = "iteration") -> str:
    """A markdown table of the checks ('iteration') or of the preflight probes ('preflight')."""
    if kind == "iteration":
        header = ["check", "from", "asserts", "why that range", "fails when", "catches"]
        rows = [[name, "grpo_fixed" if name in grpo_fixed.HEALTH_CHECKS else "monitor", f"`{info.asserts}`",
                 info.threshold, info.why, info.catches] for name, info in ((n, CHECK_INFO[n]) for n in CHECKS)]
        return markdown_table(header, rows)
    if kind == "preflight":
        return markdown_table(["probe", "asserts", "fails when", "catches"],
                              [[n, f"`{a}`", why, bug] for n, (a, why, bug) in PROBE_INFO.items()])
    raise ValueError(f"kind must be 'iteration' or 'preflight', got {kind!r}")


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A markdown table (display it with IPython.display.Markdown)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    cells = [[str(c).replace("|", "\\|") for c in row] for row in rows]  # a bare | would end the cell
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


# ----------------------------------------------------------------------------------------------
# The monitor


class HealthCheckFailed(AssertionError):
    """Raised by a strict monitor at the first failure; .iteration and .failures say where and what."""

    def __init__(self, iteration: int, failures: list[str]):
        where = "preflight" if iteration == PREFLIGHT else f"iteration {iteration}"
        super().__init__(f"health check failed at {where}: " + "; ".join(failures))
        self.iteration, self.failures = iteration, failures


def _scalar(value):
    """0-d tensors and numpy scalars -> Python numbers; anything else unchanged."""
    item = getattr(value, "item", None)
    return item() if callable(item) and getattr(value, "ndim", 0) == 0 else value


class HealthMonitor:
    """Runs the health checks on every stats dict it is called with; remembers what failed and when.

    HealthMonitor(cfg=None, *, strict=False, checks=None)
      cfg     the trainer's Config (checks read cfg.inner_epochs, cfg.minibatches, cfg.lr);
              default grpo_fixed.Config(). watch() sets it from its overrides.
      strict  raise HealthCheckFailed at the first failure instead of recording it.
      checks  {name: (stats, cfg) -> bool}; default CHECKS.

    After a run: history (the stats dicts), failures (one list of names per iteration),
    first_failure {check: first failing iteration, PREFLIGHT = -1 for probes}, missing {check: stat},
    and first_flags() / report().
    """

    def __init__(self, cfg=None, *, strict: bool = False, checks: dict | None = None):
        self.cfg = grpo_fixed.Config() if cfg is None else cfg
        self.strict = strict
        self.checks = dict(CHECKS if checks is None else checks)
        self.history: list[dict] = []
        self.failures: list[list[str]] = []
        self.preflight_failures: list[str] = []
        self.first_failure: dict[str, int] = {}
        self.missing: dict[str, str] = {}

    # -- the two entry points ------------------------------------------------------------------

    def preflight(self, module=None, seed: int = 0) -> list[str]:
        """Run grpo_fixed.preflight on `module` (default grpo_fixed); failures land at iteration -1."""
        self.preflight_failures = grpo_fixed.preflight(module, seed=seed)
        self._record(PREFLIGHT, self.preflight_failures)
        return self.preflight_failures

    def __call__(self, stats: dict) -> list[str]:
        """Check one iteration's stats (use as train(on_iteration=monitor)). -> names of failed checks."""
        stats = {k: _scalar(v) for k, v in stats.items()}
        iteration = stats.get("iteration", len(self.history))
        failed = [name for name, ok in self.checks.items() if not self._passes(name, ok, stats)]
        self.history.append(stats)
        self.failures.append(failed)
        self._record(iteration, failed)
        return failed

    def watch(self, module, task=None, *, seed: int = 0, preflight: bool = True, **overrides) -> list[dict]:
        """preflight(module), then module.train(task, seed=seed, on_iteration=self, **overrides)."""
        self.cfg = grpo_fixed.make_config(**overrides)  # the checks see the run's lr, inner epochs...
        if preflight:
            self.preflight(module, seed=seed)
        return module.train(task, seed=seed, on_iteration=self, **overrides)

    # -- results -------------------------------------------------------------------------------

    @property
    def quiet(self) -> bool:
        """True when nothing has failed (missing stats do not count as failures)."""
        return not self.first_failure

    def first_flags(self) -> list[tuple[str, int]]:
        """[(check, first failing iteration)] in order of iteration (-1 = preflight), then check order."""
        order = {name: i for i, name in enumerate([*PROBE_INFO, *self.checks])}
        return sorted(self.first_failure.items(), key=lambda kv: (kv[1], order.get(kv[0], len(order))))

    def first_iteration_failure(self) -> tuple[int, list[str]] | None:
        """(iteration, failed checks) of the first iteration where any per-iteration check failed, or None."""
        for i, (stats, failed) in enumerate(zip(self.history, self.failures, strict=True)):
            if failed:
                return stats.get("iteration", i), failed
        return None

    def report(self) -> str:
        """Plain-text summary: first flags, how often each check failed, stats that were missing."""
        counts = {name: sum(name in f for f in self.failures) for name in self.checks}
        lines = [f"{len(self.history)} iterations checked, preflight probes failed: {len(self.preflight_failures)}"]
        for name, it in self.first_flags():
            where = "preflight" if it == PREFLIGHT else f"iteration {it}"
            times = f"{counts[name]}/{len(self.history)} iterations" if name in counts else "probe"
            lines.append(f"  FAIL {name:<46s} first at {where:<12s} ({times})")
        for name, stat in self.missing.items():
            lines.append(f"  SKIP {name:<46s} missing stat {stat!r}")
        if self.quiet and not self.missing:
            lines.append("  all checks pass")
        return "\n".join(lines)

    # -- internals -----------------------------------------------------------------------------

    def _passes(self, name, ok, stats) -> bool:
        """Run one check; a missing or non-numeric stat skips it (recorded in self.missing)."""
        try:
            return bool(ok(stats, self.cfg))
        except KeyError as err:
            self.missing.setdefault(name, err.args[0])
        except TypeError as err:
            self.missing.setdefault(name, f"not a number ({err})")
        return True

    def _record(self, iteration: int, failed: list[str]) -> None:
        for name in failed:
            self.first_failure.setdefault(name, iteration)
        if failed and self.strict:
            raise HealthCheckFailed(iteration, failed)


# ----------------------------------------------------------------------------------------------
# Pictures: a dashboard of the logged statistics, and a map of which checks fired when.

DASHBOARD = {
    # stat: y scale; the shaded healthy band is the STATS row's range
    "reward": "linear", "zero_var_groups": "linear", "adv_nonfinite": "linear", "adv_group_mean": "symlog",
    "logprob_gap": "symlog", "ratio_first_maxdev": "symlog", "ratio_last_maxdev": "symlog",
    "clip_frac_pos": "linear", "clip_frac_neg": "linear", "kl": "linear", "entropy": "linear",
    "grad_norm": "log", "loss": "linear", "nonfinite_steps": "linear",
}
"""the dashboard's panels in order; a shaded band is the range the corresponding check accepts"""


def plot_stat(ax, history, key, *, color, label=None):
    """One stat per iteration; non-finite values drawn as 'x' on the top edge. -> count of non-finite"""
    ys = [float(s[key]) for s in history]
    ax.plot(range(len(ys)), [y if math.isfinite(y) else math.nan for y in ys], color=color, label=label, lw=1.2)
    bad = [i for i, y in enumerate(ys) if not math.isfinite(y)]
    if bad:
        ax.plot(bad, [0.96] * len(bad), "x", color=color, ms=4, transform=ax.get_xaxis_transform())
    return len(bad)


def plot_dashboard(histories: dict, colors: dict, *, keys=None, ncols: int = 4, figsize=(10.0, 8.0)):
    """A grid with one panel per stat (see DASHBOARD), one line per labelled history, healthy band shaded (the part
    in view); the legend in the place of the empty panels (below the grid when there is none). 10 inches wide: a
    notebook shows it unscaled, so 8-point tick labels stay legible.

    histories {label: list of stats dicts}; colors {label: colour}. -> fig, {key: count of non-finite per label}
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.transforms import Bbox

    keys = list(DASHBOARD) if keys is None else keys
    nrows = -(-len(keys) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False)  # fixed margins: layout engines are slow
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.06, top=0.96, hspace=0.4, wspace=0.3)
    nonfinite = {}
    for ax, key in zip(axes.flat, keys, strict=False):
        scale, row = DASHBOARD[key], STATS[key]
        pad = 0.5 * (row.lo == row.hi)  # a band of one integer value gets a visible width
        band = None if math.isinf(row.lo) and math.isinf(row.hi) else (row.lo - pad, row.hi + pad)
        nonfinite[key] = {label: plot_stat(ax, h, key, color=colors[label], label=label)
                          for label, h in histories.items()}
        if scale == "symlog":  # linear below 1e-8, so exact zeros are drawn; log above
            top = max([1.0] + [3 * float(s[key]) for h in histories.values() for s in h if math.isfinite(s[key])])
            ax.set_yscale("symlog", linthresh=1e-8)
            ax.set_ylim(-1e-9, top)
            decades = range(-8, math.ceil(math.log10(top)) + 1, 3)  # few fixed ticks: tick layout is the slow part
            ax.set_yticks([0.0, *(10.0**d for d in decades)], ["0", *(f"1e{d}" for d in decades)])
            ax.minorticks_off()
        elif scale == "log":
            ax.set_yscale("log")
            ax.minorticks_off()
        if band is not None:
            ylim = ax.get_ylim()
            lo, hi = max(band[0], min(ylim)), min(band[1], max(ylim))  # the part in view: no corner off the axes
            if lo < hi:
                ax.axhspan(lo, hi, color="#2ca02c", alpha=0.12, lw=0)
            ax.set_ylim(ylim)
        ax.set_title(key, fontsize=10)
        ax.tick_params(labelsize=8)
    spare = axes.flat[len(keys):]
    for ax in spare:
        ax.set_visible(False)
    for ax in axes.flat[max(0, len(keys) - ncols):len(keys)]:
        ax.set_xlabel("iteration", fontsize=9)
    handles, _ = axes.flat[0].get_legend_handles_labels()
    band_patch = Patch(color="#2ca02c", alpha=0.12, label="range the check accepts")
    if len(spare):  # in the empty panels' place, clear of every line
        box = Bbox.union([ax.get_position() for ax in spare])
        fig.legend(handles=[*handles, band_patch], fontsize=10, loc="center", bbox_to_anchor=box.bounds)
    else:  # no empty panel: below the grid
        fig.legend(handles=[*handles, band_patch], fontsize=10, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncols=len(handles) + 1)
    return fig, nonfinite


def failure_matrix(monitor: HealthMonitor, upto: int | None = None):
    """(checks, iterations) 0/1 array of failures for iterations 0..upto (NaN after). -> names, array"""
    import numpy as np

    names = list(monitor.checks)
    n = len(monitor.failures)
    matrix = np.full((len(names), n), np.nan)
    for it, failed in enumerate(monitor.failures[: n if upto is None else upto + 1]):
        matrix[:, it] = [name in failed for name in names]
    return names, matrix


def failure_map(ax, monitor: HealthMonitor, *, color: str, show_names: bool = True, animated: bool = True):
    """Draw the map of failed checks (rows) by iteration (columns) once; -> update(upto), which redraws it
    in place for iterations 0..upto (a frame marks `upto`) and returns the checks failing at `upto`.

    What update() changes (the map, the row separators on top of it, the frame, the count above the axes)
    is animated=True, so a live_plot redraw blits it over the unchanged ticks and labels; animated=False for a
    static figure (a plain draw skips animated artists)."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Rectangle

    names, matrix = failure_matrix(monitor)
    n = matrix.shape[1]
    cmap = ListedColormap(["#e8f3e8", color]).with_extremes(bad="white")  # opaque "not yet": covers old frames
    image = ax.imshow(matrix, aspect="auto", cmap=cmap, vmin=0, vmax=1, interpolation="nearest", animated=animated)
    rows = [i + 0.5 for i in range(len(names) - 1)]  # one line with breaks: its vertices are the separators' ends
    ax.plot([x for _ in rows for x in (-0.5, n - 0.5, math.nan)], [y for y in rows for _ in range(3)],
            color="white", lw=1, animated=animated)
    frame = ax.add_patch(Rectangle((-0.5, -0.5), 1, len(names), fill=False, lw=1.5, animated=animated))
    count = ax.text(1.0, 1.01, "", transform=ax.transAxes, ha="right", va="bottom", fontsize=8, animated=animated)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.tick_params(axis="y", labelleft=show_names)
    ax.set_xticks(range(0, n, 5))
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel(f"iteration  (preflight: {len(monitor.preflight_failures)} probes fail)", fontsize=8)

    def update(upto: int) -> list[str]:
        image.set_data(failure_matrix(monitor, upto)[1])
        frame.set_x(upto - 0.5)
        failed_now = monitor.failures[upto] if upto < len(monitor.failures) else []
        count.set_text(f"iteration {upto}: {len(failed_now)} checks fail")
        return failed_now

    return update
