"""workbook.progress: one status line per long notebook cell, empty when it starts and when the cell ends."""

from __future__ import annotations

import pytest

from workbook import progress as progress_module


class FakeHandle:
    def __init__(self):
        self.shown = []

    def update(self, data, raw):
        assert raw
        self.shown.append(data["text/plain"])


class FakeShell:
    def __init__(self):
        self.execution_count, self.hooks = 1, []
        self.events = self

    def register(self, event, callback):
        assert event == "post_run_cell"
        self.hooks.append(callback)

    def end_cell(self):
        for hook in self.hooks:
            hook(None)
        self.execution_count += 1


@pytest.fixture
def shell(monkeypatch):
    fake, handles, displayed = FakeShell(), [], []

    def display(data, raw, display_id):
        displayed.append(data)
        handles.append(FakeHandle())
        return handles[-1]

    monkeypatch.setattr(progress_module, "_shell", lambda: fake)
    monkeypatch.setattr(progress_module, "display", display)
    monkeypatch.setattr(progress_module._Line, "current", None)
    monkeypatch.setattr(progress_module._Line, "hooked", False)
    clock = iter([0.0, 0.0, 4.2, 9.0, 20.0, 20.0, 21.0, 22.0, 23.0])
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: next(clock))
    return fake, handles, displayed


def test_one_line_per_cell_counting_steps_then_empty(shell):
    fake, handles, displayed = shell
    with progress_module.progress("runs", total=2) as step:
        step("B3")
        step("B5")
    fake.end_cell()
    assert displayed == [progress_module.BLANK]  # what nbval records: the first display, empty
    assert handles[0].shown == ["runs ..., 0 s", "runs: 1 of 2 (B3), 4 s", "runs: 2 of 2 (B5), 9 s", ""]
    progress_module.status("training")  # the next cell gets a line of its own
    with progress_module.progress("runs", total=1) as step:
        step("B3")
        progress_module.status("training B3: iteration 1 of 20")  # what a helper says keeps the count
    fake.end_cell()
    assert len(handles) == 2 and handles[1].shown == [
        "training, 0 s", "runs ..., 1 s", "runs: 1 of 1 (B3), 2 s",
        "runs: 1 of 1 (B3) · training B3: iteration 1 of 20, 3 s", ""]
    assert len(fake.hooks) == 1  # hooked once


def test_outside_ipython_nothing_is_shown(capsys):
    with progress_module.progress("runs") as step:
        step()
    progress_module.status("training")
    assert capsys.readouterr().out == ""


def test_each_runs_every_label_in_order_and_steps_before_each():
    calls = []
    results = progress_module.each(["a", "b"], lambda label: calls.append(("run", label)) or label.upper(),
                                   step=lambda label: calls.append(("step", label)))
    assert results == {"a": "A", "b": "B"} and calls == [("step", "a"), ("run", "a"), ("step", "b"), ("run", "b")]
    assert progress_module.each(["c"], str.upper) == {"c": "C"}  # no step
