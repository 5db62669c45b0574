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


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SCREEN_PX = 800
"""what one screen of JupyterLab at 1400 x 900 shows of a notebook (the Lab's bars take the rest)"""
FIRST_FIGURE_SCREENS = 3
"""the first figure must start within this many screens"""
LINE_PX = {"markdown": 24, "code": 17, "output": 17}
"""estimated height of one line (prose wraps little: sources keep lines under 120 characters)"""
CELL_PX = {"markdown": 20, "code": 30}
"""estimated padding per cell"""


def first_figure(nb) -> tuple[int, float] | None:
    """(cell index, estimated pixels above it) of the first stored image, or None: a static estimate of
    where a reader scrolling from the top first meets a figure."""
    y = 0.0
    for i, cell in enumerate(nb.cells):
        lines = cell.source.count("\n") + 1
        y += CELL_PX.get(cell.cell_type, 0) + LINE_PX.get(cell.cell_type, 0) * lines
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/png" in data:
                return i, y
            text = out.get("text", "") if out.get("output_type") == "stream" else data.get("text/plain", "")
            y += LINE_PX["output"] * str(text).count("\n")
    return None


def reader_view_problems(nb) -> list[str]:
    """What a reader should not meet ([] when nothing): an nbval marker written as a comment instead of a cell
    tag, a slider figure with no static image before it (what shows without a kernel), no self-check with
    hidden answers, no "Next:" in the last cell, a first figure further than FIRST_FIGURE_SCREENS screens
    down or not of both twins (its cell names neither buggy_vs_fixed nor both twins)."""
    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if "NBVAL_" in cell.source:
            problems.append(f"cell {i}: an nbval marker in the code (use the cell tag, e.g. nbval-ignore-output)")
        images = 0
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            images += "image/png" in data
            if WIDGET_VIEW in data and str(data.get("text/plain", "")).startswith("LivePlot(") and not images:
                problems.append(f"cell {i}: a slider figure without its static image before it")
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    if not any("Self-check" in m and "<details>" in m for m in markdown):
        problems.append("no self-check with hidden answers (a markdown cell 'Self-check' with <details>)")
    if not nb.cells or "**Next:" not in nb.cells[-1].source:
        problems.append("the last cell does not say what comes next ('**Next:')")
    first = first_figure(nb)
    if first is None:
        problems.append("no figure")
    else:
        index, y = first
        if y > FIRST_FIGURE_SCREENS * SCREEN_PX:
            problems.append(f"the first figure (cell {index}) is {y / SCREEN_PX:.1f} screens down "
                            f"(at most {FIRST_FIGURE_SCREENS})")
        source = nb.cells[index].source
        if "buggy_vs_fixed(" not in source and not ("buggy" in source and "fixed" in source):
            problems.append(f"the first figure (cell {index}) does not show the buggy and the fixed twin")
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


@pytest.mark.parametrize("notebook", NOTEBOOKS or [None], ids=[p.stem for p in NOTEBOOKS] or ["none"])
def test_the_reader_sees_figures_a_self_check_and_what_comes_next(notebook):
    if notebook is None:
        pytest.skip("no notebooks yet")
    assert reader_view_problems(nbformat.read(notebook, as_version=4)) == []


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


def test_reader_view_checker_catches_what_the_reader_should_not_meet():
    nb = executed_notebook()
    assert set(reader_view_problems(nb)) == {
        "no self-check with hidden answers (a markdown cell 'Self-check' with <details>)",
        "the last cell does not say what comes next ('**Next:')", "no figure"}
    nb.cells.append(nbformat.v4.new_markdown_cell("## Self-check\n1. Why?\n<details>Because.</details>"))
    nb.cells.append(nbformat.v4.new_markdown_cell("**Next: notebook 02**"))
    widget = nbformat.v4.new_output("display_data",
                                    data={WIDGET_VIEW: {"model_id": "x"}, "text/plain": "LivePlot(x=1)"})
    nb.cells[1].outputs = [widget]
    nb.cells[1].source = "# NBVAL_IGNORE_OUTPUT\nw"
    assert reader_view_problems(nb) == [
        "cell 1: an nbval marker in the code (use the cell tag, e.g. nbval-ignore-output)",
        "cell 1: a slider figure without its static image before it", "no figure"]
    nb.cells[1].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBO"}), widget]
    nb.cells[1].source = "w"
    assert reader_view_problems(nb) == ["the first figure (cell 1) does not show the buggy and the fixed twin"]
    nb.cells[1].source = "fig, axes = buggy_vs_fixed('sampling')\nw"
    assert reader_view_problems(nb) == []
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("\n".join(["prose"] * 120)))  # 120 lines of prose
    assert reader_view_problems(nb) == ["the first figure (cell 2) is 3.8 screens down (at most 3)"]
