"""Verdicts of the mock grader, from the plain data the grading processes send back (interview/grading.py).

- `judge`: per bug, fixed or not (a drawn bug) and regressed or not (a bug not drawn whose function the
  learner edited), from its hybrid's test outcomes and short training run; crashes in the learner's
  functions; spec regressions of the whole file when code outside the catalogued functions changed;
- a regression names the function the learner's edit broke and what actually failed (`edit_regression`:
  its first failing test and message, or the short training run), or the spec sentence a failing test
  checks (`regression_line`), never a bug id nor a catalogued bug's symptom; a function with a crash line
  gets no regression line too;
- a crash is an exception out of the graded file's own functions (`crash_line`), reported for that function
  with its line; the other verdicts still print;
- `report`: the lines `make grade` prints (only fixed bugs are named, regressions only counted; `reveal`
  names the regressions and the remaining bugs) and its exit code.
"""

from __future__ import annotations

import datetime as dt

from interview import spec
from interview.rounds import ROUND_MINUTES, clock
from workbook import catalog


def in_test(test: str, out: dict) -> str:
    """'in <test>' for a spec test; a catalog test's name carries a bug id, which would give the draw away."""
    return f"in {test}" if out["spec"] else "in a catalog test"


def new_exception(err: dict | None, base_err: dict | None) -> bool:
    """The graded code raised an exception out of one of its own functions that the baseline does not
    raise there (an exception of the same type from the baseline, e.g. a bug's own crash, does not count)."""
    if not err or not err["user"] or not err["where"]:
        return False
    return not (base_err and base_err["type"] == err["type"])


def crash_line(path: str, err: dict, when: str) -> str:
    where = f"{err['where'][0]} (line {err['where'][1]})" if err["where"] else "the file"
    if err["type"] == "TimeLimit":
        return f"{path}: {where} did not return {when}: {err['message']}"
    if err.get("breach"):  # the sandbox's words say what it did: 'called os._exit(3): ...'
        head, sep, rest = err["message"].partition(": ")
        return f"{path}: {where} {head} {when}{sep}{rest}"
    return f"{path}: {where} raised {err['type']} {when}: {err['message']}"


def training_regression(train: dict, reference: dict, steps: int) -> str | None:
    """What the short training run newly gets wrong (against the baseline's run `reference`), or None."""
    if "stats" not in reference:
        return None  # the file as handed out fails it too
    if "error" in train:
        return f"short training run: {train['error']['type']}: {train['error']['message']}"
    if "problem" in train:
        return f"short training run: {train['problem']}"
    lost = [k for k, ok in sorted(reference["stats"].items()) if ok and k not in train["stats"]]
    bad = [k for k, ok in sorted(reference["stats"].items()) if ok and not train["stats"].get(k, True)]
    what = [f"statistics no longer logged: {', '.join(lost)}"] * bool(lost)
    what += [f"statistics no longer numbers: {', '.join(bad)}"] * bool(bad)
    return f"short training run ({steps} iterations): {'; '.join(what)}" if what else None


def regression_head(keys: list[str] | tuple[str, ...], group: str) -> str:
    """Which part of the spec a failing spec test checks, from SPEC.md: one sentence with its text, several
    by label, or (a test without a spec marker) its test group."""
    if len(keys) == 1:
        s = spec.sentence(keys[0])
        return f'{s.ref} "{s.text}"'
    if keys:
        return f"the spec (SPEC.md, sentences {', '.join(spec.sentence(k).label for k in keys)})"
    return f"spec {group}"


def regression_line(keys: list[str] | tuple[str, ...], group: str, fails: list) -> str:
    """One regression: the spec sentence (or test group) broken, its first failing test, how many more."""
    test, err = fails[0]
    name = test.split("::")[-1]
    why = f" ({err['type']}" + (f": {err['message']})" if err["message"] else ")") if err else ""
    more = f", and {len(fails) - 1} more of {group}" if len(fails) > 1 else ""
    shown = name if not keys or len(fails) > 1 else f"{group}::{name}"
    return f"{regression_head(keys, group)}: {shown} fails{why}{more}"


BAND_LAST = 4
"""the short training run's reward is the mean over its last BAND_LAST iterations"""
BAND_TOLERANCE = 0.15
"""how far below the fixed twin's own short run (same seed, config and steps, run in the same process) a fix
may end: a guard against a fix that wrecks training, not a test of correctness (the tests decide that).
Measured on this machine (grading.TRAIN_STEPS = 8 iterations of B=10, G=8 from the SFT checkpoint, whose own
reward is about 0.30; mean reward of iterations 4-7): the fixed twin over seeds 0-15 ended at 0.31-0.48 (mean
0.40, sd 0.038; seed 0, the one graded: 0.306, the lowest), so the floor on seed 0 is 0.156, about 4 sd
below the lowest seed and 6 below the mean: a correct fix written another way that rounds differently, and
so samples another trajectory, still passes. Single-bug hybrids over seeds 0-5: B1 ends at 0.00-0.02 (the
band rejects it); all the others stay within the fixed twin's spread (B6 lowest, 0.23-0.31; B5, B7 reproduce
the fixed run exactly: no NaN or underflow arises in 8 iterations), so the band detects none of them: a short
run from an SFT model barely moves the reward, and the catalog and spec tests catch those bugs."""


def in_band(run: dict, reference: dict) -> str | None:
    """None when a short run reaches the fixed twin's band (`reference`, its own short run) with the ratio at 1
    at every first inner step; otherwise what is wrong, in words."""
    if "error" in run:
        return f"the short training run raised {run['error']['type']}: {run['error']['message']}"
    if "problem" in run or "reward" not in run:
        return run.get("problem", "the short training run logged no reward or ratio_first_maxdev")
    if not run["ratio_ok"]:
        return "the importance ratio is not 1 at the first inner step of the short training run"
    floor = reference["reward"] - BAND_TOLERANCE
    if run["reward"] < floor:
        return (f"the short training run ends at reward {run['reward']:.2f}, below the fixed trainer's band "
                f"(>= {floor:.2f})")
    return None


ROOT_TESTS = (catalog.ROOT / "tests/test_spec.py", catalog.ROOT / "tests/test_catalog.py")
BEYOND_SPEC = "beyond_spec"
"""marker of a test that demands more than SPEC.md states (the fixed twin's extra precision): kept as a test
of the twin, never held against a learner's fix"""


def test_function(test_id: str) -> str:
    """'tests/test_spec.py::TestX::test_y[p]' -> 'TestX::test_y'; a module-level test -> its name."""
    return "::".join(test_id.split("::")[1:]).split("[")[0]


def beyond_spec_tests() -> set[str]:
    """The tests (as `test_function` names them) marked @pytest.mark.beyond_spec, read from the test files'
    source (a class's marker covers its tests)."""
    import ast

    def marked(node) -> bool:
        return any(BEYOND_SPEC in ast.unparse(d) for d in getattr(node, "decorator_list", []))

    found = set()
    for path in ROOT_TESTS:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef) and (marked(node) or marked(fn)):
                        found.add(f"{node.name}::{fn.name}")
            elif isinstance(node, ast.FunctionDef) and marked(node):
                found.add(node.name)
    return found


def first_crash(path: str, mine: dict, timed_out: dict | None, base: dict | None = None) -> str | None:
    """The crash line of one variant: the test that hit its time limit, or the first exception out of the
    learner's own code (a frame of its file); with `base` (the baseline's outcomes), only an exception the
    baseline does not raise there (a drawn bug's own crash would point at its function)."""
    if timed_out:
        return crash_line(path, timed_out, in_test(timed_out["test"], mine[timed_out["test"]]))
    for test, out in sorted(mine.items()):
        err = out.get("error")
        theirs = None if base is None else base.get(test, {}).get("error")
        if err and err["user"] and err["where"] and (base is None or new_exception(err, theirs)):
            return crash_line(path, err, in_test(test, out))
    return None


def hybrid_verdict(bug_id: str, mine: dict, crash: str | None, band: str | None) -> str | None:
    """Why the learner's version of the bug's function is not right (None: it is)."""
    if crash:
        return "it crashes"
    failing = sorted(t for t, o in mine.items() if not o["passed"])
    if failing:
        spec_fail = [t for t in failing if mine[t]["spec"]]
        if spec_fail:
            out = mine[spec_fail[0]]
            return f"{regression_head(out['keys'], out['group'])}: {test_function(spec_fail[0])} fails"
        return f"{len(failing)} catalog test{'s' * (len(failing) != 1)} fail{'s' * (len(failing) == 1)}"
    return band


def one_line(text: str, limit: int = 160) -> str:
    """`text` on one line, at most `limit` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def edit_regression(function: str, mine: dict, band: str | None) -> str:
    """A function that worked and that the learner's edit broke: what actually failed (the first failing
    test, spec tests first, with its assertion or exception message; else the short training run), never a
    catalogued bug's symptom. A catalog test is not named (its name carries a bug id)."""
    failing = sorted(t for t, o in mine.items() if not o["passed"])
    failing.sort(key=lambda t: not mine[t]["spec"])
    if not failing:
        return f"{function}: your edit fails the short training run: {one_line(band or 'no short training run')}"
    out = mine[failing[0]]
    test = test_function(failing[0]) if out["spec"] else "a catalog test"
    err = out.get("error")
    why = (f"{err['type']}: {err['message']}" if err.get("message") else err["type"]) if err else "it fails"
    return f"{function}: your edit fails {test}: {one_line(why)}"


def breach(j: int, path: str, by_variant: dict, timed_out: dict, runs: dict) -> str | None:
    """The one line for a file whose graded code left the sandbox's rules in any of its variants (exited, hung
    past a time limit, ran out of memory: interview/sandbox.py `breach`), or None. Such a file cannot be graded."""
    mine = [v for v in {*by_variant, *timed_out, *runs} if v == f"u{j}" or v.startswith(f"u{j}.")]
    for v in sorted(mine):
        if v in timed_out:
            return crash_line(path, timed_out[v], in_test(timed_out[v]["test"], by_variant[v][timed_out[v]["test"]]))
        for test, out in sorted(by_variant.get(v, {}).items()):
            if out.get("error", {}).get("breach"):
                return crash_line(path, out["error"], in_test(test, out))
        err = runs.get(v, {}).get("error")
        if err and err.get("breach"):
            return crash_line(path, err, "in the short training run")
    return None


def judge(j: int, bugs: list[str], judged: dict[str, str], path: str, tests: dict, runs: dict, steps: int) -> dict:
    """One job's verdicts: status (drawn bug -> fixed), crashes, regressions; or `error` when graded code left
    the sandbox's rules (`breach`). `runs`: the short training runs (of `steps` iterations) by variant, and
    the fixed twin's as 'fixed'."""
    by_variant: dict[str, dict] = {}
    for (v, test), out in tests["outcomes"].items():
        by_variant.setdefault(v, {})[test] = out
    broke = breach(j, path, by_variant, tests["timed_out"], runs)
    if broke:
        return dict(error=broke)
    status, crashes, regressions = {}, [], []
    for b in catalog.BUG_IDS:
        how = judged[b]
        if how != "test":
            if b in bugs:
                status[b] = how == "fixed"
            continue
        v = f"u{j}.{b}"
        mine = by_variant.get(v, {})
        crash = first_crash(path, mine, tests["timed_out"].get(v))
        if crash:
            crashes.append(crash)
        band = in_band(runs[v], runs["fixed"]) if v in runs else "no short training run"
        why = hybrid_verdict(b, mine, crash, band)
        if b in bugs:
            status[b] = why is None
        elif why is not None and not crash:  # a crash line already names the function: not counted twice
            regressions.append(edit_regression(catalog.bug(b).function, mine, band))
    u, base = f"u{j}", f"b{j}"
    if u in runs:  # code outside the catalogued functions changed: the whole file against the round as drawn
        mine, theirs = by_variant.get(u, {}), by_variant.get(base, {})
        crash = first_crash(path, mine, tests["timed_out"].get(u), theirs)
        if crash and crash not in crashes:
            crashes.append(crash)
        failed = {}
        for test, out in mine.items():
            if out["spec"] and not out["passed"] and theirs.get(test, {}).get("passed"):
                failed.setdefault((tuple(out["keys"]), out["group"]), []).append((test, out.get("error")))
        regressions += [regression_line(keys, group, fails) for (keys, group), fails in failed.items()]
        training = training_regression(runs[u], runs.get(base, {}), steps)
        if training:
            regressions.append(training)
    return dict(status=status, crashes=crashes, regressions=regressions)


REGRESSION_NOTE = "an edit broke a function that worked; make grade REVEAL=1 names them"


def report(bugs: list[str], round_info, result: dict, now: dt.datetime | None = None,
           reveal: bool = False) -> tuple[list[str], int]:
    """The grader's lines and exit code for one graded file (`round_info`: its Round, or None). Only fixed
    bugs are named; the remaining ones only with `reveal`."""
    if "error" in result:
        return [f"cannot grade {result['error']}"], 2
    status = result["status"]
    done = [b for b in bugs if status[b]]
    lines = [f"fixed: {b} {catalog.bug(b).title}" for b in done] or ["fixed: none yet"]
    lines += [f"crash: {c}" for c in result["crashes"]]
    regressions = result["regressions"]
    if not regressions:
        lines.append("regressions: none")
    elif reveal:
        lines.append(f"regressions: {len(regressions)}")
        lines += [f"  {r}" for r in regressions]
    else:  # naming them would name undrawn functions, and so give the draw away
        lines.append(f"regressions: {len(regressions)} ({REGRESSION_NOTE})")
    if reveal:
        lines += [f"remaining: {b} {catalog.bug(b).title}" for b in bugs if not status[b]]
    k, n, r = len(done), len(bugs), len(regressions)
    last = f"{k} of {n} fixed, {r} regression{'s' * (r != 1)}"
    if round_info is not None:
        last += f", {clock(round_info, now)} since the round was drawn (the round is {ROUND_MINUTES} minutes)"
    lines.append(last)
    return lines, 0 if k == n and r == 0 and not result["crashes"] else 1
