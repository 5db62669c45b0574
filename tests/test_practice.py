"""Mock rounds and their grader (interview/: rounds, grading, verdicts, hints, cli): the draw, the grader, hints.

The round files are checked at source level (which functions are buggy, which fixed, nothing else of
grpo_fixed, nothing that names the draw); the grader is run as users run it, `python -m
interview grade --json FILE...` in a subprocess (several files share one grading process).
The slow tests grade every round 0..19 with 3 bugs and one with all of them, unmodified and with the
fixed twin's functions spliced in.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import random
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import grpo_support
from interview import cli, drill, grading, hints, interview_mode, rounds, sandbox, spec, splice, verdicts
from workbook import catalog

ROOT = rounds.ROOT
WHEN = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.UTC)
ROUNDS = [(n, 3) for n in range(20)] + [(20, len(catalog.BUG_IDS))]
BUG_TOKEN = re.compile(r"\bB\d{1,2}\b")


def handout() -> str:
    return splice.HANDOUT.read_text()


def fixed() -> str:
    return splice.FIXED.read_text()


def functions(text: str) -> dict[str, str]:
    """top-level function name -> ast.dump of its node (code only: comments do not reach the AST)."""
    return {n.name: ast.dump(n) for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}


def load(text: str, name: str) -> types.ModuleType:
    return sandbox.load_module(name, text, f"<{name}>")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def grade(*paths, timeout=600) -> tuple[list[dict], int]:
    """Run the grader's command line on `paths`: (one JSON result per file, exit code)."""
    proc = subprocess.run([sys.executable, "-m", "interview", "grade", "--json", *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(paths), proc.stdout + proc.stderr
    return results, proc.returncode


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, f"{old!r} not in the text (did the twins change?)"
    return text.replace(old, new, 1)


# ----------------------------------------------------------------------------------------------
# The draw and the round's source


def test_draw_is_seeded_sized_and_covers_the_catalog():
    for n, k in ROUNDS:
        drawn = rounds.draw(n, k)
        assert drawn == rounds.draw(n, k) and len(drawn) == k == len(set(drawn))
        assert set(drawn) <= set(catalog.BUG_IDS)
    assert rounds.draw(20, len(catalog.BUG_IDS)) == catalog.BUG_IDS
    seen = set().union(*(rounds.draw(n, 3) for n in range(20)))
    assert seen == set(catalog.BUG_IDS), "20 rounds of 3 should exercise every bug"
    assert len({tuple(rounds.draw(n, 3)) for n in range(20)}) > 10


@pytest.mark.parametrize("n, k", ROUNDS)
def test_round_keeps_exactly_the_drawn_bugs_and_nothing_of_the_fix(n, k):
    text = rounds.round_source(n, k, WHEN)
    header, body = text.split("\n", 1)
    assert rounds.parse_header(text) == rounds.Round(n, k, WHEN)
    assert header == rounds.Round(n, k, WHEN).header()
    mine, buggy, good = functions(text), functions(handout()), functions(fixed())
    drawn = set(rounds.draw(n, k))
    for b in catalog.BUGS:
        expected = buggy if b.id in drawn else good
        assert mine[b.function] == expected[b.function], f"round {n}: {b.function} should be the {b.id in drawn}"
    others = set(buggy) - {b.function for b in catalog.BUGS}
    assert all(mine[f] == buggy[f] for f in others), "functions outside the catalog stay the hand-out's"
    assert set(mine) - set(buggy) <= set(good), "nothing but the fixed functions' own helpers enters"
    assert "FIX" not in body
    for name in ("HEALTH_CHECKS", "preflight", "check_health", "report_health"):
        assert name not in body
    assert BUG_TOKEN.findall(text) == BUG_TOKEN.findall(handout()), "no bug id beyond the hand-out's"


def test_round_imports_only_torch_the_standard_library_the_twins_support_and_tinylm():
    tree = ast.parse(rounds.round_source(0, 1, WHEN))
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert roots - {"__future__", "torch", "grpo_support", "tinylm"} <= set(sys.stdlib_module_names), roots


@pytest.mark.parametrize("n, k", ROUNDS)
def test_round_trains_two_iterations(n, k):
    module = load(rounds.round_source(n, k, WHEN), f"round_trains_{n}")
    history = module.train(seed=0, steps=2)
    assert len(history) == 2 and "reward" in history[-1]


def test_round_runs_as_a_script(tmp_path):
    path = write(tmp_path, "round_3.py", rounds.round_source(3, 3, WHEN))
    proc = subprocess.run([sys.executable, str(path), "--steps", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "reward" in proc.stdout


def test_hard_keeps_whole_first_sentences_of_docstrings():
    easy, hard = rounds.round_source(5, 3, WHEN), rounds.round_source(5, 3, WHEN, hard=True)
    strip = lambda text: [  # noqa: E731 - every node's code with its docstring removed
        ast.dump(n) for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.ClassDef))
    ]
    docs = lambda text: {  # noqa: E731
        getattr(n, "name", "<module>"): ast.get_docstring(n) for n in ast.walk(ast.parse(text))
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(n)
    }
    assert len(hard) < len(easy)
    long_ones = [name for name, d in docs(easy).items() if "\n" in d]
    assert len(long_ones) > 5
    for name, d in docs(hard).items():  # the first whole lines of the docstring, up to a sentence's end
        lines = docs(easy)[name].splitlines()
        assert d.splitlines() == lines[: splice.first_sentence_lines(lines)], name
    assert len(strip(hard)) == len(strip(easy))
    load(hard, "hard_round").train(seed=0, steps=1)


def test_strip_fix_comments():
    text = ('x = 1  # FIX B1: why\n'
            '    # FIX B2: a whole line\n'
            's = "# FIX inside a string"\n'
            'y = 2  # a comment that stays\n')
    assert splice.strip_fix_comments(text) == 'x = 1\ns = "# FIX inside a string"\ny = 2  # a comment that stays\n'


def test_splice_brings_the_donors_helpers_only_when_missing():
    target = "import math\n\n\ndef f(x):\n    return x\n\n\ndef g():\n    return 1\n"
    donor = ('import math\n\nSCALE = 2\n"""how much"""\n\n\ndef _helper(x):\n    return SCALE * x\n\n\n'
             'def unrelated():\n    pass\n\n\ndef f(x):\n    return _helper(math.floor(x))  # FIX B9: why\n')
    out = splice.splice(target, donor, ["f"])
    namespace = {}
    exec(compile(out, "<spliced>", "exec"), namespace)
    assert namespace["f"](3.7) == 6 and namespace["g"]() == 1
    assert "unrelated" not in out and "FIX" not in out and out.count("import math") == 1
    assert '"""how much"""' in out
    with pytest.raises(ValueError):
        splice.splice(target, donor, ["nope"])


# ----------------------------------------------------------------------------------------------
# make mock


def test_mock_writes_the_next_round_and_never_overwrites(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rounds, "PRACTICE", tmp_path / "practice")
    first = rounds.mock(None, "3", hard=False, now=WHEN)
    second = rounds.mock(None, "all", hard=True, now=WHEN)
    assert (first.name, second.name) == ("round_1.py", "round_2.py")
    out = capsys.readouterr().out
    assert "make grade" in out and "make hint" in out and "45 minutes" in out
    assert rounds.parse_header(second.read_text()).bugs == len(catalog.BUG_IDS)
    before = first.read_text()
    with pytest.raises(sandbox.CannotGrade, match="exists already"):
        rounds.mock(1, "2", hard=False)
    assert first.read_text() == before
    for bad in ("0", str(len(catalog.BUG_IDS) + 1), "three", "-1"):
        with pytest.raises(sandbox.CannotGrade, match="BUGS"):
            rounds.mock(7, bad, hard=False)
    assert sorted(p.name for p in (tmp_path / "practice").iterdir()) == ["round_1.py", "round_2.py"]
    assert rounds.newest_round() == second  # grade and hint default to the newest round


def test_default_file_without_rounds(tmp_path, monkeypatch):
    monkeypatch.setattr(rounds, "PRACTICE", tmp_path / "none")
    with pytest.raises(sandbox.CannotGrade, match="make mock"):
        grading.make_job(None)


def test_the_default_round_is_never_an_older_one_when_the_newest_header_was_edited(tmp_path, monkeypatch):
    monkeypatch.setattr(rounds, "PRACTICE", tmp_path)
    write(tmp_path, "round_1.py", rounds.round_source(1, 3, WHEN))
    assert grading.make_job(None).path == (tmp_path / "round_1.py").resolve()
    second = rounds.round_source(2, 3, WHEN)
    write(tmp_path, "round_2.py", second.replace("round 2:", "round 5:", 1))
    with pytest.raises(sandbox.CannotGrade, match="round_2.py: its round header was edited"):
        grading.make_job(None)
    write(tmp_path, "round_2.py", second.split("\n", 1)[1])
    with pytest.raises(sandbox.CannotGrade, match="round_2.py: not a practice round"):
        grading.make_job(None)


def test_header_and_clock():
    info = rounds.Round(7, 1, WHEN)
    assert info.header() == "# GRPO practice round 7: 1 bug of 17, drawn 2026-11-30 12:00:00 UTC. (check 7b6af874)"
    assert rounds.parse_header(info.header() + "\nx = 1\n") == info
    assert rounds.header_problem(info.header() + "\nx = 1\n") is None
    assert rounds.parse_header("# GRPO practice round 7: 12 bugs, drawn 2026-11-30 12:00:00 UTC.") is None
    assert rounds.parse_header("# GRPO practice round 7: 3 bugs of 12, drawn 2026-11-30 12:00:00 UTC.") is None
    assert rounds.parse_header('"""not a round"""') is None
    assert rounds.clock(info, WHEN + dt.timedelta(minutes=46, seconds=5)) == "46:05"


@pytest.mark.parametrize("edit", [("round 7:", "round 8:"), ("1 bug of 17", "2 bugs of 17"), ("12:00:00", "12:00:01"),
                                  (" (check 7b6af874)", ""), ("7b6af874", "7b6af875")])
def test_an_edited_header_is_no_header(edit):
    text = replace_once(rounds.Round(7, 1, WHEN).header(), *edit) + "\nx = 1\n"
    assert rounds.parse_header(text) is None
    assert "header was edited" in rounds.header_problem(text)
    assert "not a practice round" in rounds.header_problem("x = 1\n")


def test_a_header_without_the_catalog_size_means_eleven_bugs():
    legacy = "# GRPO practice round 7: 3 bugs, drawn 2026-11-30 12:00:00 UTC.\nx = 1\n"
    assert rounds.parse_header(legacy) == rounds.Round(7, 3, WHEN, 11)
    assert rounds.parse_header(legacy).drawn == rounds.draw(7, 3, 11)


def test_adding_a_bug_to_the_catalog_regrades_no_old_round(monkeypatch):
    """Rounds 1-200 drawn from today's catalog keep their draw once another bug is catalogued: the draw uses
    only the prefix of the catalog the header records (and without the prefix, many of them would move)."""
    before = {n: rounds.draw(n, 3) for n in range(1, 201)}
    headers = {n: rounds.Round(n, 3, WHEN).header() for n in range(1, 201)}
    assert all(f"3 bugs of {len(catalog.BUG_IDS)}," in h for h in headers.values())
    extended = [*catalog.BUG_IDS, "B99"]
    monkeypatch.setattr(catalog, "BUG_IDS", extended)
    for n in range(1, 201):
        assert rounds.parse_header(headers[n]).drawn == before[n], n
    moved = [n for n in range(1, 201) if sorted(random.Random(n).sample(extended, 3)) != sorted(before[n])]
    assert len(moved) > 20, "the test would not notice a draw over the whole catalog"
    assert rounds.Round(1, 3, WHEN).header().startswith(f"# GRPO practice round 1: 3 bugs of {len(extended)},")
    assert rounds.parse_header(rounds.Round(1, 3, WHEN).header()).size == len(extended)


# ----------------------------------------------------------------------------------------------
# Verdicts and hints (on synthetic outcomes)


def test_level_one_never_names_a_function_and_stats_exist():
    names = {n.name for n in ast.parse(handout()).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    table = grpo_support.STATS
    for b in catalog.BUGS:
        assert b.symptom and b.stats and b.probe and b.fix, b.id
        text = "\n".join(hints.hint_lines(b.id, 1))
        assert not set(re.findall(r"\w+", text)) & names, (b.id, set(re.findall(r"\w+", text)) & names)
        assert all(s in table for s in b.stats), b.id
        assert b.function in "\n".join(hints.hint_lines(b.id, 2))
        assert len(hints.hint_lines(b.id, 3)) > 2, f"no `# FIX {b.id}` line in grpo_fixed.py"


@pytest.mark.parametrize("level", [1, 2, 3])
def test_hints_name_only_remaining_bugs(level):
    bugs = ["B2", "B6", "B10"]
    result = dict(status={"B2": True, "B6": True, "B10": False}, crashes=[], regressions=[])
    lines, code = hints.hint(bugs, result, level)
    assert code == 0 and lines == hints.hint_lines("B10", level, "hint 1 of 1"), lines
    assert lines[0].startswith(f"hint 1 of 1 (level {level}): ")
    assert set(BUG_TOKEN.findall("\n".join(lines))) == (set() if level < 3 else {"B10"})  # only the fix's lines
    done = dict(status={"B2": True, "B6": True, "B10": True}, crashes=[], regressions=[])
    lines, _ = hints.hint(bugs, done, level)
    assert not BUG_TOKEN.findall("\n".join(lines))


@pytest.mark.parametrize("level", [1, 2, 3])
def test_each_bugs_hint_names_that_bug_only(level):
    """Levels 1 and 2 name no bug id (the README maps ids to functions); level 3 shows the `# FIX <id>` lines."""
    for b in catalog.BUG_IDS:
        ids = set(BUG_TOKEN.findall("\n".join(hints.hint_lines(b, level))))
        assert ids == (set() if level < 3 else {b}), (b, level)


def test_hints_are_numbered_in_the_rounds_order():
    bugs = ["B2", "B6", "B10"]
    result = dict(status={b: False for b in bugs}, crashes=[], regressions=[])
    lines, _ = hints.hint(bugs, result, 2)
    assert lines == [line for i, b in enumerate(bugs, 1) for line in hints.hint_lines(b, 2, f"hint {i} of 3")]
    assert [line.split(" (level")[0] for line in lines] == ["hint 1 of 3", "hint 2 of 3", "hint 3 of 3"]


def test_level_three_shows_each_fix_statement_whole():
    """A fix continued over several lines (B12's return, B13's two calls) is shown with all of them, so each
    statement's brackets balance; every tagged line is among them, and no other bug's FIX comment."""
    fixed_lines = [line.strip() for line in fixed().splitlines()]
    for b in catalog.BUG_IDS:
        lines = hints.fix_lines(b)
        text = "\n".join(lines)
        assert all(text.count(o) == text.count(c) for o, c in ("()", "[]", "{}")), (b, lines)
        tagged = [line for line in fixed_lines if re.search(rf"# FIX {b}\b", line)]
        assert [line.strip() for line in lines if re.search(rf"# FIX {b}\b", line)] == tagged, b
        assert all(line.strip() in fixed_lines for line in lines), b
    assert hints.fix_lines("B12")[0].startswith("return dict(input_ids=input_ids, attention_mask=attention_mask,")
    assert len(hints.fix_lines("B13")) == 5, hints.fix_lines("B13")  # both calls, with their continuation lines


def test_the_interview_asks_every_bugs_own_cards_first():
    """`make interview` asks a round's cards first: each catalogued card exists in the bank (a card id it does
    not know would be dropped without a word), in the bug's order, then the general ones."""
    bank = drill.load_bank()
    for b in catalog.BUGS:
        assert b.cards, b.id
        cards = [q.id for q in interview_mode.question_cards([b.id], bank)]
        assert cards[: len(b.cards)] == list(b.cards), (b.id, cards)
    plumbing = interview_mode.question_cards(catalog.PLUMBING_IDS[:3], bank)
    expected = list(dict.fromkeys(c for b in catalog.PLUMBING_IDS[:3] for c in catalog.bug(b).cards))
    assert [q.id for q in plumbing][: len(expected)] == expected


def test_mock_draws_from_the_whole_catalog_and_bugs_all_is_every_bug():
    n = len(catalog.BUG_IDS)
    assert rounds.parse_bugs("all") == n == rounds.catalog_size() and set(catalog.PLUMBING_IDS) < set(catalog.BUG_IDS)
    assert rounds.draw(0, n) == catalog.BUG_IDS
    assert any(set(rounds.draw(r, 3)) <= set(catalog.PLUMBING_IDS) for r in range(200)), "a round of plumbing bugs"
    text = rounds.round_source(0, n, WHEN)
    assert text.split("\n", 1)[0].startswith(f"# GRPO practice round 0: {n} bugs of {n},")
    mine, buggy = functions(text), functions(handout())
    assert all(mine[catalog.bug(b).function] == buggy[catalog.bug(b).function] for b in catalog.PLUMBING_IDS)


def test_a_grade_without_reveal_names_catalogued_functions_only_in_fixed_and_crash_lines():
    """Every function edited to raise: 8 undrawn ones would regress; only a count, never their names."""
    bugs = ["B2", "B6", "B10"]
    sites = {b.function for b in catalog.BUGS}
    result = dict(status={"B2": True, "B6": False, "B10": False},
                  crashes=["round_1.py: masked_mean (line 3) raised RuntimeError in a catalog test: boom"],
                  regressions=[f"{f}: your edit fails a catalog test: RuntimeError: boom" for f in sorted(sites)])
    lines, code = verdicts.report(bugs, None, result)
    assert code == 1 and f"regressions: {len(sites)} ({verdicts.REGRESSION_NOTE})" in lines, lines
    for line in lines:
        if not line.startswith(("fixed: ", "crash: ")):
            assert not sites & set(re.findall(r"\w+", line)), line
    revealed, _ = verdicts.report(bugs, None, result, reveal=True)
    assert all(f"  {r}" in revealed for r in result["regressions"]), revealed


def test_a_crashing_function_gets_its_crash_line_only():
    crash = {"type": "RuntimeError", "message": "boom", "where": ("masked_mean", 3), "user": True, "breach": None}
    mine = {"tests/test_catalog.py::TestB9::test_x": dict(passed=False, spec=False, keys=[], group="TestB9",
                                                         error=crash)}
    outcomes = {("u1.B9", t): o for t, o in mine.items()}
    judged = {b: ("test" if b == "B9" else "same") for b in catalog.BUG_IDS}
    result = verdicts.judge(1, ["B2"], judged, "r.py", dict(outcomes=outcomes, timed_out={}), {}, 20)
    assert len(result["crashes"]) == 1 and result["regressions"] == [], result


def test_an_edit_regression_says_what_failed():
    err = {"type": "AssertionError", "message": "assert tensor(0.5)\n  == tensor(0.25)", "where": None}
    mine = {"tests/test_spec.py::TestMask::test_a": dict(passed=False, spec=True, error=err),
            "tests/test_catalog.py::TestB9::test_b": dict(passed=False, spec=False, error=None)}
    assert verdicts.edit_regression("masked_mean", mine, None) == (
        "masked_mean: your edit fails TestMask::test_a: AssertionError: assert tensor(0.5) == tensor(0.25)")
    assert verdicts.edit_regression("masked_mean", {}, "the short training run ends at reward 0.30") == (
        "masked_mean: your edit fails the short training run: the short training run ends at reward 0.30")


def test_regression_lines_quote_the_spec_sentences_of_real_test_groups():
    import test_spec

    table = test_spec.spec_keys_by_test()  # test group or test -> the SPEC.md keys its marker names
    assert len({k for keys in table.values() for k in keys}) >= 5
    for name, keys in table.items():
        assert hasattr(test_spec, name.split("::")[0]), name
        for key in keys:
            head = verdicts.regression_head([key], name)
            sentence = spec.sentence(key)
            assert head == f'the spec (SPEC.md, sentence {sentence.label}) "{sentence.text}"', head
    assert verdicts.regression_head(["softmax", "generator"], "TestSampling") == (
        "the spec (SPEC.md, sentences S1 softmax, S3 generator)")
    assert verdicts.regression_head([], "TestKL") == "spec TestKL"


def test_scratch_files_go_to_the_scratch_grader(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli.scratch_grader, "grade", lambda path, train: calls.append(path) or 1)
    assert cli.grade_command(["practice/scratch_4.py"]) == 1
    assert calls == ["practice/scratch_4.py"]
    monkeypatch.undo()
    assert cli.grade_command(["practice/scratch_404.py"]) == 2  # the scratch grader: one line, exit code 2
    assert "no such file" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# The grader, end to end


def test_grade_handout_fixed_some_fixes_and_regressions(tmp_path):
    buggy, good = rounds.round_source(21, len(catalog.BUG_IDS), WHEN), fixed()  # every bug: the hand-out
    some = splice.splice(buggy, good, ["sample_from_logits", "completion_logits"])  # B6 fixed, B10 not
    round_1 = rounds.round_source(1, 3, WHEN)
    assert "B1" not in rounds.draw(1, 3)  # sample_from_logits is fixed in this round
    drop_generator = replace_once(round_1, "replacement=True, generator=generator)", "replacement=True)")
    one_fixed = splice.splice(round_1, good, [catalog.bug(rounds.draw(1, 3)[0]).function])
    append = "        history.append(stats)\n"
    no_kl = replace_once(buggy, append, '        del stats["kl"]\n' + append)
    files = [splice.HANDOUT, splice.FIXED, write(tmp_path, "some.py", some),
             write(tmp_path, "round_1_gen.py", drop_generator), write(tmp_path, "round_1_one.py", one_fixed),
             write(tmp_path, "no_kl.py", no_kl)]
    (h, f, s, gen, one, kl), code = grade(*files)
    assert code == 1
    assert h["code"] == 1 and h["status"] == {b: False for b in catalog.BUG_IDS} and h["regressions"] == []
    assert h["lines"][-1] == f"0 of {len(catalog.BUG_IDS)} fixed, 0 regressions"
    assert f["code"] == 0 and all(f["status"].values()) and f["regressions"] == []
    assert {b for b, ok in s["status"].items() if ok} == {"B1", "B6"} and s["regressions"] == []
    assert s["lines"][:2] == [f"fixed: {b} {catalog.bug(b).title}" for b in ("B1", "B6")], s["lines"]
    assert set(BUG_TOKEN.findall("\n".join(s["lines"]))) == {"B1", "B6"}, "a remaining bug was named"
    assert gen["status"] == {b: False for b in rounds.draw(1, 3)}
    assert len(gen["regressions"]) == 1 and "generator" in gen["regressions"][0], gen["regressions"]
    assert gen["regressions"][0].startswith("sample_from_logits: your edit fails "), gen["regressions"]
    assert not any(catalog.bug(b).symptom.split(";")[0] in gen["regressions"][0] for b in catalog.BUG_IDS)
    assert not BUG_TOKEN.findall("\n".join(gen["lines"])), "a regression is never named by a bug id"
    assert f"regressions: 1 ({verdicts.REGRESSION_NOTE})" in gen["lines"], gen["lines"]
    assert "sample_from_logits" not in "\n".join(gen["lines"]), "without REVEAL a regression is only counted"
    assert {b for b, ok in one["status"].items() if ok} == {rounds.draw(1, 3)[0]} and one["regressions"] == []
    assert "since the round was drawn (the round is 45 minutes)" in one["lines"][-1]
    assert one["lines"][-1].startswith("1 of 3 fixed, 0 regressions, ")
    assert len(kl["regressions"]) == 1 and "kl" in kl["regressions"][0] and "training" in kl["regressions"][0]


BAD = {  # name -> (edit of a round with every bug, what the one line must say)
    "syntax": (("    total = (values * mask).sum()", "    total = (values * mask).sum("), r":\d+: syntax error"),
    "renamed": (("def group_advantage(", "def group_adv("), r"no function group_advantage"),
    "signature": (("mask, clip: float = 0.2):", "mask, clip: float = 0.3):"), r"grpo_loss.*changed its signature"),
    "import": (("import torch\n", "import torch\nraise ImportError('nope')\n"),
               r"importing it raised ImportError"),
    "hang": (("    mask = mask.bool()\n    total", "    while True:\n        pass\n    total"),
             r"masked_mean \(line \d+\) did not return .*time limit"),
}
CRASH = {  # name -> (edit of a round with every bug, what its crash line must say): the file is still graded
    "raises": (("    total = (values * mask).sum()", "    raise RuntimeError('boom')"),
               r"masked_mean \(line \d+\) raised RuntimeError in .*: boom"),
    "typo": (("    mask = mask.bool()\n    total", "    mask = maskk.bool()\n    total"),
             r"masked_mean \(line \d+\) raised NameError"),
}


def test_bad_input_one_line_exit_2_nothing_written(tmp_path):
    every = rounds.round_source(22, len(catalog.BUG_IDS), WHEN)
    paths = [write(tmp_path, f"{name}.py", replace_once(every, *edit)) for name, (edit, _) in BAD.items()]
    paths.append(tmp_path / "missing.py")
    header = every.split("\n", 1)[0]
    refused = {"no header": (handout(), "not a practice round"),
               "edited header": (replace_once(every, header, header.replace("round 22", "round 23")),
                                 "header was edited")}
    paths += [write(tmp_path, f"{name.replace(' ', '_')}.py", text) for name, (text, _) in refused.items()]
    before = sorted(p.name for p in tmp_path.iterdir())
    results, code = grade(*paths, splice.HANDOUT)
    assert code == 2
    expected = [*BAD.items(), ("missing", (None, "no such file")), *refused.items()]
    for result, (name, (_, pattern)) in zip(results, expected, strict=False):
        assert result["code"] == 2 and len(result["lines"]) == 1, (name, result)
        assert re.search(pattern, result["lines"][0]) and result["lines"][0].startswith("cannot grade "), (name, result)
    assert results[-1]["code"] == 1, "a bad file leaves the others gradable"
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "grading wrote something (e.g. __pycache__)"


def test_a_crash_is_reported_for_its_function_and_the_other_verdicts_still_print(tmp_path):
    every = rounds.round_source(22, len(catalog.BUG_IDS), WHEN)
    paths = [write(tmp_path, f"{name}.py", splice.splice(replace_once(every, *edit), fixed(), ["grpo_loss"]))
             for name, (edit, _) in CRASH.items()]
    round_0 = rounds.round_source(0, 3, WHEN)
    assert "B5" not in rounds.draw(0, 3)  # masked_mean's bug is not drawn: its crash must not name the draw
    paths.append(write(tmp_path, "round_0.py", replace_once(round_0, *CRASH["typo"][0])))
    n = next(n for n in range(100) if "B1" in rounds.draw(n, 3) and "B4" in rounds.draw(n, 3))
    shift = "    probs = logits - logits.min(dim=-1, keepdim=True).values"
    overflow = replace_once(rounds.round_source(n, 3, WHEN), shift,
                            "    probs = logits.exp()")  # overflows to inf for large logits: multinomial raises
    paths.append(write(tmp_path, f"round_{n}.py", splice.splice(overflow, fixed(), ["grpo_loss"])))
    results, code = grade(*paths)
    assert code == 1
    for result, (name, (_, pattern)) in zip(results, CRASH.items(), strict=False):
        crash = [line for line in result["lines"] if line.startswith("crash: ")]
        assert result["code"] == 1 and len(crash) == 1 and re.search(pattern, crash[0]), (name, result["lines"])
        assert result["lines"][0] == f"fixed: B4 {catalog.bug('B4').title}", (name, result["lines"])
        assert result["lines"][-1].startswith(f"1 of {len(catalog.BUG_IDS)} fixed"), (name, result["lines"])
    typo, exp = results[-2], results[-1]
    assert any(re.search(CRASH["typo"][1], line) for line in typo["lines"]), typo["lines"]
    assert not BUG_TOKEN.findall("\n".join(typo["lines"])), typo["lines"]
    assert exp["status"]["B4"] and not exp["status"]["B1"], exp["lines"]
    assert any(re.search(r"^crash: .*sample_from_logits \(line \d+\) raised RuntimeError", line)
               for line in exp["lines"]), exp["lines"]
    assert exp["lines"][0] == f"fixed: B4 {catalog.bug('B4').title}", exp["lines"]


def test_command_line_report_and_hint(tmp_path):
    path = write(tmp_path, "round_4.py", rounds.round_source(4, 3, WHEN))
    drawn = rounds.draw(4, 3)
    proc = subprocess.run([sys.executable, "-m", "interview", "grade", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert lines[:2] == ["fixed: none yet", "regressions: none"], lines
    assert re.fullmatch(r"0 of 3 fixed, 0 regressions, \d\d+:\d\d since the round was drawn "
                        r"\(the round is 45 minutes\)", lines[2])
    assert not BUG_TOKEN.findall(proc.stdout), "make grade named a remaining bug"
    sites = {catalog.bug(b).function for b in drawn}
    assert not sites & set(re.findall(r"\w+", proc.stdout)), "make grade named a remaining bug's function"
    proc = subprocess.run([sys.executable, "-m", "interview", "grade", "--reveal", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert [line for line in proc.stdout.splitlines() if line.startswith("remaining: ")] == [
        f"remaining: {b} {catalog.bug(b).title}" for b in drawn], proc.stdout
    for level, which in (("1", []), ("3", ["--which", "2"]), ("3", ["--all"])):
        proc = subprocess.run([sys.executable, "-m", "interview", "hint", str(path), "--level", level, *which],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        shown = list(enumerate(drawn, 1)) if which == ["--all"] else [(int(which[1]) if which else 1,
                                                                        drawn[int(which[1]) - 1 if which else 0])]
        assert set(BUG_TOKEN.findall(proc.stdout)) == (set() if level == "1" else {b for _, b in shown})
        assert [x for x in proc.stdout.splitlines() if x.startswith("hint ")] == [
            hints.hint_lines(b, int(level), f"hint {i} of 3")[0] for i, b in shown]
        others = [str(i) for i in (1, 2, 3) if i not in {i for i, _ in shown}]
        assert ("(2 other bugs remain: hint " + " or ".join(others) in proc.stdout) == (which != ["--all"])
    proc = subprocess.run([sys.executable, "-m", "interview", "hint", str(path), "--which", "4"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "there is no hint 4: 3 bugs remain (N=1..3)" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "interview", "hint", str(path), "--level", "4"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "LEVEL" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(3))
def test_every_round_unmodified_and_fixed(tmp_path, chunk):
    """Rounds 0..19 with 3 bugs and one with all: as drawn, exactly the drawn bugs remain and nothing regressed;
    with the fixed twin's versions of the drawn functions spliced in, every bug is fixed."""
    mine = ROUNDS[chunk::3]
    paths, drawn = [], []
    for n, k in mine:
        text = rounds.round_source(n, k, WHEN)
        spliced = splice.splice(text, fixed(), [catalog.bug(b).function for b in rounds.draw(n, k)])
        paths += [write(tmp_path, f"round_{n}.py", text), write(tmp_path, f"round_{n}_fixed.py", spliced)]
        drawn.append(rounds.draw(n, k))
    results, _ = grade(*paths, timeout=1200)
    for (as_drawn, done), bugs, (n, _) in zip(zip(results[::2], results[1::2], strict=True), drawn, mine, strict=True):
        assert as_drawn["status"] == {b: False for b in bugs} and as_drawn["regressions"] == [], (n, as_drawn)
        assert as_drawn["code"] == 1
        assert done["status"] == {b: True for b in bugs} and done["regressions"] == [], (n, done)
        assert done["code"] == 0


# ----------------------------------------------------------------------------------------------
# The package


def interview_imports(path: Path) -> set[str]:
    """The interview modules a module's source imports (from the ast: nothing is run)."""
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "interview":
            deps |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("interview."):
            deps.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("interview.")}
    return deps


def test_no_import_cycle_and_workbook_does_not_import_the_practice_round():
    graph = {p.stem: interview_imports(p) for p in (ROOT / "interview").glob("*.py")}
    assert all(deps <= set(graph) for deps in graph.values()), graph
    done: list[str] = []
    while len(done) < len(graph):  # peel off modules whose imports are all done: stuck means a cycle
        ready = sorted(m for m, deps in graph.items() if m not in done and deps <= set(done))
        assert ready, f"import cycle among {sorted(set(graph) - set(done))}"
        done += ready
    for path in (ROOT / "workbook").glob("*.py"):
        tree = ast.parse(path.read_text())
        roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert "interview" not in roots, path.name


def test_the_short_runs_band_rejects_a_wrecked_run_and_keeps_the_fixed_twins():
    """The band of the grader's short run (verdicts.BAND_TOLERANCE, measured where it is defined): the fixed twin
    is inside its own band; sampling from raw logits (B1's hybrid: reward near 0 on the short run) is below it."""
    import grpo_fixed

    fixed = grading.short_run(grpo_fixed, "grpo_fixed.py", 120)
    wrecked = grading.short_run(catalog.hybrid("B1"), "B1 hybrid", 120)
    assert fixed["ratio_ok"] and verdicts.in_band(fixed, fixed) is None, fixed
    assert fixed["reward"] - verdicts.BAND_TOLERANCE > 0.1, fixed["reward"]  # a floor a wrecked run falls under
    assert wrecked["reward"] < 0.05, wrecked["reward"]
    assert "below the fixed trainer's band" in verdicts.in_band(wrecked, fixed), wrecked
