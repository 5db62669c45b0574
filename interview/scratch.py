"""From scratch: a copy of the trainer with some functions stubbed, for the learner to write.

    make scratch                      -> practice/scratch_<N>.py with the three public functions stubbed
    make scratch FUNCS=masked_mean    -> other catalog sites instead (FUNCS=all: every site)
    make grade FILE=practice/scratch_<N>.py   (interview/scratch_grader.py)

The hand-out is the mock round's with no bug left in: grpo_buggy.py with every catalogued function taken
from grpo_fixed.py (`# FIX` comments stripped). Each chosen function is then replaced by a stub that keeps
its signature and its docstring (plus, for the three public functions, the sentences of the spec
(SPEC.md) it is graded on, read from interview/spec.py) and raises NotImplementedError.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

from interview.rounds import PRACTICE, rel
from interview.spec_cases import graded_sentences
from interview.splice import FIXED, function_header, function_nodes, handout_with_fixed, replace_functions
from workbook import catalog

SPEC_FUNCS = ("sample_from_logits", "group_advantage", "grpo_loss")
SITES = tuple(dict.fromkeys(b.function for b in catalog.BUGS))  # catalog order, each site once
FUNCS_HEADER = "# scratch-funcs:"
SPEC_LINE = "The spec (SPEC.md), graded one sentence at a time:"


def handout_source() -> str:
    """The hand-out with no bug left: grpo_buggy.py with every catalog site from grpo_fixed.py."""
    return handout_with_fixed(SITES)


def splice(source: str, replacements: dict[str, str]) -> str:
    """`source` with each named top-level function (its `def` line to its last line; decorators stay)
    replaced by the given text. KeyError for a name that is not a top-level function."""
    try:
        return replace_functions(
            source, {name: text.rstrip("\n") + "\n" for name, text in replacements.items()}, decorators=False)
    except ValueError as error:
        raise KeyError(str(error)) from None


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


def stub_text(source: str, node: ast.FunctionDef, docstring: str, scratch_name: str) -> str:
    """`def ...:` as written in `source`, the docstring (plus the spec sentences it is graded on), a raise."""
    doc = inspect.cleandoc(docstring)
    graded = graded_sentences(node.name)
    if graded:
        doc += f"\n\n{SPEC_LINE}\n" + "\n".join(
            textwrap.fill(f"{s.label}: {s.text}", 104, initial_indent="- ", subsequent_indent="  ") for s in graded)
    else:
        doc += "\n\nGraded by the catalog's tests for this function (tests/test_catalog.py)."
    body = textwrap.indent(f'"""{doc}\n"""\n', "    ")
    raise_line = f'    raise NotImplementedError("{node.name}: write it, then make grade FILE={scratch_name}")\n'
    return function_header(source, node) + "\n" + body + raise_line


def scratch_source(funcs: tuple[str, ...], scratch_name: str, number: int) -> str:
    """The hand-out text with `funcs` stubbed (signature and grpo_fixed's docstring kept), under a header
    that says what to do and names the functions (the `# scratch-funcs:` line the grader reads)."""
    source = handout_source()
    spec_nodes, nodes = function_nodes(FIXED.read_text()), function_nodes(source)
    missing = [f for f in funcs if f not in nodes or f not in spec_nodes]
    if missing:
        raise ValueError(f"the hand-out has no top-level function {missing}")
    stubs = {f: stub_text(source, nodes[f], ast.get_docstring(spec_nodes[f]) or "", scratch_name) for f in funcs}
    header = (
        f"# Scratch round {number}: write every function below that raises NotImplementedError.\n"
        "# Each keeps its signature and its docstring (the spec it is graded on, from SPEC.md); the rest of the\n"
        "# trainer is correct. Grade it as often as you like (one line per spec sentence, then a training run):\n"
        f"#     make grade FILE={scratch_name}\n"
        f"{FUNCS_HEADER} {', '.join(funcs)}\n"
    )
    return header + splice(source, stubs)


def next_scratch_path(out_dir: Path) -> tuple[Path, int]:
    """practice/scratch_<N>.py with N one more than the largest existing N (1 for the first)."""
    taken = [int(m.group(1)) for p in out_dir.glob("scratch_*.py") if (m := re.fullmatch(r"scratch_(\d+)\.py", p.name))]
    number = max(taken, default=0) + 1
    return out_dir / f"scratch_{number}.py", number


def new_scratch(funcs=None, out_dir: Path | str | None = None) -> Path:
    """Write the next practice/scratch_<N>.py (or into `out_dir`) with `funcs` (see parse_funcs) stubbed."""
    names = parse_funcs(funcs)
    out_dir = Path(out_dir) if out_dir is not None else PRACTICE
    out_dir.mkdir(parents=True, exist_ok=True)
    path, number = next_scratch_path(out_dir)
    path.write_text(scratch_source(names, rel(path), number))
    return path


def declared_funcs(source: str) -> tuple[str, ...] | None:
    """The functions the file's `# scratch-funcs:` line names; None if the line is gone (the grader refuses
    such a file: graded on the spec's three alone, a file with other sites still stubbed would pass)."""
    for line in source.splitlines():
        if line.startswith(FUNCS_HEADER):
            return parse_funcs(line[len(FUNCS_HEADER):])
    return None


def graded_funcs(source: str, declared: tuple[str, ...]) -> tuple[str, ...]:
    """The sites to grade, in catalog order: those the `# scratch-funcs:` line names, plus every catalog site
    still stubbed in the file or written differently from the hand-out (a line trimmed by hand cannot hide
    a stub or a rewritten function from the grader)."""
    mine, handout = function_nodes(source), function_nodes(handout_source())
    touched = {f for f in SITES if f in mine and f in handout
               and (is_stub(mine[f]) or ast.dump(mine[f]) != ast.dump(handout[f]))}
    return tuple(f for f in SITES if f in declared or f in touched)


def is_stub(node: ast.FunctionDef) -> bool:
    """A body that is (a docstring and) nothing but `raise NotImplementedError(...)`."""
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    return (len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None
            and "NotImplementedError" in ast.unparse(body[0].exc))
