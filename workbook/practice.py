"""Practice mode: mock rounds drawn from the bug catalog, a grader, and levelled hints.

  make mock [ROUND=N] [BUGS=k|all] [HARD=1]   write practice/round_N.py: the hand-out with k bugs left in
  make grade [FILE=path]                       which of the file's bugs are fixed, and what a fix broke
  make hint [FILE=path] [LEVEL=1|2|3]          a hint for each bug still remaining
(or `.venv/bin/python -m workbook.practice mock|grade|hint ...`; grade exits 0 when everything is fixed and
nothing regressed, 1 otherwise, 2 when the file cannot be graded; make itself turns any failure into 2.)

The draw. Round N with k bugs keeps the bugs `draw(N, k) = random.Random(N).sample(BUG_IDS, k)` of
grpo_buggy.py and replaces every other catalogued function by grpo_fixed.py's version of it (its `# FIX`
comments stripped), at source level: nothing else of grpo_fixed enters, so a round is a hand-out with fewer
bugs. The file names neither the bugs nor the draw; its one-line header gives the round number, the bug
count and when it was drawn, and the grader re-derives the draw from those.

The grader imports the file (it never writes it) in a forked process and runs, each under a time limit,
  - the catalog tests of tests/test_catalog.py (`test_Bn_*`) against it: a bug is fixed when every catalog
    test carrying its id passes; a test carrying several ids (test_B6_B10_...) that fails is not held
    against a bug whose own tests pass while another of its ids is evidently still remaining;
  - the spec tests of tests/test_spec.py and a short training run: a regression is a test group (one
    spec sentence) or the training run that the file fails while the file as handed out (the round as
    drawn, regenerated in memory; grpo_buggy.py for any other file) passes it.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as dt
import importlib
import importlib.util
import inspect
import io
import json
import multiprocessing
import os
import random
import re
import signal
import sys
import time
import tokenize
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

from workbook import catalog, monitor

ROOT = catalog.ROOT
PRACTICE = ROOT / "practice"
HANDOUT, FIXED = ROOT / "grpo_buggy.py", ROOT / "grpo_fixed.py"
ROUND_MINUTES = 45
"""length of a mock round, as in the real interview round"""
DEFAULT_BUGS = 3
"""bugs per mock round, as in the real round"""
TEST_SECONDS = 5.0
"""time limit of one test, of importing the file, and of the training run"""
TRAIN_STEPS = 6
"""iterations of the short training run (default config, seed 0)"""
CATALOG_TESTS, SPEC_TESTS = "tests/test_catalog.py", "tests/test_spec.py"
CATALOG_TEST = re.compile(r"^test_B\d")
"""catalog tests are the test_Bn_* of test_catalog.py; its meta-tests (test_catalog_is_proved, ...) are not graded"""

HEADER = "# GRPO practice round {round}: {bugs} bug{s}, drawn {when} UTC."
HEADER_RE = re.compile(r"^# GRPO practice round (\d+): (\d+) bugs?, drawn (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC\.$")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class CannotGrade(Exception):
    """Bad input: one clear line for the user, exit code 2, nothing written."""


# ----------------------------------------------------------------------------------------------
# The draw and the round header


def draw(round_number: int, k: int) -> list[str]:
    """The bug ids left in round `round_number` with `k` bugs, sorted by catalog order."""
    chosen = set(random.Random(round_number).sample(catalog.BUG_IDS, k))
    return [b for b in catalog.BUG_IDS if b in chosen]


@dataclass(frozen=True)
class Round:
    number: int
    bugs: int
    drawn_at: dt.datetime  # UTC

    @property
    def drawn(self) -> list[str]:
        return draw(self.number, self.bugs)

    def header(self) -> str:
        when = self.drawn_at.strftime(TIME_FORMAT)
        return HEADER.format(round=self.number, bugs=self.bugs, s="" if self.bugs == 1 else "s", when=when)


def parse_header(text: str) -> Round | None:
    """The Round a file's first line announces, or None for any other file."""
    match = HEADER_RE.match(text.split("\n", 1)[0].rstrip("\r"))
    if not match or not 1 <= int(match[2]) <= len(catalog.BUG_IDS):
        return None
    when = dt.datetime.strptime(match[3], TIME_FORMAT).replace(tzinfo=dt.UTC)
    return Round(int(match[1]), int(match[2]), when)


# ----------------------------------------------------------------------------------------------
# Source-level splicing


def top_level(tree: ast.Module) -> dict[str, ast.stmt]:
    """name -> the top-level statement that binds it (def, class, assignment or import)."""
    bound = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.setdefault((alias.asname or alias.name).split(".")[0], node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bound.setdefault(name.id, node)
    return bound


def span(node: ast.stmt, tree: ast.Module | None = None) -> tuple[int, int]:
    """(first, last) 1-based source lines of a top-level statement: decorators included, and an
    attribute docstring (a string right after an assignment) too when `tree` is given."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    last = node.end_lineno
    if tree is not None and isinstance(node, (ast.Assign, ast.AnnAssign)):
        after = tree.body.index(node) + 1
        if after < len(tree.body) and _is_string(tree.body[after]):
            last = tree.body[after].end_lineno
    return first, last


def _is_string(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def strip_fix_comments(text: str) -> str:
    """Drop whole-line `# FIX ...` comments and cut trailing `  # FIX Bn: ...` ones (found by tokenize,
    so a '# FIX' inside a string is left alone)."""
    lines = text.splitlines(keepends=True)
    fixes = [tok.start for tok in tokenize.generate_tokens(io.StringIO(text).readline)
             if tok.type == tokenize.COMMENT and tok.string.startswith("# FIX")]
    drop = set()
    for row, col in fixes:
        line = lines[row - 1]
        if line[:col].strip():
            lines[row - 1] = line[:col].rstrip() + "\n"
        else:
            drop.add(row - 1)
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def donor_blocks(donor: str, names: list[str], present: set[str]) -> dict[str, str]:
    """name -> source block (FIX comments stripped) for each function in `names`, preceded by the donor's
    top-level definitions it needs that are missing from `present` (collected recursively)."""
    tree = ast.parse(donor)
    bound = top_level(tree)
    lines = donor.splitlines(keepends=True)
    blocks, taken = {}, set(present)
    for name in names:
        node = bound.get(name)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise ValueError(f"{FIXED.name} has no top-level function {name!r}")
        needed, stack = [], [node]
        while stack:  # the donor statements this function reaches that the target lacks
            for used in sorted(_names_used(stack.pop())):
                dep = bound.get(used)
                if dep is not None and used not in taken and dep is not node and dep not in needed:
                    taken.add(used)
                    needed.append(dep)
                    stack.append(dep)
        pieces = ["".join(lines[a - 1 : b]) for a, b in sorted(span(d, tree) for d in needed)]
        first, last = span(node, tree)
        pieces.append("".join(lines[first - 1 : last]))
        blocks[name] = strip_fix_comments("\n\n".join(pieces))
    return blocks


def splice(target: str, donor: str, names: list[str]) -> str:
    """`target` source with each top-level function in `names` replaced by the donor's version."""
    blocks = donor_blocks(donor, names, set(top_level(ast.parse(target))))
    return replace_functions(target, {name: blocks[name] for name in names})


def replace_functions(source: str, texts: dict[str, str], *, decorators: bool = True) -> str:
    """`source` with each top-level function named in `texts` replaced by that text, verbatim; with
    decorators=False the function's decorators stay and only its `def` to its last line is replaced.
    ValueError for a name that is not a top-level function."""
    bound = top_level(ast.parse(source))
    for name in texts:
        if not isinstance(bound.get(name), (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise ValueError(f"no top-level function {name!r} to replace")
    lines = source.splitlines(keepends=True)
    for name in sorted(texts, key=lambda n: -bound[n].lineno):  # bottom up: line numbers stay valid
        first, last = span(bound[name]) if decorators else (bound[name].lineno, bound[name].end_lineno)
        lines[first - 1 : last] = texts[name].splitlines(keepends=True)
    return "".join(lines)


def first_docstring_lines(text: str) -> str:
    """Every module, class and function docstring cut to its first line (HARD=1)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    docs = [node.body[0] for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and _is_string(node.body[0]) and node.body[0].end_lineno > node.body[0].lineno]
    for doc in sorted(docs, key=lambda d: -d.lineno):
        line = lines[doc.lineno - 1]
        opening = re.match(r"([rRuU]?)(\"\"\"|''')(.*)$", line[doc.col_offset :].rstrip("\n"))
        if not opening:
            continue
        first = opening[3].strip() or doc.value.value.strip().splitlines()[0].strip()
        quote = opening[1] + opening[2]
        lines[doc.lineno - 1 : doc.end_lineno] = [line[: doc.col_offset] + quote + first + opening[2] + "\n"]
    return "".join(lines)


def round_source(number: int, bugs: int, drawn_at: dt.datetime, hard: bool = False) -> str:
    """The text of practice/round_<number>.py: header, then grpo_buggy.py with only the drawn bugs left."""
    keep = set(draw(number, bugs))
    fixed = [b.function for b in catalog.BUGS if b.id not in keep]
    body = splice(HANDOUT.read_text(), FIXED.read_text(), fixed)
    if hard:
        body = first_docstring_lines(body)
    return Round(number, bugs, drawn_at).header() + "\n" + body


# ----------------------------------------------------------------------------------------------
# make mock


def round_path(number: int) -> Path:
    return PRACTICE / f"round_{number}.py"


def existing_rounds() -> dict[Path, Round]:
    """Every practice/round_*.py whose header is intact."""
    found = {}
    for path in sorted(PRACTICE.glob("round_*.py")) if PRACTICE.is_dir() else []:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            info = parse_header(path.read_text())
            if info is not None:
                found[path] = info
    return found


def next_round_number() -> int:
    numbers = [int(m[1]) for p in PRACTICE.glob("round_*.py") if (m := re.fullmatch(r"round_(\d+)\.py", p.name))]
    return max(numbers, default=0) + 1


def parse_bugs(value: str) -> int:
    n = len(catalog.BUG_IDS)
    if str(value).strip().lower() == "all":
        return n
    try:
        k = int(value)
    except ValueError:
        k = -1
    if not 1 <= k <= n:
        raise CannotGrade(f"BUGS must be a number from 1 to {n}, or all; got {value!r}")
    return k


def mock(number: int | None, bugs: str, hard: bool, now: dt.datetime | None = None) -> Path:
    """Write practice/round_<number>.py (never over an existing file) and say what to do next."""
    k = parse_bugs(bugs)
    if number is None:
        number = next_round_number()
    if number < 0:
        raise CannotGrade(f"ROUND must be a number >= 0, got {number}")
    path = round_path(number)
    if path.exists():
        raise CannotGrade(f"{_rel(path)} exists already (it is never overwritten): grade it with "
                          f"`make grade FILE={_rel(path)}`, or pick another ROUND=N")
    now = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    text = round_source(number, k, now, hard)
    PRACTICE.mkdir(exist_ok=True)
    with open(path, "x") as f:  # "x": fails rather than overwrite, even in a race
        f.write(text)
    print(f"Round {number}: {k} bug{'s' * (k != 1)} left in {_rel(path)} (a copy of grpo_buggy.py"
          f"{', docstrings cut to one line' if hard else ''}). The round is {ROUND_MINUTES} minutes.")
    steps = [(f".venv/bin/python {_rel(path)}", "run it and read the logs"),
             (f"edit {_rel(path)}", "find the bugs with tiny inputs; fix them in place"),
             ("make grade", "which bugs are fixed, and whether a fix broke something else"),
             ("make hint [LEVEL=2|3]", "a hint for each remaining bug")]
    width = max(len(cmd) for cmd, _ in steps) + 3
    print("Next:\n" + "\n".join(f"  {cmd:<{width}}{what}" for cmd, what in steps))
    return path


def _rel(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# ----------------------------------------------------------------------------------------------
# What a file is graded on


@dataclass
class Job:
    """One file to grade: which bugs, and what 'as handed out' means for it."""

    path: Path
    text: str
    bugs: list[str]
    round: Round | None
    base_name: str  # where the baseline's code comes from, for messages
    base_source: str


def default_file() -> Path:
    rounds = existing_rounds()
    if not rounds:
        raise CannotGrade("no practice round yet: run `make mock` first, or pass FILE=path")
    return max(rounds, key=lambda p: (rounds[p].drawn_at, rounds[p].number))


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


def make_job(path: Path | str | None) -> Job:
    """Read and check a file before anything runs: missing file, syntax error, round header."""
    path = Path(path) if path else default_file()
    text = read_python(path)
    info = parse_header(text)
    if info is not None:
        base = round_source(info.number, info.bugs, info.drawn_at)
        return Job(path.resolve(), text, info.drawn, info, f"round {info.number} as drawn", base)
    return Job(path.resolve(), text, list(catalog.BUG_IDS), None, HANDOUT.name, HANDOUT.read_text())


# ----------------------------------------------------------------------------------------------
# The grading process (forked): runs the tests and the training run, returns plain data


class TimeLimit(Exception):
    """Raised by SIGALRM inside code that has run longer than its time limit."""


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


def failure(exc: BaseException, filename: str) -> dict:
    """An exception as data: type, first line of the message, and the innermost frame of `filename`
    it passed through (the function of the graded file that raised it), if any."""
    where = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == filename:
            where = (frame.f_code.co_name, line)
    message = (str(exc).strip().splitlines() or [""])[0][:160]
    return dict(type=type(exc).__name__, message=message, where=where, user=isinstance(exc, Exception))


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
    """The first public function or class of the hand-out that `module` lacks, or whose signature differs."""
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


def training_run(module: types.ModuleType, filename: str) -> dict:
    """The short training run: {statistic: logged as a number in every iteration}, or how it failed."""
    try:
        with time_limit(TEST_SECONDS):
            history = module.train(seed=0, steps=TRAIN_STEPS)
    except BaseException as e:  # noqa: BLE001 - the grader reports whatever the graded code raises
        return dict(error=failure(e, filename))
    if not isinstance(history, list) or len(history) != TRAIN_STEPS or not all(isinstance(s, dict) for s in history):
        return dict(problem=f"train(steps={TRAIN_STEPS}) did not return {TRAIN_STEPS} dicts of statistics")
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    return dict(stats={k: all(number(s.get(k)) for s in history) for k in set().union(*history)})


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
        outcome = dict(passed=call.excinfo is None, group=item.cls.__name__ if item.cls else item.originalname,
                       spec=item.path.name == Path(SPEC_TESTS).name,
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


def grading_process(jobs: list[dict], send) -> None:
    """Body of the forked process: load each job's module and baseline, check the public API, run the
    tests and the training run, and send back one result per job."""
    sys.dont_write_bytecode = True  # importing the graded file must not write practice/__pycache__
    devnull = os.open(os.devnull, os.O_WRONLY)
    if not os.environ.get("PRACTICE_DEBUG"):
        os.dup2(devnull, 1)  # the graded code may print: only the pipe carries results
        os.dup2(devnull, 2)
    os.chdir(ROOT)
    signal.signal(signal.SIGALRM, _raise_time_limit)
    results, modules, files = {}, {}, {}
    for j, job in enumerate(jobs):
        try:
            modules[f"u{j}"], modules[f"b{j}"], files[f"u{j}"], files[f"b{j}"] = load_pair(j, job)
        except CannotGrade as e:
            results[j] = dict(error=str(e))
    graded = {v: m for v, m in modules.items() if int(v[1:]) not in results}
    started = time.perf_counter()
    outcomes = run_tests(graded, files) if graded else ({}, {})
    tested = time.perf_counter() - started
    for j, job in enumerate(jobs):
        if j not in results:
            results[j] = collect(j, job, modules, files, *outcomes)
            results[j]["seconds_tests"] = tested
    send.send(results)
    send.close()


def _raise_time_limit(signum, frame):
    raise TimeLimit(f"no answer within the {TEST_SECONDS:g} s time limit")


def load_pair(j: int, job: dict):
    """(module, baseline, module file, baseline file) for one job; CannotGrade when the file does not load."""
    base_file = f"<{job['base_name']}>"
    base = load_module(f"practice_baseline_{j}", job["base_source"], base_file)
    try:
        with time_limit(TEST_SECONDS):
            module = load_module(f"practice_graded_{j}", job["text"], job["path"])
    except BaseException as e:  # noqa: BLE001
        err = failure(e, job["path"])
        where = f" in {err['where'][0]} (line {err['where'][1]})" if err["where"] else ""
        what = "did not finish" if err["type"] == "TimeLimit" else f"raised {err['type']}"
        raise CannotGrade(f"{job['path']}: importing it {what}{where}: {err['message']}") from None
    problem = api_problem(module, base, job["path"])
    if problem:
        raise CannotGrade(problem)
    return module, base, job["path"], base_file


def run_tests(modules: dict, files: dict):
    """One pytest session over the catalog and spec tests, parametrized over every module."""
    import pytest

    _warm_up()
    plugin = GradePlugin(modules, files)
    # No plugin autoload (nbval, xdist, anyio, ... cost seconds to import) and no assertion rewriting: with
    # bytecode writing off, pytest would re-rewrite every imported module of a plugin (hypothesis) on every run.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    args = ["-q", "--tb=no", "--no-header", "--assert=plain", "-p", "no:cacheprovider", "-o", "addopts=",
            "-W", "ignore", "--rootdir", str(ROOT), CATALOG_TESTS, SPEC_TESTS]
    pytest.main(args, plugins=[plugin])
    return plugin.outcomes, plugin.timed_out


def _warm_up():
    """Build one Adam optimizer up front: the first one imports torch._dynamo (about 1 s), which must not
    count against a test's time limit."""
    import torch

    torch.set_num_threads(1)
    torch.optim.Adam(torch.nn.Linear(1, 1).parameters())


def collect(j: int, job: dict, modules: dict, files: dict, outcomes: dict, timed_out: dict) -> dict:
    """One job's result: catalog outcomes and regressions, or `error`: why it cannot be graded."""
    u, b = f"u{j}", f"b{j}"
    if u in timed_out:
        test = timed_out[u]["test"]
        return dict(error=_crash_line(job["path"], timed_out[u], _in_test(test, outcomes[(u, test)], job)))
    mine = {t: o for (v, t), o in outcomes.items() if v == u}
    base = {t: o for (v, t), o in outcomes.items() if v == b}
    for test, out in mine.items():
        if _new_exception(out.get("error"), base.get(test, {}).get("error")):
            return dict(error=_crash_line(job["path"], out["error"], _in_test(test, out, job)))
    regressions = {}
    for test, out in mine.items():
        if out["spec"] and not out["passed"] and base.get(test, {}).get("passed"):
            regressions.setdefault(out["group"], []).append((test, out.get("error")))
    train, reference = training_run(modules[u], files[u]), training_run(modules[b], files[b])
    if _new_exception(train.get("error"), reference.get("error")):
        return dict(error=_crash_line(job["path"], train["error"], "in the short training run"))
    lines = [_regression_line(group, fails) for group, fails in regressions.items()]
    training = training_regression(train, reference)
    return dict(catalog={t: dict(ids=o["ids"], passed=o["passed"]) for t, o in mine.items() if not o["spec"]},
                regressions=lines + ([training] if training else []))


def _in_test(test: str, out: dict, job: dict) -> str:
    """'in <test>', unless it is a catalog test of a bug the file is not graded on: its name would give
    away a bug that is not in the round."""
    if out["spec"] or set(out["ids"]) <= set(job["bugs"]):
        return f"in {test}"
    return "in a catalog test of a bug outside this round"


def _new_exception(err: dict | None, base_err: dict | None) -> bool:
    """The graded code raised an exception out of one of its own functions that the baseline does not
    raise there (an exception of the same type from the baseline, e.g. a bug's own crash, does not count)."""
    if not err or not err["user"] or not err["where"]:
        return False
    return not (base_err and base_err["type"] == err["type"])


def _crash_line(path: str, err: dict, when: str) -> str:
    where = f"{err['where'][0]} (line {err['where'][1]})" if err["where"] else "the file"
    if err["type"] == "TimeLimit":
        return f"{path}: {where} did not return {when}: {err['message']}"
    return f"{path}: {where} raised {err['type']} {when}: {err['message']}"


def training_regression(train: dict, reference: dict) -> str | None:
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
    return f"short training run ({TRAIN_STEPS} iterations): {'; '.join(what)}" if what else None


def spec_sentences() -> dict[str, str]:
    """test group -> the seed sentence(s) it checks, from the table in tests/test_spec.py's docstring."""
    try:
        doc = ast.get_docstring(ast.parse((ROOT / SPEC_TESTS).read_text())) or ""
    except (OSError, SyntaxError):
        return {}
    table, sentence = {}, ""
    for line in doc.splitlines():
        match = re.match(r"^\s+(.*?[\"'])\s+((?:Test\w+|test_\w+)(?:,\s*(?:Test\w+|test_\w+))*)\s*$", line)
        text = (match[1] if match else line).strip()
        if text.startswith('"') or sentence:
            sentence = (sentence + " " + text).strip()
        if match:
            for group in re.split(r",\s*", match[2]):
                table[group] = (table[group] + " / " if group in table else "") + sentence
            sentence = ""
        elif not text:
            sentence = ""
    return table


def _regression_line(group: str, fails: list) -> str:
    """One regression: the spec sentence (or test group) broken, its first failing test, how many more."""
    sentence = spec_sentences().get(group)
    test, err = fails[0]
    name = test.split("::")[-1]
    why = f" ({err['type']}" + (f": {err['message']})" if err["message"] else ")") if err else ""
    more = f", and {len(fails) - 1} more of {group}" if len(fails) > 1 else ""
    head = f"spec {sentence}" if sentence else f"spec {group}"
    return f"{head}: {name if sentence is None or len(fails) > 1 else group + '::' + name} fails{why}{more}"


def grade_jobs(jobs: list[Job]) -> list[dict]:
    """Grade several files in one forked process; each result has `error` (cannot grade) or the outcomes."""
    data = [dict(path=_rel(j.path), text=j.text, bugs=j.bugs, base_name=j.base_name, base_source=j.base_source)
            for j in jobs]
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=grading_process, args=(data, send), daemon=True)
    limit = 60 + 30 * len(jobs)
    process.start()
    send.close()
    results = None
    if receive.poll(limit):
        with contextlib.suppress(EOFError):
            results = receive.recv()
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()
    if results is None:
        why = "took longer than its time limit" if process.exitcode in (None, -signal.SIGKILL) else (
            f"ended without a result (exit code {process.exitcode}: did the file exit or crash the interpreter?)")
        return [dict(error=f"{j.path}: grading {why}") for j in jobs]
    return [results[i] for i in range(len(jobs))]


# ----------------------------------------------------------------------------------------------
# Verdicts


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


def clock(info: Round, now: dt.datetime | None = None) -> str:
    seconds = max(0, int(((now or dt.datetime.now(dt.UTC)) - info.drawn_at).total_seconds()))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def report(job: Job, result: dict, now: dt.datetime | None = None) -> tuple[list[str], int]:
    """The grader's lines and exit code for one graded file."""
    if "error" in result:
        return [f"cannot grade {result['error']}"], 2
    status = bug_status(result["catalog"], job.bugs)
    lines = [f"{b} {'fixed' if ok else 'remaining'}" for b, ok in status.items()]
    regressions = result["regressions"]
    lines.append("regressions: " + ("none" if not regressions else f"{len(regressions)}"))
    lines += [f"  {r}" for r in regressions]
    k, n, r = sum(status.values()), len(status), len(regressions)
    last = f"{k} of {n} fixed, {r} regression{'s' * (r != 1)}"
    if job.round is not None:
        last += f", {clock(job.round, now)} since the round was drawn (the round is {ROUND_MINUTES} minutes)"
    lines.append(last)
    return lines, 0 if k == n and r == 0 else 1


# ----------------------------------------------------------------------------------------------
# make hint


def statistic_line(name: str) -> str:
    """One logged statistic with its meaning and healthy range, from the hand-out's own table (STATS rows
    with meaning, lo, hi; or the older DIAGNOSTICS (meaning, range) pairs)."""
    import grpo_buggy

    table = getattr(grpo_buggy, "STATS", None) or getattr(grpo_buggy, "DIAGNOSTICS", {})
    row = table.get(name)
    if row is None:
        return name
    if isinstance(row, (tuple, list)):
        meaning, healthy = (list(row) + ["", ""])[:2]
    else:
        meaning = getattr(row, "meaning", "")
        lo, hi = getattr(row, "lo", None), getattr(row, "hi", None)
        healthy = "" if lo is None or hi is None else monitor.render_bounds(lo, hi)
    return f"{name}: {meaning}" + (f" (healthy: {healthy})" if healthy else "")


def fix_lines(bug_id: str) -> list[str]:
    """The lines of grpo_fixed.py that carry `# FIX <bug_id>:`, as the code of the fix."""
    tag = re.compile(rf"#\s*FIX {bug_id}\b")
    return [line.strip() for line in FIXED.read_text().splitlines() if tag.search(line)]


def hint_lines(bug_id: str, level: int) -> list[str]:
    entry = catalog.bug(bug_id)
    if level == 1:
        return [f"{bug_id} (level 1): {entry.symptom}"] + [f"    watch {statistic_line(s)}" for s in entry.stats]
    if level == 2:
        return [f"{bug_id} (level 2): look at {entry.function}(). {entry.probe}"]
    return [f"{bug_id} (level 3): {entry.fix}", "    the fixed twin's lines:"] + [f"    {x}" for x in fix_lines(bug_id)]


def hint(job: Job, result: dict, level: int) -> tuple[list[str], int]:
    if "error" in result:
        return [f"cannot grade {result['error']}"], 2
    remaining = [b for b, ok in bug_status(result["catalog"], job.bugs).items() if not ok]
    if not remaining:
        return ["Every bug of this file is fixed: no hint needed (make grade shows any regression)."], 0
    lines = []
    for b in remaining:
        lines += hint_lines(b, level)
    return lines, 0


# ----------------------------------------------------------------------------------------------
# Command line


def scratch_grader():
    """workbook.scratch.grade, when that module exists (issue 11), else None."""
    try:
        module = importlib.import_module("workbook.scratch")
    except ModuleNotFoundError as e:
        if e.name != "workbook.scratch":
            raise
        return None
    return getattr(module, "grade", None)


def grade_command(files: list[str | None], as_json: bool = False) -> int:
    """Grade each file (a scratch_*.py goes to workbook.scratch.grade when it exists); print the report,
    or with `as_json` one JSON line per file. Returns the largest exit code."""
    outputs, jobs = {}, {}
    for i, file in enumerate(files):
        scratch = scratch_grader() if file and re.fullmatch(r"scratch_.*\.py", Path(file).name) else None
        if scratch is not None:
            outputs[i] = dict(file=file, code=scratch(file), lines=[])
            continue
        try:
            jobs[i] = make_job(file)
        except CannotGrade as e:
            outputs[i] = dict(file=file, code=2, lines=[f"cannot grade {e}"])
    for (i, job), result in zip(jobs.items(), grade_jobs(list(jobs.values())) if jobs else [], strict=True):
        lines, code = report(job, result)
        status = bug_status(result["catalog"], job.bugs) if "catalog" in result else None
        outputs[i] = dict(file=_rel(job.path), code=code, lines=lines, status=status,
                          regressions=result.get("regressions"), seconds_tests=result.get("seconds_tests"))
    for i in sorted(outputs):
        out = outputs[i]
        if as_json:
            print(json.dumps(out))
        elif out["lines"]:
            print("\n".join(out["lines"]), file=sys.stderr if out["code"] == 2 else sys.stdout, flush=True)
    return max(out["code"] for out in outputs.values())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbook.practice", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("mock", help="draw a mock round into practice/round_N.py")
    p.add_argument("--round", type=int, default=None, help="round number N (default: the next unused one)")
    p.add_argument("--bugs", default=str(DEFAULT_BUGS), help=f"bugs left in (default {DEFAULT_BUGS}, or all)")
    p.add_argument("--hard", action="store_true", help="keep only the first line of each docstring")
    p = sub.add_parser("grade", help="grade a file (default: the newest round)")
    p.add_argument("files", nargs="*", help="files to grade (several share one grading process)")
    p.add_argument("--json", action="store_true", help="one JSON line per file")
    p = sub.add_parser("hint", help="hints for the bugs a file still has")
    p.add_argument("file", nargs="?", default=None)
    p.add_argument("--level", default="1", help="1: symptom and statistic, 2: function and tiny input, 3: the fix")
    args = parser.parse_args(argv)
    sys.dont_write_bytecode = True
    if args.command == "grade":
        return grade_command(args.files or [None], args.json)
    try:
        if args.command == "mock":
            mock(args.round, args.bugs, args.hard)
            return 0
        if args.level.strip() not in ("1", "2", "3"):
            raise CannotGrade(f"LEVEL must be 1, 2 or 3, got {args.level!r}")
        job = make_job(args.file)
        lines, code = hint(job, grade_jobs([job])[0], int(args.level))
    except CannotGrade as e:
        print(("" if args.command == "mock" else "cannot grade ") + str(e), file=sys.stderr)
        return 2
    print("\n".join(lines), file=sys.stderr if code == 2 else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
