"""The checks of the spec's sentences (SPEC.md), by key: CASES[key]() -> the sentence's cases, smallest first.

Each case feeds a tiny input to the learner's function and says what the spec expects. A sentence's cases
test that sentence only, as far as they can (e.g. softmax is tested with one draw per row, so that
sampling with or without replacement cannot matter), so one mistake fails only the sentences it breaks.
S15 (signatures) has no cases: a changed signature makes a file impossible to grade (interview/sandbox.py).
"""

from __future__ import annotations

import inspect
import math

import torch

from interview import spec
from interview.checks import Case, close, exactly, raises_value_error, show


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
        logits = torch.tensor([2.0, 1.0, 0.0]).expand(200, -1).clone()  # (200, 3): P(same) = 0.45
        draws = m.sample_from_logits(logits, 2, generator=seeded(1))  # (200, 2)
        return int((draws[:, 0] == draws[:, 1]).sum())

    return [
        Case("logits [1, 0], num_samples=3: the draws",
             lambda m: m.sample_from_logits(torch.tensor([1.0, 0.0]), 3, generator=seeded(0)).tolist(),
             "3 token ids in {0, 1}", lambda y, _: isinstance(y, list) and len(y) == 3 and set(y) <= {0, 1}),
        Case("logits [2, 1, 0] in each of 200 rows, num_samples=2: rows drawing the same token twice",
             repeated_rows, "about 90 of 200 (over 60: drawn with replacement; under 170: each sample drawn anew)",
             lambda y, _: isinstance(y, int) and 60 < y < 170),
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


def inverse_gap_of(rewards: list[float], eps_a: float, eps_b: float):
    """1/A_last(eps_a) - 1/A_last(eps_b) = (eps_a - eps_b) / (r_last - mean(r)), whatever the std's definition,
    iff A_i = (r_i - mean) / (std + eps)."""

    def gap(m):
        return 1 / float(m.group_advantage(rewards, eps_a)[-1]) - 1 / float(m.group_advantage(rewards, eps_b)[-1])

    return gap


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
        Case("rewards [0, 1]: 1/A_1 at eps=0.25 minus 1/A_1 at eps=0.125 (both below the std)",
             inverse_gap_of([0.0, 1.0], 0.25, 0.125), 0.25, close(1e-9),
             show_expected="0.25 (= (0.25 - 0.125) / 0.5: eps adds to the std even when it is the smaller)"),
        Case("rewards [0, 10]: 1/A_1 at eps=1 minus 1/A_1 at eps=3", inverse_gap_of([0.0, 10.0], 1.0, 3.0), -0.4,
             close(1e-9), show_expected="-0.4 (= (1 - 3) / 5: eps is in the rewards' units, whatever the scaling)"),
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
    ints = reference_advantage([0.0, 1.0, 3.0])
    cases.append(Case("rewards [0, 1, 3] (ints are real numbers too)", lambda m: m.group_advantage([0, 1, 3]), ints,
                      proportional_to(ints), show_expected=f"accepted: proportional to {show(ints)}"))
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

    def gradient(m):
        logprobs = torch.tensor([[0.3, -0.2]], dtype=torch.float64, requires_grad=True)
        m.grpo_loss(logprobs, torch.zeros(1, 2, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64),
                    torch.zeros(1, 2, dtype=torch.bool)).backward()
        return logprobs.grad

    return [
        Case("logprobs [[0.3]], mask [[0]]: loss", all_masked([0.3]), 0.0, exactly),
        Case("logprobs [[0.3, -0.2]] (requiring grad), mask [[0, 0]]: d loss / d logprobs after backward()",
             gradient, [[0.0, 0.0]], close(), show_expected="[[0, 0]] (a zero the optimizer step can backpropagate)"),
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


CASES = {
    "softmax": softmax_cases,
    "replacement": replacement_cases,
    "generator": generator_cases,
    "population-std": population_std_cases,
    "eps": eps_cases,
    "validation": validation_cases,
    "overflow": overflow_cases,
    "constant": constant_cases,
    "ratio": ratio_cases,
    "masking": masking_cases,
    "min": min_cases,
    "clip-before-A": clip_order_cases,
    "all-masked": all_masked_cases,
    "independent": independence_cases,
}
"""spec key -> its cases (every key of SPEC.md but `signatures`, which loading the file checks)"""


def graded_sentences(func: str | None = None) -> list:
    """The sentences of SPEC.md the scratch grader checks (those with cases), in SPEC.md's order; only
    those about `func` when given."""
    return [s for s in spec.SENTENCES.values() if s.key in CASES and (func is None or func in s.funcs)]
