"""The discussion drill: a question bank, a spaced-repetition schedule and a terminal loop (the notebook's card
widget is interview/drill_card.py).

    make drill                 one question at a time: say the one-line answer (about 15 s), Enter, the full
                               answer (about 90 s), Enter; the model answer (one-liner, the rest, the notebook
                               section that backs it, two follow-ups to answer aloud) appears, you score
                               yourself 0 / 1 / 2
    make drill TOPIC=...       only one topic's questions;  make drill WEAKEST=1: your weakest cards first
    make drill REPORT=1        your scores per topic
    make drill ID=a,b          only these cards, due or not;  SEED=n the draw's seed;  SCORES=path another log
    make drill EXPORT=cards.md the cards as Markdown, by topic (TOPIC and ID apply)
(or `.venv/bin/python -m interview drill [--report] [--topic T] [--weakest] [--id IDS] [--seed N] [--scores PATH]
[--export PATH]`.)

The bank is interview/questions.toml. Answers go to the practice log, practice/history.jsonl
(interview/history.py: append-only JSON lines, so the terminal drill and the notebook card never lose each
other's answers); boxes are derived from the log. An old practice/drill_scores.json is read once into the
log (never deleted).

The schedule (Leitner boxes with due dates). A card's answers are counted only while its answer text is
unchanged (each answer records a hash of it), so a corrected card is new again. Replaying its answers, a 2
(knew it) moves it up one box (at most MAX_BOX), a 1 (partly) down one box, a 0 (did not know it) back to
box 0. A card in box k >= 1 is due 2^(k-1) days after its last answer; box 0 is due at once. A session
draws, never repeating a card: first the cards never answered (until the bank is covered once), then the
due ones, lowest box first, longest overdue first; a card scored 0 comes back after 3 to 5 other cards.
When nothing is due it says so. WEAKEST=1 ignores due dates: lowest box, then lowest last score, first.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import re
import sys
import textwrap
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from interview import history

ROOT = Path(__file__).resolve().parent.parent
BANK_PATH = Path(__file__).resolve().parent / "questions.toml"
SCORES_PATH = history.LOG_PATH
"""where drill answers go: the practice log"""
LEGACY_SCORES_PATH = history.PRACTICE / "drill_scores.json"
"""the scores file of earlier versions (one JSON object), read once into the log"""
NOTEBOOK_SOURCES = ROOT / "notebooks" / "py"
TOPICS = ("on/off-policy", "ratio clipping", "advantage normalisation", "KL vs clipping",
          "group baseline vs critic", "stabilisers", "debugging", "variants")
SCORES = (0, 1, 2)
SCORE_MEANING = {0: "did not know it", 1: "partly", 2: "knew it"}
MAX_BOX = 4
BUDGET_SECONDS = 90  # the full answer aloud in about a minute and a half, as in the interview's Q&A
ONE_LINER_SECONDS = 15  # the one-line answer first, as an interviewer expects it
REQUEUE = (3, 5)  # a card scored 0 comes back after this many other cards (inclusive)
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
    """the rest of the model answer: at most four sentences after the one-liner"""
    notebook: int
    section: int
    short: str = ""
    """the one-line answer, sayable in about ONE_LINER_SECONDS"""
    follow_ups: tuple[str, ...] = ()
    """the FOLLOW_UPS questions an interviewer is likely to ask next"""

    @property
    def ref(self) -> str:
        """`notebook NN §K`, the cross-reference style of the notebooks' prose."""
        return f"notebook {self.notebook:02d} §{self.section}"


FIELDS = {"id": str, "topic": str, "question": str, "short": str, "answer": str, "follow_ups": list,
          "notebook": int, "section": int}
FOLLOW_UPS = 2  # follow-up questions per card


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
        if not problems and (len(entry["follow_ups"]) != FOLLOW_UPS
                             or not all(isinstance(f, str) and f.strip() for f in entry["follow_ups"])):
            problems.append(f"follow_ups must be a list of {FOLLOW_UPS} questions")
        if not problems and entry["topic"] not in TOPICS:
            problems.append(f"topic {entry['topic']!r} is not one of {list(TOPICS)}")
        if not problems and entry["id"] in seen:
            problems.append(f"id {entry['id']!r} is used twice")
        if problems:
            raise DrillError(f"{path}: question {i + 1} ({entry.get('id', '?')}): " + "; ".join(problems))
        seen.add(entry["id"])
        fields = {k: entry[k].strip() if isinstance(entry[k], str) else entry[k] for k in FIELDS}
        fields["follow_ups"] = tuple(" ".join(f.split()) for f in entry["follow_ups"])
        fields["short"] = " ".join(entry["short"].split())
        questions.append(Question(**fields))
    if not questions:
        raise DrillError(f"{path}: no [[question]] entries")
    return questions


ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|vs|Eq|et al|cf|approx|Dr|Fig|resp)\.")


def sentences(text: str) -> list[str]:
    """The sentences of a card's text: split after . ? ! before a capital, a digit or a bracket; the
    abbreviations above (e.g., i.e., vs., Dr. GRPO, ...) do not end one."""
    protected = ABBREVIATIONS.sub(lambda m: m.group(0).replace(".", "\0"), " ".join(text.split()))
    return [p.replace("\0", ".") for p in re.split(r"(?<=[.?!])\s+(?=[A-Z0-9(\"'])", protected) if p.strip()]


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


STORED_HEADING = re.compile(r"## (\d+)\.")  # a `## K. Title` line of a stored notebook's markdown cell


def stored_sections(ipynb: Path) -> dict[int, list[dict]]:
    """{K: the cells of section K of a stored notebook (.ipynb), the cell holding its `## K.` heading first}. A
    markdown `## ` line without a number ends a section; cells before the first heading belong to none."""
    sections: dict[int, list[dict]] = {}
    current = None
    for cell in json.loads(ipynb.read_text()).get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in cell_source(cell).splitlines():
                if line.startswith("## "):
                    heading = STORED_HEADING.match(line)
                    current = int(heading.group(1)) if heading else None
        if current is not None:
            sections.setdefault(current, []).append(cell)
    return sections


def cell_source(cell: dict) -> str:
    """A stored cell's source as one string (nbformat allows a string or a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def section_title(q: Question, sources: Path = NOTEBOOK_SOURCES) -> str | None:
    """The title of the section a question cites, or None if the notebook or the section is missing."""
    source = notebook_source(q.notebook, sources)
    return section_titles(source).get(q.section) if source else None


def backed_by(q: Question) -> str:
    """`notebook 02 §4 (When does clipping engage? ...)`, or just the reference if it does not resolve."""
    title = section_title(q)
    return f"{q.ref} ({title})" if title else q.ref


# ----------------------------------------------------------------------------------------------
# Answers and the schedule


def answer_hash(q: Question) -> str:
    """A short hash of a card's answer text, one-liner included (whitespace-insensitive): a corrected answer is a
    new card."""
    return hashlib.sha1(" ".join(f"{q.short} {q.answer}".split()).encode()).hexdigest()[:12]


@cache
def _default_bank_hashes() -> dict[str, tuple[str, str]]:
    try:
        return {q.id: (answer_hash(q), q.topic) for q in load_bank()}
    except DrillError:
        return {}


def next_box(box: int, score: int) -> int:
    """Leitner: 2 -> up one box (at most MAX_BOX), 1 -> down one box (at least 0), 0 -> back to box 0."""
    return {0: 0, 1: max(box - 1, 0), 2: min(box + 1, MAX_BOX)}[score]


def interval(box: int) -> dt.timedelta:
    """How long after its last answer a card in `box` is due again: box 0 at once, box k 2^(k-1) days."""
    return dt.timedelta(days=2 ** (box - 1)) if box >= 1 else dt.timedelta(0)


def weight(box: int) -> float:
    """The relative frequency of a box in the long run: a box-k card is due every 2^(k-1) days, so box 0
    (due at every session) comes up 2^MAX_BOX = 16 times as often as a mastered card (box MAX_BOX, 8 days)."""
    return 2.0 ** -box


class ScoreStore:
    """The drill's answers, kept as `drill` events of the practice log (path=None: in memory only).

    Every answer is appended (interview/history.py); boxes, histories and due dates are derived from the
    events, re-read by `refresh()` before each draw, so answers written by another drill are never lost.
    `bank` gives each card's current answer hash and topic (default: interview/questions.toml); events
    recorded under another hash are ignored. `legacy`: an old practice/drill_scores.json to read once."""

    def __init__(self, path: Path | str | None = SCORES_PATH, bank: list[Question] | None = None,
                 legacy: Path | str | None = None):
        self.path = Path(path) if path is not None else None
        self.cards = {q.id: (answer_hash(q), q.topic) for q in bank} if bank is not None else _default_bank_hashes()
        self.events: list[dict] = []
        if self.path is not None and self.path.exists():
            self._check_format()
        if legacy is not None and self.path is not None:
            migrate(Path(legacy), self.path, self.cards)
        self.refresh()

    def _check_format(self) -> None:
        try:
            first = self.path.read_text().split("\n", 1)[0]
            ok = not first.strip() or isinstance(json.loads(first), dict) and "kind" in json.loads(first)
        except (OSError, UnicodeDecodeError, ValueError):
            ok = False
        if not ok:
            raise DrillError(f"{self.path} is not a drill scores file (JSON lines of the practice log); move it "
                             f"away (or delete it) and run again")

    def refresh(self) -> None:
        """Re-read the log (answers another drill or the notebook card appended meanwhile)."""
        if self.path is not None:
            self.events = [e for e in history.read(self.path) if e["kind"] == "drill"]

    def _answers(self, qid: str) -> list[dict]:
        current = self.cards.get(qid, (None, None))[0]
        return [e for e in self.events if e.get("card") == qid and (current is None or e.get("hash") == current)]

    def history(self, qid: str) -> list:
        """[[UTC time, score, seconds], ...] of the card's answers under its current answer text."""
        return [[e["t"], e["score"], e.get("seconds")] for e in self._answers(qid)]

    def box(self, qid: str) -> int:
        box = 0
        for e in self._answers(qid):
            box = next_box(box, e["score"])
        return box

    def last(self, qid: str) -> tuple[dt.datetime, int] | None:
        answers = self._answers(qid)
        return (history.parse_time(answers[-1]["t"]), answers[-1]["score"]) if answers else None

    def due(self, qid: str) -> dt.datetime | None:
        """When the card is due (None: never answered, so due now)."""
        last = self.last(qid)
        return None if last is None else last[0] + interval(self.box(qid))

    def record(self, qid: str, score: int, seconds: float | None = None, when: dt.datetime | None = None,
               first_seconds: float | None = None, **extra) -> int:
        """Append a self-score (with the seconds taken) to the log; return the card's new box."""
        if score not in SCORES:
            raise ValueError(f"a score is 0, 1 or 2, got {score!r}")
        digest, topic = self.cards.get(qid, (None, None))
        fields = dict(card=qid, topic=topic, hash=digest, score=score,
                      seconds=None if seconds is None else round(seconds, 1), **extra)
        if first_seconds is not None:
            fields["first_seconds"] = round(first_seconds, 1)
        when = (when or history.now_utc()).replace(microsecond=0)
        if self.path is None:
            self.events.append({"t": history.stamp(when), "kind": "drill", **fields})
        else:
            history.record("drill", path=self.path, when=when, **fields)
            self.refresh()
        return self.box(qid)


def migrate(legacy: Path, log: Path, cards: dict) -> int:
    """Append the answers of an old drill_scores.json to the log once (a `drill_migrated` event marks it
    done); the old file is left where it is. Returns how many answers were copied."""
    if not legacy.exists() or any(e["kind"] == "drill_migrated" for e in history.read(log)):
        return 0
    try:
        data = json.loads(legacy.read_text())["questions"]
        rows = sorted((h[0], qid, h[1], h[2] if len(h) > 2 else None) for qid, entry in data.items()
                      for h in entry.get("history", []))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        history.record("drill_migrated", path=log, source=legacy.name, answers=0, error="unreadable")
        return 0
    for when, qid, score, seconds in rows:
        if qid in cards and score in SCORES:
            digest, topic = cards[qid]
            history.record("drill", path=log, when=dt.datetime.fromisoformat(when), card=qid, topic=topic,
                           hash=digest, score=score, seconds=seconds, migrated=True)
    history.record("drill_migrated", path=log, source=legacy.name, answers=len(rows))
    return len(rows)


def draw(bank: list[Question], store: ScoreStore, rng: random.Random, previous: str | None = None, *,
         now: dt.datetime | None = None, exclude=(), weakest: bool = False) -> Question | None:
    """The next card, never `previous` nor one in `exclude` (when there is a choice): a card never answered
    first (at random), then the due cards (lowest box, then longest overdue); None when nothing is due.
    `weakest`: ignore due dates, lowest box then lowest last score first, cards never answered last."""
    now = now or history.now_utc()
    pool = [q for q in bank if q.id != previous and q.id not in exclude]
    if not pool:
        pool = [q for q in bank if q.id not in exclude] or ([] if exclude else list(bank))
    if not pool:
        return None
    tie = {q.id: rng.random() for q in pool}
    if weakest:
        def key(q):
            last = store.last(q.id)
            return (last is None, store.box(q.id), last[1] if last else 0, tie[q.id])
        return min(pool, key=key)
    unseen = [q for q in pool if store.last(q.id) is None]
    if unseen:
        return rng.choice(unseen)
    due = [q for q in pool if store.due(q.id) <= now]
    if not due:
        return None
    return min(due, key=lambda q: (store.box(q.id), store.due(q.id), tie[q.id]))


class Session:
    """One sitting: draws without repeats, and brings a card scored 0 back after 3 to 5 other cards."""

    def __init__(self, bank: list[Question], store: ScoreStore, rng: random.Random, weakest: bool = False,
                 now: Callable[[], dt.datetime] = history.now_utc):
        self.bank, self.store, self.rng, self.weakest, self.now = bank, store, rng, weakest, now
        self.done: set[str] = set()  # cards answered (or skipped) this session
        self.requeued: list[list] = []  # [card id, how many other cards still to come before it]
        self.previous: str | None = None

    def next(self) -> Question | None:
        self.store.refresh()
        by_id = {q.id: q for q in self.bank}
        ready = [item for item in self.requeued if item[1] <= 0]
        if ready:
            self.requeued.remove(ready[0])
            q = by_id[ready[0][0]]
        else:
            q = draw(self.bank, self.store, self.rng, self.previous, now=self.now(),
                     exclude=self.done | {i for i, _ in self.requeued}, weakest=self.weakest)
            if q is None and self.requeued:  # nothing else left: the failed card comes back early
                q = by_id[self.requeued.pop(0)[0]]
        self.previous = q.id if q is not None else self.previous
        return q

    def answered(self, q: Question, score: int | None) -> None:
        """After a card was scored (or skipped, score None)."""
        for item in self.requeued:
            item[1] -= 1
        self.done.add(q.id)
        if score == 0:
            self.requeued.append([q.id, self.rng.randint(*REQUEUE)])

    def nothing_due(self) -> str:
        dues = [d for q in self.bank if (d := self.store.due(q.id)) is not None]
        when = f" (next due {min(dues):%Y-%m-%d %H:%M} UTC)" if dues else ""
        return (f"Nothing due today{when}: you are done for today. `make drill WEAKEST=1` drills your "
                f"weakest cards anyway.")


def filter_topic(bank: list[Question], topic: str | None) -> list[Question]:
    """The cards of one topic (exact, case-insensitive, or a part of one topic's name)."""
    if not topic:
        return bank
    wanted = topic.strip().lower()
    matches = [t for t in TOPICS if t.lower() == wanted] or [t for t in TOPICS if wanted in t.lower()]
    if len(matches) != 1:
        raise DrillError(f"TOPIC must name one of {', '.join(TOPICS)}; got {topic!r}")
    return [q for q in bank if q.topic == matches[0]]


def filter_ids(bank: list[Question], ids: str | None) -> list[Question]:
    """The cards named in a comma-separated list of ids, in the list's order; DrillError names any unknown id."""
    if not ids:
        return bank
    wanted = [i.strip() for i in ids.split(",") if i.strip()]
    by_id = {q.id: q for q in bank}
    unknown = [i for i in wanted if i not in by_id]
    if unknown or not wanted:
        raise DrillError(f"ID: no card {', '.join(map(repr, unknown)) or repr(ids)} (among these "
                         f"{len(bank)} cards; `make drill EXPORT=cards.md` lists them all)")
    return [by_id[i] for i in dict.fromkeys(wanted)]


def export_markdown(bank: list[Question]) -> str:
    """The cards as Markdown, by topic: question, one-liner, answer, source and follow-ups (to print or read)."""
    lines = ["# The discussion drill's cards", ""]
    for topic in TOPICS:
        cards = [q for q in bank if q.topic == topic]
        if cards:
            lines += [f"## {topic}", ""]
        for q in cards:
            lines += [f"### {' '.join(q.question.split())}", "", f"`{q.id}`, backed by {backed_by(q)}", "",
                      f"**One-liner.** {q.short}", "", " ".join(q.answer.split()), "", "**Follow-ups.**", "",
                      *(f"{i}. {f}" for i, f in enumerate(q.follow_ups, 1)), ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Report


def report(bank: list[Question], store: ScoreStore, now: dt.datetime | None = None) -> str:
    """Per topic: questions, how many were scored, mean of the latest scores, the box counts and how many
    are due; then the weakest cards (latest score below 2)."""
    now = now or history.now_utc()
    header = f"{'topic':<26}{'questions':>10}{'scored':>8}{'latest mean':>13}   boxes 0-{MAX_BOX}   due"
    lines = [header]
    for topic in TOPICS:
        qs = [q for q in bank if q.topic == topic]
        if not qs:
            continue
        latest = [store.history(q.id)[-1][1] for q in qs if store.history(q.id)]
        boxes = [sum(store.box(q.id) == b for q in qs) for b in range(MAX_BOX + 1)]
        due = sum((d := store.due(q.id)) is None or d <= now for q in qs)
        mean = f"{sum(latest) / len(latest):.2f} / 2" if latest else "-"
        lines.append(f"{topic:<26}{len(qs):>10}{len(latest):>8}{mean:>13}   "
                     f"{' '.join(f'{n:2d}' for n in boxes)}   {due:3d}")
    weak = [q for q in bank if store.history(q.id) and store.history(q.id)[-1][1] < 2]
    weakest = sorted(weak, key=lambda q: (store.history(q.id)[-1][1], store.box(q.id), q.id))[:3]
    unseen = sum(not store.history(q.id) for q in bank)
    lines.append("weakest: " + (", ".join(f"{q.id} (box {store.box(q.id)}, last {store.history(q.id)[-1][1]})"
                                          for q in weakest) or "none scored below 2")
                 + f"; never answered: {unseen} of {len(bank)}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Terminal loop


def wrap(text: str, indent: str = "  ") -> str:
    """Paragraph text re-flowed to 100 columns (the bank's line breaks are for the TOML file only)."""
    return textwrap.fill(" ".join(text.split()), 100, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False)


FOLLOW_UPS_HEADING = "Follow-ups an interviewer asks next (answer them too):"


def follow_ups(q: Question, bank: list[Question] = ()) -> list[str]:
    """The card's follow-up questions; one that is another card's question in `bank` names that card, where its
    answer is."""
    cards = {" ".join(c.question.split()): c.id for c in bank}
    return [f + (f" (card {cards[f]})" if f in cards else "") for f in q.follow_ups]


def model_answer(q: Question, bank: list[Question] = ()) -> list[str]:
    """The model answer as the drill shows it: the one-liner, the rest, the section that backs it and the
    numbered follow-up questions to answer next (aloud, before scoring)."""
    return [f"One-liner: {q.short}", q.answer, f"Backed by {backed_by(q)}.", FOLLOW_UPS_HEADING,
            *(f"{i}. {f}" for i, f in enumerate(follow_ups(q, bank), 1))]


def timing(seconds: float, budget: float, what: str) -> str:
    """`  12 s` or `  20 s, over the 15 s budget for the one-line answer`."""
    return f"  {seconds:.0f} s" + (f", over the {budget:.0f} s budget{what}" if seconds > budget else "")


def run(bank: list[Question], store: ScoreStore, rng: random.Random, stdin=None, stdout=None,
        clock: Callable[[], float] = time.monotonic, budget: float = BUDGET_SECONDS, limit: int | None = None,
        weakest: bool = False, now: Callable[[], dt.datetime] = history.now_utc,
        one_liner: float = ONE_LINER_SECONDS, session: Session | None = None, on_answer=None) -> int:
    """Ask questions until `q`, end of input (EOF), Ctrl-C, `limit` questions or nothing due; returns how
    many were scored. Per card: Enter after the one-line answer, Enter after the full answer (each prints
    the seconds since the question, with a warning past its budget), then the model answer and a score.

    Streams and the clocks are injectable, so tests drive it without a terminal. `on_answer(q, score,
    seconds)` is called after each card, scored or skipped (score None); when it returns True the drill
    stops (make interview stops at its time limit)."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    session = session or Session(bank, store, rng, weakest=weakest, now=now)

    def say(text: str = "") -> None:
        print(text, file=stdout, flush=True)

    def ask(prompt: str) -> str | None:
        print(prompt, end="", file=stdout, flush=True)
        line = stdin.readline()
        return None if line == "" else line.strip()  # "" only at EOF; an empty answer is "\n"

    scored, asked = 0, 0
    say(f"Discussion drill: {len(bank)} questions. Say the one-line answer (about {one_liner:.0f} s), Enter; "
        f"then the full answer (about {budget:.0f} s), Enter; then compare with the model answer.")
    say("Type q (then Enter) to stop; Ctrl-D or Ctrl-C stop too. Your answers are saved as you score them.")
    try:
        while limit is None or asked < limit:
            q = session.next()
            if q is None:
                say()
                say(session.nothing_due())
                break
            asked += 1
            say()
            say(f"[{q.topic} | box {store.box(q.id)} | {q.id}]")
            say(wrap(q.question))
            start = clock()
            line = ask(f"  (timer running: the one-line answer, about {one_liner:.0f} s, then Enter) ")
            if line is None or line.lower() == "q":
                break
            first = clock() - start
            say(timing(first, one_liner, " for the one-line answer"))
            line = ask(f"  (the full answer, about {budget:.0f} s in all, then Enter) ")
            if line is None or line.lower() == "q":
                break
            seconds = clock() - start
            say(timing(seconds, budget, ""))
            short, rest, backed, heading, *follow_ups = model_answer(q, bank)
            say(wrap(short))
            say(wrap(rest))
            say(f"  {backed}")
            say(f"  {heading}")
            for line in follow_ups:
                say(wrap(line, "    "))
            while True:
                line = ask("  Score yourself: 0 (did not know it), 1 (partly), 2 (knew it); Enter skips, q stops: ")
                if line is None or line.lower() == "q":
                    return _finish(say, scored)
                if line == "" or line in ("0", "1", "2"):
                    break
                say("  please type 0, 1 or 2")
            score = int(line) if line else None
            session.answered(q, score)
            if score is not None:
                box = store.record(q.id, score, seconds, first_seconds=first)
                scored += 1
                again = " (it comes back in a few cards)" if score == 0 else ""
                say(f"  saved: {SCORE_MEANING[score]}, now in box {box}{again}")
            if on_answer is not None and on_answer(q, score, seconds):
                break
    except KeyboardInterrupt:
        say()
    return _finish(say, scored)


def _finish(say, scored: int) -> int:
    say(f"Stopped: {scored} answer{'s' * (scored != 1)} scored this session. `make drill REPORT=1` shows your scores.")
    return scored
