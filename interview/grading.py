"""The mock grader (`make grade`): what a file is graded on, and the grading process.

A bug lives in one function. The grader judges the learner's version of that function alone, in the fixed
twin (`swap.fixed_with`, one copy per edited function, called a hybrid), so a failure is that function's:
  - a drawn bug is fixed when the learner's function passes every spec test (tests/test_spec.py) and every
    catalog test (tests/test_catalog.py, `test_Bn_*`) in that hybrid, and a short training run of the hybrid
    reaches the fixed twin's reward band with the first inner step's ratio at 1 (`verdicts.in_band`);
  - a catalogued function whose bug was not drawn but which the learner edited is judged the same way:
    failing is a regression, named by the symptom of the bug that lives there (never by its id);
  - code outside the catalogued functions that differs from the round as drawn is graded as before: a spec
    test or the short training run that the whole file fails while the round as drawn passes it.
A function identical (as code) to the hand-out's buggy one is remaining and to the fixed twin's is fixed,
without running anything. Tests marked `beyond_spec` (the fixed twin's precision beyond SPEC.md) are not
held against a learner. The tests run in one forked process (interview/sandbox.py), the training runs in
another, side by side; the file is imported in both, never written.
"""

from __future__ import annotations

import ast
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

from interview import sandbox, splice, verdicts
from interview.rounds import Round, header_problem, newest_round, parse_header, rel, round_source
from interview.sandbox import CannotGrade
from interview.splice import FIXED, HANDOUT
from workbook import catalog

TRAIN_STEPS = 8
"""iterations of the short training run (seed 0, the default config with TRAIN_OVERRIDES)"""
TRAIN_OVERRIDES = dict(prompts_per_batch=10, group_size=8)
"""the short run's batch: 80 completions per iteration instead of 128 (the fixed twin's short run: 0.6 s on
one thread, 2.6 s on this 2-core machine shared by several jobs); B != G, so a group layout read the wrong way
round (B9) is not the identity it would be with B == G"""


@dataclass
class Job:
    """One file to grade: which bugs, and what 'as handed out' means for it."""

    path: Path
    text: str
    bugs: list[str]
    round: Round | None
    base_name: str  # where the baseline's code comes from, for messages
    base_source: str
    judged: dict[str, str] = field(default_factory=dict)  # bug id -> 'fixed' | 'remaining' | 'test' (by code)
    other_edits: bool = False  # code outside the catalogued functions differs from the base


def is_twin(path: Path) -> bool:
    return path.resolve() in (HANDOUT.resolve(), FIXED.resolve())


def make_job(path: Path | str | None) -> Job:
    """Read and check a file before anything runs: missing file, syntax error, round header. No path:
    the newest round. A file without a round header is refused, except the twins themselves (graded as the
    full hand-out: a check of the grader)."""
    path = Path(path) if path else newest_round()
    text = sandbox.read_python(path)
    problem = header_problem(text)
    info = parse_header(text)
    if problem is not None and not (info is None and is_twin(path)):
        raise CannotGrade(f"{rel(path)}: {problem}")
    if info is not None:
        base = round_source(info.number, info.bugs, info.drawn_at, size=info.size)
        job = Job(path.resolve(), text, info.drawn, info, f"round {info.number} as drawn", base)
    else:
        job = Job(path.resolve(), text, list(catalog.BUG_IDS), None, HANDOUT.name, HANDOUT.read_text())
    judge_by_code(job)
    return job


def code_of(source: str) -> dict[str, str]:
    """top-level name -> ast.dump of its statement: comments, formatting and docstrings do not count (a HARD=1
    round, or an edited docstring, is the same code)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body:
            node.body = [st for st in body if not splice.is_string(st)] or [ast.Pass()]
    out = {}
    for node in tree.body:
        name = getattr(node, "name", None) or f"<{ast.dump(node)}>"
        out[name] = ast.dump(node)
    return out


def judge_by_code(job: Job) -> None:
    """Which bugs the code decides alone (a function as handed out, or exactly the fixed twin's) and which
    need their hybrid tested; and whether anything outside the catalogued functions changed."""
    mine, buggy, fixed, base = (code_of(s) for s in (job.text, HANDOUT.read_text(), FIXED.read_text(),
                                                     job.base_source))
    sites = {b.function for b in catalog.BUGS}
    for b in catalog.BUGS:
        f = b.function
        if mine.get(f) == fixed.get(f):
            job.judged[b.id] = "fixed"
        elif b.id in job.bugs and mine.get(f) == buggy.get(f):
            job.judged[b.id] = "remaining"
        else:
            job.judged[b.id] = "test"
    rest = lambda d: {k: v for k, v in d.items() if k not in sites and not k.startswith(("<Import", "<ImportFrom"))}
    job.other_edits = rest(mine) != rest(base)  # an added import alone changes no behaviour the tests see


# ----------------------------------------------------------------------------------------------
# The short training run


RUN_LIMIT = 3
"""a graded copy's short run may take RUN_LIMIT times the fixed twin's (measured in the same process, so under
the same load), and at least sandbox.TEST_SECONDS"""


def short_run(module: types.ModuleType, filename: str, seconds: float) -> dict:
    """The short training run: {stats: statistic -> logged as a number in every iteration, reward, ratio_ok,
    seconds}, or how it failed (error / problem)."""
    import grpo_support

    start = time.perf_counter()
    try:
        with sandbox.time_limit(seconds, "the short training run"):
            history = module.train(seed=0, steps=TRAIN_STEPS, **TRAIN_OVERRIDES)
    except BaseException as e:  # noqa: BLE001 - the grader reports whatever the graded code raises
        return dict(error=sandbox.failure(e, filename))
    if not isinstance(history, list) or len(history) != TRAIN_STEPS or not all(isinstance(s, dict) for s in history):
        return dict(problem=f"train(steps={TRAIN_STEPS}) did not return {TRAIN_STEPS} dicts of statistics")
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    stats = {k: all(number(s.get(k)) for s in history) for k in set().union(*history)}
    out = dict(stats=stats, seconds=time.perf_counter() - start)
    if stats.get("reward") and stats.get("ratio_first_maxdev"):
        row = grpo_support.STATS["ratio_first_maxdev"]
        out["reward"] = sum(s["reward"] for s in history[-verdicts.BAND_LAST:]) / verdicts.BAND_LAST
        out["ratio_ok"] = all(row.lo <= s["ratio_first_maxdev"] <= row.hi for s in history)
    return out


# ----------------------------------------------------------------------------------------------
# The grading processes


def load(j: int, job: dict) -> tuple[types.ModuleType, types.ModuleType]:
    """(module, baseline) for one job; CannotGrade when the file does not load or breaks the public API."""
    base = sandbox.load_module(f"practice_baseline_{j}", job["base_source"], f"<{job['base_name']}>")
    try:
        with sandbox.time_limit(sandbox.TEST_SECONDS, "importing the file"):
            module = sandbox.load_module(f"practice_graded_{j}", job["text"], job["path"])
    except BaseException as e:  # noqa: BLE001
        err = sandbox.failure(e, job["path"])
        where = f" in {err['where'][0]} (line {err['where'][1]})" if err["where"] else ""
        what = "did not finish" if err["type"] == "TimeLimit" else f"raised {err['type']}"
        raise CannotGrade(f"{job['path']}: importing it {what}{where}: {err['message']}") from None
    problem = sandbox.api_problem(module, base, job["path"])
    if problem:
        raise CannotGrade(problem)
    return module, base


def hybrid(j: int, bug_id: str, module: types.ModuleType) -> types.ModuleType:
    """The fixed twin with the learner's version of the function `bug_id` lives in."""
    from workbook.swap import fixed_with

    site = catalog.bug(bug_id).function
    return fixed_with(f"graded_{j}_{bug_id}", **{site: getattr(module, site)})


def variants(jobs: list[dict]) -> tuple[dict, dict, dict]:
    """(modules by variant, file by variant, errors by job): 'u<j>.<id>' a hybrid, 'u<j>' and 'b<j>' the
    whole file and its baseline (only when code outside the catalogued functions changed)."""
    modules, files, errors = {}, {}, {}
    for j, job in enumerate(jobs):
        try:
            module, base = load(j, job)
            for b in job["test"]:
                modules[f"u{j}.{b}"], files[f"u{j}.{b}"] = hybrid(j, b, module), job["path"]
        except CannotGrade as e:
            errors[j] = str(e)
            continue
        except BaseException as e:  # noqa: BLE001 - a hybrid that cannot be built: the learner's function is odd
            errors[j] = f"{job['path']}: cannot build the graded copy: {type(e).__name__}: {e}"
            continue
        if job["other_edits"]:
            modules[f"u{j}"], files[f"u{j}"] = module, job["path"]
            modules[f"b{j}"], files[f"b{j}"] = base, f"<{job['base_name']}>"
    return modules, files, errors


def testing_process(jobs: list[dict]) -> dict:
    """Body of the forked test process: every variant's test outcomes, as plain data."""
    modules, files, errors = variants(jobs)
    outcomes, timed_out = sandbox.run_tests(modules, files) if modules else ({}, {})
    skip = verdicts.beyond_spec_tests()
    kept = {key: o for key, o in outcomes.items() if verdicts.test_function(key[1]) not in skip}
    return dict(outcomes=kept, timed_out=timed_out, errors=errors)


def training_process(jobs: list[dict]) -> dict:
    """Body of the forked training process: the fixed twin's short run, then each variant's."""
    import grpo_fixed

    sandbox.warm_up()
    modules, files, errors = variants(jobs)
    runs = {"fixed": short_run(grpo_fixed, FIXED.name, 6 * sandbox.TEST_SECONDS)}
    limit = max(sandbox.TEST_SECONDS, RUN_LIMIT * runs["fixed"].get("seconds", sandbox.TEST_SECONDS))
    broken = set()
    for v, m in modules.items():
        job = v[1:].split(".")[0]
        if job not in broken:  # after a breach (exit, hang, out of memory) the file cannot be graded: stop
            runs[v] = short_run(m, files[v], limit)
            if runs[v].get("error", {}).get("breach"):
                broken.add(job)
    return dict(runs=runs, errors=errors)


def broken_jobs(tests: dict) -> set[int]:
    """The jobs the test process already finds ungradable: the file did not load, or its code hung, exited or
    ran out of memory in a test (verdicts.breach then reports it, whatever the short runs say)."""
    broken = set(tests["errors"])
    variants = set(tests["timed_out"])
    variants |= {v for (v, _), o in tests["outcomes"].items() if (o.get("error") or {}).get("breach")}
    return broken | {int(v[1:].split(".")[0]) for v in variants if v.startswith("u")}


def grade_jobs(jobs: list[Job]) -> list[dict]:
    """Grade several files: tests in one forked process, training runs in another, side by side. Each result
    has `error` (cannot grade) or the verdicts (interview/verdicts.py `judge`)."""
    data = [dict(path=rel(j.path), text=j.text, bugs=j.bugs, base_name=j.base_name, base_source=j.base_source,
                 test=[b for b, how in j.judged.items() if how == "test"], other_edits=j.other_edits) for j in jobs]
    limit = 60 + 30 * len(jobs)
    out: dict[str, object] = {"training": dict(runs={}, errors={})}
    kinds = [("tests", testing_process)]
    if any(d["test"] or d["other_edits"] for d in data):  # else nothing needs a training run
        kinds.append(("training", training_process))
        sandbox.warm_up()  # torch._dynamo's import (about 1 s), once here, not once in each forked process

    cancel = threading.Event()  # set when the tests alone show that no file can be graded

    def run(name, target):
        out[name] = sandbox.run_forked(target, data, limit=limit, cancel=cancel if name == "training" else None)
        if name == "tests" and isinstance(out[name], dict) and len(broken_jobs(out[name])) == len(jobs):
            cancel.set()  # every file hung, exited or ran out of memory in a test: its short runs cannot matter

    threads = [threading.Thread(target=run, args=kind) for kind in kinds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if out["training"] == sandbox.CANCELLED:
        out["training"] = dict(runs={}, errors={})
    for name in ("tests", "training"):
        if isinstance(out[name], str):
            return [dict(error=f"{j.path if j.round is None else rel(j.path)}: grading {out[name]}") for j in jobs]
    tests, training = out["tests"], out["training"]
    results = []
    for j, job in enumerate(jobs):
        if j in tests["errors"]:
            results.append(dict(error=tests["errors"][j]))
            continue
        results.append(verdicts.judge(j, job.bugs, job.judged, data[j]["path"], tests, training["runs"],
                                      TRAIN_STEPS))
    return results


def report(job: Job, result: dict, reveal: bool = False) -> tuple[list[str], int]:
    """The grader's lines and exit code for one graded job."""
    return verdicts.report(job.bugs, job.round, result, reveal=reveal)
