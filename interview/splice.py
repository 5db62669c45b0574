"""Source splicing: replace top-level functions of a module's source text, at source level (ast + tokenize).

A mock round is grpo_buggy.py with every catalogued function that is not drawn replaced by grpo_fixed.py's
version (`splice`, which also brings the fixed function's own helpers when the hand-out lacks them and
strips the `# FIX` comments); a scratch file is the hand-out with some functions replaced by stubs
(`replace_functions`, decorators kept). Nothing here imports or runs the code it edits.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

from workbook import catalog

HANDOUT, FIXED = catalog.ROOT / "grpo_buggy.py", catalog.ROOT / "grpo_fixed.py"


def top_level(tree: ast.Module) -> dict[str, ast.stmt]:
    """name -> the top-level statement that binds it (def, class, assignment or import)."""
    bound = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.setdefault((alias.asname or alias.name).split(".")[0], node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bound.setdefault(name.id, node)
    return bound


def function_nodes(source: str) -> dict[str, ast.FunctionDef]:
    """Top-level `def`s of `source` by name."""
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}


def span(node: ast.stmt, tree: ast.Module | None = None) -> tuple[int, int]:
    """(first, last) 1-based source lines of a top-level statement: decorators included, and an
    attribute docstring (a string right after an assignment) too when `tree` is given."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    last = node.end_lineno
    if tree is not None and isinstance(node, (ast.Assign, ast.AnnAssign)):
        after = tree.body.index(node) + 1
        if after < len(tree.body) and is_string(tree.body[after]):
            last = tree.body[after].end_lineno
    return first, last


def is_string(node: ast.stmt) -> bool:
    """A bare string statement (a docstring)."""
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def strip_fix_comments(text: str) -> str:
    """Drop whole-line `# FIX ...` comments and cut trailing `  # FIX Bn: ...` ones (found by tokenize,
    so a '# FIX' inside a string is left alone)."""
    lines = text.splitlines(keepends=True)
    fixes = [tok.start for tok in tokenize.generate_tokens(io.StringIO(text).readline)
             if tok.type == tokenize.COMMENT and tok.string.startswith("# FIX")]
    drop = set()
    for row, col in fixes:
        line = lines[row - 1]
        if line[:col].strip():
            lines[row - 1] = line[:col].rstrip() + "\n"
        else:
            drop.add(row - 1)
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def donor_blocks(donor: str, names: list[str], present: set[str]) -> dict[str, str]:
    """name -> source block (FIX comments stripped) for each function in `names`, preceded by the donor's
    top-level definitions it needs that are missing from `present` (collected recursively)."""
    tree = ast.parse(donor)
    bound = top_level(tree)
    lines = donor.splitlines(keepends=True)
    blocks, taken = {}, set(present)
    for name in names:
        node = bound.get(name)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise ValueError(f"{FIXED.name} has no top-level function {name!r}")
        needed, stack = [], [node]
        while stack:  # the donor statements this function reaches that the target lacks
            for used in sorted(_names_used(stack.pop())):
                dep = bound.get(used)
                if dep is not None and used not in taken and dep is not node and dep not in needed:
                    taken.add(used)
                    needed.append(dep)
                    stack.append(dep)
        pieces = ["".join(lines[a - 1 : b]) for a, b in sorted(span(d, tree) for d in needed)]
        first, last = span(node, tree)
        pieces.append("".join(lines[first - 1 : last]))
        blocks[name] = strip_fix_comments("\n\n".join(pieces))
    return blocks


def splice(target: str, donor: str, names: list[str]) -> str:
    """`target` source with each top-level function in `names` replaced by the donor's version."""
    blocks = donor_blocks(donor, names, set(top_level(ast.parse(target))))
    return replace_functions(target, {name: blocks[name] for name in names})


def replace_functions(source: str, texts: dict[str, str], *, decorators: bool = True) -> str:
    """`source` with each top-level function named in `texts` replaced by that text, verbatim; with
    decorators=False the function's decorators stay and only its `def` to its last line is replaced.
    ValueError for a name that is not a top-level function."""
    bound = top_level(ast.parse(source))
    for name in texts:
        if not isinstance(bound.get(name), (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise ValueError(f"no top-level function {name!r} to replace")
    lines = source.splitlines(keepends=True)
    for name in sorted(texts, key=lambda n: -bound[n].lineno):  # bottom up: line numbers stay valid
        first, last = span(bound[name]) if decorators else (bound[name].lineno, bound[name].end_lineno)
        lines[first - 1 : last] = texts[name].splitlines(keepends=True)
    return "".join(lines)


def function_header(source: str, node: ast.FunctionDef) -> str:
    """The `def name(...):` text of `node` exactly as written (multi-line signatures included)."""
    lines = source.splitlines()
    first_body = node.body[0].lineno
    if first_body > node.lineno:
        return "\n".join(lines[node.lineno - 1 : first_body - 1])
    return f"def {node.name}({ast.unparse(node.args)}):"  # body on the def line: rebuild it


SENTENCE_END = re.compile(r"""[.?!]["')\]]*$""")
"""a line that ends a sentence: its last character (before closing quotes or brackets) is . ? or !"""


def first_sentence_lines(lines: list[str]) -> int:
    """How many of a docstring's lines (its text, quotes removed) to keep: the fewest whole lines that end
    at the end of a sentence (so the first sentence, and any that end on its last line, stay whole), or at
    the end of the first paragraph; all of them if no line ends a sentence."""
    start = 0 if lines and lines[0].strip() else 1  # the text may begin on the line after the quotes
    for i in range(start, len(lines)):
        if not lines[i].strip():
            return i if i > start else len(lines)
        if SENTENCE_END.search(lines[i].rstrip()):
            return i + 1
    return len(lines)


def first_docstring_lines(text: str) -> str:
    """Every module, class and function docstring cut to its first sentence(s) (HARD=1): whole lines from
    its first, up to the first line that ends a sentence (`first_sentence_lines`), never part of a line or
    of a sentence. Lines are kept exactly as written (escapes and indentation included)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    docs = [node.body[0] for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and is_string(node.body[0]) and node.body[0].end_lineno > node.body[0].lineno]
    for doc in sorted(docs, key=lambda d: -d.lineno):
        line = lines[doc.lineno - 1]
        opening = re.match(r"""([rRuU]?)("{3}|'{3})(.*)$""", line[doc.col_offset :].rstrip("\n"))
        last = lines[doc.end_lineno - 1].rstrip("\n")
        if not opening or not last.endswith(opening[2]):
            continue  # not a triple-quoted docstring that ends its line: leave it whole
        body = [opening[3]] + [raw.rstrip("\n") for raw in lines[doc.lineno : doc.end_lineno]]
        body[-1] = body[-1][: -len(opening[2])]
        keep = first_sentence_lines(body)
        if keep >= len(body):
            continue
        kept = [line[: doc.col_offset] + opening[1] + opening[2] + body[0]] + body[1:keep]
        kept[-1] = kept[-1].rstrip() + opening[2]
        lines[doc.lineno - 1 : doc.end_lineno] = [k + "\n" for k in kept]
    return "".join(lines)


def handout_with_fixed(names: list[str] | tuple[str, ...]) -> str:
    """grpo_buggy.py with the functions `names` taken from grpo_fixed.py (their `# FIX` comments stripped)."""
    return splice(HANDOUT.read_text(), FIXED.read_text(), list(names))
