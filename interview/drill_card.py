"""The drill's card widget for notebook 00: the same bank, schedule and practice log as `make drill`
(interview/drill.py), with buttons instead of a terminal."""

from __future__ import annotations

import datetime as dt
import html
import random
import time
import urllib.parse
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from interview import history
from interview.drill import (
    BUDGET_SECONDS,
    FOLLOW_UPS_HEADING,
    NOTEBOOK_SOURCES,
    ONE_LINER_SECONDS,
    SCORE_MEANING,
    SCORES,
    Question,
    ScoreStore,
    Session,
    backed_by,
    follow_ups,
    model_answer,
    notebook_source,
    stored_sections,
)

TIMER_MAX_SECONDS = 2 * BUDGET_SECONDS
"""where the browser's timer stops by itself, well past the budget"""


# ----------------------------------------------------------------------------------------------
# The link to the section that backs an answer


@lru_cache(maxsize=32)
def _heading_cells(ipynb: Path, mtime_ns: int) -> dict[int, str | None]:
    """{K: id of the markdown cell holding the `## K.` heading} of a notebook file (first heading K wins)."""
    return {k: cells[0].get("id") for k, cells in stored_sections(ipynb).items()}


def section_href(q: Question, sources: Path = NOTEBOOK_SOURCES) -> str | None:
    """`02_why_ratio_is_not_one.ipynb#cell-id=c03b58ec`: the notebook a card cites, as a sibling of notebook 00
    (the card's notebook), and the id of the cell holding the cited `## K.` heading. Clicked in an output,
    JupyterLab 4 resolves the link against the output's notebook and opens that notebook in a new tab (or
    shows it if open) scrolled to that cell (rendermime `handleAnchor`, command
    `rendermime:handle-local-link`, Notebook.setFragment, which finds a `cell-id=` fragment in the notebook's
    model; a notebook just opened scrolls there once rendered under the default windowing mode,
    contentVisibility, but not with windowing off). A heading anchor (`#3.-Title`: the rendered heading's
    text, spaces as `-`) is looked up among rendered headings only: in JupyterLab 4.6.6 it did not scroll a
    notebook the click had just opened, and the browser percent-encodes a title's non-ASCII characters (the
    em dash of `B1 — ...`) in the link's hash.
    None when the notebook file or the heading is missing: no link rather than a broken one."""
    source = notebook_source(q.notebook, sources)
    ipynb = source.parent.parent / f"{source.stem}.ipynb" if source else None
    if ipynb is None or not ipynb.is_file():
        return None
    cells = _heading_cells(ipynb, ipynb.stat().st_mtime_ns)
    if q.section not in cells:
        return None
    path, cell = urllib.parse.quote(ipynb.name), cells[q.section]
    return f"{path}#cell-id={urllib.parse.quote(cell)}" if cell else path


# ----------------------------------------------------------------------------------------------
# The card


class DrillCard:
    """A flash card: Next draws a question (the session's schedule), Reveal shows the model answer, its
    section (a link that opens that notebook at that section) and the seconds since the question appeared,
    the score buttons record 0 / 1 / 2 (with those seconds) and draw the next one. `text()` is what the card
    shows, as plain text, so a notebook can click the buttons from Python (`card.next_button.click()`) and
    print the result. The clock is injectable: the kernel's clock gives the seconds stated on reveal and
    recorded; the ticking display is the browser's and only shows the reader the time running.

    The ticking timer runs in the browser, not in the kernel: a hidden `Play` widget (its front-end model
    steps the value every `interval` ms with `window.setTimeout`, started by its view when `playing` turns
    true; ipywidgets 8.1) drives, through `jsdlink` (one-way, browser-side), a bar that fills at the budget
    and a seconds box. Next starts it, Reveal stops it; a score draws the next question and starts it again.
    """

    def __init__(self, bank: list[Question], store: ScoreStore, rng: random.Random, weakest: bool = False,
                 clock: Callable[[], float] = time.monotonic, now: Callable[[], dt.datetime] = history.now_utc):
        import ipywidgets as widgets

        self.bank, self.store, self.rng, self.clock = bank, store, rng, clock
        self.session = Session(bank, store, rng, weakest=weakest, now=now)
        self.current: Question | None = None
        self.revealed = False
        self.started = self.seconds = None
        self.status = f"{len(bank)} questions. Press Next."
        self.html = ""
        """the card's HTML, as shown (rendered by the front-end's own HTML renderer, so its link opens in the Lab)"""
        self.view = widgets.Output()
        self.next_button = widgets.Button(description="Next", button_style="primary")
        self.reveal_button = widgets.Button(description="Reveal")
        self.score_buttons = {s: widgets.Button(description=f"{s}: {SCORE_MEANING[s]}") for s in SCORES}
        self.next_button.on_click(lambda _: self.next())
        self.reveal_button.on_click(lambda _: self.reveal())
        for s, button in self.score_buttons.items():
            button.on_click(lambda _, s=s: self.score(s))
        # The timer. Play's first step is taken at once when it starts (PlayModel.animate calls loop), so it
        # starts from min = -1 and the first second shows 0 s; it stops by itself at max. The links are one-way:
        # the kernel caps the bar's value at its max, and a two-way link would push that cap back into the Play.
        self.timer = widgets.Play(value=0, min=-1, max=TIMER_MAX_SECONDS, interval=1000, show_repeat=False,
                                  layout=widgets.Layout(display="none"))
        self.timer_bar = widgets.IntProgress(value=0, min=0, max=BUDGET_SECONDS, description="Time",
                                             layout=widgets.Layout(width="320px"))
        self.timer_seconds = widgets.IntText(value=0, disabled=True, layout=widgets.Layout(width="4.5em"))
        self.timer_seconds.add_class("drill-card-seconds")
        self.timer_links = [widgets.jsdlink((self.timer, "value"), (self.timer_bar, "value")),
                            widgets.jsdlink((self.timer, "value"), (self.timer_seconds, "value"))]
        hint = widgets.Label(f"s: the one-liner by {ONE_LINER_SECONDS} s, the full answer by {BUDGET_SECONDS} s")
        self.timer_row = widgets.HBox([self.timer, self.timer_bar, self.timer_seconds, hint])
        buttons = widgets.HBox([self.next_button, self.reveal_button, *self.score_buttons.values()])
        self.widget = widgets.VBox([self.view, self.timer_row, buttons], layout=widgets.Layout(max_width="900px"))
        self.widget.add_class("drill-card")
        self._render()

    def next(self) -> None:
        if self.current is not None:
            self.session.answered(self.current, None)  # Next without a score skips the card
        self._draw()

    def _draw(self) -> None:
        self.current = self.session.next()
        self.revealed = False
        self.started, self.seconds = self.clock(), None
        self.status = (f"Answer aloud: the one-liner within {ONE_LINER_SECONDS} s, the full answer within "
                       f"{BUDGET_SECONDS} s; then Reveal." if self.current else self.session.nothing_due())
        if self.current:
            self._start_timer()
        else:
            self._stop_timer(reset=True)
        self._render()

    def reveal(self) -> None:
        if self.current is not None:
            self.revealed = True
            self.seconds = self.clock() - self.started
            self._stop_timer()
            over = f", over the {BUDGET_SECONDS} s budget" if self.seconds > BUDGET_SECONDS else ""
            self.status = f"Revealed after {self.seconds:.0f} s{over}. Score yourself."
            self._render()

    def score(self, value: int) -> None:
        if self.current is None or not self.revealed:
            return
        box = self.store.record(self.current.id, value, self.seconds)
        scored = self.current.id
        self.session.answered(self.current, value)
        self._draw()
        self.status = f"Saved {value} for {scored} (now box {box}). " + self.status
        self._render()

    def _start_timer(self) -> None:
        """Stop it (its view then clears the browser's timeout), then send min and playing in one message."""
        self.timer.playing = False
        with self.timer.hold_sync():
            self.timer.value, self.timer.playing = self.timer.min, True

    def _stop_timer(self, reset: bool = False) -> None:
        """Stop it where it is (what the reader saw at Reveal), or back at 0."""
        self.timer.playing = False
        if reset:
            self.timer.value = 0

    def text(self) -> str:
        """What the card shows, as plain text."""
        lines = []
        if self.current is not None:
            q = self.current
            lines += [f"[{q.topic} | box {self.store.box(q.id)} | {q.id}]", " ".join(q.question.split())]
            if self.revealed:
                lines += [" ".join(line.split()) for line in model_answer(q, self.bank)]
        lines.append(self.status)
        return "\n".join(lines)

    def _render(self) -> None:
        has_question = self.current is not None
        self.reveal_button.disabled = not has_question or self.revealed
        for button in self.score_buttons.values():
            button.disabled = not self.revealed
        self.timer_row.layout.display = None if has_question else "none"
        parts = []
        if has_question:
            q = self.current
            parts.append(f"<p><small>{html.escape(q.topic)} | box {self.store.box(q.id)} | {q.id}</small></p>")
            parts.append(f"<p><b>{html.escape(' '.join(q.question.split()))}</b></p>")
            if self.revealed:
                parts.append(f"<p><b>One-liner:</b> {html.escape(q.short)}</p>")
                parts.append(f"<p>{html.escape(' '.join(q.answer.split()))}</p>")
                section = html.escape(backed_by(q))
                if href := section_href(q):
                    section = f'<a href="{html.escape(href)}" title="open this section">{section}</a>'
                parts.append(f"<p><i>Backed by {section}.</i></p>")
                items = "".join(f"<li>{html.escape(f)}</li>" for f in follow_ups(q, self.bank))
                parts.append(f"<p>{html.escape(FOLLOW_UPS_HEADING)}</p><ol>{items}</ol>")
        parts.append(f"<p><small>{html.escape(self.status)}</small></p>")
        self.html = "\n".join(parts)
        self.view.outputs = ({"output_type": "display_data", "metadata": {},
                              "data": {"text/html": self.html, "text/plain": self.text()}},)
