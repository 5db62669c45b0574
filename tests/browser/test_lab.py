"""Real browser: each notebook runs clean in JupyterLab, and its first slider redraws within 1 s.

Drives Debian's Chromium (/usr/bin/chromium) with Playwright for Python against a JupyterLab
started on a free localhost port with an empty token. The notebooks are copied into a temporary
directory first (JupyterLab never touches the repository's files), with their kernelspec set to
python3 and nbval's NBVAL_RAISES_EXCEPTION cells tagged `raises-exception`, the tag JupyterLab's
run-all honours. Per notebook:
  1. open /lab/tree/NAME.ipynb?reset, wait for the kernel to be idle, run all cells;
  2. fail on any error output (cells tagged raises-exception excepted);
  3. focus the first slider of the first interactive widget, press ArrowRight, and require a new
     image in that widget's output area within REDRAW_BUDGET_S of the key press (timed inside the
     browser: keydown listener to MutationObserver);
  4. screenshot the widget to the test's temporary directory (path printed; `pytest -s` shows it).
A tiny notebook of our own (test_live_figure_redraws) checks the same machinery against
workbook.widgets.live_figure, with a deterministic marker printed by its draw function.

Skips (with the reason) when chromium or the playwright package is missing. Never run
`playwright install`: the browser is Debian's. Every wait is bounded; the server is always stopped.
"""

from __future__ import annotations

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

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install playwright)")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
NOTEBOOK_NAMES = [p.name for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# A functional bound (the figure does redraw, promptly), not a speed target: timed tests flake on a
# busy machine. The sub-second redraw target is measured by `make bench` (bench/notebook_bench.py);
# set REDRAW_BUDGET_S=1 to hold a quiet machine to it here too.
REDRAW_BUDGET_S = float(os.environ.get("REDRAW_BUDGET_S", "5.0"))
RUN_ALL_TIMEOUT_S = 300
SERVER_START_TIMEOUT_S = 90

# JupyterLab user settings for the test server: no news/update pop-ups, no autosave, every cell in the
# DOM (no virtual scrolling), so locators see all outputs.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}

HARNESS_NOTEBOOK = "harness_live_figure.ipynb"
HARNESS_CODE = '''\
import matplotlib.pyplot as plt
from workbook.widgets import live_figure, slider

def draw(x):
    fig, ax = plt.subplots(figsize=(4, 2.5))
    ax.plot([0, 1], [0, x], marker="o")
    ax.set_ylim(0, 1)
    ax.set_title(f"x = {x:.2f}")
    plt.show()
    print(f"rendered x={x:.2f}")
    return x

w = live_figure(draw, height="300px", x=slider(0.5, 0.0, 1.0, 0.1, "x"))
w'''


# ---- notebook copies -------------------------------------------------------------------------------


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


def harness_notebook() -> dict:
    cell = dict(cell_type="code", execution_count=None, metadata={}, outputs=[], source=HARNESS_CODE)
    return dict(cells=[cell], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                       "language": "python"}}, nbformat=4, nbformat_minor=5)


# ---- JupyterLab server -----------------------------------------------------------------------------


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
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lab")
    for name in NOTEBOOK_NAMES:
        prepare_copy(NOTEBOOKS / name, root / name)
    (root / HARNESS_NOTEBOOK).write_text(json.dumps(harness_notebook()))
    return root


@pytest.fixture(scope="module")
def lab_url(lab_dir, tmp_path_factory):
    home = tmp_path_factory.mktemp("jupyter_home")
    for name, value in LAB_SETTINGS.items():
        path = home / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces")}
    port = free_port()
    log_path = home / "lab.log"
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.token=", "--ServerApp.password=",
           f"--ServerApp.root_dir={lab_dir}", "--ServerApp.ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True", "--allow-root"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=lab_dir)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab not up after {SERVER_START_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        stop_server(proc)


# ---- browser ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    pw = sync_api.sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    p = context.new_page()
    p.set_default_timeout(60_000)
    try:
        yield p
    finally:
        context.close()


# ---- in-page helpers -------------------------------------------------------------------------------

# State of the current notebook, read from JupyterLab's model (not the DOM, which may lag).
NOTEBOOK_STATE_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.content.model) return null;
  const kernel = panel.sessionContext.session?.kernel;
  const cells = panel.content.model.cells;
  const state = {kernel: kernel ? kernel.status : 'none', pending: 0, executed: 0, errors: []};
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== 'code' || cell.sharedModel.getSource().trim() === '') continue;
    if (cell.executionCount === null) state.pending += 1; else state.executed += 1;
    const tags = cell.getMetadata('tags') || [];
    for (let j = 0; j < cell.outputs.length; j++) {
      const out = cell.outputs.get(j).toJSON();
      if (out.output_type === 'error' && !tags.includes('raises-exception'))
        state.errors.push({cell: i, ename: out.ename, evalue: String(out.evalue).slice(0, 300)});
    }
  }
  return state;
}"""

KERNEL_IDLE_JS = "() => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'"

# Arm a one-shot timer: keydown time, then the time a new <img> shows up in the widget's output.
ARM_REDRAW_TIMER_JS = """(output) => {
  const old = new Set(output.querySelectorAll('img'));
  const oldSrc = new Set([...old].map(i => i.src));
  window.__redraw = {t0: null, t1: null};
  const onKey = () => { if (window.__redraw.t0 === null) window.__redraw.t0 = performance.now(); };
  document.addEventListener('keydown', onKey, {capture: true});
  const obs = new MutationObserver(() => {
    const fresh = [...output.querySelectorAll('img')].some(i => !old.has(i) || !oldSrc.has(i.src));
    if (fresh && window.__redraw.t0 !== null && window.__redraw.t1 === null) {
      window.__redraw.t1 = performance.now();
      obs.disconnect();
    }
  });
  obs.observe(output, {childList: true, subtree: true, attributes: true, attributeFilter: ['src']});
}"""


def open_notebook(page, url: str, name: str) -> None:
    page.goto(f"{url}/lab/tree/{name}?reset", timeout=90_000)
    page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=90_000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=90_000)  # the session exists and its kernel is ready


def run_all(page) -> tuple[float, dict]:
    """Run all cells; wait until every nonempty code cell ran (or one failed) and the kernel stays idle."""
    start = time.monotonic()
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # no await: can hang
    deadline = start + RUN_ALL_TIMEOUT_S
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
        assert time.monotonic() < deadline, f"run-all not finished after {RUN_ALL_TIMEOUT_S} s: {state}"
        time.sleep(0.25)


def step_first_slider(page, shots: Path, name: str) -> float:
    """ArrowRight on the first slider of the first interactive widget -> seconds until a new image."""
    widget = page.locator(".widget-interact").first
    widget.wait_for(state="attached", timeout=30_000)
    output = widget.locator(".widget-output").first
    output.locator("img").first.wait_for(state="attached", timeout=60_000)  # the initial draw
    handle = widget.locator(".widget-slider .noUi-handle").first
    handle.scroll_into_view_if_needed(timeout=10_000)
    at_max = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
    output.evaluate(ARM_REDRAW_TIMER_JS)
    handle.focus()
    page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")  # one step, whichever way there is room
    page.wait_for_function("() => window.__redraw.t1 !== null", timeout=30_000, polling=20)
    seconds = page.evaluate("() => (window.__redraw.t1 - window.__redraw.t0) / 1000")
    page.wait_for_timeout(300)  # let the image settle before the screenshot
    shot = shots / f"{Path(name).stem}.png"
    widget.screenshot(path=str(shot), timeout=30_000)
    text = output.inner_text(timeout=10_000)
    assert "Traceback" not in text, f"{name}: the redraw raised inside the widget:\n{text[-2000:]}"
    print(f"\n{name}: redraw {seconds:.3f} s after the key press; screenshot {shot}")
    return seconds


# ---- tests -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def has_widget(path: Path) -> bool:
    """Does any code cell build an interactive widget? (Then one must render: no silent pass.)"""
    cells = json.loads(path.read_text()).get("cells", [])
    code = "".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    return bool(re.search(r"\b(live_figure|interactive|interact)\(", code))


def check_notebook(page, lab_url, shots, name, lab_dir) -> float | None:
    open_notebook(page, lab_url, name)
    seconds, state = run_all(page)
    print(f"\n{name}: run-all {seconds:.1f} s, {state['executed']} code cells executed")
    assert not state["errors"], f"{name}: error outputs {state['errors']}"
    assert state["pending"] == 0, f"{name}: {state['pending']} code cells never ran"
    if not has_widget(lab_dir / name):
        print(f"{name}: no interactive widget in the code: slider step skipped")
        return None
    redraw = step_first_slider(page, shots, name)
    assert redraw <= REDRAW_BUDGET_S, f"{name}: redraw took {redraw:.2f} s > {REDRAW_BUDGET_S} s"
    return redraw


def test_live_figure_redraws(page, lab_url, lab_dir, shots):
    """Our own one-cell notebook: live_figure's slider redraws, and the draw's marker shows the new value."""
    check_notebook(page, lab_url, shots, HARNESS_NOTEBOOK, lab_dir)
    output = page.locator(".widget-interact").first.locator(".widget-output").first
    sync_api.expect(output).to_contain_text(re.compile(r"rendered x=0\.60"), timeout=10_000)


@pytest.mark.skipif(not NOTEBOOK_NAMES, reason="no notebooks/NN_*.ipynb yet")
@pytest.mark.parametrize("name", NOTEBOOK_NAMES or ["none"])
def test_notebook_runs_and_redraws(page, lab_url, lab_dir, shots, name):
    check_notebook(page, lab_url, shots, name, lab_dir)

