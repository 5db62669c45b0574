"""Plain references the tests compare against: exact rational arithmetic and float64 numpy.
(A helper module, not a test file: tests import it by name, pytest puts tests/ on sys.path.)"""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

TINY = 2.0**-1074  # smallest positive subnormal float64


def exact_advantage(rewards, eps=1e-8):
    """(r - mean) / (std + eps) with population std, in exact rational arithmetic and a 60-digit
    square root, rounded to float64 only at the end: the float64 reference. -> list[float]"""
    r = [Fraction(x) for x in rewards]
    mean = sum(r) / len(r)
    var = sum((x - mean) ** 2 for x in r) / len(r)
    with localcontext() as ctx:
        ctx.prec = 60
        ctx.Emin, ctx.Emax = -999999, 999999
        dec = lambda q: Decimal(q.numerator) / Decimal(q.denominator)
        denom = dec(var).sqrt() + Decimal(eps)
        return [float(dec(x - mean) / denom) for x in r]


def assert_matches_reference(adv, rewards, eps=1e-8, rtol=1e-12):
    """adv equals the exact reference within rtol of its largest entry (plus two subnormal steps)."""
    expected = exact_advantage(rewards, eps)
    scale = max(abs(x) for x in expected)
    got = adv.tolist()
    bad = [(g, e) for g, e in zip(got, expected, strict=True) if abs(g - e) > rtol * scale + 2 * TINY]
    assert not bad, f"rewards {rewards} eps {eps}: got {got}, expected {expected}"


def reference_grpo_loss(logprobs, old_logprobs, advantages, mask, clip):
    """-(1/n) sum_unmasked min(rho A, clip(rho) A), rho = exp(logp - old), in float64 numpy."""
    lp, old = logprobs.detach().double().numpy(), old_logprobs.detach().double().numpy()
    m = mask.bool().numpy()
    adv = advantages.detach().double().numpy()[:, None]  # (N, 1)
    rho = np.exp(np.where(m, lp - old, 0.0))
    surrogate = np.minimum(rho * adv, np.clip(rho, 1 - clip, 1 + clip) * adv)
    return -(surrogate[m].sum() / max(1, m.sum()))
