"""Final reward of the fixed twin, the buggy twin and every single-bug hybrid over seeds 0, 1, 2,
default settings (AdditionTask from the SFT checkpoint; the README's ablation table), then both twins on the
extra toy tasks of workbook/tasks.py. About 8 s per run on a quiet 2-core CPU (13 runs per seed, then 10 per
seed for the tasks).

    .venv/bin/python bench/ablation.py [--seeds 0 1 2] [--no-tasks] [--only fixed buggy B12 ...]

A task row also gives seed 0's mean reward over the first 5 and the last 10 iterations (the README's "seed 0"
columns).
"""

from __future__ import annotations

import argparse
import logging
import time

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
    args = parser.parse_args()
    logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids fail health checks by design
    names = args.only or ["fixed", "buggy", *BUG_IDS]
    unknown = sorted(set(names) - {"fixed", "buggy", *BUG_IDS})
    if unknown:
        parser.error(f"unknown runs {unknown}: use fixed, buggy or {BUG_IDS[0]}..{BUG_IDS[-1]}")
    twins = {"fixed": grpo_fixed, "buggy": grpo_buggy}
    runs = {name: twins[name] if name in twins else hybrid(name) for name in names}
    print(f"{'run':14s} " + " ".join(f"seed {s}" for s in args.seeds) + "   non-finite losses", flush=True)
    for name, module in runs.items():
        report(name, module, None, args.seeds)
    if not args.no_tasks:
        for task_name, task_cls in TASKS.items():
            if task_name == "addition":  # the default task: the rows above
                continue
            for name, module in twins.items():
                if name in names:
                    report(f"{task_name}/{name}", module, task_cls(), args.seeds)


def report(name, module, task, seeds):
    """Train `module` on `task` for each seed with default settings; print one table row."""
    start = time.perf_counter()
    histories = [module.train(task, seed=s) for s in seeds]
    summaries = [grpo_support.summarize_run(h, 0.0) for h in histories]  # the CLI's summary
    rewards = " ".join(f"{s['final_reward']:6.3f}" for s in summaries)
    nan = "/".join(str(s["nan_losses"]) for s in summaries)
    first = ""
    if task is not None:
        r = [s["reward"] for s in histories[0]]
        first = f"   seed {seeds[0]}: {sum(r[:5]) / 5:.3f} -> {sum(r[-10:]) / 10:.3f}"
    print(f"{name:14s} {rewards}   {nan:10s}{first} ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
