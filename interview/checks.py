"""A small test framework for learners' code: cases that print "yours" beside "expected" and never raise.

A Case is one input: `yours(module)` computes the learner's value, `expected` is the spec's, `same` compares
them. `run_sentence` runs a sentence's cases smallest first and returns an Outcome: a pass, or the first
failing case with both values rendered by `show` (the Tensor-Puzzles habit). Whatever the learner's code
raises becomes a printed value (`Raised`), exits and interrupts included; each call runs under the mock
grader's per-test time limit. An Outcome whose code left the sandbox's rules (exited, hung, ran out of
memory: `sandbox.breach`) carries that in `breach`: the file then cannot be graded.
"""

from __future__ import annotations

import contextlib
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from interview import sandbox

NOT_WRITTEN = "not written yet"


@dataclass(frozen=True)
class Case:
    """One input: `yours(module)` computes the learner's value, `expected` the spec's, `same` compares."""

    label: str
    yours: Callable[[types.ModuleType], Any]
    expected: Any
    same: Callable[[Any, Any], bool]
    show_expected: str | None = None  # how to print `expected`, when its repr is not the point


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
    breach: str = ""  # e.g. "did not return within the 5 s time limit (an endless loop?)": cannot be graded


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
    """fn() or the exception it raised, as a Raised value (never raises: sys.exit, os._exit in the grading
    child and KeyboardInterrupt become values too, which `breach_of` recognises)."""
    try:
        return fn()
    except BaseException as error:  # noqa: BLE001 - the learner's code may raise anything: it becomes the value
        return Raised(error)


def breach_of(value: Any) -> str:
    """sandbox.breach of a Raised value ('' for anything else)."""
    return (sandbox.breach(value.error) or "") if isinstance(value, Raised) else ""


def timed(fn: Callable[[types.ModuleType], Any], module: types.ModuleType, what: str = "a graded case",
          seconds: float | None = None) -> Any:
    """fn(module) under the mock grader's per-test time limit (an endless loop must not hang the grader)."""
    with sandbox.limited(sandbox.TEST_SECONDS if seconds is None else seconds, what):
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
        yours = call(lambda c=case: timed(c.yours, module, f"{'+'.join(funcs)} on {c.label}"))
        if not_implemented(yours):
            return Outcome(key, funcs, sentence_title, False, True, case.label, show(yours), NOT_WRITTEN)
        if breach_of(yours):
            expected = case.show_expected or show(case.expected)
            return Outcome(key, funcs, sentence_title, False, False, case.label, show(yours), expected,
                           breach_of(yours))
        ok = call(lambda c=case, y=yours: bool(c.same(y, c.expected)))
        if ok is not True:
            expected = case.show_expected or show(case.expected)
            return Outcome(key, funcs, sentence_title, False, False, case.label, show(yours), expected)
    return Outcome(key, funcs, sentence_title, True)


# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_torch():
    """Learner code may trigger torch warnings (e.g. std of one element); they would clutter the report."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
