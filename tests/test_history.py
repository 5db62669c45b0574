"""The practice log (interview/history.py) and `make progress`: append-only JSON lines with UTC times,
concurrent writers never lose a line, a torn line is skipped, and the progress report says per round the
time to each fix, the hints and their levels and the wrong attempts, and per topic the drill score over
days and the seconds per answer. The log goes to tmp_path only: nothing touches practice/.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import multiprocessing

import matplotlib

matplotlib.use("Agg")

from interview import history, interview_mode, rounds  # noqa: E402

T0 = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def test_record_appends_one_json_line_with_a_utc_time(tmp_path):
    path = tmp_path / "practice" / "history.jsonl"
    cest = dt.timezone(dt.timedelta(hours=2))
    event = history.record("hint", path=path, when=dt.datetime(2026, 3, 2, 10, 0, tzinfo=cest), level=2, hints=1)
    history.record("drill", path=path, card="x", score=1)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == event
    assert event == {"t": "2026-03-02T08:00:00Z", "kind": "hint", "level": 2, "hints": 1}
    assert [e["kind"] for e in history.read(path)] == ["hint", "drill"]
    assert history.read(tmp_path / "none.jsonl") == []


def test_a_torn_line_is_skipped(tmp_path):
    path = tmp_path / "history.jsonl"
    history.record("round", path=path, when=T0, round=1, bugs=3, file="r.py")
    with open(path, "a") as f:
        f.write('{"t": "2026-03-02T09:01:00Z", "kind": "gr')  # a crash in the middle of a write
    history.record("grade", path=path, when=at(2), file="r.py", fixed=[])
    assert [e["kind"] for e in history.read(path)] == ["round", "grade"]


def _writer(path, tag, n):
    for i in range(n):
        history.record("drill", path=path, card=f"{tag}-{i}", score=2, padding="x" * 500)


def test_concurrent_writers_never_lose_a_line(tmp_path):
    path = tmp_path / "history.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, tag, 200)) for tag in ("a", "b", "c")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    events = history.read(path)
    assert len(events) == 600 and len(path.read_text().splitlines()) == 600
    assert {e["card"] for e in events} == {f"{t}-{i}" for t in "abc" for i in range(200)}


def example_round(path):
    file = "practice/round_4.py"
    history.record("round", path=path, when=T0, round=4, bugs=3, file=file, interview=True)
    history.record("grade", path=path, when=at(10), file=file, bugs=3, fixed=[], regressions=0, code=1)
    history.record("hint", path=path, when=at(12), file=file, level=1, hints=3)
    history.record("grade", path=path, when=at(20.5), file=file, bugs=3, fixed=["B4"], regressions=0, code=1)
    history.record("hint", path=path, when=at(25), file=file, level=3, hints=2)
    history.record("grade", path=path, when=at(26), file=file, bugs=3, fixed=["B4"], regressions=1, code=1)
    history.record("grade", path=path, when=at(31), file=file, bugs=3, fixed=["B4", "B9", "B2"], regressions=0,
                   code=0)
    history.record("grade", path=path, when=at(40), file="practice/other.py", fixed=["B1"])  # no round: ignored


def test_rounds_summary_times_hints_and_wrong_attempts(tmp_path):
    path = tmp_path / "h.jsonl"
    example_round(path)
    [r] = history.rounds_summary(history.read(path))
    assert r["round"] == 4 and r["interview"] and r["bugs"] == 3
    assert r["fix_seconds"] == {"B4": 20.5 * 60, "B9": 31 * 60, "B2": 31 * 60}
    assert dict(r["hints"]) == {1: 3, 3: 2}
    assert (r["grades"], r["wrong"]) == (4, 2)  # the first grade and the one at 26 min fixed nothing new


def test_progress_prints_rounds_and_drill_per_topic_and_day(tmp_path):
    path = tmp_path / "h.jsonl"
    example_round(path)
    for day, scores in ((0, (0, 1)), (1, (2, 2))):
        for k, s in enumerate(scores):
            history.record("drill", path=path, when=T0 + dt.timedelta(days=day, minutes=k), card=f"c{k}",
                           topic="ratio clipping", score=s, seconds=30.0 + 20 * k)
    text = history.progress(history.read(path))
    assert ("  round 4 (interview, drawn 2026-03-02 09:00 UTC): 3 of 3 fixed (B4 20:30, B9 31:00, B2 31:00); "
            "4 grades, 2 wrong attempts; hints: L1 x3, L3 x2") in text
    assert "  ratio clipping            2026-03-02 0.50 (2)  2026-03-03 2.00 (2)" in text
    assert "  ratio clipping                40      50   (4 timed)" in text
    assert history.progress([]).startswith("No practice recorded yet")


def test_make_progress_reads_the_practice_log(tmp_path, monkeypatch):
    from interview import cli

    monkeypatch.setattr(rounds, "PRACTICE", tmp_path)
    example_round(interview_mode.log_path())
    out = io.StringIO()
    assert cli.main(["progress"], stdout=out) == 0
    assert "round 4 (interview" in out.getvalue()


def test_cli_logs_only_files_of_practice(tmp_path, monkeypatch):
    monkeypatch.setattr(rounds, "PRACTICE", tmp_path / "practice")
    (tmp_path / "practice").mkdir()
    interview_mode.note("grade", tmp_path / "elsewhere.py", fixed=[])
    assert not interview_mode.log_path().exists()
    interview_mode.note("grade", tmp_path / "practice" / "round_1.py", fixed=["B1"])
    [event] = history.read(interview_mode.log_path())
    assert event["kind"] == "grade" and event["fixed"] == ["B1"] and event["file"].endswith("round_1.py")


def test_the_example_log_and_its_plot():
    events = history.example_events()
    assert events == history.example_events() and [e["t"] for e in events] == sorted(e["t"] for e in events)
    summary = history.rounds_summary(events)
    assert [len(r["fix_seconds"]) for r in summary] == [3, 3, 3]
    fig = history.plot_progress(events, "example")
    left, right = fig.axes
    assert len(right.get_lines()) == 3 and left.get_title() == "time to each fix"
