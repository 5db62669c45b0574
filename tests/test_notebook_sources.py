"""Every notebooks/NN_*.ipynb has its jupytext percent-format source notebooks/py/NN_*.py with the same
cells, and is stored executed: outputs present, execution counts 1, 2, 3, ... in order, no stderr and
no error outputs. The checkers are tested on small synthetic notebooks too, so this file still tests
something before the first notebook exists."""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest
from jupytext.formats import guess_format

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted((NOTEBOOKS_DIR / "py").glob("[0-9][0-9]_*.py"))


def twin_path(notebook: Path) -> Path:
    return notebook.parent / "py" / (notebook.stem + ".py")


def cell_sources(nb, cell_type):
    return [cell.source for cell in nb.cells if cell.cell_type == cell_type]


def source_problems(nb, text: str) -> list[str]:
    """Differences between a notebook and its percent-format .py source text."""
    fmt, _ = guess_format(text, ".py")
    if fmt != "percent":
        return [f"source is in jupytext format {fmt!r}, not percent"]
    twin = jupytext.reads(text, fmt="py:percent")
    problems = []
    for cell_type in ("code", "markdown"):
        ours, theirs = cell_sources(nb, cell_type), cell_sources(twin, cell_type)
        if len(ours) != len(theirs):
            problems.append(f"{len(ours)} {cell_type} cells in the notebook, {len(theirs)} in the .py source")
        for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
            if a != b:
                problems.append(f"{cell_type} cell {i} differs: notebook {a[:60]!r} vs source {b[:60]!r}")
                break
    return problems


def execution_problems(nb) -> list[str]:
    """Why a notebook does not look executed top to bottom with clean outputs ([] when it does)."""
    problems = []
    code = [cell for cell in nb.cells if cell.cell_type == "code" and cell.source.strip()]
    counts = [cell.execution_count for cell in code]
    if counts != list(range(1, len(code) + 1)):
        problems.append(f"execution counts {counts} are not 1..{len(code)} in order")
    if code and not any(cell.outputs for cell in code):
        problems.append("no stored outputs")
    for i, cell in enumerate(code):
        for out in cell.outputs:
            if out.output_type == "error":
                problems.append(f"code cell {i} stored an error: {out.get('ename')}: {out.get('evalue')}")
            if out.output_type == "stream" and out.get("name") == "stderr":
                problems.append(f"code cell {i} wrote to stderr: {out.get('text', '')[:120]!r}")
    return problems


# ----------------------------------------------------------------------------------------------
# The real notebooks


@pytest.mark.parametrize("notebook", NOTEBOOKS or [None], ids=[p.stem for p in NOTEBOOKS] or ["none"])
def test_notebook_matches_its_py_source(notebook):
    if notebook is None:
        pytest.skip("no notebooks yet")
    source = twin_path(notebook)
    assert source.exists(), f"{notebook.name} has no jupytext source {source.relative_to(NOTEBOOKS_DIR)}"
    nb = nbformat.read(notebook, as_version=4)
    assert jupytext.read(source, fmt="py:percent").cells, "empty source"
    assert source_problems(nb, source.read_text()) == []


@pytest.mark.parametrize("notebook", NOTEBOOKS or [None], ids=[p.stem for p in NOTEBOOKS] or ["none"])
def test_notebook_is_stored_executed_and_clean(notebook):
    if notebook is None:
        pytest.skip("no notebooks yet")
    assert execution_problems(nbformat.read(notebook, as_version=4)) == []


def test_every_py_source_has_its_notebook():
    orphans = [p.name for p in SOURCES if not (NOTEBOOKS_DIR / (p.stem + ".ipynb")).exists()]
    assert not orphans, f"sources without a built notebook: {orphans}"


# ----------------------------------------------------------------------------------------------
# The checkers themselves, on synthetic notebooks

PY_SOURCE = """# %% [markdown]
# # Title

# %%
x = 1
print(x)

# %%
x + 1
"""


def executed_notebook():
    """The notebook PY_SOURCE builds to, as if nbconvert had executed it."""
    nb = jupytext.reads(PY_SOURCE, fmt="py:percent")
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[0].execution_count, code[0].outputs = 1, [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    code[1].execution_count = 2
    code[1].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "2"}, execution_count=2)]
    return nb


def test_checkers_accept_a_good_notebook():
    nb = executed_notebook()
    assert source_problems(nb, PY_SOURCE) == []
    assert execution_problems(nb) == []


def test_source_checker_catches_drift():
    assert source_problems(executed_notebook(), PY_SOURCE.replace("x = 1", "x = 2"))  # edited code
    assert source_problems(executed_notebook(), PY_SOURCE.replace("# Title", "# Other"))  # edited prose
    assert source_problems(executed_notebook(), PY_SOURCE + "\n# %%\ny = 3\n")  # extra cell
    light = "x = 1\nprint(x)\n\n\nx + 1\n"
    assert source_problems(executed_notebook(), light)  # not percent format


def test_execution_checker_catches_unexecuted_and_dirty_notebooks():
    unexecuted = jupytext.reads(PY_SOURCE, fmt="py:percent")
    assert execution_problems(unexecuted)
    out_of_order = executed_notebook()
    out_of_order.cells[1].execution_count, out_of_order.cells[2].execution_count = 2, 1
    assert execution_problems(out_of_order)
    stderr = executed_notebook()
    stderr.cells[1].outputs.append(nbformat.v4.new_output("stream", name="stderr", text="WARNING grpo: ...\n"))
    assert any("stderr" in p for p in execution_problems(stderr))
    error = executed_notebook()
    error.cells[2].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="boom", traceback=[])]
    assert any("ValueError" in p for p in execution_problems(error))
