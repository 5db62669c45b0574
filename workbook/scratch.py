"""From scratch: stub the spec's functions in a copy of the trainer, then grade a learner's version
sentence by sentence of the spec (seed 000).

    make scratch                      -> practice/scratch_<N>.py with the three public functions stubbed
    make scratch FUNCS=masked_mean    -> other catalog sites instead (FUNCS=all: every site)
    make grade FILE=practice/scratch_<N>.py   (or: python -m workbook.scratch grade FILE)

The hand-out is the mock round's (workbook/practice.py) with no bug left in: grpo_buggy.py with every
catalogued function taken from grpo_fixed.py (`# FIX` comments stripped). Each chosen function is then
replaced by a stub that keeps its signature and its docstring (plus, for the three spec functions, the
spec sentences it is graded on) and raises NotImplementedError.

Grading prints one line per spec sentence, `pass` or `fail`; a failure shows the smallest input
that exposes it with "yours" beside "expected" (the Tensor-Puzzles habit: it prints, it never
raises). Each sentence is checked on a fresh grpo_fixed copy with only the learner's versions of the
sentence's own functions swapped in (`swap.fixed_with`), so a mistake is charged to the sentence it
breaks and to nothing else. Sites outside the spec's three are graded by the catalog tests that name
their bug (tests/test_catalog.py). When no stub raises NotImplementedError any more, the learner's
functions train the default run, and the final reward is printed beside the fixed twin's.
Exit codes of `grade`, and the bad-input handling (one `cannot grade ...` line on stderr: missing file,
syntax error, import error, a public function renamed or its signature changed), are the mock grader's;
its splicer, time limit and API check are reused from workbook/practice.py.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import inspect
import itertools
import logging
import math
import re
import sys
import textwrap
import threading
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import grpo_fixed
from workbook import catalog, practice
from workbook.swap import fixed_with

ROOT = catalog.ROOT
PRACTICE_DIR = ROOT / "practice"
SPEC_FUNCS = ("sample_from_logits", "group_advantage", "grpo_loss")
SITES = tuple(dict.fromkeys(b.function for b in catalog.BUGS))  # catalog order, each site once
FUNCS_HEADER = "# scratch-funcs:"
NOT_WRITTEN = "not written yet"
CannotGrade = practice.CannotGrade  # the file cannot be graded: one clear line, exit code 2
TRAIN_SECONDS = 300.0  # time limit of the training run (about 5 s on a quiet 2-core machine)


# ----------------------------------------------------------------------------------------------
# Source splicing (ast): replace top-level functions of a module's source text


def function_nodes(source: str) -> dict[str, ast.FunctionDef]:
    """Top-level `def`s of `source` by name."""
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}


def splice(source: str, replacements: dict[str, str]) -> str:
    """`source` with each named top-level function (its `def` line to its last line; decorators stay)
    replaced by the given text. KeyError for a name that is not a top-level function."""
    try:
        return practice.replace_functions(
            source, {name: text.rstrip("\n") + "\n" for name, text in replacements.items()}, decorators=False)
    except ValueError as error:
        raise KeyError(str(error)) from None


def function_header(source: str, node: ast.FunctionDef) -> str:
    """The `def name(...):` text of `node` exactly as written (multi-line signatures included)."""
    lines = source.splitlines()
    first_body = node.body[0].lineno
    if first_body > node.lineno:
        return "\n".join(lines[node.lineno - 1 : first_body - 1])
    return f"def {node.name}({ast.unparse(node.args)}):"  # body on the def line: rebuild it


def handout_source() -> str:
    """The hand-out with no bug left: grpo_buggy.py with every catalog site from grpo_fixed.py (practice's
    splicer, which strips the `# FIX` comments and brings along the helpers a fixed function needs)."""
    return practice.splice(practice.HANDOUT.read_text(), practice.FIXED.read_text(), list(SITES))


# ----------------------------------------------------------------------------------------------
# Checks: one spec sentence = a few cases, smallest first; a case is an input and its expected result


@dataclass(frozen=True)
class Case:
    """One input: `yours(module)` computes the learner's value, `expected` the spec's, `same` compares."""

    label: str
    yours: Callable[[types.ModuleType], Any]
    expected: Any
    same: Callable[[Any, Any], bool]
    show_expected: str | None = None  # how to print `expected`, when its repr is not the point


@dataclass(frozen=True)
class Sentence:
    key: str
    funcs: tuple[str, ...]
    text: str
    cases: Callable[[], list[Case]]


@dataclass(frozen=True)
class Outcome:
    """One graded line: ok, or the first failing case with what the learner's code gave."""

    key: str
    funcs: tuple[str, ...]
    title: str
    ok: bool
    not_written: bool = False
    case: str = ""
    yours: str = ""
    expected: str = ""


class Raised:
    """What a call raised, kept as a value so a check can compare it and print it."""

    def __init__(self, error: BaseException):
        self.error = error

    def __repr__(self) -> str:
        message = str(self.error).splitlines()[0] if str(self.error) else ""
        return f"raises {type(self.error).__name__}" + (f": {message[:100]}" if message else "")


def show(value: Any) -> str:
    """A short, readable rendering of a check's value (tensors as lists, 4 significant digits)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.numel() > 12:
            return f"tensor of shape {tuple(value.shape)}"
        value = value.tolist()
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(show(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value) if not isinstance(value, str) else value


def call(fn: Callable[[], Any]) -> Any:
    """fn() or the exception it raised, as a Raised value (never raises, except KeyboardInterrupt)."""
    try:
        return fn()
    except Exception as error:  # the learner's code may raise anything: it becomes the printed value
        return Raised(error)


def timed(fn: Callable[[types.ModuleType], Any], module: types.ModuleType) -> Any:
    """fn(module) under the mock grader's per-test time limit (an endless loop must not hang the grader)."""
    with limited(practice.TEST_SECONDS):
        return fn(module)


def not_implemented(value: Any) -> bool:
    return isinstance(value, Raised) and isinstance(value.error, NotImplementedError)


def close(rtol=1e-6, atol=1e-12):
    """Comparison: same shape and within tolerance (exceptions and non-numbers never compare equal)."""

    def same(yours, expected) -> bool:
        try:
            y = torch.as_tensor(yours, dtype=torch.float64)
            e = torch.as_tensor(expected, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            return False
        return y.shape == e.shape and bool(torch.allclose(y, e, rtol=rtol, atol=atol))

    return same


def exactly(yours, expected) -> bool:
    return not isinstance(yours, Raised) and yours == expected


def raises_value_error(yours, _expected) -> bool:
    return isinstance(yours, Raised) and isinstance(yours.error, ValueError)


def run_sentence(sentence_title: str, key: str, funcs: tuple[str, ...], cases: list[Case],
                 module: types.ModuleType) -> Outcome:
    """The first case (smallest first) whose value differs from the expected one, or a pass."""
    for case in cases:
        yours = call(lambda c=case: timed(c.yours, module))
        if not_implemented(yours):
            return Outcome(key, funcs, sentence_title, False, True, case.label, show(yours), NOT_WRITTEN)
        ok = call(lambda c=case, y=yours: bool(c.same(y, c.expected)))
        if ok is not True:
            expected = case.show_expected or show(case.expected)
            return Outcome(key, funcs, sentence_title, False, False, case.label, show(yours), expected)
    return Outcome(key, funcs, sentence_title, True)


# ----------------------------------------------------------------------------------------------
# The spec's sentences (seed 000), each with its cases


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def frequencies(draws: torch.Tensor, vocab: int) -> torch.Tensor:
    """Empirical frequency of each token id over all draws. (V,)"""
    return torch.bincount(draws.flatten().long(), minlength=vocab).double() / draws.numel()


def within_binomial(n: int, sigmas: float = 5.0):
    """|frequency - p| <= sigmas * sqrt(p (1 - p) / n) for every token (a correct sampler fails ~1e-6 of seeds)."""

    def same(freq, probs) -> bool:
        if not isinstance(freq, torch.Tensor) or freq.shape != probs.shape:
            return False
        return bool(((freq - probs).abs() <= sigmas * torch.sqrt(probs * (1 - probs) / n) + 1e-12).all())

    return same


def softmax_cases() -> list[Case]:
    """Sample 1 token per row from many identical rows: needs no replacement, so only softmax is tested."""
    cases = []
    for logits, n in (([1.0, 0.0, -1.0], 6000), ([1001.0, 1000.0], 4000)):
        row = torch.tensor(logits)
        probs = torch.softmax(row.double(), -1)
        cases.append(Case(
            f"logits {logits} in each of {n} rows (({n}, {len(logits)})), 1 draw per row: token frequencies",
            lambda m, row=row, n=n: frequencies(m.sample_from_logits(row.expand(n, -1).clone(), 1,
                                                                     generator=seeded(0)), len(row)),
            probs, within_binomial(n), show_expected=f"softmax {show(probs)} (within 5 binomial std)"))
    return cases


def replacement_cases() -> list[Case]:
    def repeated_rows(m):
        logits = torch.tensor([0.3, 0.0]).expand(200, -1).clone()  # (200, 2)
        draws = m.sample_from_logits(logits, 2, generator=seeded(1))  # (200, 2)
        return int((draws[:, 0] == draws[:, 1]).sum())

    return [
        Case("logits [1, 0], num_samples=3: the draws",
             lambda m: m.sample_from_logits(torch.tensor([1.0, 0.0]), 3, generator=seeded(0)).tolist(),
             "3 token ids in {0, 1}", lambda y, _: isinstance(y, list) and len(y) == 3 and set(y) <= {0, 1}),
        Case("logits [0.3, 0] in each of 200 rows, num_samples=2: rows drawing the same token twice",
             repeated_rows, "about 100 of 200 (over 60)", lambda y, _: isinstance(y, int) and y > 60),
    ]


def generator_cases() -> list[Case]:
    logits = torch.tensor([0.5, 0.25, 0.0, -0.25]).expand(8, -1).clone()  # (8, V=4): 1 draw per row, no replacement

    def same_seed_same_draws(m):
        torch.manual_seed(1)
        a = m.sample_from_logits(logits, 1, generator=seeded(123)).flatten().tolist()
        torch.manual_seed(2)  # a different global RNG state: only the supplied generator may decide
        b = m.sample_from_logits(logits, 1, generator=seeded(123)).flatten().tolist()
        return "equal" if a == b else f"{a} then {b}"

    def generator_advances(m):
        g = seeded(7)
        before = g.get_state()
        m.sample_from_logits(logits, 1, generator=g)
        return "advanced" if not torch.equal(g.get_state(), before) else "unchanged (not used)"

    def global_rng_untouched(m):
        before = torch.get_rng_state()
        m.sample_from_logits(logits, 1, generator=seeded(7))
        return "untouched" if torch.equal(torch.get_rng_state(), before) else "advanced (used instead)"

    rows = "logits [0.5, 0.25, 0, -0.25] in each of 8 rows"
    return [
        Case(f"{rows}, two calls with generators seeded 123 (global RNG reseeded between)",
             same_seed_same_draws, "equal", exactly),
        Case(f"{rows}, one call: the supplied generator's state", generator_advances, "advanced", exactly),
        Case(f"{rows}, one call with a generator: the global RNG state", global_rng_untouched, "untouched", exactly),
    ]


def reference_advantage(rewards, eps=1e-8) -> torch.Tensor:
    """(r - mean) / (population std + eps) in float64, for small well-scaled groups."""
    r = torch.tensor(rewards, dtype=torch.float64)
    centered = r - r.mean()
    return centered / (centered.pow(2).mean().sqrt() + eps)


def as_list(value):
    return value.tolist() if isinstance(value, torch.Tensor) else value


def population_std_cases() -> list[Case]:
    return [Case(f"rewards {r}", lambda m, r=r: m.group_advantage(r), reference_advantage(r), close(1e-6))
            for r in ([0.0, 1.0], [1.0, 2.0, 4.0])]


def eps_cases() -> list[Case]:
    def inverse_gap(m):
        """1/A_1(eps=1) - 1/A_1(eps=3) = ((std + 1) - (std + 3)) / 0.5 = -4 whatever std is, iff eps adds to std."""
        return 1 / float(m.group_advantage([0.0, 1.0], 1.0)[1]) - 1 / float(m.group_advantage([0.0, 1.0], 3.0)[1])

    def finite(y, _):
        return isinstance(y, torch.Tensor) and bool(torch.isfinite(y).all())

    def finite_and_small(y, _):
        return finite(y, _) and float(y.abs().max()) < 1e-7

    return [
        Case("rewards [0, 1]: 1/A_1 at eps=1 minus 1/A_1 at eps=3", inverse_gap, -4.0, close(1e-9),
             show_expected="-4 (= ((std + 1) - (std + 3)) / 0.5: eps is added to the std)"),
        Case("rewards [0.5, 0.5] (zero variance)", lambda m: m.group_advantage([0.5, 0.5]), None, finite,
             show_expected="finite values"),
        Case("rewards [1, 1 + 2**-52] (std 1.1e-16, far below eps)", lambda m: m.group_advantage([1.0, 1.0 + 2**-52]),
             None, finite_and_small, show_expected="finite, |A| < 1e-7 (about 1.1e-8: the std is far below eps)"),
    ]


def validation_cases() -> list[Case]:
    bad_rewards = [[], [float("nan"), 0.0], [float("inf"), 0.0], ["1.0", 2.0], [1.0, 2j], [10**400, 0]]
    bad_eps = [0.0, -1e-8, float("nan"), float("inf")]
    cases = [Case(f"rewards {r!r}", lambda m, r=r: m.group_advantage(r), None, raises_value_error,
                  show_expected="raises ValueError") for r in bad_rewards]
    cases += [Case(f"rewards [0, 1], eps={e!r}", lambda m, e=e: m.group_advantage([0.0, 1.0], e), None,
                   raises_value_error, show_expected="raises ValueError") for e in bad_eps]
    return cases


def proportional_to(reference: torch.Tensor):
    """Finite and a positive multiple of `reference` (the std definition is another sentence's business)."""

    def same(yours, _expected) -> bool:
        if not isinstance(yours, torch.Tensor) or yours.shape != reference.shape or not torch.isfinite(yours).all():
            return False
        yours = yours.double()
        k = int(reference.abs().argmax())
        scale = yours[k] / reference[k]  # > 0 for a positive multiple
        return bool(scale > 0) and bool(torch.allclose(yours, scale * reference, rtol=1e-9,
                                                       atol=1e-12 * float(yours.abs().max())))

    return same


def overflow_cases() -> list[Case]:
    groups = {  # reward group -> its advantage from the group divided by its scale (exact in float64 here)
        (1.7e308, -1.7e308): reference_advantage([1.0, -1.0]),
        (1.7e308, 1.7e308, -1e308): reference_advantage([1.7, 1.7, -1.0]),
        (1e300, 1.0, -1e300): reference_advantage([1.0, 0.0, -1.0]),
    }
    return [Case(f"rewards {list(r)}", lambda m, r=r: m.group_advantage(list(r)), ref, proportional_to(ref),
                 show_expected=f"finite, proportional to {show(ref)}") for r, ref in groups.items()]


def constant_cases() -> list[Case]:
    groups = [[1.0], [0.5, 0.5, 0.5, 0.5], [0.1, 0.1, 0.1], [1.7976931348623157e308] * 3]
    return [Case(f"rewards {r}", lambda m, r=r: as_list(m.group_advantage(r)), [0.0] * len(r), exactly)
            for r in groups]


def loss_of(m, ratios, advantages, mask=None, clip=0.2):
    """grpo_loss with logprobs = log(ratios), old_logprobs = 0 (float64), so each token's ratio is given."""
    ratios = torch.tensor(ratios, dtype=torch.float64)  # (N, T)
    mask = torch.ones_like(ratios, dtype=torch.bool) if mask is None else torch.tensor(mask, dtype=torch.bool)
    loss = m.grpo_loss(ratios.log(), torch.zeros_like(ratios), torch.tensor(advantages, dtype=torch.float64),
                       mask, clip)
    return float(loss)


def ratio_cases() -> list[Case]:
    """Ratios inside the default window [0.8, 1.2] and A = +1: no clipping is involved, wherever the clip goes."""
    def three_tokens(m):
        logprobs = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64)
        old = torch.tensor([[-1.1, -1.85, -0.5]], dtype=torch.float64)
        return float(m.grpo_loss(logprobs, old, torch.tensor([1.0], dtype=torch.float64),
                                 torch.ones(1, 3, dtype=torch.bool)))

    def one_token(m):
        return float(m.grpo_loss(torch.tensor([[0.15]], dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64),
                                 torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 1, dtype=torch.bool)))

    return [
        Case("logprob 0.15, old 0, A = +1: loss", one_token, -math.exp(0.15), close()),
        Case("logprobs [-1, -2, -0.5], old [-1.1, -1.85, -0.5], A = +1: loss", three_tokens,
             -(math.exp(0.1) + math.exp(-0.15) + 1.0) / 3, close()),
    ]


def masking_cases() -> list[Case]:
    def junk(m):
        logprobs = torch.tensor([[0.1, float("nan")]], dtype=torch.float64)
        return float(m.grpo_loss(logprobs, torch.tensor([[0.0, float("-inf")]], dtype=torch.float64),
                                 torch.tensor([1.0], dtype=torch.float64), torch.tensor([[True, False]])))

    return [
        Case("ratios [[1.1, 5.0]], mask [[1, 0]], A = +1: loss", lambda m: loss_of(m, [[1.1, 5.0]], [1.0], [[1, 0]]),
             -1.1, close()),
        Case("ratios [[1.1, 0.9, 5.0], [1.0, 7.0, 7.0]], mask [[1, 1, 0], [1, 0, 0]], A = [+1, -1]: loss",
             lambda m: loss_of(m, [[1.1, 0.9, 5.0], [1.0, 7.0, 7.0]], [1.0, -1.0], [[1, 1, 0], [1, 0, 0]]),
             -(1.1 + 0.9 - 1.0) / 3, close()),
        Case("logprobs [[0.1, nan]], old [[0, -inf]], mask [[1, 0]], A = +1: loss", junk, -math.exp(0.1), close()),
    ]


def min_cases() -> list[Case]:
    return [  # A = +1 only: with |A| = 1 and A > 0, clipping the product or the ratio is the same thing
        Case("ratio 1.5, A = +1, clip 0.2: loss", lambda m: loss_of(m, [[1.5]], [1.0]), -1.2, close()),
        Case("ratio 0.5, A = +1, clip 0.2: loss", lambda m: loss_of(m, [[0.5]], [1.0]), -0.5, close()),
        Case("ratios [[1.5, 0.5]], A = +1, clip 0.2: loss", lambda m: loss_of(m, [[1.5, 0.5]], [1.0]), -0.85,
             close()),
    ]


def clip_order_cases() -> list[Case]:
    def gradient(m):
        logprobs = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)  # ratio 1 on two tokens
        m.grpo_loss(logprobs, torch.zeros(1, 2, dtype=torch.float64), torch.tensor([2.0], dtype=torch.float64),
                    torch.ones(1, 2, dtype=torch.bool)).backward()
        return logprobs.grad

    return [
        Case("ratio 0.5, A = -1, clip 0.2: loss", lambda m: loss_of(m, [[0.5]], [-1.0]), 0.8, close()),
        Case("ratio 1.5, A = +2, clip 0.2: loss", lambda m: loss_of(m, [[1.5]], [2.0]), -2.4, close()),
        Case("ratios [[1, 1]], A = +2: d loss / d logprobs", gradient, [[-1.0, -1.0]], close()),
    ]


def all_masked_cases() -> list[Case]:
    def all_masked(values):
        def run(m):
            logprobs = torch.tensor([values], dtype=torch.float64)
            return float(m.grpo_loss(logprobs, torch.zeros_like(logprobs), torch.tensor([1.0], dtype=torch.float64),
                                     torch.zeros_like(logprobs, dtype=torch.bool)))
        return run

    return [
        Case("logprobs [[0.3]], mask [[0]]: loss", all_masked([0.3]), 0.0, exactly),
        Case("logprobs [[nan, -inf]], mask [[0, 0]]: loss", all_masked([float("nan"), float("-inf")]), 0.0, exactly),
    ]


def independence_cases() -> list[Case]:
    def parameters(m):
        loss_has_eps = "eps" in inspect.signature(m.grpo_loss).parameters
        adv_has_clip = "clip" in inspect.signature(m.group_advantage).parameters
        return f"grpo_loss {'has' if loss_has_eps else 'has no'} eps, group_advantage " \
               f"{'has' if adv_has_clip else 'has no'} clip"

    def eps_used(m):
        a, b = m.group_advantage([0.0, 1.0], 1.0), m.group_advantage([0.0, 1.0], 1e-8)
        return "differ" if not torch.equal(torch.as_tensor(a), torch.as_tensor(b)) else "equal"

    return [
        Case("ratio 1.4, A = +1, clip 0.5: loss (the radius is the clip argument)",
             lambda m: loss_of(m, [[1.4]], [1.0], clip=0.5), -1.4, close()),
        Case("rewards [0, 1] at eps=1 and eps=1e-8 (eps is its own knob): the advantages", eps_used, "differ", exactly),
        Case("the two signatures", parameters, "grpo_loss has no eps, group_advantage has no clip", exactly),
    ]


SENTENCES = [
    Sentence("softmax", ("sample_from_logits",),
             "Convert logits to probabilities with softmax before sampling tokens.", softmax_cases),
    Sentence("replacement", ("sample_from_logits",), "Sampling uses replacement", replacement_cases),
    Sentence("generator", ("sample_from_logits",),
             "and must pass the supplied PyTorch random generator through unchanged.", generator_cases),
    Sentence("population-std", ("group_advantage",),
             "Advantage normalization uses the population standard deviation (divide squared deviations by the "
             "group size).", population_std_cases),
    Sentence("eps", ("group_advantage",),
             "For each prompt group, compute A_i = (r_i - mean(r)) / (std(r) + eps) using a positive epsilon so "
             "zero-variance groups remain finite.", eps_cases),
    Sentence("validation", ("group_advantage",),
             "Rewards must be a nonempty list of finite real numbers representable in float64, and epsilon must be "
             "positive and finite. Reject invalid values with ValueError.", validation_cases),
    Sentence("overflow", ("group_advantage",),
             "Avoid overflow in the mean and variance even when individual rewards are large;", overflow_cases),
    Sentence("constant", ("group_advantage",), "constant-reward groups return zeros.", constant_cases),
    Sentence("ratio", ("grpo_loss",),
             "Compute the per-token importance ratio as exp(current_logprob - old_logprob).", ratio_cases),
    Sentence("masking", ("grpo_loss",),
             "Exclude masked tokens from both the loss sum and averaging denominator.", masking_cases),
    Sentence("min", ("grpo_loss",),
             "Compute the negative mean of the minimum between the unclipped and clipped ratio times advantage.",
             min_cases),
    Sentence("clip-before-A", ("grpo_loss",),
             "Clipping must occur before multiplication by the advantage because negative advantages reverse which "
             "surrogate is smaller.", clip_order_cases),
    Sentence("all-masked", ("grpo_loss",), "Return a finite zero loss if every token is masked.", all_masked_cases),
    Sentence("independent", ("grpo_loss", "group_advantage"),
             "Keep the clipping radius and normalization epsilon independent.", independence_cases),
]


# ----------------------------------------------------------------------------------------------
# Making a scratch file


def parse_funcs(funcs: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """FUNCS -> site names in catalog order: None/'' = the spec's three, 'all' = every catalog site,
    else names separated by commas or spaces. ValueError for an unknown name."""
    if funcs is None or (isinstance(funcs, str) and not funcs.strip()):
        return SPEC_FUNCS
    names = re.split(r"[,\s]+", funcs.strip()) if isinstance(funcs, str) else list(funcs)
    names = [n for n in names if n]
    if names == ["all"]:
        return SITES
    unknown = [n for n in names if n not in SITES]
    if unknown:
        raise ValueError(f"unknown FUNCS {unknown}; choose from the catalog's sites {list(SITES)} or 'all'")
    return tuple(n for n in SITES if n in names)


def sentences_of(func: str) -> list[Sentence]:
    return [s for s in SENTENCES if func in s.funcs]


def stub_text(source: str, node: ast.FunctionDef, docstring: str, scratch_name: str) -> str:
    """`def ...:` as written in `source`, the docstring (plus the spec sentences it is graded on), a raise."""
    doc = inspect.cleandoc(docstring)
    graded = sentences_of(node.name)
    if graded:
        doc += "\n\nSpec (seed 000), graded one sentence at a time:\n" + "\n".join(
            textwrap.fill(s.text, 104, initial_indent="- ", subsequent_indent="  ") for s in graded)
    else:
        doc += "\n\nGraded by the catalog's tests for this function (tests/test_catalog.py)."
    body = textwrap.indent(f'"""{doc}\n"""\n', "    ")
    raise_line = f'    raise NotImplementedError("{node.name}: write it, then make grade FILE={scratch_name}")\n'
    return function_header(source, node) + "\n" + body + raise_line


def scratch_source(funcs: tuple[str, ...], scratch_name: str, number: int) -> str:
    """The hand-out text with `funcs` stubbed (signature and grpo_fixed's docstring kept), under a header
    that says what to do and names the functions (the `# scratch-funcs:` line the grader reads)."""
    source = handout_source()
    spec_nodes, nodes = function_nodes(practice.FIXED.read_text()), function_nodes(source)
    missing = [f for f in funcs if f not in nodes or f not in spec_nodes]
    if missing:
        raise ValueError(f"the hand-out has no top-level function {missing}")
    stubs = {f: stub_text(source, nodes[f], ast.get_docstring(spec_nodes[f]) or "", scratch_name) for f in funcs}
    header = (
        f"# Scratch round {number}: write every function below that raises NotImplementedError.\n"
        "# Each keeps its signature and its docstring (the spec it is graded on); the rest of the trainer is\n"
        "# correct. Grade it as often as you like (one line per spec sentence, then a training run):\n"
        f"#     make grade FILE={scratch_name}\n"
        f"{FUNCS_HEADER} {', '.join(funcs)}\n"
    )
    return header + splice(source, stubs)


def next_scratch_path(out_dir: Path) -> tuple[Path, int]:
    """practice/scratch_<N>.py with N one more than the largest existing N (1 for the first)."""
    taken = [int(m.group(1)) for p in out_dir.glob("scratch_*.py") if (m := re.fullmatch(r"scratch_(\d+)\.py", p.name))]
    number = max(taken, default=0) + 1
    return out_dir / f"scratch_{number}.py", number


def new_scratch(funcs=None, out_dir: Path | str = PRACTICE_DIR) -> Path:
    """Write the next practice/scratch_<N>.py with `funcs` (see parse_funcs) stubbed; return its path."""
    names = parse_funcs(funcs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path, number = next_scratch_path(out_dir)
    shown = display_path(path)
    path.write_text(scratch_source(names, shown, number))
    return path


def display_path(path: Path) -> str:
    """The path relative to the repository when it is inside it (what `make grade FILE=` expects)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------------------------
# Loading and grading a scratch file

_load_counter = itertools.count()


def declared_funcs(source: str) -> tuple[str, ...]:
    """The functions the file's `# scratch-funcs:` line names (the spec's three if the line is gone)."""
    for line in source.splitlines():
        if line.startswith(FUNCS_HEADER):
            return parse_funcs(line[len(FUNCS_HEADER):])
    return SPEC_FUNCS


def load_scratch(path: Path | str) -> tuple[types.ModuleType, tuple[str, ...]]:
    """Import the learner's file as a fresh module; CannotGrade with one clear line (the mock grader's
    wording) if it is missing, not Python, fails to import, or lost a public function or signature."""
    practice._warm_up()  # the first Adam imports torch._dynamo: do it outside any time limit, since an
    # import interrupted by the alarm would leave torch._dynamo half-initialised for the rest of the process
    path = Path(path)
    source = practice.read_python(path)
    try:
        funcs = declared_funcs(source)
    except ValueError as error:
        raise CannotGrade(f"{path}: the {FUNCS_HEADER} line: {error}") from None
    name = f"scratch_under_grading_{next(_load_counter)}"
    try:
        with contextlib.redirect_stdout(sys.stderr), limited(practice.TEST_SECONDS):
            module = practice.load_module(name, source, str(path))
    except Exception as error:  # the learner's top-level code: any error means it cannot be graded
        raise CannotGrade(f"{path}: importing it raised {error_line(error, str(path))}") from None
    finally:
        sys.modules.pop(name, None)
    problem = practice.api_problem(module, handout_module(), str(path))
    if problem:
        raise CannotGrade(problem)
    return module, funcs


def error_line(error: BaseException, filename: str) -> str:
    """`Type: message (in function, line n)`, with the innermost frame of `filename` it passed through."""
    info = practice.failure(error, filename)
    where = f" (in {info['where'][0]}, line {info['where'][1]})" if info["where"] else ""
    return f"{info['type']}: {info['message']}{where}"


@functools.cache
def handout_module() -> types.ModuleType:
    """The hand-out with no bug, imported once: the public names and signatures a scratch file must keep."""
    return practice.load_module("scratch_handout", handout_source(), "<scratch hand-out>")


@contextlib.contextmanager
def limited(seconds: float):
    """practice.time_limit (SIGALRM), only where signals work: the main thread."""
    if threading.current_thread() is threading.main_thread():
        with practice.time_limit(seconds):
            yield
    else:
        yield


def graded_copy(learner: types.ModuleType, funcs: tuple[str, ...], label: str) -> types.ModuleType:
    """A fresh grpo_fixed with the learner's versions of `funcs` swapped in (`swap.fixed_with`); the
    learner's own extra top-level names (helpers, imports) are added so their functions find them."""
    module = fixed_with("scratch_" + label, **{f: getattr(learner, f) for f in funcs})
    for name, value in vars(learner).items():
        if not name.startswith("__") and name not in vars(module):
            setattr(module, name, value)
    return module


def sentence_outcomes(learner: types.ModuleType) -> list[Outcome]:
    """One Outcome per spec sentence, each on a copy with only that sentence's functions swapped in."""
    outcomes, copies = [], {}
    for sentence in SENTENCES:
        if sentence.funcs not in copies:
            copies[sentence.funcs] = graded_copy(learner, sentence.funcs, "_".join(sentence.funcs))
        module = copies[sentence.funcs]
        with quiet_torch():
            outcomes.append(run_sentence(sentence.text, sentence.key, sentence.funcs, sentence.cases(), module))
    return outcomes


def catalog_test_module():
    """tests/test_catalog.py, imported by path: its test_Bn_* functions are the checks for the other sites."""
    name = "workbook_scratch_catalog_tests"
    if name not in sys.modules:
        path = ROOT / "tests" / "test_catalog.py"
        practice.load_module(name, path.read_text(), str(path))
    return sys.modules[name]


def catalog_outcomes(learner: types.ModuleType, funcs: tuple[str, ...]) -> list[Outcome]:
    """For each non-spec function in `funcs`: one line per catalog test naming its bug id, run on a copy
    with the learner's versions of every tested function of that test swapped in."""
    others = [f for f in funcs if f not in SPEC_FUNCS]
    if not others:
        return []
    ids_of = {b.id: b.function for b in catalog.BUGS}
    outcomes = []
    for name, (fn, ids, params) in catalog_test_module().catalog_tests().items():
        tested = tuple(dict.fromkeys(ids_of[i] for i in sorted(ids, key=catalog.BUG_IDS.index) if ids_of[i] in others))
        if not tested:
            continue
        module = graded_copy(learner, tested, "catalog")
        title = "catalog test " + re.sub(r"^test_(B\d+_)+", "", name)  # no bug ids: they would name the bug
        outcome = Outcome(name, tested, title, True)
        for kwargs in params:
            with quiet_torch():
                result = call(lambda kw=kwargs, test=fn, m=module: timed(functools.partial(test, **kw), m))
            if isinstance(result, Raised):
                label = ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "the test's own input"
                written = not not_implemented(result)
                outcome = Outcome(name, tested, title, False, not written, label, show(result),
                                  "passes" if written else NOT_WRITTEN)
                break
        outcomes.append(outcome)
    return sorted(outcomes, key=lambda o: SITES.index(o.funcs[0]))  # stable: test names stay sorted per site


@contextlib.contextmanager
def quiet_torch():
    """Learner code may trigger torch warnings (e.g. std of one element); they would clutter the report."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ----------------------------------------------------------------------------------------------
# Training the learner's functions


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def train_run(module: types.ModuleType, **overrides) -> dict:
    """The default run (seed 0) of `module.train`, summarised; health warnings are collected, not printed."""
    handler, grpo_log = _Collect(), logging.getLogger("grpo")
    old_propagate = grpo_log.propagate
    grpo_log.addHandler(handler)
    grpo_log.propagate = False
    start = time.perf_counter()
    try:
        history = module.train(seed=0, **overrides)
    finally:
        grpo_log.removeHandler(handler)
        grpo_log.propagate = old_propagate
    summary = grpo_fixed.summarize_run(history, time.perf_counter() - start)
    summary["health_warnings"] = len(handler.messages)
    return summary


def training_outcome(learner: types.ModuleType, funcs: tuple[str, ...], **overrides) -> tuple[Outcome, str]:
    """Train the fixed trainer with all the learner's functions swapped in, and the fixed twin, on the
    default run. Fails only if training raises or produces a non-finite loss."""
    torch.set_num_threads(1)
    module = graded_copy(learner, tuple(dict.fromkeys((*SPEC_FUNCS, *funcs))), "train")
    with quiet_torch():
        with limited(TRAIN_SECONDS):
            yours = call(lambda: train_run(module, **overrides))
        fixed = train_run(fixed_with("scratch_reference"), **overrides)
    steps = fixed["steps"]
    title = f"Training: the default run (seed 0, {steps} iterations) with your functions."
    if isinstance(yours, Raised):
        return Outcome("training", funcs, title, False, False, "train(seed=0)", show(yours), "trains"), ""
    line = (f"final reward: yours {yours['final_reward']:.3f}, fixed twin {fixed['final_reward']:.3f} "
            f"(mean of the last 10 iterations); non-finite losses: yours {yours['nan_losses']}, "
            f"fixed {fixed['nan_losses']}; health warnings: yours {yours['health_warnings']}")
    ok = yours["nan_losses"] == 0
    outcome = Outcome("training", funcs, title, ok, False, "train(seed=0)",
                      f"{yours['nan_losses']} non-finite losses", "0 non-finite losses")
    return outcome, line


# ----------------------------------------------------------------------------------------------
# Report


def format_outcome(o: Outcome) -> str:
    where = "+".join(o.funcs) if len(o.funcs) <= 2 else "your functions"
    head = f"{'pass' if o.ok else 'fail'}  {where:<34} {o.title}"
    if o.ok:
        return head
    if o.not_written:
        return f"{head}  -> {NOT_WRITTEN}"
    return f"{head}\n      on {o.case}:\n      yours    {o.yours}\n      expected {o.expected}"


def grade(path, *, out=None, train: bool = True, train_overrides: dict | None = None) -> int:
    """Grade a scratch file; print one line per spec sentence (and catalog test), then a training run
    once every stub is written. Returns 0 (all pass), 1 (some fail) or 2 (cannot be graded). Never raises
    for a bad file: it prints one clear line instead."""
    err = sys.stderr if out is None else out
    out = sys.stdout if out is None else out
    try:
        learner, funcs = load_scratch(path)
    except CannotGrade as reason:
        print(f"cannot grade {reason}", file=err)
        return 2
    outcomes = sentence_outcomes(learner) + catalog_outcomes(learner, funcs)
    n_sentences = len(SENTENCES)
    n_catalog = sum(o.key.startswith("test_B") for o in outcomes)
    extra = f" and {n_catalog} catalog tests" if n_catalog else ""
    print(f"grading {Path(path).name}: {n_sentences} spec sentences (seed 000){extra}; functions to write: "
          f"{', '.join(funcs)}", file=out)
    for o in outcomes:
        print(format_outcome(o), file=out)
    not_written = still_to_write(Path(path).read_text(), funcs, outcomes)
    training_line = ""
    if not_written:
        print(f"no training run yet: {', '.join(not_written)} still to write", file=out)
    elif train:
        train_result, training_line = training_outcome(learner, funcs, **(train_overrides or {}))
        outcomes.append(train_result)
        print(format_outcome(train_result), file=out)
        if training_line:
            print(f"      {training_line}", file=out)
    failed = [o for o in outcomes if not o.ok]
    print(f"{len(outcomes) - len(failed)}/{len(outcomes)} pass" + (f", {len(failed)} fail" if failed else ""),
          file=out)
    return 1 if failed else 0


def grade_outcomes(path, *, train: bool = False) -> list[Outcome]:
    """The Outcome objects `grade` prints (for tests and notebooks); CannotGrade for a bad file."""
    learner, funcs = load_scratch(path)
    outcomes = sentence_outcomes(learner) + catalog_outcomes(learner, funcs)
    if train and not still_to_write(Path(path).read_text(), funcs, outcomes):
        outcomes.append(training_outcome(learner, funcs)[0])
    return outcomes


def is_stub(node: ast.FunctionDef) -> bool:
    """A body that is (a docstring and) nothing but `raise NotImplementedError(...)`."""
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    return (len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None
            and "NotImplementedError" in ast.unparse(body[0].exc))


def still_to_write(source: str, funcs: tuple[str, ...], outcomes: list[Outcome]) -> list[str]:
    """The functions still stubbed in the file; if none is, those whose lines raised NotImplementedError
    anyway (then no training run either: some code path is not written yet)."""
    nodes = function_nodes(source)
    stubs = [f for f in funcs if f in nodes and is_stub(nodes[f])]
    return stubs or [f for f in funcs if any(o.not_written and f in o.funcs for o in outcomes)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="From-scratch practice: write stubs, grade them.")
    sub = parser.add_subparsers(dest="command", required=True)
    new = sub.add_parser("new", help="write the next practice/scratch_<N>.py")
    new.add_argument("--funcs", default=None, help=f"comma-separated catalog sites, or 'all' (default: "
                                                   f"{','.join(SPEC_FUNCS)})")
    new.add_argument("--out-dir", default=str(PRACTICE_DIR))
    g = sub.add_parser("grade", help="grade a scratch file")
    g.add_argument("file")
    g.add_argument("--no-train", action="store_true", help="skip the training run")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.command == "new":
        try:
            path = new_scratch(args.funcs, args.out_dir)
        except ValueError as error:
            print(f"make scratch: {error}", file=sys.stderr)
            return 2
        shown = display_path(path)
        print(f"wrote {shown}: write {', '.join(parse_funcs(args.funcs))}, then: make grade FILE={shown}")
        return 0
    return grade(args.file, train=not args.no_train)


if __name__ == "__main__":
    sys.exit(main())
