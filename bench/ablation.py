"""Final reward of the fixed twin, the buggy twin and every single-bug hybrid over seeds 0, 1, 2,
default settings (AdditionTask from the SFT checkpoint; the README's ablation table), then both twins on the
extra toy tasks of workbook/tasks.py. About 8 s per run on a quiet 2-core CPU (13 runs per seed, then 10 per
seed for the tasks).

    .venv/bin/python bench/ablation.py [--seeds 0 1 2] [--no-tasks]
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
    args = parser.parse_args()
    logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids fail health checks by design
    runs = {"fixed": grpo_fixed, "buggy": grpo_buggy} | {b: hybrid(b) for b in BUG_IDS}
    print(f"{'run':14s} " + " ".join(f"seed {s}" for s in args.seeds) + "   non-finite losses", flush=True)
    for name, module in runs.items():
        report(name, module, None, args.seeds)
    if not args.no_tasks:
        for task_name, task_cls in TASKS.items():
            if task_name == "addition":  # the default task: the rows above
                continue
            for name, module in {"fixed": grpo_fixed, "buggy": grpo_buggy}.items():
                report(f"{task_name}/{name}", module, task_cls(), args.seeds)


def report(name, module, task, seeds):
    """Train `module` on `task` for each seed with default settings; print one table row."""
    start = time.perf_counter()
    summaries = [grpo_support.summarize_run(module.train(task, seed=s), 0.0) for s in seeds]  # the CLI's summary
    rewards = " ".join(f"{s['final_reward']:6.3f}" for s in summaries)
    nan = "/".join(str(s["nan_losses"]) for s in summaries)
    print(f"{name:14s} {rewards}   {nan:10s} ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
