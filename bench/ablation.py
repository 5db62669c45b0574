"""Final reward of the fixed twin, the buggy twin and every single-bug hybrid over seeds 0, 1, 2,
default settings (AdditionTask from the SFT checkpoint; the README's ablation table), then both twins on the
extra toy tasks of workbook/tasks.py. About 8 s per run on a quiet 2-core CPU (13 runs per seed, then 10 per
seed for the tasks).

    .venv/bin/python bench/ablation.py [--seeds 0 1 2] [--no-tasks] [--only fixed buggy B12 ...] [--check]

--check compares every row it computes with the README's "One bug at a time" table (final reward per seed and
non-finite losses, as printed there) and its "Other tasks" table (seed 0's first-5 -> last-10 rewards, fixed and
buggy), and exits 1 naming the rows that differ: the README's numbers are this script's output, not a copy.

A task row also gives seed 0's mean reward over the first 5 and the last 10 iterations (the README's "seed 0"
columns).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from pathlib import Path

import grpo_buggy
import grpo_fixed
import grpo_support
import workbook  # noqa: F401  (one torch thread)
from workbook.catalog import BUG_IDS, hybrid
from workbook.tasks import TASKS


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--no-tasks", action="store_true", help="skip the extra toy tasks")
    parser.add_argument("--only", nargs="+", metavar="RUN", help="only these runs (fixed, buggy, B1 ...)")
    parser.add_argument("--check", action="store_true", help="compare with the README's tables; exit 1 if they differ")
    args = parser.parse_args()
    if args.check and args.seeds != [0, 1, 2]:
        parser.error("--check compares seeds 0 1 2, the README's columns")
    logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids fail health checks by design
    names = args.only or ["fixed", "buggy", *BUG_IDS]
    unknown = sorted(set(names) - {"fixed", "buggy", *BUG_IDS})
    if unknown:
        parser.error(f"unknown runs {unknown}: use fixed, buggy or {BUG_IDS[0]}..{BUG_IDS[-1]}")
    twins = {"fixed": grpo_fixed, "buggy": grpo_buggy}
    runs = {name: twins[name] if name in twins else hybrid(name) for name in names}
    print(f"{'run':14s} " + " ".join(f"seed {s}" for s in args.seeds) + "   non-finite losses", flush=True)
    rows = {}
    for name, module in runs.items():
        rows[name] = report(name, module, None, args.seeds)
    if not args.no_tasks:
        for task_name, task_cls in TASKS.items():
            if task_name == "addition":  # the default task: the rows above
                continue
            for name, module in twins.items():
                if name in names:
                    rows[f"{task_name}/{name}"] = report(f"{task_name}/{name}", module, task_cls(), args.seeds)
    if args.check:
        differ = check(rows, readme_rows(README.read_text()))
        print("\n".join(differ) if differ else f"all {len(rows)} rows match README.md", flush=True)
        sys.exit(1 if differ else 0)


README = Path(__file__).resolve().parent.parent / "README.md"
README_RUN = {"fixed": "fixed", "buggy (all bugs)": "buggy", "B17 (logged reward, see above)": "B17"}
"""README row label -> this script's run name (the other single-bug rows are named by their id)"""


def readme_rows(text: str) -> dict[str, str]:
    """{run name: the README's cells} of the ablation table (rewards per seed and non-finite losses, "0.671 0.655
    0.679 0/0/0") and of the tasks table ("0.34 -> 0.83" for fixed, buggy), keyed as this script names its rows."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"\d+/\d+/\d+", cells[4]):
            name = README_RUN.get(cells[0], cells[0])
            rows[name] = " ".join(cells[1:])
        elif len(cells) == 5 and (m := re.fullmatch(r"`(\w+)Task` \(.*\)", cells[0])) and "->" in cells[3]:
            task = {cls.__name__: key for key, cls in TASKS.items()}[f"{m[1]}Task"]  # `EchoTask` -> "echo"
            rows[f"{task}/fixed"], rows[f"{task}/buggy"] = cells[3], cells[4]
    return rows


def check(rows: dict[str, tuple[str, str]], readme: dict[str, str]) -> list[str]:
    """The rows whose printed numbers differ from the README's (a task row compares seed 0's first -> last, each
    to the README's number of decimals)."""
    differ = []
    for name, (table, first_last) in rows.items():
        want = readme.get(name)
        if want is None:
            differ.append(f"{name}: no row in README.md")
            continue
        if "/" in name:  # each side to the README's number of decimals
            places = [len(x.split(".")[1]) for x in want.split(" -> ")]
            got = " -> ".join(f"{float(x):.{n}f}" for x, n in zip(first_last.split(" -> "), places, strict=True))
        else:
            got = table
        if got != want:
            differ.append(f"{name}: README has {want!r}, this run gives {got!r}")
    return differ


def report(name, module, task, seeds):
    """Train `module` on `task` for each seed with default settings; print one table row; return its cells as the
    README's ablation table prints them ("r0 r1 r2 n0/n1/n2") and seed 0's unrounded "first5 -> last10" (or "")."""
    start = time.perf_counter()
    histories = [module.train(task, seed=s) for s in seeds]
    summaries = [grpo_support.summarize_run(h, 0.0) for h in histories]  # the CLI's summary
    rewards = " ".join(f"{s['final_reward']:6.3f}" for s in summaries)
    nan = "/".join(str(s["nan_losses"]) for s in summaries)
    first, first_last = "", ""
    if task is not None:
        r = [s["reward"] for s in histories[0]]
        first = f"   seed {seeds[0]}: {sum(r[:5]) / 5:.3f} -> {sum(r[-10:]) / 10:.3f}"
        first_last = f"{sum(r[:5]) / 5!r} -> {sum(r[-10:]) / 10!r}"  # unrounded: --check rounds once, as the README
    print(f"{name:14s} {rewards}   {nan:10s}{first} ({time.perf_counter() - start:.1f} s)", flush=True)
    return " ".join(f"{s['final_reward']:.3f}" for s in summaries) + " " + nan, first_last


if __name__ == "__main__":
    main()
