"""The practice history: one append-only log of everything practised, and `make progress`.

    record(kind, **fields)   append one event: {"t": UTC time, "kind": kind, **fields}, one JSON line
    read()                   every event of the log, oldest first
    progress(events)         the text of `make progress`

The log is practice/history.jsonl (git-ignored; the folder is PRACTICE). Kinds and their fields:
    round     round, bugs (how many were drawn; never which), file, interview (bool)
    grade     round, file, bugs, fixed (ids of the fixed bugs only), regressions, code
    hint      round, file, level, hints (how many bugs were hinted; never which)
    drill     card, topic, hash (of the answer text), score (0/1/2), seconds, first_seconds (the one-liner)
    writeup   round, file (the saved write-up)
    interview round, phase ("questions" or "done"), reason
Each event is written with one os.write on a file opened O_APPEND, under an exclusive flock, so the terminal
drill, the notebook card and `make grade` never lose or split each other's lines; a line torn by a crash is
skipped on reading, and the next writer starts a fresh line after it.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRACTICE = Path(os.environ.get("GRPO_PRACTICE_DIR") or ROOT / "practice")
"""the learner's folder: rounds, scratch files and this log (git-ignored); GRPO_PRACTICE_DIR moves it (the
browser test points it at a temporary folder)"""
LOG_PATH = PRACTICE / "history.jsonl"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def stamp(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime(TIME_FORMAT)


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, TIME_FORMAT).replace(tzinfo=dt.UTC)


def record(kind: str, *, path: Path | str | None = None, when: dt.datetime | None = None, **fields) -> dict:
    """Append one event to the log (default practice/history.jsonl) and return it."""
    event = {"t": stamp(when or now_utc()), "kind": kind, **fields}
    line = (json.dumps(event, sort_keys=False) + "\n").encode()
    target = Path(path) if path is not None else LOG_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # writers take turns: another's write cannot land between check and write
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # after a line torn by a crash: start a fresh line
        os.write(fd, line)  # one write on an O_APPEND file: lines of concurrent writers never interleave
    finally:
        os.close(fd)  # closing releases the lock
    return event


def read(path: Path | str | None = None) -> list[dict]:
    """Every event of the log, oldest first ([] when there is no log). Lines that are not a JSON object
    with a time and a kind (a line torn by a crash) are skipped."""
    target = Path(path) if path is not None else LOG_PATH
    try:
        text = target.read_text()
    except FileNotFoundError:
        return []
    events = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
            parse_time(event["t"])
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(event, dict) and isinstance(event.get("kind"), str):
            events.append(event)
    return events


def safe_record(kind: str, **fields) -> None:
    """record() for the commands: a log that cannot be written never stops a grade or a hint."""
    try:
        record(kind, **fields)
    except OSError:
        pass


# ----------------------------------------------------------------------------------------------
# What the log says: rounds and drill answers


def minutes(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def rounds_summary(events: list[dict]) -> list[dict]:
    """Per round drawn: its number, start, bug count, minutes to each fix, hints by level, grades and wrong
    attempts (grades that fixed nothing new), in the order the rounds were drawn."""
    rounds: dict[str, dict] = {}
    for e in events:
        key = e.get("file")
        if e["kind"] == "round" and key:
            rounds[key] = dict(round=e.get("round"), file=key, start=parse_time(e["t"]), bugs=e.get("bugs", 0),
                               interview=bool(e.get("interview")), fix_seconds={}, hints=defaultdict(int),
                               grades=0, wrong=0, writeup=None)
            continue
        r = rounds.get(key)
        if r is None:
            continue
        seconds = (parse_time(e["t"]) - r["start"]).total_seconds()
        if e["kind"] == "grade":
            r["grades"] += 1
            new = [b for b in e.get("fixed", []) if b not in r["fix_seconds"]]
            for b in new:
                r["fix_seconds"][b] = seconds
            if not new:
                r["wrong"] += 1
        elif e["kind"] == "hint":
            r["hints"][int(e.get("level", 1))] += int(e.get("hints", 1))
        elif e["kind"] == "writeup":
            r["writeup"] = e.get("writeup")
    return list(rounds.values())


def drill_by_topic_and_day(events: list[dict]) -> dict[str, dict[str, list[int]]]:
    """{topic: {YYYY-MM-DD: [scores]}} of the drill answers."""
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e["kind"] == "drill" and e.get("score") in (0, 1, 2):
            out[e.get("topic", "?")][e["t"][:10]].append(e["score"])
    return out


def progress(events: list[dict]) -> str:
    """The text of `make progress`."""
    if not events:
        return "No practice recorded yet: `make mock`, `make interview` or `make drill` start the log."
    lines = []
    summary = rounds_summary(events)
    if summary:
        lines.append("Rounds (minutes:seconds from the draw to the grade that first showed each fix):")
        for r in summary:
            fixes = ", ".join(f"{b} {minutes(s)}" for b, s in sorted(r["fix_seconds"].items(), key=lambda x: x[1]))
            hints = ", ".join(f"L{level} x{n}" for level, n in sorted(r["hints"].items())) or "none"
            lines.append(f"  round {r['round']} ({'interview, ' if r['interview'] else ''}drawn "
                         f"{r['start']:%Y-%m-%d %H:%M} UTC): {len(r['fix_seconds'])} of {r['bugs']} fixed"
                         f"{' (' + fixes + ')' if fixes else ''}; {r['grades']} grades, {r['wrong']} wrong "
                         f"attempt{'s' * (r['wrong'] != 1)}; hints: {hints}")
    by_topic = drill_by_topic_and_day(events)
    if by_topic:
        lines.append("Drill: mean score per topic and day (0-2, answers in brackets):")
        for topic in sorted(by_topic):
            days = by_topic[topic]
            shown = "  ".join(f"{day} {statistics.mean(s):.2f} ({len(s)})" for day, s in sorted(days.items()))
            lines.append(f"  {topic:<26}{shown}")
        seconds = defaultdict(list)
        for e in events:
            if e["kind"] == "drill" and isinstance(e.get("seconds"), (int, float)):
                seconds[e.get("topic", "?")].append(e["seconds"])
        if seconds:
            lines.append("Drill: seconds per answer (median, slowest; the budget is 90 s):")
            for topic in sorted(seconds):
                s = seconds[topic]
                lines.append(f"  {topic:<26}{statistics.median(s):6.0f}{max(s):8.0f}   ({len(s)} timed)")
    return "\n".join(lines) if lines else "No rounds or drill answers in the log yet."


# ----------------------------------------------------------------------------------------------
# The plots of notebook 00


EXAMPLE_START = dt.datetime(2026, 1, 5, 18, 0, tzinfo=dt.UTC)


def example_events() -> list[dict]:
    """A small made-up log (three rounds over a week, drill answers on four days), for notebook 00 when
    practice/ has no history yet."""
    events = []

    def add(kind, when, **fields):
        events.append({"t": stamp(when), "kind": kind, **fields})

    fixes = [(("B4", 21), ("B9", 34), ("B2", 41)), (("B6", 14), ("B1", 23), ("B8", 30)),
             (("B5", 9), ("B3", 17), ("B7", 26))]
    for n, bugs in enumerate(fixes, start=1):
        start, file = EXAMPLE_START + dt.timedelta(days=3 * (n - 1)), f"practice/round_{n}.py"
        add("round", start, round=n, bugs=3, file=file, interview=False)
        add("hint", start + dt.timedelta(minutes=18), round=n, file=file, level=1, hints=3)
        fixed = []
        for b, minute in bugs:
            fixed.append(b)
            add("grade", start + dt.timedelta(minutes=minute), round=n, file=file, bugs=3, fixed=list(fixed),
                regressions=0, code=0 if len(fixed) == 3 else 1)
    scores = {"ratio clipping": (0, 1, 2, 2), "KL vs clipping": (0, 0, 1, 2), "on/off-policy": (1, 1, 2, 2)}
    for topic, per_day in scores.items():
        for day, score in enumerate(per_day):
            for k in range(2):
                add("drill", EXAMPLE_START + dt.timedelta(days=2 * day, minutes=60 + k), card=f"{topic}-{k}",
                    topic=topic, hash="example", score=max(0, score - k), seconds=40.0 + 10 * k)
    return sorted(events, key=lambda e: e["t"])


def plot_progress(events: list[dict], title: str = ""):
    """Two panels: minutes to each fix per round, and the drill's mean score per topic and day."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    summary = rounds_summary(events)
    for i, r in enumerate(summary):
        times = sorted(r["fix_seconds"].values())
        left.plot([i + 1] * len(times), [t / 60 for t in times], "o", color="C0")
        if times:
            left.plot([i + 1], [times[-1] / 60], "s", color="C3", label="last fix" if i == 0 else None)
    left.set_xticks(range(1, len(summary) + 1), [str(r["round"]) for r in summary])
    left.set(xlabel="round (in the order drawn)", ylabel="minutes from the draw", title="time to each fix")
    left.axhline(45, color="grey", linestyle=":", label="45 min")
    left.legend(loc="upper right", fontsize=8)
    by_topic = drill_by_topic_and_day(events)
    for topic in sorted(by_topic):
        days = sorted(by_topic[topic])
        right.plot(days, [statistics.mean(by_topic[topic][d]) for d in days], "o-", label=topic)
    right.set(ylim=(-0.1, 2.1), ylabel="mean self-score (0-2)", title="drill score per topic")
    right.tick_params(axis="x", labelrotation=30, labelsize=8)
    if by_topic:
        right.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
