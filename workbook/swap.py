"""The one way to build "grpo_fixed with some functions replaced": `fixed_with(label, **functions)`.

A copy is a fresh import of grpo_fixed.py under the name grpo_fixed_<label>. Each replacement is rebound
to the copy's globals, so it calls the copy's helpers and every function around it (train() included)
calls the replacement. Names a replacement uses that grpo_fixed does not define (a helper written in a
notebook cell, a constant, an import of the learner's file) are carried into the copy with it, helpers
rebound in turn, so a replacement runs as written wherever it was written. A name both define resolves
to the copy's: a replacement for one function never changes the others.

`catalog.hybrid(*ids)` is this with the buggy twin's functions; the variants, the off-policy runners and
the from-scratch grader use it directly.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path

import grpo_fixed

FIXED_PATH = Path(grpo_fixed.__file__).resolve()


def fixed_with(label: str, *, wrap: dict[str, Callable] | None = None, **functions) -> types.ModuleType:
    """A fresh copy of grpo_fixed named grpo_fixed_<label> with `functions` replacing its top-level functions;
    then each wrap[site] = factory(copy) replaces copy.site by what the factory returns (the factory reads the
    copy's own function to wrap it). ValueError for a site grpo_fixed does not define."""
    module = _fresh_copy("grpo_fixed_" + label)
    for site, fn in functions.items():
        _require_function(module, site)
        setattr(module, site, _rebind(fn, module) if isinstance(fn, types.FunctionType) else fn)
    for site, factory in (wrap or {}).items():
        _require_function(module, site)
        setattr(module, site, factory(module))
    return module


def _fresh_copy(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, FIXED_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up while it executes
    spec.loader.exec_module(module)
    return module


def _require_function(module: types.ModuleType, site: str) -> None:
    if not callable(getattr(module, site, None)):
        raise ValueError(f"grpo_fixed has no function {site!r} to replace")


def _rebind(fn: types.FunctionType, module: types.ModuleType) -> types.FunctionType:
    """A copy of `fn` whose global names resolve in `module`; the names it needs that `module` lacks are
    carried over from fn's own globals first (functions among them rebound the same way). A decorated function
    (`@torch.no_grad()`, any functools.wraps wrapper that holds the function in its closure) keeps its wrapper
    around a rebound copy of the function it wraps."""
    inner = getattr(fn, "__wrapped__", None)
    if isinstance(inner, types.FunctionType) and any(_holds(cell, inner) for cell in fn.__closure__ or ()):
        rebound = _rebind(inner, module)
        cells = tuple(types.CellType(rebound) if _holds(cell, inner) else cell for cell in fn.__closure__)
        new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, cells)
        new.__kwdefaults__, new.__doc__, new.__qualname__ = fn.__kwdefaults__, fn.__doc__, fn.__qualname__
        new.__dict__.update(fn.__dict__)
        new.__wrapped__ = rebound
        return new
    _carry_missing_globals(fn, module)
    new = types.FunctionType(fn.__code__, module.__dict__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__, new.__doc__, new.__qualname__ = fn.__kwdefaults__, fn.__doc__, fn.__qualname__
    new.__dict__.update(fn.__dict__)
    return new


def _holds(cell, value) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


def _carry_missing_globals(fn: types.FunctionType, module: types.ModuleType) -> None:
    home, namespace = fn.__globals__, module.__dict__
    if home is namespace:
        return
    for name in sorted(_global_names(fn.__code__)):
        if name in namespace or name not in home:
            continue  # the copy's own name wins; a builtin or an unknown name resolves as it always would
        value = home[name]
        namespace[name] = value  # set first: a recursive helper finds itself
        if isinstance(value, types.FunctionType) and value.__globals__ is home:
            namespace[name] = _rebind(value, module)


def _global_names(code: types.CodeType) -> set[str]:
    """Every name `code` or a function nested in it may look up as a global."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names
