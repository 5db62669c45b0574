"""Slider redraw in the browser: key press on a slider to the new image, per notebook (median and worst).

  .venv/bin/python bench/redraw_bench.py                     harnesses + every notebooks/NN_*.ipynb
  .venv/bin/python bench/redraw_bench.py --only 02 harness   names containing any of these strings

Opens each notebook (a copy, in a temporary directory) in JupyterLab in Debian's Chromium, runs all
cells, checks that every live_plot figure matches its sliders, then sweeps the first SLIDERS sliders of
every slider widget with the arrow keys (lab_driver.MOVES: three steps one way, two back) and times each
move inside the browser, from keydown to the new image (tests/browser/lab_driver.py; the browser test uses
the same code). The harness notebooks (lab_driver.HARNESSES) measure the machinery alone: a trivial live_plot
figure, and a three-axes figure with lines and bars, drawn in full or blitted.

Target (issue 12): median <= 0.15 s and worst <= 0.3 s per notebook on the project's 2-core machine.
Results: bench/results/redraw.json. The machine may be shared: the load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.append(str(ROOT / "tests" / "browser"))  # the browser driver lives beside the browser test it serves
import lab_driver as lab  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
RESULTS = BENCH / "results"
SLIDERS = 3
"""sliders swept per widget (the first ones)"""
TARGET_MEDIAN_S, TARGET_WORST_S = 0.15, 0.3


def notebook_names() -> list[str]:
    return [p.name for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))]


def bench_one(page, url: str, name: str, moves=lab.MOVES, sliders: int = SLIDERS) -> dict:
    """Run all, check figures against sliders, sweep the sliders. -> one result row (times in seconds)."""
    row = dict(notebook=name, error=None, moves=[], markers=[])
    lab.open_notebook(page, url, name)
    row["run_all_s"], state = lab.run_all(page)
    if state["errors"] or state["pending"]:
        row["error"] = f"run-all: errors {state['errors']}, {state['pending']} cells not run"
        return row
    row["markers"] = lab.check_markers(page)
    found = lab.live_plots_on_page(page)
    row["widgets"] = len(found)
    for w_index, widget in enumerate(found):
        for s_index in range(min(sliders, lab.sliders_of(widget).count())):
            for move in lab.sweep(page, widget, s_index, moves):
                row["moves"].append(dict(move, widget=w_index))
    times = [m["seconds"] for m in row["moves"]]
    if times:
        row.update(median_s=statistics.median(times), worst_s=max(times))
    return row


def bench_redraws(only=None, moves=lab.MOVES, sliders: int = SLIDERS, progress=print) -> list[dict]:
    """Every harness and notebook (or those whose name contains a string in `only`) -> result rows."""
    if not lab.chromium_available():
        progress(f"  no Chromium at {lab.CHROMIUM} (apt-get install -y chromium): skipped")
        return []
    names = list(lab.HARNESSES) + notebook_names()
    names = [n for n in names if not only or any(s in n for s in only)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_redraw_") as tmp:
        root, home = Path(tmp) / "lab", Path(tmp) / "home"
        root.mkdir()
        home.mkdir()
        for name in notebook_names():
            lab.prepare_copy(NOTEBOOKS / name, root / name)
        lab.write_harnesses(root)
        with lab.lab_server(root, home) as url, lab.chromium() as browser:
            for name in names:
                progress(f"  {name}: run all, check figures against sliders, sweep sliders")
                load = os.getloadavg()[0]
                with lab.new_page(browser) as page:
                    try:
                        row = bench_one(page, url, name, moves, sliders)
                    except Exception as e:  # one notebook's failure must not hide the others' numbers
                        row = dict(notebook=name, error=f"{type(e).__name__}: {str(e)[:500]}", moves=[], markers=[])
                row["loadavg"] = [load, os.getloadavg()[0]]
                rows.append(row)
                progress("    " + summary_line(row))
    return rows


def summary_line(row: dict) -> str:
    if row["error"]:
        return f"ERROR {row['error']}"
    bad = sum(1 for m in row["markers"] if m["mismatches"])
    markers = f"{len(row['markers']) - bad}/{len(row['markers'])} live_plot figures match their sliders"
    if not row["moves"]:
        return f"run-all {row['run_all_s']:.1f} s, no slider; {markers}"
    return (f"run-all {row['run_all_s']:.1f} s, {len(row['moves'])} moves: median {row['median_s']:.3f} s, "
            f"worst {row['worst_s']:.3f} s; {markers}")


def verdict(row: dict) -> str:
    if row["error"]:
        return "ERROR"
    if any(m["mismatches"] for m in row["markers"]):
        return "STALE"  # a figure does not match its sliders
    if not row["moves"]:
        return "-"
    return "ok" if row["median_s"] <= TARGET_MEDIAN_S and row["worst_s"] <= TARGET_WORST_S else "SLOW"


def redraw_table(rows: list[dict]) -> list[str]:
    if not rows:
        return ["redraw (browser): not measured"]
    lines = [f"slider redraw in Chromium, key press to new image (target: median <= {TARGET_MEDIAN_S} s, "
             f"worst <= {TARGET_WORST_S} s)",
             f"{'notebook':36s} {'moves':>5s} {'median s':>9s} {'worst s':>8s} {'figures ok':>10s} "
             f"{'verdict':>7s}  load avg"]
    for r in rows:
        figures = f"{sum(1 for m in r['markers'] if not m['mismatches'])}/{len(r['markers'])}"
        median = f"{r['median_s']:9.3f}" if "median_s" in r else f"{'-':>9s}"
        worst = f"{r['worst_s']:8.3f}" if "worst_s" in r else f"{'-':>8s}"
        load = r.get("loadavg", [float("nan")] * 2)
        lines.append(f"{r['notebook'].removesuffix('.ipynb'):36s} {len(r['moves']):5d} {median} "
                     f"{worst} {figures:>10s} {verdict(r):>7s}  {load[0]:.1f} -> {load[1]:.1f}"
                     + (f"  {r['error']}" if r["error"] else ""))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="notebooks whose name contains one of these strings")
    parser.add_argument("--sliders", type=int, default=SLIDERS, help=f"sliders swept per widget (default {SLIDERS})")
    args = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    print(f"redraw bench started {started}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
          flush=True)
    rows = bench_redraws(args.only, sliders=args.sliders, progress=lambda m: print(m, flush=True))
    (RESULTS / "redraw.json").write_text(json.dumps(dict(started=started, rows=rows), indent=1))
    print("\n".join(redraw_table(rows)))
    print(f"results: {RESULTS / 'redraw.json'}")


if __name__ == "__main__":
    main()
