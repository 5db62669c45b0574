"""The grading sandbox: run a learner's file without trusting it.

- loading: `read_python` (missing, unreadable, not Python), `load_module` (a fresh module from source text),
  `api_problem` (a public function of the hand-out renamed, removed or with another signature);
- time limits: `time_limit` (SIGALRM; `limited` is the same where signals work, the main thread only);
- `failure`: an exception as plain data (type, first line, the graded file's innermost frame);
- the pytest session: `run_tests` runs the catalog tests (tests/test_catalog.py, `test_Bn_*`) and the spec
  tests (tests/test_spec.py) parametrized over several modules, each test under the time limit, through
  `GradePlugin`, which re-runs a test on a module's baseline only where the module failed it;
- `run_forked`: a function in a forked process, its result sent back through a pipe. The child runs with
  an address-space limit (MEMORY_BYTES more than the grader's own: torch then raises RuntimeError "can't
  allocate memory" at once instead of growing to the OOM killer), with `os._exit` raising `Exited`, and
  with a deadline the parent watches: every time limit (`time_limit`, each graded test) also writes its
  deadline to shared memory, and the parent kills the child when it passes by WATCHDOG_GRACE seconds
  (graded code that cancels or ignores SIGALRM, or a long torch op SIGALRM cannot interrupt);
- `breach`: the one line for graded code that left the sandbox's rules (exited, interrupted, hung, ran
  out of memory): such a file cannot be graded.
Every bad input becomes `CannotGrade`: one clear line for the user, exit code 2, nothing written.
"""

from __future__ import annotations

import contextlib
import inspect
import multiprocessing
import os
import re
import resource
import signal
import sys
import threading
import time
import traceback
import types
from pathlib import Path

from workbook import catalog

ROOT = catalog.ROOT
TEST_SECONDS = 5.0
"""time limit of one test and of importing the file (the mock grader's short training run has its own:
max(5 s, RUN_LIMIT x the fixed twin's run), set in interview/grading.py)"""
MEMORY_BYTES = 2 * 2**30
"""address space graded code may add to the grading process's own (RLIMIT_AS in the forked child)"""
WATCHDOG_GRACE = 2.0
"""seconds past a time limit after which the parent kills the child (the alarm did not stop the code)"""
CATALOG_TESTS, SPEC_TESTS = "tests/test_catalog.py", "tests/test_spec.py"
CATALOG_TEST = re.compile(r"^test_B\d")
"""catalog tests are the test_Bn_* of test_catalog.py; its meta-tests (test_catalog_is_proved, ...) are not graded"""


class CannotGrade(Exception):
    """Bad input: one clear line for the user, exit code 2, nothing written."""


class TimeLimit(Exception):
    """Raised by SIGALRM inside code that has run longer than its time limit."""


class Exited(BaseException):
    """Raised in the grading child in place of os._exit(...), and by the grader in place of a
    KeyboardInterrupt out of graded code (which pytest would take as the user stopping the session)."""


_REAL_EXIT = os._exit


def _learner_exit(code=0):
    raise Exited(f"called os._exit({code})")


def _is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and ("can't allocate memory" in str(exc) or "not enough memory" in str(exc)))


def breach(exc: BaseException) -> str | None:
    """What graded code did wrong beyond a wrong answer, as the end of a sentence ('grpo_loss ' + it), or
    None for an ordinary exception: it exited (sys.exit, exit(), quit(), SystemExit, os._exit), raised
    KeyboardInterrupt, ran past its time limit, or ran out of memory. Such a file cannot be graded."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}) (or exit(), quit(), raise SystemExit): graded code must return, not exit"
    if isinstance(exc, KeyboardInterrupt):
        return "raised KeyboardInterrupt: graded code must return, not interrupt the grader"
    if isinstance(exc, Exited):
        return f"{exc}: graded code must return, not exit"
    if isinstance(exc, TimeLimit):
        return f"gave {exc} (an endless loop?)"
    if _is_out_of_memory(exc):
        return f"ran out of memory (the grader allows {MEMORY_BYTES / 2**30:g} GiB)"
    return None


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
def time_limit(seconds: float, what: str = "the graded code"):
    """Raise TimeLimit in the code of the block after `seconds` (SIGALRM; main thread only). In a run_forked
    child the parent also kills the process WATCHDOG_GRACE seconds later, should the alarm not stop it."""

    def on_alarm(signum, frame):
        raise TimeLimit(f"no answer within the {seconds:g} s time limit")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    watched = _arm(seconds, what)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _disarm(watched)


@contextlib.contextmanager
def limited(seconds: float, what: str = "the graded code"):
    """time_limit (SIGALRM), only where signals work: the main thread."""
    if threading.current_thread() is threading.main_thread():
        with time_limit(seconds, what):
            yield
    else:
        yield


def failure(exc: BaseException, filename: str) -> dict:
    """An exception as data: type, first line of the message, and the innermost frame of `filename`
    it passed through (the function of the graded file that raised it), if any."""
    if isinstance(exc, Exited) and exc.__cause__ is not None:
        exc = exc.__cause__  # a KeyboardInterrupt the grader turned into Exited: report it where it was raised
    where = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == filename:
            where = (frame.f_code.co_name, line)
    message = (str(exc).strip().splitlines() or [""])[0][:160]
    broke = breach(exc)
    if broke and not isinstance(exc, TimeLimit):
        message = broke
    # user: raised by the graded code (pytest's own outcomes, e.g. skip, are BaseExceptions; so are exits)
    user = isinstance(exc, (Exception, SystemExit, KeyboardInterrupt, Exited))
    kind = "Exited" if isinstance(exc, Exited) else type(exc).__name__  # Exited: os._exit(...), not SystemExit
    return dict(type=kind, message=message, where=where, user=user, breach=broke)


def warm_up():
    """Build one Adam optimizer up front: the first one imports torch._dynamo (about 1 s), which must not
    count against a time limit (an import interrupted by the alarm would leave torch._dynamo half-initialised
    for the rest of the process)."""
    import torch

    torch.set_num_threads(1)
    torch.optim.Adam(torch.nn.Linear(1, 1).parameters())


# ----------------------------------------------------------------------------------------------
# The pytest session


def _hookimpl_wrapper(fn):
    import pytest

    return pytest.hookimpl(wrapper=True)(fn)


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
        signal.signal(signal.SIGALRM, _raise_time_limit)  # the graded file may have replaced the handler
        signal.setitimer(signal.ITIMER_REAL, TEST_SECONDS)
        spec_test = item.path.name == Path(SPEC_TESTS).name
        _arm(TEST_SECONDS, self.test_id(item) if spec_test else "a catalog test")  # its name would name a bug

    @_hookimpl_wrapper
    def pytest_runtest_call(self, item):
        """A KeyboardInterrupt out of graded code fails its test (pytest would end the session on it)."""
        try:
            return (yield)
        except KeyboardInterrupt as e:
            raise Exited("raised KeyboardInterrupt") from e

    def pytest_runtest_makereport(self, item, call):
        if call.when == "call" or call.excinfo is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _disarm(None)
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
    # No per-test log or warning capture either (about 1 s of a 3-bug round's 3.5 s of tests): the outcomes come
    # from GradePlugin, and the child's stdout and stderr go nowhere.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    args = ["-q", "--tb=no", "--no-header", "--assert=plain", "-p", "no:cacheprovider", "-p", "no:logging",
            "-p", "no:warnings", "-o", "addopts=", "-W", "ignore", "--rootdir", str(ROOT), CATALOG_TESTS, SPEC_TESTS]
    pytest.main(args, plugins=[plugin])
    return plugin.outcomes, plugin.timed_out


# ----------------------------------------------------------------------------------------------
# The forked process


_deadline = None  # in a run_forked child: (shared monotonic deadline or 0, shared name of what runs)


def _arm(seconds: float, what: str):
    """Tell the parent (if any) that `what` must be done within `seconds`; returns the previous deadline."""
    if _deadline is None:
        return None
    value, name = _deadline
    previous = (value.value, name.value)
    name.value = what.encode()[:255]
    value.value = time.monotonic() + seconds
    return previous


def _disarm(previous) -> None:
    if _deadline is not None:
        value, name = _deadline
        value.value, name.value = previous if previous else (0.0, b"")


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def limit_memory(extra: int = MEMORY_BYTES) -> None:
    """Cap this process's address space at its current size plus `extra` bytes (soft and hard: graded code
    cannot lift it). A larger allocation then fails at once (torch: RuntimeError, Python: MemoryError)."""
    with contextlib.suppress(OSError, ValueError):
        cap = _address_space() + extra
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _forked(target, data, send, deadline) -> None:
    global _deadline
    code = 0
    try:
        _deadline = deadline
        os._exit = _learner_exit  # graded code's os._exit(...) raises Exited (the child exits through _REAL_EXIT)
        sys.dont_write_bytecode = True  # importing a graded file must not write practice/__pycache__
        devnull = os.open(os.devnull, os.O_WRONLY)
        if not os.environ.get("PRACTICE_DEBUG"):
            os.dup2(devnull, 1)  # the graded code may print: only the pipe carries results
            os.dup2(devnull, 2)
        os.chdir(ROOT)
        limit_memory()
        result = target(data)
        _disarm(None)
        send.send(result)
    except BaseException as e:  # noqa: BLE001 - whatever escapes becomes the one line the parent prints
        code = 1
        with contextlib.suppress(BaseException):
            broke = breach(e)
            send.send(f"ended without a result: the graded code {broke}" if broke
                      else f"ended without a result: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}")
    finally:
        with contextlib.suppress(BaseException):
            send.close()
        _REAL_EXIT(code)


CANCELLED = "was cancelled: its result was no longer needed"


def run_forked(target, data, limit: float, cancel: threading.Event | None = None):
    """target(data) in a forked process (stdout and stderr silenced, unless PRACTICE_DEBUG is set; memory
    limited to MEMORY_BYTES more than now): its result, or a str saying why there is none: the whole run
    took longer than `limit` seconds, a time limit inside it could not stop the code (the parent's wall
    clock kills the child WATCHDOG_GRACE seconds after any deadline the child armed), `cancel` was set
    (CANCELLED: the caller no longer needs the result), or how the child ended (an exit code, or the signal
    that killed it)."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    deadline = (context.Value("d", 0.0, lock=False), context.Array("c", 256, lock=False))
    process = context.Process(target=_forked, args=(target, data, send, deadline), daemon=True)
    start = time.monotonic()
    process.start()
    send.close()
    result, received, killed = None, False, None
    while True:
        if receive.poll(0.05):
            with contextlib.suppress(EOFError, OSError):
                result, received = receive.recv(), True
            break
        now, armed = time.monotonic(), deadline[0].value
        if cancel is not None and cancel.is_set():
            killed = CANCELLED
        elif armed and now > armed + WATCHDOG_GRACE:
            what = deadline[1].value.decode(errors="replace") or "the graded code"
            killed = (f"was stopped: {what} ran past its time limit and the alarm did not stop it (did the file "
                      f"cancel or ignore SIGALRM?)")
        elif now > start + limit:
            killed = f"took longer than its time limit ({limit:g} s)"
        if killed:
            process.kill()
            break
        if not process.is_alive() and not receive.poll(0.05):
            break
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()
    if received:
        return result
    if killed:
        return killed
    code = process.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        oom = " (the out-of-memory killer?)" if -code == signal.SIGKILL else ""
        return f"ended without a result: the process was killed by {name}{oom}"
    return f"ended without a result (exit code {code}: did the file exit or crash the interpreter?)"
