"""Wall time of `make grade` (python -m interview grade FILE) on a mock round and on the whole catalog.

  .venv/bin/python bench/practice_bench.py [--runs 3]

Budgets: a round (3 bugs) within 10 s, the whole catalog (grpo_buggy.py, 11 bugs) within 20 s, on this 2-core
machine. A round is timed twice: untouched (every function matches the hand-out, nothing is run for it) and with
its three bugs fixed in another way than the fixed twin's (the slow path: each edited function is tested in the
fixed twin and trained for a short run). Each run is a fresh process, as a user runs it: importing torch is
included.

Measured on the LM loop (short run: 8 iterations of B=10, G=8 from the SFT checkpoint), 3 runs each, with the
machine shared by other jobs (load average 4 on 2 cores): untouched round 2.7 s, fixed another way 10.5 s
(7.1 s at best; 7.3 s of CPU over the grader's processes: tests 2.8 s and short runs 3.2 s, side by side),
whole catalog 1.7 s. The slow path's budget holds on a quiet machine, not under that load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUDGETS = {"round (3 bugs), untouched": 10.0, "round (3 bugs), fixed another way": 10.0,
           "whole catalog (grpo_buggy.py)": 20.0}


def fixed_another_way(source: str, bug_ids: list[str]) -> str:
    """`source` with the functions of `bug_ids` replaced by the fixed twin's, each with one added no-op
    statement, so the grader sees an edit that is not the twin's text and takes its slow path."""
    from interview import splice
    from workbook import catalog

    fixed = splice.FIXED.read_text()
    nodes = splice.function_nodes(fixed)
    texts = {}
    for name in dict.fromkeys(catalog.bug(b).function for b in bug_ids):
        lines = fixed.splitlines()[nodes[name].lineno - 1: nodes[name].end_lineno]
        first = nodes[name].body[1] if splice.is_string(nodes[name].body[0]) else nodes[name].body[0]
        at = first.lineno - nodes[name].lineno
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        texts[name] = "\n".join([*lines[:at], f"{indent}_unused = None", *lines[at:]])
    return splice.strip_fix_comments(splice.replace_functions(source, texts))


def grade_seconds(path: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (the grader and its child processes, which may use both cores, so CPU can
    exceed wall) and exit code of one `python -m interview grade path`."""
    cpu = lambda: (lambda r: r.ru_utime + r.ru_stime)(resource.getrusage(resource.RUSAGE_CHILDREN))  # noqa: E731
    start, cpu_start = time.perf_counter(), cpu()
    proc = subprocess.run([sys.executable, "-m", "interview", "grade", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, cpu() - cpu_start, proc.returncode


def bench_practice(runs: int = 3, progress=print) -> dict:
    """{case: dict(wall_s=[...], wall_median_s, budget_s, exit_codes, loadavg)} for a round and the catalog."""
    from interview import rounds, splice

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        round_file, fixed_file = Path(tmp) / "round_1.py", Path(tmp) / "round_1_fixed.py"
        source = rounds.round_source(1, rounds.DEFAULT_BUGS, dt.datetime.now(dt.UTC))
        round_file.write_text(source)
        fixed_file.write_text(fixed_another_way(source, rounds.draw(1, rounds.DEFAULT_BUGS)))
        cases = (("round (3 bugs), untouched", round_file), ("round (3 bugs), fixed another way", fixed_file),
                 ("whole catalog (grpo_buggy.py)", splice.HANDOUT))
        for case, path in cases:
            load_start = os.getloadavg()[0]
            walls, cpus, codes = zip(*(grade_seconds(path) for _ in range(runs)), strict=True)
            results[case] = dict(wall_s=list(walls), wall_median_s=statistics.median(walls), budget_s=BUDGETS[case],
                                 cpu_s=list(cpus), cpu_median_s=statistics.median(cpus), exit_codes=list(codes),
                                 loadavg=[load_start, os.getloadavg()[0]])
            progress(f"[practice] {case}: wall {' '.join(f'{w:.1f}' for w in walls)} s, "
                     f"cpu {' '.join(f'{c:.1f}' for c in cpus)} s")
    return results


def practice_table(results: dict) -> list[str]:
    lines = [f"{'make grade':40s} {'wall median s':>14s} {'runs':>18s} {'cpu median s':>13s} {'budget':>7s}  exit  "
             "load avg"]
    for case, r in results.items():
        ok = "ok" if r["wall_median_s"] <= r["budget_s"] else "OVER"
        runs = " ".join(f"{w:.1f}" for w in r["wall_s"])
        lines.append(f"{case:40s} {r['wall_median_s']:14.2f} {runs:>18s} {r['cpu_median_s']:13.2f} {ok:>7s}  "
                     f"{r['exit_codes'][0]:4d}  {r['loadavg'][0]:.1f} -> {r['loadavg'][1]:.1f}")
    lines.append("budget: on the wall median; cpu adds up the grader's processes, which may run on both cores")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print("\n".join(practice_table(bench_practice(args.runs))))


if __name__ == "__main__":
    main()
