"""The grading sandbox: run a learner's file without trusting it.

- loading: `read_python` (missing, unreadable, not Python), `load_module` (a fresh module from source text),
  `api_problem` (a public function of the hand-out renamed, removed or with another signature);
- time limits: `time_limit` (SIGALRM; `limited` is the same where signals work, the main thread only);
- `failure`: an exception as plain data (type, first line, the graded file's innermost frame);
- the pytest session: `run_tests` runs the catalog tests (tests/test_catalog.py, `test_Bn_*`) and the spec
  tests (tests/test_spec.py) parametrized over several modules, each test under the time limit, through
  `GradePlugin`, which re-runs a test on a module's baseline only where the module failed it;
- `run_forked`: a function in a forked process, its result sent back through a pipe, under a time limit.
Every bad input becomes `CannotGrade`: one clear line for the user, exit code 2, nothing written.
"""

from __future__ import annotations

import contextlib
import inspect
import multiprocessing
import os
import re
import signal
import sys
import threading
import traceback
import types
from pathlib import Path

from workbook import catalog

ROOT = catalog.ROOT
TEST_SECONDS = 5.0
"""time limit of one test, of importing the file, and of the short training run"""
CATALOG_TESTS, SPEC_TESTS = "tests/test_catalog.py", "tests/test_spec.py"
CATALOG_TEST = re.compile(r"^test_B\d")
"""catalog tests are the test_Bn_* of test_catalog.py; its meta-tests (test_catalog_is_proved, ...) are not graded"""


class CannotGrade(Exception):
    """Bad input: one clear line for the user, exit code 2, nothing written."""


class TimeLimit(Exception):
    """Raised by SIGALRM inside code that has run longer than its time limit."""


# ----------------------------------------------------------------------------------------------
# Loading a file, time limits, exceptions as data


def read_python(path: Path) -> str:
    """The text of a Python file; CannotGrade with one clear line if it is missing, unreadable or not Python."""
    if not path.is_file():
        raise CannotGrade(f"{path}: no such file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise CannotGrade(f"{path}: cannot read it ({e})") from None
    try:
        compile(text, str(path), "exec", dont_inherit=True)
    except SyntaxError as e:
        raise CannotGrade(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    return text


def load_module(name: str, source: str, filename: str) -> types.ModuleType:
    """Execute `source` as a fresh module called `name` (registered: dataclasses look it up)."""
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)
    return module


def _signature(fn) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def api_problem(module: types.ModuleType, base: types.ModuleType, path: str) -> str | None:
    """The first public function or class of the hand-out that `module` lacks, or whose signature differs
    (the spec (SPEC.md, sentence S15 signatures))."""
    for name, obj in vars(base).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != base.__name__:
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        mine = getattr(module, name, None)
        kind = "function" if inspect.isfunction(obj) else "class"
        if mine is None or (inspect.isfunction(obj) and not inspect.isfunction(mine)):
            return f"{path}: no {kind} {name} (the hand-out defines it; renamed or removed?)"
        if inspect.isfunction(obj) and _signature(mine) != _signature(obj):
            return (f"{path}: {name}{inspect.signature(mine)} changed its signature; the hand-out has "
                    f"{name}{inspect.signature(obj)}")
    return None


@contextlib.contextmanager
def time_limit(seconds: float):
    def on_alarm(signum, frame):
        raise TimeLimit(f"no answer within the {seconds:g} s time limit")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def limited(seconds: float):
    """time_limit (SIGALRM), only where signals work: the main thread."""
    if threading.current_thread() is threading.main_thread():
        with time_limit(seconds):
            yield
    else:
        yield


def failure(exc: BaseException, filename: str) -> dict:
    """An exception as data: type, first line of the message, and the innermost frame of `filename`
    it passed through (the function of the graded file that raised it), if any."""
    where = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == filename:
            where = (frame.f_code.co_name, line)
    message = (str(exc).strip().splitlines() or [""])[0][:160]
    return dict(type=type(exc).__name__, message=message, where=where, user=isinstance(exc, Exception))


def warm_up():
    """Build one Adam optimizer up front: the first one imports torch._dynamo (about 1 s), which must not
    count against a time limit (an import interrupted by the alarm would leave torch._dynamo half-initialised
    for the rest of the process)."""
    import torch

    torch.set_num_threads(1)
    torch.optim.Adam(torch.nn.Linear(1, 1).parameters())


# ----------------------------------------------------------------------------------------------
# The pytest session


class GradePlugin:
    """Runs the graded tests against every job's module (variant 'u<j>'), then re-runs each test a module
    failed against its baseline ('b<j>'), and records every outcome as plain data."""

    def __init__(self, modules: dict[str, types.ModuleType], files: dict[str, str]):
        self.modules, self.files = modules, files
        self.variant_of = {id(m): v for v, m in modules.items()}
        self.outcomes: dict[tuple[str, str], dict] = {}  # (variant, test id) -> outcome
        self.failed: set[tuple[str, str]] = set()
        self.timed_out: dict[str, dict] = {}  # job variant 'u<j>' -> the test that hit its time limit

    def pytest_generate_tests(self, metafunc):
        if "impl" in metafunc.fixturenames:
            variants = list(self.modules)
            metafunc.parametrize("impl", [self.modules[v] for v in variants], ids=[f"@{v}" for v in variants])

    def pytest_collection_modifyitems(self, session, config, items):
        keep, drop = [], []
        for item in items:
            graded = item.path.name == Path(SPEC_TESTS).name or CATALOG_TEST.match(item.originalname)
            parametrized = "impl" in getattr(getattr(item, "callspec", None), "params", {})
            (keep if graded and parametrized else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        keep.sort(key=lambda it: self.variant(it)[0] != "u")  # stable: every module's tests, then baselines
        items[:] = keep

    def variant(self, item) -> str:
        return self.variant_of[id(item.callspec.params["impl"])]

    def test_id(self, item) -> str:
        """The item's node id without its variant: the same for a module and its baseline."""
        token = "@" + self.variant(item)
        return item.nodeid.replace(f"[{token}]", "").replace(f"-{token}", "").replace(f"{token}-", "")

    def pytest_runtest_protocol(self, item, nextitem):
        """pytest's protocol, minus the items not needed: after a hang, none; a baseline's test only where
        the module failed it. nextitem=None (tear everything down) when the next item may be left out."""
        from _pytest.runner import runtestprotocol

        variant = self.variant(item)
        mine = "u" + variant[1:]
        if mine in self.timed_out or (variant[0] == "b" and (mine, self.test_id(item)) not in self.failed):
            return True  # after a hang the file cannot be graded; the baseline only matters where the file failed
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        runtestprotocol(item, nextitem=None if nextitem is None or self.variant(nextitem)[0] == "b" else nextitem)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def pytest_runtest_setup(self, item):
        signal.setitimer(signal.ITIMER_REAL, TEST_SECONDS)

    def pytest_runtest_makereport(self, item, call):
        if call.when == "call" or call.excinfo is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if call.when == "teardown" or (call.when == "setup" and call.excinfo is None):
            return
        variant, test = self.variant(item), self.test_id(item)
        bug_id = getattr(item.module, "BUG_ID", None)
        marker = item.get_closest_marker("spec")  # the spec sentences a spec test checks (tests/test_spec.py)
        outcome = dict(passed=call.excinfo is None, group=item.cls.__name__ if item.cls else item.originalname,
                       spec=item.path.name == Path(SPEC_TESTS).name, keys=list(marker.args) if marker else [],
                       ids=sorted(set(bug_id.findall(item.originalname))) if bug_id else [])
        if call.excinfo is not None:
            if call.excinfo.errisinstance(_skip_exceptions()):
                return
            outcome["error"] = failure(call.excinfo.value, self.files[variant])
            self.failed.add((variant, test))
            if call.excinfo.errisinstance(TimeLimit) and variant.startswith("u"):
                self.timed_out[variant] = dict(outcome["error"], test=test)
        self.outcomes[(variant, test)] = outcome


def _skip_exceptions():
    import pytest

    return (pytest.skip.Exception,)


def _raise_time_limit(signum, frame):
    raise TimeLimit(f"no answer within the {TEST_SECONDS:g} s time limit")


def run_tests(modules: dict[str, types.ModuleType], files: dict[str, str]) -> tuple[dict, dict]:
    """One pytest session over the catalog and spec tests, parametrized over every module: (outcomes, timed_out)
    of GradePlugin. Call it in a forked process: it sets the SIGALRM handler for the tests' time limits."""
    import pytest

    warm_up()
    signal.signal(signal.SIGALRM, _raise_time_limit)
    plugin = GradePlugin(modules, files)
    # No plugin autoload (nbval, xdist, anyio, ... cost seconds to import) and no assertion rewriting: with
    # bytecode writing off, pytest would re-rewrite every imported module of a plugin (hypothesis) on every run.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    args = ["-q", "--tb=no", "--no-header", "--assert=plain", "-p", "no:cacheprovider", "-o", "addopts=",
            "-W", "ignore", "--rootdir", str(ROOT), CATALOG_TESTS, SPEC_TESTS]
    pytest.main(args, plugins=[plugin])
    return plugin.outcomes, plugin.timed_out


# ----------------------------------------------------------------------------------------------
# The forked process


def _forked(target, data, send) -> None:
    sys.dont_write_bytecode = True  # importing a graded file must not write practice/__pycache__
    devnull = os.open(os.devnull, os.O_WRONLY)
    if not os.environ.get("PRACTICE_DEBUG"):
        os.dup2(devnull, 1)  # the graded code may print: only the pipe carries results
        os.dup2(devnull, 2)
    os.chdir(ROOT)
    send.send(target(data))
    send.close()


def run_forked(target, data, limit: float):
    """target(data) in a forked process (stdout and stderr silenced, unless PRACTICE_DEBUG is set): its
    result, or a str saying why there is none (the time limit, or how the process ended)."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_forked, args=(target, data, send), daemon=True)
    process.start()
    send.close()
    result, received = None, False
    if receive.poll(limit):
        with contextlib.suppress(EOFError):
            result, received = receive.recv(), True
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()
    if received:
        return result
    if process.exitcode in (None, -signal.SIGKILL):
        return "took longer than its time limit"
    return f"ended without a result (exit code {process.exitcode}: did the file exit or crash the interpreter?)"
