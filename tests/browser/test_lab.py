"""Real browser: JupyterLab opens on notebook 00, the practice round runs from its panel, each notebook runs
clean, its figures match their sliders, every slider is back at its default after Run All, a slider redraws.

Drives Debian's Chromium (/usr/bin/chromium) with Playwright for Python against a JupyterLab started, as
`make lab` starts it, at the root of a temporary folder laid out like the repository (notebooks/ holds
copies of the notebooks, practice/ is where the panel draws its rounds: GRPO_PRACTICE_DIR), with fresh
user settings (lab_driver.py beside this file, shared with `make bench`). First, the Lab itself: `/` opens
notebooks/00_practice.ipynb (jupyter/jupyter_lab_config.json, installed by `make venv`) and no "get notified
about official Jupyter news?" toast shows (the settings override jupyter/overrides.json answers it). Then
notebook 00's panel draws, grades and hints a round and its link opens the round file; its drill card's timer
ticks in the browser and its "Backed by" link opens the cited notebook at that section. Per notebook:
  1. open it, Run All, fail on any error output (cells tagged raises-exception excepted);
  2. every live_plot's status line (`rendered clip=0.3`, hidden from the reader) must match what its
     sliders show, and every slider must be back where it was built (check cells probe other positions
     and put it back: workbook.widgets.moved_from_default);
  3. press ArrowRight (or ArrowLeft at the bound) on the first slider of the first slider widget and
     require the new image within REDRAW_BUDGET_S, timed inside the browser (keydown to the image whose
     status line states the new value);
  4. screenshot the widget to the test's temporary directory (path printed; `pytest -s` shows it).
Our own harness notebooks (lab_driver.HARNESSES) check the same machinery with known answers.

Skips (with the reason) when chromium or the playwright package is missing. Never run
`playwright install`: the browser is Debian's. Every wait is bounded; the server is always stopped.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import lab_driver as lab  # tests/browser/lab_driver.py (pytest puts this folder on sys.path)
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the figure check
import figure_check  # noqa: E402

pytestmark = pytest.mark.browser

if not lab.chromium_available():
    pytest.skip(f"no Chromium at {lab.CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)
pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install playwright)")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
NOTEBOOK_NAMES = [p.name for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))]
START = "00_practice.ipynb"
"""the notebook `make lab` opens, with the practice panel (its own test below)"""
# A functional bound (the figure does redraw, promptly), not a speed target: timed tests flake on a
# busy machine. The redraw targets (median <= 0.15 s, worst <= 0.3 s per notebook) are measured by
# `make bench` (bench/redraw_bench.py); set REDRAW_BUDGET_S=0.3 to hold a quiet machine to them here.
REDRAW_BUDGET_S = float(os.environ.get("REDRAW_BUDGET_S", "5.0"))
NEWS_PROMPT = "official Jupyter news"
"""text of the toast JupyterLab shows on a first start unless told whether to fetch Jupyter news"""
NEWS_PROMPT_WAIT_S = 8.0
"""how long to watch for that toast once the Lab is restored (without the override it shows within 1 s)"""


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory) -> Path:
    """The server's root, laid out like the repository: notebooks/ (copies and the harnesses), practice/."""
    root = tmp_path_factory.mktemp("lab")
    (root / "notebooks").mkdir()
    for name in NOTEBOOK_NAMES:
        lab.prepare_copy(NOTEBOOKS / name, root / "notebooks" / name)
    lab.write_harnesses(root / "notebooks")
    return root


@pytest.fixture(scope="module")
def lab_url(lab_dir, tmp_path_factory):
    """The Lab on lab_dir; its kernels start with the figure check (tests/figure_check.py) installed."""
    ipython_dir = tmp_path_factory.mktemp("ipython")
    figure_check.write_startup(ipython_dir)
    env = {"GRPO_PRACTICE_DIR": str(lab_dir / "practice"), "IPYTHONDIR": str(ipython_dir)}
    try:
        with lab.lab_server(lab_dir, tmp_path_factory.mktemp("jupyter_home"), env=env) as url:
            yield url
    except lab.LabError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def browser():
    with lab.chromium() as b:
        yield b


@pytest.fixture
def page(browser):
    with lab.new_page(browser) as p:
        yield p


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def run_clean(page, lab_url, name) -> None:
    """Open notebooks/<name> and Run All; no error output, nothing on stderr (the figure check's reports among
    it), no cell left unexecuted."""
    lab.open_notebook(page, lab_url, f"notebooks/{name}")
    seconds, state = lab.run_all(page)
    print(f"\n{name}: run-all {seconds:.1f} s, {state['executed']} code cells executed")
    assert not state["errors"], f"{name}: error outputs {state['errors']}"
    assert not state["stderr"], f"{name}: stderr output (a FIGURE CHECK line is an illegible figure) {state['stderr']}"
    assert state["pending"] == 0, f"{name}: {state['pending']} code cells never ran"


def assert_figures_match_sliders(page, name, builds_live_plot: bool, at_default: bool = True) -> list[dict]:
    """Every live_plot's status line matches its controls; with at_default, every slider is where it was built."""
    rows = lab.check_markers(page)
    if builds_live_plot:
        assert rows, f"{name}: the code builds live_plot widgets but none rendered"
    for row in rows:
        print(f"{name}: live_plot {row['index']}: {row['marker']} | controls {row['readouts']}")
    bad = [(row["index"], row["mismatches"]) for row in rows if row["mismatches"]]
    assert not bad, f"{name}: figures that do not match their sliders after Run All: {bad}"
    if at_default:
        moved = lab.kernel_print(page, "from workbook.widgets import moved_from_default; print(moved_from_default())")
        assert moved.strip() == "[]", f"{name}: sliders not at their default after Run All: {moved.strip()}"
    return rows


def step_first_slider(page, shots: Path, name: str) -> dict:
    """One arrow-key step on the first slider of the first live_plot that has one; screenshot; -> step result."""
    with_slider = [w for w in lab.live_plots_on_page(page) if lab.sliders_of(w).count()]
    assert with_slider, f"{name}: no slider in any live_plot"
    widget = with_slider[0]
    move = lab.step_live_plot(page, widget)
    shot = shots / f"{Path(name).stem}.png"
    widget.screenshot(path=str(shot), timeout=30_000)
    print(f"{name}: live_plot redraw {move['seconds']:.3f} s after the key press ({move['direction']}); "
          f"screenshot {shot}")
    assert move["seconds"] <= REDRAW_BUDGET_S, f"{name}: redraw took {move['seconds']:.2f} s > {REDRAW_BUDGET_S} s"
    return move


def check_notebook(page, lab_url, shots, name, lab_dir) -> dict | None:
    run_clean(page, lab_url, name)
    builds_live_plot = lab.builds_live_plot(lab_dir / "notebooks" / name)
    assert_figures_match_sliders(page, name, builds_live_plot)
    if not builds_live_plot:
        print(f"{name}: no live_plot in the code: slider step skipped")
        return None
    return step_first_slider(page, shots, name)


def test_lab_opens_notebook_00_without_the_news_prompt(page, lab_url):
    """A first start (fresh user settings) at the server's root `/` shows notebooks/00_practice.ipynb and asks
    nothing about Jupyter news: the server's default for fetchNews is the project's override ("false"), and no
    toast with the question shows up."""
    plugin = "@jupyterlab/apputils-extension:notification"
    with urllib.request.urlopen(f"{lab_url}/lab/api/settings/{plugin}", timeout=30) as r:
        defaults = {k: v.get("default") for k, v in json.load(r)["schema"]["properties"].items()}
    assert (defaults["fetchNews"], defaults["checkForUpdates"]) == ("false", False), (
        f"{plugin} defaults {defaults}: the settings override jupyter/overrides.json is not installed in this "
        "environment (run `make venv`)")
    page.goto(f"{lab_url}/", timeout=90_000)
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => null)")  # the prompt is emitted right after this
    page.wait_for_function(f"() => ({lab.CURRENT_PATH_JS})() === 'notebooks/{START}'", timeout=60_000)
    deadline = time.monotonic() + NEWS_PROMPT_WAIT_S
    while time.monotonic() < deadline:
        toasts = lab.toasts(page)
        assert not any(NEWS_PROMPT in t for t in toasts), f"JupyterLab asks about news on first start: {toasts}"
        time.sleep(0.25)


def test_live_plot_harness(page, lab_url, lab_dir, shots):
    """A live_plot whose check cell moves the slider from Python: after Run All the figure shows the moved
    value (and the moved-slider check reports it), the check cell printed only its own line, the static copy of
    the figure is hidden under the live widget, and a key press redraws to the next value."""
    name = "harness_live_plot.ipynb"
    run_clean(page, lab_url, name)
    (row,) = assert_figures_match_sliders(page, name, True, at_default=False)  # its check cell moved the slider
    assert row["marker"] == "rendered x=0.3" and row["readouts"] == {"x": "0.30"}, row
    moved = lab.kernel_print(page, "from workbook.widgets import moved_from_default; print(moved_from_default())")
    assert moved.strip() == "['x=0.3 (built at x=0.5)']", moved
    static = page.locator(".jp-OutputArea-child .jp-RenderedImage").first
    assert static.count() == 1 and not static.is_visible(), "the static copy shows beside the live figure"
    outputs = lab.cell_outputs(page, 1)
    assert [(o["output_type"], o["text"]) for o in outputs] == [("stream", lab.HARNESS_LIVE_PLOT_PRINTS)], outputs
    move = step_first_slider(page, shots, name)
    assert move["marker"] == "rendered x=0.4" and move["renders"] == 1, move


def test_live_plot_harness_catches_a_stale_figure(page, lab_url):
    """The marker check can fail: a slider moved in the browser while the kernel is busy leaves the status
    line behind the slider, and check_markers reports it (then catches up once the kernel is free)."""
    name = "harness_live_plot.ipynb"
    run_clean(page, lab_url, name)
    page.evaluate("() => { window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.requestExecute("
                  "{code: 'import time; time.sleep(4)'}); }")
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
                           " === 'busy'", timeout=10_000)
    widget = lab.live_plots_on_page(page)[0]
    lab.press(page, widget, 0, "right")
    (stale,) = lab.check_markers(page, timeout_s=0.5)
    assert stale["mismatches"] == ["x: figure rendered at 0.3, control shows 0.40"], stale
    (fresh,) = lab.check_markers(page, timeout_s=15)
    assert not fresh["mismatches"] and fresh["marker"] == "rendered x=0.4", fresh


def panel_says(page, panel, text: str, timeout_s: float = 120) -> None:
    """Wait until the practice panel shows `text` (a command's output arrives when the kernel is done)."""
    try:
        panel.get_by_text(text, exact=False).first.wait_for(state="visible", timeout=timeout_s * 1000)
    except Exception as e:  # noqa: BLE001 - say what the panel shows instead
        raise AssertionError(f"the panel never showed {text!r}; it shows:\n{panel.inner_text()[:3000]}") from e


def test_a_round_drawn_graded_and_hinted_from_notebook_00(page, lab_url, lab_dir, shots):
    """Notebook 00 runs clean; its panel draws a round into practice/, grades it (nothing fixed yet), gives
    the first remaining bug's level-1 hint, then the third's (the bug-number field), and its link opens the
    round file in the Lab's editor."""
    run_clean(page, lab_url, START)
    assert not (lab_dir / "practice").exists(), "Run All of notebook 00 wrote into practice/"
    width = page.evaluate(lab.OUTPUT_WIDTH_JS)
    assert width >= figure_check.OUTPUT_WIDTH_PX, (
        f"outputs are {width} px wide at {lab.VIEWPORT}: the figure check assumes {figure_check.OUTPUT_WIDTH_PX}")
    panel = page.locator(".practice-panel")
    panel.get_by_role("button", name="Draw a round").click()
    panel_says(page, panel, "Round 1: 3 bugs left in")
    assert (lab_dir / "practice" / "round_1.py").is_file()
    panel.get_by_role("button", name="Grade").click()
    panel_says(page, panel, "0 of 3 fixed")
    panel.get_by_role("button", name="Hint").click()
    panel_says(page, panel, "hint 1 of 3 (level 1)")
    number = panel.locator("input[type=number]")  # the bug-number field: one remaining bug's hint at a time
    number.fill("3")
    number.press("Enter")
    panel.get_by_role("button", name="Hint").click()
    panel_says(page, panel, "hint 3 of 3 (level 1)")
    panel.screenshot(path=str(shots / "practice_panel.png"), timeout=30_000)
    panel.get_by_role("link", name="Open").click()
    page.wait_for_function(f"() => ({lab.CURRENT_PATH_JS})() === 'practice/round_1.py'", timeout=60_000)


def test_drill_card_timer_ticks_in_the_browser_and_its_link_opens_the_section(page, lab_url, shots):
    """Notebook 00's drill card: after Next the seconds box counts up with no kernel thread (a hidden Play
    widget drives it), Reveal stops it; the revealed "Backed by notebook NN §K" link opens notebooks/NN_*.ipynb
    in the Lab, and clicked again from notebook 00 (the notebook now open) shows the `## K.` heading in view.
    The first click scrolls there too under the Lab's default windowing mode (contentVisibility); this server
    runs with windowing off (lab_driver.LAB_SETTINGS), under which JupyterLab 4.6 does not scroll a notebook
    it has just opened. Nothing is scored: practice/ stays empty."""
    run_clean(page, lab_url, START)
    card = page.locator(".drill-card")
    seconds = card.locator(".drill-card-seconds input")
    play = card.locator(".widget-play")
    assert play.count() == 1 and not play.is_visible(), "the Play widget that drives the timer is visible"
    card.get_by_role("button", name="Next", exact=True).click()
    try:
        page.wait_for_function("(box) => Number(box.value) >= 3", arg=seconds.element_handle(), timeout=20_000)
    except Exception as e:  # noqa: BLE001 - say what the card shows instead
        raise AssertionError(f"the timer did not reach 3 s; it shows {seconds.input_value()!r}") from e
    card.get_by_role("button", name="Reveal", exact=True).click()
    link = card.get_by_role("link")
    link.wait_for(timeout=30_000)
    page.wait_for_function(lab.KERNEL_IDLE_JS, timeout=30_000)  # the stop arrived before the link
    shown = int(seconds.input_value())
    time.sleep(2.5)
    assert int(seconds.input_value()) == shown, "the timer still ticks after Reveal"
    said = lab.kernel_print(page, "from interview.drill_card import section_href\n"
                                  "print(card.seconds, card.current.section, section_href(card.current))").split()
    print(f"drill card: the timer showed {shown} s at Reveal, the kernel's clock {float(said[0]):.1f} s; "
          f"link {said[2]}")
    card.screenshot(path=str(shots / "drill_card.png"), timeout=30_000)
    section, target = int(said[1]), "notebooks/" + said[2].split("#")[0]
    page.wait_for_function("(a) => a.href.includes('/files/')", arg=link.element_handle(), timeout=30_000)
    link.click()  # the Lab's link handler: a relative link resolved against notebook 00's folder
    page.wait_for_function(f"() => ({lab.CURRENT_PATH_JS})() === '{target}'", timeout=60_000)
    # the Lab scrolls to a fragment once: images decoded later above the heading would push it out of view
    page.wait_for_function(lab.OUTPUTS_SETTLED_JS, timeout=120_000)
    lab.activate(page, f"notebooks/{START}")
    link.click()
    page.wait_for_function(f"() => ({lab.CURRENT_PATH_JS})() === '{target}'", timeout=60_000)
    page.wait_for_function(f"() => {{ const h = ({lab.SECTION_HEADING_JS})({section}); "
                           "return h !== null && h.top >= 0 && h.top < h.height; }", timeout=60_000)
    print(f"drill card: {target} §{section} heading at {lab.section_heading(page, section)}")


@pytest.mark.skipif(not NOTEBOOK_NAMES, reason="no notebooks/NN_*.ipynb yet")
@pytest.mark.parametrize("name", [n for n in NOTEBOOK_NAMES if n != START] or ["none"])
def test_notebook_runs_and_redraws(page, lab_url, lab_dir, shots, name):
    check_notebook(page, lab_url, shots, name, lab_dir)
