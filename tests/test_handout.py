"""The twins read like a real hand-out: grpo_buggy.py is the algorithm only (its support - statistics table,
stats code, validation, config building, command line - is imported from grpo_support.py), short, and gives
nothing away; `diff grpo_buggy.py grpo_fixed.py` shows only marked fixes and the health section; every
healthy range is written once (grpo_support.STATS) and every rendered range is the one the checks use."""

from __future__ import annotations

import ast
import difflib
import math
import re
from pathlib import Path

import pytest

import grpo_buggy
import grpo_fixed
import grpo_support
from workbook import catalog, monitor

ROOT = Path(grpo_fixed.__file__).resolve().parent
HEALTH_START = "# Health checks"
FIX_MARK = re.compile(r"# FIX (B\d+): \S")
HEALTH_MARK = "# HEALTH: "
HANDOUT_BUDGET = 350
"""lines of grpo_buggy.py, the whole file a candidate reads to find the bugs (task, model set-up, generation and
the algorithm)"""


def lines(name):
    return (ROOT / name).read_text().splitlines()


def test_handout_is_at_most_350_lines():
    assert len(lines("grpo_buggy.py")) <= HANDOUT_BUDGET


def test_definitions_follow_the_data():
    """The steps' sections come in pseudocode order and train() comes last."""
    text = lines("grpo_buggy.py")
    steps = [int(m.group(1)) for line in text if (m := re.match(r"# ---- (\d)\. ", line))]
    assert steps == sorted(steps) and len(steps) >= 5, steps
    tree = ast.parse("\n".join(text))
    defs = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert defs[-1] == "train"
    order = ["setup_run", "position_ids", "sample_from_logits", "generate", "group_advantage", "batch_advantages",
             "token_logprobs", "completion_logits", "policy_logprobs", "rollout", "grpo_loss", "kl_to_reference",
             "optimizer_step", "update_policy", "train"]
    assert [d for d in defs if d in order] == order


def test_public_functions_open_with_one_check_from_the_support_module():
    tree = ast.parse((ROOT / "grpo_buggy.py").read_text())
    funcs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    for name in ("sample_from_logits", "group_advantage", "grpo_loss"):
        body = [n for n in funcs[name].body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        call = body[0].value if isinstance(body[0], (ast.Expr, ast.Assign)) else None
        assert isinstance(call, ast.Call) and call.func.id.startswith("check_"), name
        assert call.func.id not in funcs and getattr(grpo_buggy, call.func.id) is getattr(grpo_support, call.func.id)


def test_the_support_lives_in_one_module():
    """STATS, the stats code, validation and the command line are defined once, in grpo_support.py."""
    for twin in ("grpo_buggy.py", "grpo_fixed.py"):
        tree = ast.parse((ROOT / twin).read_text())
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        shared = defined & {n for n in vars(grpo_support) if not n.startswith("__")}
        assert not shared, f"{twin} defines {sorted(shared)} again"
    assert grpo_support.STATS is grpo_support.STATS


def test_handout_gives_nothing_away():
    for name in ("grpo_buggy.py", "grpo_support.py"):
        text = (ROOT / name).read_text().lower()
        for word in ("grpo_fixed", "fix", "bug", "# health", "this machine", "cpu"):
            assert word not in text, (name, word)
    algorithm = (ROOT / "grpo_buggy.py").read_text().lower()
    for word in ("correct", "should be", "wrong", "instead", "careful", "note"):
        assert word not in algorithm, word


def hunks():
    """The changed hunks of buggy -> fixed: (first fixed line index, added lines, removed lines)."""
    a, b = lines("grpo_buggy.py"), lines("grpo_fixed.py")
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [(j1, b[j1:j2], a[i1:i2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def test_diff_shows_only_marked_fixes_and_the_health_section():
    fixed_ids = set()
    for j, added, removed in hunks():
        if not removed and any(line.startswith(HEALTH_START) for line in added):
            continue  # the health section, added whole
        marked = [line for line in added if FIX_MARK.search(line) or HEALTH_MARK in line]
        assert added and marked, f"unmarked hunk at grpo_fixed.py:{j + 1}: -{removed} +{added}"
        for line in added:
            if (m := FIX_MARK.search(line)):
                fixed_ids.add(m.group(1))
    assert sorted(fixed_ids) == sorted(catalog.BUG_IDS)


def test_diff_detects_an_unmarked_change(monkeypatch):
    """The diff test can fail: an unmarked edit is a hunk without a mark."""
    real = lines("grpo_fixed.py")
    edited = [line.replace("dropout=cfg.dropout))", "dropout=0.0))") for line in real]
    assert edited != real, "the unmarked edit must change a line"
    monkeypatch.setattr(__import__(__name__), "lines",
                        lambda name: edited if name == "grpo_fixed.py" else real_lines(name))
    with pytest.raises(AssertionError, match="unmarked hunk"):
        test_diff_shows_only_marked_fixes_and_the_health_section()


def real_lines(name):
    return (ROOT / name).read_text().splitlines()


def checks_failed(stats):
    cfg = grpo_fixed.Config()
    return [name for name, ok in monitor.CHECKS.items() if not ok(stats, cfg)]


BOUNDED = [name for name, row in grpo_support.STATS.items()
           if name not in ("reward", "completion_length", "reward_std", "ratio_last_mean", "logprob_gap_unpadded")]
"""the rows a check asserts (the others are diagnostics: logprob_gap_unpadded splits logprob_gap by padding)"""


def test_healthy_stats_pass_every_check():
    assert checks_failed(monitor.HEALTHY_STATS) == []


@pytest.mark.parametrize("name", BOUNDED)
def test_rendered_range_is_the_threshold_the_checks_use(name):
    """At each finite bound of the rendered range the checks pass; just outside it one fails."""
    row = grpo_support.STATS[name]
    rendered = monitor.render_range(name)
    bounds = [b for b in (row.lo, row.hi) if math.isfinite(b)]
    assert bounds or rendered == "finite"
    for bound in bounds:
        assert f"{bound:g}" in rendered
        assert checks_failed({**monitor.HEALTHY_STATS, name: bound}) == [], (name, bound)
    step = lambda b: max(abs(b) * 1e-3, 1e-12)
    if math.isfinite(row.hi):
        assert checks_failed({**monitor.HEALTHY_STATS, name: row.hi + step(row.hi)}), (name, "above")
    if math.isfinite(row.lo) and name not in ("ratio_last_maxdev",) or name == "ratio_last_maxdev":
        outside = {**monitor.HEALTHY_STATS, name: row.lo - step(row.lo)}
        assert checks_failed(outside), (name, "below")
    assert checks_failed({**monitor.HEALTHY_STATS, name: math.nan}) or name == "grad_norm"


def test_no_range_is_written_twice():
    """No monitor or notebook source spells out a STATS threshold next to its stat's name by hand."""
    sources = [ROOT / "workbook" / "monitor.py", *sorted((ROOT / "notebooks" / "py").glob("*.py"))]
    for name in BOUNDED:
        row = grpo_support.STATS[name]
        for bound in (row.lo, row.hi):
            if not math.isfinite(bound) or bound == 0:
                continue
            pattern = re.compile(rf"{name}\s*[<>]=?\s*{re.escape(f'{bound:g}')}\b")
            for path in sources:
                assert not pattern.search(path.read_text()), f"{path.name} writes {name}'s range by hand"


def test_readme_catalog_table_is_the_catalog():
    """The README's spoiler table is a rendering of workbook.catalog.BUGS: same ids, sites and titles."""
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| (B\d+) \| `(\w+)` \| (.+?) \| notebook 0[18] §(\d+) \|$", readme, re.MULTILINE)
    assert [(b.id, b.function, b.title) for b in catalog.BUGS] == [row[:3] for row in rows]
