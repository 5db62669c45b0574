"""The grading sandbox (interview/sandbox.py): every grade runs the learner's code in a forked child with a
time limit per test, a memory limit, exits counted as failures, and the parent's wall clock as the last line
of defence. Every bad file below gets one clear `cannot grade ...` line and exit code 2 within 20 s, from
the from-scratch grader and from the mock grader. Every file is written under tmp_path."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time

import pytest

from interview import sandbox, scratch, scratch_grader, splice, verdicts

pytestmark = pytest.mark.slow  # about 2 minutes: each bad file is graded whole

SECONDS = 20.0
WHEN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

# name -> (where: "import" or a function of the hand-out, the learner's code put there)
BAD = {
    "os._exit(0) at import": ("import", "os._exit(0)"),
    "sys.exit(0) at import": ("import", "sys.exit(0)"),
    "while True at import": ("import", "while True:\n    pass"),
    "sys.exit(0) in grpo_loss": ("grpo_loss", "sys.exit(0)"),
    "exit() in grpo_loss": ("grpo_loss", "exit()"),
    "quit() in grpo_loss": ("grpo_loss", "quit()"),
    "raise SystemExit in group_advantage": ("group_advantage", "raise SystemExit"),
    "KeyboardInterrupt in grpo_loss": ("grpo_loss", "raise KeyboardInterrupt"),
    "os._exit(3) in grpo_loss": ("grpo_loss", "os._exit(3)"),
    "while True in grpo_loss": ("grpo_loss", "while True:\n        pass"),
    "alarm cancelled, then while True in grpo_loss": (
        "grpo_loss",
        "signal.alarm(0)\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    while True:\n        pass"),
    "20 GB torch.empty in group_advantage": ("group_advantage", "torch.empty(5 * 10**9).fill_(1.0)"),
    "torch.ones(10**10) in group_advantage": ("group_advantage", "torch.ones(10**10)"),
}
SAYS = {  # what the one line must say, by kind of bad file
    "exit": "exit", "quit": "exit", "SystemExit": "exit", "KeyboardInterrupt": "KeyboardInterrupt",
    "while True": "time limit", "GB": "memory", "ones": "memory",
}
MOCK_GRADER_TOO_SLOW: set[str] = set()  # grading.py (not the sandbox) decides these; a hang now stops its file's
# short runs (their limit is 3x the fixed twin's run) and an added import is no whole-file edit: none left


def says(name: str) -> str:
    return next(word for key, word in SAYS.items() if key in name)


def inject(text: str, where: str, code: str) -> str:
    """`text` with `code` at the end (where="import") or as the first statement of a function's body."""
    text = text.replace("import torch\n", "import os\nimport signal\nimport sys\nimport torch\n", 1)
    if where == "import":
        return text + "\n" + code + "\n"
    node = splice.function_nodes(text)[where]
    first = node.body[1] if splice.is_string(node.body[0]) and len(node.body) > 1 else node.body[0]
    lines = text.splitlines(keepends=True)
    lines.insert(first.lineno - 1, "    " + code + "\n")
    return "".join(lines)


def written_scratch(tmp_path):
    """A scratch file with the spec's three functions written (as the fixed twin has them)."""
    path = scratch.new_scratch(None, tmp_path)
    source = scratch.handout_source()
    nodes = splice.function_nodes(source)
    lines = source.splitlines(keepends=True)
    functions = {f: "".join(lines[nodes[f].lineno - 1 : nodes[f].end_lineno]) for f in scratch.SPEC_FUNCS}
    path.write_text(scratch.splice(path.read_text(), functions))
    return path


def one_line(code: int, out: str, err: str, seconds: float, path, word: str):
    assert code == 2, (out, err)
    assert out == "" and len(err.splitlines()) == 1, (out, err)
    assert err.startswith(f"cannot grade {path}") and word in err, err
    assert seconds < SECONDS, f"{seconds:.1f} s: {err}"


@pytest.mark.parametrize("name", list(BAD))
def test_scratch_grader_one_line_exit_2(tmp_path, capsys, name):
    path = written_scratch(tmp_path)
    path.write_text(inject(path.read_text(), *BAD[name]))
    start = time.perf_counter()
    code = scratch_grader.grade(path)
    seconds = time.perf_counter() - start
    captured = capsys.readouterr()
    one_line(code, captured.out, captured.err, seconds, path, says(name))


def round_file(tmp_path, name: str):
    path = tmp_path / "round_7.py"
    from interview import rounds

    path.write_text(inject(rounds.round_source(7, 3, WHEN), *BAD[name]))
    return path


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    strict=True, reason="grading.py: every short run holding the hang waits out its own limit (over 20 s)"))
    if n in MOCK_GRADER_TOO_SLOW else n for n in BAD])
def test_mock_grader_one_line_exit_2(tmp_path, name):
    from interview import grading

    path = round_file(tmp_path, name)
    start = time.perf_counter()
    job = grading.make_job(path)
    lines, code = grading.report(job, grading.grade_jobs([job])[0])
    seconds = time.perf_counter() - start
    assert code == 2 and len(lines) == 1, lines
    assert "cannot grade" in lines[0] or str(path.name) in lines[0], lines
    assert says(name).lower() in lines[0].lower() or "exit" in lines[0].lower(), lines
    assert seconds < SECONDS, f"{seconds:.1f} s: {lines}"


def test_a_scratch_file_without_its_funcs_line_is_refused(tmp_path, capsys):
    """Deleting the `# scratch-funcs:` line must not grade 3 of 11 stubs and report all-pass: refused."""
    path = scratch.new_scratch("all", tmp_path)
    text = path.read_text()
    path.write_text("".join(line for line in text.splitlines(keepends=True)
                            if not line.startswith(scratch.FUNCS_HEADER)))
    code = scratch_grader.grade(path)
    captured = capsys.readouterr()
    one_line(code, captured.out, captured.err, 0.0, path, scratch.FUNCS_HEADER)


def test_a_trimmed_funcs_line_still_grades_every_stub(tmp_path):
    """A line that names fewer functions than the file stubs: the stubs are graded anyway (not written yet)."""
    path = scratch.new_scratch("all", tmp_path)
    text = path.read_text()
    header = next(line for line in text.splitlines() if line.startswith(scratch.FUNCS_HEADER))
    path.write_text(text.replace(header, f"{scratch.FUNCS_HEADER} grpo_loss"))
    outcomes = scratch_grader.grade_outcomes(path)
    not_written = {f for o in outcomes if o.not_written for f in o.funcs}
    assert not_written == set(scratch.SITES)


def test_the_real_exit_code_through_the_command_line(tmp_path):
    path = written_scratch(tmp_path)
    path.write_text(inject(path.read_text(), *BAD["os._exit(0) at import"]))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "interview", "grade", str(path)], capture_output=True, text=True,
                          timeout=60, cwd=sandbox.ROOT)
    one_line(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start, path, "os._exit(0)")


# ----------------------------------------------------------------------------------------------
# run_forked itself


def _exit_through_the_patch():
    os._exit(0)


def _exit_for_real():
    sandbox._REAL_EXIT(5)


def _killed(sig):
    os.kill(os.getpid(), sig)
    time.sleep(5)


def _allocate(what):
    import torch

    start = time.perf_counter()
    try:
        torch.empty(5 * 10**9) if what == "empty" else torch.ones(10**10)
    except RuntimeError as e:
        return sandbox.breach(e), time.perf_counter() - start
    return "allocated", time.perf_counter() - start


def _alarm_defeated():
    with sandbox.time_limit(0.5, "the stubborn loop"):
        signal.setitimer(signal.ITIMER_REAL, 0)  # the graded code cancels the alarm
        while True:
            pass


def test_os_exit_in_the_child_is_an_exception_and_a_line():
    result = sandbox.run_forked(lambda _: _exit_through_the_patch(), None, limit=30)
    assert result.startswith("ended without a result") and "os._exit(0)" in result


def test_an_exit_the_patch_misses_is_reported_with_its_code():
    assert "exit code 5" in sandbox.run_forked(lambda _: _exit_for_real(), None, limit=30)


@pytest.mark.parametrize("sig, word", [(signal.SIGSEGV, "SIGSEGV"), (signal.SIGKILL, "out-of-memory")])
def test_a_child_killed_by_a_signal_is_reported_as_such(sig, word):
    result = sandbox.run_forked(lambda _: _killed(sig), None, limit=30)
    assert "killed by" in result and word in result, result


@pytest.mark.parametrize("what", ["empty", "ones"])
def test_huge_allocations_fail_fast_in_the_child(what):
    broke, seconds = sandbox.run_forked(lambda _: _allocate(what), None, limit=30)
    assert broke and "out of memory" in broke and seconds < 1.0


def test_the_parent_kills_a_child_whose_alarm_was_cancelled():
    start = time.perf_counter()
    result = sandbox.run_forked(lambda _: _alarm_defeated(), None, limit=60)
    assert "the stubborn loop" in result and "alarm" in result, result
    assert time.perf_counter() - start < 0.5 + sandbox.WATCHDOG_GRACE + 3


def test_the_whole_run_has_a_wall_clock_limit():
    start = time.perf_counter()
    result = sandbox.run_forked(lambda _: time.sleep(30), None, limit=1)
    assert "longer than its time limit" in result and time.perf_counter() - start < 5


@pytest.mark.parametrize("exc, word", [(SystemExit(0), "sys.exit(0)"), (KeyboardInterrupt(), "KeyboardInterrupt"),
                                       (sandbox.Exited("called os._exit(1)"), "os._exit(1)"),
                                       (sandbox.TimeLimit("no answer within the 5 s time limit"), "endless loop"),
                                       (MemoryError(), "out of memory"), (ValueError("x"), None)])
def test_breach(exc, word):
    broke = sandbox.breach(exc)
    assert (broke is None) if word is None else (word in broke)


def test_exit_and_interrupt_lines_say_what_the_code_did_once():
    """os._exit(3) is not a SystemExit; KeyboardInterrupt is said once."""
    def raised(exc: BaseException) -> dict:
        try:
            raise exc
        except BaseException as e:  # noqa: BLE001 - the test raises it on purpose
            err = sandbox.failure(e, __file__)
        return err

    line = verdicts.crash_line("r.py", raised(sandbox.Exited("called os._exit(3)")), "in a catalog test")
    assert "called os._exit(3) in a catalog test" in line and "SystemExit" not in line, line
    try:
        raise sandbox.Exited("raised KeyboardInterrupt") from KeyboardInterrupt()
    except sandbox.Exited as e:
        err = sandbox.failure(e, __file__)
    line = verdicts.crash_line("r.py", err, "in a catalog test")
    assert line.count("KeyboardInterrupt") == 1 and "raised KeyboardInterrupt in a catalog test" in line, line
