"""The from-scratch grader: a learner's scratch file, graded sentence by sentence of the spec (SPEC.md).

Grading prints one line per spec sentence, `pass` or `fail`; a failure shows the smallest input that
exposes it with "yours" beside "expected" (interview/checks.py: it prints, it never raises). Each sentence
is checked on a fresh grpo_fixed copy with only the learner's versions of the sentence's own functions
swapped in (`workbook.swap.fixed_with`, which also carries the learner's helpers and imports), so a mistake
is charged to the sentence it breaks and to nothing else. Sites outside the spec's three are graded by the
catalog tests that name their bug (tests/test_catalog.py). When no stub raises NotImplementedError any more,
the learner's functions train the default run, and the final reward is printed beside the fixed twin's.
Exit codes (0 all pass, 1 some fail, 2 cannot grade) and the bad-input handling (one `cannot grade ...`
line on stderr: missing file, syntax error, import error, a public function renamed or its signature
changed, the `# scratch-funcs:` line gone) are the mock grader's, through the same sandbox
(interview/sandbox.py): `grade` and `grade_outcomes` run the learner's code in a forked child with a time
limit per case and a memory limit. Code that exits (sys.exit, os._exit, exit(), quit(), SystemExit,
KeyboardInterrupt), runs past its time limit or out of memory (`sandbox.breach`) fails its case, the
sentences that need that function again are not run (one hang costs one time limit), and `grade` prints one
`cannot grade ...` line and exits 2.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import logging
import os
import re
import sys
import time
import types
from pathlib import Path

import torch

import grpo_support
from interview import sandbox
from interview.checks import (
    NOT_WRITTEN,
    Outcome,
    Raised,
    breach_of,
    call,
    not_implemented,
    quiet_torch,
    run_sentence,
    show,
    timed,
)
from interview.sandbox import CannotGrade
from interview.scratch import FUNCS_HEADER, SITES, SPEC_FUNCS, declared_funcs, graded_funcs, handout_source, is_stub
from interview.spec_cases import CASES, graded_sentences
from interview.splice import function_nodes
from workbook import catalog
from workbook.swap import fixed_with

ROOT = catalog.ROOT
TRAIN_SECONDS = 60.0  # time limit of the training run (the default run: about 8 s on one thread)
GRADE_SECONDS = 240.0  # the parent's last line of defence: the whole grade, whatever the child does
_load_counter = itertools.count()


# ----------------------------------------------------------------------------------------------
# Loading a scratch file


def load_scratch(path: Path | str) -> tuple[types.ModuleType, tuple[str, ...]]:
    """Import the learner's file as a fresh module; CannotGrade with one clear line (the mock grader's
    wording) if it is missing, not Python, fails to import, or lost a public function or signature."""
    sandbox.warm_up()
    path = Path(path)
    source = sandbox.read_python(path)
    try:
        declared = declared_funcs(source)
    except ValueError as error:
        raise CannotGrade(f"{path}: the {FUNCS_HEADER} line: {error}") from None
    if declared is None:
        raise CannotGrade(f"{path}: its {FUNCS_HEADER} line is gone (it names the functions to grade); put it "
                          f"back as make scratch wrote it")
    funcs = graded_funcs(source, declared)
    name = f"scratch_under_grading_{next(_load_counter)}"
    try:
        with contextlib.redirect_stdout(sys.stderr), sandbox.limited(sandbox.TEST_SECONDS, "importing the file"):
            module = sandbox.load_module(name, source, str(path))
    except BaseException as error:  # noqa: BLE001 - the learner's top-level code: any error means it cannot be graded
        broke = sandbox.breach(error)
        if broke:
            raise CannotGrade(f"{path}: importing it {broke}") from None
        raise CannotGrade(f"{path}: importing it raised {error_line(error, str(path))}") from None
    finally:
        sys.modules.pop(name, None)
    problem = sandbox.api_problem(module, handout_module(), str(path))
    if problem:
        raise CannotGrade(problem)
    return module, funcs


def error_line(error: BaseException, filename: str) -> str:
    """`Type: message (in function, line n)`, with the innermost frame of `filename` it passed through."""
    info = sandbox.failure(error, filename)
    where = f" (in {info['where'][0]}, line {info['where'][1]})" if info["where"] else ""
    return f"{info['type']}: {info['message']}{where}"


@functools.cache
def handout_module() -> types.ModuleType:
    """The hand-out with no bug, imported once: the public names and signatures a scratch file must keep."""
    return sandbox.load_module("scratch_handout", handout_source(), "<scratch hand-out>")


def graded_copy(learner: types.ModuleType, funcs: tuple[str, ...], label: str) -> types.ModuleType:
    """A fresh grpo_fixed with the learner's versions of `funcs` swapped in."""
    return fixed_with("scratch_" + label, **{f: getattr(learner, f) for f in funcs})


# ----------------------------------------------------------------------------------------------
# Sentences and catalog tests


def sentence_outcomes(learner: types.ModuleType) -> list[Outcome]:
    """One Outcome per graded spec sentence, each on a copy with only that sentence's functions swapped in.
    Once a function breaks the sandbox's rules (exits, hangs, runs out of memory), the later sentences
    about it fail with that first breach and are not run (a hang costs one time limit, not one per case)."""
    outcomes, copies, broken = [], {}, {}
    for sentence in graded_sentences():
        title = f"{sentence.label}: {sentence.text}"
        first = next((broken[f] for f in sentence.funcs if f in broken), None)
        if first is not None:
            outcomes.append(Outcome(sentence.key, sentence.funcs, title, False, False, first.case,
                                    f"{first.yours} (on an earlier case; not run again)", first.expected,
                                    first.breach))
            continue
        if sentence.funcs not in copies:
            copies[sentence.funcs] = graded_copy(learner, sentence.funcs, "_".join(sentence.funcs))
        module = copies[sentence.funcs]
        with quiet_torch():
            outcome = run_sentence(title, sentence.key, sentence.funcs, CASES[sentence.key](), module)
        outcomes.append(outcome)
        if outcome.breach:
            broken.update(dict.fromkeys(sentence.funcs, outcome))
    return outcomes


def catalog_test_module():
    """tests/test_catalog.py, imported by path: its test_Bn_* functions are the checks for the other sites."""
    name = "interview_scratch_catalog_tests"
    if name not in sys.modules:
        path = ROOT / "tests" / "test_catalog.py"
        sandbox.load_module(name, path.read_text(), str(path))
    return sys.modules[name]


def catalog_outcomes(learner: types.ModuleType, funcs: tuple[str, ...]) -> list[Outcome]:
    """For each non-spec function in `funcs`: one line per catalog test naming its bug id, run on a copy
    with the learner's versions of every tested function of that test swapped in."""
    others = [f for f in funcs if f not in SPEC_FUNCS]
    if not others:
        return []
    ids_of = {b.id: b.function for b in catalog.BUGS}
    outcomes = []
    for name, (fn, ids, params) in catalog_test_module().catalog_tests().items():
        tested = tuple(dict.fromkeys(ids_of[i] for i in sorted(ids, key=catalog.BUG_IDS.index) if ids_of[i] in others))
        if not tested:
            continue
        module = graded_copy(learner, tested, "catalog")
        title = "catalog test " + re.sub(r"^test_(B\d+_)+", "", name)  # no bug ids: they would name the bug
        outcome = Outcome(name, tested, title, True)
        for kwargs in params:
            with quiet_torch():
                result = call(lambda kw=kwargs, test=fn, m=module, t=title: timed(functools.partial(test, **kw), m, t))
            if isinstance(result, Raised):
                label = ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "the test's own input"
                written = not not_implemented(result)
                outcome = Outcome(name, tested, title, False, not written, label, show(result),
                                  "passes" if written else NOT_WRITTEN, breach_of(result))
                break
        outcomes.append(outcome)
        if outcome.breach:
            break  # the file cannot be graded: no need to wait for more
    return sorted(outcomes, key=lambda o: SITES.index(o.funcs[0]))  # stable: test names stay sorted per site


# ----------------------------------------------------------------------------------------------
# Training the learner's functions


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def train_run(module: types.ModuleType, **overrides) -> dict:
    """The default run (seed 0) of `module.train`, summarised; health warnings are collected, not printed."""
    handler, grpo_log = _Collect(), logging.getLogger("grpo")
    old_propagate = grpo_log.propagate
    grpo_log.addHandler(handler)
    grpo_log.propagate = False
    start = time.perf_counter()
    try:
        history = module.train(seed=0, **overrides)
    finally:
        grpo_log.removeHandler(handler)
        grpo_log.propagate = old_propagate
    summary = grpo_support.summarize_run(history, time.perf_counter() - start)
    summary["health_warnings"] = len(handler.messages)
    return summary


def training_outcome(learner: types.ModuleType, funcs: tuple[str, ...], **overrides) -> tuple[Outcome, str]:
    """Train the fixed trainer with all the learner's functions swapped in, and the fixed twin, on the
    default run. Fails only if training raises or produces a non-finite loss."""
    torch.set_num_threads(1)
    module = graded_copy(learner, tuple(dict.fromkeys((*SPEC_FUNCS, *funcs))), "train")
    with quiet_torch():
        yours = call(lambda: timed(lambda m: train_run(m, **overrides), module, "the training run", TRAIN_SECONDS))
        if breach_of(yours):
            title = "Training: the default run (seed 0) with your functions."
            return Outcome("training", funcs, title, False, False, "train(seed=0)", show(yours), "trains",
                           breach_of(yours)), ""
        fixed = train_run(fixed_with("scratch_reference"), **overrides)
    steps = fixed["steps"]
    title = f"Training: the default run (seed 0, {steps} iterations) with your functions."
    if isinstance(yours, Raised):
        return Outcome("training", funcs, title, False, False, "train(seed=0)", show(yours), "trains"), ""
    line = (f"final reward: yours {yours['final_reward']:.3f}, fixed twin {fixed['final_reward']:.3f} "
            f"(mean of the last 10 iterations); non-finite losses: yours {yours['nan_losses']}, "
            f"fixed {fixed['nan_losses']}; health warnings: yours {yours['health_warnings']}")
    ok = yours["nan_losses"] == 0
    outcome = Outcome("training", funcs, title, ok, False, "train(seed=0)",
                      f"{yours['nan_losses']} non-finite losses", "0 non-finite losses")
    return outcome, line


# ----------------------------------------------------------------------------------------------
# Report


def format_outcome(o: Outcome) -> str:
    where = "+".join(o.funcs) if len(o.funcs) <= 2 else "your functions"
    head = f"{'pass' if o.ok else 'fail'}  {where:<34} {o.title}"
    if o.ok:
        return head
    if o.not_written:
        return f"{head}  -> {NOT_WRITTEN}"
    return f"{head}\n      on {o.case}:\n      yours    {o.yours}\n      expected {o.expected}"


def grade(path, *, out=None, train: bool = True, train_overrides: dict | None = None) -> int:
    """Grade a scratch file in a forked child (interview/sandbox.py); print one line per spec sentence (and
    catalog test), then a training run once every stub is written. Returns 0 (all pass), 1 (some fail) or 2
    (cannot be graded). Never raises for a bad file: it prints one clear line instead."""
    err = sys.stderr if out is None else out
    out = sys.stdout if out is None else out
    data = dict(path=str(path), cwd=os.getcwd(), train=train, train_overrides=train_overrides)
    result = sandbox.run_forked(_grade_in_child, data, limit=GRADE_SECONDS)
    if isinstance(result, str):
        print(f"cannot grade {path}: grading {result}", file=err)
        return 2
    for stream, text in ((out, result["out"]), (err, result["err"])):
        if text:
            print(text, end="", file=stream)
    return result["code"]


def _grade_in_child(data: dict) -> dict:
    os.chdir(data["cwd"])
    out, err = io.StringIO(), io.StringIO()
    code = _grade(data["path"], out, err, data["train"], data["train_overrides"])
    return dict(out=out.getvalue(), err=err.getvalue(), code=code)


def breach_line(path, outcome: Outcome) -> str:
    """The one line for a file whose code broke the sandbox's rules."""
    who = "the training run" if outcome.key == "training" else "+".join(outcome.funcs)
    on = f"on the input {outcome.case}, " if outcome.case else ""
    return f"cannot grade {path}: {on}{who} {outcome.breach}"


def _grade(path, out, err, train: bool, train_overrides: dict | None) -> int:
    try:
        learner, funcs = load_scratch(path)
    except CannotGrade as reason:
        print(f"cannot grade {reason}", file=err)
        return 2
    outcomes = _outcomes(learner, funcs)
    not_written = still_to_write(Path(path).read_text(), funcs, outcomes)
    if train and not not_written and not any(o.breach for o in outcomes):
        train_result, training_line = training_outcome(learner, funcs, **(train_overrides or {}))
        outcomes.append(train_result)
    else:
        training_line = ""
    broken = next((o for o in outcomes if o.breach), None)
    if broken is not None:
        print(breach_line(path, broken), file=err)
        return 2
    n_catalog = sum(o.key.startswith("test_B") for o in outcomes)
    extra = f" and {n_catalog} catalog tests" if n_catalog else ""
    print(f"grading {Path(path).name}: {len(graded_sentences())} sentences of the spec (SPEC.md){extra}; "
          f"functions to write: {', '.join(funcs)}", file=out)
    for o in outcomes:
        print(format_outcome(o), file=out)
        if o.key == "training" and training_line:
            print(f"      {training_line}", file=out)
    if not_written:
        print(f"no training run yet: {', '.join(not_written)} still to write", file=out)
    failed = [o for o in outcomes if not o.ok]
    print(f"{len(outcomes) - len(failed)}/{len(outcomes)} pass" + (f", {len(failed)} fail" if failed else ""),
          file=out)
    return 1 if failed else 0


def _outcomes(learner: types.ModuleType, funcs: tuple[str, ...]) -> list[Outcome]:
    """The sentences' outcomes, then the catalog tests' (not run once the file broke the sandbox's rules)."""
    outcomes = sentence_outcomes(learner)
    if not any(o.breach for o in outcomes):
        outcomes += catalog_outcomes(learner, funcs)
    return outcomes


def grade_outcomes(path, *, train: bool = False) -> list[Outcome]:
    """The Outcome objects `grade` prints (for tests and notebooks), computed in a forked child;
    CannotGrade for a bad file."""
    result = sandbox.run_forked(_outcomes_in_child, dict(path=str(path), cwd=os.getcwd(), train=train),
                                limit=GRADE_SECONDS)
    if isinstance(result, str):
        raise CannotGrade(f"{path}: grading {result}")
    if isinstance(result, CannotGrade):
        raise result
    return result


def _outcomes_in_child(data: dict):
    os.chdir(data["cwd"])
    try:
        learner, funcs = load_scratch(data["path"])
    except CannotGrade as reason:
        return reason
    outcomes = _outcomes(learner, funcs)
    if data["train"] and not any(o.breach for o in outcomes) and not still_to_write(
            Path(data["path"]).read_text(), funcs, outcomes):
        outcomes.append(training_outcome(learner, funcs)[0])
    return outcomes


def still_to_write(source: str, funcs: tuple[str, ...], outcomes: list[Outcome]) -> list[str]:
    """The functions still stubbed in the file; if none is, those whose lines raised NotImplementedError
    anyway (then no training run either: some code path is not written yet)."""
    nodes = function_nodes(source)
    stubs = [f for f in funcs if f in nodes and is_stub(nodes[f])]
    return stubs or [f for f in funcs if any(o.not_written and f in o.funcs for o in outcomes)]
