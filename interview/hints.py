"""`make hint`: one hint per bug a file still has, in three levels.

Level 1 is the symptom and the logged statistics that show it (never the function), level 2 the function
and the tiny input that exposes the bug, level 3 the fix, with the fixed twin's `# FIX <id>` lines. Hints are
labelled `hint i of n (level L)`, never by bug id (the README maps ids to functions).
"""

from __future__ import annotations

import re

import grpo_support
from interview.splice import FIXED
from workbook import catalog, monitor


def statistic_line(name: str) -> str:
    """One logged statistic with its meaning and healthy range, from the STATS table."""
    row = grpo_support.STATS.get(name)
    if row is None:
        return name
    return f"{name}: {row.meaning} (healthy: {monitor.render_bounds(row.lo, row.hi)})"


def fix_lines(bug_id: str) -> list[str]:
    """The lines of grpo_fixed.py that carry `# FIX <bug_id>:`, as the code of the fix."""
    tag = re.compile(rf"#\s*FIX {bug_id}\b")
    return [line.strip() for line in FIXED.read_text().splitlines() if tag.search(line)]


def hint_lines(bug_id: str, level: int, label: str = "hint") -> list[str]:
    """One bug's hint at `level`, headed `label` (e.g. 'hint 1 of 3'): never its id; level 1 never names the
    function either."""
    entry = catalog.bug(bug_id)
    if level == 1:
        return [f"{label} (level 1): {entry.symptom}"] + [f"    watch {statistic_line(s)}" for s in entry.stats]
    if level == 2:
        return [f"{label} (level 2): look at {entry.function}(). {entry.probe}"]
    return [f"{label} (level 3): {entry.fix}", "    the fixed twin's lines:"] + [f"    {x}" for x in fix_lines(bug_id)]


def hint(bugs: list[str], result: dict, level: int) -> tuple[list[str], int]:
    """The hint lines for the graded bugs still remaining in `result`, and the exit code."""
    if "error" in result:
        return [f"cannot grade {result['error']}"], 2
    remaining = [b for b in bugs if not result["status"][b]]
    if not remaining:
        return ["Every bug of this file is fixed: no hint needed (make grade shows any regression)."], 0
    lines = []
    for i, b in enumerate(remaining, 1):  # numbered in the round's own order of its bugs: stable per round
        lines += hint_lines(b, level, f"hint {i} of {len(remaining)}")
    return lines, 0
