"""`make hint`: one hint per bug a file still has, in three levels, one bug at a time (N=k picks the k-th
remaining bug, ALL=1 shows them all).

Level 1 is the symptom and the logged statistics that show it (never the function), level 2 the function
and the tiny input that exposes the bug, level 3 the fix, with the fixed twin's statements that carry
`# FIX <id>` (each whole). Hints are labelled `hint i of n (level L)`, never by bug id (the README maps ids to
functions).
"""

from __future__ import annotations

import ast
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


FIX_TAG = re.compile(r"\s*#\s*FIX (B\d+)\b.*$")


def fix_lines(bug_id: str) -> list[str]:
    """The code of the fix: every statement of grpo_fixed.py with a line that carries `# FIX <bug_id>:`, whole
    (a call or a return continued over several lines is shown with all of them, indented as written; of a
    compound statement such as `if ...:` or `try:`, its tagged line alone). Another bug's FIX comment on a
    line shown is cut."""
    source = FIXED.read_text()
    lines = source.splitlines()
    tagged = [i for i, line in enumerate(lines, 1) if (m := FIX_TAG.search(line)) and m[1] == bug_id]
    simple = [(n.lineno, n.end_lineno) for n in ast.walk(ast.parse(source))
              if isinstance(n, ast.stmt) and not isinstance(getattr(n, "body", None), list)
              and not isinstance(n, ast.Match)]  # statements without a block of their own
    shown: list[tuple[int, int]] = []
    for i in tagged:
        whole = min((s for s in simple if s[0] <= i <= s[1]), key=lambda s: s[1] - s[0], default=(i, i))
        if whole not in shown:
            shown.append(whole)
    out = []
    for first, last in shown:
        indent = len(lines[first - 1]) - len(lines[first - 1].lstrip())
        for line in lines[first - 1 : last]:
            m = FIX_TAG.search(line)
            out.append((line[:m.start()] if m and m[1] != bug_id else line)[indent:].rstrip())
    return out


def hint_lines(bug_id: str, level: int, label: str = "hint") -> list[str]:
    """One bug's hint at `level`, headed `label` (e.g. 'hint 1 of 3'): never its id; level 1 never names the
    function either."""
    entry = catalog.bug(bug_id)
    if level == 1:
        return ([f"{label} (level 1): {entry.symptom}"] + [f"    watch {statistic_line(s)}" for s in entry.stats]
                + [f"    {catalog.SYMPTOM_NUMBERS}"])
    if level == 2:
        return [f"{label} (level 2): look at {entry.function}(). {entry.probe}"]
    return [f"{label} (level 3): {entry.fix}", "    the fixed twin's lines:"] + [f"    {x}" for x in fix_lines(bug_id)]


def hint(bugs: list[str], result: dict, level: int, which: int | None = None) -> tuple[list[str], int]:
    """The hint lines for the graded bugs still remaining in `result`, and the exit code: hint number `which`
    (1-based, in the round's order of its remaining bugs) with a line saying how to get the others, or every
    remaining bug's hint when `which` is None."""
    if "error" in result:
        return [f"cannot grade {result['error']}"], 2
    remaining = [b for b in bugs if not result["status"][b]]
    if not remaining:
        return ["Every bug of this file is fixed: no hint needed (make grade shows any regression)."], 0
    if which is not None and not 1 <= which <= len(remaining):
        return [f"there is no hint {which}: {len(remaining)} bug{'s' * (len(remaining) != 1)} remain "
                f"(N=1..{len(remaining)})"], 2
    lines = []
    for i, b in enumerate(remaining, 1):  # numbered in the round's own order of its bugs: stable per round
        if which is None or i == which:
            lines += hint_lines(b, level, f"hint {i} of {len(remaining)}")
    if which is not None and len(remaining) > 1:
        others = [str(i) for i in range(1, len(remaining) + 1) if i != which]
        lines.append(f"({len(others)} other bug{'s remain' if len(others) > 1 else ' remains'}: hint "
                     f"{' or '.join(others)}, make hint N={others[0]}; ALL=1 gives every hint at this level)")
    return lines, 0
