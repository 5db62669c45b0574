"""Verdicts of the mock grader, from the plain data the grading process sends back.

- a bug is fixed when every catalog test carrying its id passes; a test carrying several ids
  (test_B6_B10_...) that fails is not held against a bug whose own tests pass while another of its ids is
  evidently still remaining (`bug_status`);
- a regression is a spec test (one sentence of SPEC.md, by its `@pytest.mark.spec` keys) or the short
  training run that the file fails while the file as handed out passes it (`regression_line`,
  `training_regression`);
- a crash is an exception out of the graded file's own functions that the baseline does not raise there
  (`new_exception`, `crash_line`);
- `report`: the lines `make grade` prints and its exit code.
"""

from __future__ import annotations

import datetime as dt

from interview import spec
from interview.rounds import ROUND_MINUTES, clock
from workbook import catalog


def bug_status(catalog_out: dict, bugs: list[str]) -> dict[str, bool]:
    """bug id -> fixed, for the graded bugs. A bug is remaining when a catalog test of its own fails, or
    when a test shared with other ids fails and none of those others is remaining by its own tests."""
    own_fail = {b: any(not o["passed"] for o in catalog_out.values() if o["ids"] == [b]) for b in catalog.BUG_IDS}
    status = {}
    for b in bugs:
        shared = [o for o in catalog_out.values() if b in o["ids"] and len(o["ids"]) > 1 and not o["passed"]]
        unexplained = any(not any(own_fail.get(other) for other in o["ids"] if other != b) for o in shared)
        tested = any(b in o["ids"] for o in catalog_out.values())
        status[b] = tested and not own_fail[b] and not unexplained
    return status


def in_test(test: str, out: dict, bugs: list[str]) -> str:
    """'in <test>', unless it is a catalog test of a bug the file is not graded on: its name would give
    away a bug that is not in the round."""
    if out["spec"] or set(out["ids"]) <= set(bugs):
        return f"in {test}"
    return "in a catalog test of a bug outside this round"


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


def report(bugs: list[str], round_info, result: dict, now: dt.datetime | None = None) -> tuple[list[str], int]:
    """The grader's lines and exit code for one graded file (`round_info`: its Round, or None)."""
    if "error" in result:
        return [f"cannot grade {result['error']}"], 2
    status = bug_status(result["catalog"], bugs)
    lines = [f"{b} {'fixed' if ok else 'remaining'}" for b, ok in status.items()]
    regressions = result["regressions"]
    lines.append("regressions: " + ("none" if not regressions else f"{len(regressions)}"))
    lines += [f"  {r}" for r in regressions]
    k, n, r = sum(status.values()), len(status), len(regressions)
    last = f"{k} of {n} fixed, {r} regression{'s' * (r != 1)}"
    if round_info is not None:
        last += f", {clock(round_info, now)} since the round was drawn (the round is {ROUND_MINUTES} minutes)"
    lines.append(last)
    return lines, 0 if k == n and r == 0 else 1
