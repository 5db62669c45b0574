"""The discussion drill: a question bank, a Leitner schedule, a terminal loop and a card widget.

    make drill             one question at a time: answer aloud against the timer, Enter reveals the model
                           answer and the notebook section that backs it, you score yourself 0 / 1 / 2
    make drill REPORT=1    your scores per topic
(or `.venv/bin/python -m interview drill [--report] [--seed N] [--scores PATH]`, interview/cli.py.)

The bank is interview/questions.toml. Scores are kept in practice/drill_scores.json (git-ignored).

Leitner schedule. Every question sits in a box 0..MAX_BOX, box 0 for a question never scored. A score of
2 (knew it) moves it up one box, 1 (partly) leaves it where it is, 0 (did not know it) sends it back to
box 0. The next question is drawn with probability proportional to 2^-box, never the one just asked, so
a box-0 question comes up 2^MAX_BOX = 16 times as often as a mastered one.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import random
import re
import sys
import textwrap
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BANK_PATH = Path(__file__).resolve().parent / "questions.toml"
SCORES_PATH = ROOT / "practice" / "drill_scores.json"
NOTEBOOK_SOURCES = ROOT / "notebooks" / "py"
TOPICS = ("on/off-policy", "ratio clipping", "advantage normalisation", "KL vs clipping",
          "group baseline vs critic", "stabilisers", "debugging", "variants")
SCORES = (0, 1, 2)
SCORE_MEANING = {0: "did not know it", 1: "partly", 2: "knew it"}
MAX_BOX = 4
BUDGET_SECONDS = 90  # answer aloud in about a minute and a half, as in the interview's Q&A
HEADING = re.compile(r"^# ## (\d+)\. (.+?)\s*$")  # a `## K. Title` markdown line of a percent-format source


class DrillError(Exception):
    """A bad bank or scores file: one clear line, exit code 2."""


# ----------------------------------------------------------------------------------------------
# The bank


@dataclass(frozen=True)
class Question:
    id: str
    topic: str
    question: str
    answer: str
    notebook: int
    section: int

    @property
    def ref(self) -> str:
        """`notebook NN §K`, the cross-reference style of the notebooks' prose."""
        return f"notebook {self.notebook:02d} §{self.section}"


FIELDS = {"id": str, "topic": str, "question": str, "answer": str, "notebook": int, "section": int}


def load_bank(path: Path | str = BANK_PATH) -> list[Question]:
    """The questions of a TOML bank, checked: every field present with its type, ids unique, topics known."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DrillError(f"cannot read the question bank {path}: {error}") from None
    questions, seen = [], set()
    for i, entry in enumerate(data.get("question", [])):
        problems = [f"{k} must be a {t.__name__}" for k, t in FIELDS.items() if not isinstance(entry.get(k), t)]
        problems += [f"unknown field {k!r}" for k in entry if k not in FIELDS]
        if not problems and entry["topic"] not in TOPICS:
            problems.append(f"topic {entry['topic']!r} is not one of {list(TOPICS)}")
        if not problems and entry["id"] in seen:
            problems.append(f"id {entry['id']!r} is used twice")
        if problems:
            raise DrillError(f"{path}: question {i + 1} ({entry.get('id', '?')}): " + "; ".join(problems))
        seen.add(entry["id"])
        questions.append(Question(**{k: entry[k].strip() if isinstance(entry[k], str) else entry[k] for k in FIELDS}))
    if not questions:
        raise DrillError(f"{path}: no [[question]] entries")
    return questions


def notebook_source(notebook: int, sources: Path = NOTEBOOK_SOURCES) -> Path | None:
    """notebooks/py/NN_*.py for notebook NN, or None when it does not exist (yet)."""
    matches = sorted(sources.glob(f"{notebook:02d}_*.py"))
    return matches[0] if matches else None


def section_titles(source: Path) -> dict[int, str]:
    """{K: title} of the `## K. Title` headings of a percent-format notebook source."""
    titles = {}
    for line in source.read_text().splitlines():
        if m := HEADING.match(line):
            titles.setdefault(int(m.group(1)), m.group(2))
    return titles


def section_title(q: Question, sources: Path = NOTEBOOK_SOURCES) -> str | None:
    """The title of the section a question cites, or None if the notebook or the section is missing."""
    source = notebook_source(q.notebook, sources)
    return section_titles(source).get(q.section) if source else None


def backed_by(q: Question) -> str:
    """`notebook 02 §4 (When does clipping engage? ...)`, or just the reference if it does not resolve."""
    title = section_title(q)
    return f"{q.ref} ({title})" if title else q.ref


# ----------------------------------------------------------------------------------------------
# Scores and the Leitner schedule


class ScoreStore:
    """Per-question box and score history, in a JSON file or (path=None) in memory only.

    File format: {"version": 1, "questions": {id: {"box": b, "history": [[iso time, score, seconds], ...]}}}.
    """

    def __init__(self, path: Path | str | None = SCORES_PATH):
        self.path = Path(path) if path is not None else None
        self.data = {"version": 1, "questions": {}}
        if self.path is not None and self.path.exists():
            try:
                self.data = json.loads(self.path.read_text())
                assert isinstance(self.data.get("questions"), dict)
            except (OSError, ValueError, AssertionError, AttributeError):
                raise DrillError(f"{self.path} is not a drill scores file; move it away (or delete it) and "
                                 f"run again") from None

    def box(self, qid: str) -> int:
        return int(self.data["questions"].get(qid, {}).get("box", 0))

    def history(self, qid: str) -> list:
        return self.data["questions"].get(qid, {}).get("history", [])

    def record(self, qid: str, score: int, seconds: float | None = None, when: dt.datetime | None = None) -> int:
        """Record a self-score, move the question's box (Leitner), save; return the new box."""
        if score not in SCORES:
            raise ValueError(f"a score is 0, 1 or 2, got {score!r}")
        entry = self.data["questions"].setdefault(qid, {"box": 0, "history": []})
        entry["box"] = next_box(entry["box"], score)
        when = (when or dt.datetime.now(dt.UTC)).replace(microsecond=0)
        entry["history"].append([when.isoformat(), score, None if seconds is None else round(seconds, 1)])
        self.save()
        return entry["box"]

    def save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
            tmp.replace(self.path)  # atomic: an interrupted save never leaves half a file


def next_box(box: int, score: int) -> int:
    """Leitner: 2 -> up one box (at most MAX_BOX), 1 -> stay, 0 -> back to box 0."""
    return {0: 0, 1: box, 2: min(box + 1, MAX_BOX)}[score]


def weight(box: int) -> float:
    """Draw weight of a question in `box`: 2^-box (box 0 is drawn 2^MAX_BOX times as often as MAX_BOX)."""
    return 2.0 ** -box


def draw(bank: list[Question], store: ScoreStore, rng: random.Random, previous: str | None = None) -> Question:
    """The next question: probability proportional to 2^-box, never `previous` (when there is a choice)."""
    pool = [q for q in bank if q.id != previous] or list(bank)
    return rng.choices(pool, weights=[weight(store.box(q.id)) for q in pool], k=1)[0]


# ----------------------------------------------------------------------------------------------
# Report


def report(bank: list[Question], store: ScoreStore) -> str:
    """Per topic: questions, how many were scored, mean of the latest scores, and the box counts."""
    header = f"{'topic':<26}{'questions':>10}{'scored':>8}{'latest mean':>13}   boxes 0-{MAX_BOX}"
    lines = [header]
    for topic in TOPICS:
        qs = [q for q in bank if q.topic == topic]
        if not qs:
            continue
        latest = [store.history(q.id)[-1][1] for q in qs if store.history(q.id)]
        boxes = [sum(store.box(q.id) == b for q in qs) for b in range(MAX_BOX + 1)]
        mean = f"{sum(latest) / len(latest):.2f} / 2" if latest else "-"
        lines.append(f"{topic:<26}{len(qs):>10}{len(latest):>8}{mean:>13}   {' '.join(f'{n:2d}' for n in boxes)}")
    weakest = sorted((q for q in bank if store.history(q.id)), key=lambda q: (store.box(q.id), q.id))[:3]
    if weakest:
        lines.append("weakest: " + ", ".join(f"{q.id} (box {store.box(q.id)})" for q in weakest))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Terminal loop


def wrap(text: str, indent: str = "  ") -> str:
    """Paragraph text re-flowed to 100 columns (the bank's line breaks are for the TOML file only)."""
    return textwrap.fill(" ".join(text.split()), 100, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False)


def run(bank: list[Question], store: ScoreStore, rng: random.Random, stdin=None, stdout=None,
        clock: Callable[[], float] = time.monotonic, budget: float = BUDGET_SECONDS, limit: int | None = None) -> int:
    """Ask questions until `q`, end of input (EOF) or Ctrl-C; returns how many were scored.

    Streams and the clock are injectable, so tests drive it without a terminal."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout

    def say(text: str = "") -> None:
        print(text, file=stdout, flush=True)

    def ask(prompt: str) -> str | None:
        print(prompt, end="", file=stdout, flush=True)
        line = stdin.readline()
        return None if line == "" else line.strip()  # "" only at EOF; an empty answer is "\n"

    scored, previous, asked = 0, None, 0
    say(f"Discussion drill: {len(bank)} questions. Answer aloud, then press Enter to see the model answer.")
    say("Type q (then Enter) to stop; Ctrl-D or Ctrl-C stop too. Your scores are saved after every answer.")
    try:
        while limit is None or asked < limit:
            q = draw(bank, store, rng, previous)
            previous, asked = q.id, asked + 1
            say()
            say(f"[{q.topic} | box {store.box(q.id)} | {q.id}]")
            say(wrap(q.question))
            start = clock()
            line = ask(f"  (timer running, about {budget:.0f} s: answer aloud, then Enter) ")
            if line is None or line.lower() == "q":
                break
            seconds = clock() - start
            say(f"  {seconds:.0f} s" + (f", over the {budget:.0f} s budget" if seconds > budget else ""))
            say(wrap(q.answer))
            say(f"  Backed by {backed_by(q)}.")
            while True:
                line = ask("  Score yourself: 0 (did not know it), 1 (partly), 2 (knew it); Enter skips, q stops: ")
                if line is None or line.lower() == "q":
                    return _finish(say, scored)
                if line == "" or line in ("0", "1", "2"):
                    break
                say("  please type 0, 1 or 2")
            if line:
                box = store.record(q.id, int(line), seconds)
                scored += 1
                say(f"  saved: {SCORE_MEANING[int(line)]}, now in box {box}")
    except KeyboardInterrupt:
        say()
    return _finish(say, scored)


def _finish(say, scored: int) -> int:
    say(f"Stopped: {scored} answer{'s' * (scored != 1)} scored this session. `make drill REPORT=1` shows your scores.")
    return scored


# ----------------------------------------------------------------------------------------------
# The card widget (notebooks/00_practice.ipynb)


class DrillCard:
    """A flash card: Next draws a question (Leitner), Reveal shows the model answer and its section, the
    score buttons record 0 / 1 / 2 and draw the next one. `text()` is what the card shows, as plain text,
    so a notebook can click the buttons from Python (`card.next_button.click()`) and print the result."""

    def __init__(self, bank: list[Question], store: ScoreStore, rng: random.Random):
        import ipywidgets as widgets

        self.bank, self.store, self.rng = bank, store, rng
        self.current: Question | None = None
        self.revealed = False
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
        self.current = draw(self.bank, self.store, self.rng, self.current.id if self.current else None)
        self.revealed = False
        self.status = "Answer aloud, then Reveal."
        self._render()

    def reveal(self) -> None:
        if self.current is not None:
            self.revealed = True
            self.status = "Score yourself."
            self._render()

    def score(self, value: int) -> None:
        if self.current is None or not self.revealed:
            return
        box = self.store.record(self.current.id, value)
        scored = self.current.id
        self.next()
        self.status = f"Saved {value} for {scored} (now box {box}). " + self.status

    def text(self) -> str:
        """What the card shows, as plain text."""
        lines = []
        if self.current is not None:
            q = self.current
            lines += [f"[{q.topic} | box {self.store.box(q.id)} | {q.id}]", " ".join(q.question.split())]
            if self.revealed:
                lines += ["Answer: " + " ".join(q.answer.split()), f"Backed by {backed_by(q)}."]
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
                parts.append(f"<p>{html.escape(' '.join(q.answer.split()))}</p>")
                parts.append(f"<p><i>Backed by {html.escape(backed_by(q))}.</i></p>")
        parts.append(f"<p><small>{html.escape(self.status)}</small></p>")
        self.view.value = "\n".join(parts)
