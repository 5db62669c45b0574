"""`make interview`: the whole round as candidates report it, 45 minutes of debugging, then 15 of questions.

    make interview   (1st run)  draws a 3-bug round (as `make mock`) and starts a 45-minute countdown;
                                `make grade` and `make hint` show the minutes left, with a warning at 30
                                and at 40 minutes
                     (again)    once the last `make grade` found every bug fixed, or the 45 minutes are up:
                                about 15 minutes of questions, first the drill cards of the round's bugs
                                (each catalog Bug names its `cards`), then general ones; then a short
                                write-up per bug, saved as practice/round_N.writeup.md
                     (before)   the minutes left and how many bugs the last grade found fixed

No background process: the countdown is the `round` event of the practice log (interview/history.py),
whose time is when the round was drawn, and the last `grade` event of that file says what is fixed.
Streams and clocks are injectable, so tests drive it without a terminal.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from interview import drill, history, rounds
from workbook import catalog

BUGS = rounds.DEFAULT_BUGS
INTERVIEW_MINUTES = rounds.ROUND_MINUTES  # 45
QUESTION_MINUTES = 15
WARN_MINUTES = (30, 40)
GENERAL_CARDS = ("ratio-not-one", "no-exp", "when-clip-engages", "not-strictly-on-policy", "kl-vs-clip",
                 "why-no-critic", "grpo-over-ppo", "four-stabilisers", "invariants")
"""after the round's own cards: the sequence candidates report (ratio != 1, no exp, clipping, on/off-policy,
KL vs clip, group baseline, GRPO vs PPO), then the stabilisers and the assertions"""


def log_path() -> Path:
    return rounds.PRACTICE / "history.jsonl"


def in_practice(file: str | Path | None) -> bool:
    """Only the learner's own files under practice/ go to the log (tests grade files elsewhere)."""
    if file is None:
        return False
    path = Path(file)
    path = path if path.is_absolute() else rounds.ROOT / path
    return path.resolve().is_relative_to(rounds.PRACTICE.resolve())


def note(kind: str, file: str | Path | None, **fields) -> None:
    """Append an event about a file of practice/ to the log; never fails a command."""
    if in_practice(file):
        try:
            history.record(kind, path=log_path(), file=rounds.rel(Path(file)), **fields)
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------
# The countdown, from the log


def active_interview(events: list[dict]) -> dict | None:
    """The newest interview round not yet done (its `round` event), or None."""
    done = {e.get("file") for e in events if e["kind"] == "interview" and e.get("phase") == "done"}
    started = [e for e in events if e["kind"] == "round" and e.get("interview") and e.get("file") not in done]
    return started[-1] if started else None


def elapsed_minutes(start: dict, now: dt.datetime) -> float:
    return (now - history.parse_time(start["t"])).total_seconds() / 60


def last_fixed(events: list[dict], file: str) -> list[str]:
    grades = [e for e in events if e["kind"] == "grade" and e.get("file") == file]
    return list(grades[-1].get("fixed", [])) if grades else []


def countdown(file: str | Path, now: dt.datetime | None = None, events: list[dict] | None = None) -> str | None:
    """The countdown line `make grade` and `make hint` print for an interview round, else None."""
    if not in_practice(file):
        return None
    events = history.read(log_path()) if events is None else events
    start = active_interview(events)
    if start is None or start.get("file") != rounds.rel(Path(file)):
        return None
    minutes = elapsed_minutes(start, now or history.now_utc())
    if len(last_fixed(events, start["file"])) >= int(start.get("bugs", BUGS)):
        return (f"interview: every bug fixed after {int(minutes)} minutes: run `make interview` for the "
                f"{QUESTION_MINUTES} minutes of questions")
    if minutes >= INTERVIEW_MINUTES:
        return (f"interview: time is up ({INTERVIEW_MINUTES} minutes): run `make interview` for the "
                f"{QUESTION_MINUTES} minutes of questions")
    line = f"interview: {int(minutes)} min elapsed, {int(INTERVIEW_MINUTES - minutes)} min left"
    if minutes >= WARN_MINUTES[1]:
        line += (f" - warning: {WARN_MINUTES[1]} minutes gone; fix what you can, and be ready to say what you "
                 f"would check next")
    elif minutes >= WARN_MINUTES[0]:
        line += f" - warning: {WARN_MINUTES[0]} minutes gone; move on from a bug you are stuck on"
    return line


def drawn(path: Path, interview: bool = False) -> None:
    """For cli.py's mock: log the round drawn (its number and bug count, never which bugs)."""
    info = rounds.parse_header(path.read_text())
    if info is not None:
        note("round", path, round=info.number, bugs=info.bugs, interview=interview)


def graded(job, status: dict | None, code: int, regressions: list | None) -> None:
    """For cli.py's grade: log the grade (the fixed bugs only, and how many were drawn)."""
    if status is not None:
        note("grade", job.path, round=job.round.number if job.round else None, bugs=len(job.bugs),
             fixed=[b for b, ok in status.items() if ok], regressions=len(regressions or []), code=code)


def hinted(job, level: int, code: int, lines: list[str], out=None) -> None:
    """For cli.py's hint: log it (its level, how many bugs were hinted, never which) and show the countdown."""
    if code == 0:
        hints = sum(1 for line in lines if line.startswith("hint ") and f"(level {level})" in line)
        note("hint", job.path, round=job.round.number if job.round else None, level=level, hints=hints)
    print_countdown(job.path, out)


def print_countdown(file: str | Path | None, out=None) -> None:
    """For cli.py's grade and hint: the countdown line, when the file is an interview round."""
    try:
        line = countdown(file)
    except OSError:
        return
    if line:
        print(line, file=out or sys.stdout)


# ----------------------------------------------------------------------------------------------
# The questions


class CardSequence:
    """A fixed order of cards for drill.run (the Session interface): no schedule, no repeats."""

    def __init__(self, cards: list[drill.Question]):
        self.cards, self.i = cards, 0

    def next(self) -> drill.Question | None:
        self.i += 1
        return self.cards[self.i - 1] if self.i <= len(self.cards) else None

    def answered(self, q, score) -> None:
        pass

    def nothing_due(self) -> str:
        return "That was the last question."


def question_cards(bug_ids: list[str], bank: list[drill.Question]) -> list[drill.Question]:
    """The round's bugs' cards (catalog order, each once), then the general ones."""
    by_id = {q.id: q for q in bank}
    ids = [c for b in bug_ids for c in catalog.bug(b).cards] + list(GENERAL_CARDS)
    return [by_id[c] for c in dict.fromkeys(ids) if c in by_id]


WRITEUP_PROMPTS = ("which log or tiny input found it?", "which assertion would have caught it earlier?")


def writeup(bug_ids: list[str], fixed: list[str], ask: Callable[[str], str | None]) -> str:
    """The write-up's Markdown: per bug, the two answers the candidate types."""
    lines = ["# Write-up", ""]
    for b in bug_ids:
        entry = catalog.bug(b)
        lines.append(f"## {b}: {entry.title} ({entry.function}){'' if b in fixed else ' - not fixed'}")
        for prompt in WRITEUP_PROMPTS:
            answer = ask(f"  {b}, {prompt} ")
            lines.append(f"- {prompt[0].upper()}{prompt[1:]} {answer or '(no answer)'}")
        lines.append("")
    return "\n".join(lines)


def questions_phase(start: dict, events: list[dict], stdin, stdout, clock: Callable[[], float],
                    now: Callable[[], dt.datetime], rng: random.Random, reason: str) -> int:
    file = start["file"]
    path = Path(file) if Path(file).is_absolute() else rounds.ROOT / file
    try:
        info = rounds.parse_header(path.read_text())
    except OSError:
        info = None
    fixed = last_fixed(events, file)
    bug_ids = info.drawn if info is not None else fixed

    def say(text=""):
        print(text, file=stdout, flush=True)

    history.record("interview", path=log_path(), when=now(), file=file, round=start.get("round"),
                   phase="questions", reason=reason)
    say(f"Round {start.get('round')}: {reason}. Now about {QUESTION_MINUTES} minutes of questions, first on the "
        f"bugs of this round ({', '.join(bug_ids)}), then general ones.")
    bank = drill.load_bank()
    store = drill.ScoreStore(log_path(), bank)
    began = clock()

    def over_time(q, score, seconds) -> bool:
        return clock() - began >= QUESTION_MINUTES * 60

    cards = question_cards(bug_ids, bank)
    drill.run(cards, store, rng, stdin=stdin, stdout=stdout, clock=clock, now=now, session=CardSequence(cards),
              on_answer=over_time)
    say()
    say("The write-up: for each bug, one line each (Enter when done).")

    def ask(prompt: str) -> str | None:
        print(prompt, end="", file=stdout, flush=True)
        line = stdin.readline()
        return line.strip() if line else None

    text = writeup(bug_ids, fixed, ask)
    target = path.with_name(path.stem + ".writeup.md")
    target.write_text(f"Round {start.get('round')} ({file}), {len(fixed)} of {len(bug_ids)} fixed.\n\n" + text)
    history.record("writeup", path=log_path(), when=now(), file=file, round=start.get("round"),
                   writeup=rounds.rel(target))
    history.record("interview", path=log_path(), when=now(), file=file, round=start.get("round"), phase="done")
    say(f"Saved {rounds.rel(target)}. `make progress` shows this round beside the others.")
    return 0


def interview(stdin=None, stdout=None, clock: Callable[[], float] = time.monotonic,
              now: Callable[[], dt.datetime] = history.now_utc, rng: random.Random | None = None,
              hard: bool = False) -> int:
    """`make interview`: start a round, report its countdown, or run its questions and write-up."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    events = history.read(log_path())
    start = active_interview(events)
    if start is None:
        when = now()
        with contextlib.redirect_stdout(stdout):
            path = rounds.mock(None, str(BUGS), hard, now=when)
        number = rounds.parse_header(path.read_text()).number
        history.record("round", path=log_path(), when=when, round=number, bugs=BUGS, file=rounds.rel(path),
                       interview=True)
        print(f"Interview mode: the {INTERVIEW_MINUTES}-minute countdown started at {when:%H:%M} UTC. "
              f"`make grade` and `make hint` show the minutes left. Once `make grade` finds every bug fixed, or "
              f"after {INTERVIEW_MINUTES} minutes, run `make interview` again: {QUESTION_MINUTES} minutes of "
              f"questions, then a short write-up.", file=stdout)
        return 0
    minutes = elapsed_minutes(start, now())
    fixed = last_fixed(events, start["file"])
    if len(fixed) >= int(start.get("bugs", BUGS)):
        reason = f"every bug fixed after {int(minutes)} minutes"
    elif minutes >= INTERVIEW_MINUTES:
        reason = f"time is up, {len(fixed)} of {start.get('bugs', BUGS)} fixed"
    else:
        print(f"Round {start.get('round')} ({start['file']}): {countdown(start['file'], now(), events)}; the last "
              f"`make grade` found {len(fixed)} of {start.get('bugs', BUGS)} fixed. Fix, `make grade`, then "
              f"`make interview` again.", file=stdout)
        return 0
    return questions_phase(start, events, stdin, stdout, clock, now, rng or random.Random(), reason)
