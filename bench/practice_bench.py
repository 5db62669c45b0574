"""Wall time of `make grade` (python -m interview grade FILE) on a mock round and on the whole catalog.

  .venv/bin/python bench/practice_bench.py [--runs 3]

Budgets: a round (3 bugs) within 10 s, the whole catalog (grpo_buggy.py, 17 bugs) within 20 s, on this 2-core
machine. A round is timed twice: untouched (every function matches the hand-out, nothing is run for it) and with
its three bugs fixed in another way than the fixed twin's (the slow path: each edited function is tested in the
fixed twin and trained for a short run); a second round, of B12, B13 and B17 (positions in the training forward,
the mask in the @torch.no_grad() sampler, the reward text), is timed on the slow path too. Each run is a fresh
process, as a user runs it: importing torch is included.

Measured on the LM loop with 17 bugs (short run: 8 iterations of B=10, G=8 from the SFT checkpoint), with the
machine shared by other jobs, 2026-12-02 UTC; medians, wall (CPU of the grader's processes):
  01:25, 3 runs each, load average 2.8 to 3.0: untouched round 2.1 s (2.0 s), fixed another way 14.4 s (11.8 s),
    B12 + B13 + B17 fixed another way 8.5 s (11.0 s), whole catalog 2.2 s (2.4 s);
  01:41, 5 runs each, load 2.9 to 3.2, the tests now without pytest's log and warning capture (about 1 s of the
    test process's 3.5 s): untouched 4.5 s (2.3 s), fixed another way 11.4 s (10.0 s), B12 + B13 + B17 10.7 s
    (9.7 s; 9.3 s at best), whole catalog 2.1 s (2.1 s);
  then torch._dynamo imported once before the fork rather than in each forked process: B12 + B13 + B17 10.4 s of
    CPU against 11.9 s without it (4 interleaved runs each, load 3 to 4.4).
The test process takes about 3.5 s and the training process 4.3 s (the fixed twin's short run and three hybrids'
at 0.6 to 0.7 s each, plus building them), side by side after the parent's 2 s: about 6 to 7 s of wall on a
quiet machine (an estimate from those parts, not measured here), over 10 s once the two share one core.
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

PLUMBING_ROUND = ("B12", "B13", "B17")
"""the bugs of the second timed round: the training forward's positions, the sampler's mask (generate, under
@torch.no_grad()), the reward text"""
BUDGETS = {"round (3 bugs), untouched": 10.0, "round (3 bugs), fixed another way": 10.0,
           f"round ({', '.join(PLUMBING_ROUND)}), fixed another way": 10.0, "whole catalog (grpo_buggy.py)": 20.0}


def fixed_another_way(source: str, bug_ids: list[str]) -> str:
    """`source` with the functions of `bug_ids` replaced by the fixed twin's, each with one added no-op
    statement, so the grader sees an edit that is not the twin's text and takes its slow path."""
    from interview import splice
    from workbook import catalog

    fixed = splice.FIXED.read_text()
    nodes = splice.function_nodes(fixed)
    texts = {}
    for name in dict.fromkeys(catalog.bug(b).function for b in bug_ids):
        start = splice.span(nodes[name])[0]  # the decorators too (generate's @torch.no_grad())
        lines = fixed.splitlines()[start - 1: nodes[name].end_lineno]
        first = nodes[name].body[1] if splice.is_string(nodes[name].body[0]) else nodes[name].body[0]
        at = first.lineno - start
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
        number = next(n for n in range(100_000) if rounds.draw(n, len(PLUMBING_ROUND)) == list(PLUMBING_ROUND))
        plumbing_file = Path(tmp) / f"round_{number}_fixed.py"
        plumbing = rounds.round_source(number, len(PLUMBING_ROUND), dt.datetime.now(dt.UTC))
        plumbing_file.write_text(fixed_another_way(plumbing, list(PLUMBING_ROUND)))
        cases = (("round (3 bugs), untouched", round_file), ("round (3 bugs), fixed another way", fixed_file),
                 (f"round ({', '.join(PLUMBING_ROUND)}), fixed another way", plumbing_file),
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
    lines = [f"{'make grade':42s} {'wall median s':>14s} {'runs':>18s} {'cpu median s':>13s} {'budget':>7s}  exit  "
             "load avg"]
    for case, r in results.items():
        ok = "ok" if r["wall_median_s"] <= r["budget_s"] else "OVER"
        runs = " ".join(f"{w:.1f}" for w in r["wall_s"])
        lines.append(f"{case:42s} {r['wall_median_s']:14.2f} {runs:>18s} {r['cpu_median_s']:13.2f} {ok:>7s}  "
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
