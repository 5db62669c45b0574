"""`make interview` (interview/interview_mode.py): a 3-bug round with a 45-minute countdown kept in the
practice log (no background process), shown by grade and hint with warnings at 30 and 40 minutes; once the
round is graded all-fixed or the time is up, the round's bugs' drill cards, then general ones, for about
15 minutes, then a write-up saved beside the round. Driven on injected streams and clocks; practice/ is a
tmp_path.
"""

from __future__ import annotations

import datetime as dt
import io
import random
from types import SimpleNamespace

import pytest

from interview import drill, history, interview_mode, rounds
from workbook import catalog

T0 = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)
BANK = drill.load_bank()


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


class Clock:
    """A fake monotonic clock advancing `step` seconds per call."""

    def __init__(self, step: float):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


@pytest.fixture
def practice(tmp_path, monkeypatch):
    monkeypatch.setattr(rounds, "PRACTICE", tmp_path / "practice")
    return tmp_path / "practice"


def start(practice, minutes=0.0):
    out = io.StringIO()
    assert interview_mode.interview(io.StringIO(""), out, now=lambda: at(minutes)) == 0
    return out.getvalue()


def test_every_bug_names_one_to_three_real_cards():
    ids = {q.id for q in BANK}
    for bug in catalog.BUGS:
        assert 1 <= len(bug.cards) <= 3 and len(set(bug.cards)) == len(bug.cards), bug.id
        assert set(bug.cards) <= ids, (bug.id, set(bug.cards) - ids)
    assert set(interview_mode.GENERAL_CARDS) <= ids


def test_the_first_run_draws_a_round_and_starts_the_countdown(practice):
    text = start(practice)
    path = practice / "round_1.py"
    assert rounds.parse_header(path.read_text()).bugs == 3
    assert "45-minute countdown started at 09:00 UTC" in text and "make grade" in text
    [event] = history.read(interview_mode.log_path())
    assert event["kind"] == "round" and event["interview"] and event["bugs"] == 3
    assert event["t"] == "2026-03-02T09:00:00Z"
    assert set(event) == {"t", "kind", "file", "round", "bugs", "interview"}  # never which bugs


@pytest.mark.parametrize("minutes, expected", [
    (10, "interview: 10 min elapsed, 35 min left"),
    (31, "interview: 31 min elapsed, 14 min left - warning: 30 minutes gone; move on from a bug you are stuck on"),
    (41.5, "interview: 41 min elapsed, 3 min left - warning: 40 minutes gone; fix what you can, and be ready "
           "to say what you would check next"),
    (46, "interview: time is up (45 minutes): run `make interview` for the 15 minutes of questions"),
])
def test_countdown_shown_by_grade_and_hint(practice, minutes, expected):
    start(practice)
    assert interview_mode.countdown(practice / "round_1.py", now=at(minutes)) == expected
    assert interview_mode.countdown(practice / "round_2.py", now=at(minutes)) is None  # not the interview's round


def test_grade_and_hint_log_their_events_and_show_the_countdown(practice):
    # started 4.5 min ago: the log keeps whole seconds, so the half minute keeps both counts off a rounding edge
    assert interview_mode.interview(io.StringIO(""), io.StringIO(),
                                    now=lambda: history.now_utc() - dt.timedelta(minutes=4, seconds=30)) == 0
    path = practice / "round_1.py"
    job = SimpleNamespace(path=path, round=rounds.parse_header(path.read_text()), bugs=["B1", "B4", "B9"])
    interview_mode.graded(job, {"B1": True, "B4": False, "B9": False}, 1, ["one regression"])
    out = io.StringIO()
    lines = ["hint 1 of 2 (level 2): look at grpo_loss().", "hint 2 of 2 (level 2): ...", "B4 (level 2): old label"]
    interview_mode.hinted(job, 2, 0, lines, out)  # only `hint i of n` lines count
    grade, hint = history.read(interview_mode.log_path())[1:]
    assert (grade["kind"], grade["fixed"], grade["bugs"], grade["regressions"]) == ("grade", ["B1"], 3, 1)
    assert (hint["kind"], hint["level"], hint["hints"]) == ("hint", 2, 2) and "B4" not in str(hint)
    assert out.getvalue().startswith("interview: 4 min elapsed, 40 min left")
    interview_mode.graded(job, {"B1": True, "B4": True, "B9": True}, 0, [])
    assert "every bug fixed" in interview_mode.countdown(path)


def test_before_the_end_it_only_reports(practice):
    start(practice)
    out = io.StringIO()
    assert interview_mode.interview(io.StringIO(""), out, now=lambda: at(12)) == 0
    assert "12 min elapsed" in out.getvalue() and "0 of 3 fixed" in out.getvalue()
    assert not list(practice.glob("*.writeup.md")) and len(list(practice.glob("round_*.py"))) == 1


def run_questions(practice, minutes, answers):
    out = io.StringIO()
    code = interview_mode.interview(io.StringIO(answers), out, clock=Clock(60.0), now=lambda: at(minutes),
                                    rng=random.Random(0))
    return code, out.getvalue()


def test_all_fixed_then_questions_on_the_round_then_a_writeup(practice):
    start(practice)
    path = practice / "round_1.py"
    drawn = rounds.parse_header(path.read_text()).drawn
    history.record("grade", path=interview_mode.log_path(), when=at(20), file=rounds.rel(path), bugs=3,
                   fixed=drawn[:1])
    history.record("grade", path=interview_mode.log_path(), when=at(33), file=rounds.rel(path), bugs=3,
                   fixed=drawn)
    cards = "\n\n2\n" * 4  # four cards fill the 15 minutes at 60 s per clock tick
    writeup = "".join(f"the logged {b} statistic\nassert on {b}\n" for b in drawn)
    code, text = run_questions(practice, 34, cards + writeup)
    assert code == 0
    assert "every bug fixed after 34 minutes" in text
    asked = [line.split("|")[-1].strip(" ]") for line in text.splitlines() if line.startswith("[")]
    expected = interview_mode.question_cards(drawn, BANK)
    assert asked == [q.id for q in expected[:4]] and asked[0] == catalog.bug(drawn[0]).cards[0]
    saved = (practice / "round_1.writeup.md").read_text()
    for b in drawn:
        assert f"## {b}: {catalog.bug(b).title}" in saved and f"the logged {b} statistic" in saved
        assert f"- Which assertion would have caught it earlier? assert on {b}" in saved
    assert "not fixed" not in saved
    events = history.read(interview_mode.log_path())
    assert [e["kind"] for e in events] == ["round", "grade", "grade", "interview", *["drill"] * 4, "writeup",
                                           "interview"]
    assert [e["phase"] for e in events if e["kind"] == "interview"] == ["questions", "done"]
    assert [e["card"] for e in events if e["kind"] == "drill"] == asked
    assert events[-2]["writeup"].endswith("round_1.writeup.md") and "Saved " in text
    assert interview_mode.active_interview(history.read(interview_mode.log_path())) is None
    start(practice, 60)  # the next run starts a new interview round
    assert (practice / "round_2.py").exists()


def test_time_up_runs_the_questions_and_marks_what_was_not_fixed(practice):
    start(practice)
    drawn = rounds.parse_header((practice / "round_1.py").read_text()).drawn
    code, text = run_questions(practice, 46, "q\n")
    assert code == 0 and "time is up, 0 of 3 fixed" in text
    saved = (practice / "round_1.writeup.md").read_text()
    assert saved.count("not fixed") == 3 and saved.count("(no answer)") == 6
    assert all(f"## {b}:" in saved for b in drawn)


def test_question_cards_put_the_rounds_bugs_first_without_repeats():
    cards = [q.id for q in interview_mode.question_cards(["B3", "B6"], BANK)]
    own = list(dict.fromkeys(catalog.bug("B3").cards + catalog.bug("B6").cards))
    assert cards[: len(own)] == own and len(cards) == len(set(cards))
    assert cards[len(own):] == [c for c in interview_mode.GENERAL_CARDS if c not in own]


def test_make_interview_through_the_cli(practice):
    from interview import cli

    out = io.StringIO()
    assert cli.main(["interview"], stdin=io.StringIO(""), stdout=out) == 0
    assert (practice / "round_1.py").exists() and "countdown started" in out.getvalue()
