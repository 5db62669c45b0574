"""Notebook execution time (budget 30 s each) and kernel-side slider redraw time.

Each notebooks/NN_*.ipynb is copied into a temporary directory and executed there with nbclient
(never in place; nothing is written back). Cells are timed from the first cell to the last, kernel
start-up excluded (reported apart). Then, in the same kernel, a timing cell finds every slider figure
(workbook.widgets.LivePlot), moves its first slider one step and back three times, and reports the median
time of the synchronous redraw: update() plus the Agg draw and PNG encode. The browser adds the round trip
on top: bench/redraw_bench.py measures that end to end (key press to new image), which is the number the
redraw targets are about.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
BUDGET_S = 30.0
MARKER = "BENCH_REDRAW_JSON "

REDRAW_CODE = r'''
import gc as _gc, json as _json, statistics as _st, time as _time
import ipywidgets as _w

def _neighbour(ctl):
    """The value one slider step away (up if room, else down)."""
    if isinstance(ctl, _w.SelectionSlider):
        values = ctl._options_values
        return values[ctl.index + 1] if ctl.index + 1 < len(values) else values[ctl.index - 1]
    if isinstance(ctl, _w.FloatLogSlider):
        up = ctl.value * ctl.base ** ctl.step
        return up if up <= ctl.base ** ctl.max else ctl.value / ctl.base ** ctl.step
    return ctl.value + ctl.step if ctl.value + ctl.step <= ctl.max else ctl.value - ctl.step

_SLIDERS = (_w.IntSlider, _w.FloatSlider, _w.FloatLogSlider, _w.SelectionSlider)

def _bench_redraws(limit=6, moves=3):
    from workbook.widgets import LivePlot
    rows = []
    found = [o for o in _gc.get_objects() if isinstance(o, LivePlot)]
    for w in found[:limit]:
        ctl = next((c for c in w.controls.values() if isinstance(c, _SLIDERS)), None)
        if ctl is None:
            continue
        start_value, times = ctl.value, []
        for i in range(moves):
            target = _neighbour(ctl) if i % 2 == 0 else start_value
            t0 = _time.perf_counter()
            ctl.value = target
            times.append(_time.perf_counter() - t0)
        ctl.value = start_value
        rows.append(dict(control=ctl.description, kind=type(w).__name__, median_s=_st.median(times), max_s=max(times)))
    return dict(widgets_found=len(found), timed=rows)

print("BENCH_REDRAW_JSON " + _json.dumps(_bench_redraws()))
'''


def notebook_paths(root: Path = NOTEBOOKS) -> list[Path]:
    return sorted(root.glob("[0-9][0-9]_*.ipynb"))


def tag_expected_errors(nb) -> None:
    """Cells marked for nbval as raising get the `raises-exception` tag that nbclient and JupyterLab honour."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "NBVAL_RAISES_EXCEPTION" in cell.source:
            tags = cell.metadata.setdefault("tags", [])
            if "raises-exception" not in tags:
                tags.append("raises-exception")


def _redraw_result(cell) -> dict | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and MARKER in out.get("text", ""):
            line = next(s for s in out["text"].splitlines() if s.startswith(MARKER))
            return json.loads(line[len(MARKER) :])
    return None


def bench_notebook(path: Path, workdir: Path, cell_timeout: int = 600) -> dict:
    """Execute one notebook copied into workdir; -> times, the failing cell if any, redraw timings."""
    nb = nbformat.read(path, as_version=4)
    tag_expected_errors(nb)
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(workdir)}})
    result = dict(notebook=path.name, budget_s=BUDGET_S, error=None)
    start = time.perf_counter()
    with client.setup_kernel():
        result["kernel_start_s"] = time.perf_counter() - start
        cells_start = time.perf_counter()
        try:
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
        except CellExecutionError as e:
            result["error"] = f"cell {index}: {str(e).strip().splitlines()[-1][:300]}"
        result["cells_s"] = time.perf_counter() - cells_start
        if result["error"] is None:
            timing_cell = nbformat.v4.new_code_cell(REDRAW_CODE)
            nb.cells.append(timing_cell)
            try:
                client.execute_cell(timing_cell, len(nb.cells) - 1)
                result["redraw"] = _redraw_result(timing_cell)
            except CellExecutionError as e:
                result["redraw"] = dict(error=str(e).strip().splitlines()[-1][:300])
    result["total_s"] = time.perf_counter() - start
    return result


def bench_notebooks(progress=print) -> list[dict]:
    paths = notebook_paths()
    if not paths:
        progress("  no notebooks/NN_*.ipynb yet: skipped")
        return []
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_nb_") as tmp:
        workdir = Path(tmp) / "notebooks"
        shutil.copytree(NOTEBOOKS, workdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        for path in paths:
            progress(f"  executing {path.name} (copy in {workdir})")
            results.append(bench_notebook(workdir / path.name, workdir))
            r = results[-1]
            redraws = (r.get("redraw") or {}).get("timed", [])
            slowest = max((x["median_s"] for x in redraws), default=None)
            progress(f"    cells {r['cells_s']:.1f} s (+ kernel start {r['kernel_start_s']:.1f} s)"
                     + (f", slowest redraw {slowest:.2f} s" if slowest is not None else "")
                     + (f", ERROR {r['error']}" if r["error"] else ""))
    return results


def summarize_redraws(results: list[dict]) -> list[dict]:
    rows = []
    for r in results:
        for x in (r.get("redraw") or {}).get("timed", []):
            rows.append(dict(notebook=r["notebook"], **x))
    return rows

