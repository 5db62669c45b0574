"""The mock grader (`make grade`): what a file is graded on, and the grading process.

The grader imports the file (it never writes it) in a forked process (interview/sandbox.py) and runs,
each under a time limit,
  - the catalog tests of tests/test_catalog.py (`test_Bn_*`) against it: which of its bugs are fixed;
  - the spec tests of tests/test_spec.py and a short training run: a regression is a spec test or the
    training run that the file fails while the file as handed out (the round as drawn, regenerated in
    memory; grpo_buggy.py for any other file) passes it.
The verdicts are interview/verdicts.py's; several files share one grading process.
"""

from __future__ import annotations

import time
import types
from dataclasses import dataclass
from pathlib import Path

from interview import sandbox, verdicts
from interview.rounds import Round, newest_round, parse_header, rel, round_source
from interview.sandbox import CannotGrade
from interview.splice import HANDOUT
from workbook import catalog

TRAIN_STEPS = 6
"""iterations of the short training run (default config, seed 0)"""


@dataclass
class Job:
    """One file to grade: which bugs, and what 'as handed out' means for it."""

    path: Path
    text: str
    bugs: list[str]
    round: Round | None
    base_name: str  # where the baseline's code comes from, for messages
    base_source: str


def make_job(path: Path | str | None) -> Job:
    """Read and check a file before anything runs: missing file, syntax error, round header. No path:
    the newest round."""
    path = Path(path) if path else newest_round()
    text = sandbox.read_python(path)
    info = parse_header(text)
    if info is not None:
        base = round_source(info.number, info.bugs, info.drawn_at, size=info.size)
        return Job(path.resolve(), text, info.drawn, info, f"round {info.number} as drawn", base)
    return Job(path.resolve(), text, list(catalog.BUG_IDS), None, HANDOUT.name, HANDOUT.read_text())


def training_run(module: types.ModuleType, filename: str) -> dict:
    """The short training run: {statistic: logged as a number in every iteration}, or how it failed."""
    try:
        with sandbox.time_limit(sandbox.TEST_SECONDS):
            history = module.train(seed=0, steps=TRAIN_STEPS)
    except BaseException as e:  # noqa: BLE001 - the grader reports whatever the graded code raises
        return dict(error=sandbox.failure(e, filename))
    if not isinstance(history, list) or len(history) != TRAIN_STEPS or not all(isinstance(s, dict) for s in history):
        return dict(problem=f"train(steps={TRAIN_STEPS}) did not return {TRAIN_STEPS} dicts of statistics")
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    return dict(stats={k: all(number(s.get(k)) for s in history) for k in set().union(*history)})


def load_pair(j: int, job: dict):
    """(module, baseline, module file, baseline file) for one job; CannotGrade when the file does not load."""
    base_file = f"<{job['base_name']}>"
    base = sandbox.load_module(f"practice_baseline_{j}", job["base_source"], base_file)
    try:
        with sandbox.time_limit(sandbox.TEST_SECONDS):
            module = sandbox.load_module(f"practice_graded_{j}", job["text"], job["path"])
    except BaseException as e:  # noqa: BLE001
        err = sandbox.failure(e, job["path"])
        where = f" in {err['where'][0]} (line {err['where'][1]})" if err["where"] else ""
        what = "did not finish" if err["type"] == "TimeLimit" else f"raised {err['type']}"
        raise CannotGrade(f"{job['path']}: importing it {what}{where}: {err['message']}") from None
    problem = sandbox.api_problem(module, base, job["path"])
    if problem:
        raise CannotGrade(problem)
    return module, base, job["path"], base_file


def grading_process(jobs: list[dict]) -> dict[int, dict]:
    """Body of the forked process: load each job's module and baseline, check the public API, run the
    tests and the training run; one result per job."""
    results, modules, files = {}, {}, {}
    for j, job in enumerate(jobs):
        try:
            modules[f"u{j}"], modules[f"b{j}"], files[f"u{j}"], files[f"b{j}"] = load_pair(j, job)
        except CannotGrade as e:
            results[j] = dict(error=str(e))
    graded = {v: m for v, m in modules.items() if int(v[1:]) not in results}
    started = time.perf_counter()
    outcomes = sandbox.run_tests(graded, files) if graded else ({}, {})
    tested = time.perf_counter() - started
    for j, job in enumerate(jobs):
        if j not in results:
            results[j] = collect(j, job, modules, files, *outcomes)
            results[j]["seconds_tests"] = tested
    return results


def collect(j: int, job: dict, modules: dict, files: dict, outcomes: dict, timed_out: dict) -> dict:
    """One job's result: catalog outcomes and regressions, or `error`: why it cannot be graded."""
    u, b = f"u{j}", f"b{j}"
    if u in timed_out:
        test = timed_out[u]["test"]
        return dict(error=verdicts.crash_line(job["path"], timed_out[u],
                                              verdicts.in_test(test, outcomes[(u, test)], job["bugs"])))
    mine = {t: o for (v, t), o in outcomes.items() if v == u}
    base = {t: o for (v, t), o in outcomes.items() if v == b}
    for test, out in mine.items():
        if verdicts.new_exception(out.get("error"), base.get(test, {}).get("error")):
            return dict(error=verdicts.crash_line(job["path"], out["error"], verdicts.in_test(test, out, job["bugs"])))
    regressions = {}
    for test, out in mine.items():
        if out["spec"] and not out["passed"] and base.get(test, {}).get("passed"):
            regressions.setdefault((tuple(out["keys"]), out["group"]), []).append((test, out.get("error")))
    train, reference = training_run(modules[u], files[u]), training_run(modules[b], files[b])
    if verdicts.new_exception(train.get("error"), reference.get("error")):
        return dict(error=verdicts.crash_line(job["path"], train["error"], "in the short training run"))
    lines = [verdicts.regression_line(keys, group, fails) for (keys, group), fails in regressions.items()]
    training = verdicts.training_regression(train, reference, TRAIN_STEPS)
    return dict(catalog={t: dict(ids=o["ids"], passed=o["passed"]) for t, o in mine.items() if not o["spec"]},
                regressions=lines + ([training] if training else []))


def grade_jobs(jobs: list[Job]) -> list[dict]:
    """Grade several files in one forked process; each result has `error` (cannot grade) or the outcomes."""
    data = [dict(path=rel(j.path), text=j.text, bugs=j.bugs, base_name=j.base_name, base_source=j.base_source)
            for j in jobs]
    results = sandbox.run_forked(grading_process, data, limit=60 + 30 * len(jobs))
    if isinstance(results, str):
        return [dict(error=f"{j.path}: grading {results}") for j in jobs]
    return [results[i] for i in range(len(jobs))]


def report(job: Job, result: dict) -> tuple[list[str], int]:
    """The grader's lines and exit code for one graded job."""
    return verdicts.report(job.bugs, job.round, result)
