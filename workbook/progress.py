"""A status line under a notebook cell that runs for more than a few seconds; it is gone when the cell ends.

    status("training B3 on RambleTask")     # a helper that trains says what it is doing
    module.train(on_iteration=iterations("B3", steps))   # or per iteration of the twins' train()
    with progress("short runs", total=13) as step:
        for bug in bugs:
            step(bug.id)                    # "short runs: 3 of 13 (B3) · training B3: iteration 7 of 20, 4 s"

Each cell gets at most one line: the count of its progress(), if any, then what a helper last said, then the
seconds since the line appeared. The line is one display output, updated in place, that starts empty and is
emptied again when the cell ends (an IPython post_run_cell hook). So the stored notebook holds an empty output, and
nbval, which records the first display of an output and never its updates, sees the same. Outside IPython
(a script, a test) nothing is shown.
"""

from __future__ import annotations

import contextlib
import html
import time

from IPython.core.interactiveshell import InteractiveShell
from IPython.display import display

BLANK = {"text/plain": ""}


class _Line:
    """The current cell's status line: its display handle, the cell it belongs to, when it started."""

    current: _Line | None = None
    hooked = False

    def __init__(self, shell):
        self.cell = shell.execution_count
        self.started = time.monotonic()
        self.outer, self.inner = "", ""  # a progress() count, what a helper last said
        self.handle = display(BLANK, raw=True, display_id=True)

    def show(self) -> None:
        if self.handle is not None:
            text = " · ".join(part for part in (self.outer, self.inner) if part)
            shown = f"{text}, {time.monotonic() - self.started:.0f} s"
            self.handle.update({"text/plain": shown, "text/html": f"<small><i>{html.escape(shown)}</i></small>"},
                               raw=True)


def _shell():
    return InteractiveShell.instance() if InteractiveShell.initialized() else None


def _clear(*_) -> None:
    """post_run_cell: empty the line of the cell that just ended."""
    line, _Line.current = _Line.current, None
    if line is not None and line.handle is not None:
        line.handle.update(BLANK, raw=True)


def _line() -> _Line | None:
    """The running cell's line, made on first use (None outside IPython)."""
    shell = _shell()
    if shell is None:
        return None
    if not _Line.hooked:
        shell.events.register("post_run_cell", _clear)
        _Line.hooked = True
    if _Line.current is None or _Line.current.cell != shell.execution_count:
        _Line.current = _Line(shell)
    return _Line.current


def status(text: str) -> None:
    """Show `text` (after the cell's progress() count, if any) as the running cell's status line."""
    line = _line()
    if line is not None:
        line.inner = text
        line.show()


def _count(text: str) -> None:
    line = _line()
    if line is not None:
        line.outer, line.inner = text, ""
        line.show()


def iterations(what: str, steps: int):
    """An on_iteration callback for the twins' train(): 'training <what>: iteration 7 of 20'."""

    def on_iteration(stats: dict) -> None:
        status(f"training {what}: iteration {stats['iteration'] + 1} of {steps}")

    return on_iteration


def each(labels, run, step=None) -> dict:
    """{label: run(label)} for every label in order, calling step(label) (a progress() step) as each starts."""
    results = {}
    for label in labels:
        if step is not None:
            step(label)
        results[label] = run(label)
    return results


class Progress:
    """`step(label)` says the next of `total` units has started: 'what: 3 of 13 (label)'."""

    def __init__(self, what: str, total: int | None = None):
        self.what, self.total, self.count = what, total, 0
        _count(f"{what} ...")

    def __call__(self, label: str = "") -> None:
        self.count += 1
        count = f"{self.count} of {self.total}" if self.total else f"{self.count}"
        _count(f"{self.what}: {count}{f' ({label})' if label else ''}")


@contextlib.contextmanager
def progress(what: str, total: int | None = None):
    """A Progress for the block (the line itself lasts until the cell ends); yields its step function."""
    yield Progress(what, total)
