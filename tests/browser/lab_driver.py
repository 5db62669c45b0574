"""Drive JupyterLab in Debian's Chromium: run a notebook, check its figures match their sliders, time redraws.

One place for the browser code that tests/browser/test_lab.py (pass/fail) and bench/redraw_bench.py
(`make bench`: median and worst redraw per notebook) share; it lives beside the browser test (the bench
adds this folder to sys.path). Playwright for Python against a JupyterLab started on a free localhost port
with an empty token, on a directory of notebook *copies* (kernelspec python3, nbval's
NBVAL_RAISES_EXCEPTION cells tagged `raises-exception`, the tag Run All honours).

A redraw is timed inside the browser, from the keydown on a slider handle of a live_plot widget
(workbook.widgets.LivePlot, CSS class live-plot) until its status line states the slider's new value AND
the new image (set just before the status line) has loaded. The status line `rendered clip=0.3; |A|=1.5`
is compared with what the controls show (slider readouts, rounded by the browser): `marker_mismatches`
(pure Python, unit-tested in tests/test_widgets.py).

Never run `playwright install`: the browser is Debian's (/usr/bin/chromium, or $CHROMIUM). Every wait is
bounded; the server context manager always stops the server and its kernels.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
RUN_ALL_TIMEOUT_S = 300
SERVER_START_TIMEOUT_S = 90
REDRAW_TIMEOUT_S = 30

# JupyterLab user settings for the server: no autosave, every cell in the DOM (no virtual scrolling), so
# locators see all outputs. Not the news pop-up: the project's settings override (jupyter/overrides.json,
# installed into the environment by `make venv`) answers it for every user, and the browser test checks that.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}

VIEWPORT = {"width": 1400, "height": 900}
"""the window a reader opens the Lab in (the figure check's output width is measured at this size)"""
OUTPUT_WIDTH_JS = ("() => Math.max(0, ...[...document.querySelectorAll("
                   "'.jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output')].map(e => e.clientWidth))")
"""the width of a cell's output in the current notebook, in CSS pixels (what a wider image is scaled to)"""

LIVE_PLOT = ".live-plot"
CONTROL_SELECTOR = ".widget-slider, .widget-dropdown, .widget-toggle-buttons, .widget-checkbox"


def chromium_available() -> bool:
    return os.access(CHROMIUM, os.X_OK)


# ---- notebooks ---------------------------------------------------------------------------------------


def code_cell(source: str, cell_id: str) -> dict:
    return dict(cell_type="code", execution_count=None, id=cell_id, metadata={}, outputs=[], source=source)


def notebook(*sources: str) -> dict:
    """A notebook of code cells (python3 kernel)."""
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [code_cell(source, f"cell-{i}") for i, source in enumerate(sources)]
    return dict(cells=cells, metadata={"kernelspec": kernelspec}, nbformat=4, nbformat_minor=5)


HARNESS_LIVE_PLOT = notebook('''\
import matplotlib.pyplot as plt
from workbook.widgets import live_plot, set_value, slider

fig, ax = plt.subplots(figsize=(4, 2.5))
(line,) = ax.plot([0, 1], [0, 0.5], marker="o")
ax.set_ylim(0, 1)
title = ax.set_title("x = 0.50")

def update(x):
    line.set_ydata([0, x])
    title.set_text(f"x = {x:.2f}")
    return {"x": x}

w = live_plot(fig, update, x=slider(0.5, 0.0, 1.0, 0.1, "x"))
w''', '''\
r = set_value(w, "x", 0.3)  # after Run All the slider reads 0.30: the figure must say so too
print(f"x {r['x']:.2f}")''')
"""a trivial live_plot figure, and a check cell that moves its slider from Python"""
HARNESS_LIVE_PLOT_PRINTS = "x 0.30\n"
"""the whole output of the harness's check cell (set_value itself prints nothing)"""

THREE_AXES_CODE = '''\
import matplotlib.pyplot as plt
import numpy as np
from workbook.widgets import live_plot, slider

ANIMATED = {animated}  # True: the lines and bars are blitted over a cached background
xs = np.linspace(0.0, 1.0, 200)  # (200,)
fig, axes = plt.subplots(1, 3, figsize=(9, 3), layout="constrained")
lines = [ax.plot(xs, np.sin(2 * np.pi * (k + 1) * xs), label=f"k={{k + 1}}", animated=ANIMATED)[0]
         for k, ax in enumerate(axes)]
bars = axes[2].bar(np.arange(8) / 8 + 1 / 16, np.ones(8), width=1 / 10, alpha=0.4, color="C3", animated=ANIMATED)
for k, ax in enumerate(axes):
    ax.set_ylim(-1.2, 1.2)
    ax.set_xlabel("x")
    ax.set_title(f"frequency {{k + 1}}")
    ax.legend(loc="upper right", fontsize="small")

def update(phase, amplitude):
    for k, line in enumerate(lines):
        line.set_ydata(amplitude * np.sin(2 * np.pi * ((k + 1) * xs + phase)))
    heights = amplitude * np.cos(np.arange(8) + 2 * np.pi * phase)  # (8,)
    for bar, h in zip(bars, heights, strict=True):
        bar.set_height(h)
    return {{"phase": phase, "mean_height": float(heights.mean())}}

w = live_plot(fig, update, phase=slider(0.0, 0.0, 1.0, 0.05, "phase"),
              amplitude=slider(1.0, 0.1, 1.0, 0.1, "amplitude"))
w'''
HARNESS_THREE_AXES = notebook(THREE_AXES_CODE.format(animated=False))
"""three axes, three lines, eight bars, legends, constrained layout: a realistic notebook figure"""
HARNESS_THREE_AXES_BLIT = notebook(THREE_AXES_CODE.format(animated=True))
"""the same with its lines and bars animated=True: blitted over the cached background"""

HARNESSES = {"harness_live_plot.ipynb": HARNESS_LIVE_PLOT, "harness_three_axes.ipynb": HARNESS_THREE_AXES,
             "harness_three_axes_blit.ipynb": HARNESS_THREE_AXES_BLIT}


def prepare_copy(src: Path, dst: Path) -> None:
    """Copy a notebook for JupyterLab: python3 kernelspec, nbval's raising cells tagged raises-exception."""
    nb = json.loads(src.read_text())
    nb.setdefault("metadata", {})["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for cell in nb.get("cells", []):
        source = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "code" and "NBVAL_RAISES_EXCEPTION" in source:
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if "raises-exception" not in tags:
                tags.append("raises-exception")
    dst.write_text(json.dumps(nb))


def write_harnesses(root: Path) -> list[str]:
    for name, nb in HARNESSES.items():
        (root / name).write_text(json.dumps(nb))
    return list(HARNESSES)


def builds_live_plot(path: Path) -> bool:
    """Does a notebook's code build a slider figure (a live_plot call in a code cell)?"""
    cells = json.loads(path.read_text()).get("cells", [])
    code = "".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    return re.search(r"\blive_plot\(", code) is not None


# ---- status line against controls (pure; unit-tested) -----------------------------------------------


def parse_marker(text: str) -> dict[str, str] | None:
    """'rendered clip=0.3; |A|=1.5' -> {'clip': '0.3', '|A|': '1.5'}; None when it is not a render marker."""
    text = " ".join(text.split())
    if not text.startswith("rendered "):
        return None
    pairs = [part.partition("=") for part in text[len("rendered "):].split("; ")]
    return {label: value for label, sep, value in pairs if sep}


def _number(text: str) -> float | None:
    try:
        return float(text.strip().replace("\u2212", "-"))  # d3-format writes a Unicode minus
    except ValueError:
        return None


def last_place(readout: str) -> float:
    """The unit in the last place of a number as the browser printed it: '0.30' -> 0.01, '3.00e-3' -> 1e-05."""
    mantissa, _, exponent = readout.strip().lower().replace("\u2212", "-").partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def same_value(marker_value: str, readout: str) -> bool:
    """Does the marker's value (full precision) round to what the control shows? Labels compare as text."""
    a, b = _number(marker_value), _number(readout)
    if a is None or b is None:
        return marker_value.strip() == readout.strip()
    if a == b:  # infinities too
        return True
    return abs(a - b) <= 0.5 * last_place(readout) * (1 + 1e-9) + 1e-12 * max(1.0, abs(b))


def marker_mismatches(marker: str, readouts: dict[str, str]) -> list[str]:
    """Why a live_plot's status line does not match its controls ([] when it does).
    readouts: {description: what the control shows}, as read from the page."""
    values = parse_marker(marker)
    if values is None:
        return [f"status line is not a render marker: {marker.strip()[:300]!r}"]
    if not readouts:
        return ["no readable control in the widget"]
    problems = []
    for label, shown in readouts.items():
        if label not in values:
            problems.append(f"control {label!r} missing from the status line {marker.strip()!r}")
        elif not same_value(values[label], shown):
            problems.append(f"{label}: figure rendered at {values[label]}, control shows {shown}")
    return problems


# ---- JupyterLab server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_of(pid: int) -> list[int]:
    """Direct child process ids of pid (the kernels a Jupyter server started)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM (the server shuts its kernels down), then SIGKILL the server and any kernel left."""
    kernels = children_of(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for pid in kernels:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class LabError(RuntimeError):
    """JupyterLab did not start, or a notebook did not run."""


@contextlib.contextmanager
def lab_server(root_dir: Path, home: Path, env: dict | None = None):
    """Start JupyterLab on root_dir (settings, config and runtime under home, `env` added to the environment
    of the server and its kernels); yield its URL; always stop it."""
    for name, value in LAB_SETTINGS.items():
        path = home / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           **(env or {})}
    port = free_port()
    log_path = home / "lab.log"
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.token=", "--ServerApp.password=",
           f"--ServerApp.root_dir={root_dir}", "--ServerApp.ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True", "--allow-root"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root_dir)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise LabError(f"JupyterLab exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                if r.status == 200:
                    break
            if time.monotonic() > deadline:
                raise LabError(f"JupyterLab not up after {SERVER_START_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        stop_server(proc)


@contextlib.contextmanager
def chromium():
    """Debian's Chromium, headless, through Playwright. Yields the browser."""
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()


@contextlib.contextmanager
def new_page(browser):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        yield page
    finally:
        with contextlib.suppress(Exception):  # free the kernel: the next notebook gets the CPU
            page.evaluate("() => window.jupyterapp.serviceManager.sessions.shutdownAll()")
        context.close()


# ---- notebook in the page -------------------------------------------------------------------------------

# State of the current notebook, read from JupyterLab's model (not the DOM, which may lag).
NOTEBOOK_STATE_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.content.model) return null;
  const kernel = panel.sessionContext.session?.kernel;
  const cells = panel.content.model.cells;
  const state = {kernel: kernel ? kernel.status : 'none', pending: 0, executed: 0, errors: [], stderr: []};
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== 'code' || cell.sharedModel.getSource().trim() === '') continue;
    if (cell.executionCount === null) state.pending += 1; else state.executed += 1;
    const tags = cell.getMetadata('tags') || [];
    for (let j = 0; j < cell.outputs.length; j++) {
      const out = cell.outputs.get(j).toJSON();
      if (out.output_type === 'error' && !tags.includes('raises-exception'))
        state.errors.push({cell: i, ename: out.ename, evalue: String(out.evalue).slice(0, 300)});
      if (out.output_type === 'stream' && out.name === 'stderr')
        state.stderr.push({cell: i, text: (Array.isArray(out.text) ? out.text.join('') : out.text).slice(0, 2000)});
    }
  }
  return state;
}"""

# The outputs of one cell, from the model: [{output_type, name, text}] (text for streams only).
CELL_OUTPUTS_JS = """(index) => {
  const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
  const cell = cells.get(index);
  const outs = [];
  for (let j = 0; j < cell.outputs.length; j++) {
    const o = cell.outputs.get(j).toJSON();
    outs.push({output_type: o.output_type, name: o.name || null,
               text: o.text === undefined ? null : (Array.isArray(o.text) ? o.text.join('') : o.text)});
  }
  return outs;
}"""

KERNEL_IDLE_JS = "() => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'"


def open_notebook(page, url: str, name: str) -> None:
    """Open the notebook at path `name` (relative to the server's root) in a fresh workspace; wait for its kernel."""
    page.goto(f"{url}/lab/tree/{name}?reset", timeout=90_000)
    page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=90_000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=90_000)  # the session exists and its kernel is ready


def run_all(page, timeout_s: float = RUN_ALL_TIMEOUT_S) -> tuple[float, dict]:
    """Run all cells; wait until every nonempty code cell ran (or one failed) and the kernel stays idle."""
    start = time.monotonic()
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # no await: can hang
    deadline = start + timeout_s
    idle_since = None
    while True:
        state = page.evaluate(NOTEBOOK_STATE_JS)
        finished = state["errors"] or state["pending"] == 0
        if state["kernel"] == "idle" and finished:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 1.0:  # idle for a second: no queued cell is about to start
                return time.monotonic() - start, state
        else:
            idle_since = None
        if time.monotonic() > deadline:
            raise LabError(f"run-all not finished after {timeout_s} s: {state}")
        time.sleep(0.25)


def cell_outputs(page, index: int) -> list[dict]:
    return page.evaluate(CELL_OUTPUTS_JS, index)


# Run code in the current notebook's kernel (not in a cell); resolve to what it printed on stdout.
KERNEL_PRINT_JS = """async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({code: code, silent: false, store_history: false});
  let text = '';
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === 'stream') text += msg.content.text;
    if (msg.header.msg_type === 'error') text += 'ERROR ' + msg.content.ename + ': ' + msg.content.evalue;
  };
  await future.done;
  return text;
}"""


def kernel_print(page, code: str) -> str:
    """What `code`, run in the current notebook's kernel outside any cell, printed on stdout."""
    return page.evaluate(KERNEL_PRINT_JS, code)


CURRENT_PATH_JS = "() => window.jupyterapp.shell.currentWidget?.context?.path ?? null"


OUTPUTS_SETTLED_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const imgs = [...panel.node.querySelectorAll('.jp-OutputArea-output img')];
  return imgs.length > 0 && imgs.every(i => i.complete && i.naturalHeight > 0);
}"""
"""the current notebook's output images are all decoded, so its layout (and a scroll position in it) is settled"""


def current_path(page) -> str | None:
    """The path of the document in the Lab's current tab (None when it is not a document)."""
    return page.evaluate(CURRENT_PATH_JS)


# Where the `## K.` heading of the current notebook sits: its top relative to the notebook's panel, and the
# panel's height (a rendered heading carries its text, spaces as '-', as data-jupyter-id, or as id).
SECTION_HEADING_JS = """(k) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const h = [...panel.node.querySelectorAll('h2')].find(h => h.textContent.startsWith(k + '. '));
  if (!h) return null;
  const r = h.getBoundingClientRect(), p = panel.content.node.getBoundingClientRect();
  return {top: Math.round(r.top - p.top), height: Math.round(p.height),
          id: h.getAttribute('data-jupyter-id') || h.id};
}"""


def section_heading(page, section: int) -> dict | None:
    """{top, height, id} of the current notebook's `## K.` heading (None when not rendered)."""
    return page.evaluate(SECTION_HEADING_JS, section)


def activate(page, path: str) -> None:
    """Bring the tab of the open document at `path` to the front."""
    page.evaluate("(path) => { const w = [...window.jupyterapp.shell.widgets('main')]"
                  ".find(w => w.context?.path === path); window.jupyterapp.shell.activateById(w.id); }", path)
    page.wait_for_function(f"() => ({CURRENT_PATH_JS})() === {json.dumps(path)}", timeout=30_000)


# ---- widgets in the page ----------------------------------------------------------------------------

# {description: what the control shows} for every control inside a widget (slider readouts as rounded
# by the browser, a dropdown's or toggle buttons' selected label, a checkbox's state).
READOUTS_JS = """(root) => {
  const out = {};
  for (const el of root.querySelectorAll('CONTROLS')) {
    const label = (el.querySelector('.widget-label')?.textContent || '').trim();
    let shown = null;
    if (el.classList.contains('widget-slider')) shown = el.querySelector('.widget-readout')?.textContent;
    else if (el.classList.contains('widget-dropdown')) {
      const s = el.querySelector('select'); shown = s && s.selectedIndex >= 0 ? s.options[s.selectedIndex].text : null;
    } else if (el.classList.contains('widget-toggle-buttons')) shown = el.querySelector('.mod-active')?.textContent;
    else if (el.classList.contains('widget-checkbox')) shown = el.querySelector('input')?.checked ? 'True' : 'False';
    if (label && shown !== null && shown !== undefined) out[label] = shown.trim();
  }
  return out;
}""".replace("CONTROLS", CONTROL_SELECTOR)

# Arm a one-shot timer on a live_plot: keydown time; every change of the status line and of the image's
# src, and every image load, with its time.
ARM_LIVE_PLOT_TIMER_JS = """(root) => {
  if (window.__redraw && window.__redraw.obs) window.__redraw.obs.disconnect();
  const img = root.querySelector('img.live-plot-image');
  const marker = root.querySelector('.live-plot-marker');
  const r = {t0: null, markers: [{t: -1, text: marker.textContent}], srcs: [], loads: [], obs: null};
  window.__redraw = r;
  document.addEventListener('keydown', () => { if (r.t0 === null) r.t0 = performance.now(); },
                            {capture: true, once: true});
  img.addEventListener('load', () => { if (window.__redraw === r) r.loads.push(performance.now()); });
  r.obs = new MutationObserver((records) => {
    const t = performance.now();
    if (records.some(rec => rec.type === 'attributes' && rec.target === img)) r.srcs.push(t);
    const text = marker.textContent;
    if (r.markers[r.markers.length - 1].text !== text) r.markers.push({t: t, text: text});
  });
  r.obs.observe(root, {subtree: true, childList: true, characterData: true, attributes: true,
                       attributeFilter: ['src']});
}"""
REDRAW_STATE_JS = "() => ({t0: window.__redraw.t0, markers: window.__redraw.markers, srcs: window.__redraw.srcs, " \
                  "loads: window.__redraw.loads, now: performance.now()})"
SAME_IMAGE_GRACE_MS = 500
"""a status line without a new image: the kernel's PNG was byte-identical (no update sent) once this long passed"""

def live_plots_on_page(page) -> list:
    """Every live_plot widget in the notebook, in page order (locators)."""
    found = page.locator(LIVE_PLOT)
    return [found.nth(i) for i in range(found.count())]


def toasts(page) -> list[str]:
    """The text of every notification toast on screen (JupyterLab's react-toastify container)."""
    return page.evaluate("() => [...document.querySelectorAll('.jp-toastContainer .Toastify__toast')]"
                         ".map(e => e.textContent)")


def readouts(widget) -> dict[str, str]:
    return widget.evaluate(READOUTS_JS)


def marker_of(widget) -> str:
    return widget.locator(".live-plot-marker").first.inner_text(timeout=10_000)


def check_markers(page, timeout_s: float = 10.0) -> list[dict]:
    """For every live_plot on the page: its status line against its controls, given up to timeout_s to
    settle (widget state still arriving). -> [{index, marker, readouts, mismatches}]"""
    rows = []
    plots = page.locator(LIVE_PLOT)
    for i in range(plots.count()):
        widget = plots.nth(i)
        widget.locator("img.live-plot-image").wait_for(state="attached", timeout=60_000)
        deadline = time.monotonic() + timeout_s
        while True:
            marker, shown = marker_of(widget), readouts(widget)
            problems = marker_mismatches(marker, shown)
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        rows.append(dict(index=i, marker=" ".join(marker.split()), readouts=shown, mismatches=problems))
    return rows


def sliders_of(widget):
    return widget.locator(".widget-slider")


def slider_state(widget, index: int) -> dict:
    handle = sliders_of(widget).nth(index).locator(".noUi-handle").first
    return {k: handle.get_attribute(f"aria-value{k}") for k in ("now", "min", "max")}


def press(page, widget, index: int, direction: str) -> None:
    handle = sliders_of(widget).nth(index).locator(".noUi-handle").first
    handle.scroll_into_view_if_needed(timeout=10_000)
    handle.focus()
    page.keyboard.press("ArrowRight" if direction == "right" else "ArrowLeft")


def room(widget, index: int, direction: str) -> bool:
    """Can the slider move one step that way?"""
    s = slider_state(widget, index)
    bound = s["max"] if direction == "right" else s["min"]
    return s["now"] != bound


def step_live_plot(page, widget, index: int = 0, direction: str = "right") -> dict:
    """One key press on slider `index` of a live_plot; flips direction at a bound. -> {seconds, direction,
    marker, renders, readouts}: seconds from keydown until the status line states the new value and the
    image set with it has loaded. When the new value draws a byte-identical PNG the kernel sends no new
    image (renders 0): then the time is the status line's."""
    if not room(widget, index, direction):
        direction = "left" if direction == "right" else "right"
    widget.evaluate(ARM_LIVE_PLOT_TIMER_JS)
    press(page, widget, index, direction)
    page.wait_for_function("() => window.__redraw.t0 !== null", timeout=10_000, polling=20)
    deadline = time.monotonic() + REDRAW_TIMEOUT_S
    while True:
        shown = readouts(widget)  # the readout follows the key press at once (browser side)
        state = page.evaluate(REDRAW_STATE_JS)
        hit = next((m for m in state["markers"][1:] if not marker_mismatches(m["text"], shown)), None)
        errors = [m["text"] for m in state["markers"][1:] if m["text"].strip().startswith("error")]
        if errors:
            raise LabError(f"update raised inside the widget: {errors[-1][:2000]}")
        if hit is not None:
            t0, marker = state["t0"], " ".join(hit["text"].split())
            before = [t for t in state["srcs"] if t <= hit["t"]]
            src = before[-1] if before else (state["srcs"][0] if state["srcs"] else None)
            loads = [t for t in state["loads"] if src is not None and t >= src]
            if src is not None and loads:
                return dict(seconds=(max(hit["t"], loads[0]) - t0) / 1000, direction=direction,
                            renders=len(state["srcs"]), image_arrived_s=(src - t0) / 1000,
                            image_loaded_s=(loads[0] - src) / 1000, marker=marker, readouts=shown)
            if src is None and state["now"] - hit["t"] > SAME_IMAGE_GRACE_MS:  # same picture at the new value
                return dict(seconds=(hit["t"] - t0) / 1000, direction=direction, renders=0, image_arrived_s=None,
                            image_loaded_s=None, marker=marker, readouts=shown)
        if time.monotonic() > deadline:
            raise LabError(f"no matching redraw {REDRAW_TIMEOUT_S} s after the key press: controls {shown}, "
                           f"status lines {[m['text'] for m in state['markers']]}, {len(state['srcs'])} image(s)")
        time.sleep(0.02)


MOVES = ("right", "right", "right", "left", "left")
"""a bench sweep of one slider: three new positions, then two back (cached inputs make those free)"""


def sweep(page, widget, index: int, moves=MOVES) -> list[dict]:
    """Press the slider's arrow keys along `moves` (flipped at a bound), one redraw at a time."""
    return [dict(step_live_plot(page, widget, index, d), slider=index) for d in moves]
