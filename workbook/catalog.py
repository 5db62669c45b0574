"""The bug catalog, and hybrids: the fixed trainer with chosen bugs switched back on.

Each bug lives in exactly one function of grpo_buggy.py. A hybrid is a fresh copy of grpo_fixed
in which those functions are replaced by their buggy versions, rebound to the hybrid's globals so
that a swapped function still calls the *fixed* helpers around it (one bug on at a time).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import grpo_buggy
import grpo_fixed

ROOT = Path(grpo_fixed.__file__).resolve().parent


@dataclass(frozen=True)
class Bug:
    id: str
    function: str
    title: str


BUGS = [
    Bug("B1", "sample_from_logits", "sampling from raw logits (no softmax)"),
    Bug("B2", "group_advantage", "no epsilon in the advantage's std (constant group gives NaN)"),
    Bug("B3", "update_policy", "old log-probs recomputed inside the inner loop (ratio is always 1)"),
    Bug("B4", "grpo_loss", "clipping the product ratio * A instead of the ratio"),
    Bug("B5", "masked_mean", "masked tokens reach the loss sum; all-masked batch divides 0 by 0"),
    Bug("B6", "completion_logits", "log-prob shift misalignment (logit t scored against token t)"),
    Bug("B7", "token_logprobs", "log(softmax) instead of logits - logsumexp"),
    Bug("B8", "kl_to_reference", "KL estimator with the log-ratio reversed"),
    Bug("B9", "batch_advantages", "groups reshaped along the wrong axis (baseline mixes prompts)"),
    Bug("B10", "policy_logprobs", "temperature used for sampling but not for training log-probs"),
    Bug("B11", "optimizer_step", "no gradient clipping"),
]
BUG_IDS = [b.id for b in BUGS]
_BY_ID = {b.id: b for b in BUGS}


def bug(bug_id: str) -> Bug:
    """The catalog entry for `bug_id` ('B1'..'B11'); ValueError for an unknown id."""
    try:
        return _BY_ID[bug_id]
    except KeyError:
        raise ValueError(f"unknown bug id {bug_id!r}; known: {BUG_IDS}") from None


def _rebind(fn: types.FunctionType, module: types.ModuleType) -> types.FunctionType:
    """A copy of `fn` whose global names resolve in `module`."""
    new = types.FunctionType(fn.__code__, module.__dict__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__, new.__doc__ = fn.__kwdefaults__, fn.__doc__
    return new


def swapped(label: str, **functions) -> types.ModuleType:
    """A fresh copy of grpo_fixed named grpo_fixed_<label>, with the given top-level functions replaced.

    Each replacement is rebound to the copy's globals, so it calls the copy's (fixed) helpers; the
    functions around it, train() included, call the replacement. The catalog's hybrids and the
    variants of workbook/variants.py are both built this way.
    """
    name = "grpo_fixed_" + label
    spec = importlib.util.spec_from_file_location(name, ROOT / "grpo_fixed.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up while it executes
    spec.loader.exec_module(module)
    for site, fn in functions.items():
        if not callable(getattr(module, site, None)):
            raise ValueError(f"grpo_fixed has no function {site!r} to replace")
        setattr(module, site, _rebind(fn, module))
    return module


def hybrid(*bug_ids: str) -> types.ModuleType:
    """A fresh copy of grpo_fixed with the functions of `bug_ids` taken from grpo_buggy."""
    sites = [bug(b).function for b in bug_ids]  # validates ids first
    return swapped("with_" + ("_".join(bug_ids) or "none"), **{site: getattr(grpo_buggy, site) for site in sites})
