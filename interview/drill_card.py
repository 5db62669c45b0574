"""The drill's card widget for notebook 00: the same bank, schedule and practice log as `make drill`
(interview/drill.py), with buttons instead of a terminal."""

from __future__ import annotations

import datetime as dt
import html
import random
import time
from collections.abc import Callable

from interview import history
from interview.drill import (
    BUDGET_SECONDS,
    FOLLOW_UPS_HEADING,
    ONE_LINER_SECONDS,
    SCORE_MEANING,
    SCORES,
    Question,
    ScoreStore,
    Session,
    backed_by,
    follow_ups,
    model_answer,
)


class DrillCard:
    """A flash card: Next draws a question (the session's schedule), Reveal shows the model answer, its
    section and the seconds since the question appeared, the score buttons record 0 / 1 / 2 (with those
    seconds) and draw the next one. `text()` is what the card shows, as plain text, so a notebook can click
    the buttons from Python (`card.next_button.click()`) and print the result. The clock is injectable;
    the elapsed time is shown on reveal (a ticking label would need a thread in the kernel)."""

    def __init__(self, bank: list[Question], store: ScoreStore, rng: random.Random, weakest: bool = False,
                 clock: Callable[[], float] = time.monotonic, now: Callable[[], dt.datetime] = history.now_utc):
        import ipywidgets as widgets

        self.bank, self.store, self.rng, self.clock = bank, store, rng, clock
        self.session = Session(bank, store, rng, weakest=weakest, now=now)
        self.current: Question | None = None
        self.revealed = False
        self.started = self.seconds = None
        self.status = f"{len(bank)} questions. Press Next."
        self.view = widgets.HTML()
        self.next_button = widgets.Button(description="Next", button_style="primary")
        self.reveal_button = widgets.Button(description="Reveal")
        self.score_buttons = {s: widgets.Button(description=f"{s}: {SCORE_MEANING[s]}") for s in SCORES}
        self.next_button.on_click(lambda _: self.next())
        self.reveal_button.on_click(lambda _: self.reveal())
        for s, button in self.score_buttons.items():
            button.on_click(lambda _, s=s: self.score(s))
        buttons = widgets.HBox([self.next_button, self.reveal_button, *self.score_buttons.values()])
        self.widget = widgets.VBox([self.view, buttons], layout=widgets.Layout(max_width="900px"))
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
        self._render()

    def reveal(self) -> None:
        if self.current is not None:
            self.revealed = True
            self.seconds = self.clock() - self.started
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
        parts = []
        if has_question:
            q = self.current
            parts.append(f"<p><small>{html.escape(q.topic)} | box {self.store.box(q.id)} | {q.id}</small></p>")
            parts.append(f"<p><b>{html.escape(' '.join(q.question.split()))}</b></p>")
            if self.revealed:
                parts.append(f"<p><b>One-liner:</b> {html.escape(q.short)}</p>")
                parts.append(f"<p>{html.escape(' '.join(q.answer.split()))}</p>")
                parts.append(f"<p><i>Backed by {html.escape(backed_by(q))}.</i></p>")
                items = "".join(f"<li>{html.escape(f)}</li>" for f in follow_ups(q, self.bank))
                parts.append(f"<p>{html.escape(FOLLOW_UPS_HEADING)}</p><ol>{items}</ol>")
        parts.append(f"<p><small>{html.escape(self.status)}</small></p>")
        self.view.value = "\n".join(parts)
