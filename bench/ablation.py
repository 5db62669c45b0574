"""Final reward of the fixed twin, the buggy twin and every single-bug hybrid over seeds 0, 1, 2,
default settings (the README's ablation table). About 2 minutes on a quiet 2-core CPU.

    .venv/bin/python bench/ablation.py [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import logging
import math
import time

import grpo_buggy
import grpo_fixed
import workbook  # noqa: F401  (one torch thread)
from workbook.catalog import BUG_IDS, hybrid


def final_reward(history):
    """Mean reward over the last 10 iterations (as the CLI's final_reward)."""
    last = history[-10:]
    return sum(s["reward"] for s in last) / len(last)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    logging.getLogger("grpo").setLevel(logging.ERROR)  # hybrids fail health checks by design
    runs = {"fixed": grpo_fixed, "buggy": grpo_buggy} | {b: hybrid(b) for b in BUG_IDS}
    print(f"{'run':6s} " + " ".join(f"seed {s}" for s in args.seeds) + "   non-finite losses", flush=True)
    for name, module in runs.items():
        start = time.perf_counter()
        histories = [module.train(seed=s) for s in args.seeds]
        rewards = " ".join(f"{final_reward(h):6.3f}" for h in histories)
        nan = "/".join(str(sum(not math.isfinite(s["loss"]) for s in h)) for h in histories)
        print(f"{name:6s} {rewards}   {nan:10s} ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
