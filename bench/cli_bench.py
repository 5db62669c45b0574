"""Wall time of the default CLI run of both twins: `python grpo_X.py --json` as a subprocess.

Wall time includes interpreter start and `import torch` (about a second), which is what a user
waits for; the JSON's own `seconds` is the training loop alone. Budget: 10 s on this machine.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TWINS = ("grpo_fixed.py", "grpo_buggy.py")
BUDGET_S = 10.0


def run_once(script: str, timeout: float = 300) -> dict:
    """One `python script --json` run from the repository root -> wall seconds and its JSON summary."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, script, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{script} --json exited {proc.returncode}: {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return dict(wall_s=wall, **summary)


def bench_cli(runs: int = 3, progress=print) -> dict:
    """Median over `runs` of each twin, the twins interleaved so background load hits both alike."""
    raw = {script: [] for script in TWINS}
    load_start = os.getloadavg()[0]
    for i in range(runs):
        for script in TWINS:
            progress(f"  {script} --json, run {i + 1}/{runs}")
            raw[script].append(run_once(script))
    results = {}
    for script, rows in raw.items():
        results[script] = dict(
            wall_s=[r["wall_s"] for r in rows],
            wall_median_s=statistics.median(r["wall_s"] for r in rows),
            train_median_s=statistics.median(r["seconds"] for r in rows),
            final_reward=[r["final_reward"] for r in rows],
            budget_s=BUDGET_S,
            measured_at=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            loadavg=[load_start, os.getloadavg()[0]],
        )
    return results
