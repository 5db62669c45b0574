"""The practice round from notebook 00: buttons that do what `make mock`, `make grade` and `make hint` do.

Each button runs the same command line as its make target (`python -m interview mock|grade|hint`, cli.py) in
the kernel and shows what it printed below the buttons, with a link that opens the round file in JupyterLab's
editor. Grade and Hint act on the round this panel drew, else on the newest one, as the make targets do.
"""

from __future__ import annotations

import contextlib
import html
import io
import os
from pathlib import Path

from interview import cli, rounds


def run_command(argv: list[str]) -> tuple[int, str]:
    """`python -m interview *argv` in this process -> (exit code, what it printed on stdout and stderr)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse's own errors
            code = e.code if isinstance(e.code, int) else 2
    return code, printed.getvalue()


GRADE_EXITS = {0: "every bug fixed, nothing broken", 1: "not yet", 2: "cannot grade"}
"""the grader's exit codes (cli.py), as the panel's status line says them"""


def bug_choices() -> list[str]:
    """1 .. the catalog's size, then "all": what BUGS= accepts."""
    return [str(k) for k in range(1, rounds.catalog_size() + 1)] + ["all"]


class PracticePanel:
    """Draw a round (how many bugs, hard or not), grade it (optionally naming what remains), hint at a level.
    `text()` is what the panel shows, as plain text, so a notebook or a test can click from Python
    (`panel.draw_button.click()`). notebook_dir: where links start from (the notebook's folder, the kernel's
    working directory in JupyterLab)."""

    def __init__(self, notebook_dir: str | Path | None = None):
        import ipywidgets as widgets

        self.notebook_dir = Path(notebook_dir or Path.cwd()).resolve()
        self.round_file: Path | None = None
        self.code: int | None = None
        self.printed = ""
        self.status_text = "No round drawn from here yet: Grade and Hint act on the newest practice/round_N.py."
        self.bugs = widgets.Dropdown(options=bug_choices(), value=str(rounds.DEFAULT_BUGS), description="bugs")
        self.hard = widgets.Checkbox(value=False, description="hard: docstrings cut to their first sentence")
        self.reveal = widgets.Checkbox(value=False, description="grade names the remaining bugs too")
        self.level = widgets.ToggleButtons(options=["1", "2", "3"], value="1", description="hint level")
        self.which = widgets.BoundedIntText(value=1, min=1, max=rounds.catalog_size(), description="bug no.",
                                            layout=widgets.Layout(width="160px"))
        self.draw_button = widgets.Button(description="Draw a round", button_style="primary")
        self.grade_button = widgets.Button(description="Grade")
        self.hint_button = widgets.Button(description="Hint")
        self.draw_button.on_click(lambda _: self.draw())
        self.grade_button.on_click(lambda _: self.grade())
        self.hint_button.on_click(lambda _: self.hint())
        self.status = widgets.HTML()
        self.output = widgets.Output()
        rows = [widgets.HBox([self.draw_button, self.bugs, self.hard]),
                widgets.HBox([self.grade_button, self.reveal]),
                widgets.HBox([self.hint_button, self.level, self.which])]
        self.widget = widgets.VBox([*rows, self.status, self.output], layout=widgets.Layout(max_width="900px"))
        self.widget.add_class("practice-panel")
        self._show()

    # ---- the three commands ----------------------------------------------------------------------------

    def draw(self) -> int:
        argv = ["mock", "--bugs", self.bugs.value] + (["--hard"] if self.hard.value else [])
        before = set(rounds.existing_rounds())
        code = self._run(argv, "Drawing a round")
        new = sorted(set(rounds.existing_rounds()) - before)
        if code == 0 and new:
            self.round_file = new[-1]
            self.status_text = (f"Round drawn: open it from the link, run it in a Terminal (File > New > Terminal: "
                                f"cd {rounds.ROOT} && .venv/bin/python {rounds.rel(self.round_file)}), fix it in "
                                f"place, then Grade.")
            self._show()
        return code

    def grade(self) -> int:
        argv = ["grade", *self._file()] + (["--reveal"] if self.reveal.value else [])
        code = self._run(argv, "Grading (a few seconds: every edited function is tested and trained briefly)")
        self.status_text = f"Graded: {GRADE_EXITS.get(code, f'exit code {code}')}."
        self._show()
        return code

    def hint(self) -> int:
        code = self._run(["hint", *self._file(), "--level", self.level.value, "--which", str(self.which.value)],
                         f"Hint, level {self.level.value}")
        self.status_text = f"Hint, level {self.level.value}: see below." if code == 0 else "No hint: see below."
        self._show()
        return code

    def _file(self) -> list[str]:
        return [str(self.round_file)] if self.round_file is not None else []

    def _run(self, argv: list[str], doing: str) -> int:
        buttons = (self.draw_button, self.grade_button, self.hint_button)
        for button in buttons:
            button.disabled = True
        self.status.value = f"<i>{html.escape(doing)} ...</i>"
        try:
            self.code, self.printed = run_command(argv)
        finally:
            for button in buttons:
                button.disabled = False
        self.status_text = "Done." if self.code == 0 else "Failed: see below."
        self._show()
        return self.code

    # ---- what the panel shows ------------------------------------------------------------------------------

    def link(self) -> str | None:
        """A Markdown link from the notebook's folder to the round file (JupyterLab opens it in its editor)."""
        target = self.round_file
        if target is None:
            with contextlib.suppress(rounds.CannotGrade):
                target = rounds.newest_round()
        if target is None or not Path(target).is_file():
            return None
        href = Path(os.path.relpath(target, self.notebook_dir)).as_posix()
        return f"[Open {rounds.rel(target)} in the editor]({href})"

    def text(self) -> str:
        """What the panel shows, as plain text: the status line, the link, what the last command printed."""
        return "\n".join(part for part in (self.status_text, self.link() or "", self.printed.rstrip()) if part)

    def _show(self) -> None:
        self.status.value = f"<small>{html.escape(self.status_text)}</small>"
        outputs = []
        if (link := self.link()) is not None:
            outputs.append({"output_type": "display_data", "metadata": {},
                            "data": {"text/markdown": link, "text/plain": link}})
        if self.printed:
            outputs.append({"output_type": "stream", "name": "stdout", "text": self.printed})
        self.output.outputs = tuple(outputs)
